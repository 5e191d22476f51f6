"""Bench orchestration: fetch and load the pair, run raw and speculative decoding on the same
prompts, audit losslessness, and return one results dict (raw samples + environment).

No printing: progress goes through the `log` callback (the CLI sends it to stderr).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import __version__
from .hardware import detect_hardware
from .models import FetchedModel, fetch_model, load_registry, local_model
from .report import SCHEMA_VERSION, summarize
from .lookup import NGRAM_MAX, NGRAM_MIN, LookupDrafter
from .policy import AdaptivePolicy
from .sampling import RejectionVerify, SamplingDecoder
from .speculative import Generation, generate_raw, generate_speculative, verify_greedy
from .tasks import Prompt

Log = Callable[[str], None]
# Tokens of slack in the context beyond prompt + max_tokens + k (the verify batch overshoots).
CTX_SLACK_TOKENS = 16
WARMUP_MAX_TOKENS = 16
# Timed repetitions of each cost-probe decode (median taken).
PROBE_REPS = 5
# Tokens in the probe of the draft's catch-up batch (the adaptive policy's probe cost).
CATCHUP_PROBE_TOKENS = 32


@dataclass
class BenchConfig:
    prompts: list[Prompt]
    threads: int
    k: int = 4
    max_tokens: int = 128
    repetitions: int = 1
    warmup: int = 1
    pair: str | None = None
    target_path: Path | None = None
    draft_path: Path | None = None
    policies: list[str] = field(default_factory=lambda: ["static", "adaptive"])
    drafter: str = "model"  # or "lookup": prompt lookup, no draft model
    n_gpu_layers: int = 0
    draft_gpu_layers: int = 0
    cpus: list[int] | None = None          # pin the process here before any context exists
    draft_cpus: list[int] | None = None    # move to these CPUs for each draft phase
    draft_threads: int | None = None
    temperature: float = 0.0   # 0: greedy; > 0: sampling with speculative-sampling verification
    seed: int = 0
    argv: list[str] = field(default_factory=list)


def resolve_models(cfg: BenchConfig, log: Log
                   ) -> tuple[FetchedModel, FetchedModel | None, str]:
    registry = load_registry()
    pair = registry.pair(cfg.pair)
    target = local_model(cfg.target_path) if cfg.target_path else \
        fetch_model(registry.model(pair.target), log)
    if cfg.drafter == "lookup":
        return target, None, pair.name
    draft = local_model(cfg.draft_path) if cfg.draft_path else \
        fetch_model(registry.model(pair.draft), log)
    return target, draft, pair.name


def _run_record(p: Prompt, rep: int, mode: str, g: Generation, text: str) -> dict:
    return {"task": p.task, "prompt_id": p.prompt_id, "repetition": rep, "mode": mode,
            "prompt_tokens": g.prompt_tokens, "tokens": g.tokens, "text": text,
            "prefill_s": g.prefill_s, "decode_s": g.decode_s,
            "token_latencies_s": g.token_latencies_s,
            "rounds": [r.as_row() for r in g.rounds], "stop": g.stop}


class PinnedDecoder:
    """Moves the process onto `cpus` before each eval: how the draft gets its own cores."""

    def __init__(self, decoder, pinner, cpus: list[int]):
        self.decoder, self.pinner, self.cpus = decoder, pinner, cpus

    def eval(self, tokens, pos, n_out):
        self.pinner.pin(self.cpus)
        return self.decoder.eval(tokens, pos, n_out)

    def decode(self, tokens, pos, n_out):
        self.pinner.pin(self.cpus)
        self.decoder.decode(tokens, pos, n_out)

    def logits(self, n_out):
        return self.decoder.logits(n_out)

    def truncate(self, pos):
        self.decoder.truncate(pos)

    def is_eog(self, token):
        return self.decoder.is_eog(token)


def probe_costs(target, draft, prompt: list[int], k_max: int, reps: int = PROBE_REPS) -> dict:
    """Median time of a target decode of n = 1..k_max+1 tokens and of one draft decode, at the
    position a generation starts from (after the prompt). The cost model needs the verify cost at
    every batch size: on a CPU it grows with the batch instead of staying flat."""
    import statistics
    import time
    pos = len(prompt)
    samples: dict[int, list[float]] = {n: [] for n in range(1, k_max + 2)}
    draft_samples: list[float] = []
    for d in (target, draft):  # prefill both, then decode on top and roll back
        d.truncate(0)
        d.eval(prompt, 0, 1)
    batch = (prompt * (k_max + 2))[:k_max + 1]
    catchup = (prompt * (CATCHUP_PROBE_TOKENS // max(len(prompt), 1) + 1))[:CATCHUP_PROBE_TOKENS]
    catchup_samples: list[float] = []
    for _ in range(reps):
        for n in samples:
            t0 = time.perf_counter()
            target.eval(batch[:n], pos, n)
            samples[n].append(time.perf_counter() - t0)
            target.truncate(pos)
        t0 = time.perf_counter()
        draft.eval(batch[:1], pos, 1)
        draft_samples.append(time.perf_counter() - t0)
        draft.truncate(pos)
        t0 = time.perf_counter()  # the draft catching up after plain steps: one batch
        draft.eval(catchup, pos, 1)
        catchup_samples.append((time.perf_counter() - t0) / len(catchup))
        draft.truncate(pos)
    return {"position": pos, "reps": reps,
            "verify_samples_s": {str(n): v for n, v in samples.items()},
            "draft_samples_s": draft_samples,
            "verify_s": {str(n): statistics.median(v) for n, v in samples.items()},
            "draft_s": statistics.median(draft_samples),
            "draft_catchup_samples_s_per_token": catchup_samples,
            "draft_catchup_s_per_token": statistics.median(catchup_samples)}


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def audit_pair(target, prompt_tokens: list[int], raw: list[int], sd: list[int]) -> dict:
    """Compare SD output with target-only output; at a divergence, replay plain decoding to get
    the target's top-2 logit margin there (a near-tie is where batched numerics can flip)."""
    from .engine import top2_margin
    pos = first_divergence(raw, sd)
    out = {"identical": pos is None, "first_divergence": pos, "n_compared": min(len(raw), len(sd))}
    if pos is not None and pos < min(len(raw), len(sd)):
        top1, top2, margin = top2_margin(target, prompt_tokens, raw[:pos])
        out.update(raw_token=raw[pos], sd_token=sd[pos], raw_top1=top1, raw_top2=top2,
                   raw_top2_margin=margin, sd_choice_is_raw_runner_up=sd[pos] == top2)
    return out


