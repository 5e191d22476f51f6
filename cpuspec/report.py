"""Summaries of a results file (per task, from the statistics in stats.py), and every printer
of them.

Results keep raw samples only (per-token latencies, per-round records); everything here is
computed when reading, so an old results file can be summarised again by newer code. One list of
fields drives the text table, the markdown table and CSV.
"""
from __future__ import annotations

import csv
import io
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .costs import CostModel, cost_model, cost_model_per_round, verdict_line
from .speculative import ROUND_FIELDS
from .stats import (MIN_CI_UNITS, decode_tok_s, e2e_tok_s, percentile, run_e2e_s,
                    speedup_stats)

# 2: end-to-end windows (e2e_s, draft_prefill_s), noise samples per run, "kind" on every file,
#    prefill timings in the cost probe. Files of schema_version 1 are still read (see read_json).
SCHEMA_VERSION = 2
READABLE_SCHEMA_VERSIONS = (1, 2)
OVERALL = "overall"
# Fewer full rounds than this and a (and acceptance) carry a sampling error of several percent.
MIN_ROUNDS_FOR_STABLE_A = 30
# Per-token latency spread (p95 / p50) beyond which a run is called noisy: on a quiet machine,
# decode steps of one model differ by a few percent at most.
NOISY_P95_OVER_P50 = 1.5
class ResultsError(ValueError):
    """A results file cannot be read; the message says why."""


def _rounds(runs: list[dict]) -> list[dict]:
    return [dict(zip(ROUND_FIELDS, r)) for run in runs for r in run.get("rounds", [])]


def _latency_ms(runs: list[dict]) -> dict[str, float]:
    lat = [x for r in runs for x in r["token_latencies_s"]]
    return {f"p{q}": percentile(lat, q) * 1e3 for q in (50, 95, 99)}


def _speedups(raw: list[dict], sd: list[dict], prefix: str) -> dict[str, Any]:
    st = speedup_stats(raw, sd)
    out = {f"{prefix}tok_s": e2e_tok_s(sd), f"{prefix}decode_tok_s": decode_tok_s(sd),
           f"{prefix}speedup": st["speedup"], f"{prefix}speedup_ci": st["ci"],
           f"{prefix}speedup_units": st["units"], f"{prefix}speedup_range": st["range"],
           f"{prefix}significance": st["significance"],
           f"{prefix}decode_speedup": decode_tok_s(sd) / decode_tok_s(raw)
           if raw and sd else float("nan")}
    reps = sorted({r.get("repetition", 0) for r in sd})
    if len(reps) > 1:  # run-to-run spread: the speedup of each repetition over its prompts
        by_rep = [e2e_tok_s([r for r in sd if r.get("repetition", 0) == j])
                  / e2e_tok_s([r for r in raw if r.get("repetition", 0) == j]) for j in reps]
        out[f"{prefix}speedup_by_repetition"] = by_rep
    return out


def predict_from_probe(probe: dict, survival: list[float], k: int, sd: list[dict],
                       parallel: bool = False) -> tuple[float, str] | None:
    """A prediction of the SD run's end-to-end speedup whose costs come from the cost probe
    (measured apart from every generation) and whose acceptance is this run's own (so it tests
    the cost model, not the acceptance: PREDICTED_FROM), applied to the prompts
    and token counts the run had, for the serial or the parallel schedule. None when the probe
    lacks a batch size."""
    from .costs import predict_generation_s, predict_parallel_generation_s
    if str(k + 1) not in probe.get("verify_s", {}):
        return None
    predict = predict_parallel_generation_s if parallel else predict_generation_s
    return _speedup_over_runs(probe, sd, lambda prompt_tokens, n_tokens: predict(
        probe, survival, k, prompt_tokens, n_tokens))


# What each prediction uses, printed and stored beside it.
PREDICTED_FROM = {
    "model": "cost probe + this run's acceptance",
    "variable": "cost probe + this run's rounds replayed",
}


def _speedup_over_runs(probe: dict, sd: list[dict], predict: Callable[[int, int], tuple]
                       ) -> tuple[float, str] | None:
    """Predicted raw ÷ SD seconds summed over the runs' prompts and token counts, and the
    window the probe allows."""
    raw_s = sd_s = 0.0
    for r in sd:
        # a follow-up turn prefills only what its conversation's KV did not hold
        t_raw, t_sd = predict(r["prompt_tokens"] - r.get("reused_prompt_tokens", 0),
                              len(r["tokens"]))
        raw_s, sd_s = raw_s + t_raw, sd_s + t_sd
    window = "end-to-end" if "target_prefill_s" in probe else "decode-only"
    return (raw_s / sd_s, window) if sd_s > 0 else None


