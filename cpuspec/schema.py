"""The results files' schema: its version, reading a file (any readable version), and
validating a bench file field by field, with a message that names the field."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .speculative import ROUND_FIELDS


# 2: end-to-end windows (e2e_s, draft_prefill_s), noise samples per run, "kind" on every file,
#    prefill timings in the cost probe. Files of schema_version 1 are still read (see read_json).
SCHEMA_VERSION = 2


READABLE_SCHEMA_VERSIONS = (1, 2)


class ResultsError(ValueError):
    """A results file cannot be read; the message says why."""


def read_json(path: Path) -> dict:
    """A results file of any schema this version reads, with its "kind" filled in (schema 1
    bench files had none)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ResultsError(f"cannot read results {path}: {exc}") from exc
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


def validate_bench(results: dict, path: str = "results") -> None:
    """One clear message naming the first missing or malformed field, instead of a KeyError
    deep in a printer."""
    kind = results.get("kind")
    if kind != "bench":
        raise ResultsError(f"{path}: a {kind or 'unknown'} results file, not a bench one"
                           + ("; `cpuspec report` prints sweeps" if kind == "sweep" else ""))
    settings = results.get("settings")
    _check(isinstance(settings, dict), path, "settings", "an object")
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
        _check(all(_num(x) for x in r["token_latencies_s"]), path,
               f"runs[{i}].token_latencies_s", "a list of numbers")
        for f in ("prefill_s", "decode_s"):
            _check(_num(r.get(f)), path, f"runs[{i}].{f}", "a number")
        _check(isinstance(r.get("rounds", []), list) and all(
            isinstance(x, list) and len(x) == len(ROUND_FIELDS) and all(map(_num, x))
            for x in r.get("rounds", [])), path, f"runs[{i}].rounds",
            f"a list of {len(ROUND_FIELDS)}-number rows")
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
