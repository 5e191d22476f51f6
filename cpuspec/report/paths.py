"""What a run of `cpuspec paths` shows: per task and path, SD ×raw end to end and each path's
share of cpuspec's gain, the round budget that explains the difference, and the command that
runs a measured configuration in the user's own stack (`how_to_run`, which bench's and tune's
reports print too)."""
from __future__ import annotations

import shlex
from pathlib import Path

from cpuspec.core import commands
from cpuspec.results.schema import (CPUSPEC, LLAMA_CPP, LLAMA_CPP_PYTHON, LLAMA_SERVER,
                                    LLAMA_SERVER_CHAT, REDECODE, SERVER_PATHS)
from cpuspec.report import screen
from cpuspec.report.load import load_note
from cpuspec.report.tables import fmt_value, speedup_cell
from cpuspec.analysis.stats import e2e_tok_s, speedup_stats
from cpuspec.results.store import run_id, saved_paths_runs
from cpuspec.analysis.summary import OVERALL

PATH_NOTES = {
    CPUSPEC: "cpuspec's loop (bench)",
    REDECODE: "cpuspec's loop + llama.cpp's draft re-decode of each verify batch",
    LLAMA_CPP_PYTHON: "Llama.create_completion, draft_model=cpuspec.DraftModel",
    LLAMA_CPP: "llama-completion / llama-speculative-simple",
    LLAMA_SERVER: "llama-server over HTTP, plain / with the configuration's flags "
                  "(timed at the client)",
    LLAMA_SERVER_CHAT: "the same servers asked as an OpenAI client asks: /v1/chat/completions, "
                       "the server's template and sampler chain at temperature 0",
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
    timestamps); "other" is the rest of the decode window. llama-server counts its rounds
    (/metrics: verification steps, so rounds with a draft; a step whose draft came out empty,
    as near the answer's end or under p-min, is a plain decode it does not count, and its
    token is spread over the counted rounds) and its generation time, nothing finer."""
    out: dict[str, dict] = {}
    sd = [r for r in doc["runs"] if r["mode"] == "static"]
    for path in doc["settings"]["paths"]:
        runs = [r for r in sd if r["path"] == path]
        budget = _loop_budget(runs) if path in (CPUSPEC, REDECODE) else \
            _native_budget(doc, runs) if path == LLAMA_CPP else \
            _server_budget(runs) if path in SERVER_PATHS else None
        if budget:
            out[path] = budget
    for path, b in out.items():   # generations whose first round kept none of its drafts
        firsts = [r["rounds"][0] for r in sd if r["path"] == path and r.get("rounds")]
        b["first_round_none"] = (f"{sum(1 for a, d in firsts if d and not a)}/{len(firsts)}"
                                 if firsts else None)
    if CPUSPEC in out and REDECODE in out:
        extra = out[REDECODE]["verify_ms"] - out[CPUSPEC]["verify_ms"]
        out[REDECODE]["verify_ms"] -= extra
        out[REDECODE]["redecode_ms"] = extra
    return out


def _loop_budget(runs: list[dict]) -> dict | None:
    runs = [r for r in runs if "verify_s" in r and r["rounds"]]
    n = sum(len(r["rounds"]) for r in runs)
    if not n:
        return None
    draft = sum(r["draft_s"] for r in runs)
    verify = sum(r["verify_s"] for r in runs)
    decode = sum(r["decode_s"] for r in runs)
    return {"rounds": n, "tokens_per_round": sum(a + 1 for r in runs for a, _ in r["rounds"]) / n,
            "draft_ms": 1e3 * draft / n, "verify_ms": 1e3 * verify / n,
            "sampling_ms": None, "other_ms": 1e3 * (decode - draft - verify) / n,
            "round_ms": 1e3 * decode / n}


def _native_budget(doc: dict, runs: list[dict]) -> dict | None:
    raw = {r["prompt_id"]: r for r in doc["runs"]
           if r["path"] == LLAMA_CPP and r["mode"] == "raw"}
    runs = [r for r in runs if r.get("draft_calls") and r.get("prompt_eval_ms")
            is not None and r["prompt_id"] in raw]
    n = sum(r["draft_calls"] for r in runs)
    if not n:
        return None
    verify = sum(r["prompt_eval_ms"] - raw[r["prompt_id"]]["prompt_eval_ms"] for r in runs)
    draft = sum(r["draft_gen_ms"] or 0.0 for r in runs)
    sampling = sum(r["sampling_ms"] or 0.0 for r in runs)
    decode = 1e3 * sum(r["decode_s"] for r in runs)
    return {"rounds": n, "tokens_per_round": sum(r["n_tokens"] for r in runs) / n,
            "draft_ms": draft / n, "verify_ms": verify / n, "redecode_in_verify": True,
            "sampling_ms": sampling / n, "other_ms": (decode - draft - verify - sampling) / n,
            "round_ms": decode / n}


def _server_budget(runs: list[dict]) -> dict | None:
    runs = [r for r in runs if r.get("server_rounds")]
    n = sum(r["server_rounds"] for r in runs)
    if not n:
        return None
    decode = 1e3 * sum(r["decode_s"] for r in runs)
    # the server's first token comes from the prompt's prefill, the rest from its rounds
    return {"rounds": n, "tokens_per_round": sum(max(r["n_tokens"] - 1, 0) for r in runs) / n,
            "draft_ms": None, "verify_ms": None, "sampling_ms": None, "other_ms": None,
            "round_ms": decode / n}


def _ms(value: float | None) -> str:
    """A round budget's share in ms; a difference of noisy totals below zero reads ≈0."""
    return "≈0" if value is not None and value < 0 else fmt_value(value, ".1f")


