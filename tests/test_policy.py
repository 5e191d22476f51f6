"""The adaptive draft-length controller on scripted costs and acceptance, and in the loop."""
import dataclasses
from pathlib import Path

import pytest

from cpuspec.core.policy import DEFAULT, AdaptivePolicy, StaticPolicy

PROBE_EVERY_STEPS, PROBE_K = DEFAULT.probe_every_steps, DEFAULT.probe_k
from cpuspec.core.speculative import RoundStats, generate_raw, generate_speculative
from fakes import FakeClock, FakeDecoder, flaky_draft_rule, target_rule

T = 0.010
GPU_LIKE = dict(draft_s=0.05 * T, verify_s={n: T * (1 + 0.02 * (n - 1)) for n in range(1, 6)})
CPU_LIKE = dict(draft_s=0.6 * T, verify_s={n: T * (1 + 0.475 * (n - 1)) for n in range(1, 6)})


def feed(policy, n_rounds, accept_all, cost):
    """Play n rounds: the chosen k, accepted all or none, at the policy's own cost figures.
    The plain steps that time V(1) again while on are played but not listed: they are not a
    decision about speculating (test_v1_is_timed_again_while_on counts them)."""
    ks = []
    for _ in range(n_rounds):
        k = policy.next_k()
        if not policy.trace[-1][3].startswith("plain step"):
            ks.append(k)
        acc = k if accept_all else 0
        policy.observe(RoundStats(k, acc, acc + 1, k * cost["draft_s"],
                                  cost["verify_s"][k + 1], 0.0))
    return ks


def switches(ks):
    return sum((a == 0) != (b == 0) for a, b in zip(ks, ks[1:]))


def test_static_policy():
    p = StaticPolicy(3)
    assert [p.next_k() for _ in range(3)] == [3, 3, 3]
    with pytest.raises(ValueError):
        StaticPolicy(0)


def test_probes_while_off_when_costs_allow():
    p = AdaptivePolicy(k_max=4, **GPU_LIKE)
    feed(p, 40, False, GPU_LIKE)
    feed(p, 2 * PROBE_EVERY_STEPS, False, GPU_LIKE)
    assert not p.costs_rule_out()
    probes = [t for t in p.trace if t[3] == "probe"]
    assert 1 <= len(probes) <= 3  # at most one probe per PROBE_EVERY_STEPS plain steps


def test_switches_off_when_acceptance_collapses_and_back_on_when_it_recovers():
    p = AdaptivePolicy(k_max=4, **GPU_LIKE)
    ks = feed(p, 40, True, GPU_LIKE)
    assert ks[-1] == 4                       # cheap draft, everything accepted: draft the most
    ks = feed(p, 150, False, GPU_LIKE)
    assert ks[-1] == 0 and not p.on          # acceptance collapsed: off
    ks = feed(p, 3 * PROBE_EVERY_STEPS, True, GPU_LIKE)
    assert ks[-1] > 0 and p.on               # a probe saw acceptance recover: on again


def test_never_oscillates_round_to_round():
    p = AdaptivePolicy(k_max=4, **GPU_LIKE)
    ks = []
    for block in range(6):  # acceptance alternates in blocks of 30 rounds
        ks += feed(p, 30, block % 2 == 0, GPU_LIKE)
    assert switches(ks) <= 12  # a few per change of regime, never one per round


def test_cpu_costs_turn_speculation_off_even_at_full_acceptance():
    p = AdaptivePolicy(k_max=4, **CPU_LIKE)
    ks = feed(p, 200, True, CPU_LIKE)
    assert ks[-1] == 0
    assert p.costs_rule_out()
    assert sum(k > 0 for k in ks) <= 1  # probes are rare when costs alone rule SD out


def make(draft_cost, beta):
    clock = FakeClock()
    target = FakeDecoder(target_rule, clock, lambda n: T * (1 + beta * (n - 1)))
    draft = FakeDecoder(flaky_draft_rule, clock, lambda n: draft_cost * T)
    return clock, target, draft


PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


def tok_s(g):
    return g.decode_tokens / g.decode_s


