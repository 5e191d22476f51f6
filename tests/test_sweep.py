"""Sweeps: value parsing, point order, offload refused on a build without a GPU backend (the build
installed here), and a sweep killed mid-way that keeps its finished points."""
import json
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main
from cpuspec.report.tables import sweep_rows
from cpuspec.harness.sweep import Point, SweepError, expand, parse_values, varying


@pytest.mark.parametrize("text, values", [
    ("4", [4]), ("1,2,4", [1, 2, 4]), ("1-4", [1, 2, 3, 4]), ("1-8+2", [1, 3, 5, 7]),
    ("1-16*2", [1, 2, 4, 8, 16]), ("2-20*3", [2, 6, 18]), ("1,1-3", [1, 2, 3]),
    (" 1 , 2 ", [1, 2]),
])
def test_parse_values(text, values):
    assert parse_values(text) == values


@pytest.mark.parametrize("text, message", [
    ("1-", "not a number or a range"), ("8-1", "runs backwards"), ("0", "must be at least 1"),
    ("two", "not a number"), ("1-8+0", "step must be"), ("0-8*2", "start ≥ 1"),
    ("1-8*1", "factor ≥ 2"), ("", "not a number"), ("-1", "must be at least 1"),
])
def test_parse_values_rejects(text, message):
    with pytest.raises(SweepError, match=message):
        parse_values(text)


def test_zero_allowed_where_minimum_is_zero():
    assert parse_values("0,16,99", minimum=0) == [0, 16, 99]


def test_points_ordered_so_models_load_once_per_offload_setting():
    pts = expand({"threads": [2, 1], "k": [4, 1], "n_gpu_layers": [99, 0]})
    assert len(pts) == 8
    loads = [(p.n_gpu_layers, p.draft_gpu_layers) for p in pts]
    assert loads == [(0, 0)] * 4 + [(99, 0)] * 4  # two loads, not eight
    assert [(p.threads, p.k) for p in pts[:4]] == [(1, 1), (1, 4), (2, 1), (2, 4)]
    assert varying(pts) == ["n_gpu_layers", "threads", "k"]
    assert varying([Point(threads=2)]) == []


def tiny(tiny_models, *extra):
    return ["bench", "--target", str(tiny_models["target"]), "--draft",
            str(tiny_models["draft"]), "--max-tokens", "16", "--prompts-per-task", "1",
            "--tasks", "json", "--warmup", "0", *extra]


def test_sweep_threads_and_k_one_table(tiny_models, tmp_path):
    out = tmp_path / "sweep.json"
    res = CliRunner().invoke(main, tiny(tiny_models, "--threads", "1,2", "--draft-len", "1,2",
                                        "--json", str(out)))
    assert res.exit_code == 0, res.output
    assert res.stdout.count("point threads=") == 4
    table = [l for l in res.output.splitlines() if l.startswith("|")]
    assert table[0].split("|")[1].strip() == "threads" and "n_gpu_layers" not in table[0]
    assert len(table) == 2 + 4
    doc = json.loads(out.read_text())
    assert doc["kind"] == "sweep" and doc["axes"] == ["threads", "k"]
    assert [(r["threads"], r["k"]) for r in doc["rows"]] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert all(p["settings"]["k"] == r["k"] for p, r in zip(doc["points"], doc["rows"]))
    assert doc["meta"]["threads"] == [1, 2]     # what the points ran with, not a placeholder


def test_points_on_one_loaded_pair_share_the_perplexity_and_the_probe_their_threads_allow(
        tiny_models, tmp_path):
    """Issue 60, sweeps: a point's perplexity and cost probe are measured once per loaded pair
    (the probe once per threads, CPUs and depth: it times decodes), not by every point; a point
    that reuses them says where they came from and has no drift band of its own."""
    out = tmp_path / "sweep.json"
    res = CliRunner().invoke(main, tiny(tiny_models, "--threads", "1,2", "--draft-len", "1,2",
                                        "--json", str(out)))
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    p = {(r["threads"], r["k"]): pt for r, pt in zip(doc["rows"], doc["points"])}
    for threads in (1, 2):
        first, second = p[(threads, 1)], p[(threads, 2)]
        assert "cost_probes_from" not in first and first.get("cost_probe_end")
        assert second["cost_probe"] == first["cost_probe"] and "cost_probe_end" not in second
        assert second["cost_probes_from"] == (
            f"sweep point threads={threads}, k=1 (the same loaded pair, threads, CPUs and "
            "depth)")
    assert p[(2, 1)]["cost_probe"] != p[(1, 1)]["cost_probe"]   # its own threads: measured
    ppl = p[(1, 1)]["quality"]["target_perplexity"]
    assert "from" not in p[(1, 1)]["quality"]
    for key in ((1, 2), (2, 1), (2, 2)):
        assert p[key]["quality"]["target_perplexity"] == ppl
        assert p[key]["quality"]["from"] == "sweep point threads=1, k=1 (the same loaded target)"
    assert res.output.count("cost probe: prefills") == 2, res.output
    assert res.output.count("(none measured)") == 2


