#!/usr/bin/env bash
# p-min (llama.cpp's --spec-draft-p-min, confidence-gated drafting) against the adaptive policy,
# on tune's pick for machines B/C (Q8_0 target, Q4_0 draft, k = 7): 21 prompts (json, code,
# story; 7 each), 64 tokens, 2 threads. One run with the static policy at p-min 0
# and the adaptive policy beside it, then a sweep of the static policy at p-min 0.5 and 0.8;
# every SD ×raw is taken within its own run (each point has its own raw decoding). Last, the
# paths at p-min 0.8, so the server and llama.cpp run gated as cpuspec does.
# Usage: bash bench/pmin_sweep.sh [OUT_DIR]   (default bench/results/<machine>)
set -euo pipefail
cd "$(dirname "$0")/.."
machine="epyc-family$(awk '/^cpu family/{print $4; exit}' /proc/cpuinfo)-model$(awk '/^model[[:space:]]/{print $3; exit}' /proc/cpuinfo)"
OUT="${1:-bench/results/$machine}"
mkdir -p "$OUT"
common=(--pair qwen2.5-coder-1.5b-q8_0 -k 7 --tasks json,code,story
        --prompts-per-task 7 -n 64 --threads 2)
[ -e "$OUT/pmin0_adaptive_q8_0_k7.json.gz" ] || cpuspec bench "${common[@]}" --policy static,adaptive \
  --json "$OUT/pmin0_adaptive_q8_0_k7.json.gz" --details | tee "$OUT/pmin0_adaptive_q8_0_k7.txt"
[ -e "$OUT/pmin_sweep_q8_0_k7.json.gz" ] || cpuspec bench "${common[@]}" --policy static \
  --p-min 0.5,0.8 --json "$OUT/pmin_sweep_q8_0_k7.json.gz" | tee "$OUT/pmin_sweep_q8_0_k7.txt"
# p-min carried into llama.cpp's programs and the server (every path gated alike)
[ -e "$OUT/server_q8_0_k7_pmin0.8.json" ] || cpuspec paths --pair qwen2.5-coder-1.5b-q8_0 -k 7 \
  --p-min 0.8 --paths cpuspec,llama.cpp,llama-server -t 2 --tasks json,code --prompts-per-task 5 \
  -n 64 --json "$OUT/server_q8_0_k7_pmin0.8.json" | tee "$OUT/server_q8_0_k7_pmin0.8.txt"
