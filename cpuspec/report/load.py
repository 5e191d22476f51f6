"""A load run's screen (`cpuspec paths --concurrency`): per concurrency, the plain and SD
servers' aggregate t/s, SD ×raw of throughput and of per-request latency with their
intervals, the latencies, and up to how many requests in flight SD paid."""
from __future__ import annotations

from pathlib import Path

from cpuspec.analysis.load import crossover, summarize_load
from cpuspec.report import screen
from cpuspec.results.store import saved_paths_runs


def speedup_cell_of(st: dict) -> str:
    return screen.speedup(st["speedup"], st["ci"], st["range"])


def verdict_cell(st: dict) -> str:
    return screen.verdict_of(st["ci"], st["range"])


_STOP_WORDS = {"slower": "off from {n} (measured slower)",
               "no difference": "unclear from {n} (its interval spans 1)",
               "range": "no verdict from {n} (fewer than 5 batches)"}


_SHORT = {"slower": "slower", "no difference": "unclear", "range": "no verdict"}


def load_answer(doc: dict) -> str:
    """Up to how many requests in flight SD was measured faster, in the verdict grammar: each
    level faster / slower (an interval from ≥ 5 batches excludes 1), no difference (it spans 1)
    or a range (fewer batches: no verdict). Only the levels that ran are named."""
    levels = summarize_load(doc)
    if not levels:
        return "no verdict: no level finished (rerun cpuspec paths --concurrency ...)"
    c = crossover(levels)
    states = [st for _, st in c["levels"]]
    ran = ", ".join(str(n) for n, _ in c["levels"])
    if all(st == "range" for st in states):
        return (f"no verdict: fewer than 5 batches per level ({ran} in flight); measure 5 or "
                "more (--batches)")
    later = [n for n, st in c["levels"] if c["stop_at"] is not None and n > c["stop_at"]
             and st == "faster"]
    if later:   # a level faster after one that was not: no single crossover
        return ("no clear crossover: " + ", ".join(f"{n} in flight {st}"
                                                    for n, st in c["levels"])
                + "; measure more batches")
    if c["pays_up_to"] is None:
        n, st = c["stop_at"], c["stop_state"]
        if all(x == "slower" for x in states):
            return f"SD was measured slower at every load tried ({ran} in flight): keep it off"
        return {"slower": f"SD was measured slower at {n} in flight: keep it off there",
                "no difference": f"SD made no measurable difference at {n} in flight (its "
                                 "interval spans 1): not worth turning on for this load",
                "range": f"no verdict at {n} in flight: fewer than 5 batches"}[st]
    if c["stop_at"] is None and not doc.get("complete", True):
        return (f"SD pays for up to {c['pays_up_to']} request(s) in flight here; every level "
                "that finished paid (the run stopped before the others)")
    if c["stop_at"] is None:
        return (f"SD pays for up to {c['pays_up_to']} request(s) in flight here; every level "
                "tried paid (try more: --concurrency 1,2,4,8,16)")
    return (f"SD pays for up to {c['pays_up_to']} request(s) in flight here; "
            + _STOP_WORDS[c["stop_state"]].format(n=c["stop_at"]))


def _config(s: dict) -> str:
    """The SD server's configuration: target + draft at k, or the server flags that replaced
    them (a draftless type such as --spec-default, whose k is its own)."""
    if s.get("server_flags"):
        return f"{Path(s['target']).name} with {' '.join(s['server_flags'])}"
    return (f"{Path(s['target']).name} + "
            f"{Path(s['draft']).name if s.get('draft') else 'prompt lookup'}, k = {s['k']}")


def render_load(doc: dict, source: str = "RUN") -> str:
    s = doc["settings"]
    levels = summarize_load(doc)
    head = (f"llama-server under load: {_config(s)}, {s['threads']} threads, "
            f"{s['max_tokens']} tokens; {_batches_said(s, levels)}")
    rows = []
    for lv in levels:
        raw, sd = lv["raw"], lv["sd"]
        rows.append([lv["concurrency"], f"{raw.get('tok_s', 0):.1f}", f"{sd.get('tok_s', 0):.1f}",
                     speedup_cell_of(lv["throughput"]), verdict_cell(lv["throughput"]),
                     speedup_cell_of(lv["latency"]),
                     f"{raw.get('e2e_p99_ms', 0) / 1e3:.1f}→{sd.get('e2e_p99_ms', 0) / 1e3:.1f}",
                     f"{raw.get('ttft_p50_ms', 0) / 1e3:.1f}→{sd.get('ttft_p50_ms', 0) / 1e3:.1f}",
                     lv["same_output"]])
    lines = [*screen.wrap(head), "",
             screen.table(["N", "raw t/s", "SD t/s", "SD ×raw t/s", "measured",
                           "SD ×raw latency", "p99 s", "TTFT s", "same"], rows), ""]
    lines += screen.wrap(load_answer(doc))
    lines += screen.wrap("t/s: every request's tokens over the batch's wall time; latency: raw's "
                         "mean per-request time over SD's (> 1: SD answers sooner); p99 s: the "
                         "requests' end-to-end p99, raw→SD; TTFT: the client's time to the "
                         "first token (queue + prefill), median", "  ")
    if not doc.get("complete", True):
        lines.append("INCOMPLETE: the levels and batches that finished are shown")
    return "\n".join(lines + ["", *screen.more(source, "every request", "report")])


