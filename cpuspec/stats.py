"""Statistics from raw samples: speeds over a window, and SD ×raw paired by prompt with a
bootstrap interval (from MIN_CI_UNITS prompts) or a range (fewer).

Pure: no I/O. Every printer (report, compare, tune, paths) computes its figures here, from the
runs a results file keeps, so an old file is summarised again by newer code.
"""
from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

# Bootstrap resamples for the 95 % intervals (fixed seed: a report reads the same every time).
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0



def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def run_e2e_s(run: dict) -> float:
    """End-to-end seconds of one generation. Files of schema 1 have no e2e_s; there prefill_s
    held the target's and (for SD) the draft's prefill together, so the sum is the same window."""
    if "e2e_s" in run:
        return run["e2e_s"]
    return run["prefill_s"] + run.get("draft_prefill_s", 0.0) + run["decode_s"]


def n_tokens(run: dict) -> int:
    """Tokens one generation produced: its token ids, or the count a program reported where
    the ids were never seen (llama.cpp's programs, llama-cpp-python's completion)."""
    return run["n_tokens"] if "n_tokens" in run else len(run["tokens"])


def e2e_tok_s(runs: list[dict]) -> float:
    """End-to-end: every generated token (the first one comes from the prefill) over the whole
    window, the prefills included."""
    seconds = sum(run_e2e_s(r) for r in runs)
    return sum(n_tokens(r) for r in runs) / seconds if seconds > 0 else float("nan")


def decode_tok_s(runs: list[dict]) -> float:
    """Decode-only: the tokens after the first over the time after both prefills."""
    seconds = sum(r["decode_s"] for r in runs)
    tokens = sum(len(r["token_latencies_s"]) for r in runs)
    return tokens / seconds if seconds > 0 else float("nan")


def _unit(r: dict) -> tuple:
    return r["prompt_id"], r.get("repetition", 0)


def raw_by_unit(runs: list[dict]) -> dict[tuple, dict]:
    """The raw run of each (prompt_id, repetition): what every other mode's run is set beside."""
    return {_unit(r): r for r in runs if r["mode"] == "raw"}


def raw_of(by_unit: dict[tuple, dict], run: dict) -> dict | None:
    """`run`'s raw run on the same prompt and repetition, from raw_by_unit, or None."""
    return by_unit.get(_unit(run))


def paired_units(raw: list[dict], sd: list[dict]) -> np.ndarray:
    """One row per prompt measured in both modes: raw tokens, raw seconds, SD tokens, SD
    seconds (end-to-end), summed over the repetitions of that prompt that ran in both modes.
    Repetitions of one prompt share its text and output, so they are one unit, not several:
    resampling them apart would shrink the interval by up to √repetitions for nothing."""
    by_unit = {_unit(r): r for r in raw}
    per_prompt: dict[str, np.ndarray] = {}
    for s in sd:
        r = by_unit.get(_unit(s))
        if r is not None:
            row = np.array([n_tokens(r), run_e2e_s(r), n_tokens(s), run_e2e_s(s)])
            per_prompt[s["prompt_id"]] = per_prompt.get(s["prompt_id"], 0) + row
    return np.array(list(per_prompt.values()), dtype=float).reshape(-1, 4)


# An interval from fewer independent units is a range, and is printed as one: a percentile
# bootstrap over 2 units returns their min and max, whatever the level it is labelled with.
MIN_CI_UNITS = 5


def mean_interval(xs: list[float], digits: int = 3) -> str:
    """The mean of per-unit ratios with mean ± 1.96 standard errors, or, below MIN_CI_UNITS
    units, with their range."""
    m = statistics.fmean(xs)
    if len(xs) < MIN_CI_UNITS:
        return f"{m:.{digits}f} (range {min(xs):.{digits}f}-{max(xs):.{digits}f})"
    h = 1.96 * statistics.stdev(xs) / math.sqrt(len(xs))
    return f"{m:.{digits}f} [{m - h:.{digits}f}, {m + h:.{digits}f}]"


