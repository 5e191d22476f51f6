"""cpuspec tune: the search for where SD pays."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click


from cpuspec.harness.bench import BenchConfig, environment
from cpuspec.cli.checks import check_depths, check_limits
from cpuspec.cli.inputs import (check_model_name, prompts_or_exit, refuse_shape_true,
                                registry, resolve_model)
from cpuspec.cli.log import echo, log
from cpuspec.cli.options import (finite, positive, save_options, task_names, values, window_option)
from cpuspec.cli.outputs import finish_outputs, guarded, prepare_outputs, run_source
from cpuspec.machine.hardware import default_threads, detect_hardware
from cpuspec.inputs.registry import ModelError
from cpuspec.results.schema import SCHEMA_VERSION
from cpuspec.inputs.tasks import DEFAULT_TASKS
from cpuspec.tune.race import RACE_SIZE
from cpuspec.tune.search import Candidate, run_tune
from cpuspec.report.tune import render_tune, render_tune_screen



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
