"""A scripted Decoder with fixed costs and a fake clock: the loop and the statistics become
testable to the digit without a model. It also checks the KV bookkeeping: every eval must start
exactly where the cached sequence ends."""
from __future__ import annotations

from typing import Callable, Sequence


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeDecoder:
    """next_token(context) gives the greedy token after `context` (all tokens so far)."""

    def __init__(self, next_token: Callable[[Sequence[int]], int], clock: FakeClock,
                 cost_s: Callable[[int], float], eog: int = -1):
        self.next_token = next_token
        self.clock = clock
        self.cost_s = cost_s   # seconds for an eval of n tokens
        self.eog = eog
        self.kv: list[int] = []
        self.evals: list[int] = []  # batch sizes, in order

    def eval(self, tokens: Sequence[int], pos: int, n_out: int) -> list[int]:
        assert pos == len(self.kv), f"eval at {pos} but the KV holds {len(self.kv)} positions"
        assert 1 <= n_out <= len(tokens)
        self.kv += list(tokens)
        self.evals.append(len(tokens))
        self.clock.now += self.cost_s(len(tokens))
        n = len(self.kv)
        return [self.next_token(self.kv[:n - j]) for j in range(n_out - 1, -1, -1)]

    def truncate(self, pos: int) -> None:
        assert pos <= len(self.kv)
        del self.kv[pos:]

    def is_eog(self, token: int) -> bool:
        return token == self.eog


VOCAB = 50


def target_rule(ctx: Sequence[int]) -> int:
    return (ctx[-1] * 7 + (ctx[-2] if len(ctx) > 1 else 0) * 3 + 1) % VOCAB


def flaky_draft_rule(ctx: Sequence[int]) -> int:
    """Agrees with the target except where the context length is a multiple of 5 or 7."""
    t = target_rule(ctx)
    return (t + 1) % VOCAB if len(ctx) % 5 == 0 or len(ctx) % 7 == 0 else t


class Counting:
    """Wraps a real Decoder and counts the tokens it decodes."""

    def __init__(self, inner):
        self.inner, self.decoded = inner, 0

    def eval(self, tokens, pos, n_out):
        self.decoded += len(tokens)
        return self.inner.eval(tokens, pos, n_out)

    def truncate(self, pos):
        self.inner.truncate(pos)

    def is_eog(self, token):
        return self.inner.is_eog(token)
