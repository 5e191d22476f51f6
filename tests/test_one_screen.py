"""Issue 53, item 1: every command's default output fits one screen (at most 40 lines of at
most 100 columns), over every recorded results file of every kind: `report` of bench, paths,
tune, sweep/offload, depth, costs, quality, what-if, validation and load files, `advise` of
every bench file with static runs, `compare` of recorded pairs of machines, `runs` and `models list`. `--details` keeps the
full tables; the first-screen test (test_first_screen.py) checks what bench's screen says."""
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main
from cpuspec.report.screen import MAX_LINES, WIDTH
from cpuspec.results.schema import ResultsError, read_json, results_text
from cpuspec.results.store import results_files

ROOT = Path(__file__).resolve().parent.parent
FILES = results_files(ROOT / "bench" / "results", recursive=True) + \
    results_files(ROOT / "tests" / "recorded", recursive=True)


def kind_of(path: Path) -> str | None:
    try:
        return read_json(path).get("kind")
    except ResultsError:
        return None


def check(args: list[str]) -> str:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, (args, res.output)
    lines = res.stdout.rstrip("\n").splitlines()     # warnings go to stderr
    assert len(lines) <= MAX_LINES, (args, len(lines), res.stdout)
    wide = [line for line in lines if len(line) > WIDTH]
    assert not wide, (args, wide)
    return res.stdout


KINDS = {"bench", "paths", "tune", "sweep", "costs", "quality", "whatif", "shape_validation",
         "load", "heads"}


def test_every_recorded_file_of_every_kind_reports_on_one_screen():
    seen = {}
    for path in FILES:
        kind = kind_of(path)
        if kind in KINDS:
            check(["report", str(path.relative_to(ROOT))])
            seen[kind] = seen.get(kind, 0) + 1
    assert set(seen) == KINDS, seen        # every kind is recorded and rendered
    assert seen["bench"] > 50 and seen["paths"] > 10 and seen["tune"] > 5


def test_advise_of_every_recorded_bench_file_fits_one_screen():
    n = 0
    for path in FILES:
        if kind_of(path) != "bench":
            continue
        res = CliRunner().invoke(main, ["advise", str(path)])
        if res.exit_code == 0:
            check(["advise", str(path)])
            n += 1
    assert n > 30


@pytest.mark.parametrize("a, b", [
    ("bench/results/avx2-build/bench_2threads.json.gz", "bench/results/bench_2threads.json.gz"),
    ("bench/results/epyc-family25-model17/bench_q8_0_k7.json.gz",
     "bench/results/epyc-family25-model17/bench_q4_0_k3.json.gz"),
])
def test_compare_of_two_machines_fits_one_screen(a, b):
    out = check(["compare", str(ROOT / a), str(ROOT / b), "--force"])
    assert "SD 2 ÷ 1" in out and "run 2" in out


def test_runs_and_models_list_fit_one_screen_width(cpuspec_home):
    saved = cpuspec_home / "results"
    saved.mkdir(parents=True)
    for i, path in enumerate(p for p in FILES[:30] if kind_of(p) == "bench"):
        (saved / f"20261201T00000{i:02d}Z-{'x' * 40}-bench.json").write_text(results_text(path))
    out = CliRunner().invoke(main, ["runs"]).output
    assert all(len(line) <= WIDTH for line in out.splitlines()), out
    shown = out.splitlines()[2].split()[0].rstrip("…")     # a cut id: its prefix still works
    assert CliRunner().invoke(main, ["report", shown]).exit_code == 0
    out = CliRunner().invoke(main, ["models", "list"]).output
    assert all(len(line) <= WIDTH for line in out.splitlines()), out
