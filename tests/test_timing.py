"""Honest timing: end-to-end windows, intervals, an independent prediction, noise detection,
and old results files that still read. Numbers to the digit where the inputs are scripted."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main
from cpuspec.core.costs import predict_generation_s
from cpuspec.machine import osapi
from cpuspec.harness.measure import NoiseProbe, NoiseSample, noise_reasons, probe_costs
from cpuspec.report.tables import render_noise
from cpuspec.results.schema import read_json
from cpuspec.analysis.summary import noise_report, summarize
from cpuspec.core.speculative import generate_raw, generate_speculative
from cpuspec.analysis.stats import significance, speedup_ci
from fakes import FakeClock, FakeDecoder, target_rule

V1_RESULTS = Path(__file__).parent.parent / "bench" / "results" / "avx2-build" / \
    "bench_2threads.json.gz"


def test_interval_brackets_the_prompts_and_collapses_without_spread():
    # (raw tokens, raw s, SD tokens, SD s) per prompt: speedups 2.0, 0.5, 2.0, 0.5, 1.0.
    units = np.array([[10, 1.0, 10, 0.5], [10, 1.0, 10, 2.0]] * 2 + [[10, 1.0, 10, 1.0]])
    lo, hi = speedup_ci(units)
    assert lo < 1.0 < hi
    assert significance((lo, hi)) == "not significant"
    same = np.array([[10, 1.0, 10, 0.8]] * 5)   # every prompt 1.25×: no spread at all
    assert speedup_ci(same) == pytest.approx((1.25, 1.25))
    assert significance((1.1, 1.3)) == "faster" and significance((0.7, 0.9)) == "slower"
    # Below 5 units there is no interval, only a range.
    assert speedup_ci(units[:4]) is None and significance(None) is None


def _gen(prompt_id, rep, mode, tokens, seconds):
    return {"task": "t", "prompt_id": prompt_id, "repetition": rep, "mode": mode,
            "tokens": [1] * tokens, "e2e_s": seconds}


def test_repetitions_of_one_prompt_are_one_unit():
    """Five prompts repeated ten times, each repetition identical: the repetitions carry no
    independent information, so the interval must be the one of the five prompts run once.
    Treating the 50 generations as units would give an interval about √10 times narrower."""
    from cpuspec.analysis.stats import paired_units
    speed = [1.3, 0.9, 1.2, 1.0, 1.1]
    def runs(reps):
        out = []
        for i, sp in enumerate(speed):
            for r in range(reps):
                out += [_gen(f"t-{i}", r, "raw", 20, 1.0), _gen(f"t-{i}", r, "static", 20, 1 / sp)]
        return out
    def ci(reps):
        rs = runs(reps)
        return speedup_ci(paired_units([r for r in rs if r["mode"] == "raw"],
                                                 [r for r in rs if r["mode"] == "static"]))
    once, tenfold = ci(1), ci(10)
    assert tenfold == pytest.approx(once, rel=1e-9)
    assert once[1] - once[0] > 0.15            # five prompts this far apart: a wide interval
    # Four prompts repeated: still no interval, however many repetitions.
    rs = [r for r in runs(10) if r["prompt_id"] != "t-4"]
    assert speedup_ci(paired_units([r for r in rs if r["mode"] == "raw"],
                                             [r for r in rs if r["mode"] == "static"])) is None


def test_raw_and_sd_stay_paired():
    """Prompts of very different lengths, SD exactly 1.25× on each: paired by prompt, 1.25 with
    no spread; taking raw and SD apart would mix long and short prompts."""
    from cpuspec.analysis.stats import paired_units
    raw = [_gen(f"t-{i}", 0, "raw", 10 * (i + 1) ** 2, 0.1 * (i + 1) ** 2) for i in range(6)]
    sd = [_gen(f"t-{i}", 0, "static", 10 * (i + 1) ** 2, 0.08 * (i + 1) ** 2)
          for i in reversed(range(6))]          # another order: pairing is by prompt id
    assert speedup_ci(paired_units(raw, sd)) == pytest.approx((1.25, 1.25))


def test_prediction_from_the_probe_matches_a_scripted_generation():
    """The expected values are not the formula written out again: the loop itself runs on
    scripted decoders and a scripted clock (V(n) = 10 + 2 (n − 1) ms, a draft eval 3 ms), the
    cost probe times the same decoders, and the prediction from the probe must equal the
    generations' own end-to-end times. The draft always agrees (survival 1, 1 at k = 2), so
    the 12 tokens after the prefill's are exactly 4 rounds of 3."""
    def decoders():
        clock = FakeClock()
        return (clock, FakeDecoder(target_rule, clock, lambda n: 0.010 + 0.002 * (n - 1)),
                FakeDecoder(target_rule, clock, lambda n: 0.003))

    prompt = list(range(1, 11))
    clock, target, draft = decoders()
    probe = probe_costs(target, draft, prompt, k_max=2, reps=1, clock=clock)
    clock, target, draft = decoders()
    sd = generate_speculative(target, draft, prompt, 13, 2, clock=clock)
    clock, target, _ = decoders()
    raw = generate_raw(target, prompt, 13, clock=clock)
    assert [r.n_accepted for r in sd.rounds] == [2, 2, 2, 2]
    predicted_raw, predicted_sd = predict_generation_s(probe, [1.0, 1.0], 2, len(prompt), 13)
    assert predicted_raw == pytest.approx(raw.e2e_s)
    assert predicted_sd == pytest.approx(sd.e2e_s)
    # A prompt half as long: the prefills are scaled per token, the rounds are not.
    half_raw, _ = predict_generation_s(probe, [1.0, 1.0], 2, len(prompt) // 2, 13)
    assert half_raw == pytest.approx(raw.e2e_s - probe["target_prefill_s"] / 2)


def test_probe_states_its_conditions_and_times_with_the_given_clock():
    clock = FakeClock()
    target = FakeDecoder(target_rule, clock, lambda n: 0.010 * (1 + 0.5 * (n - 1)))
    draft = FakeDecoder(target_rule, clock, lambda n: 0.003)
    probe = probe_costs(target, draft, [1, 2, 3, 4, 5], k_max=3, reps=2, clock=clock)
    assert probe["position"] == 5 and probe["prompt_tokens"] == 5
    assert probe["verify_s"] == pytest.approx({"1": 0.010, "2": 0.015, "3": 0.020,
                                               "4": 0.025})
    assert probe["draft_s"] == pytest.approx(0.003)
    assert probe["target_prefill_s"] == pytest.approx(0.030)   # 5 tokens in one decode
    assert target.kv == [1, 2, 3, 4, 5]                          # rolled back after each


def _run(prompt_id, mode, tokens, seconds, noise=None):
    return {"task": "json", "prompt_id": prompt_id, "repetition": 0, "mode": mode,
            "tokens": [0] * tokens, "e2e_s": seconds, "noise": noise}


def test_noise_report_flags_busy_windows_and_outliers():
    quiet = NoiseSample(2.0, 3.9, 0.02, 0.0, 2.0, 0.01).to_dict()
    hog = NoiseSample(2.0, 2.6, 1.4, 0.0, 3.0, 0.5).to_dict()
    short = NoiseSample(0.05, 0.1, 0.04, 0.0, 2.0, None).to_dict()  # ticks: not judged
    runs = [_run("json-1", "raw", 20, 1.0, quiet), _run("json-2", "raw", 20, 1.0, hog),
            _run("json-3", "raw", 20, 1.0, short), _run("json-4", "raw", 20, 4.0, quiet)]
    rep = noise_report(runs)
    assert noise_reasons(quiet) == [] and noise_reasons(short) == []
    assert rep["prompts"] == ["json-2", "json-4"]
    reasons = {f["prompt_id"]: f["reason"] for f in rep["flags"]}
    assert "waited for a CPU 50%" in reasons["json-2"] and "0.70 CPUs" in reasons["json-2"]
    assert "under half the json/raw median 20.0 t/s" in reasons["json-4"]
    text = render_noise(rep)
    assert "json-2, json-4" in text and "--repetitions" in text
    assert render_noise(noise_report(runs[:1])) == ""


@pytest.mark.skipif(osapi.current().cpu_pressure_us() is None,
                    reason="no CPU pressure-stall information on this OS or kernel")
def test_noise_probe_sees_a_cpu_hog():
    """Two spinning processes on this machine's CPUs beside our own spinning thread."""
    import os
    n = len(os.sched_getaffinity(0)) + 1
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]
    try:
        with NoiseProbe() as probe:
            end = __import__("time").perf_counter() + 1.0
            while __import__("time").perf_counter() < end:
                pass
    finally:
        for h in hogs:
            h.kill()
    assert probe.sample.reasons(), probe.sample.to_dict()


