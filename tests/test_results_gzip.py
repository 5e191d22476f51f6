"""Results files may be gzip-compressed JSON (bench/results keeps its large files as
NAME.json.gz): every reader takes them, told by the first two bytes whatever the name; a
truncated or damaged one is refused in one line; a saved run NAME.json.gz is listed and found
by its id without .json.gz; a results file written to a .gz name is compressed, the same bytes
for the same results."""
import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main
from cpuspec.results.schema import read_json
from cpuspec.results.store import results_files, run_id, write_json

ROOT = Path(__file__).resolve().parent.parent
PLAIN = ROOT / "bench/results/draft_own_cores.json"     # a small bench file, kept plain


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def compressed() -> bytes:
    return gzip.compress(PLAIN.read_bytes(), 9, mtime=0)


def csv_of(ref) -> str:
    """`cpuspec report REF --format csv`: the figures, without the path the text names."""
    res = run("report", ref, "--format", "csv")
    assert res.exit_code == 0, res.output
    return res.output


def test_a_gzip_file_reads_as_its_json_whatever_its_name(tmp_path):
    (tmp_path / "run.json.gz").write_bytes(compressed())
    (tmp_path / "named-plain.json").write_bytes(compressed())
    (tmp_path / "plain-named.json.gz").write_bytes(PLAIN.read_bytes())
    want = read_json(PLAIN)
    for name in ("run.json.gz", "named-plain.json", "plain-named.json.gz"):
        assert read_json(tmp_path / name) == want, name
    assert csv_of(tmp_path / "run.json.gz") == csv_of(PLAIN)


@pytest.mark.parametrize("damage", [lambda b: b[:len(b) // 2], lambda b: b[:2],
                                    lambda b: b[:-8] + bytes(8), lambda b: b[:10] + bytes(40)],
                         ids=["truncated", "magic only", "bad CRC", "bad data"])
@pytest.mark.parametrize("command", ["report", "advise", "compare", "runs"])
def test_a_damaged_gzip_file_is_refused_in_one_line(tmp_path, cpuspec_home, command, damage):
    data = damage(compressed())
    if command == "runs":
        (cpuspec_home / "results").mkdir(parents=True)
        (cpuspec_home / "results" / "20261204T000000Z-host-x-bench.json.gz").write_bytes(data)
        res = run("runs", "--json")
        assert res.exit_code == 0, res.output
        assert json.loads(res.output)[0]["kind"] == "unreadable"
        return
    bad = tmp_path / "run.json.gz"
    bad.write_bytes(data)
    res = run(command, *([bad, PLAIN] if command == "compare" else [bad]))
    assert res.exit_code not in (0, None), res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert f"cannot read results {bad}: " in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


def test_a_saved_gzip_run_is_listed_and_found_by_its_id(cpuspec_home):
    saved = cpuspec_home / "results"
    saved.mkdir(parents=True)
    (saved / "20261203T000000Z-host-x-bench.json").write_bytes(PLAIN.read_bytes())
    (saved / "20261204T000000Z-host-x-bench.json.gz").write_bytes(compressed())
    rows = json.loads(run("runs", "--json").output)
    assert [(r["id"], r["kind"]) for r in rows] == [("20261203T000000Z-host-x-bench", "bench"),
                                                   ("20261204T000000Z-host-x-bench", "bench")]
    assert csv_of("20261204T000000Z") == csv_of(PLAIN)


def test_results_files_lists_both_in_name_order_and_ids_drop_the_suffix(tmp_path):
    for name in ("b.json", "a.json.gz", "c.json.gz", "notes.txt", "d.jsonl"):
        (tmp_path / name).write_text("{}")
    (tmp_path / "e.json").mkdir()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.json.gz").write_text("{}")
    assert [p.name for p in results_files(tmp_path)] == ["a.json.gz", "b.json", "c.json.gz"]
    assert [p.name for p in results_files(tmp_path, recursive=True)] == \
        ["a.json.gz", "b.json", "c.json.gz", "f.json.gz"]
    assert [run_id(p) for p in results_files(tmp_path)] == ["a", "b", "c"]


def test_a_results_file_written_to_a_gz_name_is_compressed_the_same_each_time(tmp_path):
    doc = read_json(PLAIN)
    write_json(doc, tmp_path / "one.json.gz")
    write_json(doc, tmp_path / "two.json.gz")
    write_json(doc, tmp_path / "plain.json")
    one = (tmp_path / "one.json.gz").read_bytes()
    assert one[:2] == b"\x1f\x8b" and one == (tmp_path / "two.json.gz").read_bytes()
    assert gzip.decompress(one) == (tmp_path / "plain.json").read_bytes()
    assert read_json(tmp_path / "one.json.gz") == doc


def test_a_run_kept_plain_and_compressed_is_listed_once(tmp_path):
    """NAME.json beside NAME.json.gz is one run: listed once (the plain file), so a folder's
    runs are not counted twice."""
    import gzip

    from cpuspec.results.store import results_files
    (tmp_path / "a.json").write_text('{"schema_version": 2}')
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(b'{"schema_version": 2}'))
    (tmp_path / "b.json.gz").write_bytes(gzip.compress(b'{"schema_version": 2}'))
    assert [p.name for p in results_files(tmp_path)] == ["a.json", "b.json.gz"]
