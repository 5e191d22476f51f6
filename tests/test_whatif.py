"""Issue 50, item 3: the what-if over larger (shape-true) targets. The break-even acceptance
per k and the best speedup at an assumed acceptance come from a real recorded cost probe; each
is checked against the textbook sum worked here from the probe's raw fields (by_hand: not the
predictor under test, issue 79 item 16), so an error in either shows. Bad sizes, quants and a --target beside
--sizes are refused before any model loads."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.analysis.whatif import ASSUMED_P, predicted_sd_speedup, whatif_row
from cpuspec.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
PROBES = [ROOT / "bench/results/epyc-family25-model17" / f for f in
          ("costs_q4_0.json", "costs_q8_0.json", "costs_q4km.json")]


def by_hand(probe: dict, p: float, k: int) -> float:
    """SD ×raw at i.i.d. acceptance p and draft length k, from the probe file's raw fields
    and the textbook sum (Leviathan et al.): a round yields 1 + p + … + p^k tokens for k
    draft decodes and one target decode of k + 1 tokens; raw decoding yields a token per
    target decode of 1."""
    v = {int(n): s for n, s in probe["verify_s"].items()}
    tokens = sum(p ** i for i in range(k + 1))
    return tokens * v[1] / (k * probe["draft_s"] + v[k + 1])


@pytest.mark.parametrize("path", PROBES, ids=lambda p: p.name)
def test_break_even_acceptance_is_where_the_predicted_speedup_crosses_one(path):
    probe = json.loads(path.read_text())["cost_probe"]
    row = whatif_row(probe)
    assert row["break_even_p"], row
    for k, p in row["break_even_p"].items():
        if p is None:      # no acceptance pays: even every draft accepted stays below 1
            assert by_hand(probe, 1.0, k) <= 1.0
            continue
        assert by_hand(probe, p, k) == pytest.approx(1.0, abs=1e-6)
        assert by_hand(probe, min(p + 0.02, 0.999), k) > 1.0


@pytest.mark.parametrize("path", PROBES, ids=lambda p: p.name)
def test_the_best_speedup_at_an_assumed_acceptance_is_the_best_k_by_hand(path):
    probe = json.loads(path.read_text())["cost_probe"]
    row = whatif_row(probe)
    ks = list(row["break_even_a"])
    ceiling = max(by_hand(probe, 1.0, k) for k in ks)   # every draft accepted
    previous = 0.0
    for acc in ASSUMED_P:
        best = row["best"][acc]
        want = max(by_hand(probe, acc, k) for k in ks)
        assert best["sd_speedup"] == pytest.approx(want)
        assert best["speedup"] == pytest.approx(max(want, 1.0))
        assert best["speedup"] <= max(ceiling, 1.0) + 1e-9
        assert best["speedup"] >= previous    # more acceptance never predicts less
        previous = best["speedup"]
        if best["k"]:
            assert by_hand(probe, acc, best["k"]) == pytest.approx(best["speedup"])


@pytest.mark.parametrize("args, message", [
    (["--sizes", "99b"], "no shape named '99b'"),
    (["--sizes", "7b", "--quants", "Q3_K"], "Q3_K: one of Q4_K_M, Q4_0, Q8_0"),
    (["--sizes", "7b", "--target", "x.gguf"], "not --target"),
    (["--pairs", "gemma3-270m:qwen3-8b"], "draft and target must share a tokenizer"),
    (["--pairs", "qwen3-8b"], "DRAFT:TARGET"),
    (["--pairs", "qwen3-0.6b:qwen3-8b,qwen3-1.7b:qwen3-8b"], "qwen3-8b is paired twice"),
    (["--pairs", "qwen3-0.6b:qwen3-8b", "--sizes", "7b"], "not both"),
    (["--acceptance", "whatever"], "go with --sizes or --pairs"),
    (["--pairs", "qwen3-0.6b:qwen3-8b", "--acceptance", "nosuchrun"], "no results file"),
    (["--pairs", "qwen3-0.6b:qwen3-8b", "--acceptance",
      str(ROOT / "bench/results/epyc-family25-model17/costs_q4km.json")], "not a saved bench"),
    (["--pairs", "qwen3-0.6b:qwen3-8b", "--acceptance",
      str(ROOT / "bench/results/avx2-build/lookup_2threads.json.gz")], "of a draft model"),
    (["--sizes", "gemma3-4b"], "gemma3-4b is Gemma 3, the pair's draft Qwen2.5"),
    (["--pairs", "qwen3-0.6b:qwen3-8b", "--pair", "qwen2.5-coder-1.5b"], "leave --pair out"),
])
def test_bad_what_if_input_is_refused_before_models_load(args, message, tmp_path):
    if "--target" in args:
        (tmp_path / "x.gguf").write_bytes(b"GGUF")
        args = [a.replace("x.gguf", str(tmp_path / "x.gguf")) for a in args]
    res = CliRunner().invoke(main, ["costs", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output and "loading" not in res.output


WHATIF = ROOT / "bench/results/epyc-family25-model17/whatif_q4km_q4_0.json"
LOAD = ROOT / "bench/results/epyc-family25-model17/load_q8_0_k7.json"


def test_the_recorded_what_if_and_load_runs_plot_and_report(tmp_path):
    """The what-if's figure has a line per quant and k over the target sizes measured, a point
    only where some acceptance pays; the load figure a point per level; both are written."""
    pytest.importorskip("matplotlib")
    from cpuspec.report.plots import load_data, whatif_data
    doc = json.loads(WHATIF.read_text())
    d = whatif_data(doc)
    assert set(d) == {"Q4_K_M", "Q4_0"}
    sizes = sorted({r["params"] / 1e9 for r in doc["rows"] if r["quant"] == "Q4_K_M"})
    assert d["Q4_K_M"][1]["x"] == sorted(d["Q4_K_M"][1]["x"]) and len(sizes) == 4
    assert all(p is None or 0 < p < 1 for line in d["Q4_0"].values() for p in line["y"])
    load = load_data(json.loads(LOAD.read_text()))
    assert load["n"] == [1, 2, 4] and load["sd"][0] > load["raw"][0]   # SD pays alone
    res = CliRunner().invoke(main, ["plot", str(WHATIF), str(LOAD), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    names = {p.name for p in tmp_path.iterdir()}
    assert {"whatif_whatif_q4km_q4_0.png", "load_load_q8_0_k7.png"} <= names, names
    out = CliRunner().invoke(main, ["report", str(LOAD)]).output
    assert "SD pays for up to 2 request(s) in flight here; off from 4" in out


def test_a_hand_case_worked_on_paper():
    """Issue 57, item 10: numbers worked by hand, not by the formulas under test. A draft
    token costs 0.1 of a decode, V(1) = 1, V(2) = 1.2: a round of k = 1 costs 0.1 + 1.2 = 1.3
    decodes, so a*(1) = 1.3 tokens; i.i.d. acceptance yields 1 + p tokens at k = 1, so the
    break-even p* = 0.3; at p = 0.9 a round yields 1.9 tokens for 1.3 decodes: 1.9 / 1.3 =
    1.4615× (the issue's "1.2×" is p = 0.56: 1.56 / 1.3)."""
    probe = {"verify_s": {"1": 1.0, "2": 1.2}, "draft_s": 0.1}
    row = whatif_row(probe)
    assert row["break_even_a"][1] == pytest.approx(1.3)
    assert row["break_even_p"][1] == pytest.approx(0.3, abs=1e-9)
    assert row["best"][0.9]["sd_speedup"] == pytest.approx(1.4615, abs=1e-4)
    assert row["best"][0.9]["k"] == 1 and row["best"][0.9]["state"] == "on"
    assert predicted_sd_speedup(probe, 0.56, 1) == pytest.approx(1.2)


BENCH = ROOT / "bench/results/xeon-family6-model167/bench_newcomer.json.gz"


def test_a_borrowed_profile_prices_like_the_iid_rate_it_stands_for():
    """An acceptance profile p, p², … is i.i.d. acceptance at p: profile_best must give the
    best over k ≤ 4 of the i.i.d. formula (Leviathan et al.'s E[tokens]), another path."""
    from cpuspec.analysis.whatif import profile_best
    probe = json.loads(PROBES[2].read_text())["cost_probe"]
    for p in (0.5, 0.7, 0.9):
        got = profile_best(probe, [p ** i for i in range(1, 5)])
        want = max(by_hand(probe, p, k) for k in range(1, 5))
        assert got["sd_speedup"] == pytest.approx(want)


def test_a_saved_bench_runs_profile_is_read_per_task():
    """The newcomer's recorded run (k = 4): per task, four positions, each at most the one
    before (a draft is kept only after every draft before it)."""
    from cpuspec.analysis.whatif import acceptance_profiles
    from cpuspec.results.schema import load_json
    prof = acceptance_profiles(load_json(BENCH))
    assert set(prof) == {"json", "code", "story"}
    for xs in prof.values():
        assert len(xs) == 4 and all(0 <= b <= a <= 1 for a, b in zip(xs, xs[1:]))
    assert prof["story"][0] < prof["json"][0]


def test_pairs_probe_each_target_with_its_own_draft(tiny_models, monkeypatch, tmp_path):
    """costs --pairs end to end at tiny widths: each target's row names its own draft, and
    --acceptance adds the borrowed-profile table, named as such."""
    from cpuspec.inputs.shapes import SHAPES, Shape
    for name, layers in (("tinyd", 2), ("tinyt", 4)):
        monkeypatch.setitem(SHAPES, name, Shape(name, "qwen3", 256, layers, 4, 2, 512, 512,
                                                head_dim=64))
    monkeypatch.setattr("cpuspec.cli.models.tokenizer_file",
                        lambda arch, log: tiny_models["target"])
    out = tmp_path / "w.json"
    res = CliRunner().invoke(main, ["costs", "--pairs", "tinyd:tinyt", "--max-n", "3",
                                    "--reps", "1", "-t", "1", "--acceptance", str(BENCH),
                                    "--json", str(out), "--no-save"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["rows"][0]["draft"]["file"].startswith("tinyd-")
    assert doc["acceptance"]["run"] == "bench_newcomer"
    assert "measured profile borrowed" in " ".join(res.output.split())
