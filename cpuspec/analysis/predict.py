"""Predictions of an SD run's end-to-end speedup from a cost probe and recorded acceptance:
survival per draft position (a model drafter, k drafts every round) or the recorded rounds
replayed at k (lookup and the hybrid); each names what it uses (PREDICTED_FROM)."""
from __future__ import annotations

from typing import Callable, Sequence

from cpuspec.core.costs import (KChoice, predict_generation_s, predict_parallel_generation_s,
                    predict_rounds_generation_s, round_terms)
from cpuspec.results.records import CostProbe, RecordError
from cpuspec.core.speculative import ROUND_FIELDS
from cpuspec.core.window import window_reads


def predict_from_probe(probe: dict, survival: list[float], k: int, sd: list[dict],
                       parallel: bool = False, draft_window: Sequence[int] | None = None
                       ) -> tuple[float, str] | None:
    """A prediction of the SD run's end-to-end speedup whose costs come from the cost probe
    (measured apart from every generation) and whose acceptance is this run's own (so it tests
    the cost model, not the acceptance: PREDICTED_FROM), applied to the prompts
    and token counts the run had, for the serial or the parallel schedule (which takes no
    draft window). `draft_window`: the run's (settings.draft_window), whose tokens the draft's
    prefill is priced on. None when the probe lacks a batch size."""
    costs = _costs(probe)
    if costs is None or k + 1 not in costs.verify_s:
        return None
    if parallel:
        return _speedup_over_runs(probe, sd, None, lambda prompt_tokens, _, n_tokens:
                                  predict_parallel_generation_s(costs, survival, k,
                                                                prompt_tokens, n_tokens))
    return _speedup_over_runs(probe, sd, draft_window,
                              lambda prompt_tokens, draft_tokens, n_tokens:
                              predict_generation_s(costs, survival, k, prompt_tokens, n_tokens,
                                                   draft_tokens))


def _costs(probe: dict) -> CostProbe | None:
    """The probe read once for every prompt it prices (None: it has no V(n) to price with)."""
    try:
        return CostProbe.of(probe)
    except RecordError:
        return None


# What each prediction uses, printed and stored beside it.
PREDICTED_FROM = {
    "model": "cost probe + this run's acceptance",
    "variable": "cost probe + this run's rounds replayed",
}


def _speedup_over_runs(probe: dict, sd: list[dict], draft_window: Sequence[int] | None,
                       predict: Callable[[int, int, int], tuple]) -> tuple[float, str] | None:
    """Predicted raw ÷ SD seconds summed over the runs' prompts and token counts, and the
    window the probe allows. predict(target's prompt tokens, the draft's, answer tokens)."""
    raw_s = sd_s = 0.0
    for r in sd:
        # a follow-up turn prefills only what its conversation's KV did not hold; under a
        # draft window the draft reads only the window of a long prompt
        reuse = r.get("reused_prompt_tokens", 0)
        t_raw, t_sd = predict(r["prompt_tokens"] - reuse,
                              window_reads(draft_window, r["prompt_tokens"], reuse),
                              len(r["tokens"]))
        raw_s, sd_s = raw_s + t_raw, sd_s + t_sd
    window = "end-to-end" if "target_prefill_s" in probe else "decode-only"
    return (raw_s / sd_s, window) if sd_s > 0 else None


def replay_inputs(sd: list[dict]) -> tuple[list[tuple[int, int, int]], float, float]:
    """What predict_rounds_generation_s replays from speculative runs whose drafts per round
    vary: every round but each run's last (max_tokens may have shortened it), the share of
    drafts the draft model made (the hybrid's counts; 1 otherwise) and its catch-up tokens
    per round."""
    rounds = [tuple(dict(zip(ROUND_FIELDS, row))[f] for f in ("k", "n_accepted", "n_emitted"))
              for r in sd for row in r.get("rounds", [])[:-1]]
    stats = [r["drafter_stats"] for r in sd if r.get("drafter_stats")]
    model = sum(s["model_drafts"] for s in stats)
    drafts = model + sum(s["lookup_drafts"] for s in stats)
    share = model / drafts if stats and drafts else 1.0
    catchup = sum(s["model_catchup_tokens"] for s in stats) / max(len(rounds), 1)
    return rounds, share, catchup


