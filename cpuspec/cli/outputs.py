"""Output files: checked before any work, written through a sink, kept on Ctrl-C and on errors."""
from __future__ import annotations


import contextlib
import sys
from pathlib import Path

import click

from cpuspec.cli.log import echo, log

from cpuspec.machine import interrupt
from cpuspec.results.store import (OutputError, ResultsSink, check_outputs, new_run_path, write_atomic)

def prepare_outputs(outputs: list[Path | None], inputs: list[Path | None], force: bool,
                     save: bool, kind: str, cpu_model: str):
    """Check every output before any work, create the saved run's file, and return the sink
    that writes every JSON destination (the saved run first)."""
    try:
        check_outputs(outputs, inputs, force)
        saved = [new_run_path(kind, cpu_model)] if save else []
    except OutputError as exc:
        raise click.ClickException(str(exc))
    if saved:
        log(f"saving this run as {saved[0]} (--no-save to skip)")
    json_outputs = [p for p in outputs[:1] if p is not None]
    return ResultsSink(saved + json_outputs, reserved=saved, log=log)


@contextlib.contextmanager
def guarded(sink=None):
    """Ctrl-C, SIGTERM and SIGHUP end the command within a decode (see interrupt.py) with
    what it finished: the last results written by the sink stay (marked "complete": false,
    "ended": "interrupted"), the message says where, and the exit code is the shell's for the
    signal (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP). A command that fails
    on an error keeps its results the same way, marked "ended": "failed: …". However the
    command ends, a saved run that never got any results is removed rather than left
    empty."""
    try:
        with interrupt.handled():
            yield
    except KeyboardInterrupt:
        if sink is not None:
            sink.mark_ended("interrupted")
            sink.discard_unwritten()
        echo(f"interrupted: {sink.kept() if sink is not None else 'nothing was saved'}",
                   err=True)
        sys.exit(interrupt.exit_code())
    except click.ClickException as exc:
        if sink is not None:
            sink.mark_ended(f"failed: {exc.format_message().splitlines()[0][:300]}")
        raise
    finally:
        if sink is not None:
            sink.discard_unwritten()


def write_text(sink, path: Path, text: str) -> None:
    """A side output (--csv) written at the end; a failure is reported with the sink's, by
    finish_outputs, after the summary was printed."""
    try:
        write_atomic(path, text)
        log(f"wrote {path}")
    except OSError as exc:
        sink.failed[Path(path)] = exc.strerror or str(exc)


def run_source(sink) -> str | None:
    """How the one screen names the run it printed (RUN in "cpuspec report RUN"): the saved
    run's id, else the file written, None where nothing was."""
    from cpuspec.results.store import results_dir
    written = [p for p in sink.paths if p not in sink.failed]
    return (written[0].stem if written and written[0].parent == results_dir() else
            str(written[0]) if written else None)


def finish_outputs(sink) -> None:
    """Name the files written; if one could not be (a full disk), say what it holds and
    exit 1, after the summary was printed from what is in memory."""
    for p in sink.paths:
        if p not in sink.failed:
            log(f"wrote {p}")
    problem = sink.failures()
    if problem:
        raise click.ClickException(problem)
