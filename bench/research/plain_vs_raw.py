"""Adaptive generations that never drafted, against raw on the same prompt: the same
computation (the target's prefill, then one-token decodes), so any difference between the two
is noise or the cost of running raw decoding through the speculative loop and its policy.

    python bench/research/plain_vs_raw.py RESULT.json [RESULT.json ...] [--by-order]

Per file and over all of them: how many such generations, and the mean of adaptive ÷ raw
seconds for the target's prefill and for the decode, with a 95 % interval (mean ± 1.96 standard
errors over generations; each prompt is one unit), and the decode ratio's median and range (how
much identical work varies between modes on this machine). Only generations with as many
tokens as raw's count (an answer that parts at a near-tie may end at another length).
--by-order pools them by the order bench ran the prompt's modes in (cpuspec.harness.order.mode_order),
to see whether a mode pays for what ran just before it."""
import argparse
import statistics
import sys

from tabulate import tabulate

from cpuspec.harness.order import mode_order
from cpuspec.results.schema import ResultsError, read_bench
from cpuspec.analysis.stats import raw_by_unit, raw_of
from intervals import mean_interval as interval  # bench/research/intervals.py


def ratios(rec: dict, by_order: dict | None = None) -> list[tuple[float, float]]:
    """(prefill, decode) of adaptive ÷ raw, per adaptive generation that never drafted; with
    by_order, each is also added to by_order[the order the prompt's modes ran in]."""
    raw = raw_by_unit(rec["runs"])
    modes = ["raw", *(rec["settings"].get("policies") or [])]
    # bench measures prompts (and repetitions) in the order their runs are stored
    index = {u: i for i, u in enumerate(dict.fromkeys(
        (r["prompt_id"], r.get("repetition", 0)) for r in rec["runs"]), 1)}
    out = []
    for r in rec["runs"]:
        base = raw_of(raw, r)
        if r["mode"] != "adaptive" or base is None or any(row[0] for row in r["rounds"]):
            continue
        if len(r["token_latencies_s"]) != len(base["token_latencies_s"]) or \
                not base["prefill_s"] or not base["decode_s"]:
            continue
        out.append((r["prefill_s"] / base["prefill_s"], r["decode_s"] / base["decode_s"]))
        if by_order is not None:
            order = ",".join(mode_order(modes, index[(r["prompt_id"], r.get("repetition", 0))],
                                        rec["settings"].get("mode_order", "rotate")))
            by_order.setdefault(order, []).append(out[-1])
    return out


def columns(got: list[tuple[float, float]]) -> list:
    decode = [d for _, d in got]
    return [len(got), interval([p for p, _ in got]), interval(decode),
            f"{statistics.median(decode):.3f} ({min(decode):.3f}-{max(decode):.3f})"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--by-order", action="store_true",
                    help="pool by the order the prompt's modes ran in, not by file")
    a = ap.parse_args()
    table, pooled, by_order = [], [], {}
    for path in a.results:
        try:
            rec = read_bench(path)
        except ResultsError as exc:
            print(f"plain_vs_raw.py: {exc}", file=sys.stderr)
            return 1
        got = ratios(rec, by_order)
        pooled += got
        if got and not a.by_order:
            table.append([path.rsplit("/", 1)[-1], *columns(got)])
    if not pooled:
        print("plain_vs_raw.py: no adaptive generation that never drafted, with a raw one "
              "beside it", file=sys.stderr)
        return 1
    if a.by_order:
        table = [[f"modes ran {order}", *columns(got)] for order, got in sorted(by_order.items())]
    table.append(["all", *columns(pooled)])
    print(tabulate(table, headers=["run", "generations", "prefill adaptive ÷ raw",
                                   "decode adaptive ÷ raw", "decode median (range)"],
                   disable_numparse=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
