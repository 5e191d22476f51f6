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
3. Confirm by a race, per task, on the other prompts (tune/race.py): the answers predicted
   fastest against the reference target's raw decoding (--race of them, SD at its k or raw
   decoding on a target), and the one where SD pays most, run in blocks up to the sequential
   design's looks; after each look a member clearly slower than the leader (or within ±5 % of
   it) stops, so a budget confirms more answers. The fastest answer is the race's leader,
   measured; each member's SD ×raw (with the lossless audit) and × reference raw are paired
   ratios with the design's interval (≥ 5 prompts) or a range.
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
from cpuspec.analysis.sequential import ALPHA, Design, look
from cpuspec.analysis.stats import paired_units, significance, speedup_stats, unit_speedups
from cpuspec.analysis.summary import OVERALL, summarize
from cpuspec.inputs.tasks import ALL_TASKS
from cpuspec.tune.race import RACE_SIZE, race_design, race_members, run_race
from cpuspec.report.tune import STOPPED

Log = Callable[[str], None]
K_MAX = 8
# Per task, prompts 1, 4, 7, ... choose and the others confirm: tune's default 12 prompts give
# 4 to choose on and 8 to confirm on (the race's looks at 5 and 8); 8 give 3 and 5, the fewest
# an interval is printed from.
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


def reused_probes(results: dict, what: str) -> dict | None:
    """The cost probe a choosing run measured first, for a confirm run of the same candidate
    to reuse (BenchConfig.probes): it spends its time on prompts, not on probing the same
    models again minutes later. Its end probe is not carried: a band of the drift over
    another run is not this run's (summary.py)."""
    return {"cost_probe": results["cost_probe"],
            "from": f"reused from tune's choosing run of {what}"} \
        if results.get("cost_probe") else None


# tune's raw runs on confirm prompts: raw decoding prices nothing, so no probe is measured
NO_PROBES = {"from": "none: raw decoding only (tune's race prices nothing from this run)"}


def _confirmed(base_runs: list[dict], runs: list[dict], design: Design | None = None) -> dict:
    """A paired ratio of end-to-end speeds on the confirm prompts, with what it could show:
    the interval's half-width is the smallest difference from 1 it resolves. With a design
    (the race's), the interval is the design's at the look the units stopped at, none between
    looks (a range then)."""
    s = speedup_stats(base_runs, runs)
    if design is not None and s["units"]:
        lk = look(unit_speedups(paired_units(base_runs, runs)), design)
        s.update(ci=lk["ci"], level=design.level, range=None if lk["ci"] else lk["range"],
                 significance=significance(lk["ci"]))
    s["resolves"] = (s["ci"][1] - s["ci"][0]) / 2 if s["ci"] else None
    return s


def run_tune(cfg: BenchConfig, candidates: list[Candidate], log: Log = lambda _: None,
             k_max: int = K_MAX, confirm: bool = True, on_update=None,
             budget_s: float | None = None, pilot: bool = True,
             depths: list[int] | None = None, race_size: int = RACE_SIZE,
             started: float | None = None) -> dict:
    """Rank, measure, predict, confirm (see the module's docstring). With budget_s, steps that
    would start after it are skipped, and the record says which; the budget counts the wall
    clock from `started` (time.monotonic() when the command began: loads, derivations and
    probes included), else from here. race_size: the answers predicted fastest that race per
    task in the confirmation (tune/race.py)."""
    tune_prompts, confirm_prompts = split_prompts(cfg.prompts)
    if not tune_prompts or (confirm and not confirm_prompts):
        raise ValueError("tune needs at least 2 prompts per task (one to tune on, one to "
                         "confirm on); raise --prompts-per-task")
    t = _Search(cfg, candidates, log, k_max, confirm, on_update, budget_s, tune_prompts,
                confirm_prompts, race_size)
    t.start = started if started is not None else t.start
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
    t.doc["wall_s"] = time.monotonic() - t.start      # from the command's start
    return t.doc


