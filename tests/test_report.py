"""Metrics and cost model to the digit, from scripted runs (no model)."""
import json

import pytest

from cpuspec.core.costs import cost_model, verdict_line
from cpuspec.report.tables import render_csv, render_details, render_table
from cpuspec.results.schema import ResultsError, SCHEMA_VERSION, read_json
from cpuspec.analysis.summary import summarize, summarize_group
from cpuspec.results.store import write_json

K = 4


def raw_run(task, latencies):
    return {"task": task, "prompt_id": f"{task}-1", "repetition": 0, "mode": "raw",
            "prompt_tokens": 10, "tokens": list(range(len(latencies) + 1)),
            "prefill_s": 0.5, "decode_s": sum(latencies), "token_latencies_s": latencies,
            "rounds": [], "stop": "max_tokens"}


def sd_run(task, rounds):
    """rounds: (k, n_accepted, draft_s, verify_s, overhead_s)."""
    rows, lat = [], []
    for k, acc, d, v, o in rounds:
        emitted = acc + 1
        rows.append([k, acc, emitted, d, v, d + v + o])
        lat += [(d + v + o) / emitted] * emitted
    return {"task": task, "prompt_id": f"{task}-1", "repetition": 0, "mode": "static",
            "prompt_tokens": 10, "tokens": list(range(len(lat) + 1)), "prefill_s": 0.7,
            "decode_s": sum(r[5] for r in rows), "token_latencies_s": lat, "rounds": rows,
            "stop": "max_tokens"}


# Target decode 10 ms; draft 5 ms per token (c = 0.5, α = 2); verify 25 ms (β = 1.5).
ROUNDS = [(4, 4, 0.020, 0.025, 0.001), (4, 0, 0.020, 0.025, 0.001),
          (4, 2, 0.020, 0.025, 0.001), (4, 1, 0.020, 0.025, 0.001),
          (2, 1, 0.010, 0.020, 0.001)]  # a shortened last round: excluded from a


def test_summarize_group_to_the_digit():
    runs = [raw_run("json", [0.010] * 13), sd_run("json", ROUNDS)]
    s = summarize_group(runs, K)
    assert s["n_rounds"] == 4
    assert s["a"] == pytest.approx((5 + 1 + 3 + 2) / 4)                 # 2.75
    assert s["acceptance_pct"] == pytest.approx(100 * 7 / 16)            # 43.75
    assert s["zero_accept_pct"] == pytest.approx(25.0)
    assert s["per_position_acceptance_pct"] == pytest.approx([75.0, 50.0, 25.0, 25.0])
    assert s["accepted_histogram"] == [1, 1, 1, 0, 1]
    # End-to-end: 14 tokens (the first from the prefill) over prefill + decode.
    assert s["raw_tok_s"] == pytest.approx(14 / (0.5 + 0.13))
    assert s["raw_decode_tok_s"] == pytest.approx(100.0)
    sd_tokens = 5 + 1 + 3 + 2 + 2
    sd_time = 4 * 0.046 + 0.031
    assert s["sd_tok_s"] == pytest.approx((sd_tokens + 1) / (0.7 + sd_time))
    assert s["sd_decode_tok_s"] == pytest.approx(sd_tokens / sd_time)
    assert s["sd_speedup"] == pytest.approx(0.63 / (0.7 + sd_time))
    assert s["sd_decode_speedup"] == pytest.approx(sd_tokens / sd_time / 100.0)
    assert s["sd_speedup_ci"] is None  # one prompt: no interval
    assert any("no 95 % interval below 5 prompts" in w for w in s["warnings"])
    cm = s["cost"]
    assert cm["c"] == pytest.approx(0.5)
    assert cm["alpha"] == pytest.approx(2.0)
    assert cm["beta"] == pytest.approx(1.5)
    assert cm["break_even_a"] == pytest.approx(4.5)
    assert cm["predicted_speedup"] == pytest.approx(2.75 / 4.5)
    assert cm["pays"] is False and cm["margin"] == pytest.approx(2.75 - 4.5)
    assert s["python_overhead_ms_per_round"] == pytest.approx(1.0)
    assert s["python_overhead_pct"] == pytest.approx(100 * 0.004 / 0.184)
    assert s["raw_latency_ms"]["p99"] == pytest.approx(10.0)
    assert s["sd_prompt_wall_s"] == pytest.approx(0.7 + sd_time)
    assert "predicted_speedup" not in s  # no cost probe given: no prediction
    assert any("only 4 full rounds" in w for w in s["warnings"])


