"""Why the draft is not free on a CPU: bandwidth, rooflines and contention, measured.

1. STREAM-style bandwidth on the chosen cores, single- and multi-threaded.
2. Per model, weight bytes read per token and the roofline bound (bandwidth ÷ bytes per token);
   each phase's tok/s as a fraction of it ("bandwidth achieved").
3. A contention curve: target and draft decode tok/s alone, then with 1..n background streams
   on the other chosen cores.
4. psutil sampling during each phase (raw decode, draft decode, (k+1)-token verify).
5. c measured (draft time per token ÷ target time per token) beside c from bytes alone (draft
   bytes ÷ target bytes): the gap is what the draft costs beyond its share of the bus.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cpuspec.machine.hardware import CorePinner
from cpuspec.harness.measure import time_decode_tok_s, verify_tok_s
from cpuspec.machine.membw import BackgroundStreams, Sampler, probe_bandwidth
from cpuspec.results.schema import SCHEMA_VERSION


@dataclass
class ContentionConfig:
    target_path: Path
    draft_path: Path
    cpus: list[int]            # llama.cpp runs on the first `threads` of these
    threads: int
    k: int = 4
    n_tokens: int = 32
    max_streams: int | None = None
    # False where the OS lets no program choose cores (macOS): llama.cpp and the background
    # streams run where the OS puts them, and the results say so
    pinned: bool = True


def _bandwidths(cfg: ContentionConfig, llama_cpus: list[int], out: dict,
                log: Callable[[str], None]) -> tuple[float, float]:
    """STREAM copy on one CPU, on all, and on llama.cpp's (bytes/s of the last two), then
    llama.cpp pinned to its CPUs where the OS allows."""
    log(f"bandwidth probe on CPUs {cfg.cpus[:1]} and {cfg.cpus}")
    out["bandwidth"] = {"single": probe_bandwidth(cfg.cpus[:1]).to_dict(),
                        "multi": probe_bandwidth(cfg.cpus).to_dict()}
    bw_llama = probe_bandwidth(llama_cpus).gbps["copy"] * 1e9
    out["bandwidth"]["llama_cpus_copy_gbps"] = bw_llama / 1e9
    if cfg.pinned:
        CorePinner().pin(llama_cpus)
    else:
        log("unpinned: this OS lets no program choose cores; llama.cpp's threads and the "
            "background streams run where it puts them")
    return out["bandwidth"]["multi"]["gbps"]["copy"] * 1e9, bw_llama


def run_contention(cfg: ContentionConfig, log: Callable[[str], None] = lambda _: None) -> dict:
    """The memory side of SD on this machine: the copy bandwidths, each phase's (raw decode,
    draft decode, verify) speed against the roofline, c and β from them, and how the target's
    and the draft's decode slow as background copy streams are added."""
    from cpuspec.llama.engine import Model, Session
    llama_cpus = cfg.cpus[:cfg.threads]
    stream_cpus = [c for c in cfg.cpus if c not in llama_cpus]
    if cfg.max_streams is not None:
        stream_cpus = stream_cpus[:cfg.max_streams]
    out: dict = {"schema_version": SCHEMA_VERSION, "kind": "contention",
                 "measured_at": "decodes from KV position 1 (llama-bench's tg), verifies of "
                                f"k + 1 = {cfg.k + 1} tokens with all rows at position 1",
                 "llama_cpus": llama_cpus, "stream_cpus": stream_cpus, "threads": cfg.threads,
                 "k": cfg.k, "n_tokens": cfg.n_tokens, "pinned": cfg.pinned}
    bw_multi, bw_llama = _bandwidths(cfg, llama_cpus, out, log)
    with Model(cfg.target_path) as tm, Model(cfg.draft_path) as dm, \
            Session(tm, 256, cfg.threads) as target, Session(dm, 256, cfg.threads) as draft:
        models = {"target": (tm, target), "draft": (dm, draft)}
        out["models"] = {name: {"file": m.path.name, "weight_bytes": m.size_bytes,
                                "roofline_tok_s": bw_llama / m.size_bytes}
                         for name, (m, _) in models.items()}
        time_decode_tok_s(target, 4)  # warm-up: page in the weights
        time_decode_tok_s(draft, 4)
        phases = out["phases"] = _phases(cfg, target, draft, out["models"], bw_llama, log)
        tb, db = (out["models"][m]["weight_bytes"] for m in ("target", "draft"))
        out["c_measured"] = phases["raw"]["tok_s"] / phases["draft"]["tok_s"]
        out["c_bytes"] = db / tb
        out["beta_measured"] = (cfg.k + 1) / phases["verify"]["tok_s"] * \
            phases["raw"]["tok_s"] - 1
        out["curve"] = _curve(target, draft, stream_cpus, cfg.n_tokens, log)
    out["multi_thread_copy_gbps"] = bw_multi / 1e9
    return out


def _phases(cfg: ContentionConfig, target, draft, models: dict, bw_llama: float,
            log: Callable[[str], None]) -> dict:
    """Each phase alone (raw decode, draft decode, verify of k + 1): its speed, the bandwidth
    it draws and that against the roofline, and psutil's view while it ran."""
    phases = {}
    for phase, fn in (("raw", lambda: time_decode_tok_s(target, cfg.n_tokens)),
                      ("draft", lambda: time_decode_tok_s(draft, cfg.n_tokens)),
                      ("verify", lambda: verify_tok_s(target, cfg.k + 1,
                                                    max(1, cfg.n_tokens // 2)))):
        log(f"phase {phase}")
        with Sampler() as s:
            tok_s = fn()
        weight = models["draft" if phase == "draft" else "target"]["weight_bytes"]
        # A verify reads the weights once per batch of k+1 tokens.
        reads_per_s = tok_s / (cfg.k + 1) if phase == "verify" else tok_s
        phases[phase] = {"tok_s": tok_s, "bandwidth_gbps": reads_per_s * weight / 1e9,
                         "roofline_fraction": reads_per_s * weight / bw_llama,
                         "psutil": s.summary()}
    return phases


def _curve(target, draft, stream_cpus: list[int], n_tokens: int,
           log: Callable[[str], None]) -> list[dict]:
    """The target's and the draft's decode speed with 0, 1, … background copy streams on
    the other cores, each against its speed alone."""
    curve = []
    for n in range(len(stream_cpus) + 1):
        log(f"contention: {n} background stream(s)")
        with BackgroundStreams(stream_cpus[:n]):
            curve.append({"streams": n,
                          "target_tok_s": time_decode_tok_s(target, n_tokens),
                          "draft_tok_s": time_decode_tok_s(draft, n_tokens)})
    for row in curve:
        row["target_vs_alone"] = row["target_tok_s"] / curve[0]["target_tok_s"]
        row["draft_vs_alone"] = row["draft_tok_s"] / curve[0]["draft_tok_s"]
    return curve
