"""Does the speedup reach the user's stack? One configuration (target, draft, k, drafter) through
several paths, each against its own raw decoding, on the same prompts, files and threads:

  cpuspec            cpuspec's loop on llama-cpp-python's low-level API (what bench measures)
  cpuspec+redecode   the same loop, plus what llama.cpp's draft-simple does each round: the
                     draft decodes the whole verify batch [last, d1..dk] again (draft model only)
  llama-cpp-python   Llama.create_completion, raw and with draft_model=cpuspec.DraftModel
  llama.cpp          llama-completion (raw) and llama-speculative-simple (SD), when the
                     binaries are there (native.find_bin_dir)

Every window is end to end (the prompt's prefill, the draft's too, and every token). The order
of the paths alternates from prompt to prompt. No printing: progress goes to `log`, the document
to `on_update` after each prompt (a results file that grows).
"""
from __future__ import annotations

import contextlib
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import native
from .speculative import Decoder, generate_raw, generate_speculative, verify_greedy
from .tasks import Prompt

CPUSPEC, REDECODE, LLAMA_CPP_PYTHON, LLAMA_CPP = ("cpuspec", "cpuspec+redecode",
                                                  "llama-cpp-python", "llama.cpp")
ALL_PATHS = (CPUSPEC, REDECODE, LLAMA_CPP_PYTHON, LLAMA_CPP)
CTX_SLACK = 64


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
    bin_dir: Path | None = None  # llama.cpp's programs, for the llama.cpp path
    native_rounds: bool = False  # also run llama.cpp's SD once more, untimed, per round


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

    from .engine import Model, Session, check_same_tokenizer
    from .llama_draft import DraftModel
    from .lookup import HybridDrafter, LookupDrafter
    if REDECODE in cfg.paths and cfg.drafter != "model":
        raise ValueError(f"the {REDECODE} path imitates llama.cpp's draft model; it needs "
                         f"--drafter model")
    if LLAMA_CPP in cfg.paths and cfg.bin_dir is None:
        raise ValueError("the llama.cpp path needs llama.cpp's programs (bin_dir)")
    doc = {"kind": "paths", "complete": False, "meta": environment,
           "settings": {"target": str(cfg.target), "draft": str(cfg.draft) if cfg.draft else None,
                        "k": cfg.k, "drafter": cfg.drafter, "max_tokens": cfg.max_tokens,
                        "threads": cfg.threads, "paths": list(cfg.paths),
                        "prompts": [p.prompt_id for p in cfg.prompts],
                        "llama_bin": str(cfg.bin_dir) if cfg.bin_dir else None},
           "windows": "end to end: the prompt's prefill (the draft's too) and every token",
           "runs": []}
    with Model(cfg.target) as target_m:
        draft_m = Model(cfg.draft) if cfg.draft is not None else None
        try:
            if draft_m is not None:
                check_same_tokenizer(target_m, draft_m)
            texts = {p.prompt_id: target_m.format_chat(p.text) for p in cfg.prompts}
            encoded = {pid: target_m.tokenize(t) for pid, t in texts.items()}
            n_ctx = max(map(len, encoded.values())) + cfg.max_tokens + cfg.k + CTX_SLACK
            with contextlib.ExitStack() as stack:
                target = stack.enter_context(Session(target_m, n_ctx, cfg.threads))
                dsess = stack.enter_context(Session(draft_m, n_ctx, cfg.threads)) \
                    if draft_m else None
                draft = (dsess if cfg.drafter == "model" else HybridDrafter(dsess)
                         if cfg.drafter == "hybrid" else LookupDrafter(target_m.is_eog))
                runners = _runners(cfg, target_m, target, draft, texts, encoded, n_ctx, Llama,
                                   DraftModel, stack)
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
        finally:
            if draft_m is not None:
                draft_m.close()
    doc["complete"] = True
    return doc


