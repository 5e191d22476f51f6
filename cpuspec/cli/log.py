"""Logging: one line per event on stderr, plain or as a progress display."""
from __future__ import annotations

import click

from cpuspec.cli.progress import PlainLog, make_log

_log = PlainLog()


def configure_log(verbose: bool = False) -> None:
    """A progress bar on a terminal, plain lines otherwise (progress.make_log); the bar is
    closed when the command ends."""
    global _log
    _log = make_log(verbose)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(_log.close)


def log(msg: str) -> None:
    """What a command says while it runs (stderr)."""
    _log(msg)


def close_log() -> None:
    """End a progress display before results are printed."""
    _log.close()