def test_p99_latency_uses_linear_percentile():
    lat = [0.010] * 99 + [0.110]
    s = summarize_group([raw_run("code", lat)], K)
    assert s["raw_latency_ms"]["p50"] == pytest.approx(10.0)
    assert s["raw_latency_ms"]["p99"] == pytest.approx(10.0 + 0.01 * 100.0)   # 11.0
    assert any("noisy" in w for w in s["warnings"]) is False


def test_cost_model_break_even():
    cm = cost_model(k=4, a=2.4, target_decode_s=0.033, draft_per_token_s=0.0191,
                    verify_s=0.033 * 2.9)
    # Break-even in seconds: a round (4 drafts of 19.1 ms and a 95.7 ms verify) takes as long
    # as 5.215 plain decodes of 33 ms; a model with exactly that many tokens per round is level.
    assert cm.break_even_a == pytest.approx((4 * 0.0191 + 0.0957) / 0.033)
    level = cost_model(k=4, a=(4 * 0.0191 + 0.0957) / 0.033, target_decode_s=0.033,
                       draft_per_token_s=0.0191, verify_s=0.0957)
    assert level.predicted_speedup == pytest.approx(1.0)
    assert not cm.pays
    assert "SD OFF" in verdict_line("json", cm) and "<" in verdict_line("json", cm)
    on = cost_model(k=2, a=2.8, target_decode_s=0.01, draft_per_token_s=0.0005, verify_s=0.011)
    assert on.pays and on.predicted_speedup == pytest.approx(2.8 / 1.2)
    assert "SD ON" in verdict_line("code", on, 2.1) and "measured 2.10×" in verdict_line(
        "code", on, 2.1)
    with pytest.raises(ValueError):
        cost_model(k=0, a=1, target_decode_s=1, draft_per_token_s=1, verify_s=1)


def results_doc():
    runs = [raw_run("json", [0.010] * 13), sd_run("json", ROUNDS),
            raw_run("story", [0.010] * 5), sd_run("story", ROUNDS[:2])]
    audit = [{"task": "json", "prompt_id": "json-1", "repetition": 0, "identical": True,
              "first_divergence": None, "n_compared": 14},
             {"task": "story", "prompt_id": "story-1", "repetition": 0, "identical": False,
              "first_divergence": 3, "n_compared": 6, "raw_token": 5, "sd_token": 6,
              "raw_top2_margin": 0.125}]
    return {"schema_version": SCHEMA_VERSION, "settings": {"k": K}, "runs": runs,
            "audit": audit}


def test_summarize_per_task_and_overall():
    s = summarize(results_doc())
    assert list(s) == ["json", "story", "overall"]
    assert s["overall"]["n_rounds"] == 6
    # a file from before divergences were classified: their classes unknown (None), not 0
    assert s["story"]["audit"] == {"n": 1, "identical": 0, "min_margin_at_divergence": 0.125,
                                   "numeric": None, "defect": None, "exact_n": 0,
                                   "exact_ok": 0, "drift": None, "unreproducible": 0}
    assert s["overall"]["audit"]["identical"] == 1


def test_printers_share_one_field_list(tmp_path):
    s = summarize(results_doc())
    table = render_table(s)
    assert "accept %" in table and "1+α+β" in table and "overall" in table
    csv_text = render_csv(s)
    header = csv_text.splitlines()[0].split(",")
    assert header[0] == "task" and "sd_p99_ms" in header and len(csv_text.splitlines()) == 4
    details = render_details(s, K)
    assert "json: SD OFF: a = 2.75 < 1 + α + β = 4.50" in details
    assert "0/1 outputs identical" in details and "0.125" in details
    path = tmp_path / "r.json"
    write_json(results_doc(), path)
    assert read_json(path)["settings"]["k"] == K
    assert not list(tmp_path.glob("*.tmp"))


