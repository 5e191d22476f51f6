"""The what-if for larger targets: from a measured cost probe of a (shape-true) target with a
real draft, everything the rule a > 1 + α + β says without acceptance. Measured: the target's
decode, c and β(k) (the probe). Assumed: the acceptance, as an i.i.d. per-token rate p, so a
round of k drafts yields E[tokens] = (1 − p^(k+1)) / (1 − p) (Leviathan et al. 2023, eq. 1).

Per k: the break-even tokens per round a*(k) = 1 + α + β = (k·d + V(k+1)) / V(1), the least p
at which SD pays (E = a*), and per assumed p the best speedup over k (E / a*)."""
from __future__ import annotations

from cpuspec.core.costs import break_even_acceptance, expected_tokens_iid
from cpuspec.results.records import CostProbe

ASSUMED_P = (0.6, 0.7, 0.8, 0.9)
# How far a what-if figure can be from what the real file does: the cross-check in
# docs/shape-true.md (shape-true costs predicted 5-7 % more than the real files' within one run,
# and one file's own probes moved the prediction 9 % across runs): read its figures as ±15 %.
WHATIF_ERROR = 0.15


def whatif_state(speedup: float) -> str:
    """on: SD pays beyond the what-if's error; off: it does not pay at all; within error: a
    predicted gain the what-if cannot tell from none (1 < speedup ≤ 1 + WHATIF_ERROR)."""
    return "on" if speedup > 1 + WHATIF_ERROR else "off" if speedup <= 1 else "within error"


def whatif_row(probe: CostProbe | dict, ks: range | None = None) -> dict:
    """One target's what-if from its probe (ks: the draft lengths the probe measured)."""
    p = CostProbe.of(probe)
    t, d, v = p.t, p.draft_s, p.verify_s
    ks = ks or range(1, max(v))
    ks = [k for k in ks if k + 1 in v]
    need = {k: (k * d + v[k + 1]) / t for k in ks}
    best = {}
    for acc in ASSUMED_P:
        k_best = max(ks, key=lambda k: expected_tokens_iid(acc, k) / need[k])
        speedup = expected_tokens_iid(acc, k_best) / need[k_best]
        best[acc] = {"k": k_best if speedup > 1 else 0, "speedup": max(speedup, 1.0),
                     "sd_speedup": speedup, "state": whatif_state(speedup)}
    return {"decode_tok_s": 1 / t, "c": d / t,
            "beta": {k: v[k + 1] / t - 1 for k in ks},
            "break_even_a": need,
            "break_even_p": {k: break_even_acceptance(k, d, v) for k in ks},
            "best": best,
            "prefill_tok_s": p.prompt_tokens / p.target_prefill_s
            if p.prompt_tokens and p.target_prefill_s else None}


def profile_best(probe: CostProbe | dict, survival: list[float]) -> dict:
    """The best SD ×raw over k ≤ len(survival) at a measured per-position acceptance profile
    (survival[i − 1]: the share of rounds that kept draft i; core/costs.choose_k), decode
    only: the costs this probe measured, the acceptance another pair's run measured."""
    from cpuspec.core.costs import choose_k
    p = CostProbe.of(probe)
    _, table = choose_k(survival, p.draft_s, p.verify_s)
    sd = max((c for c in table if c.k), key=lambda c: c.predicted_speedup, default=None)
    best = sd.predicted_speedup if sd else 1.0
    return {"k": sd.k if sd and best > 1 else 0, "speedup": max(best, 1.0),
            "sd_speedup": best, "state": whatif_state(best) if sd else "off"}


def acceptance_profiles(bench: dict) -> dict[str, list[float]]:
    """Per task of a saved bench run, its measured per-position acceptance (fractions)."""
    from cpuspec.analysis.summary import summarize
    summary = summarize(bench)
    return {t: [x / 100.0 for x in s["per_position_acceptance_pct"]]
            for t, s in summary.items() if t in {r["task"] for r in bench["runs"]}
            and s.get("per_position_acceptance_pct")}


def predicted_sd_speedup(probe: CostProbe | dict, acceptance: float, k: int) -> float:
    """SD ×raw at an i.i.d. acceptance rate and draft length k, decode only (the what-if's
    prediction: costs measured, acceptance assumed)."""
    p = CostProbe.of(probe)
    return expected_tokens_iid(acceptance, k) * p.t / (k * p.draft_s + p.verify_s[k + 1])


def probe_points(probe: CostProbe | dict) -> dict[str, float]:
    """The points a shape-true file is validated on, from one cost probe."""
    p = CostProbe.of(probe)
    out = {"target decode ms": 1e3 * p.t, "draft decode ms": 1e3 * p.draft_s,
           "c": p.draft_s / p.t}
    out |= {f"V({n})/V(1)": p.verify_s[n] / p.t for n in sorted(p.verify_s) if n > 1}
    if p.prompt_tokens and p.target_prefill_s:
        out["target prefill t/s"] = p.prompt_tokens / p.target_prefill_s
        out["draft prefill t/s"] = p.prompt_tokens / p.draft_prefill_s
    return out


def validation(doc: dict, real: str, shape: str) -> list[dict]:
    """Per point: the real and shape-true medians over the rounds, and shape ÷ real as the
    geometric mean of the rounds' own ratios (each round one paired unit) with its 95 %
    t-interval (≥ MIN_CI_UNITS rounds; a range below)."""
    import statistics

    from cpuspec.analysis.stats import ratio_stats
    a = [probe_points(p) for p in doc["probes"][real]]
    b = [probe_points(p) for p in doc["probes"][shape]]
    n = min(len(a), len(b))
    rows = []
    for key in a[0] if n else []:
        st = ratio_stats([b[i][key] / a[i][key] for i in range(n)])
        row = {"point": key, "real": statistics.median(x[key] for x in a[:n]),
               "shape": statistics.median(x[key] for x in b[:n]),
               "ratio": st["speedup"], "units": st["units"]}
        row |= {k: st[k] for k in ("ci", "range") if st[k]}
        rows.append(row)
    return rows
