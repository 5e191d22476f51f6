"""Does the speedup reach the user's stack? One configuration (target, draft, k, drafter) through
several paths, each against its own raw decoding, on the same prompts, files and threads:

  cpuspec            cpuspec's loop on llama-cpp-python's low-level API (what bench measures)
  cpuspec+redecode   the same loop, plus what llama.cpp's draft-simple does each round: the
                     draft decodes the whole verify batch [last, d1..dk] again (draft model only)
  llama-cpp-python   Llama.create_completion, raw and with draft_model=cpuspec.DraftModel
  llama.cpp          llama-completion (raw) and llama-speculative-simple (SD), when the
                     binaries are there (native.find_bin_dir)
  llama-server       llama.cpp's server, once plain and once with the configuration's flags
                     (the ones tune and advise print), asked over HTTP on 127.0.0.1

Every window is end to end (the prompt's prefill, the draft's too, and every token). The order
of the paths alternates from prompt to prompt. A follow-up prompt (long-followup, a prompts
file's "followup") is measured at its second turn: the first answered once by the target
(greedy, untimed), then the whole conversation read by every path, as a server whose prompt
cache is off reads it (first_turns). No printing: progress goes to `log`, the document
to `on_update` after each prompt (a results file that grows). What a run shows: paths_report.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cpuspec.llama import native
from cpuspec.core.drafters import DRAFTERS
from cpuspec.core.speculative import Decoder, generate_raw, generate_speculative, verify_greedy
from cpuspec.results.schema import (ALL_PATHS, CPUSPEC, LLAMA_CPP, LLAMA_CPP_PYTHON,  # noqa: F401
                                    LLAMA_SERVER, LLAMA_SERVER_CHAT, REDECODE,
                                    SERVER_PATHS)
from cpuspec.inputs.tasks import Prompt

CTX_SLACK = 64
CHAT_TEMPLATE_SLACK = 512   # the server's own template: its default system prompt, tool text


@dataclass(frozen=True)
class PathsConfig:
    target: Path
    draft: Path | None
    k: int
    drafter: str                 # model | hybrid | lookup
    prompts: list[Prompt]
    max_tokens: int
    threads: int
    paths: tuple[str, ...]
    bin_dir: Path | None = None  # llama.cpp's programs, for the llama.cpp and server paths
    native_rounds: bool = False  # also run llama.cpp's SD once more, untimed, per round
    server_flags: tuple[str, ...] | None = None   # --server-flags: the speculative ones in
    #                              place of the configuration's in the SD server, the others
    #                              (-ngl, -b, ...) given to both servers (server_argv)
    p_min: float = 0.0           # every path's confidence gate (llama.cpp's --spec-draft-p-min)


def verify_redecode(target: Decoder, draft: Decoder, last: int, drafts: list[int], pos: int):
    """Greedy verification, then llama.cpp's draft-simple bookkeeping
    (common_speculative_process): the draft decodes the whole verify batch [last, *drafts] at
    pos again, one logit row, over the KV it wrote while drafting. The draft ends where it
    would have ended, so the loop goes on unchanged; only the extra decode's time is added."""
    n_accepted, next_token = verify_greedy(target, draft, last, drafts, pos)
    if drafts:
        draft.truncate(pos)
        draft.eval([last, *drafts], pos, 1)
        draft.truncate(pos + len(drafts))
    return n_accepted, next_token


def _record(prompt: Prompt, path: str, mode: str, n_tokens: int, e2e_s: float, text: str,
            **extra) -> dict:
    return {"path": path, "task": prompt.task, "prompt_id": prompt.prompt_id, "repetition": 0,
            "mode": mode, "n_tokens": n_tokens, "e2e_s": e2e_s, "text": text, **extra}


