"""What a long run says while it runs, on stderr: a progress bar with the time left when a
person is watching (stderr is a terminal), one plain line per message when a program is (CI, a
log file) or with `cpuspec --verbose`.

The measuring code only logs lines; a line that starts with "[done/total]" (bench's and paths'
per-prompt lines, tune's steps) moves the bar, whose total is the line's; the bar starts again
when a new count starts (a sweep's next point, tune's next candidate). Every other line is
printed above the bar. The bar is tqdm's (installed with huggingface-hub)."""
from __future__ import annotations

import re
import sys
from typing import TextIO

import click

from cpuspec.core.text import screen_text

COUNTER = re.compile(r"^\[(\d+)/(\d+)\]\s*(.*)$")
# Counter lines that carry news besides the count are also printed in full.
NEWS = re.compile(r"disturb|differ|busy|warning|again", re.I)


class PlainLog:
    """One line per message (not a terminal, or --verbose)."""

    def __call__(self, msg: str) -> None:
        click.echo(screen_text(msg), err=True)

    def close(self) -> None:
        pass


class BarLog:
    """A tqdm bar driven by "[done/total]" lines; other lines are written above it."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.bar = None

    def __call__(self, msg: str) -> None:
        m = COUNTER.match(msg)
        if not m:
            self._write(msg)
            return
        if NEWS.search(msg):   # a disturbed, differing or busy prompt: say it above the bar
            self._write(msg)
        done, total, rest = int(m.group(1)), int(m.group(2)), m.group(3)
        if self.bar is None or self.bar.total != total or done < self.bar.n:
            self.close()
            from tqdm import tqdm
            cols, rows = _size(self.stream)
            self.bar = tqdm(total=total, file=self.stream, ncols=cols, nrows=rows,
                            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} "
                                       "[{elapsed}<{remaining}] {postfix}")
        self.bar.set_postfix_str(screen_text(rest.split(":", 1)[0][:40]), refresh=False)
        self.bar.update(done - self.bar.n)
        if done >= total:   # finished: nothing may print under a live bar
            self.close()

    def _write(self, msg: str) -> None:
        msg = screen_text(msg)
        if self.bar is None:
            click.echo(msg, file=self.stream)
        else:
            self.bar.write(msg, file=self.stream)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _size(stream) -> tuple[int, int]:
    """The terminal's columns and rows; a terminal that reports none (a fresh pty, where tqdm
    would hide the bar): 100 × 24."""
    import os
    try:
        size = os.get_terminal_size(stream.fileno())
        cols, rows = size.columns, size.lines
    except (AttributeError, OSError, ValueError):
        cols, rows = 0, 0
    return min(cols or 100, 160), rows or 24


def make_log(verbose: bool = False, stream: TextIO | None = None):
    """The log for this run: a bar on a terminal, plain lines otherwise or with verbose."""
    stream = stream or sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return BarLog(stream) if tty and not verbose else PlainLog()
