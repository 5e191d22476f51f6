"""Issue 52: the open results dataset. Recorded runs go export → publish → leaderboard through
a folder, through fsspec's memory:// filesystem, and to hf:// through huggingface-hub's API
with its network calls replaced (the hub is unreachable here: this was never run against the
real hub). A dry run shows no hostname, user name or path. A foreign Parquet file, a newer
schema, a damaged file among good ones and a source with no files get a clear word, and the
good rows are still shown. The shipped dataset equals a fresh export of bench/results."""
import getpass
import json
import os
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

from cpuspec.analysis.dataset import COLUMNS, DATASET_SCHEMA, dataset_rows  # noqa: E402
from cpuspec.cli.main import main  # noqa: E402
from cpuspec.results.parquet import read_source  # noqa: E402
from cpuspec.results.schema import load_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
B = ROOT / "tests/recorded/epyc-family25-model17/bench_q8_0_k7.json.gz"     # machine B
A = ROOT / "tests/recorded/avx2-build/bench_2threads.json.gz"              # an AVX2 build
C = ROOT / "bench/results/epyc-family25-model1/pmin0_adaptive_q8_0_k7.json.gz"   # machine C″


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_export_then_leaderboard_from_a_folder_groups_rows_by_machine(tmp_path):
    out = tmp_path / "ds"
    res = run("export", B, A, C, "--out", out)
    assert res.exit_code == 0, res.output
    assert len(list(out.glob("*.parquet"))) == 1
    again = run("export", B, A, C, "--out", out)          # the same runs: the same file
    assert "unchanged" in again.output and len(list(out.glob("*.parquet"))) == 1
    board = run("leaderboard", out)
    assert board.exit_code == 0, board.output
    lines = board.output.splitlines()
    assert "3 machines" in lines[0] or "2 machines" in lines[0], board.output
    assert any("json: Q8_0+Q4_0 k7" in x and "1.42 [1.31, 1.55]" in x for x in lines), \
        board.output     # machine B's best: json, measured 1.42 [1.31, 1.55] in its report
    assert all(len(x) <= 100 for x in lines)


def test_publish_through_an_fsspec_url_and_read_back(tmp_path):
    url = f"file://{tmp_path}/ds"      # memory:// is refused: it vanishes when cpuspec exits
    res = run("publish", B, "--to", url)
    assert res.exit_code == 0, res.output
    board = run("leaderboard", url)
    assert board.exit_code == 0 and "AMD EPYC (25/17)" in board.output, board.output


def test_publish_to_hf_uses_huggingface_hubs_api(monkeypatch):
    """huggingface-hub's HfApi with its network calls replaced: the file is uploaded once
    under its content address, into the dataset repo named, and not again."""
    import huggingface_hub
    sent = {}
    monkeypatch.setattr(huggingface_hub.HfApi, "file_exists",
                        lambda self, repo_id, path, repo_type=None: path in sent)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_file",
                        lambda self, **kw: sent.setdefault(kw["path_in_repo"], kw))
    res = run("publish", B, "--to", "hf://datasets/someone/cpuspec-runs")
    assert res.exit_code == 0, res.output
    (path, kw), = sent.items()
    assert kw["repo_id"] == "someone/cpuspec-runs" and kw["repo_type"] == "dataset"
    assert path.startswith("cpuspec-") and path.endswith(".parquet")
    assert kw["path_or_fileobj"][:4] == b"PAR1"
    assert "unchanged" in run("publish", B, "--to", "hf://datasets/someone/cpuspec-runs").output


def test_a_dry_run_shows_no_hostname_user_or_path():
    res = run("publish", B, A, "--to", "hf://datasets/x/y", "--dry-run")
    assert res.exit_code == 0
    rows = [json.loads(x) for x in res.stdout.splitlines()]
    assert len(rows) >= 8 and all(r["dataset_schema"] == DATASET_SCHEMA for r in rows)
    text = res.stdout
    # the runs' own paths (no run records a hostname: only its saved file's name has one),
    # the folders of their model files and their command lines, then this machine's names
    recorded = set()
    for f in (B, A):
        doc = load_json(f)
        for m in doc["models"].values():
            if m.get("path"):
                recorded |= {m["path"], str(Path(m["path"]).parent)}
        recorded |= {a for a in doc["settings"].get("argv") or [] if "/" in a}
    assert recorded
    for secret in recorded | {socket.gethostname(), getpass.getuser(), str(Path.home()),
                              os.getcwd(), "/root/", "/home/", ".gguf"}:
        assert secret not in text, secret
    # no prompt text: each run's first prompt is absent, its digest kept (built-in suites)
    for f in (B, A):
        first = load_json(f)["prompts"][0]["text"]
        assert first[:40] not in text
    assert all(len(r["prompts_sha256"]) == 64 for r in rows)


