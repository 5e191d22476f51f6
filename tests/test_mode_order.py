"""The order bench runs a prompt's modes in (cpuspec.harness.order.mode_order): a Williams design, so
that what one mode leaves behind lands on every other mode alike; results files written before
it ran a rotation and say nothing, and bench/research/plain_vs_raw.py --by-order reads each as it ran."""
import collections
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cpuspec.harness.order import mode_order
from cpuspec.results.schema import load_json

ROOT = Path(__file__).parent.parent
N64 = ROOT / "bench" / "results" / "epyc-family25-model1" / \
    "adaptive_heldout_long3_q8_0_k7_n64_v8w256.json.gz"


@pytest.mark.parametrize("modes", [["raw", "static"], ["raw", "static", "adaptive"],
                                   ["raw", "static", "adaptive", "lookup"],
                                   ["raw", "a", "b", "c", "d"]])
def test_every_mode_runs_in_every_place_and_after_every_other_equally_often(modes):
    n = len(modes)
    cycle = 2 * n if n % 2 else n          # the shortest a balanced design can be
    orders = [mode_order(modes, i) for i in range(1, cycle + 1)]
    assert mode_order(modes, cycle + 1) == orders[0]   # and then it repeats
    assert all(sorted(o) == sorted(modes) for o in orders)
    places = collections.Counter((m, o.index(m)) for o in orders for m in o)
    assert set(places.values()) == {cycle // n} and len(places) == n * n
    after = collections.Counter(pair for o in orders for pair in zip(o, o[1:]))
    assert len(after) == n * (n - 1) and len(set(after.values())) == 1


def test_a_rotation_of_three_puts_each_mode_always_after_the_same_one():
    """Why the design changed: under the rotation adaptive never ran right after raw."""
    modes = ["raw", "static", "adaptive"]
    after = {pair for i in range(1, 7) for o in [mode_order(modes, i, "rotate")]
             for pair in zip(o, o[1:])}
    assert ("raw", "adaptive") not in after and ("raw", "static") in after
    with pytest.raises(ValueError):
        mode_order(modes, 1, "shuffle")


def test_by_order_reads_a_file_that_ran_the_design_by_it(tmp_path):
    """The same recorded run, said to have run the design: its 15 prompts (counted from 1)
    fall in the design's six orders 2 or 3 times each, where the rotation gave three orders
    5 times each (tests/test_plain_vs_raw.py)."""
    rec = load_json(N64)
    rec["settings"]["mode_order"] = "williams"
    path = tmp_path / "williams.json"
    path.write_text(json.dumps(rec))
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "research" / "plain_vs_raw.py"), str(path),
                        "--by-order"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    counts = {ln.split()[2]: int(ln.split()[3]) for ln in p.stdout.splitlines()
              if ln.startswith("modes ran")}
    assert counts == {"raw,static,adaptive": 2, "static,adaptive,raw": 3,
                      "adaptive,raw,static": 3, "adaptive,static,raw": 3,
                      "raw,adaptive,static": 2, "static,raw,adaptive": 2}