def environment(threads: int) -> dict:
    import llama_cpp
    from .engine import system_info
    return {"cpuspec_version": __version__, "llama_cpp_python_version": llama_cpp.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "llama_system_info": system_info(), "hardware": detect_hardware().to_dict(),
            "threads": threads,
            "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


@dataclass
class LoadedPair:
    """Fetched files and loaded models, shared by every point of a sweep that has the same
    offload settings."""
    target_f: FetchedModel
    draft_f: FetchedModel | None
    pair_name: str
    target_m: object
    draft_m: object | None


@contextlib.contextmanager
def load_pair(cfg: BenchConfig, log: Log, fetched=None):
    from .engine import Model, check_same_tokenizer
    target_f, draft_f, pair_name = fetched or resolve_models(cfg, log)
    log(f"loading target {target_f.path.name}"
        + (f" and draft {draft_f.path.name}" if draft_f else " (prompt-lookup drafter)")
        + (f" (GPU layers: target {cfg.n_gpu_layers}, draft {cfg.draft_gpu_layers})"
           if cfg.n_gpu_layers or cfg.draft_gpu_layers else ""))
    with contextlib.ExitStack() as stack:
        target_m = stack.enter_context(Model(target_f.path, cfg.n_gpu_layers))
        draft_m = stack.enter_context(Model(draft_f.path, cfg.draft_gpu_layers)) \
            if draft_f else None
        if draft_m:
            check_same_tokenizer(target_m, draft_m)
        yield LoadedPair(target_f, draft_f, pair_name, target_m, draft_m)


def run_bench(cfg: BenchConfig, log: Log = lambda _: None,
              loaded: LoadedPair | None = None) -> dict:
    """One bench point; loads the pair unless a sweep passes it in already loaded."""
    if loaded is None:
        from .hardware import CorePinner
        if cfg.cpus:  # before any llama.cpp thread exists: its workers inherit it
            CorePinner().pin(cfg.cpus)
        with load_pair(cfg, log) as pair:
            return run_bench(cfg, log, pair)
    from .engine import Session
    from .hardware import CorePinner
    pinner = CorePinner()
    if cfg.cpus:
        pinner.pin(cfg.cpus)
    target_f, draft_f, target_m, draft_m = (loaded.target_f, loaded.draft_f, loaded.target_m,
                                            loaded.draft_m)
    results = {"schema_version": SCHEMA_VERSION, "meta": environment(cfg.threads),
               "settings": {"pair": loaded.pair_name, "k": cfg.k, "max_tokens": cfg.max_tokens,
                            "repetitions": cfg.repetitions, "warmup": cfg.warmup,
                            "threads": cfg.threads, "tasks": list(dict.fromkeys(
                                p.task for p in cfg.prompts)),
                            "n_prompts": len(cfg.prompts), "argv": cfg.argv,
                            "policies": cfg.policies, "drafter": cfg.drafter,
                            "cpus": cfg.cpus, "draft_cpus": cfg.draft_cpus,
                            "draft_threads": cfg.draft_threads or cfg.threads,
                            "n_gpu_layers": cfg.n_gpu_layers,
                            "draft_gpu_layers": cfg.draft_gpu_layers,
                            "verification": "greedy" if cfg.temperature <= 0 else
                            "speculative sampling (min(1, p/q), residual max(0, p - q))",
                            "temperature": cfg.temperature, "seed": cfg.seed},
               "models": {"target": target_f.to_dict(),
                          "draft": draft_f.to_dict() if draft_f else
                          {"drafter": "lookup", "ngram_max": NGRAM_MAX, "ngram_min": NGRAM_MIN}},
               "prompts": [asdict(p) for p in cfg.prompts], "runs": [], "audit": []}
    for role, m in (("target", target_m), ("draft", draft_m)):
        if m:
            results["models"][role].update(desc=m.desc, n_params=m.n_params,
                                           weight_bytes=m.size_bytes, n_vocab=m.n_vocab)
    with contextlib.ExitStack() as stack:
        encoded = [target_m.tokenize(target_m.format_chat(p.text)) for p in cfg.prompts]
        n_ctx = max(map(len, encoded)) + cfg.max_tokens + cfg.k + CTX_SLACK_TOKENS
        target_session = stack.enter_context(Session(target_m, n_ctx, cfg.threads))
        target = target_session
        draft = stack.enter_context(Session(draft_m, n_ctx, cfg.draft_threads or cfg.threads)) \
            if draft_m else LookupDrafter(target_m.is_eog)
        if cfg.draft_cpus:
            target_cpus = cfg.cpus or sorted(os.sched_getaffinity(0))
            target = PinnedDecoder(target, pinner, target_cpus)
            draft = PinnedDecoder(draft, pinner, cfg.draft_cpus)
        log("cost probe: target decode of 1.." f"{cfg.k + 1} tokens, draft decode")
        probe = probe_costs(target, draft, encoded[0], cfg.k)
        results["cost_probe"] = probe

        policies: dict[str, AdaptivePolicy] = {}

        def adaptive_policy(task: str) -> AdaptivePolicy:
            """One controller per task type, carried across that task's prompts: what it
            learned (acceptance, costs, on/off) from one prompt serves the next, as a server's
            would, instead of re-learning from the prior every generation."""
            if task not in policies:
                policies[task] = AdaptivePolicy(
                    cfg.k, probe["draft_s"], {int(n): v for n, v in probe["verify_s"].items()},
                    catchup_s=probe["draft_catchup_s_per_token"])
            policies[task].new_generation()
            return policies[task]

        def generate(mode, tokens, max_tokens, seed_key=(0,), task=""):
            t, d, verify = target, draft, verify_greedy
            if cfg.temperature > 0:  # seeded per generation: reruns draw the same tokens
                rng = np.random.default_rng([cfg.seed, *seed_key, modes.index(mode)])
                t = SamplingDecoder(target, cfg.temperature, rng)
                d = draft if isinstance(draft, LookupDrafter) else \
                    SamplingDecoder(draft, cfg.temperature, rng)
                verify = RejectionVerify(rng)
            if mode == "raw":
                return generate_raw(t, tokens, max_tokens)
            policy = cfg.k if mode == "static" else adaptive_policy(task)
            return generate_speculative(t, d, tokens, max_tokens, policy, verify=verify)

        modes = ["raw", *cfg.policies]
        for i in range(cfg.warmup):  # not recorded: page in weights, warm caches
            log(f"warm-up {i + 1}/{cfg.warmup}")
            for mode in modes:
                generate(mode, encoded[0], WARMUP_MAX_TOKENS, task="(warm-up)")
        total = cfg.repetitions * len(cfg.prompts)
        done = 0
        for rep in range(cfg.repetitions):
            for p, tokens in zip(cfg.prompts, encoded):
                # Rotate which mode goes first, so a drifting machine biases none of them.
                order = modes[done % len(modes):] + modes[:done % len(modes)]
                done += 1
                gens = {mode: generate(mode, tokens, cfg.max_tokens, (rep, done), p.task)
                        for mode in order}
                for mode in modes:
                    g = gens[mode]
                    results["runs"].append(_run_record(
                        p, rep, mode, g, target_m.detokenize(g.tokens)))
                same = []
                for mode in cfg.policies if cfg.temperature <= 0 else []:
                    audit = audit_pair(target_session, tokens, gens["raw"].tokens,
                                       gens[mode].tokens)
                    results["audit"].append({"task": p.task, "prompt_id": p.prompt_id,
                                             "repetition": rep, "mode": mode, **audit})
                    same.append(audit["identical"])
                speeds = ", ".join(f"{m} {gens[m].decode_tokens / gens[m].decode_s:.1f}"
                                   for m in modes)
                log(f"[{done}/{total}] {p.prompt_id}: t/s {speeds}; "
                    f"{'same output' if all(same) else 'output differs'}")
    results["summary"] = summarize(results)
    return results


