"""Replay the current adaptive policy on recorded bench runs, without a model: how its
decisions would fare on each task's recorded acceptance and costs (cpuspec/replay.py says what
the replay uses and what it leaves out). For checking a change to cpuspec/policy.py against the
runs that exist before spending a real run on it; the figures it prints are not measurements.

    python bench/replay_policy.py RESULT.json [RESULT.json ...] [--tasks T,U] [--max-tokens N]
                                  [--passes P]

Per task: the replayed static ÷ raw and adaptive ÷ raw and ÷ static, the share of rounds that
drafted, and beside them the run's own recorded static ÷ raw and adaptive ÷ raw, to show how
far the replay is from the run. --passes P runs the prompts P times over (the policy's state
carries over), for the learning cost spread over more prompts."""
import argparse
import sys
from pathlib import Path

from tabulate import tabulate

from cpuspec.replay import Replay, ReplayError, recorded_ratio
from cpuspec.schema import ResultsError, read_json


def fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


def rows(path: Path, tasks: list[str] | None, max_tokens: int | None, passes: int) -> list:
    rec = read_json(path)
    if rec.get("kind") != "bench":
        raise ReplayError("not a bench results file")
    n = max_tokens or int(rec["settings"]["max_tokens"])
    out = []
    for task in tasks or list(dict.fromkeys(r["task"] for r in rec["runs"])):
        r = Replay(rec, task)
        res = r.run(r.policy(), n, prompts=r.prompts * passes)
        static_s = res.static_s
        rounds = [k for ks in res.ks for k in ks]
        out.append([path.name, task, len(r.prompts), n,
                    fmt(res.raw_s / static_s), fmt(res.raw_s / res.adaptive_s),
                    fmt(static_s / res.adaptive_s),
                    f"{sum(k > 0 for k in rounds) / len(rounds):.0%}" if rounds else "—",
                    fmt(recorded_ratio(rec, task, "static", "raw")),
                    fmt(recorded_ratio(rec, task, "adaptive", "raw"))])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--tasks", help="comma-separated tasks (default: every task of the run)")
    ap.add_argument("--max-tokens", type=int, help="answer length (default: the run's)")
    ap.add_argument("--passes", type=int, default=1, help="times over the prompts (default 1)")
    a = ap.parse_args()
    if a.passes < 1 or (a.max_tokens is not None and a.max_tokens < 2):
        ap.error("--passes must be ≥ 1 and --max-tokens ≥ 2")
    tasks = [t for t in a.tasks.split(",") if t] if a.tasks else None
    table = []
    for path in a.results:
        try:
            table += rows(path, tasks, a.max_tokens, a.passes)
        except (ResultsError, ReplayError, KeyError, TypeError, ValueError) as exc:
            print(f"replay_policy.py: {path}: {exc}", file=sys.stderr)
            return 2
    print(tabulate(table, headers=["run", "task", "prompts", "tokens", "static ÷ raw",
                                   "adaptive ÷ raw", "adaptive ÷ static", "rounds drafting",
                                   "run: static ÷ raw", "run: adaptive ÷ raw"],
                   disable_numparse=True))
    print("replayed at steady costs, acceptance from the static rounds: decisions, not "
          "timings (cpuspec/replay.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
