"""The open results dataset: export, publish (opt-in) and the leaderboard (docs/dataset.md)."""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import click

from cpuspec.cli.log import echo
from cpuspec.analysis.dataset import COLUMNS, DATASET_SCHEMA, MIGRATIONS, dataset_rows
from cpuspec.cli.loading import DAMAGE, load_results
from cpuspec.results.parquet import (DatasetError, existing_name, publish as publish_rows,
                                     read_source, to_parquet_bytes, unique_rows)
from cpuspec.results.schema import load_json
from cpuspec.results.store import OutputError, run_id, saved_runs

# the dataset shipped in the package: bench/results of the machines this project measured
SHIPPED = Path(__file__).resolve().parents[1] / "data" / "dataset"


def _rows(runs: tuple[str, ...]) -> list[dict]:
    if not runs:
        raise click.UsageError("give one or more results files or saved-run ids")
    rows = []
    for ref in runs:
        doc, path = load_results(ref, bench_only=False)
        try:   # what validation does not check: a field of the wrong type, said per file
            got = dataset_rows(doc)
            to_parquet_bytes(got, COLUMNS, DATASET_SCHEMA)
        except DatasetError as exc:
            raise click.ClickException(str(exc))
        except DAMAGE as exc:
            raise click.ClickException(
                f"{path}: a damaged results file that cpuspec cannot export "
                f"({type(exc).__name__}: {str(exc)[:200]})") from None
        if not got:
            raise click.ClickException(f"{path}: a {doc.get('kind')} file has no dataset "
                                       "rows (bench, what-if and heads runs have)")
        rows += got
    return unique_rows(rows)   # a run given twice is one set of rows


@click.command()
@click.argument("runs", nargs=-1)
@click.option("--out", "out_dir", required=True, help="A folder (created if missing).")
def export(runs, out_dir):
    """Write runs as dataset rows (Parquet, one file per call, named by its content).

    One row per (run, task, configuration): the machine, the models, the settings and the
    results; no hostname, user name, path or prompt text (docs/dataset.md).

    \b
    Examples:
      cpuspec export bench/results/epyc-family25-model17/*.json* --out dataset/
    """
    _publish(_rows(runs), _destination(out_dir, "--out"))


@click.command()
@click.argument("runs", nargs=-1)
@click.option("--to", "dest", required=True, metavar="DEST",
              help="A folder or an fsspec URL: hf://datasets/OWNER/NAME, s3://...")
@click.option("--dry-run", is_flag=True, help="Print exactly the rows that would leave the "
              "machine, and send nothing.")
def publish(runs, dest, dry_run):
    """Publish runs to a shared dataset (opt-in): one new file, nobody's rows rewritten.

    hf:// goes through huggingface-hub with its token from the usual place (`huggingface-cli
    login` or $HF_TOKEN); s3:// needs s3fs. The same runs published twice are one file.

    \b
    Examples:
      cpuspec publish 20261204T0610 --to hf://datasets/me/cpuspec-runs --dry-run
      cpuspec publish run.json --to ~/shared/cpuspec-dataset
    """
    dest = _destination(dest, "--to")
    rows = _rows(runs)
    if dry_run:
        try:
            there = existing_name(rows, COLUMNS, DATASET_SCHEMA, dest)
        except DatasetError as exc:
            raise click.ClickException(str(exc))
        for r in rows:
            echo(json.dumps({k: v for k, v in r.items() if v is not None}))
        echo(f"(dry run: these {len(rows)} rows are already at {there}: nothing would be "
                   "sent)" if there else
                   f"(dry run: {len(rows)} rows would go to {dest}; nothing was sent)", err=True)
        return
    _publish(rows, dest)


def _destination(dest: str, option: str) -> str:
    """A destination the user named: not empty (that would be the current folder, never
    asked for), not memory:// (rows written there vanish when the command ends)."""
    if not dest.strip():
        raise click.UsageError(f"{option} is empty: name a folder or a URL")
    if dest.strip().lower().startswith("memory://"):
        raise click.UsageError(f"{option} {dest}: memory:// vanishes when cpuspec exits; name "
                               "a folder or a remote URL")
    return dest


def _publish(rows: list[dict], dest: str) -> None:
    try:
        where, new = publish_rows(rows, COLUMNS, DATASET_SCHEMA, dest)
    except DatasetError as exc:
        raise click.ClickException(str(exc))
    echo(f"{where}: {len(rows)} rows" + ("" if new else " (already there: unchanged)"))


def shipped_source() -> str:
    return str(SHIPPED)


def _latest_mine() -> list[dict]:
    """The user's newest saved bench run, as rows (none where there is none or it is damaged)."""
    try:
        paths = [p for p in saved_runs() if run_id(p).endswith("-bench")]
    except OutputError:
        return []
    for path in reversed(paths):
        try:
            return dataset_rows(load_json(path))
        except Exception:   # a damaged saved run: the next older one
            continue
    return []


@click.command()
@click.argument("source", required=False)
@click.option("--where", help="An SQL condition on the rows before they are grouped, e.g. "
              "\"cpu_vendor = 'Intel'\".")
@click.option("--sql", help="Any DuckDB query over the rows (the table is `rows`).")
@click.option("--format", "fmt", type=click.Choice(["text", "csv", "json"]), default="text",
              show_default=True, help="For --sql: the whole result as CSV or JSON.")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path),
              help="A scatter: cores or bandwidth against the best SD ×raw, written as "
              "PATH's stem .png and .svg.")
