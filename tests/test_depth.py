"""`bench --depth N`: N tokens of real context before each prompt, held in both KV caches as a
chat server holds an earlier turn, read once for every prompt and mode, and not timed."""
import json

import pytest
from click.testing import CliRunner

from cpuspec.inputs import tasks
from cpuspec.cli.main import main
from cpuspec.report.plots import depth_lines
from cpuspec.analysis.summary import summarize


def bench_tiny(tiny_models, out, *args):
    """`cpuspec bench` on the tiny pair, static at k = 2, one thread, no warm-up, into out."""
    res = CliRunner().invoke(main, [
        "bench", "--target", str(tiny_models["target"]), "--draft", str(tiny_models["draft"]),
        "--threads", "1", "--warmup", "0", "-k", "2", "--policy", "static", "--no-save",
        "--json", str(out), *args])
    assert res.exit_code == 0, res.output
    return res


def test_every_prompt_at_a_depth_shares_the_earlier_turn(tiny_models):
    from cpuspec.harness.turns import encode_prompts
    from cpuspec.llama.engine import Model
    prompts = tasks.builtin_prompts(["json", "code"], 2)
    with Model(tiny_models["target"]) as tm:
        plain, none = encode_prompts(tm, prompts, 0)
        deep, held = encode_prompts(tm, prompts, 200)
        assert none == [0, 0, 0, 0]
        # the shared part is the earlier turn: the depth, with the template and the reply
        assert len(set(held)) == 1 and held[0] >= 200
        assert all(d[:held[0]] == deep[0][:held[0]] for d in deep)
        # what follows it is the prompt itself
        for p, d, e in zip(prompts, deep, plain):
            assert tm.detokenize(d[held[0]:]).endswith(p.text)
            assert len(d) - held[0] <= len(e) + 8
        # the depth is cut from the shipped texts, in order
        start = tm.detokenize(deep[0][:held[0]])
        assert tasks.DEPTH_INTRO + "--- colorsys.py ---" in start
        with pytest.raises(ValueError, match="more than the .* tokens of real text"):
            encode_prompts(tm, prompts, 10**6)


def test_bench_at_depth_reads_the_context_once_and_changes_no_token(tiny_models, tmp_path):
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, [
        "bench", "--target", str(tiny_models["target"]), "--draft", str(tiny_models["same"]),
        "--threads", "1", "--max-tokens", "16", "--warmup", "0", "--tasks", "json",
        "--prompts-per-task", "3", "--depth", "300", "-k", "3", "--no-save",
        "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    held = doc["depth"]["held_tokens"]
    assert doc["settings"]["depth"] == 300 and len(set(held)) == 1 and held[0] >= 300
    # every generation started above the held context, and read only the prompt
    assert {r["reused_prompt_tokens"] for r in doc["runs"]} == {held[0]}
    assert all(r["prompt_tokens"] > held[0] for r in doc["runs"])
    # the same weights as the draft: every token identical, and the context read only once
    # for three prompts and three modes (it holds while no audit replays plain decoding)
    assert all(a["identical"] for a in doc["audit"])
    assert res.output.count("reading the depth's") == 1
    assert "Depth: 300 tokens of context before each prompt" in res.output


def test_the_prediction_prices_only_what_is_read(tiny_models, tmp_path):
    """At depth the cost probe sits after the whole first prompt (V(n) at depth), and the
    prediction prefills only the prompt's own tokens: what the run itself read."""
    from cpuspec.results.schema import read_json
    from cpuspec.analysis.summary import summarize
    out = tmp_path / "r.json"
    bench_tiny(tiny_models, out, "-n", "16", "--tasks", "code", "--prompts-per-task", "2",
               "--depth", "400")
    doc = read_json(out)
    assert doc["cost_probe"]["position"] > 400
    # the timed prefill read the prompt only: far less than the probe's prefill of it all (the
    # quickest of the run's prefills: a tiny model's few-millisecond prefills carry a fixed
    # per-call cost and the machine's noise: the quickest came out at 0.32-0.36 of the probe's
    # on machines C and C' in CI runs; re-reading the depth would put every one of them near 1)
    assert min(r["prefill_s"] for r in doc["runs"]) < doc["cost_probe"]["target_prefill_s"] / 2
    assert summarize(doc)["code"]["predicted_speedup"] > 0


def test_a_depth_sweep_has_a_row_per_depth_and_a_figure(tiny_models, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "s.json"
    bench_tiny(tiny_models, out, "-n", "12", "--tasks", "json", "--prompts-per-task", "1",
               "--depth", "0,200")
    doc = json.loads(out.read_text())
    assert doc["axes"] == ["depth"] and [r["depth"] for r in doc["rows"]] == [0, 200]
    assert [p["settings"]["depth"] for p in doc["points"]] == [0, 200]
    assert doc["meta"]["threads"] == 1          # its environment names the points' threads
    figs = CliRunner().invoke(main, ["plot", str(out), "--out", str(tmp_path / "f")])
    assert figs.exit_code == 0, figs.output
    assert "depth.png" in figs.output
    # A later single-depth run of the same workload joins the sweep's line, in depth order;
    # one of another k is a line of its own.
    deeper, other_k = tmp_path / "d100.json", tmp_path / "k3.json"
    bench_tiny(tiny_models, deeper, "-n", "12", "--tasks", "json", "--prompts-per-task", "1",
               "--depth", "100")
    bench_tiny(tiny_models, other_k, "-n", "12", "--tasks", "json", "--prompts-per-task", "1",
               "--depth", "100", "-k", "3")
    runs = [json.loads(p.read_text()) for p in (out, deeper, other_k)]
    lines, drawn = depth_lines([(runs[0], "sweep")], [(runs[1], "d100"), (runs[2], "k3")])
    assert drawn == ["sweep", "d100", "k3"]
    assert lines["sweep"]["depth"] == [0, 100, 200] and lines["k3"]["depth"] == [100]
    assert lines["sweep"]["speedup"][1] == pytest.approx(
        summarize(runs[1])["overall"]["sd_speedup"])


@pytest.mark.parametrize("args, message", [
    (["--depth", "100000"], "tokens of real text cpuspec ships"),
    (["--depth", "-1"], "--depth"),
])
def test_a_depth_that_cannot_be_run_is_refused(tiny_models, args, message):
    res = CliRunner().invoke(main, [
        "bench", "--target", str(tiny_models["target"]), "--draft", str(tiny_models["draft"]),
        "--threads", "1", "--max-tokens", "8", "--tasks", "json", "--prompts-per-task", "1",
        "--no-save", *args])
    assert res.exit_code != 0 and message in res.output
    assert "Traceback" not in res.output


def test_depth_and_followup_turns_are_refused_together(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"task": "chat", "prompt": "hi", "followup": "again"}) + "\n")
    res = CliRunner().invoke(main, ["bench", "--prompts", str(prompts), "--depth", "512",
                                    "--no-save"])
    assert res.exit_code != 0 and "do not combine" in res.output


