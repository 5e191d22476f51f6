"""The matrix engine in the CPU (issue 68): detection, ggml's AMX tile fix (the patch, what the
compiled ldtilecfg loads), the child-process probe, the crash path, the rebuild, and the
records. What needs an AMX CPU is skipped elsewhere (the installed build's tile config)."""
from __future__ import annotations

import functools
import gzip
import json
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.cli import engine as cli_engine
from cpuspec.cli.main import main
from cpuspec.llama import build, native
from cpuspec.llama.tilecfg import MMQ, compile_mmq, read_tile_configs, unpack_ggml_cpu
from cpuspec.machine import osapi
from cpuspec.machine.matrix import MatrixEngine, build_uses, describe, matrix_engine
from cpuspec.results.records import Machine

from conftest import REAL_MODELS_HOME

REPO = Path(__file__).resolve().parent.parent
E_RUN = REPO / "bench/results/xeon-family6-model167/bench_newcomer.json.gz"
# The tile configuration ggml's AMX kernels need, from the table in mmq.cpp's comment ("A used
# TMM2-TMM3, B used TMM0-TMM1, C used TMM4-TMM7"; A 16 rows × 32 bytes, B 8 × 64, C 16 × 64),
# palette 1; tiles 8-15 unused.
EXPECTED_ROWS = [8, 8, 16, 16, 16, 16, 16, 16] + [0] * 8
EXPECTED_COLSB = [64, 64, 32, 32, 64, 64, 64, 64] + [0] * 8
SEGFAULT = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
XEON_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep avx512f avx512_vnni amx_bf16 "
              "avx512_fp16 amx_tile amx_int8 arch_capabilities")


def write_cpuinfo(root: Path, text: str) -> Path:
    (root / "proc").mkdir(parents=True)
    (root / "proc/cpuinfo").write_text(text)
    return root


def test_the_engine_is_read_from_the_cpus_own_flags(tmp_path):
    xeon = write_cpuinfo(tmp_path / "xeon", f"processor\t: 0\nvendor_id\t: GenuineIntel\n"
                                            f"cpu family\t: 6\nmodel\t\t: 143\n"
                                            f"flags\t\t: {XEON_FLAGS}\n\n")
    assert matrix_engine(xeon, "Linux", "x86_64") == MatrixEngine(
        "Intel AMX", ("amx_tile", "amx_int8", "amx_bf16"))
    zen4 = write_cpuinfo(tmp_path / "zen4", "processor\t: 0\nflags\t\t: fpu avx512f "
                                            "avx512_vnni avx512_bf16\n\n")
    assert matrix_engine(zen4, "Linux", "x86_64").name is None
    arm = write_cpuinfo(tmp_path / "arm", "processor\t: 0\nFeatures\t: fp asimd sve sme "
                                          "sme2\nCPU implementer\t: 0x41\n\n")
    assert matrix_engine(arm, "Linux", "aarch64") == MatrixEngine("Arm SME", ("sme", "sme2"))
    mac = tmp_path / "mac"
    mac.mkdir()
    assert matrix_engine(mac, "Darwin", "arm64").name == "Apple AMX"


RECORDED_INFO = Path(__file__).parent / "recorded" / "system_info"


@pytest.mark.parametrize("name, has_amx", [("avx2", False), ("avx512", False), ("amx", True)])
def test_whether_a_build_uses_it_comes_from_its_system_info(name, has_amx):
    """Recorded system-info strings (an AVX2-only build, an AVX-512 one, one with AMX_INT8 in
    ggml's order), never this machine's: the answer must not depend on the CPU the suite runs
    on (an AVX2-only CPU once failed here)."""
    info = (RECORDED_INFO / f"{name}.txt").read_text().strip()
    amx = MatrixEngine("Intel AMX", ("amx_tile", "amx_int8"))
    assert build_uses(amx, info) is has_amx
    assert build_uses(MatrixEngine(None), info) is None
    assert build_uses(MatrixEngine("Apple AMX", ("apple-silicon",)), info) is None
    # a name that merely contains the flag is not the flag
    assert build_uses(amx, info.replace("AMX_INT8 = 1", "NO_AMX_INT8 = 1")) is False


