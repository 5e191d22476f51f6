"""Laptop comparisons: `cpuspec compare` and `cpuspec plot`, on real recorded runs (an AVX2
build and the AVX-512 build of this project's machine, bench/results)."""
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main
from cpuspec.report.compare import compare_rows, mismatches
from cpuspec.results.records import Machine
from cpuspec.report.plots import figure_data
from cpuspec.report.advice import advise
from cpuspec.results.schema import read_json
from cpuspec.analysis.summary import summarize

RESULTS = Path(__file__).parent.parent / "bench" / "results"
OLD = RESULTS / "avx2-build" / "bench_2threads.json.gz"     # schema 1, AVX2 build
NEW = RESULTS / "bench_2threads.json.gz"                    # schema 2, AVX-512 build
Q40 = RESULTS / "bench_q4_0_k3.json.gz"                     # another pair and k
COSTS = RESULTS / "costs_q4_0.json"


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_machines_are_told_apart_by_their_own_records():
    old, new = Machine.of(read_json(OLD)), Machine.of(read_json(NEW))
    assert "AVX2" in old.isa and "AVX512" not in old.isa
    assert "AVX512" in new.isa and "AVX512_VNNI" in new.isa
    assert old.threads == new.threads == 2
    assert not old.same_as(new) and old.same_as(Machine.of(read_json(OLD)))


def test_compare_two_machines_side_by_side():
    res = run("compare", str(OLD), str(NEW))
    assert res.exit_code == 0, res.output
    assert "[AVX2] 2t" in res.output and "[AVX512+AVX_VNNI] 2t" in res.output
    wide = run("compare", str(OLD), str(NEW), "--details").output
    assert "ISA AVX AVX2 F16C FMA;" in wide and "AVX512_VNNI" in wide
    rows = compare_rows([read_json(OLD), read_json(NEW)])
    raw = next(r for r in rows if r["task"] == "json" and r["metric"] == "raw_tok_s")
    old_s, new_s = summarize(read_json(OLD))["json"], summarize(read_json(NEW))["json"]
    assert raw["values"] == [old_s["raw_tok_s"], new_s["raw_tok_s"]]
    assert raw["ratio"] == pytest.approx(new_s["raw_tok_s"] / old_s["raw_tok_s"])
    assert raw["ratio"] > 1.5                # the AVX-512 build decodes ~2× faster
    sp = next(r for r in rows if r["task"] == "json" and r["metric"] == "sd_speedup")
    assert sp["ci"][1] == new_s["sd_speedup_ci"]
    data = json.loads(run("compare", str(OLD), str(NEW), "--format", "json").output)
    assert data["mismatches"] == [] and len(data["runs"]) == 2
    csv_out = run("compare", str(OLD), str(NEW), "--format", "csv").output
    assert csv_out.splitlines()[0] == \
        "task,metric,avx2-build/bench_2threads,results/bench_2threads,ratio"
    assert "| task" in run("compare", str(OLD), str(NEW), "--format", "markdown").output


def test_mismatched_workloads_are_refused_unless_forced():
    diff = mismatches([read_json(NEW), read_json(Q40)])
    assert any(d.startswith("target model sha256") for d in diff)
    assert any(d.startswith("k: 4 vs 3") for d in diff)
    res = run("compare", str(NEW), str(Q40))
    assert res.exit_code != 0 and "not comparable" in res.output and "k: 4 vs 3" in res.output
    res = run("compare", str(NEW), str(Q40), "--force")
    assert res.exit_code == 0 and "WARNING: comparing different workloads" in res.output
    assert run("compare", str(NEW)).exit_code != 0