def replay_inputs(sd: list[dict]) -> tuple[list[tuple[int, int, int]], float, float]:
    """What predict_rounds_generation_s replays from speculative runs whose drafts per round
    vary: every round but each run's last (max_tokens may have shortened it), the share of
    drafts the draft model made (the hybrid's counts; 1 otherwise) and its catch-up tokens
    per round."""
    rounds = [tuple(dict(zip(ROUND_FIELDS, row))[f] for f in ("k", "n_accepted", "n_emitted"))
              for r in sd for row in r.get("rounds", [])[:-1]]
    stats = [r["drafter_stats"] for r in sd if r.get("drafter_stats")]
    model = sum(s["model_drafts"] for s in stats)
    drafts = model + sum(s["lookup_drafts"] for s in stats)
    share = model / drafts if stats and drafts else 1.0
    catchup = sum(s["model_catchup_tokens"] for s in stats) / max(len(rounds), 1)
    return rounds, share, catchup


def predict_from_rounds(probe: dict, k: int, sd: list[dict]) -> tuple[float, str] | None:
    """The prediction for drafters with a varying number of drafts per round (lookup, hybrid):
    the probe's costs applied to the recorded rounds replayed at k (costs.py)."""
    from .costs import predict_rounds_generation_s
    rounds, share, catchup = replay_inputs(sd)
    if not rounds or any(str(min(j, k) + 1) not in probe.get("verify_s", {})
                         for j, _, _ in rounds):
        return None
    return _speedup_over_runs(probe, sd, lambda prompt_tokens, n_tokens:
                              predict_rounds_generation_s(probe, rounds, k, prompt_tokens,
                                                          n_tokens, share, catchup))


def _draft_s_per_token(sd: list[dict], full: list[dict], k: int, parallel: bool) -> float:
    """The draft's time per drafted token. In the parallel schedule a round's draft_s is only
    the wait for the draft (about 0 when its drafts were ready), so the draft's own time per
    decode on its thread is taken instead (the schedule's ahead_s / ahead_decodes)."""
    if parallel:
        ahead = [r["schedule"] for r in sd if (r.get("schedule") or {}).get("ahead_decodes")]
        if ahead:
            return sum(a["ahead_s"] for a in ahead) / sum(a["ahead_decodes"] for a in ahead)
    return statistics.median(r["draft_s"] / k for r in full)