def _runners(cfg, target_m, target, draft, texts, encoded, n_ctx, Llama, DraftModel,
             stack: contextlib.ExitStack) -> dict:
    """One function per path: (prompt, mode, max_tokens) -> record. What they load is closed
    by `stack`."""
    runners = {}

    def loop(path, verify):
        def run(p, mode, n):
            toks = encoded[p.prompt_id]
            g = generate_raw(target, toks, n) if mode == "raw" else \
                generate_speculative(target, draft, toks, n, cfg.k, verify=verify)
            drafted = sum(r.k for r in g.rounds)
            return _record(p, path, mode, len(g.tokens), g.e2e_s,
                           target_m.detokenize(g.tokens), tokens=g.tokens,
                           rounds=[[r.n_accepted, r.k] for r in g.rounds],
                           drafted=drafted, accepted=sum(r.n_accepted for r in g.rounds),
                           prefill_s=g.prefill_s + g.draft_prefill_s,
                           draft_s=sum(r.draft_s for r in g.rounds),
                           verify_s=sum(r.verify_s for r in g.rounds), decode_s=g.decode_s)
        return run

    if CPUSPEC in cfg.paths:
        runners[CPUSPEC] = loop(CPUSPEC, verify_greedy)
    if REDECODE in cfg.paths:
        runners[REDECODE] = loop(REDECODE, verify_redecode)
    if LLAMA_CPP_PYTHON in cfg.paths:
        kw = dict(model_path=str(cfg.target), n_ctx=n_ctx, n_threads=cfg.threads,
                  n_threads_batch=cfg.threads, verbose=False)
        plain = Llama(**kw)
        stack.callback(plain.close)
        drafter = DraftModel(str(cfg.draft) if cfg.draft else None, k=cfg.k,
                             drafter=cfg.drafter, n_ctx=n_ctx, n_threads=cfg.threads)
        stack.callback(drafter.close)
        spec = Llama(**kw, draft_model=drafter)
        stack.callback(spec.close)

        def high_level(p, mode, n):
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
        runners[LLAMA_CPP_PYTHON] = high_level
    if LLAMA_CPP in cfg.paths:
        def llama_cpp(p, mode, n):
            text = texts[p.prompt_id]
            if mode == "raw":
                r = native.run_completion(cfg.bin_dir, str(cfg.target), text, n, cfg.threads,
                                          n_ctx)
                return _record(p, LLAMA_CPP, mode, r.tokens, r.e2e_s, r.text,
                               prefill_s=r.prefill_s, sampling_ms=r.sampling_ms,
                               prompt_eval_ms=r.prompt_eval_ms,
                               prompt_eval_tokens=r.prompt_eval_tokens)
            r = native.run_speculative(cfg.bin_dir, str(cfg.target),
                                       str(cfg.draft) if cfg.draft else None, text, n, cfg.k,
                                       cfg.threads, n_ctx, cfg.drafter)
            rounds, phases = [], []
            if cfg.native_rounds:   # untimed: debug logging slows the program
                detail = native.run_speculative(
                    cfg.bin_dir, str(cfg.target), str(cfg.draft) if cfg.draft else None, text,
                    n, cfg.k, cfg.threads, n_ctx, cfg.drafter, per_round=True)
                rounds, phases = detail.rounds, detail.round_phases_ms
            return _record(p, LLAMA_CPP, mode, r.tokens, r.e2e_s, r.text, prefill_s=r.prefill_s,
                           decode_s=r.decode_s, drafted=r.drafted, accepted=r.accepted,
                           rounds=[[a, d] for a, d in rounds], draft_calls=r.draft_calls,
                           round_phases_ms=[list(x) for x in phases],
                           target_eval_ms=r.target_eval_ms, target_eval_runs=r.target_eval_runs,
                           prompt_eval_ms=r.prompt_eval_ms,
                           prompt_eval_tokens=r.prompt_eval_tokens, sampling_ms=r.sampling_ms,
                           draft_gen_ms=r.draft_gen_ms, acc_rate_pos=r.acc_rate_pos)
        runners[LLAMA_CPP] = llama_cpp
    return runners


# --- what a run of the paths shows ---------------------------------------------------------

PATH_NOTES = {
    CPUSPEC: "cpuspec's loop (bench)",
    REDECODE: "cpuspec's loop + llama.cpp's draft re-decode of each verify batch",
    LLAMA_CPP_PYTHON: "Llama.create_completion, draft_model=cpuspec.DraftModel",
    LLAMA_CPP: "llama-completion / llama-speculative-simple",
}


def _acceptance(runs: list[dict]) -> float | None:
    drafted = sum(r.get("drafted", 0) for r in runs)
    if not drafted or any("accepted" not in r for r in runs):
        return None
    return 100.0 * sum(r["accepted"] for r in runs) / drafted


