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
    # A second turn of the same conversation: `text` is asked first, answered (greedy, by the
    # target, not timed), and then `followup` is what is measured, with the first turn's KV
    # kept as a chat server keeps it. Empty for one-turn prompts.
    followup: str = ""


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
        # 9-16: written for issue 60 (a task the first 8 leave undecided goes on)
        "Return a JSON object for a weather report: station, timestamp (ISO 8601), "
        "temperature_c, humidity_pct, wind (speed_kmh, direction) and alerts (list). Output only "
        "JSON.",
        "Write a JSON array of 4 planets with name, moons (integer), has_rings (boolean) and "
        "distance_au. Output only JSON.",
        "Produce a JSON object describing a GitHub Actions job: name, runs_on, and steps (list "
        "of objects with name and run). Output only JSON.",
        "Give a JSON object for a recipe: title, servings, ingredients (list of name, amount, "
        "unit) and steps (list of strings). Output only JSON.",
        "Return a JSON object mapping three HTTP status codes (200, 404, 500) to objects with "
        "reason and retryable (boolean). Output only JSON.",
        "Write a JSON object for a calendar event: id, title, start, end, attendees (list of "
        "email and response) and location. Output only JSON.",
        "Create a tsconfig.json for a Node 20 project with strict mode, ES2022 target, "
        "outDir dist and rootDir src. Output only JSON.",
        "Return a JSON list of 5 currencies, each an object with code, name, symbol and "
        "decimals. Output only JSON.",
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
        # 9-16: written for issue 60
        "Write a Python function that returns the n-th Fibonacci number iteratively, with a "
        "docstring and a check that n is not negative.",
        "Write a Python function that counts how often each word occurs in a text and returns "
        "the 5 most common, ignoring case.",
        "Write a Go function that reports whether a slice of integers contains a duplicate.",
        "Write a Python dataclass Rectangle with width and height, and methods area and "
        "perimeter.",
        "Write a Rust function that returns the largest element of a slice of i32, or None "
        "when it is empty.",
        "Write a Python generator that yields the lines of a file that contain a given "
        "substring, with their line numbers.",
        "Write a Bash script that prints the 5 largest files in a directory given as its first "
        "argument.",
        "Write a Python function that flattens a nested list of arbitrary depth into one list.",
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
        # 9-16: written for issue 60
        "Write a short story about a clockmaker who builds a clock that runs backwards.",
        "Tell a story about a girl who finds a door in the middle of a wheat field.",
        "Write a short story about the last day of a travelling circus.",
        "Tell a story about an old fisherman and a seagull who argue about the weather.",
        "Write a short story about a translator who hears a language nobody else speaks.",
        "Tell a story about a village where every house has a different colour of smoke.",
        "Write a short story about a mapmaker asked to draw a country that does not exist.",
        "Tell a story about a tortoise who decides to climb a mountain.",
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
        # 9-16: written for issue 60
        "Add type hints to this Python function and return the whole function:\n\n"
        "def mean(values):\n    if not values:\n        raise ValueError('empty')\n"
        "    return sum(values) / len(values)",
        "Fix the missing comma in this JSON and return the corrected JSON only:\n\n"
        '{"id": 42, "title": "Quarterly report" "tags": ["finance", "q3"], "draft": false}',
        "Extract the fields product, price and quantity from this text as JSON:\n\n"
        "I would like to order 3 packs of the blue notebooks at 4.50 euros each, please.",
        "Rename the function `f` to `is_even` in this code and return the whole code:\n\n"
        "def f(n):\n    return n % 2 == 0\n\nevens = [x for x in range(10) if f(x)]",
        "Convert this YAML to JSON:\n\n"
        "service:\n  name: api\n  replicas: 3\n  ports:\n    - 80\n    - 443",
        "Add a docstring to this function and return the whole function:\n\n"
        "def slugify(text):\n    return '-'.join(text.lower().split())",
        "Fix the grammar in this sentence and return it:\n\n"
        "Me and him goes to the market every mornings, but yesterday we doesn't went.",
        "Turn this list into a Markdown table with columns City and Country:\n\n"
        "Lisbon - Portugal\nKraków - Poland\nOsaka - Japan\nQuito - Ecuador",
    ],
}


