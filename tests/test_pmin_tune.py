"""tune searches p-min (issue 43, item 2): its static runs of a draft model record each drafted
token's confidence, every p-min of the grid is priced by replaying those runs as the gate would
have drafted them, and an answer with a gate is confirmed by a gated run and printed with its
--p-min and --spec-draft-p-min."""
import pytest

from cpuspec.analysis.predict import gated_runs
from cpuspec.core.speculative import ROUND_FIELDS, generate_speculative
from cpuspec.harness.bench import BenchConfig, run_bench
from cpuspec.inputs.models import local_model
from cpuspec.inputs.tasks import builtin_prompts
from cpuspec.report.tune import render_tune
from cpuspec.tune import candidates
from cpuspec.tune import search as tune
from fakes import flaky_draft_rule
from test_pmin import models

CONF = (0.3, 0.6, 0.99, 0.8, 0.2)


def scripted(n: int) -> float:
    return CONF[n % 5]


def test_each_drafted_tokens_confidence_is_recorded_per_round():
    clock, target, draft = models(scripted)
    draft.next_token = flaky_draft_rule
    g = generate_speculative(target, draft, [3, 1, 4, 1, 5], 40, 4, clock=clock,
                             record_confidence=True)
    assert len(g.draft_confidence) == len(g.rounds)
    for r, conf in zip(g.rounds, g.draft_confidence):
        assert len(conf) == r.k and all(c in CONF for c in conf)
    # without the flag nothing is asked, nothing kept
    clock, target, draft = models(scripted)
    g = generate_speculative(target, draft, [3, 1, 4, 1, 5], 40, 4, clock=clock)
    assert g.draft_confidence is None and draft.asked == 0


def test_a_gated_run_also_records_the_token_it_dropped():
    clock, target, draft = models(scripted)
    draft.next_token = flaky_draft_rule
    g = generate_speculative(target, draft, [3, 1, 4, 1, 5], 40, 4, clock=clock,
                             gate=(0.5, 0), record_confidence=True)
    stopped = [(r, c) for r, c in zip(g.rounds, g.draft_confidence) if len(c) > r.k]
    assert stopped and all(len(c) == r.k + 1 and c[-1] < 0.5 and min(c[:-1], default=1) >= 0.5
                           for r, c in stopped)


@pytest.fixture(scope="module")
def recorded(tiny_models):
    """A real static run at k = 4 with confidences, and for each p-min a real gated run."""
    target, draft = local_model(tiny_models["target"]), local_model(tiny_models["draft"])
    base = BenchConfig(prompts=builtin_prompts(["json", "code"], 2), threads=1, max_tokens=24,
                       k=4, policies=["static"], warmup=0, quality=False,
                       target_path=target.path, draft_path=draft.path)
    import dataclasses
    ungated = run_bench(dataclasses.replace(base, record_confidence=True))
    conf = sorted({c for r in ungated["runs"] for rnd in r.get("draft_confidence", [])
                   for c in rnd})
    i = len(conf) // 2            # halfway between two recorded values near the median: the
    p_min = (conf[i - 1] + conf[i]) / 2   # gate bites, and no rounding decides a token
    gated = run_bench(dataclasses.replace(base, p_min=p_min))
    return ungated, gated, p_min


def _first_rounds(runs):
    i_k, i_acc = ROUND_FIELDS.index("k"), ROUND_FIELDS.index("n_accepted")
    return {r["prompt_id"]: (r["rounds"][0][i_k], r["rounds"][0][i_acc]) for r in runs
            if r["mode"] == "static" and r["rounds"]}


def test_the_replayed_gate_drafts_what_a_gated_run_drafted(recorded):
    """A round's first drafts see the same context gated or not: the replay of the ungated
    run's first round under p-min must draft and keep what the real gated run's did."""
    ungated, gated, p_min = recorded
    replay = gated_runs([r for r in ungated["runs"] if r["mode"] == "static"], p_min)
    assert replay is not None
    want, got = _first_rounds(gated["runs"]), _first_rounds(replay)
    assert got == want
    assert any(k < 4 for k, _ in want.values()), "the gate never stopped a first round"


def test_runs_without_confidences_cannot_be_replayed(recorded):
    _, gated, _ = recorded
    assert gated_runs([r for r in gated["runs"] if r["mode"] == "static"], 0.5) is None


