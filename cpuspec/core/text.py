"""Text that reaches a terminal or a rendered format: what a program, a server or someone
else's file said, cleaned by the one pair of functions here so it can neither repaint the
screen, write the clipboard (OSC 52), reorder a line (bidirectional overrides) nor forge one.

- `printable(text)`: one field (a task, a CPU, a file name, a cell): every control
  character, newlines and tabs included, shown as '?'.
- `screen_text(text)`: a whole message of several lines: the same, keeping newlines and tabs.

cpuspec writes no control sequences of its own to stdout or stderr (the progress bar is tqdm's
and writes to the stream itself), so everything that is echoed goes through `screen_text`
(cli.log.echo), every table cell through `printable` (report.tables.table), and every click
error message too (cli.help.CleanGroup)."""
from __future__ import annotations

import re

# C0 and C1 controls and DEL; the bidirectional marks, embeddings, overrides and isolates;
# the line and paragraph separators (a line break to some terminals and editors)
_FORMAT = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
_CONTROL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_FORMAT}]")
_CONTROL_BUT_LINES = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_FORMAT}]")


def printable(text: object) -> str:
    """One field, on one line: every control character as '?'."""
    return _CONTROL.sub("?", str(text))


def screen_text(text: object) -> str:
    """A message of lines: every control character but newline and tab as '?'."""
    return _CONTROL_BUT_LINES.sub("?", str(text))


def markdown_cell(text: object) -> str:
    """A GitHub-markdown table cell: printable, with its '|' escaped so it stays one cell."""
    return printable(text).replace("|", "\\|")