def test_read_json_rejects_foreign_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ResultsError, match="schema_version"):
        read_json(bad)
    (tmp_path / "trunc.json").write_text("{\"schema_version\": 1,")
    with pytest.raises(ResultsError, match="cannot read"):
        read_json(tmp_path / "trunc.json")


def speedup_iid(alpha: float, k: int, c: float) -> float:
    """Leviathan et al. (2023), Theorem 3.8, written out here as the reference: improvement
    factor (1 − α^(k+1)) ÷ ((1 − α)(kc + 1)), verifying k + 1 tokens at one decode's cost."""
    return (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1))


def test_closed_forms_of_leviathan_et_al():
    from cpuspec.core.costs import expected_tokens_iid
    assert expected_tokens_iid(0.8, 4) == pytest.approx((1 - 0.8 ** 5) / 0.2)   # 3.3616
    assert expected_tokens_iid(0.0, 4) == 1.0 and expected_tokens_iid(1.0, 4) == 5.0
    # Their Table/Figure example: α = 0.8, γ = 4, c = 0.05 → ≈ 2.8× (3.3616 / 1.2).
    assert speedup_iid(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)


def test_measured_cost_model_matches_closed_form_when_beta_is_zero():
    """With i.i.d. acceptance (survival α^i) and a verify that costs one decode, our
    generalisation reduces to Leviathan et al.'s improvement factor."""
    from cpuspec.core.costs import predicted_speedup
    alpha, c, t = 0.7, 0.1, 0.02
    survival = [alpha ** i for i in range(1, 9)]
    verify = {n: t for n in range(1, 10)}
    for k in range(1, 9):
        assert predicted_speedup(survival, k, c * t, verify) == pytest.approx(
            speedup_iid(alpha, k, c))


def test_choose_k_and_break_even_by_hand():
    from cpuspec.core.costs import break_even_acceptance, choose_k, expected_tokens
    survival = [0.9, 0.8, 0.6, 0.3]
    d = 0.001  # draft time per token; the target decode V(1) is verify[1]
    verify = {1: 0.010, 2: 0.011, 3: 0.012, 4: 0.014, 5: 0.018}
    assert expected_tokens(survival, 2) == pytest.approx(2.7)
    k_best, table = choose_k(survival, d, verify)
    # speedups: k1 1.9*.01/.012=1.5833, k2 2.7*.01/.014=1.9286, k3 3.3*.01/.017=1.9412,
    #           k4 3.6*.01/.022=1.6364
    assert [round(c.predicted_speedup, 4) for c in table] == [1.0, 1.5833, 1.9286, 1.9412,
                                                               1.6364]
    assert k_best == 3
    # k = 1 needs 1.2 tokens per round: 1 + α = 1.2 → α = 0.2
    assert break_even_acceptance(1, d, verify) == pytest.approx(0.2)
    # On a CPU-like cost (c = 0.6, β(k=4) = 1.9) even perfect acceptance cannot pay at k = 4:
    cpu = {1: 1.0, 5: 2.9}
    assert break_even_acceptance(4, 0.6, cpu) is None
    assert choose_k([1.0] * 4, 0.6, {1: 1.0, 2: 1.6, 3: 2.0, 4: 2.5, 5: 2.9})[0] == 0


def test_extrapolated_survival_by_hand():
    from cpuspec.core.costs import extrapolate_survival
    assert extrapolate_survival([0.9, 0.81], 4) == pytest.approx([0.9, 0.81, 0.729, 0.6561])
    assert extrapolate_survival([0.5], 3) == pytest.approx([0.5, 0.25, 0.125])
    assert extrapolate_survival([0.9, 0.8], 2) == [0.9, 0.8]
