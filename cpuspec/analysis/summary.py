"""Per-task summaries of a results file, from its raw samples (stats.py): speeds, SD ×raw
with intervals, a, acceptance, costs, the prediction beside the measurement, the adaptive
policy's decisions, the audit, and noise flags. Computed when reading, so an old file is
summarised again by newer code."""
from __future__ import annotations

import math
import statistics
from typing import Any

from cpuspec.core.costs import cost_model, cost_model_per_round
from cpuspec.results.records import MIN_JUDGED_WINDOW_S, OUTLIER_FRACTION_OF_MEDIAN, noise_reasons
from cpuspec.analysis.predict import PREDICTED_FROM, predict_from_probe, predict_from_rounds
from cpuspec.core.speculative import ROUND_FIELDS
from cpuspec.analysis.stats import (MIN_CI_UNITS, decode_tok_s, e2e_tok_s, percentile, run_e2e_s,
                    share_target_prefill, speedup_stats, target_prefill_by_mode)
from cpuspec.inputs.tasks import OVERALL  # the reserved task name (tasks.py refuses it)


# Fewer full rounds than this and a (and acceptance) carry a sampling error of several percent.
MIN_ROUNDS_FOR_STABLE_A = 30


# Per-token latency spread (p95 / p50) beyond which a run is called noisy: on a quiet machine,
# decode steps of one model differ by a few percent at most.
NOISY_P95_OVER_P50 = 1.5


def _rounds(runs: list[dict]) -> list[dict]:
    return [dict(zip(ROUND_FIELDS, r)) for run in runs for r in run.get("rounds", [])]


def _latency_ms(runs: list[dict]) -> dict[str, float]:
    lat = [x for r in runs for x in r["token_latencies_s"]]
    return {f"p{q}": percentile(lat, q) * 1e3 for q in (50, 95, 99)}


def ratio_fields(base: list[dict], other: list[dict], prefix: str) -> dict[str, Any]:
    """other ÷ base end to end with its interval (or range) and verdict, under `prefix` as
    report.speedup_cell reads it (summary rows, bench/research/shared_prefill.py)."""
    st = speedup_stats(base, other)
    return {f"{prefix}speedup": st["speedup"], f"{prefix}speedup_ci": st["ci"],
            f"{prefix}speedup_units": st["units"], f"{prefix}speedup_range": st["range"],
            f"{prefix}significance": st["significance"]}


def _speedups(raw: list[dict], sd: list[dict], prefix: str) -> dict[str, Any]:
    out = {f"{prefix}tok_s": e2e_tok_s(sd), f"{prefix}decode_tok_s": decode_tok_s(sd),
           **ratio_fields(raw, sd, prefix),
           f"{prefix}decode_speedup": decode_tok_s(sd) / decode_tok_s(raw)
           if raw and sd else float("nan")}
    reps = sorted({r.get("repetition", 0) for r in sd})
    if len(reps) > 1:  # run-to-run spread: the speedup of each repetition over its prompts
        by_rep = [e2e_tok_s([r for r in sd if r.get("repetition", 0) == j])
                  / e2e_tok_s([r for r in raw if r.get("repetition", 0) == j]) for j in reps]
        out[f"{prefix}speedup_by_repetition"] = by_rep
    return out


def _prefill_shared(raw: list[dict], sd: list[dict], ad: list[dict]) -> dict[str, Any]:
    """The target prefill's share of raw's end-to-end window, each mode's mean prefill timing
    against its prompts' (the check that the modes differ by noise alone), and the end-to-end
    ratios again with that prefill shared between modes (stats.share_target_prefill)."""
    runs = raw + sd + ad
    # schema 1 kept the draft's prefill inside prefill_s: no target prefill of its own to share
    if not raw or not (sd or ad) or any("e2e_s" not in r for r in runs) or \
            sum(run_e2e_s(r) for r in raw) <= 0:
        return {}
    shared = share_target_prefill(runs)
    of = {m: [r for r in shared if r["mode"] == m] for m in ("raw", "static", "adaptive")}
    out = {"target_prefill_pct": 100.0 * sum(r["prefill_s"] for r in raw)
           / sum(run_e2e_s(r) for r in raw),
           "target_prefill_by_mode": target_prefill_by_mode(runs)}
    if sd:
        out.update(ratio_fields(of["raw"], of["static"], "shared_sd_"))
    if ad:
        out.update(ratio_fields(of["raw"], of["adaptive"], "shared_adaptive_"))
    if sd and ad:
        out.update(ratio_fields(of["static"], of["adaptive"], "shared_adaptive_static_"))
    return out


