#!/usr/bin/env bash
# Lossless, proven (issue 78): the default pair as a new user runs it (`cpuspec bench`, its
# defaults) with every SD output's verifies replayed (--exact-audit), then Q4_0 and Q8_0 targets
# (derived from the pinned Q4_K_M where the hub is out of reach) with the same draft on 5 prompts
# a task: each run records the exact audit, each divergence from plain decoding classified
# (numeric or defect), the batched-vs-one-token logit drift of its target, and what the audit
# took (seconds per output). One benchmark at a time: nothing else may run on the machine.
# Usage: OUT=bench/results/<machine>/lossless bash bench/lossless.sh
set -uo pipefail
cd "$(dirname "$0")/.."
machine="epyc-family$(awk '/^cpu family/{print $4; exit}' /proc/cpuinfo)-model$(awk '/^model[[:space:]]/{print $3; exit}' /proc/cpuinfo)"
OUT="${OUT:-bench/results/$machine/lossless}"
mkdir -p "$OUT"
run() {   # NAME ARGS...: a run whose file exists is kept (a rerun measures only what is missing)
  local name=$1; shift
  if [ -s "$OUT/$name.json.gz" ]; then echo "lossless: $name kept"; return; fi
  cpuspec bench --exact-audit "$@" --json "$OUT/$name.json.gz" --force \
    >"$OUT/$name.txt" 2>"$OUT/$name.log" || { mv "$OUT/$name.log" "$OUT/$name.failed.log"; \
    echo "lossless: $name failed ($OUT/$name.failed.log)"; return; }
  cpuspec report "$OUT/$name.json.gz" --details >"$OUT/$name.details.txt"
}
run default_q4km
run q4_0_target --target qwen2.5-coder-1.5b-q4_0 --fixed --prompts-per-task 5
run q8_0_target --target qwen2.5-coder-1.5b-q8_0 --fixed --prompts-per-task 5
echo "lossless: done: $OUT"