def summarize_group(runs: list[dict], k: int, probe: dict | None = None,
                    parallel: bool = False, drafter: str = "model") -> dict[str, Any]:
    """Metrics of one task (or of all runs) from its raw and speculative runs."""
    raw = [r for r in runs if r["mode"] == "raw"]
    sd = [r for r in runs if r["mode"] == "static"]
    ad = [r for r in runs if r["mode"] == "adaptive"]
    out: dict[str, Any] = {"n_generations": len(sd) or len(raw), "warnings": []}
    out["raw_tok_s"] = e2e_tok_s(raw) if raw else float("nan")
    out["raw_decode_tok_s"] = decode_tok_s(raw) if raw else float("nan")
    if sd:
        out.update(_speedups(raw, sd, "sd_"))
    else:
        out["sd_tok_s"] = out["sd_speedup"] = float("nan")
    out["raw_latency_ms"] = _latency_ms(raw)
    out["sd_latency_ms"] = _latency_ms(sd)
    out["raw_prompt_wall_s"] = statistics.median([run_e2e_s(r) for r in raw]) \
        if raw else float("nan")
    out["sd_prompt_wall_s"] = statistics.median([run_e2e_s(r) for r in sd]) \
        if sd else float("nan")
    # A model drafts k every round: its full rounds only (rounds shortened by max_tokens or
    # an end token would bias a). Lookup and the hybrid draft what they find, often nothing:
    # every round counts, or a, acceptance and the break-even describe the minority of rounds
    # that drafted k (machine A's lookup run: a = 2.95 over those, 1.54 over all rounds).
    variable = drafter != "model"
    full = _rounds(sd) if variable else [r for r in _rounds(sd) if r["k"] == k]
    drafted = [r for r in full if r["k"] > 0]
    out["n_rounds"] = len(full)
    if drafted:
        acc = [r["n_accepted"] for r in full]
        out["a"] = statistics.fmean(x + 1 for x in acc)
        out["acceptance_pct"] = 100.0 * sum(acc) / sum(r["k"] for r in drafted)
        out["zero_accept_pct"] = 100.0 * sum(1 for r in drafted if r["n_accepted"] == 0) \
            / len(drafted)
        # Position i (1-based) survives when at least i drafts were accepted, among the rounds
        # that drafted at least i (every full round of a model drafter).
        out["per_position_acceptance_pct"] = [
            100.0 * sum(1 for r in drafted if r["n_accepted"] >= i) /
            max(sum(1 for r in drafted if r["k"] >= i), 1) for i in range(1, k + 1)]
        out["accepted_histogram"] = [sum(1 for x in acc if x == j) for j in range(k + 1)]
        if variable:
            out["drafted_rounds_pct"] = 100.0 * len(drafted) / len(full)
            out["mean_drafts_per_round"] = statistics.fmean(r["k"] for r in full)
        overhead = [r["round_s"] - r["draft_s"] - r["verify_s"] for r in full]
        out["python_overhead_ms_per_round"] = statistics.median(overhead) * 1e3
        out["python_overhead_pct"] = 100.0 * sum(overhead) / sum(r["round_s"] for r in full)
        raw_lat = [x for r in raw for x in r["token_latencies_s"]]
        if raw_lat:
            # Accounting, not prediction: the same rounds' own times, a ÷ (1 + α + β).
            t = statistics.median(raw_lat)
            if variable:   # rounds differ in size: means per round, not medians
                cm = cost_model_per_round(
                    k, out["a"], t, statistics.fmean(r["draft_s"] for r in full),
                    statistics.fmean(r["verify_s"] for r in full),
                    statistics.fmean(r["k"] for r in full))
            else:
                cm = cost_model(k, out["a"], t, _draft_s_per_token(sd, full, k, parallel),
                                statistics.median(r["verify_s"] for r in full))
            out["cost"] = cm.to_dict()
        if probe:
            survival = [p / 100.0 for p in out["per_position_acceptance_pct"]]
            # A model drafts k every round; lookup and the hybrid draft what they find.
            pred = predict_from_probe(probe, survival, k, sd, parallel) \
                if drafter == "model" else predict_from_rounds(probe, k, sd)
            if pred:
                out["predicted_speedup"], out["predicted_window"] = pred
                out["predicted_from"] = PREDICTED_FROM["variable" if variable else "model"]
                out["prediction_error_pct"] = 100.0 * (out["sd_speedup"] / pred[0] - 1.0)
    if ad:
        out.update(_speedups(raw, ad, "adaptive_"))
        out["adaptive_vs_static"] = out["adaptive_tok_s"] / out["sd_tok_s"] if sd else None
        out["adaptive_latency_ms"] = _latency_ms(ad)
        ks = [r["k"] for r in _rounds(ad)]
        out["adaptive_k_histogram"] = {str(j): ks.count(j) for j in sorted(set(ks))}
        reasons = [t[3] for r in ad for t in r.get("policy_trace", [])]
        out["adaptive_decisions"] = {why: reasons.count(why) for why in dict.fromkeys(reasons)
                                     if why not in ("on", "off")}
        out["adaptive_speculating_pct"] = 100.0 * sum(1 for j in ks if j > 0) / len(ks) \
            if ks else 0.0
    if 0 < len(full) < MIN_ROUNDS_FOR_STABLE_A:
        out["warnings"].append(f"only {len(full)} full rounds: a and acceptance are rough; "
                               "raise --max-tokens or --repetitions")
    if sd and raw and out.get("sd_speedup_ci") is None:
        out["warnings"].append(f"{out.get('sd_speedup_units', 0)} prompt(s): no 95 % interval "
                               f"below {MIN_CI_UNITS} prompts (repetitions of one prompt are "
                               "one unit); use more prompts")
    lat = out["raw_latency_ms"]
    if raw and lat["p95"] > NOISY_P95_OVER_P50 * lat["p50"]:
        out["warnings"].append(f"noisy machine: raw token latency p95/p50 = "
                               f"{lat['p95'] / lat['p50']:.2f}; close other programs and rerun")
    return out


