"""The SIGSEGV on lavapipe (issue 44): a model offloaded to ggml's Vulkan backend on Mesa's
software device, decoding verify-sized batches (1..4 tokens, every logit row) as the cost probe
does. Each run is a child process; counts how many die with SIGSEGV with ggml's op fusion on
(the default) and off (GGML_VK_DISABLE_FUSION=1), and with batches of at most 2 tokens.

MODEL: any GGUF; the recorded run used the tests' tiny target (tests/tiny_gguf.py:
  cd tests && python -c "import conftest as c; c.write_model('/tmp/t.gguf',
      c.make_weights(c.TARGET_SEED), 'tiny-target')"
Usage (with the Vulkan venv of bench/vulkan_check.sh):
  ~/.cache/cpuspec/vulkan-venv/bin/python bench/research/vulkan_fusion_segv.py MODEL.gguf \
      [--runs 10] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys

CHILD = """
import sys
from cpuspec.llama.engine import Model, Session
m = Model(sys.argv[1], n_gpu_layers=99)
s = Session(m, n_ctx=512, n_threads=1)
prompt = list(range(10, 60))
s.eval(prompt, 0, 1)
for _ in range(50):
    for n in range(1, int(sys.argv[2]) + 1):
        s.eval(prompt[:n], len(prompt), n)
        s.truncate(len(prompt))
"""

CASES = {"fusion on, batches 1-4": ({}, 4),
         "fusion off, batches 1-4": ({"GGML_VK_DISABLE_FUSION": "1"}, 4),
         "fusion on, batches 1-2": ({}, 2)}


def run_case(model: str, extra: dict, n_max: int, runs: int) -> dict:
    env = {**os.environ, "GGML_VK_VISIBLE_DEVICES": os.environ.get("GGML_VK_VISIBLE_DEVICES", "0"),
           "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(
               os.path.abspath(__file__))))}
    env.pop("GGML_VK_DISABLE_FUSION", None)
    env.update(extra)
    codes = [subprocess.run([sys.executable, "-c", CHILD, model, str(n_max)], env=env,
                            capture_output=True, timeout=300).returncode for _ in range(runs)]
    return {"runs": runs, "sigsegv": sum(c == -signal.SIGSEGV for c in codes),
            "ok": sum(c == 0 for c in codes), "exit_codes": codes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0")   # ggml skips CPU-type devices
    from cpuspec.harness.bench import environment
    out = {"meta": environment(1), "model": os.path.basename(args.model), "cases": {}}
    for name, (extra, n_max) in CASES.items():
        out["cases"][name] = r = run_case(args.model, extra, n_max, args.runs)
        print(f"{name}: {r['sigsegv']} of {r['runs']} runs died with SIGSEGV, {r['ok']} ran")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