@pytest.mark.parametrize("draft_cost, beta, name", [(0.6, 0.475, "cpu"), (0.05, 0.02, "gpu")])
def test_adaptive_in_the_loop(draft_cost, beta, name):
    clock, target, draft = make(draft_cost, beta)
    raw = generate_raw(target, PROMPT, 400, clock)
    statics = {}
    for k in (1, 2, 4):
        clock, target, draft = make(draft_cost, beta)
        statics[k] = generate_speculative(target, draft, PROMPT, 400, k, clock)
        assert statics[k].tokens == raw.tokens
    clock, target, draft = make(draft_cost, beta)
    verify = {n: T * (1 + beta * (n - 1)) for n in range(1, 6)}
    ad = generate_speculative(target, draft, PROMPT, 400,
                              AdaptivePolicy(4, draft_cost * T, verify), clock)
    assert ad.tokens == raw.tokens
    best_static = max(tok_s(g) for g in statics.values())
    if name == "cpu":   # static SD loses; adaptive must not
        assert best_static < tok_s(raw)
        assert tok_s(ad) >= 0.97 * tok_s(raw)
    else:               # static SD wins; adaptive must keep most of it
        assert best_static > 1.5 * tok_s(raw)
        assert tok_s(ad) >= 0.95 * best_static


def test_no_probes_when_catching_up_the_draft_costs_too_much():
    """A probe after s plain steps makes the draft decode those s tokens first; at 0.2 target
    decodes per token (a 0.5B draft on this CPU) that costs more than speculation can win."""
    p = AdaptivePolicy(k_max=4, catchup_s=0.2 * T, **GPU_LIKE)
    ks = feed(p, 60, False, GPU_LIKE) + feed(p, 4 * PROBE_EVERY_STEPS, False, GPU_LIKE)
    assert not p.probes_pay()
    assert all(k == 0 for k in ks[ks.index(0):])  # off, and stays off


def test_catchup_cost_is_learned_from_a_probe():
    p = AdaptivePolicy(k_max=4, **GPU_LIKE)
    feed(p, 60, False, GPU_LIKE)  # off by now
    while p.next_k() == 0:        # plain steps until the probe
        p.observe(RoundStats(0, 0, 1, 0.0, T, T))
    steps = p._steps_before
    # the probe round: k = 2 drafts plus catching up `steps` tokens at 0.5 decodes each
    p.observe(RoundStats(2, 0, 1, 2 * GPU_LIKE["draft_s"] + steps * 0.5 * T,
                         GPU_LIKE["verify_s"][3], 0.0))
    assert p.catchup_s == pytest.approx(0.1 * 0.5 * T)  # one EWMA step from 0 towards 0.5 T


def test_machine_slowdown_while_off_does_not_switch_speculation_on():
    """Plain steps that get 2× slower (other load) must not make drafting look cheap."""
    p = AdaptivePolicy(k_max=4, **CPU_LIKE)
    assert p.next_k() == 0
    for _ in range(200):
        p.observe(RoundStats(0, 0, 1, 0.0, 2 * T, 2 * T))
        assert p.next_k() == 0
    assert p.verify_s[1] == pytest.approx(2 * T, rel=1e-3)
    assert p.draft_s / p.verify_s[1] == pytest.approx(CPU_LIKE["draft_s"] / T)  # c unchanged


# Costs like the Q4_0 pair on this project's machine: c ≈ 0.4, verify grows ~18 % per token.
Q40_LIKE = dict(draft_s=0.4 * T, verify_s={n: T * (1 + 0.18 * (n - 1)) for n in range(1, 6)})


def cost_of(ks, cost):
    """Target-decode time of the rounds played, against one decode per token for raw."""
    return sum(k * cost["draft_s"] + cost["verify_s"][k + 1] for k in ks)


def decisions(policy, n_rounds):
    """The k of the last n rounds without the plain steps that time V(1) again while on."""
    return [t[0] for t in policy.trace[-n_rounds:] if not t[3].startswith("plain step")]


def play(policy, accepts, cost):
    """accepts[i]: True = every draft of round i accepted, False = none. Returns ks, tokens."""
    ks, tokens = [], 0
    for ok in accepts:
        k = policy.next_k()
        ks.append(k)
        acc = k if ok else 0
        tokens += acc + 1
        policy.observe(RoundStats(k, acc, acc + 1, k * cost["draft_s"],
                                  cost["verify_s"][k + 1], 0.0))
    return ks, tokens


