"""The review's fourth pass (issue 79), models by name: the hub through a proxy (79.10:
reachability asks huggingface-hub's own session, so HTTP(S)_PROXY and NO_PROXY apply; a dead
proxy is one line that names it, a working one, a forward proxy on loopback here, works; the
CLI runs in a child process, since huggingface-hub reads HF_ENDPOINT and the proxies when it
starts), llama.cpp's case-sensitive file filter (79.11/18), mistyped paths (79.12) and a
remembered sha256 (79.13)."""
from __future__ import annotations

import http.client
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from test_model_refs import cpuspec, hub  # noqa: F401  (the fake hub fixture)


class Forward(BaseHTTPRequestHandler):
    """A forward proxy for plain HTTP: the absolute URL of each request fetched from its
    server, every header passed on both ways. Counts what it forwarded."""
    protocol_version = "HTTP/1.1"
    seen: list = []

    def log_message(self, *a):
        pass

    def _forward(self):
        url = urllib.parse.urlsplit(self.path)
        Forward.seen.append(self.command + " " + url.path)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() != "proxy-connection"}
        conn.request(self.command, url.path + (f"?{url.query}" if url.query else ""), body,
                     headers)
        resp = conn.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        conn.close()

    do_GET = do_HEAD = do_POST = _forward


@pytest.fixture
def proxy():
    Forward.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def no_proxy_env():
    return {"NO_PROXY": "", "no_proxy": ""}


def test_a_dead_proxy_is_one_line_that_names_it(hub, tmp_path):  # noqa: F811
    dead = "http://127.0.0.1:9"
    res = cpuspec(tmp_path, "models", "drafts", "acme/tiny-GGUF:Q4_K_M", endpoint=hub.endpoint,
                  extra={"HTTP_PROXY": dead, "HTTPS_PROXY": dead, **no_proxy_env()},
                  timeout=120)
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "proxy http://127.0.0.1:9" in lines[0], res.stderr
    assert "Traceback" not in res.stderr


