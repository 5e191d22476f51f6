#!/usr/bin/env bash
# Every recorded run of bench/README.md, one after another (never two at once: on a small
# machine two benchmarks ruin each other). Run from the repository root, with cpuspec installed.
set -euo pipefail
R=bench/results
cpuspec bench --threads 2 --json $R/bench_2threads.json.gz --csv $R/bench_2threads.csv > $R/bench_2threads.txt
cpuspec bench --pair qwen2.5-coder-1.5b-q4_0 -k 3 --threads 2 --json $R/bench_q4_0_k3.json.gz --csv $R/bench_q4_0_k3.csv > $R/bench_q4_0_k3.txt
# lookup_q4_0_k3 was recorded with the n-gram range 3..1, before 6..2 became the default:
cpuspec bench --pair qwen2.5-coder-1.5b-q4_0 --drafter lookup --tasks grounded -k 3 --threads 2 --json $R/lookup62_q4_0_k3.json.gz > $R/lookup62_q4_0_k3.txt
cpuspec bench --pair qwen2.5-coder-1.5b-q4_0 -k 3 --threads 2 --prompts bench/prompts_heldout.jsonl --max-tokens 64 --json $R/heldout_q4_0_k3.json.gz > $R/heldout_q4_0_k3.txt
cpuspec bench --threads 2 --prompts bench/prompts_heldout.jsonl --max-tokens 64 --json $R/heldout_q4km_k4.json.gz > $R/heldout_q4km_k4.txt
cpuspec bench --pair qwen2.5-coder-1.5b-q4_0 -k 3 --threads 2 --policy adaptive --adaptive-scope prompt --json $R/scope_prompt_q4_0_k3.json.gz > $R/scope_prompt_q4_0_k3.txt
cpuspec bench --pair qwen2.5-coder-1.5b-q4_0 -k 3 --threads 2 --policy adaptive --adaptive-scope prompt --prompts bench/prompts_heldout.jsonl --max-tokens 64 --json $R/scope_prompt_heldout_q4_0_k3.json.gz > $R/scope_prompt_heldout_q4_0_k3.txt
cpuspec bench --pair qwen2.5-coder-1.5b-q4_0 -k 3 --p-cores 1 --draft-cores 1 --draft-threads 1 --tasks json,code --prompts-per-task 2 --max-tokens 64 --policy static --json $R/draft_own_cores.json > $R/draft_own_cores.txt
M=$(cpuspec models path qwen2.5-coder-0.5b-q4km)
cpuspec bench --target "$M" --draft "$M" --temperature 0.8 --tasks json,story --prompts-per-task 2 --max-tokens 64 --policy static --json $R/sampling_same_model.json > $R/sampling_same_model.txt
python3 -c "while 1: pass" & HOG=$!
trap 'kill $HOG 2>/dev/null || true' EXIT
cpuspec bench --tasks json --prompts-per-task 3 --max-tokens 64 --policy static --json $R/noise_hog.json > $R/noise_hog.txt
kill $HOG
cpuspec costs --threads 2 --max-n 16 --reps 3 --json $R/costs_q4km.json > $R/costs_q4km.txt
cpuspec costs --pair qwen2.5-coder-1.5b-q4_0 --threads 2 --max-n 16 --reps 3 --json $R/costs_q4_0.json > $R/costs_q4_0.txt
cpuspec quality qwen2.5-coder-1.5b-q4km qwen2.5-coder-1.5b-q4_0 qwen2.5-coder-1.5b-q8_0 qwen2.5-coder-0.5b-q4km qwen2.5-coder-0.5b-q4_0 --threads 2 --json $R/quality_targets.json > $R/quality_targets.txt
cpuspec tune --threads 2 --budget 20 --json $R/tune.json.gz > $R/tune.txt
cpuspec compare $R/avx2-build/bench_2threads.json.gz $R/bench_2threads.json.gz --format markdown > $R/compare_machines.md
cpuspec plot $R/avx2-build/bench_2threads.json.gz $R/bench_2threads.json.gz $R/bench_q4_0_k3.json.gz $R/costs_q4km.json $R/costs_q4_0.json --out bench/figures > /dev/null
python bench/research/native_peer.py --threads 2 > $R/native_peer.txt
python bench/research/native_peer.py --threads 2 --pair qwen2.5-coder-1.5b-q4_0 --k 3 --out $R/native_peer_q4_0_k3.json --profile /tmp/profile_q4_0.txt > $R/native_peer_q4_0_k3.txt
# Own cores, serial vs parallel schedule (target on CPU 0, draft on CPU 1), and raw on both.
P="--pair qwen2.5-coder-1.5b-q4_0 -k 3 --tasks json,code --prompts-per-task 4 --max-tokens 64"
cpuspec bench $P --p-cores 1 --draft-cores 1 --draft-threads 1 --policy static --json $R/split_serial.json.gz > $R/split_serial.txt
cpuspec bench $P --p-cores 1 --draft-cores 1 --draft-threads 1 --policy static --schedule parallel --json $R/split_parallel.json.gz > $R/split_parallel.txt
cpuspec bench $P --threads 2 --policy off --json $R/split_raw2.json > $R/split_raw2.txt
