"""How much identical work varies between modes on this machine: for every adaptive generation
that never drafted, its plain decode time against the raw mode's on the same prompt and
repetition (same tokens), per recorded adaptive run.

    python bench/plain_vs_plain.py bench/results/epyc-family25-model17/adaptive*.json
"""
import collections
import statistics
import sys

from cpuspec.schema import read_json


def ratios(path: str) -> list[float]:
    runs = collections.defaultdict(dict)
    for r in read_json(path)["runs"]:
        runs[(r["prompt_id"], r["repetition"])][r["mode"]] = r
    return [m["adaptive"]["decode_s"] / m["raw"]["decode_s"] for m in runs.values()
            if "adaptive" in m and "raw" in m and not any(x[0] for x in m["adaptive"]["rounds"])
            and len(m["adaptive"]["tokens"]) == len(m["raw"]["tokens"])]


if __name__ == "__main__":
    for path in sys.argv[1:]:
        if r := ratios(path):
            print(f"{path.rsplit('/', 1)[-1]:48s} {len(r):3d} plain generations: adaptive ÷ raw "
                  f"decode median {statistics.median(r):.3f}, range {min(r):.3f}–{max(r):.3f}")