def test_schema_1_results_still_read():
    """A real run recorded by cpuspec 0.1 (schema 1, an AVX2 build): report and advise work,
    with end-to-end figures from its prefill + decode times."""
    data = read_json(V1_RESULTS)
    assert data["schema_version"] == 1 and data["kind"] == "bench"
    s = summarize(data)
    assert set(s) == {"json", "code", "story", "overall"}
    assert 0.3 < s["json"]["sd_speedup"] < 1.0 and s["json"]["sd_speedup_ci"]
    assert s["json"]["predicted_window"] == "decode-only"  # its probe had no prefill timings
    res = CliRunner().invoke(main, ["report", str(V1_RESULTS), "--details"])
    assert res.exit_code == 0, res.output
    assert "SD ×raw e2e [95% CI]" in res.output and "AVX2 = 1" in res.output
    res = CliRunner().invoke(main, ["advise", str(V1_RESULTS)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["report", str(V1_RESULTS), "--format", "json"])
    rows = json.loads(res.output)
    assert rows[0]["task"] == "json" and rows[0]["sd_speedup_ci_low"] < rows[0]["sd_speedup"]


def test_parallel_prediction_at_its_limits():
    """Not the formula again: where the answer is plain without it. Every draft kept and a
    draft that costs nothing: each round gives k + 1 tokens for one verify, and the draft's
    work hides entirely. A slower draft, or a lower acceptance, never predicts faster."""
    from cpuspec.core.costs import predict_parallel_generation_s
    probe = {"verify_s": {"1": 0.01, "2": 0.012, "3": 0.014}, "draft_s": 1e-9,
             "target_prefill_s": 0.1, "draft_prefill_s": 0.04, "prompt_tokens": 10}
    raw, sd = predict_parallel_generation_s(probe, [1.0, 1.0], 2, 10, 31)
    assert raw == pytest.approx(0.1 + 30 * 0.01)
    assert sd == pytest.approx(0.1 + 30 / 3 * 0.014)
    times = [predict_parallel_generation_s(dict(probe, draft_s=d), s, 2, 10, 31)[1]
             for d in (0.001, 0.004, 0.008) for s in ([0.95, 0.9], [0.8, 0.6], [0.5, 0.2])]
    for d in range(3):      # along acceptance, at each draft cost
        assert times[3 * d] < times[3 * d + 1] < times[3 * d + 2]
    for s in range(3):      # along draft cost, at each acceptance
        assert times[s] < times[3 + s] < times[6 + s]
