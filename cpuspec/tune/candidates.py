"""What tune ranks, measures and prices: the candidates (a target with a drafter), their cost
curves and ceilings, the pilot per drafter that ranks them, one pooled curve per target and
draft model for their predictions, and the predictions at depth (tune.py drives the steps)."""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Callable

from cpuspec.harness.bench import BenchConfig, run_bench
from cpuspec.core.costs import ceiling_speedup
from cpuspec.analysis.predict import gated_runs, predict_from_probe, predict_from_rounds
from cpuspec.harness.probe import run_costs
from cpuspec.results.records import CostProbe
from cpuspec.analysis.summary import OVERALL, summarize

Log = Callable[[str], None]
# The pilot's answer length: long enough for some 6-10 rounds per prompt at k_max.
PILOT_TOKENS = 48

# Repetitions per batch size of the ranking's cost curves (median taken). With 3, machine C's
# Q4_0-pair ceiling came out at 1.20 in one run and 1.03 in the next, which reordered the run.
COST_REPS = 5

# The p-min values tune prices for a draft model (llama.cpp's --spec-draft-p-min; 0 is no gate),
# each replayed from the choosing runs' recorded draft confidences (predict.gated_runs): the
# values issue 43 named for the sweep, not tuned.
P_MIN_GRID = (0.5, 0.75, 0.9)


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
        """base for this candidate; a draft window only where a draft model reads the prompt
        (lookup has nothing to window)."""
        return dataclasses.replace(base, target_path=self.target.path,
                                   draft_path=self.draft.path if self.draft else None,
                                   drafter=self.drafter,
                                   draft_window=base.draft_window if self.draft else None,
                                   **changes)


@dataclass(frozen=True)
class Option:
    """One answer tune can give for a task: SD with a measured candidate at draft length k, or
    (k = 0) raw decoding on a target; public() is what the tune file records of it."""
    candidate: str                      # the candidate's name, or "TARGET (SD off)"
    k: int
    predicted_speedup: float            # against its own target's raw decoding
    predicted_vs_reference_raw: float   # against the reference target's raw decoding
    cand: Candidate | None = None       # SD: the candidate ...
    results: dict | None = None         # ... and its measured (choosing) run
    target: object | None = None        # raw: the target (FetchedModel)
    p_min: float = 0.0                  # SD with a draft model: its confidence gate

    @property
    def key(self) -> tuple[str, int, float]:
        return self.candidate, self.k, self.p_min

    def public(self) -> dict:
        return {"candidate": self.candidate, "k": self.k,
                **({"p_min": self.p_min} if self.p_min else {}),
                "predicted_speedup": self.predicted_speedup,
                "predicted_vs_reference_raw": self.predicted_vs_reference_raw}


def ceiling(probe: CostProbe | dict, k_max: int, draft_s: float) -> tuple[float, int]:
    """The best speedup a cost curve allows with every draft accepted, and its k."""
    verify = CostProbe.of(probe).verify_s
    return max((ceiling_speedup(verify, draft_s, k), k)
               for k in range(1, k_max + 1) if k + 1 in verify)


def rank_candidates(cfg: BenchConfig, candidates: list[Candidate], k_max: int,
                    log: Log) -> list[dict]:
    """Step 0 (see the module's docstring): one cost curve per (target, draft model); for the
    lookup drafter, the target's curve (it is probed with itself as the draft)."""
    probes: dict[tuple[str, str], dict] = {}
    ranking = []
    # lookup only needs the target's V(n): any probe of that target serves, so the pairs with
    # draft models go first
    for cand in sorted(candidates, key=lambda c: c.draft is None):
        draft = cand.draft or cand.target
        key = (str(cand.target.path), str(draft.path))
        if cand.draft is None:
            key = next((k for k in probes if k[0] == key[0]), key)
        if key not in probes:
            log(f"tune: cost curve of {cand.target.spec.name}"
                + (f" + {draft.spec.name}" if cand.draft else ""))
            probes[key] = run_costs(dataclasses.replace(
                cfg, pair=None, target_path=cand.target.path, draft_path=draft.path,
                drafter="model", k=k_max), COST_REPS, log)["cost_probe"]
        probe = probes[key]
        best, k = ceiling(probe, k_max, probe["draft_s"] if cand.drafter == "model" else 0.0)
        ranking.append({"candidate": cand.name, "ceiling": best, "ceiling_k": k,
                        "ruled_out": best <= 1.0, "_probe": probe,
                        "c": probe["draft_s"] / CostProbe.of(probe).t
                        if cand.drafter == "model" else 0.0})
    order = [c.name for c in candidates]
    return sorted(ranking, key=lambda r: order.index(r["candidate"]))