def test_hw_says_which_engine_and_whether_the_build_uses_it():
    runner = CliRunner()
    data = json.loads(runner.invoke(main, ["hw", "--json"]).output)
    engine = data["matrix_engine"]
    assert engine["name"] == matrix_engine().name
    assert engine["features"] == list(matrix_engine().features)
    assert set(engine) >= {"used_by_build", "probe"}
    text = runner.invoke(main, ["hw"]).output
    line = next(ln for ln in text.splitlines() if "matrix engine:" in ln)
    assert (matrix_engine().name or "none") in line


# --- the patch and what the compiler makes of it --------------------------------------------

@pytest.fixture(scope="session")
def sdist(tmp_path_factory):
    """ggml's headers and CPU backend from the installed llama-cpp-python's sdist, as released
    (pip download, cached beside the real-model files as `cpuspec paths --build-native` caches
    it; unpacked here from the archive, since cpuspec's builds patch their unpacked copy)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CPUSPEC_HOME", REAL_MODELS_HOME)
        archive = native.sdist_archive(lambda m: None)
    return unpack_ggml_cpu(archive, tmp_path_factory.mktemp("sdist"))


def ggml_copy(sdist: Path, dest: Path) -> Path:
    """The unpacked headers and CPU backend, copied to dest (each test patches its own)."""
    shutil.copytree(sdist / "vendor", dest / "vendor")
    return dest


def test_the_patch_applies_once_and_knows_a_source_that_has_it(sdist, tmp_path):
    root = ggml_copy(sdist, tmp_path / "a")
    said: list[str] = []
    assert build.apply_patches(root, said.append) == ["ggml-amx-tile-config.patch"]
    text = (root / MMQ).read_text()
    assert "static const tile_config_t tc" in text and "ARCH_REQ_XCOMP_PERM" in text
    assert build.apply_patches(root, said.append) == []            # once
    assert (root / MMQ).read_text() == text
    # a source that already has the fix (no mark of ours): passed over, said so
    other = tmp_path / "b" / MMQ
    other.parent.mkdir(parents=True)
    other.write_text(text)
    assert build.apply_patches(tmp_path / "b", said.append) == []
    assert any("already in" in s for s in said)
    # another llama.cpp, where the hunk is not found: refused with the reason
    third = tmp_path / "c" / MMQ
    third.parent.mkdir(parents=True)
    third.write_text("// another mmq.cpp\n")
    with pytest.raises(build.BuildError, match="does not apply"):
        build.apply_patches(tmp_path / "c", said.append)


def sapphire_rapids_gxx() -> bool:
    if platform.machine() != "x86_64" or not shutil.which("g++") or not shutil.which("objdump"):
        return False
    probe = subprocess.run(["g++", "-march=sapphirerapids", "-x", "c++", "-E", "-"],
                           input="", capture_output=True, text=True)
    return probe.returncode == 0


needs_gxx = pytest.mark.skipif(not sapphire_rapids_gxx(),
                               reason="needs x86-64 g++ with -march=sapphirerapids and objdump")


def configured_as_ggml_needs(read) -> bool:
    return (read.palette == 1 and [read.rows(t) for t in range(16)] == EXPECTED_ROWS
            and [read.colsb(t) for t in range(16)] == EXPECTED_COLSB)


@needs_gxx
def test_the_patched_tile_configuration_survives_the_compiler(sdist, tmp_path):
    """The ldtilecfg in the patched, compiled mmq.cpp loads the configuration the kernels
    need. Without the patch, GCC 12 drops the stores of rows and column widths (the bug):
    where this compiler does, the same reading shows it, so the check can fail."""
    patched = ggml_copy(sdist, tmp_path / "patched")
    build.apply_patches(patched, lambda m: None)
    reads = read_tile_configs(compile_mmq(patched, tmp_path / "patched.o"))
    assert reads, "no ldtilecfg in the patched object"
    assert all(configured_as_ggml_needs(r) for r in reads), reads
    assert all(r.source.startswith("constant") for r in reads)

    unpatched = read_tile_configs(compile_mmq(ggml_copy(sdist, tmp_path / "orig"),
                                              tmp_path / "orig.o"))
    assert unpatched
    known = [r for r in unpatched if r.source.startswith("stack") and None not in r.data]
    if not known or all(configured_as_ggml_needs(r) for r in known):
        pytest.skip("this compiler keeps the unpatched stores, or stores them in a way the "
                    "replay cannot read (GCC 12.2: a 64-byte zero store and palette 1 only)")
    assert [known[0].rows(t) for t in range(8)] == [0] * 8   # the bug: no tile configured


def test_the_installed_builds_tile_configuration_is_sound():
    """Where the installed llama-cpp-python has AMX kernels (built on an AMX CPU), every
    ldtilecfg in its libggml-cpu loads the configuration the kernels need."""
    lib = build.installed_library_dir()
    libs = sorted(lib.glob("libggml-cpu*.so*")) if lib else []
    if not libs or not shutil.which("objdump"):
        pytest.skip("no libggml-cpu or no objdump")
    reads = [r for f in libs for r in read_tile_configs(f)]
    if not reads:
        pytest.skip("this build has no AMX kernels (no ldtilecfg): built on a CPU without AMX")
    known = [r for r in reads if None not in r.data]
    if not known:
        pytest.skip("the disassembly does not show every byte ldtilecfg loads")
    assert all(configured_as_ggml_needs(r) for r in known), known


# --- the probe, the crash path, the rebuild --------------------------------------------------

def test_the_probe_decodes_a_batch_through_this_build_in_a_child():
    result = build.probe()
    assert result.ok, result.stderr_tail
    assert "CPU :" in result.system_info and result.buffers
    # the weights reach ggml's AMX buffer exactly where the build has AMX kernels and the
    # CPU has the engine (then the batch ran on the tiles)
    engine = matrix_engine()
    expect = "amx_int8" in engine.features and \
        build_uses(MatrixEngine("Intel AMX"), result.system_info)
    assert result.uses_amx is bool(expect), (result.buffers, result.system_info)


def test_a_crashing_child_is_reported_by_signal_and_leaves_no_core(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = build.probe(SEGFAULT)
    assert not result.ok and result.signal_name == "SIGSEGV"
    assert not list(tmp_path.iterdir())


@pytest.fixture
def amx_cpu(monkeypatch):
    """This CPU, as the build check sees it, has AMX (the flags only: nothing runs on it)."""
    monkeypatch.setattr(build, "matrix_engine",
                        lambda: MatrixEngine("Intel AMX", ("amx_tile", "amx_int8")))


def test_on_a_cpu_without_an_engine_nothing_is_probed(monkeypatch):
    monkeypatch.setattr(build, "matrix_engine", lambda: MatrixEngine(None))
    monkeypatch.setattr(build, "PROBE_ARGV", SEGFAULT)
    assert build.check_build(print, native.sdist_dir) == "no engine"


def test_a_build_that_dies_gets_one_line_and_exit_2_never_a_traceback(amx_cpu, monkeypatch,
                                                                      tiny_models):
    monkeypatch.setattr(build, "PROBE_ARGV", SEGFAULT)
    monkeypatch.setenv(build.REBUILD_ENV, "0")
    res = CliRunner().invoke(main, ["bench", "--target", str(tiny_models["target"]),
                                    "--draft", str(tiny_models["draft"])])
    assert res.exit_code == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "SIGSEGV" in lines[0] and "`cpuspec rebuild`" in lines[0]
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit)
    assert build.known_result() is None          # a crash is never remembered as sound


def test_a_build_that_dies_is_rebuilt_once_then_remembered(amx_cpu, monkeypatch):
    monkeypatch.setattr(build, "PROBE_ARGV", SEGFAULT)
    monkeypatch.setenv(build.REBUILD_ENV, "1")
    rebuilt: list[Path] = []

    def fake_rebuild(log, src):     # pip's 5-10 minute build, replaced: the build now works
        rebuilt.append(src)
        monkeypatch.setattr(build, "PROBE_ARGV", [sys.executable, "-m",
                                                  "cpuspec.llama.probe_child"])
        return 1.0
    monkeypatch.setattr(build, "rebuild", fake_rebuild)
    said: list[str] = []
    assert build.check_build(said.append, lambda log: Path("/sdist")) == "rebuilt"
    assert rebuilt == [Path("/sdist")]
    assert "SIGSEGV" in said[0] and "5-10 minutes" in said[0]
    assert build.known_result()["ok"] and build.known_result()["rebuilt_by_cpuspec"]
    monkeypatch.setattr(build, "PROBE_ARGV", SEGFAULT)       # not probed again
    assert build.check_build(said.append, lambda log: Path("/sdist")) == "known"


def test_one_rebuild_at_a_time_from_the_sdist_on_and_a_waiter_probes_again(amx_cpu,
                                                                           monkeypatch):
    """Issue 79 item 5: the lock covers every step (the sdist is fetched under it); a command
    that finds another rebuilding waits, then probes the build again instead of rebuilding
    it a second time. The other command is a thread holding the lock on a file handle of
    its own (flock: two handles conflict as two processes do)."""
    import threading
    monkeypatch.setattr(build, "PROBE_ARGV", SEGFAULT)
    monkeypatch.setenv(build.REBUILD_ENV, "1")
    fetched_under_lock = []

    def sdist(log):
        with open(build.cpuspec_home() / "engine" / "rebuild.lock", "a") as h:
            try:
                with osapi.current().locked(h, wait=False):
                    fetched_under_lock.append(False)
            except BlockingIOError:
                fetched_under_lock.append(True)
        return Path("/sdist")
    monkeypatch.setattr(build, "rebuild", lambda log, src: monkeypatch.setattr(
        build, "PROBE_ARGV", [sys.executable, "-m", "cpuspec.llama.probe_child"]))
    assert build.check_build(lambda m: None, sdist) == "rebuilt"
    assert fetched_under_lock == [True]
    (build.cpuspec_home() / "engine" / f"probe-{build.build_key()}.json").unlink()
    monkeypatch.setattr(build, "PROBE_ARGV", SEGFAULT)
    monkeypatch.setattr(build, "rebuild", lambda log, src: pytest.fail("rebuilt twice"))
    holding, said = threading.Event(), []

    def other_command():   # rebuilds for a second, then the build works
        with build.rebuild_lock(lambda m: None):
            holding.set()
            time.sleep(2.0)
            monkeypatch.setattr(build, "PROBE_ARGV", [sys.executable, "-m",
                                                      "cpuspec.llama.probe_child"])
    t = threading.Thread(target=other_command)
    t.start()
    holding.wait(10)
    assert build.check_build(said.append, lambda log: pytest.fail("fetched")) == "rebuilt"
    t.join()
    assert any("waiting for it" in m for m in said), said
    assert any("rebuilt llama-cpp-python meanwhile" in m for m in said), said
    assert build.known_result()["ok"]


def test_a_waiter_whose_other_command_installed_nothing_rebuilds_it_itself(amx_cpu,
                                                                            monkeypatch):
    """The other command held the lock and stopped without installing anything (killed, or a
    `cpuspec rebuild` that failed without a record): the waiter probes, finds the same build
    still dying, and rebuilds it under the lock it now holds, once."""
    import threading
    monkeypatch.setattr(build, "PROBE_ARGV", SEGFAULT)
    monkeypatch.setenv(build.REBUILD_ENV, "1")
    rebuilt = []

    def fake_rebuild(log, src):     # the build now works
        rebuilt.append(src)
        monkeypatch.setattr(build, "PROBE_ARGV", [sys.executable, "-m",
                                                  "cpuspec.llama.probe_child"])
    monkeypatch.setattr(build, "rebuild", fake_rebuild)
    holding = threading.Event()

    def other_command():   # holds the lock a moment, installs nothing
        with build.rebuild_lock(lambda m: None):
            holding.set()
            time.sleep(2.0)
    t = threading.Thread(target=other_command)
    t.start()
    holding.wait(10)
    assert build.check_build(lambda m: None, lambda log: Path("/sdist")) == "rebuilt"
    t.join()
    assert rebuilt == [Path("/sdist")]


def test_a_rebuild_that_still_dies_gives_one_line_and_exit_2(amx_cpu, monkeypatch, capsys):
    monkeypatch.setattr(build, "PROBE_ARGV", SEGFAULT)
    monkeypatch.setattr(build, "rebuild", lambda log, src: 1.0)
    monkeypatch.setattr(native, "sdist_dir", lambda log: Path("/sdist"))   # no download
    monkeypatch.setenv(build.REBUILD_ENV, "1")
    with pytest.raises(SystemExit) as exc:
        cli_engine.check_llama_build(lambda m: None)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "still dies (SIGSEGV)" in err[0]
    # remembered: the next command says so at once and does not rebuild again
    monkeypatch.setattr(build, "rebuild", lambda log, src: pytest.fail("rebuilt again"))
    with pytest.raises(build.BuildCrash, match="rebuild of it failed before"):
        build.check_build(lambda m: None, lambda log: Path("/sdist"))


def test_a_child_that_fails_without_a_crash_is_an_error_not_a_rebuild(amx_cpu, monkeypatch):
    monkeypatch.setattr(build, "PROBE_ARGV", [sys.executable, "-c",
                                              "import sys; sys.exit('no gguf module')"])
    monkeypatch.setattr(build, "rebuild", lambda log, src: pytest.fail("rebuilt"))
    with pytest.raises(build.BuildError, match="not by a signal: no gguf module"):
        build.check_build(lambda m: None, lambda log: Path("/sdist"))


def test_a_failed_pip_build_is_an_error_with_its_output(tmp_path):
    src = tmp_path / "sdist"
    (src / MMQ).parent.mkdir(parents=True)
    with pytest.raises(build.BuildError, match="does not apply"):
        build.rebuild(lambda m: None, src)          # an sdist the patch does not fit
    (src / build.APPLIED_MARK).write_text("\n".join(build.PATCHES))    # patched before
    with pytest.raises(build.BuildError, match="exit 3") as exc:
        build.rebuild(lambda m: None, src,
                      pip_argv=[sys.executable, "-c", "print('no compiler'); exit(3)"])
    assert "no compiler" in str(exc.value)


def test_rebuild_probe_only_says_whether_this_build_survives():
    res = CliRunner().invoke(main, ["rebuild", "--probe-only"])
    assert res.exit_code == 0, res.output
    assert "survives" in res.output


# --- the records ------------------------------------------------------------------------------

def e_run_with_its_engine() -> dict:
    """Machine E's recorded bench (an Intel Xeon guest whose flags list amx_tile, amx_int8 and
    amx_bf16, run with an AMX-less build) with the engine recorded as cpuspec records it now."""
    doc = json.loads(gzip.decompress(E_RUN.read_bytes()))
    doc["meta"]["hardware"]["matrix_engine"] = {"name": "Intel AMX",
                                                "features": ["amx_tile", "amx_int8",
                                                             "amx_bf16"]}
    return doc


def test_a_run_on_an_amx_cpu_with_an_amx_less_build_says_so_on_its_first_screen(tmp_path):
    doc = e_run_with_its_engine()
    m = Machine.of(doc)
    assert "AMX_INT8" not in m.system_info and m.matrix_used is False
    assert "AMX off" in m.label()
    path = tmp_path / "e.json"
    path.write_text(json.dumps(doc))
    out = CliRunner().invoke(main, ["report", str(path)]).output
    assert "this CPU has Intel AMX and this llama.cpp build does not use it" in out
    assert "cpuspec rebuild" in out
    before = CliRunner().invoke(main, ["report", str(E_RUN)]).output     # engine not recorded
    assert "Intel AMX" not in before


def test_the_dataset_row_records_the_engine_and_an_older_row_migrates(tmp_path):
    import pyarrow.parquet as pq

    from cpuspec.analysis.dataset import MIGRATIONS, dataset_rows
    rows = dataset_rows(e_run_with_its_engine())
    assert {(r["matrix_engine"], r["matrix_engine_used"]) for r in rows} == {("Intel AMX", 0)}
    plain = dataset_rows(json.loads(gzip.decompress(E_RUN.read_bytes())))
    assert {(r["matrix_engine"], r["matrix_engine_used"]) for r in plain} == {(None, None)}
    # a schema-2 file: today's export less the two columns, read through the migration
    out = tmp_path / "ds"
    src = tmp_path / "e.json"
    src.write_text(json.dumps(e_run_with_its_engine()))
    CliRunner().invoke(main, ["export", str(src), "--out", str(out)])
    table = pq.read_table(next(out.glob("*.parquet")))
    old = table.drop_columns(["matrix_engine", "matrix_engine_used", "ci_level", "design",
                              "stopped_at", "prompts_planned"])
    migrated = MIGRATIONS[2](old)
    assert migrated.column_names == table.column_names
    assert set(migrated.column("matrix_engine").to_pylist()) == {None}   # not recorded then
    amx_info = old.column("llama_system_info").to_pylist()
    assert all("AMX_INT8" not in (i or "") for i in amx_info)


def test_compare_sets_an_amx_run_beside_an_amx_less_one(tmp_path):
    on = e_run_with_its_engine()
    on["meta"]["llama_system_info"] = on["meta"]["llama_system_info"].replace(
        "AVX512 = 1 |", "AVX512 = 1 | AMX_INT8 = 1 |")
    a, b = tmp_path / "amx.json", tmp_path / "noamx.json"
    a.write_text(json.dumps(on))
    b.write_text(json.dumps(e_run_with_its_engine()))
    out = CliRunner().invoke(main, ["compare", str(a), str(b), "--details"]).output
    assert re.search(r"run 1: .*matrix engine Intel AMX .*compiled into this build", out), out
    assert re.search(r"run 2: .*matrix engine Intel AMX .*NOT compiled into this build", out), out


@pytest.mark.parametrize("argv, timeout", [
    ([sys.executable, "-c", "import time; time.sleep(30)"], 0.5),            # a busy machine
    ([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], 60),
    ([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], 60),
])
def test_a_probe_that_times_out_or_is_killed_never_starts_a_rebuild(amx_cpu, monkeypatch,
                                                                    argv, timeout):
    """Issue 79.1: only a crash signal (SIGSEGV, SIGILL, SIGBUS, SIGFPE, SIGABRT) is the
    build's; a timeout or a kill from outside is "could not tell", and not remembered."""
    monkeypatch.setattr(build, "PROBE_ARGV", argv)
    monkeypatch.setattr(build, "PROBE_TIMEOUT_S", timeout)
    monkeypatch.setattr(build, "probe", functools.partial(build.probe, timeout_s=timeout))
    monkeypatch.setattr(build, "rebuild", lambda log, src: pytest.fail("rebuilt"))
    monkeypatch.setenv(build.REBUILD_ENV, "1")
    said: list[str] = []
    assert build.check_build(said.append, lambda log: pytest.fail("sdist")) == "could not tell"
    assert "could not tell" in said[0] and "nothing rebuilt" in said[0]
    assert build.known_result() is None


