"""The `cpuspec` command: its group and `bench` (one point or a sweep); the other commands live
in cli/hardware.py, costs.py, paths.py, quality.py, tune.py, models.py and results.py and are added here. Click only: parse, build a
config, call the core, hand the results to a printer (shared helpers: cliutil)."""
from __future__ import annotations

import functools
import math
import os
import sys
import warnings
from pathlib import Path

import click

from cpuspec import __version__
from cpuspec.harness.bench import BenchConfig, environment, run_bench
from cpuspec.cli.costs import costs
from cpuspec.cli.hardware import contention, hw
from cpuspec.cli.paths import paths
from cpuspec.cli.quality import quality
from cpuspec.cli.tune import tune
from cpuspec.cli.models import check_default_draft, models, pair_draft_file
from cpuspec.cli.results import advise, compare, plot, report, runs
from cpuspec.cli.dataset import export, leaderboard, publish
from cpuspec.cli.heads import heads
from cpuspec.cli.engine import RUNS_MODELS, check_llama_build, rebuild
from cpuspec.cli.help import CleanGroup, SectionedCommand
from cpuspec.cli.bench_report import print_bench
from cpuspec.cli.checks import check_bench_flags, check_depths, check_gate, check_size
from cpuspec.cli.inputs import (check_model_file, check_pair, model_files, model_ref,
                                prompts_or_exit, refuse_shape_true)
from cpuspec.cli.log import configure_log, echo, log
from cpuspec.cli.options import (cpu_list, finite, policy_list, positive, probabilities,
                                 quant_list, save_options, task_names, values, window_option)
from cpuspec.cli.outputs import (finish_outputs, guarded, prepare_outputs, run_source,
                                 write_text)
from cpuspec.core.drafters import NAMES as DRAFTER_NAMES
from cpuspec.machine.hardware import HardwareError, default_threads, detect_hardware
from cpuspec.inputs.registry import ModelError
from cpuspec.report.tables import render_csv, sweep_rows
from cpuspec.analysis.summary import summarize
from cpuspec.analysis.sequential import PRECISION
from cpuspec.harness.sweep import (SweepError, add_point, plan, point_config,
                                   run_sweep, sweep_document)
from cpuspec.report.sweep import headline, render_sweep, sweep_csv
from cpuspec.inputs.tasks import ALL_TASKS, DEFAULT_TASKS, shuffled_within_tasks


