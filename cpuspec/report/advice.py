"""`cpuspec advise`: per task, SD on with the best k or off with the acceptance it would need,
from the cost probe and the measured acceptance (or the recorded rounds replayed)."""
from __future__ import annotations


from cpuspec.core.costs import beyond_measured, choose_k, round_terms
from cpuspec.analysis.server_k import server_k
from cpuspec.analysis.predict import (choose_k_by_replay, predict_from_probe, probe_contradicted,
                                      replay_inputs)
from cpuspec.results.records import CostProbe
from cpuspec.report.tables import fmt_value
from cpuspec.report.verdict import measured_verdict
from cpuspec.results.schema import ResultsError
from cpuspec.analysis.summary import OVERALL, summarize


def advise(results: dict, paths_doc: dict | None = None) -> dict[str, dict]:
    """Per task: the best draft length k* from the cost model (0 = turn SD off), with the
    predicted speedup beside the measured one, and the acceptance SD would need.

    Survival P(n_accepted ≥ i) comes from the static rounds at k (valid for every k' ≤ k: greedy
    drafts do not depend on k); costs from the bench's cost probe. For lookup and the hybrid,
    whose drafts per round vary, the recorded rounds are replayed at each k instead."""
    k = results["settings"]["k"]
    probe = results.get("cost_probe")
    if not results.get("runs"):
        raise ResultsError("this run measured no generation (it ended "
                           f"{results.get('ended') or 'before its first prompt'}): nothing to "
                           "advise from; run `cpuspec bench` again")
    if not probe:
        raise ResultsError("this results file has no cost probe (written by an older cpuspec)")
    costs = CostProbe.of(probe)
    why = costs.disturbed() or probe_contradicted(results)
    if why:
        raise ResultsError(f"no advice from this run's cost probe: {why}; measure again on a "
                           "quiet machine (`cpuspec costs` takes seconds)")
    draft_s, verify_s = costs.draft_s, costs.verify_s
    drafter = results["settings"].get("drafter", "model")
    # a gated model drafts 0..k per round: its rounds are replayed, as lookup's are
    # a gated model or hybrid drafts 0..k per round; a round cut short decoded the dropped token
    gate_k = k if drafter != "lookup" and results["settings"].get("p_min") else None
    replayed = drafter != "model" or gate_k is not None
    out = {}
    for task, s in summarize(results).items():
        if "per_position_acceptance_pct" not in s:
            continue
        sd = [r for r in results["runs"] if r["mode"] == "static"
              and (task == OVERALL or r["task"] == task)]
        survival = [p / 100.0 for p in s["per_position_acceptance_pct"]]
        k_best, table = choose_k_by_replay(probe, sd, k, gate_k) if replayed else \
            choose_k(survival, draft_s, verify_s)
        out[task] = _task_advice(s, k, k_best, table, draft_s, verify_s,
                                 "replayed" if replayed else drafter)
        if replayed:
            out[task].update(_replayed_terms(probe, sd, k_best or k, gate_k))
        else:  # the curve past k: where measuring a longer k is worth it
            out[task].update(_beyond_k(survival, draft_s, verify_s, table[k_best]))
            if paths_doc is not None:   # the k that is best in llama-server (server_k.py)
                out[task]["server"] = server_k(probe, survival, paths_doc)
        if results["settings"].get("draft_cpus"):  # a core split: both schedules, end to end
            for name, par in (("serial", False), ("parallel", True)):
                pred = predict_from_probe(probe, survival, k, sd, par, None if par else
                                          results["settings"].get("draft_window"))
                out[task][f"predicted_e2e_{name}_at_k"] = pred[0] if pred else None
    return out


def _task_advice(s: dict, k: int, k_best: int, table: list, draft_s: float,
                 verify_s: dict, drafter: str) -> dict:
    """The verdict, k*, predicted beside measured, and the acceptance SD would need."""
    feasible = [c for c in table[1:] if c.break_even_acceptance is not None]
    need = min(feasible, key=lambda c: c.break_even_acceptance) if feasible else None
    # on or off is the run's measured verdict, end to end (the first screen's function); the
    # cost model's k* stays a prediction beside it, and decides nothing alone
    measured = measured_verdict(s)
    return {
        "verdict": "ON" if measured == "faster" else "OFF" if measured == "slower"
        else "UNDECIDED", "measured_verdict": measured,
        "model_verdict": "ON" if k_best > 0 else "OFF", "k_best": k_best,
        "predicted_speedup_best": table[k_best].predicted_speedup,
        "predicted_speedup_at_k": table[k].predicted_speedup if k < len(table) else None,
        "measured_speedup_at_k": s["sd_decode_speedup"],
        "measured_e2e_speedup_at_k": s["sd_speedup"],
        "measured_adaptive_speedup": s.get("adaptive_decode_speedup"),
        "acceptance_pct": s["acceptance_pct"],
        "needed_acceptance_pct": None if need is None else 100 * need.break_even_acceptance,
        "needed_at_k": None if need is None else need.k,
        "c": draft_s / verify_s[1], "beta_at_k": verify_s[k + 1] / verify_s[1] - 1,
        "table": [c.__dict__ for c in table],
        # a break-even acceptance is a rate for k drafts every round; lookup and the hybrid
        # have none, and their verdict rests on a against 1 + α + β instead
        "break_even_computed": drafter == "model"}


