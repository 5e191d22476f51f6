"""Every printer of a summary: one list of fields drives the text table, the markdown table,
CSV and JSON rows; the per-task details, the audit, the adaptive trace and the noise warning."""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any, Callable

from cpuspec.core.text import printable
from cpuspec.core.costs import CostModel, verdict_line
from cpuspec.analysis.predict import PREDICTED_FROM
from cpuspec.analysis.stats import raw_by_unit, raw_of
from cpuspec.analysis.summary import OVERALL, policy_events, summarize


@dataclass(frozen=True)
class Field:
    """One column: its machine name (CSV, JSON), its header (text, markdown), how to get it
    from a summary row, its format, and whether text tables show it (an interval's bounds are
    shown inside the speedup's cell; CSV and JSON keep them as numbers)."""
    name: str
    header: str
    get: Callable[[dict], Any]
    fmt: str = ""
    text: bool = True


def _cost(key: str) -> Callable[[dict], Any]:
    return lambda s: s.get("cost", {}).get(key)


def _ci(key: str, i: int) -> Callable[[dict], Any]:
    return lambda s: s[key][i] if s.get(key) else None


def _with_ci(value: Any, ci: list | None, rng: list | None = None,
             n_units: int | None = None, digits: int = 2) -> str | None:
    """`1.18 [1.13, 1.25]` with an interval; `1.18 (range 1.15–1.20, 2 prompts)` where there
    were too few prompts for one. digits: decimals of the speedup (the bounds keep two)."""
    if value is None or value != value:
        return None
    if ci:
        return f"{value:.{digits}f} [{ci[0]:.2f}, {ci[1]:.2f}]"
    if rng:
        return f"{value:.{digits}f} (range {rng[0]:.2f}–{rng[1]:.2f}" + \
            (f", {n_units} prompts)" if n_units else ")")
    return f"{value:.{digits}f}"


def speedup_cell(s: dict, prefix: str = "sd_", digits: int = 2) -> str | None:
    """A summary's speedup with its interval or, below MIN_CI_UNITS prompts, its range."""
    return _with_ci(s.get(f"{prefix}speedup"), s.get(f"{prefix}speedup_ci"),
                    s.get(f"{prefix}speedup_range"), s.get(f"{prefix}speedup_units"), digits)


