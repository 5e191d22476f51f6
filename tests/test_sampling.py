"""Stochastic verification: speculative sampling must draw tokens from the target's own
distribution. Checked on tiny generated models with a chi-square homogeneity test between SD
samples and target-only samples (fixed seeds, significance level 0.001), and shown to have the
power to catch a wrong acceptance rule."""
import numpy as np
import pytest

from cpuspec.llama.engine import Model, Session
from cpuspec.core.sampling import RejectionVerify, SamplingDecoder, probs_from_logits, sample
from cpuspec.core.speculative import generate_raw, generate_speculative

TEMPERATURE = 1.5
N_SAMPLES = 1500
ALPHA_Z = 3.09  # one-sided normal quantile for significance level 0.001
N_OUT = 4       # tokens per generation; token 0 comes from the prefill, 1..3 from SD rounds


def chi2_homogeneity(a: list[int], b: list[int]) -> tuple[float, int]:
    """Two-sample chi-square statistic and degrees of freedom; categories with fewer than 10
    expected counts pooled into one."""
    cats = sorted(set(a) | set(b))
    ca = np.array([a.count(c) for c in cats], float)
    cb = np.array([b.count(c) for c in cats], float)
    total = ca + cb
    keep = total >= 20
    ca = np.append(ca[keep], ca[~keep].sum())
    cb = np.append(cb[keep], cb[~keep].sum())
    total = ca + cb
    ca, cb, total = ca[total > 0], cb[total > 0], total[total > 0]
    ea, eb = total * ca.sum() / total.sum(), total * cb.sum() / total.sum()
    stat = float(((ca - ea) ** 2 / ea).sum() + ((cb - eb) ** 2 / eb).sum())
    return stat, len(total) - 1


def chi2_critical(df: int, z: float = ALPHA_Z) -> float:
    """Wilson–Hilferty approximation of the chi-square quantile."""
    return df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3


@pytest.fixture(scope="module")
def sessions(tiny_models):
    with Model(tiny_models["target"]) as t, Model(tiny_models["draft"]) as d, \
            Session(t, 128, 1) as ts, Session(d, 128, 1) as ds:
        yield t, ts, ds


def draw(sessions, mode, seed, verify_cls=RejectionVerify):
    model, ts, ds = sessions
    rng = np.random.default_rng(seed)
    target = SamplingDecoder(ts, TEMPERATURE, rng)
    draft = SamplingDecoder(ds, TEMPERATURE, rng)
    prompt = model.tokenize("The quick brown fox")
    out, accepted, rejected = [], 0, 0
    for _ in range(N_SAMPLES):
        if mode == "raw":
            g = generate_raw(target, prompt, N_OUT)
        else:
            g = generate_speculative(target, draft, prompt, N_OUT, 3,
                                     verify=verify_cls(rng))
            accepted += sum(r.n_accepted for r in g.rounds)
            rejected += sum(r.n_accepted < r.k for r in g.rounds)
        out.append(tuple(g.tokens) + (-1,) * (N_OUT - len(g.tokens)))  # -1: ended early
    return out, accepted, rejected


def test_probs_and_sampling():
    p = probs_from_logits(np.array([[0.0, np.log(3.0)]]), 1.0)
    assert p == pytest.approx(np.array([[0.25, 0.75]]))
    rng = np.random.default_rng(0)
    draws = [sample(np.array([0.25, 0.75]), rng) for _ in range(4000)]
    assert abs(np.mean(draws) - 0.75) < 0.03
    assert sample(np.array([0.0, 0.0, 1.0]), rng) == 2


def test_speculative_sampling_matches_target_distribution(sessions):
    raw, _, _ = draw(sessions, "raw", seed=1)
    sd, accepted, rejected = draw(sessions, "sd", seed=2)
    assert accepted > 0 and rejected > 0  # both branches of the rule were exercised
    for pos in (1, 2, 3):
        stat, df = chi2_homogeneity([t[pos] for t in raw], [t[pos] for t in sd])
        assert df >= 3, "too few categories for a meaningful test"
        assert stat < chi2_critical(df), f"position {pos}: chi2 {stat:.1f} on {df} df"


class AcceptAlways(RejectionVerify):
    """A wrong rule: keeps every draft, so tokens follow the draft's distribution."""

    def __call__(self, target, draft, last, drafts, pos):
        p = target.distributions([last, *drafts], pos, len(drafts) + 1)
        return len(drafts), sample(p[len(drafts)], self.rng)


