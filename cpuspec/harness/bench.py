"""Bench orchestration: fetch and load the pair, run raw and speculative decoding on the same
prompts, audit losslessness, and return one results dict (raw samples + environment).

No printing: progress goes through the `log` callback (the CLI sends it to stderr).
"""
from __future__ import annotations

import contextlib
import copy
import datetime as dt
import functools
import platform
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from cpuspec import __version__
from cpuspec.machine.hardware import (CoreOwner, CorePinner, OwnedDecoder, census_delta,
                                     current_affinity, detect_hardware, thread_census)
from cpuspec.core.lookup import HYBRID_NGRAM, HybridDrafter, LookupDrafter, NGRAM_MAX, NGRAM_MIN
from cpuspec.harness.audit import audit_prompt, record_drift
from cpuspec.harness.measure import CATCHUP_PROBE_TOKENS, CURVE_N, NoiseProbe, NoiseSample, probe_costs
from cpuspec.inputs.models import FetchedModel, fetch_model, local_model
from cpuspec.harness.order import MODE_ORDER, mode_order
from cpuspec.core.policy import AdaptivePolicy
from cpuspec.harness.quality import target_perplexity
from cpuspec.results.records import CostProbe
from cpuspec.inputs.registry import load_registry
from cpuspec.core.sampling import RejectionVerify, SamplingDecoder
from cpuspec.results.schema import SCHEMA_VERSION
from cpuspec.core.speculative import (Generation, generate_raw, generate_speculative,
                          generate_speculative_parallel, verify_greedy)
from cpuspec.inputs.tasks import Prompt
from cpuspec.harness.turns import (FIRST_TURN_TOKENS, answer_first_turn, check_trained_context, encode_prompts,
                    prepare_followup)
from cpuspec.core.window import WindowedDraft, window_reads

Log = Callable[[str], None]
# Tokens of slack in the context beyond prompt + max_tokens + k (the verify batch overshoots).
CTX_SLACK_TOKENS = 16
WARMUP_MAX_TOKENS = 16
# With --max-noise, a prompt whose generations were disturbed is measured again at most this
# many times; the disturbed runs are kept in the results under "discarded_runs".
MAX_NOISE_RERUNS = 3


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
    # where --target/--draft came from (inputs/refs/: repo, revision, file, store, ...), as
    # the reference named it; None: a path, as found (its remembered origin, if any)
    target_origin: dict | None = None
    draft_origin: dict | None = None
    draft_path: Path | None = None
    policies: list[str] = field(default_factory=lambda: ["static", "adaptive"])
    drafter: str = "model"  # "lookup": prompt lookup, no draft model; "hybrid": lookup first,
    #                         the draft model when lookup has no guess
    n_gpu_layers: int = 0
    draft_gpu_layers: int = 0
    cpus: list[int] | None = None          # pin the process here before any context exists
    draft_cpus: list[int] | None = None    # the draft's own CPUs (its own thread and team)
    draft_threads: int | None = None
    temperature: float = 0.0   # 0: greedy; > 0: sampling with speculative-sampling verification
    seed: int = 0
    max_noise: float | None = None  # rerun a prompt while others used more CPUs than this
    adaptive_scope: str = "task"    # one adaptive controller per task, or per prompt
    schedule: str = "serial"        # "parallel": the draft drafts ahead during each verify
    # replay every SD output's verifies (core/audit.py), not only those that differ from raw
    exact_audit: bool = False
    drift: bool = True              # the batched-vs-one-token logit drift (harness/drift.py)
    quality: bool = True            # the target's perplexity after the runs (tune's pilot: no)
    depth: int = 0                  # tokens of real context held in both KV caches before each
    #                                 prompt (an earlier turn a server keeps; llama-bench's -d)
    draft_window: tuple[int, int] | None = None  # the draft reads a long prompt's first HEAD
    #                                 and last TAIL tokens only (window.py); None: all of it
    p_min: float = 0.0              # the static policy's confidence gate (llama.cpp's
    n_min: int = 0                  # --spec-draft-p-min / -n-min; core.speculative.draft_tokens)
    record_confidence: bool = False  # static runs of a draft model keep each drafted token's
    #                                  confidence (tune replays p-min from them)
    argv: list[str] = field(default_factory=list)
    # the sequential design (analysis/sequential.py): {"alpha", "precision"}; each task stops
    # at the first look that decides it. None: every prompt runs (--fixed)
    sequential: dict | None = None
    # cost probes an earlier run of the same models and drafter on this machine measured,
    # reused instead of this run's own (tune's race: each member's choosing run): {"cost_probe",
    # "cost_probe_end" (optional), "from": what they are}; without "cost_probe", none (tune's raw
    # runs on confirm prompts price nothing). None: this run probes before and after its prompts
    probes: dict | None = None


