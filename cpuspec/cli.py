"""Click commands only: parse, build a config, call the core, hand results to a printer."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
from pathlib import Path

import click

from . import __version__
from .models import ModelError, cached_path, fetch_model, is_cached, load_registry
from .tasks import ALL_TASKS, DEFAULT_TASKS, PromptsFileError, builtin_prompts, load_prompts


def _log(msg: str) -> None:
    click.echo(msg, err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cpuspec")
def main() -> None:
    """Does speculative decoding pay off on this CPU? Measure it.

    \b
    Examples:
      cpuspec bench --threads 8
      cpuspec bench --tasks json,code --draft-len 2 --json out.json
      cpuspec models list
    """


def _save_options(f):
    """--save/--no-save and --force, for every command that writes a results file."""
    f = click.option("--force", is_flag=True,
                     help="Replace a read-only --json (or --csv) file.")(f)
    return click.option("--save/--no-save", default=True, show_default=True,
                        help="Save the run under $CPUSPEC_HOME/results (see `cpuspec runs`)."
                        )(f)


def _positive(ctx, param, value):
    if value is not None and value < 1:
        raise click.BadParameter("must be at least 1")
    return value


def _finite(value, name):
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number", param_hint=f"'{name}'")
    return value


def _quant_list(ctx, param, value):
    """Click callback: a comma list of quant types for the sweep's quant axes."""
    if value is None:
        return None
    from .models import DERIVABLE_QUANTS
    quants = [q.strip().upper() for q in value.split(",") if q.strip()]
    bad = [q for q in quants if q not in DERIVABLE_QUANTS]
    if not quants or bad:
        raise click.BadParameter(f"{(bad or [value])[0]!r} is not one of "
                                 f"{', '.join(DERIVABLE_QUANTS)}")
    return list(dict.fromkeys(quants))


def _values(minimum):
    """Click callback: a llama-bench style list/range (1,2,4 / 1-8 / 1-8+2 / 1-16*2)."""
    def parse(ctx, param, value):
        if value is None:
            return None
        from .sweep import SweepError, parse_values
        try:
            return parse_values(value, minimum, max(param.opts, key=len))
        except SweepError as exc:
            raise click.BadParameter(str(exc)) from None
    return parse


POLICIES = ("static", "adaptive", "off")


def _cpu_list(value):
    if value is None:
        return None
    from .hardware import parse_cpu_list
    try:
        cpus = parse_cpu_list(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a CPU list like 0-3,8") from None
    if not cpus:
        raise click.BadParameter("empty CPU list")
    return cpus


def _policy_list(value):
    items = [p.strip() for p in value.split(",") if p.strip()]
    bad = [p for p in items if p not in POLICIES]
    if not items or bad:
        raise click.BadParameter(f"unknown policy {', '.join(bad) or repr(value)}; choose from "
                                 f"{', '.join(POLICIES)}")
    if "off" in items and len(items) > 1:
        raise click.BadParameter("'off' (raw decoding only) cannot be combined with others")
    return [] if items == ["off"] else list(dict.fromkeys(items))


def _task_list(ctx, param, value):
    if value is None:
        return None
    tasks = [t.strip() for t in value.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in ALL_TASKS]
    if not tasks or unknown:
        raise click.BadParameter(f"unknown task {', '.join(unknown) or repr(value)}; "
                                 f"built-in tasks: {', '.join(ALL_TASKS)}")
    return tasks


@main.command()
@click.option("--pair", help="Model pair from models.toml (see `cpuspec models list`).")
@click.option("--target", "target_path", type=click.Path(path_type=Path),
              help="Use this local GGUF as the target instead of the pair's.")
@click.option("--draft", "draft_path", type=click.Path(path_type=Path),
              help="Use this local GGUF as the draft instead of the pair's.")
@click.option("-t", "--threads", callback=_values(1),
              help="Threads for both models; a list or range sweeps [default: the chosen "
                   "cores, else the physical cores in this process's affinity].")
@click.option("--p-cores", default="0", callback=_values(0),
              help="Pin to N P-cores (every core of a non-hybrid CPU counts as a P-core).")
@click.option("--e-cores", default="0", callback=_values(0),
              help="Pin to M E-cores (hybrid Intel CPUs).")
@click.option("-ngl", "--n-gpu-layers", default="0", callback=_values(0),
              help="Target layers offloaded to the GPU (needs a GPU build of "
                   "llama-cpp-python); e.g. 0,16,99.")
@click.option("-ngld", "--draft-gpu-layers", default="0", callback=_values(0),
              help="Draft layers offloaded to the GPU.")
@click.option("--target-quant", callback=_quant_list, metavar="Q4_0,Q8_0,...",
              help="Sweep derived variants of the target in these quants (requantized from "
                   "the pair's target or --target with llama.cpp's quantizer, cached; results "
                   "label them derived).")
@click.option("--draft-quant", callback=_quant_list, metavar="Q4_0,...",
              help="The same for the draft.")
@click.option("--smt", is_flag=True, help="Use every SMT sibling of the chosen cores.")
@click.option("--draft-threads", type=int, callback=_positive,
              help="Threads for the draft model [default: --threads] (llama.cpp's -td).")
@click.option("--draft-cores", callback=lambda c, p, v: _cpu_list(v),
              help="CPU list for the draft phase, e.g. 12-15 (llama.cpp's -Cd).")
@click.option("-k", "--draft-len", "k", default="4", show_default=True, callback=_values(1),
              help="Draft tokens per round; a list or range sweeps.")
@click.option("-n", "--max-tokens", type=int, default=128, show_default=True,
              callback=_positive, help="Tokens generated per prompt.")
@click.option("--tasks", callback=_task_list,
              help=f"Comma list of built-in tasks ({','.join(ALL_TASKS)}) [default: "
                   f"{','.join(DEFAULT_TASKS)}, or none when --prompts is given].")
@click.option("--prompts", "prompts_file", type=click.Path(path_type=Path),
              help='JSONL file of {"task": ..., "prompt": ...} lines to bench as well.')
@click.option("--prompts-per-task", type=int, callback=_positive,
              help="Use only the first N prompts of each task.")
@click.option("-r", "--repetitions", type=int, default=1, show_default=True,
              callback=_positive, help="Times each prompt is run (raw and SD each).")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True,
              help="Uncounted warm-up generations before measuring.")
@click.option("--policy", "policies", default="static,adaptive", show_default=True,
              callback=lambda c, p, v: _policy_list(v),
              help="SD policies run beside raw decoding: static (k every round), adaptive "
                   "(k chosen per round by the cost model, off when it does not pay), or off "
                   "(raw only).")
@click.option("--temperature", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="0: greedy. > 0: sample, and verify with the speculative-sampling rule "
                   "(lossless in distribution; the token-for-token audit is skipped).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for sampling.")
@click.option("--drafter", type=click.Choice(["model", "lookup", "hybrid"]), default="model",
              show_default=True,
              help="Draft with the pair's draft model; by prompt lookup (n-gram match "
                   "against the prompt and output so far; no draft model, c ≈ 0); or hybrid: "
                   "lookup where it finds a match, the draft model where it does not.")
@click.option("--schedule", type=click.Choice(["serial", "parallel"]), default="serial",
              show_default=True,
              help="parallel: the draft, on --draft-cores, drafts the next round while the "
                   "target verifies (static policy, greedy).")
@click.option("--adaptive-scope", type=click.Choice(["task", "prompt"]), default="task",
              show_default=True,
              help="What the adaptive policy carries over: one controller per task type "
                   "across its prompts, or a fresh one per prompt.")