def _replayed_terms(probe: dict, sd: list[dict], k_terms: int, gate_k: int | None = None
                    ) -> dict:
    """Lookup, the hybrid and a gated model: a, α and β of the recorded rounds replayed at
    k_terms."""
    rounds, share, catchup = replay_inputs(sd)
    if not rounds:
        return {}
    a, alpha, beta = round_terms(probe, rounds, k_terms, share, catchup, gate_k)
    return {"terms": {"k": k_terms, "a": a, "alpha": alpha, "beta": beta,
                      "break_even_a": 1.0 + alpha + beta}}


def _beyond_k(survival: list[float], draft_s: float, verify_s: dict, best) -> dict:
    """The predicted curve past the measured k, and a longer k worth measuring (5 % over the
    best measured prediction) if there is one."""
    ahead = beyond_measured(survival, draft_s, verify_s)
    best_ahead = max(ahead, key=lambda c: c.predicted_speedup, default=None)
    try_k = best_ahead.k if best_ahead and best_ahead.predicted_speedup > \
        1.05 * max(best.predicted_speedup, 1.0) else None
    return {"extrapolated": [c.__dict__ for c in ahead], "try_k": try_k,
            "try_k_predicted": best_ahead.predicted_speedup if try_k else None}


def on_k(a: dict, k: int) -> int:
    """The k to serve a task measured faster at k: the cost model's k* where it predicts
    that SD pays there, else the measured k."""
    return a["k_best"] if a.get("model_verdict", a["verdict"]) == "ON" and a["k_best"] else k


def _advice_cell(a: dict, k: int) -> str:
    """One task's advice: on or off as measured (end to end, its interval), the cost model's
    k* or the acceptance it would need beside it."""
    if a["verdict"] == "ON":
        return f"ON, k = {on_k(a, k)}" + ("; model: off" if a.get("model_verdict") == "OFF"
                                          else "")
    if a["verdict"] == "UNDECIDED":
        guess = f"; model k = {a['k_best']}" if a.get("model_verdict") == "ON" else ""
        return f"undecided{guess}"
    if a.get("model_verdict") == "ON":
        return f"OFF (slower); model k = {a['k_best']}"
    if not a.get("break_even_computed", True):
        return "OFF: break-even not computed"
    if a["needed_acceptance_pct"] is None:
        return "OFF: no acceptance is enough"
    return f"OFF: needs ≥ {a['needed_acceptance_pct']:.0f}% acc. (k = {a['needed_at_k']})"


def render_advice_screen(advice: dict, k: int) -> list[str]:
    """One screen's table: per task the cost model's advice, its predicted ×raw at its best
    k and the ×raw measured at the run's k."""
    from cpuspec.report import screen
    return screen.table(["task", "advice (measured; model)", "predicted ×raw at k*",
                         f"measured ×raw e2e k={k}", "acc %"],
                        [[screen.cut(t, 14), _advice_cell(a, k),
                          fmt_value(a["predicted_speedup_best"], ".2f"),
                          fmt_value(a["measured_e2e_speedup_at_k"], ".2f"),
                          fmt_value(a["acceptance_pct"], ".0f")]
                         for t, a in advice.items()]).splitlines()


def render_advice(advice: dict, k: int) -> str:
    from cpuspec.report.screen import grid
    split = any("predicted_e2e_parallel_at_k" in a for a in advice.values())
    rows = []
    for task, a in advice.items():
        if a["verdict"] in ("ON", "UNDECIDED") or a.get("model_verdict") == "ON":
            verdict = _advice_cell(a, k)
        elif not a.get("break_even_computed", True):
            t = a.get("terms")
            verdict = ("OFF: " + (f"a = {t['a']:.2f} < 1 + α + β = {t['break_even_a']:.2f} at "
                                  f"k = {t['k']}; " if t else "")
                       + "break-even acceptance not computed (drafts per round vary)")
        elif a["needed_acceptance_pct"] is None:
            verdict = "OFF: no acceptance is enough at these costs"
        else:
            verdict = (f"OFF: needs ≥ {a['needed_acceptance_pct']:.0f}% acceptance "
                       f"(at k = {a['needed_at_k']})")
        rows.append([task, verdict, fmt_value(a["predicted_speedup_best"], ".2f"),
                     fmt_value(a["predicted_speedup_at_k"], ".2f"),
                     fmt_value(a["measured_e2e_speedup_at_k"], ".2f"),
                     fmt_value(a["measured_speedup_at_k"], ".2f"),
                     fmt_value(a["measured_adaptive_speedup"], ".2f"),
                     fmt_value(a["acceptance_pct"], ".1f")]
                    + ([fmt_value(a.get("predicted_e2e_serial_at_k"), ".2f"),
                        fmt_value(a.get("predicted_e2e_parallel_at_k"), ".2f")] if split else []))
    table = grid(rows, headers=["task", "advice (on/off: measured e2e)",
                                   "predicted ×raw at k*", f"predicted ×raw k={k}",
                                   f"measured ×raw e2e k={k}", f"decode-only k={k}",
                                   "adaptive decode-only", "accept %"]
                    + ([f"e2e serial k={k}", f"e2e parallel k={k}"] if split else []),
                    disable_numparse=True)
    hints = [f"{task}: a longer draft may pay more (the verify-cost curve was probed past k = "
             f"{k}): k = {a['try_k']} would give ≈{a['try_k_predicted']:.2f}× if acceptance "
             f"kept falling as it does at k = {k} (extrapolated, not measured); run with -k "
             f"{a['try_k']} to "
             "measure it" for task, a in advice.items() if a.get("try_k")]
    return "\n".join([table, *hints])
