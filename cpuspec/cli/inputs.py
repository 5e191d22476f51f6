"""What a command reads: prompts files, model names and files, the registry."""
from __future__ import annotations


from pathlib import Path

import click

from cpuspec.cli.log import log

from cpuspec.inputs.models import fetch_model, local_model
from cpuspec.inputs.registry import ModelError, load_registry
from cpuspec.inputs.tasks import PromptsFileError, UnknownTaskError, load_prompts

def prompts_or_exit(tasks, prompts_file, prompts_per_task, default_tasks=None) -> list:
    """load_prompts, its errors as click's: an unknown task is a bad --tasks."""
    try:
        if default_tasks is None:
            return load_prompts(tasks, prompts_file, prompts_per_task)
        return load_prompts(tasks, prompts_file, prompts_per_task, default_tasks)
    except UnknownTaskError as exc:
        raise click.BadParameter(str(exc), param_hint="'--tasks'")
    except PromptsFileError as exc:   # the user's file: bad input, exit 2
        raise click.UsageError(str(exc))


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
        raise click.UsageError(f"unknown model {name!r}; see `cpuspec models list`, or "
                               "give a .gguf file")


def check_model_file(p: Path | None) -> None:
    """A model path the user gave: a regular file (exit 2 otherwise, before any work)."""
    if p is None:
        return
    if p.is_dir():
        raise click.UsageError(f"model file {p} is a folder; pass the .gguf file in it")
    if p.exists() and not p.is_file():
        raise click.UsageError(f"model file {p} is not a regular file (a pipe or a device?); "
                               "pass a .gguf file")
    if not p.is_file():
        raise click.UsageError(f"model file not found: {p}")


def check_pair(pair: str | None) -> None:
    """A --pair that models.toml does not know: exit 2 with the known ones, before any work."""
    if pair is None:
        return
    known = registry().pairs
    if pair not in known:
        raise click.UsageError(f"unknown pair {pair!r}; known pairs: {', '.join(known)} "
                               "(`cpuspec models list`)")


def refuse_shape_true(p: Path | None) -> None:
    """A shape-true file (random weights) has no real acceptance or quality: bench, paths,
    tune and quality, which measure them, refuse one (exit 2); costs and contention measure
    its speed."""
    from cpuspec.llama.shape_true import is_shape_true
    if p is not None and p.is_file() and is_shape_true(p):
        raise click.UsageError(f"{p.name} is shape-true (random weights): its outputs are "
                               "noise, so SD's acceptance cannot be measured with it; `cpuspec "
                               "costs --target` measures its speed")


def registry():
    try:
        return load_registry()
    except ModelError as exc:
        raise click.ClickException(str(exc))
