"""Issue 60: the sequential design keeps its coverage. Its t quantile against the textbook
table; by simulation, across true ratios 0.4-1.6 and the per-prompt spreads of this project's
recorded bench runs, the stopped interval covers the true ratio at least 95 % of the time and
"faster"/"slower" is wrong at most 2.5 % each way, at the unit limits 8, 16 and 32."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

from cpuspec.analysis.sequential import Design, look, replay, t_quantile
from cpuspec.analysis.stats import t_975
from cpuspec.results.schema import ResultsError, load_json
from cpuspec.results.store import results_files

ROOT = Path(__file__).resolve().parent.parent


# Student's t, two-sided 95 % (the 0.975 quantile), by degrees of freedom: the textbook table
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
         17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069,
         24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042,
         40: 2.021, 60: 2.000, 120: 1.980}


def test_the_t_quantile_is_the_textbooks():
    """One t quantile serves the fixed design's 95 % and every sequential look (issue 69)."""
    for df, t in T_975.items():
        assert abs(t_quantile(0.95, df) - t) < 1.5e-3, df
        assert t_975(df) == t_quantile(0.95, df)
    assert abs(t_quantile(0.99, 10) - 3.169) < 1e-3      # the 0.995 column
    assert abs(t_quantile(0.99, 4) - 4.604) < 1e-3


