"""`cpuspec tune` on the tiny models: two drafts, predictions for every k from one run at
k_max, and a confirmation on prompts it did not choose on."""
import json

import pytest
from click.testing import CliRunner

from cpuspec.cli import main
from cpuspec.tasks import builtin_prompts
from cpuspec.tune import split_prompts


def test_split_never_confirms_on_tuning_prompts():
    tune, confirm = split_prompts(builtin_prompts(["json", "code"], 4))
    assert [p.prompt_id for p in tune] == ["json-1", "json-3", "code-1", "code-3"]
    assert [p.prompt_id for p in confirm] == ["json-2", "json-4", "code-2", "code-4"]


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
    assert len(doc["measured"]) == 3
    assert doc["candidates"][2] == "target + lookup"
    assert list(doc["target_perplexity"]) == ["target"] and doc["target_perplexity"]["target"] > 1
    assert "target perplexity on the built-in text: target " in res.output
    lookup = doc["measured"][2]["results"]
    assert lookup["settings"]["drafter"] == "lookup" and lookup["models"]["draft"] == {
        "drafter": "lookup", "ngram_max": 6, "ngram_min": 2}
    preds = doc["measured"][0]["predictions"]["json"]["rows"]
    assert [r["k"] for r in preds] == [1, 2, 3, 4]
    rec = doc["recommendations"]["json"]
    # The recommendation is the fastest of every (draft, k) predicted, 3 drafters × 4 k, and
    # of raw decoding on each target; best_sd is the best SD against its own target's raw.
    top = rec["top"]
    assert top[0]["predicted_vs_reference_raw"] == rec["recommended"][
        "predicted_vs_reference_raw"] >= 1.0
    assert any(o["candidate"] == "target (SD off)" and o["k"] == 0 for o in top)
    best = rec["best_sd"]
    assert best["k"] >= 1 and best["terms"]["break_even_a"] == pytest.approx(
        1 + best["terms"]["alpha"] + best["terms"]["beta"])
    if best["pays"]:
        assert "SD pays most: cpuspec bench --target" in res.output
        assert best["confirmed"]["audit"]["identical"] == best["confirmed"]["audit"]["n"]
    else:   # same-size tiny drafts cost as much as the target: SD cannot pay
        assert rec["recommended"]["candidate"] == "target (SD off)"
        assert "--policy off" in rec["recommended"]["command"]
        assert "SD does not pay with any candidate" in res.output and "a is short by" in \
            res.output and "confirmed" not in best
    bad = CliRunner().invoke(main, ["tune", "--targets", str(tiny_models["target"]),
                                    "--drafts", str(tiny_models["draft"]), "--tasks", "json",
                                    "--prompts-per-task", "1"])
    assert bad.exit_code != 0 and "2" in bad.output


def test_confirmation_runs_on_the_other_prompts(tiny_models, monkeypatch):
    """Where a configuration is predicted to pay (forced here: same-size tiny drafts never
    do), it is run for real on the confirm prompts, with its audit."""
    from cpuspec import tune
    from cpuspec.bench import BenchConfig
    from cpuspec.models import local_model
    real = tune.predictions

    def paying(results, k_max):
        out = real(results, k_max)
        for p in out.values():
            p["rows"][1]["predicted_speedup"] = 1.5   # k = 2
        return out
    monkeypatch.setattr(tune, "predictions", paying)
    cand = tune.Candidate(local_model(tiny_models["target"]), local_model(tiny_models["draft"]))
    cfg = BenchConfig(prompts=builtin_prompts(["code"], 2), threads=1, max_tokens=16)
    doc = tune.run_tune(cfg, [cand], k_max=3)
    rec = doc["recommendations"]["code"]
    best = rec["best_sd"]
    assert best["pays"] and best["k"] == 2
    assert rec["recommended"]["sd"] and rec["recommended"]["k"] == 2  # beats raw (1.0)
    run = doc["confirm_runs"][0]
    assert len(doc["confirm_runs"]) == 1   # one run serves both: the same configuration
    assert [p["prompt_id"] for p in run["prompts"]] == ["code-2"] and run["settings"]["k"] == 2
    assert best["confirmed"]["audit"] == {"n": 1, "identical": 1,
                                          "min_margin_at_divergence": None}
    assert rec["recommended"]["confirmed"] == best["confirmed"]
    assert "-k 2" in best["command"] and "--tasks code" in best["command"]


def test_hybrid_without_a_model_is_refused():
    res = CliRunner().invoke(main, ["tune", "--drafts", "lookup,hybrid:", "--tasks", "json"])
    assert res.exit_code != 0 and "'hybrid:' names no draft model" in res.output
    assert "Traceback" not in res.output
