"""`cpuspec tune` on the tiny models: two drafts, predictions for every k from one run at
k_max, and a confirmation on prompts it did not choose on."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main
from cpuspec.inputs.tasks import builtin_prompts
from cpuspec.tune import candidates
from cpuspec.tune import search as tune
from cpuspec.tune.search import split_prompts


def force_paying_at_k2(monkeypatch):
    """Same-size tiny drafts never pay: predict 1.5x at k = 2 from the real predictions, and
    let no cost curve rule a candidate out, so the steps after choosing run."""
    real = tune.predictions

    def paying(results, k_max, probe=None):
        out = real(results, k_max, probe)
        for p in out.values():
            p["rows"][1]["predicted_speedup"] = 1.5   # k = 2
        return out
    monkeypatch.setattr(tune, "predictions", paying)
    monkeypatch.setattr(candidates, "ceiling", lambda probe, k_max, d: (2.0, 2))


def test_split_never_confirms_on_tuning_prompts():
    tune, confirm = split_prompts(builtin_prompts(["json", "code"], 8))
    assert [p.prompt_id for p in tune] == ["json-1", "json-4", "json-7", "code-1", "code-4",
                                           "code-7"]
    assert [p.prompt_id for p in confirm] == ["json-2", "json-3", "json-5", "json-6", "json-8",
                                              "code-2", "code-3", "code-5", "code-6", "code-8"]


def test_ceiling_by_hand():
    from cpuspec.tune.candidates import ceiling
    probe = {"verify_s": {"1": 0.010, "2": 0.012, "3": 0.020, "4": 0.013}, "draft_s": 0.002}
    # k = 1: 2·10/(2 + 12) = 1.4286; k = 2: 3·10/(4 + 20) = 1.25; k = 3: 4·10/(6 + 13) = 2.105
    assert ceiling(probe, 3, 0.002) == pytest.approx((40 / 19, 3))
    assert ceiling(probe, 2, 0.002) == pytest.approx((20 / 14, 1))
    # A draft as dear as the target: (k + 1)/(k + V(k+1)/V(1)) < 1 at every k.
    assert ceiling(probe, 3, 0.010)[0] < 1.0


def test_tune_on_tiny_models(tiny_models, tmp_path):
    out = tmp_path / "tune.json"
    res = CliRunner().invoke(main, [
        "tune", "--targets", str(tiny_models["target"]), "--drafts",
        f"{tiny_models['same']},{tiny_models['draft']},lookup", "--tasks", "json",
        "--prompts-per-task", "2", "--max-tokens", "24", "--k-max", "4", "--threads", "1",
        "--json", str(out), "--no-save"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["kind"] == "tune" and doc["complete"] is True
    assert doc["tune_prompts"] == ["json-1"] and doc["confirm_prompts"] == ["json-2"]
    assert doc["candidates"][2] == "target + lookup"
    # Cost curves first: what they rule out is never measured, the rest most promising first.
    ranking = {r["candidate"]: r for r in doc["ranking"]}
    assert list(ranking) == doc["candidates"]
    measured = [m["candidate"] for m in doc["measured"]]
    assert set(measured) == {n for n, r in ranking.items() if not r["ruled_out"]}
    # ... in the order their drafter's pilot acceptance through their own curve predicts
    assert [ranking[n]["pilot_score"] for n in measured] == sorted(
        (ranking[n]["pilot_score"] for n in measured), reverse=True)
    pilots = doc["pilots"]     # one per drafter: two draft models and lookup
    assert len(pilots) == len(measured)
    assert all(p["settings"]["max_tokens"] == 48 and "quality" not in p for p in pilots)
    assert all([q["prompt_id"] for q in p["prompts"]] == ["json-1"] for p in pilots)
    # tune prints the one screen (at most 40 lines of 100 columns); report --details the rest
    screen = res.stdout.splitlines()
    assert "cpuspec tune: where SD pays most per task" in res.stdout
    assert len(screen) <= 40 and max(map(len, screen)) <= 100, res.stdout
    assert "Cost curves first" not in res.stdout
    res = CliRunner().invoke(main, ["report", str(out), "--details"])
    assert "Cost curves first" in res.output and "pilot predicted" in res.output
    assert list(doc["target_perplexity"]) == ["target"] and doc["target_perplexity"]["target"] > 1
    assert "target perplexity on the built-in text: target " in res.output
    if "target + lookup" in measured:
        lookup = doc["measured"][measured.index("target + lookup")]["results"]
        assert lookup["settings"]["drafter"] == "lookup" and lookup["models"]["draft"] == {
            "drafter": "lookup", "ngram_max": 6, "ngram_min": 2}
        preds = doc["measured"][measured.index("target + lookup")]["predictions"]["json"]
        assert [r["k"] for r in preds["rows"]] == [1, 2, 3, 4]
    rec = doc["recommendations"]["json"]
    # The predicted fastest is the fastest of every (draft, k) predicted and of raw decoding
    # on each target (the race's leader, measured, is the recommendation); best_sd is the best
    # SD against its own target's raw.
    top = rec["top"]
    assert top[0]["predicted_vs_reference_raw"] == rec["predicted_fastest"][
        "predicted_vs_reference_raw"] >= 1.0
    assert any(o["candidate"] == "target (SD off)" and o["k"] == 0 for o in top)
    best = rec["best_sd"]
    assert best["k"] >= 1
    if best["pays"]:
        assert "SD pays most: cpuspec bench --target" in res.output
        assert best["confirmed"]["audit"]["identical"] == best["confirmed"]["audit"]["n"]
        assert best["confirmed"]["n_prompts"] == 1 and best["confirmed"]["measured_speedup_range"] is None
    else:   # same-size tiny drafts cost as much as the target: SD cannot pay
        assert rec["recommended"]["candidate"] == "target (SD off)"
        assert "--policy off" in rec["recommended"]["command"]
        assert "SD does not pay with any candidate" in res.output or \
            "SD cannot pay with any candidate" in res.output
        assert "confirmed" not in best
    bad = CliRunner().invoke(main, ["tune", "--targets", str(tiny_models["target"]),
                                    "--drafts", str(tiny_models["draft"]), "--tasks", "json",
                                    "--prompts-per-task", "1"])
    assert bad.exit_code != 0 and "2" in bad.output


def test_fastest_raw_on_another_target_is_confirmed(tiny_models, monkeypatch):
    """Machine B's whole "fastest" column (raw decoding on the Q4_0 target) was never run on
    the confirm prompts. Forced here: every SD candidate ruled out, the second target faster."""
    from cpuspec.tune import search as tune
    from cpuspec.harness.bench import BenchConfig
    from cpuspec.inputs.models import local_model
    monkeypatch.setattr(candidates, "ceiling", lambda probe, k_max, d: (0.5, 1))
    monkeypatch.setattr(tune, "raw_speeds", lambda doc: {("target", "code"): 1.0,
                                                         ("same", "code"): 2.0})
    t, other = local_model(tiny_models["target"]), local_model(tiny_models["same"])
    cands = [tune.Candidate(t, local_model(tiny_models["draft"])), tune.Candidate(other, None)]
    cfg = BenchConfig(prompts=builtin_prompts(["code"], 8), threads=1, max_tokens=12)
    doc = tune.run_tune(cfg, cands, k_max=2)
    assert doc["measured"] == [] and [r["target"] for r in doc["raw_runs"]] == ["target", "same"]
    rec = doc["recommendations"]["code"]
    assert rec["predicted_fastest"]["candidate"] == "same (SD off)"
    # it races raw decoding on the reference, and the fastest answer is the one measured ahead
    race = {m["candidate"]: m for m in rec["race"]}
    assert set(race) == {"same (SD off)", "target (SD off)"}
    assert rec["recommended"]["candidate"] == next(n for n, m in race.items()
                                                   if m["state"] == "leader")
    conf = race["same (SD off)"]["confirmed"]
    st = conf["vs_reference_raw_stats"]
    assert st["units"] == 5 and st["ci"] is not None        # five confirm prompts: an interval
    assert 0.5 < conf["vs_reference_raw"] < 2.0               # the same weights: about 1
    # the race's raw runs price nothing: no cost probe measured, none borrowed
    assert doc["confirm_runs"] and all("cost_probe" not in r and "quality" not in r and
                                       r["cost_probes_from"].startswith("none")
                                       for r in doc["confirm_runs"])
    assert rec["best_sd"]["ruled_out_by_cost_curve"] and not rec["best_sd"]["pays"]
    from cpuspec.report.tune import render_tune
    out = render_tune(doc)
    assert "SD cannot pay with any candidate" in out and "skipped: cannot pay" in out


def test_confirmation_runs_on_the_other_prompts(tiny_models, monkeypatch):
    """Where a configuration is predicted to pay (forced here: same-size tiny drafts never
    do), it is run for real on the confirm prompts, with its audit."""
    from cpuspec.tune import search as tune
    from cpuspec.harness.bench import BenchConfig
    from cpuspec.inputs.models import local_model
    force_paying_at_k2(monkeypatch)
    cand = tune.Candidate(local_model(tiny_models["target"]), local_model(tiny_models["draft"]))
    cfg = BenchConfig(prompts=builtin_prompts(["code"], 2), threads=1, max_tokens=16)
    doc = tune.run_tune(cfg, [cand], k_max=3)
    rec = doc["recommendations"]["code"]
    best = rec["best_sd"]
    assert best["pays"] and best["k"] == 2
    assert rec["predicted_fastest"]["k"] == 2        # predicted to beat raw (1.0) ...
    run = doc["confirm_runs"][0]
    assert len(doc["confirm_runs"]) == 1   # one run serves both race members: SD at k = 2,
    # and its own raw runs are raw decoding on the reference (the only target)
    assert [p["prompt_id"] for p in run["prompts"]] == ["code-2"] and run["settings"]["k"] == 2
    # it spends its time on the prompt: the choosing run's cost probes, not two of its own
    chosen = doc["measured"][0]["results"]
    assert run["cost_probes_from"] == "reused from tune's choosing run of target + draft"
    assert run["cost_probe"] == chosen["cost_probe"] and "cost_probe_end" not in run
    assert "quality" not in run and "quality" in chosen
    audit = best["confirmed"]["audit"]
    assert (audit["n"], audit["identical"], audit["min_margin_at_divergence"]) == (1, 1, None)
    assert audit["defect"] in (0, None)
    # ... and the fastest answer is the one measured ahead on that prompt (one prompt: no look
    # decides, so neither stops)
    race = {m["k"]: m for m in rec["race"]}
    assert set(race) == {0, 2} and all(m["prompts"] == 1 for m in race.values())
    from cpuspec.analysis.stats import e2e_tok_s
    speed = {r["mode"]: e2e_tok_s([r]) for r in run["runs"]}
    raw_ahead = speed["raw"] > speed["static"]
    assert rec["recommended"]["k"] == (0 if raw_ahead else 2)
    assert race[rec["recommended"]["k"]]["state"] == "leader"
    assert "-k 2" in best["command"] and "--tasks code" in best["command"]


def test_a_draft_window_reaches_the_draft_models_and_their_commands(tiny_models, monkeypatch):
    """--draft-window on tune: the model drafter's runs (choosing and confirming) read the
    window and its bench command says so; lookup and raw decoding read everything."""
    from cpuspec.tune import search as tune
    from cpuspec.harness.bench import BenchConfig
    from cpuspec.inputs.models import local_model
    force_paying_at_k2(monkeypatch)
    target, draft = local_model(tiny_models["target"]), local_model(tiny_models["draft"])
    cands = [tune.Candidate(target, draft), tune.Candidate(target, None)]
    cfg = BenchConfig(prompts=builtin_prompts(["code"], 2), threads=1, max_tokens=16,
                      draft_window=(4, 4))
    doc = tune.run_tune(cfg, cands, k_max=3)
    windows = {m["candidate"]: m["results"]["settings"]["draft_window"] for m in doc["measured"]}
    assert windows == {"target + draft": [4, 4], "target + lookup": None}
    model_sd = [r for m in doc["measured"] if m["candidate"] == "target + draft"
                for r in m["results"]["runs"] if r["mode"] == "static"]
    assert model_sd and all(r["prompt_tokens"] > 8 for r in model_sd)  # the window bites
    assert doc["confirm_runs"] and all(
        r["settings"]["draft_window"] == ([4, 4] if r["settings"]["drafter"] != "lookup"
                                          else None) for r in doc["confirm_runs"])
    assert "--draft-window 4,4" in tune.command_for(cfg, cands[0], 2, "code")
    assert "--draft-window" not in tune.command_for(cfg, cands[1], 2, "code")
    from cpuspec.report.tune import render_tune
    assert "Draft window: every draft model read the first 4 and last 4 tokens" in \
        render_tune({**doc, "settings": {"draft_window": [4, 4]}})


@pytest.mark.parametrize("args, message", [
    (["--drafts", "lookup", "--draft-window", "4,4"], "--draft-window needs a draft model"),
    (["--draft-window", "4"], "is not HEAD,TAIL"),
])
def test_tune_refuses_a_window_it_cannot_use(args, message):
    res = CliRunner().invoke(main, ["tune", "--tasks", "json", *args])
    assert res.exit_code == 2 and message in res.output, res.output
    assert "Traceback" not in res.output


def test_hybrid_without_a_model_is_refused():
    res = CliRunner().invoke(main, ["tune", "--drafts", "lookup,hybrid:", "--tasks", "json"])
    assert res.exit_code != 0 and "'hybrid:' names no draft model" in res.output
    assert "Traceback" not in res.output


def test_a_small_predicted_gain_does_not_beat_raw_decoding(tiny_models, monkeypatch):
    """Machine C: SD on the Q4_0 target was predicted at 1.02-1.04x its raw speed, picked as
    the fastest answer, and measured 0.87-0.89x. A gain inside the prediction's error no longer
    decides: raw decoding stays the fastest answer, SD stays 'where SD pays most'."""
    from cpuspec.tune import search as tune
    from cpuspec.harness.bench import BenchConfig
    from cpuspec.inputs.models import local_model
    real = tune.predictions

    def marginal(results, k_max, probe=None):
        out = real(results, k_max, probe)
        for p in out.values():
            for row in p["rows"]:
                row["predicted_speedup"] = 1.0 + tune.FASTEST_SD_MARGIN / 2
        return out
    monkeypatch.setattr(tune, "predictions", marginal)
    monkeypatch.setattr(candidates, "ceiling", lambda probe, k_max, d: (2.0, 2))
    cand = tune.Candidate(local_model(tiny_models["target"]), local_model(tiny_models["draft"]))
    cfg = BenchConfig(prompts=builtin_prompts(["code"], 2), threads=1, max_tokens=12)
    doc = tune.run_tune(cfg, [cand], k_max=2, confirm=False)
    rec = doc["recommendations"]["code"]
    assert rec["recommended"]["candidate"] == "target (SD off)"
    assert all(o["k"] == 0 for o in rec["top"])
    assert rec["best_sd"]["pays"] and rec["best_sd"]["k"] >= 1


def test_the_reference_raw_run_survives_the_budget(tiny_models):
    """Machine C, --budget 12: every candidate of the first target was cut, so was its raw
    run, and tune printed no answer at all. The yardstick is now always measured."""
    from cpuspec.tune import search as tune
    from cpuspec.harness.bench import BenchConfig
    from cpuspec.inputs.models import local_model
    ref, other = local_model(tiny_models["target"]), local_model(tiny_models["same"])
    cands = [tune.Candidate(ref, local_model(tiny_models["draft"])), tune.Candidate(other, None)]
    cfg = BenchConfig(prompts=builtin_prompts(["code"], 2), threads=1, max_tokens=12)
    doc = tune.run_tune(cfg, cands, k_max=2, budget_s=1e-9, confirm=False)
    assert doc["recommendations"]["code"]["recommended"]["candidate"]
    assert any(r["target"] == "target" for r in doc["raw_runs"]) or \
        any(m["candidate"].startswith("target + ") for m in doc["measured"])


def test_one_pilot_per_drafter_ranks_every_target(tiny_models, monkeypatch):
    """Machine C, --budget 12: the cost curves alone put lookup and the hybrid first (a draft
    that costs nothing has the highest ceiling), and the budget ran out before the candidates
    that pay. A short pilot per drafter now gives each candidate an acceptance: the draft
    model's pilot runs once, on the first target, and ranks both targets."""
    from cpuspec.tune import search as tune
    from cpuspec.harness.bench import BenchConfig
    from cpuspec.inputs.models import local_model
    t, other = local_model(tiny_models["target"]), local_model(tiny_models["same"])
    draft = local_model(tiny_models["draft"])
    cands = [tune.Candidate(t, draft), tune.Candidate(other, draft)]
    monkeypatch.setattr(candidates, "ceiling", lambda probe, k_max, d: (2.0, 2))  # not ruled out
    cfg = BenchConfig(prompts=builtin_prompts(["json", "code"], 2), threads=1, max_tokens=12)
    doc = tune.run_tune(cfg, cands, k_max=2, confirm=False, budget_s=1e-9)
    assert len(doc["pilots"]) == 1 and doc["pilot_prompts"] == ["json-1", "code-1"]
    pilot = doc["pilots"][0]
    assert pilot["models"]["target"]["path"] == str(t.path)
    assert pilot["settings"]["k"] == 2 and pilot["settings"]["policies"] == ["static"]
    ranked = [r for r in doc["ranking"] if not r["ruled_out"]]
    assert ranked and all(r["pilot_task"] in ("json", "code") and 1 <= r["pilot_k"] <= 2
                          for r in ranked)
    # the budget let one candidate be measured: the pilot's first, whatever the ceilings say
    first = max(ranked, key=lambda r: r["pilot_score"])["candidate"]
    assert [m["candidate"] for m in doc["measured"]] == [first]