def test_tune_prices_every_p_min_and_confirms_a_gated_answer(tiny_models, monkeypatch):
    """Same-size tiny drafts never pay: one gated row (k = 2, p-min 0.75) is forced to pay,
    so the answer carries the gate into its confirmation run and its printed commands."""
    real = tune.predictions
    seen = {}

    def paying(results, k_max, probe=None):
        out = real(results, k_max, probe)
        for task, p in out.items():
            seen[task] = [(r["k"], r.get("p_min", 0.0)) for r in p["rows"]]
            for r in p["rows"]:
                if r["k"] == 2 and r.get("p_min") == 0.75:
                    r["predicted_speedup"] = 1.5
        return out
    monkeypatch.setattr(tune, "predictions", paying)
    monkeypatch.setattr(candidates, "ceiling", lambda probe, k_max, d: (2.0, 2))
    cand = tune.Candidate(local_model(tiny_models["target"]), local_model(tiny_models["draft"]))
    cfg = BenchConfig(prompts=builtin_prompts(["code"], 2), threads=1, max_tokens=16)
    doc = tune.run_tune(cfg, [cand], k_max=3)
    assert {p for _, p in seen["code"]} == {0.0, *candidates.P_MIN_GRID}
    assert sorted(k for k, p in seen["code"] if p == 0.5) == [1, 2, 3]
    best = doc["recommendations"]["code"]["best_sd"]
    assert (best["k"], best["p_min"]) == (2, 0.75) and "--p-min 0.75" in best["command"]
    run = doc["confirm_runs"][0]
    assert run["settings"]["p_min"] == 0.75 and run["settings"]["k"] == 2
    # a confirmation is a plain gated run
    assert all("draft_confidence" not in r for r in run["runs"] if r["mode"] == "static")
    assert not run["settings"]["record_confidence"]
    text = render_tune(doc)
    assert "2, p-min 0.75" in text and "--spec-draft-p-min 0.75" in text


def test_a_gate_that_never_bites_prices_exactly_the_ungated_row(recorded, monkeypatch):
    """Issue 53, 5l: with p-min below every recorded confidence the gated replay drafts what
    the ungated one drafts, so each gated row must equal its ungated row to the digit; a gate
    that bites prices something else."""
    from cpuspec.tune import candidates
    ungated, _, p_min = recorded
    sd = [r for r in ungated["runs"] if r["mode"] == "static"]
    lowest = min(c for r in sd for rnd in r["draft_confidence"] for c in rnd)
    rows = [{"k": 4, "predicted_speedup": 1.23}, {"k": 2, "predicted_speedup": 0.97}]
    monkeypatch.setattr(candidates, "P_MIN_GRID", (lowest / 2, p_min))
    gated = candidates._gated_rows(ungated["cost_probe"], sd, rows, 4, None)
    never = {r["k"]: r["predicted_speedup"] for r in gated if r["p_min"] == lowest / 2}
    # the same replay on both sides of the ratio: equal to the last bit of x·p/p
    assert never == pytest.approx({4: 1.23, 2: 0.97}, rel=1e-12)
    bites = {r["k"]: r["predicted_speedup"] for r in gated if r["p_min"] == p_min}
    assert bites[4] != 1.23


@pytest.fixture(scope="module", params=[2, 4, 6])
def recorded_at_k(request, tiny_models):
    """At k = 2, 4 and 6: an ungated static run with confidences and a real gated run."""
    import dataclasses
    target, draft = local_model(tiny_models["target"]), local_model(tiny_models["draft"])
    base = BenchConfig(prompts=builtin_prompts(["json", "code"], 2), threads=1, max_tokens=24,
                       k=request.param, policies=["static"], warmup=0, quality=False,
                       target_path=target.path, draft_path=draft.path)
    ungated = run_bench(dataclasses.replace(base, record_confidence=True))
    conf = sorted({c for r in ungated["runs"] for rnd in r.get("draft_confidence", [])
                   for c in rnd})
    p_min = (conf[len(conf) // 2 - 1] + conf[len(conf) // 2]) / 2
    return request.param, ungated, run_bench(dataclasses.replace(base, p_min=p_min)), p_min


def test_the_replay_splits_rounds_as_a_gated_run_does_at_several_k(recorded_at_k):
    """Issue 53, 5h: a round the gate cuts before its first rejection ends there and the next
    starts after the target's token. The replay's rounds must be the real gated run's, prompt
    by prompt, up to the first round whose recorded drafts ran out (what it drafts next was
    never recorded)."""
    from cpuspec.analysis.predict import split_round
    k, ungated, gated, p_min = recorded_at_k
    i_k, i_acc = ROUND_FIELDS.index("k"), ROUND_FIELDS.index("n_accepted")
    real = {r["prompt_id"]: [(x[i_k], x[i_acc]) for x in r["rounds"]]
            for r in gated["runs"] if r["mode"] == "static"}
    compared = split = 0
    for r in (r for r in ungated["runs"] if r["mode"] == "static"):
        replay = []
        for row, conf in zip(r["rounds"], r["draft_confidence"]):
            pieces, known = split_round(row, conf, p_min)
            split += len(pieces) > 1
            replay += [(p[i_k], p[i_acc]) for p in (pieces if known else pieces[:-1])]
            if not known:     # the last piece drafted past the record: compare up to it
                break
        want = real[r["prompt_id"]]
        # the last recorded round may be cut by max_tokens in either run: compare before it
        m = min(len(replay), len(want) - 1)
        assert replay[:m] == want[:m], (k, r["prompt_id"], replay, want)
        compared += m
    assert compared > 0 and split > 0, "no round was split: the test checked nothing"