def render_paths(doc: dict) -> str:
    s = doc["settings"]
    lines = [f"{Path(s['target']).name} + "
             f"{Path(s['draft']).name if s['draft'] else 'no draft model'}, drafter "
             f"{s['drafter']}, k = {s['k']}"
             + (f", p-min {s['p_min']:g}" if s.get("p_min") else "")
             + f", {s['threads']} threads, {s['max_tokens']} tokens; "
             f"end to end (prefills + every token), paired by prompt"]
    lines += _task_tables(summarize_paths(doc))
    lines += _budget_lines(round_budget(doc))
    lines += _native_phase_lines(doc) + _first_token_lines(doc) + _server_lines(doc)
    lines += ["", "paths: " + "; ".join(f"{p}: {PATH_NOTES[p]}" for p in s["paths"])]
    if LLAMA_CPP in s["paths"]:
        lines.append(f"llama.cpp's raw and SD: {s['native_window']}" if s.get("native_window")
                     else "llama.cpp's raw and SD were timed in different windows in this "
                     "recording (raw: llama_perf's timers, no warm-up; SD: wall clock after "
                     "warm-up); re-run `cpuspec paths` for a comparable llama.cpp SD ×raw")
    if not doc.get("complete", True):
        ended = doc.get("ended")
        lines.append(f"FAILED ({ended.removeprefix('failed: ')}): the prompts that finished "
                     "are shown" if isinstance(ended, str) and ended.startswith("failed") else
                     "INTERRUPTED: the prompts that finished are shown")
    info = doc.get("meta", {}).get("llama_system_info")
    if info:
        lines.append(f"llama.cpp: {info}")
    return "\n".join(lines)


def render_paths_screen(doc: dict, source: str = "RUN") -> str:
    """One screen: the configuration, per task and path SD ×raw end to end with its share
    of cpuspec's gain, each path's round (ms and tokens), and the next command."""
    s = doc["settings"]
    head = (f"{Path(s['target']).name} + "
            f"{Path(s['draft']).name if s.get('draft') else 'no draft model'}; drafter "
            f"{s['drafter']}, k = {s['k']}" + (f", p-min {s['p_min']:g}" if s.get("p_min")
                                                 else "")
            + f", {s['threads']} threads, {s['max_tokens']} tokens; SD ×raw end to end, "
            "paired by prompt (95 % interval; *: a range, under 5)")
    lines = screen.wrap(head) + [""]
    summary = summarize_paths(doc)
    tasks = [t for t in summary if t != OVERALL] if len(summary) > 2 else []
    rows = [(t, p, st) for t in [*tasks, OVERALL] if t in summary
            for p, st in summary[t].items()]
    if len(rows) > 24:   # many tasks: the overall rows, the tasks in --details
        rows = [(t, p, st) for t, p, st in rows if t == OVERALL]
    lines.append(screen.table(
        ["task", "path", "raw t/s", "SD t/s", "SD ×raw", "÷ cpuspec", "acc %", "same"],
        [[screen.cut(t, 12), p, fmt_value(st["raw_tok_s"], ".1f"),
          fmt_value(st["sd_tok_s"], ".1f"),
          speedup_cell({"sd_speedup": st["speedup"], "sd_speedup_ci": st["ci"],
                        "sd_speedup_range": st["range"], "sd_speedup_units": st["units"]})
          or "-", fmt_value(st["over_cpuspec"], ".2f"), fmt_value(st["acceptance_pct"], ".0f"),
          st["same_output"]] for t, p, st in rows]))
    budget = round_budget(doc)
    if budget:
        lines += [""] + screen.wrap("A round, ms for tokens: " + "; ".join(
            f"{p} {b['round_ms']:.0f} ms for {b['tokens_per_round']:.2f}"
            for p, b in budget.items()), "  ")
    if not doc.get("complete", True):
        ended = doc.get("ended")
        lines += screen.wrap(f"FAILED ({ended.removeprefix('failed: ')}): the prompts that "
                             "finished are shown" if isinstance(ended, str)
                             and ended.startswith("failed") else
                             "INTERRUPTED: the prompts that finished are shown")
    lines += ["", *screen.more(source, "the round budget, the server's time, llama.cpp's "
                                        "system info")]
    return "\n".join(lines)


