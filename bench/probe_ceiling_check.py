"""Issue 69's leftover: is a bench run's cost probe contradicted by the run's own measurement?
Every recorded bench file under bench/results/ (a draft model, the serial schedule, no p-min
gate, no draft window): per task, the decode-only SD ×raw's low end (the 95 % interval's from
5 prompts, the slowest prompt's below) over the ceiling at the run's k (every draft accepted:
a bound, if the probe describes the run) of the probe before the prompts and of the one after
them. analysis/predict.py contradicted flags a task above the first ceiling where the second
is not exceeded too: one probe disturbed, not both off (a run with one probe is not judged).
Files under a folder named `disturbed` were recorded with a CPU hog beside the first probe
(bench/disturbed_probe.sh) and are counted apart; so are runs with prompts of 256 tokens or
more (the long tasks, whose probes ran at one prompt's position).

    python bench/probe_ceiling_check.py > bench/results/probe_ceiling_check.txt
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cpuspec.analysis.predict import ceiling_checks, contradicted  # noqa: E402
from cpuspec.results.schema import ResultsError, read_json  # noqa: E402
from cpuspec.results.store import results_files  # noqa: E402

LONG = 256   # prompt tokens: where the long tasks begin (only to group the rows)


def rows() -> list[dict]:
    out = []
    for path in results_files(ROOT / "bench/results", recursive=True):
        try:
            doc = read_json(path)
        except ResultsError:
            continue
        if doc.get("kind") != "bench" or not doc.get("runs"):
            continue
        name = str(path.relative_to(ROOT / "bench/results")).removesuffix(".gz")
        group = ("disturbed" if "disturbed" in path.parts else
                 "long" if max(r["prompt_tokens"] for r in doc["runs"]) >= LONG else "short")
        out += [{"file": name, "group": group, "flagged": contradicted(c), **c}
                for c in ceiling_checks(doc)]
    return out


def main() -> None:
    from tabulate import tabulate
    found = sorted(rows(), key=lambda r: (r["group"], -r["low"] / r["ceiling"]))
    end = [r for r in found if r["ceiling_end"] is not None]
    print(tabulate([[r["group"], r["file"], r["task"], r["units"], r["k"],
                     f"{r['ceiling']:.2f}", "-" if r["ceiling_end"] is None else
                     f"{r['ceiling_end']:.2f}", f"{r['low']:.2f}",
                     f"{r['low'] / r['ceiling']:.2f}", "yes" if r["flagged"] else ""]
                    for r in found],
                   headers=["group", "file", "task", "prompts", "k", "ceiling before",
                            "after", "low end", "low ÷ before", "flagged"]))
    print()
    for group in ("short", "long", "disturbed"):
        mine = [r for r in found if r["group"] == group]
        if not mine:
            continue
        above = [r for r in mine if r["low"] > r["ceiling"]]
        both = [r for r in above if r["ceiling_end"] is not None and r["low"] > r["ceiling_end"]]
        print(f"{group}: {len(mine)} tasks ({sum(1 for r in mine if r in end)} with a probe "
              f"after the prompts), low ÷ ceiling before at most "
              f"{max(r['low'] / r['ceiling'] for r in mine):.2f}; above it {len(above)}, of "
              f"which above the probe after the prompts too {len(both)}; flagged "
              f"{sum(1 for r in mine if r['flagged'])}")


if __name__ == "__main__":
    main()