def test_plot_data_is_the_reported_data():
    runs = [read_json(OLD), read_json(NEW), read_json(COSTS)]
    data = figure_data(runs, ["old", "new", "costs"])
    new = summarize(runs[1])
    series = data["speedup"]["series"][1]
    assert series["tasks"] == ["json", "code", "story"]
    assert series["speedup"] == [new[t]["sd_speedup"] for t in series["tasks"]]
    assert series["ci"][0] == new["json"]["sd_speedup_ci"]
    pts = {(p["run"], p["task"]): p for p in data["breakeven"]["points"]}
    assert pts[("new", "json")]["a"] == new["json"]["a"]
    assert pts[("new", "json")]["pays"] is False          # k = 4 Q4_K_M: SD loses here
    curve = next(c for c in data["verify_cost"]["curves"] if c["name"].endswith("(costs)"))
    assert curve["n"] == list(range(1, 17))
    probe = runs[2]["cost_probe"]["verify_s"]
    assert curve["ratio"][3] == pytest.approx(probe["4"] / probe["1"])
    ad = data["adaptive"]["new"]["story"]    # the Q4_K_M run: costs rule SD out
    adaptive_runs = [r for r in runs[1]["runs"] if r["mode"] == "adaptive"
                     and r["task"] == "story"]
    assert len(ad["prompt_starts"]) == len(adaptive_runs) == 8
    assert len(ad["k"]) == sum(len(r["rounds"]) for r in adaptive_runs)
    assert set(ad["k"]) == {0} and ad["events"] == []
    assert "old" not in data["adaptive"]          # schema 1 runs have no trace
    q40 = figure_data([read_json(Q40)], ["q40"])["adaptive"]["q40"]["story"]
    offs = [e for e in q40["events"] if e["why"].startswith("switched off")]
    assert len(offs) == 5 and any(e["why"].startswith("re-entry") for e in q40["events"])
    lat = data["latency"]["new"]["raw"]
    assert lat["cdf"][-1] == 1.0 and lat["p50"] <= lat["p95"] <= lat["p99"]


def test_plot_writes_the_figures(tmp_path, tiny_models):
    pytest.importorskip("matplotlib")
    sweep = tmp_path / "sweep.json"
    res = run("bench", "--target", str(tiny_models["target"]), "--draft",
              str(tiny_models["draft"]), "--threads", "1", "--tasks", "json",
              "--prompts-per-task", "1", "--max-tokens", "16", "--warmup", "0", "-k", "1,2,4",
              "--no-save", "--json", str(sweep))
    assert res.exit_code == 0, res.output
    out = tmp_path / "figs"
    res = run("plot", str(OLD), str(NEW), str(COSTS), str(sweep), "--out", str(out))
    assert res.exit_code == 0, res.output
    names = sorted(p.name for p in out.iterdir())
    for stem in ("speedup", "breakeven", "verify_cost", "sweep_sweep",
                 "latency_avx2-build_bench_2threads", "latency_results_bench_2threads",
                 "adaptive_results_bench_2threads"):
        assert f"{stem}.png" in names and f"{stem}.svg" in names, names
    assert (out / "speedup.png").read_bytes()[:4] == b"\x89PNG"
    assert "AVX512" in (out / "speedup.svg").read_text()   # the caption names the machine


def test_plot_without_matplotlib_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    res = run("plot", str(NEW), "--out", str(tmp_path / "f"))
    assert res.exit_code != 0 and "pip install 'cpuspec[plot]'" in res.output


def test_report_trace_shows_where_the_policy_changed_its_mind():
    res = run("report", str(Q40), "--trace")
    assert res.exit_code == 0, res.output
    lines = {ln.split(" rep ")[0]: ln for ln in res.output.splitlines() if " rep 0: " in ln}
    assert "round 9: switched off" in lines["story-1"]
    assert lines["story-2"].endswith("no change (off)")
    assert "re-entry at a new prompt" in lines["story-5"]
    assert lines["json-1"].startswith("json-1 rep 0: ") and "drafted" in lines["json-1"]
    res = run("report", str(OLD), "--trace")        # schema 1: no trace recorded
    assert "no adaptive runs with a decision trace" in res.output


def test_advise_predicts_both_schedules_for_a_core_split():
    """From the serial run alone (recorded with the draft on its own core), advise predicts
    the parallel schedule; the parallel run was measured separately."""
    res = run("advise", str(RESULTS / "split_serial.json.gz"), "--json")
    assert res.exit_code == 0, res.output
    advice = json.loads(res.output)
    for task in ("json", "code"):
        a = advice[task]
        assert a["predicted_e2e_parallel_at_k"] > a["predicted_e2e_serial_at_k"] > 1.0
    measured = summarize(read_json(RESULTS / "split_parallel.json.gz"))
    for task in ("json", "code"):
        predicted = advice[task]["predicted_e2e_parallel_at_k"]
        assert abs(measured[task]["sd_speedup"] / predicted - 1) < 0.10
    assert "e2e parallel k=3" in run("advise", str(RESULTS / "split_serial.json.gz"),
                                     "--details").output


