"""The lossless table (issue 78) from bench/lossless.sh's runs: per run, SD's outputs as plain
decoding's, the divergences classified, the exact replays, the target's logit drift, and what
the audit and the drift cost beside the run's own generations.
Usage: python bench/lossless_table.py bench/results/<machine>/lossless/*.json.gz"""
import sys

from cpuspec.analysis.summary import OVERALL, summarize, summarize_drift
from cpuspec.results.schema import read_json


def costs(doc: dict) -> dict:
    """Seconds: the generations (every run's end to end), the default audit (each divergent
    output's replay and classification), what --exact-audit added (the replays of identical
    outputs), the drift."""
    gen = sum(r["e2e_s"] for r in doc["runs"])
    default = extra = 0.0
    for a in doc["audit"]:
        ex = (a.get("exact") or {}).get("seconds") or 0.0
        cls = (a.get("divergence") or {}).get("seconds") or 0.0
        if a["identical"]:
            extra += ex
        else:
            default += ex + cls
    return {"gen": gen, "default": default, "extra": extra,
            "drift": (doc.get("drift") or {}).get("seconds") or 0.0}


def main(paths: list[str]) -> None:
    print("| run | target | outputs as plain decoding | numeric | defect | exact replay | "
          "drift |Δlogit| med / max | flips /1k | TV mean | audit s (default / +exact) | "
          "drift s | generations s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        doc = read_json(path)
        au = summarize(doc)[OVERALL]["audit"]
        d = summarize_drift(doc) or {}
        c = costs(doc)
        target = doc["models"]["target"]["file"]
        print(f"| {path.rsplit('/', 1)[-1]} | {target} | {au['identical']}/{au['n']} | "
              f"{au['numeric']} | {au['defect']} | {au['exact_ok']}/{au['exact_n']} | "
              f"{d.get('max_dlogit_median', 0):.3f} / {d.get('max_dlogit_max', 0):.3f} | "
              f"{d.get('flips_per_1k', 0):.1f} | {d.get('tv_mean', 0):.4f} | "
              f"{c['default']:.0f} / +{c['extra']:.0f} | {c['drift']:.0f} | {c['gen']:.0f} |")
        drift = au.get("drift") or {}
        print(f"|  | where the flips came from: batch row {drift.get('batch row', 0)}, "
              f"KV cache {drift.get('kv cache', 0)}, neither {drift.get('neither', 0)} "
              "|||||||||||")


if __name__ == "__main__":
    main(sys.argv[1:])