# Decisions of the adaptive policy that change its state (the others: "on", "off", and "off"
# for costs that rule SD out, repeat every round).
TRANSITIONS = ("switched", "re-entry", "probe")


def policy_events(run: dict) -> list[dict]:
    """The adaptive policy's transitions in one generation: round, k, predicted speedups
    (mean, optimistic bound), reason."""
    return [{"round": i, "k": k, "mean": mean, "bound": bound, "why": why}
            for i, (k, mean, bound, why) in enumerate(run.get("policy_trace", []))
            if why.startswith(TRANSITIONS)]


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


def noise_report(runs: list[dict]) -> dict[str, Any]:
    """Generations measured while other programs were busy, and speed outliers: a run slower
    than half its task's median (same mode). Computed when reading, from the raw samples."""
    from .measure import MIN_JUDGED_WINDOW_S, OUTLIER_FRACTION_OF_MEDIAN, noise_reasons
    flags = []
    other = [r["noise"]["other_cpus"] for r in runs if r.get("noise")]
    pressure = [r["noise"]["cpu_pressure"] for r in runs
                if r.get("noise") and r["noise"].get("cpu_pressure") is not None]
    for r in runs:
        reasons = noise_reasons(r["noise"]) if r.get("noise") else []
        if reasons:
            flags.append({**_flag_id(r), "reason": "; ".join(reasons)})
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["task"], r["mode"]), []).append(r)
    for (task, mode), group in groups.items():
        if len(group) < 3:
            continue
        speeds = [len(r["tokens"]) / run_e2e_s(r) for r in group]
        median = statistics.median(speeds)
        for r, v in zip(group, speeds):
            if v < OUTLIER_FRACTION_OF_MEDIAN * median and run_e2e_s(r) >= MIN_JUDGED_WINDOW_S:
                flags.append({**_flag_id(r), "reason": f"{v:.1f} t/s, under half the "
                              f"{task}/{mode} median {median:.1f} t/s"})
    return {"flags": flags,
            "median_other_cpus": statistics.median(other) if other else None,
            "max_other_cpus": max(other) if other else None,
            "median_cpu_pressure": statistics.median(pressure) if pressure else None,
            "max_cpu_pressure": max(pressure) if pressure else None,
            "prompts": sorted({f["prompt_id"] for f in flags})}


def _flag_id(r: dict) -> dict:
    return {"prompt_id": r["prompt_id"], "repetition": r.get("repetition", 0),
            "mode": r["mode"]}


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


def summarize_audit(audit: list[dict]) -> dict[str, Any]:
    diverged = [a for a in audit if not a["identical"]]
    return {"n": len(audit), "identical": len(audit) - len(diverged),
            "min_margin_at_divergence": min((a["raw_top2_margin"] for a in diverged
                                             if a.get("raw_top2_margin") is not None),
                                            default=None)}


def summarize(results: dict) -> dict[str, Any]:
    k = results["settings"]["k"]
    runs = results["runs"]
    probe = results.get("cost_probe")
    parallel = results["settings"].get("schedule") == "parallel"
    drafter = results["settings"].get("drafter", "model")
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    summary = {t: summarize_group([r for r in runs if r["task"] == t], k, probe, parallel,
                                  drafter) for t in tasks}
    summary[OVERALL] = summarize_group(runs, k, probe, parallel, drafter)
    # The memory roofline beside tokens/s: a one-token decode reads every weight once.
    weight_bytes = (results.get("models", {}).get("target") or {}).get("weight_bytes")
    for t in tasks + [OVERALL]:
        if weight_bytes and math.isfinite(summary[t]["raw_decode_tok_s"]):
            summary[t]["raw_weight_gb_s"] = weight_bytes * summary[t]["raw_decode_tok_s"] / 1e9
        audit = [a for a in results.get("audit", []) if t == OVERALL or a["task"] == t]
        summary[t]["audit"] = summarize_audit([a for a in audit
                                               if a.get("mode", "static") == "static"])
        if any(a.get("mode") == "adaptive" for a in audit):
            summary[t]["adaptive_audit"] = summarize_audit(
                [a for a in audit if a.get("mode") == "adaptive"])
    return summary


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
             n_units: int | None = None) -> str | None:
    """`1.18 [1.13, 1.25]` with an interval; `1.18 (range 1.15–1.20, 2 prompts)` where there
    were too few prompts for one."""
    if value is None or value != value:
        return None
    if ci:
        return f"{value:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"
    if rng:
        return f"{value:.2f} (range {rng[0]:.2f}–{rng[1]:.2f}" + \
            (f", {n_units} prompts)" if n_units else ")")
    return f"{value:.2f}"


