#!/usr/bin/env bash
# Issue 59: the families what-if on this CPU (docs/families.md), in two runs so that a disk
# of ~80 GB free holds each run's files: the run of machine E (4B-14B dense, the MoE, Gemma 3
# 4B/12B, Llama 3.1 8B), then the largest dense targets (Qwen3-32B, Gemma 3 27B) beside the 14B
# and 12B of the same families, measured in the same run. Between the runs the first run's
# shape-true files that the second does not use are deleted (they are rewritten on demand).
# The acceptance profile borrowed is the default pair's, measured on machine E (as E's run).
#   OUT=bench/results/<machine> bash bench/whatif_families.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:?set OUT to bench/results/<machine>}"
PROFILE="${PROFILE:-bench/results/xeon-family6-model167/bench_newcomer.json.gz}"
mkdir -p "$OUT"
run() {   # NAME PAIRS
  local start=$(date +%s)
  .venv/bin/cpuspec costs --pairs "$2" --max-n 9 --acceptance "$PROFILE" --json "$OUT/$1.json" \
    > "$OUT/$1.txt" 2> "$OUT/$1.log"
  echo "$1: $(( $(date +%s) - start )) s" | tee -a "$OUT/whatif_families_times.txt"
}
run whatif_families "qwen3-0.6b:qwen3-4b,qwen3-0.6b:qwen3-8b,qwen3-0.6b:qwen3-14b,\
qwen3-0.6b:qwen3-30b-a3b,gemma3-270m:gemma3-4b,gemma3-270m:gemma3-12b,llama3.2-1b:llama3.1-8b"
shapes="${CPUSPEC_HOME:-$HOME/.cache/cpuspec}/models/shape-true"
for name in qwen3-4b qwen3-8b qwen3-30b-a3b-spread gemma3-4b llama3.1-8b; do
  rm -f "$shapes/$name"-q4_k_m.shape-true-v*.gguf
done
run whatif_families_large "qwen3-0.6b:qwen3-14b,qwen3-0.6b:qwen3-32b,gemma3-270m:gemma3-12b,\
gemma3-270m:gemma3-27b"
