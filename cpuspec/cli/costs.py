"""cpuspec costs: the verify-cost curve on this CPU, for a pair or shape-true targets (what-if)."""
from __future__ import annotations

import sys
from pathlib import Path

import click


from cpuspec.harness.bench import BenchConfig
from cpuspec.cli.checks import check_depths, check_limits
from cpuspec.cli.inputs import check_model_file, check_pair, model_files
from cpuspec.cli.log import echo, log
from cpuspec.cli.options import pair_options, positive, save_options
from cpuspec.cli.outputs import finish_outputs, guarded, prepare_outputs
from cpuspec.report.measurements import render_costs_file
from cpuspec.machine.hardware import default_threads, detect_hardware
from cpuspec.harness.probe import run_costs
from cpuspec.inputs.registry import ModelError



@click.command()
@pair_options
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
