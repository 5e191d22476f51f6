"""One screen: the bounds every default printout keeps (at most MAX_LINES lines of at most
WIDTH columns) and the pieces that keep them: wrapped prose, a compact table, a wrapped shell
command, names cut to a width and stripped of control characters. `--details` prints the
rest."""
from __future__ import annotations

import re
import shlex
import textwrap
from pathlib import Path
from typing import Sequence

WIDTH = 100
MAX_LINES = 40
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean(text: object) -> str:
    """A name as it may be printed: control characters (ESC, newline) shown as '?'."""
    return _CONTROL.sub("?", str(text))


def cut(text: object, width: int) -> str:
    """A cell at most `width` wide: cleaned, and cut with '…' where longer."""
    s = clean(text)
    return s if len(s) <= width else s[:width - 1] + "…"


def wrap(text: str, indent: str = "", width: int = WIDTH) -> list[str]:
    return textwrap.wrap(clean(text), width, subsequent_indent=indent, break_on_hyphens=False,
                         break_long_words=True) or [""]


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns as wide as their widest cell, two spaces apart (tabulate pads more)."""
    cells = [[clean(c) for c in r] for r in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row):
        return "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
    return "\n".join([line(cells[0]), line("-" * w for w in widths), *map(line, cells[1:])])


def command(argv: Sequence[str] | str, head: str = "", indent: str = "  ") -> list[str]:
    """A shell command wrapped to the screen with ` \\` continuations, model paths by file
    name (the first screen names files; `--details` prints the full paths)."""
    if isinstance(argv, str):
        argv = shlex.split(argv)
    argv = [Path(a).name if a.endswith(".gguf") and "/" in a else a for a in argv]
    text = " ".join(shlex.quote(a) for a in argv)
    lines = textwrap.wrap(text, WIDTH - len(indent) - 2, break_on_hyphens=False,
                          break_long_words=True)
    out = [f"{indent}{line} \\" for line in lines[:-1]] + [f"{indent}{lines[-1]}"]
    return ([head] if head else []) + out


def fits(text: str) -> bool:
    lines = text.rstrip("\n").splitlines()
    return len(lines) <= MAX_LINES and all(len(line) <= WIDTH for line in lines)
