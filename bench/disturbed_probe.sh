#!/bin/bash
# Issue 69's leftover, recorded for real: a bench whose cost probe runs beside a CPU hog (two
# busy processes on a 2-core machine) started 1 s into the probe (after the prefills,
# V(1) and V(2)) and stopped when the probe's ceiling is logged (or, where no ceiling line comes, once the
# first prompt has finished: that prompt is then disturbed too, and flagged BUSY), so V(2..) and
# the draft step are timed slow and the ceiling comes out low, as the red team saw. Nothing else
# may run on the machine.
#   OUT=bench/results/<machine>/disturbed/probe_hog_k4.json bash bench/disturbed_probe.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the results file to write}
LOG=$(mktemp)
HOGS=()
stop() { [ ${#HOGS[@]} -gt 0 ] && kill "${HOGS[@]}" 2>/dev/null; HOGS=(); }
trap 'stop; [ -n "${B:-}" ] && kill "$B" 2>/dev/null; rm -f "$LOG"' EXIT
trap 'exit 130' INT TERM
cpuspec bench --tasks json,code --prompts-per-task 5 -n 48 --policy static --threads 2 \
  --no-save --json "$OUT" 2> >(tee "$LOG" >&2) &
B=$!
until grep -q "cost probe: prefills" "$LOG"; do kill -0 $B 2>/dev/null || break; sleep 0.2; done
sleep 1.0
for _ in 1 2; do python3 -c "while True: pass" & HOGS+=($!); done
until grep -q "cost probe: even\|\[1/" "$LOG"; do kill -0 $B 2>/dev/null || break; sleep 0.2; done
stop
wait $B