FIELDS = [
    Field("task", "task", lambda s: s["task"]),
    Field("raw_tok_s", "raw t/s e2e", lambda s: s["raw_tok_s"], ".1f"),
    Field("sd_tok_s", "SD t/s e2e", lambda s: s["sd_tok_s"], ".1f"),
    Field("sd_speedup", "SD ×raw e2e [95% CI]", lambda s: s["sd_speedup"], ".2f"),
    Field("sd_speedup_ci_low", "", _ci("sd_speedup_ci", 0), ".3f", text=False),
    Field("sd_speedup_ci_high", "", _ci("sd_speedup_ci", 1), ".3f", text=False),
    Field("sd_speedup_range_low", "", _ci("sd_speedup_range", 0), ".3f", text=False),
    Field("sd_speedup_range_high", "", _ci("sd_speedup_range", 1), ".3f", text=False),
    Field("sd_speedup_units", "", lambda s: s.get("sd_speedup_units"), text=False),
    Field("sd_significance", "", lambda s: s.get("sd_significance"), text=False),
    Field("predicted_speedup", "predicted", lambda s: s.get("predicted_speedup"), ".2f"),
    Field("prediction_error_pct", "error %", lambda s: s.get("prediction_error_pct"), "+.0f"),
    Field("predicted_from", "", lambda s: s.get("predicted_from"), text=False),
    Field("predicted_band", "band",
          lambda s: f"{s['predicted_band'][0]:.2f}–{s['predicted_band'][1]:.2f}"
          if s.get("predicted_band") else None),
    Field("band_error_pct", "", lambda s: s.get("band_error_pct"), "+.1f", text=False),
    Field("sd_decode_speedup", "decode-only ×raw", lambda s: s.get("sd_decode_speedup"),
          ".2f"),
    Field("a", "a", lambda s: s.get("a"), ".2f"),
    Field("break_even_a", "1+α+β", _cost("break_even_a"), ".2f"),
    Field("acceptance_pct", "accept %", lambda s: s.get("acceptance_pct"), ".1f"),
    Field("zero_accept_pct", "zero-acc %", lambda s: s.get("zero_accept_pct"), ".1f"),
    Field("drafted_rounds_pct", "drafted %", lambda s: s.get("drafted_rounds_pct"), ".0f"),
    Field("c", "c", _cost("c"), ".2f"),
    Field("alpha", "α", _cost("alpha"), ".2f", text=False),
    Field("beta", "β", _cost("beta"), ".2f"),
    Field("raw_p99_ms", "raw p99 ms", lambda s: s["raw_latency_ms"]["p99"], ".1f"),
    Field("sd_p99_ms", "SD p99 ms", lambda s: s["sd_latency_ms"]["p99"], ".1f"),
    Field("lossless", "same output", lambda s: f"{s['audit']['identical']}/{s['audit']['n']}"),
    Field("adaptive_tok_s", "adapt t/s e2e", lambda s: s.get("adaptive_tok_s"), ".1f"),
    Field("adaptive_speedup", "adapt ×raw e2e [95% CI]", lambda s: s.get("adaptive_speedup"),
          ".2f"),
    Field("adaptive_speedup_ci_low", "", _ci("adaptive_speedup_ci", 0), ".3f", text=False),
    Field("adaptive_speedup_ci_high", "", _ci("adaptive_speedup_ci", 1), ".3f", text=False),
    Field("target_prefill_pct", "", lambda s: s.get("target_prefill_pct"), ".1f", text=False),
    Field("shared_sd_speedup", "", lambda s: s.get("shared_sd_speedup"), ".3f", text=False),
    Field("shared_adaptive_speedup", "", lambda s: s.get("shared_adaptive_speedup"), ".3f",
          text=False),
    Field("shared_adaptive_static_speedup", "", lambda s: s.get("shared_adaptive_static_speedup"),
          ".3f", text=False),
    Field("adaptive_p99_ms", "adapt p99 ms",
          lambda s: s["adaptive_latency_ms"]["p99"] if "adaptive_latency_ms" in s else None,
          ".1f"),
]


# Text cells that show a value with its interval.
_CI_OF = {"sd_speedup": "sd_speedup_ci", "adaptive_speedup": "adaptive_speedup_ci"}


def table_rows(summary: dict) -> list[dict]:
    """One row per task: every field's value, numbers unformatted (CSV and JSON use these)."""
    return [{f.name: f.get(dict(s, task=task)) for f in FIELDS} for task, s in summary.items()]


# The metrics of a sweep row: names from FIELDS, so a sweep and a bench share one list of
# fields (header, format) and one definition of each number.
SWEEP_METRICS = ("raw_tok_s", "sd_tok_s", "sd_speedup", "sd_speedup_ci_low",
                 "sd_speedup_ci_high", "sd_speedup_range_low", "sd_speedup_range_high",
                 "sd_speedup_units", "predicted_speedup", "a", "c", "alpha", "beta",
                 "break_even_a", "adaptive_speedup")
# Shown inside the speedup's cell rather than as columns of their own.
IN_SPEEDUP_CELL = ("sd_speedup_ci", "sd_speedup_range", "sd_speedup_units")