def test_sd_that_pays_after_a_bad_start_is_kept_on():
    """Issue 13: three zero-acceptance rounds first, then a draft that is always right."""
    p = AdaptivePolicy(k_max=4, **Q40_LIKE)
    ks, tokens = play(p, [False] * 3 + [True] * 200, Q40_LIKE)
    assert sum(k > 0 for k in ks) >= 0.9 * len(ks)
    # Static k = 4, always right, gets 5 tokens per 4 × 4 ms + 17.2 ms: 1.506×.
    assert tokens * T / cost_of(ks, Q40_LIKE) >= 0.95 * 1.506


def test_bad_start_then_new_prompts_re_enter():
    """Where mid-generation probes cost too much (catching the draft up), a task switched off
    by a bad start is tried again at a later prompt (cheap: only the draft's prefill), within
    eight prompts: each new prompt weighs the old evidence less, until the optimistic bound
    promises more than re-entry costs (SWITCH_ON_SPEEDUP)."""
    p = AdaptivePolicy(k_max=4, catchup_s=0.2 * T, **Q40_LIKE)
    play(p, [False] * 12, Q40_LIKE)
    assert not p.on
    starts = []
    for _ in range(9):
        p.new_generation()
        ks, _ = play(p, [True] * 50, Q40_LIKE)
        starts.append(ks[0])
    assert any(k > 0 for k in starts[:8]) and ks[-1] == 4 and starts[-1] == 4


def test_follows_acceptance_that_flips_mid_generation():
    p = AdaptivePolicy(k_max=4, **Q40_LIKE)
    ks, _ = play(p, [True] * 100, Q40_LIKE)
    assert ks[-1] == 4
    ks, _ = play(p, [False] * 100, Q40_LIKE)
    ks = decisions(p, len(ks))
    first_off = ks.index(0)
    assert first_off <= 30 and all(k == 0 for k in ks[first_off + 1:] if k != PROBE_K)
    ks, _ = play(p, [True] * (3 * PROBE_EVERY_STEPS), Q40_LIKE)
    assert decisions(p, len(ks))[-1] == 4   # a probe saw it pay again


def test_sd_that_never_pays_costs_at_most_3_percent():
    p = AdaptivePolicy(k_max=4, **Q40_LIKE)
    ks, tokens = play(p, [False] * 400, Q40_LIKE)
    assert cost_of(ks, Q40_LIKE) <= 1.03 * tokens * T


def test_a_task_that_keeps_losing_is_left_off():
    """Zero acceptance on every prompt: re-entries become rare (each costs the draft's prompt
    prefill and a round or two), and the whole task costs at most 3 % more than raw."""
    p = AdaptivePolicy(k_max=4, catchup_s=0.2 * T, **Q40_LIKE)
    all_ks, tokens, starts = [], 0, []
    for _ in range(12):
        p.new_generation()
        ks, n = play(p, [False] * 100, Q40_LIKE)
        all_ks += ks
        tokens += n
        starts.append(ks[0])
    assert sum(k > 0 for k in starts[-6:]) <= 3
    assert cost_of(all_ks, Q40_LIKE) <= 1.03 * tokens * T
    assert any("switched off" in t[3] for t in p.trace)


@pytest.mark.parametrize("scope", ["task", "prompt"])
def test_adaptive_scope(scope):
    """Per task, one controller learns across the task's prompts; per prompt, each generation
    gets a fresh one that starts from the prior."""
    from cpuspec.harness.bench import BenchConfig, Generator
    clock = FakeClock()
    target = FakeDecoder(target_rule, clock, lambda n: T * (1 + 0.18 * (n - 1)))
    draft = FakeDecoder(flaky_draft_rule, clock, lambda n: 0.4 * T)
    probe = {"draft_s": 0.4 * T, "draft_catchup_s_per_token": 0.1 * T,
             "verify_s": {str(n): T * (1 + 0.18 * (n - 1)) for n in range(1, 6)}}
    gen = Generator(BenchConfig(prompts=[], threads=1, k=4, policies=["adaptive"],
                                adaptive_scope=scope), target, draft, probe)
    controllers, firsts = [], []
    for _ in range(3):
        g = gen("adaptive", PROMPT, 60, task="json")
        assert len(g.tokens) == 60
        controllers.append(gen.policies["json"])
        firsts.append(gen.traces["adaptive"][0][:3])
    assert (controllers[0] is controllers[2]) == (scope == "task")
    assert (firsts[0] == firsts[2]) == (scope == "prompt")


