"""`cpuspec tune`: find the configuration where SD pays, guided by the cost model.

1. Measure: for every (target, draft) combination, one static run at k_max on the tuning half
   of the prompts. Its cost probe gives V(n) for n = 1..k_max+1 and the draft's cost; its rounds
   give, per task, the survival P(n_accepted ≥ i) for every i ≤ k_max, which serves every
   smaller k (greedy drafts do not depend on k).
2. Predict every (combination, k) per task, end to end, with the same function that predicts a
   bench run (report.predict_from_probe), against raw decoding on the same target and on the
   reference (first) target.
3. Confirm: run the best configuration of each task for real (raw and static SD) on the other
   half of the prompts, so the reported speedup never comes from the prompts it was chosen on.
"""
from __future__ import annotations

import dataclasses
import shlex
import time
from dataclasses import dataclass
from typing import Callable

from .bench import BenchConfig, run_bench
from .report import OVERALL, predict_from_probe, predict_from_rounds, summarize

Log = Callable[[str], None]
K_MAX = 8


@dataclass(frozen=True)
class Candidate:
    target: object          # FetchedModel
    draft: object | None    # FetchedModel, or None for the prompt-lookup drafter
    hybrid: bool = False    # the draft model behind prompt lookup (--drafter hybrid)

    @property
    def drafter(self) -> str:
        return "lookup" if self.draft is None else "hybrid" if self.hybrid else "model"

    @property
    def name(self) -> str:
        draft = "lookup" if self.draft is None else \
            ("lookup/" if self.hybrid else "") + self.draft.spec.name
        return f"{self.target.spec.name} + {draft}"

    def bench_config(self, base: BenchConfig, **changes) -> BenchConfig:
        return dataclasses.replace(base, target_path=self.target.path,
                                   draft_path=self.draft.path if self.draft else None,
                                   drafter=self.drafter, **changes)


def split_prompts(prompts: list) -> tuple[list, list]:
    """Per task, alternate prompts between tuning and confirming (never tune on the numbers you
    report)."""
    tune, confirm, seen = [], [], {}
    for p in prompts:
        i = seen.get(p.task, 0)
        (tune if i % 2 == 0 else confirm).append(p)
        seen[p.task] = i + 1
    return tune, confirm


def predictions(results: dict, k_max: int) -> dict[str, list[dict]]:
    """Per task, the predicted end-to-end speedup of every k in 1..k_max from one static run at
    k_max: its probe, and its per-position survival (a model drafter) or its rounds replayed
    at each k (lookup and the hybrid, whose drafts per round vary)."""
    summ = summarize(results)
    probe = results["cost_probe"]
    fixed = results["settings"].get("drafter", "model") == "model"
    out = {}
    for task, s in summ.items():
        if task == OVERALL or "per_position_acceptance_pct" not in s:
            continue
        survival = [p / 100.0 for p in s["per_position_acceptance_pct"]]
        sd = [r for r in results["runs"] if r["task"] == task and r["mode"] == "static"]
        rows = []
        for k in range(1, k_max + 1):
            pred = predict_from_probe(probe, survival[:k], k, sd) if fixed else \
                predict_from_rounds(probe, k, sd)
            if pred:
                rows.append({"k": k, "predicted_speedup": pred[0]})
        out[task] = {"rows": rows, "raw_tok_s": s["raw_tok_s"],
                     "acceptance_pct": s.get("acceptance_pct")}
    return out


def target_perplexities(candidates: list[Candidate], threads: int, log: Log) -> dict:
    """The quality proxy beside the speed: each distinct target's perplexity on the built-in
    text (cpuspec quality measures agreement too)."""
    from .engine import Model, Session
    from .quality import QUALITY_TEXT, perplexity
    out = {}
    for cand in candidates:
        name = cand.target.spec.name
        if name in out:
            continue
        log(f"tune: perplexity of {name}")
        with Model(cand.target.path) as m:
            tokens = m.tokenize(QUALITY_TEXT)
            with Session(m, len(tokens) + 16, threads) as s:
                out[name] = perplexity(s, tokens)
    return out


def command_for(cfg: BenchConfig, cand: Candidate, k: int, task: str) -> str:
    """The `cpuspec bench` line that reproduces a recommendation."""
    from .tasks import SUITES
    args = ["cpuspec", "bench", "--target", str(cand.target.path)]
    args += ["--draft", str(cand.draft.path)] if cand.draft else []
    args += ["--drafter", cand.drafter] if cand.drafter != "model" else []
    args += ["-k", str(k), "--threads", str(cfg.threads), "--max-tokens", str(cfg.max_tokens)]
    args += ["--tasks", task] if task in SUITES else ["--prompts", "YOUR_PROMPTS.jsonl"]
    return shlex.join(args)