def _same_output(raw: list[dict], sd: list[dict]) -> str:
    """How many SD texts equal the raw text of the same prompt. llama.cpp's programs do not
    stop at the same token (llama-completion ends with a newline, llama-speculative-simple's
    last round may go past -n): for them, the shorter text must begin the longer one."""
    by_prompt = {r["prompt_id"]: r["text"] for r in raw}
    pairs = [(by_prompt[s["prompt_id"]], s["text"], s["path"]) for s in sd
             if s["prompt_id"] in by_prompt]
    return f"{sum(_same(a, b, path == LLAMA_CPP) for a, b, path in pairs)}/{len(pairs)}"


def _same(a: str, b: str, prefix: bool) -> bool:
    if not prefix:
        return a == b
    a, b = a.rstrip("\n"), b.rstrip("\n")
    return a.startswith(b) if len(a) >= len(b) else b.startswith(a)


def summarize_paths(doc: dict) -> dict:
    """Per task and overall, per path: SD ×raw end to end (paired by prompt, interval from
    MIN_CI_UNITS prompts, else range), raw and SD t/s, acceptance where the path counts it,
    and how many SD outputs equal the same path's raw output; and each path's SD ×raw over
    cpuspec's."""
    from .summary import OVERALL
    from .stats import e2e_tok_s, speedup_stats
    runs = doc["runs"]
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    out = {}
    for task in [*tasks, OVERALL]:
        sel = [r for r in runs if task == OVERALL or r["task"] == task]
        row = {}
        for path in doc["settings"]["paths"]:
            mine = [r for r in sel if r["path"] == path]
            # the redecode path is the same loop as cpuspec's: its raw runs are cpuspec's
            raw = [r for r in sel if r["path"] == (CPUSPEC if path == REDECODE else path)
                   and r["mode"] == "raw"]
            sd = [r for r in mine if r["mode"] == "static"]
            if not raw or not sd:
                continue
            row[path] = {**speedup_stats(raw, sd), "raw_tok_s": e2e_tok_s(raw),
                         "sd_tok_s": e2e_tok_s(sd), "acceptance_pct": _acceptance(sd),
                         "same_output": _same_output(raw, sd)}
        base = row.get(CPUSPEC, {}).get("speedup")
        for path, st in row.items():
            st["over_cpuspec"] = st["speedup"] / base if base else None
        out[task] = row
    return out


def round_budget(doc: dict) -> dict[str, dict]:
    """Where an SD round's time goes, per path, over every SD generation (ms per round).
    cpuspec's loop times its draft and verify phases itself; "other" is the rest of the round
    (for cpuspec+redecode the verify phase holds the draft's re-decode, shown apart as the
    difference from cpuspec's verify). llama.cpp's programs print their totals: drafting is
    the drafter's draft() time; verify is the target's batch time (llama_perf's "prompt eval")
    less the prompt's own prefill (llama-completion's, same prompt), and it holds the draft's
    re-decode of the batch too: llama.cpp times a decode up to the context's next
    synchronize, which comes after common_speculative_process (seen in its debug log's
    timestamps); "other" is the rest of the decode window."""
    out: dict[str, dict] = {}
    sd = [r for r in doc["runs"] if r["mode"] == "static"]
    for path in doc["settings"]["paths"]:
        runs = [r for r in sd if r["path"] == path]
        if path in (CPUSPEC, REDECODE):
            runs = [r for r in runs if "verify_s" in r and r["rounds"]]
            n = sum(len(r["rounds"]) for r in runs)
            if not n:
                continue
            draft = sum(r["draft_s"] for r in runs)
            verify = sum(r["verify_s"] for r in runs)
            decode = sum(r["decode_s"] for r in runs)
            out[path] = {"rounds": n, "tokens_per_round": sum(a + 1 for r in runs
                                                              for a, _ in r["rounds"]) / n,
                         "draft_ms": 1e3 * draft / n, "verify_ms": 1e3 * verify / n,
                         "sampling_ms": None, "other_ms": 1e3 * (decode - draft - verify) / n,
                         "round_ms": 1e3 * decode / n}
        elif path == LLAMA_CPP:
            raw = {r["prompt_id"]: r for r in doc["runs"]
                   if r["path"] == LLAMA_CPP and r["mode"] == "raw"}
            runs = [r for r in runs if r.get("draft_calls") and r.get("prompt_eval_ms")
                    is not None and r["prompt_id"] in raw]
            n = sum(r["draft_calls"] for r in runs)
            if not n:
                continue
            verify = sum(r["prompt_eval_ms"] - raw[r["prompt_id"]]["prompt_eval_ms"]
                         for r in runs)
            draft = sum(r["draft_gen_ms"] or 0.0 for r in runs)
            sampling = sum(r["sampling_ms"] or 0.0 for r in runs)
            decode = 1e3 * sum(r["decode_s"] for r in runs)
            out[path] = {"rounds": n, "tokens_per_round": sum(r["n_tokens"] for r in runs) / n,
                         "draft_ms": draft / n, "verify_ms": verify / n,
                         "redecode_in_verify": True, "sampling_ms": sampling / n,
                         "other_ms": (decode - draft - verify - sampling) / n,
                         "round_ms": decode / n}
    for path, b in out.items():   # generations whose first round kept none of its drafts
        firsts = [r["rounds"][0] for r in sd if r["path"] == path and r.get("rounds")]
        b["first_round_none"] = (f"{sum(1 for a, d in firsts if d and not a)}/{len(firsts)}"
                                 if firsts else None)
    if CPUSPEC in out and REDECODE in out:
        extra = out[REDECODE]["verify_ms"] - out[CPUSPEC]["verify_ms"]
        out[REDECODE]["verify_ms"] -= extra
        out[REDECODE]["redecode_ms"] = extra
    return out


