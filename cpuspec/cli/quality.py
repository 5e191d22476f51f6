"""cpuspec quality: perplexity, agreement and logit drift of quants."""
from __future__ import annotations

import sys
from pathlib import Path

import click


from cpuspec.harness.bench import environment
from cpuspec.cli.checks import check_limits
from cpuspec.cli.inputs import (check_model_name, refuse_shape_true, registry,
                                resolve_model)
from cpuspec.cli.log import echo, log
from cpuspec.cli.options import (positive, save_options)
from cpuspec.cli.outputs import finish_outputs, guarded, prepare_outputs
from cpuspec.report.measurements import render_quality
from cpuspec.machine.hardware import default_threads, detect_hardware
from cpuspec.harness.quality import run_quality
from cpuspec.inputs.registry import ModelError
from cpuspec.results.schema import SCHEMA_VERSION
from cpuspec.inputs.tasks import DEFAULT_TASKS, builtin_prompts



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
