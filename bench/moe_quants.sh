#!/usr/bin/env bash
# Issue 59, item 4: Qwen3-30B-A3B at Q4_0 (Q4_K_M: docs/moe.md's other runs), with the batch
# spread over experts (the verify's worst case) and routed alike (its best case), beside the
# dense Qwen3-4B at Q4_0, in one run; the draft a shape-true Qwen3-0.6B (docs/moe.md). About
# 37 GB of shape-true files are written first.
#   OUT=bench/results/<machine> bash bench/moe_quants.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:?set OUT to bench/results/<machine>}"
mkdir -p "$OUT"
draft="$(.venv/bin/cpuspec models shape qwen3-0.6b)"
start=$(date +%s)
.venv/bin/cpuspec costs --sizes qwen3-30b-a3b,qwen3-30b-a3b-same-route,qwen3-4b \
  --quants Q4_0 --draft "$draft" --max-n 16 --reps 3 --json "$OUT/whatif_moe_quants.json" \
  > "$OUT/whatif_moe_quants.txt" 2> "$OUT/whatif_moe_quants.log"
echo "whatif_moe_quants: $(( $(date +%s) - start )) s" | tee "$OUT/whatif_moe_quants_time.txt"
