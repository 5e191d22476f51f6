"""Why does the shape-true Q8_0 1.5B decode ~13 % faster than the real (derived) Q8_0 file,
when both hold the same tensors, types, shapes and bytes (docs/shape-true.md)? This writes
files that each change one thing between the two, for llama-bench to time side by side
(bench/research/q8_0_variants.sh):

  real-shuffled  the real file, each quantized tensor's 34-byte blocks permuted: the real
                 values and scales, the real tensor order, no structure left in a row
  real-constd    the real file with every Q8_0 block's fp16 scale set to the shape-true
                 constant: the real int8 values, the shape-true scales
  st-realorder   the shape-true file's bytes laid out in the real file's tensor order
  st-realq       the shape-true layout with the real file's int8 values (blocks permuted)
                 and the shape-true constant scale
  real-nosub     the real file with its subnormal fp16 scales (0.08 % of blocks) raised to
                 the smallest normal one, 2^-14
  st-reald       the shape-true file with the real file's scales (blocks permuted)
Each is a copy of one of the two files with its Q8_0 tensors' bytes rewritten in place
(metadata, F32 tensors and layout kept).

Usage: python bench/research/q8_0_variants.py REAL.gguf SHAPE_TRUE.gguf OUT_DIR
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader

Q8 = GGMLQuantizationType.Q8_0
BLOCK = 34


def blocks(t) -> np.ndarray:
    return np.asarray(t.data).view(np.uint8).reshape(-1, BLOCK)


def variant(dest: Path, layout_from: Path, fill) -> None:
    """A copy of layout_from (its metadata and tensor order kept) whose Q8_0 tensors' bytes
    fill(name, blocks_view) rewrites in place; written under a temporary name, then renamed."""
    partial = dest.with_suffix(".partial")
    shutil.copyfile(layout_from, partial)
    out = GGUFReader(partial, "r+")
    for t in out.tensors:
        if t.tensor_type == Q8:
            fill(t.name, blocks(t))
    out.data.flush()
    del out
    partial.rename(dest)
    print(f"wrote {dest}", flush=True)


def main() -> None:
    real_p, st_p, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    real, st = GGUFReader(real_p), GGUFReader(st_p)
    rt = {t.name: t for t in real.tensors}
    stt = {t.name: t for t in st.tensors}
    assert set(rt) == set(stt), "the two files hold different tensors"
    st_d = next(blocks(t)[0, :2].copy() for t in st.tensors if t.tensor_type == Q8)
    rng = np.random.default_rng(1)

    def real_shuffled(name, b):          # layout: real
        b[:] = b[rng.permutation(len(b))]

    def real_constd(name, b):            # layout: real
        b[:, :2] = st_d

    def st_realorder(name, b):           # layout: real, bytes: shape-true's
        b[:] = blocks(stt[name])

    def st_realq(name, b):               # layout: shape-true
        r = blocks(rt[name])
        b[:, 2:] = r[rng.permutation(len(r)), 2:]

    def real_nosub(name, b):             # layout: real; subnormal fp16 scales → 2^-14
        d = b[:, :2].copy().view(np.uint16).ravel()
        sub = ((d & 0x7C00) == 0) & ((d & 0x03FF) != 0)
        d[sub] = (d[sub] & 0x8000) | 0x0400
        b[:, :2] = d.view(np.uint8).reshape(-1, 2)

    def st_reald(name, b):               # layout: shape-true; the real scales, permuted
        r = blocks(rt[name])
        b[:, :2] = r[rng.permutation(len(r)), :2]

    jobs = {"real-nosub": (real_p, real_nosub), "st-reald": (st_p, st_reald),
            "real-shuffled": (real_p, real_shuffled), "real-constd": (real_p, real_constd),
            "st-realorder": (real_p, st_realorder), "st-realq": (st_p, st_realq)}
    for label in (sys.argv[4].split(",") if len(sys.argv) > 4 else jobs):
        dest = out / f"q8_0-{label}.gguf"
        if not dest.exists():
            layout, fn = jobs[label]
            variant(dest, layout, fn)


if __name__ == "__main__":
    main()
