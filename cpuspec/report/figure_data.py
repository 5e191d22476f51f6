"""What each figure of `cpuspec plot` is drawn from, computed without matplotlib (tests check
these, never pixels): per run the speedups with their intervals, a against 1 + α + β, the
verify-cost curve, sweeps (offload, depth), latencies, the adaptive policy's k, the leaderboard,
the what-if and the load test; and each figure's caption line."""
from __future__ import annotations

from typing import Any

import numpy as np

from cpuspec.report.compare import mismatches
from cpuspec.results.records import CostProbe, Machine, RecordError, model_label
from cpuspec.report.tables import sweep_rows, table_rows
from cpuspec.report.sweep import device_line, placement
from cpuspec.analysis.stats import percentile
from cpuspec.analysis.summary import OVERALL, policy_events, summarize


def caption(results: dict) -> str:
    s, m = results.get("settings", {}), results.get("models", {})
    if results.get("kind") == "sweep":
        return f"{Machine.of(results).label()}; {' '.join(s.get('argv', []))}"
    target = model_label(m.get("target")) or "?"
    draft = model_label(m.get("draft")) or (m.get("draft") or {}).get("drafter", "?")
    short = [str(f).removesuffix(".gguf").replace("-instruct", "") for f in (target, draft)]
    when = str(results.get("meta", {}).get("started_at", ""))[:10]
    return (f"{Machine.of(results).label()}; {short[0]} / {short[1]}; k = {s.get('k')}, "
            f"{s.get('max_tokens')} tokens; {when}")


def speedup_data(runs: list[dict], names: list[str]) -> dict[str, Any]:
    series = []
    for r, name in zip(runs, names):
        summ = summarize(r)
        tasks = [t for t in summ if t != OVERALL]
        series.append({"name": f"{Machine.of(r).label()} ({name})", "tasks": tasks,
                       "speedup": [summ[t]["sd_speedup"] for t in tasks],
                       "ci": [summ[t].get("sd_speedup_ci") for t in tasks]})
    return {"series": series, "reference": 1.0}


def breakeven_data(runs: list[dict], names: list[str]) -> dict[str, Any]:
    points = []
    for r, name in zip(runs, names):
        for task, s in summarize(r).items():
            if task != OVERALL and "cost" in s:
                points.append({"run": name, "task": task, "a": s["a"],
                               "break_even": s["cost"]["break_even_a"],
                               "pays": s["a"] > s["cost"]["break_even_a"]})
    return {"points": points}


def verify_cost_data(runs: list[dict], names: list[str]) -> dict[str, Any]:
    curves = []
    for r, name in zip(runs, names):
        try:
            verify = CostProbe.of(r.get("cost_probe")).verify_s
        except RecordError:     # no probe (an older file, a sweep): no curve
            continue
        if verify:
            ns = sorted(verify)
            target = (r.get("models", {}).get("target") or {}).get("desc", "")
            curves.append({"name": f"{Machine.of(r).label()} {target} ({name})", "n": ns,
                           "ratio": [verify[n] / verify[1] for n in ns]})
    return {"curves": curves}


def sweep_data(sweep: dict) -> dict[str, Any]:
    rows = [r for r in sweep.get("rows", []) if "skipped" not in r]
    axes = sweep.get("axes") or ["threads"]
    axis = axes[-1]
    x = [r[axis] for r in rows]
    return {"axis": axis, "x": x, "raw": [r.get("raw_tok_s") for r in rows],
            "sd": [r.get("sd_tok_s") for r in rows],
            "on": [x_ for x_, r in zip(x, rows) if r.get("verdict") == "ON"],
            "other_axes": [a for a in axes if a != axis]}


OFFLOAD_AXES = ("n_gpu_layers", "draft_gpu_layers")


def offload_data(sweep: dict) -> dict[str, Any] | None:
    """A sweep with offloaded points: one bar pair per placement (raw and SD t/s), its SD ×raw
    and verdict, labelled with where the models ran and the device's backend (None: no
    offloaded point)."""
    rows = [r for r in sweep_rows(sweep) if "skipped" not in r]
    if not any(r["n_gpu_layers"] or r["draft_gpu_layers"] for r in rows):
        return None
    devices = (sweep.get("meta") or {}).get("ggml_devices")
    others = [a for a in sweep.get("axes") or [] if a not in OFFLOAD_AXES]

    def label(r: dict) -> str:   # the other axes' values too, where the sweep crosses them
        return "\n".join([", ".join(f"{a} {r.get(a)}" for a in others)] * bool(others)
                         + placement(r, devices).split(", "))
    return {"labels": [label(r) for r in rows], "other_axes": others,
            "raw": [r.get("raw_tok_s") for r in rows], "sd": [r.get("sd_tok_s") for r in rows],
            "speedup": [r.get("sd_speedup") for r in rows],
            "verdict": [r.get("verdict") or "-" for r in rows],
            "device": device_line(devices) or "offload device: not recorded"}


