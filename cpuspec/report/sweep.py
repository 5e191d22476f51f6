"""The sweep's table: one row per point, and the sentence on where SD flips with offload. With
offloaded points, each row says where the target and the draft ran (ggml's device list, as the
results file recorded it), and a line above the table names the device and its backend."""
from __future__ import annotations

import re

from cpuspec.report import screen
from cpuspec.report.tables import csv_text, FIELDS, IN_SPEEDUP_CELL, SWEEP_METRICS, speedup_cell


# Everything that defines a sweep point but where the models ran (harness/sweep.py's AXES):
# an offloaded point is set against the CPU point that matches it on all of these.
POINT_AXES = ("target_quant", "draft_quant", "p_cores", "e_cores", "threads", "k", "depth",
              "p_min")


def same_point(r: dict) -> tuple:
    """A sweep row's coordinates less its placement (POINT_AXES)."""
    return tuple(str(r.get(a)) for a in POINT_AXES)


def _upgrade_row(row: dict) -> dict:
    """Sweep rows of schema 1 called the decode-only speedup measured_speedup."""
    if "measured_speedup" in row and "sd_speedup" not in row:
        row = dict(row, sd_speedup=row["measured_speedup"])
    return row


# Vulkan drivers that run on the CPU: such a device checks the offload path, not a GPU's speed.
SOFTWARE_DEVICES = ("llvmpipe", "lavapipe", "swiftshader")


def offload_device(devices: list[dict] | None) -> dict | None:
    """The device ggml offloads layers to: its first GPU (None: none; an accelerator such as
    BLAS takes no layers)."""
    return next((d for d in devices or [] if d.get("type") in ("GPU", "iGPU")), None)


def backend_of(device: dict) -> str:
    """ggml's backend by the device's name: Vulkan0 → Vulkan, CUDA0 → CUDA, Metal → Metal."""
    return re.sub(r"\d+$", "", device.get("name") or "?") or "?"


def is_software(device: dict) -> bool:
    return any(s in (device.get("description") or "").lower() for s in SOFTWARE_DEVICES)


def device_line(devices: list[dict] | None) -> str | None:
    """The offload device in one line, and what its numbers mean."""
    dev = offload_device(devices)
    if dev is None:
        return None
    gib = (dev.get("memory_total_bytes") or 0) / 2 ** 30
    line = (f"offload device: {dev['name']} ({backend_of(dev)} backend): "
            f"{dev.get('description') or '?'}, {gib:.1f} GiB")
    if is_software(dev):
        line += ("; a software driver running on the CPU: it checks the offload path, "
                 "not a GPU's speed")
    return line


def placement(row: dict, devices: list[dict] | None) -> str:
    """Where a point's target and draft ran: CPU, the device (-ngl 99: every layer) or the
    device with that many layers; CPU where layers were asked for and llama.cpp's load log
    shows no weights on the device (recorded since the load log is read: *_offloaded_bytes)."""
    dev = offload_device(devices)
    name = dev["name"] if dev else "GPU"

    def where(role: str, layers: int) -> str:
        if layers and row.get(f"{role}_offloaded_bytes") == 0:
            return "CPU (ngl ignored)"
        return "CPU" if not layers else name if layers >= 99 else f"{name} ({layers} layers)"
    return (f"target {where('target', row['n_gpu_layers'])}, "
            f"draft {where('draft', row['draft_gpu_layers'])}")


def render_sweep(rows: list[dict], axes: list[str], tablefmt: str = "github",
                 devices: list[dict] | None = None) -> str:
    """Markdown table: the axes that vary, then the metrics; with GPU points, where each
    point's models ran and its raw tok/s relative to the CPU-only point of the same
    threads/k/cores, under a line naming the device (`devices`: meta.ggml_devices)."""
    from cpuspec.report.screen import grid
    rows = [_upgrade_row(r) for r in rows]
    fields = {f.name: f for f in FIELDS}
    shown = [m for m in SWEEP_METRICS if not m.startswith(IN_SPEEDUP_CELL)]
    gpu = any(r["n_gpu_layers"] or r["draft_gpu_layers"] for r in rows)
    cpu_raw = {same_point(r): r.get("raw_tok_s")
               for r in rows if not r["n_gpu_layers"] and not r["draft_gpu_layers"]}
    counted = any(r.get("prompts_run") for r in rows)
    # under the sequential design an interval is its stopping look's, not a fixed 95 % one
    header = {"sd_speedup": "SD ×raw e2e [interval]"} if design_line(rows) else {}
    headers = list(axes) + (["placement"] if gpu else []) + (["prompts"] if counted else []) \
        + [header.get(m, fields[m].header) for m in shown] + ["measured", "cost model"] \
        + (["raw ×CPU"] if gpu else [])
    out = []
    for r in rows:
        line = [r[a] for a in axes] + ([placement(r, devices)] if gpu else []) \
            + ([_prompts(r)] if counted else [])
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
        ci = [r.get("sd_speedup_ci_low"), r.get("sd_speedup_ci_high")]
        rng = [r.get("sd_speedup_range_low"), r.get("sd_speedup_range_high")]
        line.append(r.get("decision") or screen.verdict_of(ci if None not in ci else None,
                                                           rng if None not in rng else None))
        line.append(r.get("verdict") or "-")   # the cost model's: a > 1 + α + β
        if gpu:
            base = cpu_raw.get(same_point(r))
            line.append(f"{r['raw_tok_s'] / base:.2f}" if base else "-")
        out.append(line)
    table = grid(out, headers=headers, tablefmt=tablefmt, disable_numparse=True)
    above = device_line(devices) if gpu else None
    below = design_line(rows)
    table = f"{table}\n\n{below}" if below else table   # a blank line: not a table row
    return f"{above}\n\n{table}" if above else table