def sweep_figures(results: dict) -> dict:
    """A sweep point's overall figures, from its raw runs (computed on read, as for a bench).
    A point of one task is that task (the same runs); under the sequential design its interval
    is then the stopping look's, and `decision` is the design's verdict (a point of several
    tasks: theirs where they agree; its pooled row has no interval: no design covers it)."""
    summary = summarize(results)
    tasks = [t for t in summary if t != OVERALL]
    s = summary[tasks[0]] if len(tasks) == 1 else summary[OVERALL]
    values = table_rows({OVERALL: s})[0]
    states = {summary[t]["sequential"]["state"] for t in tasks if "sequential" in summary[t]}
    state = next(iter(states)) if len(states) == 1 else "differs by task"
    design = {"decision": {"continue": "cut short"}.get(state, state)} if states else {}
    if states and len(tasks) == 1:   # the level of the one interval a point shows
        design["level"] = summary[tasks[0]]["sequential"].get("level")
    cost = s.get("cost", {})
    # where llama.cpp put each model's weights (its load log; files since 2026-12-04)
    placed = {f"{role}_offloaded_bytes": m["offloaded_bytes"]
              for role, m in (results.get("models") or {}).items()
              if isinstance(m, dict) and isinstance(m.get("offloaded_bytes"), int)}
    # the prompts the point ran of those planned: under the sequential design each task of
    # each point stops on its own
    ran = len({(r.get("task"), r.get("prompt_id")) for r in results.get("runs") or []})
    return {m: values[m] for m in SWEEP_METRICS} | placed | {
        "verdict": ("ON" if cost.get("pays") else "OFF") if cost else None,
        "prompts_run": ran, "prompts_planned": _planned(results) or ran} | design


def _planned(results: dict) -> int:
    """The prompts a point planned: each task's, down to the first look where the cost
    probe's ceiling capped it (analysis/sequential.py ceiling_cap)."""
    cap = ((results.get("settings") or {}).get("sequential") or {}).get("max_units")
    tasks: dict[str, int] = {}
    for p in results.get("prompts") or []:
        tasks[p.get("task")] = tasks.get(p.get("task"), 0) + 1
    return sum(min(n, cap or n) for n in tasks.values())


def sweep_rows(doc: dict) -> list[dict]:
    """A sweep's rows with their figures computed from each point's raw runs now, not read from
    what an older file stored beside its coordinates (one file, one answer)."""
    out = []
    for row, results in zip(doc.get("rows") or [], doc.get("points") or []):
        if "skipped" in row or not isinstance(results, dict) or "runs" not in results:
            out.append(row)
        else:
            out.append({**row, **sweep_figures(results)})
    return out


def _fields(summary: dict, text: bool) -> list[Field]:
    """Columns that have a value somewhere (no adaptive columns when it was not run)."""
    rows = table_rows(summary)
    return [f for f in FIELDS if (f.text or not text)
            and any(r[f.name] is not None and r[f.name] == r[f.name] for r in rows)]


