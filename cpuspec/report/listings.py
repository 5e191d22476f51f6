"""Listings: the registered models and pairs (`cpuspec models list`), the saved runs
(`cpuspec runs`), and one row per generation (`cpuspec report --per-prompt`)."""
from __future__ import annotations

from cpuspec.report.tables import PER_PROMPT_HEADERS


def render_models(rows: list[dict], pairs: list[dict]) -> str:
    from tabulate import tabulate
    return tabulate([[r["name"], r["repo"] + "/" + r["file"],
                      f"{r['size_bytes'] / 1e6:.0f} MB" if r["size_bytes"] else "?",
                      "pinned" if r["sha256"] else "unpinned",
                      "yes" if r["mirror"] else "no",
                      "yes" if r["cached"] else "derived" if r["derived"] else "no"]
                     for r in rows],
                    headers=["model", "hub file", "size", "sha256", "PyPI mirror",
                             "cached"]) + "\n\n" + \
        tabulate([[p["name"] + (" (default)" if p["default"] else ""), p["target"],
                   p["draft"], p["note"]] for p in pairs],
                 headers=["pair", "target", "draft", "note"])


def render_runs(rows: list[dict]) -> str:
    from tabulate import tabulate
    status = any(not r.get("complete", True) for r in rows)  # the column only when it says
    return tabulate([[r["id"], r.get("kind"), r.get("date", ""), r.get("machine", ""),
                      r.get("threads") or "", r.get("pair") or "", r.get("tasks", ""),
                      r.get("speedups") or r.get("problem", "")]
                     + ([r.get("status", "")] if status else [])
                     for r in rows],
                    headers=["id", "kind", "date", "machine", "threads", "pair", "tasks",
                             "SD ×raw e2e"] + (["status"] if status else []))


def render_per_prompt(rows: list[list], markdown: bool = False) -> str:
    from tabulate import tabulate
    return tabulate(rows, headers=PER_PROMPT_HEADERS, disable_numparse=True,
                    tablefmt="github" if markdown else "simple")
