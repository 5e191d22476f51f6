"""Click option callbacks: each parses one option's text into values, or says why not."""
from __future__ import annotations


import math

import click

from cpuspec.machine.hardware import parse_cpu_list
from cpuspec.inputs.registry import DERIVABLE_QUANTS
from cpuspec.harness.sweep import SweepError, parse_values
from cpuspec.inputs.tasks import ALL_TASKS
from cpuspec.core.window import parse_window

def pair_options(f):
    """--pair, --target and --draft as costs and contention take them: a registered pair, or
    a target and a draft by any name cpuspec reads (inputs.model_ref)."""
    from cpuspec.cli.inputs import model_ref
    f = click.option("--draft", "draft_path", callback=model_ref, metavar="MODEL",
                     help="The draft, named as --target [default: the pair's].")(f)
    f = click.option("--target", "target_path", callback=model_ref, metavar="MODEL",
                     help="A .gguf file, a registered name, OWNER/REPO[:QUANT], "
                          "OWNER/REPO/FILE.gguf or ollama:NAME[:TAG] [default: the pair's].")(f)
    return click.option("--pair", help="Model pair from models.toml.")(f)


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
