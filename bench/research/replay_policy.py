"""Replay the current adaptive policy on recorded bench runs, without a model: how its
decisions would fare on each task's recorded acceptance and costs (cpuspec/analysis/replay.py says what
the replay uses and what it leaves out). For checking a change to cpuspec/core/policy.py against the
runs that exist before spending a real run on it; the figures it prints are not measurements.

    python bench/research/replay_policy.py RESULT.json [RESULT.json ...] [--tasks T,U] [--max-tokens N]
                                  [--passes P] [--against REV] [--skip]

Per task: the replayed static ÷ raw and adaptive ÷ raw and ÷ static, the share of rounds that
drafted, and beside them the run's own recorded static ÷ raw and adaptive ÷ raw, to show how
far the replay is from the run. --passes P runs the prompts P times over (the policy's state
carries over), for the learning cost spread over more prompts. --against REV replays the policy
of git revision REV too (its cpuspec/core/policy.py) and prints its adaptive ÷ static beside.
--skip leaves out, and names on stderr, files and tasks that cannot be replayed (no cost probe,
no static or raw mode: a glob over bench/results/ holds many). The last lines hold each policy
to the adaptive goal (≥ 0.95× static where the replayed static wins, ≥ 0.97× raw where it
loses): its lowest row on each side and the rows below the goal; and, over the rows replayed
at their run's own length, how far the replayed static ÷ raw is from the run's own."""
import argparse
import subprocess
import sys
import types
from pathlib import Path

from tabulate import tabulate

from cpuspec.analysis.replay import Replay, ReplayError, recorded_ratio
from cpuspec.results.schema import ResultsError, read_json

ROOT = Path(__file__).resolve().parents[2]
GOAL_WINS, GOAL_LOSES = 0.95, 0.97


def fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


def policy_at(rev: str) -> type:
    """The AdaptivePolicy class of the policy module at git revision `rev`
    (cpuspec/core/policy.py, or cpuspec/policy.py before the package layout)."""
    for path in ("cpuspec/core/policy.py", "cpuspec/policy.py"):
        src = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True,
                             cwd=ROOT)
        if not src.returncode:
            break
    else:
        raise ReplayError(f"cannot read the policy at {rev!r}: "
                          f"{src.stderr.strip() or 'git failed'}")
    mod = types.ModuleType(f"cpuspec.core.policy_at_{rev}")
    # an old flat module's relative imports (.costs, .speculative) resolve in today's core/
    mod.__package__ = "cpuspec.core"
    sys.modules[mod.__name__] = mod  # where @dataclass looks its module up
    exec(compile(src.stdout, f"{rev}:{path}", "exec"), mod.__dict__)
    return mod.AdaptivePolicy


def goal_ratio(raw_s: float, static_s: float, adaptive_s: float) -> tuple[bool, float]:
    """(static wins, adaptive ÷ static where it wins else adaptive ÷ raw)."""
    wins = raw_s > static_s
    return wins, (static_s if wins else raw_s) / adaptive_s


def rows(path: Path, tasks: list[str] | None, max_tokens: int | None, passes: int,
         against: type | None, goals: dict, skip: bool = False) -> list:
    rec = read_json(path)
    if rec.get("kind") != "bench":
        raise ReplayError("not a bench results file")
    n = max_tokens or int(rec["settings"]["max_tokens"])
    out = []
    for task in tasks or list(dict.fromkeys(r["task"] for r in rec["runs"])):
        try:
            r = Replay(rec, task)
        except ReplayError as exc:
            if not skip:
                raise
            print(f"replay_policy.py: {path}: skipped: {exc}", file=sys.stderr)
            continue
        res = r.run(r.policy(), n, prompts=r.prompts * passes)
        static_s = res.static_s
        goals.setdefault("current", []).append(
            (*goal_ratio(res.raw_s, static_s, res.adaptive_s), path.name, task))
        measured = recorded_ratio(rec, task, "static", "raw")
        if measured and passes == 1 and n == int(rec["settings"]["max_tokens"]):
            goals.setdefault("fidelity", []).append(
                (abs(res.raw_s / static_s / measured - 1.0), path.name, task))
        rounds = [k for ks in res.ks for k in ks]
        row = [path.name, task, len(r.prompts), n,
               fmt(res.raw_s / static_s), fmt(res.raw_s / res.adaptive_s),
               fmt(static_s / res.adaptive_s)]
        if against is not None:
            old = r.run(r.policy(against), n, prompts=r.prompts * passes)
            goals.setdefault("against", []).append(
                (*goal_ratio(old.raw_s, old.static_s, old.adaptive_s), path.name, task))
            row.append(fmt(old.static_s / old.adaptive_s))
        out.append(row + [f"{sum(k > 0 for k in rounds) / len(rounds):.0%}" if rounds else "—",
                          fmt(measured),
                          fmt(recorded_ratio(rec, task, "adaptive", "raw"))])
    return out


