#!/usr/bin/env bash
# Issue 60: the default bench (sequential design) against `--fixed` on the same prompts,
# alternating, PAIRS pairs (default 1), nothing else running. Each run's wall time and its
# first screen go to OUT (default bench/results/<machine>/sequential_vs_fixed/).
#   bash bench/sequential_vs_fixed.sh [PAIRS] [extra bench flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS="${1:-1}"; shift || true
machine="$(python3 -c 'import platform,re;print(re.sub("[^a-z0-9]+","-",open("/proc/cpuinfo").read().split("model name")[1].split(":")[1].split("\n")[0].strip().lower()))' 2>/dev/null || echo machine)"
OUT="${OUT:-bench/results/$machine/sequential_vs_fixed}"
mkdir -p "$OUT"
for i in $(seq 1 "$PAIRS"); do
  for mode in sequential fixed; do
    flag=""; [ "$mode" = fixed ] && flag="--fixed"
    start=$(date +%s)
    .venv/bin/cpuspec bench $flag --json "$OUT/${mode}_$i.json" "$@" > "$OUT/${mode}_$i.txt" 2> "$OUT/${mode}_$i.log"
    echo "$mode $i: $(( $(date +%s) - start )) s" | tee -a "$OUT/wall_times.txt"
  done
done
