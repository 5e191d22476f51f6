"""Raw decoding and greedy speculative decoding (Leviathan et al. 2023; Chen et al. 2023).

Pure: no printing, no I/O. Both loops drive objects that follow the `Decoder` protocol (the
llama.cpp session in engine.py, or a scripted fake in tests) and return data: the tokens, one
record per speculative round, and the time of each phase.

Notation: `k` is the draft length; a round drafts k tokens with the draft model, verifies them
with one target decode of k + 1 positions, accepts the longest prefix on which the target's own
greedy choice agrees (`n_accepted`), and emits those plus one "bonus" token from the target:
n_accepted + 1 tokens for the price of k draft decodes and one (k + 1)-token target decode.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Callable, Protocol, Sequence


class Decoder(Protocol):
    """One model context holding a single sequence in its KV cache."""

    def eval(self, tokens: Sequence[int], pos: int, n_out: int) -> list[int]:
        """Decode `tokens` at positions pos.., return the greedy token after each of the last
        `n_out` of them (n_out ≤ len(tokens))."""

    def truncate(self, pos: int) -> None:
        """Forget KV positions ≥ pos."""

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens."""


@dataclass(frozen=True)
class RoundStats:
    k: int             # tokens drafted this round (≤ the configured k near max_tokens / EOG)
    n_accepted: int    # drafted tokens the target agreed with
    n_emitted: int     # tokens this round added to the output (accepted + bonus, capped)
    draft_s: float     # draft decodes, catch-up included
    verify_s: float    # the target's (k + 1)-token decode and its argmax
    round_s: float     # the whole round: policy, bookkeeping and KV rollback included

    def as_row(self) -> list:
        return [getattr(self, f) for f in ROUND_FIELDS]


# The order of a round's fields in a results file's compact rows; defined here, once.
ROUND_FIELDS = tuple(f.name for f in fields(RoundStats))


@dataclass
class Generation:
    """One prompt's generation, timed in two windows:
      end-to-end (`e2e_s`): everything after the prompt is known: the target's prefill (which
        gives the first output token in both modes), the draft's prefill, and every round;
      decode-only (`decode_s`): from the end of both prefills to the last token.
    The headline speedup is end-to-end; decode-only is a detail."""
    prompt_tokens: int
    tokens: list[int]
    prefill_s: float                    # the target's prompt prefill
    decode_s: float                     # from the end of the prefills to the last token
    token_latencies_s: list[float]      # one per decode-phase token (len(tokens) - 1)
    rounds: list[RoundStats] = field(default_factory=list)   # empty for raw decoding
    stop: str = "max_tokens"            # or "eog"
    draft_prefill_s: float = 0.0        # the draft's prompt prefill (0 for raw decoding)

    @property
    def decode_tokens(self) -> int:
        return len(self.token_latencies_s)

    @property
    def e2e_s(self) -> float:
        return self.prefill_s + self.draft_prefill_s + self.decode_s


Clock = Callable[[], float]


def _stop_reason(decoder: Decoder, tokens: list[int], max_tokens: int) -> str | None:
    if tokens and decoder.is_eog(tokens[-1]):
        return "eog"
    if len(tokens) >= max_tokens:
        return "max_tokens"
    return None


def generate_raw(target: Decoder, prompt: Sequence[int], max_tokens: int,
                 clock: Clock = time.perf_counter) -> Generation:
    """Target alone, one token per decode: the baseline speculative decoding must beat."""
    target.truncate(0)
    t0 = clock()
    tokens = target.eval(prompt, 0, 1)
    t_prefill = clock()
    latencies = []
    t_prev = t_prefill
    while (stop := _stop_reason(target, tokens, max_tokens)) is None:
        tokens += target.eval(tokens[-1:], len(prompt) + len(tokens) - 1, 1)
        now = clock()
        latencies.append(now - t_prev)
        t_prev = now
    return Generation(len(prompt), tokens, t_prefill - t0, t_prev - t_prefill, latencies,
                      stop=stop)


# A drafter answers this instead of a token when it has no guess (the lookup drafter).
NO_DRAFT = -1


def draft_tokens(draft: Decoder, pending: Sequence[int], pos: int, k: int
                 ) -> tuple[list[int], int]:
    """Greedily draft up to k tokens; return them and the draft's KV length afterwards.
    `pending` holds the tokens the draft has not seen yet (the last emitted one, plus the
    previous round's last draft if it was accepted), placed at `pos`. The k-th draft is never
    decoded by the draft: the next round does that only if it is kept."""
    drafts = draft.eval(pending, pos, 1)
    pos += len(pending)
    while len(drafts) < k and drafts[-1] != NO_DRAFT and not draft.is_eog(drafts[-1]):
        drafts += draft.eval(drafts[-1:], pos, 1)
        pos += 1
    if drafts[-1] == NO_DRAFT:
        drafts.pop()
    return drafts, pos