def measure_paths(cfg: PathsConfig, environment: dict, log: Callable[[str], None],
                  on_update: Callable[[dict], None] | None = None) -> dict:
    from llama_cpp import Llama

    from cpuspec.llama.engine import Model, Session, check_same_tokenizer
    from cpuspec.llama.draft_model import DraftModel
    if REDECODE in cfg.paths and cfg.drafter != "model":
        raise ValueError(f"the {REDECODE} path imitates llama.cpp's draft model; it needs "
                         f"--drafter model")
    for needs in (LLAMA_CPP, LLAMA_SERVER, LLAMA_SERVER_CHAT):
        if needs in cfg.paths and cfg.bin_dir is None:
            raise ValueError(f"the {needs} path needs llama.cpp's programs (bin_dir)")
    doc = {"kind": "paths", "complete": False, "meta": environment,
           "settings": paths_settings(cfg),
           "windows": "end to end: the prompt's prefill (the draft's too) and every token",
           "runs": []}
    with Model(cfg.target) as target_m:
        draft_m = Model(cfg.draft) if cfg.draft is not None else None
        try:
            if draft_m is not None:
                check_same_tokenizer(target_m, draft_m)
            texts = first_turns(target_m, cfg, Session, doc)
            encoded = {pid: target_m.tokenize(t) for pid, t in texts.items()}
            n_ctx = max(map(len, encoded.values())) + cfg.max_tokens + cfg.k + CTX_SLACK
            with contextlib.ExitStack() as stack:
                target = stack.enter_context(Session(target_m, n_ctx, cfg.threads))
                dsess = stack.enter_context(Session(draft_m, n_ctx, cfg.threads)) \
                    if draft_m else None
                if {CPUSPEC, REDECODE} & set(cfg.paths):
                    from cpuspec.harness.bench import refuse_recurrent
                    refuse_recurrent(target, dsess)
                draft = DRAFTERS[cfg.drafter].make(dsess, target_m.is_eog)
                runners = _runners(cfg, target_m, target, draft, texts, encoded, n_ctx, Llama,
                                   DraftModel, stack, doc)
                _run_prompts(cfg, runners, doc, log, on_update)
        finally:
            if draft_m is not None:
                draft_m.close()
    doc["complete"] = True
    return doc


def paths_settings(cfg: PathsConfig) -> dict:
    """The configuration as a results file keeps it: a secret flag's value (--api-key ...)
    in --server-flags never (redact_argv)."""
    from cpuspec.llama.server import redact_argv
    return {"target": str(cfg.target), "draft": str(cfg.draft) if cfg.draft else None,
            "k": cfg.k, "drafter": cfg.drafter, "max_tokens": cfg.max_tokens,
            "threads": cfg.threads, "paths": list(cfg.paths),
            "prompts": [p.prompt_id for p in cfg.prompts],
            "llama_bin": str(cfg.bin_dir) if cfg.bin_dir else None,
            "native_window": native.WINDOW if LLAMA_CPP in cfg.paths else None,
            "server_flags": redact_argv(cfg.server_flags) if cfg.server_flags else None,
            "p_min": cfg.p_min}


def server_texts(cfg: PathsConfig) -> tuple[dict[str, str], int, dict]:
    """What a load test sends: each prompt's chat-formatted text (follow-ups at their second
    turn, first_turns), the context one server slot needs for the longest of them and its
    answer, and the follow-ups' first turns (for the results file)."""
    from cpuspec.llama.engine import Model, Session
    doc: dict = {}
    with Model(cfg.target) as target_m:
        texts = first_turns(target_m, cfg, Session, doc)
        longest = max(len(target_m.tokenize(t)) for t in texts.values())
    return texts, longest + cfg.max_tokens + cfg.k + CTX_SLACK, doc.get("followups", {})


def first_turns(target_m, cfg: PathsConfig, Session, doc: dict) -> dict[str, str]:
    """The text every path reads per prompt: its message in the chat template, or for a
    follow-up the second turn after the first, answered by the target alone (greedy, up to
    turns.FIRST_TURN_TOKENS tokens, not timed); what each first turn was goes to
    doc["followups"]."""
    from cpuspec.harness.turns import FIRST_TURN_TOKENS, answer_first_turn
    texts = {}
    for p in cfg.prompts:
        if not p.followup:
            texts[p.prompt_id] = target_m.format_chat(p.text)
            continue
        first = target_m.tokenize(target_m.format_chat(p.text))
        with Session(target_m, len(first) + FIRST_TURN_TOKENS + CTX_SLACK, cfg.threads) as s:
            _, info = answer_first_turn(target_m, s, p, first)
        texts[p.prompt_id] = target_m.format_chat(p.followup, [(p.text, info["first_answer"])])
        doc.setdefault("followups", {})[p.prompt_id] = {
            k: info[k] for k in ("first_answer", "first_turn_tokens", "second_turn_tokens")}
    return texts