def _task_tables(summary: dict) -> list[str]:
    """One table per task: each path's raw and SD t/s, SD ×raw, acceptance, same output."""
    from cpuspec.report.screen import grid

    lines = []
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
        lines += ["", f"{task}:", grid(
            table, headers=["path", "raw t/s", "SD t/s", "SD ×raw [95% CI]", "÷ cpuspec",
                            "accept %", "SD = raw output"], tablefmt="simple",
            disable_numparse=True)]
    return lines


def _budget_lines(budget: dict) -> list[str]:
    """Where an SD round's time goes, per path."""
    from cpuspec.report.screen import grid

    if not budget:
        return []
    lines = ["", "Where an SD round's time goes (ms per round, every SD generation):",
             grid([[p, b["rounds"], fmt_value(b["tokens_per_round"], ".2f"),
                        _ms(b["draft_ms"]), _ms(b["verify_ms"]),
                        "in verify" if b.get("redecode_in_verify") else
                        _ms(b.get("redecode_ms")),
                        _ms(b["sampling_ms"]), _ms(b["other_ms"]),
                        _ms(b["round_ms"]), b["first_round_none"] or "-"]
                       for p, b in budget.items()],
                      headers=["path", "rounds", "tokens/round", "draft", "verify",
                               "draft re-decode", "sampling", "other", "round",
                               "1st round kept 0"],
                      tablefmt="simple", disable_numparse=True),
             "llama.cpp's verify is its target's batch time less the prompt's prefill; "
             "llama.cpp times a decode up to the next synchronize, so it holds the "
             "draft's re-decode of the batch too."]
    if any(v is not None and v < 0 for b in budget.values() for v in b.values()
           if isinstance(v, float)):
        lines.append("≈0: a difference of two measured totals that came out below zero, "
                     "i.e. smaller than their noise")
    return lines


def _native_phase_lines(doc: dict) -> list[str]:
    """llama.cpp's own split of a round, from its debug log."""
    import statistics

    phases = [x for r in doc["runs"] if r["path"] == LLAMA_CPP for x in
              r.get("round_phases_ms") or []]
    if not phases:
        return []
    return [f"llama.cpp's debug log (untimed runs, {len(phases)} rounds), median per "
            f"round: drafting {statistics.median(x[0] for x in phases):.0f} ms, verify + "
            f"the draft's re-decode + sampling "
            f"{statistics.median(x[1] for x in phases):.0f} ms"]


def server_time(doc: dict, path: str = LLAMA_SERVER) -> dict[str, dict]:
    """llama-server's own account of each mode's requests on one server path against the
    client's clock (mean ms per request): its prompt processing, its generation, and the rest
    (HTTP, JSON, the request's queueing and the slot's setup), plus decode-only t/s and what
    the idle server used of the CPU meanwhile."""
    out = {}
    for mode in ("raw", "static"):
        runs = [r for r in doc["runs"] if r["path"] == path and r["mode"] == mode]
        if not runs:
            continue
        n = len(runs)
        prompt = 1e3 * sum(r["prefill_s"] for r in runs) / n
        gen = 1e3 * sum(r["decode_s"] for r in runs) / n
        e2e = 1e3 * sum(r["e2e_s"] for r in runs) / n
        out[mode] = {"requests": n, "e2e_ms": e2e, "prompt_ms": prompt, "predicted_ms": gen,
                     "other_ms": e2e - prompt - gen,
                     # tokens after the first over the generation time; none: not measured
                     "decode_tok_s": (sum(max(r["n_tokens"] - 1, 0) for r in runs)
                                      / sum(r["decode_s"] for r in runs))
                     if sum(r["decode_s"] for r in runs) > 0 else None,
                     "prompt_tokens": sum(r.get("server_prompt_tokens", 0) for r in runs) / n,
                     "idle_server_cpu_s": sum(r.get("idle_server_cpu_s", 0.0) for r in runs)}
    return out


