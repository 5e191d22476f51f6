"""tune's confirmation race (issue 60): members predicted fastest run in blocks up to the
sequential design's looks, and one clearly behind the leader stops; the rule keeps its error
rate with the leader chosen from the data, it stops a clear loser at the first look, and in
tune it runs for real on tiny models."""
import math
from pathlib import Path

import numpy as np
import pytest

from cpuspec.analysis.sequential import Design
from cpuspec.results.store import load_json
from cpuspec.tune.race import race_design, race_members, run_race
from test_sequential import recorded_spreads

ROOT = Path(__file__).resolve().parents[1]


def simulated_race(offsets: list[float], sd: float, design: Design, rng) -> dict:
    """One race of members whose true log speeds differ by `offsets`; each prompt has a speed
    of its own (shared by every member, as a prompt's length is) and each member's run on it a
    noise of its own, so that a pair's log ratio has the recorded spread sd."""
    prompt = rng.normal(0.0, 0.5, size=design.max_units)
    noise = rng.normal(0.0, sd / math.sqrt(2), size=(len(offsets), design.max_units))

    def measure(alive, start, stop):
        return {k: [{"prompt_id": f"p{i}", "n_tokens": 64,
                     "e2e_s": 64 / math.exp(5 + offsets[k] + prompt[i] + noise[k, i])}
                    for i in range(start, stop)] for k in alive}, True
    return run_race(list(range(len(offsets))), race_design(design.max_units, len(offsets)),
                    measure)


@pytest.mark.parametrize("max_units", [8, 16])
def test_a_member_as_fast_as_the_best_is_stopped_as_slower_at_most_alpha_over_two(max_units):
    """Two members equally fast and best, two behind: across the recorded spreads, either best
    one stopped as "slower" than the leader happens in ≤ 2.5 % of 1000 races (+ two Monte
    Carlo standard errors)."""
    rng = np.random.default_rng(max_units)
    design = Design(max_units=max_units)
    for sd in recorded_spreads():
        wrong = sum(any(r["members"][k]["state"] == "slower" for k in (0, 1))
                    for r in (simulated_race([0.0, 0.0, -0.05, -0.3], sd, design, rng)
                              for _ in range(1000)))
        assert wrong / 1000 <= 0.025 + 0.01, (sd, wrong)


def test_the_error_bound_can_fail_without_the_split():
    """The same race with each look at 95 % and no split over pairs or looks stops a best
    member as slower far more often than 2.5 %."""
    rng = np.random.default_rng(3)
    naive = Design(max_units=16, alpha=0.05 * 4)   # 4 looks: 1 − α/K = 0.95 per look
    wrong = 0
    for _ in range(1000):
        prompt = rng.normal(0.0, 0.5, size=16)
        noise = rng.normal(0.0, 0.09, size=(4, 16))

        def measure(alive, start, stop):
            return {k: [{"prompt_id": f"p{i}", "n_tokens": 64,
                         "e2e_s": 64 / math.exp(5 + prompt[i] + noise[k, i])}
                        for i in range(start, stop)] for k in alive}, True
        res = run_race([0, 1, 2, 3], naive, measure)
        wrong += any(m["state"] == "slower" for m in res["members"].values())
    assert wrong / 1000 > 0.025 + 0.01, wrong


def test_a_clear_loser_stops_at_the_first_look_and_the_winner_runs_on():
    """A member 0.7× the others stops at 5 prompts in most races (median recorded spread);
    the leader is never it."""
    rng = np.random.default_rng(11)
    design = Design(max_units=16)
    sd = recorded_spreads()[1]
    races = [simulated_race([0.0, -0.02, math.log(0.7)], sd, design, rng) for _ in range(300)]
    stopped = sum(r["members"][2].get("at") == 5 for r in races)
    assert stopped / 300 >= 0.8, stopped
    assert all(r["leader"] != 2 for r in races)