def depth_data(sweep: dict) -> dict[str, Any] | None:
    """A sweep over depth: per combination of its other axes, SD ÷ raw (with its interval)
    and the prediction beside it, against the depth."""
    axes = sweep.get("axes") or []
    if "depth" not in axes:
        return None
    others = [a for a in axes if a != "depth"]
    lines: dict[str, dict] = {}
    for r in sweep_rows(sweep):
        if "skipped" in r:
            continue
        name = ", ".join(f"{a}={r[a]}" for a in others) or "SD"
        line = lines.setdefault(name, {"depth": [], "speedup": [], "low": [], "high": [],
                                       "predicted": []})
        line["depth"].append(r["depth"])
        line["speedup"].append(r.get("sd_speedup"))
        line["low"].append(r.get("sd_speedup_ci_low"))
        line["high"].append(r.get("sd_speedup_ci_high"))
        line["predicted"].append(r.get("predicted_speedup"))
    return {"lines": lines, "reference": 1.0}


def depth_point(results: dict) -> dict | None:
    """A bench run at one depth (`bench --depth N`, no sweep) as a row like a sweep's."""
    depth = (results.get("settings") or {}).get("depth")
    summary = summarize(results).get(OVERALL) if depth else None
    if not summary:
        return None
    row = table_rows({OVERALL: summary})[0]
    return {"depth": depth, **{m: row.get(m) for m in (
        "sd_speedup", "sd_speedup_ci_low", "sd_speedup_ci_high", "predicted_speedup")}}


def depth_lines(sweeps: list[tuple[dict, str]], points: list[tuple[dict, str]]
                ) -> tuple[dict[str, dict], list[str]]:
    """One line per depth sweep (and per value of its other axes); a single-depth bench run
    joins the line of a sweep over depth alone with the same workload (compare.mismatches:
    files, k, drafter, tokens, prompts), else it is a line of its own. Also the runs drawn."""
    lines, drawn = {}, []
    for r, n in sweeps:
        d = depth_data(r)
        if not d:
            continue
        drawn.append(n)
        for line, v in d["lines"].items():
            lines[f"{n}: {line}" if line != "SD" else n] = v
    for r, n in points:
        p = depth_point(r)
        if p is None:
            continue
        drawn.append(n)
        home = next((s_name for s, s_name in sweeps if (s.get("axes") or []) == ["depth"]
                     and s_name in lines and s.get("points")
                     and not mismatches([s["points"][0], r])), None)
        line = lines[home] if home else lines.setdefault(n, {
            "depth": [], "speedup": [], "low": [], "high": [], "predicted": []})
        for key, field in (("depth", "depth"), ("speedup", "sd_speedup"),
                           ("low", "sd_speedup_ci_low"), ("high", "sd_speedup_ci_high"),
                           ("predicted", "predicted_speedup")):
            line[key].append(p[field])
        order = sorted(range(len(line["depth"])), key=line["depth"].__getitem__)
        for key in line:
            line[key] = [line[key][i] for i in order]
    return lines, drawn


def latency_data(results: dict) -> dict[str, Any]:
    out = {}
    for mode in ("raw", "static"):
        lat = sorted(1e3 * x for r in results["runs"] if r["mode"] == mode
                     for x in r["token_latencies_s"])
        if lat:
            out[mode] = {"ms": lat, "cdf": list(np.arange(1, len(lat) + 1) / len(lat)),
                         "p50": percentile(lat, 50), "p95": percentile(lat, 95),
                         "p99": percentile(lat, 99)}
    return out