def gated_runs(sd: list[dict], p_min: float) -> list[dict] | None:
    """The runs of a draft model at a fixed k as a p-min gate would have drafted them, from each
    round's recorded draft confidences (runs made with record_confidence): a round drafts up
    to its first token below p_min. Greedy drafts are the same tokens whether gated or not, so
    a round the gate cuts before its first rejection (j < n_accepted) ends early — j drafts
    kept, the target's token is the next draft — and the next round starts there, drafting the
    recorded drafts that follow with their recorded confidences (gate_split). None where a run
    lacks confidences."""
    if not sd or any(len(r.get("draft_confidence", ())) != len(r.get("rounds", ()))
                     for r in sd):
        return None
    return [{**r, "rounds": [new for row, conf in zip(r["rounds"], r["draft_confidence"])
                             for new in gate_split(row, conf, p_min)]} for r in sd]


def gate_split(row: list, conf: list[float], p_min: float) -> list[list]:
    """One recorded round as the rounds a gated run makes of it (split_round)."""
    return split_round(row, conf, p_min)[0]


def split_round(row: list, conf: list[float], p_min: float, first: bool = True
                ) -> tuple[list[list], bool]:
    """The gated rounds of one recorded round, and whether they are all known. A later round
    starts inside the recorded one with fewer recorded drafts left than a round drafts; where
    the gate does not cut them, it would have drafted past the record: its accepted tokens are
    known where a rejection came first, but not how many it drafted (priced as the recorded
    ones: a lower bound), nor, where every one was accepted, what came next (it ends where
    the recorded round ended: a lower bound on its tokens)."""
    i_k, i_acc, i_emit = (ROUND_FIELDS.index(f) for f in ("k", "n_accepted", "n_emitted"))
    k, n_acc, n_emit = row[i_k], row[i_acc], row[i_emit]
    j = next((i for i, c in enumerate(conf[:k]) if c < p_min), k)
    new = list(row)
    if j >= n_acc or n_emit < n_acc + 1:   # cut at or after the first rejection: as recorded
        new[i_k], new[i_acc] = j, min(n_acc, j)
        new[i_emit] = min(n_emit, new[i_acc] + 1)
        return [new], first or j < k
    new[i_k], new[i_acc], new[i_emit] = j, j, j + 1
    rest = list(row)   # the target's token was draft j + 1; the next round drafts from j + 2
    rest[i_k], rest[i_acc], rest[i_emit] = k - j - 1, n_acc - j - 1, n_emit - j - 1
    if k - j - 1 == 0:
        return [new, _plain_step(rest, i_k, i_acc, i_emit)], False
    pieces, known = split_round(rest, conf[j + 1:], p_min, first=False)
    return [new, *pieces], known


def _plain_step(row: list, i_k: int, i_acc: int, i_emit: int) -> list:
    """A round with no recorded draft left: the target's own token (one decode)."""
    row[i_k], row[i_acc], row[i_emit] = 0, 0, max(row[i_emit], 1)
    return row


def predict_from_rounds(probe: dict, k: int, sd: list[dict],
                        draft_window: Sequence[int] | None = None,
                        gate_k: int | None = None) -> tuple[float, str] | None:
    """The prediction for drafters with a varying number of drafts per round (lookup, hybrid,
    a model gated by p-min: gate_k, round_terms): the probe's costs applied to the recorded
    rounds replayed at k (costs.py); `draft_window` as for predict_from_probe (the hybrid's
    draft model can read one)."""
    rounds, share, catchup = replay_inputs(sd)
    costs = _costs(probe)
    if not rounds or costs is None or any(min(j, k) + 1 not in costs.verify_s
                                          for j, _, _ in rounds):
        return None
    return _speedup_over_runs(probe, sd, draft_window,
                              lambda prompt_tokens, draft_tokens, n_tokens:
                              predict_rounds_generation_s(costs, rounds, k, prompt_tokens,
                                                          n_tokens, share, catchup,
                                                          draft_tokens, gate_k))


def choose_k_by_replay(probe: dict, sd: list[dict], k_max: int, gate_k: int | None = None
                       ) -> tuple[int, list]:
    """choose_k for drafters whose drafts per round vary (lookup, hybrid): each k's predicted
    speedup a ÷ (1 + α + β) from the recorded rounds replayed at k (no i.i.d. break-even
    acceptance: their acceptance is not one rate)."""
    rounds, share, catchup = replay_inputs(sd)
    costs = CostProbe.of(probe)
    table = [KChoice(0, 1.0, 1.0, None)]
    for k in range(1, k_max + 1):
        if not rounds:
            break
        a, alpha, beta = round_terms(costs, rounds, k, share, catchup, gate_k)
        table.append(KChoice(k, a, a / (1.0 + alpha + beta), None))
    best = max(table, key=lambda c: c.predicted_speedup)
    return best.k, table