def test_advise_replays_lookup_rounds_instead_of_assuming_k_drafts():
    """Lookup drafts what it finds: from the recorded runs, advise's prediction at the measured
    k lands within 3 % of the measured decode-window speedup, where the fixed-k survival model
    (k drafts every round) over-predicted by 23-40 %."""
    from cpuspec.core.costs import choose_k
    for path in (RESULTS / "lookup62_q4_0_k3.json.gz",
                 RESULTS / "epyc-family25-model17" / "grounded_q8_0_k7_lookup.json.gz"):
        results = read_json(path)
        k = results["settings"]["k"]
        a = advise(results)["grounded"]
        measured = summarize(results)["grounded"]["sd_decode_speedup"]
        assert a["predicted_speedup_at_k"] == pytest.approx(measured, rel=0.03)
        assert a["needed_acceptance_pct"] is None and len(a["table"]) == k + 1
        probe = results["cost_probe"]
        survival = [p / 100 for p in
                    summarize(results)["grounded"]["per_position_acceptance_pct"]]
        _, fixed = choose_k(survival, probe["draft_s"],
                            {int(n): v for n, v in probe["verify_s"].items()})
        assert fixed[k].predicted_speedup > 1.2 * measured


def test_extrapolation_past_k_agrees_with_the_measured_positions():
    """Machine B's Q8_0 run at k = 7, seen through its first 3 draft positions: extrapolating
    acceptance to k = 7 predicts what the 7 measured positions predict, within 3 %; and advise,
    given the run as if recorded at k = 3, points at k = 7 (V(8) is cheap on that target)."""
    from cpuspec.core.costs import beyond_measured, choose_k
    results = read_json(RESULTS / "epyc-family25-model17" / "bench_q8_0_k7.json.gz")
    probe = results["cost_probe"]
    verify = {int(n): v for n, v in probe["verify_s"].items()}
    summ = summarize(results)
    for task in ("json", "code", "story"):
        survival = [p / 100 for p in summ[task]["per_position_acceptance_pct"]]
        _, measured = choose_k(survival, probe["draft_s"], verify)
        ahead = beyond_measured(survival[:3], probe["draft_s"], verify)
        assert [c.k for c in ahead] == [4, 5, 6, 7]
        assert ahead[-1].predicted_speedup == pytest.approx(measured[7].predicted_speedup,
                                                            rel=0.03)
    # The same generations as if drafted at k = 3: each round clipped to its first 3 drafts.
    at3 = json.loads(json.dumps(results))
    at3["settings"]["k"] = 3
    for r in at3["runs"]:
        r["rounds"] = [[min(j, 3), min(n, 3), min(e, min(n, 3) + 1), *rest]
                       for j, n, e, *rest in r["rounds"]]
    a = advise(at3)
    assert a["json"]["try_k"] == 7 and a["json"]["try_k_predicted"] > 1.05 * max(
        a["json"]["predicted_speedup_best"], 1.0)
    assert a["story"]["try_k"] is None    # nothing past k = 3 pays there
    from cpuspec.report.advice import render_advice
    assert "json: a longer draft may pay more" in render_advice(a, 3) and \
        "-k 7" in render_advice(a, 3)


def test_two_epyc_vms_are_told_apart_and_compared():
    """Machines A and B both call themselves "AMD EPYC": B's record carries its family/model,
    A's llama.cpp build reports AVX_VNNI. Same files and prompts: compared without --force, and
    the verdict flips on β alone."""
    b = RESULTS / "epyc-family25-model17" / "bench_q4_0_k3.json.gz"
    res = run("compare", str(Q40), str(b))
    assert res.exit_code == 0, res.output
    assert "AMD EPYC (family 25 model 17 stepping 1) [AVX512] 2t" in res.output
    assert "AMD EPYC [AVX512+AVX_VNNI] 2t" in res.output
    rows = {(r["task"], r["metric"]): r for r in compare_rows([read_json(Q40), read_json(b)])}
    assert rows[("json", "a")]["ratio"] == pytest.approx(1.0, abs=0.01)
    assert rows[("json", "beta")]["ratio"] > 2.5


