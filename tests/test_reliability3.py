"""Issue "Reliability, third pass": each numbered item of the tour reproduced, one test each
(the number is in the test's name)."""
import json
import os
import stat

import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main


def run(*args, **kw):
    return CliRunner().invoke(main, list(args), **kw)


def tiny(tiny_models, *extra, save=False):
    return ["bench", "--target", str(tiny_models["target"]), "--draft",
            str(tiny_models["draft"]), "--threads", "1", "--tasks", "json",
            "--prompts-per-task", "1", "--max-tokens", "16", "--warmup", "0",
            *([] if save else ["--no-save"]), *extra]


def clean_error(res, message):
    assert res.exit_code not in (0, None), res.output
    assert message in res.output, res.output
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception


def saved_files(home):
    folder = home / "results"
    return sorted(folder.iterdir()) if folder.is_dir() else []


# 1. an early failure leaves no empty results file ---------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["costs", "--pair", "nosuch"], "nosuch"),
    (["bench", "--pair", "nosuch", "--tasks", "json"], "nosuch"),
    (["contention", "--pair", "nosuch"], "nosuch"),
])
def test_1_early_failure_leaves_no_empty_results_file(cpuspec_home, args, message):
    clean_error(run(*args), message)
    assert saved_files(cpuspec_home) == []
    assert "no saved runs yet" in run("runs").output


def test_1_quality_with_an_unknown_model_saves_nothing(cpuspec_home):
    clean_error(run("quality", "nosuchmodel"), "unknown model 'nosuchmodel'")
    assert saved_files(cpuspec_home) == []


def test_1_a_model_that_fails_to_load_leaves_no_empty_file(cpuspec_home, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    clean_error(run("costs", "--target", str(bad), "--draft", str(bad)), "could not load")
    assert saved_files(cpuspec_home) == []


# 2. tune with an empty list ------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--drafts", "--targets"])
def test_2_tune_with_an_empty_list(flag):
    res = run("tune", flag, "", "--tasks", "json")
    clean_error(res, "names no model")
    assert "derive" not in res.output and "loading" not in res.output


# 3. models path does not build ---------------------------------------------------------------

def test_3_models_path_of_an_uncached_model_builds_nothing(cpuspec_home):
    res = run("models", "path", "qwen2.5-coder-1.5b-q5_k_m")
    clean_error(res, "is not in the cache")
    assert "cpuspec models fetch qwen2.5-coder-1.5b-q5_k_m" in res.output
    assert not (cpuspec_home / "models").exists() or \
        not any((cpuspec_home / "models").rglob("*.gguf*"))


# 4. a killed derive's partial file goes at the next derive -----------------------------------

def test_4_next_derive_removes_a_killed_derives_partial(tiny_models, cpuspec_home):
    derived = cpuspec_home / "models" / "derived"
    derived.mkdir(parents=True)
    dead = 2 ** 22 + 54321  # above pid_max's default: never a live process
    stale = derived / f"target.Q8_0.from-0123456789ab.gguf.{dead}.partial"
    stale.write_bytes(b"x" * 4096)
    res = run("models", "derive", str(tiny_models["target"]), "--quant", "Q8_0")
    assert res.exit_code == 0, res.output
    assert not stale.exists()
    assert [p.suffix for p in derived.iterdir()] == [".gguf"]


# 5. ten thousand prompts need --yes ----------------------------------------------------------

def test_5_a_huge_prompts_file_needs_yes(tiny_models, tmp_path):
    f = tmp_path / "many.jsonl"
    f.write_text("".join(json.dumps({"task": "t", "prompt": f"say {i}"}) + "\n"
                         for i in range(10_000)))
    args = tiny(tiny_models, "--prompts", str(f))
    for flag in ("--tasks", "json", "--prompts-per-task", "1"):
        args.remove(flag)
    res = run(*args)
    clean_error(res, "10000 prompts × 1 repetition(s) is more than 200")
    assert "--yes" in res.output and "loading" not in res.output


# 6. nan and inf ------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["bench", "--max-noise", "nan"], ["bench", "--max-noise", "inf"],
                                  ["tune", "--budget", "nan"], ["tune", "--budget", "inf"]])
def test_6_non_finite_numbers_are_refused(args):
    clean_error(run(*args), "is not a finite number")


# 7. every tune name is checked before any is resolved -----------------------------------------