def _server_lines(doc: dict) -> list[str]:
    from cpuspec.report.screen import grid

    times = {path: server_time(doc, path) for path in SERVER_PATHS}
    times = {path: st for path, st in times.items() if st}
    if not times:
        return []
    lines = ["", "llama-server's time per request, mean ms (its timings against the client's "
             "clock; decode t/s: tokens after the first over its generation time):",
             grid([[f"{path} {m}", s["requests"], f"{s['prompt_tokens']:.0f}",
                        _ms(s["prompt_ms"]), _ms(s["predicted_ms"]), _ms(s["other_ms"]),
                        _ms(s["e2e_ms"]), fmt_value(s["decode_tok_s"], ".1f"),
                        f"{s['idle_server_cpu_s']:.2f}"]
                       for path, st in times.items() for m, s in st.items()],
                      headers=["path, mode", "requests", "prompt tokens", "prompt",
                               "generation", "other", "client e2e", "decode t/s",
                               "idle server CPU s"],
                      tablefmt="simple", disable_numparse=True)]
    for path, st in times.items():
        if "raw" in st and "static" in st and st["raw"]["decode_tok_s"] \
                and st["static"]["decode_tok_s"]:
            lines.append(f"{path}, decode only, SD ×raw: "
                         f"{st['static']['decode_tok_s'] / st['raw']['decode_tok_s']:.2f}; "
                         "prompt processing with the draft: "
                         f"{st['static']['prompt_ms'] / max(st['raw']['prompt_ms'], 1e-9):.2f}"
                         "× the plain server's")
    flags = doc["settings"].get("server_flags")
    if flags:
        lines.append("llama-server's SD flags (--server-flags): " + " ".join(flags))
    return lines


def _first_token_lines(doc: dict) -> list[str]:
    """llama-cpp-python's first token with and without draft_model=."""
    first = {mode: [r["first_chunk_s"] for r in doc["runs"] if r["path"] == LLAMA_CPP_PYTHON
                    and r["mode"] == mode and r.get("first_chunk_s") is not None]
             for mode in ("raw", "static")}
    if not (first["raw"] and first["static"]):
        return []
    raw_s, sd_s = (sum(v) / len(v) for v in (first["raw"], first["static"]))
    return ["", f"llama-cpp-python's first token (the prompt's prefill), mean: raw "
                f"{1e3 * raw_s:.0f} ms, with draft_model= {1e3 * sd_s:.0f} ms "
                f"(+{1e3 * (sd_s - raw_s):.0f} ms: it then computes logits for every "
                "prompt row, logits_all)"]


# --- what a saved paths run says about a configuration, printed under tune and advise ---

def server_paths_run(target: str, draft: str | None, drafter: str, threads: int,
                     meta: dict | None = None) -> tuple[dict, Path] | None:
    """The newest saved paths run, from this machine, that measured cpuspec's loop and
    llama-server with these files, drafter and threads at any k, ungated and with the
    configuration's own flags: what prices the server's rounds (analysis/server_k.py)."""
    for doc, path in saved_paths_runs(meta):
        s = doc["settings"]
        if {CPUSPEC, LLAMA_SERVER} <= set(s.get("paths") or ()) and \
                Path(s["target"]).name == Path(target).name and \
                (Path(s["draft"]).name if s.get("draft") else None) == \
                (Path(draft).name if draft else None) and s.get("drafter") == drafter and \
                s.get("threads") == threads and not s.get("p_min") \
                and not s.get("server_flags"):
            return doc, path
    return None


