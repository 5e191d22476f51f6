"""Issue 59: every family's shape-true file at its real size loads in llama-cpp-python and
decodes without NaN or Inf (the suite checks tiny widths; this checks the published sizes).
Each file is written if missing (its family's tokenizer, cli/models.py tokenizer_file), loaded,
fed a short prompt and 8 greedy tokens; the logits of every step must be finite. Prints one
line per file and a closing count; exit 1 if any file fails.
gpt-oss is written as its published MXFP4_MOE file, every other model at Q4_K_M.
Usage: python bench/families_decode.py [NAME ...]   (default: the families what-if's files)"""
import sys
import time

import numpy as np
import psutil

from cpuspec.cli.models import tokenizer_file
from cpuspec.inputs.shapes import only_quant, shape_of
from cpuspec.llama.shape_true import write_shape_true

DEFAULT = ["qwen3-0.6b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-30b-a3b", "qwen3.5-0.8b",
           "gemma3-270m", "gemma3-1b", "gemma3-4b", "gemma3-12b", "llama3.2-1b", "llama3.2-3b",
           "llama3.1-8b"]


def check(name: str) -> bool:
    from llama_cpp import Llama
    shape = shape_of(name)
    quant = only_quant(shape) or "Q4_K_M"
    path = write_shape_true(shape, quant, tokenizer_file(shape.arch, print),
                            psutil.virtual_memory().total, print)
    t0 = time.perf_counter()
    m = Llama(str(path), n_ctx=128, n_threads=2, logits_all=True, verbose=False)
    m.eval(m.tokenize(b"def fibonacci(n):"))
    for _ in range(8):
        m.eval([int(np.argmax(m.scores[m.n_tokens - 1]))])
    ok = bool(np.isfinite(m.scores[:m.n_tokens]).all())
    print(f"{name:16s} {shape.arch:9s} {path.stat().st_size / 1e9:6.2f} GB  "
          f"{'finite' if ok else 'NaN/Inf'}  ({time.perf_counter() - t0:.0f} s)", flush=True)
    del m
    return ok


def main() -> None:
    names = sys.argv[1:] or DEFAULT
    bad = [n for n in names if not check(n)]
    print(f"{len(names) - len(bad)} of {len(names)} files decode without NaN or Inf"
          + (f"; failed: {', '.join(bad)}" if bad else ""))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
