"""Raw decoding against the speculative loop at k = 0 (a "plain" generation: the target's
prefill, then one-token decodes, what adaptive runs when it drafts nothing), on one prompt,
interleaved many times in one process. Recorded adaptive runs show their plain generations a
little slower than raw (bench/research/plain_vs_raw.py); this tells a cost of the loop from chance and
from what ran before (the modes' order).

    python bench/research/plain_ab.py bench/results/NAME/RESULT.json --prompt-id doc-heldout3-4 \\
        --rounds 12 --arms raw,plain [--json OUT.json]

The target, the draft, k, the threads and --max-tokens are the results file's. Each round runs
every arm once, in the orders of a Williams design in turn (cpuspec.harness.order.williams_orders:
each arm runs in each place, and right after each other arm, equally often); `static` runs
the file's k. Prints, per arm, prefill and decode seconds against raw's in the same round:
the mean ratio with a 95 % interval over rounds (≥ 5 rounds; fewer is a range),
and the same split by the arm that ran just before."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tabulate import tabulate  # noqa: E402

from cpuspec.harness.bench import environment  # noqa: E402
from cpuspec.llama.engine import Model, Session  # noqa: E402
from cpuspec.harness.order import williams_orders  # noqa: E402
from cpuspec.results.schema import ResultsError, read_bench  # noqa: E402
from cpuspec.core.speculative import RoundStats, generate_raw, generate_speculative  # noqa: E402
from intervals import mean_interval  # noqa: E402  (bench/research/intervals.py)

ARMS = ("raw", "plain", "static")


class Plain:
    """A policy that never drafts: every round is one target decode of one token."""

    def next_k(self) -> int:
        return 0

    def observe(self, r: RoundStats) -> None:
        pass


def interval(xs: list[float]) -> str:
    return f"{mean_interval(xs, 4)} ({len(xs)})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--prompt-id", required=True)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--arms", default="raw,plain")
    ap.add_argument("--json", type=Path, help="write every timing here (refuses to overwrite)")
    a = ap.parse_args(argv)
    arms = a.arms.split(",")
    if "raw" not in arms or any(x not in ARMS for x in arms) or len(set(arms)) != len(arms):
        print(f"plain_ab.py: --arms must list raw and any of {', '.join(ARMS[1:])}, each once",
              file=sys.stderr)
        return 2
    if a.rounds < 1:
        print("plain_ab.py: --rounds must be at least 1", file=sys.stderr)
        return 2
    if a.json and a.json.exists():
        print(f"plain_ab.py: {a.json} exists; not overwriting it", file=sys.stderr)
        return 2
    try:
        rec = read_bench(a.results)
    except ResultsError as exc:
        print(f"plain_ab.py: {exc}", file=sys.stderr)
        return 1
    texts = {p["prompt_id"]: p["text"] for p in rec.get("prompts", [])}
    if a.prompt_id not in texts:
        print(f"plain_ab.py: {a.results} has no prompt {a.prompt_id}", file=sys.stderr)
        return 1
    s = rec["settings"]
    k, n_out, threads = s["k"], s["max_tokens"], s["threads"]
    out = {"kind": "plain_ab", "meta": environment(threads), "source": str(a.results),
           "prompt_id": a.prompt_id, "arms": arms, "k": k, "max_tokens": n_out, "rounds": []}
    with Model(rec["models"]["target"]["path"]) as tm, \
            Model(rec["models"]["draft"]["path"]) as dm:
        prompt = tm.tokenize(tm.format_chat(texts[a.prompt_id]))
        n_ctx = len(prompt) + n_out + k + 16
        with Session(tm, n_ctx, threads) as t, Session(dm, n_ctx, threads) as d:
            def run(arm):
                if arm == "raw":
                    return generate_raw(t, prompt, n_out)
                return generate_speculative(t, d, prompt, n_out, Plain() if arm == "plain" else k)
            run("raw")   # warm-up, not recorded
            prev = "raw"
            # the orders of a Williams design in turn, so each arm follows each other arm
            # equally often (a rotation of three would put one arm always after the same other)
            orders = [[arms[i] for i in row] for row in williams_orders(len(arms))]
            for i in range(a.rounds):
                order = orders[i % len(orders)]
                row = {}
                for arm in order:
                    g = run(arm)
                    row[arm] = {"prefill_s": g.prefill_s, "decode_s": g.decode_s,
                                "draft_prefill_s": g.draft_prefill_s, "tokens": g.tokens,
                                "after": prev}
                    prev = arm
                out["rounds"].append(row)
                print(f"round {i + 1}/{a.rounds}: " + ", ".join(
                    f"{arm} {row[arm]['prefill_s']:.3f}+{row[arm]['decode_s']:.3f} s"
                    for arm in order), file=sys.stderr)
    out["prompt_tokens"] = len(prompt)
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    table = []
    for arm in arms[1:]:
        for after in [None, *arms]:
            sel = [r for r in out["rounds"] if after is None or r[arm]["after"] == after]
            if not sel or after == arm or (after and len(sel) == len(out["rounds"])):
                continue
            table.append([arm, after or "any",
                          interval([r[arm]["prefill_s"] / r["raw"]["prefill_s"] for r in sel]),
                          interval([r[arm]["decode_s"] / r["raw"]["decode_s"] for r in sel]),
                          sum(r[arm]["tokens"] == r["raw"]["tokens"] for r in sel)])
    print(f"{a.prompt_id}: {len(prompt)} prompt tokens, {n_out} tokens, {a.rounds} rounds; "
          f"ratios to raw in the same round")
    print(tabulate(table, ["arm", "ran after", "target prefill", "decode", "same tokens"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