def render_paths(doc: dict) -> str:
    from tabulate import tabulate

    from .report import fmt_value, speedup_cell
    s = doc["settings"]
    summary = summarize_paths(doc)
    lines = [f"{Path(s['target']).name} + "
             f"{Path(s['draft']).name if s['draft'] else 'no draft model'}, drafter "
             f"{s['drafter']}, k = {s['k']}, {s['threads']} threads, {s['max_tokens']} tokens; "
             f"end to end (prefills + every token), paired by prompt"]
    for task, row in summary.items():
        table = []
        for path, st in row.items():
            cell = speedup_cell({"sd_speedup": st["speedup"], "sd_speedup_ci": st["ci"],
                                 "sd_speedup_range": st["range"],
                                 "sd_speedup_units": st["units"]})
            table.append([path, fmt_value(st["raw_tok_s"], ".1f"),
                          fmt_value(st["sd_tok_s"], ".1f"), cell,
                          fmt_value(st["over_cpuspec"], ".2f"),
                          fmt_value(st["acceptance_pct"], ".1f"), st["same_output"]])
        lines += ["", f"{task}:", tabulate(
            table, headers=["path", "raw t/s", "SD t/s", "SD ×raw [95% CI]", "÷ cpuspec",
                            "accept %", "SD = raw output"], tablefmt="simple",
            disable_numparse=True)]
    budget = round_budget(doc)
    if budget:
        lines += ["", "Where an SD round's time goes (ms per round, every SD generation):",
                  tabulate([[p, b["rounds"], fmt_value(b["tokens_per_round"], ".2f"),
                             fmt_value(b["draft_ms"], ".1f"), fmt_value(b["verify_ms"], ".1f"),
                             "in verify" if b.get("redecode_in_verify") else
                             fmt_value(b.get("redecode_ms"), ".1f"),
                             fmt_value(b["sampling_ms"], ".1f"), fmt_value(b["other_ms"], ".1f"),
                             fmt_value(b["round_ms"], ".1f"), b["first_round_none"] or "-"]
                            for p, b in budget.items()],
                           headers=["path", "rounds", "tokens/round", "draft", "verify",
                                    "draft re-decode", "sampling", "other", "round",
                                    "1st round kept 0"],
                           tablefmt="simple", disable_numparse=True),
                  "llama.cpp's verify is its target's batch time less the prompt's prefill; "
                  "llama.cpp times a decode up to the next synchronize, so it holds the "
                  "draft's re-decode of the batch too."]
    phases = [x for r in doc["runs"] if r["path"] == LLAMA_CPP for x in
              r.get("round_phases_ms") or []]
    if phases:
        import statistics
        lines += [f"llama.cpp's debug log (untimed runs, {len(phases)} rounds), median per "
                  f"round: drafting {statistics.median(x[0] for x in phases):.0f} ms, verify + "
                  f"the draft's re-decode + sampling "
                  f"{statistics.median(x[1] for x in phases):.0f} ms"]
    first = {mode: [r["first_chunk_s"] for r in doc["runs"] if r["path"] == LLAMA_CPP_PYTHON
                    and r["mode"] == mode and r.get("first_chunk_s") is not None]
             for mode in ("raw", "static")}
    if first["raw"] and first["static"]:
        raw_s, sd_s = (sum(v) / len(v) for v in (first["raw"], first["static"]))
        lines += ["", f"llama-cpp-python's first token (the prompt's prefill), mean: raw "
                      f"{1e3 * raw_s:.0f} ms, with draft_model= {1e3 * sd_s:.0f} ms "
                      f"(+{1e3 * (sd_s - raw_s):.0f} ms: it then computes logits for every "
                      "prompt row, logits_all)"]
    lines += ["", "paths: " + "; ".join(f"{p}: {PATH_NOTES[p]}" for p in s["paths"])]
    if not doc.get("complete", True):
        lines.append("INTERRUPTED: the prompts that finished are shown")
    info = doc.get("meta", {}).get("llama_system_info")
    if info:
        lines.append(f"llama.cpp: {info}")
    return "\n".join(lines)


