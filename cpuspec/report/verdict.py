"""The first screen of a bench run: per task the verdict and the numbers behind it, one line of
advice per task, and the next command to run. At most ~30 lines of at most 100 columns; the
rest (per-position acceptance, histograms, the audit's divergences, adaptive decisions) is
`--details`."""
from __future__ import annotations

import re
import shlex
import textwrap
from pathlib import Path

from cpuspec.core.commands import SERVER, invocations
from cpuspec.report.tables import fmt_value, speedup_cell
from cpuspec.analysis.stats import MIN_CI_UNITS
from cpuspec.analysis.summary import OVERALL

WIDTH = 100
VERDICT = {"faster": "faster", "slower": "slower", "not significant": "no difference"}


def _verdict(s: dict) -> str:
    """faster / slower / no difference (interval), or the direction of a range."""
    sig = s.get("sd_significance")
    if sig in VERDICT:
        return VERDICT[sig]
    return "too few prompts" if s.get("sd_speedup_range") else "-"


def _speedup(s: dict) -> str:
    """The speedup with its interval, or its range (shorter than report's cell)."""
    rng = s.get("sd_speedup_range")
    if not s.get("sd_speedup_ci") and rng and s.get("sd_speedup") is not None:
        return f"{s['sd_speedup']:.2f} ({rng[0]:.2f}–{rng[1]:.2f})"
    return speedup_cell(s) or "-"


def _p99(s: dict) -> str:
    raw, sd = (s.get(f"{m}_latency_ms", {}).get("p99") for m in ("raw", "sd"))
    return f"{fmt_value(raw, '.0f')} → {fmt_value(sd, '.0f')}"


def _wrap(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, subsequent_indent=indent, break_on_hyphens=False,
                         break_long_words=False)


def verdict_table(summary: dict) -> str:
    rows = []
    for task, s in summary.items():
        cost = s.get("cost") or {}
        a, need = s.get("a"), cost.get("break_even_a")
        against = (f"{a:.2f} {'>' if a > need else '<'} {need:.2f}"
                   if a is not None and need is not None else fmt_value(a, ".2f"))
        audit = s.get("audit") or {}
        rows.append([task, _speedup(s), _verdict(s), against,
                     fmt_value(s.get("acceptance_pct"), ".0f"),
                     fmt_value(s.get("zero_accept_pct"), ".0f"), _p99(s),
                     f"{audit.get('identical', 0)}/{audit.get('n', 0)}"])
    return _table(["task", "SD ×raw [95% CI]", "verdict", "a vs 1+α+β", "acc %", "0-acc %",
                   "p99 ms raw→SD", "same"], rows)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    """Columns as wide as their widest cell, two spaces apart (tabulate pads more)."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    def line(cells):
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(headers), line("-" * w for w in widths), *map(line, rows)])


def _advice_lines(summary: dict, advice: dict | None) -> tuple[list[str], dict[str, int]]:
    """One line per task, and the tasks to turn SD on for, with their k."""
    lines, on = [], {}
    for task, s in summary.items():
        if task == OVERALL and len(summary) > 1:
            continue
        a = (advice or {}).get(task)
        significant_loss = s.get("sd_significance") == "slower"
        if a and a["verdict"] == "ON" and not significant_loss:
            on[task] = a["k_best"]
            lines.append(f"  {task}: turn SD on with k = {a['k_best']} (predicted "
                         f"{a['predicted_speedup_best']:.2f}× raw in the decode window)")
        elif a:
            need = a.get("needed_acceptance_pct")
            why = (f"it needs ≥ {need:.0f} % acceptance at k = {a['needed_at_k']}, measured "
                   f"{a['acceptance_pct']:.0f} %" if need is not None and
                   a.get("break_even_computed") else "no k pays at the measured acceptance")
            lines.append(f"  {task}: turn SD off ({why})")
        elif s.get("sd_significance") == "faster":
            lines.append(f"  {task}: SD pays at the k measured")
        else:
            lines.append(f"  {task}: keep SD off (no gain shown)")
    return lines, on


def _server_lines(results: dict, k: int, tasks: list[str]) -> list[str]:
    """llama-server with the measured configuration, model files by name, wrapped."""
    models, settings = results.get("models") or {}, results["settings"]
    target = (models.get("target") or {}).get("file")
    draft = (models.get("draft") or {}).get("file")
    if not target:
        return []
    argv = invocations(target, draft, k, settings.get("drafter", "model"),
                       settings.get("threads") or 1)[SERVER]
    text = " ".join(shlex.quote(a) for a in argv)
    wrapped = textwrap.wrap(text, WIDTH - 6, break_on_hyphens=False, break_long_words=False)
    return ([f"Next: run it where you serve models ({', '.join(tasks)}; k = {k}):"]
            + [f"  {line} \\" for line in wrapped[:-1]] + [f"  {wrapped[-1]}"])


def _build_flags(info: str | None) -> str | None:
    """llama.cpp's system info, shortened to the CPU features it was built for."""
    if not info:
        return None
    flags = [m for m in re.findall(r"(\w+) = 1", info) if m not in ("LLAMAFILE", "REPACK")]
    return "llama.cpp built for " + " ".join(flags) if flags else None


