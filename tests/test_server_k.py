"""Issue 53, item 2: the server's own k, priced from a paths run's round costs
(analysis/server_k.py), checked against what the server measured: at the k the paths run
measured, the priced server decode SD ×raw (with another run's acceptance) must land within
10 % of the server's own measured decode SD ×raw; the priced server never beats the loop at
any k (its rounds hold the loop's work and more)."""
import json
from pathlib import Path

from cpuspec.analysis.server_k import round_costs, server_k
from cpuspec.analysis.summary import summarize
from cpuspec.results.schema import load_json

HERE = Path(__file__).resolve().parent.parent / "bench/results/epyc-family25-model17"
PATHS = HERE / "server_k_q8_0_k7.json"
BENCH = HERE / "bench_q8_0_k7_serverk.json.gz"


def test_the_priced_server_matches_the_measured_server_at_the_measured_k():
    paths, bench = json.loads(PATHS.read_text()), load_json(BENCH)
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


def test_the_priced_server_at_other_k_against_paths_runs_measured_at_those_k():
    """Issue 57, item 10: not the fitted k. Priced from the k = 7 paths run, with the held-out
    runs' own acceptance (the loop's rounds there; the server accepted the same drafts), the
    server's decode SD ×raw at k = 3 and 5 lands within 10 % of what llama-server measured at
    those k on prompts the fit never saw. (At k = 7 on those prompts it reads 23 % high: the
    fitted constant does not carry across runs that well; docs/server.md.)"""
    paths, bench = json.loads(PATHS.read_text()), load_json(BENCH)
    for k in (3, 5):
        held = json.loads((HERE / f"server_k_heldout6_q8_0_k{k}.json").read_text())
        rounds = [rd for r in held["runs"] if r["path"] == "cpuspec" and r["mode"] == "static"
                  for rd in r["rounds"]]
        survival = [sum(acc >= i for _, acc in rounds) / len(rounds) for i in range(1, k + 1)]
        priced = server_k(bench["cost_probe"], survival, paths)
        server = [r for r in held["runs"] if r["path"] == "llama-server"]

        def decode_tok_s(mode):
            sel = [r for r in server if r["mode"] == mode]
            return sum(r["n_tokens"] - 1 for r in sel) / sum(r["decode_s"] for r in sel)
        measured = decode_tok_s("static") / decode_tok_s("raw")
        at_k = next(r for r in priced["table"] if r["k"] == k)["server"]
        assert abs(at_k / measured - 1) < 0.10, (k, at_k, measured)


def test_no_k_that_pays_in_the_server_is_off_not_a_command():
    """A predicted server speedup ≤ 1 at every k is k_server 0 (off): advise prints no
    llama-server SD command for it. Acceptance 0.1 at every position (a poor draft)."""
    paths, bench = json.loads(PATHS.read_text()), load_json(BENCH)
    priced = server_k(bench["cost_probe"], [0.1 ** i for i in range(1, 8)], paths)
    assert priced["server_speedup"] < 1 and priced["k_server"] == 0


def test_the_redecode_bound_by_hand():
    """Issue 57, item 13: the share llama-server keeps if the draft's re-decode were all it
    added. By hand: d = 0.1, V(1) = 1, V(2) = 1.2, k = 1: the loop's round 0.1 + 1.2 = 1.3,
    the re-decode 0.1 × 1.2 / 1 = 0.12, so 1.3 / 1.42."""
    from cpuspec.analysis.server_k import redecode_share
    probe = {"verify_s": {"1": 1.0, "2": 1.2}, "draft_s": 0.1}
    assert abs(redecode_share(probe, 1) - 1.3 / 1.42) < 1e-9
    assert redecode_share(probe, 2) is None          # the probe has no V(3)


def test_the_redecode_share_predicts_what_the_server_kept():
    """A prediction from the probe alone: on B′'s recorded runs (the bench's probe, the paths
    run of the same configuration at k = 7) llama-server's measured decode SD ×raw over the
    loop's lies within 0.15 of it (the re-decode is most of what the server loses)."""
    from cpuspec.analysis.server_k import redecode_share
    paths, bench = json.loads(PATHS.read_text()), load_json(BENCH)

    def decode_tok_s(path, mode):
        sel = [r for r in paths["runs"] if r["path"] == path and r["mode"] == mode]
        return sum(r["n_tokens"] - 1 for r in sel) / sum(r["decode_s"] for r in sel)
    share = {p: decode_tok_s(p, "static") / decode_tok_s(p, "raw")
             for p in ("cpuspec", "llama-server")}
    kept = share["llama-server"] / share["cpuspec"]
    bound = redecode_share(bench["cost_probe"], 7)
    assert abs(bound - kept) < 0.15, (kept, bound)
