#!/usr/bin/env bash
# Issue 60: `cpuspec tune --budget 25` with the confirmation race against tune as it was before
# it (BEFORE, default 68c099d: each answer confirmed alone on every confirm prompt), the same
# settings, one after the other, nothing else running. Each run's file, screen, log and wall
# time go to OUT; bench/tune_confirmed.py counts the answers each confirmed.
#   OUT=bench/results/<machine>/tune_race bash bench/tune_race_vs_before.sh [extra tune flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:?set OUT to bench/results/<machine>/tune_race}"
BEFORE="${BEFORE:-68c099d}"
mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"; here="$PWD"
old="$(mktemp -d)"
trap 'git worktree remove --force "$old/src" >/dev/null 2>&1 || true; rm -rf "$old"' EXIT INT TERM
git worktree add --detach "$old/src" "$BEFORE" >/dev/null
args=(--budget 25 --tasks json,code --prompts-per-task 12 "$@")
for run in before race; do
  src="$here"; [ "$run" = before ] && src="$old/src"
  start=$(date +%s)
  # run from the source's own folder: python puts it first on sys.path, ahead of the
  # editable install of this checkout
  (cd "$src" && "$here/.venv/bin/python" -m cpuspec tune "${args[@]}" --json "$OUT/$run.json" \
    > "$OUT/$run.txt" 2> "$OUT/$run.log")
  echo "$run: $(( $(date +%s) - start )) s" | tee -a "$OUT/wall_times.txt"
  gzip -9nf "$OUT/$run.json"   # results over 64 KB are kept gzipped
done
.venv/bin/python bench/tune_confirmed.py "$OUT/before.json.gz" "$OUT/race.json.gz" \
  | tee "$OUT/confirmed.txt"
