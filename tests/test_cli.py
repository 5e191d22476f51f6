"""Real CLI invocations: CliRunner, and one subprocess. The bench runs end to end on tiny
generated models passed with --target/--draft."""
import json
import re
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from cpuspec.analysis.summary import summarize
from cpuspec.cli.main import main
from cpuspec.results.schema import SCHEMA_VERSION


def run(*args):
    return CliRunner().invoke(main, list(args))


def tiny_args(tiny_models, *extra):
    return ["bench", "--target", str(tiny_models["target"]), "--draft",
            str(tiny_models["draft"]), "--threads", "1", "--max-tokens", "24",
            "--prompts-per-task", "2", "--warmup", "0", *extra]


@pytest.mark.parametrize("cmd", [[], ["bench"], ["models"], ["models", "list"], ["report"],
                                 ["advise"]])
def test_help_has_examples(cmd):
    res = run(*cmd, "--help")
    assert res.exit_code == 0, res.output
    assert "Usage:" in res.output
    if cmd != ["models", "list"]:
        assert "Example" in res.output


@pytest.mark.parametrize("args, message", [
    (["--threads", "0"], "must be at least 1"),
    (["--draft-len", "0"], "must be at least 1"),
    (["-k", "-3"], "--draft-len: -3: must be at least 1"),
    (["--max-tokens", "0"], "must be at least 1"),
    (["--threads", "two"], "is not a number or a range"),
    (["--threads", "8-1"], "runs backwards"),
    (["--draft-len", "1-"], "is not a number or a range"),
    (["-ngl", "x"], "is not a number or a range"),
    (["--tasks", "poetry"], "unknown task poetry"),
    (["--tasks", ","], "unknown task"),
    (["--prompts", "/no/such/file.jsonl"], "cannot read prompts file"),
    (["--target", "/no/such/model.gguf"], "model file not found"),
    (["--pair", "nope"], "unknown pair"),
    (["--json", "/no/such/dir/out.json"], "folder does not exist"),
    (["--json", "/tmp"], "is a folder"),
    (["--policy", "greedy"], "unknown policy greedy"),
    (["--policy", "off,static"], "cannot be combined"),
    (["--drafter", "hybrid", "--temperature", "0.7"], "--drafter hybrid is greedy only"),
    (["--drafter", "hybrid", "--schedule", "parallel"], "needs greedy decoding and the model"),
])
def test_bad_input_is_a_clear_error(args, message):
    res = run("bench", *args)
    assert res.exit_code != 0
    assert message in res.output
    assert "Traceback" not in res.output


SET3 = os.path.join(os.path.dirname(__file__), "..", "bench", "prompts_heldout_long3.jsonl")


def test_tasks_pick_tasks_of_a_prompts_file():
    """--tasks with --prompts: a file's task name runs only that task's lines, under the ids
    the whole file gives them (so runs of one task pair with runs of the whole file); a
    built-in name still adds its built-in suite."""
    from cpuspec.inputs.tasks import load_prompts
    doc = load_prompts(["doc-heldout3"], SET3)
    assert [p.prompt_id for p in doc] == [f"doc-heldout3-{i}" for i in range(1, 6)]
    assert all(p.text.startswith("Copy") for p in doc)
    mixed = load_prompts(["json", "edit-heldout3", "doc-heldout3"], SET3, per_task=2)
    assert [p.prompt_id for p in mixed] == ["json-1", "json-2", "edit-heldout3-1",
                                            "edit-heldout3-2", "doc-heldout3-1",
                                            "doc-heldout3-2"]
    assert {p.task for p in load_prompts(None, SET3)} == {"edit-heldout3", "explain-heldout3",
                                                          "doc-heldout3"}


@pytest.mark.parametrize("args, message", [
    (["--tasks", "doc", "--prompts", SET3], "unknown task doc; built-in tasks: "),
    (["--tasks", "doc", "--prompts", SET3], "; tasks of "),
    (["--tasks", "doc-heldout3"], "unknown task doc-heldout3; built-in tasks:"),
])
def test_a_task_in_neither_place_is_a_clear_error(args, message):
    for cmd in ("bench", "tune"):
        res = run(cmd, *args)
        assert res.exit_code == 2 and message in res.output, (cmd, res.output)
        assert "Traceback" not in res.output


