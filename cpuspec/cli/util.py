"""What every command shares: option parsers and limits, model names and files, output
files (checked before any work, written through a sink, kept on Ctrl-C), the bench printer."""
from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
from pathlib import Path

import click

from cpuspec.machine import interrupt
from cpuspec.report.advice import advise, render_advice
from cpuspec.machine.hardware import MAX_THREADS_PER_CPU, parse_cpu_list
from cpuspec.inputs.models import fetch_model, local_model
from cpuspec.cli.progress import PlainLog, make_log
from cpuspec.inputs.registry import DERIVABLE_QUANTS, ModelError, load_registry
from cpuspec.report.tables import render_audit, render_details, render_noise, render_table
from cpuspec.results.schema import ResultsError, read_json, validate, validate_bench
from cpuspec.results.store import (OutputError, ResultsSink, check_outputs, new_run_path, resolve_run,
                                   write_atomic)
from cpuspec.analysis.stats import INTERVAL_LEGEND
from cpuspec.analysis.summary import noise_report, summarize
from cpuspec.harness.sweep import SweepError, parse_values
from cpuspec.inputs.tasks import ALL_TASKS, PromptsFileError, UnknownTaskError, depth_bound, load_prompts
from cpuspec.report.verdict import render_verdict, run_header
from cpuspec.core.window import describe_window, parse_window


_log = PlainLog()


def configure_log(verbose: bool = False) -> None:
    """A progress bar on a terminal, plain lines otherwise (progress.make_log); the bar is
    closed when the command ends."""
    global _log
    _log = make_log(verbose)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(_log.close)


def log(msg: str) -> None:
    """What a command says while it runs (stderr)."""
    _log(msg)


def save_options(f):
    """--save/--no-save and --force, for every command that writes a results file."""
    f = click.option("--force", is_flag=True,
                     help="Replace a read-only --json (or --csv) file.")(f)
    return click.option("--save/--no-save", default=True, show_default=True,
                        help="Save the run under $CPUSPEC_HOME/results (see `cpuspec runs`)."
                        )(f)


def positive(ctx, param, value):
    if value is not None and value < 1:
        raise click.BadParameter("must be at least 1")
    return value


def finite(value, name):
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number", param_hint=f"'{name}'")
    return value


