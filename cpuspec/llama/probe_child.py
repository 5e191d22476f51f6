"""Run in a child process by cpuspec.llama.build (python -m cpuspec.llama.probe_child): load
the tiny Q8_0 probe model and decode a 4-token batch, then one token. A batch of more than one
token is what takes ggml's AMX kernels onto their tile path (one token takes AVX512-VNNI), so a
build whose tile setup is broken dies here, in a process of its own, not in the user's run.

Prints one JSON line: llama.cpp's system info, which buffers took the weights (an "AMX"
buffer means the matrix engine ran the matmuls), and which llama_cpp package it imported (a
rebuilt wheel is checked from a folder of its own: llama/build.py)."""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

BATCH = [104, 101, 108, 108]   # "hell": any four byte tokens


def main() -> int:
    import llama_cpp

    from cpuspec.llama.engine import Model, Session, system_info
    from cpuspec.llama.probe_model import write_probe_model
    with tempfile.TemporaryDirectory(prefix="cpuspec-probe-") as d:
        with Model(write_probe_model(Path(d) / "probe.gguf")) as model, \
                Session(model, n_ctx=64, n_threads=1) as session:
            session.decode(BATCH, 0, 1)
            session.decode([BATCH[0]], len(BATCH), 1)
            buffers = model.buffers
    print(json.dumps({"system_info": system_info(), "buffers": buffers,
                      "llama_cpp": llama_cpp.__file__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