# Long inputs from real text that nobody on this project wrote, shipped verbatim in
# cpuspec/data/long and pinned by sha256 so every machine runs the same prompts: five modules of
# CPython 3.11.7's standard library (0.8-1.5 k tokens each) and the five parts of the licence
# file CPython ships (LICENSE.txt), both under the PSF License Version 2 (its text is that
# licence file). See cpuspec/data/long/SOURCES.md.
LONG_DIR = Path(__file__).parents[1] / "data" / "long"
LONG_SOURCES = {
    "colorsys.py.txt": "d9800f8e81d46e63ca6f2e7d6ac5f344d85afb92c3cf6d103b5f977f1ad66ac2",
    "bisect.py.txt": "e5b2ff166f48a06e70ae831d8c9b47283fcd0c254306eee12d3dae9c55e11526",
    "nturl2path.py.txt": "980982ba66cc403d17874369d2770e09845b3d49f1d4514e1c52e01518114332",
    "genericpath.py.txt": "9d58ad64056a89f12258a62596c2073cd9e52b459dde152f710edc0cffcd865b",
    "reprlib.py.txt": "264433cc232332db871666b3bb6e4c2cb97b092cb8d5056a45ec2e53daea2b1c",
    "PSF-LICENSE.txt": "3b2f81fe21d181c499c59a256c8e1968455d6689d269aa85373bfb6af41da3bf",
}
MODULES = list(LONG_SOURCES)[:5]
# The licence file's five parts (line ranges, 1-based, inclusive): history; terms and the PSF
# licence; BeOpen; CNRI; CWI and the zero-clause BSD licence.
LICENSE_PARTS = [(1, 58), (59, 122), (123, 172), (173, 243), (244, 10_000)]
LONG_INSTRUCTIONS = {
    # the answer copies the input: where lookup has the most to copy from
    "long-edit": "Add type hints to every function and method in this Python module. Return "
                 "the complete module, otherwise unchanged, and nothing else.\n\n```python\n"
                 "{text}```",
    # the answer names the input's parts and explains them: some copying
    "long-explain": "Explain this Python module: first what it is for, then each function in "
                    "turn, with its parameters and what it returns.\n\n```python\n{text}```",
    # a document: extraction, word for word
    "long-doc": "Copy, word for word, every sentence of the text below that grants a right or "
                "states a condition or an obligation, one per line.\n\n{text}",
}
# Follow-up turns: first the module with a question about it, then an edit of it, which copies
# from the first turn's input (the prompt lookup's material).
FOLLOWUP = {
    "long-followup": ("What is this Python module for? Answer in two sentences.\n\n```python\n"
                      "{text}```",
                      "Now add type hints to every function and method of the module. Return "
                      "the complete module, otherwise unchanged, and nothing else."),
}
LONG_TASKS = [*LONG_INSTRUCTIONS, *FOLLOWUP]


# A depth (`bench --depth N`): N tokens of this material held in the KV cache before each
# prompt, as an earlier turn of the conversation that a chat server keeps: every pinned text
# above (about 10 k tokens for Qwen's tokenizer), the user turn, then DEPTH_REPLY.
DEPTH_INTRO = "Here are some files and a licence to keep in mind for what follows.\n\n"
DEPTH_REPLY = "I have read them."


def depth_text() -> str:
    """The material a depth is cut from: every pinned long text under its name, in order."""
    return "".join(f"--- {name.removesuffix('.txt')} ---\n{long_text(name)}\n"
                   for name in LONG_SOURCES)


def depth_bound() -> int:
    """An upper bound on the tokens depth_text() holds (a token is at least one character):
    a depth above it cannot be filled, whatever the tokenizer; checked before models load."""
    return len(depth_text())