def _run_prompts(cfg: PathsConfig, runners: dict, doc: dict, log: Callable[[str], None],
                 on_update: Callable[[dict], None] | None) -> None:
    """A warm-up of every path and mode on the first prompt (8 tokens, not kept), then each
    prompt through every path, the order reversed on every other prompt."""
    log("warm-up (not kept)")
    first = cfg.prompts[0]
    for run in runners.values():
        for mode in ("raw", "static"):
            run(first, mode, 8)
    for i, p in enumerate(cfg.prompts):
        steps = [(path, mode) for path in cfg.paths for mode in ("raw", "static")
                 if not (path == REDECODE and mode == "raw")]
        if i % 2:
            steps.reverse()
        for path, mode in steps:
            doc["runs"].append(runners[path](p, mode, cfg.max_tokens))
        log(f"[{i + 1}/{len(cfg.prompts)}] {p.prompt_id}: " + ", ".join(
            f"{r['path']} {r['mode']} {r['n_tokens'] / r['e2e_s']:.1f} t/s"
            for r in doc["runs"][-len(steps):]))
        if on_update:
            on_update(doc)


def _runners(cfg, target_m, target, draft, texts, encoded, n_ctx, Llama, DraftModel,
             stack: contextlib.ExitStack, doc: dict) -> dict:
    """One function per path: (prompt, mode, max_tokens) -> record. What they load is closed
    by `stack`."""
    runners = {}
    if CPUSPEC in cfg.paths:
        runners[CPUSPEC] = _loop_runner(cfg, target_m, target, draft, encoded, CPUSPEC,
                                        verify_greedy)
    if REDECODE in cfg.paths:
        runners[REDECODE] = _loop_runner(cfg, target_m, target, draft, encoded, REDECODE,
                                         verify_redecode)
    if LLAMA_CPP_PYTHON in cfg.paths:
        runners[LLAMA_CPP_PYTHON] = _high_level_runner(cfg, texts, n_ctx, Llama, DraftModel,
                                                       stack)
    if LLAMA_CPP in cfg.paths:
        runners[LLAMA_CPP] = _native_runner(cfg, texts, n_ctx)
    if set(SERVER_PATHS) & set(cfg.paths):
        runners.update(_server_runners(cfg, texts, n_ctx, stack, doc))
    return runners


def _loop_runner(cfg, target_m, target, draft, encoded, path: str, verify) -> Callable:
    """cpuspec's own loop (with `verify` as its acceptance rule)."""
    def run(p, mode, n):
        toks = encoded[p.prompt_id]
        g = generate_raw(target, toks, n) if mode == "raw" else \
            generate_speculative(target, draft, toks, n, cfg.k, verify=verify,
                                 gate=(cfg.p_min, 0))
        drafted = sum(r.k for r in g.rounds)
        return _record(p, path, mode, len(g.tokens), g.e2e_s,
                       target_m.detokenize(g.tokens), tokens=g.tokens,
                       rounds=[[r.n_accepted, r.k] for r in g.rounds],
                       drafted=drafted, accepted=sum(r.n_accepted for r in g.rounds),
                       prefill_s=g.prefill_s + g.draft_prefill_s,
                       draft_s=sum(r.draft_s for r in g.rounds),
                       verify_s=sum(r.verify_s for r in g.rounds), decode_s=g.decode_s)
    return run