def ceiling_checks(results: dict) -> list[dict]:
    """Per task of a draft model's serial run, its decode-only SD ×raw over its prompts
    (analysis/stats.ratio_stats: the 95 % interval from MIN_CI_UNITS prompts, a range below)
    beside the cost probes' ceilings at the run's k (core/costs.ceiling_speedup: every draft
    accepted, a bound), the probe before the prompts' and the one after them (None where the
    run has none): `low` is the interval's low end, or the slowest prompt's ratio. Decode-only,
    as the probes time decodes. Empty for lookup, the hybrid, a p-min gate, a draft window and
    the parallel schedule, whose rounds the probe does not price as they ran, and for a probe
    disturbed on its own (CostProbe.disturbed)."""
    from cpuspec.analysis.stats import ratio_stats
    s, runs = results["settings"], results.get("runs") or []
    k = s.get("k")
    if (s.get("drafter", "model") != "model" or s.get("schedule") == "parallel"
            or s.get("p_min") or s.get("draft_window") or not k):
        return []
    ceiling = _ceiling(results.get("cost_probe"), k)
    if ceiling is None:
        return []
    end = _ceiling(results.get("cost_probe_end"), k)
    out = []
    for task in dict.fromkeys(r["task"] for r in runs):
        ratios, lengths = _decode_ratios([r for r in runs if r["task"] == task])
        st = ratio_stats(ratios)
        low = (st["ci"] or st["range"] or [None])[0]
        if low is not None:
            out.append({"task": task, "k": k, "ceiling": ceiling, "ceiling_end": end,
                        "low": low, "position": results["cost_probe"].get("position"),
                        "prompt_tokens": lengths, **st})
    return out


def _ceiling(probe: dict | None, k: int) -> float | None:
    from cpuspec.core.costs import ceiling_speedup
    costs = _costs(probe) if probe else None
    if costs is None or k + 1 not in costs.verify_s or costs.disturbed():
        return None
    return ceiling_speedup(costs.verify_s, costs.draft_s, k)


def _decode_ratios(runs: list[dict]) -> tuple[list[float], list[int]]:
    """Each prompt's decode-only SD ×raw (its static runs against its raw ones, the
    repetitions both modes ran) and its length in tokens."""
    from cpuspec.analysis.stats import decode_tok_s
    ratios, lengths = [], []
    for pid in dict.fromkeys(r["prompt_id"] for r in runs):
        mine = [r for r in runs if r["prompt_id"] == pid]
        reps = {r.get("repetition", 0) for r in mine if r["mode"] == "raw"} & \
            {r.get("repetition", 0) for r in mine if r["mode"] == "static"}
        raw = [r for r in mine if r["mode"] == "raw" and r.get("repetition", 0) in reps]
        sd = [r for r in mine if r["mode"] == "static" and r.get("repetition", 0) in reps]
        if raw and sd:
            ratios.append(decode_tok_s(sd) / decode_tok_s(raw))
            lengths.append(raw[0]["prompt_tokens"])
    return ratios, lengths


def contradicted(check: dict) -> bool:
    """A task of ceiling_checks that says the first probe was disturbed: its decode-only SD
    ×raw lies above that probe's ceiling even at its interval's low end (below MIN_CI_UNITS
    prompts, at its slowest prompt), and not above the ceiling of the probe taken after the
    prompts. Both exceeded is no disturbance of one probe (their position or the cost model
    does not fit these prompts; the prediction's error says so); a run with one probe cannot
    tell the two apart, and is not judged."""
    return (check["ceiling_end"] is not None and check["low"] > check["ceiling"]
            and check["low"] <= check["ceiling_end"])


def probe_contradicted(results: dict) -> str | None:
    """Why the run's own prompts say its first cost probe was disturbed (contradicted), or
    None. Over every recorded run it flags only the run with a CPU hog beside the first probe
    (bench/results/probe_ceiling_check.txt)."""
    for c in ceiling_checks(results):
        if not contradicted(c):
            continue
        spread = (f"[{c['ci'][0]:.2f}, {c['ci'][1]:.2f}] over {c['units']} prompts"
                  if c["ci"] else f"range {c['range'][0]:.2f}–{c['range'][1]:.2f} over "
                  f"{c['units']} prompts (a range, not an interval)")
        return (f"{c['task']} measured decode-only SD {c['speedup']:.2f}× raw {spread}, above "
                f"the first probe's ceiling at k = {c['k']}, {c['ceiling']:.2f}× with every "
                f"draft accepted, where the probe after the prompts gives "
                f"{c['ceiling_end']:.2f}×: the machine was disturbed while the first probe ran")
    return None
