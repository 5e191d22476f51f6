"""Issue 57, item 1: one verdict grammar on every screen. faster / slower only where a 95 %
interval from ≥ 5 units excludes 1; no difference where it spans 1; a range, and no verdict,
below 5 units. The load files are the recorded B′ runs, cut the way an interrupted or short
run would leave them."""
import copy
import json
from pathlib import Path

from cpuspec.analysis.stats import MIN_CI_UNITS, ratio_stats
from cpuspec.report.load import load_answer, load_note, render_load
from cpuspec.results.schema import load_json

B_PRIME = Path(__file__).resolve().parent.parent / "bench" / "results" / "epyc-family25-model17"


def recorded_load() -> dict:
    return json.loads((B_PRIME / "load_q8_0_k7.json").read_text())


def keep_batches(doc: dict, n: int) -> dict:
    """The first n batches of each server at every level (a shorter run of the same load)."""
    out = copy.deepcopy(doc)
    for level in out["levels"]:
        level["batches"] = [b for b in level["batches"] if b["batch"] < n]
    return out


def test_the_recorded_run_pays_up_to_2_and_is_slower_from_4():
    assert load_answer(recorded_load()) == ("SD pays for up to 2 request(s) in flight here; "
                                            "off from 4 (measured slower)")


def test_two_batches_that_all_ran_faster_give_no_verdict_not_keep_it_off():
    doc = keep_batches(recorded_load(), 2)
    text = load_answer(doc)
    assert text.startswith("no verdict: fewer than 5 batches") and "keep it off" not in text


def test_a_level_whose_interval_spans_1_is_unclear_not_off():
    doc = recorded_load()
    # level 4's SD batches replaced by its plain batches' own times: SD ×raw spans 1 there
    level = doc["levels"][2]
    raw = {b["batch"]: b for b in level["batches"] if b["mode"] == "raw"}
    for b in level["batches"]:
        if b["mode"] == "sd":
            b["wall_s"] = raw[b["batch"]]["wall_s"] * (1.03 if b["batch"] % 2 else 0.97)
    text = load_answer(doc)
    assert "unclear from 4" in text and "off from" not in text, text


def test_an_interrupted_run_names_only_the_levels_it_ran():
    doc = recorded_load()
    doc["levels"] = doc["levels"][:1]
    doc["complete"] = False
    text = load_answer(doc)
    assert text == ("SD pays for up to 1 request(s) in flight here; every level that finished "
                    "paid (the run stopped before the others)"), text
    assert "INCOMPLETE" in render_load(doc)


def test_a_load_file_with_no_levels_says_no_verdict():
    doc = recorded_load()
    doc["levels"] = []
    assert load_answer(doc).startswith("no verdict")
    assert "keep it off" not in render_load(doc)


def test_the_load_note_says_unclear_where_the_level_spans_1(monkeypatch):
    doc = keep_batches(recorded_load(), 3)
    monkeypatch.setattr("cpuspec.report.load.measured_load", lambda *a, **k: (doc, "x"))
    assert load_note("t", "d", 7) == "no verdict at 1 in flight (fewer than 5 batches)"


def test_one_interval_function_a_range_below_5_units_an_interval_from_5():
    four = ratio_stats([1.2, 1.3, 1.25, 1.22])
    assert four["ci"] is None and four["significance"] is None and four["range"] == [1.2, 1.3]
    five = ratio_stats([1.2, 1.3, 1.25, 1.22, 1.28])
    assert five["units"] == MIN_CI_UNITS and five["significance"] == "faster"
    # the hand case: logs of e^0.1 and e^-0.1 repeated: mean 0, sd 0.1095, t(4) 2.776
    st = ratio_stats([1.1051709, 0.9048374, 1.1051709, 0.9048374, 1.0])
    assert abs(st["speedup"] - 1.0) < 1e-6
    assert abs(st["ci"][1] - 1.1322) < 2e-3 and st["significance"] == "not significant"


def test_a_one_round_shape_validation_is_not_marked_ok_or_no():
    from cpuspec.report.measurements import render_shape_validation
    doc = load_json(B_PRIME / "shape_validation.json.gz")
    full = render_shape_validation(doc)
    assert " ok" in full or " NO" in full          # the recorded run: 5+ rounds, marked
    one = copy.deepcopy(doc)
    one["probes"] = {label: probes[:1] for label, probes in doc["probes"].items()}
    one["settings"]["rounds"] = 1
    body = render_shape_validation(one).split("\n\n", 1)[1]
    assert " ok" not in body and " NO" not in body and " ?" not in body, body


def test_the_whatif_calls_a_gain_within_its_error_no_verdict():
    from cpuspec.analysis.whatif import WHATIF_ERROR, whatif_state
    from cpuspec.report.measurements import render_whatif
    assert whatif_state(1.02) == "within error" and whatif_state(1.0) == "off"
    assert whatif_state(1 + WHATIF_ERROR + 0.01) == "on"
    text = render_whatif(json.loads((B_PRIME / "whatif_q4km_q4_0.json").read_text()))
    assert "~1.0" in text and "±15%" in text, text     # 7B Q4_K_M at 0.8: 1.02, 1.13


def test_the_prediction_reaches_the_first_screen_only_with_its_band():
    """A recorded bench run has one probe: no prediction on its first screen. With a second
    probe whose verify costs 10 % more (the drift issue 57 saw between two runs), each task's
    band spans the two predictions and the screen says where the measurement fell."""
    from cpuspec.analysis.summary import summarize
    from cpuspec.report.verdict import render_verdict
    doc = load_json(B_PRIME / "bench_q8_0_k7.json.gz")
    one = summarize(doc)
    assert "predicted_band" not in one["json"]
    assert "cost probes before and after" not in render_verdict(doc, one, None)
    end = copy.deepcopy(doc["cost_probe"])
    end["verify_s"] = {n: 1.1 * v if n != "1" else v for n, v in end["verify_s"].items()}
    doc["cost_probe_end"] = end
    two = summarize(doc)
    for task in ("json", "code", "story"):
        lo, hi = two[task]["predicted_band"]
        assert lo < hi and hi == two[task]["predicted_speedup"]     # dearer verify: lower
        m = two[task]["sd_speedup"]
        inside = lo <= m <= hi
        assert (two[task]["band_error_pct"] == 0) == inside
    text = render_verdict(doc, two, None)
    assert "cost probes before and after the prompts: json " in " ".join(text.split())
    assert max(map(len, text.splitlines())) <= 100


def test_a_level_faster_after_one_that_was_not_is_no_clear_crossover():
    doc = recorded_load()
    lv1 = doc["levels"][0]
    raw = {b["batch"]: b for b in lv1["batches"] if b["mode"] == "raw"}
    for b in lv1["batches"]:        # level 1's SD batches made as slow as its plain ones
        if b["mode"] == "sd":
            b["wall_s"] = raw[b["batch"]]["wall_s"] * (1.03 if b["batch"] % 2 else 0.97)
    text = load_answer(doc)
    assert text.startswith("no clear crossover: 1 in flight no difference, 2 in flight "
                           "faster"), text
