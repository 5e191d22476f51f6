"""End to end, with the target's prefill shared between modes.

The target's prefill of a prompt is the same computation in every mode (the same tokens through
the same model, before any draft or decision), and on long inputs it is most of the end-to-end
window (60-75 % of a 128-token answer to a 1-2 k-token input on machine B). Yet on a 2-vCPU VM
its timing wanders between modes: long-doc-4's took 14.5 s in the raw mode and 20.3 s in the
adaptive one (adaptive_long_q8_0_k7_n128_v5), with no other program running and no steal
time. On five prompts one such spell moved long-doc's adaptive ÷ static from 0.97x (shared) to
0.91x (measured).

So, per task of each run, this prints the end-to-end ratios twice: as measured, and with each
generation's target prefill replaced by the mean of its prompt's timings over the modes (the
same repetition; cpuspec.analysis.stats.share_target_prefill, which `cpuspec report` uses too for the
long inputs of one file), so that a ratio holds only what the modes did differently: the draft's
prefill and the decode. Paired by prompt, 95 % interval over ≥ 5 prompts, a range over fewer
(cpuspec.analysis.stats.speedup_stats, through cpuspec.analysis.summary.ratio_fields). Both are measurements;
the second removes one source of noise and adds none, and neither replaces the other.

    python bench/research/shared_prefill.py [--pool] [--digits N] RESULT.json [RESULT.json ...]

--pool adds, per task, one row over the prompts of every file given (each prompt still paired
with its own run's other modes): where one run has 4 prompts of a task and no interval, runs
of the same configuration together have one; and a row over every task of every file. The last
column is the check that the sharing is fair: each mode's target prefill timing against its
prompt's mean over the modes, near 1.00 for every mode where the modes differ by noise alone.
--digits N prints each ratio with N decimals (default 2; the interval's bounds keep two), for a
ratio that sits at a goal such as 0.97.
"""
import argparse
import collections
import sys
from pathlib import Path

from tabulate import tabulate

from cpuspec.report.tables import speedup_cell
from cpuspec.results.schema import ResultsError, read_json
from cpuspec.analysis.stats import share_target_prefill, target_prefill_by_mode
from cpuspec.analysis.summary import ratio_fields

PAIRS = [("static", "raw"), ("adaptive", "raw"), ("adaptive", "static")]


def fmt(base: list[dict], other: list[dict], digits: int = 2) -> str:
    """other ÷ base in the report's own cell: interval, or range below 5 prompts."""
    s = ratio_fields(base, other, "")
    return speedup_cell(s, prefix="", digits=digits) if s["speedup_units"] else "—"


def read_runs(path: Path) -> list[dict]:
    rec = read_json(path)
    if rec.get("kind") != "bench" or "e2e_s" not in (rec.get("runs") or [{}])[0]:
        raise ResultsError(f"{path}: not a bench results file with end-to-end times")
    if (rec.get("settings") or {}).get("schedule") == "parallel":
        raise ResultsError(f"{path}: the parallel schedule prefills both models at once, so "
                           "its target prefill is not the work raw's was: nothing to share")
    return rec["runs"]


def by_mode(runs: list[dict]) -> str:
    """Each mode's target prefill timing against its prompts' mean over the modes: the check
    that sharing it removes noise (about 1.00 each) and hides no real difference."""
    return ", ".join(f"{m} {v:.3f}" for m, v in target_prefill_by_mode(runs).items()) or "—"


def rows(name: str, runs: list[dict], digits: int = 2,
         every_task: bool = False) -> list[list[str]]:
    """Per task (and with every_task, one more row over all of them): both kinds of ratio."""
    out = []
    by_task = collections.defaultdict(list)
    for r in runs:
        by_task[r["task"]].append(r)
    if every_task:
        by_task["(every task)"] = list(runs)
    for task, task_runs in by_task.items():
        modes = {r["mode"] for r in task_runs}
        for kind, rr in (("measured", task_runs),
                         ("prefill shared", share_target_prefill(task_runs))):
            row = [name, task, kind]
            for a, b in PAIRS:
                if a in modes and b in modes:
                    row.append(fmt([r for r in rr if r["mode"] == b],
                                   [r for r in rr if r["mode"] == a], digits))
                else:
                    row.append("—")
            out.append(row + [by_mode(task_runs) if kind == "measured" else ""])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--pool", action="store_true", help="add a row per task over every file")
    ap.add_argument("--digits", type=int, default=2, choices=range(1, 7), metavar="N",
                    help="decimals of each ratio, 1-6 (default 2)")
    a = ap.parse_args()
    pool, paths, digits = a.pool, a.results, a.digits
    table, pooled = [], []
    for i, arg in enumerate(paths):
        try:
            runs = read_runs(Path(arg))
            table += rows(Path(arg).name, runs, digits)
        except (ResultsError, KeyError, TypeError) as exc:
            print(f"shared_prefill.py: {arg}: {exc}", file=sys.stderr)
            return 2
        # one prompt id per file: story-1 of one set is not story-1 of another
        pooled += [{**r, "prompt_id": f"{i}:{r['prompt_id']}"} for r in runs]
    if pool:
        table += rows(f"pooled ({len(paths)} files)", pooled, digits, every_task=True)
    print(tabulate(table, headers=["run", "task", "end to end", *(f"{a} ÷ {b}" for a, b in PAIRS),
                                   "target prefill ÷ its prompt's mean"],
                   disable_numparse=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