def recorded_spreads() -> list[float]:
    """The SD of the per-prompt log speedups, per task, of the recorded bench runs with 5
    or more prompts a task: their smallest, median and largest."""
    from cpuspec.analysis.stats import paired_units, unit_speedups
    sds = []
    for path in results_files(ROOT / "bench/results", recursive=True):
        if not path.name.startswith("bench"):
            continue
        try:
            doc = load_json(path)
        except ResultsError:
            continue
        runs = doc.get("runs") or []
        for task in {r.get("task") for r in runs}:
            raw = [r for r in runs if r.get("task") == task and r.get("mode") == "raw"]
            sd = [r for r in runs if r.get("task") == task and r.get("mode") == "static"]
            try:
                ratios = unit_speedups(paired_units(raw, sd))
            except (KeyError, TypeError):
                continue
            if len(ratios) >= 5:
                sds.append(float(np.log(ratios).std(ddof=1)))
    sds.sort()
    assert len(sds) >= 10, sds
    return [sds[0], sds[len(sds) // 2], sds[-1]]


def simulate(true: float, sd: float, design: Design, n_sim: int, rng) -> dict:
    out = {"missed": 0, "faster": 0, "slower": 0}
    for _ in range(n_sim):
        res = replay(list(np.exp(rng.normal(math.log(true), sd, size=design.max_units))),
                     design)
        lo, hi = res["ci"]
        out["missed"] += not lo <= true <= hi
        out[res["state"]] = out.get(res["state"], 0) + 1
    return out


@pytest.mark.parametrize("max_units", [8, 16, 32])
def test_stopped_intervals_keep_their_coverage(max_units):
    """Coverage ≥ 95 % at every true ratio; at a true ratio of exactly 1 (where a wrong
    "faster" or "slower" is likeliest) each is ≤ 2.5 %, within two Monte Carlo standard
    errors of 2000 runs (0.7 %): stopping at the first 95 % interval that excludes 1, with no
    correction, is wrong about 6 % each way here and fails."""
    rng = np.random.default_rng(max_units)
    design = Design(max_units=max_units)
    for sd in recorded_spreads():
        for true in (0.4, 0.7, 0.9, 1.03, 1.1, 1.3, 1.6):
            res = simulate(true, sd, design, 300, rng)
            assert res["missed"] / 300 <= 0.05 + 0.025, (max_units, sd, true, res)
            wrong = res["faster"] if true < 1 else res["slower"]
            assert wrong / 300 <= 0.025 + 0.018, (max_units, sd, true, res)
        res = simulate(1.0, sd, design, 2000, rng)
        assert res["missed"] / 2000 <= 0.05 + 0.01, (max_units, sd, res)
        assert max(res["faster"], res["slower"]) / 2000 <= 0.025 + 0.007, \
            (max_units, sd, res)


def recorded_residuals() -> list[np.ndarray]:
    """Each recorded bench task's per-prompt log speedups less their mean (8 or more prompts):
    the shapes real prompts give, skew and heavy tails included."""
    from cpuspec.analysis.stats import paired_units, unit_speedups
    out = []
    for path in results_files(ROOT / "bench/results", recursive=True):
        if not path.name.startswith("bench"):
            continue
        try:
            runs = load_json(path).get("runs") or []
        except ResultsError:
            continue
        for task in sorted({r.get("task") for r in runs if r.get("task")}):
            raw = [r for r in runs if r.get("task") == task and r.get("mode") == "raw"]
            sd = [r for r in runs if r.get("task") == task and r.get("mode") == "static"]
            try:
                logs = np.log(unit_speedups(paired_units(raw, sd)))
            except (KeyError, TypeError):
                continue
            if len(logs) >= 8:
                out.append(logs - logs.mean())
    assert len(out) >= 10, len(out)
    return out


def test_coverage_when_prompts_are_drawn_from_the_recorded_ones():
    """Issue 69 item 7: the simulation above draws normal log-ratios, where a Bonferroni
    t-interval is exact by theory. Here each unit is drawn (with replacement) from a recorded
    task's own centred log speedups (18 tasks of 8 prompts: skew and tails as real prompts have
    them), at true ratios 0.9, 1 and 1.1, 400 runs a task. Measured (seed 69): at a true ratio
    of 1 the stopped intervals miss 5.9 % (not ≤ 5 %) and say "faster" 3.8 %, "slower" 2.0 %
    (not ≤ 2.5 % each way): the t-interval at 5 prompts undercovers under skew, and the design's
    promise holds only approximately there (docs/sequential.md). This test holds that measured
    level as a bound, so a change that makes it worse fails; the nominal bound stays the
    normal-draw test's."""
    rng = np.random.default_rng(69)
    design = Design(max_units=16)
    for true in (0.9, 1.0, 1.1):
        missed = wrong = n = 0
        for res_logs in recorded_residuals():
            for _ in range(400):
                units = np.exp(math.log(true) + rng.choice(res_logs, size=16))
                res = replay(list(units), design)
                lo, hi = res["ci"]
                missed += not lo <= true <= hi
                wrong += res["state"] == ("faster" if true <= 1 else "slower") or (
                    true == 1 and res["state"] == "slower")
                n += 1
        se = math.sqrt(0.06 * 0.94 / n)
        assert missed / n <= 0.06 + 3 * se, (true, missed / n)             # measured ≤ 5.9 %
        assert wrong / n <= (0.06 if true == 1 else 0.025) + 3 * se, (true, wrong / n)


def test_the_simulation_can_fail():
    """The same simulation with no correction (each look at 95 %) breaks the 2.5 % bound."""
    rng = np.random.default_rng(7)
    naive = Design(max_units=16, alpha=0.05 * 4)   # level 1 − α/K = 0.95 per look
    res = simulate(1.0, 0.09, naive, 2000, rng)
    assert max(res["faster"], res["slower"]) / 2000 > 0.025 + 0.007, res


def test_a_clear_answer_stops_at_the_first_look_and_a_close_one_runs_on():
    design = Design(max_units=16)
    clear = replay([0.62, 0.66, 0.59, 0.70, 0.64, 0.61, 0.65, 0.63], design)
    assert clear["state"] == "slower" and clear["units"] == 5
    close = [1.02, 0.97, 1.05, 0.99, 1.01, 0.96, 1.04, 1.00, 0.98, 1.03, 1.01, 0.99, 1.02,
             0.98, 1.00, 1.01]
    out = replay(close, design)
    assert out["state"] in ("no difference", "undecided") and out["units"] > 5
    assert look(close[:6], design)["state"] == "continue"     # 6 is not a look


def test_bench_stops_a_decided_task_and_fixed_runs_every_prompt(tiny_models, tmp_path):
    """Issue 60 item 4, bench: a task stops at a look (5 or 8 of its 8 prompts), the verdict
    and interval the screen prints are the stopping look's, and --fixed runs all 8. Prompt
    lookup (no draft model, so no ceiling from the probe) takes the design's own path."""
    from click.testing import CliRunner

    from cpuspec.analysis.summary import summarize
    from cpuspec.cli.main import main
    args = ["bench", "--target", str(tiny_models["target"]), "--threads", "1",
            "--max-tokens", "24", "-k", "4", "--prompts-per-task", "8", "--warmup", "0",
            "--tasks", "json,code", "--policy", "static", "--drafter", "lookup"]
    seq, fixed = tmp_path / "seq.json", tmp_path / "fixed.json"
    res = CliRunner().invoke(main, [*args, "--json", str(seq)])
    assert res.exit_code == 0, res.output
    doc = load_json(seq)
    assert doc["settings"]["sequential"] and "ceiling" not in doc["settings"]["sequential"]
    summary = summarize(doc)
    for task in ("json", "code"):
        ran = len({r["prompt_id"] for r in doc["runs"] if r["task"] == task})
        state = summary[task]["sequential"]["state"]
        assert ran in (5, 8) and state != "continue", (task, ran, state)
        assert ran == 8 or state in ("faster", "slower", "no difference"), (task, ran, state)
    assert "each task stopped once decided" in " ".join(res.output.split())
    res = CliRunner().invoke(main, [*args, "--fixed", "--json", str(fixed)])
    assert res.exit_code == 0, res.output
    doc = load_json(fixed)
    assert doc["settings"]["sequential"] is None and len({r["prompt_id"]
                                                          for r in doc["runs"]}) == 16


def test_a_draft_whose_probe_says_no_acceptance_pays_runs_only_the_first_look(
        tiny_models, heavy_draft, tmp_path):
    """Issue 60 item 5: the heavy draft costs several target decodes, so its cost probe shows
    that even every draft accepted is slower at every k: said before the prompts, and each
    task runs the first look's 5 prompts (of 8), whose verdict is slower."""
    from click.testing import CliRunner

    from cpuspec.analysis.summary import summarize
    from cpuspec.cli.main import main
    from cpuspec.core.costs import ceiling_speedup
    from cpuspec.results.records import CostProbe
    out = tmp_path / "seq.json"
    res = CliRunner().invoke(main, [
        "bench", "--target", str(tiny_models["target"]), "--draft", str(heavy_draft),
        "--threads", "1", "--max-tokens", "24", "-k", "4", "--prompts-per-task", "8",
        "--warmup", "0", "--tasks", "json,code", "--policy", "static", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = load_json(out)
    p = CostProbe.of(doc["cost_probe"])
    assert all(ceiling_speedup(p.verify_s, p.draft_s, k) <= 1 for k in range(1, max(p.verify_s)))
    assert doc["settings"]["sequential"]["max_units"] == 5
    summary = summarize(doc)
    for task in ("json", "code"):
        assert len({r["prompt_id"] for r in doc["runs"] if r["task"] == task}) == 5
        assert summary[task]["sequential"]["state"] == "slower", summary[task]["sequential"]
    text = " ".join(res.output.split())
    assert "no acceptance is enough at these costs" in text and "ceiling" in text


def test_the_cap_follows_the_recorded_probes_ceiling():
    """On machine B′ the default pair at Q4_K_M cannot pay at any k even with every draft
    accepted (its recorded probe's best is 0.74× at k = 1: capped at the first look), while
    its Q8_0 target with a Q4_0 draft can (no cap: the design keeps its looks)."""
    from cpuspec.analysis.sequential import ceiling_cap

    def probe(name):
        return json.loads((ROOT / "bench/results/epyc-family25-model17" / name)
                          .read_text())["cost_probe"]
    cap = ceiling_cap(probe("costs_q4km.json"), 8)
    assert cap == {"max_units": 5, "ceiling": 0.744, "ceiling_k": 1}
    assert ceiling_cap(probe("costs_q8_0.json"), 8) is None


def test_a_ratio_that_is_no_speed_ratio_counts_in_nothing_and_one_prompt_is_a_range():
    out = look([0.6, float("nan"), 0.0, 0.62, 0.58, 0.61, 0.63, 0.6, 0.59], Design(max_units=8))
    assert out["units"] == 7 and out["state"] == "continue"   # 7 real ratios: not a look
    one = replay([0.7], Design(max_units=1))
    assert one["state"] == "undecided" and one["ci"] is None


def test_precision_is_a_flag_recorded_in_the_run_and_said_on_the_screen(tiny_models, tmp_path):
    """Issue 69 item 6: --precision sets the width within which a task stops as "no
    difference"; the run records it, the design reads it back, the screen says it; --fixed
    refuses it (nothing stops early there)."""
    from click.testing import CliRunner

    from cpuspec.analysis.sequential import Design
    from cpuspec.cli.main import main
    args = ["bench", "--target", str(tiny_models["target"]), "--threads", "1",
            "--max-tokens", "16", "-k", "4", "--prompts-per-task", "5", "--warmup", "0",
            "--tasks", "json", "--policy", "static", "--drafter", "lookup"]
    out = tmp_path / "p.json"
    res = CliRunner().invoke(main, [*args, "--precision", "0.3", "--json", str(out)])
    assert res.exit_code == 0, res.output
    seq = load_json(out)["settings"]["sequential"]
    assert seq["precision"] == 0.3 and Design.of(seq, 5).precision == 0.3
    assert "'no difference' once within ±30 %" in " ".join(res.output.split())
    res = CliRunner().invoke(main, [*args, "--fixed", "--precision", "0.3"])
    assert res.exit_code == 2 and "--precision is the sequential design's" in res.output


def test_a_sequential_run_draws_each_tasks_order_and_records_the_draw(tiny_models, tmp_path):
    """Issue 69 item 5: prompts ran in suite order, so every stop at 5 judged the same five
    prompts. Each sequential run now shuffles each task's prompts with a recorded seed; the
    results keep the order run (what a replay follows); --fixed keeps the suite's order."""
    from click.testing import CliRunner

    from cpuspec.cli.main import main
    from cpuspec.inputs.tasks import load_prompts, shuffled_within_tasks
    suite = load_prompts(["json", "code"], None, 8)
    draws = {tuple(p.prompt_id for p in shuffled_within_tasks(suite, s)) for s in range(5)}
    assert len(draws) > 1
    for order in draws:
        assert sorted(order) == sorted(p.prompt_id for p in suite)
        assert all(i.startswith("json") for i in order[:8])     # tasks stay in order
    args = ["bench", "--target", str(tiny_models["target"]), "--threads", "1",
            "--max-tokens", "8", "-k", "2", "--prompts-per-task", "8", "--warmup", "0",
            "--tasks", "json,code", "--policy", "static", "--drafter", "lookup"]
    out = tmp_path / "seq.json"
    assert CliRunner().invoke(main, [*args, "--json", str(out)]).exit_code == 0
    doc = load_json(out)
    seed = doc["settings"]["sequential"]["order_seed"]
    drawn = [p.prompt_id for p in shuffled_within_tasks(suite, seed)]
    assert [p["prompt_id"] for p in doc["prompts"]] == drawn
    ran = list(dict.fromkeys(r["prompt_id"] for r in doc["runs"]))
    assert ran == [i for i in drawn if i in ran]
    fixed = tmp_path / "fixed.json"
    assert CliRunner().invoke(main, [*args, "--fixed", "--json", str(fixed)]).exit_code == 0
    assert [p["prompt_id"] for p in load_json(fixed)["prompts"]] == [p.prompt_id for p in suite]
