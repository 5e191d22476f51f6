"""The server's own k: llama-server's rounds cost more than cpuspec's loop's (its draft decodes
every verify batch again, and it samples), so the k that is best for the loop is not the k
that is best for the server. A saved `cpuspec paths` run that measured both at one k = k_m on
this machine gives the server's round cost against the loop's there; the cost probe prices
both at every other k.

Model (per round, ms): the loop's round at k is the probe's k·d + V(k + 1), scaled by γ (the
loop's measured round at k_m over the probe's); the server's is ρ·(loop round) + D(k + 1) + s0,
where ρ = the server's plain decode per token over the loop's (its slower plain decode), D(k + 1)
the draft's re-decode of the k + 1 tokens of each verify batch, priced as a (k + 1)-token batch of
the draft: its one-token decode d times the target's batch curve V(k + 1)/V(1) (the probe times
the draft at one token only; the same kernels at the same n), and s0 what is left at k_m
(sampling, the slot's bookkeeping), fitted there. With E(k) tokens per
round from the measured per-position acceptance, decode-only SD ×raw is E(k)·T / round(k) for
either, T each one's plain decode per token. Inputs: the probe, the acceptance, the paths run;
the prediction is of other k and other prompts than those the paths run measured."""
from __future__ import annotations

from cpuspec.core.costs import expected_tokens
from cpuspec.results.records import CostProbe
from cpuspec.results.schema import CPUSPEC, LLAMA_SERVER


def _per_token_s(runs: list[dict]) -> float | None:
    tokens = sum(max(r["n_tokens"] - 1, 0) for r in runs)
    time_s = sum(r.get("decode_s") or 0.0 for r in runs)
    return time_s / tokens if tokens and time_s else None


def round_costs(paths_doc: dict) -> dict | None:
    """From a paths run with cpuspec and llama-server: k_m, each one's SD round (s) and plain
    decode per token (s). None where the run lacks either path."""
    runs = paths_doc.get("runs") or []

    def sel(path, mode):
        return [r for r in runs if r.get("path") == path and r.get("mode") == mode]
    loop_sd = sel(CPUSPEC, "static")
    server_sd = [r for r in sel(LLAMA_SERVER, "static") if r.get("server_rounds")]
    loop_rounds = sum(len(r.get("rounds") or []) for r in loop_sd)
    server_rounds = sum(r.get("server_rounds") or 0 for r in server_sd)
    t_loop, t_server = _per_token_s(sel(CPUSPEC, "raw")), _per_token_s(sel(LLAMA_SERVER, "raw"))
    if not (loop_rounds and server_rounds and t_loop and t_server):
        return None
    return {"k": paths_doc["settings"]["k"],
            "loop_round_s": sum(r["decode_s"] for r in loop_sd) / loop_rounds,
            "server_round_s": sum(r["decode_s"] for r in server_sd) / server_rounds,
            "loop_token_s": t_loop, "server_token_s": t_server}


def server_prices(probe: CostProbe | dict, survival: list[float], costs: dict) -> list[dict]:
    """Per k = 1..len(survival) (the probe must hold V(k + 1)): the loop's and the server's
    predicted decode-only SD ×raw (see the module's docstring)."""
    p = CostProbe.of(probe)
    km = costs["k"]
    if km + 1 not in p.verify_s:
        return []

    def probe_round(k: int) -> float:
        return k * p.draft_s + p.verify_s[k + 1]
    gamma = costs["loop_round_s"] / probe_round(km)
    rho = costs["server_token_s"] / costs["loop_token_s"]

    def redecode(k: int) -> float:   # D(k + 1): the draft's (k + 1)-token batch
        return p.draft_s * p.verify_s[k + 1] / p.t
    # what the model leaves of the server's round at k_m; never below 0 (a noisy fit would
    # price a server round below the loop's)
    s0 = max(costs["server_round_s"] - rho * gamma * probe_round(km) - redecode(km), 0.0)
    out = []
    for k in range(1, len(survival) + 1):
        if k + 1 not in p.verify_s:
            break
        loop_round = gamma * probe_round(k)
        server_round = rho * loop_round + redecode(k) + s0
        e = expected_tokens(survival, k)
        out.append({"k": k, "loop": e * costs["loop_token_s"] / loop_round,
                    "server": e * costs["server_token_s"] / server_round})
    return out


def server_k(probe: CostProbe | dict, survival: list[float], paths_doc: dict) -> dict | None:
    """The k best in the server and in the loop, with each one's predicted decode SD ×raw, the
    paths run's k_m, and the whole table; k_server 0 (off) where no k is predicted to pay in
    the server; None without a usable paths run."""
    costs = round_costs(paths_doc)
    table = server_prices(probe, survival, costs) if costs else []
    if not table:
        return None
    best_server = max(table, key=lambda r: r["server"])
    best_loop = max(table, key=lambda r: r["loop"])
    return {"k_server": best_server["k"] if best_server["server"] > 1 else 0,
            "server_speedup": best_server["server"],
            "k_loop": best_loop["k"], "loop_speedup": best_loop["loop"],
            "server_at_loop_k": next(r["server"] for r in table if r["k"] == best_loop["k"]),
            "measured_at_k": costs["k"], "table": table}


def redecode_share(probe: CostProbe | dict, k: int) -> float | None:
    """The share of the loop's decode SD ×raw that llama-server keeps at k if the draft's
    re-decode of each verify batch were all it adds: the loop's round k·d + V(k + 1) over that
    plus D(k + 1) = d·V(k + 1)/V(1) (server_prices with ρ = γ = 1 and s0 = 0), from the cost
    probe alone: a prediction, not a bound (the sampler and HTTP lower the share; the server's
    own slower plain decoding, ρ > 1, raises it); only a paths run measures it. None where the
    probe lacks V(k + 1)."""
    p = CostProbe.of(probe)
    if k + 1 not in p.verify_s:
        return None
    loop = k * p.draft_s + p.verify_s[k + 1]
    return loop / (loop + p.draft_s * p.verify_s[k + 1] / p.t)
