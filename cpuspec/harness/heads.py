"""The methods vendors claim, priced on this CPU (issue 58): EAGLE-3, DFlash and DSpark heads
and a classic draft model, each run by llama-server (--spec-type draft-eagle3 | draft-dflash |
draft-dspark | draft-simple) beside a plain llama-server of the same build and target.

The target and the heads are shape-true (real shapes and types, random weights: real costs, no
real acceptance), so acceptance is llama-server's synthetic acceptance: --spec-synth-len L makes
a round keep L tokens on average (the target's own included) whatever the drafts say. What is
measured is therefore what a method costs on this CPU at an acceptance length given to it: the
plain and the SD server on the same prompts, one after the other per prompt (the order
alternating), each SD server at one L; every request generates max_tokens tokens (ignore_eos).

No printing: progress goes to `log`, the document to `on_update` after every prompt. Every
server is stopped (llama/server.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

CTX_SLACK = 64


@dataclass(frozen=True)
class Drafter:
    """One SD configuration: a method and its file (a head, a draft model)."""
    method: str                  # eagle3 | dflash | dspark | mtp | mtp-file | draft
    path: Path
    label: str                   # what the screen calls it


@dataclass(frozen=True)
class HeadsConfig:
    target: Path                 # a shape-true target (or a real one)
    drafters: tuple[Drafter, ...]
    lengths: tuple[float, ...]   # the synthetic acceptance lengths L (tokens a round keeps)
    k: int                       # the drafts a round makes (--spec-draft-n-max)
    texts: dict[str, str]        # prompt id → its chat-formatted text
    max_tokens: int
    threads: int
    bin_dir: Path
    n_ctx: int


def sd_flags(d: Drafter, k: int, length: float, threads: int) -> list[str]:
    """The SD server's flags beyond the target's: the method, its file, k, the synthetic
    acceptance length, the drafter's threads."""
    from cpuspec.inputs.heads import SPEC_TYPE
    model = [] if d.method == "mtp" else ["-md", str(d.path), "-td", str(threads)]  # mtp: in -m
    return ["--spec-type", SPEC_TYPE[d.method], *model,
            "--spec-draft-n-max", str(k), "--spec-draft-n-min", "0",
            "--spec-draft-p-min", "0", "--spec-synth-len", f"{length:g}"]


def measure_heads(cfg: HeadsConfig, environment: dict, settings: dict,
                  log: Callable[[str], None],
                  on_update: Callable[[dict], None] | None = None) -> dict:
    """Every drafter at every L: per prompt a plain and an SD request, paired."""
    from cpuspec.llama.server import Server
    plain_argv = ["-m", str(cfg.target), "-t", str(cfg.threads), "-c", str(cfg.n_ctx)]
    from cpuspec.results.schema import SCHEMA_VERSION
    doc = {"schema_version": SCHEMA_VERSION, "kind": "heads", "complete": False, "meta": environment, "settings": settings,
           "runs": []}
    ids = list(cfg.texts)
    with Server(cfg.bin_dir, plain_argv) as plain:
        plain.complete(cfg.texts[ids[0]], 8, ignore_eos=True)      # warm-up, not kept
        for d in cfg.drafters:
            for length in cfg.lengths:
                log(f"heads: {d.label}, L = {length:g}: starting its server")
                with Server(cfg.bin_dir, [*plain_argv, *sd_flags(d, cfg.k, length,
                                                                  cfg.threads)]) as sd:
                    sd.complete(cfg.texts[ids[0]], 8, ignore_eos=True)   # warm-up
                    for i, pid in enumerate(ids):
                        log(f"heads: {d.label}, L = {length:g}, prompt {i + 1}/{len(ids)}")
                        order = (("raw", plain), ("sd", sd)) if i % 2 == 0 else \
                            (("sd", sd), ("raw", plain))
                        for mode, server in order:
                            doc["runs"].append({"method": d.method, "label": d.label,
                                                "synth_len": length, "prompt_id": pid,
                                                "mode": mode, **_request(server, mode == "sd",
                                                                         cfg, pid, i)})
                        if on_update:
                            on_update(doc)
    doc["complete"] = True
    return doc


VERIFY_STEPS = "spec_decode_num_drafts_total"   # llama-server's /metrics: verify rounds


def _request(server, sd: bool, cfg: HeadsConfig, pid: str, i: int) -> dict:
    """One request and what it did. Its seed is the prompt's (1 + its index), the same for
    every drafter: llama-server draws synthetic acceptance from it, so prompts differ in their
    draws and drafters share them. For SD the verify rounds come from /metrics around it (the
    server drafts less near n_predict and decodes the last tokens plainly)."""
    before = server.metrics().get(VERIFY_STEPS) if sd else None
    r = server.complete(cfg.texts[pid], cfg.max_tokens, ignore_eos=True, seed=1 + i)
    after = server.metrics().get(VERIFY_STEPS) if sd else None
    out = {"e2e_s": r.e2e_s, "prefill_s": r.prompt_ms / 1e3, "decode_s": r.predicted_ms / 1e3,
           "n_tokens": r.tokens, "prompt_tokens": r.prompt_tokens, "drafted": r.drafted,
           "accepted": r.accepted, "seed": 1 + i}
    if before is not None and after is not None:
        out["verify_steps"] = int(after - before)
    return out


PROBE_REPS = 5


def probe_verify(target: Path, text: str, k: int, threads: int) -> dict[str, float]:
    """The target's own V(n) for n = 1..k + 1 after the first prompt (cpuspec's probe, in
    llama-cpp-python: the same ggml sources and flags as the server's build), medians of
    PROBE_REPS: β = V(d + 1) / V(1) − 1 at the d drafts a round made (llama-server drafts
    fewer than k near n_predict), the verify's share of a round; α is the rest."""
    import statistics

    from cpuspec.harness.measure import filler_tokens, time_decodes, time_prefill
    from cpuspec.llama.engine import Model, Session
    with Model(target) as m:
        prompt = m.tokenize(text)
        with Session(m, len(prompt) + k + CTX_SLACK, threads) as s:
            time_prefill(s, prompt)
            batch = filler_tokens(prompt, k + 1)
            time_decodes(s, batch[:1], len(prompt), 1)        # warm-up, not kept
            return {str(n): statistics.median(time_decodes(s, batch[:n], len(prompt),
                                                           PROBE_REPS))
                    for n in range(1, k + 2)}


def chat_texts(target: Path, prompts) -> tuple[dict[str, str], int]:
    """Each prompt in the target's chat template, and the longest one's tokens."""
    from cpuspec.llama.engine import Model
    with Model(target) as m:
        texts = {p.prompt_id: m.format_chat(p.text) for p in prompts}
        longest = max(len(m.tokenize(t)) for t in texts.values())
    return texts, longest


def context_for(longest: int, max_tokens: int, k: int) -> int:
    return longest + max_tokens + k + CTX_SLACK