def test_a_long_prompt_with_a_short_answer_is_not_read_by_the_draft():
    """Machine C, 21 real prompts with ~800-token inputs and 64-token answers: the draft's
    prefill of the input took what SD could save, and adaptive fell to 0.91x raw. Here SD pays
    (c = 0.15, beta(4) = 0.2: 5 tokens per 1.8 decodes with every draft accepted), so 64 tokens
    save at most (1 - 1.8/5)·64 decodes of 10 ms = 0.41 s: 1,000 prompt tokens at 1 ms each
    (1 s) outweigh that, 100 (0.1 s) do not."""
    pays = dict(draft_s=0.15 * T, verify_s={n: T * (1 + 0.05 * (n - 1)) for n in range(1, 6)})
    p = AdaptivePolicy(k_max=4, prefill_s=0.001, **pays)
    feed(p, 30, True, pays)                     # the task has learned that SD pays
    assert p.on and p.best()[1] > 2.0
    p.new_generation(unread_prompt_tokens=1000, max_tokens=64)
    ks = feed(p, 64, True, pays)
    assert ks == [0] * 64 and "prefill of 1000 tokens" in p.trace[-64][3]
    assert p.on                                  # the task stays on: only this prompt is plain
    p.new_generation(unread_prompt_tokens=100, max_tokens=64)
    assert feed(p, 1, True, pays)[0] > 0
    # a longer answer earns the same prefill back: 1,000 tokens save up to 6.4 s
    p.new_generation(unread_prompt_tokens=1000, max_tokens=1000)
    assert feed(p, 1, True, pays)[0] > 0
    # and without the prices (0: not given) it speculates as before
    p.new_generation()
    assert feed(p, 1, True, pays)[0] > 0


def test_a_k_the_probe_priced_too_dear_is_tried_and_kept(monkeypatch):
    """Machine B's recorded probe (held-out run, 128 tokens) timed V(8) at 280 ms; the loop's
    verifies of 8 took 227 ms. At the probe's costs k = 3 looks best, at the loop's k = 7 is
    (every draft kept: 1.88× against 1.69×). The policy tries the batch size it has not
    verified, learns its cost from the loop, and keeps k = 7; without that optimism it never
    tries it."""
    from cpuspec.core import policy
    from cpuspec.results.records import CostProbe
    from cpuspec.results.schema import read_json
    probe = CostProbe.of(read_json(Path(__file__).parent.parent / "bench" / "results" /
                                   "epyc-family25-model17" /
                                   "adaptive_heldout_q8_0_k7_n128.json.gz")["cost_probe"])
    prior = dict(draft_s=probe.draft_s, verify_s={n: probe.verify_s[n] for n in range(1, 9)})
    loop = dict(prior, verify_s={**prior["verify_s"], 8: 0.227})
    assert AdaptivePolicy(k_max=7, **prior).best()[0] == 3
    ks = feed(AdaptivePolicy(k_max=7, **prior), 60, True, loop)
    assert ks[-10:] == [7] * 10
    monkeypatch.setattr(policy, "DEFAULT", dataclasses.replace(policy.DEFAULT, cost_prior_spread=0.0))
    ks = feed(AdaptivePolicy(k_max=7, **prior), 60, True, loop)
    assert 7 not in ks


def test_v1_is_timed_again_while_on():
    """While on, one round in V1_REFRESH_ROUNDS is a plain step; it moves V(1) alone (the
    other costs were just timed), halfway to what it measured."""
    V1_REFRESH_ROUNDS = DEFAULT.v1_refresh_rounds
    p = AdaptivePolicy(k_max=4, **GPU_LIKE)
    for _ in range(2 * (V1_REFRESH_ROUNDS + 1)):
        k = p.next_k()
        # the machine's plain decode is now 20 % slower than the probe said; verifies as probed
        v = 1.2 * T if k == 0 else GPU_LIKE["verify_s"][k + 1]
        p.observe(RoundStats(k, k, k + 1, k * GPU_LIKE["draft_s"], v, 0.0))
    plain = [i for i, t in enumerate(p.trace) if t[0] == 0]
    assert plain == [V1_REFRESH_ROUNDS, 2 * V1_REFRESH_ROUNDS + 1]
    assert p.verify_s[1] == pytest.approx(T * (1 + 0.2 * 0.75))       # two steps of 0.5
    assert p.verify_s[5] == pytest.approx(GPU_LIKE["verify_s"][5])      # untouched
