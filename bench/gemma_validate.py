"""Issue 59, item 3: the shape-true Gemma 3 270M against the real file (Google's Gemma 3 270M
base, Q4_K_M by GGUF-my-repo, pinned in models.toml and fetched from its PyPI chunk packages),
the way docs/shape-true.md validates Qwen2.5: interleaved rounds in one process
(harness/whatif.py run_shape_validation), each round one paired unit.
  - "270m": the 270M as the target (its decode, V(n)/V(1) for n = 1..16, its prefill) — the
    pair's draft is the same file, so its c is 1 by construction and not a check;
  - "as draft": the 270M as the draft of a shape-true Gemma 3 1B target, the same 1B file in
    both pairs (its target points are a null check: the same file against itself), so the
    draft's decode and c are the 270M's.
Writes bench/results/<machine>/gemma_validation.json.gz; `cpuspec report FILE` prints the
table. Run alone: nothing else on the cores.
Usage: python bench/gemma_validate.py [ROUNDS] [OUT]"""
import sys
from pathlib import Path

import psutil

from cpuspec.inputs.models import fetch_model
from cpuspec.inputs.registry import load_registry
from cpuspec.inputs.shapes import shape_of
from cpuspec.llama.shape_true import write_shape_true
from shape_true_validate import machine, validate   # bench/: this script's folder, on sys.path

REAL = "gemma-3-270m-q4km"


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else \
        Path("bench/results") / machine() / "gemma_validation.json.gz"
    real = fetch_model(load_registry().model(REAL), print).path
    memory = psutil.virtual_memory().total
    shape, target_1b = (write_shape_true(shape_of(n), "Q4_K_M", real, memory, print)
                        for n in ("gemma3-270m", "gemma3-1b"))
    models = {"real 270m": (real, real), "shape 270m": (shape, shape),
              "real as draft": (target_1b, real), "shape as draft": (target_1b, shape)}
    validate(models, rounds, out)


if __name__ == "__main__":
    main()