@pytest.mark.parametrize("args", [["bench", "--no-such-option"], ["bench", "-k", "zero"],
                                  ["tune", "--budget", "-3"], ["bench", "--help"]])
def test_a_usage_error_or_help_never_probes_the_build(amx_cpu, monkeypatch, args):
    """Issue 79.9: the check runs after the command's options parsed."""
    monkeypatch.setattr(build, "probe", lambda *a, **k: pytest.fail("probed"))
    res = CliRunner().invoke(main, args)
    assert res.exit_code in (0, 2), res.output
    assert "probed" not in res.output


def test_a_command_that_parses_runs_the_build_check_first(amx_cpu, monkeypatch):
    calls = []
    monkeypatch.setattr(build, "check_build", lambda say, sdist: calls.append(1) or "known")
    CliRunner().invoke(main, ["costs", "--help"])
    assert calls == []
    CliRunner().invoke(main, ["bench", "--target", "/nowhere.gguf"])
    assert calls == [1]


def test_remember_is_best_effort_and_never_mixes_two_writers(monkeypatch, tmp_path):
    """Issue 79.4 and 79.20: a home that cannot be written is no traceback; each write goes
    through a temporary file of its own."""
    ok = build.ProbeResult(ok=True, returncode=0, seconds=1.0)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("CPUSPEC_HOME", str(blocker / "home"))    # under a file: unwritable
    assert build.remember(ok, rebuilt=False) is False
    monkeypatch.setenv("CPUSPEC_HOME", str(tmp_path / "home"))
    seen = []
    real = build.tempfile.mkstemp

    def spy(*a, **k):
        seen.append(real(*a, **k))
        return seen[-1]
    monkeypatch.setattr(build.tempfile, "mkstemp", spy)
    assert build.remember(ok, rebuilt=False) and build.remember(ok, rebuilt=True)
    assert len({name for _, name in seen}) == 2 and build.known_result()["rebuilt_by_cpuspec"]
    assert not list(build._record_path().parent.glob("*.tmp*"))


def test_compiled_in_is_not_ran_on_the_tiles():
    """Issue 79.7: the system info says compiled in; only the build check's child, whose
    weights reached AMX buffers, says the tiles ran."""
    from cpuspec.cli.hardware import tiles_ran
    assert tiles_ran(None, {"ok": True, "uses_amx": True}) == ""
    assert "not seen running" in tiles_ran(True, None)
    assert "ran on the tiles" in tiles_ran(True, {"ok": True, "uses_amx": True})
    assert "did not run" in tiles_ran(True, {"ok": True, "uses_amx": False})
    assert describe(MatrixEngine("Intel AMX", ("amx_tile",)), True).endswith(
        "compiled into this build")
