"""Every generation of a bench run, one line each: where its end-to-end time went (the target's
prefill, the draft's prefill, the decode), how many rounds drafted, and its speed against the
raw mode's on the same prompt (raw seconds ÷ its seconds, both end to end). For finding which
prompt and which phase moved a task's ratio.

    python bench/per_prompt.py RESULT.json [--tasks T,U]
"""
import argparse
import sys

from tabulate import tabulate

from cpuspec.schema import ResultsError, read_bench
from cpuspec.stats import raw_by_unit, raw_of


def rows(rec: dict, tasks: list[str] | None) -> list[list]:
    raw = raw_by_unit(rec["runs"])
    out = []
    for r in rec["runs"]:
        if tasks and r["task"] not in tasks:
            continue
        base = raw_of(raw, r)
        out.append([r["prompt_id"], r.get("repetition", 0), r["mode"], r["prompt_tokens"],
                    f"{r['prefill_s']:.2f}", f"{r.get('draft_prefill_s') or 0.0:.2f}",
                    f"{r['decode_s']:.2f}", f"{r['e2e_s']:.2f}",
                    sum(1 for row in r.get("rounds", []) if row[0] > 0),
                    f"{base['e2e_s'] / r['e2e_s']:.2f}×" if base else "—"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("result")
    ap.add_argument("--tasks", help="comma-separated tasks (default: all)")
    a = ap.parse_args()
    try:
        rec = read_bench(a.result)
        table = rows(rec, [t for t in a.tasks.split(",") if t] if a.tasks else None)
    except (ResultsError, KeyError, TypeError) as exc:
        print(f"per_prompt.py: {exc}", file=sys.stderr)
        return 2
    if not table:
        print(f"per_prompt.py: no generations of {a.tasks} in {a.result}", file=sys.stderr)
        return 2
    print(tabulate(table, headers=["prompt", "rep", "mode", "prompt tokens", "target prefill s",
                                   "draft prefill s", "decode s", "e2e s", "rounds drafting",
                                   "raw e2e ÷ this"], disable_numparse=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