def long_text(name: str) -> str:
    import hashlib
    path = LONG_DIR / name
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LongSourceError(f"long-input text {path} cannot be read: {exc.strerror or exc}"
                              ) from None
    if hashlib.sha256(data).hexdigest() != LONG_SOURCES[name]:
        raise LongSourceError(f"long-input text {path} is not the pinned text (sha256 "
                              "differs); reinstall cpuspec")
    return data.decode("utf-8")


def long_prompts(task: str) -> list[str]:
    """The prompts of one long-input suite, built from the pinned texts (for a follow-up
    suite, the first turns)."""
    template = FOLLOWUP[task][0] if task in FOLLOWUP else LONG_INSTRUCTIONS[task]
    if task == "long-doc":
        lines = long_text("PSF-LICENSE.txt").splitlines(keepends=True)
        return [template.format(text="".join(lines[a - 1:b]).strip() + "\n")
                for a, b in LICENSE_PARTS]
    return [template.format(text=long_text(name)) for name in MODULES]


# What `cpuspec bench` runs without --tasks; "grounded" is for the lookup drafter.
DEFAULT_TASKS = ["json", "code", "story"]
ALL_TASKS = [*SUITES, *LONG_TASKS]


class PromptsFileError(ValueError):
    """A prompts file cannot be used; the message names the file and line."""


class UnknownTaskError(PromptsFileError):
    """--tasks names a task that is neither built in nor in the prompts file: a usage error."""


class LongSourceError(PromptsFileError):
    """A shipped long-input text is missing or is not the pinned one."""


def builtin_prompts(tasks: list[str], per_task: int | None = None) -> list[Prompt]:
    unknown = [t for t in tasks if t not in ALL_TASKS]
    if unknown:
        raise KeyError(f"unknown task {', '.join(unknown)}; built-in tasks: "
                       f"{', '.join(ALL_TASKS)}")
    out = []
    for task in tasks:
        suite = SUITES[task] if task in SUITES else long_prompts(task)
        texts = suite[:per_task] if per_task else suite
        followup = FOLLOWUP[task][1] if task in FOLLOWUP else ""
        out += [Prompt(task, f"{task}-{i + 1}", t, followup) for i, t in enumerate(texts)]
    return out


def read_prompts_file(path: Path, per_task: int | None = None) -> list[Prompt]:
    """Read `{"task": "...", "prompt": "..."}` per line (with "followup": "..." for a second
    turn of the same conversation); blank lines and `#` comments skipped."""
    path = Path(path)
    try:
        if path.is_dir():
            raise PromptsFileError(f"prompts file {path} is a folder")
        if path.exists() and not path.is_file():   # a FIFO or a device: read forever
            raise PromptsFileError(f"prompts file {path} is not a regular file")
        # JSON Lines are split on "\n" only: a JSON string may hold U+2028, U+0085 or a form
        # feed raw (json.dumps(ensure_ascii=False) writes them so), which splitlines() splits
        lines = path.read_text(encoding="utf-8-sig").split("\n")  # a BOM is fine
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
        followup = obj.get("followup", "")
        if not isinstance(text, str) or not text.strip():
            raise PromptsFileError(f"{path}:{lineno}: \"prompt\" must be a non-empty string")
        if not isinstance(followup, str):
            raise PromptsFileError(f"{path}:{lineno}: \"followup\" must be a string")
        if not isinstance(task, str) or not task.strip():
            raise PromptsFileError(f"{path}:{lineno}: \"task\" must be a non-empty string")
        if task.strip().lower() == OVERALL:
            raise PromptsFileError(f"{path}:{lineno}: task \"{task}\" is reserved for the "
                                   "row of all tasks together; rename it (e.g. "
                                   "\"overall-mine\")")
        for name, value in (("task", task), ("prompt", text), ("followup", followup)):
            _check_encodable(value, f"{path}:{lineno}: \"{name}\"")
        counts[task] = counts.get(task, 0) + 1
        if per_task and counts[task] > per_task:
            continue
        prompts.append(Prompt(task, f"{task}-{counts[task]}", text,
                              followup if followup.strip() else ""))
    if not prompts:
        raise PromptsFileError(f"{path}: no prompts in file")
    return prompts


