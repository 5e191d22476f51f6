#!/usr/bin/env bash
# Issue 59: gpt-oss-20b shape-true (MXFP4 experts, the rest Q8_0, a stand-in GPT-2 vocabulary)
# loads and decodes at its published size, and its verify cost V(n)/V(1) beside Qwen3-30B-A3B
# (the other MoE, spread routing) and the dense Qwen3-4B, in one run (docs/moe.md). The draft
# is a shape-true Qwen3-0.6B: only its decode is timed (c), and for gpt-oss, which has no
# smaller sibling, that is a 0.6B draft's cost, not a gpt-oss draft's.
#   OUT=bench/results/<machine> bash bench/gpt_oss_costs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:?set OUT to bench/results/<machine>}"
mkdir -p "$OUT"
start=$(date +%s)
.venv/bin/python bench/families_decode.py gpt-oss-20b | tee "$OUT/families_decode_gpt_oss.txt"
echo "families_decode gpt-oss-20b: $(( $(date +%s) - start )) s" | tee -a "$OUT/gpt_oss_times.txt"
draft="$(.venv/bin/cpuspec models shape qwen3-0.6b)"
start=$(date +%s)
.venv/bin/cpuspec costs --sizes gpt-oss-20b,qwen3-30b-a3b,qwen3-4b --draft "$draft" --max-n 16 \
  --reps 3 --json "$OUT/whatif_moe_gpt_oss.json" > "$OUT/whatif_moe_gpt_oss.txt" \
  2> "$OUT/whatif_moe_gpt_oss.log"
echo "costs: $(( $(date +%s) - start )) s" | tee -a "$OUT/gpt_oss_times.txt"
