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

from cpuspec.core.text import markdown_cell, printable as clean  # noqa: F401  (controls as '?')

WIDTH = 100
MAX_LINES = 40


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


def grid(rows: Sequence[Sequence[object]], headers: Sequence[object] = (),
         tablefmt: str = "simple", **kwargs) -> str:
    """tabulate's table with every text cell cleaned (a markdown cell's '|' escaped too): the
    one way a report renders a table, whatever a results file calls its tasks or models."""
    from tabulate import tabulate
    one = markdown_cell if tablefmt in ("github", "pipe") else clean

    def cells(row):
        return [one(v) if isinstance(v, str) else v for v in row]
    return tabulate([cells(r) for r in rows], headers=cells(headers), tablefmt=tablefmt,
                    **kwargs)


def command(argv: Sequence[str] | str, head: str = "", indent: str = "  ") -> list[str]:
    """A shell command wrapped to the screen with ` \\` continuations, model paths by file
    name (the first screen names files; `--details` prints the full paths)."""
    if isinstance(argv, str):
        argv = shlex.split(argv)
    argv = [Path(a).name if a.endswith(".gguf") and "/" in a else a for a in argv]
    # broken between arguments only: a break inside one (a long name, a quoted value) would
    # change the command pasted; an argument longer than the line runs past it
    width, lines = WIDTH - len(indent) - 2, [""]
    for arg in (shlex.quote(a) for a in argv):
        if lines[-1] and len(lines[-1]) + 1 + len(arg) > width:
            lines.append(arg)
        else:
            lines[-1] = f"{lines[-1]} {arg}" if lines[-1] else arg
    out = [f"{indent}{line} \\" for line in lines[:-1]] + [f"{indent}{lines[-1]}"]
    return ([head] if head else []) + out


def fits(text: str) -> bool:
    lines = text.rstrip("\n").splitlines()
    return len(lines) <= MAX_LINES and all(len(line) <= WIDTH for line in lines)


def more(source: str | None, what: str, verb: str = "report") -> list[str]:
    """The line that points at the rest: `cpuspec report RUN --details (what)`, the run's
    name on a line of its own where it is long (None: a run not saved)."""
    if source is None:
        return wrap("More (RUN: a saved run's file or id; this one was not saved, --no-save):") \
            + wrap(f"  cpuspec {verb} RUN --details ({what})", "    ")
    head = f"More (RUN = {clean(source)}):"
    lines = [head] if len(head) <= WIDTH else \
        ["More:", *wrap(f"  RUN = {clean(source)}", "    ")]
    return lines + wrap(f"  cpuspec {verb} RUN --details ({what})", "    ")


def short_names(names: Sequence[str]) -> tuple[list[str], str]:
    """Model names without the family prefix they all share ("qwen2.5-coder-1.5b-q8_0 +
    qwen2.5-coder-0.5b-q4_0" → "1.5b-q8_0 + 0.5b-q4_0"), and that prefix ("" if none)."""
    parts = [p for n in names for p in re.split(r" \+ ", str(n)) if "-" in p]
    prefix = parts[0] if parts else ""
    for p in parts[1:]:
        while prefix and not p.startswith(prefix):
            prefix = prefix[:-1]
    prefix = prefix[:prefix.rfind("-") + 1] if "-" in prefix else ""
    if not prefix:
        return [clean(n) for n in names], ""
    return [clean(" + ".join(p.removeprefix(prefix) for p in re.split(r" \+ ", str(n))))
            for n in names], prefix


def verdict_of(ci: Sequence[float] | None, rng: Sequence[float] | None) -> str:
    """faster / slower / no difference from an interval; faster* / slower* / mixed* from a
    range of fewer prompts (a lead, not a verdict); "-" from neither."""
    if ci:
        return "faster" if ci[0] > 1 else "slower" if ci[1] < 1 else "no difference"
    if rng:
        return "faster*" if rng[0] > 1 else "slower*" if rng[1] < 1 else "mixed*"
    return "-"


def speedup(x: float | None, ci: Sequence[float] | None, rng: Sequence[float] | None) -> str:
    """A speedup with its interval [l, h] or its range (l–h), short enough for one screen."""
    if x is None or x != x:
        return "-"
    if ci:
        return f"{x:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"
    if rng:
        return f"{x:.2f} ({rng[0]:.2f}–{rng[1]:.2f})"
    return f"{x:.2f}"
