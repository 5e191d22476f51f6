"""Issue 50, item 2: the shape-true 0.5B and 1.5B against the real pinned files (Q4_K_M) and
their Q4_0/Q8_0 derivations, interleaved in one process (harness/whatif.py), so every round is
one paired unit. Writes bench/results/<machine>/shape_validation.json.gz; `cpuspec report FILE`
prints the table. Run alone: nothing else on the cores.
Usage: python bench/shape_true_validate.py [ROUNDS] [OUT] [QUANTS]   (QUANTS: e.g. Q8_0; all
three by default)"""
import sys
from pathlib import Path

import psutil

from cpuspec.harness.whatif import run_shape_validation
from cpuspec.inputs.models import fetch_model
from cpuspec.inputs.registry import load_registry
from cpuspec.inputs.shapes import shape_of
from cpuspec.llama.shape_true import write_shape_true
from cpuspec.machine.hardware import detect_hardware
from cpuspec.results.store import write_json

QUANTS = {"Q4_K_M": ("qwen2.5-coder-1.5b-q4km", "qwen2.5-coder-0.5b-q4km"),
          "Q4_0": ("qwen2.5-coder-1.5b-q4_0", "qwen2.5-coder-0.5b-q4_0"),
          "Q8_0": ("qwen2.5-coder-1.5b-q8_0", "qwen2.5-coder-0.5b-q8_0")}


def machine() -> str:
    """bench/results/<machine>: the CPU's vendor, family and model (epyc-… or xeon-…)."""
    info = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    vendor = "epyc" if "AMD" in info.get("vendor_id", "") else "xeon"
    return f"{vendor}-family{info.get('cpu family')}-model{info.get('model')}"


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else \
        Path("bench/results") / machine() / "shape_validation.json.gz"
    reg = load_registry()
    tokenizer = fetch_model(reg.model("qwen2.5-coder-0.5b-q4km"), print).path
    memory = psutil.virtual_memory().total
    models = {}
    chosen = sys.argv[3].split(",") if len(sys.argv) > 3 else list(QUANTS)
    for quant, (target, draft) in QUANTS.items():
        if quant not in chosen:
            continue
        models[f"real {quant}"] = tuple(fetch_model(reg.model(n), print).path
                                        for n in (target, draft))
        models[f"shape {quant}"] = tuple(write_shape_true(shape_of(size), quant, tokenizer,
                                                          memory, print)
                                         for size in ("1.5b", "0.5b"))
    validate(models, rounds, out)


def validate(models: dict, rounds: int, out: Path) -> None:
    """Interleaved rounds of the cost probe over `models` (label → (target, draft)), at 2
    threads or the cores in this process's affinity; the file rewritten after every round."""
    threads = detect_hardware().physical_cores_in_affinity or 2

    def save(doc):
        out.parent.mkdir(parents=True, exist_ok=True)
        write_json(doc, out)
    save(run_shape_validation(models, rounds, 15, 512, threads, save, print, reps=3))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