def _draft_s_per_token(sd: list[dict], full: list[dict], k: int, parallel: bool) -> float:
    """The draft's time per drafted token. In the parallel schedule a round's draft_s is only
    the wait for the draft (about 0 when its drafts were ready), so the draft's own time per
    decode on its thread is taken instead (the schedule's ahead_s / ahead_decodes)."""
    if parallel:
        ahead = [r["schedule"] for r in sd if (r.get("schedule") or {}).get("ahead_decodes")]
        if ahead:
            return sum(a["ahead_s"] for a in ahead) / sum(a["ahead_decodes"] for a in ahead)
    return statistics.median(r["draft_s"] / k for r in full)


# The draft model with a confidence gate (settings.p_min > 0): it drafts 0..k per round; the
# hybrid's model part is gated the same way. A gated round that stopped short decoded the token
# it dropped too: round_terms prices it (gate_k), for the hybrid at the model's share of drafts.
GATED = "model, gated by p-min"
GATED_HYBRID = "hybrid, gated by p-min"


def summarize_group(runs: list[dict], k: int, probe: dict | None = None,
                    parallel: bool = False, drafter: str = "model",
                    draft_window: list[int] | None = None,
                    probe_end: dict | None = None) -> dict[str, Any]:
    """Metrics of one task (or of all runs) from its raw and speculative runs; draft_window:
    the run's (settings.draft_window), which the prediction prices."""
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
    out["n_rounds"] = len(full)
    if any(r["k"] > 0 for r in full):
        out.update(_acceptance(full, k, variable))
        out.update(_accounting(raw, sd, full, k, out["a"], variable, parallel))
        if probe:
            out.update(_prediction(probe, sd, k, drafter, parallel, draft_window, out))
        if probe and probe_end and out.get("predicted_speedup"):
            out.update(_band(probe_end, sd, k, drafter, parallel, draft_window, out))
    if ad:
        out.update(_adaptive(raw, sd, ad, out))
    if not parallel:   # the parallel schedule prefills both models at once: not raw's work
        out.update(_prefill_shared(raw, sd, ad))
    out["warnings"] += _warnings(raw, sd, full, out)
    return out


def _acceptance(full: list[dict], k: int, variable: bool) -> dict[str, Any]:
    """a, acceptance, the zero-accept rate, per-position acceptance and the histogram of a
    task's rounds (and, for variable drafters, how often they drafted at all)."""
    drafted = [r for r in full if r["k"] > 0]
    acc = [r["n_accepted"] for r in full]
    out: dict[str, Any] = {"a": statistics.fmean(x + 1 for x in acc)}
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
    return out


def _accounting(raw: list[dict], sd: list[dict], full: list[dict], k: int, a: float,
                variable: bool, parallel: bool) -> dict[str, Any]:
    """The loop's Python overhead per round and, with raw runs, the cost model of the same
    rounds' own times: accounting, not prediction, a ÷ (1 + α + β)."""
    overhead = [r["round_s"] - r["draft_s"] - r["verify_s"] for r in full]
    out: dict[str, Any] = {
        "python_overhead_ms_per_round": statistics.median(overhead) * 1e3,
        "python_overhead_pct": 100.0 * sum(overhead) / sum(r["round_s"] for r in full)}
    raw_lat = [x for r in raw for x in r["token_latencies_s"]]
    if raw_lat:
        t = statistics.median(raw_lat)
        if variable:   # rounds differ in size: means per round, not medians
            cm = cost_model_per_round(
                k, a, t, statistics.fmean(r["draft_s"] for r in full),
                statistics.fmean(r["verify_s"] for r in full),
                statistics.fmean(r["k"] for r in full))
        else:
            cm = cost_model(k, a, t, _draft_s_per_token(sd, full, k, parallel),
                            statistics.median(r["verify_s"] for r in full))
        out["cost"] = cm.to_dict()
    return out


def _prediction(probe: dict, sd: list[dict], k: int, drafter: str, parallel: bool,
                draft_window: list[int] | None, out: dict[str, Any]) -> dict[str, Any]:
    """The speedup predicted from the cost probe and this task's acceptance, and its error
    against the measured one. A model drafts k every round; lookup and the hybrid draft what
    they find."""
    survival = [p / 100.0 for p in out["per_position_acceptance_pct"]]
    pred = predict_from_probe(probe, survival, k, sd, parallel, draft_window) \
        if drafter == "model" else predict_from_rounds(
            probe, k, sd, draft_window, k if drafter in (GATED, GATED_HYBRID) else None)
    if not pred:
        return {}
    return {"predicted_speedup": pred[0], "predicted_window": pred[1],
            "predicted_from": PREDICTED_FROM["model" if drafter == "model" else "variable"],
            "prediction_error_pct": 100.0 * (out["sd_speedup"] / pred[0] - 1.0)}


