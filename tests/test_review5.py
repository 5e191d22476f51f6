"""Issue 69, item 12 (two red teams): verdicts the evidence does not support, usage errors
that exit 2, and a child left running. Each test fails on the code before it; files are the
project's recorded runs, altered only where a test needs a disturbed or broken record."""
import gzip
import json
import os
import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
B = ROOT / "tests/recorded/epyc-family25-model17/bench_q8_0_k7.json.gz"


def run(*args, **kw):
    return CliRunner().invoke(main, [str(a) for a in args], **kw)


def b_run() -> dict:
    return json.loads(gzip.decompress(B.read_bytes()))


def one_line_exit_2(res, words: str) -> None:
    assert res.exit_code == 2, res.output
    assert words in " ".join(res.output.split()), res.output
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception


# --- verdicts ---------------------------------------------------------------------------------

def test_advise_turns_sd_on_only_where_the_run_measured_it_faster():
    """B's overall was "no difference" (1.09 [0.92, 1.28]) while the cost model alone said
    "ON, k = 3"; on or off is now the measured end-to-end verdict, the model's k* beside it."""
    out = " ".join(run("advise", B, "--details").output.split())
    assert "overall undecided; model k = 3" in out, out
    assert "json ON, k = 7" in out and "story OFF: needs ≥ 64% acceptance" in out
    assert "measured ×raw e2e k=7" in out
    data = json.loads(run("advise", B, "--json").output)
    assert {t: a["verdict"] for t, a in data.items()} == {
        "json": "ON", "code": "ON", "story": "OFF", "overall": "UNDECIDED"}
    assert data["overall"]["model_verdict"] == "ON"
    screen = " ".join(run("advise", B).output.split())
    assert "llama-server for json, code (k = 7" in screen and "for overall" not in screen


def test_a_disturbed_cost_probe_gives_no_advice(tmp_path):
    """A probe timed on a disturbed machine (a verify of 8 tokens at 0.13 of a decode, as the
    red team's SIGTERM on a loaded machine left) cannot be a machine's costs."""
    doc = b_run()
    v = doc["cost_probe"]["verify_s"]
    v["8"] = 0.13 * v["1"]
    path = tmp_path / "disturbed.json"
    path.write_text(json.dumps(doc))
    res = run("advise", path)
    assert res.exit_code == 1 and "the machine was disturbed" in res.output, res.output
    screen = " ".join(run("report", path).output.split())
    assert "WARNING: no advice from this run's cost probe" in screen
    assert "predicted" not in screen.split("Advice:")[1].split("More on")[0]


def test_impossible_heads_counters_are_said_and_shown_as_nothing():
    from test_heads import known_heads_run

    from cpuspec.report.heads import render_heads
    doc = known_heads_run(k=6, drafted_per_round=6.0)
    for r in doc["runs"]:
        if r["mode"] == "sd":
            r["accepted"] = 80             # 8 rounds keeping 10 drafts each at k = 6
    out = " ".join(render_heads(doc).split())
    assert "IMPOSSIBLE COUNTERS" in out and "a = 11.00 tokens a round, outside [1, k + 1]" in out


# --- usage errors: exit 2, one line, before any work ----------------------------------------

@pytest.mark.parametrize("args, words", [
    (["bench", "--pair", "nosuch"], "unknown pair 'nosuch'"),
    (["costs", "--pair", "nosuch"], "unknown pair 'nosuch'"),
    (["tune", "--targets", "nosuch"], "unknown model 'nosuch'"),
    (["tune", "--drafts", "hybrid:lookup"], "names no draft model"),
    (["bench", "--p-cores", "4096"], "4096"),
    (["bench", "--target", "/nonexistent/t.gguf"], "model file not found"),
    (["bench", "--prompts", "/nonexistent/p.jsonl"], "p.jsonl"),
    (["models", "shape", "nosuch"], "nosuch"),
    (["models", "shape", "qwen3-0.6b", "--quant", "Q2_K"], "Q2_K"),
    (["models", "shape", "qwen3-0.6b", "--tokenizer", "/etc/passwd"],
     "not a readable GGUF file"),
])
def test_usage_errors_exit_2(args, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run(*args)
    one_line_exit_2(res, words)
    assert "saving this run as" not in res.output


def test_a_pipe_given_as_a_model_is_refused_not_read(tmp_path):
    fifo = tmp_path / "t.gguf"
    os.mkfifo(fifo)
    one_line_exit_2(run("costs", "--target", fifo), "is not a regular file")


def test_acceptance_from_a_foreign_record_is_refused_not_a_traceback(tmp_path):
    doc = b_run()
    doc["models"] = "not an object"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    res = run("costs", "--sizes", "0.5b", "--acceptance", bad)
    assert res.exit_code in (1, 2) and "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    one_line_exit_2(run("costs", "--sizes", "0.5b", "--acceptance", "/dev/zero"),
                    "not a regular file")