class _Search:
    """One tune run's state: the document it grows, the budget clock, the candidates measured
    and the raw runs each answer is compared with."""

    def __init__(self, cfg: BenchConfig, candidates: list[Candidate], log: Log, k_max: int,
                 confirm: bool, on_update, budget_s: float | None, tune_prompts: list,
                 confirm_prompts: list, race_size: int = RACE_SIZE):
        self.cfg, self.candidates, self.log, self.k_max = cfg, candidates, log, k_max
        self.confirm, self.on_update, self.budget_s = confirm, on_update, budget_s
        self.tune_prompts, self.confirm_prompts = tune_prompts, confirm_prompts
        self.start = time.monotonic()
        self.doc: dict = {"kind": "tune", "k_max": k_max,
                          "candidates": [c.name for c in candidates],
                          "tune_prompts": [p.prompt_id for p in tune_prompts],
                          "confirm_prompts": [p.prompt_id for p in confirm_prompts],
                          "ranking": [], "measured": [], "raw_runs": [], "recommendations": {},
                          "skipped_for_budget": [], "race_size": race_size}
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
        self.race_raw: dict[str, list[dict]] = {}   # target → its raw runs on confirm prompts
        self.race_size = race_size
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

    def raw_on(self, name: str, prompts: list, budget: str = "") -> list[dict]:
        """Raw decoding of target `name` on `prompts`: the raw runs a race block already made
        of it on them (the first SD member's, paired with its SD runs), a raw run for the
        rest; with `budget` (what it is for), none where the budget is spent."""
        have: dict = {}
        for r in self.race_raw.get(name, []):
            have.setdefault(r["prompt_id"], r)
        missing = [p for p in prompts if p.prompt_id not in have]
        if missing and not (budget and self.over_budget(budget)):
            res = run_bench(dataclasses.replace(
                self.raw_base, target_path=self.targets[name].path, prompts=missing,
                quality=False, probes=NO_PROBES), self.log)
            self.doc.setdefault("confirm_runs", []).append(res)
            self.race_raw.setdefault(name, []).extend(res["runs"])
            for r in res["runs"]:
                have.setdefault(r["prompt_id"], r)
        return [have[p.prompt_id] for p in prompts if p.prompt_id in have]

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
        """The task's two answers (the fastest configuration, and where SD pays most): the
        best few predicted race on the other prompts (tune/race.py), and the fastest answer is
        the race's leader, measured; the predicted fastest stays on record."""
        sd_options, raw_options = self.options(task)
        eligible = [o for o in sd_options if o.predicted_speedup > 1 + FASTEST_SD_MARGIN] \
            + raw_options
        fastest = max(eligible, key=lambda o: o.predicted_vs_reference_raw)
        best_sd = max(sd_options, key=lambda o: o.predicted_speedup) if sd_options else None
        rec = {"predicted_fastest": fastest.public(),
               "top": [o.public() for o in sorted(eligible, key=lambda o:
                                                  -o.predicted_vs_reference_raw)[:5]]}
        rec["best_sd"] = self.best_sd_answer(best_sd, task)
        yardstick = next((o for o in raw_options if o.target.spec.name == self.reference), None)
        members = race_members(eligible, best_sd if rec["best_sd"]["pays"] else None,
                               self.race_size, yardstick) if self.confirm else []
        raced = self.race(task, members)
        winner = raced.pop("_leader", None) or fastest
        rec["recommended"] = {**winner.public(), "sd": winner.k > 0,
                              "command": command_for(self.cfg, winner.cand, winner.k, task,
                                                     winner.target, winner.p_min)}
        rec["race"] = [{**st["option"].public(),
                        **{k: v for k, v in st.items() if k not in ("option", "runs", "speed")}}
                       for st in raced.values()]
        for key, option in (("recommended", winner), ("best_sd", best_sd)):
            if option is not None and option.key in raced and raced[option.key]["confirmed"]:
                rec[key]["confirmed"] = raced[option.key]["confirmed"]
        self.doc["recommendations"][task] = rec
        if best_sd is not None and rec["best_sd"]["pays"]:
            self.chosen[task] = best_sd
        self.update()

    def race(self, task: str, members: list[Option]) -> dict:
        """Run the members on the task's confirm prompts in blocks up to each look; after a
        look, a member clearly slower than the leader, or within the precision of it, stops
        (tune/race.py). Returns key → its record (state, prompts, confirmed), and under
        "_leader" the option ahead."""
        prompts = [p for p in self.confirm_prompts if p.task == task]
        if not members or not prompts:
            return {}
        design = race_design(len(prompts), len(members))
        by_key = {m.key: {"option": m, "runs": []} for m in members}
        self.log(f"tune: {task}: racing {len(members)} answers on up to {len(prompts)} other "
                 f"prompts (looks at {', '.join(map(str, design.looks))})")

        race = run_race(list(by_key), design, lambda alive, start, stop: self.race_block(
            task, [by_key[k] for k in alive], prompts[start:stop]))
        # each member's own figures: α split over the members as well as the looks, so the
        # leader's (picked from the same data) keeps its level too
        own = Design(max_units=len(prompts), alpha=ALPHA / len(members))
        for key, s in by_key.items():
            out = race["members"][key]
            if "behind" in out:
                out["behind"] = by_key[out["behind"]]["option"].candidate
                gate = f", p-min {key[2]:g}" if key[2] else ""
                self.log(f"tune: {task}: {s['option'].candidate} (k = {key[1]}{gate}) stopped "
                         f"at {out['at']} prompts: {STOPPED[out['state']]} the leader")
            s.update(out, speed=race["speed"][key])
            s["prompts"] = len({r["prompt_id"] for r in s["speed"]})
            s["confirmed"] = self.confirmed(s, task, own)
        lead = race["leader"]
        return {**by_key, "_leader": by_key[lead]["option"] if lead is not None else None}

    def race_block(self, task: str, members: list[dict], block: list) -> tuple[dict, bool]:
        """One block of prompts for every member still racing, SD members first (their raw
        runs serve raw decoding on their target): each member's runs of it, and False where
        the budget stopped the block (run_race's measure)."""
        got: dict = {}
        for s in sorted(members, key=lambda s: s["option"].k == 0):
            o = s["option"]
            if self.over_budget(f"racing {task}: {o.candidate}, k = {o.k}, from prompt "
                                f"{block[0].prompt_id}"):
                return got, False
            if o.k == 0:
                got[o.key] = self.raw_on(o.target.spec.name, block)
                continue
            gate = f", p-min {o.p_min:g}" if o.p_min else ""
            self.log(f"tune: confirming {task}: {o.candidate}, k = {o.k}{gate} on "
                     f"{len(block)} other prompts")
            res = run_bench(o.cand.bench_config(
                self.base, prompts=block, k=o.k, p_min=o.p_min, record_confidence=False,
                quality=False, probes=reused_probes(o.results, o.candidate)), self.log)
            self.doc.setdefault("confirm_runs", []).append(res)
            s["runs"].append(res)
            got[o.key] = [r for r in res["runs"] if r["mode"] == "static"]
            self.race_raw.setdefault(o.cand.target.spec.name, []).extend(
                r for r in res["runs"] if r["mode"] == "raw")
        return got, True

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

    def confirmed(self, s: dict, task: str, design: Design) -> dict | None:
        """What a race member measured: SD against raw on its own target (with the lossless
        audit), and against the reference target's raw decoding on the same prompts (its own
        raw runs where its target is the reference); each interval the design's at the look
        the member stopped at (a range between looks); none against the reference where the
        budget left its raw runs unmeasured."""
        o, ids = s["option"], {r["prompt_id"] for r in s["speed"]}
        if not ids or (o.k == 0 and o.target.spec.name == self.reference):
            return None
        runs = [r for res in s["runs"] for r in res["runs"]]
        raw = [r for r in runs if r["mode"] == "raw"]
        ref = raw if o.k and o.cand.target.spec.name == self.reference else self.raw_on(
            self.reference, [p for p in self.confirm_prompts if p.prompt_id in ids],
            f"raw runs of {self.reference} beside {o.candidate} ({task})")
        vs_ref = _confirmed(ref, s["speed"], design) if ref else None
        if o.k == 0:
            return vs_ref and {"vs_reference_raw": vs_ref["speedup"],
                               "vs_reference_raw_stats": vs_ref, "n_prompts": vs_ref["units"]}
        merged = {**s["runs"][0], "runs": runs,
                  "audit": [a for res in s["runs"] for a in res.get("audit", [])]}
        sm = summarize(merged)[task]
        own = _confirmed(raw, s["speed"], design)
        return {
            "measured_speedup": own["speedup"], "measured_speedup_ci": own["ci"],
            "measured_speedup_range": own["range"], "n_prompts": own["units"],
            "resolves": own["resolves"], "level": own.get("level"),
            "predicted_on_these_prompts": sm.get("predicted_speedup"),
            "predicted_from": sm.get("predicted_from"),
            "audit": sm["audit"], "raw_tok_s": sm["raw_tok_s"], "sd_tok_s": sm["sd_tok_s"],
            "vs_reference_raw": vs_ref and vs_ref["speedup"], "vs_reference_raw_stats": vs_ref}
