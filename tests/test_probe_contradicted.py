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
RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
DISTURBED = RECORDED / "epyc-family25-model17" / "disturbed" / "probe_hog_k4.json.gz"
# quiet runs with a probe before and after the prompts (read where they are recorded, as the
# policy tests read bench/results: the check is judged against the recorded evidence itself)
QUIET = [RESULTS / "xeon-family6-model167" / "bench_newcomer.json.gz",
         RESULTS / "epyc-family25-model17" / "sequential_vs_fixed_16" / "fixed_1.json.gz"]
# a quiet long-prompt run with one probe, whose prompts measured above its ceiling
ONE_PROBE = RESULTS / "epyc-family25-model17" / "adaptive_long_q8_0_k7_n128_v4.json.gz"


def doc(path: Path) -> dict:
    return json.loads(gzip.open(path).read() if path.suffix == ".gz" else path.read_text())


def test_a_probe_timed_beside_a_hog_is_contradicted_by_the_prompts():
    why = probe_contradicted(doc(DISTURBED))
    assert why == ("json measured decode-only SD 0.72× raw [0.61, 0.85] over 5 prompts, above "
                   "the first probe's ceiling at k = 4, 0.20× with every draft accepted, where "
                   "the probe after the prompts gives 0.69×: the machine was disturbed while "
                   "the first probe ran"), why


@pytest.mark.parametrize("path", QUIET, ids=lambda p: p.name)
def test_a_quiet_run_is_not_flagged(path):
    checks = ceiling_checks(doc(path))
    assert checks and all(c["ceiling_end"] is not None for c in checks), \
        "the check must have judged this run's tasks against both probes"
    assert probe_contradicted(doc(path)) is None
    assert all(c["low"] < c["ceiling"] for c in checks)


def test_a_run_with_one_probe_is_not_judged_even_above_its_ceiling():
    checks = ceiling_checks(doc(ONE_PROBE))
    assert any(c["low"] > c["ceiling"] for c in checks) and \
        all(c["ceiling_end"] is None for c in checks)
    assert probe_contradicted(doc(ONE_PROBE)) is None


def test_lookup_is_not_checked_against_a_draft_models_ceiling():
    assert ceiling_checks(doc(RECORDED / "lookup62_q4_0_k3.json.gz")) == []


def test_report_says_the_early_stop_rests_on_a_contradicted_probe():
    res = CliRunner().invoke(main, ["report", str(DISTURBED)])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "the probe after them agrees with them (the warning below): the first probe was " \
        "disturbed" in flat
    assert "WARNING: no advice from this run's cost probe: json measured decode-only" in flat


def test_advise_refuses_advice_from_a_contradicted_probe():
    res = CliRunner().invoke(main, ["advise", str(DISTURBED)])
    assert res.exit_code != 0
    assert "the machine was disturbed while the first probe ran" in res.output
    assert "Traceback" not in res.output
