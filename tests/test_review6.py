"""Issue 69, item 12: the red teams' findings that remained after the last round, each on a
real recorded run (tests/recorded) changed only where the finding needs it."""
import gzip
import json
from pathlib import Path

from click.testing import CliRunner

from cpuspec.cli.main import main

RECORDED = Path(__file__).resolve().parent / "recorded"
BENCH = RECORDED / "epyc-family25-model17" / "bench_q8_0_k7.json.gz"


def real(tmp_path: Path, name: str, change=None) -> Path:
    doc = json.loads(gzip.open(BENCH).read())
    if change:
        change(doc)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_compare_says_nothing_measured_for_a_run_without_sd_generations(tmp_path):
    def raw_only(doc):
        doc["runs"] = [r for r in doc["runs"] if r["mode"] == "raw"]
        doc["audit"], doc["complete"] = [], False
    good, bare = real(tmp_path, "good.json"), real(tmp_path, "raw_only.json", raw_only)
    res = CliRunner().invoke(main, ["compare", str(good), str(bare)])
    assert res.exit_code == 0, res.output
    run2 = [line for line in res.output.splitlines() if " run 2 " in line]
    assert run2 and all("nothing measured" in line for line in run2), run2
    assert not any("no difference" in line for line in run2)


def test_a_damaged_file_is_named_without_the_good_one(tmp_path):
    def zero_tokens(doc):
        for r in doc["runs"]:
            r["tokens"], r["decode_s"], r["token_latencies_s"] = [], 0.0, []
    good, bad = real(tmp_path, "good.json"), real(tmp_path, "zero_tokens.json", zero_tokens)
    res = CliRunner().invoke(main, ["compare", str(good), str(bad)])
    assert res.exit_code == 2, res.output
    assert "zero_tokens.json" in res.output and "good.json" not in res.output, res.output


def test_costs_refuses_a_quant_gpt_oss_is_not_published_in():
    res = CliRunner().invoke(main, ["costs", "--pairs", "gpt-oss-20b:gpt-oss-20b",
                                    "--quants", "Q4_0", "--no-save"])
    assert res.exit_code == 2 and "MXFP4_MOE" in res.output, res.output


def test_heads_refuses_a_qwen_draft_for_a_gemma_target():
    res = CliRunner().invoke(main, ["heads", "--on", "gemma3-270m", "--methods", "draft"])
    assert res.exit_code == 2 and "Gemma 3" in res.output, res.output


def test_a_costs_ceiling_from_one_repetition_is_not_called_a_bound(tmp_path):
    src = Path(__file__).resolve().parents[1] / "bench/results/epyc-family25-model17/costs_q4_0.json"
    doc = json.loads(src.read_text())
    res = CliRunner().invoke(main, ["report", str(src)])
    assert res.exit_code == 0 and "SD is at most" in res.output   # 3 repetitions: a bound
    probe = doc["cost_probe"]
    probe["reps"] = 1
    probe["verify_s"]["2"] = 2.6 * probe["verify_s"]["1"]   # V(2) > V(3), as one noisy rep
    probe["verify_s"]["3"] = 1.3 * probe["verify_s"]["1"]
    (tmp_path / "one.json").write_text(json.dumps(doc))
    res = CliRunner().invoke(main, ["report", str(tmp_path / "one.json")])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "SD is at most" not in text and "Not a bound: 1 repetition per size" in text, text
    assert "falls at n = 3" in text


def test_plot_of_a_run_that_measured_nothing_draws_nothing(tmp_path):
    import pytest
    pytest.importorskip("matplotlib")

    def nothing(doc):
        doc["runs"], doc["audit"], doc["complete"] = [], [], False
        del doc["cost_probe"]
    res = CliRunner().invoke(main, ["plot", str(real(tmp_path, "empty.json", nothing)),
                                    "--out", str(tmp_path / "figs")])
    assert res.exit_code != 0 and "nothing" in res.output, res.output
    assert not list(tmp_path.glob("figs/*"))


TUNE = RECORDED / "epyc-family25-model1" / "tune_json_code.json.gz"


def test_tune_says_thin_evidence_is_thin_and_shows_the_fastest_answer(tmp_path):
    """Issue 69.11: every SD answer measured faster over 2 prompts (a range) read "no answer
    was measured faster ...; cpuspec costs shows which term of the rule is short"; and the
    fastest answer (another quant) was left off the screen."""
    doc = json.loads(gzip.open(TUNE).read())
    for r in doc["recommendations"].values():
        c = r["best_sd"]["confirmed"]
        c.update(n_prompts=2, measured_speedup_ci=None, measured_speedup=1.6,
                 measured_speedup_range=[1.5, 1.7])
        r["recommended"]["confirmed"]["vs_reference_raw_stats"].update(
            ci=None, range=[1.8, 2.1], units=2)
    (tmp_path / "thin.json").write_text(json.dumps(doc))
    res = CliRunner().invoke(main, ["report", str(tmp_path / "thin.json")])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "cpuspec costs" not in text
    assert "json leads over 2 prompts" in text and "evidence is thin" in text
    assert "cpuspec bench --target" in text                  # the command that confirms it
    assert "Fastest per task" in text and "1.5b-q4_0 + 0.5b-q4_0" in text


def test_tune_prints_one_screen_and_report_details_the_rest():
    res = CliRunner().invoke(main, ["report", str(TUNE)])
    lines = res.output.splitlines()
    assert len(lines) <= 40 and max(map(len, lines)) <= 100
    assert "Fastest per task" in res.output and "Next: serve it" in res.output


def test_compare_says_undecided_for_a_range_that_straddles_one(tmp_path):
    """Four prompts (two json, two story): the overall figure is a range over 4 prompts from
    below 1 to above; that is not 'no difference' (an interval inside the precision)."""
    keep = {"json-1", "json-2", "story-1", "story-2"}

    def four(doc):
        for key in ("prompts", "runs", "audit"):
            doc[key] = [r for r in doc[key] if r["prompt_id"] in keep]
        doc["settings"]["tasks"] = ["json", "story"]
    good, few = real(tmp_path, "good.json"), real(tmp_path, "four.json", four)
    res = CliRunner().invoke(main, ["compare", str(good), str(few), "--force"])
    assert res.exit_code == 0, res.output
    overall = next(x for x in res.output.splitlines() if x.startswith("overall") and "run 2" in x)
    assert "undecided" in overall and "no difference" not in overall, overall


def test_costs_acceptance_from_a_damaged_file_says_damaged(tmp_path):
    def damaged(doc):
        doc["models"] = "abc"
    bad = real(tmp_path, "damaged.json", damaged)
    res = CliRunner().invoke(main, ["costs", "--sizes", "0.5b", "--acceptance", str(bad),
                                    "--no-save"])
    assert res.exit_code == 2 and "damaged results file" in res.output, res.output