def resolve_models(cfg: BenchConfig, log: Log
                   ) -> tuple[FetchedModel, FetchedModel | None, str]:
    registry = load_registry()
    pair = registry.pair(cfg.pair)
    target = local_model(cfg.target_path, cfg.target_origin) if cfg.target_path else \
        fetch_model(registry.model(pair.target), log)
    if cfg.drafter == "lookup":
        return target, None, pair.name
    draft = local_model(cfg.draft_path, cfg.draft_origin) if cfg.draft_path else \
        fetch_model(registry.model(pair.draft), log)
    return target, draft, pair.name


def _run_record(p: Prompt, rep: int, mode: str, g: Generation, text: str,
                noise: NoiseSample) -> dict:
    return {"task": p.task, "prompt_id": p.prompt_id, "repetition": rep, "mode": mode,
            "prompt_tokens": g.prompt_tokens, "tokens": g.tokens, "text": text,
            "prefill_s": g.prefill_s, "draft_prefill_s": g.draft_prefill_s,
            "decode_s": g.decode_s, "e2e_s": g.e2e_s,
            "token_latencies_s": g.token_latencies_s,
            "rounds": [r.as_row() for r in g.rounds], "stop": g.stop,
            # each round's drafts (its verify read [previous token, *drafts]): replayable
            **({"drafts": g.batches} if g.rounds else {}),
            **({"reused_prompt_tokens": g.reused} if g.reused else {}),
            "noise": noise.to_dict(), **({"schedule": g.extra} if g.extra else {}),
            **({"drafter_stats": g.drafter_stats} if g.drafter_stats else {}),
            **({"draft_confidence": [[round(c, 6) for c in r] for r in g.draft_confidence]}
               if g.draft_confidence is not None else {})}


