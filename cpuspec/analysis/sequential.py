"""Verdicts at the cost the evidence needs (issue 60): a group-sequential design that keeps its
coverage under optional stopping.

Units (prompts, or load batches) run in whole blocks of the mode order; the verdict is looked
at only after LOOKS units (5, 8, 12, 16, 24, 32, and the last unit allowed). At each look the
interval of the ratio (the geometric mean of the units' own ratios, a t-interval on their logs)
is taken at level 1 − α/K, K the number of looks planned up to the unit limit: Bonferroni's
union bound then keeps the chance that any interval printed at any look misses the true ratio
at or below α, whatever the rule that stops (Jennison & Turnbull, Group Sequential Methods,
2000, §2.4 and §3: Bonferroni boundaries are conservative versions of Pocock's; the Student t
quantile per look as in their §3.2 for unknown variance). With α = 5 % and a two-sided
interval, "faster" and "slower" are each wrong at most 2.5 % of the time.

A task stops at a look when its interval excludes 1 (faster / slower), or when it spans 1 and
its half-width is within the precision asked (no difference, to that precision), or at the
unit limit (undecided: the interval spans 1 and is wider than the precision). The interval
printed after stopping is the look's (1 − α/K) interval: the one the design makes valid.

Pure: no I/O; the t quantile is computed here (numpy has none, scipy is not a dependency).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cpuspec.analysis.stats import MIN_CI_UNITS, t_interval, t_quantile  # noqa: F401

LOOKS = (5, 8, 12, 16, 24, 32)
ALPHA = 0.05
PRECISION = 0.05          # stop "no difference" once the interval is within ±5 % of its centre


@dataclass(frozen=True)
class Design:
    max_units: int = 16
    alpha: float = ALPHA
    precision: float = PRECISION

    @classmethod
    def of(cls, seq: dict, max_units: int) -> "Design":
        """The design a results file's settings.sequential records, at a unit limit."""
        return cls(max_units=max(max_units, 1), alpha=seq.get("alpha", ALPHA),
                   precision=seq.get("precision", PRECISION))

    @property
    def looks(self) -> tuple[int, ...]:
        """The looks up to the unit limit, the limit itself always one of them."""
        out = [n for n in LOOKS if n < self.max_units]
        return (*out, self.max_units) if self.max_units >= 1 else ()

    @property
    def level(self) -> float:
        """Each look's confidence level: 1 − α/K."""
        return 1.0 - self.alpha / max(len(self.looks), 1)


def look(ratios, design: Design) -> dict:
    """The verdict after len(ratios) units: the ratio, the design's interval, and whether
    (and why) the task stops here. Between looks nothing is decided ("continue")."""
    xs = np.asarray(ratios, dtype=float)
    logs = np.log(xs[np.isfinite(xs) & (xs > 0)])   # a ratio that is not a speed ratio: none
    n = len(logs)
    out = {"units": n, "ratio": float(math.exp(logs.mean())) if n else None, "ci": None,
           "state": "continue", "level": design.level,
           "range": [float(math.exp(logs.min())), float(math.exp(logs.max()))] if n >= 2
           else None}
    if n not in design.looks:
        return out
    if n < MIN_CI_UNITS:   # a limit below 5 units: a range, never an interval
        out["state"] = "undecided"
        return out
    m, lo, hi = t_interval(logs, design.level)     # the one interval, at the look's level
    h = hi - m
    out["ci"] = [math.exp(lo), math.exp(hi)]
    if m - h > 0:
        out["state"] = "faster"
    elif m + h < 0:
        out["state"] = "slower"
    elif h <= math.log1p(design.precision):
        out["state"] = "no difference"
    elif n >= design.max_units:
        out["state"] = "undecided"
    return out


def ceiling_cap(probe: dict, k_max: int) -> dict | None:
    """Where the cost probe shows that even every draft accepted cannot pay at any k up to
    k_max (the speedup's ceiling, core/costs.ceiling_speedup, at most 1), the design's new
    unit limit: the first look, enough to confirm it; None where some k could pay. Decided
    from the probe before any prompt runs, so the limit is fixed in advance of the ratios."""
    from cpuspec.core.costs import ceiling_speedup
    from cpuspec.results.records import CostProbe
    p = CostProbe.of(probe)
    ks = [k for k in range(1, k_max + 1) if k + 1 in p.verify_s]
    if not ks:
        return None
    best = max(ks, key=lambda k: ceiling_speedup(p.verify_s, p.draft_s, k))
    top = ceiling_speedup(p.verify_s, p.draft_s, best)
    return None if top > 1.0 else {"max_units": LOOKS[0], "ceiling": round(top, 3),
                                   "ceiling_k": best}


def replay(ratios, design: Design) -> dict:
    """The rule run over units in their recorded order: the look where it stops (or the last
    unit given, undecided if no look decided), with the units it used."""
    last = {"units": 0, "ratio": None, "ci": None, "state": "continue", "level": design.level}
    for n in range(1, len(ratios) + 1):
        last = look(ratios[:n], design)
        if last["state"] != "continue":
            return last
    return last


def task_ratios(results: dict, task: str) -> list[float]:
    """A bench run's per-prompt SD ×raw (static against raw, end to end) of one task, in the
    order its prompts ran."""
    from cpuspec.analysis.stats import paired_units, unit_speedups
    runs = [r for r in results.get("runs") or [] if r.get("task") == task]
    out = []
    for pid in dict.fromkeys(r["prompt_id"] for r in runs):
        units = paired_units([r for r in runs if r["prompt_id"] == pid and r["mode"] == "raw"],
                             [r for r in runs if r["prompt_id"] == pid
                              and r["mode"] == "static"])
        if len(units):
            out.append(float(unit_speedups(units)[0]))
    return out


def task_look(results: dict, task: str) -> dict | None:
    """The design's look at a bench run's task (settings.sequential; its unit limit the prompts
    planned for the task): None for a run of the fixed design."""
    seq = (results.get("settings") or {}).get("sequential")
    if not seq:
        return None
    planned = sum(1 for p in results.get("prompts") or [] if p.get("task") == task)
    planned = min(planned, seq.get("max_units") or planned)   # capped by the probe's ceiling
    design = Design.of(seq, planned)
    return {**look(task_ratios(results, task), design), "planned": planned}
