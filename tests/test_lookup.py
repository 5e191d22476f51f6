"""The prompt-lookup drafter on crafted texts, and in the loop."""
import pytest

from cpuspec.core.lookup import LookupDrafter, NgramIndex
from cpuspec.core.speculative import NO_DRAFT, generate_raw, generate_speculative
from fakes import FakeClock, FakeDecoder


def lookup_match(history, ngram_max=6, ngram_min=2):
    """A reference the index is checked against: scan backwards for the latest earlier
    occurrence of history's last n tokens, the longest n first."""
    n_hist = len(history)
    for n in range(min(ngram_max, n_hist - 1), ngram_min - 1, -1):
        tail = list(history[n_hist - n:])
        for start in range(n_hist - n - 1, -1, -1):
            if list(history[start:start + n]) == tail:
                return history[start + n], n
    return NO_DRAFT, 0


def lookup_next(history, ngram_max=6, ngram_min=2):
    """What the drafter's index answers for history (the crafted cases below)."""
    index = NgramIndex(ngram_max, ngram_min)
    index.append(history)
    return index.match()[0]


def test_lookup_prefers_the_longest_latest_match():
    #         0  1  2  3  4  5  6  7  8  9
    hist = [5, 6, 7, 8, 1, 6, 7, 9, 5, 6, 7]
    # last 3-gram (5, 6, 7) occurred at 0..2, followed by 8
    assert lookup_next(hist) == 8
    # last 2-gram (6, 7): latest earlier occurrence at 5..6, followed by 9
    assert lookup_next([1, 6, 7, 9, 2, 6, 7, 4, 6, 7], ngram_max=2) == 4
    assert lookup_next([1, 2, 3]) == NO_DRAFT
    assert lookup_next([4]) == NO_DRAFT and lookup_next([]) == NO_DRAFT
    # a 1-gram match only when nothing longer matches, and only when asked for (the default
    # range is 6..2: a 1-gram match was weak evidence on the grounded suite)
    assert lookup_next([3, 9, 1, 2, 3], ngram_min=1) == 9
    assert lookup_next([3, 9, 1, 2, 3]) == NO_DRAFT
    # a longer match wins over a later, shorter one: (1, 2, 3, 4) occurred at 0..3
    assert lookup_next([1, 2, 3, 4, 8, 3, 4, 9, 1, 2, 3, 4]) == 8


def test_drafter_follows_the_decoder_protocol():
    d = LookupDrafter()
    assert d.eval([1, 2, 3, 4, 1, 2], 0, 1) == [3]
    assert d.eval([3], 6, 1) == [4]
    d.truncate(6)
    assert d.history == [1, 2, 3, 4, 1, 2]
    with pytest.raises(ValueError):
        d.eval([5], 3, 1)


def copying_target(source):
    """A 'model' that copies `source` after the prompt, then continues with 7, 7, 7…"""
    def rule(ctx):
        i = len(ctx) - len(source)
        return source[i] if 0 <= i < len(source) else 7
    return rule


def test_lookup_drafts_copied_text_in_the_loop():
    source = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26]
    prompt = source  # the output copies the prompt
    clock = FakeClock()
    target = FakeDecoder(copying_target(source), clock, lambda n: 0.01 * (1 + 0.1 * (n - 1)))
    raw = generate_raw(target, prompt, 30, clock)
    clock.now = 0.0
    sd = generate_speculative(target, LookupDrafter(), prompt, 30, 4, clock)
    assert sd.tokens == raw.tokens
    full = [r for r in sd.rounds if r.k == 4]
    assert full and sum(r.n_accepted for r in full) / (4 * len(full)) > 0.7
    assert sd.decode_s < 0.6 * raw.decode_s  # drafting is free: copying pays


def test_lookup_with_no_match_degrades_to_plain_steps():
    clock = FakeClock()
    target = FakeDecoder(lambda ctx: (len(ctx) * 37) % 1000 + 100, clock, lambda n: 0.01)
    prompt = [1, 2, 3]
    raw = generate_raw(target, prompt, 20, clock)
    sd = generate_speculative(target, LookupDrafter(), prompt, 20, 4, clock)
    assert sd.tokens == raw.tokens
    assert all(r.k == 0 for r in sd.rounds)  # nothing ever repeats: no drafts, no waste


def copy_then_count(source):
    """Copies `source` after the prompt, then counts up from 100 (text lookup cannot guess)."""
    def rule(ctx):
        i = len(ctx) - len(source)
        return source[i] if 0 <= i < len(source) else 100 + i
    return rule


def test_hybrid_drafts_by_lookup_where_text_repeats_and_by_model_elsewhere():
    from cpuspec.core.lookup import HybridDrafter
    source = list(range(11, 41))
    rule = copy_then_count(source)
    clock = FakeClock()
    target = FakeDecoder(rule, clock, lambda n: 0.010 + 0.002 * (n - 1))
    raw = generate_raw(target, source, 50, clock)
    model = FakeDecoder(rule, clock, lambda n: 0.004)   # a draft model that is always right
    hybrid = HybridDrafter(model)
    sd = generate_speculative(target, hybrid, source, 50, 4, clock)
    assert sd.tokens == raw.tokens
    stats = hybrid.take_stats()
    # The first 30 output tokens copy the prompt: once 8 of them match (HYBRID_NGRAM), lookup
    # serves them. The counting part has no earlier occurrence: the model serves it. Neither
    # alone drafted every token.
    assert stats["lookup_drafts"] >= 12 and stats["model_drafts"] >= 8
    # The model skipped the copied stretch, then read it in one catch-up batch.
    assert max(model.evals[1:]) >= 10 and stats["model_catchup_tokens"] >= 10
    assert hybrid.take_stats()["lookup_drafts"] == 0  # counts are per generation

    clock2 = FakeClock()
    t2 = FakeDecoder(rule, clock2, lambda n: 0.010 + 0.002 * (n - 1))
    m2 = FakeDecoder(rule, clock2, lambda n: 0.004)
    model_only = generate_speculative(t2, m2, source, 50, 4, clock2)
    assert model_only.tokens == raw.tokens
    assert sd.decode_s < model_only.decode_s  # the lookup drafts were free


