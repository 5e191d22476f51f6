"""Recorded results files render as they did: the text a user reads from `cpuspec report` and
`cpuspec advise` on a handful of real files that the tests own (tests/recorded: bench, lookup,
sweep, tune, paths; machines A, B and C, schema 1 and 2) is compared with stored output, so a refactor that changes a printed
figure fails here. To accept an intended change, regenerate the expected files with
`CPUSPEC_REGEN_EXPECTED=1 python -m pytest tests/test_render_recorded.py` and review the diff."""
import math
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main

RECORDED = Path(__file__).resolve().parent / "recorded"   # the files (tests/recorded/README.md)
EXPECTED = Path(__file__).resolve().parent / "expected"
CASES = [
    ("report", "epyc-family25-model17/bench_q8_0_k7.json.gz", "text"),
    ("report", "epyc-family25-model17/bench_q8_0_k7.json.gz", "csv"),
    ("advise", "epyc-family25-model17/bench_q8_0_k7.json.gz", None),
    ("report", "lookup62_q4_0_k3.json.gz", "text"),
    ("advise", "lookup62_q4_0_k3.json.gz", None),
    ("report", "avx2-build/bench_2threads.json.gz", "text"),
    ("report", "avx2-build/sweep_threads_k.json.gz", "text"),
    ("report", "epyc-family25-model1/tune_json_code.json.gz", "text"),
    ("report", "epyc-family25-model17/paths_q8_0_k7.json.gz", "text"),
    # GPU offload on a real ggml device (Vulkan on lavapipe): the per-placement table
    ("report", "epyc-family25-model1/offload_vulkan_lavapipe_tiny.json", "text"),
    # long inputs: the target's prefill shared between modes (summary.py, report.py)
    ("report", "epyc-family25-model17/adaptive_heldout_long_q8_0_k7_n128_v6.json.gz",
     "text"),
]


@pytest.mark.parametrize("cmd, path, fmt", CASES)
def test_recorded_file_renders_as_stored(cmd, path, fmt):
    # the full report (--details): the one-screen verdict is tests/test_first_screen.py's
    args = [cmd, str(RECORDED / path)] + (["--format", fmt] if fmt else []) + \
        (["--details"] if (cmd == "report" and fmt == "text") or cmd == "advise" else [])
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    # the stored output is named after the file as it was before .gz (the same text)
    name = f"{cmd}-{path.removesuffix('.gz').replace('/', '_')}" + \
        (f".{fmt}" if fmt else "") + ".txt"
    expected = EXPECTED / name
    if os.environ.get("CPUSPEC_REGEN_EXPECTED"):
        expected.write_text(res.output)
    if fmt == "csv":   # full-precision floats: numpy's SIMD paths differ in the last digit
        assert same_csv(res.output, expected.read_text())
    else:
        assert res.output == expected.read_text()


def same_csv(got: str, want: str) -> bool:
    """The same cells, numbers equal to 12 significant digits."""
    def cells(text):
        return [c for line in text.splitlines() for c in line.split(",")]
    a, b = cells(got), cells(want)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        try:
            if not math.isclose(float(x), float(y), rel_tol=1e-12, abs_tol=1e-15):
                return False
        except ValueError:
            if x != y:
                return False
    return True