def window_option(value):
    """--draft-window: 'HEAD,TAIL' or off (window.parse_window), a usage error otherwise."""
    try:
        return parse_window(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--draft-window'")


def quant_list(ctx, param, value):
    """Click callback: a comma list of quant types for the sweep's quant axes."""
    if value is None:
        return None
    quants = [q.strip().upper() for q in value.split(",") if q.strip()]
    bad = [q for q in quants if q not in DERIVABLE_QUANTS]
    if not quants or bad:
        raise click.BadParameter(f"{(bad or [value])[0]!r} is not one of "
                                 f"{', '.join(DERIVABLE_QUANTS)}")
    return list(dict.fromkeys(quants))


def values(minimum):
    """Click callback: a llama-bench style list/range (1,2,4 / 1-8 / 1-8+2 / 1-16*2)."""
    def parse(ctx, param, value):
        if value is None:
            return None
        try:
            return parse_values(value, minimum, max(param.opts, key=len))
        except SweepError as exc:
            raise click.BadParameter(str(exc)) from None
    return parse


def probabilities(ctx, param, value):
    """Click callback: a comma list of probabilities in [0, 1) (--p-min 0,0.5,0.75,0.9)."""
    out = []
    for item in str(value).split(","):
        try:
            v = float(item)
        except ValueError:
            raise click.BadParameter(f"{item.strip()!r} is not a number; e.g. 0,0.5,0.75,0.9")
        if not 0.0 <= v < 1.0:
            raise click.BadParameter(f"{item.strip()}: a probability from 0 to below 1")
        out.append(v)
    return list(dict.fromkeys(out))


def check_gate(p_min, n_min, drafter, policies, schedule, temperature=0.0) -> None:
    """--p-min/--n-min gate the static policy's draft model (the hybrid's model part too)."""
    if not any(p_min) and not n_min:
        return
    given = ", ".join(f for f, on in (("--p-min", any(p_min)), ("--n-min", n_min)) if on)
    if drafter == "lookup":
        verb = "gate" if "," in given else "gates"
        raise click.UsageError(f"{given} {verb} a draft model's drafts on its confidence; "
                               "--drafter lookup has none (use --drafter model or hybrid)")
    if temperature > 0:
        raise click.UsageError(f"{given}: only greedy drafts are gated (llama.cpp's p-min "
                               "is a greedy draft's probability): use --temperature 0")
    if "static" not in policies or schedule == "parallel":
        raise click.UsageError(f"{given} apply to the static policy on the serial schedule "
                               "(the adaptive policy chooses its k itself)")


def check_depths(depths, option: str) -> None:
    """A depth that cpuspec's depth text cannot fill, refused before any model loads."""
    bound = depth_bound()
    for d in depths or []:
        if d > bound:
            raise click.BadParameter(
                f"{d} is more than the tokens of real text cpuspec ships to fill a depth "
                f"(under {bound} with any tokenizer; about a quarter of that with Qwen's)",
                param_hint=f"'{option}'")


POLICIES = ("static", "adaptive", "off")


def cpu_list(value):
    if value is None:
        return None
    try:
        cpus = parse_cpu_list(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a CPU list like 0-3,8") from None
    if not cpus:
        raise click.BadParameter("empty CPU list")
    return cpus


def policy_list(value):
    items = [p.strip() for p in value.split(",") if p.strip()]
    bad = [p for p in items if p not in POLICIES]
    if not items or bad:
        raise click.BadParameter(f"unknown policy {', '.join(bad) or repr(value)}; choose from "
                                 f"{', '.join(POLICIES)}")
    if "off" in items and len(items) > 1:
        raise click.BadParameter("'off' (raw decoding only) cannot be combined with others")
    return [] if items == ["off"] else list(dict.fromkeys(items))


def task_list(ctx, param, value):
    tasks = task_names(ctx, param, value)
    unknown = [t for t in tasks or () if t not in ALL_TASKS]
    if unknown:
        raise click.BadParameter(f"unknown task {', '.join(unknown)}; "
                                 f"built-in tasks: {', '.join(ALL_TASKS)}")
    return tasks


def task_names(ctx, param, value):
    """--tasks of a command that also takes --prompts: names other than built-in tasks pick
    tasks of the prompts file, which load_prompts checks once it has read the file."""
    if value is None:
        return None
    tasks = [t.strip() for t in value.split(",") if t.strip()]
    if not tasks:
        raise click.BadParameter(f"unknown task {value!r}; built-in tasks: "
                                 f"{', '.join(ALL_TASKS)}")
    return tasks


# Draft lengths above this probe 33+ batch sizes and leave acceptance statistics empty: no CPU
# (or GPU) pays at such k (llama.cpp's --draft-max defaults to 16).
MAX_K = 32




# A sweep bigger than this runs for hours; ask for --yes.
MAX_SWEEP_POINTS = 200


# Prompts × repetitions above this (the built-in suites have 8 per task) run for hours: ask
# for --yes, as for a sweep.
MAX_GENERATIONS = 200


def prompts_or_exit(tasks, prompts_file, prompts_per_task, default_tasks=None) -> list:
    """load_prompts, its errors as click's: an unknown task is a bad --tasks."""
    try:
        if default_tasks is None:
            return load_prompts(tasks, prompts_file, prompts_per_task)
        return load_prompts(tasks, prompts_file, prompts_per_task, default_tasks)
    except UnknownTaskError as exc:
        raise click.BadParameter(str(exc), param_hint="'--tasks'")
    except PromptsFileError as exc:
        raise click.ClickException(str(exc))


def check_unused_flags(drafter, policies, adaptive_scope, draft_path, draft_quant,
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


GPU_BUILDS = ('NVIDIA: CMAKE_ARGS="-DGGML_CUDA=on"; Apple: CMAKE_ARGS="-DGGML_METAL=on"; '
              'AMD/Intel laptop GPUs: CMAKE_ARGS="-DGGML_VULKAN=on"; each followed by '
              "pip install --force-reinstall --no-cache-dir llama-cpp-python")


def check_offload(n_gpu_layers, draft_gpu_layers) -> None:
    """-ngl/-ngld above 0 on a build without a GPU backend would run on the CPU under a GPU
    label: refused before any model loads (exit 2), saying how to get a GPU build."""
    if not any(n_gpu_layers) and not any(draft_gpu_layers):
        return
    from cpuspec.llama.engine import supports_gpu_offload
    if not supports_gpu_offload():
        raise click.UsageError(
            "this llama-cpp-python build has no GPU backend, so --n-gpu-layers/"
            "--draft-gpu-layers above 0 cannot offload anything. Install a GPU build ("
            + GPU_BUILDS + "), or measure the CPU with -ngl 0 -ngld 0")


def check_bench_flags(ks, max_tokens, threads, temperature, drafter, policies, adaptive_scope,
                      draft_path, draft_quant, draft_threads, draft_cores, draft_gpu_layers,
                      schedule, n_gpu_layers=(0,)) -> None:
    """Every refusal of `cpuspec bench`'s flags that needs no file and no hardware (and no
    offload on a build without a GPU backend)."""
    check_offload(n_gpu_layers, draft_gpu_layers)
    if not math.isfinite(temperature):
        raise click.BadParameter(f"{temperature} is not a finite number",
                                 param_hint="'--temperature'")
    check_limits(ks, max_tokens, threads, draft_threads)
    check_unused_flags(drafter, policies, adaptive_scope, draft_path, draft_quant,
                       draft_threads, draft_cores, draft_gpu_layers, schedule)
    if schedule == "parallel" and (temperature > 0 or drafter != "model"):
        raise click.UsageError("--schedule parallel needs greedy decoding and the model drafter")
    if drafter == "hybrid" and temperature > 0:
        raise click.UsageError("--drafter hybrid is greedy only (its lookup drafts carry no "
                               "distribution to sample against); drop --temperature or use "
                               "--drafter model or lookup")


def check_size(n_prompts: int, repetitions: int, n_points: int, yes: bool) -> None:
    """Refuse, unless --yes, a bench that would run for hours."""
    if n_prompts * repetitions > MAX_GENERATIONS and not yes:
        raise click.ClickException(
            f"{n_prompts} prompts × {repetitions} repetition(s) is more than "
            f"{MAX_GENERATIONS} generations per mode (hours of measuring); use "
            "--prompts-per-task to take fewer, or pass --yes to run them all")
    if n_points > MAX_SWEEP_POINTS and not yes:
        raise click.ClickException(
            f"this sweep has {n_points} points (more than {MAX_SWEEP_POINTS}); each runs the "
            "whole bench. Narrow the lists, or pass --yes to run it anyway")


def check_limits(ks, max_tokens, threads, draft_threads, k_option: str = "--draft-len",
                 k_may_equal: bool = False) -> None:
    """Refuse values that would run for hours or stall the machine, naming the limit and why
    (k_option: the option that gave ks; k_may_equal: k up to max_tokens, as tune allows)."""
    for k in ks:
        if k > MAX_K:
            raise click.BadParameter(f"{k} is more than {MAX_K}: no machine gains from so "
                                     "long a draft", param_hint=f"'{k_option}'")
        if k > max_tokens or (k == max_tokens and not k_may_equal):
            raise click.BadParameter(
                f"{k} must be {'at most' if k_may_equal else 'below'} --max-tokens "
                f"({max_tokens}): a round emits up to k + 1 tokens", param_hint=f"'{k_option}'")
    limit = MAX_THREADS_PER_CPU * (os.cpu_count() or 1)
    for t in list(threads or []) + ([draft_threads] if draft_threads else []):
        if t > limit:
            raise click.BadParameter(
                f"{t} is more than {limit} ({MAX_THREADS_PER_CPU} per logical CPU of this "
                "machine): the threads would only queue for the CPUs",
                param_hint="'--threads'")


def resolve_model(reg, name: str):
    """A GGUF file given by path (hashed, used as is), or a registered model by name (fetched,
    verified, or derived)."""
    p = Path(name)
    if p.suffix == ".gguf" or p.exists():
        check_model_file(p)
        return local_model(p)
    return fetch_model(reg.model(name), log)


def check_model_name(reg, name: str) -> None:
    """What resolve_model would refuse, found before anything is fetched or derived: a GGUF
    path that is not a file, or a name that models.toml does not know."""
    p = Path(name)
    if p.suffix == ".gguf" or p.exists():
        check_model_file(p)
    elif name not in reg.models:
        raise click.ClickException(f"unknown model {name!r}; see `cpuspec models list`, or "
                                   "give a .gguf file")


def check_model_file(p: Path | None) -> None:
    if p is None:
        return
    if p.is_dir():
        raise click.ClickException(f"model file {p} is a folder; pass the .gguf file in it")
    if not p.is_file():
        raise click.ClickException(f"model file not found: {p}")


def prepare_outputs(outputs: list[Path | None], inputs: list[Path | None], force: bool,
                     save: bool, kind: str, cpu_model: str):
    """Check every output before any work, create the saved run's file, and return the sink
    that writes every JSON destination (the saved run first)."""
    try:
        check_outputs(outputs, inputs, force)
        saved = [new_run_path(kind, cpu_model)] if save else []
    except OutputError as exc:
        raise click.ClickException(str(exc))
    if saved:
        log(f"saving this run as {saved[0]} (--no-save to skip)")
    json_outputs = [p for p in outputs[:1] if p is not None]
    return ResultsSink(saved + json_outputs, reserved=saved, log=log)


@contextlib.contextmanager
def guarded(sink=None):
    """Ctrl-C and SIGTERM end the command within a decode (see interrupt.py) with what it
    finished: the last results written by the sink stay (marked "complete": false, "ended":
    "interrupted"), the message says where, and the exit code is 130. A command that fails
    on an error keeps its results the same way, marked "ended": "failed: …". However the
    command ends, a saved run that never got any results is removed rather than left
    empty."""
    try:
        with interrupt.handled():
            yield
    except KeyboardInterrupt:
        if sink is not None:
            sink.mark_ended("interrupted")
            sink.discard_unwritten()
        click.echo(f"interrupted: {sink.kept() if sink is not None else 'nothing was saved'}",
                   err=True)
        sys.exit(130)
    except click.ClickException as exc:
        if sink is not None:
            sink.mark_ended(f"failed: {exc.format_message().splitlines()[0][:300]}")
        raise
    finally:
        if sink is not None:
            sink.discard_unwritten()


def write_text(sink, path: Path, text: str) -> None:
    """A side output (--csv) written at the end; a failure is reported with the sink's, by
    finish_outputs, after the summary was printed."""
    try:
        write_atomic(path, text)
        log(f"wrote {path}")
    except OSError as exc:
        sink.failed[Path(path)] = exc.strerror or str(exc)


def finish_outputs(sink) -> None:
    """Name the files written; if one could not be (a full disk), say what it holds and
    exit 1, after the summary was printed from what is in memory."""
    for p in sink.paths:
        if p not in sink.failed:
            log(f"wrote {p}")
    problem = sink.failures()
    if problem:
        raise click.ClickException(problem)


def print_bench(results: dict, fmt: str = "text", details: bool = False,
                source: str | None = None) -> None:
    """The bench's report, shared by `cpuspec bench` and `cpuspec report`: by default the
    first screen (verdict.render_verdict: verdict, advice, the next command); with details
    (or markdown) the full table, per-task details, audit, advice table, noise and build."""
    _log.close()   # a progress bar ends before the results are printed
    s = summarize(results)
    if not details and fmt == "text":
        has_static = any(r["mode"] == "static" for r in results["runs"])
        advice = advise(results) if results.get("cost_probe") and has_static else None
        noise = noise_report(results["runs"])
        warning = (f"WARNING: {len(noise['prompts'])} noisy prompt(s): their speedups are not "
                   "trustworthy (--details says why and what to do)") if noise["flags"] else None
        click.echo(run_header(results))
        click.echo(render_verdict(results, s, advice, source, warning))
        return
    k = results["settings"]["k"]
    click.echo("Windows: end-to-end (e2e) = both prefills + every round, the headline; "
               f"decode-only = after the prefills. [95% CI] = {INTERVAL_LEGEND}.")
    depth = results.get("depth")
    if depth:
        held = depth["held_tokens"]
        click.echo(f"Depth: {depth['requested_tokens']} tokens of context before each prompt "
                   f"({min(held)}-{max(held)} tokens with the chat template), held in both "
                   "KV caches, read once and not timed.")
    window = results["settings"].get("draft_window")
    if window:
        click.echo(describe_window(window, "the draft", "the target"))
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


def registry():
    try:
        return load_registry()
    except ModelError as exc:
        raise click.ClickException(str(exc))


def reads_results(command):
    """For a command that prints results files (report, advise, compare, plot): the files
    are validated field by field (schema.validate), and a damage that validation does not
    name (a printer meeting a value of the wrong shape) still ends in a one-line message
    naming the file, never a traceback."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (KeyError, TypeError, IndexError, AttributeError, RecursionError,
                ZeroDivisionError, ValueError) as exc:
            given = kwargs.get("run") or ", ".join(kwargs.get("runs") or ())
            raise click.ClickException(
                f"{given}: a damaged results file that cpuspec cannot print "
                f"({type(exc).__name__}: {str(exc)[:200]})") from None
    return wrapper


def run_names(paths: list[Path]) -> list[str]:
    """Short names for runs: file stems, with the folder where two stems are the same."""
    stems = [p.stem for p in paths]
    return [f"{p.parent.name}/{p.stem}" if stems.count(p.stem) > 1 else p.stem for p in paths]


def load_results(ref: str, bench_only: bool = True) -> tuple[dict, Path]:
    """A results file or a saved run's id, read and (for bench files) validated."""
    try:
        path = resolve_run(ref)
        results = read_json(path)
        if bench_only:
            validate_bench(results, str(path))
        else:
            validate(results, str(path))
    except (OutputError, ResultsError) as exc:
        raise click.ClickException(str(exc))
    return results, path