def test_the_test_catches_a_wrong_rule(sessions):
    raw, _, _ = draw(sessions, "raw", seed=1)
    wrong, _, _ = draw(sessions, "sd", seed=2, verify_cls=AcceptAlways)
    stats = [chi2_homogeneity([t[p] for t in raw], [t[p] for t in wrong]) for p in (1, 2, 3)]
    assert any(stat > chi2_critical(df) for stat, df in stats)


def test_lookup_drafter_with_sampling(sessions):
    """A drafter without distributions is treated as proposing with certainty (q one-hot):
    a draft d is kept with probability p(d), else the token comes from p with d removed. The
    tokens must then follow the target's own distribution, as with a draft model. The prompt is
    the target's own greedy text, so lookup finds the sampled tokens in it and proposes what
    the target would likely say next: drafts are made, kept and rejected."""
    from cpuspec.core.lookup import LookupDrafter
    model, ts, _ = sessions
    start = model.tokenize("The quick brown fox")
    prompt = start + generate_raw(ts, start, 100).tokens

    def run(mode, seed):
        rng = np.random.default_rng(seed)
        target = SamplingDecoder(ts, TEMPERATURE, rng)
        out, drafted, kept = [], 0, 0
        for _ in range(N_SAMPLES):
            g = generate_raw(target, prompt, N_OUT) if mode == "raw" else \
                generate_speculative(target, LookupDrafter(ngram_max=1, ngram_min=1), prompt,
                                     N_OUT, 3, verify=RejectionVerify(rng))
            drafted += sum(r.k for r in g.rounds)
            kept += sum(r.n_accepted for r in g.rounds)
            out.append(tuple(g.tokens) + (-1,) * (N_OUT - len(g.tokens)))
        return out, drafted, kept

    raw, _, _ = run("raw", 21)
    sd, drafted, kept = run("sd", 22)
    assert 0 < kept < drafted and drafted > N_SAMPLES // 2, (drafted, kept)
    for p in (1, 2, 3):
        stat, df = chi2_homogeneity([t[p] for t in raw], [t[p] for t in sd])
        assert stat < chi2_critical(df), (p, stat, df)


def test_the_one_hot_rule_gives_the_target_distribution():
    """The rule itself, with power: a target whose distribution is p = (0.5, 0.3, 0.15, 0.05)
    and a proposal of token 1 with certainty. Kept with probability 0.3, else drawn from p
    without token 1: token 1 must come out 30 % of the time. (Drawing from p itself after a
    rejection would give it 51 %.)"""
    p = np.array([0.5, 0.3, 0.15, 0.05])

    class FixedTarget:
        def distributions(self, tokens, pos, n_out):
            return [p] * n_out

    verify, n = RejectionVerify(np.random.default_rng(3)), 20000
    counts = np.zeros(len(p))
    for _ in range(n):
        n_accepted, token = verify(FixedTarget(), object(), 0, [1], 10)
        counts[1 if n_accepted == 1 else token] += 1
    stat = float(((counts - n * p) ** 2 / (n * p)).sum())
    assert stat < chi2_critical(len(p) - 1), counts


def test_identical_draft_is_accepted_at_temperature(tiny_models):
    """With the target's own weights as the draft, p == q at every position, so the rule
    min(1, p/q) accepts every draft. (A bug that lost q of all but the last draft accepted with
    probability p(d) instead: about sum(p²), far below 95 % at T = 1.5.)"""
    with Model(tiny_models["target"]) as t, Model(tiny_models["same"]) as d, \
            Session(t, 128, 1) as ts, Session(d, 128, 1) as ds:
        rng = np.random.default_rng(11)
        target = SamplingDecoder(ts, TEMPERATURE, rng)
        draft = SamplingDecoder(ds, TEMPERATURE, rng)
        prompt = t.tokenize("The quick brown fox")
        accepted = drafted = 0
        for _ in range(40):
            g = generate_speculative(target, draft, prompt, 24, 4, verify=RejectionVerify(rng))
            accepted += sum(r.n_accepted for r in g.rounds)
            drafted += sum(r.k for r in g.rounds)
    assert drafted > 300
    assert accepted / drafted >= 0.95, f"acceptance {accepted / drafted:.1%}"
