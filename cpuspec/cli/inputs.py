"""What a command reads: prompts files, model names and files, the registry."""
from __future__ import annotations


from pathlib import Path

import click

from cpuspec.cli.help import BadInput
from cpuspec.cli.log import log
from cpuspec.inputs.models import fetch_model, local_model
from cpuspec.inputs.refs import Ref, RefError, check_room, fetch_plan, parse_ref, plan_ref
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


REF_FORMS = ("a .gguf file, a registered name (`cpuspec models list`), OWNER/REPO[:QUANT], "
             "OWNER/REPO/FILE.gguf or ollama:NAME[:TAG]")


def parse_model(reg, name: str, check_file: bool = True) -> Ref:
    """A model reference (inputs/refs/), checked before anything is fetched: its syntax and
    (check_file) a path's file (exit 2 on bad input)."""
    try:
        ref = parse_ref(name, set(reg.models))
    except RefError as exc:
        raise click.BadParameter(str(exc)) from None
    if ref.kind == "path" and check_file:
        _check_path_ref(ref)
    return ref


def _check_path_ref(ref: Ref) -> None:
    p = Path(ref.text)
    try:
        there = p.exists()
    except OSError:   # a name too long to be a path
        there = False
    if not there and (p.suffix != ".gguf" or len(p.name) > 255):
        raise click.UsageError(f"unknown model {ref.text!r}: give {REF_FORMS}")
    check_model_file(p)


def model_ref(ctx, param, value):
    """click callback of --target/--draft: the reference's syntax checked now; the file it
    names (model_path) once the command's own checks have passed."""
    return None if value is None else parse_model(registry(), value, check_file=False)


def model_path(ref: Ref | None) -> Path | None:
    """The file a reference names on this machine (model_files)."""
    return model_files(ref)[0][0]


def model_files(*refs: Ref | None) -> list[tuple[Path | None, dict | None]]:
    """The files references name on this machine, each with where it came from (None for a
    path or a registered name): a path as given; a registered model fetched (or derived); a
    hub file found in a store or downloaded; an Ollama model's blob. Every reference is
    planned (listed, picked, checked) and the room for every download checked before the
    first byte is fetched."""
    from cpuspec.cli.outputs import guarded
    with guarded():   # Ctrl-C in a download: exit 130, the partial file gone (hf's own)
        return _model_files(refs)


def _model_files(refs) -> list[tuple[Path | None, dict | None]]:
    from cpuspec.core.text import printable
    try:
        plans = [plan_ref(r) if r is not None and r.kind in ("hf", "ollama") else None
                 for r in refs]
        check_room(plans)
        out: list[tuple[Path | None, dict | None]] = []
        for ref, plan in zip(refs, plans):
            if ref is None:
                out.append((None, None))
            elif ref.kind == "path":
                _check_path_ref(ref)
                out.append((Path(ref.text), None))
            elif ref.kind == "name":
                out.append((fetch_model(registry().model(ref.text), log).path, None))
            else:
                got = fetch_plan(plan, log)
                out.append((got.path, got.origin))
        return out
    except RefError as exc:   # names from the hub's listing: one line, cleaned
        raise BadInput(printable(str(exc))) from None
    except ModelError as exc:
        raise click.ClickException(str(exc)) from None


def resolve_model(reg, name: str):
    """Any model reference (parse_model) as a fetched model: a path hashed and used as is, a
    registered model fetched, verified or derived, a hub or Ollama model found or fetched."""
    ref = parse_model(reg, name)
    if ref.kind == "name":
        return fetch_model(reg.model(name), log)
    (path, origin), = model_files(ref)
    return local_model(path, origin)


def check_model_name(reg, name: str) -> None:
    """What resolve_model would refuse, found before anything is fetched or derived."""
    parse_model(reg, name)


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