def _band(probe_end: dict, sd: list[dict], k: int, drafter: str, parallel: bool,
          draft_window: list[int] | None, out: dict[str, Any]) -> dict[str, Any]:
    """The prediction again from the cost probe taken after the prompts: the two predictions
    bound what the machine's drift between them moves the prediction by (the band), and the
    measured speedup's distance from the band (0 inside it)."""
    end = _prediction(probe_end, sd, k, drafter, parallel, draft_window, out)
    if not end:
        return {}
    lo, hi = sorted((out["predicted_speedup"], end["predicted_speedup"]))
    m = out["sd_speedup"]
    return {"predicted_band": [lo, hi],
            "band_error_pct": 0.0 if lo <= m <= hi else
            100.0 * (m / (lo if m < lo else hi) - 1.0)}


def _adaptive(raw: list[dict], sd: list[dict], ad: list[dict], out: dict[str, Any]
              ) -> dict[str, Any]:
    """The adaptive policy's speedup, latency, the k it chose and its decisions."""
    res: dict[str, Any] = dict(_speedups(raw, ad, "adaptive_"))
    res["adaptive_vs_static"] = res["adaptive_tok_s"] / out["sd_tok_s"] if sd else None
    res["adaptive_latency_ms"] = _latency_ms(ad)
    ks = [r["k"] for r in _rounds(ad)]
    res["adaptive_k_histogram"] = {str(j): ks.count(j) for j in sorted(set(ks))}
    reasons = [t[3] for r in ad for t in r.get("policy_trace", [])]
    res["adaptive_decisions"] = {why: reasons.count(why) for why in dict.fromkeys(reasons)
                                 if why not in ("on", "off")}
    res["adaptive_speculating_pct"] = 100.0 * sum(1 for j in ks if j > 0) / len(ks) \
        if ks else 0.0
    return res


def _warnings(raw: list[dict], sd: list[dict], full: list[dict], out: dict[str, Any]
              ) -> list[str]:
    """What makes this task's figures rough: few rounds, too few prompts for an interval, a
    noisy machine."""
    warnings = []
    if 0 < len(full) < MIN_ROUNDS_FOR_STABLE_A:
        warnings.append(f"only {len(full)} full rounds: a and acceptance are rough; "
                        "raise --max-tokens or --repetitions")
    if sd and raw and out.get("sd_speedup_ci") is None:
        warnings.append(f"{out.get('sd_speedup_units', 0)} prompt(s): no 95 % interval "
                        f"below {MIN_CI_UNITS} prompts (repetitions of one prompt are "
                        "one unit); use more prompts")
    lat = out["raw_latency_ms"]
    if raw and lat["p95"] > NOISY_P95_OVER_P50 * lat["p50"]:
        warnings.append(f"noisy machine: raw token latency p95/p50 = "
                        f"{lat['p95'] / lat['p50']:.2f}; close other programs and rerun")
    return warnings


# Decisions of the adaptive policy that change its state (the others: "on", "off", and "off"
# for costs that rule SD out, repeat every round).
TRANSITIONS = ("switched", "re-entry", "probe")


def policy_events(run: dict) -> list[dict]:
    """The adaptive policy's transitions in one generation: round, k, predicted speedups
    (mean, optimistic bound), reason."""
    return [{"round": i, "k": k, "mean": mean, "bound": bound, "why": why}
            for i, (k, mean, bound, why) in enumerate(run.get("policy_trace", []))
            if why.startswith(TRANSITIONS)]


def noise_report(runs: list[dict]) -> dict[str, Any]:
    """Generations measured while other programs were busy, and speed outliers: a run slower
    than half its task's median (same mode). Computed when reading, from the raw samples."""
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


def _defect(a: dict) -> bool:
    """An output the loop got wrong: its exact replay disagreed, or its divergence from raw
    is not the target's own (core/audit.py)."""
    exact = a.get("exact")
    return (isinstance(exact, dict) and not exact.get("ok")) or \
        (a.get("divergence") or {}).get("kind") == "defect"


