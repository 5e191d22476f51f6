#!/usr/bin/env bash
# Issue 20's runs on whatever machine runs it, into bench/results/NAME: SD at depth (0, 1 k, 4 k
# and 8 k tokens of context held before each prompt) for the default pair and for the
# configuration tune picks here (Q8_0 target + Q4_0 draft, k = 7, on machines B and C), then
# the adaptive policy on the long suites and on held-out prompts, at 64 and 128 tokens.
# One after another, nothing else running. From the repository root, with cpuspec installed.
set -euo pipefail
NAME=${1:?usage: bench/run_depth.sh NAME   (results go to bench/results/NAME)}
PART=${2:-all}   # depth | adaptive | long (the long suite and the long held-out set only) | all
case $PART in depth|adaptive|long|all) ;;
  *) echo "run_depth.sh: PART must be depth, adaptive, long or all, not '$PART'" >&2; exit 2 ;;
esac
R=bench/results/$NAME
mkdir -p "$R"
# kept OUT: true where OUT.json or OUT.txt exists already (never overwritten: skipped, named)
kept() {
  if [ -e "$1.json" ] || [ -e "$1.txt" ]; then
    echo "run_depth.sh: $1.json exists, skipped (a new tag, the third argument, runs it again)" >&2
    return 0
  fi
  return 1
}
T8=$(cpuspec models path qwen2.5-coder-1.5b-q8_0)
D4=$(cpuspec models path qwen2.5-coder-0.5b-q4_0)
D="--tasks json,code --prompts-per-task 5 --max-tokens 64 --policy static --threads 2 --no-save"
if [ "$PART" = depth ] || [ "$PART" = all ]; then
  kept $R/depth_q4km_k4 ||
    cpuspec bench $D --depth 0,1024,4096,8192 --json $R/depth_q4km_k4.json.gz > $R/depth_q4km_k4.txt
  # (recorded on machine B without 8192 here, for time: the default pair's 8 k point read
  # 8 k tokens again after every prompt whose output differed, since fixed)
  kept $R/depth_q8_0_k7 || cpuspec bench $D --target "$T8" --draft "$D4" -k 7 \
    --depth 0,1024,4096 --json $R/depth_q8_0_k7.json.gz > $R/depth_q8_0_k7.txt
  # 8 k on its own (a later session); `cpuspec plot` joins it to the sweep's line
  kept $R/depth_q8_0_k7_8k || cpuspec bench $D --target "$T8" --draft "$D4" -k 7 --depth 8192 \
    --json $R/depth_q8_0_k7_8k.json.gz > $R/depth_q8_0_k7_8k.txt
  # tune's prediction of the same pick at each depth, from its cost curves there and the
  # acceptance of its choosing prompts at depth 0 (no confirmation runs)
  kept $R/tune_depths_q8_0 || cpuspec tune --targets qwen2.5-coder-1.5b-q8_0 \
    --drafts qwen2.5-coder-0.5b-q4_0 --tasks json,code --k-max 7 --depths 0,1024,4096 \
    --no-confirm --threads 2 --no-save --json $R/tune_depths_q8_0.json.gz > $R/tune_depths_q8_0.txt
fi
# adaptive NAME ARGS...: one run into $R/NAME$TAG.{json,txt}; an existing result is never
# overwritten but skipped, so an interrupted sweep resumes where it stopped (to run one again,
# give it a new TAG, the third argument: bench/run_depth.sh B adaptive v3)
TAG=${3:+_$3}
# WINDOW=HEAD,TAIL: the draft reads only a long prompt's first HEAD and last TAIL tokens
# (--draft-window; give such runs a tag of their own, e.g. bench/run_depth.sh B long w256)
adaptive() {
  local out=$R/$1$TAG; shift
  kept "$out" && return 0
  cpuspec bench --target "$T8" --draft "$D4" -k 7 --policy static,adaptive --threads 2 \
    ${WINDOW:+--draft-window "$WINDOW"} --no-save "$@" --json "$out.json" > "$out.txt"
}
if [ "$PART" = long ]; then
  # again, at the lengths given (LENGTHS="128 64" by default): where a ratio's noise (one
  # prompt's target prefill wandering between modes) hides whether the goal is met, a second
  # run of the same configuration pools with the first (bench/research/shared_prefill.py --pool).
  # SETS picks among heldout_long4 (set 4, written after policy v9), heldout_long3 (set 3,
  # written after policy v8), heldout_long2 (set 2,
  # written after the exploration margin), heldout_long and long (the long suites); by default
  # heldout_long2, heldout_long and long
  for n in ${LENGTHS:-128 64}; do
    for set in ${SETS:-heldout_long2 heldout_long long}; do
      case $set in
        heldout_long4|heldout_long3|heldout_long2|heldout_long) adaptive adaptive_${set}_q8_0_k7_n$n \
          --prompts bench/prompts_$set.jsonl --max-tokens $n ;;
        long) adaptive adaptive_long_q8_0_k7_n$n --tasks long-edit,long-explain,long-doc \
          --max-tokens $n ;;
        *) echo "run_depth.sh: SETS takes heldout_long4, heldout_long3, heldout_long2, heldout_long and long, not '$set'" >&2
           exit 2 ;;
      esac
    done
  done
  exit 0
fi
if [ "$PART" = adaptive ] || [ "$PART" = all ]; then
  for n in 64 128; do
    # the sixth held-out set, 10 prompts per task, written with the policy unchanged since v6
    adaptive adaptive_heldout6_q8_0_k7_n$n --prompts bench/prompts_heldout6.jsonl --max-tokens $n
    # the fifth held-out set, 10 prompts per task, written after the fourth led to policy v6
    adaptive adaptive_heldout5_q8_0_k7_n$n --prompts bench/prompts_heldout5.jsonl --max-tokens $n
    # the fourth held-out set, 12 prompts per task (written after the third had been run once)
    adaptive adaptive_heldout4_q8_0_k7_n$n --prompts bench/prompts_heldout4.jsonl --max-tokens $n
  done
  for n in 128 64; do
    # held out from every change to the policy (written after the last one, 1e4beea): short
    # prompts of five tasks, two new to it, and the long suites' instructions over other texts
    adaptive adaptive_heldout3_q8_0_k7_n$n --prompts bench/prompts_heldout3.jsonl --max-tokens $n
    adaptive adaptive_heldout_long_q8_0_k7_n$n --prompts bench/prompts_heldout_long.jsonl \
      --max-tokens $n
    # the second held-out set, 8 prompts per task, written after the first had shaped the
    # policy's prefill exploration and re-entry budget
    adaptive adaptive_heldout2_q8_0_k7_n$n --prompts bench/prompts_heldout2.jsonl \
      --max-tokens $n
    adaptive adaptive_heldout_q8_0_k7_n$n --prompts bench/prompts_heldout.jsonl --max-tokens $n
    adaptive adaptive_long_q8_0_k7_n$n --tasks long-edit,long-explain,long-doc --max-tokens $n
  done
fi
