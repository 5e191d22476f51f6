"""Loading results files and saved runs for the commands that read them."""
from __future__ import annotations


import functools
from pathlib import Path

import click

from cpuspec.cli.help import BadInput
from cpuspec.results.schema import ResultsError, read_json, validate, validate_bench
from cpuspec.results.store import OutputError, resolve_run, run_id

# what a printer or the dataset's columns raise on a value of the wrong shape
DAMAGE = (KeyError, TypeError, IndexError, AttributeError, RecursionError, ZeroDivisionError,
          OverflowError, ValueError)


def reads_results(command):
    """For a command that prints results files (report, advise, compare, plot): the files
    are validated field by field (schema.validate), and a damage that validation does not
    name (a printer meeting a value of the wrong shape) still ends in a one-line message
    naming the file, never a traceback."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except DAMAGE as exc:
            given = kwargs.get("run") or ", ".join(_damaged(kwargs.get("runs") or ()))
            raise BadInput(
                f"{given}: a damaged results file that cpuspec cannot print "
                f"({type(exc).__name__}: {str(exc)[:200]})") from None
    return wrapper


def _damaged(refs) -> list[str]:
    """Of several runs that failed together, the ones whose own summary fails (all of them
    where none fails alone): the good file is not named with the damaged one."""
    from cpuspec.analysis.summary import summarize
    bad = []
    for ref in refs:
        try:
            doc, _ = load_results(ref, bench_only=False)
            if doc.get("kind") == "bench":
                summarize(doc)
        except (click.ClickException, *DAMAGE):
            bad.append(ref)
    return bad or list(refs)


def run_names(paths: list[Path]) -> list[str]:
    """Short names for runs: file names without .json or .json.gz, with the folder where two
    names are the same."""
    stems = [run_id(p) for p in paths]
    return [f"{p.parent.name}/{s}" if stems.count(s) > 1 else s for p, s in zip(paths, stems)]


def load_results(ref: str, bench_only: bool = True) -> tuple[dict, Path]:
    """A results file or a saved run's id, read and (for bench files) validated."""
    try:
        path = resolve_run(ref)
        results = read_json(path)
        if bench_only:
            validate_bench(results, str(path))
        else:
            validate(results, str(path))
    except (OutputError, ResultsError) as exc:
        raise BadInput(str(exc)) from None
    return results, path
