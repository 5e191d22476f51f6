"""Statistics from raw samples, and every printer of them.

Results keep raw samples only (per-token latencies, per-round records); everything here is
computed when reading, so an old results file can be summarised again by newer code. One list of
fields drives the text table, the markdown table and CSV.
"""
from __future__ import annotations

import csv
import io
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .costs import CostModel, cost_model, verdict_line

SCHEMA_VERSION = 1
OVERALL = "overall"
# Fewer full rounds than this and a (and acceptance) carry a sampling error of several percent.
MIN_ROUNDS_FOR_STABLE_A = 30
# Per-token latency spread (p95 / p50) beyond which a run is called noisy: on a quiet machine,
# decode steps of one model differ by a few percent at most.
NOISY_P95_OVER_P50 = 1.5

ROUND_FIELDS = ("k", "n_accepted", "n_emitted", "draft_s", "verify_s", "round_s")


class ResultsError(ValueError):
    """A results file cannot be read; the message says why."""


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def _rounds(runs: list[dict]) -> list[dict]:
    return [dict(zip(ROUND_FIELDS, r)) for run in runs for r in run.get("rounds", [])]


def _tok_per_s(runs: list[dict]) -> float:
    tokens = sum(len(r["token_latencies_s"]) for r in runs)
    seconds = sum(r["decode_s"] for r in runs)
    return tokens / seconds if seconds > 0 else float("nan")


def _latency_ms(runs: list[dict]) -> dict[str, float]:
    lat = [x for r in runs for x in r["token_latencies_s"]]
    return {f"p{q}": percentile(lat, q) * 1e3 for q in (50, 95, 99)}


def summarize_group(runs: list[dict], k: int) -> dict[str, Any]:
    """Metrics of one task (or of all runs) from its raw and speculative runs."""
    raw = [r for r in runs if r["mode"] == "raw"]
    sd = [r for r in runs if r["mode"] == "static"]
    ad = [r for r in runs if r["mode"] == "adaptive"]
    out: dict[str, Any] = {"n_generations": len(sd) or len(raw), "warnings": []}
    out["raw_tok_s"] = _tok_per_s(raw) if raw else float("nan")
    out["sd_tok_s"] = _tok_per_s(sd) if sd else float("nan")
    out["measured_speedup"] = out["sd_tok_s"] / out["raw_tok_s"] if raw and sd else float("nan")
    out["raw_latency_ms"] = _latency_ms(raw)
    out["sd_latency_ms"] = _latency_ms(sd)
    out["raw_prompt_wall_s"] = statistics.median([r["prefill_s"] + r["decode_s"] for r in raw]) \
        if raw else float("nan")
    out["sd_prompt_wall_s"] = statistics.median([r["prefill_s"] + r["decode_s"] for r in sd]) \
        if sd else float("nan")
    # Full rounds only (k drafted): rounds shortened by max_tokens or an end token would bias a.
    full = [r for r in _rounds(sd) if r["k"] == k]
    out["n_rounds"] = len(full)
    if full:
        acc = [r["n_accepted"] for r in full]
        out["a"] = statistics.fmean(r["n_accepted"] + 1 for r in full)
        out["acceptance_pct"] = 100.0 * sum(acc) / (k * len(full))
        out["zero_accept_pct"] = 100.0 * sum(1 for x in acc if x == 0) / len(full)
        # Position i (1-based) survives when at least i drafts were accepted.
        out["per_position_acceptance_pct"] = [100.0 * sum(1 for x in acc if x >= i) / len(full)
                                              for i in range(1, k + 1)]
        out["accepted_histogram"] = [sum(1 for x in acc if x == j) for j in range(k + 1)]
        overhead = [r["round_s"] - r["draft_s"] - r["verify_s"] for r in full]
        out["python_overhead_ms_per_round"] = statistics.median(overhead) * 1e3
        out["python_overhead_pct"] = 100.0 * sum(overhead) / sum(r["round_s"] for r in full)
        raw_lat = [x for r in raw for x in r["token_latencies_s"]]
        if raw_lat:
            cm = cost_model(k, out["a"], statistics.median(raw_lat),
                            statistics.median(r["draft_s"] / k for r in full),
                            statistics.median(r["verify_s"] for r in full))
            out["cost"] = cm.to_dict()
    if ad:
        out["adaptive_tok_s"] = _tok_per_s(ad)
        out["adaptive_speedup"] = out["adaptive_tok_s"] / out["raw_tok_s"] if raw else None
        out["adaptive_vs_static"] = out["adaptive_tok_s"] / out["sd_tok_s"] if sd else None
        out["adaptive_latency_ms"] = _latency_ms(ad)
        ks = [r["k"] for r in _rounds(ad)]
        out["adaptive_k_histogram"] = {str(j): ks.count(j) for j in sorted(set(ks))}
        out["adaptive_speculating_pct"] = 100.0 * sum(1 for j in ks if j > 0) / len(ks) \
            if ks else 0.0
    if 0 < len(full) < MIN_ROUNDS_FOR_STABLE_A:
        out["warnings"].append(f"only {len(full)} full rounds: a and acceptance are rough; "
                               "raise --max-tokens or --repetitions")
    lat = out["raw_latency_ms"]
    if raw and lat["p95"] > NOISY_P95_OVER_P50 * lat["p50"]:
        out["warnings"].append(f"noisy machine: raw token latency p95/p50 = "
                               f"{lat['p95'] / lat['p50']:.2f}; close other programs and rerun")
    return out


