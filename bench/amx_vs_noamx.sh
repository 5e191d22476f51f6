#!/usr/bin/env bash
# Issue 68: the project's findings with the matrix engine on, beside an AMX-less build of the
# same llama-cpp-python, on the same CPU, alternating the two builds as `paths` alternates
# stacks. Only on a CPU whose flags list amx_tile (exit 2 elsewhere). One benchmark at a time:
# run nothing else meanwhile (a build, the tests).
#
#   AMX build:  .venv (the README's install; cpuspec's first-run check rebuilds it with the
#               tile patch where it crashes; `cpuspec rebuild --probe-only` is recorded)
#   no AMX:     .venv-noamx, the same checkout and llama-cpp-python built with -mno-amx-*
#               (made here once, ~10 min; its own CPUSPEC_HOME, the model files shared)
#
# Stages (STAGES, default all, in this order):
#   costs   V(n)/V(1) to 16 for the Q4_K_M, Q4_0 and Q8_0 pairs, threads 1 and 2, REPS rounds
#   bench   the default `cpuspec bench`, and the Q8_0 + Q4_0 pair at k = 7 (64 tokens)
#   tune    `cpuspec tune --budget 25` on prompts the project never tuned on (heldout6)
#   paths   cpuspec's loop beside llama-server (`paths --build-native` builds each once)
#   heads   EAGLE-3, DFlash, DSpark, MTP and a draft model in llama-server (shape-true)
#   whatif  shape-true 7B/14B targets and Qwen3-30B-A3B: least acceptance at which SD pays
#
#   OUT=bench/results/<machine>/amx bash bench/amx_vs_noamx.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qw amx_tile /proc/cpuinfo || { echo "this CPU has no AMX (no amx_tile flag): nothing" \
  "to compare here" >&2; exit 2; }
OUT="${OUT:?set OUT to bench/results/<machine>/amx}"
REPS="${1:-3}"
STAGES="${STAGES:-costs bench tune paths heads whatif}"
mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"
HOME_AMX="${CPUSPEC_HOME:-$HOME/.cache/cpuspec}"
HOME_NO="$HOME_AMX-noamx"
NOAMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

if [ ! -x .venv-noamx/bin/cpuspec ]; then
  echo "building the AMX-less llama-cpp-python in .venv-noamx (~10 min)" >&2
  python3 -m venv .venv-noamx
  CMAKE_ARGS="-DCMAKE_C_FLAGS='$NOAMX' -DCMAKE_CXX_FLAGS='$NOAMX'" \
    .venv-noamx/bin/pip install -q --no-cache-dir -e '.[test]'
fi
mkdir -p "$HOME_NO"; [ -e "$HOME_NO/models" ] || ln -s "$HOME_AMX/models" "$HOME_NO/models"
# like for like: one llama-cpp-python version in both builds (pyproject.toml pins it)
v_amx=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')
v_no=$(.venv-noamx/bin/python -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')
[ "$v_amx" = "$v_no" ] || { echo "llama-cpp-python $v_amx in .venv but $v_no in .venv-noamx:" \
  "not like for like; rebuild one of them" >&2; exit 2; }

# cs BUILD ARGS...: cpuspec from one build, with that build's home (native programs, results)
cs() {
  local b=$1; shift
  if [ "$b" = amx ]; then CPUSPEC_HOME="$HOME_AMX" .venv/bin/cpuspec "$@"
  else CPUSPEC_HOME="$HOME_NO" CMAKE_ARGS="-DCMAKE_C_FLAGS='$NOAMX' -DCMAKE_CXX_FLAGS='$NOAMX'" \
    .venv-noamx/bin/cpuspec "$@"; fi
}
# run NAME BUILD ARGS...: one measurement to OUT/NAME.{json,txt,log}, kept if already there.
# A measurement that fails is set aside as NAME.failed.* (measured again on the next run of
# the script) and the stages go on: one failing stage does not cost the others.
run() {
  local name=$1 b=$2; shift 2
  [ -e "$OUT/$name.json" ] || [ -e "$OUT/$name.json.gz" ] && { echo "kept: $name"; return; }
  local start rc=0; start=$(date +%s)
  cs "$b" "$@" --json "$OUT/$name.json" > "$OUT/$name.txt" 2> "$OUT/$name.log" || rc=$?
  if [ "$rc" -ne 0 ]; then
    for f in json txt log; do [ -e "$OUT/$name.$f" ] && mv -f "$OUT/$name.$f" "$OUT/$name.failed.$f"; done
    echo "$name: FAILED (exit $rc): $OUT/$name.failed.log" | tee -a "$OUT/failures.txt" >&2
    # Ctrl-C, SIGTERM or a closed terminal stops the script; a crash (139: SIGSEGV, 132:
    # SIGILL, 134: SIGABRT) is a finding, recorded, and the stages go on
    case "$rc" in 129|130|143) exit "$rc";; esac
    return 0
  fi
  echo "$name: $(( $(date +%s) - start )) s" | tee -a "$OUT/wall_times.txt"
  [ "$(stat -c %s "$OUT/$name.json")" -gt 65536 ] && gzip -9nf "$OUT/$name.json" || true
}
has() { [[ " $STAGES " == *" $1 "* ]]; }

