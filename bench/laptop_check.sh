#!/usr/bin/env bash
# The first real laptop's record (issue 77): run once after the README's install, on a MacBook,
# a Linux laptop or an Arm board (Windows: bench/laptop_check.ps1), with the venv active and
# the machine on power, other programs closed. It writes one folder to send back:
#   hw.txt, hw.json           what cpuspec sees: cores by kind, OS, pinning, default threads,
#                             the build's backends (Metal, CUDA, Vulkan...)
#   bench_default.*           a short bench at llama.cpp's default threads (5 prompts a task,
#                             json/code/story, 64 tokens, --fixed)
#   bench_p_cores.*           the same on the P-cores only, where the OS lets a program pin
#   bench_e_cores.*           the same on the E-cores only, where the CPU has them
#   NAME.failed.txt           a stage that failed, with its output; the others still run
#   README.txt                what ran, and on which OS
# About 10-20 minutes on a recent laptop (the first run also downloads the 1.6 GB pair).
# Usage: bash bench/laptop_check.sh [OUT_DIR]   (default: ./laptop-check-DATE)
#        LAPTOP_CHECK_ARGS="--target T.gguf --draft D.gguf" adds options to every bench
set -uo pipefail
if ! command -v cpuspec >/dev/null 2>&1; then
  echo "laptop_check: cpuspec is not on PATH: run the README's install, then activate its venv" >&2
  exit 2
fi
OUT="${1:-laptop-check-$(date +%Y%m%d-%H%M%S)}"
if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT" 2>/dev/null)" ]; then
  echo "laptop_check: $OUT exists and is not empty; give another folder" >&2
  exit 2
fi
mkdir -p "$OUT" || exit 2
SHORT=(--tasks json,code,story --prompts-per-task 5 --fixed --max-tokens 64)
read -r -a EXTRA <<<"${LAPTOP_CHECK_ARGS:-}"
SHORT+=("${EXTRA[@]}")

stage() {   # stage NAME ARGS...: run one cpuspec command; a failure is kept, not fatal
  local name=$1; shift
  echo "laptop_check: $name: cpuspec $*"
  if ! cpuspec "$@" >"$OUT/$name.txt" 2>"$OUT/$name.log"; then
    cat "$OUT/$name.txt" "$OUT/$name.log" >"$OUT/$name.failed.txt" 2>/dev/null
    rm -f "$OUT/$name.txt"
    echo "laptop_check: $name failed (kept in $OUT/$name.failed.txt); going on"
  fi
}

stage hw hw
cpuspec hw --json >"$OUT/hw.json" 2>/dev/null || true
# what this OS and CPU allow: pinning mode, P-cores and E-cores (physical)
read -r PINNING N_P N_E < <(python - "$OUT/hw.json" <<'PY' 2>/dev/null || echo "unknown 0 0"
import json, sys
d = json.load(open(sys.argv[1]))
kinds = {}
for c in d.get("cores", []):
    kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
print(d.get("pinning", "unknown"), kinds.get("P", 0), kinds.get("E", 0))
PY
)
stage bench_default bench "${SHORT[@]}" --json "$OUT/bench_default.json"
if [ "$PINNING" = "none" ]; then
  echo "laptop_check: this OS lets no program choose cores: P-only and E-only runs skipped"
elif [ "$N_E" -gt 0 ]; then
  stage bench_p_cores bench "${SHORT[@]}" --p-cores "$N_P" --json "$OUT/bench_p_cores.json"
  stage bench_e_cores bench "${SHORT[@]}" --e-cores "$N_E" --json "$OUT/bench_e_cores.json"
else
  echo "laptop_check: one kind of core ($N_P): no P/E split to measure"
fi
{
  echo "cpuspec laptop check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "OS: $(uname -srm); pinning: $PINNING; P-cores: $N_P; E-cores: $N_E"
  echo "cpuspec $(python -c 'import cpuspec; print(cpuspec.__version__)' 2>/dev/null)"
  echo "Send this folder back (an issue on the project, or a mail): it holds no prompt text"
  echo "beyond the built-in suites, no user name and no path outside it."
} >"$OUT/README.txt"
echo "laptop_check: done: $OUT"