def test_a_depth_probes_on_its_own_and_a_k_past_the_curve_probes_afresh_then_serves_on(
        tiny_models, tmp_path):
    """The shared probe's key holds the depth (a held context changes what a decode costs),
    and a k the first probe's curve does not reach (k + 1 = 21 > 16) measures its own, which
    the next point at that k (another p-min) then reuses."""
    out = tmp_path / "sweep.json"
    res = CliRunner().invoke(main, tiny(tiny_models, "--threads", "1", "--draft-len", "1,20",
                                        "--depth", "0,64", "--p-min", "0,0.5",
                                        "--policy", "static", "--max-tokens", "24",
                                        "--json", str(out)))
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    got = {(r["k"], r["depth"], r["p_min"]): p.get("cost_probes_from")
           for r, p in zip(doc["rows"], doc["points"])}
    measured = {key for key, origin in got.items() if origin is None}
    assert measured == {(1, 0, 0.0), (1, 64, 0.0), (20, 0, 0.0), (20, 64, 0.0)}, got
    assert got[(1, 64, 0.5)].startswith("sweep point threads=1, k=1, depth=64, p_min=0.0 ")
    assert got[(20, 0, 0.5)].startswith(
        "sweep point threads=1, k=20, depth=0, p_min=0.0 ")
    points = {(r["k"], r["depth"], r["p_min"]): p for r, p in zip(doc["rows"], doc["points"])}
    assert "21" in points[(20, 0, 0.5)]["cost_probe"]["verify_s"]


