#!/usr/bin/env bash
# GPU offload on a real ggml device backend: llama.cpp's Vulkan backend, here on Mesa's software
# Vulkan driver (lavapipe, a device of type CPU). It checks that every part of the offload path
# runs (models loaded with layers on a device, the cost probe, the sweep's table, split
# placements); its speed says nothing about a GPU. On a laptop with an AMD or Intel iGPU the
# same script measures the real device (drop GGML_VK_VISIBLE_DEVICES or set it to the iGPU's
# index from `vulkaninfo --summary`).
#
# 1. Debian packages: mesa-vulkan-drivers libvulkan-dev glslc spirv-headers vulkan-tools
# 2. llama-cpp-python (the version installed here) built with -DGGML_VULKAN=on into its own venv
#    ($VENV, default ~/.cache/cpuspec/vulkan-venv); the wheel is cached by pip. Debian 12's
#    libvulkan-dev 1.3.239 predates VK_EXT_layer_settings, which ggml-vulkan.cpp's instance
#    creation uses for the validation layer's best-practice switch (a debugging aid): where the
#    headers lack it, and only there, a copy of the source is built with the instance created
#    without that chain (said on the terminal). The user's own llama-cpp-python is not touched.
# 3. llama_supports_gpu_offload() and the device list, then the placements 0/0, 99/0, 0/99,
#    99/99 (-ngl/-ngld) with small settings, JSON and tables under $OUT.
#
# Usage: [BUILD_ONLY=1] bash bench/vulkan_check.sh [OUT_DIR]   (from the repository root; root for
#        apt-get)
set -euo pipefail
cd "$(dirname "$0")/.."
machine="epyc-family$(awk '/^cpu family/{print $4; exit}' /proc/cpuinfo)-model$(awk '/^model[[:space:]]/{print $3; exit}' /proc/cpuinfo)"
OUT="${1:-bench/results/$machine}"
VENV="${VENV:-$HOME/.cache/cpuspec/vulkan-venv}"
mkdir -p "$OUT"
export GGML_VK_VISIBLE_DEVICES="${GGML_VK_VISIBLE_DEVICES:-0}"   # ggml skips CPU-type devices

if ! dpkg -s mesa-vulkan-drivers libvulkan-dev glslc spirv-headers vulkan-tools >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq mesa-vulkan-drivers libvulkan-dev glslc spirv-headers vulkan-tools
fi
vulkaninfo --summary 2>/dev/null | grep -E "deviceName|deviceType|apiVersion" | tee "$OUT/vulkan_devices.txt"
if grep -q "llvmpipe" "$OUT/vulkan_devices.txt" && [ -z "${GGML_VK_DISABLE_FUSION+x}" ]; then
  # lavapipe (Mesa 22.3.6 here) dies with SIGSEGV in its queue thread running ggml's fused ops
  # on batches of 3+ tokens (3 runs in 4; 0 in 10 with fusion off): a driver bug, not a GPU's
  echo "vulkan_check: software device (llvmpipe): GGML_VK_DISABLE_FUSION=1"
  export GGML_VK_DISABLE_FUSION=1
fi

version=$(python3 -c "import importlib.metadata as m; print(m.version('llama-cpp-python'))" 2>/dev/null \
          || .venv/bin/python -c "import importlib.metadata as m; print(m.version('llama-cpp-python'))")
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c \
    "import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)" 2>/dev/null; then
  src=$(mktemp -d)
  pip download -q --no-deps --no-binary :all: -d "$src" "llama-cpp-python==$version"
  tar xzf "$src"/llama_cpp_python-"$version".tar.gz -C "$src"
  tree="$src/llama_cpp_python-$version"
  if ! grep -q "VK_EXT_layer_settings" /usr/include/vulkan/vulkan_core.h; then
    echo "vulkan_check: these Vulkan headers lack VK_EXT_layer_settings; building a copy of"
    echo "  ggml-vulkan.cpp whose instance is created without the validation layer's settings"
    python3 - "$tree/vendor/llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp" <<'PY'
import re, sys
p = sys.argv[1]
s = open(p).read()
start = s.index("    VkBool32 enable_best_practice = layer_settings;")
end = s.index("&layer_setting_info);", start) + len("&layer_setting_info);")
s = s[:start] + ("    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, "
                 "&app_info, layers, extensions);  // cpuspec: no VK_EXT_layer_settings") + s[end:]
open(p, "w").write(s)
PY
  fi
  python3 -m venv "$VENV"
  t0=$(date +%s)
  CMAKE_ARGS="-DGGML_VULKAN=on" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$VENV/bin/pip" install -q "$tree"
  echo "vulkan_check: llama-cpp-python $version with Vulkan built in $(( $(date +%s) - t0 )) s" \
    | tee "$OUT/vulkan_build.txt"
  rm -rf "$src"
fi
"$VENV/bin/pip" install -q -e . >/dev/null
"$VENV/bin/python" -c "import llama_cpp; assert llama_cpp.llama_supports_gpu_offload(), 'not a GPU build'"
"$VENV/bin/cpuspec" hw | tee "$OUT/vulkan_hw.txt"
# BUILD_ONLY=1: stop here (the venv that tests/test_offload.py runs the placements with)
[ -z "${BUILD_ONLY:-}" ] || exit 0

# The placements on the default pair, few tokens (a software device is slow: ~1.4 t/s at -ngl 99)
"$VENV/bin/cpuspec" bench -ngl 0,99 -ngld 0,99 --tasks json --prompts-per-task 2 -n 16 -k 3 \
  --policy static --threads 2 --yes --json "$OUT/offload_vulkan_lavapipe.json" \
  | tee "$OUT/offload_vulkan_lavapipe.txt"
