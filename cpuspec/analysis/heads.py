"""A heads run (harness/heads.py), computed on read: per drafter and synthetic acceptance length
L, SD ×raw end to end and decode-only, paired by prompt (stats.ratio_stats: a 95 % interval
from 5 prompts, a range below); the verify rounds V (llama-server's /metrics counter around each
request; where a file lacks it, the target's passes n − 1 − accepted, every one counted a
round); the plain decodes the SD server made after drafting stopped near n_predict, P =
n − 1 − accepted − V, priced at the plain server's time per token t; the round's cost in plain
decodes, a* = 1 + α + β = (decode time − P·t) ÷ V ÷ t; the tokens a round kept,
a = 1 + accepted ÷ V (L as llama.cpp drew it); SD pays where a > a*.

A prediction here uses the measured round cost and an acceptance length from elsewhere
(a published one): decode-only SD ×raw = L ÷ (1 + α + β). It is labelled with its source."""
from __future__ import annotations

import statistics

from cpuspec.analysis.stats import ratio_stats


def _pairs(runs: list[dict], label: str, length: float) -> list[tuple[dict, dict]]:
    sel = [r for r in runs if r["label"] == label and r["synth_len"] == length]
    raw = {r["prompt_id"]: r for r in sel if r["mode"] == "raw"}
    return [(raw[r["prompt_id"]], r) for r in sel
            if r["mode"] == "sd" and r["prompt_id"] in raw]


def _tok_s(r: dict, window: str) -> float:
    if window == "e2e":
        return r["n_tokens"] / r["e2e_s"] if r["e2e_s"] > 0 else float("nan")
    return (r["n_tokens"] - 1) / r["decode_s"] if r["decode_s"] > 0 else float("nan")


def summarize_heads(doc: dict) -> dict[str, dict]:
    """label → {"method", "points": [per L: L, e2e and decode ratio_stats, a, round cost],
    "round_cost": median 1 + α + β over the points, "break_even_len"}."""
    runs = doc.get("runs") or []
    out: dict[str, dict] = {}
    for label in dict.fromkeys(r["label"] for r in runs):
        points = []
        for length in dict.fromkeys(r["synth_len"] for r in runs if r["label"] == label):
            pairs = _pairs(runs, label, length)
            if not pairs:
                continue
            sd = [s for _, s in pairs]
            t_raw = sum(r["decode_s"] for r, _ in pairs) / \
                max(sum(r["n_tokens"] - 1 for r, _ in pairs), 1)
            passes = [s["n_tokens"] - 1 - s["accepted"] for s in sd]
            verify = sum(s.get("verify_steps", n) for s, n in zip(sd, passes))
            plain = sum(n - s.get("verify_steps", n) for s, n in zip(sd, passes))
            round_s = (sum(s["decode_s"] for s in sd) - plain * t_raw) / verify \
                if verify else None
            points.append({
                "length": length, "prompts": len(pairs),
                "e2e": ratio_stats([_tok_s(s, "e2e") / _tok_s(r, "e2e") for r, s in pairs]),
                "decode": ratio_stats([_tok_s(s, "dec") / _tok_s(r, "dec") for r, s in pairs]),
                "a": 1 + sum(s["accepted"] for s in sd) / verify if verify else None,
                "verify_steps": verify, "plain_steps": plain,
                "round_cost": round_s / t_raw if round_s and t_raw else None})
        costs = [p["round_cost"] for p in points if p["round_cost"]]
        method = next(r["method"] for r in runs if r["label"] == label)
        cost = statistics.median(costs) if costs else None
        out[label] = {"method": method, "points": points, "round_cost": cost,
                      "break_even_len": cost}
    return out


def beta(doc: dict) -> float | None:
    """β = V(k + 1)/V(1) − 1 from the run's own probe of its target (None in files without)."""
    v = (doc.get("settings") or {}).get("verify_probe_s") or {}
    k = (doc.get("settings") or {}).get("k")
    return v[str(k + 1)] / v["1"] - 1 if k and v.get("1") and v.get(str(k + 1)) else None


def predicted_at(summary: dict, length: float) -> float | None:
    """Decode-only SD ×raw at an acceptance length from elsewhere: L ÷ (1 + α + β)."""
    cost = summary.get("round_cost")
    return length / cost if cost else None