def test_each_point_stops_on_its_own_and_the_table_says_how_many_prompts_it_ran(
        tiny_models, heavy_draft, tmp_path):
    """Issue 60, sweeps: each point runs the sequential design by itself. The heavy draft
    costs several target decodes, so every point's cost probe caps it at the first look: 5
    of its 8 prompts, and the screen's prompts column says 5/5 (planned down to the cap)."""
    from cpuspec.report.sweep import render_sweep_screen
    out = tmp_path / "sweep.json"
    args = ["bench", "--target", str(tiny_models["target"]), "--draft",
            str(heavy_draft), "--max-tokens", "12", "--prompts-per-task", "8",
            "--tasks", "json", "--warmup", "0", "--policy", "static", "--draft-len", "1,2",
            "--threads", "1", "--json", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    for p in doc["points"]:
        assert len({r["prompt_id"] for r in p["runs"]}) == 5, p["settings"]["sequential"]
    rows = sweep_rows(doc)
    assert [(r["prompts_run"], r["prompts_planned"]) for r in rows] == [(5, 5), (5, 5)]
    screen = render_sweep_screen(rows, doc["axes"], None)
    assert "prompts" in screen.splitlines()[0] and screen.count("5/5") == 2
    # a point of one task is that task: its stopping look's interval and the design's verdict
    # (the pooled row has none), in the screen and in the table the sweep prints at its end
    assert [r["decision"] for r in rows] == ["slower", "slower"]
    assert all(r["sd_speedup_ci_high"] < 1 and r["level"] == 0.95 for r in rows)  # capped: 1 look
    assert all("slower" in l.split() for l in screen.splitlines()[2:4]), screen
    assert "stopping look's (95.0\xa0%)" in screen   # on one line, whatever the wrap
    table = res.output[res.output.index("| k "):]
    assert table.count("| 5/5 ") == 2 and table.count("| slower ") == 2, table
    assert "SD ×raw e2e [interval]" in table and "95% CI]" not in table.split("adapt")[0]
    assert "\n\neach point stopped at its first deciding look" in table   # not a table row
    assert "stopping look's (95.0\xa0%)" in table


def test_a_point_of_several_tasks_has_their_verdict_where_they_agree_and_no_interval(
        tiny_models, heavy_draft, tmp_path):
    """Under the sequential design a point's tasks stop on their own, so its pooled row has no
    interval; its verdict is theirs where they agree, and the table says why it has none."""
    from cpuspec.report.sweep import render_sweep
    out = tmp_path / "sweep.json"
    args = ["bench", "--target", str(tiny_models["target"]), "--draft",
            str(heavy_draft), "--max-tokens", "12", "--prompts-per-task", "8",
            "--tasks", "json,code", "--warmup", "0", "--policy", "static",
            "--draft-len", "1,2", "--threads", "1", "--json", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    rows = sweep_rows(json.loads(out.read_text()))
    assert [r["decision"] for r in rows] == ["slower", "slower"]
    assert all(r["sd_speedup_ci_low"] is None and "level" not in r for r in rows)
    assert all((r["prompts_run"], r["prompts_planned"]) == (10, 10) for r in rows)
    table = render_sweep(rows, ["k"])
    assert table.count("| slower ") == 2 and "(95" not in table
    assert "a point of several tasks has no interval" in table


@pytest.mark.parametrize("flags", [["--n-gpu-layers", "0,99"], ["-ngl", "99"],
                                   ["-ngld", "1"]])
def test_offload_on_a_cpu_only_build_is_refused_before_models_load(tiny_models, tmp_path,
                                                                    flags):
    """Issue 44, item 4: on a build without a GPU backend -ngl/-ngld > 0 would run on the CPU
    under a GPU label; refused with how to install a GPU build, exit 2, nothing written."""
    from cpuspec.llama.engine import supports_gpu_offload
    if supports_gpu_offload():
        pytest.skip("this llama-cpp-python build can offload")
    out = tmp_path / "gpu.json"
    res = CliRunner().invoke(main, tiny(tiny_models, *flags, "--json", str(out)))
    assert res.exit_code == 2, res.output
    assert "no GPU backend" in res.output and "GGML_VULKAN" in res.output
    assert "loading target" not in res.output and not out.exists()


def test_killed_sweep_keeps_finished_points(tiny_models, tmp_path):
    out = tmp_path / "killed.json"
    cmd = [sys.executable, "-m", "cpuspec", *tiny(tiny_models, "--threads", "1",
                                                    "--draft-len", "1-12", "--json", str(out))]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # wait until at least two points are written
            if out.exists() and len(json.loads(out.read_text())["rows"]) >= 2:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    doc = json.loads(out.read_text())  # valid JSON despite the kill
    assert 2 <= len(doc["rows"]) < 12
    assert all(r["raw_tok_s"] > 0 for r in sweep_rows(doc))


def test_unpinned_point_after_a_pinned_one_runs_where_the_sweep_started(monkeypatch):
    """A point without pinning used to inherit the CPUs of the pinned point before it."""
    import contextlib
    import os

    from cpuspec.harness import sweep
    from cpuspec.harness.bench import BenchConfig
    start = sorted(os.sched_getaffinity(0))
    seen = []
    monkeypatch.setattr(sweep, "resolve_models", lambda cfg, log: None)
    monkeypatch.setattr(sweep, "load_pair", lambda cfg, log, fetched:
                        contextlib.nullcontext(None))
    monkeypatch.setattr(sweep, "run_bench", lambda cfg, log, loaded:
                        seen.append(sorted(os.sched_getaffinity(0))) or {})
    pinned, free = Point(p_cores=1, k=1), Point(p_cores=0, k=2)
    cpus = {pinned: [start[0]], free: None}
    try:
        sweep.run_sweep(BenchConfig(prompts=[], threads=1), [pinned, free],
                        lambda base, p: BenchConfig(prompts=[], threads=1, cpus=cpus[p]),
                        lambda *a: None)
    finally:
        os.sched_setaffinity(0, start)
    assert seen == [[start[0]], start]


def test_quant_axes_sweep_derived_variants(tiny_models, tmp_path, cpuspec_home):
    """--target-quant and --draft-quant: each point runs a derived variant, labelled so, in
    one table; a quant llama.cpp cannot make is refused before anything runs."""
    out = tmp_path / "quants.json"
    res = CliRunner().invoke(main, tiny(tiny_models, "--target-quant", "q8_0,Q4_0",
                                        "--draft-quant", "Q8_0", "--policy", "static",
                                        "--json", str(out)))
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["axes"] == ["target_quant"]
    assert [r["target_quant"] for r in doc["rows"]] == ["Q4_0", "Q8_0"]
    assert all(r["draft_quant"] == "Q8_0" for r in doc["rows"])
    for point, quant in zip(doc["points"], ["Q4_0", "Q8_0"]):
        target, draft = point["models"]["target"], point["models"]["draft"]
        assert target["source"] == "derived" and quant in target["desc"]
        assert draft["source"] == "derived" and "Q8_0" in draft["desc"]
    table = [line for line in res.output.splitlines() if line.startswith("|")]
    assert table[0].split("|")[1].strip() == "target_quant" and len(table) == 2 + 2
    bad = CliRunner().invoke(main, tiny(tiny_models, "--target-quant", "Q3_X"))
    assert bad.exit_code != 0 and "'Q3_X' is not one of" in bad.output
    bad = CliRunner().invoke(main, tiny(tiny_models, "--drafter", "lookup",
                                        "--draft-quant", "Q4_0"))
    assert bad.exit_code != 0 and "--draft-quant set the draft model" in bad.output
