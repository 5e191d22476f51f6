"""Confidence-gated drafting (p-min, n-min), as llama.cpp's draft-simple does it: the loop stops
a round's drafting at the first draft token whose probability is below p-min and drops it;
rounds with fewer than n-min drafts become plain target steps. Tested against a scripted draft
whose probabilities are known, with the KV bookkeeping checked on every eval (fakes.py)."""
import pytest

from cpuspec.core.costs import round_terms
from cpuspec.core.speculative import draft_tokens, generate_raw, generate_speculative
from fakes import FakeClock, FakeDecoder, flaky_draft_rule, target_rule


class ScriptedConfidence(FakeDecoder):
    """A draft whose confidence in the token it last returned is confidence_of(context):
    the context being everything the draft has decoded, as for a real model."""

    def __init__(self, rule, clock, confidence_of, **kw):
        super().__init__(rule, clock, lambda n: 1.0, **kw)
        self.confidence_of = confidence_of
        self.asked = 0

    def confidence(self) -> float:
        self.asked += 1
        return self.confidence_of(len(self.kv))


def models(confidence_of):
    clock = FakeClock()
    target = FakeDecoder(target_rule, clock, lambda n: 10.0 + n)
    draft = ScriptedConfidence(target_rule, clock, confidence_of)
    return clock, target, draft


def test_drafting_stops_at_the_first_unsure_token_and_drops_it():
    # confidence by the draft's KV length after the eval that produced the token: 0.9 for the
    # first three, then 0.4
    _, _, draft = models(lambda n: 0.9 if n < 13 else 0.4)
    draft.eval(list(range(1, 10)), 0, 1)          # a prompt of 9 tokens read
    drafts, kv = draft_tokens(draft, [5], 9, k=6, p_min=0.5)
    # evals end at KV lengths 10, 11, 12 (their tokens confident: kept) and 13 (its token at
    # 0.4: dropped). d3 was decoded to propose it, d4 never is: the KV holds 13 positions
    assert len(drafts) == 3 and kv == 13 and len(draft.kv) == 13 and draft.asked == 4


def test_p_min_zero_drafts_k_every_round_and_never_asks():
    _, _, draft = models(lambda n: 0.0)
    draft.eval([1, 2, 3], 0, 1)
    drafts, kv = draft_tokens(draft, [4], 3, k=4)
    assert len(drafts) == 4 and kv == 7 and draft.asked == 0


def test_an_unsure_first_token_drafts_nothing():
    _, _, draft = models(lambda n: 0.1)
    draft.eval([1, 2, 3], 0, 1)
    drafts, kv = draft_tokens(draft, [4], 3, k=4, p_min=0.5)
    assert drafts == [] and kv == 4      # the pending token was read, nothing drafted


@pytest.mark.parametrize("p_min, n_min", [(0.0, 0), (0.1, 0), (0.5, 0), (0.5, 2), (0.95, 0),
                                          (0.5, 9)])
def test_gated_output_equals_raw_and_rounds_draft_what_the_gate_allows(p_min, n_min):
    conf = lambda n: (0.3, 0.6, 0.99, 0.8, 0.2)[n % 5]   # noqa: E731
    clock, target, draft = models(conf)
    draft.next_token = flaky_draft_rule
    prompt = [3, 1, 4, 1, 5]
    raw = generate_raw(target, prompt, 40)
    clock2, target2, draft2 = models(conf)
    draft2.next_token = flaky_draft_rule
    g = generate_speculative(target2, draft2, prompt, 40, 5, clock=clock2, gate=(p_min, n_min))
    assert g.tokens == raw.tokens
    ks = [r.k for r in g.rounds]
    assert all(0 <= k <= 5 for k in ks)
    if p_min <= 0.1 and n_min == 0:   # a gate that never bites: the ungated rounds exactly
        clock3, target3, draft3 = models(conf)
        draft3.next_token = flaky_draft_rule
        plain = generate_speculative(target3, draft3, prompt, 40, 5, clock=clock3)
        assert ks == [r.k for r in plain.rounds]
        # p-min 0 asks no confidence; 0.1 asks every one (all ≥ 0.2) and drops none
        assert (draft2.asked == 0) == (p_min == 0.0)
    else:
        assert draft2.asked > 0 and min(ks) < 5
    if p_min == 0.95:   # only the 0.99 positions pass: at most one draft in a row
        assert max(ks) <= 1
    if n_min:
        assert all(k == 0 or k >= n_min for k in ks)
    if n_min == 9:      # more than k can give: never a draft
        assert set(ks) == {0}