@click.group(cls=CleanGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cpuspec")
@click.option("-v", "--verbose", is_flag=True, help="One line per prompt on stderr instead of "
              "a progress bar (the bar shows only on a terminal).")
@click.pass_context
def main(ctx, verbose) -> None:
    """Does speculative decoding pay off on this CPU? Measure it.

    \b
    Examples:
      cpuspec bench --threads 8
      cpuspec bench --tasks json,code --draft-len 2 --json out.json
      cpuspec models list
    """
    configure_log(verbose)
    # numerical warnings (a mean of no values: the figure is shown as "-") and matplotlib's
    # missing glyphs are not the user's to read; every figure they concern says so itself
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    warnings.filterwarnings("ignore", message=".*[Gg]lyph.*missing.*")
    # the AMX build check runs once the command's own options parsed (_checked_first): a
    # usage error or --help never probes or rebuilds anything


BENCH_SECTIONS = {
    "Models": ["pair", "target_path", "draft_path", "target_quant", "draft_quant", "drafter"],
    "What to measure": ["tasks", "prompts_file", "prompts_per_task", "fixed", "precision",
                        "max_tokens", "k",
                        "p_min", "n_min",
                        "policies", "depth", "draft_window", "repetitions", "warmup",
                        "temperature", "seed"],
    "Cores and devices (comma lists and ranges sweep)": [
        "threads", "p_cores", "e_cores", "smt", "draft_threads", "draft_cores", "schedule",
        "n_gpu_layers", "draft_gpu_layers"],
    "Adaptive policy and noise": ["adaptive_scope", "max_noise"],
    "Output": ["details", "json_path", "csv_path", "save", "force", "yes"],
}


@main.command(cls=SectionedCommand, sections=BENCH_SECTIONS)
@click.option("--pair", help="Model pair from models.toml (see `cpuspec models list`).")
@click.option("--target", "target_path", callback=model_ref, metavar="MODEL",
              help="The target instead of the pair's: a .gguf file, a registered name, "
                   "OWNER/REPO[:QUANT] or OWNER/REPO/FILE.gguf as llama.cpp's -hf takes it (a "
                   "copy already on this machine is used in place), or ollama:NAME[:TAG].")
@click.option("--draft", "draft_path", callback=model_ref, metavar="MODEL",
              help="The draft instead of the pair's, named as --target.")
@click.option("-t", "--threads", callback=values(1),
              help="Threads for both models; a list or range sweeps [default: the chosen "
                   "cores, else the physical cores in this process's affinity].")
@click.option("--p-cores", default="0", callback=values(0),
              help="Pin to N P-cores (every core of a non-hybrid CPU counts as a P-core).")
@click.option("--e-cores", default="0", callback=values(0),
              help="Pin to M E-cores (hybrid Intel CPUs).")
@click.option("-ngl", "--n-gpu-layers", default="0", callback=values(0),
              help="Target layers offloaded to the GPU (needs a GPU build of "
                   "llama-cpp-python); e.g. 0,16,99.")
@click.option("-ngld", "--draft-gpu-layers", default="0", callback=values(0),
              help="Draft layers offloaded to the GPU.")
@click.option("--target-quant", callback=quant_list, metavar="Q4_0,Q8_0,...",
              help="Sweep derived variants of the target in these quants (requantized from "
                   "the pair's target or --target with llama.cpp's quantizer, cached; results "
                   "label them derived).")
@click.option("--draft-quant", callback=quant_list, metavar="Q4_0,...",
              help="The same for the draft.")
@click.option("--smt", is_flag=True, help="Use every SMT sibling of the chosen cores.")
@click.option("--draft-threads", type=int, callback=positive,
              help="Threads for the draft model [default: --threads] (llama.cpp's -td).")
@click.option("--draft-cores", callback=lambda c, p, v: cpu_list(v),
              help="CPU list for the draft phase, e.g. 12-15 (llama.cpp's -Cd).")
@click.option("-k", "--draft-len", "k", default="4", show_default=True, callback=values(1),
              help="Draft tokens per round; a list or range sweeps.")
@click.option("--p-min", default="0", show_default=True, callback=probabilities,
              metavar="P,...", help="Stop a static round's drafting at the first draft token "
              "whose probability is below P, as llama.cpp's --spec-draft-p-min; a list sweeps.")
@click.option("--n-min", type=click.IntRange(min=0), default=0, show_default=True,
              help="Drop a round's drafts when fewer than N pass --p-min (llama.cpp's "
                   "--spec-draft-n-min).")
@click.option("-n", "--max-tokens", type=int, default=128, show_default=True,
              callback=positive, help="Tokens generated per prompt.")
@click.option("-d", "--depth", default="0", show_default=True, callback=values(0),
              help="Tokens of real context (cpuspec's shipped texts, as an earlier turn) "
                   "held in both models' KV caches before each prompt, read once and not "
                   "timed, as a chat server holds a conversation (llama-bench's -d); a list "
                   "sweeps, e.g. 0,1024,4096.")
@click.option("--tasks", callback=task_names,
              help=f"Comma list of built-in tasks ({','.join(ALL_TASKS)}) [default: "
                   f"{','.join(DEFAULT_TASKS)}, or none when --prompts is given]; with "
                   "--prompts, names pick that file's tasks first (the rest of it is left out) and "
                   "builtin:NAME a built-in suite.")
@click.option("--prompts", "prompts_file", type=click.Path(path_type=Path),
              help='JSONL file of {"task": ..., "prompt": ...} lines to bench as well.')
@click.option("--prompts-per-task", type=int, callback=positive,
              help="Use only the first N prompts of each task.")
@click.option("--exact-audit", is_flag=True,
              help="Replay every SD output's own verifies on the target (default: only the "
                   "outputs that differ from plain decoding, where the replay classifies the "
                   "divergence): proof that the loop emitted the target's choices.")
@click.option("--fixed", is_flag=True,
              help="Run every prompt of every task (the fixed design). Without it a task stops "
                   "at the first look (5, 8, 12, 16, 24, 32 prompts) whose interval decides it, "
                   "with intervals that keep 95 % coverage over the looks (docs/sequential.md).")
@click.option("--precision", type=click.FloatRange(0.005, 0.5), default=PRECISION,
              show_default=True, help="The sequential design stops a task as 'no difference' "
              "once its interval lies within ± this fraction of its centre (recorded in the "
              "run); not with --fixed.")
@click.option("-r", "--repetitions", type=int, default=1, show_default=True,
              callback=positive, help="Times each prompt is run (raw and SD each).")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True,
              help="Uncounted warm-up generations before measuring.")