def run_tune(cfg: BenchConfig, candidates: list[Candidate], log: Log = lambda _: None,
             k_max: int = K_MAX, confirm: bool = True, on_update=None,
             budget_s: float | None = None) -> dict:
    """Measure, predict, confirm (see the module's docstring). With budget_s, candidates and
    confirmations that would start after it are skipped, and the record says which."""
    start = time.monotonic()

    def over_budget(what: str) -> bool:
        if budget_s is not None and time.monotonic() - start > budget_s:
            log(f"tune: budget of {budget_s / 60:.0f} min spent; skipping {what}")
            doc["skipped_for_budget"].append(what)
            return True
        return False

    tune_prompts, confirm_prompts = split_prompts(cfg.prompts)
    if not tune_prompts or (confirm and not confirm_prompts):
        raise ValueError("tune needs at least 2 prompts per task (one to tune on, one to "
                         "confirm on); raise --prompts-per-task")
    doc: dict = {"kind": "tune", "k_max": k_max, "candidates": [c.name for c in candidates],
                 "tune_prompts": [p.prompt_id for p in tune_prompts],
                 "confirm_prompts": [p.prompt_id for p in confirm_prompts],
                 "measured": [], "recommendations": {}, "skipped_for_budget": []}
    base = dataclasses.replace(cfg, policies=["static"], warmup=1)
    measured = []
    for i, cand in enumerate(candidates):
        if i and over_budget(cand.name):
            continue
        log(f"tune {i + 1}/{len(candidates)}: {cand.name}, static k = {k_max} on "
            f"{len(tune_prompts)} prompts")
        res = run_bench(cand.bench_config(base, prompts=tune_prompts, k=k_max), log)
        doc["measured"].append({"candidate": cand.name, "results": res,
                                "predictions": predictions(res, k_max)})
        measured.append(cand)
        if on_update:
            on_update(doc)
    doc["target_perplexity"] = target_perplexities(measured, cfg.threads, log)
    reference_raw = {t: p["raw_tok_s"] for t, p in doc["measured"][0]["predictions"].items()}
    tasks = list(reference_raw)
    for task in tasks:
        options = []
        for cand, m in zip(measured, doc["measured"]):
            p = m["predictions"].get(task)
            for row in (p["rows"] if p else []):
                options.append({"candidate": cand.name, "k": row["k"],
                                "predicted_speedup": row["predicted_speedup"],
                                "predicted_vs_reference_raw": row["predicted_speedup"]
                                * p["raw_tok_s"] / reference_raw[task], "_cand": cand})
        best = max(options, key=lambda o: o["predicted_vs_reference_raw"])
        rec = {k: v for k, v in best.items() if k != "_cand"}
        rec["pays"] = best["predicted_speedup"] > 1.0
        rec["command"] = command_for(cfg, best["_cand"], best["k"], task)
        rec["top"] = [{k: v for k, v in o.items() if k != "_cand"} for o in
                      sorted(options, key=lambda o: -o["predicted_vs_reference_raw"])[:5]]
        if confirm and rec["pays"] and not over_budget(f"confirming {task}"):
            prompts = [p for p in confirm_prompts if p.task == task]
            log(f"tune: confirming {task}: {best['candidate']}, k = {best['k']} on "
                f"{len(prompts)} other prompts")
            res = run_bench(best["_cand"].bench_config(base, prompts=prompts, k=best["k"]),
                            log)
            s = res["summary"][task]
            rec["confirmed"] = {"measured_speedup": s["sd_speedup"],
                                "measured_speedup_ci": s.get("sd_speedup_ci"),
                                "predicted_on_these_prompts": s.get("predicted_speedup"),
                                "audit": s["audit"], "raw_tok_s": s["raw_tok_s"],
                                "sd_tok_s": s["sd_tok_s"],
                                "vs_reference_raw": s["sd_tok_s"] / reference_raw[task]}
            doc.setdefault("confirm_runs", []).append(res)
        doc["recommendations"][task] = rec
        if on_update:
            on_update(doc)
    doc["complete"] = True
    return doc


def render_tune(doc: dict) -> str:
    from tabulate import tabulate
    rows = []
    for task, r in doc["recommendations"].items():
        c = r.get("confirmed", {})
        ci = c.get("measured_speedup_ci")
        ppl = doc.get("target_perplexity", {}).get(r["candidate"].split(" + ")[0])
        rows.append([task, r["candidate"] if r["pays"] else "SD OFF (raw decoding)",
                     r["k"] if r["pays"] else "-", f"{r['predicted_speedup']:.2f}",
                     f"{c['measured_speedup']:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]"
                                                        if ci else "") if c else "-",
                     f"{r['predicted_vs_reference_raw']:.2f}",
                     f"{c['vs_reference_raw']:.2f}" if c else "-",
                     f"{c['audit']['identical']}/{c['audit']['n']}" if c else "-",
                     f"{ppl:.2f}" if ppl and r["pays"] else "-"])
    lines = [tabulate(rows, headers=["task", "recommended target + draft", "k",
                                     "predicted ×raw", "measured ×raw [95% CI]",
                                     "predicted ×ref raw", "measured ×ref raw", "same output",
                                     "target perplexity"],
                      disable_numparse=True),
             "target perplexity on the built-in text: " + ", ".join(
                 f"{n} {v:.2f}" for n, v in doc.get("target_perplexity", {}).items()),
             f"(×raw: against raw decoding on the same target; ×ref raw: against raw decoding on "
             f"the first target, {doc['candidates'][0].split(' + ')[0]}; measured on prompts "
             f"{', '.join(doc['confirm_prompts'])}, chosen on {', '.join(doc['tune_prompts'])})"]
    for task, r in doc["recommendations"].items():
        if r["pays"]:
            lines.append(f"{task}: {r['command']}")
        else:
            lines.append(f"{task}: no configuration pays (best predicted "
                         f"{r['predicted_speedup']:.2f}× at k = {r['k']} with {r['candidate']})")
    return "\n".join(lines)
