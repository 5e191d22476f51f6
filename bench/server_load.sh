#!/usr/bin/env bash
# Issues 51 and 53 (item 2) on this machine, each step alone on the cores:
#  1. SD under load: llama-server plain and with SD at 1, 2 and 4 requests in flight, for the
#     default pair (k = 4) and tune's pick (Q8_0 target + Q4_0 draft, k = 7); 5 batches per
#     level and server, one request per client each; then the draftless --spec-default on
#     long-edit at 1 and 2 in flight;
#  2. the server's own k: cpuspec's loop and llama-server at k = 7 on the built-in json/code
#     prompts (what prices the server's rounds), then the loop's k and the server's own k on
#     held-out prompts (bench/prompts_heldout6.jsonl) that chose nothing.
# Needs llama.cpp's programs (`cpuspec paths --build-native`) and the derived Q8_0/Q4_0 files.
# Usage: bash bench/server_load.sh [OUT_DIR] ['K K ...']   (e.g. '7 3 5')
set -euo pipefail
machine="epyc-family$(awk '/^cpu family/{print $4; exit}' /proc/cpuinfo)-model$(awk '/^model[[:space:]]/{print $3; exit}' /proc/cpuinfo)"
OUT="${1:-bench/results/$machine}"
mkdir -p "$OUT"
Q8=$(cpuspec models path qwen2.5-coder-1.5b-q8_0)
Q4D=$(cpuspec models path qwen2.5-coder-0.5b-q4_0)
run() { local name=$1; shift; [ -f "$OUT/$name.json" ] || cpuspec paths "$@" --json "$OUT/$name.json" > "$OUT/$name.txt"; }
run load_default_k4 --concurrency 1,2,4 --batches 5 -n 48
run load_q8_0_k7 --target "$Q8" --draft "$Q4D" -k 7 --concurrency 1,2,4 --batches 5 -n 48
# one draftless flag (no draft context per slot) on a long input it can copy from, 1 and 2 in
# flight (a request here is ~30 s of prefill: 4 in flight would take an hour on 2 cores)
run load_spec_default_long-edit --drafter lookup --server-flags '--spec-default' \
  --tasks long-edit --concurrency 1,2 --batches 5 -n 64
run load_spec_default_long-edit_q8_0 --target "$Q8" --drafter lookup \
  --server-flags '--spec-default' --tasks long-edit --concurrency 1,2 --batches 5 -n 64
run server_k_q8_0_k7 --target "$Q8" --draft "$Q4D" -k 7 --paths cpuspec,llama-server
[ -f "$OUT/bench_q8_0_k7_serverk.json.gz" ] || cpuspec bench --target "$Q8" --draft "$Q4D" -k 7 \
  --tasks json,code --prompts-per-task 5 -n 64 --policy static \
  --json "$OUT/bench_q8_0_k7_serverk.json.gz" > "$OUT/bench_q8_0_k7_serverk.txt"
# the server's own k, priced from the saved paths run above (saved runs: $CPUSPEC_HOME/results)
[ -f "$OUT/advise_q8_0_k7_serverk.txt" ] || \
  cpuspec advise "$OUT/bench_q8_0_k7_serverk.json.gz" > "$OUT/advise_q8_0_k7_serverk.txt"
cat "$OUT/advise_q8_0_k7_serverk.txt"
# the server's rounds per k on prompts nothing was chosen on: the loop and the server at the
# server's own k and around it (3, 5, 7 here: the own k came out as the loop's, 7)
if [ -n "${2:-}" ]; then
  for k in $2; do
    run "server_k_heldout6_q8_0_k$k" --target "$Q8" --draft "$Q4D" -k "$k" \
      --paths cpuspec,llama-server --prompts bench/prompts_heldout6.jsonl --tasks json,code \
      --prompts-per-task 5
  done
fi
