#!/usr/bin/env bash
# The runs of bench/README.md's "A second machine" section, on whatever machine runs it, into
# bench/results/NAME (this project's second machine: epyc-family25-model17). One after another,
# nothing else running. Run from the repository root, with cpuspec installed.
set -euo pipefail
NAME=${1:?usage: bench/run_second_machine.sh NAME   (results go to bench/results/NAME)}
R=bench/results/$NAME
mkdir -p "$R"
T8=$(cpuspec models path qwen2.5-coder-1.5b-q8_0)
D4=$(cpuspec models path qwen2.5-coder-0.5b-q4_0)
cpuspec costs --threads 2 --max-n 16 --reps 3 --json $R/costs_q4km.json > $R/costs_q4km.txt
cpuspec costs --pair qwen2.5-coder-1.5b-q4_0 --threads 2 --max-n 16 --reps 3 --json $R/costs_q4_0.json > $R/costs_q4_0.txt
cpuspec costs --target "$T8" --draft "$D4" --threads 2 --max-n 16 --reps 3 --json $R/costs_q8_0.json > $R/costs_q8_0.txt
cpuspec costs --pair qwen2.5-coder-1.5b-q4_0 --threads 1 --max-n 8 --reps 3 --json $R/costs_q4_0_1thread.json > $R/costs_q4_0_1thread.txt
cpuspec tune --threads 2 --budget 25 --json $R/tune.json.gz > $R/tune.txt
cpuspec bench --pair qwen2.5-coder-1.5b-q4_0 -k 3 --threads 2 --json $R/bench_q4_0_k3.json.gz > $R/bench_q4_0_k3.txt
cpuspec bench --target "$T8" --draft "$D4" -k 7 --threads 2 --json $R/bench_q8_0_k7.json.gz > $R/bench_q8_0_k7.txt
for d in model lookup hybrid; do
  cpuspec bench --target "$T8" --draft "$D4" --drafter $d -k 7 --threads 2 --tasks grounded --policy static --json $R/grounded_q8_0_k7_$d.json > $R/grounded_q8_0_k7_$d.txt
done
# How accurate a lookup guess is, by the length of its match (the hybrid's HYBRID_NGRAM):
python bench/research/lookup_ngram.py --by-length $R/bench_q4_0_k3.json.gz $R/grounded_q8_0_k7_model.json.gz > $R/lookup_by_length.txt 2>/dev/null
# The hybrid on the full json and code suites, beside bench_q8_0_k7 (model drafter):
cpuspec bench --target "$T8" --draft "$D4" --drafter hybrid -k 7 --threads 2 --tasks json,code --json $R/hybrid_q8_0_k7.json.gz > $R/hybrid_q8_0_k7.txt
# Own cores: target on CPU 0, draft on CPU 1, serial vs parallel schedule, and raw on both CPUs.
P="--target $T8 --draft $D4 -k 7 --tasks json,code --prompts-per-task 4 --max-tokens 64"
cpuspec bench $P --p-cores 1 --draft-cores 1 --draft-threads 1 --policy static --json $R/split_serial_q8_0.json.gz > $R/split_serial_q8_0.txt
cpuspec bench $P --p-cores 1 --draft-cores 1 --draft-threads 1 --policy static --schedule parallel --json $R/split_parallel_q8_0.json.gz > $R/split_parallel_q8_0.txt
cpuspec bench $P --threads 2 --policy static --json $R/split_both_q8_0.json.gz > $R/split_both_q8_0.txt
cpuspec compare bench/results/bench_q4_0_k3.json.gz $R/bench_q4_0_k3.json.gz --format markdown > $R/compare_ab_q4_0.md
# The hybrid where drafting is dearer: the Q4_K_M draft (c about twice the Q4_0 draft's).
DK=$(cpuspec models path qwen2.5-coder-0.5b-q4km)
for d in model hybrid; do
  cpuspec bench --target "$T8" --draft "$DK" --drafter $d -k 7 --threads 2 --tasks grounded --policy static --json $R/grounded_q8_0_q4kmdraft_k7_$d.json > $R/grounded_q8_0_q4kmdraft_k7_$d.txt
done
python bench/research/native_peer.py --threads 2 --pair qwen2.5-coder-1.5b-q8_0 --k 7 --out $R/native_peer_q8_0_k7.json --profile /tmp/profile_q8.txt > $R/native_peer_q8_0_k7.txt
