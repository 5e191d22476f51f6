"""The distribution of a real Q8_0 file's fp16 block scales, as the quantile table that a
tried shape-true format 3 drew its Q8_0 scales from (bench/research/q8_0_format3.patch: applied
to cpuspec/llama/shape_true.py, it did not validate either; docs/shape-true.md).

A Q8_0 block is an fp16 scale d and 32 int8 values; on the x86 CPU backend the decode of a
file whose scales are all equal ran ~25 % faster than the real file's, and raising the real
file's subnormal scales (fp16 below 2^-14) to 2^-14 alone ~10 % faster
(bench/research/q8_0_variants.sh; docs/shape-true.md). So a shape-true Q8_0 file would need
scales spread as a trained model's are, subnormal ones included.

Usage: python bench/research/q8_0_scales.py REAL_Q8_0.gguf
"""
from __future__ import annotations

import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader

# the probabilities of the table: dense in the tails, where the subnormal scales are
PROBS = (0.0, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7,
         0.8, 0.9, 0.97, 0.99, 0.997, 0.999, 0.9999, 1.0)
SUBNORMAL = 2.0 ** -14


def main() -> None:
    reader = GGUFReader(sys.argv[1])
    scales = []
    for t in reader.tensors:
        if t.tensor_type == GGMLQuantizationType.Q8_0:
            b = np.asarray(t.data).view(np.uint8).reshape(-1, 34)
            scales.append(b[:, :2].copy().view(np.float16).ravel().astype(np.float64))
    d = np.abs(np.concatenate(scales))
    d = d[d > 0]
    log2 = np.log2(d)
    q = np.quantile(log2, PROBS)
    print(f"# {sys.argv[1].rsplit('/', 1)[-1]}: {len(d)} blocks, "
          f"{np.mean(d < SUBNORMAL) * 100:.3f} % subnormal, {len(np.unique(d))} distinct")
    print("Q8_0_LOG2_SCALE = (" + ", ".join(f"({p:g}, {v:.3f})" for p, v in zip(PROBS, q))
          + ")")


if __name__ == "__main__":
    main()