@click.option("--max-noise", type=click.FloatRange(min=0), metavar="CPUS",
              callback=lambda c, p, v: _finite(v, "--max-noise"),
              help="Measure a prompt again (up to 3 times) while other programs used more "
                   "than CPUS CPUs during it, or tasks waited for a CPU over 20% of the time "
                   "(Linux PSI); e.g. 0.1. Disturbed runs are kept under discarded_runs.")
@click.option("--json", "json_path", type=click.Path(path_type=Path),
              help="Write every raw sample, the settings and the environment here.")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path),
              help="Write the summary table as CSV here.")
@_save_options
@click.option("--yes", is_flag=True, help="Run a sweep of more than 200 points, or more than "
                                         "200 prompts × repetitions.")
def bench(pair, target_path, draft_path, threads, p_cores, e_cores, n_gpu_layers,
          draft_gpu_layers, target_quant, draft_quant, smt, draft_threads, draft_cores, k, max_tokens, tasks, prompts_file,
          prompts_per_task, repetitions, warmup, policies, temperature, seed, drafter,
          schedule, adaptive_scope, max_noise, json_path, csv_path, save, force, yes):
    """Measure raw vs speculative decoding per task, and say whether SD pays.

    \b
    Examples:
      cpuspec bench --threads 8
      cpuspec bench --tasks json --draft-len 2 --max-tokens 64
      cpuspec bench --prompts mine.jsonl --json results.json
      cpuspec bench --target big.gguf --draft small.gguf
      cpuspec bench --drafter lookup --tasks grounded
      cpuspec bench --threads 1,2 --draft-len 1,2,4       # one sweep, one table
      cpuspec bench --n-gpu-layers 0,99 --draft-gpu-layers 0,99
      cpuspec bench --target-quant Q4_0,Q8_0 --draft-quant Q4_0 -k 3,7
    """
    from .bench import BenchConfig, run_bench
    from .engine import EngineError
    from .hardware import (HardwareError, check_cpus, current_affinity, default_threads,
                           detect_hardware, select_cpus, split_for_parallel)
    from .report import render_csv
    from .store import write_atomic

    if not math.isfinite(temperature):
        raise click.BadParameter(f"{temperature} is not a finite number",
                                 param_hint="'--temperature'")
    _check_limits(k, max_tokens, threads, draft_threads)
    _check_unused_flags(drafter, policies, adaptive_scope, draft_path, draft_quant,
                        draft_threads, draft_cores, draft_gpu_layers, schedule)
    if schedule == "parallel" and (temperature > 0 or drafter != "model"):
        raise click.UsageError("--schedule parallel needs greedy decoding and the model drafter")
    if drafter == "hybrid" and temperature > 0:
        raise click.UsageError("--drafter hybrid is greedy only (its lookup drafts carry no "
                               "distribution to sample against); drop --temperature or use "
                               "--drafter model or lookup")
    try:
        prompts = load_prompts(tasks, prompts_file, prompts_per_task)
    except PromptsFileError as exc:
        raise click.ClickException(str(exc))
    if len(prompts) * repetitions > MAX_GENERATIONS and not yes:
        raise click.ClickException(
            f"{len(prompts)} prompts × {repetitions} repetition(s) is more than "
            f"{MAX_GENERATIONS} generations per mode (hours of measuring); use "
            "--prompts-per-task to take fewer, or pass --yes to run them all")
    for p in (target_path, draft_path):
        _check_model_file(p)
    from .sweep import Point, expand
    hw = detect_hardware()
    axes = {"target_quant": target_quant or [""], "draft_quant": draft_quant or [""],
            "n_gpu_layers": n_gpu_layers, "draft_gpu_layers": draft_gpu_layers,
            "p_cores": p_cores, "e_cores": e_cores, "threads": threads or [0], "k": k}
    n_points = math.prod(len(v) for v in axes.values())
    if n_points > MAX_SWEEP_POINTS and not yes:
        raise click.ClickException(
            f"this sweep has {n_points} points (more than {MAX_SWEEP_POINTS}); each runs the "
            "whole bench. Narrow the lists, or pass --yes to run it anyway")
    points = expand(axes)
    try:  # every point's core selection is checked before anything runs
        cpus_of = {(p.p_cores, p.e_cores): select_cpus(hw, p.p_cores, p.e_cores, smt)
                   if (p.p_cores or p.e_cores) else None for p in points}
        if draft_cores:
            draft_cores = check_cpus(hw, draft_cores)
        elif schedule == "parallel":
            if len(points) > 1 or hw.hybrid == "not hybrid":
                raise click.UsageError("--schedule parallel needs --draft-cores (the draft's "
                                       "own CPUs); on a hybrid CPU, --p-cores N --e-cores M "
                                       "puts the target on P and the draft on E")
            p0 = points[0]
            target_cpus, draft_cores = split_for_parallel(hw, p0.p_cores, p0.e_cores, smt)
            cpus_of[(p0.p_cores, p0.e_cores)] = target_cpus
            _log(f"parallel schedule: target on P-cores {target_cpus}, draft on E-cores "
                 f"{draft_cores}")
    except HardwareError as exc:
        raise click.ClickException(str(exc))
    sweep = len(points) > 1 or points[0].n_gpu_layers or points[0].draft_gpu_layers or \
        bool(target_quant or draft_quant)
    sink = _prepare_outputs([json_path, csv_path], [prompts_file, target_path, draft_path],
                            force, save, "sweep" if sweep else "bench", hw.cpu_model)

    def point_cfg(base: BenchConfig, p: Point) -> BenchConfig:
        cpus = cpus_of[(p.p_cores, p.e_cores)]
        n_cpus = len(cpus or current_affinity())
        n_threads = p.threads or (len(cpus) if cpus else default_threads())
        if n_threads > n_cpus:
            _log(f"WARNING: --threads {n_threads} is more than the {n_cpus} CPUs this process "
                 f"may use; threads will share cores and decode slower "
                 f"(try --threads {n_cpus})")
        return dataclasses.replace(base, threads=n_threads, k=p.k, cpus=cpus)

    base = BenchConfig(prompts=prompts, threads=1, max_tokens=max_tokens,
                       repetitions=repetitions, warmup=warmup, pair=pair,
                       target_path=target_path, draft_path=draft_path, policies=policies,
                       drafter=drafter, draft_cpus=draft_cores, draft_threads=draft_threads,
                       temperature=temperature, seed=seed, max_noise=max_noise,
                       adaptive_scope=adaptive_scope, schedule=schedule,
                       argv=["cpuspec", *sys.argv[1:]])
    if sweep:
        return _sweep(base, points, point_cfg, sink, csv_path)
    cfg = point_cfg(base, points[0])
    threads, k, cpus = cfg.threads, cfg.k, cfg.cpus
    _log(f"cpuspec bench: {len(prompts)} prompts, k = {k}, {max_tokens} tokens, "
         f"{threads} threads" + (f", pinned to CPUs {','.join(map(str, cpus))}" if cpus else ""))
    with _guarded(sink):
        try:
            results = run_bench(cfg, _log, on_update=sink)
        except (ModelError, EngineError) as exc:
            raise click.ClickException(str(exc))
        sink(results)
    m = results["models"]
    draft_desc = ("prompt-lookup drafter" if drafter == "lookup" else
                  f"draft {m['draft']['file']} ({m['draft']['source']})"
                  + (", hybrid with prompt lookup" if drafter == "hybrid" else ""))
    click.echo(f"\ntarget {m['target']['file']} ({m['target']['source']}), {draft_desc}; "
               f"k = {k}, {threads} threads, {max_tokens} tokens/prompt")
    _print_bench(results)
    try:
        if csv_path:
            write_atomic(csv_path, render_csv(results["summary"]))
            _log(f"wrote {csv_path}")
    except OSError as exc:
        raise click.ClickException(f"cannot write {csv_path}: {exc}")
    for p in sink.paths:
        _log(f"wrote {p}")


