"""--help in named sections, for commands with many options (bench)."""
from __future__ import annotations

import click


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