def unit_speedups(units: np.ndarray) -> np.ndarray:
    """Each paired unit's own speedup (SD t/s ÷ raw t/s)."""
    return (units[:, 2] / units[:, 3]) / (units[:, 0] / units[:, 1])


def bootstrap_speedup_ci(units: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES,
                         seed: int = BOOTSTRAP_SEED) -> tuple[float, float] | None:
    """95 % percentile-bootstrap interval of the speedup (SD t/s ÷ raw t/s over the resampled
    prompts), resampling paired prompt units (paired_units) so raw and SD stay together. None
    with fewer than MIN_CI_UNITS units: the caller prints their range instead."""
    n = len(units)
    if n < MIN_CI_UNITS:
        return None
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    s = units[idx].sum(axis=1)  # (resamples, 4)
    ratios = (s[:, 2] / s[:, 3]) / (s[:, 0] / s[:, 1])
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return float(lo), float(hi)


def significance(ci: tuple[float, float] | None) -> str | None:
    if ci is None:
        return None
    if ci[0] > 1.0:
        return "faster"
    if ci[1] < 1.0:
        return "slower"
    return "not significant"


def speedup_stats(base: list[dict], other: list[dict]) -> dict[str, Any]:
    """other ÷ base end to end, paired by prompt: the ratio, its 95 % interval (≥ MIN_CI_UNITS
    prompts) or range (fewer), the number of prompt units and the verdict. `other` may be SD
    runs or raw runs of another target."""
    units = paired_units(base, other)
    ci = bootstrap_speedup_ci(units)
    # fewer units than an interval needs: the range of the units' own speedups
    each = unit_speedups(units) if len(units) else np.array([])
    return {"speedup": e2e_tok_s(other) / e2e_tok_s(base) if base and other else float("nan"),
            "ci": list(ci) if ci else None,
            "range": [float(each.min()), float(each.max())]
            if ci is None and len(units) >= 2 else None,
            "units": len(units), "significance": significance(ci)}


# --- the target's prefill, shared between modes ----------------------------------------------
# The target's prefill of a prompt is the same computation in every mode (the same tokens
# through the same model, before any draft or decision), yet on a 2-vCPU VM its timing wanders
# between modes: machine B, long-doc-4, 14.5 s raw and 20.3 s adaptive with nothing else
# running. On long inputs it is most of the end-to-end window, so that wander alone can move
# a ratio by several percent. Sharing it (each mode charged the mean of the modes' timings of
# that prompt) removes one source of noise and adds none; target_prefill_by_mode checks that
# it is noise: a mode whose prefill runs slower every time pays a real cost sharing would hide.


def share_target_prefill(runs: list[dict]) -> list[dict]:
    """Copies of the runs, each with its target prefill set to the mean of its prompt's (and
    repetition's) timings over the modes, and its end-to-end time moved by the same amount;
    the draft's prefill and the decode are left as measured."""
    by_unit: dict[tuple, list[float]] = {}
    for r in runs:
        by_unit.setdefault(_unit(r), []).append(r["prefill_s"])
    out = []
    for r in runs:
        timings = by_unit[_unit(r)]
        mean = sum(timings) / len(timings)
        out.append({**r, "e2e_s": run_e2e_s(r) - r["prefill_s"] + mean, "prefill_s": mean})
    return out


def target_prefill_by_mode(runs: list[dict]) -> dict[str, float]:
    """Per mode, the mean over its prompts of its target prefill ÷ that prompt's mean over the
    modes (prompts that ran in two modes or more): about 1.00 for every mode where the timings
    differ by noise alone."""
    by_unit: dict[tuple, list[dict]] = {}
    for r in runs:
        by_unit.setdefault(_unit(r), []).append(r)
    ratios: dict[str, list[float]] = {}
    for unit in by_unit.values():
        mean = sum(r["prefill_s"] for r in unit) / len(unit)
        if len(unit) >= 2 and mean > 0:
            for r in unit:
                ratios.setdefault(r["mode"], []).append(r["prefill_s"] / mean)
    return {mode: sum(v) / len(v) for mode, v in ratios.items()}
