"""`cpuspec paths` and the llama.cpp programs behind it: the paths run end to end on tiny
models, the imitation of llama.cpp's draft bookkeeping changes time, not tokens, and every
printed llama.cpp command line uses flags the vendored llama.cpp accepts (checked against the
programs' --help where they are built)."""
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REAL_MODELS_HOME
from fakes import Counting
from cpuspec.llama import native
from cpuspec.cli.main import main
from cpuspec.llama.engine import Model, Session
from cpuspec.harness.paths import verify_redecode
from cpuspec.core.speculative import generate_speculative, verify_greedy
from cpuspec.results.schema import load_json, results_text


def real_bin_dir(need=native.BUILD_TARGETS):
    """llama.cpp's programs if this machine has them: $CPUSPEC_LLAMA_BIN, the cached build
    under the user's cpuspec home (not the test's), or PATH."""
    old = os.environ.get("CPUSPEC_HOME")
    os.environ["CPUSPEC_HOME"] = REAL_MODELS_HOME
    try:
        return native.find_bin_dir(None, need)
    finally:
        os.environ["CPUSPEC_HOME"] = old


def test_the_redecode_imitation_costs_a_draft_batch_per_round_and_changes_no_token(tiny_models):
    """llama.cpp's draft-simple decodes the verify batch [last, d1..dk] on the draft again each
    round. Imitated, the output and every round's acceptance stay as they were (a draft KV left
    with duplicate or missing positions would change them), and the draft decodes k + 1 more
    tokens in each round that drafted."""
    with Model(tiny_models["target"]) as tm, Model(tiny_models["draft"]) as dm, \
            Session(tm, 256, 1) as target, Session(dm, 256, 1) as dsess:
        prompt = tm.tokenize("The quick brown fox jumps over the lazy dog. The quick")
        plain, imitated = Counting(dsess), Counting(dsess)
        a = generate_speculative(target, plain, prompt, 40, 4, verify=verify_greedy)
        b = generate_speculative(target, imitated, prompt, 40, 4, verify=verify_redecode)
    assert a.tokens == b.tokens
    assert [(r.k, r.n_accepted) for r in a.rounds] == [(r.k, r.n_accepted) for r in b.rounds]
    assert 0 < sum(r.n_accepted for r in a.rounds) < sum(r.k for r in a.rounds)  # mixed rounds
    extra = sum(r.k + 1 for r in b.rounds if r.k)
    assert imitated.decoded - plain.decoded == extra


def run_paths(tiny_models, tmp_path, *args):
    out = tmp_path / "paths.json"
    res = CliRunner().invoke(main, ["paths", "--target", str(tiny_models["target"]), "--draft",
                                    str(tiny_models["draft"]), "--tasks", "json,code",
                                    "--prompts-per-task", "1", "-n", "12", "-t", "1",
                                    "--no-save", "--json", str(out), *args])
    return res, out


def test_paths_measures_each_path_against_its_own_raw_decoding(tiny_models, tmp_path):
    res, out = run_paths(tiny_models, tmp_path, "-k", "3", "--paths",
                         "cpuspec,cpuspec+redecode,llama-cpp-python")
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["kind"] == "paths" and doc["complete"] and doc["schema_version"] >= 2
    assert {(r["path"], r["mode"]) for r in doc["runs"]} == {
        ("cpuspec", "raw"), ("cpuspec", "static"), ("cpuspec+redecode", "static"),
        ("llama-cpp-python", "raw"), ("llama-cpp-python", "static")}
    assert {r["prompt_id"] for r in doc["runs"]} == {"json-1", "code-1"}
    # greedy SD is lossless on every path: the SD text is the raw text, prompt by prompt
    raw = {(r["path"], r["prompt_id"]): r["text"] for r in doc["runs"] if r["mode"] == "raw"}
    for r in doc["runs"]:
        if r["mode"] == "static":
            base = "cpuspec" if r["path"] == "cpuspec+redecode" else r["path"]
            assert r["text"] == raw[(base, r["prompt_id"])], r
            # llama-cpp-python streams a token that ends inside a UTF-8 character with the
            # next one, and skips its length check on it (the tiny models' vocabulary is
            # bytes): its chunks are not exactly its tokens
            assert r["n_tokens"] == 12 or r["path"] == "llama-cpp-python" and \
                0 < r["n_tokens"] <= 12 + 3
    assert "range" in res.output and "2 prompts" in res.output   # 2 prompts: no interval
    for path in ("cpuspec+redecode", "llama-cpp-python"):
        assert path in res.output