# Draft lengths above this probe 33+ batch sizes and leave acceptance statistics empty: no CPU
# (or GPU) pays at such k (llama.cpp's --draft-max defaults to 16).
MAX_K = 32
# More threads than this many per logical CPU only oversubscribes (OpenMP threads spin: 10-20×
# slower) and can stall the whole machine.
MAX_THREADS_PER_CPU = 4
# A sweep bigger than this runs for hours; ask for --yes.
MAX_SWEEP_POINTS = 200
# Prompts × repetitions above this (the built-in suites have 8 per task) run for hours: ask
# for --yes, as for a sweep.
MAX_GENERATIONS = 200


def _check_unused_flags(drafter, policies, adaptive_scope, draft_path, draft_quant,
                        draft_threads, draft_cores, draft_gpu_layers, schedule) -> None:
    """Refuse flags that this combination would silently ignore: the user meant something by
    them, and a run that ignores it measures something else."""
    draft_flags = [name for name, given in (
        ("--draft", draft_path), ("--draft-quant", draft_quant),
        ("--draft-threads", draft_threads), ("--draft-cores", draft_cores),
        ("--draft-gpu-layers", any(draft_gpu_layers or [])),
        ("--schedule parallel", schedule == "parallel")) if given]
    if drafter == "lookup" and draft_flags:
        raise click.UsageError(f"{', '.join(draft_flags)} set the draft model, which "
                               "--drafter lookup does not use; drop them or use --drafter "
                               "model or hybrid")
    # (--draft alone with --policy off is fine: the pair's draft is named either way)
    tuning = [f for f in draft_flags if f != "--draft"]
    if not policies and (tuning or drafter != "model"):
        what = tuning + (["--drafter " + drafter] if drafter != "model" else [])
        raise click.UsageError(f"--policy off runs raw decoding only, so {', '.join(what)} "
                               "would do nothing; drop them or add a policy")
    if adaptive_scope != "task" and "adaptive" not in policies:
        raise click.UsageError(f"--adaptive-scope {adaptive_scope} applies to the adaptive "
                               "policy, which --policy does not include")
    if draft_threads and draft_cores and draft_threads > len(draft_cores):
        raise click.UsageError(f"--draft-threads {draft_threads} is more than the "
                               f"{len(draft_cores)} CPU(s) in --draft-cores: the threads "
                               "would queue for them; give as many threads as CPUs or fewer")


def _check_limits(ks, max_tokens, threads, draft_threads) -> None:
    """Refuse values that would run for hours or stall the machine, naming the limit and why."""
    for k in ks:
        if k > MAX_K:
            raise click.BadParameter(f"{k} is more than {MAX_K}: no machine gains from so "
                                     "long a draft", param_hint="'--draft-len'")
        if k >= max_tokens:
            raise click.BadParameter(f"{k} must be below --max-tokens ({max_tokens}): a round "
                                     "emits up to k + 1 tokens", param_hint="'--draft-len'")
    limit = MAX_THREADS_PER_CPU * (os.cpu_count() or 1)
    for t in list(threads or []) + ([draft_threads] if draft_threads else []):
        if t > limit:
            raise click.BadParameter(
                f"{t} is more than {limit} ({MAX_THREADS_PER_CPU} per logical CPU of this "
                "machine): the threads would only queue for the CPUs",
                param_hint="'--threads'")


def _resolve_model(reg, name: str):
    """A GGUF file given by path (hashed, used as is), or a registered model by name (fetched,
    verified, or derived)."""
    from .models import local_model
    p = Path(name)
    if p.suffix == ".gguf" or p.exists():
        _check_model_file(p)
        return local_model(p)
    return fetch_model(reg.model(name), _log)


def _check_model_name(reg, name: str) -> None:
    """What _resolve_model would refuse, found before anything is fetched or derived: a GGUF
    path that is not a file, or a name that models.toml does not know."""
    p = Path(name)
    if p.suffix == ".gguf" or p.exists():
        _check_model_file(p)
    elif name not in reg.models:
        raise click.ClickException(f"unknown model {name!r}; see `cpuspec models list`, or "
                                   "give a .gguf file")


def _check_model_file(p: Path | None) -> None:
    if p is None:
        return
    if p.is_dir():
        raise click.ClickException(f"model file {p} is a folder; pass the .gguf file in it")
    if not p.is_file():
        raise click.ClickException(f"model file not found: {p}")


def _prepare_outputs(outputs: list[Path | None], inputs: list[Path | None], force: bool,
                     save: bool, kind: str, cpu_model: str):
    """Check every output before any work, create the saved run's file, and return the sink
    that writes every JSON destination (the saved run first)."""
    from .store import OutputError, ResultsSink, check_outputs, new_run_path
    try:
        check_outputs(outputs, inputs, force)
        saved = [new_run_path(kind, cpu_model)] if save else []
    except OutputError as exc:
        raise click.ClickException(str(exc))
    if saved:
        _log(f"saving this run as {saved[0]} (--no-save to skip)")
    json_outputs = [p for p in outputs[:1] if p is not None]
    return ResultsSink(saved + json_outputs, reserved=saved)


@contextlib.contextmanager
def _guarded(sink=None):
    """Ctrl-C and SIGTERM end the command within a decode (see interrupt.py) with what it
    finished: the last results written by the sink stay (marked "complete": false), the
    message says where, and the exit code is 130. However the command ends, a saved run that
    never got any results is removed rather than left empty."""
    from . import interrupt
    try:
        with interrupt.handled():
            yield
    except KeyboardInterrupt:
        if sink is not None:
            sink.discard_unwritten()
        click.echo(f"interrupted: {sink.kept() if sink is not None else 'nothing was saved'}",
                   err=True)
        sys.exit(130)
    finally:
        if sink is not None:
            sink.discard_unwritten()


def _print_bench(results: dict, fmt: str = "text") -> None:
    """The bench's report: table (end-to-end headline, decode-only detail), details, audit,
    advice, noise warning and the build it ran on. `cpuspec bench` and `cpuspec report` share
    it."""
    from .report import (advise, noise_report, render_advice, render_audit, render_details,
                         render_noise, render_table, summarize)
    s = summarize(results)
    k = results["settings"]["k"]
    click.echo("Windows: end-to-end (e2e) = both prefills + every round, the headline; "
               "decode-only = after the prefills. [95% CI] = bootstrap over prompts.")
    click.echo(render_table(s, "github" if fmt == "markdown" else "simple"))
    click.echo("")
    click.echo(render_details(s, k))
    diverged = render_audit(results.get("audit", []))
    if diverged:
        click.echo("Outputs that differ from target-only decoding (batched verify logits differ "
                   "slightly from one-token decoding; flips happen at near-ties):")
        click.echo(diverged)
    if results.get("cost_probe") and any(r["mode"] == "static" for r in results["runs"]):
        click.echo("\nAdvice from the cost model (every k up to the one measured; decode "
                   "window):")
        click.echo(render_advice(advise(results), k))
    q = results.get("quality")
    if q:
        click.echo(f"\nQuality beside the speed: the target's perplexity on the built-in "
                   f"{q['text_tokens']}-token text is {q['target_perplexity']:.2f} (compare "
                   "quants of one model with `cpuspec quality`, which adds agreement with a "
                   "reference).")
    info = results.get("meta", {}).get("llama_system_info")
    if info:
        click.echo(f"\nllama.cpp: {info}")
    warning = render_noise(noise_report(results["runs"]))
    if warning:
        click.echo("")
        click.echo(warning)


