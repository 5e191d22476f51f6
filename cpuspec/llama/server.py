"""llama.cpp's server, run as people deploy it: started on 127.0.0.1, asked over HTTP, stopped.

`Server` starts `llama-server` in a process group of its own (machine.interrupt), waits for
`/health`, and is always stopped: on leaving the `with` block, on an error, on Ctrl-C or
SIGTERM (the group is killed and reaped; the server's own children too). One slot (-np 1)
unless a load test asks for N (`slots`: -np N, the context shared among them). `complete`
sends one prompt to `/completion` (the chat-formatted text, greedy, prompt cache off, so every
request prefills), `chat` the messages to `/v1/chat/completions` as an OpenAI-style client
does; each returns the client's end-to-end time with the server's own `timings`; `metrics` reads `/metrics` (--metrics) for the draft counters.

The standard library's urllib only: no HTTP client is added to cpuspec's dependencies.
"""
from __future__ import annotations

import http.client
import json
import socket
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cpuspec.core.commands import SERVER
from cpuspec.core.text import printable as clean
from cpuspec.llama.native import NativeError, call_timeout_s
from cpuspec.machine import interrupt

HOST = "127.0.0.1"
# Loading two Qwen models and llama.cpp's warm-up take seconds here; a server that is not up
# by then will not be.
START_TIMEOUT_S = 300.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def port_busy(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0


@dataclass
class ServerRun:
    """One request: the client's end-to-end wall clock (request sent to response read) and
    what the server says it did."""
    e2e_s: float
    text: str
    tokens: int                 # timings.predicted_n: the tokens generated
    prompt_tokens: int          # timings.prompt_n: the prompt tokens it read (no cache)
    prompt_ms: float
    predicted_ms: float
    drafted: int                # timings.draft_n (0 without a draft)
    accepted: int               # timings.draft_n_accepted
    stop: str                   # "eos", "limit", ...


# Flags whose value is a secret: never saved in a results file nor printed.
SECRET_FLAGS = ("--api-key", "--api-key-file", "--ssl-key-file", "--hf-token", "-hft")


def redact_argv(argv: Sequence[str]) -> list[str]:
    """argv with every secret flag's value (separate or after '=') replaced by '***'."""
    out: list[str] = []
    hide_next = False
    for a in argv:
        a = str(a)
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        flag = a.split("=", 1)[0]
        if flag.startswith("--"):   # llama.cpp reads --api_key as --api-key
            flag = flag.replace("_", "-")
        if flag in SECRET_FLAGS:
            if "=" in a:
                out.append(f"{flag}=***")
            else:
                out.append(a)
                hide_next = True
            continue
        out.append(a)
    return out


class Server:
    """A running llama-server (use as a context manager). argv: the flags after the program
    (model, speculative flags, threads, context); host, port, the slots (-np: one unless a
    load test asks for more; -c is shared among them) and --metrics are added here."""

    def __init__(self, bin_dir: Path, argv: Sequence[str], port: int | None = None,
                 start_timeout_s: float = START_TIMEOUT_S, slots: int = 1):
        from cpuspec.llama.native import program
        self.program = program(bin_dir, SERVER)
        if not self.program.is_file():
            raise NativeError(f"{self.program} does not exist: build llama.cpp's server "
                              "(`cpuspec paths --build-native`) or give --llama-bin DIR")
        if port is not None and port_busy(port):
            raise NativeError(f"port {port} on {HOST} is in use: stop what listens there, or "
                              "leave the port out (cpuspec picks a free one)")
        self.port = port or free_port()
        self.argv = [str(self.program), *argv, "--host", HOST, "--port", str(self.port),
                     "-np", str(slots), "--metrics"]
        self.start_timeout_s = start_timeout_s
        self.proc = None
        self._log = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def __enter__(self) -> "Server":
        self._log = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        try:
            self.proc = interrupt.start_child(self.argv, stdout=self._log,
                                              stderr=self._log, text=True)
        except OSError as exc:
            self._log.close()
            raise NativeError(f"{self.program} cannot be run ({exc.strerror or exc}); is it a "
                              "built llama.cpp program, executable by you?") from None
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Kill the server's process group and reap it (idempotent)."""
        if self.proc is not None:
            interrupt.stop_child(self.proc)
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, n: int = 2000) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0)
        # line by line: a program's escape codes never reach the terminal, its lines stay lines
        return "\n".join(clean(line) for line in self._log.read()[-n:].splitlines())

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            interrupt.check()
            # seen without reaping it: its pid keeps naming its process group, so stopping it
            # kills whatever it started there too (a reaped leader's group would be skipped)
            if interrupt.exited(self.proc):
                rc = interrupt.stop_child(self.proc)
                raise NativeError(f"{SERVER} exited {rc} before it was up:\n"
                                  f"{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200 and self._listens():
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError,
                    http.client.HTTPException):
                pass   # not listening yet, 503 while it loads, or another program's port
            if time.monotonic() > deadline:
                raise NativeError(f"{SERVER} was not up after {self.start_timeout_s:g} s; its "
                                  f"log ends:\n{self.log_tail()}")
            time.sleep(0.2)

    def _listens(self) -> bool:
        """Whether the port is our server's (or a process it started): a port picked free can
        be taken by another program before the server binds it, and that program's /health
        must not pass for ours. Where the system does not say, /health is trusted."""
        import psutil
        try:
            me = psutil.Process(self.proc.pid)
            for p in (me, *me.children(recursive=True)):
                conns = p.net_connections("tcp") if hasattr(p, "net_connections") else \
                    p.connections("tcp")
                if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == self.port
                       for c in conns):
                    return True
        except psutil.NoSuchProcess:   # exited (a zombie too): the loop says why
            return False
        except psutil.AccessDenied:
            return True
        return False

    def _post(self, route: str, body: dict) -> dict:
        req = urllib.request.Request(self.url + route, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=call_timeout_s()) as r:
                raw = r.read()
        except urllib.error.HTTPError as exc:
            raise NativeError(f"{SERVER} answered {exc.code} to {route}: "
                              f"{exc.read()[:500].decode(errors='replace')}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError,
                http.client.HTTPException, ValueError) as exc:
            raise NativeError(f"{SERVER} did not answer {route} ({exc}); its log ends:\n"
                              f"{self.log_tail()}") from None
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise NativeError(f"{SERVER} answered {route} with no JSON: "
                              f"{clean(raw[:200].decode(errors='replace'))!r}") from None

    def complete(self, prompt: str, n_predict: int, ignore_eos: bool = False,
                 seed: int = 1) -> ServerRun:
        """One greedy completion of the chat-formatted prompt, the prompt cache off;
        ignore_eos: generate all n_predict tokens (a shape-true model may say its end early);
        seed: the request's (greedy output ignores it; llama-server's synthetic acceptance
        draws from it)."""
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "top_k": 1,
                "seed": seed, "cache_prompt": False, "stream": False, "ignore_eos": ignore_eos}
        t0 = time.perf_counter()
        res = self._post("/completion", body)
        e2e = time.perf_counter() - t0
        return self._run(res, e2e, "/completion", lambda r: (r.get("content", ""),
                                                             r.get("stop_type", "")))

    def chat(self, messages: list[dict], n_predict: int, seed: int = 1) -> ServerRun:
        """One request as an OpenAI-style client sends it: /v1/chat/completions with the
        messages, the server's own chat template (and its default system prompt, if the
        template has one), its default sampler chain at temperature 0 (greedy: the chain
        still runs), the prompt cache off."""
        body = {"messages": messages, "max_tokens": n_predict, "temperature": 0.0,
                "seed": seed, "cache_prompt": False, "stream": False}
        t0 = time.perf_counter()
        res = self._post("/v1/chat/completions", body)
        e2e = time.perf_counter() - t0

        def text_stop(r: dict) -> tuple:
            """The whole text (a thinking template's reasoning first) and the stop as
            /completion names it (eos, limit)."""
            choice = (r.get("choices") or [{}])[0]
            if not isinstance(choice, dict):
                return "", ""
            m = choice.get("message") or {}
            text = (str(m.get("reasoning_content") or "") + str(m.get("content") or "")
                    if isinstance(m, dict) else "")
            reason = choice.get("finish_reason") or ""
            return text, {"stop": "eos", "length": "limit"}.get(reason, reason)
        return self._run(res, e2e, "/v1/chat/completions", text_stop)

    @staticmethod
    def _run(res, e2e: float, route: str, text_stop) -> ServerRun:
        """A ServerRun from an answer with llama-server's `timings`."""
        t = res.get("timings") if isinstance(res, dict) else None
        if not isinstance(t, dict) or "predicted_n" not in t or "prompt_ms" not in t:
            raise NativeError(f"{SERVER}'s {route} answer is not a completion with "
                              f"timings: {clean(json.dumps(res)[:300])}")
        try:
            text, stop = text_stop(res)
            return ServerRun(e2e, str(text), int(t["predicted_n"]),
                             int(t.get("prompt_n", 0)), float(t["prompt_ms"]),
                             float(t.get("predicted_ms", 0.0)), int(t.get("draft_n", 0)),
                             int(t.get("draft_n_accepted", 0)), str(stop))
        except (TypeError, ValueError, AttributeError) as exc:
            raise NativeError(f"{SERVER}'s {route} timings are not numbers ({exc}): "
                              f"{clean(json.dumps(t)[:300])}") from None

    def metrics(self) -> dict[str, float]:
        """The server's Prometheus counters (llamacpp:NAME value), by NAME."""
        try:
            with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
                text = r.read().decode()
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError,
                http.client.HTTPException, ValueError) as exc:
            raise NativeError(f"{SERVER} did not answer /metrics ({exc})") from None
        return parse_metrics(text)


def parse_metrics(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:"):
            name, _, value = line.partition(" ")
            try:
                out[name.removeprefix("llamacpp:")] = float(value)
            except ValueError:
                continue
    return out
