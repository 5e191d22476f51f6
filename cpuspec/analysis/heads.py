"""A heads run (harness/heads.py), computed on read: per drafter and synthetic acceptance length
L, SD ×raw end to end and decode-only, paired by prompt (stats.ratio_stats: a 95 % interval
from 5 prompts, a range below); the verify rounds V (llama-server's /metrics counter around each
request; where a file lacks it, the target's passes n − 1 − accepted, every one counted a
round); the plain decodes the SD server made after drafting stopped near n_predict, P =
n − 1 − accepted − V, priced at the plain server's time per token t; the round's cost in plain
decodes, a* = 1 + α + β = (decode time − P·t) ÷ V ÷ t; the tokens a round kept,
a = 1 + accepted ÷ V (L as llama.cpp drew it); SD pays where a > a*.

β is the target's verify, from cpuspec's probe of V(n) (llama-cpp-python, the same ggml): at
the drafts a round actually made, d̄ = drafted ÷ V, which llama-server caps at the tokens left
before n_predict (β = V(d̄ + 1)/V(1) − 1, V linear between the sizes probed; a file that probed
V(1) and V(k + 1) only prices every round at k). α = a* − 1 − β: everything but the target's
verify, in llama-server (the draft, the server's per-round work, a hybrid model's rollback).
β's clock is llama-cpp-python's, a*'s the plain server's: their one-token times differ by δ,
which makes α uncertain by about ±|δ|·(1 + β).

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


# A run whose rounds averaged fewer drafts than k by more than this was cut by n_predict
# often enough to matter (-n too short for whole rounds): its rows say so.
SHORT_ROUNDS = 0.2


def summarize_heads(doc: dict) -> dict[str, dict]:
    """label → {"method", "points": [per L: L, e2e and decode ratio_stats, a, a* (the round's
    cost in plain decodes, also the break-even length), drafts per round, β at that mix, α],
    "round_cost": median a* over the points, "alpha": median α}."""
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
            drafts = sum(s["drafted"] for s in sd) / verify if verify else None
            cost = round_s / t_raw if round_s and t_raw else None
            a = 1 + sum(s["accepted"] for s in sd) / verify if verify else None
            broken = _impossible(a, cost, drafts, (doc.get("settings") or {}).get("k"))
            if broken:     # the server's counters cannot be right: no figure from them
                a = cost = drafts = None
            b = beta_at(doc, drafts)
            points.append({
                "length": length, "prompts": len(pairs),
                "e2e": ratio_stats([_tok_s(s, "e2e") / _tok_s(r, "e2e") for r, s in pairs]),
                "decode": ratio_stats([_tok_s(s, "dec") / _tok_s(r, "dec") for r, s in pairs]),
                "a": a, "impossible": broken,
                "verify_steps": verify, "plain_steps": plain, "round_cost": cost,
                "drafts_per_round": drafts, "beta": b, "t_plain_s": t_raw,
                "alpha": cost - 1 - b if cost is not None and b is not None else None})
        costs = [p["round_cost"] for p in points if p["round_cost"]]
        alphas = [p["alpha"] for p in points if p["alpha"] is not None]
        method = next(r["method"] for r in runs if r["label"] == label)
        out[label] = {"method": method, "points": points,
                      "round_cost": statistics.median(costs) if costs else None,
                      "alpha": statistics.median(alphas) if alphas else None}
    return out


def _impossible(a: float | None, cost: float | None, drafts: float | None,
                k: int | None) -> str | None:
    """Why a point's counters cannot be a server's (a broken /metrics, a mangled file): a
    round keeping more than k + 1 tokens or fewer than 1, more drafts than k, a round that
    cost nothing or less; None when they can."""
    tol = 1e-9
    if a is not None and (a < 1 - tol or (k and a > k + 1 + tol)):
        return f"a = {a:.2f} tokens a round, outside [1, k + 1]"
    if drafts is not None and k and drafts > k + tol:
        return f"{drafts:.2f} drafts a round, more than k = {k}"
    if cost is not None and cost <= 0:
        return f"a round's cost of {cost:.2f} plain decodes"
    return None


def _probe(doc: dict) -> dict[int, float]:
    v = (doc.get("settings") or {}).get("verify_probe_s") or {}
    return {int(n): t for n, t in v.items() if isinstance(t, (int, float)) and t > 0}


def beta_at(doc: dict, drafts: float | None) -> float | None:
    """β = V(d + 1)/V(1) − 1 at d drafts a round (None: no probe, or no drafts measured),
    V linear between the sizes the run probed; a file that probed V(1) and V(k + 1) alone
    prices d at k (beta_is_full_k says so)."""
    v = _probe(doc)
    if 1 not in v or drafts is None or len(v) < 2:
        return None
    n = drafts + 1
    sizes = sorted(v)
    if len(sizes) == 2:
        return v[sizes[1]] / v[1] - 1
    lo = max((s for s in sizes if s <= n), default=sizes[0])
    hi = min((s for s in sizes if s >= n), default=sizes[-1])
    t = v[lo] if hi == lo else v[lo] + (v[hi] - v[lo]) * (n - lo) / (hi - lo)
    return t / v[1] - 1


def beta_is_full_k(doc: dict) -> bool:
    """The run probed V(1) and V(k + 1) only (files before issue 69): β priced at k."""
    return len(_probe(doc)) == 2


def beta(doc: dict) -> float | None:
    """β = V(k + 1)/V(1) − 1, a full round of k drafts, from the run's own probe."""
    k = (doc.get("settings") or {}).get("k")
    return beta_at(doc, float(k)) if k else None


def clock_gap(doc: dict, summary: dict) -> float | None:
    """δ: the plain server's time per token over the probe's V(1), less 1 (the two clocks
    that a* and β come from); the median over the points."""
    v1 = _probe(doc).get(1)
    ts = [p["t_plain_s"] for sm in summary.values() for p in sm["points"] if p["t_plain_s"]]
    return statistics.median(ts) / v1 - 1 if v1 and ts else None


def short_rounds(doc: dict, summary: dict) -> list[tuple[str, float, float]]:
    """(drafter, L, drafts per round) where rounds averaged fewer than k − SHORT_ROUNDS
    drafts: -n cut them (llama-server drafts at most the tokens left)."""
    k = (doc.get("settings") or {}).get("k") or 0
    return [(label, p["length"], p["drafts_per_round"]) for label, sm in summary.items()
            for p in sm["points"] if p["drafts_per_round"] is not None
            and p["drafts_per_round"] < k - SHORT_ROUNDS]


def predicted_at(summary: dict, length: float) -> float | None:
    """Decode-only SD ×raw at an acceptance length from elsewhere: L ÷ (1 + α + β)."""
    cost = summary.get("round_cost")
    return length / cost if cost else None
