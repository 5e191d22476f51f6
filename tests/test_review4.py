"""Issue 57, items 2 and 9: like for like in `paths --server-flags`, and no silent switches.
Each case fails fast on its arguments, before any model loads (the model files named do not
exist: a check that came too late would say so instead)."""
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main
from cpuspec.harness.paths import PathsConfig, paths_settings, server_argv
from cpuspec.llama.server import redact_argv
from cpuspec.results.schema import load_json


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def config(flags):
    return PathsConfig(Path("t.gguf"), None, 3, "lookup", [], 16, 2, ("llama-server",),
                       Path("."), server_flags=tuple(flags))


def test_non_speculative_server_flags_reach_both_servers_speculative_ones_the_sd_server():
    cfg = config(["-ngl", "0", "--spec-type", "ngram-mod", "-tb", "2"])
    plain, sd = server_argv(cfg, 256, False), server_argv(cfg, 256, True)
    assert plain[plain.index("-ngl") + 1] == "0" and plain[plain.index("-tb") + 1] == "2"
    assert "--spec-type" not in plain and sd[sd.index("--spec-type") + 1] == "ngram-mod"
    assert sd[:len(plain)] == plain


def test_a_draft_model_by_either_name_gets_the_draft_threads_once():
    long = server_argv(config(["--spec-type", "draft-simple", "--model-draft", "d.gguf"]),
                       256, True)
    assert long[long.index("-td") + 1] == "2"
    own = server_argv(config(["-md", "d.gguf", "-td", "1"]), 256, True)
    assert own.count("-td") == 1 and own[own.index("-td") + 1] == "1"


@pytest.mark.parametrize("flags, words", [
    ("--threads=1 --spec-default", "not --threads"),
    ("--parallel=8 --spec-default", "not --parallel"),
    ("--spec-default -b=64", "-b VALUE, not -b=VALUE"),
    ("-ngl 99", "speculative flags"),
    ("--spec-default --api-key s3cret", "sends no key"),
])
def test_server_flags_that_skew_the_comparison_are_refused(tmp_path, flags, words):
    res = run("paths", "--paths", "llama-server", "--server-flags", flags, "--target",
              tmp_path / "none.gguf")
    assert res.exit_code == 2 and words in res.output and "s3cret" not in res.output, \
        res.output


def test_k_p_min_and_draft_beside_server_flags_are_refused_where_only_the_server_runs(
        tmp_path):
    for extra in (["-k", "7"], ["--p-min", "0.5"]):
        res = run("paths", "--paths", "llama-server", "--server-flags", "--spec-default",
                  *extra, "--target", tmp_path / "none.gguf")
        assert res.exit_code == 2 and "would not reach the SD server" in res.output, \
            res.output


def test_a_secret_flags_value_is_never_kept():
    assert redact_argv(["--api-key", "x", "--api_key=y", "-ngl", "1"]) == \
        ["--api-key", "***", "--api-key=***", "-ngl", "1"]
    cfg = config(["--spec-default", "--api-key", "s3cret"])
    assert "s3cret" not in str(paths_settings(cfg))


@pytest.mark.parametrize("args, words", [
    (["paths", "--concurrency", ""], "--concurrency"),
    (["costs", "--sizes", ""], "name one size or more"),
    (["costs", "--quants", "Q8_0"], "--quants and --acceptance go with --sizes or --pairs"),
])
def test_an_empty_or_orphan_option_is_refused_not_ignored(tmp_path, args, words):
    res = run(*args, "--target" if args[0] == "paths" else "--draft", tmp_path / "none.gguf")
    assert res.exit_code == 2 and words in res.output, res.output


