"""Text that reaches a terminal: what a program, a server or a user's file said, with its
control characters (ESC, newlines, NUL) shown as '?', so a message can neither repaint the
screen nor break a line."""
from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: object) -> str:
    return _CONTROL.sub("?", str(text))
