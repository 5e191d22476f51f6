"""`cpuspec plot`: one question per figure, PNG and SVG, a caption line saying where it came
from. The data behind each figure is computed in figure_data.py without matplotlib (tests check
it); only `render` imports matplotlib (the optional extra `cpuspec[plot]`), on the Agg backend.

Figures:
  speedup     does SD pay, per task and run? end-to-end speedup with its 95 % interval, 1.0 line
  breakeven   a against 1 + α + β per task: points below the diagonal a = 1 + α + β lose
  verify_cost V(n)/V(1) per run: how a verify's cost grows with the batch (flat on a GPU)
  sweep       t/s against the swept axis, raw and SD, with the points where SD turns ON marked
  depth       SD ÷ raw against the context depth (a sweep over --depth, joined by single-depth
              runs of the same workload), measured with its interval and predicted, per value
              of the other axes; the 1.0 line is break-even
  latency     per-token latency CDF, raw against SD, with p50/p95/p99 marked
  adaptive    the adaptive policy's k round by round, with its switch-offs and re-entries
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from cpuspec.core.text import printable, screen_text
from cpuspec.results.store import write_atomic

from cpuspec.report.figure_data import (  # noqa: F401 (re-exported)
    OFFLOAD_AXES, adaptive_data, breakeven_data, caption, depth_data, depth_lines,
    depth_point, figure_data, latency_data, leaderboard_data, load_data, offload_data,
    speedup_data, sweep_data, verify_cost_data, whatif_data)

PLOT_HINT = "plots need matplotlib: pip install 'cpuspec[plot]'"


class PlotError(RuntimeError):
    """A figure cannot be drawn; the message says why."""


# Caption characters per inch of figure width at the caption's 7-point font.
CAPTION_CHARS_PER_INCH = 17
# Point labels that would meet are moved up or down by this many points at a time.
LABEL_STEP_PT = 8


def wrap_caption(text: str, width_in: float) -> str:
    """Each caption line wrapped to the figure's width (a long command line is cut at the
    right edge otherwise)."""
    import textwrap
    width = max(int(width_in * CAPTION_CHARS_PER_INCH), 20)
    return "\n".join(textwrap.fill(line, width, break_on_hyphens=False, subsequent_indent="  ")
                     for line in text.splitlines())


def label_offsets(xy: list[tuple[float, float]], texts: list[str],
                  span: tuple[float, float], axes_pt: tuple[float, float]) -> list[int]:
    """A vertical offset (in LABEL_STEP_PT steps, up or down) per point label so that no two
    labels' boxes meet: the break-even figure stacked five runs' labels on one another. Boxes
    are estimated from the 6-point font (3.3 points per character, 8 tall with spacing) and the axes' size
    in points (`axes_pt`, taken on the small side, so an estimate errs towards more room)."""
    sx, sy = axes_pt[0] / span[0], axes_pt[1] / span[1]
    placed: list[tuple[float, float, float, float]] = []
    out = []
    for (x, y), text in zip(xy, texts):
        x0, w = x * sx + 3, 3.3 * len(text) + 2
        for slot in (0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6):
            y0 = y * sy + 2 + LABEL_STEP_PT * slot
            if not any(x0 < px + pw and px < x0 + w and y0 < py + 8 and py < y0 + 8
                       for px, py, pw, _ in placed):
                break
        placed.append((x0, y0, w, 8))
        out.append(slot)
    return out


def render(runs: list[dict], names: list[str], out_dir: Path, title: str | None = None
           ) -> list[Path]:
    """Draw every figure the runs allow into out_dir as PNG and SVG; return the files. `title`
    (e.g. the machine in words) heads every caption."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in the SVG files
        matplotlib.rcParams["text.parse_math"] = False   # a '$' in a task name is a '$'
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError(PLOT_HINT) from None
    # every name and label from a results file, cleaned (core.text): an SVG is XML, where
    # control characters are not allowed, and a file name must not carry them either
    names = [printable(n) for n in names]
    data = _cleaned(figure_data(runs, names))
    if not data:
        raise PlotError("nothing to plot: give bench, costs, sweep, what-if or load results "
                        "files")
    cap = "\n".join(dict.fromkeys(caption(r) for r in runs))
    by_name = dict(zip(names, runs))
    written: list[Path] = []
    # each figure is drawn, saved and closed before the next is drawn
    for fig, stem, text in _figures(plt, data, cap, by_name):
        _save(plt, fig, out_dir / stem, (f"{title}\n" if title else "") + text, written)
    return written


