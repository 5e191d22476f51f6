"""Issue 51: SD under load on the tiny models, where llama.cpp's server is built here. N
closed-loop clients complete at every level; SD's outputs are checked against the plain
server's; both servers stop on success, on a failed client (the finished batches kept, a
clear message) and on SIGINT and SIGTERM (by pid); bad levels are refused before any load."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from cpuspec.analysis.load import crossover, summarize_load
from cpuspec.cli.main import main
from cpuspec.llama import native
from test_server import server_bin  # noqa: F401  (the fixture: llama-server where built)


def servers_alive(bin_dir) -> list[int]:
    """llama-server processes of this build still running (zombies count as gone)."""
    out = []
    for p in psutil.process_iter(["exe", "status"]):
        try:
            if p.info["exe"] == str(bin_dir / native.SERVER) and \
                    p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def load_args(tiny_models, server_bin, out, *extra):
    return ["paths", "--target", str(tiny_models["target"]), "--draft",
            str(tiny_models["draft"]), "-k", "3", "-n", "12", "--threads", "1", "--tasks",
            "json", "--prompts-per-task", "2", "--llama-bin", str(server_bin), "--no-save",
            "--json", str(out), *extra]


def test_n_clients_complete_outputs_are_checked_and_servers_stop(server_bin, tiny_models,
                                                                   tmp_path):
    out = tmp_path / "load.json"
    res = CliRunner().invoke(main, load_args(tiny_models, server_bin, out, "--concurrency",
                                             "1,2", "--batches", "2"))
    assert res.exit_code == 0, res.output
    assert not servers_alive(server_bin)
    doc = json.loads(out.read_text())
    assert doc["kind"] == "load" and doc["complete"]
    for level in doc["levels"]:
        n = level["concurrency"]
        for argv in level["server_argv"].values():       # each server had N slots
            assert argv[argv.index("-np") + 1] == str(n), argv
        assert len(level["batches"]) == 4                 # 2 batches × (plain, SD)
        for b in level["batches"]:
            assert len(b["requests"]) == n and {r["client"] for r in b["requests"]} == \
                set(range(n))
            assert all(r["n_tokens"] == 12 for r in b["requests"])
            if b["mode"] == "sd":
                assert sum(r["drafted"] for r in b["requests"]) > 0
            if n > 1:   # the requests were in flight together: every one started before the
                # first one ended
                first_end = min(r["start_s"] + r["e2e_s"] for r in b["requests"])
                assert max(r["start_s"] for r in b["requests"]) < first_end, b["requests"]
    levels = summarize_load(doc)
    for lv in levels:                  # greedy: SD's text is the plain server's
        same, total = map(int, lv["same_output"].split("/"))
        assert total > 0 and same == total, lv
    assert "SD ×raw t/s" in res.output and max(map(len, res.output.splitlines())) <= 100


def test_a_decided_level_stops_at_a_look_and_fixed_runs_every_batch(server_bin, tiny_models,
                                                                   tmp_path):
    """Issue 60, paths --concurrency: batches per level stop the sequential way. The tiny
    draft is as big as its target, so SD's throughput is clearly lower: decided slower at a
    look before the limit (5 or 8 of 12 batches: a batch lasts milliseconds, and one the
    machine delayed can widen the first look's interval across 1, as it did once in a full
    suite run); the screen says so; --fixed runs all 6 asked for."""
    out = tmp_path / "load.json"
    res = CliRunner().invoke(main, load_args(tiny_models, server_bin, out, "--concurrency",
                                             "1", "--batches", "12"))
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    lv = summarize_load(doc)[0]
    units = lv["sequential"]["units"]
    assert lv["sequential"]["state"] == "slower" and units in (5, 8), lv["sequential"]
    assert len(doc["levels"][0]["batches"]) == 2 * units    # pairs up to the look, not 12
    # looks planned up to 12: 5, 8 and 12, so each look's interval is at 1 − 0.05/3
    assert lv["throughput"]["ci"][1] < 1 and \
        lv["sequential"]["level"] == pytest.approx(1 - 0.05 / 3)
    assert f"batches run: 1: {units}/12" in " ".join(res.output.split())
    res = CliRunner().invoke(main, load_args(tiny_models, server_bin, out, "--concurrency",
                                             "1", "--batches", "6", "--fixed"))
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["settings"]["sequential"] is None and len(doc["levels"][0]["batches"]) == 12


def test_a_client_that_fails_mid_run_keeps_the_finished_batches(server_bin, tiny_models,
                                                                   tmp_path, monkeypatch):
    from cpuspec.llama.server import Server
    real = Server.complete
    calls = {"n": 0}

    def flaky(self, prompt, n):
        calls["n"] += 1
        if calls["n"] == 5:      # the warm-ups are 2, the first batch 2: the second fails
            raise native.NativeError("llama-server did not answer /completion (reset)")
        return real(self, prompt, n)
    monkeypatch.setattr(Server, "complete", flaky)
    out = tmp_path / "load.json"
    res = CliRunner().invoke(main, load_args(tiny_models, server_bin, out, "--concurrency",
                                             "1", "--batches", "3"))
    assert res.exit_code == 1 and "a load client failed" in res.output, res.output
    assert "client 1, prompt json-" in res.output and "Traceback" not in res.output
    assert not servers_alive(server_bin)
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and doc["ended"].startswith("failed")
    assert len(doc["levels"][0]["batches"]) == 2       # the first batch, both servers


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_both_servers(server_bin, tiny_models, tmp_path, sig):
    out = tmp_path / "load.json"
    cmd = [sys.executable, "-m", "cpuspec", *load_args(tiny_models, server_bin, out,
                                                       "--concurrency", "2", "--batches",
                                                       "50", "--fixed")]
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stderr=err, text=True)
    try:
        deadline = time.monotonic() + 120
        while "batch 2/50" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)                  # until the load is running
        pids = servers_alive(server_bin)
        assert len(pids) == 2, log.read_text()
        proc.send_signal(sig)
        assert proc.wait(timeout=60) in (130, 143, -sig)
        time.sleep(0.5)
        assert not [p for p in pids if psutil.pid_exists(p) and
                    psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    finally:                                 # nothing of this test outlives it
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in servers_alive(server_bin):
            psutil.Process(pid).kill()


@pytest.mark.parametrize("levels", ["0", "1,x", "100"])
def test_bad_levels_are_refused_before_anything_runs(levels):
    res = CliRunner().invoke(main, ["paths", "--concurrency", levels, "--no-save"])
    assert res.exit_code == 2 and "--concurrency" in res.output, res.output


@pytest.mark.parametrize("flag", [["--fixed"], ["--batches", "8"]])
def test_load_flags_without_concurrency_are_refused(flag):
    res = CliRunner().invoke(main, ["paths", *flag, "--no-save"])
    assert res.exit_code == 2 and "go with --concurrency" in res.output, res.output


def test_the_crossover_is_the_last_level_measured_faster_before_the_first_that_was_not():
    def level(n, sig):
        return {"concurrency": n, "throughput": {"significance": sig}}
    c = crossover([level(1, "faster"), level(2, "not significant"), level(4, "slower")])
    assert (c["pays_up_to"], c["stop_at"], c["stop_state"], c["off_from"]) == \
        (1, 2, "no difference", None)
    c = crossover([level(1, "not significant"), level(2, "faster")])
    assert (c["pays_up_to"], c["stop_at"], c["stop_state"]) == (None, 1, "no difference")
    c = crossover([level(1, "faster"), level(2, None)])
    assert (c["pays_up_to"], c["stop_at"], c["stop_state"]) == (1, 2, "range")
    c = crossover([level(1, "faster"), level(2, "faster")])
    assert (c["pays_up_to"], c["stop_at"]) == (2, None)


B_PRIME = Path(__file__).resolve().parent.parent / "bench" / "results" / "epyc-family25-model17"


def test_compare_sets_load_runs_side_by_side_on_one_screen():
    """Two load runs of one workload: one row per level and run, the ratio of SD ×raw at each
    level, each run's crossover under its machine; on one screen."""
    run = B_PRIME / "load_q8_0_k7.json"
    res = CliRunner().invoke(main, ["compare", str(run), str(run)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert len(lines) <= 40 and max(map(len, lines)) <= 100, res.output
    assert res.output.count("SD pays for up to 2 request(s) in flight here; off from 4 (measured slower)") == 2
    for n, x in ((1, "1.32 [1.21, 1.45]"), (2, "1.20 [1.11, 1.30]"), (4, "0.89 [0.83, 0.95]")):
        rows = [x_ for x_ in lines if x_.split()[:1] == [str(n)]]
        assert len(rows) == 2 and all(x in r for r in rows), rows
        assert rows[1].split()[-1] == "1.00"          # run 2 ÷ run 1, the same run


def test_compare_refuses_load_runs_of_other_workloads_and_mixed_kinds():
    q8, default = B_PRIME / "load_q8_0_k7.json", B_PRIME / "load_default_k4.json"
    res = CliRunner().invoke(main, ["compare", str(q8), str(default)])
    assert res.exit_code == 1 and "different workloads" in res.output
    assert "k: 7 vs 4" in res.output and "target file" in res.output
    res = CliRunner().invoke(main, ["compare", str(q8), str(default), "--force"])
    assert res.exit_code == 0 and "0.58 [0.53, 0.64]" in res.output, res.output
    # run 2 over run 1 at 1 in flight: 0.58 / 1.32 (docs/server.md), not its inverse
    row = next(x for x in res.output.splitlines() if x.split()[:3] == ["1", "run", "2"])
    assert row.split()[-1] == "0.44", row
    bench = B_PRIME / "bench_q8_0_k7.json.gz"
    res = CliRunner().invoke(main, ["compare", str(q8), str(bench)])
    assert res.exit_code == 2 and "load files" in res.output, res.output
    res = CliRunner().invoke(main, ["compare", str(q8), str(q8), "--format", "csv"])
    assert res.exit_code == 2 and "text only" in res.output


def test_a_draftless_flags_load_run_answers_for_that_flag_only(cpuspec_home):
    """A saved load run of llama-server with --spec-default (no draft model) answers the
    draftless line's "under load" note for that flag on that target, and never a draft model's
    configuration or another flag's (recorded on B': not faster at 1 or 2 in flight)."""
    from cpuspec.report.load import load_note, measured_load
    saved = cpuspec_home / "results"
    saved.mkdir(parents=True)
    run = B_PRIME / "load_spec_default_long-edit.json"
    (saved / "20261204T000000Z-host-AMD-EPYC-paths.json").write_text(run.read_text())
    doc = json.loads(run.read_text())
    target, meta = doc["settings"]["target"], doc["meta"]
    found = measured_load(target, None, 0, meta, threads=2, server_flags=["--spec-default"])
    assert found is not None and found[1].name.startswith("20261204T000000Z")
    assert load_note(target, None, 0, meta, threads=2, server_flags=["--spec-default"]) == \
        "SD made no difference at 1 in flight here"
    assert measured_load(target, None, 0, meta, threads=2,
                         server_flags=["--spec-type", "ngram-mod"]) is None
    assert measured_load(target, None, 4, meta, threads=2, drafter="lookup") is None
    assert measured_load(target, None, 0, meta, threads=1,
                         server_flags=["--spec-default"]) is None
    other = json.loads((B_PRIME.parent / "epyc-family25-model1" /
                        "server_spec_default_long-edit.json").read_text())["meta"]
    assert measured_load(target, None, 0, other, threads=2,
                         server_flags=["--spec-default"]) is None
    # its screen names the flag in place of a draft and a k it did not use
    head = CliRunner().invoke(main, ["report", str(run)]).output.splitlines()[0]
    assert "with --spec-default" in head and "k =" not in head, head


def test_compare_of_many_load_runs_stays_on_one_screen_and_counts_what_it_left_out():
    run = str(B_PRIME / "load_q8_0_k7.json")
    res = CliRunner().invoke(main, ["compare", *[run] * 8])     # 8 runs × 3 levels = 24 rows
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert len(lines) <= 40 and max(map(len, lines)) <= 100, res.output
    shown = [x for x in lines if x.split()[:1] in (["1"], ["2"], ["4"])]
    cut = next(x for x in lines if "more rows" in x)
    assert len(shown) + int(cut.split()[1]) == 24, res.output