def test_tune_takes_each_name_once(monkeypatch):
    from cpuspec.cli import tune as measure
    from cpuspec.inputs.registry import load_registry
    names = measure._tune_names(load_registry(), "qwen2.5-coder-1.5b-q4_0,qwen2.5-coder-1.5b-q4_0",
                                "lookup,lookup", None)
    assert names == {"targets": ["qwen2.5-coder-1.5b-q4_0"], "drafts": ["lookup"]}


# --- a child left running ---------------------------------------------------------------------

def test_a_server_that_dies_before_it_is_up_takes_its_children_with_it(tmp_path):
    """llama-server exiting before it was healthy left whatever it started in its group
    running (its leader reaped, the group skipped)."""
    from cpuspec.llama.native import NativeError
    from cpuspec.llama.server import SERVER, Server
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid_file = tmp_path / "child.pid"
    prog = bin_dir / SERVER
    prog.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        sleep 300 &
        echo $! > {pid_file}
        sleep 0.3
        exit 3
        """))
    prog.chmod(prog.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(NativeError, match="exited 3 before it was up"):
        with Server(bin_dir, ["-m", "x.gguf"], start_timeout_s=20):
            pass
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
            if Path(f"/proc/{child}/stat").read_text().split()[2] == "Z":
                break
        except (ProcessLookupError, OSError):
            break
        time.sleep(0.05)
    else:
        os.kill(child, 9)
        pytest.fail("the server's child outlived it")


# --- a user's query: bounded, and stopped by Ctrl-C -------------------------------------------

def test_a_query_returning_too_many_rows_is_refused_not_fetched():
    pytest.importorskip("duckdb")
    res = run("leaderboard", "--sql", "SELECT * FROM range(100000000000)")
    one_line_exit_2(res, "more than 100,000 rows")


def test_ctrl_c_stops_a_long_query(tmp_path):
    import signal
    import subprocess
    pytest.importorskip("duckdb")
    proc = subprocess.Popen([sys.executable, "-m", "cpuspec", "leaderboard", "--sql",
                             "SELECT count(*) FROM range(100000000000000)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "CPUSPEC_HOME": str(tmp_path)})
    # wait until DuckDB is at work: the process has used 2 s of CPU (imports take about 1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        if (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") > 2.0:
            break
        time.sleep(0.2)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 10 and proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err


# --- files written where asked, never replaced unasked ----------------------------------------

def test_plot_does_not_replace_figures_without_force(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "figs"
    assert run("plot", B, "--out", out).exit_code == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    one_line_exit_2(run("plot", B, "--out", out), "holds figures already")
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    assert run("plot", B, "--out", out, "--force").exit_code == 0


@pytest.mark.parametrize("args, words", [
    (["plot", str(B), "--out", ""], "name a folder"),
    (["export", str(B), "--out", ""], "--out is empty"),
    (["publish", str(B), "--to", ""], "--to is empty"),
    (["publish", str(B), "--to", "memory://x"], "vanishes when cpuspec exits"),
])
def test_empty_or_vanishing_destinations_are_refused(args, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line_exit_2(run(*args), words)
    assert not list(tmp_path.iterdir())


def test_an_unsaved_runs_screen_says_so_not_run_equals_run():
    from cpuspec.analysis.summary import summarize
    from cpuspec.report.advice import advise
    from cpuspec.report.verdict import render_verdict
    doc = b_run()
    out = render_verdict(doc, summarize(doc), advise(doc), None)
    assert "RUN = RUN" not in out and "this one was not saved, --no-save" in out


def test_a_raw_only_run_points_to_sd_not_to_keeping_it_off(tmp_path):
    """A --policy off run measured no SD: its screen's next step is to measure SD."""
    doc = b_run()
    doc["runs"] = [r for r in doc["runs"] if r["mode"] == "raw"]
    doc["settings"]["policies"] = []
    doc["audit"] = []
    path = tmp_path / "raw.json"
    path.write_text(json.dumps(doc))
    out = " ".join(run("report", path).output.split())
    assert "keep SD off here" not in out
    assert "Next: cpuspec bench (without --policy off) measures SD" in out