def speedup_cell(s: dict, prefix: str = "sd_") -> str | None:
    """A summary's speedup with its interval or, below MIN_CI_UNITS prompts, its range."""
    return _with_ci(s.get(f"{prefix}speedup"), s.get(f"{prefix}speedup_ci"),
                    s.get(f"{prefix}speedup_range"), s.get(f"{prefix}speedup_units"))


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
    Field("adaptive_p99_ms", "adapt p99 ms",
          lambda s: s["adaptive_latency_ms"]["p99"] if "adaptive_latency_ms" in s else None,
          ".1f"),
]
# Text cells that show a value with its interval.
_CI_OF = {"sd_speedup": "sd_speedup_ci", "adaptive_speedup": "adaptive_speedup_ci"}


def table_rows(summary: dict) -> list[dict]:
    """One row per task: every field's value, numbers unformatted (CSV and JSON use these)."""
    return [{f.name: f.get(dict(s, task=task)) for f in FIELDS} for task, s in summary.items()]


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
    from tabulate import tabulate
    fields = _fields(summary, text=True)
    rows = [[_cell(f, r, s) for f in fields]
            for r, s in zip(table_rows(summary), summary.values())]
    return tabulate(rows, headers=[f.header for f in fields], tablefmt=tablefmt,
                    disable_numparse=True)


def csv_text(header: list[str], rows: list[list]) -> str:
    """The one CSV writer (bench, sweep and compare tables): None is an empty cell."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    for r in rows:
        w.writerow(["" if v is None else v for v in r])
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


def render_audit(audit: list[dict]) -> str:
    lines = []
    for a in audit:
        if a["identical"]:
            continue
        margin = a.get("raw_top2_margin")
        lines.append(f"  {a.get('mode', 'static')} {a['prompt_id']} rep {a['repetition']}: first divergence at output "
                     f"token {a['first_divergence']} (raw chose {a['raw_token']!r}, SD chose "
                     f"{a['sd_token']!r}); target top-2 logit margin there "
                     f"{'-' if margin is None else format(margin, '.3f')}")
    return "\n".join(lines)


def read_json(path: Path) -> dict:
    """A results file of any schema this version reads, with its "kind" filled in (schema 1
    bench files had none)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ResultsError(f"cannot read results {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema_version") not in READABLE_SCHEMA_VERSIONS:
        raise ResultsError(f"{path}: not a cpuspec results file of schema_version "
                           + " or ".join(map(str, READABLE_SCHEMA_VERSIONS)))
    if "kind" not in data and "runs" in data:
        data["kind"] = "bench"
    return data


