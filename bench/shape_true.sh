#!/usr/bin/env bash
# Issue 50's findings on this machine, in order, each step alone on the cores:
#  1. validation: the shape-true 0.5B/1.5B against the real pinned files (Q4_K_M) and their
#     Q4_0/Q8_0 derivations, interleaved rounds (bench/shape_true_validate.py);
#  2. a real bench of the default pair (static, k = 4): the acceptance the cross-check uses;
#  3. the what-if: shape-true 1.5B, 3B, 7B and 14B targets with the real 0.5B draft, at
#     Q4_K_M and Q4_0 (`cpuspec costs --sizes`): the quants the validation holds; Q8_0's
#     shape-true decode ran faster than the real file's (docs/shape-true.md), so not Q8_0;
#  4. the cross-check: the real pair's measured SD ×raw against the predictions from the
#     bench's own probe, the validation's real and shape-true probes and the what-if's
#     (bench/shape_true_crosscheck.py).
# Usage: bash bench/shape_true.sh [OUT_DIR]   (default bench/results/<machine>)
set -euo pipefail
machine="epyc-family$(awk '/^cpu family/{print $4; exit}' /proc/cpuinfo)-model$(awk '/^model[[:space:]]/{print $3; exit}' /proc/cpuinfo)"
OUT="${1:-bench/results/$machine}"
mkdir -p "$OUT"
[ -f "$OUT/shape_validation.json.gz" ] || python bench/shape_true_validate.py 10 "$OUT/shape_validation.json.gz"
cpuspec report "$OUT/shape_validation.json.gz" > "$OUT/shape_validation.txt"
[ -f "$OUT/crosscheck_bench_q4km_k4.json.gz" ] || cpuspec bench --tasks json,code --prompts-per-task 8 \
  -n 64 -k 4 --policy static --no-save --json "$OUT/crosscheck_bench_q4km_k4.json.gz" \
  > "$OUT/crosscheck_bench_q4km_k4.txt"
[ -f "$OUT/whatif_q4km_q4_0.json" ] || cpuspec costs --sizes 1.5b,3b,7b,14b \
  --quants Q4_K_M,Q4_0 --max-n 9 --no-save --json "$OUT/whatif_q4km_q4_0.json" \
  > "$OUT/whatif_q4km_q4_0.txt"
python bench/shape_true_crosscheck.py "$OUT/crosscheck_bench_q4km_k4.json.gz" \
  "$OUT/shape_validation.json.gz" "$OUT/whatif_q4km_q4_0.json" > "$OUT/shape_true_crosscheck.txt"
cat "$OUT/shape_validation.txt" "$OUT/whatif_q4km_q4_0.txt" "$OUT/shape_true_crosscheck.txt"
