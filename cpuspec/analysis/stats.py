"""Statistics from raw samples: speeds over a window, and SD ×raw paired by prompt (the
geometric mean of per-prompt speedups) with a t-interval on their logs (from MIN_CI_UNITS
prompts) or a range (fewer).

Pure: no I/O. Every printer (report, compare, tune, paths) computes its figures here, from the
runs a results file keeps, so an old file is summarised again by newer code.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np


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


# An interval from fewer independent units is a range, and is printed as one: from 2-4 units a
# standard error is too rough to call anything 95 %.
MIN_CI_UNITS = 5

# What every printer's legend says the interval is.
INTERVAL_LEGEND = ("95 % t-interval over prompts (geometric mean of per-prompt speedups; "
                   f"a range below {MIN_CI_UNITS} prompts)")


# Student's t, exact (at n = 5 units, 4 df, the 0.975 quantile is 2.776, where 1.96 would make
# the interval 29 % too narrow).
def _t_abs_cdf(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with integer df (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 0:
        term = total = 1.0
        for k in range(2, df, 2):
            term *= c2 * (k - 1) / k
            total += term
        return s * total
    if df == 1:
        return 2.0 * theta / math.pi
    term = total = math.cos(theta)
    for k in range(3, df, 2):
        term *= c2 * (k - 1) / k
        total += term
    return 2.0 / math.pi * (theta + s * total)


@lru_cache(maxsize=None)
def t_quantile(level: float, df: int) -> float:
    """The two-sided quantile t with P(|T| < t) = level, by bisection (to 1e-10): the one t
    quantile of every interval here (the fixed design's 95 %, a sequential look's 1 − α/K)."""
    if df < 1 or not 0.0 < level < 1.0:
        raise ValueError("a t quantile needs df ≥ 1 and a level in (0, 1)")
    lo, hi = 0.0, 1.0
    while _t_abs_cdf(hi, df) < level:
        hi *= 2.0
    while hi - lo > 1e-10:
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if _t_abs_cdf(mid, df) < level else (lo, mid)
    return (lo + hi) / 2.0


def t_975(df: int) -> float:
    """The 0.975 quantile of Student's t with df degrees of freedom (a 95 % interval)."""
    if df < 1:
        raise ValueError("a t quantile needs at least 1 degree of freedom")
    return t_quantile(0.95, df)


def t_interval(xs: list[float] | np.ndarray, level: float = 0.95
               ) -> tuple[float, float, float]:
    """(mean, low, high): the mean of xs and its t-interval at `level` (95 % unless a
    sequential look asks for its 1 − α/K; xs: ≥ 2 independent units)."""
    xs = np.asarray(xs, dtype=float)
    m = float(xs.mean())
    h = t_quantile(level, len(xs) - 1) * float(xs.std(ddof=1)) / math.sqrt(len(xs))
    return m, m - h, m + h


def unit_speedups(units: np.ndarray) -> np.ndarray:
    """Each paired unit's own speedup (SD t/s ÷ raw t/s)."""
    return (units[:, 2] / units[:, 3]) / (units[:, 0] / units[:, 1])


def ratio_stats(ratios) -> dict[str, Any]:
    """The one interval function of cpuspec: over independent paired units' own ratios (SD ÷
    raw of a prompt, of a load batch, shape-true ÷ real of a validation round), their geometric
    mean, its 95 % t-interval on the logs from MIN_CI_UNITS units (None below), their range
    below MIN_CI_UNITS (from 2 units), the number of units and the verdict (significance).
    Ratios that are not positive finite numbers count in nothing."""
    xs = np.asarray([r for r in ratios if r is not None and np.isfinite(r) and r > 0],
                    dtype=float)
    if not len(xs):
        return {"speedup": None, "ci": None, "range": None, "units": 0, "significance": None}
    logs = np.log(xs)
    ci = None
    if len(logs) >= MIN_CI_UNITS:
        _, lo, hi = t_interval(logs)
        ci = [math.exp(lo), math.exp(hi)]
    return {"speedup": math.exp(float(logs.mean())), "ci": ci,
            "range": [float(xs.min()), float(xs.max())] if ci is None and len(xs) >= 2
            else None, "units": len(xs), "significance": significance(ci)}


def speedup_ci(units: np.ndarray) -> tuple[float, float] | None:
    """95 % interval of the speedup over paired prompt units (paired_units): ratio_stats's
    t-interval on the units' log-speedups, so it is the interval of the geometric mean that
    speedup_stats reports. None with fewer than MIN_CI_UNITS units."""
    ci = ratio_stats(unit_speedups(units))["ci"] if len(units) else None
    return tuple(ci) if ci else None


def significance(ci) -> str | None:
    """faster / slower when the interval excludes 1, "not significant" when it spans it, None
    without an interval (fewer than MIN_CI_UNITS units: a range, no verdict)."""
    if ci is None:
        return None
    if ci[0] > 1.0:
        return "faster"
    if ci[1] < 1.0:
        return "slower"
    return "not significant"


def speedup_stats(base: list[dict], other: list[dict]) -> dict[str, Any]:
    """other ÷ base end to end, paired by prompt: ratio_stats over the paired prompts' own
    speedups. `other` may be SD runs or raw runs of another target. A prompt measured in one
    mode only counts in neither figure."""
    units = paired_units(base, other)
    out = ratio_stats(unit_speedups(units) if len(units) else [])
    if out["speedup"] is None:
        out["speedup"] = float("nan")
    return out


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