def adaptive_data(results: dict) -> dict[str, Any]:
    """Per task, the adaptive policy's k round by round across its prompts, and the rounds
    where it switched off, on or re-entered (from the runs' policy_trace)."""
    out: dict[str, Any] = {}
    for r in results["runs"]:
        if r["mode"] != "adaptive" or not r.get("policy_trace"):
            continue
        d = out.setdefault(r["task"], {"k": [], "events": [], "prompt_starts": []})
        start = len(d["k"])
        d["prompt_starts"].append(start)
        d["events"] += [{"round": start + e["round"], "why": e["why"]}
                        for e in policy_events(r)]
        d["k"] += [t[0] for t in r["policy_trace"]]
    return out


def figure_data(runs: list[dict], names: list[str]) -> dict[str, Any]:
    """Every figure's data for these results files (bench runs, costs runs, sweeps)."""
    bench = [(r, n) for r, n in zip(runs, names) if r.get("kind") == "bench"]
    probes = [(r, n) for r, n in zip(runs, names) if r.get("cost_probe")]
    sweeps = [(r, n) for r, n in zip(runs, names) if r.get("kind") == "sweep"]
    whatifs = [(r, n) for r, n in zip(runs, names) if r.get("kind") == "whatif"]
    loads = [(r, n) for r, n in zip(runs, names) if r.get("kind") == "load"]
    out: dict[str, Any] = {}
    if whatifs:
        out["whatif"] = {n: d for r, n in whatifs if (d := whatif_data(r))}
    if loads:
        out["load"] = {n: load_data(r) for r, n in loads}
    if bench:
        rs, ns = zip(*bench)
        speedup = speedup_data(list(rs), list(ns))
        if any(isinstance(x, (int, float)) and x == x for s in speedup["series"]
               for x in s["speedup"]):   # a run that measured no SD draws no empty axes
            out["speedup"] = speedup
        out["breakeven"] = breakeven_data(list(rs), list(ns))
        out["latency"] = {n: latency_data(r) for r, n in bench}
        out["adaptive"] = {n: d for r, n in bench if (d := adaptive_data(r))}
    if probes:
        rs, ns = zip(*probes)
        out["verify_cost"] = verify_cost_data(list(rs), list(ns))
    if sweeps:
        out["sweep"] = {n: sweep_data(r) for r, n in sweeps}
        out["offload"] = {n: d for r, n in sweeps if (d := offload_data(r))}
    # one figure for every depth sweep given: a line per run (and per other axis value), with
    # single-depth bench runs of the same workload joining their sweep's line
    lines, drawn = depth_lines(sweeps, bench)
    if lines:
        out["depth"] = {"lines": lines, "reference": 1.0, "runs": drawn}
    return out


def leaderboard_data(machines: list[dict]) -> dict[str, Any]:
    """Per machine measured faster: its threads and bandwidth (x) and best SD ×raw (y)."""
    pts = [m for m in machines if m.get("sd")]
    return {"labels": [m["cpu"] for m in pts], "threads": [m.get("threads") for m in pts],
            "bw": [m.get("bw") for m in pts], "sd": [m["sd"] for m in pts],
            "lo": [m.get("lo") for m in pts], "hi": [m.get("hi") for m in pts]}


def whatif_data(doc: dict) -> dict[str, Any] | None:
    """Per quant, per k: the target sizes (parameters, billions) and the least acceptance at
    which SD pays there (None where none does)."""
    from cpuspec.analysis.whatif import whatif_row
    rows = [r for r in doc.get("rows", []) if "cost_probe" in r]
    if not rows:
        return None
    out: dict[str, Any] = {}
    for r in rows:
        w = whatif_row(r["cost_probe"])
        for k, p in w["break_even_p"].items():
            line = out.setdefault(r["quant"], {}).setdefault(k, {"x": [], "y": []})
            line["x"].append(r["params"] / 1e9)
            line["y"].append(p)
    return out


def load_data(doc: dict) -> dict[str, Any]:
    """Per concurrency: plain and SD aggregate t/s and request p99 (s)."""
    from cpuspec.analysis.load import summarize_load
    levels = summarize_load(doc)
    return {"n": [lv["concurrency"] for lv in levels],
            "raw": [lv["raw"].get("tok_s") for lv in levels],
            "sd": [lv["sd"].get("tok_s") for lv in levels],
            "raw_p99": [(lv["raw"].get("e2e_p99_ms") or 0) / 1e3 for lv in levels],
            "sd_p99": [(lv["sd"].get("e2e_p99_ms") or 0) / 1e3 for lv in levels]}
