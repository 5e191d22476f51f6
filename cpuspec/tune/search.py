"""`cpuspec tune`: find the configuration where SD pays, guided by the cost model.

0. Rank: the cost curve of every (target, draft) pair first (seconds each): the best speedup
   its curve allows if every draft were accepted, (k + 1)·V(1) ÷ (k·d + V(k + 1)), d = 0 for
   prompt lookup and the hybrid. A candidate whose ceiling is ≤ 1 is skipped (even a = k + 1
   cannot beat 1 + α + β); the rest are measured most promising first, so a budget is spent
   where it can pay.
0b. Pilot: a ceiling is no ranking (a drafter that costs nothing always has the highest), so
   each drafter (the draft model, lookup, the hybrid) makes one short run at k_max on the first
   choosing prompt of each task, on the first target it is offered with. A drafter's acceptance
   hardly depends on the target's quant (the same weights, rounded differently), so every
   candidate is ranked by the speedup its own cost curve gives at its drafter's pilot
   acceptance (the better of ×own raw and ×reference raw); the measuring order follows it.
1. Measure: for every candidate left, one static run at k_max on the choosing prompts. Its cost
   probe gives V(n) for n = 1..k_max+1 and the draft's cost; its rounds give, per task, the
   survival P(n_accepted ≥ i) for every i ≤ k_max, which serves every smaller k (greedy
   drafts do not depend on k). A target none of whose candidates is measured gets a raw run,
   so raw decoding on it stays an answer.
2. Predict every (candidate, k) per task, end to end, with the same function that predicts a
   bench run (predict.predict_from_probe), against raw decoding on the same target and on the
   reference (first) target.
3. Confirm every answer printed, on the other prompts: an SD answer by raw and static runs on
   its target, raw decoding on another target by raw runs; the reference target's raw speed is
   measured on the same prompts (never scaled from the choosing runs), so "× reference raw" is
   a paired ratio with its interval (≥ 5 prompts) or range.
4. With --depths: each paying SD answer's cost curve at every depth (that much context held
   before the prompt), and its speedup predicted there from that curve and the choosing runs'
   acceptance: where SD stops (or starts) paying as the context grows.
"""
from __future__ import annotations

import dataclasses
import shlex
import statistics
import time
from typing import Callable

from cpuspec.harness.bench import BenchConfig, run_bench
from cpuspec.tune.candidates import (Candidate, Option, PILOT_TOKENS, calibrate_depths, drafter_key,
                         pilot_rank, pooled_probe, predict_at_depths, predictions,
                         rank_candidates, run_pilots)
from cpuspec.core.costs import round_terms
from cpuspec.analysis.predict import replay_inputs
from cpuspec.results.records import CostProbe
from cpuspec.analysis.stats import speedup_stats
from cpuspec.analysis.summary import OVERALL, summarize
from cpuspec.inputs.tasks import ALL_TASKS

Log = Callable[[str], None]
K_MAX = 8
# Per task, prompts 1, 4, 7, ... choose and the others confirm: the built-in suites' 8 prompts
# give 3 to choose on and 5 to confirm on, the fewest an interval is printed from.
CHOOSE_EVERY = 3
# With a budget, measuring candidates stops at this share of it: the rest confirms the answers
# (machine C's `--budget 12` spent all of it measuring and confirmed nothing).
MEASURE_SHARE = 0.6
# SD is the "fastest" answer only where its predicted gain over raw decoding on the same target
# exceeds this: the prediction's error (machine C: 1.02-1.04x predicted, 0.87-0.89x measured;
# the project aims at +-10 %) must not decide between SD and raw.
FASTEST_SD_MARGIN = 0.10


def split_prompts(prompts: list, every: int = CHOOSE_EVERY) -> tuple[list, list]:
    """Per task, prompts 1, 1 + every, 1 + 2·every, ... to choose on, the others to confirm on
    (never confirm on the numbers you chose with)."""
    tune, confirm, seen = [], [], {}
    for p in prompts:
        i = seen.get(p.task, 0)
        (tune if i % every == 0 else confirm).append(p)
        seen[p.task] = i + 1
    return tune, confirm


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
    if cand is None:
        args = ["cpuspec", "bench", "--target", str(target.path), "--policy", "off"]
    else:
        args = ["cpuspec", "bench", "--target", str(cand.target.path)]
        args += ["--draft", str(cand.draft.path)] if cand.draft else []
        args += ["--drafter", cand.drafter] if cand.drafter != "model" else []
        args += ["-k", str(k)]
        if cand.draft and cfg.draft_window:
            args += ["--draft-window", ",".join(map(str, cfg.draft_window))]
    args += ["--threads", str(cfg.threads), "--max-tokens", str(cfg.max_tokens)]
    args += ["--tasks", task] if task in ALL_TASKS else ["--prompts", "YOUR_PROMPTS.jsonl"]
    return shlex.join(args)


