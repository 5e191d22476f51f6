"""Printers of the measuring commands: `cpuspec contention`, `cpuspec quality` and
`cpuspec costs` (the cost curve)."""
from __future__ import annotations

from cpuspec.core.costs import CostProbe, cost_curve
from cpuspec.results.records import model_label


def render_contention(res: dict) -> str:
    from cpuspec.report.screen import grid
    bw = res["bandwidth"]
    lines = [f"STREAM (GB/s, best of {len(bw['single']['samples_s']['copy'])}, arrays "
             f"{bw['single']['array_bytes'] / 2**20:.0f} MiB): "
             + "; ".join(f"{kind} {', '.join(f'{k} {v:.1f}' for k, v in bw[kind]['gbps'].items())}"
                         f" on CPUs {','.join(map(str, bw[kind]['cpus']))}"
                         for kind in ("single", "multi")),
             f"llama.cpp CPUs {','.join(map(str, res['llama_cpus']))}: copy "
             f"{bw['llama_cpus_copy_gbps']:.1f} GB/s"]
    rows = []
    for phase, p in res["phases"].items():
        model = "draft" if phase == "draft" else "target"
        m = res["models"][model]
        rows.append([phase, m["file"], f"{m['weight_bytes'] / 1e6:.0f}", f"{p['tok_s']:.1f}",
                     f"{m['roofline_tok_s']:.1f}", f"{p['bandwidth_gbps']:.1f}",
                     f"{100 * p['roofline_fraction']:.0f}%",
                     " ".join(f"{c:.0f}" for c in p["psutil"]["cpu_percent_mean"]),
                     p["psutil"]["involuntary_ctx_switches"]])
    lines.append(grid(rows, headers=["phase", "model", "MB/token", "tok/s",
                                         "roofline tok/s", "GB/s achieved", "of roofline",
                                         "CPU % per core", "invol. ctx sw"]))
    lines.append(f"c measured = {res['c_measured']:.2f} (draft time per token ÷ target's) vs "
                 f"c from bytes alone = {res['c_bytes']:.2f}; β measured at k = {res['k']}: "
                 f"{res['beta_measured']:.2f}")
    lines.append(grid([[r["streams"], f"{r['target_tok_s']:.1f}",
                            f"{r['target_vs_alone']:.2f}", f"{r['draft_tok_s']:.1f}",
                            f"{r['draft_vs_alone']:.2f}"] for r in res["curve"]],
                          headers=["background streams", "target tok/s", "× alone",
                                   "draft tok/s", "× alone"]))
    if not res["stream_cpus"]:
        lines.append("(no CPUs left for background streams: use fewer --threads than cores)")
    return "\n".join(lines)


def render_quality(res: dict) -> str:
    from cpuspec.report import screen
    from cpuspec.analysis.summary import summarize_drift
    drift = [summarize_drift(m) or {} for m in res["models"]]
    rows = [[screen.cut(m["file"], 28), screen.cut(m.get("desc", ""), 12),
             "derived" if m.get("derived") else screen.cut(m["source"], 8),
             f"{m['perplexity']:.3f}", f"{100 * m['top1_agreement_mean']:.1f}%",
             f"{d['max_dlogit_median']:.2f}/{d['max_dlogit_max']:.2f}" if d else "-",
             f"{d['flips_per_1k']:.1f}" if d else "-"]
            for m, d in zip(res["models"], drift)]
    batch = next((d["batch"] for d in drift if d), None)
    return "\n".join([screen.table(["model", "type", "source", "perplexity", "agree",
                                     "|Δ| med/max", "flips/1k"], rows),
                       *(screen.wrap(f"|Δ|: the largest logit difference per position "
                                     f"between a row of a {batch}-token batch and one-token "
                                     "decoding of the same prefix (median/max); flips: argmax "
                                     "changes per 1,000 positions: what lossless means here")
                         if batch else []),
                       *screen.wrap(f"perplexity over {res['text_tokens']} tokens of a fixed "
                                    f"text (built-in); agree: top-1 agreement with "
                                    f"{res['reference']['file']}'s greedy output on "
                                    f"{len(res['prompts'])} prompts × {res['max_tokens']} "
                                    "tokens (teacher-forced, 100 % = token for token).")])


