"""Issue 69, items 3, 4 and 9: dataset schema 3 says what each interval is (design, level,
where the task stopped, `undecided` apart from "not significant"), heads rows carry the quant
types the run used, and rows whose values cannot be, or a row id published with other
contents, are said on read, not ranked. Every file is a recorded run exported by the command a
user runs, altered only where a test needs a hostile or an older row."""
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

from cpuspec.analysis.dataset import DATASET_SCHEMA, MIGRATIONS, dataset_rows  # noqa: E402
from cpuspec.cli.main import main  # noqa: E402
from cpuspec.results.schema import read_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
E = ROOT / "bench/results/xeon-family6-model167"
B = ROOT / "tests/recorded/epyc-family25-model17/bench_q8_0_k7.json.gz"
# the README's bench on machine E under the sequential design, 8-prompt suites: json ran all 8
# and stayed undecided, code was decided at 8, story at 5
SEQUENTIAL = E / "sequential_vs_fixed/sequential_1.json.gz"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(autouse=True)
def no_saved_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("CPUSPEC_HOME", str(tmp_path / "home"))


def by_task(path: Path) -> dict:
    return {r["task"]: r for r in dataset_rows(read_json(path))}


def test_a_sequential_runs_rows_say_their_level_and_where_they_stopped():
    rows = by_task(SEQUENTIAL)
    # 8 prompts planned: looks at 5 and 8, each at 1 − 0.05/2
    assert (rows["json"]["verdict"], rows["json"]["stopped_at"],
            rows["json"]["prompts_planned"]) == ("undecided", 8, 8)
    assert (rows["story"]["verdict"], rows["story"]["stopped_at"]) == ("slower", 5)
    assert {rows[t]["ci_level"] for t in ("json", "code", "story")} == {0.975}
    assert {rows[t]["design"] for t in rows} == {"sequential"}
    assert rows["overall"]["ci_level"] is None and rows["overall"]["verdict"] is None


def test_a_fixed_runs_rows_are_95_percent_and_not_stopped():
    rows = by_task(B)
    assert {r["design"] for r in rows.values()} == {"fixed"}
    assert {r["ci_level"] for r in rows.values()} == {0.95}
    assert {r["stopped_at"] for r in rows.values()} == {None}
    assert rows["json"]["verdict"] == "faster"


def test_heads_rows_carry_the_quants_the_run_used():
    q4_0 = dataset_rows(read_json(E / "heads_eagle3_qwen3_4b_q4_0.json"))
    assert {(r["target_quant"], r["draft_quant"]) for r in q4_0} == {("Q4_0", "Q8_0")}
    mtp = dataset_rows(read_json(E / "heads_mtp_qwen35_0.8b.json"))
    assert {(r["target_quant"], r["draft_quant"]) for r in mtp} == {("Q4_K_M", None)}
    mixed = dataset_rows(read_json(E / "heads_qwen3_4b.json"))
    assert {(r["method"], r["draft_quant"]) for r in mixed} == {
        ("eagle3", "Q8_0"), ("dflash", "Q8_0"), ("dspark", "Q8_0"), ("draft", "Q4_K_M")}


def export(src: Path, out: Path):
    import pyarrow.parquet as pq
    assert run("export", src, "--out", out).exit_code == 0
    path = next(out.glob("*.parquet"))
    return path, pq.read_table(path)