def summarize_audit(audit: list[dict]) -> dict[str, Any]:
    diverged = [a for a in audit if not a["identical"]]
    return {"n": len(audit), "identical": len(audit) - len(diverged),
            "min_margin_at_divergence": min((a["raw_top2_margin"] for a in diverged
                                             if a.get("raw_top2_margin") is not None),
                                            default=None)}


def summarize(results: dict) -> dict[str, Any]:
    k = results["settings"]["k"]
    runs = results["runs"]
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    summary = {t: summarize_group([r for r in runs if r["task"] == t], k) for t in tasks}
    summary[OVERALL] = summarize_group(runs, k)
    for t in tasks + [OVERALL]:
        audit = [a for a in results.get("audit", []) if t == OVERALL or a["task"] == t]
        summary[t]["audit"] = summarize_audit([a for a in audit
                                               if a.get("mode", "static") == "static"])
        if any(a.get("mode") == "adaptive" for a in audit):
            summary[t]["adaptive_audit"] = summarize_audit(
                [a for a in audit if a.get("mode") == "adaptive"])
    return summary


@dataclass(frozen=True)
class Field:
    name: str
    header: str
    get: Callable[[dict], Any]
    fmt: str = ""


def _cost(key: str) -> Callable[[dict], Any]:
    return lambda s: s.get("cost", {}).get(key)


FIELDS = [
    Field("task", "task", lambda s: s["task"]),
    Field("raw_tok_s", "raw t/s", lambda s: s["raw_tok_s"], ".1f"),
    Field("sd_tok_s", "SD t/s", lambda s: s["sd_tok_s"], ".1f"),
    Field("measured_speedup", "speedup", lambda s: s["measured_speedup"], ".2f"),
    Field("predicted_speedup", "predicted", _cost("predicted_speedup"), ".2f"),
    Field("a", "a", lambda s: s.get("a"), ".2f"),
    Field("break_even_a", "1+α+β", _cost("break_even_a"), ".2f"),
    Field("acceptance_pct", "accept %", lambda s: s.get("acceptance_pct"), ".1f"),
    Field("zero_accept_pct", "zero-acc %", lambda s: s.get("zero_accept_pct"), ".1f"),
    Field("c", "c", _cost("c"), ".2f"),
    Field("beta", "β", _cost("beta"), ".2f"),
    Field("raw_p99_ms", "raw p99 ms", lambda s: s["raw_latency_ms"]["p99"], ".1f"),
    Field("sd_p99_ms", "SD p99 ms", lambda s: s["sd_latency_ms"]["p99"], ".1f"),
    Field("lossless", "same output", lambda s: f"{s['audit']['identical']}/{s['audit']['n']}"),
    Field("adaptive_tok_s", "adapt t/s", lambda s: s.get("adaptive_tok_s"), ".1f"),
    Field("adaptive_speedup", "adapt ×raw", lambda s: s.get("adaptive_speedup"), ".2f"),
    Field("adaptive_p99_ms", "adapt p99 ms",
          lambda s: s["adaptive_latency_ms"]["p99"] if "adaptive_latency_ms" in s else None,
          ".1f"),
]


