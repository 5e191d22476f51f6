"""--help in named sections, for commands with many options (bench); the top group, whose
error messages (which quote the user's arguments) reach the terminal cleaned."""
from __future__ import annotations

from contextlib import contextmanager

import click

from cpuspec.core.text import screen_text


class BadInput(click.ClickException):
    """A file or value the user gave that cpuspec cannot use: one line, exit 2 (as a usage
    error), without click's usage banner."""
    exit_code = 2


@contextmanager
def _cleaned_errors():
    try:
        yield
    except click.ClickException as e:
        e.message = screen_text(e.message)
        raise


class CleanGroup(click.Group):
    """A group whose usage and parameter errors, its own and every subcommand's (click quotes
    the user's arguments in them), are shown with their control characters as '?'."""

    def make_context(self, *args, **kwargs):
        with _cleaned_errors():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with _cleaned_errors():
            return super().invoke(ctx)


class SectionedCommand(click.Command):
    """--help with the options in named sections (sections: title -> option names, in order);
    options not named go under "Other options"."""

    def __init__(self, *args, sections: dict[str, list[str]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.sections = sections or {}

    def format_options(self, ctx, formatter):
        records = {p.name: p.get_help_record(ctx) for p in self.get_params(ctx)}
        shown: set[str] = set()
        for title, names in self.sections.items():
            rows = [records[n] for n in names if records.get(n)]
            shown.update(names)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [r for n, r in records.items() if r and n not in shown]
        if rest:
            with formatter.section("Other options"):
                formatter.write_dl(rest)
