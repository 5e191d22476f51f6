"""`cpuspec report --per-prompt` on machine B's long-suite run at 128 tokens (policy 1e4beea)."""
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main

ROOT = Path(__file__).parent.parent
RUN = ROOT / "bench" / "results" / "epyc-family25-model17" / "adaptive_long_q8_0_k7_n128_v5.json.gz"


class Done:
    def __init__(self, res):
        self.returncode, self.stdout, self.stderr = res.exit_code, res.output, res.output


def tool(*args):
    return Done(CliRunner().invoke(main, ["report", *args[:1], "--per-prompt", *args[1:]]))


def test_a_line_per_generation_against_the_raw_modes():
    """long-doc-4: its target prefill, the same work in each mode, took 14.47 s raw and 20.29 s
    adaptive, which alone puts the adaptive generation at 0.74x raw."""
    p = tool(str(RUN), "--tasks", "long-doc")
    assert p.returncode == 0, p.stderr
    lines = [ln.split() for ln in p.stdout.splitlines() if ln.startswith("long-doc-")]
    assert len(lines) == 15 and {ln[2] for ln in lines} == {"raw", "static", "adaptive"}
    row = {ln[2]: ln for ln in lines if ln[0] == "long-doc-4"}
    assert (row["raw"][4], row["adaptive"][4]) == ("14.47", "20.29")
    assert row["raw"][-1] == "1.00×" and row["adaptive"][-1] == "0.74×"


@pytest.mark.parametrize("args, message", [(["missing.json"], "no results file or saved run"),
                                           ([str(RUN), "--tasks", "nope"], "no generations")])
def test_bad_input_gets_a_message_and_exit_2(args, message):
    p = tool(*args)
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr


def test_tasks_without_per_prompt_is_refused_not_ignored():
    res = CliRunner().invoke(main, ["report", str(RUN), "--tasks", "long-doc"])
    assert res.exit_code == 2 and "add --per-prompt" in res.output