def test_costs_at_a_depth_probes_after_that_much_context(tiny_models, tmp_path):
    out0, out = tmp_path / "c0.json", tmp_path / "c.json"
    for depth, path in ((0, out0), (300, out)):
        res = CliRunner().invoke(main, [
            "costs", "--target", str(tiny_models["target"]), "--draft", str(tiny_models["draft"]),
            "--threads", "1", "--max-n", "3", "--reps", "1", "--depth", str(depth), "--no-save",
            "--json", str(path)])
        assert res.exit_code == 0, res.output
    p0 = json.loads(out0.read_text())["cost_probe"]
    p = json.loads(out.read_text())["cost_probe"]
    assert p["position"] >= p0["position"] + 300 and p["prompt_tokens"] == p["position"]


def test_the_depth_figure_draws_the_recorded_sweeps():
    """Machine B's two depth sweeps on one figure: a line each, the measured speedups and
    the predictions the sweep rows hold."""
    from pathlib import Path
    from cpuspec.report.plots import figure_data
    from cpuspec.results.schema import read_json
    from cpuspec.analysis.summary import summarize
    b = Path("bench/results/epyc-family25-model17")
    runs = [read_json(b / "depth_q8_0_k7.json.gz"), read_json(b / "depth_q4km_k4.json.gz")]
    d = figure_data(runs, ["q8", "q4km"])["depth"]
    assert list(d["lines"]) == ["q8", "q4km"] and d["runs"] == ["q8", "q4km"]
    q8 = d["lines"]["q8"]
    assert q8["depth"] == [0, 1024, 4096]
    points = runs[0]["points"]
    assert q8["speedup"] == [summarize(p)["overall"]["sd_speedup"] for p in points]
    assert q8["speedup"][0] > 1.0 > q8["speedup"][2]       # pays at 0, loses at 4 k
    assert all(p is not None for p in q8["predicted"])


def test_a_sweep_caption_names_its_threads():
    """The depth figure's caption read "[AVX512] Nonet": a sweep's settings hold no threads."""
    from pathlib import Path
    from cpuspec.report.plots import caption
    from cpuspec.results.schema import read_json
    cap = caption(read_json(Path("bench/results/epyc-family25-model17/depth_q8_0_k7.json.gz")))
    assert "[AVX512] 2t;" in cap and "None" not in cap
