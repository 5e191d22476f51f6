"""The llama-server path on the tiny models, where llama.cpp's server is built here: it starts,
serves, reports its timings and draft counters, and stops; a busy port and a missing binary get
clear errors; no process is left behind (checked by pid, also after Ctrl-C and SIGTERM)."""
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main
from cpuspec.harness.paths import PathsConfig, server_argv
from cpuspec.inputs.tasks import builtin_prompts
from cpuspec.llama import native
from cpuspec.llama.server import Server, parse_metrics
from test_paths import real_bin_dir

PROMPT = "The quick brown fox jumps over the lazy dog. The quick"


@pytest.fixture
def server_bin():
    bin_dir = real_bin_dir((native.SERVER,))
    if bin_dir is None:
        pytest.skip("llama.cpp's llama-server is not built here (`cpuspec paths --build-native`)")
    return bin_dir


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_server_serves_reports_timings_and_stops(server_bin, tiny_models):
    cfg = PathsConfig(tiny_models["target"], tiny_models["draft"], 3, "model", [], 16, 1,
                      ("llama-server",), server_bin)
    with Server(server_bin, server_argv(cfg, 256, sd=False)) as plain, \
            Server(server_bin, server_argv(cfg, 256, sd=True)) as spec:
        pids = [plain.pid, spec.pid]
        assert plain.port != spec.port
        raw = plain.complete(PROMPT, 16)
        before = spec.metrics()
        sd = spec.complete(PROMPT, 16)
        after = spec.metrics()
    assert all(gone(p) for p in pids)
    assert raw.tokens == 16 and raw.e2e_s > 0 and raw.prompt_tokens > 5
    assert raw.drafted == 0 and sd.drafted > 0 and 0 <= sd.accepted <= sd.drafted
    assert sd.text == raw.text           # greedy SD is lossless in the server too
    rounds = after["spec_decode_num_drafts_total"] - before["spec_decode_num_drafts_total"]
    assert 1 <= rounds <= sd.tokens
    assert after["spec_decode_num_draft_tokens_total"] - \
        before.get("spec_decode_num_draft_tokens_total", 0) == sd.drafted


def test_a_busy_port_is_refused_before_anything_starts(server_bin, tiny_models):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(native.NativeError, match=f"port {port} on 127.0.0.1 is in use"):
            Server(server_bin, ["-m", str(tiny_models["target"])], port=port)


def test_a_server_that_cannot_start_says_why_and_leaves_nothing(server_bin, tmp_path):
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"GGUF but no")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(native.NativeError, match="exited .* before it was up"):
        with Server(server_bin, ["-m", str(bad)]):
            pass
    assert {p.pid for p in psutil.Process().children(recursive=True)} - before == set()


def test_a_missing_binary_is_a_clear_error(tmp_path):
    with pytest.raises(native.NativeError, match="llama-server does not exist"):
        Server(tmp_path, ["-m", "x.gguf"])


def test_the_paths_command_measures_the_server(server_bin, tiny_models, tmp_path):
    out = tmp_path / "paths.json"
    res = CliRunner().invoke(main, [
        "paths", "--target", str(tiny_models["target"]), "--draft", str(tiny_models["draft"]),
        "-k", "3", "-n", "12", "--tasks", "json", "--prompts-per-task", "2", "-t", "1",
        "--paths", "cpuspec,llama-server", "--llama-bin", str(server_bin),
        "--json", str(out), "--no-save"])
    assert res.exit_code == 0, res.output
    assert "llama-server" in res.output and "A round, ms for tokens:" in res.output
    details = CliRunner().invoke(main, ["report", str(out), "--details"]).output
    assert "llama-server's time per request" in details
    import json
    doc = json.loads(out.read_text())
    server = [r for r in doc["runs"] if r["path"] == "llama-server"]
    assert {r["mode"] for r in server} == {"raw", "static"} and len(server) == 4
    assert all(r["server_prompt_tokens"] > 0 and r["e2e_s"] > r["decode_s"] for r in server)
    assert all(r["server_rounds"] > 0 for r in server if r["mode"] == "static")
    # issue 53, 5l: the server drafted, fewer rounds than tokens, and greedy SD kept the text
    raw = {r["prompt_id"]: r["text"] for r in server if r["mode"] == "raw"}
    for r in (r for r in server if r["mode"] == "static"):
        assert r["drafted"] > 0 and r["server_rounds"] < r["n_tokens"]
        assert r["text"] == raw[r["prompt_id"]]


def test_server_flags_replace_the_configurations(tiny_models, server_bin):
    cfg = PathsConfig(tiny_models["target"], None, 3, "lookup", [], 16, 1, ("llama-server",),
                      server_bin, server_flags=("--spec-type", "ngram-mod"))
    argv = server_argv(cfg, 256, sd=True)
    assert argv[argv.index("--spec-type") + 1] == "ngram-mod" and "-md" not in argv
    res = CliRunner().invoke(main, ["paths", "--paths", "cpuspec", "--server-flags", "-x"])
    assert res.exit_code == 2 and "applies to the llama-server path" in res.output
    res = CliRunner().invoke(main, ["paths", "--paths", "llama-server", "--server-flags",
                                    "--port 9 --spec-type ngram-mod"])
    assert res.exit_code == 2 and "not --port" in res.output


def test_metrics_parse():
    text = "# HELP llamacpp:x y\n# TYPE llamacpp:x counter\nllamacpp:x 3\nllamacpp:bad nan?\n"
    assert parse_metrics(text) == {"x": 3.0}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_no_server_outlives_a_signal(server_bin, tiny_models, tmp_path, sig):
    """A run interrupted while its servers are up leaves no server process (by pid)."""
    pidfile = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from cpuspec.machine import interrupt
        from cpuspec.llama.server import Server
        with interrupt.handled():
            with Server(Path({str(server_bin)!r}), ["-m", {str(tiny_models['target'])!r}]) as s:
                Path({str(pidfile)!r}).write_text(str(s.pid))
                while True:
                    time.sleep(0.1)
                    interrupt.check()
        """)
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not pidfile.exists() or not pidfile.read_text():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    pid = int(pidfile.read_text())
    assert not gone(pid)
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    time.sleep(0.5)
    assert gone(pid)