def _prompts(r: dict) -> str:
    return f"{r['prompts_run']}/{r['prompts_planned']}" if r.get("prompts_run") else "-"


def design_line(rows: list[dict]) -> str | None:
    """Under the sequential design, what a point's interval and verdict are (its stopping
    look's, not a fixed 95 % interval); None for a sweep of the fixed design."""
    if not any(r.get("decision") for r in rows):
        return None
    levels = sorted({r["level"] for r in rows if r.get("level")})
    # a non-breaking space: the screen's wrap keeps "95.0 %" on one line
    said = ", ".join(f"{100 * lv:.1f}\u00a0%" for lv in levels)
    several = any(r.get("decision") and not r.get("level") for r in rows)
    return ("each point stopped at its first deciding look or at its limit (prompts: run/"
            "planned)" + (f"; its interval is its stopping look's ({said}), which keeps 95 % "
                          "over every look" if levels else "")
            + ("; a point of several tasks has no interval, and its verdict is theirs where "
               "they agree" if several else ""))


def sweep_csv(rows: list[dict]) -> str:
    """Every row's every field, through report's one CSV writer."""
    fields = list(dict.fromkeys(k for r in rows for k in r))
    return csv_text(fields, [[r.get(f) for f in fields] for r in rows])


def render_sweep_screen(rows: list[dict], axes: list[str], devices: list[dict] | None,
                        source: str = "RUN") -> str:
    """One screen: per point the axes that vary, where the models ran, raw t/s, SD ×raw end
    to end with its interval, the verdict measured, and a against 1 + α + β."""
    rows = [_upgrade_row(r) for r in rows]
    gpu = any(r["n_gpu_layers"] or r["draft_gpu_layers"] for r in rows)
    varying = [a for a in axes if len({str(r.get(a)) for r in rows}) > 1
               and not (gpu and a in ("n_gpu_layers", "draft_gpu_layers"))] \
        or ([] if gpu else list(axes[:1]))
    out = []
    for r in rows[:28]:
        line = [screen.cut(r.get(a), 10) for a in varying]
        if gpu:
            line.append(screen.cut(placement(r, devices).replace("target ", "T ")
                                   .replace("draft ", "D "), 22))
        if "skipped" in r:
            out.append(line + ["-", "-", screen.cut(r["skipped"], 24), "skipped", ""])
            continue
        ci = [r.get("sd_speedup_ci_low"), r.get("sd_speedup_ci_high")]
        rng = [r.get("sd_speedup_range_low"), r.get("sd_speedup_range_high")]
        ci, rng = (ci if None not in ci else None), (rng if None not in rng else None)
        a, need = r.get("a"), r.get("break_even_a")
        out.append(line + [
            _prompts(r),
            "-" if r.get("raw_tok_s") is None else f"{r['raw_tok_s']:.1f}",
            screen.speedup(r.get("sd_speedup"), ci, rng),
            r.get("decision") or screen.verdict_of(ci, rng),
            f"{a:.2f} vs {need:.1f}" if a is not None and need is not None else "-"])
    headers = [*varying, *(["where (T/D: target/draft)"] if gpu else []), "prompts", "raw t/s",
               "SD ×raw", "measured", "a vs 1+α+β"]
    lines = ([*screen.wrap(device_line(devices))] if gpu and device_line(devices) else []) \
        + [screen.table(headers, out)]
    if len(rows) > 28:
        lines.append(f"({len(rows) - 28} more points: --details)")
    line = headline(rows, devices)
    if line:
        lines += screen.wrap(line.splitlines()[0], "  ")
    if design_line(rows):
        lines += screen.wrap(design_line(rows))
    return "\n".join(lines + ["", *screen.more(source, "every metric of every point")])


def headline(rows: list[dict], devices: list[dict] | None = None) -> str | None:
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
            if same_point(c) == same_point(g) and c["verdict"] != g["verdict"]:
                lines.append(f"SD flips {c['verdict']} → {g['verdict']} with the "
                             f"{placement(g, devices)} (k = {g['k']}):"
                             f" c {c['c']:.2f} → {g['c']:.2f}, β {c['beta']:.2f} → "
                             f"{g['beta']:.2f}")
    return "\n".join(lines) or "SD's verdict is the same on the CPU and with offload."