def measured_paths(target: str, draft: str | None, k: int, drafter: str,
                   meta: dict | None = None, p_min: float = 0.0,
                   threads: int | None = None) -> tuple[dict, Path] | None:
    """The newest saved paths run of this configuration (same target and draft files by name,
    k and drafter, p-min, threads, the configuration's own server flags), from this machine
    when `meta` is given (_saved_paths_runs)."""
    for doc, path in saved_paths_runs(meta):
        s = doc["settings"]
        try:
            same = (Path(s["target"]).name == Path(target).name
                    and (threads is None or s.get("threads") == threads)
                    and (Path(s["draft"]).name if s.get("draft") else None)
                    == (Path(draft).name if draft else None)
                    and s["k"] == k and s["drafter"] == drafter
                    and (s.get("p_min") or 0.0) == p_min and not s.get("server_flags"))
        except (KeyError, TypeError):
            continue
        if same:
            return doc, path
    return None


def measured_draftless(target: str, threads: int, meta: dict | None = None
                       ) -> dict[str, list[dict]]:
    """Per task, llama.cpp's draftless drafters as saved paths runs measured them in
    llama-server on this target (runs with --server-flags and no draft model, or of the lookup
    drafter, whose server flags are ngram-simple's) with these threads: the newest run of each
    flag set, with the server's SD ×raw. A damaged saved file is passed over."""
    out: dict[str, list[dict]] = {}
    seen: set[tuple[str, str]] = set()
    for doc, path in saved_paths_runs(meta):
        s = doc["settings"]
        try:
            flags = s.get("server_flags")
            if not flags and s.get("drafter") == "lookup":   # the lookup's own: ngram-simple
                flags = commands.spec_flags(None, s["k"], "lookup")
            if LLAMA_SERVER not in s.get("paths", ()) or not flags \
                    or commands.DRAFT_MODEL_FLAGS & set(map(commands.flag_name, flags)) \
                    or s.get("threads") != threads \
                    or Path(s["target"]).name != Path(target).name:
                continue
            summary = summarize_paths(doc)
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        for task, row in summary.items():
            key = (task, commands.shell(flags))
            if task == OVERALL or LLAMA_SERVER not in row or key in seen:
                continue
            seen.add(key)
            out.setdefault(task, []).append({"flags": key[1], "run": run_id(path),
                                             **row[LLAMA_SERVER]})
    return out


def draftless_lines(target: str, threads: int, meta: dict | None = None,
                    indent: str = "  ") -> list[str]:
    """Whether one llama-server flag (a draftless type: no second model) pays here: per task
    measured, each flag set's SD ×raw in the server; it pays only where its interval lies
    above 1. Where none was measured, the command that measures one."""
    found = measured_draftless(target, threads, meta)
    head = "One flag, no draft model (llama.cpp's draftless types in llama-server):"
    if not found:
        return [head, f"{indent}not measured here yet: cpuspec paths --target "
                f"{shlex.quote(str(target))} --drafter lookup -t {threads} --paths "
                f"cpuspec,{LLAMA_SERVER} --server-flags '--spec-default' --tasks long-edit"]
    lines = [head]
    for task, rows in found.items():
        rows.sort(key=lambda r: -r["speedup"])
        cells = "; ".join(f"{r['flags']} {_server_cell(r)}" for r in rows)
        pays = [r for r in rows if r.get("significance") == "faster"]
        verdict = f"pays: {pays[0]['flags']}" if pays else \
            "none shown to pay (no interval above 1)"
        if pays:   # and with several requests in flight, where a load run measured it
            note = load_note(target, None, 0, meta, threads=threads,
                             server_flags=shlex.split(pays[0]["flags"]))
            verdict += f" ({note})"
        lines.append(f"{indent}{task}: {verdict}; measured {cells}")
    return lines


def _server_cell(r: dict) -> str:
    return speedup_cell({"speedup": r["speedup"], "speedup_ci": r.get("ci"),
                         "speedup_range": r.get("range"), "speedup_units": r.get("units")},
                        "") or "-"