def test_a_recorded_slower_sd_run_loses_the_race_to_raw_at_the_first_look():
    """Machine B″'s recorded Q4_0 pair (k 3): per task, raw decoding and SD race on the
    recorded runs in their order; where the full run's 8-prompt interval says SD is slower,
    the race stops SD at 5 prompts and raw leads."""
    from cpuspec.analysis.summary import summarize
    doc = load_json(ROOT / "bench/results/epyc-family25-model17/bench_q4_0_k3.json.gz")
    verdicts = summarize(doc)
    checked = 0
    for task in dict.fromkeys(r["task"] for r in doc["runs"]):
        runs = {m: [r for r in doc["runs"] if r["task"] == task and r["mode"] == m]
                for m in ("raw", "static")}
        order = list(dict.fromkeys(r["prompt_id"] for r in runs["raw"]))

        def measure(alive, start, stop):
            ids = set(order[start:stop])
            return {m: [r for r in runs[m] if r["prompt_id"] in ids] for m in alive}, True
        res = run_race(["raw", "static"], race_design(len(order), 2), measure)
        if verdicts[task]["sd_significance"] == "slower":
            assert res["leader"] == "raw" and res["members"]["static"]["at"] == 5, task
            checked += 1
    assert checked >= 1


class _Opt:
    def __init__(self, name, k, vs_ref, own=1.0):
        self.candidate, self.k, self.p_min = name, k, 0.0
        self.predicted_vs_reference_raw, self.predicted_speedup = vs_ref, own

    @property
    def key(self):
        return self.candidate, self.k, self.p_min


def test_members_are_the_fastest_few_and_where_sd_pays_most_and_the_yardstick():
    a, b, c, d = _Opt("a", 3, 1.3), _Opt("a", 4, 1.2), _Opt("t (SD off)", 0, 1.0), \
        _Opt("b", 2, 0.9, own=1.6)
    e = _Opt("u (SD off)", 0, 1.25)
    assert [m.key for m in race_members([c, a, b, a], d, 2)] == [a.key, b.key, d.key]
    assert [m.key for m in race_members([c, a, b], _Opt("b", 2, 0.9, own=0.95), 2)] == \
        [a.key, b.key]          # SD that does not pay is no member of its own right
    # the yardstick (raw decoding on the reference) races but takes none of the `size` places
    assert [m.key for m in race_members([c, e, a, b], None, 2, c)] == [a.key, e.key, c.key]
    assert race_members([c], None, 2, c) == []           # nothing to race it against


def test_tune_races_and_stops_a_heavy_draft_at_the_first_look(tiny_models, heavy_draft,
                                                               monkeypatch):
    """Two drafts forced to look as if they paid at k = 2: the tiny same-size draft and one
    that costs several target decodes. On 8 confirm prompts (looks at 5 and 8) the heavy
    draft stops at 5, behind the leader, and the fastest answer is the race's leader, confirmed
    on every confirm prompt."""
    from cpuspec.harness.bench import BenchConfig
    from cpuspec.inputs.models import local_model
    from cpuspec.inputs.tasks import builtin_prompts
    from cpuspec.report.tune import render_tune
    from cpuspec.tune import search as tune
    from test_tune import force_paying_at_k2
    force_paying_at_k2(monkeypatch)
    t = local_model(tiny_models["target"])
    cands = [tune.Candidate(t, local_model(tiny_models["draft"])),
             tune.Candidate(t, local_model(heavy_draft))]
    cfg = BenchConfig(prompts=builtin_prompts(["code"], 12), threads=1, max_tokens=16)
    doc = tune.run_tune(cfg, cands, k_max=2, pilot=False)
    rec = doc["recommendations"]["code"]
    race = {(m["candidate"], m["k"]): m for m in rec["race"]}
    heavy = race[(cands[1].name, 2)]
    assert heavy["state"] == "slower" and heavy["prompts"] == 5 and heavy["at"] == 5
    assert heavy["confirmed"]["n_prompts"] == 5 and heavy["confirmed"]["measured_speedup_ci"]
    assert heavy["confirmed"]["audit"]["n"] == 5        # its lossless audit, on what it ran
    leader = [m for m in rec["race"] if m["state"] == "leader"]
    assert len(leader) == 1 and (leader[0]["candidate"], leader[0]["k"]) == \
        (rec["recommended"]["candidate"], rec["recommended"]["k"])
    assert ("target (SD off)", 0) in race
    assert leader[0]["prompts"] == 8          # the last one in runs on: confirmed on all 8
    out = render_tune(doc)
    assert "The confirmation race" in out and "slower than the leader at 5" in out