def test_pilot_rank_prices_each_candidate_with_its_own_curve():
    """On a recorded machine-B run (Q8_0 target + Q4_0 draft, k = 7) as the pilot: a curve
    twice as slow in V(n) predicts the same ×own raw and half the ×reference raw; lookup's
    draft costs are set to nothing, whatever the curve's draft measured."""
    from cpuspec.results.schema import read_json
    from cpuspec.tune.candidates import Candidate, pilot_rank
    res = read_json(Path("bench/results/epyc-family25-model17/bench_q8_0_k7.json.gz"))
    probe = res["cost_probe"]

    class M:
        def __init__(self, name):
            self.path, self.spec = Path(name), type("S", (), {"name": name})()
    model = Candidate(M("t"), M("d"))
    own = pilot_rank(model, probe, res, probe["verify_s"]["1"], 7)
    assert own["pilot_speedup"] > 1.2 and own["pilot_vs_reference_raw"] == own["pilot_speedup"]
    slow = {**probe, "verify_s": {n: 2 * v for n, v in probe["verify_s"].items()},
            "draft_s": 2 * probe["draft_s"], "target_prefill_s": 2 * probe["target_prefill_s"],
            "draft_prefill_s": 2 * probe["draft_prefill_s"],
            "draft_catchup_s_per_token": 2 * probe["draft_catchup_s_per_token"]}
    half = pilot_rank(model, slow, res, probe["verify_s"]["1"], 7)
    assert half["pilot_speedup"] == pytest.approx(own["pilot_speedup"])
    assert half["pilot_vs_reference_raw"] == pytest.approx(own["pilot_speedup"] / 2)
    # lookup from the hybrid's rounds: the draft model's cost no longer counts
    hyb = read_json(Path("bench/results/epyc-family25-model17/hybrid_q8_0_k7.json.gz"))
    dear = {**hyb["cost_probe"], "draft_s": 10.0, "draft_catchup_s_per_token": 10.0}
    lookup = pilot_rank(Candidate(M("t"), None), dear, hyb, hyb["cost_probe"]["verify_s"]["1"], 7)
    hybrid = pilot_rank(Candidate(M("t"), M("d"), hybrid=True), dear, hyb,
                        hyb["cost_probe"]["verify_s"]["1"], 7)
    assert lookup["pilot_speedup"] > 1.0 > hybrid["pilot_speedup"]


