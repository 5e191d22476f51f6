"""Issue 60, item 3: every recorded bench file under bench/results/, replayed prompt by prompt in
its recorded order through the sequential design (analysis/sequential.py, unit limit = the
prompts the file has per task), against the verdict of the full fixed run (the 95 % t-interval
over all its prompts). Prints one row per (file, task) with 5 or more prompts, then the
disagreements and the generations the rule would have saved.

    python bench/sequential_replay.py > bench/results/sequential_replay.txt
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cpuspec.analysis.sequential import Design, replay  # noqa: E402
from cpuspec.analysis.stats import paired_units, ratio_stats, unit_speedups  # noqa: E402
from cpuspec.results.schema import ResultsError, read_json  # noqa: E402
from cpuspec.results.store import results_files  # noqa: E402

FIXED = {"faster": "faster", "slower": "slower", "not significant": "no difference"}


def task_rows(path: Path) -> list[dict]:
    try:
        doc = read_json(path)
    except ResultsError:
        return []
    runs = doc.get("runs") or []
    if doc.get("kind") != "bench" or not runs:
        return []
    modes = {r.get("mode") for r in runs}
    per_generation = len(modes)    # the generations one prompt costs in this run
    out = []
    for task in dict.fromkeys(r["task"] for r in runs):
        order = list(dict.fromkeys(r["prompt_id"] for r in runs if r["task"] == task))
        raw = [r for r in runs if r["task"] == task and r["mode"] == "raw"]
        sd = [r for r in runs if r["task"] == task and r["mode"] == "static"]
        ratios = []
        for pid in order:
            units = paired_units([r for r in raw if r["prompt_id"] == pid],
                                 [r for r in sd if r["prompt_id"] == pid])
            if len(units):
                ratios.append(float(unit_speedups(units)[0]))
        if len(ratios) < 5:
            continue
        fixed = FIXED.get(ratio_stats(ratios)["significance"], "-")
        seq = replay(ratios, Design(max_units=len(ratios)))
        out.append({"file": str(path.relative_to(ROOT / "bench/results")).removesuffix(".gz")
                    .removesuffix(".json"), "task": task,
                    "prompts": len(ratios), "fixed": fixed, "sequential": seq["state"],
                    "used": seq["units"],
                    "saved_generations": (len(ratios) - seq["units"]) * per_generation})
    return out


def main() -> None:
    rows = [row for path in results_files(ROOT / "bench/results", recursive=True)
            for row in task_rows(path)]
    from tabulate import tabulate
    print(tabulate([[r["file"], r["task"], r["prompts"], r["fixed"], r["sequential"], r["used"]]
                    for r in rows], headers=["file", "task", "prompts", "fixed run",
                                             "sequential", "prompts used"]))
    same = [r for r in rows if r["sequential"] == r["fixed"]]
    undecided = [r for r in rows if r["sequential"] == "undecided"]
    contra = [r for r in rows if {r["sequential"], r["fixed"]} == {"faster", "slower"}]
    other = [r for r in rows if r not in same and r not in undecided and r not in contra]
    total = sum(r["prompts"] for r in rows)
    used = sum(r["used"] for r in rows)
    print(f"\n{len(rows)} tasks: the same verdict {len(same)}, undecided where the fixed run "
          f"decided {sum(1 for r in undecided if r['fixed'] != 'no difference')}, "
          f"contradicting {len(contra)}, other {len(other)}")
    print(f"prompts used {used} of {total} ({100 * used / total:.0f} %); generations saved "
          f"{sum(r['saved_generations'] for r in rows)}")
    for r in [*contra, *other, *undecided]:
        print(f"  differs: {r['file']} {r['task']}: fixed {r['fixed']}, sequential "
              f"{r['sequential']} after {r['used']} of {r['prompts']}")


if __name__ == "__main__":
    main()
