"""Issue "Reliability, fourth pass": each numbered item reproduced, one or more tests each (the
number is in the test's name). Crashes and orphaned children are checked in a subprocess: its
exit code, and whether a pid it started still lives."""
import copy
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.llama import native
from cpuspec.cli.main import main
from cpuspec.results.schema import load_json

ROOT = Path(__file__).resolve().parent.parent
PATHS_FILE = ROOT / "bench/results/epyc-family25-model17/paths_q8_0_k7.json.gz"
BENCH_FILE = ROOT / "bench/results/epyc-family25-model17/bench_q8_0_k7.json.gz"


def run(*args, **kw):
    return CliRunner().invoke(main, [str(a) for a in args], **kw)


def clean_error(res, message, code=None):
    assert res.exit_code not in (0, None), res.output
    if code is not None:
        assert res.exit_code == code, res.output
    assert message in res.output, res.output
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception


def alive(pid: int, wait_s: float = 3.0) -> bool:
    """Whether pid still runs after up to wait_s (a SIGKILL is delivered asynchronously)."""
    deadline = time.monotonic() + wait_s
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _running(pid)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead but not reaped (by init, soon): count it as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def python(code: str, timeout=120, **kw):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, **kw)


def paths_tiny(tiny_models, tmp_path, *args):
    out = tmp_path / "paths.json"
    res = run("paths", "--target", tiny_models["target"], "--draft", tiny_models["draft"],
              "--threads", "1", "--tasks", "json", "--prompts-per-task", "1", "-n", "12",
              "--no-save", "--json", out, *args)
    return res, out


# 1. a closed DraftModel ------------------------------------------------------------------------

@pytest.mark.parametrize("drafter", ["model", "hybrid"])
def test_1_a_closed_draft_model_raises_instead_of_crashing(tiny_models, drafter):
    proc = python(f"""
        import numpy as np, cpuspec
        d = cpuspec.DraftModel({str(tiny_models['draft'])!r}, k=3, n_ctx=64,
                               drafter={drafter!r})
        ids = np.array([1, 2, 3, 4], dtype=np.intc)
        d(ids)
        d.close()
        try:
            d(ids)
        except RuntimeError as exc:
            print("refused:", exc)
        """)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "refused: this DraftModel is closed" in proc.stdout


# 2. a full disk ----------------------------------------------------------------------------

@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs filled to the last byte (root can mount one; skipped elsewhere)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        with open(mnt / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 512)
            except OSError:
                pass
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_2_a_full_disk_keeps_the_measurements_prints_them_and_exits_non_zero(
        tiny_models, full_disk, tmp_path, cpuspec_home):
    lost = full_disk / "run.json"
    res = run("bench", "--target", tiny_models["target"], "--draft", tiny_models["draft"],
              "--threads", "1", "--tasks", "json", "--prompts-per-task", "1", "-n", "12",
              "--warmup", "0", "--json", lost)
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert f"cannot write {lost}" in res.output and "No space left on device" in res.output
    assert "SD ×raw" in res.output or "×raw" in res.output   # the summary was printed
    # the saved run (another disk) holds every generation
    saved = list((cpuspec_home / "results").glob("*.json"))
    assert len(saved) == 1
    doc = json.loads(saved[0].read_text())
    assert doc["complete"] is True and len(doc["runs"]) >= 2
    assert "2 generations" in res.output or f"{len(doc['runs'])} generations" in res.output
    assert not lost.exists()


def test_2_a_full_home_leaves_no_empty_results_file(tiny_models, full_disk, monkeypatch):
    home = full_disk / "home"
    monkeypatch.setenv("CPUSPEC_HOME", str(home))
    res = run("bench", "--target", tiny_models["target"], "--draft", tiny_models["draft"],
              "--threads", "1", "--tasks", "json", "--prompts-per-task", "1", "-n", "12",
              "--warmup", "0")
    assert res.exit_code != 0 and "Traceback" not in res.output, res.output
    assert "No space left on device" in res.output
    folder = home / "results"
    assert not folder.exists() or [p for p in folder.iterdir() if p.stat().st_size == 0] == []


def test_2_a_file_that_stops_being_writable_is_said_to_hold_what_it_last_got(tmp_path):
    """The run's document keeps growing after a write; the message counts what the file got."""
    from cpuspec.results.store import ResultsSink
    folder = tmp_path / "out"
    folder.mkdir()
    sink = ResultsSink([folder / "r.json"])
    doc = {"kind": "bench", "runs": [1, 2, 3]}
    sink(doc)
    for p in folder.iterdir():
        p.unlink()
    folder.rmdir()                      # the next write cannot create its temporary file
    doc["runs"] += [4, 5, 6, 7]
    sink(doc)
    message = sink.failures()
    assert "it holds 3 generations from an earlier write" in message
    assert "everything measured (7 generations)" in message


