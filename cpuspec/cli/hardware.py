"""The machine commands: hw (cores by kind, the OS and what it lets a program pin,
llama.cpp's default threads, the build's backends, the matrix engine) and contention (memory
bandwidth and what a co-running model costs)."""
from __future__ import annotations

import json
from pathlib import Path

import click


from cpuspec.harness.bench import BenchConfig, resolve_models
from cpuspec.cli.inputs import check_model_file, model_files
from cpuspec.cli.log import echo, log
from cpuspec.cli.options import pair_options, positive, save_options
from cpuspec.cli.outputs import finish_outputs, guarded, prepare_outputs
from cpuspec.harness.contention import ContentionConfig, run_contention
from cpuspec.report.measurements import render_contention
from cpuspec.machine.matrix import build_uses, describe
from cpuspec.machine.hardware import HardwareError, detect_hardware, select_cpus
from cpuspec.inputs.registry import ModelError



MATRIX_CONSEQUENCE = {
    "none": "(a batched verify runs on the vector units: `cpuspec costs` measures its price)",
    True: "(a batched verify runs on the tile unit; `cpuspec costs` measures what β is)",
    False: "(this build leaves it off, so a batched verify runs on the vector units: "
           "`cpuspec rebuild`, with CMAKE_ARGS unset, builds llama-cpp-python with it)",
    None: "(ggml's CPU kernels do not use it: a BLAS build may)",
}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def hw(as_json):
    """Show the CPU: cores, SMT, affinity, P-/E-cores, memory, governor, turbo and its matrix
    engine (Intel AMX, Arm SME, Apple's), and whether this llama.cpp build uses it.

    \b
    Examples:
      cpuspec hw
      taskset -c 0-3 cpuspec hw --json
    """
    from cpuspec.llama.build import known_result
    from cpuspec.llama.engine import ggml_devices, system_info
    info, devices = detect_hardware(), ggml_devices()
    uses = build_uses(info.matrix_engine, system_info())
    if as_json:
        engine = {**info.matrix_engine.to_dict(), "used_by_build": uses,
                  "probe": known_result()}
        echo(json.dumps({**info.to_dict(), "matrix_engine": engine,
                               "ggml_devices": devices}, indent=1))
        return
    kinds = "; ".join(f"{KIND_NAMES.get(k, k)} {','.join(map(str, v))}"
                      for k, v in info.cores_by_kind.items())
    mem = f"{info.memory_total_bytes / 2**30:.1f} GiB" if info.memory_total_bytes else "?"
    for label, value in [
            ("CPU", info.cpu_model), ("logical CPUs", info.logical_cpus),
            ("physical cores", info.physical_cores),
            ("SMT", f"{info.smt_siblings} threads per core"),
            ("affinity", f"{','.join(map(str, info.affinity))} "
                         f"({info.physical_cores_in_affinity} physical cores)"),
            ("hybrid", info.hybrid), ("cores by kind", kinds), ("memory", mem),
            ("OS", f"{OS_NAMES.get(info.os, info.os)}; pinning: {info.pinning} "
                   f"({PINNING_MEANS[info.pinning]})"),
            ("default threads", f"{info.default_threads} ({info.default_threads_rule})"),
            ("backends", backends_line(devices)),
            ("governor", info.governor or "not readable"),
            ("turbo", info.turbo or "not readable"),
            ("matrix engine", describe(info.matrix_engine, uses))]:
        echo(f"{label:>15}: {value}")
    echo(f"{'':>15}  {MATRIX_CONSEQUENCE[uses if info.matrix_engine.name else 'none']}")
    ran = tiles_ran(uses, known_result())
    if ran:
        echo(f"{'':>15}  {ran}")
    for i, d in enumerate(devices):   # what -ngl/-ngld offload to
        mem = f", {d['memory_total_bytes'] / 2**30:.1f} GiB" if d["memory_total_bytes"] else ""
        echo(f"{'ggml device ' + str(i):>15}: {d['name']} ({d['type']}{mem}): "
                   f"{d['description']}")


KIND_NAMES = {"P": "P-cores", "E": "E-cores", "LPE": "low-power E-cores", "M": "mid cores"}
OS_NAMES = {"linux": "Linux", "darwin": "macOS", "win32": "Windows"}
PINNING_MEANS = {"thread": "each model's threads can get cores of their own",
                 "process": "one core set for the whole process",
                 "none": "no program can choose cores; --p-cores, --e-cores and --draft-cores "
                         "are refused, --threads is the only axis"}


