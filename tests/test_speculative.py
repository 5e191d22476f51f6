"""The speculative loop on scripted decoders: equality with raw decoding, KV bookkeeping,
round records and timings to the digit."""
import pytest

from cpuspec.core.speculative import (count_accepted, generate_raw, generate_speculative)
from fakes import FakeClock, FakeDecoder, flaky_draft_rule, target_rule

T = 0.010        # target: 10 ms per one-token decode
C = 0.25         # draft cost per token ÷ target
BETA_PER_TOKEN = 0.2  # each extra verified token adds 20 % of a decode


def make(draft_rule=flaky_draft_rule, eog=-1):
    clock = FakeClock()
    target = FakeDecoder(target_rule, clock, lambda n: T * (1 + BETA_PER_TOKEN * (n - 1)), eog)
    draft = FakeDecoder(draft_rule, clock, lambda n: C * T, eog)
    return clock, target, draft


PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


@pytest.mark.parametrize("k", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("max_tokens", [1, 2, 9, 40])
def test_speculative_output_equals_raw(k, max_tokens):
    clock, target, draft = make()
    raw = generate_raw(target, PROMPT, max_tokens, clock)
    clock, target, draft = make()
    sd = generate_speculative(target, draft, PROMPT, max_tokens, k, clock)
    assert sd.tokens == raw.tokens
    assert len(sd.tokens) == max_tokens
    assert sum(r.n_emitted for r in sd.rounds) == max_tokens - 1
    assert len(sd.token_latencies_s) == max_tokens - 1
    # The KV of the target holds everything but the last (pending) token.
    assert target.kv == PROMPT + sd.tokens[:-1][:len(target.kv) - len(PROMPT)]
    assert len(target.kv) == len(PROMPT) + len(sd.tokens) - 1


def test_flaky_draft_gives_zero_partial_and_full_rounds():
    clock, target, draft = make()
    sd = generate_speculative(target, draft, PROMPT, 200, 4, clock)
    accepted = {r.n_accepted for r in sd.rounds if r.k == 4}
    assert 0 in accepted and 4 in accepted and accepted & {1, 2, 3}


def test_identical_draft_accepts_everything():
    clock, target, draft = make(draft_rule=target_rule)
    sd = generate_speculative(target, draft, PROMPT, 41, 4, clock)
    assert [(r.k, r.n_accepted, r.n_emitted) for r in sd.rounds] == [(4, 4, 5)] * 8
    # No redundant decode: after a fully accepted round the draft catches up with 2 tokens
    # (its last draft and the bonus) in one batch, then drafts 3 more one at a time.
    assert draft.evals == [len(PROMPT)] + [1, 1, 1, 1] + [2, 1, 1, 1] * 7


def test_round_timings_to_the_digit():
    clock, target, draft = make(draft_rule=target_rule)
    sd = generate_speculative(target, draft, PROMPT, 6, 4, clock)
    (r,) = sd.rounds
    assert r.draft_s == pytest.approx(4 * C * T)
    assert r.verify_s == pytest.approx(T * (1 + BETA_PER_TOKEN * 4))
    assert r.round_s == pytest.approx(r.draft_s + r.verify_s)
    assert sd.token_latencies_s == pytest.approx([r.round_s / 5] * 5)
    assert sd.prefill_s == pytest.approx(T * (1 + BETA_PER_TOKEN * 7))   # the target's
    assert sd.draft_prefill_s == pytest.approx(C * T)
    # Two windows: decode-only is the rounds; end-to-end adds both prefills.
    assert sd.decode_s == pytest.approx(r.round_s)
    assert sd.e2e_s == pytest.approx(clock.now)


class NeverDraft:
    """A policy that never speculates (adaptive on a CPU where SD does not pay)."""

    def next_k(self, cap=None):
        return 0

    def observe(self, r):
        pass


class DraftFromRound:
    """Plain steps first, then k = 2 from round `start` on."""

    def __init__(self, start):
        self.start, self.n = start, 0

    def next_k(self, cap=None):
        self.n += 1
        return 2 if self.n > self.start else 0

    def observe(self, r):
        pass


def test_draft_prefill_is_paid_only_when_drafting():
    clock, target, draft = make()
    sd = generate_speculative(target, draft, PROMPT, 12, NeverDraft(), clock)
    assert draft.evals == [] and sd.draft_prefill_s == 0.0
    assert all(r.k == 0 for r in sd.rounds)
    raw_clock, raw_target, _ = make()
    raw = generate_raw(raw_target, PROMPT, 12, raw_clock)
    assert sd.tokens == raw.tokens
    assert sd.e2e_s == pytest.approx(raw.e2e_s)   # the same work, the same time


def test_late_draft_prefill_then_catch_up():
    clock, target, draft = make()
    sd = generate_speculative(target, draft, PROMPT, 20, DraftFromRound(3), clock)
    raw_clock, raw_target, _ = make()
    raw = generate_raw(raw_target, PROMPT, 20, raw_clock)
    assert sd.tokens == raw.tokens
    # The prompt when drafting starts, then the 4 tokens emitted by then in one batch.
    assert draft.evals[:2] == [len(PROMPT), 4]
    assert sd.draft_prefill_s == pytest.approx(C * T)
    assert sd.e2e_s == pytest.approx(clock.now)
    assert sum(r.round_s for r in sd.rounds) == pytest.approx(sd.decode_s)


def test_raw_latencies_are_one_decode_each():
    clock, target, _ = make()
    raw = generate_raw(target, PROMPT, 5, clock)
    assert raw.token_latencies_s == pytest.approx([T] * 4)
    assert raw.decode_s == pytest.approx(4 * T)
    assert target.evals == [len(PROMPT), 1, 1, 1, 1]


def test_stops_at_end_of_generation_token():
    seq = [target_rule(PROMPT)]
    ctx = PROMPT + seq
    for _ in range(10):
        ctx.append(target_rule(ctx))
    eog = ctx[len(PROMPT) + 6]  # the 7th generated token
    clock, target, draft = make(eog=eog)
    raw = generate_raw(target, PROMPT, 100, clock)
    clock, target, draft = make(eog=eog)
    sd = generate_speculative(target, draft, PROMPT, 100, 4, clock)
    assert raw.stop == sd.stop == "eog"
    assert sd.tokens == raw.tokens and raw.tokens[-1] == eog
    assert raw.tokens.index(eog) == len(raw.tokens) - 1


def test_count_accepted():
    assert count_accepted([1, 2, 3], [1, 2, 3, 4]) == 3
    assert count_accepted([1, 2, 3], [1, 5, 3, 4]) == 1
    assert count_accepted([9, 2, 3], [1, 2, 3, 4]) == 0
    assert count_accepted([], [7]) == 0


def test_k_must_be_positive():
    clock, target, draft = make()
    with pytest.raises(ValueError):
        generate_speculative(target, draft, PROMPT, 10, 0, clock)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("max_tokens", [1, 2, 9, 60])
@pytest.mark.parametrize("rule", ["flaky", "same"])
def test_parallel_schedule_equals_raw_and_keeps_the_kv_straight(k, max_tokens, rule):
    """The draft drafts ahead on another thread during each verify; the output is still the
    target's greedy output, and every eval starts where the draft's KV ends (the fake checks)."""
    from concurrent.futures import ThreadPoolExecutor

    from cpuspec.core.speculative import generate_speculative_parallel
    raw_clock, raw_target, _ = make()
    raw = generate_raw(raw_target, PROMPT, max_tokens, raw_clock)
    clock, target, draft = make(draft_rule=flaky_draft_rule if rule == "flaky" else target_rule)
    with ThreadPoolExecutor(max_workers=1) as pool:
        sd = generate_speculative_parallel(target, draft, PROMPT, max_tokens, k, pool.submit,
                                           clock=clock)
    assert sd.tokens == raw.tokens
    assert len(target.kv) == len(PROMPT) + len(sd.tokens) - 1
    if max_tokens == 60:
        assert sd.extra["hits"] > 0
        if rule == "same":
            assert sd.extra["misses"] <= 1   # only where max_tokens cuts a round short
        else:
            assert sd.extra["misses"] > 0 and sd.extra["discarded_drafts"] > 0