# 3. hung native programs and their children ---------------------------------------------------

def sleeper(folder: Path, name: str) -> Path:
    """A 'llama.cpp program' that starts a grandchild, records both pids, and hangs."""
    folder.mkdir(exist_ok=True)
    prog = folder / name
    prog.write_text(f"#!/bin/sh\nsleep 300 &\necho $$ $! > {folder}/pids\nwait\n")
    prog.chmod(0o755)
    return prog


def pids(folder: Path) -> list[int]:
    for _ in range(100):
        f = folder / "pids"
        if f.exists() and f.read_text().strip():
            return [int(x) for x in f.read_text().split()]
        time.sleep(0.05)
    raise AssertionError("the fake program never started")


def test_3_a_hung_program_is_stopped_at_the_time_limit_with_its_children(tmp_path,
                                                                         monkeypatch):
    bin_dir = tmp_path / "bin"
    sleeper(bin_dir, native.COMPLETION)
    monkeypatch.setenv(native.TIMEOUT_ENV, "1.5")
    t0 = time.monotonic()
    with pytest.raises(native.NativeError, match="ran longer than 1.5 s"):
        native.run_completion(bin_dir, "t.gguf", "hi", 4, 1, 64)
    assert time.monotonic() - t0 < 30
    for pid in pids(bin_dir):
        assert not alive(pid), pid