def _check(ok: bool, path: str, field: str, what: str) -> None:
    if not ok:
        raise ResultsError(f"{path}: field {field} is missing or not {what}; the file is damaged "
                           "or was not written by cpuspec bench")


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def validate_bench(results: dict, path: str = "results") -> None:
    """One clear message naming the first missing or malformed field, instead of a KeyError
    deep in a printer."""
    kind = results.get("kind")
    if kind != "bench":
        raise ResultsError(f"{path}: a {kind or 'unknown'} results file, not a bench one"
                           + ("; `cpuspec report` prints sweeps" if kind == "sweep" else ""))
    settings = results.get("settings")
    _check(isinstance(settings, dict), path, "settings", "an object")
    k = settings.get("k")
    _check(isinstance(k, int) and not isinstance(k, bool) and k >= 1, path, "settings.k",
           "an integer ≥ 1")
    runs = results.get("runs")
    _check(isinstance(runs, list), path, "runs", "a list")
    for i, r in enumerate(runs):
        _check(isinstance(r, dict), path, f"runs[{i}]", "an object")
        for f in ("task", "prompt_id", "mode"):
            _check(isinstance(r.get(f), str), path, f"runs[{i}].{f}", "a string")
        for f in ("tokens", "token_latencies_s"):
            _check(isinstance(r.get(f), list), path, f"runs[{i}].{f}", "a list")
        _check(all(_num(x) for x in r["token_latencies_s"]), path,
               f"runs[{i}].token_latencies_s", "a list of numbers")
        for f in ("prefill_s", "decode_s"):
            _check(_num(r.get(f)), path, f"runs[{i}].{f}", "a number")
        _check(isinstance(r.get("rounds", []), list) and all(
            isinstance(x, list) and len(x) == len(ROUND_FIELDS) and all(map(_num, x))
            for x in r.get("rounds", [])), path, f"runs[{i}].rounds",
            f"a list of {len(ROUND_FIELDS)}-number rows")
    audit = results.get("audit", [])
    _check(isinstance(audit, list), path, "audit", "a list")
    for i, a in enumerate(audit):
        _check(isinstance(a, dict) and isinstance(a.get("identical"), bool), path,
               f"audit[{i}].identical", "true or false")
        _check(isinstance(a.get("task"), str), path, f"audit[{i}].task", "a string")
    probe = results.get("cost_probe")
    if probe is not None:
        _check(isinstance(probe, dict) and isinstance(probe.get("verify_s"), dict), path,
               "cost_probe.verify_s", "an object")
        for n in range(1, k + 2):
            _check(_num(probe["verify_s"].get(str(n))), path, f"cost_probe.verify_s.{n}",
                   f"a number (the probe must cover 1..k + 1 = {k + 1} tokens)")
        _check(_num(probe.get("draft_s")), path, "cost_probe.draft_s", "a number")


def choose_k_by_replay(probe: dict, sd: list[dict], k_max: int) -> tuple[int, list]:
    """choose_k for drafters whose drafts per round vary (lookup, hybrid): each k's predicted
    speedup a ÷ (1 + α + β) from the recorded rounds replayed at k (no i.i.d. break-even
    acceptance: their acceptance is not one rate)."""
    from .costs import KChoice, round_terms
    rounds, share, catchup = replay_inputs(sd)
    table = [KChoice(0, 1.0, 1.0, None)]
    for k in range(1, k_max + 1):
        if not rounds:
            break
        a, alpha, beta = round_terms(probe, rounds, k, share, catchup)
        table.append(KChoice(k, a, a / (1.0 + alpha + beta), None))
    best = max(table, key=lambda c: c.predicted_speedup)
    return best.k, table


