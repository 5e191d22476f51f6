"""Issue 53, item 2: the server's own k, priced from a paths run's round costs
(analysis/server_k.py), checked against what the server measured: at the k the paths run
measured, the priced server decode SD ×raw (with another run's acceptance) must land within
10 % of the server's own measured decode SD ×raw; the priced server never beats the loop at
any k (its rounds hold the loop's work and more)."""
import json
from pathlib import Path

from cpuspec.analysis.server_k import round_costs, server_k
from cpuspec.analysis.summary import summarize

HERE = Path(__file__).resolve().parent.parent / "bench/results/epyc-family25-model17"
PATHS = HERE / "server_k_q8_0_k7.json"
BENCH = HERE / "bench_q8_0_k7_serverk.json"


def test_the_priced_server_matches_the_measured_server_at_the_measured_k():
    paths, bench = json.loads(PATHS.read_text()), json.loads(BENCH.read_text())
    survival = [p / 100 for p in summarize(bench)["overall"]["per_position_acceptance_pct"]]
    priced = server_k(bench["cost_probe"], survival, paths)
    assert priced is not None and priced["measured_at_k"] == 7
    runs = [r for r in paths["runs"] if r["path"] == "llama-server"]

    def decode_tok_s(mode):
        sel = [r for r in runs if r["mode"] == mode]
        return sum(r["n_tokens"] - 1 for r in sel) / sum(r["decode_s"] for r in sel)
    measured = decode_tok_s("static") / decode_tok_s("raw")
    at_7 = next(r for r in priced["table"] if r["k"] == 7)
    assert abs(at_7["server"] / measured - 1) < 0.10, (at_7, measured)
    assert all(r["server"] < r["loop"] for r in priced["table"])
    costs = round_costs(paths)
    assert costs["server_round_s"] > costs["loop_round_s"]
