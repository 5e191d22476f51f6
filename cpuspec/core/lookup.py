"""Prompt-lookup drafting (Saxena 2023; llama.cpp's ngram drafters): no draft model.

The drafter guesses that the text continues as it did after the latest earlier occurrence of
its last n tokens (n from NGRAM_MAX down to NGRAM_MIN), in the prompt or the output so far. Its
cost is a search over a few hundred token ids, so c ≈ 0: on a CPU, where a draft model costs
~0.6 target decodes per token, this is where speculation can pay — when the output copies the
input (edits, extraction, refactoring).

It follows the speculative.Decoder protocol, so the same loop drives it; when it has no guess
it answers NO_DRAFT and the round drafts fewer tokens (possibly none: a plain target step).
"""
from __future__ import annotations

from typing import Sequence

from cpuspec.core.speculative import NO_DRAFT
# Longest and shortest n-gram matched. llama.cpp's lookup defaults are 3..1; replaying the
# drafter against recorded greedy output priced with this CPU's verify-cost curve
# (bench/research/lookup_ngram.py, chosen on grounded-1..4) gave 6..2: a 1-gram match is weak evidence,
# and a wrong draft costs a bigger verify batch. Acceptance rose from 40 % to 66 %.
NGRAM_MAX = 6
NGRAM_MIN = 2
# The hybrid asks lookup first only on an 8-token match. Replaying lookup over recorded greedy
# output (`python bench/research/lookup_ngram.py --by-length`, machine B's Q4_0 and Q8_0 runs): a guess
# from a 2..3-token match was right 34-73 % of the time, from an 8-token match 82-96 %, where the
# 0.5B draft's first draft was accepted 89-94 % (json, code, grounded). Below 8 the model, which
# costs c ≈ 0.2-0.4 decodes, is worth asking.
HYBRID_NGRAM = 8


class NgramIndex:
    """The latest earlier occurrence of the history's last n tokens (n from ngram_max down to
    ngram_min), over a growing and shrinking token list, without rescanning it: for each n,
    every n-gram that has a next token maps to its start positions (ascending). Appending a
    token registers the n-grams it completes the continuation of; truncating unregisters
    them. A query is one dict lookup per n, so a draft costs the same after 4 k tokens of
    prompt as after 40 (a scan would grow with the history)."""

    def __init__(self, ngram_max: int = NGRAM_MAX, ngram_min: int = NGRAM_MIN):
        self.ngram_max, self.ngram_min = ngram_max, ngram_min
        self.history: list[int] = []
        self.starts: list[dict[tuple, list[int]]] = [{} for _ in range(ngram_max + 1)]

    def __len__(self) -> int:
        return len(self.history)

    def append(self, tokens: Sequence[int]) -> None:
        h = self.history
        for tok in tokens:
            q = len(h)   # tok lands at q: the n-grams ending at q - 1 now have a next token
            for n in range(self.ngram_min, min(self.ngram_max, q) + 1):
                self.starts[n].setdefault(tuple(h[q - n:q]), []).append(q - n)
            h.append(tok)

    def truncate(self, pos: int) -> None:
        h = self.history
        for q in range(len(h) - 1, pos - 1, -1):   # undo the appends, newest first
            for n in range(self.ngram_min, min(self.ngram_max, q) + 1):
                key = tuple(h[q - n:q])
                found = self.starts[n][key]
                found.pop()
                if not found:
                    del self.starts[n][key]
        del h[pos:]

    def match(self) -> tuple[int, int]:
        """(the token that followed the latest earlier occurrence of the history's last n
        tokens, n) for the longest n that matches; (NO_DRAFT, 0) when none does."""
        h = self.history
        for n in range(min(self.ngram_max, len(h) - 1), self.ngram_min - 1, -1):
            found = self.starts[n].get(tuple(h[len(h) - n:]))
            if found:
                return h[found[-1] + n], n
        return NO_DRAFT, 0


