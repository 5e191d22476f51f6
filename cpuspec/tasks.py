"""Prompt suites per task type, and the reader for users' prompts files (JSONL).

Each built-in suite has prompts written for this project. How predictable the output is differs
by task (JSON and code repeat structure; a story does not), and speculative decoding's payoff
follows that predictability, so results are always reported per task.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Prompt:
    task: str
    prompt_id: str
    text: str


SUITES: dict[str, list[str]] = {
    "json": [
        "Return a JSON object describing a user with fields id (integer), name, email, "
        "is_active (boolean) and roles (list of strings). Output only the JSON.",
        "Write a JSON array of 5 books, each with title, author, year and isbn. Output only JSON.",
        "Produce a JSON config for a web server: host, port, tls (object with cert and key paths), "
        "routes (list of objects with path and handler). Output only JSON.",
        "Convert this to JSON with keys city, country, population, area_km2: Lyon, France, "
        "522000 people, 47.87 square kilometres. Output only JSON.",
        "Give a JSON object for an order: order_id, customer (name, address), items (list of "
        "sku, quantity, unit_price), total and currency. Output only JSON.",
        "Write a JSON Schema (draft 2020-12) for a product with name (string), price (number > 0)"
        " and tags (array of unique strings). Output only JSON.",
        "Return a JSON list of the 7 days of the week, each an object with name, short_name and "
        "is_weekend. Output only JSON.",
        "Create a package.json for a TypeScript library named tiny-queue with build and test "
        "scripts, a MIT license and typescript and vitest as devDependencies. Output only JSON.",
    ],
    "code": [
        "Write a Python function that checks whether a string is a palindrome, ignoring case and "
        "punctuation, with a docstring.",
        "Write a Python class Stack with push, pop, peek and is_empty methods, raising "
        "IndexError on an empty pop.",
        "Implement binary search in Python over a sorted list, returning the index or -1.",
        "Write a Python function that reads a CSV file and returns the sum of a named column.",
        "Write a C function that reverses a null-terminated string in place.",
        "Write a JavaScript function debounce(fn, ms) that returns a debounced function.",
        "Write a Python function that merges two sorted lists into one sorted list, in linear "
        "time.",
        "Write a SQL query that returns the 10 customers with the highest total order amount "
        "from tables customers(id, name) and orders(id, customer_id, amount).",
    ],
    "story": [
        "Write a short story about a lighthouse keeper who finds a message in a bottle.",
        "Tell a story about a robot learning to paint in an abandoned city.",
        "Write a fairy tale about a fox who wants to become the moon's friend.",
        "Write a short story set on a night train crossing the Alps in winter.",
        "Tell a story about a baker whose bread makes people remember their childhood.",
        "Write a short science-fiction story about the first garden on Mars.",
        "Write a story about two rival chess players stuck in a snowed-in library.",
        "Tell a story about a cat who runs the village post office.",
    ],
    # Input-grounded: the answer mostly copies the prompt. Prompt lookup (no draft model, c ≈ 0)
    # can draft such text, which is where speculation can pay on a CPU.
    "grounded": [
        "Add type hints to this Python function and return the whole function:\n\n"
        "def merge(a, b):\n    result = []\n    i = j = 0\n    while i < len(a) and j < len(b):\n"
        "        if a[i] <= b[j]:\n            result.append(a[i])\n            i += 1\n"
        "        else:\n            result.append(b[j])\n            j += 1\n"
        "    return result + a[i:] + b[j:]",
        "Fix the typo in this JSON and return the corrected JSON only:\n\n"
        '{"name": "cpuspec", "version": "0.1.0", "dependncies": ["numpy", "click", "psutil"], '
        '"license": "MIT", "authors": [{"name": "Ada", "email": "ada@example.com"}]}',
        "Extract the fields name, email and city from this text as JSON:\n\n"
        "Hello, my name is Maria Lopez, I live in Valencia and you can write to me at "
        "maria.lopez@example.org. My colleague Tom Becker (tom@example.com) lives in Bonn.",
        "Rename the variable `x` to `total` in this code and return the whole code:\n\n"
        "def sum_prices(items):\n    x = 0\n    for item in items:\n"
        "        x += item.price * item.quantity\n    return x",
        "Convert this Python dict to YAML:\n\n"
        "{'server': {'host': '0.0.0.0', 'port': 8080, 'workers': 4}, "
        "'database': {'url': 'postgres://db:5432/app', 'pool_size': 10}}",
        "Add a docstring to this function and return the whole function:\n\n"
        "def clamp(value, low, high):\n    if value < low:\n        return low\n"
        "    if value > high:\n        return high\n    return value",
        "Fix the spelling mistakes in this paragraph and return it:\n\n"
        "The quick brwon fox jumps over the lazy dog. It was a sunny day and the fox was "
        "verry happy to be outside, running thorugh the feilds.",
        "Turn this list into a Markdown table with columns Name and Role:\n\n"
        "Alice - Engineer\nBob - Designer\nCarol - Product manager\nDave - Data scientist",
    ],
}


# What `cpuspec bench` runs without --tasks; "grounded" is for the lookup drafter.
DEFAULT_TASKS = ["json", "code", "story"]


class PromptsFileError(ValueError):
    """A prompts file cannot be used; the message names the file and line."""


def builtin_prompts(tasks: list[str], per_task: int | None = None) -> list[Prompt]:
    unknown = [t for t in tasks if t not in SUITES]
    if unknown:
        raise KeyError(f"unknown task {', '.join(unknown)}; built-in tasks: "
                       f"{', '.join(SUITES)}")
    out = []
    for task in tasks:
        texts = SUITES[task][:per_task] if per_task else SUITES[task]
        out += [Prompt(task, f"{task}-{i + 1}", t) for i, t in enumerate(texts)]
    return out


def read_prompts_file(path: Path, per_task: int | None = None) -> list[Prompt]:
    """Read `{"task": "...", "prompt": "..."}` per line; blank lines and `#` comments skipped."""
    path = Path(path)
    try:
        if path.is_dir():
            raise PromptsFileError(f"prompts file {path} is a folder")
        lines = path.read_text(encoding="utf-8-sig").splitlines()  # a BOM is fine
    except UnicodeDecodeError as exc:
        raise PromptsFileError(f"cannot read prompts file {path}: not UTF-8 text (byte "
                               f"{exc.start})") from None
    except OSError as exc:
        raise PromptsFileError(f"cannot read prompts file {path}: {exc.strerror or exc}") \
            from None
    prompts: list[Prompt] = []
    counts: dict[str, int] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise PromptsFileError(f"{path}:{lineno}: not valid JSON ({msg})") from None
        if not isinstance(obj, dict):
            raise PromptsFileError(f"{path}:{lineno}: expected a JSON object")
        task, text = obj.get("task", "user"), obj.get("prompt")
        if not isinstance(text, str) or not text.strip():
            raise PromptsFileError(f"{path}:{lineno}: \"prompt\" must be a non-empty string")
        if not isinstance(task, str) or not task.strip():
            raise PromptsFileError(f"{path}:{lineno}: \"task\" must be a non-empty string")
        counts[task] = counts.get(task, 0) + 1
        if per_task and counts[task] > per_task:
            continue
        prompts.append(Prompt(task, f"{task}-{counts[task]}", text))
    if not prompts:
        raise PromptsFileError(f"{path}: no prompts in file")
    return prompts


def load_prompts(tasks: list[str] | None, prompts_file: Path | None,
                 per_task: int | None = None, default_tasks: list[str] | None = None
                 ) -> list[Prompt]:
    """The built-in suites asked for (the defaults when neither they nor a file are given) and
    the prompts file's lines. Raw and SD runs are paired by prompt id, so two prompts with one
    id (`--tasks json` and a file with "task": "json") are refused rather than mismatched."""
    prompts: list[Prompt] = []
    if tasks or not prompts_file:
        prompts += builtin_prompts(tasks or default_tasks or DEFAULT_TASKS, per_task)
    if prompts_file:
        from_file = read_prompts_file(prompts_file, per_task)
        clash = sorted({p.task for p in from_file} & {p.task for p in prompts})
        if clash:
            raise PromptsFileError(
                f"{prompts_file}: task {clash[0]!r} is also a built-in suite of this run, so "
                f"two prompts would be called {clash[0]}-1; rename the task in the file (e.g. "
                f"\"{clash[0]}-mine\") or leave {clash[0]} out of --tasks")
        prompts += from_file
    return prompts
