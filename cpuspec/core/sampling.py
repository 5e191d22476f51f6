"""Sampling at temperature > 0, and the stochastic acceptance rule of speculative sampling
(Leviathan et al. 2023, Chen et al. 2023): accept draft token d with probability
min(1, p(d) / q(d)); at the first rejection, sample from norm(max(0, p − q)); if all k drafts
survive, sample the bonus token from p. The output is then distributed exactly as sampling from
the target alone: lossless in distribution, not token for token.

`SamplingDecoder` wraps an engine Session (decode + logits) so that eval samples instead of
taking the argmax, and remembers each distribution by the position it predicts; the loop in
speculative.py is unchanged, and `RejectionVerify` replaces its greedy verify step.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def probs_from_logits(logits: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(logits / T) over the last axis, in float64."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    z -= z.max(axis=-1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)
    return z


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Inverse-CDF sampling: one uniform draw, a cumulative sum and a binary search."""
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(probs) - 1))


# Rows kept for earlier positions: a round's drafts are sampled one eval at a time, and the
# verify needs q for every one of them, so at least k rows must survive (cpuspec caps k at 32).
# A row of Qwen's 151936-token vocabulary is 1.2 MB in float64.
KEEP_ROWS = 33


class SamplingDecoder:
    """A Decoder that samples at `temperature`; `probs_at[pos]` is the distribution it sampled
    the token at position `pos` from (the draft's q for RejectionVerify)."""

    def __init__(self, session, temperature: float, rng: np.random.Generator,
                 keep_rows: int = KEEP_ROWS):
        if temperature <= 0:
            raise ValueError("temperature must be > 0 for sampling")
        self.session, self.temperature, self.rng = session, temperature, rng
        self.keep_rows = keep_rows
        self.probs_at: dict[int, np.ndarray] = {}

    def distributions(self, tokens: Sequence[int], pos: int, n_out: int) -> np.ndarray:
        self.session.decode(tokens, pos, n_out)
        return probs_from_logits(self.session.logits(n_out), self.temperature)

    def eval(self, tokens: Sequence[int], pos: int, n_out: int) -> list[int]:
        rows = self.distributions(tokens, pos, n_out)
        first = pos + len(tokens) - n_out + 1  # position the first output row predicts
        # Drop rows of positions long decided (memory), never this round's: an earlier version
        # dropped every row at ≤ pos, i.e. q of all but the last draft, so RejectionVerify
        # accepted with p(d) instead of min(1, p(d)/q(d)).
        for old in [p for p in self.probs_at if p < first - self.keep_rows]:
            del self.probs_at[old]
        out = []
        for i, row in enumerate(rows):
            self.probs_at[first + i] = row
            out.append(sample(row, self.rng))
        return out

    def truncate(self, pos: int) -> None:
        self.session.truncate(pos)
        if pos == 0:
            self.probs_at.clear()

    def is_eog(self, token: int) -> bool:
        return self.session.is_eog(token)


class RejectionVerify:
    """The speculative-sampling acceptance rule, as a `verify` step for generate_speculative.
    A drafter without distributions (prompt lookup) proposes with certainty: q is one-hot."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def __call__(self, target: SamplingDecoder, draft, last: int, drafts: list[int], pos: int
                 ) -> tuple[int, int]:
        p = target.distributions([last, *drafts], pos, len(drafts) + 1)
        q_rows = getattr(draft, "probs_at", None)
        for i, d in enumerate(drafts):
            q = None if q_rows is None else q_rows.get(pos + 1 + i)
            if q is None and q_rows is not None:
                raise RuntimeError(f"no draft distribution for position {pos + 1 + i}")
            q_d = 1.0 if q is None else q[d]
            if self.rng.random() * q_d < p[i][d]:  # accept with probability min(1, p/q)
                continue
            residual = np.maximum(p[i] - q, 0.0) if q is not None else p[i].copy()
            if q is None:
                residual[d] = 0.0
            if residual.sum() <= 0.0:  # p ≤ q everywhere: only possible when p == q
                residual = p[i]
            return i, sample(residual, self.rng)
        return len(drafts), sample(p[len(drafts)], self.rng)
