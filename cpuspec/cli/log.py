"""What a command prints: `echo` (stdout or stderr, every control character but newline and
tab shown as '?': cpuspec prints what other programs and files said) and the log, one line per
event on stderr, plain or as a progress display."""
from __future__ import annotations

import click

from cpuspec.cli.progress import PlainLog, make_log
from cpuspec.core.text import screen_text

_log = PlainLog()


def configure_log(verbose: bool = False) -> None:
    """A progress bar on a terminal, plain lines otherwise (progress.make_log); the bar is
    closed when the command ends."""
    global _log
    _log = make_log(verbose)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(_log.close)


def echo(message: object = "", err: bool = False, nl: bool = True, file=None) -> None:
    """click.echo of a cleaned message (core.text.screen_text): the one way cpuspec prints."""
    click.echo(screen_text(message), file=file, nl=nl, err=err)


def log(msg: str) -> None:
    """What a command says while it runs (stderr)."""
    _log(msg)


def close_log() -> None:
    """End a progress display before results are printed."""
    _log.close()
