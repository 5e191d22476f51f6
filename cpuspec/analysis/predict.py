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
    to its first token below p_min and keeps min(n_accepted, that many). Within a round the
    drafts are the same greedy tokens whether gated or not; the rounds' boundaries are taken as
    recorded, as replaying at a smaller k takes them. None where a run lacks confidences."""
    if not sd or any(len(r.get("draft_confidence", ())) != len(r.get("rounds", ()))
                     for r in sd):
        return None
    i_k, i_acc, i_emit = (ROUND_FIELDS.index(f) for f in ("k", "n_accepted", "n_emitted"))
    out = []
    for r in sd:
        rows = []
        for row, conf in zip(r["rounds"], r["draft_confidence"]):
            j = next((i for i, c in enumerate(conf[:row[i_k]]) if c < p_min), row[i_k])
            new = list(row)
            new[i_k], new[i_acc] = j, min(row[i_acc], j)
            new[i_emit] = min(row[i_emit], new[i_acc] + 1)
            rows.append(new)
        out.append({**r, "rounds": rows})
    return out


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
