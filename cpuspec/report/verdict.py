"""The first screen of a bench run: per task the verdict and the numbers behind it, one line of
advice per task, and the next command to run. At most ~30 lines of at most 100 columns; the
rest (per-position acceptance, histograms, the audit's divergences, adaptive decisions) is
`--details`."""
from __future__ import annotations

from pathlib import Path

from cpuspec.core.commands import SERVER, hub_names, invocations
from cpuspec.report.load import load_note
from cpuspec.report.paths import server_share
from cpuspec.report.screen import WIDTH, command, cut, table as _table, wrap
from cpuspec.report.tables import fmt_value, speedup_cell
from cpuspec.analysis.stats import MIN_CI_UNITS
from cpuspec.analysis.predict import probe_contradicted
from cpuspec.analysis.summary import OVERALL
from cpuspec.results.records import Machine, model_label
from cpuspec.analysis.sequential import PRECISION

TASK_WIDTH = 14   # longer task names (a prompts file's) are cut in the table
VERDICT = {"faster": "faster", "slower": "slower", "not significant": "no difference"}


SEQUENTIAL_VERDICT = {"faster": "faster", "slower": "slower", "no difference": "no difference",
                      "undecided": "undecided", "pooled": "-", "continue": "cut short"}


def _verdict(s: dict) -> str:
    """faster / slower / no difference (interval), or the direction of a range (…*); under the
    sequential design, its state (undecided: the limit reached, the interval spanning 1)."""
    if s.get("sequential"):
        return SEQUENTIAL_VERDICT[s["sequential"]["state"]]
    sig = s.get("sd_significance")
    if sig in VERDICT:
        return VERDICT[sig]
    if s.get("sd_speedup_range"):
        m = measured_verdict(s)
        return m if m.endswith("*") else "mixed*"
    return "-"


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
    return wrap(text, indent)


def same_cell(audit: dict) -> str:
    """'6/15': outputs equal to plain decoding's, of those audited; '+9≈': the others differ
    only where the target's own logits explain it (numeric); 'DEFECT 2': the loop got them
    wrong (summary.summarize_audit)."""
    cell = f"{audit.get('identical', 0)}/{audit.get('n', 0)}"
    if audit.get("defect"):
        return f"{cell} DEFECT {audit['defect']}"
    return f"{cell} +{audit['numeric']}≈" if audit.get("numeric") else cell


def audit_legend(summary: dict) -> list[str]:
    """The line under the table that says what the `same` column's marks mean, where any
    output differs from plain decoding or was replayed: the numbers of the overall row."""
    au = (summary.get(OVERALL) or next(iter(summary.values()), {})).get("audit") or {}
    if not (au.get("numeric") or au.get("defect") or au.get("exact_n")):
        return []
    text = "same: outputs equal to plain decoding's"
    if au.get("numeric"):
        text += (f"; ≈: {au['numeric']} differ only where the target itself ranks two tokens "
                 "the other way in a batch than one at a time (numeric, not the loop: "
                 "docs/method.md#lossless-proven)")
    if au.get("exact_n"):
        text += (f"; SD's own verifies replayed: {au['exact_ok']}/{au['exact_n']} outputs "
                 "reproduced")
    if au.get("defect"):
        text += (f"; DEFECT: {au['defect']} outputs the loop got wrong "
                 "(cpuspec report RUN --details shows where)")
    return _wrap(text)


def verdict_table(summary: dict) -> str:
    rows = []
    for task, s in summary.items():
        cost = s.get("cost") or {}
        a, need = s.get("a"), cost.get("break_even_a")
        against = (f"{a:.2f} {'>' if a > need else '<'} {need:.2f}"
                   if a is not None and need is not None else fmt_value(a, ".2f"))
        audit = s.get("audit") or {}
        name = cut(task, TASK_WIDTH)
        rows.append([name, _speedup(s), _verdict(s), against,
                     fmt_value(s.get("acceptance_pct"), ".0f"),
                     fmt_value(s.get("zero_accept_pct"), ".0f"), _p99(s), same_cell(audit)])
    # the sequential design's interval is its look's level, named in the line above
    ci = "[interval]" if any(s.get("sequential") for s in summary.values()) else "[95% CI]"
    return _table(["task", f"SD ×raw {ci}", "verdict", "a vs 1+α+β", "acc %", "0-acc %",
                   "p99 ms raw→SD", "same"], rows)


def measured_verdict(s: dict, prefix: str = "sd_") -> str:
    """What the run itself shows: faster or slower (an interval that excludes 1), faster* or
    slower* (a range of fewer than MIN_CI_UNITS prompts on one side of 1: a lead, not a
    verdict), or unclear (no difference, a range that straddles 1, or nothing measured)."""
    sig, rng = s.get(f"{prefix}significance"), s.get(f"{prefix}speedup_range")
    if sig in ("faster", "slower"):
        return sig
    if not s.get(f"{prefix}speedup_ci") and rng:
        return "faster*" if rng[0] > 1 else "slower*" if rng[1] < 1 else "unclear"
    return "unclear"