def fmt_value(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return format(value, fmt) if fmt else str(value)


def _cell(f: Field, row: dict, s: dict) -> str:
    if f.name in _CI_OF:
        return speedup_cell(s, f.name.removesuffix("speedup")) or "-"
    return fmt_value(row[f.name], f.fmt)


def render_table(summary: dict, tablefmt: str = "simple") -> str:
    from cpuspec.report.screen import grid
    fields = _fields(summary, text=True)
    rows = [[_cell(f, r, s) for f in fields]
            for r, s in zip(table_rows(summary), summary.values())]
    return grid(rows, headers=[f.header for f in fields], tablefmt=tablefmt,
                    disable_numparse=True)


def csv_text(header: list[str], rows: list[list]) -> str:
    """The one CSV writer (bench, sweep and compare tables): None is an empty cell, a text cell
    is cleaned (core.text.printable), lines end in newline alone."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([printable(h) for h in header])
    for r in rows:
        w.writerow(["" if v is None else printable(v) if isinstance(v, str) else v for v in r])
    return buf.getvalue()


def render_csv(summary: dict) -> str:
    fields = _fields(summary, text=False)
    return csv_text([f.name for f in fields],
                    [[r[f.name] for f in fields] for r in table_rows(summary)])


def render_rows_json(summary: dict) -> str:
    """The same rows as CSV, as strict JSON (NaN becomes null)."""
    fields = _fields(summary, text=False)
    return json.dumps([{f.name: json_safe(r[f.name]) for f in fields}
                       for r in table_rows(summary)], indent=1, allow_nan=False)


def json_safe(v: Any) -> Any:
    return None if isinstance(v, float) and v != v else v


def render_details(summary: dict, k: int) -> str:
    """Per task: per-position acceptance, the histogram of accepted counts, audit, verdict,
    the adaptive policy's figures and decisions, warnings."""
    lines = []
    overall = summary.get(OVERALL, {})
    if "raw_weight_gb_s" in overall:
        lines.append(f"raw decode reads the target's weights at {overall['raw_weight_gb_s']:.1f} "
                     f"GB/s ({overall['raw_decode_tok_s']:.1f} decodes/s, decode-only): a "
                     "one-token decode is bound by memory bandwidth, a verify of n tokens "
                     "reads the same bytes once")
    for task, s in summary.items():
        if "a" in s:
            lines += _static_details(task, s, k)
        if "adaptive_tok_s" in s:
            lines += _adaptive_details(task, s, k)
        if s.get("target_prefill_pct", 0.0) >= SHARED_PREFILL_SHOW_PCT:
            lines += _prefill_shared_details(task, s)
        lines += [f"[{task}] WARNING: {w}" for w in s["warnings"]]
    return "\n".join(lines)


def _static_details(task: str, s: dict, k: int) -> list[str]:
    pos = " ".join(f"{p:.0f}%" for p in s["per_position_acceptance_pct"])
    hist = " ".join(f"{j}:{n}" for j, n in enumerate(s["accepted_histogram"]))
    au = s["audit"]
    lines = [f"[{task}] rounds {s['n_rounds']}; acceptance by draft position 1..{k}: "
             f"{pos}; accepted-count histogram {hist}; Python overhead "
             f"{s['python_overhead_ms_per_round']:.2f} ms/round "
             f"({s['python_overhead_pct']:.1f}%); median wall time per prompt: raw "
             f"{s['raw_prompt_wall_s']:.2f} s, SD {s['sd_prompt_wall_s']:.2f} s; "
             f"p50/p95/p99 ms per token: raw "
             + "/".join(f"{v:.0f}" for v in s["raw_latency_ms"].values()) + ", SD "
             + "/".join(f"{v:.0f}" for v in s["sd_latency_ms"].values())]
    if au["n"] == 0:
        lines.append(f"[{task}] lossless audit: none token for token (sampling is lossless "
                     "in distribution only; tests/test_sampling.py checks that)")
    else:
        lines.append(f"[{task}] lossless audit: {au['identical']}/{au['n']} outputs "
                     "identical to target-only decoding"
                     + (f", {au['numeric']} numeric, {au['defect']} defects"
                        if au.get("numeric") is not None else "")
                     + (f"; exact replay {au['exact_ok']}/{au['exact_n']}"
                        if au.get("exact_n") else "")
                     + (f"; smallest top-2 logit margin at a divergence "
                        f"{au['min_margin_at_divergence']:.3f}"
                        if au["min_margin_at_divergence"] is not None else ""))
    lines.append(f"[{task}] end-to-end SD ×raw "
                 f"{speedup_cell(s)}"
                 + (f" ({s['sd_significance']})" if s.get("sd_significance") else "")
                 + f"; decode-only {s['sd_decode_speedup']:.2f}×"
                 + ("; by repetition " + " ".join(f"{v:.2f}" for v in
                                                  s["sd_speedup_by_repetition"])
                    if s.get("sd_speedup_by_repetition") else ""))
    if "predicted_speedup" in s:
        lines.append(f"[{task}] predicted from the "
                     f"{s.get('predicted_from', PREDICTED_FROM['model'])}: "
                     f"{s['predicted_speedup']:.2f}× ({s['predicted_window']}); measured "
                     f"{s['sd_speedup']:.2f}×, error {s['prediction_error_pct']:+.0f}%")
    if "drafted_rounds_pct" in s:
        lines.append(f"[{task}] drafts per round vary: {s['drafted_rounds_pct']:.0f}% of "
                     f"{s['n_rounds']} rounds drafted, {s['mean_drafts_per_round']:.2f} drafts "
                     "per round; a, acceptance and 1 + α + β are over every round")
    if "cost" in s:
        lines.append(verdict_line(task, CostModel(**s["cost"]))
                     + (" (accounting: this run's own round means)" if "drafted_rounds_pct"
                        in s else " (accounting: this run's own round medians)"))
    return lines


def _adaptive_details(task: str, s: dict, k: int) -> list[str]:
    vs_static = (f", {s['adaptive_vs_static']:.2f}× static k = {k}"
                 if s.get("adaptive_vs_static") else "")
    lines = [f"[{task}] adaptive: "
             f"{speedup_cell(s, 'adaptive_')}× raw "
             f"end-to-end{vs_static}; speculating in "
             f"{s['adaptive_speculating_pct']:.0f}% of rounds (k chosen: "
             + " ".join(f"{j}:{n}" for j, n in s["adaptive_k_histogram"].items())
             + f"); p99 {s['adaptive_latency_ms']['p99']:.1f} ms vs raw "
             f"{s['raw_latency_ms']['p99']:.1f} ms"]
    if s.get("adaptive_decisions"):
        lines.append(f"[{task}] adaptive decisions: " + "; ".join(
            f"{why} ×{n}" for why, n in s["adaptive_decisions"].items()))
    return lines


# Where the target's prefill is at least this share of raw's end-to-end window (long inputs),
# the details add the ratios with it shared between modes (stats.share_target_prefill); and a
# mode whose prefill timing averages more than SHARED_PREFILL_BIAS off its prompts' mean gets
# a warning, for sharing would hide a real difference if it recurs.
SHARED_PREFILL_SHOW_PCT = 25.0
SHARED_PREFILL_BIAS = 0.05


def _prefill_shared_details(task: str, s: dict) -> list[str]:
    by_mode = s["target_prefill_by_mode"]
    cells = [f"{label} {speedup_cell(s, prefix)}" for label, prefix in
             (("SD ×raw", "shared_sd_"), ("adaptive ×raw", "shared_adaptive_"),
              ("adaptive ÷ static", "shared_adaptive_static_")) if f"{prefix}speedup" in s]
    lines = [f"[{task}] target prefill: {s['target_prefill_pct']:.0f}% of raw's end-to-end "
             "window, the same work in every mode; each mode's timing against its prompts' "
             "mean: " + ", ".join(f"{m} {v:.2f}" for m, v in by_mode.items())
             + ". With it shared between modes, end to end: " + "; ".join(cells)
             + " (the measured figures stay the headline)"]
    lines += [f"[{task}] WARNING: {m}'s target prefill ran {100 * (v - 1):+.0f}% off its "
              "prompts' mean over the modes: if that recurs in other runs it is a real "
              "difference between modes, and the shared figures hide it"
              for m, v in by_mode.items() if abs(v - 1.0) > SHARED_PREFILL_BIAS]
    return lines


def render_drift(d: dict | None) -> str:
    """What "lossless" means on this machine: the target's batched-vs-one-token logits."""
    if not d:
        return ""
    from cpuspec.report.screen import wrap
    return "\n".join(wrap(
                f"Logit drift, this target on this build: the same prefix as a row of a "
                f"{d['batch']}-token batch against one token at a time, {d['positions']} "
                f"positions of plain decoding's own text: largest |Δlogit| per position "
                f"median {d['max_dlogit_median']:.3f}, max {d['max_dlogit_max']:.3f}; argmax "
                f"flips {d['flips_per_1k']:.1f} per 1,000 positions; total variation at "
                f"T = {d['temperature']:g} mean {d['tv_mean']:.4f}, max {d['tv_max']:.4f} "
                f"({d['seconds']:.1f} s to measure)"))


def render_audit(audit: list[dict]) -> str:
    """Each output that differs from plain decoding, or whose exact replay disagreed: where,
    both tokens, and (where classified) both tokens' logits on the one-token and the batched
    path, numeric or DEFECT and where the flip came from."""
    lines = []
    for a in audit:
        exact = a.get("exact") if isinstance(a.get("exact"), dict) else None
        head = f"  {a.get('mode', 'static')} {a['prompt_id']} rep {a['repetition']}: "
        if exact and not exact.get("ok"):
            lines.append(head + f"DEFECT: SD's own verifies replayed give token "
                         f"{exact.get('replayed')!r} at output {exact.get('position')} (round "
                         f"{exact.get('round')}), where SD emitted {exact.get('expected')!r}")
        if a["identical"]:
            continue
        margin = a.get("raw_top2_margin")
        line = (head + f"first divergence at output token {a['first_divergence']} (raw chose "
                f"{a.get('raw_token')!r}, SD chose {a.get('sd_token')!r}); target top-2 logit "
                f"margin there {'-' if margin is None else format(margin, '.3f')}")
        d = a.get("divergence") or {}
        if d.get("one_token") and d.get("batched"):
            o, b = d["one_token"], d["batched"]
            kind = "DEFECT" if d["kind"] == "defect" else d["kind"]
            line += (f"; logits raw/SD one token at a time {o['raw']:.3f}/{o['sd']:.3f}, in "
                     f"SD's batch {b['raw']:.3f}/{b['sd']:.3f}: {kind} ({d.get('drift')})")
        elif d.get("kind"):
            line += f"; {d['kind'].upper()}: {d.get('why')}"
        lines.append(line)
    return "\n".join(lines)


def render_trace(runs: list[dict]) -> str:
    """`cpuspec report --trace`: per adaptive generation, where the policy changed its mind."""
    lines = []
    for r in runs:
        if r["mode"] != "adaptive" or "policy_trace" not in r:
            continue
        trace = r["policy_trace"]
        drafted = sum(1 for t in trace if t[0] > 0)
        events = "; ".join(f"round {e['round']}: {e['why']} (k {e['k']}, predicted ×{e['mean']}"
                           f", bound ×{e['bound']})" for e in policy_events(r)) or \
            f"no change ({trace[0][3] if trace else 'no rounds'})"
        lines.append(f"{r['prompt_id']} rep {r.get('repetition', 0)}: {len(trace)} rounds, "
                     f"{drafted} drafted; {events}")
    return "\n".join(lines) or "no adaptive runs with a decision trace in this file"


def render_noise(report: dict) -> str:
    """The end-of-run warning: which prompts were disturbed, and what to do. Empty when quiet."""
    if not report["flags"]:
        return ""
    lines = [f"WARNING: noisy measurements in {len(report['prompts'])} prompt(s): "
             + ", ".join(report["prompts"]) + "."]
    lines += [f"  {f['prompt_id']} rep {f['repetition']} {f['mode']}: {f['reason']}"
              for f in report["flags"]]
    lines.append("  Their speedups are not trustworthy. Close other programs (see `top`), pin "
                 "cores (--p-cores), and rerun with --repetitions 3, or --max-noise 0.1 to "
                 "measure disturbed prompts again.")
    return "\n".join(lines)


PER_PROMPT_HEADERS = ["prompt", "rep", "mode", "prompt tokens", "target prefill s",
                      "draft prefill s", "decode s", "e2e s", "rounds drafting",
                      "raw e2e ÷ this"]


def per_prompt_rows(results: dict, tasks: list[str] | None = None) -> list[list]:
    """Every generation, one row: where its end-to-end time went (the target's prefill, the
    draft's prefill, the decode), how many rounds drafted, and its speed against the raw
    mode's on the same prompt (raw seconds ÷ its seconds, both end to end): for finding which
    prompt and which phase moved a task's ratio (`cpuspec report RUN --per-prompt`)."""
    raw = raw_by_unit(results["runs"])
    out = []
    for r in results["runs"]:
        if tasks and r["task"] not in tasks:
            continue
        base = raw_of(raw, r)
        out.append([r["prompt_id"], r.get("repetition", 0), r["mode"], r["prompt_tokens"],
                    f"{r['prefill_s']:.2f}", f"{r.get('draft_prefill_s') or 0.0:.2f}",
                    f"{r['decode_s']:.2f}", f"{r['e2e_s']:.2f}",
                    sum(1 for row in r.get("rounds", []) if row[0] > 0),
                    f"{base['e2e_s'] / r['e2e_s']:.2f}×" if base else "—"])
    return out