def predictions(results: dict, k_max: int, probe: dict | None = None
                ) -> dict[str, list[dict]]:
    """Per task, the predicted end-to-end speedup of every k in 1..k_max from one static run at
    k_max: its probe (or `probe`, a pooled curve), and its per-position survival (a model
    drafter) or its rounds replayed at each k (lookup and the hybrid, whose drafts per round
    vary)."""
    return predictions_with(probe or results["cost_probe"], results, k_max)


def predictions_with(probe: dict, results: dict, k_max: int) -> dict[str, list[dict]]:
    """predictions(), with the costs of `probe` and the acceptance of `results`' runs; for a
    draft model whose runs recorded their draft confidences, every k at each p-min of
    P_MIN_GRID too (the runs replayed as the gate would have drafted them)."""
    summ = summarize(results)
    fixed = results["settings"].get("drafter", "model") == "model"
    draft_window = results["settings"].get("draft_window")
    out = {}
    for task, s in summ.items():
        if task == OVERALL or "per_position_acceptance_pct" not in s:
            continue
        survival = [p / 100.0 for p in s["per_position_acceptance_pct"]]
        sd = [r for r in results["runs"] if r["task"] == task and r["mode"] == "static"]
        rows = []
        for k in range(1, k_max + 1):
            pred = predict_from_probe(probe, survival[:k], k, sd, draft_window=draft_window) \
                if fixed else predict_from_rounds(probe, k, sd, draft_window)
            if pred:
                rows.append({"k": k, "predicted_speedup": pred[0]})
        if fixed:
            rows += _gated_rows(probe, sd, rows, results["settings"]["k"], draft_window)
        out[task] = {"rows": rows, "raw_tok_s": s["raw_tok_s"],
                     "acceptance_pct": s.get("acceptance_pct")}
    return out


def _gated_rows(probe: dict, sd: list[dict], ungated: list[dict], k_run: int,
                draft_window) -> list[dict]:
    """Every (k, p-min > 0) of the ungated rows: the ungated prediction times the gate's
    effect, both sides replayed alike (the runs replayed under the gate ÷ the same runs
    replayed without it, so the replay's own bias cancels and a gate wins only by what it
    changes); none where the runs recorded no confidences."""
    plain = gated_runs(sd, 0.0)
    rows = []
    for row in ungated if plain else ():
        k = row["k"]
        base = predict_from_rounds(probe, k, plain, draft_window, gate_k=k_run)
        for p_min in P_MIN_GRID:
            pred = predict_from_rounds(probe, k, gated_runs(sd, p_min), draft_window,
                                       gate_k=k_run)
            if pred and base:
                rows.append({"k": k, "p_min": p_min,
                             "predicted_speedup": row["predicted_speedup"] * pred[0] / base[0]})
    return rows