@pytest.mark.parametrize("args, message", [
    (["--paths", "cpuspec,bogus"], "unknown path bogus"),
    (["--paths", "cpuspec+redecode", "--drafter", "hybrid"], "needs --drafter model"),
    (["--paths", "", ], "unknown path"),
])
def test_paths_refuses_bad_choices(tiny_models, tmp_path, args, message):
    res, out = run_paths(tiny_models, tmp_path, *args)
    assert res.exit_code == 2 and message in res.output
    assert "Traceback" not in res.output and not out.exists()


def test_a_named_llama_bin_without_the_programs_is_an_error(tiny_models, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    res, out = run_paths(tiny_models, tmp_path, "--paths", "cpuspec,llama.cpp", "--llama-bin",
                         str(empty))
    assert res.exit_code == 2 and "has no llama-speculative-simple" in res.output   # usage
    assert not out.exists()


@pytest.mark.parametrize("drafter", ["model", "hybrid", "lookup"])
def test_printed_llama_cpp_flags_are_ones_that_version_accepts(drafter):
    """Every flag of the printed server and CLI command lines appears in that program's --help
    (the llama.cpp that llama-cpp-python vendors renamed --draft-max to --spec-draft-n-max: a
    stale flag stops the server at start)."""
    bin_dir = real_bin_dir((native.SERVER, native.CLI))
    if bin_dir is None:
        pytest.skip("llama.cpp's llama-server and llama-cli are not built here "
                    "(`cpuspec paths --build-native`)")
    for tool, argv in native.invocations("t.gguf", "d.gguf", 7, drafter, 2).items():
        known = native.help_flags(bin_dir, tool)
        assert native.unknown_flags(argv, known) == [], tool
        # the help's removed arguments do not count: a printed --draft-max would fail here
        assert "--spec-draft-n-max" in known and "--draft-max" not in known


def test_unknown_flags_finds_a_flag_missing_from_help():
    known = {"-m", "--spec-draft-n-max", "-t"}
    assert native.unknown_flags(["llama-server", "-m", "x", "--draft-max", "7", "-t", "2"],
                                known) == ["--draft-max"]


def test_llama_cpp_runs_the_configuration_losslessly(tiny_models):
    """llama-speculative-simple and llama-completion on the tiny models: the SD text equals
    the raw text and both report a time window."""
    bin_dir = real_bin_dir(native.MEASURED)
    if bin_dir is None:
        pytest.skip("llama.cpp's llama-speculative-simple and llama-completion are not built "
                    "here (`cpuspec paths --build-native`)")
    prompt = "The quick brown fox jumps over the lazy dog. The quick"
    raw = native.run_completion(bin_dir, str(tiny_models["target"]), prompt, 16, 1, 256)
    sd = native.run_speculative(bin_dir, str(tiny_models["target"]), str(tiny_models["draft"]),
                                prompt, 16, 3, 1, 256)
    assert raw.tokens == 16 and raw.e2e_s > 0
    # llama-completion ends its output with a newline; the SD program may go past -n (its
    # last round drafts whatever is left, then accepts)
    assert sd.text.startswith(raw.text.rstrip("\n")) and sd.e2e_s > 0
    assert sd.tokens >= 16 and sd.acc_rate_pos and sd.draft_gen_ms > 0
    assert sd.drafted > 0 and 0 <= sd.accepted <= sd.drafted
    detailed = native.run_speculative(bin_dir, str(tiny_models["target"]),
                                      str(tiny_models["draft"]), prompt, 16, 3, 1, 256,
                                      per_round=True)
    assert detailed.text == sd.text
    # every round after the first, timed from the debug log: drafting, then the rest
    assert len(detailed.round_phases_ms) == len(detailed.rounds) - 1
    assert all(a >= 0 and b >= 0 for a, b in detailed.round_phases_ms)
    assert sum(d for _, d in detailed.rounds) == detailed.drafted
    assert sum(a for a, _ in detailed.rounds) == detailed.accepted


RECORDED = Path(__file__).resolve().parent.parent / "bench" / "results"


def test_advise_prints_how_to_run_the_advised_k_outside_cpuspec():
    """On a recorded bench file: for the k advise picks, the llama.cpp server and CLI lines
    and the llama-cpp-python call carry that k, that target and that draft."""
    run = RECORDED / "epyc-family25-model17" / "bench_q8_0_k7.json.gz"
    doc = load_json(run)
    advice = json.loads(CliRunner().invoke(main, ["advise", str(run), "--json"]).output)
    ks = {a["k_best"] for a in advice.values() if a["verdict"] == "ON"}
    assert ks, "the recorded run has tasks where SD is advised"
    out = CliRunner().invoke(main, ["advise", str(run), "--details"]).output
    target, draft = doc["models"]["target"]["path"], doc["models"]["draft"]["path"]
    for k in ks:
        assert f"llama-server -m {target} --spec-type draft-simple -md {draft} " \
               f"--spec-draft-n-max {k} " in out
        assert f"draft_model=cpuspec.DraftModel('{draft}', k={k}, n_threads=2)" in out
    assert "cpuspec paths --target" in out   # nothing measured here yet: how to measure it


def test_tune_report_prints_how_to_run_and_what_paths_measured(cpuspec_home):
    """Under each SD answer of a recorded tune: the llama.cpp lines; and once a `cpuspec paths`
    run of that configuration is saved here, what it measured (the figures its own report
    prints)."""
    tune = RECORDED / "epyc-family25-model17" / "tune.json.gz"
    out = CliRunner().invoke(main, ["report", str(tune), "--details"]).output
    assert "code: SD pays most: cpuspec bench" in out
    assert "--spec-type ngram-simple,draft-simple --spec-ngram-simple-size-n 8" in out  # hybrid
    assert "how much of the gain each keeps: cpuspec paths" in out
    recorded = RECORDED / "epyc-family25-model17" / "paths_q8_0_k7.json.gz"
    saved = cpuspec_home / "results"
    saved.mkdir(parents=True)
    (saved / "20261201T000000Z-host-AMD-EPYC-paths.json").write_text(results_text(recorded))
    out = CliRunner().invoke(main, ["report", str(tune), "--details"]).output
    printed = CliRunner().invoke(main, ["report", str(recorded), "--details"]).output   # paths' own report
    line = next(x for x in out.splitlines() if "measured here" in x)
    task = line.split("-paths, ")[1].split("):")[0]     # the answer's own task (--tasks)
    block = printed.split(f"\n{task}:")[1]
    row = {line.split()[0]: line.split() for line in block.splitlines()[3:7] if line.strip()}
    assert f"llama.cpp SD ×raw {row['llama.cpp'][3]} = {row['llama.cpp'][-3]} of cpuspec's " \
           f"{row['cpuspec'][3]}" in line


def test_a_file_from_another_machine_is_not_answered_with_this_machines_paths_run(
        cpuspec_home):
    """Machine C's tune (AVX2 only) names the same derived files as machine B's paths run, but
    B's measurement says nothing about C: no "measured here" line for it."""
    saved = cpuspec_home / "results"
    saved.mkdir(parents=True)
    recorded = RECORDED / "epyc-family25-model17" / "paths_q8_0_k7.json.gz"
    (saved / "20261201T000000Z-host-AMD-EPYC-paths.json").write_text(results_text(recorded))
    tune_c = RECORDED / "epyc-family25-model1" / "tune_json_code.json.gz"
    out = CliRunner().invoke(main, ["report", str(tune_c), "--details"]).output
    assert "SD pays most" in out and "llama-server -m" in out
    assert "measured here" not in out and "how much of the gain each keeps" in out


def test_advise_says_whether_one_draftless_flag_pays(cpuspec_home):
    """Under a recorded bench run's advice: llama.cpp's draftless types as saved paths runs of
    this machine measured them in llama-server on the same target, each with the server's SD
    ×raw as that run's own report prints it, and whether one pays (an interval above 1)."""
    here = RECORDED / "epyc-family25-model1"
    run = here / "pmin0_adaptive_q8_0_k7.json.gz"
    out = CliRunner().invoke(main, ["advise", str(run), "--details"]).output
    assert "One flag, no draft model" in out
    assert "not measured here yet: cpuspec paths --target" in out and \
        "--server-flags '--spec-default'" in out
    saved = cpuspec_home / "results"
    saved.mkdir(parents=True)
    names = ("server_ngram_simple_grounded", "server_ngram_mod_grounded",
             "server_spec_default_grounded")
    for i, name in enumerate(names):
        (saved / f"20261203T00000{i}Z-host-AMD-EPYC-paths.json").write_text(
            (here / f"{name}.json").read_text())
    out = CliRunner().invoke(main, ["advise", str(run), "--details"]).output
    line = next(x for x in out.splitlines() if x.strip().startswith("grounded:"))
    for name, flags in zip(names, ("--spec-type ngram-simple --spec-ngram-simple-size-n 2",
                                   "--spec-type ngram-mod", "--spec-default")):
        printed = CliRunner().invoke(main, ["report", str(here / f"{name}.json"),
                                            "--details"]).output
        server = next(x for x in printed.split("overall:")[1].splitlines()
                      if x.startswith("llama-server"))
        assert f"{flags}" in line and server.split()[3] in line, (line, server)
    # 1.21, 1.13 and 1.10 over 5 prompts, none with its interval above 1
    assert "none shown to pay" in line
    # a file from another machine (B) is not answered with this machine's runs
    other = RECORDED / "epyc-family25-model17" / "bench_q8_0_k7.json.gz"
    out = CliRunner().invoke(main, ["advise", str(other), "--details"]).output
    assert "not measured here yet" in out


def test_a_follow_up_is_measured_at_its_second_turn_read_whole(tiny_models):
    """A follow-up prompt: the target answers the first turn once (greedy, untimed), and every
    path reads the whole conversation. Checked against the engine directly: the recorded first
    answer is the target's greedy answer, and the measured raw text continues the second
    turn's conversation as greedy decoding does."""
    from cpuspec.core.speculative import generate_raw
    from cpuspec.harness.paths import PathsConfig, measure_paths
    from cpuspec.harness.turns import FIRST_TURN_TOKENS
    from cpuspec.inputs.tasks import Prompt
    p = Prompt("json", "turn-1", "Name three colours as a JSON list.",
               "Now the same list, reversed.")
    cfg = PathsConfig(tiny_models["target"], tiny_models["draft"], 3, "model", [p], 10, 1,
                      ("cpuspec",))
    doc = measure_paths(cfg, {}, lambda _: None)
    with Model(tiny_models["target"]) as tm, Session(tm, 512, 1) as s:
        first = tm.tokenize(tm.format_chat(p.text))
        answer = [t for t in generate_raw(s, first, FIRST_TURN_TOKENS).tokens
                  if not tm.is_eog(t)]
        answer_text = tm.detokenize(answer)
        conversation = tm.format_chat(p.followup, [(p.text, answer_text)])
        second = tm.tokenize(conversation)
        want = tm.detokenize(generate_raw(s, second, 10).tokens)
    info = doc["followups"]["turn-1"]
    assert info["first_answer"] == answer_text and answer_text
    assert info["second_turn_tokens"] == len(second) > info["first_turn_tokens"]
    raw = next(r for r in doc["runs"] if r["mode"] == "raw")
    sd = next(r for r in doc["runs"] if r["mode"] == "static")
    assert raw["text"] == want == sd["text"]