def environment(threads: int | list[int]) -> dict:
    import llama_cpp
    from cpuspec.llama.engine import ggml_devices, system_info
    return {"cpuspec_version": __version__, "llama_cpp_python_version": llama_cpp.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "llama_system_info": system_info(), "hardware": detect_hardware().to_dict(),
            "ggml_devices": ggml_devices(),
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
    from cpuspec.llama.engine import Model, check_same_tokenizer
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


def describe_run(cfg: BenchConfig, loaded: LoadedPair) -> dict:
    """The results file's header: what was measured, with what, where. Runs are added later."""
    results = {"schema_version": SCHEMA_VERSION, "kind": "bench", "complete": False,
               "meta": environment(cfg.threads),
               "settings": {"pair": loaded.pair_name, "k": cfg.k, "max_tokens": cfg.max_tokens,
                            "repetitions": cfg.repetitions, "warmup": cfg.warmup,
                            "threads": cfg.threads, "tasks": list(dict.fromkeys(
                                p.task for p in cfg.prompts)),
                            "n_prompts": len(cfg.prompts), "argv": cfg.argv,
                            "policies": cfg.policies, "drafter": cfg.drafter,
                            "p_min": cfg.p_min, "n_min": cfg.n_min,
                            # each drafted token's confidence kept (and its top-10 softmax
                            # timed inside the draft's time): tune's choosing runs
                            "record_confidence": cfg.record_confidence
                            and cfg.drafter == "model",
                            "cpus": cfg.cpus, "draft_cpus": cfg.draft_cpus,
                            "draft_threads": cfg.draft_threads or cfg.threads,
                            "n_gpu_layers": cfg.n_gpu_layers,
                            "draft_gpu_layers": cfg.draft_gpu_layers,
                            "verification": "greedy" if cfg.temperature <= 0 else
                            "speculative sampling (min(1, p/q), residual max(0, p - q))",
                            "temperature": cfg.temperature, "seed": cfg.seed,
                            "max_noise": cfg.max_noise,
                            "adaptive_scope": cfg.adaptive_scope,
                            "schedule": cfg.schedule, "depth": cfg.depth,
                            "mode_order": MODE_ORDER, "sequential": cfg.sequential,
                            "draft_window": list(cfg.draft_window) if cfg.draft_window
                            else None,
                            "windows": {"e2e": "target prefill + draft prefill + every round",
                                        "decode": "after both prefills"}},
               "models": {"target": loaded.target_f.to_dict(),
                          "draft": loaded.draft_f.to_dict() if loaded.draft_f else
                          {"drafter": "lookup", "ngram_max": NGRAM_MAX, "ngram_min": NGRAM_MIN}},
               "prompts": [asdict(p) for p in cfg.prompts], "runs": [], "audit": [],
               "discarded_runs": []}
    for role, m in (("target", loaded.target_m), ("draft", loaded.draft_m)):
        if m:
            results["models"][role].update(desc=m.desc, n_params=m.n_params,
                                           weight_bytes=m.size_bytes, n_vocab=m.n_vocab,
                                           # where llama.cpp put the weights (its load log)
                                           buffers=m.buffers,
                                           offloaded_bytes=m.offloaded_bytes)
    if cfg.drafter == "hybrid":
        results["models"]["draft"].update(drafter="hybrid", ngram_max=HYBRID_NGRAM,
                                          ngram_min=HYBRID_NGRAM)
    return results


class Generator:
    """Runs one mode (raw, static, adaptive) on one prompt with the loaded sessions."""

    def __init__(self, cfg: BenchConfig, target, draft, probe: dict | None):
        self.cfg, self.target, self.draft, self.probe = cfg, target, draft, probe
        self.modes = ["raw", *cfg.policies]
        self.policies: dict[str, AdaptivePolicy] = {}
        self.traces: dict[str, list] = {}
        self.owner = None         # the draft's CoreOwner, for the parallel schedule
        self.draft_async = None   # the draft session, called on the owner's thread

    def adaptive_policy(self, task: str, unread: int = 0, max_tokens: int = 0
                        ) -> AdaptivePolicy:
        """One controller per task type, carried across that task's prompts (what it learned
        from one prompt serves the next, as a server's would), or with --adaptive-scope prompt
        a fresh controller for every generation, learning from the prior each time."""
        if self.cfg.adaptive_scope == "prompt":
            self.policies.pop(task, None)
        if task not in self.policies:
            p = CostProbe.of(self.probe)
            self.policies[task] = AdaptivePolicy(self.cfg.k, p.draft_s, p.verify_s,
                                                 catchup_s=p.catchup_s,
                                                 prefill_s=p.prefill_s_per_token())
        # the draft's prefill of what it has not read is priced against the answer's tokens
        self.policies[task].new_generation(unread, max_tokens)
        return self.policies[task]

    def snapshot(self) -> dict:
        """What the adaptive controllers know now, for `restore`: a --max-noise rerun starts
        from the state the discarded attempt started from, as raw and static do."""
        return copy.deepcopy(self.policies)

    def restore(self, state: dict) -> None:
        self.policies = copy.deepcopy(state)

    def __call__(self, mode: str, tokens: list[int], max_tokens: int, seed_key=(0,),
                 task: str = "", reuse: int = 0) -> Generation:
        cfg = self.cfg
        t, d, verify = self.target, self.draft, verify_greedy
        if cfg.temperature > 0:  # seeded per generation: reruns draw the same tokens
            rng = np.random.default_rng([cfg.seed, *seed_key, self.modes.index(mode)])
            t = SamplingDecoder(self.target, cfg.temperature, rng)
            d = self.draft if isinstance(self.draft, LookupDrafter) else \
                SamplingDecoder(self.draft, cfg.temperature, rng)
            verify = RejectionVerify(rng)
        if mode == "raw":
            return generate_raw(t, tokens, max_tokens, reuse=reuse)
        if isinstance(d, HybridDrafter):
            d.take_stats()  # counts from earlier generations (warm-up) are not this one's
            g = self._speculate(mode, t, d, tokens, max_tokens, verify, task, reuse)
            g.drafter_stats = d.take_stats()
            return g
        return self._speculate(mode, t, d, tokens, max_tokens, verify, task, reuse)

    def _speculate(self, mode, t, d, tokens, max_tokens, verify, task, reuse=0) -> Generation:
        cfg = self.cfg
        if mode == "static" and cfg.schedule == "parallel":
            return generate_speculative_parallel(t, d, tokens, max_tokens, cfg.k,
                                                 self.owner.submit, self.draft_async,
                                                 reuse=reuse)
        if mode == "static":
            return generate_speculative(t, d, tokens, max_tokens, cfg.k, verify=verify,
                                        reuse=reuse, gate=(cfg.p_min, cfg.n_min),
                                        record_confidence=cfg.record_confidence
                                        and cfg.drafter == "model")
        policy = self.adaptive_policy(task, window_reads(cfg.draft_window, len(tokens), reuse),
                                      max_tokens)
        start = len(policy.trace)
        g = generate_speculative(t, d, tokens, max_tokens, policy, verify=verify, reuse=reuse)
        self.traces[mode] = policy.trace[start:]  # this generation's decisions
        return g


def measure_prompt(gen: Generator, p: Prompt, tokens: list[int], rep: int, index: int,
                   seed_key: tuple, reuse: int = 0
                   ) -> tuple[dict[str, Generation], dict[str, NoiseSample]]:
    """Every mode once on one prompt, each inside a noise probe, in mode_order's order for
    `index`, so neither a drifting machine nor what one mode leaves behind biases any of them.
    reuse: the sessions hold tokens[:reuse] already (a follow-up turn; see prepare_followup)."""
    gens, noise = {}, {}
    for mode in mode_order(gen.modes, index):
        with NoiseProbe() as probe:
            gens[mode] = gen(mode, tokens, gen.cfg.max_tokens, seed_key, p.task, reuse)
        noise[mode] = probe.sample
    return gens, noise


def context_size(prompt_lengths: list[int], cfg: BenchConfig) -> int:
    """KV positions one session needs: the longest prompt, then the longest of the generation
    (max_tokens plus a verify's k overshoot) and the cost probe's catch-up batch."""
    return (max(prompt_lengths) + max(cfg.max_tokens + cfg.k, CATCHUP_PROBE_TOKENS, cfg.k + 1,
                                      CURVE_N) + CTX_SLACK_TOKENS)


def run_bench(cfg: BenchConfig, log: Log = lambda _: None,
              loaded: LoadedPair | None = None,
              on_update: Callable[[dict], None] | None = None) -> dict:
    """One bench point; loads the pair unless a sweep passes it in already loaded.
    `on_update(results)` is called after every prompt with the results so far (marked
    "complete": false), so a caller can save them before the run ends."""
    if loaded is None:
        if cfg.cpus:  # before any llama.cpp thread exists: its workers inherit it
            CorePinner().pin(cfg.cpus)
        with load_pair(cfg, log) as pair:
            return run_bench(cfg, log, pair, on_update)
    pinner = CorePinner()
    if cfg.cpus:
        pinner.pin(cfg.cpus)
    results = describe_run(cfg, loaded)
    target_m = loaded.target_m
    with contextlib.ExitStack() as stack:
        encoded, reuse = encode_prompts(target_m, cfg.prompts, cfg.depth)
        if cfg.depth:
            results["depth"] = {"requested_tokens": cfg.depth, "held_tokens": reuse,
                                "text": "cpuspec.inputs.tasks.depth_text() (cpuspec/data/long)"}
        _check_point(cfg, loaded)
        # a follow-up's second turn holds the first, its answer and the follow-up message
        lengths = [len(e) + (FIRST_TURN_TOKENS + len(target_m.tokenize(p.followup)) + 32
                             if p.followup else 0) for p, e in zip(cfg.prompts, encoded)]
        n_ctx = context_size(lengths, cfg)
        check_trained_context(cfg, lengths, loaded, reuse if cfg.depth else None)
        if on_update:
            on_update(results)
        target, draft, draft_model, owner, draft_session = _open_decoders(cfg, loaded, n_ctx,
                                                                          stack)
        _record_contexts(results, target, draft_session or draft_model)
        census = thread_census()
        gen = Generator(cfg, target, draft, None)
        gen.owner, gen.draft_async = owner, draft_session
        _warm_up(cfg, gen, target_m, encoded, log)
        probe = functools.partial(_cost_probe, cfg, target, draft_model, encoded[0], results,
                                  log)
        gen.probe = probe("cost_probe")
        _ceiling_first(cfg, results, log)
        _answer_first_turns(cfg, target_m, target, encoded, reuse, results, log)
        _measure_all(cfg, gen, target, draft, target_m, encoded, reuse, results, log,
                     on_update)
        # the probe again: the machine drifts over a run (issue 57), so the prediction has a band
        probe("cost_probe_end")
        record_drift(cfg, target, encoded, reuse, results, log)
        # The quality proxy beside the speed: a faster quant is a win only if this holds up.
        if cfg.quality:
            results["quality"] = target_perplexity(target_m, cfg.threads)
        if owner:  # where each model's threads ran, measured
            results["threads"] = {
                "target_cpus": cfg.cpus or current_affinity(),
                "draft_cpus": cfg.draft_cpus, "draft_owner_thread": owner.native_id,
                "cpu_s_by_affinity": census_delta(census, thread_census())}
    results["complete"] = True   # no summary is stored: every reader computes it (summary.py)
    return results


def _cost_probe(cfg: BenchConfig, target, draft_model, tokens: list[int], results: dict,
                log: Log, key: str) -> dict | None:
    """results[key]: the cost probe (prefills, V(1..n), the draft's decode) before the prompts
    ("cost_probe") or after them ("cost_probe_end", the prediction's band; summary.py). The
    second reads the same tokens as the first (not a second turn). With cfg.probes this run
    measures none: it records what cfg.probes holds under `key` (nothing where it holds
    nothing: a raw run that prices nothing); an earlier probe short of k + 1 cannot price
    this k, so the run measures its own."""
    curve = max(cfg.k + 1, CURVE_N)
    given = cfg.probes
    if given is None or (given.get("cost_probe") and
                         str(cfg.k + 1) not in given["cost_probe"]["verify_s"]):
        log(f"cost probe: prefills, target decode of 1..{curve} tokens, draft decode"
            if key == "cost_probe" else
            "cost probe again, after the prompts (the prediction's band)")
        results[key] = probe_costs(target, draft_model, tokens, curve - 1)
        return results[key]
    if key == "cost_probe":
        log(f"cost probes: {given['from']} (none measured)")
        results["cost_probes_from"] = given["from"]
    if given.get(key):
        results[key] = given[key]
    return results.get(key)


def _ceiling_first(cfg: BenchConfig, results: dict, log: Log) -> None:
    """Under the sequential design, a draft model whose cost probe shows no acceptance can
    pay at any k: said before the prompts run, and each task stops at the first look, which
    confirms it (analysis/sequential.py ceiling_cap)."""
    from cpuspec.analysis.sequential import ceiling_cap
    if not cfg.sequential or cfg.drafter != "model" or "cost_probe" not in results:
        return
    cap = ceiling_cap(results["cost_probe"], max(cfg.k + 1, CURVE_N) - 1)
    if cap is None:
        return
    results["settings"]["sequential"] = {**cfg.sequential, **cap}
    from collections import Counter
    most = max(Counter(p.task for p in cfg.prompts).values())
    runs = min(cap["max_units"], most)
    log(f"cost probe: even every draft accepted gives at most {cap['ceiling']:.2f}× "
        f"(k = {cap['ceiling_k']}): no acceptance is enough at these costs; each task runs "
        f"{'at most ' if most > runs or len(cfg.prompts) > most else ''}{runs} "
        f"prompt{'s' * (runs != 1)} to confirm it")


def _answer_first_turns(cfg: BenchConfig, target_m, target, encoded: list, reuse: list,
                        results: dict, log: Log) -> None:
    """A follow-up's first turn, answered by the target alone (not timed): its prompt becomes
    the second turn."""
    for i, p in enumerate(cfg.prompts):
        if p.followup:
            log(f"{p.prompt_id}: answering the first turn (not timed)")
            encoded[i], info = answer_first_turn(target_m, target, p, encoded[i])
            reuse[i] = info["reused_tokens"]
            results.setdefault("followups", {})[p.prompt_id] = info


def _check_point(cfg: BenchConfig, loaded: LoadedPair) -> None:
    if any(p.followup for p in cfg.prompts) and cfg.schedule == "parallel":
        raise ValueError("follow-up turns run with the serial schedule only")
    if cfg.draft_window and (cfg.schedule == "parallel" or not loaded.draft_m):
        raise ValueError("a draft window needs a draft model and the serial schedule")


def refuse_recurrent(*sessions) -> None:
    """cpuspec's loop rolls every rejected draft back; a recurrent or hybrid model (Qwen3.5's
    delta-net layers) can only be rebuilt by decoding its context again, which would be timed
    inside each round. Refused, with where to measure it instead."""
    from cpuspec.llama.engine import EngineError
    for s in sessions:
        if getattr(s, "recurrent", False):
            raise EngineError(f"{s.model.path.name} is a recurrent or hybrid model: cpuspec's "
                              "loop cannot roll its state back per token; measure it in "
                              "llama-server (cpuspec paths --paths llama-server, or cpuspec "
                              "heads for its MTP layer)")


def _record_contexts(results: dict, target, draft) -> None:
    """Where each context's work and KV cache live (llama.cpp's report) and whether its ops may
    be offloaded: the proof that a CPU point ran on the CPU on a GPU build too."""
    for role, s in (("target", target), ("draft", draft)):
        if hasattr(s, "buffers") and hasattr(s, "op_offload") and role in results["models"]:
            results["models"][role].update(context_buffers=s.buffers, op_offload=s.op_offload)


def _open_decoders(cfg: BenchConfig, loaded: LoadedPair, n_ctx: int,
                   stack: contextlib.ExitStack):
    """The target's session and the drafter as the loop drives it (the draft's session on
    its own cores, windowed, or inside the hybrid), the draft model alone as the cost probe
    times it, the draft's core owner and its session (None without a core split)."""
    from cpuspec.llama.engine import Session
    target = stack.enter_context(Session(loaded.target_m, n_ctx, cfg.threads))
    draft = stack.enter_context(Session(loaded.draft_m, n_ctx,
                                        cfg.draft_threads or cfg.threads)) \
        if loaded.draft_m else LookupDrafter(loaded.target_m.is_eog)
    refuse_recurrent(target, draft)
    owner = draft_session = None
    # the parallel schedule drives the draft from a thread of its own: pinned to its CPUs, or
    # unpinned where the OS has no affinity (the plan said so)
    if (cfg.draft_cpus or cfg.schedule == "parallel") and loaded.draft_m:
        owner = CoreOwner(cfg.draft_cpus or [], "draft")
        stack.callback(owner.close)
        draft_session, draft = draft, OwnedDecoder(draft, owner)
    # what the cost probe times: the hybrid's lookup costs ~nothing, and the window's
    # prefill is priced per token read (Generator: window.window_reads)
    draft_model = draft
    if cfg.draft_window:
        draft = WindowedDraft(draft, *cfg.draft_window)
    if cfg.drafter == "hybrid":
        draft = HybridDrafter(draft)
    return target, draft, draft_model, owner, draft_session


def _warm_up(cfg: BenchConfig, gen: Generator, target_m, encoded: list, log: Log) -> None:
    """Not recorded: page in weights, warm caches. A depth's warm-up runs without it: it pages
    in weights, it does not need 4 k tokens."""
    warm = encoded[0] if not cfg.depth else \
        target_m.tokenize(target_m.format_chat(cfg.prompts[0].text))
    for i in range(cfg.warmup):
        log(f"warm-up {i + 1}/{cfg.warmup}")
        for mode in ["raw", "static"] if cfg.policies else ["raw"]:
            gen(mode, warm, WARMUP_MAX_TOKENS, task="(warm-up)")


def _measure_all(cfg: BenchConfig, gen: Generator, target, draft, target_m, encoded: list,
                 reuse: list, results: dict, log: Log,
                 on_update: Callable[[dict], None] | None) -> None:
    """Every repetition of every prompt: measured (again, where --max-noise finds it
    disturbed), recorded, audited, logged."""
    total = cfg.repetitions * len(cfg.prompts)
    done = 0
    held = None   # the tokens both KV caches hold below every generation's start
    stopped: set[str] = set()   # tasks the sequential design decided
    for rep in range(cfg.repetitions):
        for p, tokens, kept in zip(cfg.prompts, encoded, reuse):
            done += 1
            if p.task in stopped:
                continue
            before = gen.snapshot() if cfg.max_noise is not None else None
            for attempt in range(MAX_NOISE_RERUNS + 1):
                if attempt:
                    gen.restore(before)   # learn nothing from a discarded attempt
                if kept and held != tokens[:kept]:   # a depth is read once for all
                    if cfg.depth:
                        log(f"reading the depth's {kept} tokens into the KV caches "
                            "(not timed)")
                    prepare_followup(target, draft, tokens, kept, bool(cfg.policies))
                    held = tokens[:kept]
                # sampling is seeded by the prompt, not its place in the run: the order is
                # drawn per run (sequential design), the same --seed draws the same tokens
                gens, noise = measure_prompt(gen, p, tokens, rep, done,
                                             (rep, zlib.crc32(p.prompt_id.encode())), kept)
                # every generation truncated both caches to `kept`: with kept == 0 they
                # no longer hold any earlier conversation
                held = tokens[:kept] if kept else None
                records, reasons, retry = _records(cfg, gen, p, rep, gens, noise, target_m,
                                                   attempt)
                if not retry:
                    break
                log(f"[{done}/{total}] {p.prompt_id}: {retry}; measuring it again")
                results["discarded_runs"] += records
            results["runs"] += records
            audited = audit_prompt(cfg, target, p, rep, tokens, gens, kept, results)
            speeds = ", ".join(f"{m} {len(gens[m].tokens) / gens[m].e2e_s:.1f}"
                               for m in gen.modes)
            same = ("" if not audited else
                    "; same output" if all(audited) else "; output differs")
            busy = f"; BUSY: {'; '.join(reasons)}" if reasons else ""
            log(f"[{done}/{total}] {p.prompt_id}: end-to-end t/s {speeds}{same}{busy}")
            if cfg.sequential and _decided(cfg, results, p.task, log):
                stopped.add(p.task)
            if on_update:
                on_update(results)


def _decided(cfg: BenchConfig, results: dict, task: str, log: Log) -> bool:
    """Whether the sequential design stops `task` after its latest prompt (a look that
    decided it, or its last prompt), said in the log."""
    from cpuspec.analysis.sequential import task_look
    res = task_look(results, task)
    if res is None or res["state"] == "continue":
        return False
    log(f"{task}: {res['state']} after {res['units']} of {res['planned']} prompts"
        + ("" if res["units"] == res["planned"] else "; its other prompts are not run"))
    return True


def _records(cfg: BenchConfig, gen: Generator, p: Prompt, rep: int, gens: dict, noise: dict,
             target_m, attempt: int) -> tuple[list[dict], list[str], str]:
    """One prompt's run records, what disturbed it, and why it is measured again ("" when it
    is kept: no --max-noise, the last attempt, or quiet enough)."""
    busiest = max(n.other_cpus for n in noise.values())
    worst = max(noise.values(), key=lambda n: (len(n.reasons()), n.other_cpus))
    records = [_run_record(p, rep, mode, gens[mode], target_m.detokenize(gens[mode].tokens),
                           noise[mode]) for mode in gen.modes]
    for rec in records:
        if rec["mode"] == "adaptive":
            rec["policy_trace"] = gen.traces.get("adaptive", [])
    pressured = any("waited for a CPU" in r for n in noise.values() for r in n.reasons())
    if cfg.max_noise is None or attempt == MAX_NOISE_RERUNS or not (
            busiest > cfg.max_noise or pressured):
        return records, worst.reasons(), ""
    return records, worst.reasons(), (
        f"disturbed (other programs used {busiest:.2f} CPUs; --max-noise {cfg.max_noise}"
        + (", CPU pressure" if pressured else "") + ")")


