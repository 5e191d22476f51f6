"""SD under load: llama-server with N requests in flight. Per concurrency level N, the plain
and the SD server are started with -np N (the context sized so every slot holds its prompt
and answer); N closed-loop clients on 127.0.0.1 send the same prompts (each client its own
order), a bounded number of requests each, in batches that alternate between the two servers
(plain, SD, SD, plain, ...): each batch is one unit of the interval. Every request keeps the
client's end-to-end time, the server's timings and draft counters, and the output (greedy:
SD's must equal the plain server's). Both servers are always stopped (llama/server.py). No
printing: progress goes to `log`, the document to `on_update` after every batch."""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from cpuspec.llama.native import NativeError

if TYPE_CHECKING:
    from cpuspec.harness.paths import PathsConfig

CTX_SLACK = 64
# A client stops starting requests after this long in one batch (the batch still finishes the
# requests in flight): a load test here always ends by itself.
BATCH_TIME_LIMIT_S = 600.0


@dataclass(frozen=True)
class LoadConfig:
    """A load test: the server configuration `paths` measures one request at a time, and the
    levels of requests in flight."""
    server: PathsConfig              # models, k, drafter, prompts, tokens, threads, flags
    levels: tuple[int, ...]          # the concurrencies, e.g. (1, 2, 4)
    batches: int = 5                 # per level and server: the interval's units (the limit)
    requests_per_client: int = 1     # per batch
    # the sequential design (analysis/sequential.py): a level stops once its throughput
    # verdict is decided at a look; None: every batch runs (--fixed)
    sequential: dict | None = None


def measure_load(cfg: LoadConfig, environment: dict, server_args: Callable[[int, bool], list],
                 texts: dict[str, str], per_slot_ctx: int, log: Callable[[str], None],
                 on_update: Callable[[dict], None] | None = None) -> dict:
    """Every level of cfg.levels; server_args(n_ctx, sd) gives a server's flags (the paths
    command's server_argv), texts the chat-formatted prompt of each prompt id."""
    from cpuspec.llama.server import Server, redact_argv
    sc = cfg.server
    doc = {"kind": "load", "complete": False, "meta": environment,
           "settings": {"target": str(sc.target),
                        "draft": str(sc.draft) if sc.draft else None, "k": sc.k,
                        "drafter": sc.drafter, "max_tokens": sc.max_tokens,
                        "threads": sc.threads, "levels": list(cfg.levels),
                        "batches": cfg.batches, "requests_per_client": cfg.requests_per_client,
                        "prompts": [p.prompt_id for p in sc.prompts],
                        "server_flags": redact_argv(sc.server_flags) if sc.server_flags
                        else None,
                        "p_min": sc.p_min, "per_slot_ctx": per_slot_ctx,
                        "sequential": cfg.sequential},
           "levels": []}
    ids = [p.prompt_id for p in sc.prompts]
    for n in cfg.levels:
        level = {"concurrency": n, "batches": []}
        doc["levels"].append(level)
        with contextlib.ExitStack() as stack:
            servers = {mode: stack.enter_context(
                Server(sc.bin_dir, server_args(n * per_slot_ctx, mode == "sd"), slots=n))
                for mode in ("raw", "sd")}
            # what each server ran (its -np N among them), secrets' values never kept
            level["server_argv"] = {mode: [server.program.name, *redact_argv(server.argv[1:])]
                                    for mode, server in servers.items()}
            for server in servers.values():   # warm-up, not kept
                server.complete(texts[ids[0]], 8)
            for b in range(cfg.batches):
                for mode in (("raw", "sd") if b % 2 == 0 else ("sd", "raw")):
                    log(f"load: {n} in flight, batch {b + 1}/{cfg.batches}, {mode}")
                    level["batches"].append(
                        {"batch": b, "mode": mode,
                         **drive(servers[mode], texts, ids, n, cfg.requests_per_client, b,
                                 sc.max_tokens)})
                if on_update:
                    on_update(doc)
                if cfg.sequential and _level_decided(level, cfg, log):
                    break
    doc["complete"] = True
    return doc


def _level_decided(level: dict, cfg: LoadConfig, log: Callable[[str], None]) -> bool:
    """Whether the sequential design stops this level after its latest pair of batches."""
    from cpuspec.analysis.load import level_look
    res = level_look(level, cfg.batches, cfg.sequential)
    if res["state"] == "continue":
        return False
    log(f"load: {level['concurrency']} in flight: {res['state']} after {res['units']} of "
        f"{cfg.batches} batches" + ("" if res["units"] == cfg.batches else
                                    "; its other batches are not run"))
    return True


def client_order(ids: list[str], client: int, batch: int, n_clients: int) -> list[str]:
    """Each client's own prompt order: the list rotated by its place among all clients."""
    start = (client + batch * n_clients) % len(ids)
    return ids[start:] + ids[:start]


def drive(server, texts: dict[str, str], ids: list[str], n_clients: int, per_client: int,
          batch: int, max_tokens: int) -> dict:
    """n_clients closed-loop clients, each sending per_client requests one after another:
    the batch's wall time and every request. A failed request ends the batch with an error
    that names the server and the client."""
    t0 = time.perf_counter()
    deadline = t0 + BATCH_TIME_LIMIT_S
    requests: list[dict] = []
    errors: list[str] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        order = client_order(ids, i, batch, n_clients)
        for pid in (order[j % len(order)] for j in range(per_client)):
            if time.perf_counter() > deadline or errors:
                return
            start = time.perf_counter() - t0
            try:
                r = server.complete(texts[pid], max_tokens)
            except NativeError as exc:
                with lock:
                    errors.append(f"client {i + 1}, prompt {pid}: {exc}")
                return
            with lock:
                requests.append({"client": i, "prompt_id": pid, "start_s": start,
                                 "e2e_s": r.e2e_s, "n_tokens": r.tokens, "text": r.text,
                                 "prompt_tokens": r.prompt_tokens, "prompt_ms": r.prompt_ms,
                                 "predicted_ms": r.predicted_ms, "drafted": r.drafted,
                                 "accepted": r.accepted, "stop": r.stop})
    threads = [threading.Thread(target=client, args=(i,), daemon=True)
               for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise NativeError(f"a load client failed ({len(errors)} of {n_clients}): {errors[0]}")
    return {"wall_s": time.perf_counter() - t0, "requests": requests}