def test_a_working_proxy_carries_every_request(hub, proxy, tmp_path):  # noqa: F811
    res = cpuspec(tmp_path, "models", "drafts", "acme/tiny-GGUF:Q4_K_M", endpoint=hub.endpoint,
                  extra={"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, **no_proxy_env()},
                  timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert any("/api/models/acme/tiny-GGUF" in s for s in Forward.seen), Forward.seen


def test_no_proxy_goes_around_a_dead_proxy(hub, tmp_path):  # noqa: F811
    dead = "http://127.0.0.1:9"
    res = cpuspec(tmp_path, "models", "drafts", "acme/tiny-GGUF:Q4_K_M", endpoint=hub.endpoint,
                  extra={"HTTP_PROXY": dead, "HTTPS_PROXY": dead, "NO_PROXY": "127.0.0.1"},
                  timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


def test_the_model_file_filter_is_case_sensitive_as_llama_cpp_s():
    """Issue 79.11/18: llama.cpp's gguf_filename_is_model uses std::string::find: an upper-case
    MTP- file is a model to it, so -hf REPO:Q4_K_M resolves to the first such file listed."""
    from cpuspec.inputs.refs import is_model_file, pick_file
    assert is_model_file("X-MTP-Q4_K_M.gguf") and not is_model_file("X-mtp-Q4_K_M.gguf")
    assert not is_model_file("mmproj-X-F16.gguf") and is_model_file("MMPROJ-X-F16.gguf")
    files = ["X-MTP-Q4_K_M.gguf", "X-Q4_K_M.gguf"]
    assert pick_file(files, "Q4_K_M", "acme/X") == "X-MTP-Q4_K_M.gguf"
    assert pick_file(["x-mtp-Q4_K_M.gguf", "X-Q4_K_M.gguf"], "Q4_K_M", "acme/X") \
        == "X-Q4_K_M.gguf"


def test_a_mistyped_relative_path_is_a_missing_file_not_a_hub_query(tmp_path, monkeypatch):
    """Issue 79.12: with ./models here, models/qwen and models/q/qwen.gguf are paths."""
    from cpuspec.inputs.refs import parse_ref
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    assert parse_ref("models/qwen").kind == "path"
    assert parse_ref("models/q/qwen.gguf").kind == "path"
    assert parse_ref("acme/tiny-GGUF:Q4_K_M").kind == "hf"     # no ./acme: a repo


def test_a_remembered_sha256_is_not_verified_this_run(hub, tiny_models, tmp_path):  # noqa: F811
    """Issue 79.13: a file fetched by reference, then named by its path: its sha256 is
    remembered (size and mtime unchanged), not compared this run: not "verified"."""
    from test_model_refs import BENCH
    out = tmp_path / "run.json"
    res = cpuspec(tmp_path, *BENCH, "--target", "acme/tiny-GGUF:Q4_K_M", "--draft",
                  "acme/tiny-draft-GGUF:q8_0", "--json", str(out), "--no-save",
                  endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr[-2000:]
    first = json.loads(out.read_text())["models"]["target"]
    assert first["verified"] is True
    again = tmp_path / "again.json"
    res = cpuspec(tmp_path, *BENCH, "--target", first["path"], "--draft",
                  "acme/tiny-draft-GGUF:q8_0", "--json", str(again), "--no-save",
                  endpoint=hub.endpoint)
    assert res.returncode == 0, res.stderr[-2000:]
    m = json.loads(again.read_text())["models"]["target"]
    assert m["verified"] is False and m["verified_by"].startswith("remembered")
    assert m["repo"] == "acme/tiny-GGUF"     # where it came from is still said


def test_the_tune_budget_is_wall_clock_from_the_command_s_start(tiny_models, tmp_path,
                                                                monkeypatch):
    """Issue 79.21: what ran before the search (loads, derivations) counts: a command that
    started two minutes ago has spent a one-minute budget before its first measurement."""
    import time
    import types

    from click.testing import CliRunner

    from cpuspec.cli import tune as measure
    from cpuspec.cli.main import main
    monkeypatch.setattr(measure, "time", types.SimpleNamespace(
        monotonic=lambda: time.monotonic() - 120))
    out = tmp_path / "tune.json"
    res = CliRunner().invoke(main, [
        "tune", "--targets", str(tiny_models["target"]), "--drafts",
        f"{tiny_models['draft']},{tiny_models['same']},lookup",
        "--tasks", "json", "--prompts-per-task", "2", "--max-tokens", "12", "--k-max", "2",
        "--threads", "1", "--budget", "1", "--json", str(out), "--no-save"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    # the search's clock (what its budget checks read) started with the command, two minutes
    # before the search itself began
    assert doc["wall_s"] >= 120
    assert re.search(r"\b2\.\d\s+min\s+of\s+wall\s+time", res.output), res.output


def test_the_red_team_s_references_are_one_line_or_a_right_reading(tmp_path, monkeypatch):
    """A home of no such user, a split count of zero, a local folder named like an owner with
    the hub's :QUANT syntax, a password in a proxy URL."""
    from cpuspec.inputs.refs import RefError, parse_ref, split_parts
    from cpuspec.inputs.refs.hub import _no_password
    with pytest.raises(RefError, match="no home folder"):
        parse_ref("~no-such-user-xyz/m.gguf")
    assert split_parts("m-Q4_K_M-00001-of-00000.gguf") == ["m-Q4_K_M-00001-of-00000.gguf"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "unsloth").mkdir()
    assert parse_ref("unsloth/Qwen3-8B-GGUF:Q8_0").kind == "hf"
    assert _no_password("http://user:secret@proxy:3128") == "http://proxy:3128"


def test_an_explicit_file_that_is_no_model_is_refused_before_any_download(hub, tmp_path):  # noqa: F811
    res = cpuspec(tmp_path, "models", "drafts", "acme/tiny-GGUF/README.md.gguf",
                  endpoint=hub.endpoint)
    res2 = cpuspec(tmp_path, "models", "drafts", "hf://acme/tiny-GGUF/README.md",
                   endpoint=hub.endpoint)
    assert res2.returncode != 0 and "not a GGUF model file" in res2.stderr, res2.stderr
    assert "Traceback" not in res.stderr + res2.stderr
