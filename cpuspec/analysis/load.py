"""SD under load, computed on read from a load run (harness/load.py): per concurrency level,
aggregate throughput and per-request latency of the plain and the SD server, SD ×raw of each
with its interval over batches (each batch one unit, paired with the other server's batch of
the same index), time to first token, the per-token latency's p99, whether SD's outputs equal
the plain server's, and the level from which SD stops paying."""
from __future__ import annotations

import statistics

from cpuspec.analysis.stats import percentile, ratio_stats, significance


def _ratio_stats(pairs: list[tuple[float, float]]) -> dict:
    """other ÷ base over paired batches, through the one interval function (stats.ratio_stats)."""
    return ratio_stats([o / b for b, o in pairs if b > 0])


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


def _by_mode(level: dict) -> dict[str, list[dict]]:
    return {m: sorted((b for b in level["batches"] if b["mode"] == m and b["requests"]),
                      key=lambda b: b["batch"]) for m in ("raw", "sd")}


def _paired(by: dict[str, list[dict]]) -> list[tuple[dict, dict]]:
    return [(r, s) for r in by["raw"] for s in by["sd"] if r["batch"] == s["batch"]]


def level_look(level: dict, planned: int, seq: dict) -> dict:
    """The sequential design's look at a level (its throughput ratios over the batch pairs so
    far, in the order run; its unit limit the batches planned)."""
    from cpuspec.analysis.sequential import Design, look
    pairs = _paired(_by_mode(level))
    return {**look([_throughput(s) / _throughput(r) for r, s in pairs], Design.of(seq, planned)),
            "planned": planned}


def _sequential_stats(level: dict, pairs: list, planned: int, seq: dict
                      ) -> tuple[dict, dict, dict]:
    """Throughput and latency at the design's stopping look: each interval at the look's
    level 1 − α/K (Bonferroni over the looks covers every look's interval at once, whatever
    statistic it holds), the verdict the design's."""
    from cpuspec.analysis.sequential import Design, look
    from cpuspec.analysis.summary import SEQUENTIAL_SIGNIFICANCE
    res = level_look(level, planned, seq)
    lat = look([_mean_latency(r) / _mean_latency(s) for r, s in pairs], Design.of(seq, planned))

    def stats(x: dict, verdict: str | None) -> dict:
        return {"speedup": x["ratio"], "ci": x["ci"], "units": x["units"],
                "range": x["range"] if x["ci"] is None else None, "significance": verdict}
    return (stats(res, SEQUENTIAL_SIGNIFICANCE.get(res["state"])),
            stats(lat, significance(lat["ci"])),
            {k: res[k] for k in ("state", "units", "planned", "level")})


def summarize_load(doc: dict) -> list[dict]:
    """One dict per level, in the order run (under the sequential design, each level's
    intervals and verdict are its stopping look's)."""
    out = []
    seq = (doc.get("settings") or {}).get("sequential")
    for level in doc["levels"]:
        by = _by_mode(level)
        paired = _paired(by)
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
        if seq and paired:
            tp, lat, state = _sequential_stats(level, paired, doc["settings"]["batches"], seq)
            out[-1] |= {"throughput": tp, "latency": lat, "sequential": state}
    return out


# A level's state under the verdict grammar: faster / slower where its interval excludes 1,
# no difference where it spans 1, range where fewer than MIN_CI_UNITS batches ran (no verdict).
STATES = {"faster": "faster", "slower": "slower", "not significant": "no difference",
          None: "range"}


def level_state(level: dict) -> str:
    return STATES[level["throughput"]["significance"]]


def crossover(levels: list[dict]) -> dict:
    """Levels in order of concurrency: up to which one SD's throughput was measured faster at
    every level (pays_up_to), and the first level after that with its state (slower, no
    difference, or range): "pays for 1; slower from 2", "pays for 1; unclear from 2"."""
    ordered = sorted(levels, key=lambda lv: lv["concurrency"])
    pays_up_to, stop = None, None
    for lv in ordered:
        if level_state(lv) != "faster":
            stop = lv
            break
        pays_up_to = lv["concurrency"]
    return {"pays_up_to": pays_up_to,
            "stop_at": stop["concurrency"] if stop else None,
            "stop_state": level_state(stop) if stop else None,
            "off_from": stop["concurrency"] if stop and level_state(stop) == "slower" else None,
            "levels": [(lv["concurrency"], level_state(lv)) for lv in ordered]}
