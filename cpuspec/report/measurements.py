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
    from tabulate import tabulate
    rows = [[m["file"], m.get("desc", ""), "derived" if m.get("derived") else m["source"],
             f"{m['perplexity']:.3f}", f"{100 * m['top1_agreement_mean']:.1f}%"]
            for m in res["models"]]
    return (tabulate(rows, headers=["model", "type", "source", "perplexity (built-in text)",
                                    "top-1 agreement"], disable_numparse=True)
            + f"\nperplexity over {res['text_tokens']} tokens of a fixed text; agreement with "
            f"{res['reference']['file']}'s greedy output on {len(res['prompts'])} prompts × "
            f"{res['max_tokens']} tokens (teacher-forced, 100 % = token for token).")


def render_cost_curve(probe: CostProbe | dict) -> str:
    from tabulate import tabulate
    p = CostProbe.of(probe)
    rows = cost_curve(p)
    t = p.t
    best = max(rows, key=lambda r: r["ceiling_speedup"])
    table = tabulate([[r["n"], r["n"] - 1, f"{r['verify_ms']:.1f}", f"{r['v_over_v1']:.2f}",
                       f"{r['beta']:.2f}", f"{r['ms_per_token']:.1f}",
                       f"{r['ceiling_speedup']:.2f}"] for r in rows],
                     headers=["n tokens", "k = n-1", "V(n) ms", "V(n)/V(1)", "β(k)",
                              "ms/token", "×raw if all accepted"], disable_numparse=True)
    return (table + f"\ndraft decode {1e3 * p.draft_s:.1f} ms, target decode "
            f"{1e3 * t:.1f} ms: c = {p.draft_s / t:.2f}. Even with every draft accepted, "
            f"SD is at most {best['ceiling_speedup']:.2f}× raw (at k = {best['n'] - 1}); real "
            "acceptance lowers that.")