def _high_level_runner(cfg, texts, n_ctx, Llama, DraftModel, stack: contextlib.ExitStack
                       ) -> Callable:
    """llama-cpp-python's Llama.create_completion, plain and with draft_model=DraftModel."""
    kw = dict(model_path=str(cfg.target), n_ctx=n_ctx, n_threads=cfg.threads,
              n_threads_batch=cfg.threads, verbose=False)
    plain = Llama(**kw)
    stack.callback(plain.close)
    drafter = DraftModel(str(cfg.draft) if cfg.draft else None, k=cfg.k,
                         drafter=cfg.drafter, n_ctx=n_ctx, n_threads=cfg.threads)
    stack.callback(drafter.close)
    spec = Llama(**kw, draft_model=drafter)
    stack.callback(spec.close)

    def run(p, mode, n):
        llm = plain if mode == "raw" else spec
        llm.reset()   # no prompt cache across calls: each reads its prompt, as ours do
        before = dict(drafter.stats)
        # streamed, as a chat front end takes it: the first chunk's time is the prompt's
        # prefill (with draft_model=, llama-cpp-python computes logits for every prompt
        # row: logits_all) and the first token
        t0 = time.perf_counter()
        first, chunks = None, []
        for chunk in llm.create_completion(texts[p.prompt_id], max_tokens=n,
                                           temperature=0.0, top_k=1, repeat_penalty=1.0,
                                           stream=True):
            if first is None:
                first = time.perf_counter() - t0
            chunks.append(chunk["choices"][0]["text"])
        e2e = time.perf_counter() - t0
        extra = {} if mode == "raw" else {
            "draft_calls": drafter.stats["calls"] - before["calls"],
            "drafted": drafter.stats["drafts"] - before["drafts"]}
        # one chunk per token, except a token that ends inside a UTF-8 character, which
        # waits for the next: both modes stream the same text, so SD ×raw holds
        return _record(p, LLAMA_CPP_PYTHON, mode, len(chunks), e2e, "".join(chunks),
                       first_chunk_s=first, **extra)
    return run


def _native_runner(cfg, texts, n_ctx) -> Callable:
    """llama.cpp's llama-completion (raw) and llama-speculative-simple (SD)."""
    draft = str(cfg.draft) if cfg.draft else None

    def run(p, mode, n):
        text = texts[p.prompt_id]
        if mode == "raw":
            r = native.run_completion(cfg.bin_dir, str(cfg.target), text, n, cfg.threads,
                                      n_ctx)
            return _record(p, LLAMA_CPP, mode, r.tokens, r.e2e_s, r.text,
                           prefill_s=r.prefill_s, sampling_ms=r.sampling_ms,
                           total_ms=r.total_ms, target_eval_ms=r.target_eval_ms,
                           prompt_eval_ms=r.prompt_eval_ms,
                           prompt_eval_tokens=r.prompt_eval_tokens)
        r = native.run_speculative(cfg.bin_dir, str(cfg.target), draft, text, n, cfg.k,
                                   cfg.threads, n_ctx, cfg.drafter, p_min=cfg.p_min)
        rounds, phases = [], []
        if cfg.native_rounds:   # untimed: debug logging slows the program
            detail = native.run_speculative(cfg.bin_dir, str(cfg.target), draft, text, n,
                                            cfg.k, cfg.threads, n_ctx, cfg.drafter,
                                            per_round=True, p_min=cfg.p_min)
            rounds, phases = detail.rounds, detail.round_phases_ms
        return _record(p, LLAMA_CPP, mode, r.tokens, r.e2e_s, r.text, prefill_s=r.prefill_s,
                       decode_s=r.decode_s, drafted=r.drafted, accepted=r.accepted,
                       rounds=[[a, d] for a, d in rounds], draft_calls=r.draft_calls,
                       round_phases_ms=[list(x) for x in phases],
                       target_eval_ms=r.target_eval_ms, target_eval_runs=r.target_eval_runs,
                       prompt_eval_ms=r.prompt_eval_ms,
                       prompt_eval_tokens=r.prompt_eval_tokens, sampling_ms=r.sampling_ms,
                       draft_gen_ms=r.draft_gen_ms, acc_rate_pos=r.acc_rate_pos)
    return run


