"""bench/research/plain_vs_raw.py on machine C's runs on held-out long set 3 (policy v8, window 256,256)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
C = ROOT / "bench" / "results" / "epyc-family25-model1"
N128 = C / "adaptive_heldout_long3_q8_0_k7_n128_v8w256.json.gz"
N64 = C / "adaptive_heldout_long3_q8_0_k7_n64_v8w256.json.gz"


def tool(*args):
    return subprocess.run([sys.executable, str(ROOT / "bench" / "research" / "plain_vs_raw.py"), *args],
                          capture_output=True, text=True)


def test_only_generations_that_never_drafted_count():
    """At 128 tokens adaptive drafted on every edit prompt and on the first explain and doc
    prompts (their explorations): 8 of its 15 generations never drafted. At 64 tokens it ran
    all 15 plain."""
    p = tool(str(N128), str(N64))
    assert p.returncode == 0, p.stderr
    counts = {ln.split()[0]: int(ln.split()[1]) for ln in p.stdout.splitlines()
              if ln.startswith(("adaptive_", "all "))}
    assert counts == {N128.name: 8, N64.name: 15, "all": 23}


@pytest.mark.parametrize("name, message", [("missing.json", "cannot read results"),
                                           ("tune_json_code.json.gz", "not a bench one")])
def test_bad_input_is_refused(name, message):
    p = tool(str(C / name))
    assert p.returncode == 1 and message in p.stderr and "Traceback" not in p.stderr


def test_by_order_pools_by_the_order_bench_ran_the_modes_in():
    """15 prompts, counted from 1: the 1st, 4th, ... ran static first, the 2nd, 5th, ...
    adaptive first, the 3rd, 6th, ... raw first; at 64 tokens all 15 adaptive generations ran
    plain, so 5 in each order."""
    p = tool(str(N64), "--by-order")
    assert p.returncode == 0, p.stderr
    counts = {ln.split()[2]: int(ln.split()[3]) for ln in p.stdout.splitlines()
              if ln.startswith("modes ran")}
    assert counts == {"static,adaptive,raw": 5, "adaptive,raw,static": 5,
                      "raw,static,adaptive": 5}
    assert any(ln.startswith("all ") and ln.split()[1] == "15" for ln in p.stdout.splitlines())
