"""`cpuspec heads`' screen: per drafter (a method's shape-true head, or a draft model) and
synthetic acceptance length L, SD ×raw measured in llama-server against its plain server; the
round's cost in plain decodes (1 + α + β) and the break-even length a* = 1 + α + β in the
rule's terms; and what the methods' published acceptance lengths would buy here (decode-only,
a prediction: the published τ ÷ this CPU's measured round cost)."""
from __future__ import annotations

from pathlib import Path

from cpuspec.analysis.heads import (SHORT_ROUNDS, beta_is_full_k, clock_gap, predicted_at,
                                    short_rounds, summarize_heads)
from cpuspec.inputs.published import DSPARK_CLAIM, published_for
from cpuspec.report import screen


def _cell(st: dict) -> str:
    return screen.speedup(st["speedup"], st["ci"], st["range"])


def _beta_alpha_lines(doc: dict, summary: dict) -> list[str]:
    """β at the drafts rounds made, α = a* − 1 − β with its clock's uncertainty, and the
    drafters whose rounds -n cut short."""
    k = doc["settings"]["k"]
    alphas = [(label.split(" (")[0], sm) for label, sm in summary.items()
              if sm["alpha"] is not None]
    if not alphas:
        return []
    gap = clock_gap(doc, summary)
    mix = sorted({round(p["drafts_per_round"], 2) for _, sm in alphas for p in sm["points"]
                  if p["drafts_per_round"] is not None})
    betas = sorted({round(p["beta"], 2) for _, sm in alphas for p in sm["points"]
                    if p["beta"] is not None})
    where = (f"V({k + 1})/V(1) − 1, every round priced at k = {k} (this file probed V(1) and "
             f"V({k + 1}) only)" if beta_is_full_k(doc) else
             f"V(d + 1)/V(1) − 1 at the d drafts rounds made ({mix[0]:g}–{mix[-1]:g})")
    unc = ""
    if gap is not None:
        worst = max((1 + p["beta"]) for _, sm in alphas for p in sm["points"]
                    if p["beta"] is not None)
        unc = (f" (each ± {abs(gap) * worst:.2f}: β's clock, llama-cpp-python's V(1), is "
               f"{100 * abs(gap):.1f} % {'under' if gap > 0 else 'over'} the plain server's "
               "time per token)")
    value = f"{betas[0]:.2f}" if betas[0] == betas[-1] else f"{betas[0]:.2f}–{betas[-1]:.2f}"
    out = screen.wrap(f"β = {where} = {value} (the target's own verify, "
                      "cpuspec's probe); α = a* − 1 − β, everything but the target's verify, "
                      "in llama-server: " + ", ".join(f"{name} {sm['alpha']:.2f}"
                                                      for name, sm in alphas) + unc)
    short = short_rounds(doc, summary)
    if short:
        out += screen.wrap(f"SHORT ROUNDS: {len(short)} drafter/L point(s) averaged under "
                           f"{k - SHORT_ROUNDS:g} drafts a round (least "
                           f"{min(d for *_, d in short):.2f} of k = {k}): -n "
                           f"{doc['settings']['max_tokens']} cut them; a longer -n makes "
                           "whole rounds")
    return out


def _published_lines(label: str, sm: dict, s: dict) -> list[str]:
    """A drafter's published τ priced at this run's round cost where the run drafted at τ's
    own draft length and block; the others named with what would price them."""
    pubs = published_for(sm["method"])
    if not pubs or sm["round_cost"] is None:
        return []
    block = ((s.get("heads") or {}).get(sm["method"]) or {}).get("block_size")
    fit = [p for p in pubs if p.fits(s["k"], block)]
    off = [p for p in pubs if not p.fits(s["k"], block)]
    cells = [f"{p.task} τ {p.tau:g} → {predicted_at(sm, p.tau):.2f}×" for p in fit]
    if off:
        p = off[0]
        need = " and ".join([f"-k {p.k}"] * (s["k"] != p.k) + [f"a block-{p.block} head"] * (
            bool(p.block and block and block != p.block)))
        cells.append(f"{', '.join(f'{q.task} τ {q.tau:g}' for q in off)} not priced (measured "
                     f"at k = {p.k}{f', block {p.block}' if p.block else ''}; this run k = "
                     f"{s['k']}{f', block {block}' if block and p.block else ''}: {need} "
                     "prices them)")
    return screen.wrap(f"{label}: " + ", ".join(cells) + f" ({pubs[0].model}, "
                       f"{pubs[0].cite})", "  ")


def render_heads(doc: dict, source: str = "RUN") -> str:
    s, summary = doc["settings"], summarize_heads(doc)
    lengths = list(dict.fromkeys(r["synth_len"] for r in doc.get("runs") or []))
    head = (f"Speculative methods in llama-server on this CPU: target {Path(s['target']).name} "
            f"[{s['label']}], k = {s['k']}, {s['threads']} threads, {s['max_tokens']} tokens, "
            f"{s['n_prompts']} prompts. Acceptance is synthetic (--spec-synth-len L: tokens a "
            "round keeps); the costs are real. SD ×raw end to end [95 % interval over prompts; "
            "(lo–hi): a range, under 5]")
    lines = [*screen.wrap(head), ""]
    if not summary:
        return "\n".join(lines + ["no verdict: no drafter was measured"])
    rows = []
    for label, sm in summary.items():
        by_len = {p["length"]: p for p in sm["points"]}
        rows.append([screen.cut(label, 24 if len(lengths) < 4 else 14),
                     *[_cell(by_len[x]["e2e"]) if x in by_len else "-" for x in lengths],
                     "-" if sm["round_cost"] is None else f"{sm['round_cost']:.2f}"])
    realized = {x: [p["a"] for sm in summary.values() for p in sm["points"]
                    if p["length"] == x and p["a"]] for x in lengths}
    heads = [f"L {x:g}, a {sum(v) / len(v):.2f}" if v else f"L {x:g}"
             for x, v in realized.items()]
    lines += [screen.table(["drafter", *heads, "a* = 1+α+β" if len(lengths) < 4 else "a*"],
                           rows), ""]
    lines += _beta_alpha_lines(doc, summary)
    broken = [f"{label.split(' (')[0]} L {p['length']:g}: {p['impossible']}"
              for label, sm in summary.items() for p in sm["points"] if p.get("impossible")]
    if broken:
        lines += screen.wrap("IMPOSSIBLE COUNTERS (llama-server's /metrics or the file): "
                             + "; ".join(broken) + ". Their a, a* and α are not shown.")
    lines += screen.wrap("L: the synthetic acceptance length asked for; a: the tokens a round "
                         "kept as llama.cpp drew them (few rounds per request: a differs from "
                         "L); a* = 1 + α + β: a round's cost in plain decodes (the SD server's "
                         "decode time per round over the plain server's per token); SD pays "
                         "where a > a*.", "  ")
    lines += ["", *screen.wrap("Published acceptance lengths priced here (decode-only ×raw = "
                               "τ ÷ a*; published, not measured here; each only at the draft "
                               "length and block it was measured at):")]
    for label, sm in summary.items():
        lines += _published_lines(label, sm, s)
    lines += screen.wrap(f"The claim: {DSPARK_CLAIM}.", "  ")
    if not doc.get("complete", True):
        lines.append("INCOMPLETE: the drafters and lengths that finished are shown")
    lines += ["", *screen.wrap("Measure a real head: cpuspec paths --target TARGET.gguf --paths "
                               "llama-server --server-flags \"--spec-type draft-eagle3 -md "
                               "HEAD.gguf\" (acceptance then measured, not given)")]
    return "\n".join(lines)