def test_3_sigterm_leaves_no_child_of_a_native_program_running(tmp_path):
    bin_dir = tmp_path / "bin"
    prog = sleeper(bin_dir, native.COMPLETION)
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from cpuspec.machine import interrupt
        from cpuspec.llama import native
        try:
            with interrupt.handled():
                native._run([{str(prog)!r}])
        except KeyboardInterrupt:
            sys.exit(130)
        """)])
    started = pids(bin_dir)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 130
    time.sleep(0.2)
    for pid in started:
        assert not alive(pid), pid


def test_3_a_bad_time_limit_is_refused(monkeypatch):
    monkeypatch.setenv(native.TIMEOUT_ENV, "soon")
    with pytest.raises(native.NativeError, match="must be a number of seconds"):
        native.call_timeout_s()


# 4. a draft whose vocabulary does not cover the target's tokens -----------------------------

def test_4_a_token_outside_the_drafts_vocabulary_is_a_clear_error(tiny_models):
    import numpy as np
    import cpuspec
    d = cpuspec.DraftModel(tiny_models["draft"], k=3, n_ctx=64)
    try:
        with pytest.raises(ValueError, match="draft and target must share a tokenizer"):
            d(np.array([1, 2, d.n_vocab + 7], dtype=np.intc))
        assert len(d(np.array([1, 2, 3], dtype=np.intc))) == 3   # still usable
    finally:
        d.close()


def test_4_the_loop_refuses_an_id_outside_a_models_vocabulary(tiny_models):
    from cpuspec.llama.engine import EngineError, Model, Session
    with Model(tiny_models["draft"]) as m, Session(m, 64, 1) as s:
        with pytest.raises(EngineError, match="draft and target must share a tokenizer"):
            s.eval([1, m.n_vocab], 0, 1)


# 5. damaged results files: one message naming the field ------------------------------------

def edited(tmp_path, source: Path, edit) -> Path:
    doc = load_json(source)
    edit(doc)
    out = tmp_path / source.name
    out.write_text(json.dumps(doc))
    return out


def _set(path, value):
    def edit(doc):
        *head, last = path
        node = doc
        for key in head:
            node = node[key]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value
    return edit


PATHS_EDITS = [
    (("settings", "paths"), KeyError, "settings.paths"),
    (("settings", "paths"), "cpuspec", "settings.paths"),
    (("settings", "paths"), ["cpuspec", "vllm"], "settings.paths"),
    (("settings",), None, "settings"),
    (("settings", "target"), None, "settings.target"),
    (("runs", 0, "n_tokens"), "x", "runs[0].n_tokens"),
    (("runs", 0, "rounds"), [[1]], "runs[0].rounds"),
    (("runs",), [1, 2], "runs[0]"),
    (("runs", 0, "e2e_s"), -1.0, "runs[0].e2e_s"),
    (("meta",), [], "meta"),
]


@pytest.mark.parametrize("where, value, field", PATHS_EDITS)
@pytest.mark.parametrize("command", ["report", "plot"])
def test_5_a_damaged_paths_file_names_its_field(tmp_path, where, value, field, command):
    bad = edited(tmp_path, PATHS_FILE, _set(where, value))
    extra = ["--out", tmp_path / "figs"] if command == "plot" else []
    res = run(command, bad, *extra)
    if command == "plot" and "pip install" in res.output:
        pytest.skip("matplotlib is not installed")
    clean_error(res, f"field {field} ")


BENCH_EDITS = [
    (("meta",), [], "meta"),
    (("meta", "hardware"), "x", "meta.hardware"),
    (("kind",), "paths", "settings.target"),
    (("runs", "SD", "rounds", 0, 0), -3, "runs[SD].rounds"),
    (("runs", 0, "prefill_s"), float("nan"), "runs[0].prefill_s"),
    (("runs", 0, "token_latencies_s", 0), -0.5, "runs[0].token_latencies_s"),
]


@pytest.mark.parametrize("where, value, field", BENCH_EDITS)
@pytest.mark.parametrize("command", ["report", "advise", "compare"])
def test_5_a_damaged_bench_file_names_its_field(tmp_path, where, value, field, command):
    doc = load_json(BENCH_FILE)
    sd = next(i for i, r in enumerate(doc["runs"]) if r.get("rounds"))   # a run with rounds
    where = tuple(sd if w == "SD" else w for w in where)
    field = field.replace("[SD]", f"[{sd}]")
    bad = edited(tmp_path, BENCH_FILE, _set(where, value))
    args = [bad, BENCH_FILE] if command == "compare" else [bad]
    res = run(command, *args)
    if where == ("kind",) and command == "compare":   # a bench file beside a paths file
        clean_error(res, "compare takes bench files", code=2)
    elif where == ("kind",) and command != "report":
        clean_error(res, "not a bench one")   # advise reads bench files only
    else:
        clean_error(res, f"field {field} ")


@pytest.mark.parametrize("command", ["report", "advise", "compare", "runs"])
def test_5_a_file_nested_100k_deep_is_refused_in_one_line(tmp_path, command, cpuspec_home):
    text = '{"schema_version": 2, "kind": "bench", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    bad = tmp_path / "deep.json"
    bad.write_text(text)
    if command == "runs":
        (cpuspec_home / "results").mkdir(parents=True)
        (cpuspec_home / "results" / "deep.json").write_text(text)
        res = run("runs")
        assert res.exit_code == 0 and "unreadable" in res.output and "Traceback" not in \
            res.output
        return
    res = run(command, *([bad, bad] if command == "compare" else [bad]))
    clean_error(res, "nested too deeply")


def test_5_every_recorded_file_passes_validation():
    """The validator refuses damage, not real files: every results file in the repository,
    of every kind and both schemas, validates."""
    from cpuspec.results.schema import ResultsError, read_json, validate
    from cpuspec.results.store import results_files
    checked = 0
    for path in results_files(ROOT / "bench" / "results", recursive=True):
        try:
            doc = read_json(path)
        except ResultsError:
            continue   # not a results file of this tool's schemas (e.g. costs of schema 0)
        validate(doc, str(path))
        checked += 1
    assert checked > 50


# 7. broken executables in --llama-bin ---------------------------------------------------------

def fake_program(folder: Path, name: str, stderr: str, mode=0o755) -> Path:
    folder.mkdir(exist_ok=True)
    prog = folder / name
    prog.write_text("#!/bin/sh\ncat >&2 <<'EOF'\n" + stderr + "\nEOF\n")
    prog.chmod(mode)
    return prog


def test_7_a_program_that_cannot_be_executed_is_a_clear_error(tmp_path):
    fake_program(tmp_path / "bin", native.COMPLETION, "", mode=0o644)
    with pytest.raises(native.NativeError, match="cannot be run"):
        native.run_completion(tmp_path / "bin", "t.gguf", "hi", 4, 1, 64)


def test_7_a_program_that_generated_nothing_is_a_clear_error(tmp_path):
    log = ("encoded    3 tokens in    0.000 seconds, speed:    0.000 t/s\n"
           "decoded    0 tokens in    0.000 seconds, speed:    0.000 t/s\n"
           "n_drafted = 0\nn_accept  = 0\n")
    fake_program(tmp_path / "bin", native.SPECULATIVE, log)
    with pytest.raises(native.NativeError, match="generated nothing"):
        native.run_speculative(tmp_path / "bin", "t.gguf", "d.gguf", "hi", 4, 3, 1, 64)


def test_7_the_paths_command_reports_a_broken_program_in_one_line(tiny_models, tmp_path):
    bin_dir = tmp_path / "bin"
    fake_program(bin_dir, native.COMPLETION, "", mode=0o644)
    fake_program(bin_dir, native.SPECULATIVE, "", mode=0o644)
    res, out = paths_tiny(tiny_models, tmp_path, "--paths", "cpuspec,llama.cpp",
                          "--llama-bin", bin_dir)
    clean_error(res, "cannot be run")


# 8. paths that measure nothing, or twice ----------------------------------------------------

def test_8_llama_cpp_alone_without_its_programs_is_refused(tiny_models, tmp_path, monkeypatch):
    monkeypatch.delenv(native.BIN_ENV, raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    res, out = paths_tiny(tiny_models, tmp_path, "--paths", "llama.cpp")
    clean_error(res, "nothing to measure")
    assert not out.exists()


def test_8_the_redecode_path_alone_has_no_baseline(tiny_models, tmp_path):
    res, out = paths_tiny(tiny_models, tmp_path, "--paths", "cpuspec+redecode")
    clean_error(res, "add cpuspec to the list", code=2)


def test_8_a_path_named_twice_runs_once(tiny_models, tmp_path):
    res, out = paths_tiny(tiny_models, tmp_path, "--paths", "cpuspec,cpuspec")
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["settings"]["paths"] == ["cpuspec"]
    assert sorted(r["mode"] for r in doc["runs"]) == ["raw", "static"]


# 9. prompts files ----------------------------------------------------------------------------

@pytest.mark.parametrize("char", ["\u2028", "\u0085", "\u2029"])   # json.dumps escapes C0
def test_9_a_json_string_holding_a_line_separator_is_one_line(tmp_path, char):
    from cpuspec.inputs.tasks import read_prompts_file
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"task": "t", "prompt": f"a{char}b"}, ensure_ascii=False) + "\n"
                 + json.dumps({"task": "t", "prompt": "second"}) + "\n", encoding="utf-8")
    prompts = read_prompts_file(f)
    assert [p.text for p in prompts] == [f"a{char}b", "second"]


def test_9_a_lone_surrogate_is_reported_with_file_and_line_before_models_load(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "fine"}\n{"prompt": "bad \\ud800 here"}\n')
    res = run("bench", "--prompts", f, "--target", "/nonexistent.gguf", "--no-save")
    clean_error(res, f"{f}:2")
    assert "lone surrogate" in res.output and "nonexistent" not in res.output


# 10. misleading messages ----------------------------------------------------------------------

def test_10_tune_names_its_own_option_and_the_users_value():
    res = run("tune", "-n", "4")
    clean_error(res, "Invalid value for '--k-max': 8 must be at most --max-tokens (4)", code=2)


def test_10_the_context_refusal_names_the_depth_and_suggests_only_what_fits(tiny_models):
    # the tiny models are trained for 1024 positions; the depth alone fills them
    res = run("bench", "--target", tiny_models["target"], "--draft", tiny_models["draft"],
              "--threads", "1", "--tasks", "json", "--prompts-per-task", "1", "-n", "16",
              "--warmup", "0", "--no-save", "--depth", "1020")
    clean_error(res, "--depth context")
    assert "smaller --depth" in res.output and "or --max-tokens" not in res.output


def once_then_broken(folder: Path, name: str, good_log: str) -> None:
    """A 'llama.cpp program' that works on its first two calls (the warm-up, the first
    prompt) and then prints no timing."""
    folder.mkdir(exist_ok=True)
    prog = folder / name
    mark = folder / f"{name}.ran"
    prog.write_text(f"#!/bin/sh\nif [ -e {mark}2 ]; then echo broken >&2; exit 0; fi\n"
                    f"if [ -e {mark} ]; then touch {mark}2; fi\ntouch {mark}\n"
                    f"echo some text\ncat >&2 <<'EOF'\n{good_log}\nEOF\n")
    prog.chmod(0o755)


def test_10_a_paths_run_that_failed_is_listed_as_failed(tiny_models, tmp_path, cpuspec_home):
    bin_dir = tmp_path / "bin"
    once_then_broken(bin_dir, native.COMPLETION,
                     "llama_perf_context_print: prompt eval time =  10.00 ms /  5 tokens\n"
                     "llama_perf_context_print:        eval time =  50.00 ms / 11 runs\n"
                     "llama_perf_context_print:       total time =  70.00 ms / 16 tokens")
    once_then_broken(bin_dir, native.SPECULATIVE,
                     "encoded    5 tokens in    0.010 seconds, speed:  500.000 t/s\n"
                     "decoded   12 tokens in    0.040 seconds, speed:  300.000 t/s\n"
                     "n_drafted = 9\nn_accept  = 6")
    res = run("paths", "--target", tiny_models["target"], "--draft", tiny_models["draft"],
              "--threads", "1", "--tasks", "json", "--prompts-per-task", "2", "-n", "12",
              "--paths", "cpuspec,llama.cpp", "--llama-bin", bin_dir)
    clean_error(res, "printed no timing")
    listing = run("runs")
    assert "failed" in listing.output and "interrupted" not in listing.output, listing.output
    saved = list((cpuspec_home / "results").glob("*.json"))
    assert json.loads(saved[0].read_text())["ended"].startswith("failed: ")
    report = run("report", saved[0])
    assert report.exit_code == 0 and "FAILED (" in report.output, report.output


def test_10_the_round_budget_prints_no_negative_time(tmp_path):
    from cpuspec.report.paths import render_paths, round_budget
    doc = load_json(PATHS_FILE)
    negative = [(p, k) for p, b in round_budget(doc).items() for k, v in b.items()
                if isinstance(v, float) and v < 0]
    assert negative   # this recording has one: a difference of two noisy totals
    text = render_paths(doc)
    table = text.split("Where an SD round's time goes")[1].split("llama.cpp's verify")[0]
    import re
    assert not re.search(r"(?<![\w-])-\d", table), table
    assert "≈0" in table


# 11. flags that were ignored ------------------------------------------------------------------

def test_11_paths_refuses_a_draft_with_the_lookup_drafter(tiny_models, tmp_path):
    res = run("paths", "--drafter", "lookup", "--draft", "/nonexistent.gguf", "--paths",
              "cpuspec", "--no-save")
    clean_error(res, "drop --draft", code=2)


def test_11_native_flags_without_the_llama_cpp_path_are_refused():
    res = run("paths", "--paths", "cpuspec", "--native-rounds", "--llama-bin", "/nonexistent",
              "--build-native", "--no-save")
    clean_error(res, "add llama.cpp to --paths", code=2)
    assert "--llama-bin, --build-native, --native-rounds" in res.output


def test_11_tune_refuses_a_depth_no_text_can_fill():
    res = run("tune", "--depths", "0,99999999", "--no-save")
    clean_error(res, "99999999 is more than the tokens of real text", code=2)


@pytest.mark.parametrize("kwargs, message", [
    ({"n_threads": True}, "n_threads must be a whole number"),
    ({"n_threads": 10_000}, "n_threads must be a whole number"),
    ({"drafter": "lookup"}, "pass model_path=None"),
])
def test_11_draft_model_refuses_what_it_would_ignore(tiny_models, kwargs, message):
    import cpuspec
    with pytest.raises(ValueError, match=message):
        cpuspec.DraftModel(tiny_models["draft"], k=3, **kwargs)


def test_11_float_token_ids_are_refused(tiny_models):
    import numpy as np
    import cpuspec
    d = cpuspec.DraftModel(None, k=3, drafter="lookup")
    with pytest.raises(TypeError, match="whole token ids"):
        d(np.array([1.0, 2.7, 3.2]))
    assert d(np.array([5, 6, 7, 5, 6], dtype=np.intc)).tolist() == [7, 5, 6]   # 5 6 -> 7 ...


def test_issue53_6l_plot_on_a_full_disk_leaves_no_empty_figure(full_disk):
    """A figure is rendered whole, then written atomically: on a full disk the command fails
    with a message and no 0-byte PNG or SVG is left behind."""
    from click.testing import CliRunner

    from cpuspec.cli.main import main
    run = Path(__file__).resolve().parent / "recorded/epyc-family25-model17/bench_q8_0_k7.json.gz"
    out = full_disk / "figs"
    res = CliRunner().invoke(main, ["plot", str(run), "--out", str(out)])
    assert res.exit_code == 1 and "cannot write figures" in res.output, res.output
    assert not [p for p in full_disk.rglob("*") if p.is_file() and p.name != "filler"
                and p.stat().st_size == 0]


def test_issue53_6k_a_bad_native_timeout_is_said_before_models_load(tiny_models, tmp_path,
                                                                     monkeypatch):
    bin_dir = tmp_path / "bin"
    fake_program(bin_dir, native.COMPLETION, "")
    fake_program(bin_dir, native.SPECULATIVE, "")
    monkeypatch.setenv(native.TIMEOUT_ENV, "soon")
    res, out = paths_tiny(tiny_models, tmp_path, "--paths", "cpuspec,llama.cpp",
                          "--llama-bin", bin_dir)
    clean_error(res, "must be a number of seconds, not 'soon'", code=2)
    assert "loading" not in res.output and not out.exists()
