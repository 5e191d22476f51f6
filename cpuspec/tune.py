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
import statistics
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


def target_perplexities(measured: list[dict]) -> dict:
    """The quality proxy beside the speed: each distinct target's perplexity on the built-in
    text, as its bench run measured it (cpuspec quality measures agreement too)."""
    out = {}
    for m in measured:
        name = m["candidate"].split(" + ")[0]
        q = m["results"].get("quality")
        if q and name not in out:
            out[name] = q["target_perplexity"]
    return out


def _public(option: dict) -> dict:
    return {k: v for k, v in option.items() if not k.startswith("_")}


def why_terms(results: dict, task: str, k: int) -> dict:
    """a, α, β of a candidate's tuning run on one task, replayed at k: which one is short."""
    from .costs import round_terms
    from .report import replay_inputs
    sd = [r for r in results["runs"] if r["task"] == task and r["mode"] == "static"]
    rounds, share, catchup = replay_inputs(sd)
    if not rounds:
        return {}
    a, alpha, beta = round_terms(results["cost_probe"], rounds, k, share, catchup)
    return {"a": a, "alpha": alpha, "beta": beta, "break_even_a": 1.0 + alpha + beta}


def command_for(cfg: BenchConfig, cand: Candidate | None, k: int, task: str,
                target=None) -> str:
    """The `cpuspec bench` line that reproduces a recommendation (k = 0: raw decoding on
    `target`)."""
    from .tasks import SUITES
    if cand is None:
        args = ["cpuspec", "bench", "--target", str(target.path), "--policy", "off"]
    else:
        args = ["cpuspec", "bench", "--target", str(cand.target.path)]
        args += ["--draft", str(cand.draft.path)] if cand.draft else []
        args += ["--drafter", cand.drafter] if cand.drafter != "model" else []
        args += ["-k", str(k)]
    args += ["--threads", str(cfg.threads), "--max-tokens", str(cfg.max_tokens)]
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
    doc["target_perplexity"] = target_perplexities(doc["measured"])
    # Raw speed per (target, task): the mean over every tuning run with that target.
    raws: dict[tuple[str, str], list[float]] = {}
    for cand, m in zip(measured, doc["measured"]):
        for task, p in m["predictions"].items():
            raws.setdefault((cand.target.spec.name, task), []).append(p["raw_tok_s"])
    raw_speed = {key: statistics.fmean(v) for key, v in raws.items()}
    reference = measured[0].target.spec.name
    doc["reference_target"] = reference
    for task in doc["measured"][0]["predictions"]:
        ref_raw = raw_speed[(reference, task)]
        sd_options = []
        for cand, m in zip(measured, doc["measured"]):
            p = m["predictions"].get(task)
            own = raw_speed.get((cand.target.spec.name, task), ref_raw)
            for row in (p["rows"] if p else []):
                sd_options.append({"candidate": cand.name, "k": row["k"],
                                   "predicted_speedup": row["predicted_speedup"],
                                   "predicted_vs_reference_raw":
                                       row["predicted_speedup"] * own / ref_raw,
                                   "_cand": cand, "_results": m["results"]})
        raw_options = [{"candidate": f"{t} (SD off)", "k": 0, "predicted_speedup": 1.0,
                        "predicted_vs_reference_raw": raw_speed[(t, task)] / ref_raw,
                        "_target": c.target} for t, c in
                       {c.target.spec.name: c for c in measured}.items()
                       if (t, task) in raw_speed]
        fastest = max(sd_options + raw_options, key=lambda o: o["predicted_vs_reference_raw"])
        best_sd = max(sd_options, key=lambda o: o["predicted_speedup"])
        rec = {"recommended": _public(fastest), "best_sd": _public(best_sd),
               "top": [_public(o) for o in sorted(sd_options + raw_options, key=lambda o:
                                                  -o["predicted_vs_reference_raw"])[:5]]}
        rec["recommended"]["sd"] = fastest["k"] > 0
        rec["recommended"]["command"] = command_for(cfg, fastest.get("_cand"), fastest["k"],
                                                    task, fastest.get("_target"))
        rec["best_sd"]["pays"] = best_sd["predicted_speedup"] > 1.0
        rec["best_sd"]["command"] = command_for(cfg, best_sd["_cand"], best_sd["k"], task)
        rec["best_sd"]["terms"] = why_terms(best_sd["_results"], task, best_sd["k"])
        to_confirm = [("best_sd", best_sd)] if rec["best_sd"]["pays"] else []
        if rec["recommended"]["sd"] and (fastest["candidate"], fastest["k"]) != \
                (best_sd["candidate"], best_sd["k"]):
            to_confirm.append(("recommended", fastest))
        for key, option in to_confirm:
            if not confirm or over_budget(f"confirming {task} ({key})"):
                continue
            prompts = [p for p in confirm_prompts if p.task == task]
            log(f"tune: confirming {task}: {option['candidate']}, k = {option['k']} on "
                f"{len(prompts)} other prompts")
            res = run_bench(option["_cand"].bench_config(base, prompts=prompts,
                                                         k=option["k"]), log)
            s = res["summary"][task]
            rec[key]["confirmed"] = {
                "measured_speedup": s["sd_speedup"],
                "measured_speedup_ci": s.get("sd_speedup_ci"),
                "predicted_on_these_prompts": s.get("predicted_speedup"),
                "audit": s["audit"], "raw_tok_s": s["raw_tok_s"], "sd_tok_s": s["sd_tok_s"],
                # The reference's raw speed on these prompts is not measured: scaled by the
                # ratio of the tuning runs' raw speeds.
                "vs_reference_raw": s["sd_speedup"] * raw_speed[(option["_cand"].target.spec.name,
                                                                task)] / ref_raw}
            if key == "best_sd" and rec["recommended"]["sd"] and \
                    (fastest["candidate"], fastest["k"]) == (best_sd["candidate"], best_sd["k"]):
                rec["recommended"]["confirmed"] = rec[key]["confirmed"]
            doc.setdefault("confirm_runs", []).append(res)
        doc["recommendations"][task] = rec
        if on_update:
            on_update(doc)
    doc["complete"] = True
    return doc


