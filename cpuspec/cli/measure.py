"""The commands that measure besides bench: hw, contention, costs, paths, quality, tune."""
from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import click

from cpuspec.llama import native

from cpuspec.harness import paths as core
from cpuspec.harness.bench import BenchConfig, environment, resolve_models
from cpuspec.cli.checks import check_depths, check_limits, check_spec_files
from cpuspec.cli.inputs import (check_model_file, check_model_name, check_pair,
                                prompts_or_exit, refuse_shape_true, registry, resolve_model,
                                model_files, model_ref)
from cpuspec.cli.log import echo, log
from cpuspec.cli.options import (finite, positive, save_options, task_list, task_names, values,
                                 window_option)
from cpuspec.cli.outputs import finish_outputs, guarded, prepare_outputs, run_source
from cpuspec.harness.contention import ContentionConfig, run_contention
from cpuspec.report.measurements import render_contention, render_costs_file, render_quality
from cpuspec.core.drafters import NAMES as DRAFTER_NAMES
from cpuspec.machine.matrix import build_uses, describe
from cpuspec.machine.hardware import HardwareError, default_threads, detect_hardware, select_cpus
from cpuspec.report.load import render_load
from cpuspec.report.paths import render_paths_screen
from cpuspec.harness.probe import run_costs
from cpuspec.harness.quality import run_quality
from cpuspec.inputs.registry import ModelError
from cpuspec.results.schema import SCHEMA_VERSION
from cpuspec.inputs.tasks import DEFAULT_TASKS, builtin_prompts
from cpuspec.tune.race import RACE_SIZE
from cpuspec.tune.search import Candidate, run_tune
from cpuspec.report.tune import render_tune, render_tune_screen


# What the matrix engine changes for SD, by whether the build uses it (None: no ggml kernels).
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


def backends_line(devices: list[dict]) -> str:
    """Which backends the installed llama.cpp build has besides the CPU (Metal, CUDA,
    Vulkan...), from ggml's device list: what -ngl can offload to."""
    other = [f"{d['name']} ({d['type']})" for d in devices if d.get("type") != "CPU"]
    return ("CPU + " + ", ".join(other)) if other else \
        "CPU only (no GPU backend in this build: -ngl is refused)"


@click.command()
@click.option("--pair", help="Model pair from models.toml.")
@click.option("--target", "target_path", callback=model_ref, metavar="MODEL",
              help="A .gguf file, a registered name, OWNER/REPO[:QUANT], OWNER/REPO/FILE.gguf "
                   "or ollama:NAME[:TAG] [default: the pair's].")
@click.option("--draft", "draft_path", callback=model_ref, metavar="MODEL",
              help="The draft, named as --target [default: the pair's].")
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


@click.command()
@click.option("--pair", help="Model pair from models.toml.")
@click.option("--target", "target_path", callback=model_ref, metavar="MODEL",
              help="A .gguf file, a registered name, OWNER/REPO[:QUANT], OWNER/REPO/FILE.gguf "
                   "or ollama:NAME[:TAG] [default: the pair's].")
@click.option("--draft", "draft_path", callback=model_ref, metavar="MODEL",
              help="The draft, named as --target [default: the pair's].")
@click.option("-t", "--threads", type=int, callback=positive,
              help="Threads [default: the physical cores in this process's affinity].")
@click.option("--max-n", type=click.IntRange(2, 33), default=16, show_default=True,
              help="Measure target decodes of 1..N tokens (all N logit rows).")