def _sweep(base, points, point_cfg, sink, csv_path):
    """Run a sweep: a row per point as soon as it finishes (and the JSON rewritten with every
    finished point, so an interrupted sweep keeps them), then one table of what varies."""
    from .bench import environment
    from .engine import EngineError, supports_gpu_offload
    from .report import SCHEMA_VERSION
    from .store import write_atomic
    from .sweep import GPU_SKIP_REASON, headline, render_sweep, run_sweep, sweep_row, varying
    axes = varying(points) or ["threads"]
    gpu_ok = supports_gpu_offload()
    doc = {"schema_version": SCHEMA_VERSION, "kind": "sweep", "complete": False, "axes": axes,
           "meta": environment(base.threads), "settings": {"argv": base.argv},
           "gpu_offload_supported": gpu_ok, "rows": [], "points": []}
    _log(f"cpuspec bench: sweep of {len(points)} points over {', '.join(axes)}")
    sink(doc)

    def on_point(point, results, skip):
        row = sweep_row(point, results, skip)
        doc["rows"].append(row)
        doc["points"].append(results or {"point": point.as_dict(), "skipped": skip})
        if skip:
            _log(f"point {point.label()}: {skip}")
        else:
            click.echo(f"point {', '.join(f'{a}={row[a]}' for a in axes)}: raw "
                       f"{row['raw_tok_s']:.1f} t/s, SD {row['sd_tok_s']:.1f} t/s "
                       f"({row['sd_speedup']:.2f}× end-to-end), a {row['a'] or 0:.2f}, "
                       f"SD {row['verdict']}")
        sink(doc)

    with _guarded(sink):
        try:
            run_sweep(base, points, point_cfg, on_point, gpu_ok, _log)
        except (ModelError, EngineError) as exc:
            raise click.ClickException(str(exc))
    doc["complete"] = True
    sink(doc)
    click.echo("")
    click.echo(render_sweep(doc["rows"], axes))
    if any("skipped" in r for r in doc["rows"]):
        click.echo(f"\nGPU points {GPU_SKIP_REASON}. Install a GPU build of llama-cpp-python "
                   "(see the README: CUDA, Metal or Vulkan) to measure them.")
    line = headline(doc["rows"])
    if line:
        click.echo(line)
    if csv_path:
        from .report import csv_text
        fields = list(dict.fromkeys(k for r in doc["rows"] for k in r))
        write_atomic(csv_path, csv_text(fields, [[r.get(f) for f in fields]
                                                 for r in doc["rows"]]))
    for p in sink.paths:
        _log(f"wrote {p}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def hw(as_json):
    """Show the CPU: cores, SMT, affinity, P-/E-cores, memory, governor and turbo.

    \b
    Examples:
      cpuspec hw
      taskset -c 0-3 cpuspec hw --json
    """
    from .hardware import detect_hardware
    info = detect_hardware()
    if as_json:
        click.echo(json.dumps(info.to_dict(), indent=1))
        return
    kinds = "; ".join(f"{k}: {','.join(map(str, v))}" for k, v in info.cores_by_kind.items())
    mem = f"{info.memory_total_bytes / 2**30:.1f} GiB" if info.memory_total_bytes else "?"
    for label, value in [
            ("CPU", info.cpu_model), ("logical CPUs", info.logical_cpus),
            ("physical cores", info.physical_cores),
            ("SMT", f"{info.smt_siblings} threads per core"),
            ("affinity", f"{','.join(map(str, info.affinity))} "
                         f"({info.physical_cores_in_affinity} physical cores)"),
            ("hybrid", info.hybrid), ("cores by kind", kinds), ("memory", mem),
            ("governor", info.governor or "not readable"),
            ("turbo", info.turbo or "not readable")]:
        click.echo(f"{label:>15}: {value}")


@main.command()
@click.option("--pair", help="Model pair from models.toml.")
@click.option("--target", "target_path", type=click.Path(path_type=Path))
@click.option("--draft", "draft_path", type=click.Path(path_type=Path))
@click.option("--p-cores", type=click.IntRange(min=0), default=0,
              help="Use N P-cores [default: one CPU per physical core in the affinity].")
@click.option("--e-cores", type=click.IntRange(min=0), default=0, help="Use M E-cores.")
@click.option("--smt", is_flag=True, help="Use every SMT sibling of the chosen cores.")
@click.option("-t", "--threads", type=int, callback=_positive,
              help="llama.cpp threads, on the first chosen CPUs; background streams use the "
                   "rest [default: all chosen CPUs but one].")
@click.option("-k", "--draft-len", "k", type=int, default=4, show_default=True,
              callback=_positive, help="Verify batch is k + 1 tokens.")
@click.option("-n", "--n-tokens", type=int, default=32, show_default=True, callback=_positive)
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write JSON here.")
@_save_options
def contention(pair, target_path, draft_path, p_cores, e_cores, smt, threads, k, n_tokens,
               json_path, save, force):
    """Memory bandwidth, rooflines and contention: why the draft is not free on a CPU.

    \b
    Examples:
      cpuspec contention
      cpuspec contention --p-cores 4 --threads 2 --json contention.json
    """
    from .bench import BenchConfig, resolve_models
    from .contention import ContentionConfig, render_contention, run_contention
    from .engine import EngineError
    from .hardware import HardwareError, detect_hardware, select_cpus
    hw = detect_hardware()
    try:
        if p_cores or e_cores:
            cpus = select_cpus(hw, p_cores, e_cores, smt)
        else:
            cpus = select_cpus(hw, p_cores=hw.physical_cores_in_affinity, smt=smt) \
                if hw.hybrid == "not hybrid" else sorted(hw.affinity)
    except HardwareError as exc:
        raise click.ClickException(str(exc))
    threads = threads or max(1, len(cpus) - 1)
    if threads > len(cpus):
        raise click.ClickException(f"--threads {threads} is more than the {len(cpus)} chosen "
                                   "CPUs")
    for p in (target_path, draft_path):
        _check_model_file(p)
    sink = _prepare_outputs([json_path], [target_path, draft_path], force, save,
                            "contention", hw.cpu_model)
    with _guarded(sink):
        try:
            target_f, draft_f, _ = resolve_models(
                BenchConfig(prompts=[], threads=threads, pair=pair, target_path=target_path,
                            draft_path=draft_path), _log)
            res = run_contention(ContentionConfig(target_f.path, draft_f.path, cpus, threads,
                                                  k, n_tokens), _log)
        except (ModelError, EngineError) as exc:
            raise click.ClickException(str(exc))
        res["hardware"] = hw.to_dict()
        res["meta"] = {"hardware": hw.to_dict(), "threads": threads}
        sink(res)
    click.echo(render_contention(res))
    for p in sink.paths:
        _log(f"wrote {p}")


@main.command()
@click.option("--pair", help="Model pair from models.toml.")
@click.option("--target", "target_path", type=click.Path(path_type=Path))
@click.option("--draft", "draft_path", type=click.Path(path_type=Path))
@click.option("-t", "--threads", type=int, callback=_positive,
              help="Threads [default: the physical cores in this process's affinity].")
@click.option("--max-n", type=click.IntRange(2, 33), default=16, show_default=True,
              help="Measure target decodes of 1..N tokens (all N logit rows).")
@click.option("--reps", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Repetitions per batch size (median taken).")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write JSON here.")
@_save_options
def costs(pair, target_path, draft_path, threads, max_n, reps, json_path, save, force):
    """The verify-cost curve V(n)/V(1) and the draft's cost: in seconds, no prompts to run.

    On a GPU a verify of n tokens costs about one decode; on a CPU it grows with n, by steps
    that depend on the quant types (llama.cpp multiplies repacked Q4_0/Q4_K/IQ4_NL weights in
    blocks of 4 rows). β(k) = V(k + 1)/V(1) − 1, c = draft decode ÷ target decode, and the
    best speedup SD could reach at each k if every draft were accepted.

    \b
    Examples:
      cpuspec costs
      cpuspec costs --pair qwen2.5-coder-1.5b-q4_0 --max-n 9
    """
    from .bench import BenchConfig, describe_costs, run_costs
    from .costs import render_cost_curve
    from .engine import EngineError
    from .hardware import default_threads, detect_hardware
    threads = threads or default_threads()
    _check_limits([1], 2, [threads], None)
    for p in (target_path, draft_path):
        _check_model_file(p)
    hw = detect_hardware()
    sink = _prepare_outputs([json_path], [target_path, draft_path], force, save, "costs",
                            hw.cpu_model)
    cfg = BenchConfig(prompts=[], threads=threads, pair=pair, target_path=target_path,
                      draft_path=draft_path, k=max_n - 1, argv=["cpuspec", *sys.argv[1:]])
    with _guarded(sink):
        try:
            res = run_costs(cfg, reps, _log)
        except (ModelError, EngineError) as exc:
            raise click.ClickException(str(exc))
        sink(res)
    click.echo(describe_costs(res))
    click.echo(render_cost_curve(res["cost_probe"]))
    click.echo(f"\nllama.cpp: {res['meta']['llama_system_info']}")
    for p in sink.paths:
        _log(f"wrote {p}")


@main.command()
@click.option("--pair", help="Model pair from models.toml [default: the default pair].")
@click.option("--target", help="Target: a registered name or a GGUF file [default: the pair's].")
@click.option("--draft", help="Draft: a registered name or a GGUF file [default: the pair's].")
@click.option("-k", "--draft-len", "k", type=click.IntRange(1, 32), default=4, show_default=True,
              help="Draft tokens per round (llama.cpp's --spec-draft-n-max).")
@click.option("--drafter", type=click.Choice(["model", "hybrid", "lookup"]), default="model",
              show_default=True, help="As for `cpuspec bench`.")
@click.option("--tasks", callback=_task_list, default="json,code", show_default=True,
              help="Comma list of built-in tasks.")
@click.option("--prompts-per-task", type=click.IntRange(1, 8), default=5, show_default=True,
              help="Prompts per task (5 or more for an interval over all of them).")
@click.option("-n", "--max-tokens", type=click.IntRange(2, 1024), default=64, show_default=True,
              help="Tokens generated per prompt.")
@click.option("-t", "--threads", type=int, callback=_positive,
              help="Threads for every path [default: the physical cores].")
@click.option("--paths", "path_list", default="cpuspec,llama-cpp-python,llama.cpp",
              show_default=True, help="Comma list of cpuspec, cpuspec+redecode, "
              "llama-cpp-python, llama.cpp.")
@click.option("--llama-bin", type=click.Path(path_type=Path, file_okay=False),
              help="Folder with llama.cpp's llama-speculative-simple and llama-completion "
                   "[default: $CPUSPEC_LLAMA_BIN, cpuspec's build, then PATH].")
@click.option("--build-native", is_flag=True, help="Build llama.cpp's programs from the "
              "installed llama-cpp-python's sources first (once, ~15 min on 2 cores).")
@click.option("--native-rounds", is_flag=True, help="Run llama.cpp's SD once more per prompt, "
              "untimed, logging each round's accepted/drafted.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write JSON here.")
@_save_options
def paths(pair, target, draft, k, drafter, tasks, prompts_per_task, max_tokens, threads,
          path_list, llama_bin, build_native, native_rounds, json_path, save, force):
    """Does the speedup reach your stack? One configuration through cpuspec's loop,
    llama-cpp-python (with cpuspec.DraftModel) and llama.cpp's own programs, each SD ×raw.

    \b
    Examples:
      cpuspec paths --target T.gguf --draft D.gguf -k 7
      cpuspec paths --paths cpuspec,cpuspec+redecode,llama.cpp --build-native
    """
    from . import native, paths as core
    from .bench import environment
    from .engine import EngineError
    from .hardware import default_threads, detect_hardware
    from .report import SCHEMA_VERSION
    chosen = [p.strip() for p in path_list.split(",") if p.strip()]
    bad = [p for p in chosen if p not in core.ALL_PATHS]
    if not chosen or bad:
        raise click.BadParameter(f"unknown path {', '.join(bad) or repr(path_list)}; choose "
                                 f"from {', '.join(core.ALL_PATHS)}", param_hint="'--paths'")
    if core.REDECODE in chosen and drafter != "model":
        raise click.BadParameter(f"{core.REDECODE} imitates llama.cpp's draft model: it needs "
                                 "--drafter model", param_hint="'--paths'")
    threads = threads or default_threads()
    _check_limits([k], max_tokens, [threads], None)
    reg = _registry()
    names = [target or reg.pair(pair).target] + ([] if drafter == "lookup" else
                                                 [draft or reg.pair(pair).draft])
    for name in names:
        _check_model_name(reg, name)
    bin_dir = None
    if core.LLAMA_CPP in chosen:
        try:
            bin_dir = native.build(_log) if build_native else native.find_bin_dir(llama_bin)
        except native.NativeError as exc:
            raise click.ClickException(str(exc))
        if bin_dir is None:
            _log("llama.cpp: no llama-speculative-simple and llama-completion found (give "
                 "--llama-bin DIR, or --build-native); measuring without the llama.cpp path")
            chosen.remove(core.LLAMA_CPP)
    sink = _prepare_outputs([json_path], [Path(n) for n in names if n.endswith(".gguf")],
                            force, save, "paths", detect_hardware().cpu_model)
    with _guarded(sink):
        try:
            files = [_resolve_model(reg, n).path for n in names]
            cfg = core.PathsConfig(files[0], files[1] if len(files) > 1 else None, k, drafter,
                                   builtin_prompts(tasks, prompts_per_task), max_tokens,
                                   threads, tuple(chosen), bin_dir, native_rounds)
            doc = core.measure_paths(
                cfg, environment(threads), _log,
                lambda d: sink({"schema_version": SCHEMA_VERSION, **d}))
        except (ModelError, EngineError, native.NativeError, ValueError) as exc:
            raise click.ClickException(str(exc))
        sink({"schema_version": SCHEMA_VERSION, **doc})
    click.echo(core.render_paths(doc))
    for p in sink.paths:
        _log(f"wrote {p}")


@main.command()
@click.argument("models_", metavar="MODEL...", nargs=-1, required=True)
@click.option("--reference", help="Model (name or file) whose greedy output is the yardstick "
                                  "[default: the default pair's target].")
@click.option("-t", "--threads", type=int, callback=_positive)
@click.option("-n", "--max-tokens", type=click.IntRange(1, 512), default=64, show_default=True)
@click.option("--prompts-per-task", type=click.IntRange(1, 8), default=2, show_default=True)
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write JSON here.")
@_save_options
def quality(models_, reference, threads, max_tokens, prompts_per_task, json_path, save, force):
    """A quality proxy for quants: perplexity and top-1 agreement with a reference.

    MODEL is a registered name or a GGUF file. Perplexity is measured on a fixed built-in text
    (prose, code, JSON); agreement is the share of the reference's greedy tokens on the
    built-in json, code and story prompts that the model's argmax reproduces.

    \b
    Examples:
      cpuspec quality qwen2.5-coder-1.5b-q4km qwen2.5-coder-1.5b-q4_0
      cpuspec quality my-q3.gguf --reference my-f16.gguf
    """
    from .bench import environment
    from .engine import EngineError
    from .hardware import default_threads, detect_hardware
    from .quality import render_quality, run_quality
    from .report import SCHEMA_VERSION
    threads = threads or default_threads()
    _check_limits([1], 2, [threads], None)
    reg = _registry()
    for name in [*models_, reference or reg.pair(None).target]:
        _check_model_name(reg, name)
    files = [Path(m) for m in models_ if Path(m).suffix == ".gguf"]
    sink = _prepare_outputs([json_path], files, force, save, "quality",
                            detect_hardware().cpu_model)
    with _guarded(sink):
        try:
            ref = _resolve_model(reg, reference or reg.pair(None).target)
            cands = [_resolve_model(reg, m) for m in models_]
            res = run_quality(cands, ref, builtin_prompts(DEFAULT_TASKS, prompts_per_task),
                              max_tokens, threads, _log)
        except (ModelError, EngineError) as exc:
            raise click.ClickException(str(exc))
        res = {"schema_version": SCHEMA_VERSION, "kind": "quality", "complete": True,
               "meta": environment(threads), "settings": {"threads": threads,
                                                          "argv": ["cpuspec", *sys.argv[1:]]},
               **res}
        sink(res)
    click.echo(render_quality(res))
    for p in sink.paths:
        _log(f"wrote {p}")


@main.command()
@click.option("--targets", default="qwen2.5-coder-1.5b-q4km,qwen2.5-coder-1.5b-q4_0,"
              "qwen2.5-coder-1.5b-q8_0",
              show_default=True, help="Comma list of target models (names or GGUF files); the "
                                      "first is the reference raw speed.")
@click.option("--drafts", default="qwen2.5-coder-0.5b-q4_0,lookup,hybrid:qwen2.5-coder-0.5b-q4_0",
              show_default=True,
              help="Comma list of draft models (names or GGUF files); 'lookup' for the "
                   "prompt-lookup drafter; 'hybrid:MODEL' for lookup backed by MODEL.")
@click.option("--k-max", type=click.IntRange(1, 16), default=8, show_default=True,
              help="Measure once at this k; predict every k up to it.")
@click.option("--tasks", callback=_task_list,
              help="Built-in tasks [default: json,code,story,grounded].")
@click.option("--prompts", "prompts_file", type=click.Path(path_type=Path),
              help="JSONL prompts file (as for bench).")
@click.option("--prompts-per-task", type=click.IntRange(2, 64), default=8, show_default=True,
              help="Prompts 1, 4, 7, ... of each task choose, the others confirm: 8 gives 3 "
                   "and 5, the fewest a 95 % interval is printed from.")
@click.option("-n", "--max-tokens", type=click.IntRange(2, 4096), default=64,
              show_default=True)
@click.option("-t", "--threads", type=int, callback=_positive)
@click.option("--budget", type=click.FloatRange(min=1), metavar="MINUTES",
              callback=lambda c, p, v: _finite(v, "--budget"),
              help="Stay within this many minutes: later steps are skipped, and said so.")
@click.option("--no-confirm", is_flag=True, help="Predict only; do not confirm by a run.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write JSON here.")
@_save_options
def tune(targets, drafts, k_max, tasks, prompts_file, prompts_per_task, max_tokens, threads,
         budget, no_confirm, json_path, save, force):
    """Find where SD pays: targets × drafters × k, predicted by the cost model, then confirmed.

    Each candidate's cost curve comes first (seconds): candidates whose curve cannot pay even
    with every draft accepted are skipped. A short pilot per drafter (48 tokens on the first
    choosing prompt of each task) gives an acceptance that, through each candidate's own
    curve, ranks the rest: they run most promising first. One static run
    at --k-max per candidate on a third of the prompts gives the costs (V(n), the draft's
    decode) and the acceptance that predict every k. Per task it answers twice: the fastest
    configuration against raw decoding on the first target (raw decoding on another target
    included), and where SD pays most against raw decoding on its own target. Every answer is
    then measured on the other prompts (SD: raw vs SD with the lossless audit; the first
    target's raw speed on the same prompts), with 95 % intervals from 5 prompts on. Prints the
    exact `cpuspec bench` command for each, and when nothing pays, which of a and 1 + α + β
    is short.

    \b
    Examples:
      cpuspec tune --budget 20
      cpuspec tune --targets a.gguf,b.gguf --drafts c.gguf --tasks json --k-max 4
    """
    from .engine import EngineError
    from .hardware import default_threads, detect_hardware
    from .tune import Candidate, render_tune, run_tune
    from .bench import BenchConfig, environment
    from .report import SCHEMA_VERSION
    threads = threads or default_threads()
    _check_limits([k_max], max_tokens + 1, [threads], None)
    try:
        prompts = load_prompts(tasks, prompts_file, prompts_per_task,
                               [*DEFAULT_TASKS, "grounded"])
    except PromptsFileError as exc:
        raise click.ClickException(str(exc))
    reg = _registry()

    names = {"targets": [x.strip() for x in targets.split(",") if x.strip()],
             "drafts": [x.strip() for x in drafts.split(",") if x.strip()]}
    for option, given in (("--targets", targets), ("--drafts", drafts)):
        if not names[option.removeprefix("--")]:
            raise click.BadParameter(f"{given!r} names no model; e.g. "
                                     + ("qwen2.5-coder-1.5b-q4_0" if option == "--targets"
                                        else "qwen2.5-coder-0.5b-q4_0,lookup"),
                                     param_hint=f"'{option}'")
    for n in names["drafts"]:
        if n.startswith("hybrid:") and not n.removeprefix("hybrid:").strip():
            raise click.BadParameter(f"{n!r} names no draft model; e.g. "
                                     "hybrid:qwen2.5-coder-0.5b-q4_0", param_hint="'--drafts'")
    for n in names["targets"] + [n.removeprefix("hybrid:") for n in names["drafts"]
                                 if n != "lookup"]:
        _check_model_name(reg, n)    # every name, before minutes of fetching or deriving
    files = [Path(x.removeprefix("hybrid:")) for v in names.values() for x in v
             if x.endswith(".gguf")]
    sink = _prepare_outputs([json_path], files + [prompts_file], force, save, "tune",
                            detect_hardware().cpu_model)
    cfg = BenchConfig(prompts=prompts, threads=threads, max_tokens=max_tokens,
                      argv=["cpuspec", *sys.argv[1:]])
    with _guarded(sink):
        try:
            tgt = [_resolve_model(reg, n) for n in names["targets"]]
            drf = [(None, False) if n == "lookup" else
                   (_resolve_model(reg, n.removeprefix("hybrid:")), n.startswith("hybrid:"))
                   for n in names["drafts"]]
            cands = [Candidate(t, d, hybrid) for t in tgt for d, hybrid in drf]
            head = {"schema_version": SCHEMA_VERSION, "meta": environment(threads),
                    "settings": {"threads": threads, "max_tokens": max_tokens, "k_max": k_max,
                                 "argv": cfg.argv}}
            doc = run_tune(cfg, cands, _log, k_max, not no_confirm,
                           lambda d: sink({**head, **d, "complete": False}),
                           budget * 60 if budget else None)
        except (ModelError, EngineError, ValueError) as exc:
            raise click.ClickException(str(exc))
        doc = {**head, **doc}
        sink(doc)
    click.echo(render_tune(doc))
    for p in sink.paths:
        _log(f"wrote {p}")


@main.group()
def models():
    """List, fetch and locate the registered GGUF models.

    \b
    Examples:
      cpuspec models list
      cpuspec models fetch qwen2.5-coder-1.5b
      cpuspec models path qwen2.5-coder-0.5b-q4km
    """


def _registry():
    try:
        return load_registry()
    except ModelError as exc:
        raise click.ClickException(str(exc))


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def models_list(as_json):
    """List registered models and pairs, and whether each is cached and verified."""
    reg = _registry()
    from .models import derived_cache_path
    rows = []
    for spec in reg.models.values():
        derived = derived_cache_path(spec, reg)
        derived = derived if derived and derived.is_file() and not is_cached(spec) else None
        rows.append({"name": spec.name, "repo": spec.repo, "file": spec.file,
                     "size_bytes": spec.size_bytes, "sha256": spec.sha256,
                     "mirror": bool(spec.mirror), "cached": is_cached(spec),
                     "derived": derived is not None,
                     "path": str(derived or cached_path(spec))})
    pairs = [{"name": p.name, "target": p.target, "draft": p.draft, "note": p.note,
              "default": p.name == reg.default_pair} for p in reg.pairs.values()]
    if as_json:
        click.echo(json.dumps({"models": rows, "pairs": pairs}, indent=1))
        return
    from tabulate import tabulate
    click.echo(tabulate([[r["name"], r["repo"] + "/" + r["file"],
                          f"{r['size_bytes'] / 1e6:.0f} MB" if r["size_bytes"] else "?",
                          "pinned" if r["sha256"] else "unpinned",
                          "yes" if r["mirror"] else "no",
                          "yes" if r["cached"] else "derived" if r["derived"] else "no"]
                         for r in rows],
                        headers=["model", "hub file", "size", "sha256", "PyPI mirror",
                                 "cached"]))
    click.echo("")
    click.echo(tabulate([[p["name"] + (" (default)" if p["default"] else ""), p["target"],
                          p["draft"], p["note"]] for p in pairs],
                        headers=["pair", "target", "draft", "note"]))


def _names_to_specs(reg, names):
    specs = []
    for name in names or [reg.default_pair]:
        if name in reg.pairs:
            specs += [reg.model(reg.pairs[name].target), reg.model(reg.pairs[name].draft)]
        elif name in reg.models:
            specs.append(reg.models[name])
        else:
            raise click.ClickException(f"unknown model or pair {name!r}; see `cpuspec models "
                                       "list`")
    return specs


@models.command("fetch")
@click.argument("names", nargs=-1)
def models_fetch(names):
    """Fetch models or pairs (default: the default pair) into the cache, verified by sha256."""
    reg = _registry()
    for spec in _names_to_specs(reg, names):
        with _guarded():
            try:
                got = fetch_model(spec, _log)
            except ModelError as exc:
                raise click.ClickException(str(exc))
        click.echo(f"{spec.name}: {got.path} ({got.source}, "
                   f"{'verified' if got.verified else 'UNVERIFIED'})")


@models.command("verify")
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def models_verify(names, as_json):
    """Hash cached models (default: every registered one) and compare with their pins.

    \b
    Examples:
      cpuspec models verify
      cpuspec models verify qwen2.5-coder-1.5b
    """
    from .models import verify_cached
    reg = _registry()
    specs = _names_to_specs(reg, names) if names else list(reg.models.values())
    rows = [verify_cached(spec) for spec in specs]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
    else:
        for r in rows:
            click.echo(f"{r['name']}: {r['status']}" + (f" ({r['path']})" if r["status"] !=
                                                         "not cached" else ""))
    bad = [r["name"] for r in rows if r["status"] == "MISMATCH"]
    if bad:
        raise click.ClickException(f"{', '.join(bad)}: the cached file differs from its sha256 "
                                   "pin; the next run fetches it again")


@models.command("derive")
@click.argument("name")
@click.option("--quant", required=True, metavar="TYPE",
              help="llama.cpp quant type: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K_S, "
                   "Q4_K_M, Q5_K_S, Q5_K_M, Q6_K.")
@click.option("--force", is_flag=True,
              help="Write the pure variant even when the source is already of that quant.")
def models_derive(name, quant, force):
    """Requantize a model (registered name or GGUF file) to another quant type, cached.

    What `llama-quantize --allow-requantize --pure IN OUT TYPE` writes: every tensor in TYPE,
    the tied output too. A requantized K-quant has the official file's kernels and speed, not
    exactly its quality; results record it as derived, with its parent's sha256.

    \b
    Examples:
      cpuspec models derive qwen2.5-coder-1.5b-q4km --quant Q4_0
      cpuspec bench --target "$(cpuspec models derive my.gguf --quant Q4_0)" --draft ...
    """
    from .models import DERIVABLE_QUANTS, derive_model
    quant = quant.upper()
    if quant not in DERIVABLE_QUANTS:
        raise click.BadParameter(f"{quant} is not one of {', '.join(DERIVABLE_QUANTS)}",
                                 param_hint="'--quant'")
    from .engine import model_file_type
    reg = _registry()
    _check_model_name(reg, name)
    with _guarded():
        try:
            parent = _resolve_model(reg, name)
            if not force and model_file_type(parent.path) == quant:
                raise click.ClickException(
                    f"{parent.path.name} is already {quant} (its general.file_type); a pure "
                    f"requantization would write every tensor in {quant}, a different file "
                    "from this one. Use the file as it is, or pass --force to write the pure "
                    "variant anyway")
            got = derive_model(parent, quant, _log)
        except ModelError as exc:
            raise click.ClickException(str(exc))
    _log(f"{got.spec.name}: derived from {parent.path.name} (sha256 {parent.sha256[:12]}…); "
         f"{got.derived['note']}")
    click.echo(str(got.path))


@models.command("path")
@click.argument("name")
def models_path(name):
    """Print the cached file of a model; nothing is fetched or built (`cpuspec models fetch
    NAME` does that).

    \b
    Examples:
      cpuspec models path qwen2.5-coder-1.5b-q4km
      cpuspec bench --target "$(cpuspec models path qwen2.5-coder-1.5b-q4_0)" ...
    """
    from .models import cached_model
    reg = _registry()
    try:
        got = cached_model(reg, reg.model(name), _log)
    except ModelError as exc:
        raise click.ClickException(str(exc))
    if got is None:
        raise click.ClickException(f"{name} is not in the cache (or its cached file no longer "
                                   f"matches its pin); `cpuspec models fetch {name}` fetches "
                                   "or derives it")
    click.echo(str(got))


def _run_names(paths: list[Path]) -> list[str]:
    """Short names for runs: file stems, with the folder where two stems are the same."""
    stems = [p.stem for p in paths]
    return [f"{p.parent.name}/{p.stem}" if stems.count(p.stem) > 1 else p.stem for p in paths]


def _load_results(ref: str, bench_only: bool = True) -> tuple[dict, Path]:
    """A results file or a saved run's id, read and (for bench files) validated."""
    from .report import ResultsError, read_json, validate_bench
    from .store import OutputError, resolve_run
    try:
        path = resolve_run(ref)
        results = read_json(path)
        if bench_only or results.get("kind") == "bench":
            validate_bench(results, str(path))
    except (OutputError, ResultsError) as exc:
        raise click.ClickException(str(exc))
    return results, path


@main.command()
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def advise(run, as_json):
    """Per task: turn SD on (with the best k) or off (with the acceptance it would need).

    RUN is a results file of `cpuspec bench` (static policy) or a saved run's id (`cpuspec
    runs`). The per-position acceptance measured at k, and the bench's probe of the draft's cost
    and of the target's decode time for 1..k+1 tokens, give the predicted speedup for every k up
    to the measured one.

    \b
    Examples:
      cpuspec bench --json run.json && cpuspec advise run.json
      cpuspec advise 20261130T0541 --json
    """
    from .report import ResultsError, advise as advise_results, render_advice
    results, path = _load_results(run)
    try:
        advice = advise_results(results)
    except ResultsError as exc:
        raise click.ClickException(str(exc))
    if not advice:
        raise click.ClickException(f"{path}: no static SD runs to advise from (run "
                                   "the bench with --policy static)")
    if as_json:
        click.echo(json.dumps(advice, indent=1))
        return
    click.echo(render_advice(advice, results["settings"]["k"]))
    models, settings = results.get("models") or {}, results["settings"]
    target = (models.get("target") or {}).get("path")
    draft = (models.get("draft") or {}).get("path")
    on = {task: a["k_best"] for task, a in advice.items() if a["verdict"] == "ON"}
    if target and on:
        from .native import how_to_run
        for k_best in sorted(set(on.values())):
            tasks = ", ".join(t for t, k in on.items() if k == k_best)
            click.echo(f"\nTo run it ({tasks}; k = {k_best}) outside cpuspec:")
            click.echo("\n".join(how_to_run(target, draft, k_best,
                                             settings.get("drafter", "model"),
                                             settings["threads"], indent="  ",
                                             meta=results.get("meta"))))


@main.command()
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "csv", "json"]),
              default="text", show_default=True)