def advise(results: dict) -> dict[str, dict]:
    """Per task: the best draft length k* from the cost model (0 = turn SD off), with the
    predicted speedup beside the measured one, and the acceptance SD would need.

    Survival P(n_accepted ≥ i) comes from the static rounds at k (valid for every k' ≤ k: greedy
    drafts do not depend on k); costs from the bench's cost probe. For lookup and the hybrid,
    whose drafts per round vary, the recorded rounds are replayed at each k instead."""
    from .costs import beyond_measured, choose_k
    k = results["settings"]["k"]
    probe = results.get("cost_probe")
    if not probe:
        raise ResultsError("this results file has no cost probe (written by an older cpuspec)")
    draft_s = probe["draft_s"]
    verify_s = {int(n): v for n, v in probe["verify_s"].items()}
    drafter = results["settings"].get("drafter", "model")
    out = {}
    for task, s in summarize(results).items():
        if "per_position_acceptance_pct" not in s:
            continue
        survival = [p / 100.0 for p in s["per_position_acceptance_pct"]]
        k_best, table = choose_k(survival, draft_s, verify_s) if drafter == "model" else \
            choose_k_by_replay(probe, [r for r in results["runs"] if r["mode"] == "static"
                                       and (task == OVERALL or r["task"] == task)], k)
        feasible = [c for c in table[1:] if c.break_even_acceptance is not None]
        need = min(feasible, key=lambda c: c.break_even_acceptance) if feasible else None
        out[task] = {
            "verdict": "ON" if k_best > 0 else "OFF", "k_best": k_best,
            "predicted_speedup_best": table[k_best].predicted_speedup,
            "predicted_speedup_at_k": table[k].predicted_speedup if k < len(table) else None,
            "measured_speedup_at_k": s["sd_decode_speedup"],
            "measured_e2e_speedup_at_k": s["sd_speedup"],
            "measured_adaptive_speedup": s.get("adaptive_decode_speedup"),
            "acceptance_pct": s["acceptance_pct"],
            "needed_acceptance_pct": None if need is None else 100 * need.break_even_acceptance,
            "needed_at_k": None if need is None else need.k,
            "c": draft_s / verify_s[1], "beta_at_k": verify_s[k + 1] / verify_s[1] - 1,
            "table": [c.__dict__ for c in table],
            # a break-even acceptance is a rate for k drafts every round; lookup and the hybrid
            # have none, and their verdict rests on a against 1 + α + β instead
            "break_even_computed": drafter == "model"}
        if drafter != "model":
            from .costs import round_terms
            rounds, share, catchup = replay_inputs(
                [r for r in results["runs"] if r["mode"] == "static"
                 and (task == OVERALL or r["task"] == task)])
            if rounds:
                k_terms = k_best or k
                a, alpha, beta = round_terms(probe, rounds, k_terms, share, catchup)
                out[task]["terms"] = {"k": k_terms, "a": a, "alpha": alpha, "beta": beta,
                                      "break_even_a": 1.0 + alpha + beta}
        if drafter == "model":  # the curve past k: where measuring a longer k is worth it
            ahead = beyond_measured(survival, draft_s, verify_s)
            best_ahead = max(ahead, key=lambda c: c.predicted_speedup, default=None)
            out[task]["extrapolated"] = [c.__dict__ for c in ahead]
            out[task]["try_k"] = best_ahead.k if best_ahead and best_ahead.predicted_speedup > \
                1.05 * max(table[k_best].predicted_speedup, 1.0) else None
            out[task]["try_k_predicted"] = best_ahead.predicted_speedup \
                if out[task]["try_k"] else None
        if results["settings"].get("draft_cpus"):  # a core split: both schedules, end to end
            sd = [r for r in results["runs"] if r["mode"] == "static"
                  and (task == OVERALL or r["task"] == task)]
            for name, par in (("serial", False), ("parallel", True)):
                pred = predict_from_probe(probe, survival, k, sd, par)
                out[task][f"predicted_e2e_{name}_at_k"] = pred[0] if pred else None
    return out


def render_advice(advice: dict, k: int) -> str:
    from tabulate import tabulate
    split = any("predicted_e2e_parallel_at_k" in a for a in advice.values())
    rows = []
    for task, a in advice.items():
        if a["verdict"] == "ON":
            verdict = f"ON, k = {a['k_best']}"
        elif not a.get("break_even_computed", True):
            t = a.get("terms")
            verdict = ("OFF: " + (f"a = {t['a']:.2f} < 1 + α + β = {t['break_even_a']:.2f} at "
                                  f"k = {t['k']}; " if t else "")
                       + "break-even acceptance not computed (drafts per round vary)")
        elif a["needed_acceptance_pct"] is None:
            verdict = "OFF: no acceptance is enough at these costs"
        else:
            verdict = (f"OFF: needs ≥ {a['needed_acceptance_pct']:.0f}% acceptance "
                       f"(at k = {a['needed_at_k']})")
        rows.append([task, verdict, fmt_value(a["predicted_speedup_best"], ".2f"),
                     fmt_value(a["predicted_speedup_at_k"], ".2f"),
                     fmt_value(a["measured_speedup_at_k"], ".2f"),
                     fmt_value(a["measured_adaptive_speedup"], ".2f"),
                     fmt_value(a["acceptance_pct"], ".1f")]
                    + ([fmt_value(a.get("predicted_e2e_serial_at_k"), ".2f"),
                        fmt_value(a.get("predicted_e2e_parallel_at_k"), ".2f")] if split else []))
    table = tabulate(rows, headers=["task", "advice", "predicted ×raw at k*",
                                   f"predicted ×raw k={k}", f"measured ×raw k={k}",
                                   "measured adaptive ×raw", "accept %"]
                    + ([f"e2e serial k={k}", f"e2e parallel k={k}"] if split else []),
                    disable_numparse=True)
    hints = [f"{task}: a longer draft may pay more (the verify-cost curve was probed past k = "
             f"{k}): k = {a['try_k']} would give ≈{a['try_k_predicted']:.2f}× if acceptance "
             f"kept falling as it does at k = {k} (extrapolated, not measured); run with -k "
             f"{a['try_k']} to "
             "measure it" for task, a in advice.items() if a.get("try_k")]
    return "\n".join([table, *hints])