@click.option("--details", is_flag=True, help="Print everything measured (the wide table, "
              "acceptance by position, histograms, the audit, adaptive decisions) instead of "
              "the one-screen verdict; `cpuspec report RUN --details` prints it later.")
@click.option("--policy", "policies", default="static,adaptive", show_default=True,
              callback=lambda c, p, v: policy_list(v),
              help="SD policies run beside raw decoding: static (k every round), adaptive "
                   "(k chosen per round by the cost model, off when it does not pay), or off "
                   "(raw only).")
@click.option("--temperature", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="0: greedy. > 0: sample, and verify with the speculative-sampling rule "
                   "(lossless in distribution; the token-for-token audit is skipped).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for sampling.")
@click.option("--drafter", type=click.Choice(DRAFTER_NAMES), default="model",
              show_default=True,
              help="Draft with the pair's draft model; by prompt lookup (n-gram match "
                   "against the prompt and output so far; no draft model, c ≈ 0); or hybrid: "
                   "lookup where it finds a match, the draft model where it does not.")
@click.option("--draft-window", default="off", show_default=True, metavar="HEAD,TAIL",
              callback=lambda c, p, v: window_option(v),
              help="The draft reads only the first HEAD and last TAIL tokens of a prompt "
                   "longer than HEAD + TAIL (e.g. 256,256): its prefill of a long input costs "
                   "a window, not the whole text. Lossless: the target still reads every "
                   "token and decides every output token. For short answers to long inputs: "
                   "a long answer that copies the input's middle loses acceptance (a "
                   "768-token edit measured 0.79x raw with 256,256, 1.13x without).")
@click.option("--schedule", type=click.Choice(["serial", "parallel"]), default="serial",
              show_default=True,
              help="parallel: the draft, on --draft-cores, drafts the next round while the "
                   "target verifies (static policy, greedy).")
@click.option("--adaptive-scope", type=click.Choice(["task", "prompt"]), default="task",
              show_default=True,
              help="What the adaptive policy carries over: one controller per task type "
                   "across its prompts, or a fresh one per prompt.")
@click.option("--max-noise", type=click.FloatRange(min=0), metavar="CPUS",
              callback=lambda c, p, v: finite(v, "--max-noise"),
              help="Measure a prompt again (up to 3 times) while other programs used more "
                   "than CPUS CPUs during it, or tasks waited for a CPU over 20% of the time "
                   "(Linux PSI); e.g. 0.1. Disturbed runs are kept under discarded_runs.")
@click.option("--json", "json_path", type=click.Path(path_type=Path),
              help="Write every raw sample, the settings and the environment here.")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path),
              help="Write the summary table as CSV here.")
@save_options
@click.option("--yes", is_flag=True, help="Run a sweep of more than 200 points, or more than "
                                         "200 prompts × repetitions.")