def pool_probes(target_probes: list[dict], draft_probes: list[dict]) -> dict:
    """One cost curve from several probes at the same position: V(n) and the prefill of the
    target from every probe of that target, the draft's costs from every probe of that draft
    model; each the median of all their samples. Machine B's two tunes measured the same
    acceptance for the Q8_0 target with the draft model and with the hybrid, and picked one in
    one run and the other in the next, on cost probes 10 % apart: one curve per target and per
    draft model prices every candidate alike."""
    def med(probes: list[dict], samples: str, value: str) -> float:
        pooled = [x for p in probes for x in (p.get(samples) or [p[value]])]
        return statistics.median(pooled)
    base = target_probes[0]
    ns = sorted(set.intersection(*(set(p["verify_s"]) for p in target_probes)), key=int)
    out = {**base, "verify_s": {}, "verify_samples_s": {}, "pooled_from": len(target_probes)}
    for n in ns:
        samples = [x for p in target_probes
                   for x in (p.get("verify_samples_s", {}).get(n) or [p["verify_s"][n]])]
        out["verify_samples_s"][n] = samples
        out["verify_s"][n] = statistics.median(samples)
    out["target_prefill_s"] = statistics.median(p["target_prefill_s"] for p in target_probes)
    if draft_probes:
        out["draft_s"] = med(draft_probes, "draft_samples_s", "draft_s")
        out["draft_catchup_s_per_token"] = med(draft_probes, "draft_catchup_samples_s_per_token",
                                               "draft_catchup_s_per_token")
        out["draft_prefill_s"] = statistics.median(p["draft_prefill_s"] for p in draft_probes)
        out["draft_pooled_from"] = len(draft_probes)
    return out


def pooled_probe(cand: Candidate, results: dict, curves: list[tuple[Candidate, dict]]) -> dict:
    """The cost curve a candidate's predictions use: its run's probe pooled with every other
    probe of its target (the ranking's curves, the other candidates' runs) and, for its draft
    costs, with every probe of its draft model. Lookup keeps its own run's draft costs (none
    to speak of)."""
    own = results["cost_probe"]
    same_target = [p for c, p in curves if c.target.path == cand.target.path
                   and p.get("position") == own.get("position")]
    same_draft = [p for c, p in curves if c.draft is not None and cand.draft is not None
                  and c.draft.path == cand.draft.path and p.get("position") == own.get("position")]
    pooled = pool_probes(same_target or [own], same_draft if cand.draft is not None else [])
    if cand.draft is None:
        pooled.update({k: own[k] for k in ("draft_s", "draft_prefill_s",
                                           "draft_catchup_s_per_token") if k in own})
    return pooled


def drafter_key(cand: Candidate) -> tuple[str, str | None]:
    return cand.drafter, str(cand.draft.path) if cand.draft else None


def run_pilots(base: BenchConfig, candidates: list[Candidate], ranking: list[dict],
               prompts: list, k_max: int, log: Log) -> dict[tuple[str, str | None], dict]:
    """Step 0b: one short static run at k_max per drafter that some candidate left by its
    cost curve uses, on the first target it comes with."""
    pilots: dict[tuple[str, str | None], dict] = {}
    for cand, rank in zip(candidates, ranking):
        key = drafter_key(cand)
        if rank["ruled_out"] or key in pilots:
            continue
        log(f"tune: pilot of the {cand.drafter} drafter"
            + (f" {cand.draft.spec.name}" if cand.draft else "")
            + f" on {cand.target.spec.name}: k = {k_max}, {PILOT_TOKENS} tokens on "
            + ", ".join(p.prompt_id for p in prompts))
        pilots[key] = run_bench(cand.bench_config(
            base, prompts=prompts, k=k_max, max_tokens=PILOT_TOKENS, warmup=0,
            quality=False), log)
    return pilots


def drafter_costs(cand: Candidate, probe: dict) -> dict:
    """A curve probed with a draft model, for this candidate: prompt lookup drafts for free
    and reads no prompt, so its draft costs are nothing."""
    if cand.drafter != "lookup":
        return probe
    return {**probe, "draft_s": 0.0, "draft_prefill_s": 0.0, "draft_catchup_s_per_token": 0.0}


def pilot_rank(cand: Candidate, probe: dict, pilot: dict, ref_v1: float, k_max: int) -> dict:
    """A candidate's predicted best speedup from its own cost curve (`probe`) and its drafter's
    pilot acceptance: per task and k, against its own raw decoding and against the reference
    target's (raw speed from the two curves' V(1)); the best of all."""
    probe = drafter_costs(cand, probe)
    vs_ref = ref_v1 / CostProbe.of(probe).t
    best: dict = {}
    for task, p in predictions_with(probe, pilot, k_max).items():
        for row in p["rows"]:
            if row.get("p_min"):   # the pilot ranks drafters; the gate is chosen later
                continue
            score = row["predicted_speedup"] * max(1.0, vs_ref)
            if score > best.get("pilot_score", float("-inf")):
                best = {"pilot_speedup": row["predicted_speedup"],
                        "pilot_vs_reference_raw": row["predicted_speedup"] * vs_ref,
                        "pilot_score": score, "pilot_task": task, "pilot_k": row["k"]}
    return best