def test_malformed_prompts_file_names_the_line(tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_text('{"task": "sql", "prompt": "Write a query"}\n\n{"task": "sql", prompt}\n')
    res = run("bench", "--prompts", str(f))
    assert res.exit_code != 0 and f"{f}:3: not valid JSON" in res.output
    f.write_text('{"task": "sql"}\n')
    res = run("bench", "--prompts", str(f))
    assert res.exit_code != 0 and ":1: \"prompt\" must be a non-empty string" in res.output


def test_bench_end_to_end_on_tiny_models(tiny_models, tmp_path):
    out = tmp_path / "r.json"
    csv_path = tmp_path / "r.csv"
    res = run(*tiny_args(tiny_models, "--details", "--tasks", "json,code", "--json", str(out),
                         "--csv", str(csv_path)))
    assert res.exit_code == 0, res.output
    assert "accept %" in res.output and "1+α+β" in res.output
    assert "json: SD " in res.output and "code: SD " in res.output
    data = json.loads(out.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["settings"]["tasks"] == ["json", "code"] and data["settings"]["k"] == 4
    assert len(data["runs"]) == 2 * 2 * 3  # tasks × prompts × (raw, static, adaptive)
    assert len(data["audit"]) == 2 * 2 * 2  # static and adaptive, each against raw
    assert all(a["identical"] for a in data["audit"])  # F32 tiny models: lossless exactly
    assert set(data["cost_probe"]["verify_s"]) == {str(n) for n in range(1, 17)}  # CURVE_N
    for key in ("llama_system_info", "llama_cpp_python_version", "hardware", "cpuspec_version"):
        assert data["meta"][key]
    assert data["models"]["target"]["sha256"] and data["models"]["target"]["source"] == \
        "local-file"
    s = summarize(data)["overall"]
    assert 1 <= s["a"] <= 5 and s["raw_tok_s"] > 0 and s["sd_tok_s"] > 0
    assert len(s["per_position_acceptance_pct"]) == 4
    assert csv_path.read_text().splitlines()[0].startswith("task,raw_tok_s")
    assert "adaptive: " in res.output and "Advice (on or off: the measured end-to-end verdict" in res.output
    # The report and advise commands read it back.
    res = run("report", str(out), "--format", "markdown")
    assert res.exit_code == 0 and "| task" in res.output and "adapt t/s" in res.output
    res = run("advise", str(out), "--json")
    assert res.exit_code == 0, res.output
    advice = json.loads(res.output)
    assert set(advice) == {"json", "code", "overall"}
    for a in advice.values():
        assert a["verdict"] in ("ON", "OFF", "UNDECIDED") and 0 <= a["k_best"] <= 4
        assert (a["model_verdict"] == "ON") == (a["k_best"] > 0)
        assert len(a["table"]) == 5 and a["table"][0]["predicted_speedup"] == 1.0


def test_hybrid_drafter_on_tiny_models(tiny_models, tmp_path):
    """The hybrid records its draft counts per run, stays lossless, and gets a prediction from
    its rounds."""
    out = tmp_path / "h.json"
    res = run(*tiny_args(tiny_models, "--details", "--tasks", "grounded", "--drafter", "hybrid",
                         "--policy", "static", "--json", str(out)))
    assert res.exit_code == 0, res.output
    assert "hybrid with prompt lookup" in res.output
    data = json.loads(out.read_text())
    assert data["settings"]["drafter"] == "hybrid"
    assert data["models"]["draft"]["drafter"] == "hybrid" and data["models"]["draft"]["sha256"]
    sd = [r for r in data["runs"] if r["mode"] == "static"]
    for r in sd:
        stats = r["drafter_stats"]
        assert stats["lookup_drafts"] + stats["model_drafts"] == sum(row[0] for row in
                                                                     r["rounds"])
    assert sum(r["drafter_stats"]["model_drafts"] for r in sd) > 0
    assert all(a["identical"] for a in data["audit"])
    assert summarize(data)["grounded"]["predicted_speedup"] > 0


def test_policy_off_runs_raw_only(tiny_models, tmp_path):
    out = tmp_path / "raw.json"
    res = run(*tiny_args(tiny_models, "--tasks", "json", "--policy", "off", "--json",
                         str(out)))
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert {r["mode"] for r in data["runs"]} == {"raw"} and data["audit"] == []
    res = run("advise", str(out))
    assert res.exit_code != 0 and "no static SD runs" in res.output


def test_user_prompts_file_and_threads_warning(tiny_models, tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_text('{"task": "sql", "prompt": "SELECT name FROM users"}\n'
                 '# a comment\n{"task": "email", "prompt": "Dear team,"}\n')
    n = len(os.sched_getaffinity(0)) + 1
    res = run(*tiny_args(tiny_models, "--prompts", str(f), "--threads", str(n)))
    assert res.exit_code == 0, res.output
    assert f"--threads {n} is more than" in res.output
    assert "sql" in res.output and "email" in res.output and "story" not in res.output


def test_tokenizer_mismatch_exits_with_message(tiny_models, tmp_path):
    import tiny_gguf
    other = tiny_gguf.write_model(tmp_path / "other.gguf", tiny_gguf.make_weights(3),
                                  swap_tokens=50)
    res = run("bench", "--target", str(tiny_models["target"]), "--draft", str(other),
              "--max-tokens", "8", "--prompts-per-task", "1", "--warmup", "0")
    assert res.exit_code != 0 and "tokenizer differs" in res.output


def test_models_list_json():
    res = run("models", "list", "--json")
    assert res.exit_code == 0
    data = json.loads(res.output)
    names = {m["name"] for m in data["models"]}
    assert {"qwen2.5-coder-0.5b-q4km", "qwen2.5-coder-1.5b-q4km"} <= names
    assert [p["name"] for p in data["pairs"] if p["default"]] == ["qwen2.5-coder-1.5b"]
    assert all(not m["cached"] for m in data["models"])  # fresh CPUSPEC_HOME


def test_models_fetch_unknown_name():
    res = run("models", "fetch", "no-such-model")
    assert res.exit_code != 0 and "unknown model or pair" in res.output


def test_report_rejects_non_results_file(tmp_path):
    f = tmp_path / "x.json"
    f.write_text("[]")
    res = run("report", str(f))
    assert res.exit_code != 0 and "not a cpuspec results file" in res.output


def test_subprocess_bench(tiny_models, tmp_path):
    out = tmp_path / "sub.json"
    proc = subprocess.run([sys.executable, "-m", "cpuspec", *tiny_args(
        tiny_models, "--tasks", "story", "--json", str(out), "--details")],
        capture_output=True, text=True, env=dict(os.environ), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "story: SD " in proc.stdout
    assert re.search(r"\[1/2\] story-\d", proc.stderr)  # progress goes to stderr
    assert summarize(json.loads(out.read_text()))["story"]["n_generations"] == 2
    assert "Traceback" not in proc.stderr
    bad = subprocess.run([sys.executable, "-m", "cpuspec", "bench", "--threads", "0"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "must be at least 1" in bad.stderr


def test_lookup_drafter_needs_no_draft_model(tiny_models, tmp_path):
    out = tmp_path / "lookup.json"
    res = run("bench", "--target", str(tiny_models["target"]), "--drafter", "lookup",
              "--tasks", "grounded", "--prompts-per-task", "2", "--max-tokens", "24",
              "--threads", "1", "--warmup", "0", "--json", str(out))
    assert res.exit_code == 0, res.output
    assert "prompt-lookup drafter" in res.output
    data = json.loads(out.read_text())
    assert data["models"]["draft"]["drafter"] == "lookup"
    assert data["settings"]["drafter"] == "lookup"
    assert all(a["identical"] for a in data["audit"])


def test_hw_command():
    res = run("hw", "--json")
    assert res.exit_code == 0
    data = json.loads(res.output)
    assert data["physical_cores"] >= 1 and data["affinity"] and data["hybrid"]
    res = run("hw")
    assert res.exit_code == 0 and "physical cores" in res.output


@pytest.mark.parametrize("args, message", [
    (["--e-cores", "1"], "not hybrid"),
    (["--p-cores", "512"], "P-cores are available"),
    (["--draft-cores", "4000"], "outside this process's CPU affinity"),
    (["--draft-cores", "x-y"], "is not a CPU list"),
    (["--draft-threads", "0"], "must be at least 1"),
])
def test_bad_core_selection(args, message):
    res = run("bench", *args)
    assert res.exit_code != 0 and message in res.output


def test_bench_pinned_with_draft_cores(tiny_models, tmp_path):
    before = os.sched_getaffinity(0)
    cpu = min(before)
    out = tmp_path / "pinned.json"
    try:
        res = run(*tiny_args(tiny_models, "--tasks", "code", "--p-cores", "1",
                             "--draft-cores", str(cpu), "--draft-threads", "1",
                             "--json", str(out)))
    finally:
        from cpuspec.machine.hardware import CorePinner
        CorePinner().pin(sorted(before))  # every thread, llama.cpp's workers included
    assert res.exit_code == 0, res.output
    assert "pinned to CPUs" in res.output
    s = json.loads(out.read_text())["settings"]
    assert len(s["cpus"]) == 1 and s["draft_cpus"] == [cpu] and s["draft_threads"] == 1


def run_split(tiny_models, out, *extra):
    """A tiny-model bench with the target on the first CPU and the draft on the last one (one
    thread each); the process's affinity is restored afterwards. Skips below two CPUs."""
    before = sorted(os.sched_getaffinity(0))
    if len(before) < 2:
        pytest.skip("needs two CPUs")
    try:
        res = run(*tiny_args(tiny_models, "--tasks", "code", "--p-cores", "1",
                             "--draft-cores", str(before[-1]), "--draft-threads", "1",
                             "--json", str(out), *extra))
    finally:
        from cpuspec.machine.hardware import CorePinner
        CorePinner().pin(before)
    assert res.exit_code == 0, res.output
    return before, json.loads(out.read_text())


def test_draft_owns_its_cores(tiny_models, tmp_path):
    """Target on one CPU, draft on another, each model's llama.cpp threads only on its own:
    the run records the CPU time of every thread by affinity."""
    before, data = run_split(tiny_models, tmp_path / "owned.json", "--max-tokens", "200")
    proof = data["threads"]
    target_cpus, draft_cpus = proof["target_cpus"], proof["draft_cpus"]
    assert draft_cpus == [before[-1]] and target_cpus != draft_cpus
    by = {tuple(g["cpus"]): g for g in proof["cpu_s_by_affinity"]}
    assert set(by) <= {tuple(target_cpus), tuple(draft_cpus)}, by   # nothing anywhere else
    assert by[tuple(draft_cpus)]["cpu_s"] > 0 and by[tuple(target_cpus)]["cpu_s"] > 0
    assert all(a["identical"] for a in data["audit"])


def test_contention_on_tiny_models(tiny_models, tmp_path):
    out = tmp_path / "cont.json"
    before = os.sched_getaffinity(0)
    try:
        res = run("contention", "--target", str(tiny_models["target"]), "--draft",
                  str(tiny_models["draft"]), "-n", "4", "--threads", "1", "--json", str(out))
    finally:
        from cpuspec.machine.hardware import CorePinner
        CorePinner().pin(sorted(before))
    assert res.exit_code == 0, res.output
    assert "roofline" in res.output and "background streams" in res.output
    data = json.loads(out.read_text())
    assert data["bandwidth"]["single"]["gbps"]["copy"] > 0
    assert [r["streams"] for r in data["curve"]] == list(range(len(data["stream_cpus"]) + 1))
    assert set(data["phases"]) == {"raw", "draft", "verify"}
    assert data["c_bytes"] == pytest.approx(1.0)  # same-size tiny models


def test_sampling_bench_is_seeded(tiny_models, tmp_path):
    outs = []
    for i in range(2):
        out = tmp_path / f"t{i}.json"
        res = run(*tiny_args(tiny_models, "--details", "--tasks", "story", "--temperature", "0.8",
                             "--seed", "7", "--json", str(out)))
        assert res.exit_code == 0, res.output
        assert "in distribution only" in res.output
        outs.append(json.loads(out.read_text()))
    assert outs[0]["settings"]["temperature"] == 0.8 and outs[0]["audit"] == []
    # Same seed, same draws for raw and static. Adaptive picks k from measured timings, so
    # how many random numbers it uses (and so its tokens) can differ from run to run.
    # (each prompt's draws: the sequential design draws the prompts' order per run)
    tokens = [sorted((r["prompt_id"], r["mode"], r["tokens"]) for r in o["runs"]
                     if r["mode"] != "adaptive") for o in outs]
    assert len(tokens[0]) == 4 and tokens[0] == tokens[1]


def test_parallel_schedule_on_tiny_models(tiny_models, tmp_path):
    _, data = run_split(tiny_models, tmp_path / "par.json", "--max-tokens", "60",
                        "--schedule", "parallel", "--policy", "static")
    assert data["settings"]["schedule"] == "parallel"
    static = [r for r in data["runs"] if r["mode"] == "static"]
    assert all(r["schedule"]["hits"] + r["schedule"]["misses"] > 0 for r in static)
    assert all(a["identical"] for a in data["audit"])   # F32: the same tokens as raw
    bad = run(*tiny_args(tiny_models, "--schedule", "parallel"))   # this CPU is not hybrid
    assert bad.exit_code != 0 and "needs --draft-cores" in bad.output
    bad = run(*tiny_args(tiny_models, "--schedule", "parallel", "--temperature", "0.5",
                         "--draft-cores", "0"))
    assert bad.exit_code != 0 and "greedy decoding" in bad.output