def test_a_schema_2_row_is_read_with_its_level_unknown_and_the_board_says_so(tmp_path):
    """Machine B's fixed run written as a schema-2 file (today's export less the schema-3
    columns): its best row ranks with its level unknown, and the board says what that means."""
    import pyarrow.parquet as pq
    path, table = export(B, tmp_path / "ds")
    old = table.drop_columns(["ci_level", "design", "stopped_at", "prompts_planned",
                              "matrix_engine", "matrix_engine_used", "target_repo",
                              "draft_repo"])
    path.unlink()
    pq.write_table(old.replace_schema_metadata({b"cpuspec.dataset_schema": b"2"}),
                   tmp_path / "ds" / "old.parquet")
    migrated = MIGRATIONS[3](MIGRATIONS[2](old))
    assert migrated.column_names == table.column_names
    assert set(migrated.column("ci_level").to_pylist()) == {None}
    res = run("leaderboard", tmp_path / "ds")
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if "1.42 [1.31, 1.55]" in ln)
    assert line.split()[-1] == "?" or " ? " in line, res.output
    assert "lvl ?: a row of a schema-2 file" in res.output
    # with today's file beside it, the same run's row is known: 95 %, and no "?" left
    export(B, tmp_path / "ds2")
    res = run("leaderboard", tmp_path / "ds2")
    assert "SD ×raw [95%]" in res.output and "lvl ?" not in res.output
    assert DATASET_SCHEMA >= 3


def test_rows_that_cannot_be_are_passed_over_with_a_count(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    path, table = export(B, tmp_path / "ds")
    rows = table.to_pylist()
    good = [r for r in rows if r["verdict"] == "faster"]
    assert len(good) >= 2
    bad = []
    for i, change in enumerate([{"sd_speedup": float("nan")}, {"sd_speedup": -1.4},
                                {"sd_ci_low": 1.6, "sd_ci_high": 1.3},
                                {"sd_ci_low": 0.9},           # "faster" over an interval with 1
                                {"threads": 0}]):
        bad.append({**good[0], **change, "row_id": f"bad{i}", "run_id": f"bad{i}"})
    # another's row id with other contents: both kept, the conflict said
    bad.append({**good[1], "sd_speedup": 9.0, "sd_ci_low": 8.0, "sd_ci_high": 10.0})
    meta = table.schema.metadata
    pq.write_table(pa.Table.from_pylist(bad, schema=table.schema).replace_schema_metadata(meta),
                   tmp_path / "ds" / "hostile.parquet")
    res = run("leaderboard", tmp_path / "ds")
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "2 rows with a speedup that is not a positive number" in text
    assert "1 row with an interval whose ends are not in order" in text
    assert "a verdict its interval does not support" in text
    assert "1 row with threads ≤ 0" in text
    assert "1 row id published with different contents" in text
    assert "9.00 [8.00, 10.00]" in res.output       # kept, not hidden, not trusted over it
    res = run("leaderboard", tmp_path / "ds", "--sql", "SELECT count(*) FROM rows WHERE "
              "row_id LIKE 'bad%'")
    assert res.exit_code == 0 and "0" in res.output.split()


def test_a_run_read_from_an_old_and_a_new_file_counts_once_without_a_false_conflict(tmp_path):
    """The same run exported by a schema-2 cpuspec and by today's: its migrated row has nulls
    where today's records more, and its interval ends may differ in the 4th digit (the exact t
    quantile): one row, no "different contents" note, "of" not doubled."""
    import pyarrow.parquet as pq
    path, table = export(B, tmp_path / "ds")
    old = table.drop_columns(["ci_level", "design", "stopped_at", "prompts_planned",
                              "matrix_engine", "matrix_engine_used", "target_repo",
                              "draft_repo"])
    lows = [None if v is None else v * (1 + 2e-4) for v in old.column("sd_ci_low").to_pylist()]
    import pyarrow as pa
    old = old.set_column(old.column_names.index("sd_ci_low"), "sd_ci_low",
                         pa.array(lows, pa.float64()))
    pq.write_table(old.replace_schema_metadata({b"cpuspec.dataset_schema": b"2"}),
                   tmp_path / "ds" / "old.parquet")
    res = run("leaderboard", tmp_path / "ds")
    assert res.exit_code == 0, res.output
    assert "different contents" not in res.output
    row = next(ln for ln in res.output.splitlines() if "1.42 [1.31, 1.55]" in ln)
    assert " 2 " in row and " 4 " not in row, row        # B's 2 faster configurations, once