@click.option("--reps", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Repetitions per batch size (median taken).")
@click.option("-d", "--depth", type=click.IntRange(min=0), default=0, show_default=True,
              help="Tokens of context before the prompt (as `bench --depth`): the curve at "
                   "that KV position.")
@click.option("--sizes", metavar="0.5b,1.5b,3b,7b,14b",
              help="The what-if: shape-true targets of these sizes (`cpuspec models shape`), "
                   "each probed with the draft; break-even acceptance per k and size.")
@click.option("--pairs", metavar="DRAFT:TARGET,...",
              help="The what-if over pairs of one family each (qwen3-0.6b:qwen3-8b, "
                   "gemma3-270m:gemma3-4b, llama3.2-1b:llama3.1-8b): the target shape-true, "
                   "the draft the real file where one is registered, else shape-true.")
@click.option("--quants", default="Q4_K_M", show_default=True, metavar="Q4_K_M,Q4_0,Q8_0",
              help="With --sizes or --pairs: the targets' quant types.")
@click.option("--acceptance", "acceptance_run", metavar="RUN",
              help="With --sizes or --pairs: also price each target at a saved bench run's "
                   "measured per-position acceptance, per task (borrowed from that run's pair).")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write JSON here.")
@save_options
def costs(pair, target_path, draft_path, threads, max_n, reps, depth, json_path, save, force,
          sizes, pairs, quants, acceptance_run):
    """The verify-cost curve V(n)/V(1) and the draft's cost: in seconds, no prompts to run.

    On a GPU a verify of n tokens costs about one decode; on a CPU it grows with n, by steps
    that depend on the quant types (llama.cpp multiplies repacked Q4_0/Q4_K/IQ4_NL weights in
    blocks of 4 rows). β(k) = V(k + 1)/V(1) − 1, c = draft decode ÷ target decode, and the
    best speedup SD could reach at each k if every draft were accepted.

    \b
    Examples:
      cpuspec costs
      cpuspec costs --pair qwen2.5-coder-1.5b-q4_0 --max-n 9
      cpuspec costs --sizes 1.5b,3b,7b,14b --quants Q4_K_M,Q4_0 --max-n 9
      cpuspec costs --pairs gemma3-270m:gemma3-4b,llama3.2-1b:llama3.1-8b --acceptance RUN
    """
    from cpuspec.llama.engine import EngineError
    threads = threads or default_threads()
    check_limits([1], 2, [threads], None)
    check_depths([depth], "--depth")
    ctx = click.get_current_context()
    if sizes is None and pairs is None and (acceptance_run or ctx.get_parameter_source(
            "quants") != click.core.ParameterSource.DEFAULT):
        raise click.UsageError("--quants and --acceptance go with --sizes or --pairs (the "
                               "what-if's shape-true targets): add one, or leave them out")
    if sizes is not None and pairs is not None:
        raise click.UsageError("--sizes or --pairs, not both: --pairs names each target's draft")
    if pairs is not None and pair is not None:
        raise click.UsageError("--pairs names each target's draft: leave --pair out")
    drafts = _pair_list(pairs, target_path, draft_path) if pairs is not None else None
    if drafts is not None:
        sizes = ",".join(drafts)
    whatif = (_size_list(sizes, target_path, draft_path is None and drafts is None),
              _quant_list(quants)) if sizes is not None \
        else None   # --sizes '' is refused there, never the plain curve
    if whatif is not None and ctx.get_parameter_source("quants") != \
            click.core.ParameterSource.DEFAULT:
        _check_only_quants(*whatif)
    check_pair(pair)
    (target_path, target_origin), (draft_path, draft_origin) = model_files(target_path, draft_path)
    for p in (target_path, draft_path):
        check_model_file(p)
    hw = detect_hardware()
    if whatif is not None:
        profiles = _profiles(acceptance_run) if acceptance_run else None
        return _whatif(*whatif, pair, draft_path, threads, max_n, reps, depth, json_path, save,
                       force, hw, drafts, profiles)
    sink = prepare_outputs([json_path], [target_path, draft_path], force, save, "costs",
                            hw.cpu_model)
    cfg = BenchConfig(prompts=[], threads=threads, pair=pair, target_path=target_path,
                      draft_path=draft_path, target_origin=target_origin, draft_origin=draft_origin,
                      k=max_n - 1, depth=depth, argv=["cpuspec", *sys.argv[1:]])
    with guarded(sink):
        try:
            res = run_costs(cfg, reps, log)
        except (ModelError, EngineError, ValueError) as exc:
            raise click.ClickException(str(exc))
        sink(res)
    echo(render_costs_file(res))
    finish_outputs(sink)


def _size_list(sizes: str, target_path, pair_draft: bool = False) -> list[str]:
    """--sizes' names; with the pair's draft (Qwen2.5), only Qwen2.5 targets share its
    tokenizer: another family is refused before any file is written."""
    from cpuspec.inputs.shapes import ShapeError, family, shape_of
    if target_path is not None:
        raise click.UsageError("--sizes measures shape-true targets: give --draft (or --pair "
                               "for its draft), not --target")
    names = [s.strip() for s in sizes.split(",") if s.strip()]
    try:
        for name in names:
            shape_of(name)
    except ShapeError as exc:
        raise click.BadParameter(str(exc), param_hint="'--sizes'")
    if not names:
        raise click.BadParameter("name one size or more", param_hint="'--sizes'")
    other = [n for n in names if pair_draft and family(shape_of(n)) != "Qwen2.5"]
    if other:
        d = shape_of(other[0])
        how = f"no smaller gpt-oss exists: --pairs {d.name}:{d.name} probes it with itself " \
            "(its verify curve)" if d.arch == "gpt-oss" else \
            f"give --draft, or --pairs DRAFT:{d.name}"
        raise click.BadParameter(
            f"{other[0]} is {family(d)}, the pair's draft Qwen2.5: draft and target must share "
            f"a tokenizer; {how}", param_hint="'--sizes'")
    return names


def _pair_list(pairs: str, target_path, draft_path) -> dict[str, str]:
    """--pairs DRAFT:TARGET,...: target → draft, shape names of one family each."""
    from cpuspec.inputs.shapes import ShapeError, family, shape_of
    if target_path is not None or draft_path is not None:
        raise click.UsageError("--pairs names its drafts and targets: leave --target and "
                               "--draft out")
    out: dict[str, str] = {}
    for item in (x.strip() for x in pairs.split(",") if x.strip()):
        draft, sep, target = item.partition(":")
        try:
            d, t = shape_of(draft.strip()), shape_of(target.strip())
        except ShapeError as exc:
            raise click.BadParameter(str(exc) if sep else f"{item!r}: DRAFT:TARGET, e.g. "
                                     "qwen3-0.6b:qwen3-8b", param_hint="'--pairs'")
        if family(d) != family(t):
            raise click.BadParameter(f"{item}: the draft is {family(d)}, the target "
                                     f"{family(t)}; draft and target must share a tokenizer",
                                     param_hint="'--pairs'")
        if out.get(t.name, d.name) != d.name:
            raise click.BadParameter(f"{t.name} is paired twice: one draft per target",
                                     param_hint="'--pairs'")
        out[t.name] = d.name
    if not out:
        raise click.BadParameter("name one pair or more", param_hint="'--pairs'")
    return out


def _profiles(ref: str) -> dict:
    """--acceptance RUN: the per-position acceptance per task of a saved bench run."""
    from cpuspec.analysis.whatif import acceptance_profiles
    from cpuspec.results.schema import read_json
    from cpuspec.results.store import OutputError, resolve_run, run_id
    try:
        path = resolve_run(ref)
        doc = read_json(path)      # a regular file of a schema this reads, or refused
    except (OutputError, OSError, ValueError) as exc:
        raise click.BadParameter(str(exc).splitlines()[0], param_hint="'--acceptance'")
    settings = doc.get("settings") if isinstance(doc, dict) else None
    if not isinstance(settings, dict) or doc.get("kind", "bench") != "bench" or \
            not doc.get("runs") or settings.get("drafter", "model") != "model":
        raise click.BadParameter(f"{ref}: not a saved bench run of a draft model (its measured "
                                 "per-position acceptance is what --acceptance borrows)",
                                 param_hint="'--acceptance'")
    try:
        profiles = acceptance_profiles(doc)
    except (AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise click.BadParameter(f"{ref}: a damaged results file, nothing to borrow "
                                 f"({type(exc).__name__}: {str(exc)[:120]})",
                                 param_hint="'--acceptance'") from None
    if not profiles:
        raise click.BadParameter(f"{ref}: no speculative rounds to read acceptance from",
                                 param_hint="'--acceptance'")
    if not doc.get("complete", True):
        n = len({r.get("prompt_id") for r in doc["runs"] if isinstance(r, dict)})
        log(f"--acceptance: {ref} was {doc.get('ended') or 'cut short'} after {n} prompt(s): "
            "its acceptance is borrowed as it stands, thinner than a whole run's")
    return {"run": run_id(path), "pair": doc["settings"].get("pair"),
            "k": doc["settings"].get("k"), "profiles": profiles}


def _check_only_quants(sizes: list, quants: list[str]) -> None:
    """A size published in one form only (gpt-oss: MXFP4_MOE) is measured in that form; a
    --quants the user gave that leaves that form out is refused, not silently replaced."""
    from cpuspec.inputs.shapes import only_quant, shape_of
    for size in sizes:
        only = only_quant(shape_of(size)) if isinstance(size, str) else None
        if only and only not in quants:
            raise click.BadParameter(
                f"{size} is published in one form only, {only}; --quants {','.join(quants)} "
                f"leaves it out: add {only}, or leave --quants out", param_hint="'--quants'")


def _quant_list(quants: str) -> list[str]:
    from cpuspec.inputs.shapes import QUANTS
    names = [q.strip().upper() for q in quants.split(",") if q.strip()]
    bad = [q for q in names if q not in QUANTS]
    if bad or not names:
        raise click.BadParameter(f"{', '.join(bad) or 'none given'}: one of {', '.join(QUANTS)}",
                                 param_hint="'--quants'")
    return names


def _whatif(sizes, quants, pair, draft_path, threads, max_n, reps, depth, json_path, save,
            force, hw, drafts=None, profiles=None) -> None:
    """`costs --sizes`: the what-if over shape-true targets (harness/whatif.py)."""
    import psutil

    from cpuspec.cli.models import real_draft, tokenizer_file
    from cpuspec.harness.whatif import run_whatif
    from cpuspec.inputs.shapes import ShapeError
    from cpuspec.llama.engine import EngineError
    from cpuspec.report.measurements import render_whatif
    sink = prepare_outputs([json_path], [draft_path], force, save, "whatif", hw.cpu_model)
    cfg = BenchConfig(prompts=[], threads=threads, pair=pair, draft_path=draft_path,
                      k=max_n - 1, depth=depth, argv=["cpuspec", *sys.argv[1:]])
    with guarded(sink):
        try:
            files = drafts and {t: real_draft(d, log) or d for t, d in drafts.items()}
            doc = run_whatif(cfg, sizes, quants, reps, lambda arch: tokenizer_file(arch, log),
                             psutil.virtual_memory().total, sink, log, files)
            if drafts:   # target → the draft's shape name (its file: each row's draft)
                doc["settings"]["pairs"] = drafts
            if profiles:
                doc["acceptance"] = profiles
        except (ModelError, EngineError, ShapeError, ValueError) as exc:
            raise click.ClickException(str(exc))
        sink(doc)
        if not any("cost_probe" in r for r in doc["rows"]):
            raise click.ClickException(
                "no target was measured, every one was skipped: " + "; ".join(
                    f"{r['size']} {r['quant']}: {r['skipped']}" for r in doc["rows"]))
    echo(render_whatif(doc))
    finish_outputs(sink)


def _chosen_paths(path_list: str, drafter: str, draft, llama_bin, build_native: bool,
                  native_rounds: bool) -> list[str]:
    """--paths as a list, checked against the drafter and the llama.cpp flags."""
    chosen = list(dict.fromkeys(p.strip() for p in path_list.split(",") if p.strip()))
    bad = [p for p in chosen if p not in core.ALL_PATHS]
    if not chosen or bad:
        raise click.BadParameter(f"unknown path {', '.join(bad) or repr(path_list)}; choose "
                                 f"from {', '.join(core.ALL_PATHS)}", param_hint="'--paths'")
    if core.REDECODE in chosen and drafter != "model":
        raise click.BadParameter(f"{core.REDECODE} imitates llama.cpp's draft model: it needs "
                                 "--drafter model", param_hint="'--paths'")
    if core.REDECODE in chosen and core.CPUSPEC not in chosen:
        raise click.BadParameter(f"{core.REDECODE} is timed against cpuspec's raw decoding: "
                                 f"add {core.CPUSPEC} to the list", param_hint="'--paths'")
    if drafter == "lookup" and draft:
        raise click.BadParameter("--drafter lookup drafts from the context and loads no draft "
                                 "model; drop --draft", param_hint="'--draft'")
    native_flags = [f for f, on in (("--llama-bin", llama_bin is not None),
                                    ("--build-native", build_native),
                                    ("--native-rounds", native_rounds)) if on]
    server_ok = [f for f in native_flags if f != "--native-rounds"]
    if native_flags and core.LLAMA_CPP not in chosen and (
            not set(core.SERVER_PATHS) & set(chosen) or len(server_ok) < len(native_flags)):
        raise click.UsageError(f"{', '.join(native_flags)} apply to the {core.LLAMA_CPP} path "
                               f"(--llama-bin and --build-native to {core.LLAMA_SERVER} too); "
                               f"add {core.LLAMA_CPP} to --paths")
    return chosen


def _server_flags(text: str | None, chosen: list[str]) -> tuple[str, ...] | None:
    """--server-flags as argv words, checked for what cpuspec sets itself (long, short and
    '=' forms): the speculative ones go to the SD server, the others to both servers
    (harness/paths.server_argv). -k, --p-min and --draft, which they replace in the SD server,
    are refused beside them where the server is the only path (other paths run them)."""
    from cpuspec.core.commands import OWN_SERVER_FLAGS, flag_name, split_server_flags
    if text is None:
        return None
    if not set(core.SERVER_PATHS) & set(chosen):
        raise click.UsageError(f"--server-flags applies to the {core.LLAMA_SERVER} paths; add "
                               f"{core.LLAMA_SERVER} to --paths")
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--server-flags'") from None
    names = [n for n in map(flag_name, words) if n is not None]
    taken = list(dict.fromkeys(n for n in names
                               if n in OWN_SERVER_FLAGS or n.startswith("--fim-")))
    if not words or taken:
        raise click.BadParameter(
            "cpuspec sets both servers' model, threads, context, host, port and slots"
            f"{': not ' + ', '.join(taken) if taken else ''}", param_hint="'--server-flags'")
    from cpuspec.llama.server import SECRET_FLAGS
    secret = [n for n in names if n in SECRET_FLAGS]
    if secret:   # the client sends no key, and a key is never kept in a results file
        raise click.BadParameter(f"{', '.join(secret)}: cpuspec's client sends no key to the "
                                 "servers it starts on 127.0.0.1; leave it out",
                                 param_hint="'--server-flags'")
    joined = [flag_name(w) for w in words if flag_name(w) is not None and "=" in w]
    if joined:
        raise click.BadParameter("llama.cpp reads a flag's value from the next word: "
                                 + ", ".join(f"{n} VALUE, not {n}=VALUE" for n in joined),
                                 param_hint="'--server-flags'")
    if not split_server_flags(words)[0]:
        raise click.BadParameter(
            "name the SD server's speculative flags (--spec-type, --spec-default, -md, "
            "--spec-draft-*, ...); the other flags are given to both servers",
            param_hint="'--server-flags'")
    ctx = click.get_current_context()
    beside = [flag for name, flag in (("k", "-k"), ("p_min", "--p-min"), ("draft", "--draft"))
              if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
    if beside and set(chosen) <= set(core.SERVER_PATHS):
        raise click.UsageError(
            f"{', '.join(beside)} would not reach the SD server, the only path measured: "
            "--server-flags replaces its speculative flags. Give them there "
            "(--spec-draft-n-max N, --spec-draft-p-min P, -md FILE), or leave --server-flags "
            "out")
    return words


def _native_bin_dir(chosen: list[str], build_native: bool, llama_bin):
    """Where llama.cpp's programs are (built first with --build-native): --llama-bin, else
    the first folder holding every program the chosen paths run, else the first holding one
    path's. The llama.cpp and llama-server paths whose programs are not there are dropped
    from `chosen`, with a note, where other paths remain; an error where none would."""
    need = {core.LLAMA_CPP: native.MEASURED, core.LLAMA_SERVER: (native.SERVER,),
            core.LLAMA_SERVER_CHAT: (native.SERVER,)}
    wanted = [p for p in chosen if p in need]
    try:
        built = native.build(log) if build_native else None
        if llama_bin is not None:   # a folder the user named must hold them: no fallback
            lacking = [t for p in wanted for t in need[p] if not native.program(llama_bin, t).is_file()]
            if lacking:
                raise click.UsageError(
                    f"{llama_bin} has no {', '.join(lacking)}; build llama.cpp's tools there, "
                    "run `cpuspec paths --build-native`, or leave the path out of --paths")
        bin_dir = llama_bin or built or native.find_bin_dir(None, [t for p in wanted
                                                                   for t in need[p]])
        for p in wanted if bin_dir is None else []:
            bin_dir = bin_dir or native.find_bin_dir(None, need[p])
    except native.NativeError as exc:
        raise click.ClickException(str(exc))
    missing = [p for p in wanted
               if bin_dir is None or not native.has_programs(bin_dir, need[p])]
    if missing:
        names = ", ".join(t for p in missing for t in need[p])
        where = "(give --llama-bin DIR, or --build-native)"
        if len(missing) == len(chosen):
            raise click.ClickException(f"nothing to measure: llama.cpp's {names} not found "
                                       f"{where}")
        log(f"llama.cpp: no {names} found {where}; measuring without the "
            f"{' and '.join(missing)} path")
        for p in missing:
            chosen.remove(p)
    return bin_dir


@click.command()
@click.option("--pair", help="Model pair from models.toml [default: the default pair].")
@click.option("--target", help="Target: a registered name, a GGUF file, OWNER/REPO[:QUANT] or "
              "ollama:NAME[:TAG] [default: the pair's].")
@click.option("--draft", help="Draft, named as --target [default: the pair's].")
@click.option("-k", "--draft-len", "k", type=click.IntRange(1, 32), default=4, show_default=True,
              help="Draft tokens per round (llama.cpp's --spec-draft-n-max).")
@click.option("--drafter", type=click.Choice(DRAFTER_NAMES), default="model",
              show_default=True, help="As for `cpuspec bench`.")
@click.option("--tasks", callback=task_list, default="json,code", show_default=True,
              help="Comma list of built-in tasks.")
@click.option("--prompts-per-task", type=click.IntRange(1, 16), default=5, show_default=True,
              help="Prompts per task (5 or more for an interval over all of them).")
@click.option("-n", "--max-tokens", type=click.IntRange(2, 1024), default=64, show_default=True,
              help="Tokens generated per prompt.")
@click.option("-t", "--threads", type=int, callback=positive,
              help="Threads for every path [default: the physical cores].")
@click.option("--paths", "path_list", default="cpuspec,llama-cpp-python,llama.cpp,llama-server",
              show_default=True, help="Comma list of cpuspec, cpuspec+redecode, "
              "llama-cpp-python, llama.cpp, llama-server, llama-server-chat (the same "
              "servers asked at /v1/chat/completions, as an OpenAI client asks; llama.cpp's "
              "programs: left out, with a note, where they are not built).")
@click.option("--llama-bin", type=click.Path(path_type=Path, file_okay=False),
              help="Folder with llama.cpp's llama-speculative-simple, llama-completion and "
                   "llama-server [default: $CPUSPEC_LLAMA_BIN, cpuspec's build, then PATH].")
@click.option("--p-min", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0,
              callback=lambda c, p, v: finite(v, "--p-min"),
              show_default=True, help="Gate every path's drafts on the draft's confidence, as "
              "llama.cpp's --spec-draft-p-min (not llama-cpp-python's DraftModel).")
@click.option("--server-flags", metavar="FLAGS",
              help="The SD server's speculative flags in place of the configuration's, e.g. "
                   "'--spec-type ngram-mod' or '--spec-default' (llama-server path only).")
@click.option("--build-native", is_flag=True, help="Build llama.cpp's programs from the "
              "installed llama-cpp-python's sources first (once, ~15 min on 2 cores).")
@click.option("--native-rounds", is_flag=True, help="Run llama.cpp's SD once more per prompt, "
              "untimed, logging each round's accepted/drafted.")
@click.option("--prompts", "prompts_file", type=click.Path(path_type=Path),
              help="Your own prompts (JSONL, as for `cpuspec bench`); --tasks then picks "
                   "among its tasks.")
@click.option("--concurrency", metavar="1,2,4", help="Load test: llama-server, plain and with "
              "SD, with this many requests in flight (-np N), each level in turn.")
@click.option("--batches", type=click.IntRange(1, 50), default=12, show_default=True,
              help="With --concurrency: the most batches per level and server; a level stops "
                   "at the first look (5, 8, 12 batches) that decides it (5+: an interval).")
@click.option("--fixed", is_flag=True,
              help="With --concurrency: run every batch of every level (the fixed design).")
@click.option("--requests-per-client", type=click.IntRange(1, 20), default=1,
              show_default=True, help="With --concurrency: requests each client sends per "
              "batch, one after another.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write JSON here.")
@save_options
def paths(pair, target, draft, k, drafter, tasks, prompts_per_task, max_tokens, threads,
          path_list, llama_bin, p_min, server_flags, build_native, native_rounds, prompts_file,
          concurrency, batches, fixed, requests_per_client, json_path, save, force):
    """Does the speedup reach your stack? One configuration through cpuspec's loop,
    llama-cpp-python (with cpuspec.DraftModel) and llama.cpp's own programs, each SD ×raw.

    \b
    Examples:
      cpuspec paths --target T.gguf --draft D.gguf -k 7
      cpuspec paths --paths cpuspec,cpuspec+redecode,llama.cpp --build-native
      cpuspec paths --paths cpuspec,llama-server --server-flags '--spec-type ngram-mod'
      cpuspec paths --target T.gguf --draft D.gguf -k 7 --concurrency 1,2,4
    """
    from cpuspec.llama.engine import EngineError
    levels = _levels(concurrency)
    _check_load_flags(levels, path_list, prompts_file, tasks)
    if levels:   # a load test runs the server path alone
        path_list = core.LLAMA_SERVER
    chosen = _chosen_paths(path_list, drafter, draft, llama_bin, build_native, native_rounds)
    # with a prompts file, --tasks picks among its tasks (as for bench); alone, the suites
    given_tasks = click.get_current_context().get_parameter_source("tasks") == \
        click.core.ParameterSource.COMMANDLINE
    prompts = prompts_or_exit(tasks if given_tasks or not prompts_file else None, prompts_file,
                              prompts_per_task)
    extra = _server_flags(server_flags, chosen)
    if p_min and (drafter == "lookup" or {core.LLAMA_CPP_PYTHON, core.REDECODE} & set(chosen)):
        raise click.UsageError("--p-min gates a draft model's drafts: it needs --drafter model "
                               f"or hybrid, and {core.LLAMA_CPP_PYTHON}'s DraftModel and the "
                               f"{core.REDECODE} imitation have no gate (leave them out of "
                               "--paths)")
    threads = threads or default_threads()
    check_limits([k], max_tokens, [threads], None)
    check_pair(pair)
    reg = registry()
    names = [target or reg.pair(pair).target] + ([] if drafter == "lookup" else
                                                 [draft or reg.pair(pair).draft])
    bin_dir = _paths_preflight(reg, names, chosen, build_native, llama_bin)
    check_spec_files(Path(names[0]), extra)
    sink = prepare_outputs([json_path], [Path(n) for n in names if n.endswith(".gguf")],
                            force, save, "paths", detect_hardware().cpu_model)
    with guarded(sink):
        try:
            files = [resolve_model(reg, n).path for n in names]
            cfg = core.PathsConfig(files[0], files[1] if len(files) > 1 else None, k, drafter,
                                   prompts, max_tokens, threads, tuple(chosen), bin_dir,
                                   native_rounds, extra, p_min)
            save_doc = lambda d: sink({"schema_version": SCHEMA_VERSION, **d})  # noqa: E731
            doc = _load_test(cfg, levels, batches, requests_per_client, save_doc, fixed) \
                if levels \
                else core.measure_paths(cfg, environment(threads), log, save_doc)
        except (ModelError, EngineError, native.NativeError, ValueError) as exc:
            raise click.ClickException(str(exc))
        save_doc(doc)
    source = str(json_path) if json_path else "RUN"
    echo(render_load(doc, source) if levels else render_paths_screen(doc, source))
    finish_outputs(sink)


def _paths_preflight(reg, names: list[str], chosen: list[str], build_native: bool,
                     llama_bin) -> Path | None:
    """Before any model loads: the model names (no shape-true file: its acceptance is noise),
    llama.cpp's programs where a path needs them, and $CPUSPEC_NATIVE_TIMEOUT_S."""
    for name in names:
        check_model_name(reg, name)
        refuse_shape_true(Path(name))   # by its metadata, whatever the file's name
    bin_dir = _native_bin_dir(chosen, build_native, llama_bin) \
        if {core.LLAMA_CPP, *core.SERVER_PATHS} & set(chosen) else None
    if bin_dir is not None:
        from cpuspec.llama.native import NativeError, call_timeout_s
        try:
            call_timeout_s()
        except NativeError as exc:
            raise click.UsageError(str(exc))
    return bin_dir


def _check_load_flags(levels: list[int], path_list: str, prompts_file, tasks) -> None:
    """Flags that cannot apply are refused (exit 2), never ignored: the load test's own
    flags without --concurrency, another --paths with it."""
    ctx = click.get_current_context()
    given = {name for name in ("batches", "requests_per_client", "path_list", "tasks", "fixed")
             if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}
    if not levels and given & {"batches", "requests_per_client", "fixed"}:
        raise click.UsageError("--batches, --fixed and --requests-per-client go with "
                               "--concurrency")
    if levels and "path_list" in given and path_list.strip() != core.LLAMA_SERVER:
        raise click.UsageError("--concurrency load-tests llama-server alone: leave --paths "
                               "out (or give --paths llama-server)")


MAX_CONCURRENCY = 64   # clients are threads of this process: a load test, not a flood


def _levels(concurrency: str | None) -> list[int]:
    if concurrency is None:   # --concurrency '' is refused below, never the run without load
        return []
    try:
        levels = [int(x) for x in concurrency.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{concurrency!r}: a comma list of whole numbers, e.g. 1,2,4",
                                 param_hint="'--concurrency'")
    if not levels or not all(1 <= n <= MAX_CONCURRENCY for n in levels):
        raise click.BadParameter(f"{concurrency!r}: each level from 1 to {MAX_CONCURRENCY}",
                                 param_hint="'--concurrency'")
    return list(dict.fromkeys(levels))


def _load_test(cfg, levels: list[int], batches: int, per_client: int, save_doc,
               fixed: bool = False) -> dict:
    """`paths --concurrency`: harness/load.py with the paths command's server flags, each
    level stopping under the sequential design (--fixed: every batch)."""
    from cpuspec.analysis.sequential import ALPHA, PRECISION
    from cpuspec.harness.load import LoadConfig, measure_load
    texts, per_slot, followups = core.server_texts(cfg)
    lcfg = LoadConfig(cfg, tuple(levels), batches, per_client,
                      None if fixed else {"alpha": ALPHA, "precision": PRECISION})
    doc = measure_load(lcfg, environment(cfg.threads),
                       lambda n_ctx, sd: core.server_argv(cfg, n_ctx, sd), texts, per_slot,
                       log, save_doc)
    if followups:
        doc["followups"] = followups
    return doc


@click.command()
@click.argument("models_", metavar="MODEL...", nargs=-1, required=True)
@click.option("--reference", help="Model (name or file) whose greedy output is the yardstick "
                                  "[default: the default pair's target].")
@click.option("-t", "--threads", type=int, callback=positive)
@click.option("-n", "--max-tokens", type=click.IntRange(1, 512), default=64, show_default=True)
@click.option("--prompts-per-task", type=click.IntRange(1, 16), default=2, show_default=True)
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write JSON here.")
@save_options
def quality(models_, reference, threads, max_tokens, prompts_per_task, json_path, save, force):
    """A quality proxy for quants: perplexity and top-1 agreement with a reference.

    MODEL is a registered name, a GGUF file, OWNER/REPO[:QUANT] or ollama:NAME[:TAG].
    Perplexity is measured on a fixed built-in text (prose, code, JSON); agreement is the
    share of the reference's greedy tokens on the built-in json, code and story prompts that
    the model's argmax reproduces.

    \b
    Examples:
      cpuspec quality qwen2.5-coder-1.5b-q4km qwen2.5-coder-1.5b-q4_0
      cpuspec quality my-q3.gguf --reference my-f16.gguf
    """
    from cpuspec.llama.engine import EngineError
    threads = threads or default_threads()
    check_limits([1], 2, [threads], None)
    reg = registry()
    for name in [*models_, reference or reg.pair(None).target]:
        check_model_name(reg, name)
        refuse_shape_true(Path(name))   # by its metadata, whatever the file's name
    files = [Path(m) for m in models_ if Path(m).suffix == ".gguf"]
    sink = prepare_outputs([json_path], files, force, save, "quality",
                            detect_hardware().cpu_model)
    with guarded(sink):
        try:
            ref = resolve_model(reg, reference or reg.pair(None).target)
            cands = [resolve_model(reg, m) for m in models_]
            res = run_quality(cands, ref, builtin_prompts(DEFAULT_TASKS, prompts_per_task),
                              max_tokens, threads, log)
        except (ModelError, EngineError) as exc:
            raise click.ClickException(str(exc))
        res = {"schema_version": SCHEMA_VERSION, "kind": "quality", "complete": True,
               "meta": environment(threads), "settings": {"threads": threads,
                                                          "argv": ["cpuspec", *sys.argv[1:]]},
               **res}
        sink(res)
    echo(render_quality(res))
    finish_outputs(sink)


def _one_each(models: list, option: str) -> list:
    """Each file once, however it was named (a repo reference and its file's path are one
    target: measured twice, it would race against itself)."""
    seen, out = set(), []
    for m in models:
        key = m.path.resolve()
        if key in seen:
            log(f"{option}: {m.spec.name} is a file named already; measured once")
            continue
        seen.add(key)
        out.append(m)
    return out


def _tune_names(reg, targets: str, drafts: str, draft_window) -> dict[str, list[str]]:
    """--targets and --drafts as lists of names, each checked before minutes of fetching or
    deriving."""
    # each name once: a name given twice would be measured twice and raced against itself
    names = {"targets": list(dict.fromkeys(x.strip() for x in targets.split(",") if x.strip())),
             "drafts": list(dict.fromkeys(x.strip() for x in drafts.split(",") if x.strip()))}
    for option, given in (("--targets", targets), ("--drafts", drafts)):
        if not names[option.removeprefix("--")]:
            raise click.BadParameter(f"{given!r} names no model; e.g. "
                                     + ("qwen2.5-coder-1.5b-q4_0" if option == "--targets"
                                        else "qwen2.5-coder-0.5b-q4_0,lookup"),
                                     param_hint=f"'{option}'")
    if draft_window and all(n == "lookup" for n in names["drafts"]):
        raise click.UsageError("--draft-window needs a draft model in --drafts (a model or "
                               "hybrid:MODEL); lookup reads the whole prompt at no cost")
    for n in names["drafts"]:
        if n.startswith("hybrid:") and n.removeprefix("hybrid:").strip() in ("", "lookup"):
            raise click.BadParameter(f"{n!r} names no draft model (the hybrid is prompt lookup "
                                     "backed by one); e.g. hybrid:qwen2.5-coder-0.5b-q4_0",
                                     param_hint="'--drafts'")
    for n in names["targets"] + [n.removeprefix("hybrid:") for n in names["drafts"]
                                 if n != "lookup"]:
        check_model_name(reg, n)
    return names


@click.command()
@click.option("--targets", default="qwen2.5-coder-1.5b-q4km,qwen2.5-coder-1.5b-q4_0,"
              "qwen2.5-coder-1.5b-q8_0",
              show_default=True, help="Comma list of target models (names, GGUF files, "
                                      "OWNER/REPO[:QUANT], ollama:NAME); the first is the "
                                      "reference raw speed.")
@click.option("--drafts", default="qwen2.5-coder-0.5b-q4_0,lookup,hybrid:qwen2.5-coder-0.5b-q4_0",
              show_default=True,
              help="Comma list of draft models (named as --targets); 'lookup' for the "
                   "prompt-lookup drafter; 'hybrid:MODEL' for lookup backed by MODEL.")
@click.option("--k-max", type=click.IntRange(1, 16), default=8, show_default=True,
              help="Measure once at this k; predict every k up to it.")
@click.option("--tasks", callback=task_names,
              help="Built-in tasks [default: json,code,story,grounded]; with --prompts, names "
                   "pick that file's tasks first, and builtin:NAME a built-in suite.")
@click.option("--prompts", "prompts_file", type=click.Path(path_type=Path),
              help="JSONL prompts file (as for bench).")
@click.option("--prompts-per-task", type=click.IntRange(2, 64), default=12, show_default=True,
              help="Prompts 1, 4, 7, ... of each task choose, the others confirm: 12 gives 4 "
                   "and 8, so the race can stop a member at 5 prompts and confirm the rest at "
                   "8; 8 gives 3 and 5, the fewest a 95 % interval is printed from.")
@click.option("-n", "--max-tokens", type=click.IntRange(2, 4096), default=64,
              show_default=True)
@click.option("-t", "--threads", type=int, callback=positive)
@click.option("--budget", type=click.FloatRange(min=1), metavar="MINUTES",
              callback=lambda c, p, v: finite(v, "--budget"),
              help="Stay within this many minutes of wall time from the command's start "
                   "(loading, deriving quants and probes included): a step that would start "
                   "after it is skipped, and said so; the screen gives the minutes spent.")
@click.option("--depths", callback=values(0), metavar="N,M,...",
              help="Also predict each SD answer at these context depths (e.g. 0,1024,4096), "
                   "from its cost curve measured at each: where SD stops paying.")
@click.option("--draft-window", default="off", show_default=True, metavar="HEAD,TAIL",
              callback=lambda c, p, v: window_option(v),
              help="Every draft model (a model or hybrid:MODEL in --drafts) reads only the "
                   "first HEAD and last TAIL tokens of a longer prompt, as `bench "
                   "--draft-window`; lookup reads everything, as it costs nothing.")
@click.option("--race", "race_size", type=click.IntRange(1, 8), default=RACE_SIZE,
              show_default=True,
              help="Per task, this many answers predicted fastest (and the one where SD pays "
                   "most) race on the confirm prompts; one clearly slower than the leader stops "
                   "at the next look (5, 8, 12, ... prompts).")
@click.option("--no-confirm", is_flag=True, help="Predict only; do not confirm by a run.")
@click.option("--details", is_flag=True, help="Print the whole report (the ranking, both "
              "answer tables, the race, every command) instead of the one screen; `cpuspec "
              "report RUN --details` prints it later.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write JSON here.")
@save_options
def tune(targets, drafts, k_max, tasks, prompts_file, prompts_per_task, max_tokens, threads,
         budget, depths, draft_window, race_size, no_confirm, details, json_path, save, force):
    """Find where SD pays: targets × drafters × k, predicted by the cost model, then confirmed.

    Each candidate's cost curve comes first (seconds): candidates whose curve cannot pay even
    with every draft accepted are skipped. A short pilot per drafter (48 tokens on the first
    choosing prompt of each task) gives an acceptance that, through each candidate's own
    curve, ranks the rest: they run most promising first. One static run at --k-max per
    candidate on a third of the prompts gives the costs (V(n), the draft's decode) and the
    acceptance that predict every k. Per task it answers twice: the fastest configuration
    against raw decoding on the first target (raw decoding on another target included), and
    where SD pays most against raw decoding on its own target. The --race answers predicted
    fastest then race on the other prompts (SD: raw vs SD with the lossless audit; the first
    target's raw speed on the same prompts): one clearly slower than the leader stops at the
    next look, and the leader is the fastest answer, measured, with 95 % intervals (over the
    looks) from 5 prompts on. Prints the exact `cpuspec bench` command for each, and when
    nothing pays, which of a and 1 + α + β is short.

    \b
    Examples:
      cpuspec tune --budget 20
      cpuspec tune --targets a.gguf,b.gguf --drafts c.gguf --tasks json --k-max 4
    """
    from cpuspec.llama.engine import EngineError
    started, threads = time.monotonic(), threads or default_threads()   # the budget's clock
    check_limits([k_max], max_tokens, [threads], None, "--k-max", k_may_equal=True)
    check_depths(depths, "--depths")
    prompts = prompts_or_exit(tasks, prompts_file, prompts_per_task, [*DEFAULT_TASKS, "grounded"])
    reg = registry()
    names = _tune_names(reg, targets, drafts, draft_window)
    for name in names["targets"] + names["drafts"]:   # by metadata, hybrid:FILE's too
        if name != "lookup":
            refuse_shape_true(Path(name.removeprefix("hybrid:")))
    files = [Path(x.removeprefix("hybrid:")) for v in names.values() for x in v
             if x.endswith(".gguf")]
    sink = prepare_outputs([json_path], files + [prompts_file], force, save, "tune",
                            detect_hardware().cpu_model)
    cfg = BenchConfig(prompts=prompts, threads=threads, max_tokens=max_tokens,
                      draft_window=draft_window, argv=["cpuspec", *sys.argv[1:]])
    with guarded(sink):
        try:
            tgt = _one_each([resolve_model(reg, n) for n in names["targets"]], "--targets")
            drf = [(None, False) if n == "lookup" else
                   (resolve_model(reg, n.removeprefix("hybrid:")), n.startswith("hybrid:"))
                   for n in names["drafts"]]
            cands = [Candidate(t, d, hybrid) for t in tgt for d, hybrid in drf]
            head = {"schema_version": SCHEMA_VERSION, "meta": environment(threads),
                    "settings": {"threads": threads, "max_tokens": max_tokens, "k_max": k_max,
                                 "draft_window": list(draft_window) if draft_window else None,
                                 "argv": cfg.argv}}
            doc = run_tune(cfg, cands, log, k_max, not no_confirm,
                           lambda d: sink({**head, **d, "complete": False}),
                           budget * 60 if budget else None, depths=depths,
                           race_size=race_size, started=started)
        except (ModelError, EngineError, ValueError) as exc:
            raise click.ClickException(str(exc))
        doc = {**head, **doc}
        sink(doc)
    echo(render_tune(doc) if details else render_tune_screen(doc, run_source(sink)))
    finish_outputs(sink)