# Repetitions per batch size of a depth's cost curve (median taken): one curve per depth.
DEPTH_COST_REPS = 3


def predict_at_depths(cfg: BenchConfig, chosen: dict[str, Option], depths: list[int],
                      k_max: int, log: Log, over_budget: Callable[[str], bool]) -> dict:
    """Step 4, with --depths: per task, its SD answer predicted at each depth (that many tokens
    of context held before the prompt, as `bench --depth`), from the candidate's cost curve
    measured at that depth and the choosing runs' acceptance (at depth 0); and the first depth
    where SD stops paying (or starts). A prediction, named as such: acceptance at depth is not
    measured here (`bench --depth` measures it)."""
    curves: dict[tuple[str, int], dict | None] = {}
    out = {}
    for task, option in chosen.items():
        cand: Candidate = option.cand
        rows = []
        for depth in depths:
            key = (cand.name, depth)
            if key not in curves:
                if over_budget(f"the cost curve of {cand.name} at depth {depth}"):
                    curves[key] = None
                else:
                    log(f"tune: cost curve of {cand.name} at depth {depth}")
                    draft = cand.draft or cand.target   # lookup: the target's curve only
                    probe = run_costs(dataclasses.replace(
                        cfg, pair=None, target_path=cand.target.path, draft_path=draft.path,
                        drafter="model", k=k_max, depth=depth), DEPTH_COST_REPS,
                        log)["cost_probe"]
                    curves[key] = drafter_costs(cand, probe)
            if curves[key] is None:
                continue
            pred = predictions_with(curves[key], option.results, k_max).get(task)
            row = next((r for r in (pred or {}).get("rows", []) if r["k"] == option.k
                        and r.get("p_min", 0.0) == option.p_min), None)
            if row:
                rows.append({"depth": depth, "predicted_speedup": row["predicted_speedup"]})
        out[task] = {"candidate": cand.name, "k": option.k,
                     **({"p_min": option.p_min} if option.p_min else {}), "by_depth": rows,
                     **crossover(rows, "predicted_speedup"),
                     "predicted_from": "cost curve at each depth + the choosing runs' "
                                       "acceptance at depth 0"}
    return out


def crossover(rows: list[dict], key: str) -> dict:
    """The first depth where rows[key] crosses 1.0, and which way."""
    pays = [r[key] > 1.0 for r in rows]
    turn = next((r["depth"] for r, p, q in zip(rows[1:], pays[1:], pays) if p != q), None)
    return {"crossover_depth": turn,
            "crossover": None if turn is None else ("stops paying" if pays[0] else
                                                    "starts paying")}


def calibrate_depths(depth_predictions: dict, recommendations: dict) -> None:
    """Where a task's SD answer was confirmed (depth 0, the other prompts), each depth's
    prediction is scaled by confirmed ÷ predicted at depth 0: the choosing prompts' optimism,
    as the confirm prompts measured it, taken out. The crossover is then read from the scaled
    figures. Inputs: the cost curves at each depth, the choosing runs' acceptance and the
    confirmation at depth 0; nothing measured at a depth above 0."""
    for task, d in depth_predictions.items():
        best = (recommendations.get(task) or {}).get("best_sd") or {}
        measured = (best.get("confirmed") or {}).get("measured_speedup")
        at_0 = next((r["predicted_speedup"] for r in d["by_depth"] if r["depth"] == 0),
                    best.get("predicted_speedup"))
        if not measured or not at_0 or best.get("k") != d["k"]:
            continue
        scale = measured / at_0
        for r in d["by_depth"]:
            r["calibrated_speedup"] = r["predicted_speedup"] * scale
        d.update(calibration=scale, **crossover(d["by_depth"], "calibrated_speedup"),
                 predicted_from=d["predicted_from"] + ", scaled by confirmed ÷ predicted "
                                                      "at depth 0")