def table_rows(summary: dict) -> list[dict]:
    return [{f.name: f.get(dict(s, task=task)) for f in FIELDS} for task, s in summary.items()]


def _fields(summary: dict) -> list[Field]:
    """Columns that have a value somewhere (no adaptive columns when it was not run)."""
    rows = table_rows(summary)
    return [f for f in FIELDS if any(r[f.name] is not None for r in rows)]


def _fmt(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return format(value, fmt) if fmt else str(value)


def render_table(summary: dict, tablefmt: str = "simple") -> str:
    from tabulate import tabulate
    fields = _fields(summary)
    rows = [[_fmt(r[f.name], f.fmt) for f in fields] for r in table_rows(summary)]
    return tabulate(rows, headers=[f.header for f in fields], tablefmt=tablefmt,
                    disable_numparse=True)


def render_csv(summary: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    fields = _fields(summary)
    w.writerow([f.name for f in fields])
    for r in table_rows(summary):
        w.writerow(["" if r[f.name] is None else r[f.name] for f in fields])
    return buf.getvalue()


def render_details(summary: dict, k: int) -> str:
    """Per task: per-position acceptance, the histogram of accepted counts, audit, verdict."""
    lines = []
    for task, s in summary.items():
        if "a" not in s:
            continue
        pos = " ".join(f"{p:.0f}%" for p in s["per_position_acceptance_pct"])
        hist = " ".join(f"{j}:{n}" for j, n in enumerate(s["accepted_histogram"]))
        au = s["audit"]
        lines.append(f"[{task}] rounds {s['n_rounds']}; acceptance by draft position 1..{k}: "
                     f"{pos}; accepted-count histogram {hist}; Python overhead "
                     f"{s['python_overhead_ms_per_round']:.2f} ms/round "
                     f"({s['python_overhead_pct']:.1f}%); median wall time per prompt: raw "
                     f"{s['raw_prompt_wall_s']:.2f} s, SD {s['sd_prompt_wall_s']:.2f} s; "
                     f"p50/p95/p99 ms per token: raw "
                     + "/".join(f"{v:.0f}" for v in s["raw_latency_ms"].values()) + ", SD "
                     + "/".join(f"{v:.0f}" for v in s["sd_latency_ms"].values()))
        if au["n"] == 0:
            lines.append(f"[{task}] lossless audit: none token for token (sampling is lossless "
                         "in distribution only; tests/test_sampling.py checks that)")
        else:
            lines.append(f"[{task}] lossless audit: {au['identical']}/{au['n']} outputs "
                         "identical to target-only decoding"
                         + (f"; smallest top-2 logit margin at a divergence "
                            f"{au['min_margin_at_divergence']:.3f}"
                            if au["min_margin_at_divergence"] is not None else ""))
        if "cost" in s:
            cm = CostModel(**s["cost"])
            lines.append(verdict_line(task, cm, s["measured_speedup"]))
        if "adaptive_tok_s" in s:
            lines.append(f"[{task}] adaptive: {s['adaptive_speedup']:.2f}× raw, "
                         f"{s['adaptive_vs_static']:.2f}× static k = {k}; speculating in "
                         f"{s['adaptive_speculating_pct']:.0f}% of rounds (k chosen: "
                         + " ".join(f"{j}:{n}" for j, n in s["adaptive_k_histogram"].items())
                         + f"); p99 {s['adaptive_latency_ms']['p99']:.1f} ms vs raw "
                         f"{s['raw_latency_ms']['p99']:.1f} ms")
        lines += [f"[{task}] WARNING: {w}" for w in s["warnings"]]
    return "\n".join(lines)


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


def write_json(results: dict, path: Path) -> None:
    """Write atomically: a crash mid-write never leaves a truncated results file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1, allow_nan=True))
    tmp.replace(path)


def read_json(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ResultsError(f"cannot read results {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise ResultsError(f"{path}: not a cpuspec results file of schema_version "
                           f"{SCHEMA_VERSION}")
    return data


def advise(results: dict) -> dict[str, dict]:
    """Per task: the best draft length k* from the cost model (0 = turn SD off), with the
    predicted speedup beside the measured one, and the acceptance SD would need.

    Survival P(n_accepted ≥ i) comes from the static rounds at k (valid for every k' ≤ k: greedy
    drafts do not depend on k); costs from the bench's cost probe."""
    from .costs import choose_k
    k = results["settings"]["k"]
    probe = results.get("cost_probe")
    if not probe:
        raise ResultsError("this results file has no cost probe (written by an older cpuspec)")
    draft_s = probe["draft_s"]
    verify_s = {int(n): v for n, v in probe["verify_s"].items()}
    out = {}
    for task, s in summarize(results).items():
        if "per_position_acceptance_pct" not in s:
            continue
        survival = [p / 100.0 for p in s["per_position_acceptance_pct"]]
        k_best, table = choose_k(survival, draft_s, verify_s)
        feasible = [c for c in table[1:] if c.break_even_acceptance is not None]
        need = min(feasible, key=lambda c: c.break_even_acceptance) if feasible else None
        out[task] = {
            "verdict": "ON" if k_best > 0 else "OFF", "k_best": k_best,
            "predicted_speedup_best": table[k_best].predicted_speedup,
            "predicted_speedup_at_k": table[k].predicted_speedup if k < len(table) else None,
            "measured_speedup_at_k": s["measured_speedup"],
            "measured_adaptive_speedup": s.get("adaptive_speedup"),
            "acceptance_pct": s["acceptance_pct"],
            "needed_acceptance_pct": None if need is None else 100 * need.break_even_acceptance,
            "needed_at_k": None if need is None else need.k,
            "c": draft_s / verify_s[1], "beta_at_k": verify_s[k + 1] / verify_s[1] - 1,
            "table": [c.__dict__ for c in table]}
    return out


def render_advice(advice: dict, k: int) -> str:
    from tabulate import tabulate
    rows = []
    for task, a in advice.items():
        if a["verdict"] == "ON":
            verdict = f"ON, k = {a['k_best']}"
        elif a["needed_acceptance_pct"] is None:
            verdict = "OFF: no acceptance is enough at these costs"
        else:
            verdict = (f"OFF: needs ≥ {a['needed_acceptance_pct']:.0f}% acceptance "
                       f"(at k = {a['needed_at_k']})")
        rows.append([task, verdict, _fmt(a["predicted_speedup_best"], ".2f"),
                     _fmt(a["predicted_speedup_at_k"], ".2f"),
                     _fmt(a["measured_speedup_at_k"], ".2f"),
                     _fmt(a["measured_adaptive_speedup"], ".2f"),
                     _fmt(a["acceptance_pct"], ".1f")])
    return tabulate(rows, headers=["task", "advice", "predicted ×raw at k*",
                                   f"predicted ×raw k={k}", f"measured ×raw k={k}",
                                   "measured adaptive ×raw", "accept %"],
                    disable_numparse=True)