# builds RUN: both builds, the order swapped on every other repetition (a drifting machine
# favours neither)
builds() { if [ $(( ${1:-1} % 2 )) -eq 1 ]; then echo "amx noamx"; else echo "noamx amx"; fi; }
for b in amx noamx; do
  cs "$b" hw --json > "$OUT/hw_$b.json"
  # untimed: the first command that runs a model does the build check (and a rebuild where
  # the build crashes), so no measured run absorbs it
  cs "$b" costs --pair qwen2.5-coder-1.5b --max-n 2 --reps 1 --no-save \
    > "$OUT/first_check_$b.txt" 2>&1 || true
  cs "$b" rebuild --probe-only > "$OUT/probe_$b.txt" 2>&1 || true
done

if has costs; then
  for r in $(seq 1 "$REPS"); do
    for t in 2 1; do
      for p in qwen2.5-coder-1.5b qwen2.5-coder-1.5b-q4_0 qwen2.5-coder-1.5b-q8_0; do
        for b in $(builds "$r"); do
          run "costs_${p#qwen2.5-coder-1.5b}_t${t}_${b}_r$r" "$b" costs --pair "$p" \
            --max-n 16 --reps 3 -t "$t" --no-save
        done
      done
    done
  done
fi
if has bench; then
  for b in $(builds 1); do run "bench_default_$b" "$b" bench; done
  for b in $(builds 2); do
    run "bench_q8_0_k7_$b" "$b" bench --pair qwen2.5-coder-1.5b-q8_0 -k 7 -n 64 --threads 2
  done
  for b in $(builds 1); do
    run "heldout6_q8_0_k7_$b" "$b" bench --pair qwen2.5-coder-1.5b-q8_0 -k 7 -n 64 \
      --threads 2 --prompts bench/prompts_heldout6.jsonl --tasks json,code,story
  done
fi
if has tune; then
  for b in $(builds 2); do
    run "tune_b25_heldout5_$b" "$b" tune --budget 25 --tasks json,code \
      --prompts bench/prompts_heldout5.jsonl
  done
fi
if has paths; then
  for b in $(builds 1); do
    run "paths_q8_0_k7_$b" "$b" paths --build-native --paths cpuspec,llama-server -t 2 \
      --pair qwen2.5-coder-1.5b-q8_0 -k 7 --tasks json,code --prompts-per-task 5 -n 64
  done
fi
if has heads; then
  for b in $(builds 2); do
    run "heads_qwen3_4b_$b" "$b" heads --lengths 2,4 -n 64
  done
fi
if has whatif; then
  for b in $(builds 1); do
    run "whatif_sizes_$b" "$b" costs --sizes 1.5b,7b,14b --quants Q4_K_M,Q4_0,Q8_0 --max-n 9 \
      --no-save
    run "whatif_moe_$b" "$b" costs --pairs qwen3-0.6b:qwen3-30b-a3b --quants Q4_0 --max-n 9 \
      --no-save
  done
fi
echo "done: $OUT" >&2
