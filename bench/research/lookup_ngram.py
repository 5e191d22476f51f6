#!/usr/bin/env python3
"""Choose the prompt-lookup drafter's n-gram range offline, from a recorded run.

Replays the drafter against the target's own greedy output (the raw runs of a `--drafter
lookup` bench; greedy SD emits exactly those tokens) and prices every round with the verify-cost
curve of bench/results/costs_q4_0.json: acceptance, tokens per round and the decode-window
speedup of each n-gram range, chosen on grounded-1..4, then shown for grounded-5..8.

Usage: python bench/research/lookup_ngram.py [bench/results/lookup_q4_0_k3.json.gz]
       python bench/research/lookup_ngram.py --by-length RUN.json...
The second form is for the hybrid drafter: per task, how often a lookup guess equals the
target's next token, by the length of the n-gram it matched (1..8), over the raw runs' output,
beside the draft model's acceptance of its first draft in the same runs (when they drafted with a
model): where lookup guesses worse than the model, the hybrid should ask the model.
"""
import sys

from cpuspec.llama.engine import Model
from cpuspec.core.lookup import NgramIndex
from cpuspec.core.speculative import NO_DRAFT
from cpuspec.results.schema import load_json

def lookup_match(history, ngram_max, ngram_min):
    """(the token after the latest earlier occurrence of history's last n tokens, n), the
    longest n matching; (NO_DRAFT, 0) when none does: cpuspec's NgramIndex over history."""
    index = NgramIndex(ngram_max, ngram_min)
    index.append(history)
    return index.match()


def lookup_next(history, ngram_max, ngram_min):
    return lookup_match(history, ngram_max, ngram_min)[0]


RANGES = [(3, 1), (3, 2), (4, 2), (6, 2), (8, 2), (8, 3)]
CHOOSE_ON = {f"grounded-{i}" for i in (1, 2, 3, 4)}


def replay(raws, prompts, verify, nmax, nmin, k=3):
    """(acceptance, tokens per round, decode speedup) of lookup drafting at k over raws."""
    drafted = accepted = rounds = emitted = 0
    seconds = 0.0
    for r in raws:
        out = r["tokens"]
        hist = list(prompts[r["prompt_id"]]) + out[:1]
        i = 1
        while i < len(out):
            drafts, h = [], list(hist)
            for _ in range(min(k, len(out) - i - 1)):
                tok = lookup_next(h, nmax, nmin)
                if tok == NO_DRAFT:
                    break
                drafts.append(tok)
                h.append(tok)
            n_acc = next((j for j, t in enumerate(drafts) if out[i + j] != t), len(drafts))
            hist += out[i:i + n_acc + 1]
            i += n_acc + 1
            drafted, accepted = drafted + len(drafts), accepted + n_acc
            rounds, emitted = rounds + 1, emitted + n_acc + 1
            seconds += verify[len(drafts) + 1]
    return accepted / max(drafted, 1), emitted / rounds, emitted * verify[1] / seconds


def by_length(paths: list[str]) -> None:
    from cpuspec.analysis.summary import summarize
    for path in paths:
        run = load_json(path)
        with Model(run["models"]["target"]["path"]) as m:
            prompts = {p["prompt_id"]: m.tokenize(m.format_chat(p["text"]))
                       for p in run["prompts"]}
        summary = summarize(run)
        print(path)
        for task in dict.fromkeys(r["task"] for r in run["runs"]):
            hits: dict[int, list[int]] = {}
            for r in run["runs"]:
                if r["mode"] != "raw" or r["task"] != task:
                    continue
                hist, out = list(prompts[r["prompt_id"]]), r["tokens"]
                for i in range(1, len(out)):
                    tok, n = lookup_match(hist + out[:i], 8, 1)
                    if n:
                        hits.setdefault(n, []).append(int(tok == out[i]))
            positions = sum(len(r["tokens"]) - 1 for r in run["runs"]
                            if r["mode"] == "raw" and r["task"] == task)
            cells = ", ".join(f"n={n}: {100 * sum(h) / len(h):.0f}% of {len(h)}"
                              for n, h in sorted(hits.items()))
            first = summary[task].get("per_position_acceptance_pct", [None])[0] \
                if run["settings"].get("drafter", "model") == "model" else None
            print(f"  {task}: {positions} positions; lookup guess right, by match length: "
                  f"{cells}" + (f"; the model's first draft accepted {first:.0f}%"
                                if first is not None else ""))


def main() -> None:
    if sys.argv[1:2] == ["--by-length"]:
        return by_length(sys.argv[2:])
    run = load_json(sys.argv[1] if len(sys.argv) > 1 else "bench/results/lookup_q4_0_k3.json.gz")
    probe = load_json("bench/results/costs_q4_0.json")["cost_probe"]
    verify = {int(n): v for n, v in probe["verify_s"].items()}
    raws = [r for r in run["runs"] if r["mode"] == "raw"]
    with Model(run["models"]["target"]["path"]) as m:
        prompts = {p["prompt_id"]: m.tokenize(m.format_chat(p["text"])) for p in run["prompts"]}
    for label, subset in (("choose on grounded-1..4", [r for r in raws
                                                        if r["prompt_id"] in CHOOSE_ON]),
                          ("left out: grounded-5..8", [r for r in raws
                                                       if r["prompt_id"] not in CHOOSE_ON])):
        print(label)
        for nmax, nmin in RANGES:
            acc, a, speedup = replay(subset, prompts, verify, nmax, nmin)
            print(f"  n-gram {nmax}..{nmin}: acceptance {acc:.1%}, tokens/round {a:.2f}, "
                  f"decode speedup {speedup:.3f}")


if __name__ == "__main__":
    main()