def verify_greedy(target: Decoder, draft: Decoder, last: int, drafts: list[int], pos: int
                  ) -> tuple[int, int]:
    """One target decode of [last, *drafts] at pos; keep drafts while they equal the target's
    argmax. Returns (n_accepted, the target's next token after them)."""
    choice = target.eval([last, *drafts], pos, len(drafts) + 1)
    n_accepted = count_accepted(drafts, choice)
    return n_accepted, choice[n_accepted]


def count_accepted(drafts: Sequence[int], target_choice: Sequence[int]) -> int:
    """Greedy verification: the longest prefix of drafts equal to the target's argmax choices."""
    n_accepted = 0
    for d, t in zip(drafts, target_choice):
        if d != t:
            break
        n_accepted += 1
    return n_accepted


class KPolicy(Protocol):
    """Chooses each round's draft length (0: a plain target step) and learns from the round."""

    def next_k(self) -> int: ...

    def observe(self, r: RoundStats) -> None: ...


class _FixedK:
    def __init__(self, k: int):
        self.k = k

    def next_k(self) -> int:
        return self.k

    def observe(self, r: RoundStats) -> None:
        pass


Verify = Callable[[Decoder, Decoder, int, list[int], int], tuple[int, int]]


def generate_speculative(target: Decoder, draft: Decoder, prompt: Sequence[int],
                         max_tokens: int, k: int | KPolicy,
                         clock: Clock = time.perf_counter,
                         verify: Verify = verify_greedy) -> Generation:
    """Speculative decoding. Greedy by default: with exact arithmetic its output equals
    generate_raw's. `k` is a fixed draft length or a policy that picks one per round
    (policy.py); `verify` is the acceptance rule (sampling.py has the stochastic one).

    Invariant at the start of a round, with n = len(prompt) + len(tokens): the target's KV holds
    positions [0, n - 1) and tokens[-1] (at position n - 1) is emitted but not yet decoded; the
    draft's KV holds positions [0, n_draft_kv) with n_draft_kv ≤ n - 1.

    The draft reads the prompt only when the first round drafts (a policy that never speculates
    never pays the draft's prefill); that prefill is timed as draft_prefill_s, outside the
    round and the decode-only window, inside the end-to-end one.
    """
    if isinstance(k, int):
        if k < 1:
            raise ValueError("k must be ≥ 1")
        k = _FixedK(k)
    policy = k
    target.truncate(0)
    draft.truncate(0)
    t0 = clock()
    tokens = target.eval(prompt, 0, 1)
    t_prefill = clock()
    n_draft_kv = None  # the draft has not read the prompt yet
    draft_prefill_s = 0.0
    rounds: list[RoundStats] = []
    latencies: list[float] = []
    t_prev = t_prefill
    while (stop := _stop_reason(target, tokens, max_tokens)) is None:
        n = len(prompt) + len(tokens)
        # Never draft past max_tokens: k drafts + 1 bonus must fit in what remains.
        k_round = min(policy.next_k(), max_tokens - len(tokens) - 1)
        if k_round > 0 and n_draft_kv is None:  # the draft's prompt prefill, on first use
            t_draft_prefill = clock()
            draft.eval(prompt, 0, 1)
            n_draft_kv = len(prompt)
            spent = clock() - t_draft_prefill
            draft_prefill_s += spent
            t_prev += spent  # keep it out of this round's time
        t_draft_start = clock()
        # Once prefilled, the draft's KV covers the prompt, so what it has not seen is a tail
        # of tokens.
        pending = tokens[n_draft_kv - len(prompt):] if n_draft_kv is not None else []
        drafts, draft_kv = draft_tokens(draft, pending, n_draft_kv, k_round) \
            if k_round > 0 else ([], n_draft_kv)
        t_drafted = clock()
        n_accepted, next_token = verify(target, draft, tokens[-1], drafts, n - 1)
        t_verified = clock()
        emitted = drafts[:n_accepted] + [next_token]
        # Roll back rejected positions. Target: keep tokens[-1] and the accepted drafts.
        if n_accepted < len(drafts):
            target.truncate(n + n_accepted)
        # Draft: it decoded the pending tokens and drafts (all but the last, for a model) at
        # n..; keep the accepted ones among them.
        if draft_kv is not None:
            n_draft_kv = min(draft_kv, n + n_accepted)
            if n_draft_kv < draft_kv:
                draft.truncate(n_draft_kv)
        for i, tok in enumerate(emitted):  # stop at the first end-of-generation token
            if target.is_eog(tok):
                emitted = emitted[:i + 1]
                break
        tokens += emitted
        now = clock()
        # A round runs from the end of the previous one, so the policy's time counts too and
        # the rounds add up to decode_s exactly.
        rounds.append(RoundStats(len(drafts), n_accepted, len(emitted),
                                 t_drafted - t_draft_start, t_verified - t_drafted, now - t_prev))
        policy.observe(rounds[-1])
        # A token's latency: its round's time spread evenly over the round's tokens.
        latencies += [rounds[-1].round_s / len(emitted)] * len(emitted)
        t_prev = now
    return Generation(len(prompt), tokens, t_prefill - t0, t_prev - t_prefill - draft_prefill_s,
                      latencies, rounds, stop, draft_prefill_s=draft_prefill_s)
