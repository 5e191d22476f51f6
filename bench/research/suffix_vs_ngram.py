#!/usr/bin/env python3
"""What SuffixDecoding-style matching would add over cpuspec's n-gram lookup, offline.

Replays drafters against the target's own greedy output (the raw runs of recorded benches:
greedy SD emits exactly those tokens, whatever drafts), and prices every round with the run's
own cost probe (a drafter that costs nothing: a round costs V(drafts + 1)). Per task it prints
tokens per round, drafts per round, acceptance and the decode-window speedup of:

  ngram    cpuspec's lookup: the latest earlier occurrence of the last 6..2 tokens, in the
           prompt and the output so far, continued token by token (lookup.NgramIndex)
  suffix   SuffixDecoding-style (Oliaro et al. 2024), one path: the longest suffix of the
           context (up to 16 tokens) that occurred before, then at each step the most frequent
           next token among all occurrences of the pattern so far (latest on a tie), for at
           most match-length tokens (its adaptive speculation length)
  suffix+  the same over a corpus that also holds the earlier prompts' outputs of the run
           (SuffixDecoding's global tree over previous requests)

Usage: python bench/research/suffix_vs_ngram.py RUN.json [RUN.json ...] [-k 8]
"""
from __future__ import annotations

import argparse
import statistics
from collections import Counter, defaultdict
from pathlib import Path

from cpuspec.llama.engine import Model
from cpuspec.core.lookup import NgramIndex
from cpuspec.core.speculative import NO_DRAFT
from cpuspec.results.schema import load_json

MAX_PATTERN = 16


class SuffixIndex:
    """Every pattern of 1..MAX_PATTERN tokens of a growing corpus, with the tokens that
    followed each occurrence (in order)."""

    def __init__(self):
        self.next: dict[tuple, list[int]] = defaultdict(list)
        self.tokens: list[int] = []

    def extend(self, tokens, separate: bool = False) -> None:
        if separate:   # another document: no pattern spans the boundary
            self.tokens.append(-1)
        for tok in tokens:
            h = self.tokens
            for n in range(1, min(MAX_PATTERN, len(h)) + 1):
                pat = tuple(h[len(h) - n:])
                if -1 not in pat:
                    self.next[pat].append(tok)
            h.append(tok)

    def draft(self, context: list[int], k: int) -> list[int]:
        n = min(MAX_PATTERN, len(context))
        while n > 0 and tuple(context[len(context) - n:]) not in self.next:
            n -= 1
        if n == 0:
            return []
        pattern, out = list(context[len(context) - n:]), []
        for _ in range(min(k, n)):
            follow = self.next.get(tuple(pattern[-MAX_PATTERN:]))
            if not follow:
                break
            counts = Counter(follow)
            top = max(counts.values())
            tok = next(t for t in reversed(follow) if counts[t] == top)   # latest on a tie
            out.append(tok)
            pattern.append(tok)
        return out


def ngram_drafts(index: NgramIndex, k: int) -> list[int]:
    drafts = []
    for _ in range(k):
        tok, _ = index.match()
        if tok == NO_DRAFT:
            break
        drafts.append(tok)
        index.append([tok])
    index.truncate(len(index) - len(drafts))
    return drafts


def replay(prompt: list[int], out: list[int], k: int, drafter: str,
           corpus: SuffixIndex | None) -> list[tuple[int, int]]:
    """(drafted, accepted) per round over one greedy output."""
    rounds = []
    if drafter == "ngram":
        index = NgramIndex()
        index.append(prompt + out[:1])
    else:
        suffix = corpus if corpus is not None else SuffixIndex()
        start = len(suffix.tokens)
        suffix.extend(prompt + out[:1], separate=bool(start))
    i = 1
    while i < len(out):
        budget = min(k, len(out) - i - 1)
        if drafter == "ngram":
            drafts = ngram_drafts(index, budget) if budget > 0 else []
        else:
            drafts = suffix.draft(prompt + out[:i], budget) if budget > 0 else []
        acc = 0
        while acc < len(drafts) and drafts[acc] == out[i + acc]:
            acc += 1
        emitted = out[i:i + acc + 1]
        if drafter == "ngram":
            index.append(emitted)
        else:
            suffix.extend(emitted)
        rounds.append((len(drafts), acc))
        i += acc + 1
    return rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("-k", type=int, default=8)
    args = ap.parse_args()
    rows = []
    for path in args.runs:
        res = load_json(path)
        verify = {int(n): v for n, v in res["cost_probe"]["verify_s"].items()}
        k = min(args.k, max(verify) - 1)   # an older probe may stop short of V(k + 1)
        texts = {p["prompt_id"]: p for p in res["prompts"]}
        with Model(Path(res["models"]["target"]["path"])) as m:
            def prompt_tokens(pid: str) -> list[int]:
                p = texts[pid]
                if p.get("followup"):
                    first = res["followups"][pid]["first_answer"]
                    return m.tokenize(m.format_chat(p["followup"], [(p["text"], first)]))
                return m.tokenize(m.format_chat(p["text"]))
            raws = [r for r in res["runs"] if r["mode"] == "raw" and r.get("repetition", 0) == 0]
            for task in dict.fromkeys(r["task"] for r in raws):
                shared = SuffixIndex()
                for drafter in ("ngram", "suffix", "suffix+"):
                    rounds = []
                    for r in (x for x in raws if x["task"] == task):
                        rounds += replay(prompt_tokens(r["prompt_id"]), r["tokens"], k,
                                         drafter.rstrip("+"),
                                         shared if drafter == "suffix+" else None)
                    n_tok = sum(a + 1 for _, a in rounds)
                    raw_s = n_tok * verify[1]
                    sd_s = sum(verify[d + 1] for d, _ in rounds)
                    drafted = sum(d for d, _ in rounds)
                    rows.append([path.stem, task, k, drafter, len(rounds),
                                 f"{n_tok / len(rounds):.2f}",
                                 f"{drafted / len(rounds):.2f}",
                                 f"{100 * sum(a for _, a in rounds) / max(drafted, 1):.0f}",
                                 f"{raw_s / sd_s:.2f}"])
    from tabulate import tabulate
    print(tabulate(rows, headers=["run", "task", "k", "drafter", "rounds", "a (tokens/round)",
                                  "drafts/round", "accept %", "decode ×raw (probe)"],
                   disable_numparse=True))
    print("\neach round priced at V(drafts + 1) from the run's cost probe "
          "(lookup drafts cost ~nothing); median over tasks of suffix ÷ ngram: "
          + f"{statistics.median(float(r[8]) for r in rows if r[3] == 'suffix') / statistics.median(float(r[8]) for r in rows if r[3] == 'ngram'):.2f}")


if __name__ == "__main__":
    main()