def raw_speeds(doc: dict) -> dict[tuple[str, str], float]:
    """Raw end-to-end t/s per (target, task) on the choosing prompts: the mean over every
    choosing run with that target (its candidates' runs and its own raw run)."""
    raws: dict[tuple[str, str], list[float]] = {}
    for m in doc["measured"] + [{"candidate": r["target"], "results": r["results"]}
                                for r in doc["raw_runs"]]:
        name = m["candidate"].split(" + ")[0]
        for task, s in summarize(m["results"]).items():
            if task != OVERALL:
                raws.setdefault((name, task), []).append(s["raw_tok_s"])
    return {key: statistics.fmean(v) for key, v in raws.items()}


def _confirmed(base_runs: list[dict], runs: list[dict]) -> dict:
    """A paired ratio of end-to-end speeds on the confirm prompts, with what it could show:
    the interval's half-width is the smallest difference from 1 it resolves."""
    s = speedup_stats(base_runs, runs)
    s["resolves"] = (s["ci"][1] - s["ci"][0]) / 2 if s["ci"] else None
    return s


def run_tune(cfg: BenchConfig, candidates: list[Candidate], log: Log = lambda _: None,
             k_max: int = K_MAX, confirm: bool = True, on_update=None,
             budget_s: float | None = None, pilot: bool = True,
             depths: list[int] | None = None) -> dict:
    """Rank, measure, predict, confirm (see the module's docstring). With budget_s, steps that
    would start after it are skipped, and the record says which."""
    start = time.monotonic()

    def over_budget(what: str, share: float = 1.0) -> bool:
        if budget_s is not None and time.monotonic() - start > share * budget_s:
            log(f"tune: {share * budget_s / 60:.1f} of the {budget_s / 60:.0f} min budget spent"
                + (" on measuring" if share < 1 else "") + f"; skipping {what}")
            doc["skipped_for_budget"].append(what)
            return True
        return False

    def update():
        if on_update:
            on_update(doc)

    tune_prompts, confirm_prompts = split_prompts(cfg.prompts)
    if not tune_prompts or (confirm and not confirm_prompts):
        raise ValueError("tune needs at least 2 prompts per task (one to tune on, one to "
                         "confirm on); raise --prompts-per-task")
    doc: dict = {"kind": "tune", "k_max": k_max, "candidates": [c.name for c in candidates],
                 "tune_prompts": [p.prompt_id for p in tune_prompts],
                 "confirm_prompts": [p.prompt_id for p in confirm_prompts],
                 "ranking": [], "measured": [], "raw_runs": [], "recommendations": {},
                 "skipped_for_budget": []}
    base = dataclasses.replace(cfg, policies=["static"], warmup=1)
    raw_base = dataclasses.replace(cfg, policies=[], warmup=1, drafter="lookup",
                                   draft_path=None, draft_window=None, k=1)

    ranking = rank_candidates(cfg, candidates, k_max, log)
    doc["ranking"] = [_public(r) for r in ranking]
    update()
    if pilot:
        firsts: dict[str, object] = {}
        for p in tune_prompts:           # the first choosing prompt of each task
            firsts.setdefault(p.task, p)
        pilot_prompts = list(firsts.values())
        pilots = run_pilots(base, candidates, ranking, pilot_prompts, k_max, log)
        ref_v1 = next(CostProbe.of(r["_probe"]).t for c, r in zip(candidates, ranking)
                      if c.target.spec.name == candidates[0].target.spec.name)
        doc["pilot_prompts"] = [p.prompt_id for p in pilot_prompts]
        doc["pilot_tokens"] = PILOT_TOKENS
        doc["pilots"] = list(pilots.values())
        for cand, rank, public in zip(candidates, ranking, doc["ranking"]):
            if drafter_key(cand) in pilots:
                public.update(pilot_rank(cand, rank["_probe"], pilots[drafter_key(cand)],
                                         ref_v1, k_max))
        update()
    order = sorted(zip(candidates, doc["ranking"]), key=lambda cr: (
        -cr[1].get("pilot_score", float("-inf")), -cr[1]["ceiling"]))
    measured, results = [], []
    for cand, rank in order:
        if rank["ruled_out"]:
            log(f"tune: {cand.name}: skipped, its cost curve allows at most "
                f"{rank['ceiling']:.2f}× even with every draft accepted")
            continue
        if measured and over_budget(cand.name, MEASURE_SHARE):
            continue
        log(f"tune {len(measured) + 1}: {cand.name}, static k = {k_max} on "
            f"{len(tune_prompts)} prompts (ceiling {rank['ceiling']:.2f}×)")
        res = run_bench(cand.bench_config(base, prompts=tune_prompts, k=k_max), log)
        doc["measured"].append({"candidate": cand.name, "results": res,
                                "predictions": predictions(res, k_max)})
        measured.append(cand)
        results.append(res)
        update()
    # Raw decoding on every target: from its candidates' runs, else from a raw run of its own.
    # The first target's is the yardstick of every answer: never skipped for the budget.
    targets = {c.target.spec.name: c.target for c in candidates}
    reference = candidates[0].target.spec.name
    for name, target in targets.items():
        if any(c.target.spec.name == name for c in measured) or \
                (name != reference and results and
                 over_budget(f"raw run of {name}", MEASURE_SHARE)):
            continue
        log(f"tune: {name}: raw decoding on {len(tune_prompts)} prompts (no SD candidate "
            "of it measured)")
        res = run_bench(dataclasses.replace(raw_base, target_path=target.path,
                                            prompts=tune_prompts), log)
        doc["raw_runs"].append({"target": name, "results": res})
        results.append(res)
        update()
    # Every candidate priced with one curve per target and per draft model (pool_probes)
    # (the ranking shares one probe among a target's candidates: each counted once, under a
    # candidate with its draft model where there is one)
    seen: dict[int, tuple[Candidate, dict]] = {}
    for c, r in zip(candidates, ranking):
        if id(r["_probe"]) not in seen or seen[id(r["_probe"])][0].draft is None:
            seen[id(r["_probe"])] = (c, r["_probe"])
    doc["cost_curves"] = [{"candidate": c.name, "cost_probe": p} for c, p in seen.values()]
    curves = list(seen.values()) + [(c, m["results"]["cost_probe"])
                                    for c, m in zip(measured, doc["measured"])]
    for cand, m in zip(measured, doc["measured"]):
        pooled = pooled_probe(cand, m["results"], curves)
        m["predictions"] = predictions(m["results"], k_max, pooled)
        m["costs_from"] = {"target_probes": pooled.get("pooled_from", 1),
                           "draft_probes": pooled.get("draft_pooled_from", 0),
                           "verify_s": pooled["verify_s"], "draft_s": pooled["draft_s"]}
    update()
    doc["target_perplexity"] = target_perplexities(doc["measured"] + [
        {"candidate": r["target"], "results": r["results"]} for r in doc["raw_runs"]])
    raw_speed = raw_speeds(doc)
    doc["reference_target"] = reference
    tasks = list(dict.fromkeys(p.task for p in tune_prompts))
    raw_confirm: dict[str, dict] = {}     # target → its raw runs on the confirm prompts
    chosen: dict[str, Option] = {}        # task → its paying best_sd option, for the depths

    def raw_runs_on(name: str, task: str) -> list[dict] | None:
        if name not in raw_confirm:
            if over_budget(f"raw runs of {name} on the confirm prompts"):
                return None
            log(f"tune: raw decoding of {name} on the {len(confirm_prompts)} confirm prompts")
            raw_confirm[name] = run_bench(dataclasses.replace(
                raw_base, target_path=targets[name].path, prompts=confirm_prompts), log)
            doc.setdefault("confirm_runs", []).append(raw_confirm[name])
        return [r for r in raw_confirm[name]["runs"] if r["task"] == task]

    for task in tasks:
        if (reference, task) not in raw_speed:
            continue
        ref_raw = raw_speed[(reference, task)]
        sd_options = []
        for cand, m in zip(measured, doc["measured"]):
            p = m["predictions"].get(task)
            own = raw_speed.get((cand.target.spec.name, task), ref_raw)
            for row in (p["rows"] if p else []):
                sd_options.append(Option(cand.name, row["k"], row["predicted_speedup"],
                                         row["predicted_speedup"] * own / ref_raw,
                                         cand=cand, results=m["results"]))
        raw_options = [Option(f"{t} (SD off)", 0, 1.0, raw_speed[(t, task)] / ref_raw,
                              target=targets[t]) for t in targets if (t, task) in raw_speed]
        eligible = [o for o in sd_options if o.predicted_speedup > 1 + FASTEST_SD_MARGIN] \
            + raw_options
        fastest = max(eligible, key=lambda o: o.predicted_vs_reference_raw)
        rec = {"recommended": fastest.public(),
               "top": [o.public() for o in sorted(eligible, key=lambda o:
                                                  -o.predicted_vs_reference_raw)[:5]]}
        rec["recommended"]["sd"] = fastest.k > 0
        rec["recommended"]["command"] = command_for(cfg, fastest.cand, fastest.k, task,
                                                    fastest.target)
        best_sd = max(sd_options, key=lambda o: o.predicted_speedup) if sd_options else None
        if best_sd is None:   # every candidate ruled out by its cost curve (or the budget)
            top = max(doc["ranking"], key=lambda r: r["ceiling"])
            rec["best_sd"] = {"candidate": top["candidate"], "k": top["ceiling_k"],
                              "predicted_speedup": top["ceiling"], "pays": False,
                              "ruled_out_by_cost_curve": True,
                              "predicted_vs_reference_raw": float("nan"), "command": ""}
        else:
            rec["best_sd"] = best_sd.public()
            rec["best_sd"]["pays"] = best_sd.predicted_speedup > 1.0
            rec["best_sd"]["command"] = command_for(cfg, best_sd.cand, best_sd.k, task)
            rec["best_sd"]["terms"] = why_terms(best_sd.results, task, best_sd.k)
        to_confirm = [("best_sd", best_sd)] if rec["best_sd"]["pays"] else []
        if fastest.k == 0:
            if fastest.target.spec.name != reference:
                to_confirm.append(("recommended", fastest))
        elif best_sd is None or fastest.key != best_sd.key:
            to_confirm.append(("recommended", fastest))
        prompts = [p for p in confirm_prompts if p.task == task]
        for key, option in to_confirm:
            if not confirm or over_budget(f"confirming {task} ({key})"):
                continue
            if option.k == 0:     # raw decoding on another target, against the reference's
                other = raw_runs_on(option.target.spec.name, task)
                ref = raw_runs_on(reference, task) if other is not None else None
                if ref is None:
                    continue
                vs_ref = _confirmed(ref, other)
                rec[key]["confirmed"] = {"vs_reference_raw": vs_ref["speedup"],
                                         "vs_reference_raw_stats": vs_ref,
                                         "n_prompts": vs_ref["units"]}
                update()
                continue
            log(f"tune: confirming {task}: {option.candidate}, k = {option.k} on "
                f"{len(prompts)} other prompts")
            res = run_bench(option.cand.bench_config(base, prompts=prompts, k=option.k), log)
            doc.setdefault("confirm_runs", []).append(res)
            s = summarize(res)[task]
            raw = [r for r in res["runs"] if r["mode"] == "raw"]
            sd = [r for r in res["runs"] if r["mode"] == "static"]
            own = _confirmed(raw, sd)
            ref = raw if option.cand.target.spec.name == reference else \
                raw_runs_on(reference, task)
            vs_ref = _confirmed(ref, sd) if ref is not None else None
            rec[key]["confirmed"] = {
                "measured_speedup": s["sd_speedup"], "measured_speedup_ci": own["ci"],
                "measured_speedup_range": own["range"], "n_prompts": own["units"],
                "resolves": own["resolves"],
                "predicted_on_these_prompts": s.get("predicted_speedup"),
                "predicted_from": s.get("predicted_from"),
                "audit": s["audit"], "raw_tok_s": s["raw_tok_s"], "sd_tok_s": s["sd_tok_s"],
                "vs_reference_raw": vs_ref["speedup"] if vs_ref else None,
                "vs_reference_raw_stats": vs_ref}
            if key == "best_sd" and rec["recommended"]["sd"] and fastest.key == best_sd.key:
                rec["recommended"]["confirmed"] = rec[key]["confirmed"]
            update()
        doc["recommendations"][task] = rec
        if best_sd is not None and rec["best_sd"]["pays"]:
            chosen[task] = best_sd
        update()
    if depths:
        doc["depth_predictions"] = predict_at_depths(cfg, chosen, depths, k_max, log,
                                                     over_budget)
        calibrate_depths(doc["depth_predictions"], doc["recommendations"])
        update()
    doc["complete"] = True
    return doc