@click.option("--trace", is_flag=True,
              help="Also print, per adaptive generation, where the policy changed its mind.")
def report(run, fmt, trace):
    """Print the summary of a results file or saved run (`cpuspec runs` lists them).

    \b
    Examples:
      cpuspec report results.json --format markdown
      cpuspec report 20261130T0541
    """
    from .report import render_csv, render_rows_json, summarize
    results, path = _load_results(run, bench_only=False)
    if results.get("complete") is False:
        kept = (f"{len(results.get('rows') or [])} sweep points" if results.get("kind") ==
                "sweep" else f"{len(results.get('runs') or [])} generations of "
                f"{len(results.get('prompts') or [])} prompts × modes")
        note = f"(incomplete run: it was interrupted; {kept} kept)"
        # on stderr for csv and json, whose stdout a program reads; above the table otherwise
        click.echo(note, err=fmt in ("csv", "json"))
    if results.get("kind") == "tune":
        from .tune import render_tune
        if not isinstance(results.get("recommendations"), dict):
            raise click.ClickException(f"{path}: a damaged tune file (no recommendations)")
        click.echo(render_tune(results))
        return
    if results.get("kind") == "sweep":
        from .sweep import headline, render_sweep
        if not isinstance(results.get("rows"), list) or not isinstance(results.get("axes"), list):
            raise click.ClickException(f"{path}: a damaged sweep file (no rows or axes)")
        click.echo(render_sweep(results["rows"], results["axes"],
                                "github" if fmt == "markdown" else "simple"))
        line = headline(results["rows"])
        if line:
            click.echo(line)
        return
    if results.get("kind") == "paths":
        from .paths import render_paths
        if not isinstance(results.get("runs"), list) or "settings" not in results:
            raise click.ClickException(f"{path}: a damaged paths file (no runs or settings)")
        click.echo(render_paths(results))
        return
    if results.get("kind") != "bench":
        raise click.ClickException(f"{path}: a {results.get('kind')} results file; report "
                                   "prints bench, sweep, tune and paths files")
    s = summarize(results)
    if fmt == "json":
        click.echo(render_rows_json(s))
    elif fmt == "csv":
        click.echo(render_csv(s), nl=False)
    else:
        _print_bench(results, fmt)
        if trace:
            from .report import render_trace
            click.echo("\nAdaptive decisions per generation:")
            click.echo(render_trace(results["runs"]))


