"""The GPU check's measurements (bench/gpu_check.sh runs this on the lent NVIDIA machine; with
GPU=0 it dry-runs on the CPU here). Shape-true Qwen2.5 targets (1.5B, 7B, 14B, Q4_K_M) and a
shape-true 0.5B draft are written from a small tokenizer file (no download); then the cost
probe (cpuspec costs' V(n) and the draft's decode) of each target on the CPU at each thread
count and fully offloaded (-ngl 99 for both models), and the what-if at the real default
pair's recorded per-position acceptance (a measured profile borrowed from the 1.5B pair, named
as such). Stops cleanly at a deadline and keeps what finished.

Usage: python bench/gpu_costs.py OUT_DIR TOKENIZER.gguf [--gpu] [--threads 1,2,4,8,16]
       [--sizes 1.5b,7b,14b] [--deadline-s 480]"""
import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ACCEPTANCE_RUN = ROOT / "bench/results/epyc-family25-model17/crosscheck_bench_q4km_k4.json.gz"


def survival_of(run: Path) -> list[float]:
    from cpuspec.analysis.summary import summarize
    from cpuspec.results.schema import load_json
    s = summarize(load_json(run))["overall"]
    return [p / 100 for p in s["per_position_acceptance_pct"]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("tokenizer", type=Path)
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--threads", default="1,2,4,8,16")
    ap.add_argument("--sizes", default="1.5b,7b,14b")
    ap.add_argument("--deadline-s", type=float, default=480.0)
    ap.add_argument("--max-n", type=int, default=5)
    a = ap.parse_args()
    t0 = time.monotonic()
    import psutil

    from cpuspec.analysis.whatif import whatif_row
    from cpuspec.core.costs import predicted_speedup
    from cpuspec.harness.bench import BenchConfig, environment
    from cpuspec.harness.probe import run_costs
    from cpuspec.inputs.shapes import shape_of
    from cpuspec.llama.shape_true import write_shape_true
    a.out.mkdir(parents=True, exist_ok=True)
    mem = psutil.virtual_memory().total
    draft = write_shape_true(shape_of("0.5b"), "Q4_K_M", a.tokenizer, mem, print)
    targets = {s: write_shape_true(shape_of(s), "Q4_K_M", a.tokenizer, mem, print)
               for s in a.sizes.split(",")}
    survival = survival_of(ACCEPTANCE_RUN)
    placements = [("CPU", 0, int(t)) for t in a.threads.split(",")]
    if a.gpu:
        placements.append(("GPU (-ngl 99)", 99, max(int(t) for t in a.threads.split(","))))
    doc = {"kind": "gpu_costs", "meta": environment(placements[0][2]), "complete": False,
           "acceptance_from": str(ACCEPTANCE_RUN.relative_to(ROOT)), "rows": []}
    lines = []
    for size, path in targets.items():
        for where, ngl, threads in placements:
            if time.monotonic() - t0 > a.deadline_s:
                doc["rows"].append({"size": size, "where": where, "threads": threads,
                                    "skipped": "deadline"})
                continue
            cfg = BenchConfig(prompts=[], threads=threads, target_path=path, draft_path=draft,
                              k=a.max_n - 1, n_gpu_layers=ngl, draft_gpu_layers=ngl,
                              argv=sys.argv)
            res = run_costs(cfg, 1 if not ngl else 3, print)
            probe = res["cost_probe"]
            w = whatif_row(probe)
            v = {int(n): x for n, x in probe["verify_s"].items()}
            best = max(range(1, min(len(survival), a.max_n - 1) + 1),
                       key=lambda k: predicted_speedup(survival, k, probe["draft_s"], v))
            at = predicted_speedup(survival, best, probe["draft_s"], v)
            doc["rows"].append({"size": size, "where": where, "threads": threads,
                                "cost_probe": probe, "best_k": best,
                                "sd_at_recorded_acceptance": at})
            lines.append(f"{size:>5} {where:<14} t={threads:<2} decode {w['decode_tok_s']:7.1f} "
                         f"t/s  c {w['c']:.3f}  1+β(4) {1 + w['beta'].get(4, float('nan')):.2f}"
                         f"  SD ×raw at the 1.5B pair's acceptance {at:.2f} (k {best})")
            print(lines[-1], flush=True)
            (a.out / "gpu_costs.json").write_text(json.dumps(doc, indent=1))
    doc["complete"] = True
    (a.out / "gpu_costs.json").write_text(json.dumps(doc, indent=1))
    (a.out / "gpu_costs.txt").write_text(
        "Shape-true Qwen2.5 targets (Q4_K_M) with a shape-true 0.5B draft; acceptance: the real "
        f"1.5B pair's per-position profile ({doc['acceptance_from']}), decode only\n"
        + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