# --- what a saved paths run says about a configuration, printed under tune and advise ---

def _machine(meta: dict | None) -> tuple:
    meta = meta or {}
    return ((meta.get("hardware") or {}).get("cpu_model"), meta.get("llama_system_info"))


def measured_paths(target: str, draft: str | None, k: int, drafter: str,
                   meta: dict | None = None) -> tuple[dict, Path] | None:
    """The newest complete saved `cpuspec paths` run of this configuration (same target and
    draft files by name, k and drafter); with `meta` (the environment of the file being
    printed), only one from the same machine (CPU model and llama.cpp's system info): a
    recorded file from elsewhere is not answered with this machine's runs."""
    import json

    from .store import OutputError, saved_runs
    try:
        runs = saved_runs()
    except OutputError:
        return None
    for path in reversed(runs):
        if not path.stem.endswith("-paths"):
            continue
        try:
            doc = json.loads(path.read_text())
            s = doc["settings"]
            same = (Path(s["target"]).name == Path(target).name
                    and (Path(s["draft"]).name if s.get("draft") else None)
                    == (Path(draft).name if draft else None)
                    and s["k"] == k and s["drafter"] == drafter)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if same and doc.get("complete") and (meta is None
                                             or _machine(doc.get("meta")) == _machine(meta)):
            return doc, path
    return None


def how_to_run(target: str, draft: str | None, k: int, drafter: str, threads: int,
               indent: str = "    ", meta: dict | None = None) -> list[str]:
    """The lines printed under a recommended SD configuration: the llama.cpp server and CLI
    command lines, the llama-cpp-python call, and how much of cpuspec's gain each kept when
    `cpuspec paths` measured it here (or the command that measures it)."""
    lines = [f"{indent}{tool}: {native.shell(argv)}"
             for tool, argv in native.invocations(target, draft, k, drafter, threads).items()]
    lines.append(f"{indent}llama-cpp-python: "
                 f"{native.python_snippet(target, draft, k, drafter, threads)}")
    found = measured_paths(target, draft, k, drafter, meta)
    if found is None:
        lines.append(f"{indent}how much of the gain each keeps: cpuspec paths --target "
                     f"{shlex.quote(str(target))}"
                     + (f" --draft {shlex.quote(str(draft))}" if draft else "")
                     + f" -k {k}" + (f" --drafter {drafter}" if drafter != "model" else ""))
        return lines
    from .summary import OVERALL
    row = summarize_paths(found[0]).get(OVERALL, {})
    kept = [f"{p} SD ×raw {row[p]['speedup']:.2f} = {row[p]['over_cpuspec']:.2f} of "
            f"cpuspec's {row['cpuspec']['speedup']:.2f}"
            for p in (LLAMA_CPP, LLAMA_CPP_PYTHON) if p in row and "cpuspec" in row
            and row[p].get("over_cpuspec")]
    if kept:
        lines.append(f"{indent}measured here ({found[1].stem}): " + "; ".join(kept))
    return lines
