"""Laptops (issue 77): the OS layer against recorded outputs of the real interfaces, and the
CLI end to end on the tiny models under simulated macOS and Windows (tests/simulate_os.py says
what is simulated and how), beside this Linux."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main
from cpuspec.machine import osapi
from cpuspec.machine.hardware import detect_hardware

import simulate_os  # noqa: E402  (tests/ is on the path: conftest)

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "tests" / "recorded"
BENCH_B = RECORDED / "epyc-family25-model17" / "bench_q8_0_k7.json.gz"
METAL = [{"name": "CPU", "description": "Apple M1", "type": "CPU",
          "memory_total_bytes": 0, "memory_free_bytes": 0},
         {"name": "MTL0", "description": "Apple M1", "type": "GPU",
          "memory_total_bytes": 5726797824, "memory_free_bytes": 5726797824}]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def tiny(tiny_models, *extra):
    return ["bench", "--target", tiny_models["target"], "--draft", tiny_models["draft"],
            "--threads", "1", "--max-tokens", "16", "--prompts-per-task", "1", "--tasks",
            "json", "--warmup", "0", "--no-save", *extra]


@pytest.fixture(autouse=True)
def where_we_started():
    """A pinned bench moves this whole process (llama.cpp's threads are ours): back after
    (on Linux; a simulated OS's pins were only recorded)."""
    import os
    import posix      # os's functions, whatever a simulation removed from os meanwhile
    before = posix.sched_getaffinity(0)
    yield
    for tid in os.listdir("/proc/self/task"):
        try:
            posix.sched_setaffinity(int(tid), before)
        except OSError:
            pass


@pytest.fixture
def mac(monkeypatch):
    return simulate_os.simulate("darwin", monkeypatch)


@pytest.fixture
def mac_m4(monkeypatch):
    return simulate_os.simulate("darwin", monkeypatch, mac="m4pro")


@pytest.fixture
def windows(monkeypatch):
    return simulate_os.simulate("win32", monkeypatch)


# --- the OS layer on recorded interfaces --------------------------------------------------

def test_macos_cores_come_from_the_perf_levels(mac):
    hw = detect_hardware()
    assert (hw.os, hw.pinning, hw.hybrid) == ("darwin", "none", "sysctl hw.perflevel")
    assert hw.cpu_model == "Apple M1" and hw.memory_total_bytes == 8 * 2**30
    assert {k: len(v) for k, v in hw.cores_by_kind.items()} == {"E": 4, "P": 4}
    assert hw.default_threads == 4 and "perflevel0" in hw.default_threads_rule
    assert hw.matrix_engine.name == "Apple AMX" and "i8mm" not in hw.flags
    assert hw.cpu_id == "cpufamily 0x1b588bb3"


def test_an_m4_pro_has_ten_performance_cores_and_sme(mac_m4):
    hw = detect_hardware()
    assert {k: len(v) for k, v in hw.cores_by_kind.items()} == {"E": 4, "P": 10}
    assert hw.default_threads == 10
    assert hw.matrix_engine.name == "Arm SME" and {"i8mm", "sme", "sme2"} <= set(hw.flags)


def test_windows_cores_come_from_the_documented_structs(windows):
    hw = detect_hardware()
    assert (hw.os, hw.pinning, hw.hybrid) == ("win32", "process", "EfficiencyClass")
    assert hw.cores_by_kind == {"P": list(range(12)), "E": list(range(12, 20))}
    assert (hw.physical_cores, hw.logical_cpus, hw.smt_siblings) == (14, 20, 2)
    assert hw.cpu_id == "family 6 model 154 stepping 3"
    assert hw.cpu_model == "12th Gen Intel(R) Core(TM) i7-12700H"
    # llama.cpp counts every physical core on Windows (P and E alike)
    assert hw.default_threads == 14 and "every physical core" in hw.default_threads_rule
    assert osapi.current().llc_bytes() == 24 * 2**20


def test_a_damaged_glpi_buffer_is_an_error_not_a_wrong_topology():
    from cpuspec.machine.osapi import windows as win
    buf = simulate_os.glpi_buffer(simulate_os.I7_12700H)
    with pytest.raises(ValueError, match="claims"):
        win.parse_glpi(buf[:-8])


def arm_three_tier(root: Path) -> Path:
    """A CIX P1-like Arm SoC (Radxa Orion O6) as Linux lists it: three clusters, core_id
    restarting in each, cpu_capacity 1024 / 870 / 400, /proc/cpuinfo with each core's part
    (A720 0xd81 big and mid, A520 0xd80 little). Capacities are the sysfs layout's, rounded."""
    clusters = [(0, [0, 1, 2, 3], 400, "0xd80"), (1, [4, 5, 6, 7], 870, "0xd81"),
                (2, [8, 9, 10, 11], 1024, "0xd81")]
    cpu_dir = root / "sys/devices/system/cpu"
    cpu_dir.mkdir(parents=True)
    (cpu_dir / "online").write_text("0-11\n")
    info = []
    for cluster, cpus, cap, part in clusters:
        for i, cpu in enumerate(cpus):
            d = cpu_dir / f"cpu{cpu}"
            (d / "topology").mkdir(parents=True)
            (d / "topology/physical_package_id").write_text("0\n")
            (d / "topology/cluster_id").write_text(f"{cluster}\n")
            (d / "topology/core_id").write_text(f"{i}\n")
            (d / "cpu_capacity").write_text(f"{cap}\n")
            info.append(f"processor\t: {cpu}\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd "
                        f"asimddp i8mm sve sve2 bf16\nCPU implementer\t: 0x41\nCPU part\t: "
                        f"{part}\n")
    (root / "proc").mkdir()
    (root / "proc/cpuinfo").write_text("\n".join(info))
    return root


def test_arm_three_tiers_by_capacity_and_clusters_kept_apart(tmp_path):
    hw = detect_hardware(arm_three_tier(tmp_path), affinity=list(range(12)))
    assert hw.hybrid == "cpu-capacity"
    # core_id restarts per cluster: 12 cores, not 4 with three "SMT siblings" each
    assert (hw.physical_cores, hw.smt_siblings) == (12, 1)
    assert hw.cores_by_kind == {"E": [0, 1, 2, 3], "M": [4, 5, 6, 7], "P": [8, 9, 10, 11]}
    assert hw.cpu_id == "implementer 0x41 part 0xd80+0xd81"
    assert {"asimddp", "i8mm", "sve"} <= set(hw.flags)
    assert {c.part for c in hw.cores} == {"0xd80", "0xd81"}


# --- the CLI under simulated macOS ----------------------------------------------------------

def test_hw_on_a_mac_shows_the_split_no_pinning_and_metal(mac, monkeypatch):
    monkeypatch.setattr("cpuspec.llama.engine.ggml_devices", lambda: METAL)
    res = run("hw")
    assert res.exit_code == 0, res.output
    assert re.search(r"cores by kind: E-cores 0,1,2,3; P-cores 4,5,6,7", res.output)
    assert "OS: macOS; pinning: none" in res.output
    assert re.search(r"default threads: 4 \(llama.cpp's rule on macOS", res.output)
    assert "backends: CPU + MTL0 (GPU)" in res.output
    data = json.loads(run("hw", "--json").output)
    assert (data["os"], data["pinning"]) == ("darwin", "none")


@pytest.mark.parametrize("args", [["--p-cores", "2"], ["--e-cores", "1"],
                                  ["--draft-cores", "1"],
                                  ["--schedule", "parallel", "--draft-cores", "1"]])
def test_pinning_options_on_a_mac_are_one_line_and_exit_2(mac, tiny_models, args):
    res = run(*tiny(tiny_models, *args))
    assert res.exit_code == 2, res.output
    assert "macOS lets no program choose the cores" in res.output
    assert "Traceback" not in res.output


def test_bench_on_a_mac_runs_and_records_darwin(mac, tiny_models, tmp_path):
    out = tmp_path / "mac.json"
    res = run(*tiny(tiny_models, "--json", out))
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    hw = doc["meta"]["hardware"]
    assert (hw["os"], hw["pinning"]) == ("darwin", "none")
    assert doc["models"]["target"]["op_offload"] is False
    assert any(k.startswith("compute:CPU") for k in doc["models"]["target"]["context_buffers"])
    # compare and the dataset carry the OS and the pinning mode
    cmp = run("compare", BENCH_B, out, "--force")
    assert cmp.exit_code == 0, cmp.output
    assert "macOS, no pinning, E:4 P:4" in cmp.output
    from cpuspec.analysis.dataset import dataset_rows
    rows = dataset_rows(doc)
    assert {(r["os"], r["pinning"]) for r in rows} == {("Darwin", "none")}


def test_the_parallel_schedule_on_a_mac_runs_unpinned(mac, tiny_models, tmp_path):
    out = tmp_path / "par.json"
    res = run(*tiny(tiny_models, "--schedule", "parallel", "--policy", "static", "--json",
                    out))
    assert res.exit_code == 0, res.output
    assert "parallel schedule, unpinned" in res.output
    doc = json.loads(out.read_text())
    assert doc["settings"]["schedule"] == "parallel" and doc["runs"]


def test_a_sweep_and_contention_on_a_mac(mac, tiny_models, tmp_path):
    res = run(*tiny(tiny_models, "-k", "1,2", "--policy", "static"))
    assert res.exit_code == 0, res.output
    out = tmp_path / "c.json"
    res = run("contention", "--target", tiny_models["target"], "--draft",
              tiny_models["draft"], "--threads", "1", "-n", "4", "--max-streams", "1",
              "--json", out, "--no-save")
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["pinned"] is False and doc["bandwidth"]["single"]["pinned"] is False


# --- the CLI under simulated Windows --------------------------------------------------------

def test_help_and_hw_on_windows(windows):
    res = run("--help")
    assert res.exit_code == 0 and "bench" in res.output
    res = run("hw")
    assert res.exit_code == 0, res.output
    assert "P-cores 0,1,2,3,4,5,6,7,8,9,10,11; E-cores 12,13,14,15,16,17,18,19" in res.output
    assert "OS: Windows; pinning: process" in res.output


def test_bench_on_windows_pins_the_target_to_p_cores(windows, tiny_models, tmp_path):
    out = tmp_path / "win.json"
    res = run(*tiny(tiny_models, "--p-cores", "4", "--json", out))
    assert res.exit_code == 0, res.output
    # one CPU per P-core (the first SMT sibling), through psutil's process affinity
    assert ("process_affinity", [0, 2, 4, 6]) in windows
    # EcoQoS off, as llama.cpp does: PROCESS_POWER_THROTTLING_STATE {1, EXECUTION_SPEED, 0}
    import struct
    assert ("power_throttling", struct.pack("<III", 1, 1, 0)) in windows
    assert json.loads(out.read_text())["meta"]["hardware"]["os"] == "win32"


def test_the_draft_gets_no_cores_of_its_own_on_windows(windows, tiny_models):
    """A new Windows thread starts on the process's cores, not its creator's: llama.cpp's
    draft threads would not stay on --draft-cores, so they are refused, in one line."""
    res = run(*tiny(tiny_models, "--p-cores", "1", "--draft-cores", "12",
                    "--policy", "static"))
    assert res.exit_code == 2, res.output
    assert "Windows starts each new thread on the whole process's cores" in res.output
    assert not [c for c in windows if c[0] == "thread_mask"]


def test_children_and_locks_on_windows(windows, tmp_path):
    from cpuspec.machine.interrupt import start_child, wait_child
    from cpuspec.inputs.refs import remember
    proc = start_child([sys.executable, "-c", "print(1)"], stdout=subprocess.DEVNULL)
    assert wait_child(proc) == 0
    assert ("popen", 0x00000200 | 0x08000000) in windows    # a new process group, no window
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF")
    remember(f, "0" * 64)
    assert [c[1] for c in windows if c[0] == "locking"] == [2, 0]   # locked, then unlocked


# --- import time, and the rule that keeps OS calls in machine/ ------------------------------

@pytest.mark.parametrize("os_name", ["win32", "darwin"])
def test_every_command_imports_and_helps_on_the_simulated_os(os_name):
    """A fresh interpreter with the OS simulated before cpuspec is imported: Windows' CDLL(None)
    raises TypeError, fcntl and resource do not exist (they once failed every command)."""
    for args in (["--help"], ["bench", "--help"], ["hw", "--help"]):
        proc = subprocess.run([sys.executable, str(ROOT / "tests" / "simulate_os.py"),
                               os_name, "--", *args], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "Usage:" in proc.stdout


def test_os_calls_live_in_machine_only():
    pattern = re.compile(r"sched_|/proc/|/sys/|import (fcntl|resource)|os\.name\b|"
                         r"sys\.platform|platform\.system|killpg|preexec_fn|os\.kill\(|"
                         r"os\.(fchmod|getloadavg|sync|setsid|getuid|geteuid|fork)\b|"
                         r"signal\.(SIGKILL|SIGHUP)\b")
    found = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "cpuspec").rglob("*.py")
             if "machine" not in p.relative_to(ROOT / "cpuspec").parts
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if pattern.search(line.split("#")[0])]
    assert found == []


# --- every command, on each OS ----------------------------------------------------------------

@pytest.mark.parametrize("os_name", ["darwin", "win32", "linux"])
def test_every_command_runs_on_each_os(os_name, tiny_models, tmp_path, monkeypatch):
    """bench (serial, parallel), a sweep, tune, paths, contention, report, compare and
    leaderboard end to end on the tiny models: simulated macOS and Windows, and this Linux."""
    calls = simulate_os.simulate(os_name, monkeypatch) if os_name != "linux" else []
    t, d = tiny_models["target"], tiny_models["draft"]
    bench = tmp_path / "bench.json"
    parallel = ["--schedule", "parallel", "--policy", "static"] + (
        ["--draft-cores", "1"] if os_name == "linux" else [])
    ds = tmp_path / "ds"
    commands = {
        "bench": tiny(tiny_models, "--json", bench),
        "parallel": tiny(tiny_models, *parallel),
        "sweep": tiny(tiny_models, "-k", "1,2", "--policy", "static"),
        "tune": ["tune", "--targets", t, "--drafts", f"{d},lookup", "--tasks", "json",
                 "--prompts-per-task", "2", "--max-tokens", "12", "--k-max", "2",
                 "--threads", "1", "--no-save"],
        "paths": ["paths", "--target", t, "--draft", d, "--tasks", "json",
                  "--prompts-per-task", "1", "-n", "8", "-t", "1", "-k", "2", "--paths",
                  "cpuspec,llama-cpp-python", "--no-save"],
        # no background stream process under simulated Windows: multiprocessing's spawn reads
        # sys.platform itself and would start a Windows child on this Linux
        "contention": ["contention", "--target", t, "--draft", d, "--threads", "1", "-n", "4",
                       "--max-streams", "0" if os_name == "win32" else "1", "--no-save"],
        "report": ["report", bench],
        "compare": ["compare", bench, bench],
        "export": ["export", bench, "--out", ds],
        "leaderboard": ["leaderboard", ds],
    }
    for name, args in commands.items():
        res = run(*args)
        assert res.exit_code == 0, (name, res.output[-3000:])
        assert "Traceback" not in res.output, name
    rows = run("leaderboard", ds, "--sql", "SELECT os, pinning FROM rows", "--format", "json")
    want = {"darwin": ("Darwin", "none"), "win32": ("Windows", "process"),
            "linux": ("Linux", "thread")}[os_name]
    assert rows.exit_code == 0, rows.output
    assert {(r["os"], r["pinning"]) for r in json.loads(rows.output)} == {want}
    if os_name == "win32":   # EcoQoS off before every command that measured
        assert sum(1 for c in calls if c[0] == "power_throttling") >= 5


@pytest.mark.parametrize("os_name", ["darwin", "win32"])
def test_the_amx_rebuild_never_runs_off_linux_x86(os_name, monkeypatch):
    """Even where the OS reported AMX flags, no probe child and no rebuild off Linux x86."""
    from cpuspec.llama import build
    from cpuspec.machine.matrix import MatrixEngine
    simulate_os.simulate(os_name, monkeypatch)
    monkeypatch.setattr(build, "matrix_engine", lambda: MatrixEngine("Intel AMX",
                                                                     ("amx_tile", "amx_int8")))
    monkeypatch.setattr(build, "probe", lambda *a, **k: pytest.fail("probed"))
    assert build.check_build(lambda m: None, lambda log: pytest.fail("rebuilt")) == "no engine"


@pytest.mark.parametrize("os_name, says", [("darwin", "xcode-select --install"),
                                           ("win32", "Visual Studio Build Tools"),
                                           ("linux", "build-essential cmake")])
def test_a_missing_compiler_is_one_line_that_says_what_to_install(os_name, says, tmp_path,
                                                                   monkeypatch):
    if os_name != "linux":
        simulate_os.simulate(os_name, monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))    # no cmake, no compiler
    res = run("paths", "--build-native", "--drafter", "lookup", "--paths", "llama.cpp",
              "--no-save")
    assert res.exit_code != 0
    line = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(line) == 1 and says in line[0] and "CMake" in line[0], res.output