def server_share(target: str, draft: str | None, k: int, drafter: str, threads: int,
                 meta: dict | None = None, p_min: float = 0.0, probe: dict | None = None,
                 short: bool = False) -> str:
    """A few words beside a printed llama-server command: the share of cpuspec's SD ×raw the
    server kept when a saved paths run measured this configuration here (and an OpenAI-style
    client's, where it ran the chat path); else, for a draft model, what it keeps after the
    draft's re-decode of each verify batch, predicted from the cost probe (the sampler and
    HTTP are not in it, and the server's slower plain decoding can lift its share above it);
    else that it is not measured."""
    from cpuspec.analysis.server_k import redecode_share
    found = measured_paths(target, draft, k, drafter, meta, p_min, threads)
    try:
        row = summarize_paths(found[0]).get(OVERALL, {}) if found else {}
    except (KeyError, TypeError, ValueError, ZeroDivisionError):   # a damaged saved run
        row = {}
    kept = {p: row[p]["over_cpuspec"] for p in SERVER_PATHS
            if p in row and CPUSPEC in row and row[p].get("over_cpuspec")}
    if LLAMA_SERVER in kept:
        chat = kept.get(LLAMA_SERVER_CHAT)
        if short:
            return f"llama-server kept {kept[LLAMA_SERVER]:.2f} of this ×raw"
        return (f"llama-server kept {kept[LLAMA_SERVER]:.2f} of cpuspec's ×raw"
                + (f", {chat:.2f} over /v1/chat" if chat else "") + f" in {run_id(found[1])}")
    share = redecode_share(probe, k) if probe and drafter == "model" and draft else None
    if share is not None:
        return (f"llama-server keeps ~{share:.2f} of this ×raw" if short else
                f"llama-server: ~{share:.2f} of cpuspec's decode ×raw, predicted (its draft "
                "re-decodes each batch)")
    return "its share in llama-server unmeasured" if short else \
        "llama-server's share of it: not measured"


def how_to_run(target: str, draft: str | None, k: int, drafter: str, threads: int,
               indent: str = "    ", meta: dict | None = None, p_min: float = 0.0,
               tasks: list[str] | None = None, probe: dict | None = None,
               hub: dict[str, str] | None = None,
               hub_files: dict[str, tuple[str, str]] | None = None) -> list[str]:
    """The lines printed under a recommended SD configuration: the llama.cpp server and CLI
    command lines (by -hf where the run fetched the models by those names: hub), the
    llama-cpp-python call (by from_pretrained where it fetched them from the hub: hub_files),
    and how much of cpuspec's gain each kept when `cpuspec paths` measured it here with the
    same threads (for the advised task where the run measured it, else all its tasks), or the
    command that measures it."""
    lines = [f"{indent}{tool}: {commands.shell(argv)}"
             for tool, argv in commands.invocations(target, draft, k, drafter, threads,
                                                    p_min=p_min, hub=hub).items()]
    lines.append(f"{indent}llama-cpp-python: "
                 f"{commands.python_snippet(target, draft, k, drafter, threads, hub=hub_files)}")
    found = measured_paths(target, draft, k, drafter, meta, p_min, threads)
    named = hub or {}   # cpuspec takes the hub's names as llama.cpp does
    measure = (f"cpuspec paths --target {shlex.quote(str(named.get('target') or target))}"
               + (f" --draft {shlex.quote(str(named.get('draft') or draft))}" if draft else "")
               + f" -k {k} -t {threads}" + (f" --drafter {drafter}" if drafter != "model" else "")
               + (f" --tasks {','.join(tasks)}" if tasks else "")
               + (f" --p-min {p_min:g} --paths cpuspec,llama.cpp,llama-server" if p_min else ""))
    if found is None:
        if probe and draft and drafter == "model":   # the server's share, from the probe
            lines.append(indent + server_share(target, draft, k, drafter, threads, meta,
                                               p_min, probe))
        lines.append(f"{indent}how much of the gain each keeps: {measure}")
        return lines
    summary = summarize_paths(found[0])
    task = tasks[0] if tasks and len(tasks) == 1 and tasks[0] in summary else OVERALL
    row = summary.get(task, {})
    kept = [f"{p} SD ×raw {row[p]['speedup']:.2f} = {row[p]['over_cpuspec']:.2f} of "
            f"cpuspec's {row['cpuspec']['speedup']:.2f}"
            for p in (LLAMA_SERVER, LLAMA_CPP, LLAMA_CPP_PYTHON) if p in row and "cpuspec" in row
            and row[p].get("over_cpuspec")]
    if kept:
        lines.append(f"{indent}measured here ({run_id(found[1])}, "
                     f"{task if task != OVERALL else 'all its tasks'}): " + "; ".join(kept))
    if LLAMA_SERVER not in row:
        lines.append(f"{indent}{commands.SERVER} with these flags, not measured here yet: "
                     + (measure if p_min else f"{measure} --paths cpuspec,{LLAMA_SERVER}"))
    return lines