class LookupDrafter:
    """A Decoder over a token list: eval appends and guesses, truncate cuts."""

    def __init__(self, is_eog=lambda t: False, ngram_max: int = NGRAM_MAX,
                 ngram_min: int = NGRAM_MIN):
        self.index = NgramIndex(ngram_max, ngram_min)
        self._is_eog = is_eog

    @property
    def history(self) -> list[int]:
        return self.index.history

    def eval(self, tokens: Sequence[int], pos: int, n_out: int) -> list[int]:
        if pos != len(self.index):
            raise ValueError(f"lookup drafter: eval at {pos}, history has {len(self.index)}")
        self.index.append(tokens)
        if NO_DRAFT in tokens:
            return [NO_DRAFT] * n_out
        # Only the last guess is used by the loop; earlier outputs are not needed.
        return [NO_DRAFT] * (n_out - 1) + [self.index.match()[0]]

    def truncate(self, pos: int) -> None:
        self.index.truncate(pos)

    def is_eog(self, token: int) -> bool:
        return self._is_eog(token)


class HybridDrafter:
    """Prompt lookup when it has a guess, the draft model when it has none (llama.cpp's
    ngram-then-draft idea; SuffixDecoding's observation that a match is free and a model is
    not). A Decoder over the draft model: the model reads the prompt at once (the draft's
    prefill) and afterwards only when lookup has no guess, catching up then on every token
    lookup served in the meantime, in one batch.

    Counts, per generation (`take_stats`): drafts served by lookup and by the model, and the
    tokens the model caught up on (for the cost prediction)."""

    def __init__(self, model, ngram_max: int = HYBRID_NGRAM, ngram_min: int = HYBRID_NGRAM):
        self.model = model
        self.index = NgramIndex(ngram_max, ngram_min)
        self.model_kv = 0
        self.stats = self._zero()
        self._from_lookup = False   # the last eval's token came from lookup, not the model

    @property
    def history(self) -> list[int]:
        return self.index.history

    @staticmethod
    def _zero() -> dict:
        return {"lookup_drafts": 0, "model_drafts": 0, "model_catchup_tokens": 0}

    def take_stats(self) -> dict:
        out, self.stats = self.stats, self._zero()
        return out

    def prefill(self, tokens: Sequence[int], pos: int) -> list[int]:
        """The draft's read of a prompt at `pos` (0, or above a conversation the caches hold):
        the model reads everything it lacks in one batch, as its prefill, so no prompt token
        is left to a round's catch-up."""
        if pos != len(self.index):
            raise ValueError(f"hybrid drafter: prefill at {pos}, history has {len(self.index)}")
        self.index.append(tokens)
        out = self.model.eval(self.history[self.model_kv:], self.model_kv, 1)
        self.model_kv = len(self.history)
        self._from_lookup = False
        return out

    def eval(self, tokens: Sequence[int], pos: int, n_out: int) -> list[int]:
        if pos == 0:  # a whole context from its start (DraftModel's first call): a prefill
            if n_out != 1:
                raise ValueError("hybrid drafter: a prefill gives one output")
            self.truncate(0)
            return self.prefill(tokens, 0)
        if pos != len(self.index):
            raise ValueError(f"hybrid drafter: eval at {pos}, history has {len(self.index)}")
        self.index.append(tokens)
        guess = self.index.match()[0]
        self._from_lookup = guess != NO_DRAFT
        if guess != NO_DRAFT:
            self.stats["lookup_drafts"] += 1
            return [NO_DRAFT] * (n_out - 1) + [guess]
        behind = self.history[self.model_kv:]
        out = self.model.eval(behind, self.model_kv, 1)
        self.stats["model_drafts"] += 1
        self.stats["model_catchup_tokens"] += len(behind) - 1
        self.model_kv = len(self.history)
        return [NO_DRAFT] * (n_out - 1) + out

    def confidence(self) -> float:
        """A lookup guess is a copy of the context: it is not gated (1.0); a model draft is
        gated on the model's confidence."""
        return 1.0 if self._from_lookup else self.model.confidence()

    def truncate(self, pos: int) -> None:
        self.index.truncate(pos)
        # Always forwarded: the model may hold positions this drafter never gave it (a cost
        # probe, an earlier generation).
        self.model_kv = min(self.model_kv, pos)
        self.model.truncate(self.model_kv)

    def is_eog(self, token: int) -> bool:
        return self.model.is_eog(token)