def test_a_race_cut_short_says_so_and_leads_only_with_what_ran():
    """The budget ends a race inside its second block: the members still in are "cut short",
    the one that never ran leads nothing, and a loser stopped at 5 keeps its stop."""
    calls = []

    def measure(alive, start, stop):
        calls.append((list(alive), start, stop))
        if start == 0:
            return {k: [{"prompt_id": f"p{i}", "n_tokens": 64,
                         "e2e_s": {"a": 1.0, "b": 1.02 * (1 + 0.05 * (-1) ** i),
                                   "c": 3.0}[k] * (1 + 0.01 * i)}
                        for i in range(5)] for k in alive}, True
        return {}, False          # the budget, before any member of the block ran
    res = run_race(["a", "b", "c"], race_design(8, 3), measure)
    assert calls[1][0] == ["a", "b"]          # c stopped at the first look
    assert res["members"]["c"]["state"] == "slower" and res["members"]["c"]["at"] == 5
    assert res["leader"] == "a" and res["members"]["b"]["state"] == "cut short"
    empty = run_race(["a", "b"], race_design(8, 2), lambda alive, s, e: ({}, False))
    assert empty["leader"] is None and all(m["state"] == "cut short"
                                           for m in empty["members"].values())


def test_a_race_cut_inside_its_first_block_has_no_leader():
    """Recorded on machine B‴ (tune_race/race.json, code): the budget cut the race after an SD
    member's first block and before the raw members ran, and that SD member "led" them. A
    member still in that never ran leaves the race without a leader."""
    half = run_race(["a", "b"], race_design(8, 2), lambda alive, s, e: (
        {"a": [{"prompt_id": "p0", "n_tokens": 64, "e2e_s": 1.0}]}, False))
    assert half["leader"] is None and half["members"]["a"]["state"] == "cut short"


def test_the_screen_does_not_serve_an_sd_answer_its_race_found_slower():
    """The recorded races on machine B‴. In the second, SD pays on the Q8_0 target against its
    own raw (json 1.33× [1.04, 1.71]), but the race stopped every SD answer as slower than raw
    decoding on the Q4_0 target; the one-screen report used to end with "Next: serve it" for
    the Q8_0 pair. It says what beat it instead, by the race's own figures. In the first race
    code's was cut short (nothing beaten): its SD answer is served as before."""
    from click.testing import CliRunner

    from cpuspec.cli.main import main

    def screen_of(name):
        out = CliRunner().invoke(main, ["report", str(
            ROOT / "bench/results/epyc-family25-model17" / name)]).output
        assert max(len(line) for line in out.splitlines()) <= 100
        return out, " ".join(out.split())
    out, flat = screen_of("tune_race_r2/race.json.gz")
    assert "Beaten in tune's race, × the leader at the look that stopped it, on the same " \
           "prompts: json by qwen2.5-coder-1.5b-q4_0 (SD off), 0.69× [0.48, 0.99] at 5 prompts; code by " \
           "qwen2.5-coder-1.5b-q4_0 (SD off), 0.59× [0.45, 0.77] at 5 prompts" in flat, out
    assert "serve it" not in out and "llama-server" not in out
    assert "Next: run what beat the SD answer (json, code)" in flat
    out, flat = screen_of("tune_race/race.json.gz")
    assert "Beaten in tune's race, × the leader at the look that stopped it, on the same " \
           "prompts: json by " in flat
    assert "; code by" not in flat and "Next: serve it (code; k = 7;" in flat, out


def test_a_member_within_the_precision_is_said_not_separated_from_the_fastest():
    """Issue 69 item 8: in the first recorded race, raw Q4_K_M stopped within ±5 % of the
    Q4_0 leader on json: "fastest" there is the leader of a tie, and the report says so."""
    from click.testing import CliRunner

    from cpuspec.cli.main import main
    out = CliRunner().invoke(main, ["report", str(
        ROOT / "bench/results/epyc-family25-model17/tune_race/race.json.gz"), "--details"])
    flat = " ".join(out.output.split())
    assert "json: not separated from qwen2.5-coder-1.5b-q4km (SD off) (k -; ±5 %, 0.99× " \
           "[0.96, 1.01] the leader at 5 prompts)" in flat, out.output