def _number(value) -> float | None:
    """A summary figure, None where it was not measured (the summary stores NaN)."""
    return value if isinstance(value, (int, float)) and value == value else None


def _advice(s: dict, a: dict | None, k: int) -> tuple[str, int | None]:
    """One task's advice, and the k to turn SD on with (None: keep it off). Only an interval
    turns SD on or off, and only at the k this run measured; the cost model (advise) may
    name another k, labelled predicted."""
    if _number(s.get("sd_speedup")) is None:
        return _adaptive_only(s), None
    measured = measured_verdict(s)
    predicted = a["k_best"] if a and a.get("model_verdict", a["verdict"]) == "ON" else None
    if measured == "faster":
        other = (f"; the cost model predicts k = {predicted} pays more"
                 if predicted not in (None, k) else "")
        return f"turn SD on with k = {k} (measured faster at k = {k}{other})", k
    if measured == "slower":
        return f"turn SD off (measured slower at k = {k})", None
    n = s.get("sd_speedup_units") or 0
    if measured in ("faster*", "slower*"):
        return (f"SD looked {measured[:-1]} on {n} prompts (a range, not an interval): "
                f"measure {MIN_CI_UNITS} or more before turning it on or off"), None
    if predicted is not None:
        return (f"SD may pay with k = {predicted} (predicted, not shown by this run: "
                "measure more prompts)"), None
    return "keep SD off (no gain shown)", None


def _adaptive_only(s: dict) -> str:
    """A task with no static SD runs: what the adaptive policy measured, with its verdict."""
    speedup = _number(s.get("adaptive_speedup"))
    if speedup is None:
        return "nothing measured (no SD runs finished)"
    cell = speedup_cell(s, "adaptive_") or f"{speedup:.2f}"
    shown = {"faster": "faster", "slower": "slower", "faster*": "faster on a range",
             "slower*": "slower on a range"}.get(measured_verdict(s, "adaptive_"), "no difference")
    return (f"the adaptive policy measured {cell} ({shown}); static SD not measured, so no "
            "llama.cpp flags: cpuspec bench --policy static gives them")


def _advice_lines(summary: dict, advice: dict | None, k: int
                  ) -> tuple[list[str], dict[str, int]]:
    """The advice, tasks with the same advice on one line, and the tasks to turn SD on for,
    with their k."""
    groups: dict[str, list[str]] = {}
    on = {}
    for task, s in summary.items():
        if task == OVERALL and len(summary) > 1:
            continue
        text, k_on = _advice(s, (advice or {}).get(task), k)
        groups.setdefault(text, []).append(task)
        if k_on is not None:
            on[task] = k_on
    lines = [line for text, tasks in groups.items()
             for line in _wrap(f"  {', '.join(tasks)}: {text}", "    ")]
    return lines, on


def _served(model: dict | None) -> str | None:
    """A model as the serving command names it: its file, or an Ollama model's blob by its
    whole path (its name, sha256-…, says nothing of where it is)."""
    if not isinstance(model, dict):
        return None
    if str(model.get("repo") or "").startswith("ollama:") and model.get("path"):
        return str(model["path"])
    return model.get("file")


def _server_lines(results: dict, k: int, tasks: list[str]) -> list[str]:
    """llama-server with the measured configuration, model files by name, wrapped."""
    models, settings = results.get("models") or {}, results["settings"]
    target, draft = (_served(models.get(role)) for role in ("target", "draft"))
    if not target:
        return []
    argv = invocations(target, draft, k, settings.get("drafter", "model"),
                       settings.get("threads") or 1, p_min=settings.get("p_min") or 0.0,
                       hub=hub_names(models), **_measured_flags(settings))[SERVER]
    note = load_note(target, draft, k, results.get("meta"), threads=settings.get("threads"),
                     drafter=settings.get("drafter", "model"),
                     p_min=settings.get("p_min") or 0.0)
    share = server_share(target, draft, k, settings.get("drafter", "model"),
                         settings.get("threads") or 1, results.get("meta"),
                         settings.get("p_min") or 0.0, results.get("cost_probe"), short=True)
    head = f"Next: serve it ({', '.join(tasks)}; k = {k}; {note}; {share}):"
    return wrap(head, "  ") + command(argv)


def _legend(results: dict, summary: dict, n_prompts: int) -> str:
    """The line above the table: which interval it holds, and under the sequential design where
    each task stopped."""
    if not results["settings"].get("sequential"):
        return (f"SD ×raw end to end, {n_prompts} prompts: 95 % t-interval (*: a range, under "
                f"{MIN_CI_UNITS}); SD pays if a > 1 + α + β")
    stops = [f"{t} {s['sequential']['units']}/{s['sequential']['planned']}"
             for t, s in summary.items() if t != OVERALL and s.get("sequential")]
    level = next((s["sequential"]["level"] for s in summary.values()
                  if "level" in s.get("sequential", {})), 0.95)
    seq = results["settings"]["sequential"]
    ran = max((s["sequential"]["planned"] for t, s in summary.items()
               if t != OVERALL and "planned" in s.get("sequential", {})),
              default=seq.get("max_units"))
    why = (f"the cost probe's ceiling, {seq['ceiling']:.2f}× at best with every draft accepted "
           f"(k = {seq['ceiling_k']}), said before the prompts that no acceptance pays: each "
           f"task ran at most {ran} to confirm it" if "ceiling" in seq else
           "each task stopped once decided")
    if "ceiling" in seq and probe_contradicted(results):
        why += (", but the prompts measured above that probe's ceiling at their k, and the "
                "probe after them agrees with them (the warning below): the first probe was "
                "disturbed")
    precision = seq.get("precision", PRECISION)
    within = "" if precision == PRECISION else \
        f"; 'no difference' once within ±{100 * precision:g} %"
    return "\n".join(_wrap(
        f"SD ×raw end to end; {why} (prompts run: {', '.join(stops)}); "
        f"its {100 * level:.1f} % interval keeps 95 % over every look{within}; SD pays if "
        "a > 1 + α + β"))