def _measured(c: dict, key: str) -> str:
    if not c:
        return "-"
    ci = c.get("measured_speedup_ci") if key == "measured_speedup" else None
    return f"{c[key]:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def render_tune(doc: dict) -> str:
    from tabulate import tabulate
    ppl = doc.get("target_perplexity", {})
    ref = doc.get("reference_target") or doc["candidates"][0].split(" + ")[0]
    fast, sd, lines = [], [], []
    for task, r in doc["recommendations"].items():
        rec, best = r["recommended"], r["best_sd"]
        target = rec["candidate"].split(" + ")[0].removesuffix(" (SD off)")
        c = rec.get("confirmed", {})
        fast.append([task, rec["candidate"], rec["k"] or "-",
                     f"{rec['predicted_vs_reference_raw']:.2f}", _measured(c, "vs_reference_raw"),
                     f"{c['audit']['identical']}/{c['audit']['n']}" if c else "-",
                     f"{ppl[target]:.2f}" if target in ppl else "-"])
        c = best.get("confirmed", {})
        t = best.get("terms") or {}
        sd.append([task, best["candidate"], best["k"], f"{best['predicted_speedup']:.2f}",
                   _measured(c, "measured_speedup"), f"{best['predicted_vs_reference_raw']:.2f}",
                   _measured(c, "vs_reference_raw"),
                   f"{c['audit']['identical']}/{c['audit']['n']}" if c else "-",
                   f"{t['a']:.2f} vs {t['break_even_a']:.2f}" if t else "-"])
        lines.append(f"{task}: fastest: {rec['command']}")
        if best["pays"]:
            lines.append(f"{task}: SD pays most: {best['command']}")
        elif t:
            short = t["break_even_a"] - t["a"]
            lines.append(
                f"{task}: SD does not pay with any candidate: the best, {best['candidate']} at "
                f"k = {best['k']}, yields a = {t['a']:.2f} tokens per round against a round "
                f"cost of 1 + α + β = {t['break_even_a']:.2f} decodes (α = {t['alpha']:.2f} "
                f"drafting, β = {t['beta']:.2f} verifying); a is short by {short:.2f}")
    out = [f"Fastest per task, against raw decoding on {ref} (the first target); SD off "
           "where raw decoding on some target is faster than any SD configuration:",
           tabulate(fast, headers=["task", "configuration", "k", "predicted ×ref raw",
                                   "measured ×ref raw", "same output", "target perplexity"],
                    disable_numparse=True),
           "",
           "Where SD pays most, against raw decoding on the same target:",
           tabulate(sd, headers=["task", "target + draft", "k", "predicted ×raw",
                                 "measured ×raw [95% CI]", "predicted ×ref raw",
                                 "measured ×ref raw", "same output", "a vs 1+α+β"],
                    disable_numparse=True),
           "target perplexity on the built-in text: " + ", ".join(
               f"{n} {v:.2f}" for n, v in ppl.items()),
           f"(measured on prompts {', '.join(doc['confirm_prompts'])}, chosen on "
           f"{', '.join(doc['tune_prompts'])}; measured ×ref raw scales the measured ×raw by "
           "the tuning runs' raw speeds)"]
    if doc.get("skipped_for_budget"):
        out.append("skipped for the budget: " + "; ".join(doc["skipped_for_budget"]))
    return "\n".join(out + lines)
