"""Issue 50, item 4: a cross-check that can fail. The real default pair's bench run gives the
measured SD ×raw per task and its acceptance. Through that acceptance, three sets of costs
predict SD ×raw: the bench's own probe (the same run: the probe's own error), and the median
probes of the real and of the shape-true 1.5B + 0.5B Q4_K_M from the validation run (one other
run, interleaved round by round: their difference is the shape-true file's alone, the
run-to-run drift cancels). As the what-if prices it, the shape-true target is paired with the
REAL draft's costs (the validation's real probe: d, catch-up, draft prefill), so only the
target's file differs between the two predictions. The shape-true file passes where its
prediction lies within 2 % of the real files' prediction of the same run (|shape ÷ real − 1| ≤
2 %: two interleaved probes of the same costs differ by that much); errors of opposite sign do
not cancel. The what-if run's probe of the
shape-true 1.5B, from yet another run, is printed beside them: a single probe there moved V(5)
by a quarter against the bench's own.
Inputs: the bench file, the validation file, the what-if file.
Usage: python bench/shape_true_crosscheck.py BENCH.json VALIDATION.json WHATIF.json"""
import copy
import statistics
import sys

from cpuspec.analysis.summary import summarize
from cpuspec.report import screen
from cpuspec.results.records import CostProbe
from cpuspec.results.schema import load_json

PROBE_NOISE = 0.02


def median_probe(probes: list[dict]) -> dict:
    """One probe of the rounds' medians, point by point."""
    ps = [CostProbe.of(p) for p in probes]
    med = statistics.median
    return {"verify_s": {str(n): med(p.verify_s[n] for p in ps) for n in ps[0].verify_s},
            "draft_s": med(p.draft_s for p in ps),
            # the key CostProbe.from_dict reads (a "catchup_s" key would be ignored)
            "draft_catchup_s_per_token": med(p.catchup_s for p in ps),
            "target_prefill_s": med(p.target_prefill_s for p in ps),
            "draft_prefill_s": med(p.draft_prefill_s for p in ps),
            "prompt_tokens": ps[0].prompt_tokens, "position": ps[0].position}


def with_real_draft(shape: dict, real: dict) -> dict:
    """The shape-true target's costs with the real draft's: what the what-if prices."""
    return {**shape, **{k: real[k] for k in ("draft_s", "draft_catchup_s_per_token",
                                             "draft_prefill_s")}}


def predicted(bench: dict, probe: dict) -> dict:
    doc = copy.deepcopy(bench)
    doc["cost_probe"] = probe
    return {t: s.get("predicted_speedup") for t, s in summarize(doc).items()}


def main(bench_path: str, validation_path: str, whatif_path: str) -> None:
    bench, val, whatif = (load_json(p) for p in (bench_path, validation_path, whatif_path))
    row = next(r for r in whatif["rows"] if r["size"] == "1.5b" and r["quant"] == "Q4_K_M"
               and "cost_probe" in r)
    own = {t: s.get("predicted_speedup") for t, s in summarize(bench).items()}
    real_probe = median_probe(val["probes"]["real Q4_K_M"])
    real = predicted(bench, real_probe)
    shape = predicted(bench, with_real_draft(median_probe(val["probes"]["shape Q4_K_M"]),
                                             real_probe))
    other = predicted(bench, row["cost_probe"])
    rows = []
    for task, s in summarize(bench).items():
        m = s["sd_speedup"]
        if None in (own[task], real[task], shape[task]):
            continue
        rows.append([task, screen.speedup(m, s.get("sd_speedup_ci"), s.get("sd_speedup_range")),
                     *[f"{x:.2f} ({100 * (x / m - 1):+.0f} %)"
                       for x in (own[task], real[task], shape[task], other[task])],
                     "yes" if abs(shape[task] / real[task] - 1) <= PROBE_NOISE else "NO"])
    print("\n".join(screen.wrap(
        f"The real pair ({bench['models']['target']['file']} + "
        f"{bench['models']['draft']['file']}, k = {bench['settings']['k']}): measured SD ×raw "
        "end to end, and predicted from this run's acceptance with: the bench's own probe; "
        "the validation run's real and shape-true target probes (medians of its interleaved "
        "rounds; the shape-true target with the real draft's costs); "
        "the what-if run's shape-true 1.5B probe")))
    print(screen.table(["task", "measured", "own probe", "real (val.)", "shape (val.)",
                        "shape (what-if)", "holds"], rows))


if __name__ == "__main__":
    main(*sys.argv[1:4])