def _measured_flags(settings: dict) -> dict:
    """What the run used beyond k and p-min, for the printed commands: n-min, draft threads."""
    return {"n_min": settings.get("n_min") or 0, "draft_threads": settings.get("draft_threads")}


def _band_lines(summary: dict) -> list[str]:
    """The prediction on the first screen, only with its band: SD ×raw predicted from this
    run's acceptance and the cost probes before and after the prompts, per task, and where
    the measurement fell against it. Nothing for runs with one probe."""
    cells = []
    for task, s in summary.items():
        band = s.get("predicted_band")
        if not band or (task == OVERALL and len(summary) > 1):
            continue
        err = s.get("band_error_pct") or 0.0
        where = "measured inside" if err == 0 else f"measured {err:+.0f} %"
        cells.append(f"{task} {band[0]:.2f}–{band[1]:.2f} ({where})")
    if not cells:
        return []
    return _wrap("Predicted from this run's acceptance and the cost probes before and after "
                 "the prompts: " + ", ".join(cells))


def matrix_notice(results: dict) -> str | None:
    """One line where the run's CPU has a matrix engine that its llama.cpp build left off."""
    m = Machine.of(results)
    if m.matrix_used is not False:
        return None
    return (f"NOTE: this CPU has {m.matrix_engine.name} and this llama.cpp build does not use "
            f"it: the verify ran on the vector units. `cpuspec rebuild` (CMAKE_ARGS unset) "
            f"builds llama-cpp-python with it; bench again to see what it changes.")


def render_verdict(results: dict, summary: dict, advice: dict | None,
                   source: str | None = None, warning: str | None = None) -> str:
    """The first screen (see the module's docstring). source: the run's file or id, for the
    commands that read it again; warning: a line printed under the advice (noise)."""
    settings = results["settings"]
    n_prompts = len({r["prompt_id"] for r in results["runs"]})
    lines = [_legend(results, summary, n_prompts), "", verdict_table(summary),
             *audit_legend(summary)]
    adaptive = [f"{task} {s['adaptive_speedup']:.2f}" for task, s in summary.items()
                if _number(s.get("adaptive_speedup")) is not None]
    if adaptive:
        lines += _wrap("Adaptive policy, ×raw (drafts only where it predicts a gain): "
                       + ", ".join(adaptive))
    lines += _band_lines(summary)
    advice_lines, on = _advice_lines(summary, advice, settings["k"])
    ref = source or "RUN"
    unsaved = source is None
    notice = matrix_notice(results)
    lines += ["", "Advice:", *advice_lines, *(_wrap(warning) if warning else []),
              *(_wrap(notice) if notice else []), ""]
    k = max(set(on.values()), key=list(on.values()).count) if on else None
    head = ("More on this run (RUN: a saved run's file or id; this one was not saved, "
            "--no-save):" if unsaved else f"More on this run (RUN = {ref}):")
    lines += [head] if len(head) <= WIDTH else ["More on this run:", f"  RUN = {ref}"]
    lines += _wrap("  cpuspec report RUN --details (everything measured)"
                   + ("; cpuspec advise RUN (llama-cli, llama-cpp-python); cpuspec paths -k "
                      f"{k} (measured in those stacks)" if on else ""), "    ")
    if on:
        lines += _server_lines(results, k, [t for t, kk in on.items() if kk == k])
    elif not settings.get("policies"):
        lines += _wrap("Next: cpuspec bench (without --policy off) measures SD against this raw "
                       "speed.")
    elif any(measured_verdict(v).endswith("*") for t, v in summary.items() if t != OVERALL):
        lines += _wrap("Next: measure 5 or more prompts per task (cpuspec bench "
                       "--prompts-per-task 5) before turning SD on or off.")
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
    target = model_label(m.get("target")) or Path(str(s.get("target_path") or "?")).name
    if s.get("drafter") == "lookup":
        draft = "prompt lookup"
    else:
        draft = model_label(m.get("draft")) or "?"
        if s.get("drafter") == "hybrid":
            draft += " + prompt lookup"
    line = (f"{target} + {draft}; k = {s['k']}, {s.get('threads')} threads, "
            f"{s.get('max_tokens')} tokens a prompt")
    return "\n".join(_wrap(line))
