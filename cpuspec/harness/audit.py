"""What bench checks of each SD output beside its speed (issue 78): the output against plain
decoding's, the exact audit of SD's own verifies where they differ (or of every output with
--exact-audit), each divergence classified from the target's own logits (core/audit.py), and
the target's batched-vs-one-token logit drift over plain decoding's outputs (harness/drift.py)."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from cpuspec.core.audit import classify_divergence, locate, replay_exact
from cpuspec.core.speculative import Generation

if TYPE_CHECKING:
    from cpuspec.inputs.tasks import Prompt


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def audit_pair(target, prompt_tokens: list[int], raw: Generation, sd: Generation,
               keep: int = 0, exact: bool = False) -> dict:
    """SD's output against raw decoding's (core/audit.py): identical or not; the exact audit
    (SD's own verifies replayed) where they differ, or on every output with `exact`; and at a
    divergence, both tokens' logits on both paths, classified numeric or defect."""
    pos = first_divergence(raw.tokens, sd.tokens)
    out = {"identical": pos is None, "first_divergence": pos,
           "n_compared": min(len(raw.tokens), len(sd.tokens))}
    diverged = pos is not None and 0 < pos < out["n_compared"]
    emitted = [r.n_emitted for r in sd.rounds]
    cap: dict = {}   # the divergent round's batched row, kept by the replay on its way
    t0 = time.perf_counter()    # what the audit costs (its share of a bench: docs/method.md)
    if exact or pos is not None:
        r, row, _ = locate(sd.tokens, sd.batches, emitted, pos) if diverged else (0, 0, 0)
        out["exact"] = replay_exact(target, prompt_tokens, sd.tokens, sd.batches, keep,
                                    capture=(r, row, cap) if diverged else None).to_dict()
        out["exact"]["seconds"] = time.perf_counter() - t0
    if pos is not None and pos < out["n_compared"]:
        t1 = time.perf_counter()
        out["divergence"] = classify_divergence(
            target, prompt_tokens, raw.tokens, sd.tokens, sd.batches, emitted, pos, keep,
            batched=cap.get("row"))
        out["divergence"]["seconds"] = time.perf_counter() - t1
        if not out.get("exact", {}).get("ok", True):   # the loop's own replay failed
            out["divergence"].update(kind="defect", why="SD's own rounds do not replay "
                                     "(the exact audit)")
        d = out["divergence"]   # the fields every reader of older files knows
        out.update({k: d[k] for k in ("raw_token", "sd_token", "raw_top1", "raw_top2",
                                      "raw_top2_margin", "sd_choice_is_raw_runner_up")})
    elif pos is not None:   # one output is a prefix of the other: an end token moved
        out["divergence"] = {"kind": "defect", "why": "one output stops where the other "
                             "goes on (an end-of-generation token differs)"}
    return out


def record_drift(cfg, target, encoded: list, reuse: list, results: dict,
                 log: Callable[[str], None]) -> None:
    """results["drift"]: the target's batched-vs-one-token logits over plain decoding's own
    outputs (harness/drift.py), on the prompts read from an empty cache (not a depth or a
    follow-up: their context would be read again whole)."""
    from cpuspec.harness.drift import DRIFT_POSITIONS, measure_drift
    if not cfg.drift:
        return
    first = {}
    for r in results["runs"]:
        if r["mode"] == "raw":
            first.setdefault(r["prompt_id"], r["tokens"])
    texts = [(tokens, first[p.prompt_id]) for p, tokens, kept in
             zip(cfg.prompts, encoded, reuse) if not kept and p.prompt_id in first]
    if texts:
        log(f"logit drift: up to {DRIFT_POSITIONS} positions one token at a time and in "
            f"batches of {cfg.k + 1}")
        results["drift"] = measure_drift(target, texts, cfg.k, cfg.temperature or 1.0)


def audit_prompt(cfg, target, p: Prompt, rep: int, tokens: list[int], gens: dict,
                 kept: int, results: dict) -> list[bool]:
    """The lossless audit of each SD mode against raw decoding (greedy runs only)."""
    audited = []
    for mode in cfg.policies if cfg.temperature <= 0 else []:
        audit = audit_pair(target, tokens, gens["raw"], gens[mode], kept, cfg.exact_audit)
        results["audit"].append({"task": p.task, "prompt_id": p.prompt_id,
                                 "repetition": rep, "mode": mode, **audit})
        audited.append(audit["identical"])
    return audited
