#!/usr/bin/env bash
# The GPU check, self-contained for an NVIDIA machine with no network (one H200, 16 cores,
# CUDA's compiler, CMake, numpy, click, psutil, tabulate, pyarrow, scikit-build-core and tqdm
# installed; nothing else reachable). One command, under 10 minutes:
#   1. a CUDA build of llama-cpp-python for this GPU's architecture only, from the carried sdist;
#   2. shape-true Qwen2.5 1.5B/7B/14B targets and a 0.5B draft (Q4_K_M) written there from the
#      carried tokenizer file (llama.cpp's models/ggml-vocab-qwen2.gguf), no download;
#   3. bench/gpu_costs.py: the cost probe of each target on the CPU at 1, 2, 4, 8 and 16
#      threads and fully offloaded, and the what-if at the real pair's recorded acceptance.
# Results go to $OUT (default ./gpu-check-out): gpu_costs.json, gpu_costs.txt, build.log.
#
# Prepare the carried files here first (with network, PyPI only; .gpu-carry/, ignored by git).
# NOTE: the device tool carries at most 64 MiB: the working tree (tracked files and untracked
# ones git does not ignore) and the carried folders together. Measured (git ls-files | du -cb;
# du -sb .gpu-carry): tracked files 16.7 MB (61.6 MB before the results over 64 KB were kept
# as .json.gz); .gpu-carry 13.2 MB: the slimmed sdist 3.8 MB (49.4 MB before slim()
# dropped its .git packs, tests, web UI and the rest), the Qwen2 vocabulary 5.9 MB, the wheels
# 3.4 MB. About 30 MB of the 64 MiB; keep untracked files out of the tree when it travels.
# The slimmed sdist still builds: `pip wheel --no-deps .gpu-carry/llama_cpp_python-*-slim.tar.gz`
# made a CPU wheel on machine E in 3 min 55 s (the CUDA build is checked only on the GPU).
#   PREPARE=1 bash bench/gpu_check.sh
# Then on the GPU machine (the device tool: carry .gpu-carry):
#   bash bench/gpu_check.sh
# Dry-run the CPU half here (no CUDA build, this venv's llama-cpp-python, 1 and 2 threads):
#   GPU=0 bash bench/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY="${CARRY:-.gpu-carry}"
OUT="${OUT:-$PWD/gpu-check-out}"
VERSION=0.3.36

# Delete from the extracted sdist in $1 what `pip install` of it with GGML_CUDA=on does not
# read. llama-cpp-python's CMakeLists.txt add_subdirectory()s vendor/llama.cpp (as a
# subproject: LLAMA_BUILD_TESTS, _TOOLS, _EXAMPLES, _SERVER and _APP default to off, only
# LLAMA_BUILD_COMMON is forced on) and vendor/llama.cpp/tools/mtmd (LLAVA_BUILD, on by
# default); llama.cpp always adds ggml (only the CPU and CUDA backends are on here), src,
# vendor (hash, miniaudio, nlohmann, sheredom, stb; cpp-httplib for common) and common. So
# kept: those, tools/mtmd's sources, cmake/, include/, LICENSE; and llama-cpp-python's
# llama_cpp/, CMakeLists.txt, pyproject.toml, README.md (its metadata's readme), PKG-INFO.
# Gone: the sdist's .git (38 MB of packs: the build info then reads "unknown"), llama.cpp's
# models (the Qwen2 vocabulary is copied out first), docs, media, tests, examples, pocs, app,
# benches, the other tools (the web UI), Python converters, the other ggml backends, and
# tools/mtmd's test media; llama-cpp-python's examples (notebooks), docs, docker, tests.
slim() {
  local src="$1" v="$1/vendor/llama.cpp" keep
  rm -rf "$src/.git" "$src/.gitmodules" "$src/.github" "$src/docker" "$src/docs" \
         "$src/examples" "$src/tests"
  rm -rf "$v/.git" "$v/.gitmodules" "$v/.github" "$v/.devops" "$v/.gemini" "$v/.pi" "$v/ci" \
         "$v/skills" "$v/models" "$v/docs" "$v/media" "$v/tests" "$v/examples" "$v/pocs" \
         "$v/app" "$v/benches" "$v/scripts" "$v/conversion" "$v/gguf-py" "$v/grammars" \
         "$v/requirements" "$v/"convert_*.py
  for keep in "$v/tools/"*; do
    [ "$keep" = "$v/tools/mtmd" ] || rm -rf "$keep"
  done
  rm -rf "$v/tools/mtmd/"test-* "$v/tools/mtmd/tests" "$v/tools/mtmd/tests.sh" \
         "$v/tools/mtmd/legacy-models"
  for keep in "$v/ggml/src/ggml-"*/; do
    case "$keep" in */ggml-cpu/|*/ggml-cuda/) ;; *) rm -rf "$keep" ;; esac
  done
}

if [ "${PREPARE:-0}" = 1 ]; then
  rm -rf "$CARRY" && mkdir -p "$CARRY/dl"
  python3 -m pip download --no-deps --no-binary :all: -q -d "$CARRY/dl" "llama-cpp-python==$VERSION"
  tar -xzf "$CARRY/dl/llama_cpp_python-$VERSION.tar.gz" -C "$CARRY/dl"
  src="$CARRY/dl/llama_cpp_python-$VERSION"
  cp "$src/vendor/llama.cpp/models/ggml-vocab-qwen2.gguf" "$CARRY/"
  slim "$src"
  tar -czf "$CARRY/llama_cpp_python-$VERSION-slim.tar.gz" -C "$CARRY/dl" "llama_cpp_python-$VERSION"
  # what is not on the GPU machine: gguf (pure Python), llama-cpp-python's own needs
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$CARRY" gguf==0.19.0 diskcache jinja2 MarkupSafe typing_extensions huggingface-hub \
    pyyaml tqdm filelock fsspec packaging requests idna urllib3 certifi charset-normalizer
  rm -rf "$CARRY/dl"
  du -sh "$CARRY"
  exit 0
fi

mkdir -p "$OUT"
export CPUSPEC_HOME="${CPUSPEC_HOME:-/tmp/cpuspec-gpu-home}"
if [ "${GPU:-1}" = 1 ]; then
  arch="${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)}"
  echo "GPU: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1), sm_$arch" | tee "$OUT/gpu.txt"
  python3 -m pip install -q --no-index --no-deps --target /tmp/cpuspec-site "$CARRY"/*.whl
  export PYTHONPATH="/tmp/cpuspec-site:$PWD"
  CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$arch" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    python3 -m pip install --no-index --no-deps --no-build-isolation --target /tmp/cpuspec-site \
    "$CARRY/llama_cpp_python-$VERSION-slim.tar.gz" > "$OUT/build.log" 2>&1
  python3 -c "import llama_cpp; assert llama_cpp.llama_supports_gpu_offload(), 'not a GPU build'"
  python3 bench/gpu_costs.py "$OUT" "$CARRY/ggml-vocab-qwen2.gguf" --gpu 2>&1 | tee "$OUT/log.txt"
else
  python3 bench/gpu_costs.py "$OUT" "$CARRY/ggml-vocab-qwen2.gguf" --threads 1,2 \
    --sizes "${SIZES:-1.5b}" 2>&1 | tee "$OUT/log.txt"
fi
