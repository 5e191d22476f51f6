"""What the draft window costs in acceptance, before any timing: for each prompt of recorded
bench runs, the draft reads the whole prompt, or a window of it (--draft-window HEAD,TAIL),
and then the raw run's recorded output, teacher-forced. Where the draft's greedy guess matches
the output token it would have been accepted: with greedy verification and the draft's
context equal to the output until its first miss, these matches give the rounds of a static k
(the tokens per round in each cell; exactly, but for near-ties a batched decode breaks
differently), without the target model.

    python bench/research/window_acceptance.py \\
        bench/results/NAME/adaptive_long_q8_0_k7_n128.json.gz --windows 256,256 64,448 128,128 -k 7

Prints per prompt: the prompt's tokens, then per window `match %/tokens per round`; a last
row over all prompts. The draft is the run's (models.draft.path), read with 2 threads."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tabulate import tabulate  # noqa: E402

from cpuspec.llama.engine import Model, Session  # noqa: E402
from cpuspec.core.window import parse_window, window_tokens  # noqa: E402
from cpuspec.results.schema import load_json  # noqa: E402


def rounds_of(match: list[bool], k: int) -> int:
    """Rounds a static k takes over an output whose tokens the draft guesses as `match` says:
    each round accepts the matches from its start, up to k, then adds the target's token."""
    i = n = 0
    while i < len(match):
        a = 0
        while a < k and i + a < len(match) and match[i + a]:
            a += 1
        n, i = n + 1, i + a + 1
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--windows", nargs="+", default=["256,256"])
    ap.add_argument("-k", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    try:
        windows = [None] + [parse_window(w) for w in args.windows]
        docs = [load_json(f) for f in args.files]
    except (ValueError, OSError) as exc:
        print(f"window_acceptance.py: {exc}", file=sys.stderr)
        return 2
    paths = {d["models"]["draft"].get("path") for d in docs}
    if len(paths) != 1 or None in paths:
        print("window_acceptance.py: the files must share one draft model file", file=sys.stderr)
        return 2
    names = ["whole" if w is None else f"{w[0]},{w[1]}" for w in windows]
    rows, totals = [], [[0, 0] for _ in windows]   # per window: tokens, rounds
    with Model(paths.pop()) as m:
        longest = max(len(m.tokenize(m.format_chat(p["text"]))) for d in docs
                      for p in d["prompts"])
        most = max(len(r["tokens"]) for d in docs for r in d["runs"])
        with Session(m, longest + most + 16, args.threads) as s:
            for d in docs:
                texts = {p["prompt_id"]: p["text"] for p in d["prompts"]}
                for r in (r for r in d["runs"] if r["mode"] == "raw"):
                    prompt = m.tokenize(m.format_chat(texts[r["prompt_id"]]))
                    out = r["tokens"]
                    row = [r["prompt_id"], len(prompt)]
                    for w, tot in zip(windows, totals):
                        ctx = window_tokens(prompt, *w) if w else prompt
                        s.truncate(0)
                        guesses = s.eval(ctx, 0, 1)
                        if len(out) > 1:
                            guesses += s.eval(out[:-1], len(ctx), len(out) - 1)
                        match = [g == t for g, t in zip(guesses, out)]
                        n = rounds_of(match, args.k)
                        tot[0] += len(out)
                        tot[1] += n
                        row.append(f"{100 * sum(match) / len(out):.0f}%/{len(out) / n:.2f}")
                    rows.append(row)
                    print(*row, sep="\t", file=sys.stderr, flush=True)
    rows.append(["(every prompt)", ""] + [f"{t / n:.2f}" for t, n in totals])
    print(f"teacher-forced draft guesses on the raw runs' outputs, k = {args.k}: match %/"
          "tokens per round")
    print(tabulate(rows, headers=["prompt", "prompt tokens", *names]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
