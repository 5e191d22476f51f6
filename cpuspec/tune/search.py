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
from cpuspec.analysis.predict import gated_runs, replay_inputs
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


def why_terms(results: dict, task: str, k: int, p_min: float = 0.0) -> dict:
    """a, α, β of a candidate's tuning run on one task, replayed at k (under a p-min gate):
    which one is short."""
    sd = [r for r in results["runs"] if r["task"] == task and r["mode"] == "static"]
    gate_k = None
    if p_min:
        sd, gate_k = gated_runs(sd, p_min) or [], results["settings"]["k"]
    rounds, share, catchup = replay_inputs(sd)
    if not rounds:
        return {}
    a, alpha, beta = round_terms(results["cost_probe"], rounds, k, share, catchup, gate_k)
    return {"a": a, "alpha": alpha, "beta": beta, "break_even_a": 1.0 + alpha + beta}


def command_for(cfg: BenchConfig, cand: Candidate | None, k: int, task: str,
                target=None, p_min: float = 0.0) -> str:
    """The `cpuspec bench` line that reproduces a recommendation (k = 0: raw decoding on
    `target`)."""
    if cand is None:
        args = ["cpuspec", "bench", "--target", str(target.path), "--policy", "off"]
    else:
        args = ["cpuspec", "bench", "--target", str(cand.target.path)]
        args += ["--draft", str(cand.draft.path)] if cand.draft else []
        args += ["--drafter", cand.drafter] if cand.drafter != "model" else []
        args += ["-k", str(k)] + (["--p-min", f"{p_min:g}"] if p_min else [])
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
    tune_prompts, confirm_prompts = split_prompts(cfg.prompts)
    if not tune_prompts or (confirm and not confirm_prompts):
        raise ValueError("tune needs at least 2 prompts per task (one to tune on, one to "
                         "confirm on); raise --prompts-per-task")
    t = _Search(cfg, candidates, log, k_max, confirm, on_update, budget_s, tune_prompts,
                confirm_prompts)
    ranking = rank_candidates(cfg, candidates, k_max, log)
    t.doc["ranking"] = [_public(r) for r in ranking]
    t.update()
    if pilot:
        t.run_pilots(ranking)
    t.measure_candidates()
    t.measure_raw_targets()
    t.price(ranking)
    t.doc["target_perplexity"] = target_perplexities(t.doc["measured"] + [
        {"candidate": r["target"], "results": r["results"]} for r in t.doc["raw_runs"]])
    t.raw_speed = raw_speeds(t.doc)
    t.doc["reference_target"] = t.reference
    for task in dict.fromkeys(p.task for p in tune_prompts):
        if (t.reference, task) in t.raw_speed:
            t.recommend(task)
    if depths:
        t.doc["depth_predictions"] = predict_at_depths(cfg, t.chosen, depths, k_max, log,
                                                       t.over_budget)
        calibrate_depths(t.doc["depth_predictions"], t.doc["recommendations"])
        t.update()
    t.doc["complete"] = True
    return t.doc


