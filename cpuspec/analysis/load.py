"""SD under load, computed on read from a load run (harness/load.py): per concurrency level,
aggregate throughput and per-request latency of the plain and the SD server, SD ×raw of each
with its interval over batches (each batch one unit, paired with the other server's batch of
the same index), time to first token, the per-token latency's p99, whether SD's outputs equal
the plain server's, and the level from which SD stops paying."""
from __future__ import annotations

import math
import statistics

import numpy as np

from cpuspec.analysis.stats import MIN_CI_UNITS, percentile, significance, t_interval


def _ratio_stats(pairs: list[tuple[float, float]]) -> dict:
    """other ÷ base over paired units: geometric mean, 95 % t-interval from MIN_CI_UNITS
    units (a range below), and the verdict."""
    logs = np.log([o / b for b, o in pairs if b > 0 and o > 0])
    if not len(logs):
        return {"speedup": None, "ci": None, "range": None, "units": 0, "significance": None}
    ci = None
    if len(logs) >= MIN_CI_UNITS:
        _, lo, hi = t_interval(logs)
        ci = [math.exp(lo), math.exp(hi)]
    return {"speedup": math.exp(float(logs.mean())), "ci": ci,
            "range": [math.exp(float(logs.min())), math.exp(float(logs.max()))]
            if ci is None and len(logs) >= 2 else None,
            "units": len(logs), "significance": significance(ci)}


def _throughput(batch: dict) -> float:
    return sum(r["n_tokens"] for r in batch["requests"]) / batch["wall_s"]


def _mean_latency(batch: dict) -> float:
    return statistics.fmean(r["e2e_s"] for r in batch["requests"])


def _per_mode(batches: list[dict]) -> dict:
    reqs = [r for b in batches for r in b["requests"]]
    if not reqs:
        return {}
    e2e = [1e3 * r["e2e_s"] for r in reqs]
    # time to first token as the client sees it: everything but the server's generation
    ttft = [1e3 * r["e2e_s"] - r["predicted_ms"] for r in reqs]
    per_token = [r["predicted_ms"] / max(r["n_tokens"] - 1, 1) for r in reqs]
    drafted = sum(r["drafted"] for r in reqs)
    return {"requests": len(reqs),
            "tok_s": statistics.fmean(_throughput(b) for b in batches),
            "e2e_p50_ms": percentile(e2e, 50), "e2e_p99_ms": percentile(e2e, 99),
            "ttft_p50_ms": percentile(ttft, 50), "token_p99_ms": percentile(per_token, 99),
            "acceptance_pct": 100.0 * sum(r["accepted"] for r in reqs) / drafted
            if drafted else None}


def summarize_load(doc: dict) -> list[dict]:
    """One dict per level, in the order run."""
    out = []
    for level in doc["levels"]:
        by = {m: sorted((b for b in level["batches"] if b["mode"] == m and b["requests"]),
                        key=lambda b: b["batch"]) for m in ("raw", "sd")}
        paired = [(r, s) for r in by["raw"] for s in by["sd"] if r["batch"] == s["batch"]]
        raw_text = {q["prompt_id"]: q["text"] for b in by["raw"] for q in b["requests"]}
        sd_reqs = [q for b in by["sd"] for q in b["requests"] if q["prompt_id"] in raw_text]
        out.append({"concurrency": level["concurrency"],
                    "raw": _per_mode(by["raw"]), "sd": _per_mode(by["sd"]),
                    "throughput": _ratio_stats([(_throughput(r), _throughput(s))
                                                for r, s in paired]),
                    # latency: raw's mean ÷ SD's, so > 1 means SD answers sooner
                    "latency": _ratio_stats([(1 / _mean_latency(r), 1 / _mean_latency(s))
                                             for r, s in paired]),
                    "same_output": f"{sum(q['text'] == raw_text[q['prompt_id']] for q in sd_reqs)}"
                                   f"/{len(sd_reqs)}"})
    return out


def crossover(levels: list[dict]) -> dict:
    """Up to which concurrency SD's throughput was measured faster (an interval above 1), and
    the first level where it was not: "pays for 1; off from 2"."""
    pays = [lv["concurrency"] for lv in levels if lv["throughput"]["significance"] == "faster"]
    not_ = [lv["concurrency"] for lv in levels if lv["throughput"]["significance"] != "faster"]
    last_paying = max((c for c in pays if all(c < n for n in not_)), default=None)
    return {"pays_up_to": last_paying, "off_from": min(not_) if not_ else None}
