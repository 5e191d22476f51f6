"""The results files' schema: its version, reading a file (any readable version), and
validating a bench file field by field, with a message that names the field."""
from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

from cpuspec.core.speculative import ROUND_FIELDS


# 2: end-to-end windows (e2e_s, draft_prefill_s), noise samples per run, "kind" on every file,
#    prefill timings in the cost probe. Files of schema_version 1 are still read (see read_json).
SCHEMA_VERSION = 2


READABLE_SCHEMA_VERSIONS = (1, 2)

# The stacks a paths file measures (cpuspec paths --paths).
CPUSPEC, REDECODE, LLAMA_CPP_PYTHON, LLAMA_CPP = ("cpuspec", "cpuspec+redecode",
                                                  "llama-cpp-python", "llama.cpp")
LLAMA_SERVER = "llama-server"
# the same servers asked as an OpenAI-style client asks: /v1/chat/completions, the server's
# chat template and default sampler chain at temperature 0
LLAMA_SERVER_CHAT = "llama-server-chat"
SERVER_PATHS = (LLAMA_SERVER, LLAMA_SERVER_CHAT)
ALL_PATHS = (CPUSPEC, REDECODE, LLAMA_CPP_PYTHON, LLAMA_CPP, LLAMA_SERVER, LLAMA_SERVER_CHAT)


class ResultsError(ValueError):
    """A results file cannot be read; the message says why."""


# A results file is JSON, plain or gzip-compressed (bench/results/ keeps its large files as
# NAME.json.gz); the compression is told by the first two bytes, whatever the file's name.
GZIP_MAGIC = b"\x1f\x8b"
RESULTS_SUFFIXES = (".json.gz", ".json")


def results_text(path: Path) -> str:
    """The JSON text of a results file, plain or gzip-compressed: OSError, ValueError (not
    UTF-8), EOFError (a truncated gzip file) or zlib.error (damaged compressed data)."""
    raw = Path(path).read_bytes()
    if raw[:2] == GZIP_MAGIC:
        raw = gzip.decompress(raw)
    return raw.decode("utf-8")


def load_json(path: Path):
    """The parsed JSON of a results file, plain or gzip-compressed, whatever it holds;
    ResultsError (one line) says why it cannot be read: missing, damaged, truncated."""
    try:
        return json.loads(results_text(path))
    except (OSError, ValueError, EOFError, zlib.error) as exc:
        raise ResultsError(f"cannot read results {path}: {exc}") from exc
    except RecursionError:
        raise ResultsError(f"cannot read results {path}: nested too deeply to be a cpuspec "
                           "results file") from None


def read_json(path: Path) -> dict:
    """A results file (plain or gzip-compressed JSON) of any schema this version reads, with
    its "kind" filled in (schema 1 bench files had none)."""
    if Path(path).exists() and not Path(path).is_file():
        raise ResultsError(f"cannot read results {path}: not a regular file")
    data = load_json(path)
    if not isinstance(data, dict) or data.get("schema_version") not in READABLE_SCHEMA_VERSIONS:
        raise ResultsError(f"{path}: not a cpuspec results file of schema_version "
                           + " or ".join(map(str, READABLE_SCHEMA_VERSIONS)))
    if "kind" not in data and "runs" in data:
        data["kind"] = "bench"
    return data


def read_bench(path: Path) -> dict:
    """A bench results file, read and checked (ResultsError names what is wrong)."""
    data = read_json(path)
    validate_bench(data, str(path))
    return data


def _check(ok: bool, path: str, field: str, what: str) -> None:
    if not ok:
        raise ResultsError(f"{path}: field {field} is missing or not {what}; the file is damaged "
                           "or was not written by cpuspec bench")


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _amount(v: Any) -> bool:
    """A finite number ≥ 0: a time, a count, a rate."""
    return _num(v) and v == v and 0 <= v < float("inf")


