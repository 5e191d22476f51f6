"""Issue 69's leftover: is a bench run's cost probe contradicted by the run's own measurement?
Every recorded bench file under bench/results/ (a draft model, the serial schedule): per task,
the decode-only SD ×raw's low end (the 95 % interval's from 5 prompts, the slowest prompt's
below) over the probe's ceiling at the run's k (every draft accepted: a bound, if the probe
describes the run). analysis/predict.py probe_contradicted flags a run where this exceeds 1.
Files under a folder named `disturbed` were recorded with a CPU hog beside the probe
(bench/disturbed_probe.sh) and are counted apart; prompts of 256 tokens or more (the long
tasks, whose probe ran at one prompt's position) are counted apart too.

    python bench/probe_ceiling_check.py > bench/results/probe_ceiling_check.txt
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cpuspec.analysis.predict import ceiling_checks  # noqa: E402
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
        out += [{"file": name, "group": group, **c} for c in ceiling_checks(doc)]
    return out


def main() -> None:
    from tabulate import tabulate
    found = sorted(rows(), key=lambda r: (r["group"], -r["low"] / r["ceiling"]))
    print(tabulate([[r["group"], r["file"], r["task"], r["units"], r["k"],
                     f"{r['ceiling']:.2f}", f"{r['low']:.2f}", f"{r['low'] / r['ceiling']:.2f}",
                     "yes" if r["low"] > r["ceiling"] else ""] for r in found],
                   headers=["group", "file", "task", "prompts", "k", "ceiling", "low end",
                            "low ÷ ceiling", "flagged"]))
    print()
    for group in ("short", "long", "disturbed"):
        mine = [r["low"] / r["ceiling"] for r in found if r["group"] == group]
        if mine:
            print(f"{group}: {len(mine)} tasks, low ÷ ceiling at most {max(mine):.2f}, "
                  f"flagged {sum(1 for x in mine if x > 1)}")


if __name__ == "__main__":
    main()
