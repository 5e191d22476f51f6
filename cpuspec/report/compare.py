"""Runs side by side, from any machines: `cpuspec compare RUN RUN...`.

Each run is labelled by its machine (CPU model, the ISA llama.cpp was built for, threads and
cores, llama-cpp-python version); the rows are the same fields the bench table uses (report.
FIELDS), per task. Like pyperf, runs whose workload differs (model bytes, k, prompts, max
tokens, temperature, drafter) are refused unless forced, naming the difference.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Callable

from cpuspec.results.records import OS_LABELS, Machine
from cpuspec.report.tables import FIELDS, csv_text, fmt_value, json_safe, speedup_cell, table_rows
from cpuspec.analysis.summary import summarize

# The per-task metrics compared, by report.FIELDS name, in this order.
COMPARE_METRICS = ("raw_tok_s", "sd_tok_s", "sd_speedup", "a", "c", "beta", "break_even_a",
                   "sd_significance", "raw_p99_ms", "sd_p99_ms", "adaptive_speedup")
VERDICT_HEADER = "SD verdict (95% CI)"
def _prompts_digest(results: dict) -> str:
    texts = [p.get("text", "") for p in results.get("prompts", [])]
    return hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:12]


WORKLOAD: list[tuple[str, Callable[[dict], Any]]] = [
    ("target model sha256", lambda r: (r.get("models", {}).get("target") or {}).get("sha256")),
    ("draft model sha256", lambda r: (r.get("models", {}).get("draft") or {}).get("sha256")),
    ("drafter", lambda r: r.get("settings", {}).get("drafter", "model")),
    ("draft window", lambda r: r.get("settings", {}).get("draft_window")),
    ("k", lambda r: r.get("settings", {}).get("k")),
    ("max tokens", lambda r: r.get("settings", {}).get("max_tokens")),
    ("temperature", lambda r: r.get("settings", {}).get("temperature", 0.0)),
    ("prompts", _prompts_digest),
]


def mismatches(runs: list[dict]) -> list[str]:
    """What differs in the workload between the runs (empty when they are comparable)."""
    out = []
    for name, get in WORKLOAD:
        values = [get(r) for r in runs]
        if len(set(map(str, values))) > 1:
            shown = [str(v)[:16] if v is not None else "-" for v in values]
            out.append(f"{name}: {' vs '.join(shown)}")
    return out


def compare_rows(runs: list[dict]) -> list[dict]:
    """One row per (task, metric): its value in each run, and run 2 ÷ run 1 for numbers when
    there are two runs."""
    fields = {f.name: f for f in FIELDS}
    per_run = [{row["task"]: (row, s) for row, s in zip(table_rows(summ), summ.values())}
               for summ in (summarize(r) for r in runs)]
    tasks = list(dict.fromkeys(t for pr in per_run for t in pr))
    rows = []
    for task in tasks:
        for metric in COMPARE_METRICS:
            values, cis, cells = [], [], []
            for pr in per_run:
                row, s = pr.get(task, ({}, {}))
                values.append(row.get(metric))
                interval = metric in ("sd_speedup", "adaptive_speedup")
                prefix = metric.removesuffix("speedup")
                cis.append(s.get(f"{prefix}speedup_ci") if interval else None)
                cells.append(speedup_cell(s, prefix) if interval and s else None)
            if all(v is None or v != v for v in values):
                continue
            out = {"task": task, "metric": metric,
                   "header": fields[metric].header or VERDICT_HEADER,
                   "values": values, "ci": cis, "cells": cells}
            if len(runs) == 2 and all(isinstance(v, (int, float)) and v == v and v
                                      for v in values):
                out["ratio"] = values[1] / values[0]
            rows.append(out)
    return rows


def incomplete_note(doc: dict) -> str:
    """What a run that did not finish says beside its name (nothing for a whole run)."""
    if doc.get("complete", True) is not False:
        return ""
    ended = doc.get("ended")
    how = ended if isinstance(ended, str) and ended.startswith("failed") else "interrupted"
    return f"; INCOMPLETE ({how.split(':')[0]}: the prompts that finished)"


def render_compare_screen(runs: list[dict], names: list[str]) -> str:
    """One screen: one row per task and run, the figures that decide (SD ×raw with its
    interval, the verdict measured, a against 1 + α + β, raw t/s), and for two runs run 2's
    SD ×raw over run 1's. Each run's machine on a line above."""
    from cpuspec.report import screen
    from cpuspec.report.verdict import measured_verdict
    machines = [Machine.of(r) for r in runs]
    lines = []
    for i, (n, m, r) in enumerate(zip(names, machines, runs)):
        where = m.platform_phrase()
        lines += screen.wrap(f"run {i + 1}: {n}: {m.label()}" + (f"; {where}" if where else "")
                             + incomplete_note(r), "  ")
    summaries = [summarize(r) for r in runs]
    tasks = list(dict.fromkeys(t for s in summaries for t in s))
    rows = []
    for task in tasks:
        for i, s in enumerate(summaries):
            st = s.get(task)
            if st is None:
                continue
            a, need = st.get("a"), (st.get("cost") or {}).get("break_even_a")
            ratio = ""
            if len(runs) == 2 and i == 1 and task in summaries[0]:
                x0, x1 = summaries[0][task].get("sd_speedup"), st.get("sd_speedup")
                ratio = fmt_value(x1 / x0 if x0 and x1 and x0 == x0 and x1 == x1 else None,
                                  ".2f")
            m = measured_verdict(st)
            rows.append([screen.cut(task, 12), f"run {i + 1}",
                         screen.speedup(st.get("sd_speedup"), st.get("sd_speedup_ci"),
                                        st.get("sd_speedup_range")),
                         "nothing measured" if fmt_value(st.get("sd_speedup"), "") == "-"
                         else m if m != "unclear" else "no difference"
                         if st.get("sd_significance") == "not significant" else "undecided",
                         f"{a:.2f} vs {need:.2f}" if a is not None and need is not None
                         else "-", fmt_value(st.get("raw_tok_s"), ".1f"), ratio])
    lines += ["", screen.table(["task", "run", "SD ×raw e2e", "measured", "a vs 1+α+β",
                                "raw t/s"] + (["SD 2 ÷ 1"] if len(runs) == 2 else []),
                               [r if len(runs) == 2 else r[:-1] for r in rows])]
    return "\n".join(lines + ["", "More: the same command with --details (every metric, "
                                   "p99, c, β, adaptive)"])


def render_compare(runs: list[dict], names: list[str], fmt: str = "text") -> str:
    """The comparison as text, markdown, CSV or JSON, from compare_rows."""
    machines = [Machine.of(r) for r in runs]
    rows = compare_rows(runs)
    fields = {f.name: f for f in FIELDS}
    if fmt == "json":
        return json.dumps({"runs": [{"name": n, "machine": m.to_dict()}
                                    for n, m in zip(names, machines)],
                           "mismatches": mismatches(runs),
                           "rows": [{k: json_safe(v) if not isinstance(v, list) else
                                     [json_safe(x) for x in v] for k, v in r.items()}
                                    for r in rows]}, indent=1)
    headers = ["task", "metric"] + [f"{m.label()} ({n})" for m, n in zip(machines, names)] + \
        (["2 ÷ 1"] if len(runs) == 2 else [])
    if fmt == "csv":
        return csv_text(["task", "metric"] + names + (["ratio"] if len(runs) == 2 else []),
                        [[r["task"], r["metric"], *r["values"]]
                         + ([r.get("ratio")] if len(runs) == 2 else []) for r in rows])
    from cpuspec.report.screen import grid
    table = []
    for r in rows:
        f = fields[r["metric"]]
        cells = [(cell if cell is not None else fmt_value(v, f.fmt)) or "-"
                 for v, cell in zip(r["values"], r["cells"])]
        table.append([r["task"], r["header"]] + cells +
                     ([fmt_value(r.get("ratio"), ".2f")] if len(runs) == 2 else []))
    lines = [f"run {i + 1}: {n}: {m.cpu}"
             + (f" ({m.cpu_id})" if m.cpu_id else "")
             + f"; ISA {' '.join(m.isa) or '?'}; backend "
             f"{' '.join(m.backend) or '?'}; {m.threads} threads"
             + (f" on CPUs {','.join(map(str, m.cpus))}" if m.cpus else "")
             + (f"; cores {m.cores}" if m.cores else "")
             + (f"; {OS_LABELS.get(m.os, m.os)}, pinning {m.pinning}" if m.os else "")
             + f"; llama-cpp-python {m.llama_cpp_python}; {m.started_at}"
             + (f"; matrix engine {m.matrix_phrase()}" if m.matrix_engine else "")
             + incomplete_note(r)
             for i, (n, m, r) in enumerate(zip(names, machines, runs))]
    lines.append(grid(table, headers=headers, tablefmt="github" if fmt == "markdown"
                          else "simple", disable_numparse=True))
    return "\n".join(lines)


# --- sweeps side by side: the CPU-vs-offload table of two machines (or two builds) ----------

SWEEP_COMPARE_METRICS = (("raw_tok_s", "raw t/s e2e", ".1f"), ("sd_tok_s", "SD t/s e2e", ".1f"),
                         ("sd_speedup", "SD ×raw e2e", ".2f"), ("verdict", "SD", ""))


def sweep_mismatches(runs: list[dict]) -> list[str]:
    """What differs in the workload between sweeps, judged on each sweep's first point (every
    point of a sweep shares its models, prompts and tokens, save the axes)."""
    firsts = [next((p for p in r.get("points") or [] if isinstance(p, dict) and "runs" in p),
                   {}) for r in runs]
    return mismatches(firsts) + ([f"axes: {' vs '.join('/'.join(r['axes']) for r in runs)}"]
                                 if len({tuple(r.get("axes") or []) for r in runs}) > 1 else [])


def render_compare_sweeps(runs: list[dict], names: list[str]) -> str:
    """One row per (point, metric), the points matched by their coordinates: for offload
    sweeps, one row per placement in each run's own words (its device and backend, from its
    ggml device list), and run 2 ÷ run 1 for two runs."""
    from cpuspec.report.screen import grid

    from cpuspec.report.sweep import device_line, placement
    from cpuspec.report.tables import sweep_rows
    axes = runs[0].get("axes") or ["threads"]
    per_run = [{tuple(r.get(a) for a in axes): r for r in sweep_rows(run) if "skipped" not in r}
               for run in runs]
    devices = [(run.get("meta") or {}).get("ggml_devices") for run in runs]
    offload = {"n_gpu_layers", "draft_gpu_layers"} & set(axes)
    table = []
    for key in dict.fromkeys(k for pr in per_run for k in pr):
        point = ", ".join(f"{a} {v}" for a, v in zip(axes, key))
        where = [placement(pr[key], d) if offload and key in pr else "" for pr, d in
                 zip(per_run, devices)]
        for metric, header, fmt in SWEEP_COMPARE_METRICS:
            values = [pr.get(key, {}).get(metric) for pr in per_run]
            ratio = values[1] / values[0] if len(runs) == 2 and fmt and all(
                isinstance(v, (int, float)) and v for v in values) else None
            table.append([point, header] + [fmt_value(v, fmt) for v in values]
                         + ([fmt_value(ratio, ".2f")] if len(runs) == 2 else []))
        if offload:
            table.append([point, "placement"] + where + ([""] if len(runs) == 2 else []))
    machines = [Machine.of(r) for r in runs]
    lines = [f"run {i + 1}: {n}: {m.label()}; "
             + (device_line(d) or "no offload device recorded") + incomplete_note(run)
             for i, (n, m, d, run) in enumerate(zip(names, machines, devices, runs))]
    headers = ["point", "metric"] + [f"run {i + 1}" for i in range(len(runs))] \
        + (["2 ÷ 1"] if len(runs) == 2 else [])
    return "\n".join(lines + [grid(table, headers=headers, tablefmt="simple",
                                       disable_numparse=True)])


def render_compare_load(runs: list[dict], names: list[str]) -> str:
    """One screen: one row per concurrency and run (plain and SD t/s, SD ×raw of throughput
    with its interval and verdict, of latency, the p99), each run's crossover under its
    machine, and for two runs run 2's SD ×raw over run 1's at each level."""
    from cpuspec.analysis.load import summarize_load
    from cpuspec.report import screen
    from cpuspec.report.load import load_answer, speedup_cell_of, verdict_cell
    lines = []
    summaries = [summarize_load(r) for r in runs]
    for i, (n, r) in enumerate(zip(names, runs)):
        m = Machine.of(r)
        lines += screen.wrap(f"run {i + 1}: {n}: {m.label()}" + incomplete_note(r), "  ")
        lines += screen.wrap(load_answer(r), "    ")
    levels = list(dict.fromkeys(lv["concurrency"] for s in summaries for lv in s))
    rows = []
    for c in levels:
        at = [next((lv for lv in s if lv["concurrency"] == c), None) for s in summaries]
        for i, lv in enumerate(at):
            if lv is None:
                continue
            ratio = ""
            if len(runs) == 2 and i == 1 and at[0] is not None:
                x0, x1 = at[0]["throughput"]["speedup"], lv["throughput"]["speedup"]
                ratio = fmt_value(x1 / x0 if x0 and x1 else None, ".2f")
            raw, sd = lv["raw"], lv["sd"]
            rows.append([c, f"run {i + 1}", f"{raw.get('tok_s', 0):.1f}",
                         f"{sd.get('tok_s', 0):.1f}", speedup_cell_of(lv["throughput"]),
                         verdict_cell(lv["throughput"]), speedup_cell_of(lv["latency"]),
                         f"{raw.get('e2e_p99_ms', 0) / 1e3:.1f}→"
                         f"{sd.get('e2e_p99_ms', 0) / 1e3:.1f}", ratio])
    headers = ["N", "run", "raw t/s", "SD t/s", "SD ×raw t/s", "measured", "SD ×raw latency",
               "p99 s"] + (["SD 2 ÷ 1"] if len(runs) == 2 else [])
    foot = screen.wrap("N: requests in flight; t/s: every request's tokens over the batch's "
                       "wall time; compare ratios within a run, not t/s across machines", "  ")
    # one screen: the rows that fit under the runs' lines, the rest counted
    room = screen.MAX_LINES - len(lines) - len(foot) - 7   # blank lines, header, cut, more
    cut = [f"  ... {len(rows) - room} more rows: compare fewer runs at a time"] \
        if len(rows) > room else []
    shown = [r if len(runs) == 2 else r[:-1] for r in rows[:max(room, 0)]]
    lines += ["", screen.table(headers, shown), *cut, ""] + foot
    return "\n".join(lines + ["", "More: cpuspec report RUN --details (every batch of a run)"])