def test_a_whatif_whose_targets_were_all_skipped_fails(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from cpuspec.inputs.shapes import ShapeError

    def no_room(*a, **k):
        raise ShapeError("needs 30 GB, 10 GB free")
    draft = tmp_path / "d.gguf"
    draft.write_bytes(b"GGUF")
    monkeypatch.setattr("cpuspec.inputs.models.fetch_model",
                        lambda *a, **k: SimpleNamespace(path=draft))
    monkeypatch.setattr("cpuspec.llama.shape_true.write_shape_true", no_room)
    res = run("costs", "--sizes", "14b", "--draft", draft, "--no-save")
    assert res.exit_code == 1 and "no target was measured" in res.output, res.output


# --- item 7: shape-true files ---------------------------------------------------------------

def test_a_signal_during_models_shape_leaves_no_partial_file(tiny_models, cpuspec_home):
    import signal

    from test_signals import check_stopped, start, stop_at
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc = start(["models", "shape", "1.5b", "--quant", "Q4_0", "--tokenizer",
                      str(tiny_models["target"])])
        took, err = stop_at(proc, "shape-true: writing", sig, delay_s=0.3)
        check_stopped(proc, took, err, sig)
        folder = cpuspec_home / "models" / "shape-true"
        assert not list(folder.glob("*.partial")) and not list(folder.glob("*.gguf")), \
            list(folder.iterdir())


def test_a_stale_partial_file_of_a_dead_process_is_removed(tiny_models, monkeypatch):
    from cpuspec.inputs.shapes import ShapeError, shape_of
    from cpuspec.llama import shape_true
    shape = shape_of("0.5b")
    dest = shape_true.shape_path(shape, "Q4_0")
    dest.parent.mkdir(parents=True)
    stale = dest.with_name(dest.name + ".999999.partial")   # no process 999999 here
    stale.write_bytes(b"x" * 1000)

    def stop(*a, **k):
        raise ShapeError("stop")
    monkeypatch.setattr(shape_true, "check_room", stop)
    with pytest.raises(ShapeError):
        shape_true.write_shape_true(shape, "Q4_0", tiny_models["target"], 1 << 34)
    assert not stale.exists()


def test_a_shape_true_file_cut_short_is_written_again(tiny_models, monkeypatch):
    from cpuspec.inputs.shapes import ShapeError, shape_of
    from cpuspec.llama import shape_true
    shape = shape_of("0.5b")
    dest = shape_true.shape_path(shape, "Q4_0")
    dest.parent.mkdir(parents=True)
    dest.write_bytes(tiny_models["target"].read_bytes()[:-100])   # a GGUF cut short

    def stop(*a, **k):
        raise ShapeError("would write it again")
    monkeypatch.setattr(shape_true, "check_room", stop)
    with pytest.raises(ShapeError, match="would write it again"):
        shape_true.write_shape_true(shape, "Q4_0", tiny_models["target"], 1 << 34)


def test_an_unwritable_shape_true_folder_is_one_line(tiny_models, cpuspec_home):
    (cpuspec_home / "models").mkdir(parents=True)
    (cpuspec_home / "models" / "shape-true").write_text("a file where the folder goes")
    res = run("models", "shape", "0.5b", "--tokenizer", tiny_models["target"])
    assert res.exit_code == 1 and "cannot write" in res.output, res.output
    assert isinstance(res.exception, SystemExit)


def test_a_full_disk_is_said_in_words(tiny_models, monkeypatch):
    from types import SimpleNamespace

    from cpuspec.inputs.shapes import ShapeError, shape_of
    from cpuspec.llama import shape_true

    def short_write(*a, **k):
        raise OSError("2451456 requested and 1221888 written")
    monkeypatch.setattr(shape_true, "check_room", lambda *a, **k: 1)
    monkeypatch.setattr(shape_true, "_data", short_write)
    monkeypatch.setattr(shape_true.shutil, "disk_usage",
                        lambda p: SimpleNamespace(total=1, used=1, free=0))
    with pytest.raises(ShapeError) as err:
        shape_true.write_shape_true(shape_of("0.5b"), "Q4_0", tiny_models["target"], 1 << 34)
    assert "no space left on the device" in str(err.value)
    assert "requested" not in str(err.value)


# --- item 8: tracebacks and hangs -----------------------------------------------------------

RECORDED_B = Path(__file__).resolve().parent / "recorded" / \
    "epyc-family25-model17/bench_q8_0_k7.json.gz"


@pytest.mark.parametrize("damage", [
    lambda d: d.__setitem__("models", "x"),
    lambda d: d["meta"]["hardware"].__setitem__("cpu_model", 3),
    lambda d: d["prompts"].__setitem__(0, "x"),
    lambda d: d["settings"].__setitem__("drafter", [1]),
    lambda d: d["models"]["target"].__setitem__("n_params", 10 ** 30),
])
def test_export_of_a_damaged_file_is_one_line(tmp_path, damage):
    pytest.importorskip("pyarrow")
    import json
    doc = load_json(RECORDED_B)
    damage(doc)
    f = tmp_path / "damaged.json"
    f.write_text(json.dumps(doc))
    for args in (["export", f, "--out", tmp_path / "ds"],
                 ["publish", f, "--to", tmp_path / "pub"]):
        res = run(*args)
        assert res.exit_code == 1 and "damaged results file" in res.output, res.output
        assert isinstance(res.exception, SystemExit)


def test_a_prompts_fifo_is_refused_not_read_forever(tmp_path, tiny_models):
    import os
    import subprocess
    import sys
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    for cmd in (["bench", "--target", tiny_models["target"], "--draft", tiny_models["draft"]],
                ["paths", "--target", tiny_models["target"], "--draft", tiny_models["draft"],
                 "--paths", "cpuspec"]):
        proc = subprocess.run([sys.executable, "-m", "cpuspec", *map(str, cmd), "--prompts",
                               str(fifo), "--no-save"], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode != 0 and "not a regular file" in proc.stderr, proc.stderr


def _http(handler_body):
    import http.server
    import threading

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass
    handler_body(H)
    srv = http.server.HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_a_garbled_answer_is_a_clear_error_not_a_traceback():
    from cpuspec.llama.native import NativeError
    from cpuspec.llama.server import Server

    def body(H):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
        H.do_POST = do_POST
    srv = _http(body)
    try:
        s = Server.__new__(Server)
        s.port, s._log = srv.server_address[1], None
        with pytest.raises(NativeError):
            s._post("/completion", {})
    finally:
        srv.shutdown()


def test_another_programs_health_on_the_port_is_not_taken_for_the_server(tmp_path,
                                                                          monkeypatch):
    from cpuspec.llama import server
    from cpuspec.llama.native import NativeError

    def body(H):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")
        H.do_GET = do_GET
    srv = _http(body)
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setattr(server, "free_port", lambda: srv.server_address[1])
    try:
        with pytest.raises(NativeError):
            with server.Server(tmp_path, [], start_timeout_s=2):
                pass
    finally:
        srv.shutdown()