class _Search:
    """One tune run's state: the document it grows, the budget clock, the candidates measured
    and the raw runs each answer is compared with."""

    def __init__(self, cfg: BenchConfig, candidates: list[Candidate], log: Log, k_max: int,
                 confirm: bool, on_update, budget_s: float | None, tune_prompts: list,
                 confirm_prompts: list):
        self.cfg, self.candidates, self.log, self.k_max = cfg, candidates, log, k_max
        self.confirm, self.on_update, self.budget_s = confirm, on_update, budget_s
        self.tune_prompts, self.confirm_prompts = tune_prompts, confirm_prompts
        self.start = time.monotonic()
        self.doc: dict = {"kind": "tune", "k_max": k_max,
                          "candidates": [c.name for c in candidates],
                          "tune_prompts": [p.prompt_id for p in tune_prompts],
                          "confirm_prompts": [p.prompt_id for p in confirm_prompts],
                          "ranking": [], "measured": [], "raw_runs": [], "recommendations": {},
                          "skipped_for_budget": []}
        # static runs; a draft model's keep their draft confidences, which price every p-min
        self.base = dataclasses.replace(cfg, policies=["static"], warmup=1,
                                        record_confidence=True)
        self.raw_base = dataclasses.replace(cfg, policies=[], warmup=1, drafter="lookup",
                                            draft_path=None, draft_window=None, k=1)
        self.targets = {c.target.spec.name: c.target for c in candidates}
        self.reference = candidates[0].target.spec.name
        self.measured: list[Candidate] = []
        self.results: list[dict] = []
        self.raw_speed: dict = {}
        self.raw_confirm: dict[str, dict] = {}   # target → its raw runs on the confirm prompts
        self.chosen: dict[str, Option] = {}      # task → its paying best_sd, for the depths

    def over_budget(self, what: str, share: float = 1.0) -> bool:
        if self.budget_s is not None and time.monotonic() - self.start > share * self.budget_s:
            self.log(f"tune: {share * self.budget_s / 60:.1f} of the "
                     f"{self.budget_s / 60:.0f} min budget spent"
                     + (" on measuring" if share < 1 else "") + f"; skipping {what}")
            self.doc["skipped_for_budget"].append(what)
            return True
        return False

    def update(self) -> None:
        if self.on_update:
            self.on_update(self.doc)

    def run_pilots(self, ranking: list[dict]) -> None:
        """A short pilot per drafter on the first choosing prompt of each task; its
        acceptance, through each candidate's own curve, ranks the candidates."""
        firsts: dict[str, object] = {}
        for p in self.tune_prompts:
            firsts.setdefault(p.task, p)
        pilot_prompts = list(firsts.values())
        pilots = run_pilots(self.base, self.candidates, ranking, pilot_prompts, self.k_max,
                            self.log)
        ref_v1 = next(CostProbe.of(r["_probe"]).t for c, r in zip(self.candidates, ranking)
                      if c.target.spec.name == self.reference)
        self.doc["pilot_prompts"] = [p.prompt_id for p in pilot_prompts]
        self.doc["pilot_tokens"] = PILOT_TOKENS
        self.doc["pilots"] = list(pilots.values())
        for cand, rank, public in zip(self.candidates, ranking, self.doc["ranking"]):
            if drafter_key(cand) in pilots:
                public.update(pilot_rank(cand, rank["_probe"], pilots[drafter_key(cand)],
                                         ref_v1, self.k_max))
        self.update()

    def measure_candidates(self) -> None:
        """One static run at k_max per candidate on the tune prompts, most promising first;
        those whose cost curve cannot pay are skipped."""
        order = sorted(zip(self.candidates, self.doc["ranking"]), key=lambda cr: (
            -cr[1].get("pilot_score", float("-inf")), -cr[1]["ceiling"]))
        for cand, rank in order:
            if rank["ruled_out"]:
                self.log(f"tune: {cand.name}: skipped, its cost curve allows at most "
                         f"{rank['ceiling']:.2f}× even with every draft accepted")
                continue
            if self.measured and self.over_budget(cand.name, MEASURE_SHARE):
                continue
            self.log(f"tune {len(self.measured) + 1}: {cand.name}, static k = {self.k_max} on "
                     f"{len(self.tune_prompts)} prompts (ceiling {rank['ceiling']:.2f}×)")
            res = run_bench(cand.bench_config(self.base, prompts=self.tune_prompts,
                                              k=self.k_max), self.log)
            self.doc["measured"].append({"candidate": cand.name, "results": res,
                                         "predictions": predictions(res, self.k_max)})
            self.measured.append(cand)
            self.results.append(res)
            self.update()

    def measure_raw_targets(self) -> None:
        """Raw decoding on every target: from its candidates' runs, else from a raw run of its
        own. The first target's is the yardstick of every answer: never skipped for the
        budget."""
        for name, target in self.targets.items():
            if any(c.target.spec.name == name for c in self.measured) or \
                    (name != self.reference and self.results and
                     self.over_budget(f"raw run of {name}", MEASURE_SHARE)):
                continue
            self.log(f"tune: {name}: raw decoding on {len(self.tune_prompts)} prompts (no SD "
                     "candidate of it measured)")
            res = run_bench(dataclasses.replace(self.raw_base, target_path=target.path,
                                                prompts=self.tune_prompts), self.log)
            self.doc["raw_runs"].append({"target": name, "results": res})
            self.results.append(res)
            self.update()

    def price(self, ranking: list[dict]) -> None:
        """Every measured candidate priced with one curve per target and per draft model
        (pool_probes). The ranking shares one probe among a target's candidates: each counted
        once, under a candidate with its draft model where there is one."""
        seen: dict[int, tuple[Candidate, dict]] = {}
        for c, r in zip(self.candidates, ranking):
            if id(r["_probe"]) not in seen or seen[id(r["_probe"])][0].draft is None:
                seen[id(r["_probe"])] = (c, r["_probe"])
        doc = self.doc
        doc["cost_curves"] = [{"candidate": c.name, "cost_probe": p} for c, p in seen.values()]
        curves = list(seen.values()) + [(c, m["results"]["cost_probe"])
                                        for c, m in zip(self.measured, doc["measured"])]
        for cand, m in zip(self.measured, doc["measured"]):
            pooled = pooled_probe(cand, m["results"], curves)
            m["predictions"] = predictions(m["results"], self.k_max, pooled)
            m["costs_from"] = {"target_probes": pooled.get("pooled_from", 1),
                               "draft_probes": pooled.get("draft_pooled_from", 0),
                               "verify_s": pooled["verify_s"], "draft_s": pooled["draft_s"]}
        self.update()

    def raw_runs_on(self, name: str, task: str) -> list[dict] | None:
        """Raw decoding of target `name` on the confirm prompts of `task` (run once per
        target); None where the budget is spent."""
        if name not in self.raw_confirm:
            if self.over_budget(f"raw runs of {name} on the confirm prompts"):
                return None
            self.log(f"tune: raw decoding of {name} on the {len(self.confirm_prompts)} confirm "
                     "prompts")
            self.raw_confirm[name] = run_bench(dataclasses.replace(
                self.raw_base, target_path=self.targets[name].path,
                prompts=self.confirm_prompts), self.log)
            self.doc.setdefault("confirm_runs", []).append(self.raw_confirm[name])
        return [r for r in self.raw_confirm[name]["runs"] if r["task"] == task]

    def options(self, task: str) -> tuple[list[Option], list[Option]]:
        """Every measured candidate at every k, and raw decoding on every target, each with
        its predicted speed against the reference target's raw decoding."""
        ref_raw = self.raw_speed[(self.reference, task)]
        sd_options = []
        for cand, m in zip(self.measured, self.doc["measured"]):
            p = m["predictions"].get(task)
            own = self.raw_speed.get((cand.target.spec.name, task), ref_raw)
            for row in (p["rows"] if p else []):
                sd_options.append(Option(cand.name, row["k"], row["predicted_speedup"],
                                         row["predicted_speedup"] * own / ref_raw,
                                         cand=cand, results=m["results"],
                                         p_min=row.get("p_min", 0.0)))
        raw_options = [Option(f"{t} (SD off)", 0, 1.0, self.raw_speed[(t, task)] / ref_raw,
                              target=self.targets[t]) for t in self.targets
                       if (t, task) in self.raw_speed]
        return sd_options, raw_options

    def recommend(self, task: str) -> None:
        """The task's two answers (the fastest configuration, and where SD pays most), each
        confirmed on the other prompts."""
        sd_options, raw_options = self.options(task)
        eligible = [o for o in sd_options if o.predicted_speedup > 1 + FASTEST_SD_MARGIN] \
            + raw_options
        fastest = max(eligible, key=lambda o: o.predicted_vs_reference_raw)
        rec = {"recommended": fastest.public(),
               "top": [o.public() for o in sorted(eligible, key=lambda o:
                                                  -o.predicted_vs_reference_raw)[:5]]}
        rec["recommended"]["sd"] = fastest.k > 0
        rec["recommended"]["command"] = command_for(self.cfg, fastest.cand, fastest.k, task,
                                                    fastest.target, fastest.p_min)
        best_sd = max(sd_options, key=lambda o: o.predicted_speedup) if sd_options else None
        rec["best_sd"] = self.best_sd_answer(best_sd, task)
        to_confirm = [("best_sd", best_sd)] if rec["best_sd"]["pays"] else []
        if fastest.k == 0:
            if fastest.target.spec.name != self.reference:
                to_confirm.append(("recommended", fastest))
        elif best_sd is None or fastest.key != best_sd.key:
            to_confirm.append(("recommended", fastest))
        for key, option in to_confirm:
            if not self.confirm or self.over_budget(f"confirming {task} ({key})"):
                continue
            self.confirm_option(rec, key, option, task)
            if key == "best_sd" and option.k > 0 and rec["recommended"]["sd"] and \
                    fastest.key == best_sd.key:
                rec["recommended"]["confirmed"] = rec[key]["confirmed"]
            self.update()
        self.doc["recommendations"][task] = rec
        if best_sd is not None and rec["best_sd"]["pays"]:
            self.chosen[task] = best_sd
        self.update()

    def best_sd_answer(self, best_sd: Option | None, task: str) -> dict:
        if best_sd is None:   # every candidate ruled out by its cost curve (or the budget)
            top = max(self.doc["ranking"], key=lambda r: r["ceiling"])
            return {"candidate": top["candidate"], "k": top["ceiling_k"],
                    "predicted_speedup": top["ceiling"], "pays": False,
                    "ruled_out_by_cost_curve": True,
                    "predicted_vs_reference_raw": float("nan"), "command": ""}
        out = best_sd.public()
        out["pays"] = best_sd.predicted_speedup > 1.0
        out["command"] = command_for(self.cfg, best_sd.cand, best_sd.k, task,
                                     p_min=best_sd.p_min)
        out["terms"] = why_terms(best_sd.results, task, best_sd.k, best_sd.p_min)
        return out

    def confirm_option(self, rec: dict, key: str, option: Option, task: str) -> None:
        """Measure an answer on the task's confirm prompts: raw decoding on another target
        against the reference's, or raw vs SD with the lossless audit."""
        if option.k == 0:
            other = self.raw_runs_on(option.target.spec.name, task)
            ref = self.raw_runs_on(self.reference, task) if other is not None else None
            if ref is not None:
                vs_ref = _confirmed(ref, other)
                rec[key]["confirmed"] = {"vs_reference_raw": vs_ref["speedup"],
                                         "vs_reference_raw_stats": vs_ref,
                                         "n_prompts": vs_ref["units"]}
            return
        prompts = [p for p in self.confirm_prompts if p.task == task]
        gate = f", p-min {option.p_min:g}" if option.p_min else ""
        self.log(f"tune: confirming {task}: {option.candidate}, k = {option.k}{gate} on "
                 f"{len(prompts)} other prompts")
        res = run_bench(option.cand.bench_config(self.base, prompts=prompts, k=option.k,
                                                 p_min=option.p_min,
                                                 record_confidence=False), self.log)
        self.doc.setdefault("confirm_runs", []).append(res)
        s = summarize(res)[task]
        raw = [r for r in res["runs"] if r["mode"] == "raw"]
        sd = [r for r in res["runs"] if r["mode"] == "static"]
        own = _confirmed(raw, sd)
        ref = raw if option.cand.target.spec.name == self.reference else \
            self.raw_runs_on(self.reference, task)
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