def test_7_tune_checks_every_name_first(cpuspec_home):
    res = run("tune", "--targets", "qwen2.5-coder-1.5b-q8_0", "--drafts",
              "hybrid:NONEXISTENT", "--tasks", "json")
    clean_error(res, "unknown model 'NONEXISTENT'")
    assert "derive" not in res.output and "mirror" not in res.output
    assert not (cpuspec_home / "models").exists()


# 8. flags that would do nothing --------------------------------------------------------------

@pytest.mark.parametrize("extra, message", [
    (["--drafter", "lookup"], "--drafter lookup does not use"),          # with --draft
    (["--adaptive-scope", "prompt", "--policy", "static"], "--adaptive-scope prompt"),
    (["--draft-cores", "0,0", "--policy", "off"], "--policy off runs raw decoding only"),
    (["--draft-threads", "3", "--draft-cores", "0"], "--draft-threads 3 is more than"),
])
def test_8_flags_that_do_nothing_are_refused(tiny_models, extra, message):
    res = run(*tiny(tiny_models, *extra))
    clean_error(res, message)
    assert "loading" not in res.output


# 9. CPUSPEC_HOME that is a file, or a folder that does not exist ----------------------------

def test_9_runs_with_a_home_that_is_a_file(monkeypatch, tmp_path):
    f = tmp_path / "home-file"
    f.write_text("x")
    monkeypatch.setenv("CPUSPEC_HOME", str(f))
    clean_error(run("runs"), "which is a file, not a folder")
    clean_error(run("runs", "--json"), "which is a file, not a folder")


def test_9_runs_with_a_missing_home_names_the_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("CPUSPEC_HOME", str(tmp_path / "nowhere"))
    res = run("runs")
    assert res.exit_code == 0 and str(tmp_path / "nowhere" / "results") in res.output


# 10. report marks an interrupted run in every format ------------------------------------------

def test_10_report_marks_interrupted_runs(tiny_models, tmp_path):
    out = tmp_path / "b.json"
    assert run(*tiny(tiny_models, "--json", str(out))).exit_code == 0
    sweep = tmp_path / "s.json"
    assert run(*tiny(tiny_models, "-k", "1,2", "--json", str(sweep))).exit_code == 0
    for f in (out, sweep):
        data = json.loads(f.read_text())
        data["complete"] = False
        f.write_text(json.dumps(data))
        for fmt in ("text", "markdown", "csv", "json"):
            res = CliRunner().invoke(main, ["report", str(f), "--format", fmt])
            assert res.exit_code == 0, res.output
            assert "incomplete run: it was interrupted" in res.output, (f, fmt)
            if fmt in ("csv", "json") and f == out:   # stdout stays machine-readable
                assert "incomplete" not in res.stdout
                if fmt == "json":
                    json.loads(res.stdout)


# 11. outputs get the mode a plain open() gives -----------------------------------------------

def test_11_outputs_are_readable_under_umask_022(tiny_models, tmp_path, cpuspec_home):
    old = os.umask(0o022)
    try:
        out = tmp_path / "r.json"
        res = run(*tiny(tiny_models, "--json", str(out), save=True))
        assert res.exit_code == 0, res.output
    finally:
        os.umask(old)
    for p in [out, *saved_files(cpuspec_home)]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o644, p


# 12. deriving a file into its own quant says so ----------------------------------------------

def test_12_derive_into_the_sources_own_quant_is_refused(tiny_models, cpuspec_home):
    res = run("models", "derive", str(tiny_models["target"]), "--quant", "Q8_0")
    assert res.exit_code == 0, res.output
    q8 = res.stdout.strip().splitlines()[-1]
    res = run("models", "derive", q8, "--quant", "Q8_0")
    clean_error(res, "is already Q8_0")
    assert "--force" in res.output
    res = run("models", "derive", q8, "--quant", "Q8_0", "--force")
    assert res.exit_code == 0, res.output


# 13. cosmetics -------------------------------------------------------------------------------

def test_13_runs_has_no_empty_column_and_sweeps_print_no_dicts(tiny_models, cpuspec_home):
    res = run(*tiny(tiny_models, save=True))
    assert res.exit_code == 0, res.output
    header = run("runs").output.splitlines()[0]
    assert header.rstrip().endswith("SD ×raw e2e"), header
    res = run(*tiny(tiny_models, "-k", "1,2"))
    assert res.exit_code == 0, res.output
    assert "{" not in res.output and "measuring point threads=1, k=1" in res.output