def tiles_ran(compiled: bool | None, probe: dict | None) -> str:
    """Whether the matrix engine's tiles ran, as the build check saw it (its child's weights in
    AMX buffers), where the build has the kernels compiled in: compiled is not ran."""
    if compiled is not True:
        return ""
    if not probe or not probe.get("ok"):
        return "not seen running yet: the build check has not decoded on this build"
    return ("the build check's decode ran on the tiles (weights in AMX buffers)"
            if probe.get("uses_amx") else "compiled in, but the build check's decode put no "
            "weights in AMX buffers: the tiles did not run")


def backends_line(devices: list[dict]) -> str:
    """Which backends the installed llama.cpp build has besides the CPU (Metal, CUDA,
    Vulkan...), from ggml's device list: what -ngl can offload to."""
    other = [f"{d['name']} ({d['type']})" for d in devices if d.get("type") != "CPU"]
    return ("CPU + " + ", ".join(other)) if other else \
        "CPU only (no GPU backend in this build: -ngl is refused)"


@click.command()
@pair_options
@click.option("--p-cores", type=click.IntRange(min=0), default=0,
              help="Use N P-cores [default: one CPU per physical core in the affinity].")
@click.option("--e-cores", type=click.IntRange(min=0), default=0, help="Use M E-cores.")
@click.option("--smt", is_flag=True, help="Use every SMT sibling of the chosen cores.")
@click.option("-t", "--threads", type=int, callback=positive,
              help="llama.cpp threads, on the first chosen CPUs; background streams use the "
                   "rest [default: all chosen CPUs but one].")
@click.option("-k", "--draft-len", "k", type=int, default=4, show_default=True,
              callback=positive, help="Verify batch is k + 1 tokens.")
@click.option("-n", "--n-tokens", type=int, default=32, show_default=True, callback=positive)
@click.option("--max-streams", type=click.IntRange(min=0),
              help="At most this many background streams [default: one per CPU left].")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write JSON here.")
@save_options
def contention(pair, target_path, draft_path, p_cores, e_cores, smt, threads, k, n_tokens,
               max_streams, json_path, save, force):
    """Memory bandwidth, rooflines and contention: why the draft is not free on a CPU.

    \b
    Examples:
      cpuspec contention
      cpuspec contention --p-cores 4 --threads 2 --json contention.json
    """
    from cpuspec.llama.engine import EngineError
    hw = detect_hardware()
    try:
        if p_cores or e_cores:
            cpus = select_cpus(hw, p_cores, e_cores, smt)
        elif hw.pinning == "none":   # nothing pinned: llama.cpp and the streams float
            cpus = sorted(hw.affinity)
        else:
            cpus = select_cpus(hw, p_cores=hw.physical_cores_in_affinity, smt=smt) \
                if hw.hybrid == "not hybrid" else sorted(hw.affinity)
    except HardwareError as exc:
        raise click.UsageError(str(exc))
    threads = threads or max(1, len(cpus) - 1)
    if threads > len(cpus):
        raise click.UsageError(f"--threads {threads} is more than the {len(cpus)} chosen CPUs")
    (target_path, target_origin), (draft_path, draft_origin) = model_files(target_path, draft_path)
    for p in (target_path, draft_path):
        check_model_file(p)
    sink = prepare_outputs([json_path], [target_path, draft_path], force, save,
                            "contention", hw.cpu_model)
    with guarded(sink):
        try:
            target_f, draft_f, _ = resolve_models(
                BenchConfig(prompts=[], threads=threads, pair=pair, target_path=target_path,
                            draft_path=draft_path, target_origin=target_origin,
                            draft_origin=draft_origin), log)
            res = run_contention(ContentionConfig(target_f.path, draft_f.path, cpus, threads,
                                                  k, n_tokens, max_streams,
                                                  pinned=hw.pinning != "none"),
                                 log)
        except (ModelError, EngineError) as exc:
            raise click.ClickException(str(exc))
        res["hardware"] = hw.to_dict()
        res["meta"] = {"hardware": hw.to_dict(), "threads": threads}
        sink(res)
    echo(render_contention(res))
    finish_outputs(sink)
