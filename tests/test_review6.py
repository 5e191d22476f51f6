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
