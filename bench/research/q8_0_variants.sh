#!/usr/bin/env bash
# The shape-true Q8_0 gap, split: llama-bench tg32 (2 threads) of the real derived Q8_0 1.5B, its
# shape-true file and the variants q8_0_variants.py writes, ROUNDS rounds, the files' order
# rotated every round (each round one paired unit); then the real and shape-true files again
# with the weights read into anonymous memory (-lm none) instead of mapped from the page cache.
# Alone on the cores: nothing else may run.
# Usage: [LABELS='real-nosub st-reald'] [TAG=_2] [NOLM=1] bash bench/research/q8_0_variants.sh
#        [OUT_DIR] [ROUNDS]        (second round: LABELS='real-constd real-nosub st-reald' TAG=_2)
set -euo pipefail
cd "$(dirname "$0")/../.."
machine="epyc-family$(awk '/^cpu family/{print $4; exit}' /proc/cpuinfo)-model$(awk '/^model[[:space:]]/{print $3; exit}' /proc/cpuinfo)"
OUT="${1:-bench/results/$machine}"
ROUNDS="${2:-5}"
VARIANTS="${VARIANTS:-$HOME/.cache/cpuspec/q8_0-variants}"
BIN=$(python -c "from cpuspec.llama import native; print(native.find_bin_dir(need=['llama-bench']))")
REAL=$(cpuspec models path qwen2.5-coder-1.5b-q8_0)
ST=$(cpuspec models shape 1.5b --quant Q8_0)
python bench/research/q8_0_variants.py "$REAL" "$ST" "$VARIANTS"
files=("real=$REAL" "shape-true=$ST")
for v in ${LABELS:-real-shuffled real-constd st-realorder st-realq}; do files+=("$v=$VARIANTS/q8_0-$v.gguf"); done
log="$OUT/q8_0_variants${TAG:-}.jsonl"
[ ! -e "$log" ] || { echo "q8_0_variants: $log exists; move it away first" >&2; exit 1; }
n=${#files[@]}
for ((r = 0; r < ROUNDS; r++)); do
  for ((i = 0; i < n; i++)); do
    entry=${files[$(( (i + r) % n ))]}
    label=${entry%%=*}; path=${entry#*=}
    for mode in mmap none; do
      # -lm none only for the two files the question is about
      [ "$mode" = mmap ] || { [ -z "${NOLM:-}" ] && { [ "$label" = real ] || [ "$label" = shape-true ]; }; } || continue
      "$BIN/llama-bench" -m "$path" -p 0 -n 32 -r 3 -t 2 -lm "$mode" -o jsonl 2>/dev/null \
        | python -c "import json,sys; [print(json.dumps({**json.loads(l), 'label': '$label', 'round': $r})) for l in sys.stdin if l.strip()]" \
        >> "$log"
    done
  done
done
python - "$log" <<'PY'
import json, math, sys
from collections import defaultdict
rows = [json.loads(l) for l in open(sys.argv[1])]
by = defaultdict(dict)
for r in rows:
    by[(r["label"], r["load_mode"])][r["round"]] = r["avg_ts"]
ref = by[("real", "mmap")]
print(f"{rows[0]['cpu_info']}; {rows[0]['build_commit']}; tg32, 2 threads; "
      f"{len(ref)} rounds; each file over the real file (mapped) in the same round")
for key, per in sorted(by.items()):
    ratios = [per[r] / ref[r] for r in per if r in ref]
    g = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"{key[0]:14s} {key[1]:5s}  {sum(per.values()) / len(per):6.2f} t/s  "
          f"×real {g:.3f}  (rounds {min(ratios):.3f}-{max(ratios):.3f})")
PY