@click.option("--force", is_flag=True, help="With --plot: replace figures already there.")
def leaderboard(source, where, sql, fmt, plot_path, force):
    """Machines side by side from everyone's runs: where SD pays, and by how much.

    SOURCE is a folder or URL of dataset files (default: the dataset shipped with cpuspec,
    from the machines this project measured). Your latest saved run is marked.

    \b
    Examples:
      cpuspec leaderboard
      cpuspec leaderboard hf://datasets/OWNER/cpuspec-runs --where "isa LIKE '%AVX512%'"
      cpuspec leaderboard --sql "SELECT cpu_name, task, sd_speedup FROM rows LIMIT 5"
    """
    from cpuspec.analysis.leaderboard import NEEDED, QueryTooLarge, board, query, screen_rows
    from cpuspec.report.leaderboard import render_board, render_query
    if sql and (where or plot_path):
        raise click.UsageError("--sql is the whole query: put the condition in it, and plot "
                               "the leaderboard without --sql")
    if fmt != "text" and not sql:
        raise click.UsageError("--format csv|json is for --sql's result")
    if plot_path:
        _check_plot_path(plot_path, force)
    src = source or shipped_source()
    mine = _latest_mine()
    try:
        # a query or a condition may name any column; the board alone reads only its own
        loaded = read_source(src, COLUMNS, DATASET_SCHEMA, MIGRATIONS,
                             wanted=None if sql or where else NEEDED)
        table, passed_over = screen_rows(_with_mine(loaded.table, mine))
        if sql:
            cols, rows = query(table, sql)
            echo(_as(fmt, cols, rows) if fmt != "text" else render_query(cols, rows))
            return
        machines = board(table, where)
    except DatasetError as exc:
        raise click.ClickException(str(exc))
    except QueryTooLarge as exc:
        raise click.UsageError(str(exc))
    except KeyboardInterrupt:
        # DuckDB's own threads may still be unwinding: leave without finalizing the
        # interpreter around them (nothing was being written)
        echo("interrupted: the query was stopped", err=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    except Exception as exc:   # DuckDB's errors: a bad --where/--sql is the user's to fix
        if type(exc).__module__.startswith("duckdb") or "duckdb" in type(exc).__module__:
            raise click.UsageError(f"the query failed: {str(exc).splitlines()[0]}")
        raise
    echo(render_board(machines, source or "the shipped dataset", table.num_rows,
                            loaded.skipped, mine[0]["machine_fingerprint"] if mine else None,
                            passed_over))
    if plot_path:
        _plot(machines, plot_path)


def _with_mine(table, mine: list[dict]):
    if not mine:
        return table
    import pyarrow as pa
    extra = pa.Table.from_pylist([{n: r.get(n) for n in table.column_names} for r in mine],
                                 schema=table.schema)
    return pa.concat_tables([table, extra])


def _cell(v):
    """A query result's value for CSV or JSON: text cleaned of control characters (a remote
    row's ESC/OSC/CR never reaches the terminal), NaN and ±inf as null (valid JSON)."""
    from cpuspec.report.screen import clean
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, str):
        return clean(v)
    if isinstance(v, (int, float, bool)) or v is None:
        return v
    return clean(str(v))


def _as(fmt: str, cols: list[str], rows: list[tuple]) -> str:
    from cpuspec.report.screen import clean
    cols = [clean(c) for c in cols]
    rows = [[_cell(v) for v in r] for r in rows]
    if fmt == "json":
        return json.dumps([dict(zip(cols, r)) for r in rows], indent=1, allow_nan=False)
    from cpuspec.report.tables import csv_text
    return csv_text(cols, rows).rstrip("\n")


def _plot_files(path: Path) -> list[Path]:
    stem = path.with_suffix("") if path.suffix.lower() in (".png", ".svg") else path
    return [stem.with_name(f"{stem.name}.{ext}") for ext in ("png", "svg")]


def _check_plot_path(path: Path, force: bool) -> None:
    """Before any work: the folder exists and is writable, and no figure is replaced unless
    --force says so."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise click.UsageError(f"--plot: {folder} is not a folder (create it first)")
    if not os.access(folder, os.W_OK):
        raise click.UsageError(f"--plot: {folder} is not writable")
    files = _plot_files(path)
    read_only = [str(f) for f in files if f.exists() and not f.stat().st_mode & 0o222]
    if read_only:
        raise click.UsageError(f"--plot: {', '.join(read_only)} is read-only: not replaced")
    there = [str(f) for f in files if f.exists()]
    if there and not force:
        raise click.UsageError(f"--plot: {', '.join(there)} already there (--force replaces)")


def _plot(machines: list[dict], path: Path) -> None:
    from cpuspec.report.plots import PLOT_HINT, PlotError, leaderboard_figure
    try:
        leaderboard_figure(machines, _plot_files(path)[0])
    except PlotError as exc:
        raise click.ClickException(str(exc))
    except ImportError:
        raise click.ClickException(PLOT_HINT)
    except OSError as exc:
        raise click.ClickException(f"--plot: cannot write {path}: {exc.strerror or exc}")
    echo("\n".join(str(f) for f in _plot_files(path)))