def test_the_hybrid_gates_model_drafts_only():
    from cpuspec.core.lookup import HybridDrafter
    period = list(range(20, 30))
    prompt = period * 3 + period[:8]                # then 28: lookup guesses 29, 20, 21
    _, _, draft = models(lambda n: 0.0)             # the model is never sure
    hybrid = HybridDrafter(draft)
    hybrid.prefill(prompt, 0)
    drafts, _ = draft_tokens(hybrid, [28], len(prompt), k=3, p_min=0.5)
    assert drafts == [29, 20, 21]    # every draft a copy: confidence 1.0, not gated
    fresh = list(range(1, 40))                      # nothing repeats: the model drafts
    _, _, draft = models(lambda n: 0.0)
    hybrid = HybridDrafter(draft)
    hybrid.prefill(fresh, 0)
    drafts, _ = draft_tokens(hybrid, [40], len(fresh), k=3, p_min=0.5)
    assert drafts == [] and draft.asked == 1


def test_a_gated_round_pays_for_the_token_it_dropped():
    probe = {"draft_s": 0.01, "verify_s": {str(n): 0.1 + 0.01 * n for n in range(1, 6)}}
    # rounds (drafted, accepted, emitted) recorded at k = 4 with a gate
    rounds = [(4, 4, 5), (1, 1, 2), (0, 0, 1)]
    a, alpha, beta = round_terms(probe, rounds, 4, gate_k=4)
    # decodes: 4 (full), 2 (one kept + the dropped one), 1 (the dropped first token)
    assert alpha == pytest.approx((4 + 2 + 1) * 0.01 / 3 / 0.11)
    _, alpha_ungated, _ = round_terms(probe, rounds, 4)
    assert alpha_ungated == pytest.approx((4 + 1 + 0) * 0.01 / 3 / 0.11)
    assert a == pytest.approx(8 / 3)


def test_the_printed_flags_carry_the_measured_p_min():
    from cpuspec.core.commands import SERVER, invocations
    argv = invocations("t.gguf", "d.gguf", 5, "model", 2, p_min=0.75)[SERVER]
    assert argv[argv.index("--spec-draft-p-min") + 1] == "0.75"
    argv = invocations("t.gguf", "d.gguf", 5, "model", 2)[SERVER]
    assert argv[argv.index("--spec-draft-p-min") + 1] == "0"


@pytest.mark.parametrize("args, message", [
    (["bench", "--p-min", "1.5"], "a probability from 0 to below 1"),
    (["bench", "--p-min", "x"], "'x' is not a number"),
    (["bench", "--p-min", "0.5", "--drafter", "lookup"], "--drafter lookup has none"),
    (["bench", "--p-min", "0.5", "--policy", "adaptive"], "apply to the static policy"),
    (["bench", "--n-min", "2", "--schedule", "parallel", "--draft-cores", "0"],
     "apply to the static policy"),
    (["paths", "--p-min", "0.5", "--drafter", "lookup"], "needs --drafter model"),
    (["paths", "--p-min", "0.5"], "DraftModel and the cpuspec+redecode imitation have no"),
    (["paths", "--p-min", "0.5", "--paths", "cpuspec,cpuspec+redecode"], "have no gate"),
    (["bench", "--p-min", "0.5", "--temperature", "0.7"], "use --temperature 0"),
    # issue 53, 6f, 6g, 6k: NaN, n-min above k, and the gate with no SD at all
    (["paths", "--p-min", "nan"], "not a finite number"),
    (["bench", "--n-min", "5", "-k", "4"], "5 is more than k = 4"),
    (["bench", "--p-min", "0.5", "--policy", "off"], "--policy off runs raw decoding only"),
])
def test_gate_flags_that_cannot_apply_are_refused(args, message):
    from click.testing import CliRunner

    from cpuspec.cli.main import main
    res = CliRunner().invoke(main, [*args, "--no-save"])
    assert res.exit_code == 2 and message in res.output, res.output