def test_depths_predict_each_answer_from_its_own_curve_at_each_depth(tiny_models, monkeypatch):
    """--depths: the paying answer's cost curve is measured at every depth (the probe sits
    after that much context) and the answer is predicted there with the choosing runs'
    acceptance; the printer shows a column per depth and where SD stops or starts paying."""
    from cpuspec.tune import search as tune
    from cpuspec.harness.bench import BenchConfig
    from cpuspec.inputs.models import local_model
    from cpuspec.report.tune import render_tune
    force_paying_at_k2(monkeypatch)
    logged = []
    cand = tune.Candidate(local_model(tiny_models["target"]), local_model(tiny_models["draft"]))
    cfg = BenchConfig(prompts=builtin_prompts(["code"], 2), threads=1, max_tokens=16)
    doc = tune.run_tune(cfg, [cand], logged.append, k_max=3, confirm=False, depths=[0, 300])
    d = doc["depth_predictions"]["code"]
    assert d["k"] == 2 and [r["depth"] for r in d["by_depth"]] == [0, 300]
    assert all(r["predicted_speedup"] > 0 for r in d["by_depth"])
    assert sum("cost curve of target + draft at depth" in m for m in logged) == 2
    pays = [r["predicted_speedup"] > 1 for r in d["by_depth"]]
    assert (d["crossover_depth"] == 300) == (pays[0] != pays[1])
    out = render_tune(doc)
    assert "SD at depth, predicted" in out and "×raw at 300" in out


