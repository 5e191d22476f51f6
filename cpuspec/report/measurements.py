"""Printers of the measuring commands: `cpuspec contention`, `cpuspec quality` and
`cpuspec costs` (the cost curve)."""
from __future__ import annotations

from cpuspec.core.costs import CostProbe, cost_curve


def render_contention(res: dict) -> str:
    from tabulate import tabulate
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
    lines.append(tabulate(rows, headers=["phase", "model", "MB/token", "tok/s",
                                         "roofline tok/s", "GB/s achieved", "of roofline",
                                         "CPU % per core", "invol. ctx sw"]))
    lines.append(f"c measured = {res['c_measured']:.2f} (draft time per token ÷ target's) vs "
                 f"c from bytes alone = {res['c_bytes']:.2f}; β measured at k = {res['k']}: "
                 f"{res['beta_measured']:.2f}")
    lines.append(tabulate([[r["streams"], f"{r['target_tok_s']:.1f}",
                            f"{r['target_vs_alone']:.2f}", f"{r['draft_tok_s']:.1f}",
                            f"{r['draft_vs_alone']:.2f}"] for r in res["curve"]],
                          headers=["background streams", "target tok/s", "× alone",
                                   "draft tok/s", "× alone"]))
    if not res["stream_cpus"]:
        lines.append("(no CPUs left for background streams: use fewer --threads than cores)")
    return "\n".join(lines)


def render_quality(res: dict) -> str:
    from cpuspec.report import screen
    rows = [[screen.cut(m["file"], 40), screen.cut(m.get("desc", ""), 20),
             "derived" if m.get("derived") else screen.cut(m["source"], 10),
             f"{m['perplexity']:.3f}", f"{100 * m['top1_agreement_mean']:.1f}%"]
            for m in res["models"]]
    return "\n".join([screen.table(["model", "type", "source", "perplexity", "top-1 agree"],
                                    rows),
                       *screen.wrap(f"perplexity over {res['text_tokens']} tokens of a fixed "
                                    f"text (built-in); top-1 agreement with "
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
    return "\n".join([table, *screen.wrap(
        f"draft decode {1e3 * p.draft_s:.1f} ms, target decode {1e3 * t:.1f} ms: c = "
        f"{p.draft_s / t:.2f}. Even with every draft accepted, SD is at most "
        f"{best['ceiling_speedup']:.2f}× raw (at k = {best['n'] - 1}); real acceptance lowers "
        "that.")])


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
    head = (f"target {m['target']['file']} ({m['target'].get('desc', '')}), draft "
            f"{m['draft']['file']} ({m['draft'].get('desc', '')}); "
            f"{res['settings']['threads']} threads; at KV position "
            f"{res['cost_probe']['position']}")
    info = (res.get("meta") or {}).get("llama_system_info")
    return "\n".join([*screen.wrap(head), render_cost_curve(res["cost_probe"]),
                      *(screen.wrap(f"llama.cpp: {info}", "  ") if info else [])])