def test_hybrid_rolls_the_model_back_with_the_history():
    from cpuspec.core.lookup import HybridDrafter
    clock = FakeClock()
    model = FakeDecoder(lambda ctx: 1000 + len(ctx), clock, lambda n: 0.0)
    h = HybridDrafter(model, ngram_max=6, ngram_min=2)
    assert h.eval([1, 2, 3, 4], 0, 1) == [1004]        # prefill: the model reads the prompt
    assert h.eval([9], 4, 1) == [1005] and model.kv == [1, 2, 3, 4, 9]
    assert h.eval([1, 2], 5, 1) == [3]                  # lookup: (1, 2) was followed by 3
    assert model.kv == [1, 2, 3, 4, 9]                  # the model did not run
    h.truncate(3)
    assert h.history == [1, 2, 3] and model.kv == [1, 2, 3]
    assert h.eval([7], 3, 1) == [1004]                  # no match: the model, at the right place
    with pytest.raises(ValueError):
        h.eval([5], 9, 1)


def test_round_replay_prediction_by_hand():
    from cpuspec.core.costs import predict_rounds_generation_s
    probe = {"verify_s": {"1": 0.010, "2": 0.018, "3": 0.026, "4": 0.017}, "draft_s": 0.004,
             "draft_catchup_s_per_token": 0.001}
    rounds = [(3, 3, 4), (0, 0, 1), (2, 1, 2)]   # (drafted, accepted, emitted)
    raw, sd = predict_rounds_generation_s(probe, rounds, 3, 10, 15, model_share=0.5,
                                          catchup_tokens_per_round=2)
    # Per round: V(drafts + 1) + half the drafts at 4 ms + 2 catch-up tokens at 1 ms:
    # 17 + 6 + 2, 10 + 0 + 2, 26 + 4 + 2 = 69 ms for 4 + 1 + 2 = 7 tokens; 14 steps.
    assert raw == pytest.approx(14 * 0.010)
    assert sd == pytest.approx(14 * 0.069 / 7)
    # Replayed at k = 1: 1, 0, 1 drafts (18 + 2 + 2, 12, 22 ms) for 2 + 1 + 2 tokens.
    _, sd1 = predict_rounds_generation_s(probe, rounds, 1, 10, 15, model_share=0.5,
                                         catchup_tokens_per_round=2)
    assert sd1 == pytest.approx(14 * 0.056 / 5)


def test_round_replay_predicts_a_hybrid_run_where_fixed_k_does_not():
    """A hybrid generation on scripted costs: the probe's costs applied to its rounds give its
    time; the fixed-k formula (k model drafts every round) is far off, as lookup's was."""
    from cpuspec.core.costs import predict_generation_s, predict_rounds_generation_s
    from cpuspec.core.lookup import HybridDrafter
    from cpuspec.harness.measure import probe_costs
    from cpuspec.analysis.predict import replay_inputs
    source = list(range(11, 41))
    rule = copy_then_count(source)
    clock = FakeClock()
    target = FakeDecoder(rule, clock, lambda n: 0.010 + 0.003 * (n - 1))
    model = FakeDecoder(lambda ctx: rule(ctx) if len(ctx) % 3 else 0,   # wrong every 3rd
                        clock, lambda n: 0.006 + 0.001 * n)
    probe = probe_costs(target, model, source, k_max=4, reps=1, clock=clock)
    clock.now = 0.0
    hybrid = HybridDrafter(model)
    g = generate_speculative(target, hybrid, source, 60, 4, clock)
    run = {"rounds": [r.as_row() for r in g.rounds], "drafter_stats": hybrid.take_stats()}
    rounds, share, catchup = replay_inputs([run])
    assert 0.2 < share < 0.8   # both sources drafted
    _, predicted = predict_rounds_generation_s(probe, rounds, 4, len(source), len(g.tokens),
                                               share, catchup)
    assert predicted == pytest.approx(g.e2e_s, rel=0.05)
    full = [r for r in g.rounds if r.k == 4]
    survival = [sum(r.n_accepted >= i for r in full) / len(full) for i in range(1, 5)]
    _, fixed = predict_generation_s(probe, survival, 4, len(source), len(g.tokens))
    assert abs(fixed / g.e2e_s - 1) > 0.10


def test_the_ngram_index_answers_as_the_scan_does_through_appends_and_truncates():
    """NgramIndex keeps lookup_match's answer (token and n) without rescanning: checked
    against the scan after every step of random appends and rollbacks over a two-token
    alphabet, where matches of every length occur."""
    import random

    rng = random.Random(7)
    for ngram_max, ngram_min in [(6, 2), (8, 8), (3, 1)]:
        index = NgramIndex(ngram_max, ngram_min)
        hits = 0
        for _ in range(400):
            if index.history and rng.random() < 0.25:   # roll back rejected drafts
                index.truncate(len(index.history) - rng.randint(1, min(12, len(index.history))))
            else:
                index.append([rng.randrange(2) for _ in range(rng.randint(1, 9))])
            expected = lookup_match(index.history, ngram_max, ngram_min)
            assert index.match() == expected
            hits += expected[1] > 0
        assert hits > 10   # the index is exercised on matches, not only misses
        index.truncate(0)
        assert index.history == [] and all(not d for d in index.starts)