def render_verdict(results: dict, summary: dict, advice: dict | None,
                   source: str | None = None) -> str:
    """The first screen (see the module's docstring). source: the run's file or id, for the
    commands that read it again."""
    settings = results["settings"]
    n_prompts = len({r["prompt_id"] for r in results["runs"]})
    lines = [f"SD ×raw end to end over {n_prompts} prompts, 95 % t-interval (a range below "
             f"{MIN_CI_UNITS}); SD pays when a > 1 + α + β", "", verdict_table(summary)]
    adaptive = [f"{task} {s['adaptive_speedup']:.2f}" for task, s in summary.items()
                if isinstance(s.get("adaptive_speedup"), float)]
    if adaptive:
        lines += _wrap("Adaptive policy, ×raw (drafts only where it predicts a gain): "
                       + ", ".join(adaptive))
    flags = _build_flags((results.get("meta") or {}).get("llama_system_info"))
    if flags:
        lines += _wrap(flags)
    advice_lines, on = _advice_lines(summary, advice)
    ref = source or "RUN"
    lines += ["", "Advice:", *advice_lines, ""]
    lines += _wrap(f"Details (acceptance by position, histograms, the audit, adaptive "
                   f"decisions): cpuspec report {ref} --details")
    if on:
        k = max(set(on.values()), key=list(on.values()).count)
        lines += _wrap(f"Full paths, llama-cli and llama-cpp-python: cpuspec advise {ref}; "
                       f"measured in those stacks: cpuspec paths -k {k}")
        lines += _server_lines(results, k, [t for t, kk in on.items() if kk == k])
    else:
        lines += _wrap("Next: cpuspec tune (searches other drafts, quants and k for a "
                       "configuration that pays on this machine); meanwhile keep SD off here.")
    depth = results.get("depth")
    if depth:
        lines.insert(2, f"Depth: {depth['requested_tokens']} tokens of context before each "
                        "prompt, held in both KV caches (not timed).")
    if settings.get("draft_window"):
        w = settings["draft_window"]
        lines.insert(2, f"Draft window: the draft read the first {w[0]} and last {w[1]} tokens "
                        "of longer prompts.")
    return "\n".join(lines)


def run_header(results: dict) -> str:
    """Which pair, k, threads and tokens: the line above the verdict."""
    m, s = results.get("models") or {}, results["settings"]
    target = (m.get("target") or {}).get("file") or Path(str(s.get("target_path") or "?")).name
    if s.get("drafter") == "lookup":
        draft = "prompt lookup"
    else:
        draft = (m.get("draft") or {}).get("file") or "?"
        if s.get("drafter") == "hybrid":
            draft += " + prompt lookup"
    line = (f"{target} + {draft}; k = {s['k']}, {s.get('threads')} threads, "
            f"{s.get('max_tokens')} tokens a prompt")
    return "\n".join(_wrap(line))
