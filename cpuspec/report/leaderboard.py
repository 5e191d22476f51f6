"""`cpuspec leaderboard`'s printer: one screen, a row per machine (analysis/leaderboard.py),
the user's own latest run marked, the files passed over said, and the query behind it."""
from __future__ import annotations

from cpuspec.report import screen


def _isa(isa: str | None) -> str:
    flags = (isa or "").split()
    base = "AVX512" if "AVX512" in flags else "AVX2" if "AVX2" in flags else \
        "NEON" if "NEON" in flags else (flags[0] if flags else "?")
    return base + ("+VNNI" if "AVX_VNNI" in flags else "")


def _level(r: dict) -> str:
    """The best row's interval level in per cent ("95", "98.75"); "?" where not recorded."""
    lv = r.get("level")
    return "?" if lv is None else f"{100 * lv:.2f}".rstrip("0").rstrip(".")


def render_board(rows: list[dict], source: str, n_rows: int, skipped: list[str],
                 mine: str | None = None, row_notes: list[str] = ()) -> str:
    """mine: the fingerprint of the user's latest saved run (marked "← you"); row_notes: the
    rows passed over, by reason, and the row ids published with other contents."""
    show_p7 = any(r.get("p7") is not None for r in rows)
    # one level for every best shown: in the header; several, or one not recorded: a column
    levels = {_level(r) for r in rows[:25] if r.get("sd")}
    show_level = len(levels) > 1 or "?" in levels
    show_bw = any(r.get("bw") for r in rows)
    table = [_board_row(i, r, mine, show_level, show_p7, show_bw)
             for i, r in enumerate(rows[:25], 1)]
    head = ["#", "CPU (fam/mod)", "ISA", "t", "raw", "best SD measured", "of",
            "SD ×raw [lvl %]" if show_level else f"SD ×raw [{next(iter(levels), '95')}%]",
            *(["lvl %"] if show_level else []), *(["7B p*"] if show_p7 else []),
            *(["GB/s"] if show_bw else [])]
    lines = screen.wrap(f"{len(rows)} machines, {n_rows} rows from {source}; raw: t/s of the "
                        "default pair (1.5B + 0.5B Q4_K_M) at depth 0, per machine and thread "
                        "count; best: the best SD configuration measured faster; of: how many configurations measured faster the best is the "
                        "maximum of (noisy rows: the more, the more it flatters)"
                        + ("; 7B p*: the least acceptance at which SD pays for a shape-true "
                           "7B Q4_K_M target (costs measured, acceptance assumed)"
                           if show_p7 else ""))
    lines += ["", screen.table(head, table)]
    return "\n".join(lines + _board_notes(rows, mine, skipped, row_notes))


def _board_row(i: int, r: dict, mine: str | None, show_level: bool, show_p7: bool,
               show_bw: bool) -> list:
    """One machine's row: rank (← yours), CPU, ISA, threads, raw t/s, its best SD
    configuration and how many measured faster, that one's ×raw, and the optional columns."""
    fm = f" ({r['family']}/{r['model']})" if r.get("family") is not None else ""
    cpu = screen.cut(r["cpu"] or "?", 16 - len(fm)) + fm     # the family/model whole
    best = screen.speedup(r["sd"], [r["lo"], r["hi"]] if r.get("lo") is not None
                          else None, None) if r.get("sd") else "none faster"
    level = [_level(r) if r.get("sd") else "-"] if show_level else []
    return [str(i) + ("←" if r["fp"] == mine else ""), cpu, _isa(r.get("isa")),
            r.get("threads") or "-", "-" if r.get("raw") is None else f"{r['raw']:.1f}",
            screen.cut(r.get("config") or "-", 15 if show_level else 20),
            r.get("n_faster") or "-", best, *level,
            *(["-" if r.get("p7") is None else f"{r['p7']:.2f}"] if show_p7 else []),
            *(["-" if not r.get("bw") else f"{r['bw']:.0f}"] if show_bw else [])]


def _board_notes(rows: list[dict], mine: str | None, skipped: list[str],
                 row_notes: list[str]) -> list[str]:
    """The lines under the board: unrecorded levels, machines beyond 25, which is yours, the
    files and rows passed over, and the next query."""
    lines = []
    if any(r.get("sd") and r.get("level") is None for r in rows[:25]):
        lines += screen.wrap("lvl ?: a row of a schema-2 file, which did not record its "
                             "interval's level (a fixed run's 95 % or a sequential look's "
                             "1 − α/K, 95-99.2 %)")
    if len(rows) > 25:
        lines.append(f"({len(rows) - 25} more machines: --sql or --where narrows them)")
    if mine is not None:
        lines.append("←: the machine of your latest saved run" if any(
            r["fp"] == mine for r in rows) else "your latest saved run has no rows here")
    for s in skipped[:5]:
        lines += screen.wrap(f"passed over: {s}", "  ")
    if len(skipped) > 5:
        lines.append(f"passed over: {len(skipped) - 5} more files")
    dropped = [n for n in row_notes if " with " in n]
    if dropped:
        lines += screen.wrap("rows passed over: " + "; ".join(dropped), "  ")
    lines += [w for n in row_notes if n not in dropped for w in screen.wrap(f"note: {n}", "  ")]
    return lines + screen.wrap("More: cpuspec leaderboard --sql \"SELECT cpu_name, task, "
                               "sd_speedup FROM rows WHERE verdict = 'faster' ORDER BY "
                               "sd_speedup DESC\"")


def render_query(cols: list[str], rows: list[tuple]) -> str:
    """Any query's result, cut to the screen (CSV or JSON give it whole: --format)."""
    def cell(v):
        return "-" if v is None else f"{v:.3g}" if isinstance(v, float) else screen.clean(str(v))
    width = max(8, (screen.WIDTH - 2 * len(cols)) // max(len(cols), 1))
    body = [[screen.cut(cell(v), width) for v in r] for r in rows[:screen.MAX_LINES - 4]]
    out = [screen.table([screen.cut(c, width) for c in cols], body)]
    if len(rows) > len(body):
        out.append(f"({len(rows) - len(body)} more rows: --format csv prints them all)")
    return "\n".join(out)
