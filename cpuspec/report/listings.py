"""Listings: the registered models and pairs (`cpuspec models list`), the saved runs
(`cpuspec runs`), and one row per generation (`cpuspec report --per-prompt`)."""
from __future__ import annotations

from cpuspec.report import screen
from cpuspec.report.tables import PER_PROMPT_HEADERS


def render_models(rows: list[dict], pairs: list[dict]) -> str:
    """Registered models and pairs, one screen wide (names and files cut; `--json` has all)."""
    return screen.table(["model", "file", "size", "sha256", "mirror", "cached"],
                        [[screen.cut(r["name"], 26), screen.cut(r["file"], 40),
                          f"{r['size_bytes'] / 1e6:.0f} MB" if r["size_bytes"] else "?",
                          "pinned" if r["sha256"] else "-", "yes" if r["mirror"] else "no",
                          "yes" if r["cached"] else "derived" if r["derived"] else "no"]
                         for r in rows]) + "\n\n" + \
        screen.table(["pair", "target", "draft", "note"],
                     [[screen.cut(p["name"] + (" (default)" if p["default"] else ""), 28),
                       screen.cut(p["target"], 24), screen.cut(p["draft"], 24),
                       screen.cut(p["note"], 16)] for p in pairs])


def render_runs(rows: list[dict]) -> str:
    """Saved runs, newest last: ids and names cut to the screen (`--json` has them whole)."""
    status = any(not r.get("complete", True) for r in rows)  # the column only when it says
    # an id longer than 38 is cut: `report` takes any unique prefix, `runs --json` has it whole
    return screen.table(["id", "kind", "machine", "t", "tasks", "SD ×raw e2e"]
                        + (["status"] if status else []),
                        [[screen.cut(r["id"], 38), screen.cut(r.get("kind"), 10),
                          screen.cut(r.get("machine", ""), 10), r.get("threads") or "",
                          screen.cut(r.get("tasks", ""), 10),
                          screen.cut(r.get("speedups") or r.get("problem", ""), 22)]
                         + ([screen.cut(r.get("status", ""), 11)] if status else [])
                         for r in rows])


def render_per_prompt(rows: list[list], markdown: bool = False) -> str:
    from cpuspec.report.screen import grid
    return grid(rows, headers=PER_PROMPT_HEADERS, disable_numparse=True,
                    tablefmt="github" if markdown else "simple")