@main.command()
@click.argument("runs", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "csv", "json"]),
              default="text", show_default=True)
@click.option("--force", is_flag=True, help="Compare runs whose workload differs.")
def compare(runs, fmt, force):
    """Bench runs side by side, from any machines: files or saved-run ids.

    One column per run, labelled by its machine (CPU, ISA, threads); per task the end-to-end
    speeds and speedup with its 95 % interval, a, c, β, 1 + α + β, p99 latencies, and run 2 ÷
    run 1 for two runs. Runs of different workloads (models, k, prompts, max tokens,
    temperature, drafter) are refused, naming the difference, unless --force.

    \b
    Examples:
      cpuspec compare bench/results/avx2-build/bench_2threads.json bench/results/bench_2threads.json
      cpuspec compare 20261130T0541 20261201T0900 --format markdown
    """
    from .compare import mismatches, render_compare
    if len(runs) < 2:
        raise click.UsageError("give two or more results files or run ids")
    loaded = [_load_results(r) for r in runs]
    results = [res for res, _ in loaded]
    diff = mismatches(results)
    if diff and not force:
        raise click.ClickException("these runs measured different workloads, so their numbers "
                                   "are not comparable: " + "; ".join(diff)
                                   + " (--force compares them anyway)")
    if diff:
        _log("WARNING: comparing different workloads: " + "; ".join(diff))
    names = _run_names([path for _, path in loaded])
    click.echo(render_compare(results, names, fmt))