def test_pooled_costs_are_the_median_of_every_sample():
    from cpuspec.tune.candidates import pool_probes
    a = {"position": 60, "verify_s": {"1": 2.0, "2": 9.0}, "verify_samples_s": {"1": [1.0, 2.0, 3.0],
         "2": [9.0]}, "draft_s": 0.5, "draft_samples_s": [0.5], "target_prefill_s": 1.0,
         "draft_prefill_s": 0.2, "draft_catchup_s_per_token": 0.1,
         "draft_catchup_samples_s_per_token": [0.1]}
    b = {**a, "verify_s": {"1": 4.5}, "verify_samples_s": {"1": [4.0, 5.0]},
         "draft_samples_s": [0.3, 0.7, 0.9], "target_prefill_s": 3.0}
    p = pool_probes([a, b], [a, b])
    assert p["verify_s"] == {"1": 3.0}            # 1, 2, 3, 4, 5; batch 2 only in one probe
    assert p["draft_s"] == 0.6                     # 0.5, 0.3, 0.7, 0.9
    assert p["target_prefill_s"] == 2.0 and p["pooled_from"] == 2
    assert pool_probes([a], [])["draft_s"] == 0.5  # no draft probes: the target probe's own


@pytest.mark.parametrize("name", ["tune_json_code", "tune_json_code_budget12"])
def test_one_curve_per_model_makes_two_tunes_agree(name):
    """Machine B, an unlimited tune and a 12-minute one: the same acceptance for the Q8_0
    target with the draft model and with the hybrid, and each run's own probe 10 % apart, so
    one picked the hybrid and the other the model. Priced with one pooled curve per target and
    draft model, both recorded runs pick the same SD configuration per task."""
    from cpuspec.results.schema import read_json
    from cpuspec.tune.candidates import pool_probes
    doc = read_json(Path(f"bench/results/epyc-family25-model17/{name}.json.gz"))
    by_target: dict = {}
    by_draft: dict = {}
    for m in doc["measured"]:
        target, _, draft = m["candidate"].partition(" + ")
        probe = m["results"]["cost_probe"]
        by_target.setdefault(target, []).append(probe)
        if draft != "lookup":
            by_draft.setdefault(draft.removeprefix("lookup/"), []).append(probe)

    def best(own: bool) -> dict:
        out = {}
        for m in doc["measured"]:
            target, _, draft = m["candidate"].partition(" + ")
            model = draft.removeprefix("lookup/")
            probe = m["results"]["cost_probe"] if own else pool_probes(
                by_target[target], by_draft.get(model, []) if draft != "lookup" else [])
            if draft == "lookup" and not own:
                probe = {**probe, **{k: m["results"]["cost_probe"][k] for k in (
                    "draft_s", "draft_prefill_s", "draft_catchup_s_per_token")}}
            for task, p in tune.predictions(m["results"], 8, probe).items():
                for row in p["rows"]:
                    if row["predicted_speedup"] > out.get(task, ("", 0, 0.0))[2]:
                        out[task] = (m["candidate"], row["k"], row["predicted_speedup"])
        return {t: v[:2] for t, v in out.items()}
    pooled = best(own=False)
    # the same answers from both runs (json by a hair: the two drafters predict within 0.3 %)
    assert pooled == {"json": ("qwen2.5-coder-1.5b-q8_0 + lookup/qwen2.5-coder-0.5b-q4_0", 7),
                      "code": ("qwen2.5-coder-1.5b-q8_0 + qwen2.5-coder-0.5b-q4_0", 7)}
    # what each printed, priced by its runs' own probes: the two runs disagreed
    printed = {"tune_json_code": ("lookup/", "lookup/"),
               "tune_json_code_budget12": ("", "")}[name]
    own = best(own=True)
    assert [own[t][0] for t in ("json", "code")] == [
        f"qwen2.5-coder-1.5b-q8_0 + {p}qwen2.5-coder-0.5b-q4_0" for p in printed]