def render_cost_curve(probe: CostProbe | dict) -> str:
    from cpuspec.report import screen
    p = CostProbe.of(probe)
    rows = cost_curve(p)
    t = p.t
    best = max(rows, key=lambda r: r["ceiling_speedup"])
    table = screen.table(["n tokens", "k = n-1", "V(n) ms", "V(n)/V(1)", "β(k)", "ms/token",
                          "×raw if all accepted"],
                         [[r["n"], r["n"] - 1, f"{r['verify_ms']:.1f}", f"{r['v_over_v1']:.2f}",
                           f"{r['beta']:.2f}", f"{r['ms_per_token']:.1f}",
                           f"{r['ceiling_speedup']:.2f}"] for r in rows])
    # a ceiling is a bound only from medians of 3 or more repetitions per size: from fewer, a
    # curve that falls (V(3) < V(2)) may be noise as well as a kernel that changes with n
    reps = p.reps if p.reps is not None else 3   # files before reps was recorded: as before
    ns = [r["n"] for r in rows]
    falls = [b for a, b in zip(ns, ns[1:]) if p.verify_s[b] < p.verify_s[a]]
    ceiling = (f"SD is at most {best['ceiling_speedup']:.2f}× raw" if reps >= 3 else
               f"SD reaches about {best['ceiling_speedup']:.2f}× raw")
    caveat = "" if reps >= 3 else (
        f" Not a bound: {reps} repetition{'s' * (reps != 1)} per size"
        + (f", and V(n) falls at n = {', '.join(map(str, falls))}" if falls else "")
        + "; rerun with --reps 5 for one.")
    return "\n".join([table, *screen.wrap(
        f"draft decode {1e3 * p.draft_s:.1f} ms, target decode {1e3 * t:.1f} ms: c = "
        f"{p.draft_s / t:.2f}. Even with every draft accepted, {ceiling} (at k = "
        f"{best['n'] - 1}); real acceptance lowers that.{caveat}")])


def render_costs_file(res: dict, fmt: str = "text") -> str:
    """A `cpuspec costs` result, as the command prints it (one screen) or its curve as CSV or
    JSON rows."""
    rows = cost_curve(CostProbe.of(res["cost_probe"]))
    if fmt == "json":
        import json
        return json.dumps(rows, indent=1)
    if fmt == "csv":
        from cpuspec.report.tables import csv_text
        return csv_text(list(rows[0]), [list(r.values()) for r in rows]).rstrip("\n")
    from cpuspec.report import screen
    m = res["models"]

    def label(model: dict) -> str:
        return f" [{model['shape_true']}]" if model.get("shape_true") else ""
    head = (f"target {model_label(m['target'])} ({m['target'].get('desc', '')})"
            f"{label(m['target'])}, draft {model_label(m['draft'])} "
            f"({m['draft'].get('desc', '')}){label(m['draft'])}; "
            f"{res['settings']['threads']} threads; at KV position "
            f"{res['cost_probe']['position']}")
    info = (res.get("meta") or {}).get("llama_system_info")
    return "\n".join([*screen.wrap(head), render_cost_curve(res["cost_probe"]),
                      *(screen.wrap(f"llama.cpp: {info}", "  ") if info else [])])


def render_whatif(doc: dict) -> str:
    """The what-if on one screen: per shape-true target, its decode speed, c, and the least
    per-token acceptance at which SD pays at each k; then the best SD ×raw at assumed
    acceptance rates, and at a saved run's measured profile where one was given; what is
    measured and what assumed; the command that measures acceptance."""
    from cpuspec.analysis.whatif import ASSUMED_P, WHATIF_ERROR, whatif_row
    from cpuspec.report import screen
    rows = [r for r in doc.get("rows", []) if "cost_probe" in r]
    drafts = {(r.get("draft") or {}).get("file") for r in rows}
    per_row = len(drafts) > 1

    def best(b: dict) -> str:
        return {"on": f"{b['speedup']:.2f} (k {b['k']})", "off": "off",
                "within error": f"~{b['sd_speedup']:.2f} (k {b['k']})"}[b["state"]]

    def name(r: dict) -> list[str]:
        own = (r.get("draft") or {}).get("file")
        itself = own is not None and own == (r.get("target") or {}).get("file")
        return [r["size"], r["quant"]] + (["itself" if itself else _short(own)]
                                          if per_row else [])
    draft = "per row" if per_row else \
        ((doc.get("models") or {}).get("draft") or {}).get("file", "?")
    out = screen.wrap(f"What-if on this CPU: targets are {doc['settings']['label']} (real "
                      f"shapes and quant types); draft {draft}. Measured: every cost (decode, "
                      "c, β); assumed: acceptance, i.i.d. per token.")
    if not rows:
        return "\n".join(out + ["no verdict: no target was measured"])
    w = [whatif_row(r["cost_probe"]) for r in rows]
    ks = sorted(set.intersection(*(set(x["break_even_p"]) for x in w)))[:8 - 2 * per_row]
    head = ["size", "quant"] + ["draft"] * per_row
    out += ["", "Least acceptance p at which SD pays, per k (-: no p does):",
            screen.table([*head, "decode t/s", "c", *[f"k={k}" for k in ks]],
                         [[*name(r), f"{x['decode_tok_s']:.1f}", f"{x['c']:.3f}",
                           *[fmt(x["break_even_p"][k]) for k in ks]]
                          for r, x in zip(rows, w)]),
            "", *screen.wrap(f"Best SD ×raw over k at acceptance p (its k; off: no k pays; "
                             f"~: a gain within the what-if's error, ±{WHATIF_ERROR:.0%}, "
                             "not a verdict):"),
            screen.table([*head, *[f"p = {p}" for p in ASSUMED_P]],
                         [[*name(r), *[best(x["best"][p]) for p in ASSUMED_P]]
                          for r, x in zip(rows, w)])]
    out += _profile_table(doc, rows, head, name, best)
    skipped = [f"{r['size']} {r['quant']}" for r in doc.get("rows", []) if "skipped" in r]
    if skipped:
        out += screen.wrap("skipped (no room): " + ", ".join(skipped))
    if not doc.get("complete", True):
        out.append("INCOMPLETE: the targets that finished are shown")
    out += screen.wrap("Next: measure acceptance with the real files: cpuspec bench --target "
                       "TARGET.gguf --draft DRAFT.gguf (acceptance is the one input assumed "
                       "here)")
    return "\n".join(out)


