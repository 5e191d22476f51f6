#!/usr/bin/env bash
# llama-server measured beside cpuspec's loop and llama-speculative-simple (issue "In the server
# people run"): the default pair, the Q4_0 pair at k = 3 and tune's pick on machines B/C (Q8_0
# target, Q4_0 draft, k = 7), each through `cpuspec paths` on the built-in json and code
# prompts (5 each, 64 tokens, 2 threads). Then llama.cpp's draftless types in the server
# against cpuspec's lookup on the grounded task (answers that copy from their input; the long
# suites' ~1,000-token prompts take ~35 s to prefill on 2 cores, 4 reads per prompt per path:
# LONG=1 runs them on long-edit instead; FOLLOWUP=1 adds long-followup's second turn). One
# benchmark at a time: run nothing else meanwhile.
#
# Needs llama.cpp's programs: `cpuspec paths --build-native` once (~16 min on 2 cores).
# Usage: bash bench/server_paths.sh [OUT_DIR]   (default bench/results/<machine>)
set -euo pipefail
cd "$(dirname "$0")/.."
machine="epyc-family$(awk '/^cpu family/{print $4; exit}' /proc/cpuinfo)-model$(awk '/^model[[:space:]]/{print $3; exit}' /proc/cpuinfo)"
OUT="${1:-bench/results/$machine}"
mkdir -p "$OUT"
common=(--paths cpuspec,llama.cpp,llama-server -t 2 --tasks json,code --prompts-per-task 5 -n 64)
run() { local name=$1; shift; [ -e "$OUT/$name.json" ] && { echo "kept: $OUT/$name.json"; return; }
        cpuspec paths "$@" --json "$OUT/$name.json" | tee "$OUT/$name.txt"; }
run server_default_k4 "${common[@]}" -k 4
run server_q4_0_k3 "${common[@]}" --pair qwen2.5-coder-1.5b-q4_0 -k 3
run server_q8_0_k7 "${common[@]}" --pair qwen2.5-coder-1.5b-q8_0 -k 7
if [ "${DRAFTLESS:-1}" = 1 ]; then
  task=grounded; [ "${LONG:-0}" = 1 ] && task=long-edit
  copy=(--pair qwen2.5-coder-1.5b-q8_0 --drafter lookup -k 7 -t 2 --tasks "$task"
        --prompts-per-task 5 -n 64 --paths cpuspec,llama-server)
  run "server_ngram_simple_$task" "${copy[@]}"
  run "server_ngram_mod_$task" "${copy[@]}" --server-flags '--spec-type ngram-mod'
  run "server_spec_default_$task" "${copy[@]}" --server-flags '--spec-default'
fi
# Follow-up turns (FOLLOWUP=1): long-followup's second turn ("now add type hints to the module
# you just described"), the whole conversation read by every path; the lookup against the
# server's ngram-simple (its own flags), or against FOLLOWUP_FLAGS (e.g. '--spec-default').
if [ "${FOLLOWUP:-0}" = 1 ]; then
  follow=(--pair qwen2.5-coder-1.5b-q8_0 --drafter lookup -k 7 -t 2 --tasks long-followup
          --prompts-per-task 5 -n 64 --paths cpuspec,llama-server)
  if [ -n "${FOLLOWUP_FLAGS:-}" ]; then
    name=$(printf '%s' "$FOLLOWUP_FLAGS" | tr -cs 'a-z0-9' '_' | sed 's/^_*//; s/_*$//')
    run "server_${name}_long-followup" "${follow[@]}" --server-flags "$FOLLOWUP_FLAGS"
  else
    run server_ngram_simple_long-followup "${follow[@]}"
  fi
fi