def _batches_said(settings: dict, levels: list[dict]) -> str:
    """How many batches each level ran, and which interval the table holds."""
    if not settings.get("sequential"):
        return (f"{settings['batches']} batches per level, each one unit of the 95 % interval "
                "(*: a range)")
    ran = ", ".join(f"{lv['concurrency']}: {lv['sequential']['units']}/"
                    f"{lv['sequential']['planned']}" for lv in levels if lv.get("sequential"))
    level = next((lv["sequential"]["level"] for lv in levels if lv.get("sequential")), 0.95)
    return (f"each level stopped once its throughput verdict was decided (batches run: {ran}); "
            f"its {100 * level:.1f} % interval keeps 95 % over every look (*: a range)")


def render_load_details(doc: dict) -> str:
    """Every batch of every level: its server, requests, tokens, wall time and t/s, and the
    requests' latencies (the screen's figures come from these)."""
    lines = []
    for level in doc["levels"]:
        lines.append(f"{level['concurrency']} in flight:")
        rows = []
        for b in level["batches"]:
            reqs = b["requests"]
            tokens = sum(r["n_tokens"] for r in reqs)
            rows.append([b["batch"] + 1, b["mode"], len(reqs), tokens, f"{b['wall_s']:.1f}",
                         f"{tokens / b['wall_s']:.1f}",
                         " ".join(f"{r['e2e_s']:.1f}" for r in reqs)])
        lines += [screen.table(["batch", "server", "requests", "tokens", "wall s", "t/s",
                                "each request's e2e s"], rows), ""]
    return "\n".join(lines).rstrip()


def measured_load(target: str, draft: str | None, k: int, meta: dict | None = None,
                  threads: int | None = None, drafter: str = "model", p_min: float = 0.0,
                  server_flags: list[str] | None = None) -> tuple[dict, Path] | None:
    """The newest saved load run of this configuration (target and draft files by name, k,
    drafter, p-min, threads where given), from this machine when `meta` is given; with
    `server_flags`, of the run whose SD server ran those flags on this target (a draftless
    type: its own k, no draft file)."""
    for doc, path in saved_paths_runs(meta, "load"):
        s = doc.get("settings") or {}
        if Path(str(s.get("target"))).name != Path(target).name or \
                (threads is not None and s.get("threads") != threads):
            continue
        if server_flags:
            if list(s.get("server_flags") or []) == list(server_flags):
                return doc, path
            continue
        if s.get("drafter", "model") == drafter and (s.get("p_min") or 0.0) == p_min \
                and (Path(s["draft"]).name if s.get("draft") else None) == \
                (Path(draft).name if draft else None) and s.get("k") == k \
                and not s.get("server_flags"):
            return doc, path
    return None


def load_note(target: str, draft: str | None, k: int, meta: dict | None = None,
              **config) -> str:
    """A few words for the line above a printed llama-server command: what a saved load run
    of this configuration measured, or that the answer is for one request at a time."""
    found = measured_load(target, draft, k, meta, **config)
    if found is None:
        return "1 request at a time"
    levels = summarize_load(found[0])
    if not levels:
        return "1 request at a time (the saved load run has no finished level)"
    c = crossover(levels)
    if c["pays_up_to"]:
        return f"SD paid up to {c['pays_up_to']} in flight" + (
            "" if c["stop_at"] is None else
            f", {_SHORT[c['stop_state']]} from {c['stop_at']}")
    st = c["stop_state"]
    return {"slower": f"SD was slower at {c['stop_at']} in flight here",
            "no difference": f"SD made no difference at {c['stop_at']} in flight here",
            "range": f"no verdict at {c['stop_at']} in flight (fewer than 5 batches)"}[st]


# What two load runs must share to be compared: the server's workload, not its machine.
LOAD_WORKLOAD = (("target file", lambda s: Path(str(s.get("target"))).name),
                 ("draft file", lambda s: Path(s["draft"]).name if s.get("draft") else None),
                 ("k", lambda s: s.get("k")), ("drafter", lambda s: s.get("drafter", "model")),
                 ("p-min", lambda s: s.get("p_min") or 0.0),
                 ("max tokens", lambda s: s.get("max_tokens")),
                 ("prompts", lambda s: s.get("prompts")),
                 ("requests per client", lambda s: s.get("requests_per_client")),
                 ("server flags", lambda s: s.get("server_flags")))


def load_mismatches(runs: list[dict]) -> list[str]:
    """What differs in the workload between load runs (empty when they are comparable)."""
    out = []
    for name, get in LOAD_WORKLOAD:
        values = [str(get(r.get("settings") or {})) for r in runs]
        if len(set(values)) > 1:
            out.append(f"{name}: {' vs '.join(values)}")
    return out