def test_raw_decode_is_memory_bound_across_quants():
    """On machine B the Q8_0 target (1.9 GB) decodes at less than half the Q4_0 target's
    (1.0 GB) token rate, but both read their weights at about the same bandwidth: what the
    README's explanation of where SD pays rests on."""
    b = RESULTS / "epyc-family25-model17"
    q4 = summarize(read_json(b / "bench_q4_0_k3.json.gz"))["overall"]
    q8 = summarize(read_json(b / "bench_q8_0_k7.json.gz"))["overall"]
    assert q8["raw_decode_tok_s"] < 0.6 * q4["raw_decode_tok_s"]
    assert 0.75 < q8["raw_weight_gb_s"] / q4["raw_weight_gb_s"] < 1.33
    res = run("report", str(b / "bench_q8_0_k7.json.gz"), "--details")
    assert res.exit_code == 0 and "raw decode reads the target's weights at 30." in res.output


B = Path("bench/results/epyc-family25-model17")
FIVE = [B / f for f in ("bench_q4_0_k3.json.gz", "bench_q8_0_k7.json.gz", "hybrid_q8_0_k7.json.gz",
                        "grounded_q8_0_k7_model.json.gz", "grounded_q8_0_k7_hybrid.json.gz")]


def _svg_texts(path: Path) -> list[tuple[str, float, float]]:
    """(text, x, y) of every text element matplotlib wrote (svg.fonttype none)."""
    import re
    out = []
    for m in re.finditer(r'<text ([^>]*)>([^<]*)</text>', path.read_text()):
        attrs, text = m.group(1), m.group(2)
        x = re.search(r'\bx="([-\d.]+)"', attrs)
        y = re.search(r'\by="([-\d.]+)"', attrs)
        moved = re.search(r'translate\(([-\d.]+) ([-\d.]+)\)', attrs)
        if x and y:
            out.append((text, float(x.group(1)), float(y.group(1))))
        elif moved:
            out.append((text, float(moved.group(1)), float(moved.group(2))))
    return out


def _overlapping_labels(path: Path) -> int:
    """Pairs of point labels whose boxes (6-point text: 6 units tall, about 3.3 per character
    wide) intersect."""
    labels = [(t, x, y) for t, x, y in _svg_texts(path)
              if t.split(" (")[0] in ("json", "code", "story", "grounded") and t.endswith(")")]
    assert len(labels) >= 5
    return sum(1 for i, (t1, x1, y1) in enumerate(labels) for t2, x2, y2 in labels[i + 1:]
               if abs(y1 - y2) < 6 and (x1 <= x2 < x1 + 3.3 * len(t1)
                                        or x2 <= x1 < x2 + 3.3 * len(t2)))


def test_break_even_labels_do_not_overlap_and_captions_fit(tmp_path, monkeypatch):
    """Five recorded runs of machine B on one break-even figure: with every label at its
    point (the old layout, step 0) two labels land on each other; stacked, none does. The
    caption (command lines included) is wrapped to the figure's width, under --title."""
    pytest.importorskip("matplotlib")
    from cpuspec.report import plots
    monkeypatch.setattr(plots, "LABEL_STEP_PT", 0)
    res = run("plot", *map(str, FIVE), "--out", str(tmp_path / "old"))
    assert res.exit_code == 0, res.output
    assert _overlapping_labels(tmp_path / "old" / "breakeven.svg") > 0
    monkeypatch.undo()
    res = run("plot", *map(str, FIVE), "--out", str(tmp_path / "new"), "--title",
              "2-core AMD EPYC (Zen 4) VM")
    assert res.exit_code == 0, res.output
    assert _overlapping_labels(tmp_path / "new" / "breakeven.svg") == 0
    svg = (tmp_path / "new" / "breakeven.svg").read_text()
    assert "2-core AMD EPYC (Zen 4) VM" in svg
    # every caption line inside the 5-inch (360-point) figure: 7-point DejaVu Sans averages
    # about 0.55 of its size per character
    caption = [(t, x) for t, x, y in _svg_texts(tmp_path / "new" / "breakeven.svg")
               if y > 300 and ("k = " in t or "EPYC" in t or "qwen" in t)]
    assert len(caption) >= 3
    assert all(x + 0.55 * 7 * len(t) <= 360 for t, x in caption), caption