def server_argv(cfg: PathsConfig, n_ctx: int, sd: bool) -> list[str]:
    """The server's flags: the target alone, or the configuration as `invocations` prints it
    for llama-server. cfg.server_flags, where given, are split (split_server_flags): the
    speculative ones replace the configuration's in the SD server, the others go to both
    servers; a draft model named there (-md, --model-draft, ...) runs on cfg.threads (-td)
    unless they give its threads."""
    from cpuspec.core.commands import (DRAFT_MODEL_FLAGS, DRAFT_THREAD_FLAGS, SERVER,
                                       flag_name, invocations, split_server_flags)
    spec, common = split_server_flags(cfg.server_flags or ())
    plain = ["-m", str(cfg.target), "-t", str(cfg.threads), "-c", str(n_ctx), *common]
    if not sd:
        return plain
    if cfg.server_flags is not None:
        named = {flag_name(w) for w in spec}
        draft = ["-td", str(cfg.threads)] if named & DRAFT_MODEL_FLAGS \
            and not named & DRAFT_THREAD_FLAGS else []
        return [*plain, *spec, *draft]
    argv = invocations(str(cfg.target), str(cfg.draft) if cfg.draft else None, cfg.k,
                       cfg.drafter, cfg.threads, n_ctx, cfg.p_min)[SERVER]
    return argv[1:argv.index("-np")]   # the Server adds its own slots (-np 1) and --metrics


def chat_messages(p, followups: dict) -> list[dict]:
    """What an OpenAI-style client sends for a prompt: its message, or for a follow-up the
    first turn, the target's answer to it (first_turns) and the second turn."""
    if not p.followup:
        return [{"role": "user", "content": p.text}]
    return [{"role": "user", "content": p.text},
            {"role": "assistant", "content": followups[p.prompt_id]["first_answer"]},
            {"role": "user", "content": p.followup}]


def _server_runners(cfg, texts, n_ctx, stack: contextlib.ExitStack, doc: dict) -> dict:
    """llama-server, plain and with the configuration's speculative flags: both started once,
    each request alone in its single slot, asked by each server path chosen (LLAMA_SERVER:
    /completion with cpuspec's chat-formatted text and top-k 1; LLAMA_SERVER_CHAT:
    /v1/chat/completions, the server's template and sampler chain). The record holds the
    client's end-to-end time, the server's own timings and draft counters, and the CPU time
    the idle server used meanwhile (it should be ~0: two servers must not compete for the
    cores)."""
    import psutil

    from cpuspec.llama.server import Server
    # the server's template may add a system prompt cpuspec's formatting has not
    ctx = n_ctx + (CHAT_TEMPLATE_SLACK if LLAMA_SERVER_CHAT in cfg.paths else 0)
    servers = {mode: stack.enter_context(Server(cfg.bin_dir, server_argv(cfg, ctx,
                                                                         mode == "static")))
               for mode in ("raw", "static")}
    procs = {mode: psutil.Process(s.pid) for mode, s in servers.items()}

    def cpu_s(mode: str) -> float:
        t = procs[mode].cpu_times()
        return t.user + t.system

    def runner(path: str) -> Callable:
        def run(p, mode, n):
            other = "static" if mode == "raw" else "raw"
            before, idle_before = servers[mode].metrics(), cpu_s(other)
            r = servers[mode].complete(texts[p.prompt_id], n) if path == LLAMA_SERVER else \
                servers[mode].chat(chat_messages(p, doc.get("followups", {})), n)
            after, idle_after = servers[mode].metrics(), cpu_s(other)
            rounds = after.get("spec_decode_num_drafts_total", 0.0) - \
                before.get("spec_decode_num_drafts_total", 0.0)
            return _record(p, path, mode, r.tokens, r.e2e_s, r.text,
                           prefill_s=r.prompt_ms / 1e3, decode_s=r.predicted_ms / 1e3,
                           drafted=r.drafted, accepted=r.accepted, server_rounds=int(rounds),
                           server_prompt_tokens=r.prompt_tokens, stop_type=r.stop,
                           idle_server_cpu_s=idle_after - idle_before)
        return run
    return {path: runner(path) for path in SERVER_PATHS if path in cfg.paths}