def goal_lines(goals: dict, rev: str | None) -> list[str]:
    lines = []
    if goals.get("fidelity"):   # how far the replay's static mode is from the run's
        errs = goals["fidelity"]
        worst = max(errs)
        lines.append(f"replayed static ÷ raw against the run's own, over {len(errs)} task rows "
                     f"at their own length: {100 * sum(e for e, *_ in errs) / len(errs):.1f} % "
                     f"off on average, at most {100 * worst[0]:.1f} % ({worst[2]}, {worst[1]})")
    for key, name in (("current", "this policy"), ("against", f"the policy at {rev}")):
        got = goals.get(key)
        if not got:
            continue
        parts = []
        for wins, goal, side in ((True, GOAL_WINS, "static wins"),
                                 (False, GOAL_LOSES, "static loses")):
            side_rows = [g for g in got if g[0] == wins]
            if side_rows:
                low = min(side_rows, key=lambda g: g[1])
                below = sum(g[1] < goal for g in side_rows)
                parts.append(f"{side} on {len(side_rows)}: lowest {low[1]:.3f} "
                             f"({low[3]}, {low[2]}), {below} below {goal}")
        lines.append(f"{name}: " + "; ".join(parts))
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--tasks", help="comma-separated tasks (default: every task of the run)")
    ap.add_argument("--max-tokens", type=int, help="answer length (default: the run's)")
    ap.add_argument("--passes", type=int, default=1, help="times over the prompts (default 1)")
    ap.add_argument("--skip", action="store_true",
                    help="leave out (and name) files and tasks that cannot be replayed")
    ap.add_argument("--against", metavar="REV",
                    help="also replay the policy of this git revision (e.g. 1e4beea)")
    a = ap.parse_args()
    if a.passes < 1 or (a.max_tokens is not None and a.max_tokens < 2):
        ap.error("--passes must be ≥ 1 and --max-tokens ≥ 2")
    tasks = [t for t in a.tasks.split(",") if t] if a.tasks else None
    table, goals = [], {}
    try:
        against = policy_at(a.against) if a.against else None
    except (ReplayError, SyntaxError, AttributeError, ImportError) as exc:
        print(f"replay_policy.py: {exc}", file=sys.stderr)
        return 2
    for path in a.results:
        try:
            table += rows(path, tasks, a.max_tokens, a.passes, against, goals, a.skip)
        except (ResultsError, ReplayError, KeyError, TypeError, ValueError) as exc:
            if not a.skip:
                print(f"replay_policy.py: {path}: {exc}", file=sys.stderr)
                return 2
            print(f"replay_policy.py: {path}: skipped: {exc}", file=sys.stderr)
    if not table:
        print("replay_policy.py: nothing to replay", file=sys.stderr)
        return 2
    headers = ["run", "task", "prompts", "tokens", "static ÷ raw", "adaptive ÷ raw",
               "adaptive ÷ static"] + ([f"{a.against}: adaptive ÷ static"] if against else []) \
        + ["rounds drafting", "run: static ÷ raw", "run: adaptive ÷ raw"]
    print(tabulate(table, headers=headers, disable_numparse=True))
    print("replayed at steady costs, acceptance from the static rounds: decisions, not "
          "timings (cpuspec/analysis/replay.py)")
    for line in goal_lines(goals, a.against):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
