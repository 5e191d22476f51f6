"""ggml's devices and the offload path. On every build: the device list that `cpuspec hw` and
every results file carry. With the Vulkan build of bench/vulkan_check.sh present (its own venv,
$CPUSPEC_VULKAN_VENV or ~/.cache/cpuspec/vulkan-venv): the tiny models offloaded to a real ggml
device (lavapipe here, a GPU on a laptop), raw and SD, every placement."""
import json
import re
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from cpuspec.cli.main import main
from cpuspec.llama.engine import ggml_devices, supports_gpu_offload

VULKAN_VENV = Path(os.environ.get("CPUSPEC_VULKAN_VENV",
                                  Path.home() / ".cache" / "cpuspec" / "vulkan-venv"))


def test_the_cpu_device_is_listed_with_its_memory():
    devices = ggml_devices()
    cpu = [d for d in devices if d["type"] == "CPU"]
    assert len(cpu) == 1 and cpu[0]["name"] == "CPU"
    assert cpu[0]["memory_total_bytes"] > 2**30          # this machine's RAM, not 0
    if not supports_gpu_offload():
        assert all(d["type"] in ("CPU", "accelerator") for d in devices)


def test_hw_prints_the_devices():
    res = CliRunner().invoke(main, ["hw"])
    assert res.exit_code == 0 and "ggml device 0: CPU (CPU" in res.output
    data = json.loads(CliRunner().invoke(main, ["hw", "--json"]).output)
    assert data["ggml_devices"][0]["name"] == "CPU"


def test_the_load_log_says_where_the_weights_went(tiny_models):
    """n_gpu_layers is a request: llama.cpp's load log says where the weights really went. On
    this build (no GPU) 99 layers asked for still land on the CPU, and the record says so."""
    from cpuspec.llama.engine import Model
    for asked in (0, 99):
        with Model(tiny_models["target"], n_gpu_layers=asked) as m:
            assert m.buffers, "no 'model buffer size' line read from llama.cpp's load log"
            total = sum(m.buffers.values())
            # the buffers hold the weights (MiB to two decimals, padded), a CPU_REPACK copy
            # of some at most (Q4_0, Q4_K on x86)
            assert 0.9 * m.size_bytes <= total <= 2 * m.size_bytes + 2**16, (m.buffers,
                                                                                  m.size_bytes)
            if not supports_gpu_offload():
                assert all(name.startswith("CPU") for name in m.buffers), m.buffers
                assert m.offloaded_bytes == 0


def test_a_placement_asked_for_but_not_made_is_shown_as_cpu(tiny_models):
    """A sweep row whose -ngl the build ignored (the weights stayed on the CPU, as the load
    log shows) is not labelled as running on the device."""
    from cpuspec.llama.engine import Model
    from cpuspec.report.sweep import placement
    if supports_gpu_offload():
        pytest.skip("this build offloads: the case needs a CPU-only build")
    doc = json.loads(RECORDED_SWEEP.read_text())
    row = next(r for r in doc["rows"] if r["n_gpu_layers"] == 99 and r["draft_gpu_layers"] == 0)
    assert placement(row, doc["meta"]["ggml_devices"]).startswith("target Vulkan0")
    with Model(tiny_models["target"], n_gpu_layers=99) as m:
        row = row | {"target_offloaded_bytes": m.offloaded_bytes}
    assert placement(row, doc["meta"]["ggml_devices"]).startswith(
        "target CPU (ngl ignored)")


def vulkan_env() -> dict:
    """This checkout's cpuspec on the Vulkan venv's llama-cpp-python, on device 0."""
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
            # ggml skips a device of type CPU (lavapipe) unless it is named
            "GGML_VK_VISIBLE_DEVICES": os.environ.get("GGML_VK_VISIBLE_DEVICES", "0"),
            # lavapipe (Mesa 22.3) crashes in ggml's fused ops on batches of 3+ tokens: 3 runs
            # in 4 died with SIGSEGV in its queue thread, 0 in 10 with fusion off (docs/offload.md)
            "GGML_VK_DISABLE_FUSION": os.environ.get("GGML_VK_DISABLE_FUSION", "1")}