def bench(pair, target_path, draft_path, threads, p_cores, e_cores, n_gpu_layers,
          draft_gpu_layers, target_quant, draft_quant, smt, draft_threads, draft_cores, k,
          p_min, n_min, max_tokens, depth, tasks, prompts_file,
          prompts_per_task, exact_audit, fixed, precision, repetitions, warmup, details,
          policies,
          temperature, seed, drafter, draft_window, schedule, adaptive_scope, max_noise,
          json_path, csv_path, save, force, yes):
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

    check_bench_flags(k, max_tokens, threads, temperature, drafter, policies, adaptive_scope,
                      draft_path, draft_quant, draft_threads, draft_cores, draft_gpu_layers,
                      schedule, n_gpu_layers)
    if draft_window and (drafter == "lookup" or schedule == "parallel" or not policies):
        raise click.UsageError("--draft-window needs a draft model (--drafter model or "
                               "hybrid), the serial schedule and an SD policy")
    check_gate(p_min, n_min, drafter, policies, schedule, temperature, ks=k)
    prompts = _bench_prompts(tasks, prompts_file, prompts_per_task, depth)
    axes = {"target_quant": target_quant or [""], "draft_quant": draft_quant or [""],
            "n_gpu_layers": n_gpu_layers, "draft_gpu_layers": draft_gpu_layers,
            "p_cores": p_cores, "e_cores": e_cores, "threads": threads or [0], "k": k,
            "depth": depth, "p_min": p_min}
    check_size(len(prompts), repetitions, math.prod(len(v) for v in axes.values()), yes)
    (target_path, target_origin), (draft_path, draft_origin) = _bench_models(
        pair, target_path, draft_path, draft_quant, drafter)
    hw = detect_hardware()
    where = _bench_plan(hw, axes, smt, draft_cores, schedule)
    for note in where.notes:
        log(note)
    design = _design(fixed, repetitions, policies, precision)   # refused before any file
    sink = prepare_outputs([json_path, csv_path], [prompts_file, target_path, draft_path],
                           force, save, "sweep" if where.is_sweep else "bench", hw.cpu_model)
    if design is not None:   # a stop at 5 of 16: 5 drawn at random, the draw recorded
        design["order_seed"] = int.from_bytes(os.urandom(4), "little")
        prompts = shuffled_within_tasks(prompts, design["order_seed"])
    base = BenchConfig(prompts=prompts, threads=1, max_tokens=max_tokens,
                       repetitions=repetitions, warmup=warmup, pair=pair,
                       target_path=target_path, draft_path=draft_path, policies=policies,
                       target_origin=target_origin, draft_origin=draft_origin,
                       drafter=drafter, draft_cpus=where.draft_cpus,
                       draft_threads=draft_threads, temperature=temperature, seed=seed,
                       max_noise=max_noise, adaptive_scope=adaptive_scope, schedule=schedule,
                       draft_window=draft_window, n_min=n_min, argv=["cpuspec", *sys.argv[1:]],
                       sequential=design, exact_audit=exact_audit)
    if where.is_sweep:
        _sweep(base, where, default_threads(), sink, csv_path)
    else:
        _bench_point(base, where, default_threads(), sink, csv_path, details)


def _design(fixed: bool, repetitions: int, policies: list[str],
            precision: float = PRECISION) -> dict | None:
    """The sequential design's settings, or None (every prompt runs): --fixed, repetitions
    (a prompt's repetitions are one unit: the design stops between prompts), or no static
    policy (the verdict it decides is static SD against raw)."""
    from cpuspec.analysis.sequential import ALPHA
    if fixed and click.get_current_context().get_parameter_source("precision") != \
            click.core.ParameterSource.DEFAULT:
        raise click.UsageError("--precision is the sequential design's: leave out --fixed "
                               "(every prompt runs there, nothing stops early)")
    if fixed or repetitions > 1 or "static" not in policies:
        return None
    return {"alpha": ALPHA, "precision": precision}


def _bench_models(pair, target, draft, draft_quant, drafter) -> tuple:
    """The pair checked, then --target/--draft resolved to files (found, or fetched) and
    checked; a target alone whose default draft cannot draft for it is told which can."""
    check_pair(pair)
    files = model_files(target, draft)
    for p, _ in files:
        check_model_file(p)
        refuse_shape_true(p)
    (target_path, _), (draft_path, _) = files
    if target_path and draft_path and target_path.resolve() == draft_path.resolve():
        log(f"note: --target and --draft name one file ({target_path.name}): the draft is the "
            "target, every draft is accepted; this measures SD's ceiling, not a draft")
    if target_path and not draft_path and not draft_quant and drafter != "lookup":
        check_default_draft(target_path, pair_draft_file(pair))
    return files


def _bench_prompts(tasks, prompts_file, prompts_per_task, depth) -> list:
    """The prompts a bench runs, and the checks of --depth against them."""
    prompts = prompts_or_exit(tasks, prompts_file, prompts_per_task)
    check_depths(depth, "--depth")
    if any(depth) and any(p.followup for p in prompts):
        raise click.UsageError("--depth and follow-up turns do not combine: a follow-up "
                               "prompt brings its own conversation")
    return prompts


def _bench_plan(hw, axes: dict, smt: bool, draft_cores, schedule: str):
    """Every point's core selection, checked before anything runs."""
    try:
        return plan(hw, axes, smt, draft_cores, schedule)
    except (SweepError, HardwareError) as exc:   # cores this machine does not have: exit 2
        raise click.UsageError(str(exc))


