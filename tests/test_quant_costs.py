"""Quant as an axis: derived quants through llama.cpp's quantizer, and the verify-cost curve
(`cpuspec costs`), on the tiny generated models."""
import hashlib
import json
import os

import pytest
from click.testing import CliRunner

from cpuspec.inputs import models
from cpuspec.cli.main import main
from cpuspec.core.costs import cost_curve
from cpuspec.llama.engine import Model
from cpuspec.inputs.registry import load_registry


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_derive_a_file(tiny_models):
    res = run("models", "derive", str(tiny_models["target"]), "--quant", "q8_0")
    assert res.exit_code == 0, res.output
    path = res.output.strip().splitlines()[-1]
    assert path.endswith(".gguf") and "Q8_0" in path
    with Model(path) as m:
        assert "Q8_0" in m.desc
    size = os.path.getsize(path)
    assert size < tiny_models["target"].stat().st_size  # F32 → 8.5 bits per weight
    # issue 53, 6k: an F32 parent is quantized, not "requantized from another quant"
    assert "another quant" not in res.output and "quantized locally from F32" in res.output
    again = run("models", "derive", str(tiny_models["target"]), "--quant", "Q8_0")
    assert again.output.strip().splitlines()[-1] == path and "quantizing" not in again.output
    bad = run("models", "derive", str(tiny_models["target"]), "--quant", "Q3_X")
    assert bad.exit_code != 0 and "is not one of" in bad.output


def test_registry_entry_derives_where_no_source_has_the_file(tiny_models, tmp_path,
                                                             monkeypatch, cpuspec_home):
    data = tiny_models["target"].read_bytes()
    reg = tmp_path / "models.toml"
    reg.write_text(
        f'[models.t]\nrepo = "X/T"\nfile = "t.gguf"\nsha256 = '
        f'"{hashlib.sha256(data).hexdigest()}"\n'
        '[models.t-q8]\nrepo = "X/T"\nfile = "t-q8_0.gguf"\nderive_from = "t"\n'
        'quant = "Q8_0"\n[pairs.p]\ntarget = "t-q8"\ndraft = "t"\n')
    monkeypatch.setenv("CPUSPEC_MODELS", str(reg))
    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    (cpuspec_home / "models").mkdir(parents=True)
    (cpuspec_home / "models" / "t.gguf").write_bytes(data)
    got = models.fetch_model(load_registry().model("t-q8"))
    assert got.source == "derived" and got.verified
    assert got.derived["parent_sha256"] == hashlib.sha256(data).hexdigest()
    assert got.derived["quant"] == "Q8_0" and "not exactly its quality" in got.derived["note"]
    out = tmp_path / "r.json"
    res = run("bench", "--pair", "p", "--threads", "1", "--tasks", "json",
              "--prompts-per-task", "1", "--max-tokens", "8", "--warmup", "0", "--json",
              str(out))
    assert res.exit_code == 0, res.output
    target = json.loads(out.read_text())["models"]["target"]
    assert target["source"] == "derived" and target["derived"]["parent"] == "t"


def test_costs_command(tiny_models, tmp_path):
    out = tmp_path / "costs.json"
    res = run("costs", "--target", str(tiny_models["target"]), "--draft",
              str(tiny_models["draft"]), "--threads", "1", "--max-n", "6", "--reps", "2",
              "--json", str(out))
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    # 2 repetitions per size: the ceiling is said as an estimate, not a bound
    assert "V(n)/V(1)" in text and "about" in text and "Not a bound: 2 repetitions" in text
    data = json.loads(out.read_text())
    assert data["kind"] == "costs" and data["schema_version"] == 2
    probe = data["cost_probe"]
    assert sorted(map(int, probe["verify_s"])) == [1, 2, 3, 4, 5, 6]
    assert len(probe["verify_samples_s"]["6"]) == 2
    assert cost_curve(probe)[0]["v_over_v1"] == 1.0
    assert run("runs").exit_code == 0


def test_cost_curve_by_hand():
    probe = {"verify_s": {"1": 0.010, "2": 0.012, "4": 0.020}, "draft_s": 0.002}
    rows = {r["n"]: r for r in cost_curve(probe)}
    assert rows[1]["ceiling_speedup"] == 1.0
    # n = 4: 2 decodes' worth (β = 1.0), 5 ms per token; all 3 drafts accepted gives 4 tokens
    # for 3 × 2 ms + 20 ms = 26 ms against 40 ms: 1.538×.
    assert rows[4]["v_over_v1"] == pytest.approx(2.0) and rows[4]["beta"] == pytest.approx(1.0)
    assert rows[4]["ms_per_token"] == pytest.approx(5.0)
    assert rows[4]["ceiling_speedup"] == pytest.approx(40 / 26)
    assert rows[2]["ceiling_speedup"] == pytest.approx(20 / 14)