def test_the_laptop_check_writes_one_folder_and_keeps_going(tiny_models, tmp_path):
    """bench/laptop_check.sh on this Linux with the tiny models: hw, the default bench, and a
    stage that fails is kept as NAME.failed.txt while the rest still run; a folder in use is
    refused."""
    import os
    out = tmp_path / "check"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "LAPTOP_CHECK_ARGS": f"--target {tiny_models['target']} --draft "
                                f"{tiny_models['draft']} --threads 1 --warmup 0 --no-save"}
    proc = subprocess.run(["bash", str(ROOT / "bench" / "laptop_check.sh"), str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    names = {p.name for p in out.iterdir()}
    assert {"hw.txt", "hw.json", "bench_default.txt", "bench_default.json",
            "README.txt"} <= names, names
    assert json.loads((out / "bench_default.json").read_text())["meta"]["hardware"]["os"] \
        == "linux"
    assert "one kind of core" in proc.stdout or "bench_p_cores.txt" in names
    again = subprocess.run(["bash", str(ROOT / "bench" / "laptop_check.sh"), str(out)],
                           capture_output=True, text=True, env=env, timeout=60)
    assert again.returncode == 2 and "not empty" in again.stderr
    bad = {**env, "LAPTOP_CHECK_ARGS": env["LAPTOP_CHECK_ARGS"] + " --threads 0"}
    failed = tmp_path / "failed"
    proc = subprocess.run(["bash", str(ROOT / "bench" / "laptop_check.sh"), str(failed)],
                          capture_output=True, text=True, env=bad, timeout=600)
    assert proc.returncode == 0 and (failed / "bench_default.failed.txt").is_file()
    assert (failed / "hw.txt").is_file() and (failed / "README.txt").is_file()