def vulkan_python() -> Path:
    py = VULKAN_VENV / "bin" / "python"
    if not py.is_file():
        pytest.skip(f"no Vulkan build of llama-cpp-python at {VULKAN_VENV} "
                    "(bash bench/vulkan_check.sh builds one)")
    ready = subprocess.run([str(py), "-c", "import click, llama_cpp; "
                            "assert llama_cpp.llama_supports_gpu_offload()"],
                           capture_output=True, text=True, timeout=120, env=vulkan_env())
    if ready.returncode:   # bench/vulkan_check.sh stopped (or is still running) half-way
        pytest.skip(f"the venv at {VULKAN_VENV} is not a finished Vulkan build "
                    f"({ready.stderr.strip().splitlines()[-1:]}); bash bench/vulkan_check.sh")
    return py


def test_every_placement_runs_on_the_vulkan_device(tiny_models, tmp_path):
    py = vulkan_python()
    env = vulkan_env()
    out = tmp_path / "offload.json"
    proc = subprocess.run(
        [str(py), "-m", "cpuspec.cli.main", "bench", "--target", str(tiny_models["target"]),
         "--draft", str(tiny_models["draft"]), "-ngl", "0,99", "-ngld", "0,99", "-k", "3",
         "-n", "12", "--tasks", "json", "--prompts-per-task", "2", "--policy", "static",
         "--threads", "1", "--warmup", "0", "--json", str(out), "--no-save"],
        capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    placements = {(r["n_gpu_layers"], r["draft_gpu_layers"]) for r in doc["rows"]}
    assert placements == {(0, 0), (99, 0), (0, 99), (99, 99)}
    assert all("skipped" not in r for r in doc["rows"])
    devices = doc["meta"]["ggml_devices"]
    assert any(d["type"] != "CPU" for d in devices), devices
    # the layers really went to the device: llama.cpp's load log, read into each row
    # (-ngl 99: every weight but the input embeddings, which llama.cpp keeps on the CPU)
    from gguf import GGUFReader

    from cpuspec.report.tables import sweep_rows
    for r, point in zip(sweep_rows(doc), doc["points"]):
        for role, asked in (("target", r["n_gpu_layers"]), ("draft", r["draft_gpu_layers"])):
            weights = point["models"][role]["weight_bytes"]
            embd = next(t.n_bytes for t in GGUFReader(tiny_models[role]).tensors
                        if t.name == "token_embd.weight")
            placed = r[f"{role}_offloaded_bytes"]
            if asked:
                # (buffer sizes are logged in MiB to 2 decimals: ±0.01 MiB a buffer)
                assert weights - embd - 2**14 <= placed <= 1.05 * (weights - embd), (role, r)
            else:
                assert placed == 0, (role, r)
    for point in doc["points"]:          # lossless on the device too
        assert all(a["identical"] for a in point["audit"])


RECORDED_SWEEP = Path(__file__).resolve().parent / "recorded" / "epyc-family25-model1" / \
    "offload_vulkan_lavapipe_tiny.json"


def test_the_offload_table_names_each_placement_and_its_device():
    """The recorded Vulkan sweep: one row per placement saying where the target and the draft
    ran, its verdict, and above the table the device and backend, marked as software."""
    from click.testing import CliRunner

    from cpuspec.cli.main import main
    res = CliRunner().invoke(main, ["report", str(RECORDED_SWEEP)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("offload device: Vulkan0 (Vulkan backend): llvmpipe")
    assert "software driver running on the CPU" in " ".join(lines[:2])
    doc = json.loads(RECORDED_SWEEP.read_text())
    for r in doc["rows"]:   # one screen: where each model ran and the verdict measured
        t = "CPU" if not r["n_gpu_layers"] else "Vulkan0"
        d = "CPU" if not r["draft_gpu_layers"] else "Vulkan0"
        row = next(x for x in lines if x.startswith(f"T {t}, D {d} "))
        assert " slower* " in row    # two prompts a point: a range, never a verdict
    res = CliRunner().invoke(main, ["report", str(RECORDED_SWEEP), "--details"])
    lines = res.output.splitlines()
    assert "software driver running on the CPU" in lines[0]
    for r in doc["rows"]:
        t = "CPU" if not r["n_gpu_layers"] else "Vulkan0"
        d = "CPU" if not r["draft_gpu_layers"] else "Vulkan0"
        row = next(x for x in lines if f"target {t}, draft {d}" in x)
        assert row.split()[:2] == [str(r["n_gpu_layers"]), str(r["draft_gpu_layers"])]
        assert " OFF " in row     # SD's verdict per placement (the tiny draft never pays)


def test_compare_sets_two_offload_sweeps_side_by_side_and_refuses_other_workloads(tmp_path):
    from click.testing import CliRunner

    from cpuspec.cli.main import main
    res = CliRunner().invoke(main, ["compare", str(RECORDED_SWEEP), str(RECORDED_SWEEP)])
    assert res.exit_code == 0, res.output
    assert res.output.count("offload device: Vulkan0") == 2
    placements = [x for x in res.output.splitlines() if " placement " in x]
    assert len(placements) == 4 and "target Vulkan0, draft CPU" in "".join(placements)
    other = Path(__file__).resolve().parent / "recorded" / "avx2-build" / "sweep_threads_k.json.gz"
    res = CliRunner().invoke(main, ["compare", str(RECORDED_SWEEP), str(other)])
    assert res.exit_code == 1 and "different workloads" in res.output and "axes:" in res.output
    bench = Path(__file__).resolve().parent / "recorded" / "avx2-build" / "bench_2threads.json.gz"
    res = CliRunner().invoke(main, ["compare", str(bench), str(RECORDED_SWEEP)])
    assert res.exit_code == 2 and "sweep files with sweep files" in res.output
    res = CliRunner().invoke(main, ["compare", str(RECORDED_SWEEP), str(tmp_path / "no.json")])
    assert res.exit_code == 2 and "no results file or saved run" in res.output


def test_plot_draws_the_placements_as_categories(tmp_path):
    pytest.importorskip("matplotlib")
    from cpuspec.report.plots import figure_data, render
    doc = json.loads(RECORDED_SWEEP.read_text())
    d = figure_data([doc], ["lavapipe"])["offload"]["lavapipe"]
    assert d["labels"] == ["target CPU\ndraft CPU", "target CPU\ndraft Vulkan0",
                           "target Vulkan0\ndraft CPU", "target Vulkan0\ndraft Vulkan0"]
    assert d["verdict"] == ["OFF"] * 4 and "software driver" in d["device"]
    files = render([doc], ["lavapipe"], tmp_path)
    assert {f.name for f in files} == {"offload_lavapipe.png", "offload_lavapipe.svg"}
    svg = (tmp_path / "offload_lavapipe.svg").read_text()
    assert "llvmpipe" in svg and "target Vulkan0" in svg   # the caption and the tick labels


def test_an_old_sweep_with_skipped_gpu_points_still_renders():
    """Until 2026-12-03 a CPU build ran a sweep's GPU points as rows marked skipped; such
    points are refused up front now, and the files that hold them still print."""
    from click.testing import CliRunner

    from cpuspec.cli.main import main
    old = Path(__file__).resolve().parent.parent / "bench" / "results" / "avx2-build" / \
        "sweep_gpu_skip.json"
    res = CliRunner().invoke(main, ["report", str(old)])
    assert res.exit_code == 0, res.output
    assert "skipped: this llama-cpp-python build has no GPU offload" not in res.output
    assert re.search(r"T GPU, D CPU\s+-\s+-\s+skipped: this llama-cpp…\s+skipped", res.output)
    res = CliRunner().invoke(main, ["report", str(old), "--details"])
    assert "skipped: this llama-cpp-python build has no GPU offload" in res.output
