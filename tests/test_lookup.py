"""The prompt-lookup drafter on crafted texts, and in the loop."""
import pytest

from cpuspec.lookup import LookupDrafter, lookup_next
from cpuspec.speculative import NO_DRAFT, generate_raw, generate_speculative
from fakes import FakeClock, FakeDecoder


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