def _bench_point(base, where, fallback_threads: int, sink, csv_path, details=False) -> None:
    """One bench point: run it, print the report, write the CSV."""
    from cpuspec.llama.engine import EngineError
    cfg = point_config(base, where.points[0], where, fallback_threads, log)
    log(f"cpuspec bench: {len(cfg.prompts)} prompts, k = {cfg.k}, {cfg.max_tokens} tokens, "
        f"{cfg.threads} threads"
        + (f", pinned to CPUs {','.join(map(str, cfg.cpus))}" if cfg.cpus else ""))
    with guarded(sink):
        try:
            results = run_bench(cfg, log, on_update=sink)
        except (ModelError, EngineError, ValueError) as exc:
            raise click.ClickException(str(exc))
        sink(results)
    if details:
        from cpuspec.results.records import model_label
        m = results["models"]
        draft_desc = ("prompt-lookup drafter" if cfg.drafter == "lookup" else
                      f"draft {model_label(m['draft'])} ({m['draft']['source']})"
                      + (", hybrid with prompt lookup" if cfg.drafter == "hybrid" else ""))
        echo(f"\ntarget {model_label(m['target'])} ({m['target']['source']}), {draft_desc}; "
                   f"k = {cfg.k}, {cfg.threads} threads, {cfg.max_tokens} tokens/prompt")
    print_bench(results, details=details, source=run_source(sink))
    if csv_path:
        write_text(sink, csv_path, render_csv(summarize(results)))
    finish_outputs(sink)


def _sweep(base, where, fallback_threads: int, sink, csv_path) -> None:
    """Run a sweep: a row per point as soon as it finishes (and the JSON rewritten with every
    finished point, so an interrupted sweep keeps them), then one table of what varies."""
    from cpuspec.llama.engine import EngineError, supports_gpu_offload
    # the environment records the threads the points run with (a list when they vary)
    threads = sorted({point_config(base, p, where, fallback_threads, lambda _: None).threads
                      for p in where.points})
    doc = sweep_document(where.points, environment(threads[0] if len(threads) == 1 else threads),
                         base.argv, supports_gpu_offload())
    axes = doc["axes"]
    log(f"cpuspec bench: sweep of {len(where.points)} points over {', '.join(axes)}")
    sink(doc)

    def on_point(point, results):
        row = add_point(doc, point, results)
        echo(f"point {', '.join(f'{a}={row[a]}' for a in axes)}: raw "
                   f"{row['raw_tok_s']:.1f} t/s, SD {row['sd_tok_s']:.1f} t/s "
                   f"({row['sd_speedup']:.2f}× end-to-end), a {row['a'] or 0:.2f}, "
                   f"SD {row['verdict']}")
        sink(doc)

    with guarded(sink):
        try:
            run_sweep(base, where.points,
                      lambda cfg, p: point_config(cfg, p, where, fallback_threads, log),
                      on_point, log)
        except (ModelError, EngineError, ValueError) as exc:
            raise click.ClickException(str(exc))
    doc["complete"] = True
    sink(doc)
    echo("")
    rows = sweep_rows(doc)
    echo(render_sweep(rows, axes, devices=doc["meta"].get("ggml_devices")))
    line = headline(rows, doc["meta"].get("ggml_devices"))
    if line:
        echo(line)
    if csv_path:
        write_text(sink, csv_path, sweep_csv(rows))
    finish_outputs(sink)

for _command in (hw, contention, costs, paths, quality, tune, models, advise, report, compare,
                 plot, runs, export, publish, leaderboard, heads, rebuild):
    main.add_command(_command)


def _checked_first(callback):
    """A command that runs models: on a CPU with AMX, the build check (cli/engine.py) before
    its body, after click parsed its options (click calls the callback only then); on
    Windows, EcoQoS off for the whole command (every measurement at full speed)."""
    @functools.wraps(callback)
    def run(*args, **kwargs):
        from cpuspec.machine import osapi
        check_llama_build(log)
        osapi.current().keep_full_speed()
        return callback(*args, **kwargs)
    return run


for _name in RUNS_MODELS:
    main.commands[_name].callback = _checked_first(main.commands[_name].callback)


if __name__ == "__main__":   # python -m cpuspec.cli.main (another venv's build, tests)
    main()
