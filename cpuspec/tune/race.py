"""tune's confirmation as a race (issue 60): per task, the best few answers the prediction
offers run on the task's confirm prompts in blocks up to the sequential design's looks (5, 8,
12, ... prompts; analysis/sequential.py), and after each look every member clearly slower
than the leader stops, so a budget confirms more answers than one at a time would.

- Members: the `size` answers predicted fastest against the reference target's raw decoding
  (SD at its k, or raw decoding on another target), the answer where SD pays most when it is
  not among them, and the yardstick: raw decoding on the reference target itself (raced
  against, so an answer slower than it stops, but not one of the `size`).
- A member's unit: one confirm prompt, its end-to-end speed (SD: its static run; raw decoding:
  the raw run). Every member runs the same prompts, so any two are paired by prompt.
- The leader: the member fastest over the prompts every member still in the race ran (the
  geometric mean of the paired per-prompt ratios).
- At a look, each other member's paired ratio to the leader is tested as bench tests SD
  against raw (sequential.look): "slower" (its interval lies below 1) stops it, and so does
  "no difference" (within ±precision of the leader: going on cannot separate them to the
  precision asked); the race ends when one member is left or at the last prompt.
- Coverage: the leader is chosen from the data, so every pair of members is an interval of its
  own: α is split over the m(m − 1)/2 pairs as well as over the looks (Bonferroni, as the design
  splits it over looks), and the chance that any member is stopped as slower when it is not
  stays at or below α/2.

Pure: no I/O, no model; search.py runs the blocks.
"""
from __future__ import annotations

import math

import numpy as np

from cpuspec.analysis.sequential import ALPHA, Design, look
from cpuspec.analysis.stats import n_tokens, paired_units, run_e2e_s, unit_speedups

RACE_SIZE = 4          # answers raced per task by default (--race), the yardstick apart
OUT_STATES = ("slower", "no difference")


def race_members(eligible: list, best_sd, size: int, yardstick=None) -> list:
    """The `size` options predicted fastest against the reference raw (distinct answers), the
    one where SD pays most (best_sd, when it pays) if it is not among them, and the yardstick
    (raw decoding on the reference target: raced against, not one of the `size`)."""
    skip = {yardstick.key} if yardstick is not None else set()
    out: list = []
    for o in sorted(eligible, key=lambda o: -o.predicted_vs_reference_raw):
        if len(out) < size and o.key not in {m.key for m in out} | skip:
            out.append(o)
    if best_sd is not None and best_sd.predicted_speedup > 1.0 and \
            best_sd.key not in {m.key for m in out}:
        out.append(best_sd)
    return out + [yardstick] if out and yardstick is not None else out


def race_design(n_units: int, n_members: int, alpha: float = ALPHA) -> Design:
    """The looks up to the task's confirm prompts, α split over every pair of members."""
    pairs = max(n_members * (n_members - 1) // 2, 1)
    return Design(max_units=n_units, alpha=alpha / pairs)


def _log_speeds(records: list[dict]) -> dict[tuple, float]:
    return {(r["prompt_id"], r.get("repetition", 0)): math.log(n_tokens(r) / run_e2e_s(r))
            for r in records if n_tokens(r) > 0 and run_e2e_s(r) > 0}


def leader_of(speeds: dict) -> object:
    """The member fastest over the prompts every member ran (speeds: member → its runs)."""
    logs = {m: _log_speeds(rs) for m, rs in speeds.items()}
    common = set.intersection(*(set(v) for v in logs.values())) if logs else set()
    if not common:
        return next(iter(speeds))
    return max(logs, key=lambda m: float(np.mean([logs[m][u] for u in common])))


def race_look(speeds: dict, design: Design) -> tuple[object, dict]:
    """The leader, and every other member's look at its paired ratio to the leader."""
    leader = leader_of(speeds)
    looks = {}
    for m, rs in speeds.items():
        if m != leader:
            units = paired_units(speeds[leader], rs)
            looks[m] = look(unit_speedups(units) if len(units) else [], design)
    return leader, looks


def run_race(keys: list, design: Design, measure) -> dict:
    """The race over `keys` (any hashables): measure(alive, start, stop) runs units
    start..stop − 1 for every member still in and returns ({key: its runs of them}, whether
    every member ran them; False ends the race there, e.g. the budget). A member left alone
    runs on to the last unit (it is being confirmed, no longer raced). Returns each member's
    outcome ("leader"; "slower" or "no difference" than the leader, with the look it stopped
    at and its paired ratio to the leader then; "undecided": still in at the last unit;
    "cut short": still in when measure stopped it), every member's runs, and the leader."""
    speed: dict = {k: [] for k in keys}
    out: dict = {k: {"state": "undecided"} for k in keys}
    alive, done, whole = list(keys), 0, True
    for n in design.looks:
        got, whole = measure(list(alive), done, n)
        for k, runs in got.items():
            speed[k] += runs
        if not whole:
            break
        done = n
        if len(alive) < 2:
            continue
        leader, looks = race_look({k: speed[k] for k in alive}, design)
        for k, lk in looks.items():
            if lk["state"] in OUT_STATES:
                alive.remove(k)
                out[k].update(state=lk["state"], at=n, behind=leader,
                              vs_leader={x: lk[x] for x in ("ratio", "ci", "units")})
    for k in alive:
        if not whole:
            out[k]["state"] = "cut short"
    # a member still in that never ran leaves the race without a leader: none is ahead of it
    lead = leader_of({k: speed[k] for k in alive}) if all(speed[k] for k in alive) else None
    if lead is not None:
        out[lead]["state"] = "leader"
    return {"members": out, "speed": speed, "leader": lead}
