"""The sweep's table: one row per point, and the sentence on where SD flips with offload."""
from __future__ import annotations

from cpuspec.report.tables import FIELDS, IN_SPEEDUP_CELL, SWEEP_METRICS, speedup_cell


def _upgrade_row(row: dict) -> dict:
    """Sweep rows of schema 1 called the decode-only speedup measured_speedup."""
    if "measured_speedup" in row and "sd_speedup" not in row:
        row = dict(row, sd_speedup=row["measured_speedup"])
    return row


def render_sweep(rows: list[dict], axes: list[str], tablefmt: str = "github") -> str:
    """Markdown table: the axes that vary, then the metrics; with GPU points, each point's raw
    tok/s relative to the CPU-only point of the same threads/k/cores."""
    from tabulate import tabulate
    rows = [_upgrade_row(r) for r in rows]
    fields = {f.name: f for f in FIELDS}
    shown = [m for m in SWEEP_METRICS if not m.startswith(IN_SPEEDUP_CELL)]
    gpu = any(r["n_gpu_layers"] or r["draft_gpu_layers"] for r in rows)
    cpu_raw = {(r["p_cores"], r["e_cores"], r["threads"], r["k"]): r.get("raw_tok_s")
               for r in rows if not r["n_gpu_layers"] and not r["draft_gpu_layers"]}
    headers = list(axes) + [fields[m].header for m in shown] + ["SD"] \
        + (["raw ×CPU"] if gpu else [])
    out = []
    for r in rows:
        line = [r[a] for a in axes]
        if "skipped" in r:
            out.append(line + [r["skipped"]] + [""] * (len(headers) - len(line) - 1))
            continue
        for m in shown:
            if m == "sd_speedup":
                ci = [r.get("sd_speedup_ci_low"), r.get("sd_speedup_ci_high")]
                rng = [r.get("sd_speedup_range_low"), r.get("sd_speedup_range_high")]
                line.append(speedup_cell({
                    "sd_speedup": r.get(m), "sd_speedup_ci": ci if None not in ci else None,
                    "sd_speedup_range": rng if None not in rng else None,
                    "sd_speedup_units": r.get("sd_speedup_units")}) or "-")
            else:
                line.append("-" if r.get(m) is None else format(r[m], fields[m].fmt))
        line.append(r.get("verdict") or "-")
        if gpu:
            base = cpu_raw.get((r["p_cores"], r["e_cores"], r["threads"], r["k"]))
            line.append(f"{r['raw_tok_s'] / base:.2f}" if base else "-")
        out.append(line)
    return tabulate(out, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def headline(rows: list[dict]) -> str | None:
    """Where SD flips from OFF on the CPU to ON with offload, and why (c and β)."""
    cpu = [r for r in rows if "skipped" not in r and not r["n_gpu_layers"]
           and not r["draft_gpu_layers"]]
    gpu = [r for r in rows if "skipped" not in r and (r["n_gpu_layers"] or
                                                      r["draft_gpu_layers"])]
    if not cpu or not gpu:
        return None
    lines = []
    for g in gpu:
        for c in cpu:
            if (c["threads"], c["k"]) == (g["threads"], g["k"]) and c["verdict"] != g["verdict"]:
                lines.append(f"SD flips {c['verdict']} → {g['verdict']} with target/draft GPU "
                             f"layers {g['n_gpu_layers']}/{g['draft_gpu_layers']} (k = {g['k']}):"
                             f" c {c['c']:.2f} → {g['c']:.2f}, β {c['beta']:.2f} → "
                             f"{g['beta']:.2f}")
    return "\n".join(lines) or "SD's verdict is the same on the CPU and with offload."