def summarize_audit(audit: list[dict]) -> dict[str, Any]:
    """identical: outputs equal to raw decoding's; numeric / defect: outputs that differ where
    the target's own logits explain it / outputs the loop got wrong (None in files from before
    divergences were classified); exact_n / exact_ok: outputs whose verifies were replayed
    (core/audit.py), and those the replay reproduced."""
    diverged = [a for a in audit if not a["identical"]]
    classified = all((a.get("divergence") or {}).get("kind") for a in diverged)
    exact = [a["exact"] for a in audit if isinstance(a.get("exact"), dict)]
    known = classified and (bool(diverged) or bool(exact))
    defects = sum(1 for a in audit if _defect(a))
    unrepro = sum(1 for a in diverged
                  if (a.get("divergence") or {}).get("kind") == "unreproducible")
    return {"n": len(audit), "identical": len(audit) - len(diverged),
            "numeric": len(diverged) - sum(1 for a in diverged if _defect(a)) - unrepro
            if known else None,
            "unreproducible": unrepro,
            "defect": defects if known or defects else None,
            "exact_n": len(exact), "exact_ok": sum(1 for e in exact if e.get("ok")),
            "drift": {d: sum(1 for a in diverged
                             if (a.get("divergence") or {}).get("drift") == d)
                      for d in ("batch row", "kv cache", "neither")} if known else None,
            "min_margin_at_divergence": min((a["raw_top2_margin"] for a in diverged
                                             if a.get("raw_top2_margin") is not None),
                                            default=None)}


def summarize_drift(results: dict) -> dict[str, Any] | None:
    """The run's batched-vs-one-token logit drift (harness/drift.py), summarized: median and
    max of each position's largest |Δlogit|, argmax flips per 1,000 positions, mean and max
    total-variation distance at the run's temperature. None where the run measured none."""
    d = results.get("drift")
    pos = (d or {}).get("positions") or []
    if not pos:
        return None
    dl, flips, tv = ([float(p[i]) for p in pos] for i in range(3))
    return {"positions": len(pos), "batch": d.get("batch"),
            "temperature": d.get("temperature"),
            "max_dlogit_median": statistics.median(dl), "max_dlogit_max": max(dl),
            "flips_per_1k": 1000 * sum(flips) / len(pos),
            "tv_mean": statistics.fmean(tv), "tv_max": max(tv), "seconds": d.get("seconds")}


def summarize(results: dict) -> dict[str, Any]:
    k = results["settings"]["k"]
    runs = results["runs"]
    probe = results.get("cost_probe")
    probe_end = results.get("cost_probe_end")   # after the prompts: the prediction's band
    parallel = results["settings"].get("schedule") == "parallel"
    drafter = results["settings"].get("drafter", "model")
    if drafter in ("model", "hybrid") and results["settings"].get("p_min"):
        # drafts per round vary: every round counts, as for lookup
        drafter = GATED if drafter == "model" else GATED_HYBRID
    draft_window = results["settings"].get("draft_window")
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    summary = {t: summarize_group([r for r in runs if r["task"] == t], k, probe, parallel,
                                  drafter, draft_window, probe_end) for t in tasks}
    summary[OVERALL] = summarize_group(runs, k, probe, parallel, drafter, draft_window,
                                       probe_end)
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
    if results["settings"].get("sequential"):
        _sequential_fields(results, summary, tasks)
    return summary


SEQUENTIAL_SIGNIFICANCE = {"faster": "faster", "slower": "slower",
                           "no difference": "not significant", "undecided": "not significant"}


def _sequential_fields(results: dict, summary: dict, tasks: list[str]) -> None:
    """A run of the sequential design: each task's interval and verdict are its stopping
    look's (1 − α/K, analysis/sequential.py), none where it stopped between looks (cut
    short); the pooled row keeps its mean and range but no interval or verdict (its tasks
    stopped at different points: no design covers the pool)."""
    from cpuspec.analysis.sequential import task_look
    for t in tasks:
        res = task_look(results, t)
        s = summary[t]
        s["sequential"] = {k: res[k] for k in ("state", "units", "planned", "level")}
        s["sd_speedup_ci"] = res["ci"]
        s["sd_significance"] = SEQUENTIAL_SIGNIFICANCE.get(res["state"])
        if res["ci"] is None:
            s["sd_speedup_range"] = res["range"]
    pooled = summary[OVERALL]
    pooled["sequential"] = {"state": "pooled"}
    pooled["sd_speedup_ci"], pooled["sd_significance"] = None, None
