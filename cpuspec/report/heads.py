"""`cpuspec heads`' screen: per drafter (a method's shape-true head, or a draft model) and
synthetic acceptance length L, SD ×raw measured in llama-server against its plain server; the
round's cost in plain decodes (1 + α + β) and the break-even length a* = 1 + α + β in the
rule's terms; and what the methods' published acceptance lengths would buy here (decode-only,
a prediction: the published τ ÷ this CPU's measured round cost)."""
from __future__ import annotations

from pathlib import Path

from cpuspec.analysis.heads import beta, predicted_at, summarize_heads
from cpuspec.inputs.published import DSPARK_CLAIM, published_for
from cpuspec.report import screen


def _cell(st: dict) -> str:
    return screen.speedup(st["speedup"], st["ci"], st["range"])


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
    b = beta(doc)
    if b is not None:
        lines += screen.wrap(f"β = V({s['k'] + 1})/V(1) − 1 = {b:.2f} (the target's own verify, "
                             "cpuspec's probe), so α = a* − 1 − β: " + ", ".join(
                                 f"{label.split(' (')[0]} {sm['round_cost'] - 1 - b:.2f}"
                                 for label, sm in summary.items() if sm["round_cost"]))
    lines += screen.wrap("L: the synthetic acceptance length asked for; a: the tokens a round "
                         "kept as llama.cpp drew them (few rounds per request: a differs from "
                         "L); a* = 1 + α + β: a round's cost in plain decodes (the SD server's "
                         "decode time per round over the plain server's per token); SD pays "
                         "where a > a*.", "  ")
    lines += ["", *screen.wrap(f"Published acceptance lengths priced here (decode-only ×raw = "
                               f"τ ÷ a*, a* at k = {s['k']}; published, not measured here; "
                               f"τ above k + 1 = {s['k'] + 1} cannot happen at this k: left "
                               "out):")]
    for label, sm in summary.items():
        pubs = [p for p in published_for(sm["method"]) if p.tau <= s["k"] + 1]
        if not pubs or sm["round_cost"] is None:
            continue
        cells = [f"{p.task} τ {p.tau:g} → {predicted_at(sm, p.tau):.2f}×" for p in pubs]
        lines += screen.wrap(f"{label}: " + ", ".join(cells) + f" ({pubs[0].model}, "
                             f"{pubs[0].cite})", "  ")
    lines += screen.wrap(f"The claim: {DSPARK_CLAIM}.", "  ")
    if not doc.get("complete", True):
        lines.append("INCOMPLETE: the drafters and lengths that finished are shown")
    lines += ["", *screen.wrap(f"Measure a real head: cpuspec paths --target TARGET.gguf --paths "
                               "llama-server --server-flags \"--spec-type draft-eagle3 -md "
                               "HEAD.gguf\" (acceptance then measured, not given)")]
    return "\n".join(lines)