def _int(v: Any, low: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


def _common(results: dict, path: str, settings_needed: bool = True) -> dict:
    """What every kind has: meta (an object, if present) and settings (an object; a sweep's
    points have their own)."""
    meta = results.get("meta", {})
    _check(isinstance(meta, dict), path, "meta", "an object")
    for f in ("hardware", "versions"):
        _check(isinstance(meta.get(f, {}), dict), path, f"meta.{f}", "an object")
    settings = results.get("settings", None if settings_needed else {})
    _check(isinstance(settings, dict), path, "settings", "an object")
    tasks = settings.get("tasks", [])
    _check(isinstance(tasks, list) and all(isinstance(t, str) for t in tasks), path,
           "settings.tasks", "a list of task names")
    return settings


def validate(results: dict, path: str = "results") -> None:
    """Check a results file of any kind that cpuspec prints (bench, paths, sweep, tune):
    ResultsError names the first missing or malformed field."""
    kind = results.get("kind")
    if kind == "bench":
        validate_bench(results, path)
    elif kind == "paths":
        validate_paths(results, path)
    elif kind == "sweep":
        _common(results, path, settings_needed=False)
        axes, rows, points = (results.get(f) for f in ("axes", "rows", "points"))
        _check(isinstance(axes, list) and all(isinstance(a, str) for a in axes), path, "axes",
               "a list of axis names")
        _check(isinstance(rows, list) and all(isinstance(r, dict) for r in rows), path,
               "rows", "a list of objects")
        _check(isinstance(points, list), path, "points", "a list")
        for i, point in enumerate(points):
            if isinstance(point, dict) and "runs" in point:
                validate_bench({"kind": "bench", **point}, f"{path}: points[{i}]")
    elif kind == "tune":
        _check(isinstance(results.get("recommendations"), dict), path, "recommendations",
               "an object")
        for f in ("ranking", "measured", "candidates"):   # older files lack some
            _check(isinstance(results.get(f, []), list), path, f, "a list")
        for task, rec in results["recommendations"].items():
            _check(isinstance(rec, dict), path, f"recommendations.{task}", "an object")
        for f in ("ranking", "measured"):
            for i, r in enumerate(results.get(f, [])):
                _check(isinstance(r, dict) and isinstance(r.get("candidate"), str), path,
                       f"{f}[{i}].candidate", "a string")
    elif kind is not None and not isinstance(kind, str):
        raise ResultsError(f"{path}: field kind is not a string; the file is damaged")


# what a paths run may hold besides its required fields: each a finite number ≥ 0 (or null)
PATHS_AMOUNTS = ("prefill_s", "decode_s", "draft_s", "verify_s", "first_chunk_s", "drafted",
                 "accepted", "draft_calls", "target_eval_ms", "target_eval_runs",
                 "prompt_eval_ms", "prompt_eval_tokens", "sampling_ms", "draft_gen_ms",
                 "total_ms", "repetition")


def validate_paths(results: dict, path: str = "results") -> None:
    """A paths file, field by field (see paths.measure_paths for what it holds)."""
    settings = _common(results, path)
    for f in ("target", "drafter"):
        _check(isinstance(settings.get(f), str), path, f"settings.{f}", "a string")
    _check(settings.get("draft") is None or isinstance(settings["draft"], str), path,
           "settings.draft", "a string or null")
    for f in ("k", "max_tokens", "threads"):
        _check(_int(settings.get(f), 1), path, f"settings.{f}", "an integer ≥ 1")
    chosen = settings.get("paths")
    _check(isinstance(chosen, list) and chosen and all(p in ALL_PATHS for p in chosen), path,
           "settings.paths", f"a list of path names ({', '.join(ALL_PATHS)})")
    runs = results.get("runs")
    _check(isinstance(runs, list), path, "runs", "a list")
    for i, r in enumerate(runs):
        at = f"runs[{i}]"
        _check(isinstance(r, dict), path, at, "an object")
        _check(r.get("path") in chosen, path, f"{at}.path", "one of settings.paths")
        _check(r.get("mode") in ("raw", "static"), path, f"{at}.mode", "raw or static")
        for f in ("task", "prompt_id", "text"):
            _check(isinstance(r.get(f), str), path, f"{at}.{f}", "a string")
        _check(_int(r.get("n_tokens")), path, f"{at}.n_tokens", "an integer ≥ 0")
        _check(_amount(r.get("e2e_s")), path, f"{at}.e2e_s", "a number ≥ 0")
        for f in PATHS_AMOUNTS:
            _check(r.get(f) is None or _amount(r[f]), path, f"{at}.{f}", "a number ≥ 0")
        for f, width in (("rounds", 2), ("round_phases_ms", 2)):
            rows = r.get(f, [])
            _check(isinstance(rows, list) and all(
                isinstance(x, list) and len(x) == width and all(map(_amount, x))
                for x in rows), path, f"{at}.{f}", f"a list of {width}-number rows ≥ 0")
        _check(isinstance(r.get("acc_rate_pos", []), list) and all(
            map(_amount, r.get("acc_rate_pos", []))), path, f"{at}.acc_rate_pos",
            "a list of numbers ≥ 0")


def validate_bench(results: dict, path: str = "results") -> None:
    """One clear message naming the first missing or malformed field, instead of a KeyError
    deep in a printer."""
    kind = results.get("kind")
    if kind != "bench":
        raise ResultsError(f"{path}: a {kind or 'unknown'} results file, not a bench one"
                           + ("; `cpuspec report` prints sweeps" if kind == "sweep" else ""))
    settings = _common(results, path)
    k = settings.get("k")
    _check(isinstance(k, int) and not isinstance(k, bool) and k >= 1, path, "settings.k",
           "an integer ≥ 1")
    runs = results.get("runs")
    _check(isinstance(runs, list), path, "runs", "a list")
    for i, r in enumerate(runs):
        _check(isinstance(r, dict), path, f"runs[{i}]", "an object")
        for f in ("task", "prompt_id", "mode"):
            _check(isinstance(r.get(f), str), path, f"runs[{i}].{f}", "a string")
        for f in ("tokens", "token_latencies_s"):
            _check(isinstance(r.get(f), list), path, f"runs[{i}].{f}", "a list")
        _check(all(_amount(x) for x in r["token_latencies_s"]), path,
               f"runs[{i}].token_latencies_s", "a list of numbers ≥ 0")
        for f in ("prefill_s", "decode_s"):
            _check(_amount(r.get(f)), path, f"runs[{i}].{f}", "a number ≥ 0")
        _check(isinstance(r.get("rounds", []), list) and all(
            isinstance(x, list) and len(x) == len(ROUND_FIELDS) and all(map(_amount, x))
            for x in r.get("rounds", [])), path, f"runs[{i}].rounds",
            f"a list of {len(ROUND_FIELDS)}-number rows ≥ 0")
    audit = results.get("audit", [])
    _check(isinstance(audit, list), path, "audit", "a list")
    for i, a in enumerate(audit):
        _check(isinstance(a, dict) and isinstance(a.get("identical"), bool), path,
               f"audit[{i}].identical", "true or false")
        _check(isinstance(a.get("task"), str), path, f"audit[{i}].task", "a string")
    probe = results.get("cost_probe")
    if probe is not None:
        _check(isinstance(probe, dict) and isinstance(probe.get("verify_s"), dict), path,
               "cost_probe.verify_s", "an object")
        for n in range(1, k + 2):
            _check(_num(probe["verify_s"].get(str(n))), path, f"cost_probe.verify_s.{n}",
                   f"a number (the probe must cover 1..k + 1 = {k + 1} tokens)")
        _check(_num(probe.get("draft_s")), path, "cost_probe.draft_s", "a number")