def _check_encodable(text: str, where: str) -> None:
    """A lone surrogate (a \\ud800 escape without its pair) is valid JSON but no text: the
    tokenizer cannot encode it. Said here, with the line, before any model loads."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PromptsFileError(f"{where} holds a lone surrogate ({text[exc.start]!r} at "
                               f"character {exc.start}), which is not text: write the pair or "
                               "the character itself") from None


# The summary's row of every task together: no prompts file may name a task so.
OVERALL = "overall"

# `--tasks builtin:json` with a prompts file whose tasks include json: the built-in suite.
BUILTIN_PREFIX = "builtin:"


def load_prompts(tasks: list[str] | None, prompts_file: Path | None,
                 per_task: int | None = None, default_tasks: list[str] | None = None
                 ) -> list[Prompt]:
    """The built-in suites asked for (the defaults when neither they nor a file are given) and
    the prompts file's lines: all of them, or where `tasks` names tasks of the file, only
    those (a name of the file's picks the file's task even where a built-in suite has that
    name; `builtin:NAME` picks the suite). Raw and SD runs are paired
    by prompt id, so two prompts with one id (`--tasks json` and a file with "task": "json")
    are refused rather than mismatched."""
    prompts: list[Prompt] = []
    from_file = read_prompts_file(prompts_file, per_task) if prompts_file else []
    in_file = list(dict.fromkeys(p.task for p in from_file))
    names = list(tasks or ())
    # with a prompts file, a name picks the file's task first; BUILTIN_PREFIX + name spells
    # the built-in suite of a name the file uses too
    picked = [t for t in names if t in in_file]
    builtin = [t.removeprefix(BUILTIN_PREFIX) for t in names if t not in picked
               and (t in ALL_TASKS or t.startswith(BUILTIN_PREFIX))]
    unknown = [t for t in names if t not in picked and t.removeprefix(BUILTIN_PREFIX)
               not in ALL_TASKS]
    if unknown:
        raise UnknownTaskError(
            f"unknown task {', '.join(unknown)}; built-in tasks: {', '.join(ALL_TASKS)}"
            + (f"; tasks of {prompts_file}: {', '.join(in_file)}" if prompts_file else
               " (or a task of a --prompts file)"))
    if builtin or not (tasks or prompts_file):
        prompts += builtin_prompts(builtin or default_tasks or DEFAULT_TASKS, per_task)
    if prompts_file:
        if tasks:
            from_file = [p for p in from_file if p.task in picked]
        clash = sorted({p.task for p in from_file} & {p.task for p in prompts})
        if clash:
            raise PromptsFileError(
                f"{prompts_file}: task {clash[0]!r} is also the built-in suite "
                f"{BUILTIN_PREFIX}{clash[0]} of this run, so two prompts would be called "
                f"{clash[0]}-1; rename the task in the file (e.g. \"{clash[0]}-mine\") or "
                f"leave {BUILTIN_PREFIX}{clash[0]} out of --tasks")
        prompts += from_file
    return prompts


def shuffled_within_tasks(prompts: list[Prompt], seed: int) -> list[Prompt]:
    """Each task's prompts in an order drawn from `seed` (recorded in the run), the tasks in
    their order: under the sequential design a task that stops at 5 of 16 is then judged on
    5 prompts drawn at random, not on the suite's first five every run (issue 69)."""
    import random
    rng = random.Random(seed)
    by_task: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_task.setdefault(p.task, []).append(p)
    out: list[Prompt] = []
    for group in by_task.values():
        group = list(group)
        rng.shuffle(group)
        out += group
    return out
