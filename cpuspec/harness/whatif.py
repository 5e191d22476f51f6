"""`cpuspec costs --sizes`: the cost probe of shape-true targets of several sizes and quants
(inputs/shapes.py) beside the user's real draft, one results file (kind "whatif"), rewritten
after each target so an interrupted run keeps what it measured. A target that the disk or the
memory cannot hold is kept as a skipped row with the reason."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from cpuspec.machine import osapi
from cpuspec.harness.bench import BenchConfig, Log
from cpuspec.harness.measure import probe_costs
from cpuspec.harness.probe import run_costs
from cpuspec.inputs.shapes import SHAPE_TRUE, ShapeError, only_quant, shape_of


def run_whatif(cfg: BenchConfig, sizes: list[str], quants: list[str], reps: int,
               tokenizer: Callable[[str], Path], memory_bytes: int,
               on_row: Callable[[dict], None], log: Log = lambda _: None,
               drafts: dict[str, str | Path] | None = None) -> dict:
    """Every (size, quant): write or reuse the shape-true file (with the tokenizer file
    `tokenizer(arch)` gives for its architecture), then probe each with cfg's draft, or with
    its own (drafts: target size → a draft file, or a shape name written at the target's
    quant: `costs --pairs`). Every file is written (and flushed to disk) before the first probe, so no probe
    shares the machine with a write. on_row(doc) after each row; returns the finished doc."""
    from cpuspec.llama.shape_true import write_shape_true
    from cpuspec.harness.bench import environment
    from cpuspec.results.schema import SCHEMA_VERSION
    doc: dict = {"schema_version": SCHEMA_VERSION, "kind": "whatif", "complete": False,
                 "meta": environment(cfg.threads), "rows": [],
                 "settings": {"sizes": sizes, "quants": quants, "k_max": cfg.k,
                              "threads": cfg.threads, "reps": reps, "label": SHAPE_TRUE}}
    files, draft_files = {}, {}

    def written(name: str, quant: str) -> Path:
        shape = shape_of(name)
        return write_shape_true(shape, quant, tokenizer(shape.arch), memory_bytes, log)
    for size in sizes:   # gpt-oss in its one published form, whatever --quants says
        only = only_quant(shape_of(size))
        for quant in ([only] if only else quants):
            try:
                files[size, quant] = written(size, quant)
                d = (drafts or {}).get(size)
                if d is not None:
                    draft_files[size, quant] = d if isinstance(d, Path) else written(d, quant)
            except ShapeError as exc:
                log(f"what-if: {size} {quant} skipped: {exc}")
                files[size, quant] = exc
    osapi.current().sync_disks()   # the files' pages reach the disk now, not during a probe
    for (size, quant), path in files.items():
        shape = shape_of(size)
        row = {"size": size, "shape": shape.name, "quant": quant, "params": shape.params()}
        if isinstance(path, ShapeError):
            doc["rows"].append(row | {"skipped": str(path)})
            on_row(doc)
            continue
        log(f"what-if: {size} {quant} ({SHAPE_TRUE}) with the draft")
        draft = draft_files.get((size, quant), cfg.draft_path)
        res = run_costs(dataclasses.replace(cfg, target_path=path, draft_path=draft), reps, log)
        doc.setdefault("models", {"draft": res["models"]["draft"]})
        doc["rows"].append(row | {"target": res["models"]["target"],
                                  "draft": res["models"]["draft"],
                                  "cost_probe": res["cost_probe"]})
        on_row(doc)
    doc["complete"] = True
    return doc


def run_shape_validation(models: dict[str, tuple[Path, Path]], rounds: int, k_max: int,
                         prompt_tokens: int, threads: int, on_round: Callable[[dict], None],
                         log: Log = lambda _: None, reps: int = 3) -> dict:
    """Shape-true against real, interleaved in one process: every model loaded once, then
    `rounds` rounds of one cost probe per (target, draft) pair (V(n) for n = 1..k_max + 1 and
    the draft's decode, medians of `reps`; both prefills of a `prompt_tokens`-token prompt),
    the pairs' order
    reversed every other round, so drift and order cancel and each round is one paired unit.
    models: label → (target path, draft path); on_round(doc) after each round."""
    import contextlib

    from cpuspec.harness.bench import environment
    from cpuspec.harness.measure import filler_tokens
    from cpuspec.inputs.models import local_model
    from cpuspec.inputs.tasks import builtin_prompts
    from cpuspec.llama.engine import Model, Session
    from cpuspec.results.schema import SCHEMA_VERSION
    doc: dict = {"schema_version": SCHEMA_VERSION, "kind": "shape_validation",
                 "complete": False, "meta": environment(threads),
                 "settings": {"rounds": rounds, "k_max": k_max, "prompt_tokens": prompt_tokens,
                              "reps": reps,
                              "threads": threads, "label": SHAPE_TRUE},
                 "models": {}, "probes": {label: [] for label in models}}
    osapi.current().sync_disks()   # files written just before reach the disk before any timing
    with contextlib.ExitStack() as stack:
        sessions = {}
        for label, (target, draft) in models.items():
            log(f"validation: loading {label}: {target.name} + {draft.name}")
            doc["models"][label] = {"target": local_model(target).to_dict(),
                                    "draft": local_model(draft).to_dict()}
            t, d = (stack.enter_context(Model(p)) for p in (target, draft))
            text = " ".join(p.text for p in builtin_prompts(["json", "code", "story"], 8))
            prompt = filler_tokens(t.tokenize(text), prompt_tokens)
            n_ctx = prompt_tokens + 64
            sessions[label] = (stack.enter_context(Session(t, n_ctx, threads)),
                               stack.enter_context(Session(d, n_ctx, threads)), prompt)
        for label, (ts, ds, prompt) in sessions.items():   # warm-up, not kept
            probe_costs(ts, ds, prompt[:64], 2, reps=1)
        for r in range(rounds):
            order = list(sessions) if r % 2 == 0 else list(sessions)[::-1]
            for label in order:
                ts, ds, prompt = sessions[label]
                doc["probes"][label].append(probe_costs(ts, ds, prompt, k_max, reps=reps))
            log(f"validation: round {r + 1}/{rounds}")
            on_round(doc)
    doc["complete"] = True
    return doc