def test_calibrated_depth_predictions_come_closer_to_the_measured_depths():
    """Machine B's recorded tune with --depths and confirmation, against the bench's measured
    depth sweep of the same configuration (other runs, other prompts): at 4 k tokens the
    predictions scaled by confirmed ÷ predicted at depth 0 lie nearer what was measured than
    the choosing prompts' own, for each task, and code's crossover is found."""
    import copy

    from cpuspec.tune.candidates import calibrate_depths
    from cpuspec.results.schema import read_json
    from cpuspec.analysis.summary import summarize
    results = Path(__file__).parent.parent / "bench" / "results" / "epyc-family25-model17"
    doc = read_json(results / "tune_depths_q8_0_confirmed.json.gz")
    depths = copy.deepcopy(doc["depth_predictions"])
    for d in depths.values():           # as predict_at_depths left them
        for r in d["by_depth"]:
            r.pop("calibrated_speedup")
        d.pop("calibration")
    calibrate_depths(depths, doc["recommendations"])
    sweep = read_json(results / "depth_q8_0_k7.json.gz")
    at_4k = summarize(next(p for p in sweep["points"] if p["settings"]["depth"] == 4096))
    for task in ("json", "code"):
        row = next(r for r in depths[task]["by_depth"] if r["depth"] == 4096)
        measured = at_4k[task]["sd_speedup"]
        assert abs(row["calibrated_speedup"] - measured) < abs(row["predicted_speedup"]
                                                               - measured) / 2
    assert (depths["code"]["crossover"], depths["code"]["crossover_depth"]) == \
        ("stops paying", 4096)


