"""Issue 69's leftover: a bench whose cost probe is contradicted by its own measurement is
flagged. The disturbed run is real (bench/disturbed_probe.sh: a CPU hog beside the probe, not
the prompts); the quiet ones are the recorded runs the other tests own."""
import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.analysis.predict import ceiling_checks, probe_contradicted
from cpuspec.cli.main import main

RECORDED = Path(__file__).resolve().parent / "recorded"
DISTURBED = RECORDED / "epyc-family25-model17" / "disturbed" / "probe_hog_k4.json.gz"
QUIET = [RECORDED / "epyc-family25-model17" / "bench_q8_0_k7.json.gz",
         RECORDED / "avx2-build" / "bench_2threads.json.gz",
         RECORDED / "epyc-family25-model17" / "adaptive_heldout_long_q8_0_k7_n128_v6.json.gz"]


def doc(path: Path) -> dict:
    return json.loads(gzip.open(path).read())


def test_a_probe_timed_beside_a_hog_is_contradicted_by_the_prompts():
    why = probe_contradicted(doc(DISTURBED))
    assert why and why.startswith("json measured decode-only SD 0.72× raw [0.61, 0.85] over 5 "
                                  "prompts, above the probe's ceiling at k = 4, 0.20×"), why


@pytest.mark.parametrize("path", QUIET, ids=lambda p: p.name)
def test_a_quiet_run_is_not_flagged(path):
    checks = ceiling_checks(doc(path))
    assert checks, "the check must have looked at this run's tasks"
    assert probe_contradicted(doc(path)) is None
    assert all(c["low"] < c["ceiling"] for c in checks)


def test_lookup_is_not_checked_against_a_draft_models_ceiling():
    assert ceiling_checks(doc(RECORDED / "lookup62_q4_0_k3.json.gz")) == []


def test_report_says_the_early_stop_rests_on_a_contradicted_probe():
    res = CliRunner().invoke(main, ["report", str(DISTURBED)])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "the stop rests on a probe the measurement contradicts" in flat
    assert "WARNING: no advice from this run's cost probe: json measured decode-only" in flat
    assert "the probe does not describe this run" in flat


def test_advise_refuses_advice_from_a_contradicted_probe():
    res = CliRunner().invoke(main, ["advise", str(DISTURBED)])
    assert res.exit_code != 0
    assert "the probe does not describe this run" in res.output
    assert "Traceback" not in res.output