def _short(file: str | None) -> str:
    """A draft's file name without the shape-true suffix (the header says they are)."""
    return (file or "?").split(".shape-true")[0].removesuffix(".gguf")


def _profile_table(doc: dict, rows: list[dict], head: list[str], name, best) -> list[str]:
    """--acceptance: the best SD ×raw at each task's measured per-position acceptance from a
    saved run of another pair: a measured profile borrowed, not this pair's acceptance."""
    from cpuspec.analysis.whatif import profile_best
    from cpuspec.report import screen
    acc = doc.get("acceptance")
    if not acc:
        return []
    tasks = list(acc["profiles"])
    return ["", *screen.wrap(
        f"Best SD ×raw over k ≤ {acc.get('k')} at the per-position acceptance measured in run "
        f"{acc['run']} ({acc.get('pair')}), per task: that pair's measured profile borrowed, "
        "not this pair's acceptance:"),
        screen.table([*head, *tasks],
                     [[*name(r), *[best(profile_best(r["cost_probe"], acc["profiles"][t]))
                                   for t in tasks]] for r in rows])]


def fmt(p: float | None) -> str:
    return "-" if p is None else f"{p:.2f}"


VALIDATION_TOLERANCE = 0.05   # issue 50: a shape-true point is validated within 5 % of the real


def render_shape_validation(doc: dict) -> str:
    """Per point and quant, shape-true ÷ real with its interval, marked ok where the interval
    lies within ±5 % (VALIDATION_TOLERANCE), NO where it lies outside, ? where it straddles."""
    from cpuspec.analysis.whatif import validation
    from cpuspec.report import screen
    labels = list(doc.get("probes", {}))
    pairs = [(r, s) for r in labels if r.startswith("real") for s in labels
             if s == r.replace("real", "shape", 1)]
    columns = {real.removeprefix("real").strip(" -_") or real: validation(doc, real, shape)
               for real, shape in pairs}
    points = list(dict.fromkeys(r["point"] for rows in columns.values() for r in rows))

    def cell(r: dict | None) -> str:
        if r is None:
            return "-"
        cell = screen.speedup(r["ratio"], r.get("ci"), r.get("range"))
        if not r.get("ci"):          # fewer than 5 rounds: a range, no verdict
            return cell
        lo, hi = r["ci"]
        tol = VALIDATION_TOLERANCE
        mark = "ok" if 1 - tol <= lo and hi <= 1 + tol else \
            "NO" if hi < 1 - tol or lo > 1 + tol else "?"
        return f"{cell} {mark}"
    table = [[pt, *[cell(next((r for r in rows if r["point"] == pt), None))
                    for rows in columns.values()]] for pt in points]
    s = doc["settings"]
    return "\n".join([*screen.wrap(
        f"Shape-true ({s['label']}) ÷ real, {s['rounds']} interleaved rounds at a "
        f"{s['prompt_tokens']}-token prompt: geometric mean [95 % interval]; ok: the interval "
        "within ±5 %, NO: outside it, ?: across its edge; no mark: fewer than 5 rounds, their range "
        "(lo–hi), no verdict"), "",
        screen.table(["point", *columns], table)])