@main.command()
@click.argument("runs", nargs=-1)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True,
              help="Folder for the PNG and SVG files (created if missing).")
def plot(runs, out_dir):
    """Figures for bench, costs and sweep runs (files or saved-run ids): PNG and SVG.

    speedup per task with 95 % intervals; a against 1 + α + β (break-even); the verify-cost
    curve V(n)/V(1); sweeps; per-token latency CDFs. Each carries a caption line with the
    machine, models, k and threads. Needs the optional extra: pip install 'cpuspec[plot]'.

    \b
    Examples:
      cpuspec plot bench/results/bench_2threads.json bench/results/costs_q4_0.json --out figs
    """
    from .plots import PLOT_HINT, PlotError, render
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise click.ClickException(PLOT_HINT)
    if not runs:
        raise click.UsageError("give one or more results files or run ids")
    loaded = [_load_results(r, bench_only=False) for r in runs]
    if out_dir.exists() and not out_dir.is_dir():
        raise click.ClickException(f"--out {out_dir} is a file, not a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        files = render([res for res, _ in loaded], _run_names([p for _, p in loaded]),
                       out_dir)
    except PlotError as exc:
        raise click.ClickException(str(exc))
    except OSError as exc:
        raise click.ClickException(f"cannot write figures to {out_dir}: {exc}")
    for f in files:
        click.echo(str(f))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def runs(as_json):
    """List the saved runs under $CPUSPEC_HOME/results, newest last.

    \b
    Examples:
      cpuspec runs
      cpuspec report $(cpuspec runs --json | jq -r '.[-1].id')
    """
    from .store import OutputError, results_dir, run_listing, saved_runs
    try:
        rows = [run_listing(p) for p in saved_runs()]
    except OutputError as exc:
        raise click.ClickException(str(exc))
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    if not rows:
        click.echo(f"no saved runs yet in {results_dir()} (cpuspec bench saves every run "
                   "unless --no-save)")
        return
    from tabulate import tabulate
    status = any(not r.get("complete", True) for r in rows)  # the column only when it says
    click.echo(tabulate([[r["id"], r.get("kind"), r.get("date", ""), r.get("machine", ""),
                          r.get("threads") or "", r.get("pair") or "", r.get("tasks", ""),
                          r.get("speedups", "")]
                         + (["" if r.get("complete", True) else "interrupted"] if status else [])
                         for r in rows],
                        headers=["id", "kind", "date", "machine", "threads", "pair", "tasks",
                                 "SD ×raw e2e"] + (["status"] if status else [])))


if __name__ == "__main__":  # pragma: no cover
    main()