def test_a_run_reuses_probes_that_cover_its_k_and_probes_afresh_otherwise(tiny_models):
    """BenchConfig.probes: an earlier run's cost probes that reach k + 1 stand in for this
    run's (none measured: the log says where they came from); ones that stop short of k + 1
    cannot price that k, so the run measures its own."""
    import dataclasses

    from cpuspec.harness.bench import BenchConfig, run_bench
    from cpuspec.tune.search import reused_probes
    base = BenchConfig(prompts=builtin_prompts(["code"], 1), threads=1, max_tokens=8,
                       target_path=tiny_models["target"], draft_path=tiny_models["draft"],
                       policies=["static"], warmup=0, quality=False, k=2)
    first = run_bench(base)
    logs: list[str] = []
    again = run_bench(dataclasses.replace(base, probes=reused_probes(first, "the first")),
                      logs.append)
    assert again["cost_probes_from"] == "reused from tune's choosing run of the first"
    assert again["cost_probe"] == first["cost_probe"] and "cost_probe_end" not in again
    # the prediction stands on the reused probe; a drift band would be another run's: none
    from cpuspec.analysis.summary import summarize
    assert summarize(again)["code"]["predicted_speedup"] > 0
    assert not summarize(again)["code"].get("predicted_band")
    assert not any(line.startswith(("cost probe:", "cost probe again")) for line in logs), logs
    assert {r["mode"] for r in again["runs"]} == {"raw", "static"}
    logs.clear()
    deeper = run_bench(dataclasses.replace(base, k=20, probes=reused_probes(first, "the first")),
                       logs.append)
    assert "cost_probes_from" not in deeper and "21" in deeper["cost_probe"]["verify_s"]
    assert "21" not in first["cost_probe"]["verify_s"]
    assert sum(line.startswith(("cost probe:", "cost probe again")) for line in logs) == 2, logs
