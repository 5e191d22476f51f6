#!/usr/bin/env bash
# Issue 59: gpt-oss-20b shape-true (MXFP4 experts, the rest Q8_0, a stand-in GPT-2 vocabulary)
# loads and decodes at its published size, and its verify cost V(n)/V(1) beside Qwen3-30B-A3B
# (the other MoE, spread routing) and the dense Qwen3-4B, in one run (docs/moe.md). The Qwen
# targets are probed with a shape-true Qwen3-0.6B draft; gpt-oss, which has no smaller sibling
# and shares no vocabulary with another family, with itself (c = 1: its row's least p says
# nothing; its V(n) is what it is there for).
#   OUT=bench/results/<machine> bash bench/gpt_oss_costs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:?set OUT to bench/results/<machine>}"
mkdir -p "$OUT"
start=$(date +%s)
.venv/bin/python bench/families_decode.py gpt-oss-20b | tee "$OUT/families_decode_gpt_oss.txt"
echo "families_decode gpt-oss-20b: $(( $(date +%s) - start )) s" | tee -a "$OUT/gpt_oss_times.txt"
start=$(date +%s)
.venv/bin/cpuspec costs --pairs gpt-oss-20b:gpt-oss-20b,qwen3-0.6b:qwen3-30b-a3b,qwen3-0.6b:qwen3-4b \
  --max-n 16 --reps 3 --json "$OUT/whatif_moe_gpt_oss.json" > "$OUT/whatif_moe_gpt_oss.txt" \
  2> "$OUT/whatif_moe_gpt_oss.log"
echo "costs: $(( $(date +%s) - start )) s" | tee -a "$OUT/gpt_oss_times.txt"