def _cleaned(data: Any) -> Any:
    """The figure data with every text in it printable (keys too)."""
    if isinstance(data, dict):
        return {printable(k) if isinstance(k, str) else k: _cleaned(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(_cleaned(v) for v in data)
    return printable(data) if isinstance(data, str) else data


def _save(plt, fig, stem: Path, text: str, written: list[Path]) -> None:
    """The caption under the axes, then the figure as PNG and SVG."""
    text = wrap_caption(screen_text(text), fig.get_figwidth())
    fig.text(0.01, 0.01, text, fontsize=7, va="bottom", ha="left", color="0.3")
    # a 7-point line is 0.117 in high (line spacing 1.2); a long caption makes the figure
    # taller rather than squeezing the axes into it (at most 45 % of the height is caption)
    needed = 0.05 + 0.12 * (text.count("\n") + 1)
    fig.set_figheight(max(fig.get_figheight(), needed / 0.45))
    fig.tight_layout(rect=(0, needed / fig.get_figheight(), 1, 1))
    for ext in ("png", "svg"):   # rendered whole, then written atomically: no 0-byte figure
        path = stem.with_name(f"{stem.name}.{ext}")
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=120)
        write_atomic(path, buf.getvalue())
        written.append(path)
    plt.close(fig)


def _figures(plt, data: dict, cap: str, by_name: dict):
    """(figure, file stem, caption) for every figure the data allow, one at a time."""
    if "speedup" in data:
        yield _speedup_figure(plt, data["speedup"]), "speedup", cap
    if "breakeven" in data and data["breakeven"]["points"]:
        yield _breakeven_figure(plt, data["breakeven"]["points"]), "breakeven", cap
    if "verify_cost" in data and data["verify_cost"]["curves"]:
        yield _verify_cost_figure(plt, data["verify_cost"]["curves"]), "verify_cost", cap
    for name, d in data.get("sweep", {}).items():
        if name in data.get("offload", {}):   # placements are categories, not an axis
            off = data["offload"][name]
            yield _offload_figure(plt, off), f"offload_{name.replace('/', '_')}", \
                f"{off['device']}\n{caption(by_name[name])}"
            if not off["other_axes"]:
                continue
        yield _sweep_figure(plt, d), f"sweep_{name.replace('/', '_')}", caption(by_name[name])
    for name, d in data.get("whatif", {}).items():
        yield _whatif_figure(plt, d), f"whatif_{name.replace('/', '_')}", \
            f"shape-true targets (random weights): costs measured, acceptance assumed\n" \
            f"{caption(by_name[name])}"
    for name, d in data.get("load", {}).items():
        yield _load_figure(plt, d), f"load_{name.replace('/', '_')}", caption(by_name[name])
    if "depth" in data:
        d = data["depth"]
        yield _depth_figure(plt, d), "depth", "\n".join(caption(by_name[n]) for n in d["runs"])
    for name, tasks in data.get("adaptive", {}).items():
        yield _adaptive_figure(plt, tasks), f"adaptive_{name.replace('/', '_')}", \
            caption(by_name[name])
    for name, d in data.get("latency", {}).items():
        if d:
            yield _latency_figure(plt, d), f"latency_{name.replace('/', '_')}", \
                caption(by_name[name])


def _speedup_figure(plt, d: dict):
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(len(d["series"]), 1)
    for i, s in enumerate(d["series"]):
        x = np.arange(len(s["tasks"])) + i * width
        err = np.array([[v - ci[0], ci[1] - v] if ci else [0, 0]
                        for v, ci in zip(s["speedup"], s["ci"])]).T
        ax.bar(x, s["speedup"], width, yerr=err, capsize=3, label=s["name"])
        ax.set_xticks(np.arange(len(s["tasks"])) + 0.4 - width / 2, s["tasks"])
    ax.axhline(d["reference"], color="k", lw=1, ls="--")
    # the interval: 95 %, or the sequential design's stopping look's (summary.py)
    ax.set_ylabel("SD ÷ raw, end to end, with its interval")
    ax.set_title("Does speculative decoding pay, per task?")
    ax.legend(fontsize=7)
    return fig


def _breakeven_figure(plt, pts: list[dict]):
    fig, ax = plt.subplots(figsize=(5, 5))
    top = max(max(p["a"], p["break_even"]) for p in pts) * 1.1
    ax.plot([1, top], [1, top], color="k", lw=1, ls="--", label="a = 1 + α + β")
    labels = [f"{p['task']} ({p['run']})" for p in pts]
    offsets = label_offsets([(p["break_even"], p["a"]) for p in pts], labels,
                            (top - 1, top - 1), (250, 250))
    for p, text, slot in zip(pts, labels, offsets):
        ax.scatter(p["break_even"], p["a"], color="tab:green" if p["pays"] else "tab:red")
        ax.annotate(text, (p["break_even"], p["a"]), fontsize=6,
                    xytext=(3, 2 + LABEL_STEP_PT * slot), textcoords="offset points")
    ax.set_xlabel("1 + α + β (cost of a round, in target decodes)")
    ax.set_ylabel("a (tokens per round)")
    ax.set_title("Break-even: below the diagonal SD loses")
    ax.legend(fontsize=7)
    return fig


def _verify_cost_figure(plt, curves: list[dict]):
    fig, ax = plt.subplots(figsize=(6, 4))
    for c in curves:
        ax.plot(c["n"], c["ratio"], marker="o", label=c["name"])
    top = max(max(c["n"]) for c in curves)
    ax.plot([1, top], [1, 1], color="k", lw=1, ls="--", label="flat (GPU-like)")
    ax.set_xlabel("tokens in the target decode (n = k + 1)")
    ax.set_ylabel("V(n) ÷ V(1)")
    ax.set_title("How a verify's cost grows with the batch")
    ax.legend(fontsize=6)
    return fig


def _sweep_figure(plt, d: dict):
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(d["x"], d["raw"], marker="o", label="raw")
    ax.plot(d["x"], d["sd"], marker="s", label="SD (static)")
    for x in d["on"]:
        ax.axvline(x, color="tab:green", alpha=0.3)
    ax.set_xlabel(d["axis"] + (f" (also varied: {', '.join(d['other_axes'])})"
                               if d["other_axes"] else ""))
    ax.set_ylabel("tokens/s end to end")
    ax.set_title("Sweep: where SD turns ON (green)")
    ax.legend(fontsize=7)
    return fig


def _offload_figure(plt, d: dict):
    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(d["labels"]))
    ax.bar(x - 0.2, d["raw"], 0.4, label="raw")
    bars = ax.bar(x + 0.2, d["sd"], 0.4, label="SD (static)")
    for bar, sp, verdict in zip(bars, d["speedup"], d["verdict"]):
        if sp is not None:
            ax.annotate(f"{sp:.2f}× {verdict}", (bar.get_x() + bar.get_width() / 2,
                                                  bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, d["labels"], fontsize=7)
    ax.set_ylabel("tokens/s end to end")
    ax.set_title("CPU vs offload: SD ×raw and verdict per placement")
    ax.legend(fontsize=7)
    return fig


def _depth_figure(plt, d: dict):
    fig, ax = plt.subplots(figsize=(6, 4))
    for line_name, ln in d["lines"].items():
        x = np.array(ln["depth"])
        y = np.array(ln["speedup"], dtype=float)
        err = np.array([[v - lo, hi - v] if lo is not None and hi is not None else [0, 0]
                        for v, lo, hi in zip(y, ln["low"], ln["high"])]).T
        bars = ax.errorbar(x, y, yerr=err, marker="o", capsize=3,
                           label=f"{line_name}: measured (its interval)")
        if any(p is not None for p in ln["predicted"]):
            ax.plot(x, [np.nan if p is None else p for p in ln["predicted"]], ls=":",
                    marker="x", color=bars[0].get_color(),
                    label=f"{line_name}: predicted (probe + acceptance)")
    ax.axhline(d["reference"], color="k", lw=1, ls="--", label="break-even (raw speed)")
    ax.set_xlabel("context depth (tokens held in the KV cache before the prompt)")
    ax.set_ylabel("SD ÷ raw, end to end")
    ax.set_title("SD at depth")
    ax.legend(fontsize=6)
    return fig


def _adaptive_figure(plt, tasks: dict):
    fig, axes = plt.subplots(len(tasks), 1, figsize=(8, 1.6 * len(tasks) + 0.8),
                             squeeze=False, sharex=False)
    for ax, (task, d) in zip(axes[:, 0], tasks.items()):
        ax.step(range(len(d["k"])), d["k"], where="post", lw=0.8)
        for x in d["prompt_starts"]:
            ax.axvline(x, color="0.8", lw=0.6)
        for e in d["events"]:
            color = "tab:red" if "off" in e["why"] else "tab:green"
            ax.axvline(e["round"], color=color, lw=1)
        ax.set_ylabel(f"{task}\nk")
    axes[0, 0].set_title("Adaptive k per round (grey: new prompt, red: off, green: "
                         "on / re-entry / probe)", fontsize=10)
    axes[-1, 0].set_xlabel("round, across the task's prompts")
    return fig


def _latency_figure(plt, d: dict):
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, m in d.items():
        line, = ax.step(m["ms"], m["cdf"], where="post", label=mode)
        for q in ("p50", "p95", "p99"):
            ax.axvline(m[q], color=line.get_color(), ls=":", lw=0.8)
            ax.annotate(q, (m[q], {"p50": 0.5, "p95": 0.95, "p99": 0.99}[q]), fontsize=6)
    ax.set_xlabel("per-token latency (ms)")
    ax.set_ylabel("fraction of tokens")
    ax.set_title("Per-token latency, raw against SD")
    ax.legend(fontsize=7)
    return fig


def leaderboard_figure(machines: list[dict], path: Path) -> Path:
    """Does SD pay more on some machines? Bandwidth (or threads where none was measured) on
    x, the best SD ×raw measured faster on y with its interval, the 1.0× line."""
    d = leaderboard_data(machines)
    if not d["sd"]:
        raise PlotError("no machine measured SD faster: nothing to plot")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    use_bw = all(d["bw"])
    xs = d["bw"] if use_bw else d["threads"]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    err = [[s - (lo or s) for s, lo in zip(d["sd"], d["lo"])],
           [(hi or s) - s for s, hi in zip(d["sd"], d["hi"])]]
    ax.errorbar(xs, d["sd"], yerr=err, fmt="o", capsize=3)
    for x, y, text in zip(xs, d["sd"], d["labels"]):
        ax.annotate(text, (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
    ax.set_xlabel("memory bandwidth, GB/s" if use_bw else "threads")
    ax.set_ylabel("best SD ×raw measured faster [95 % CI]")
    ax.set_title("Where SD pays most, per machine")
    stem = path.with_suffix("")
    written: list[Path] = []
    _save(plt, fig, stem, f"cpuspec leaderboard: {len(xs)} machines measured SD faster",
          written)
    return written[0]


def _whatif_figure(plt, d: dict):
    """Where does SD start to pay as the target grows? Break-even acceptance against the
    target's size, a line per k (solid Q4_K_M, dashed others); a missing point: no acceptance
    pays there."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    styles = {}
    for quant, by_k in d.items():
        ls = styles.setdefault(quant, ["-", "--", ":", "-."][len(styles) % 4])
        for k, line in sorted(by_k.items()):
            pts = [(x, y) for x, y in zip(line["x"], line["y"]) if y is not None]
            if pts:
                xs, ys = zip(*sorted(pts))
                ax.plot(xs, ys, ls=ls, marker="o", ms=3, label=f"{quant} k = {k}")
    ax.set_xscale("log")
    ax.set_xlabel("target parameters, billions (shape-true)")
    ax.set_ylabel("break-even acceptance per token")
    ax.set_ylim(0.5, 1.0)
    ax.set_title("SD pays above the line: the least acceptance, per k")
    ax.legend(fontsize=6, ncol=2)
    return fig


def _load_figure(plt, d: dict):
    """Does SD still pay with several requests in flight? Aggregate t/s (left) and request
    p99 (right) against concurrency, plain and SD."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.6))
    for ax, key, label in ((a, "", "aggregate tokens/s"), (b, "_p99", "request p99, s")):
        ax.plot(d["n"], d["raw" + key], marker="o", label="plain llama-server")
        ax.plot(d["n"], d["sd" + key], marker="s", label="with SD")
        ax.set_xlabel("requests in flight")
        ax.set_ylabel(label)
        ax.set_xticks(d["n"])
    a.legend(fontsize=7)
    a.set_title("SD under load")
    return fig