def test_foreign_newer_and_damaged_files_are_passed_over_and_the_good_rows_shown(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    out = tmp_path / "ds"
    assert run("export", B, "--out", out).exit_code == 0
    pq.write_table(pa.table({"x": [1, 2]}), out / "foreign.parquet")
    good = next(out.glob("cpuspec-*.parquet"))
    newer = pq.read_table(good)
    newer = newer.replace_schema_metadata({b"cpuspec.dataset_schema": b"99"})
    pq.write_table(newer, out / "newer.parquet")
    (out / "damaged.parquet").write_bytes(good.read_bytes()[:500])
    res = run("leaderboard", out)
    assert res.exit_code == 0, res.output
    assert "foreign.parquet: not a cpuspec dataset file" in res.output
    assert "newer.parquet: dataset schema 99, newer than this cpuspec" in res.output
    assert "damaged.parquet: unreadable" in res.output
    assert "1.42 [1.31, 1.55]" in res.output           # the good file's rows


def test_a_source_without_files_and_a_bad_query_get_a_clear_message(tmp_path):
    res = run("leaderboard", tmp_path / "nothing-here")
    assert res.exit_code == 1 and "no such file or folder" in res.output, res.output
    out = tmp_path / "ds"
    run("export", B, "--out", out)
    res = run("leaderboard", out, "--where", "no_such_column = 1")
    assert res.exit_code == 2 and "the query failed" in res.output, res.output
    res = run("leaderboard", out, "--where", "cpu_vendor = 'AMD' AND memory_gib > 1")
    assert res.exit_code == 0 and "1.42 [1.31, 1.55]" in res.output, res.output
    res = run("leaderboard", out, "--sql", "SELECT task, sd_speedup FROM rows ORDER BY 2 DESC",
              "--format", "csv")
    assert res.exit_code == 0 and res.output.startswith("task,sd_speedup\njson,1.4")


def test_export_refuses_a_kind_without_rows(tmp_path):
    paths = ROOT / "tests/recorded/epyc-family25-model17/paths_q8_0_k7.json.gz"
    res = run("export", paths, "--out", tmp_path / "ds")
    assert res.exit_code == 1 and "has no dataset rows" in res.output


def test_the_shipped_dataset_equals_a_fresh_export_of_the_recorded_runs(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    from build_dataset import recorded_rows

    from cpuspec.cli.dataset import shipped_source
    shipped = read_source(shipped_source(), COLUMNS, DATASET_SCHEMA).table.to_pylist()
    fresh = recorded_rows()
    key = {r["row_id"]: r for r in fresh}
    assert len(shipped) == len(fresh) > 300
    for row in shipped:
        want = key[row["row_id"]]
        for name, value in row.items():
            if isinstance(value, float):
                assert value == pytest.approx(want[name], rel=1e-9, nan_ok=True), name
            else:
                assert value == want[name], name


def test_every_row_of_a_real_run_carries_the_machine_and_the_settings():
    doc = load_json(B)
    rows = dataset_rows(doc)
    assert {r["task"] for r in rows} == {"json", "code", "story", "overall"}
    r = next(r for r in rows if r["task"] == "json")
    assert (r["cpu_family"], r["cpu_model"], r["k"], r["threads"]) == (25, 17, 7, 2)
    assert r["target_quant"] == "Q8_0" and r["draft_quant"] == "Q4_0"
    assert r["target_label"] == "derived" and r["verdict"] == "faster"


def test_an_older_schema_is_read_through_its_migration_never_dropped_silently(tmp_path,
                                                                              monkeypatch):
    """A file of schema 0 (here: today's rows with sd_speedup named sd_x_raw, marked 0): with
    no migration it is passed over with the reason; with one, its rows are read."""
    import pyarrow.parquet as pq

    from cpuspec.analysis import dataset
    out = tmp_path / "ds"
    run("export", B, "--out", out)
    good = next(out.glob("*.parquet"))
    old = pq.read_table(good).rename_columns(
        ["sd_x_raw" if n == "sd_speedup" else n for n in pq.read_table(good).column_names])
    good.unlink()
    pq.write_table(old.replace_schema_metadata({b"cpuspec.dataset_schema": b"0"}),
                   out / "old.parquet")
    res = run("leaderboard", out)
    assert f"old.parquet: dataset schema 0 has no migration to {DATASET_SCHEMA}" in res.output, res.output
    monkeypatch.setitem(dataset.MIGRATIONS, 0, lambda t: t.rename_columns(
        ["sd_speedup" if n == "sd_x_raw" else n for n in t.column_names]))
    res = run("leaderboard", out)
    assert "1.42 [1.31, 1.55]" in res.output and "passed over" not in res.output, res.output


def test_the_leaderboard_draws_its_scatter(tmp_path):
    pytest.importorskip("matplotlib")
    res = run("leaderboard", "--plot", tmp_path / "board.png")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "board.png").stat().st_size > 0
    res = run("leaderboard", "--sql", "SELECT 1", "--plot", tmp_path / "x.png")
    assert res.exit_code == 2 and "--sql is the whole query" in res.output


def test_a_source_whose_filesystem_is_not_installed_gets_a_clear_message():
    """s3:// without s3fs (not installed here): said, exit 1, no traceback."""
    import importlib.util
    if importlib.util.find_spec("s3fs") is not None:
        pytest.skip("s3fs is installed: the URL would be tried for real")
    res = run("leaderboard", "s3://some-bucket/cpuspec-runs")
    assert res.exit_code == 1 and "cannot open s3://some-bucket/cpuspec-runs" in res.output
    assert "Traceback" not in res.output
    res = run("publish", B, "--to", "s3://some-bucket/cpuspec-runs")
    assert res.exit_code == 1 and "cannot open s3://" in res.output
