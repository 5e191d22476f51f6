"""`cpuspec heads`: the methods vendors claim (EAGLE-3, DFlash, DSpark) and a classic draft
model, each priced in llama-server on this CPU with shape-true files (issue 58)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from cpuspec.cli.inputs import prompts_or_exit, registry
from cpuspec.cli.log import echo, log
from cpuspec.cli.options import positive, save_options
from cpuspec.cli.outputs import finish_outputs, guarded, prepare_outputs

ALL = ("eagle3", "dflash", "dspark", "mtp", "mtp-file", "draft")


def _methods(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in names if m not in ALL]
    if bad or not names:
        raise click.BadParameter(f"{', '.join(bad) or 'none given'}: choose from "
                                 f"{', '.join(ALL)}", param_hint="'--methods'")
    return list(dict.fromkeys(names))


def _lengths(text: str, k: int) -> list[float]:
    try:
        xs = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: numbers, e.g. 2,3.5,5", param_hint="'--lengths'")
    bad = [x for x in xs if not 1.0 <= x <= k + 1]
    if bad or not xs:
        raise click.BadParameter(f"{', '.join(map(str, bad)) or 'none given'}: each L must lie in "
                                 f"[1, k + 1] = [1, {k + 1}] (tokens a round keeps, the target's "
                                 "own included)", param_hint="'--lengths'")
    return list(dict.fromkeys(xs))


@click.command()
@click.option("--on", "target", default="qwen3-4b", show_default=True,
              help="The shape-true target the heads are published for (qwen3-4b, qwen3-8b; "
                   "qwen3.5-0.8b for mtp, its own MTP layer).")
@click.option("--methods", default="eagle3,dflash,dspark,draft", show_default=True,
              help="eagle3, dflash, dspark (shape-true heads as published), mtp (the target's "
                   "own MTP layer, draft-mtp), mtp-file (the same layer from its MTP-only "
                   "file, convert_hf_to_gguf --mtp, as -md) and draft (a shape-true "
                   "Qwen3-0.6B draft model, llama.cpp's draft-simple).")
@click.option("--quant", type=click.Choice(["Q4_K_M", "Q4_0", "Q8_0"]), default="Q4_K_M",
              show_default=True, help="The shape-true target's quant type (and its draft "
                                      "model's, for draft): Q4_0 is the fastest plain here.")
@click.option("--lengths", default="2,3.5,5", show_default=True,
              help="Synthetic acceptance lengths L (tokens a round keeps, 1..k+1).")
@click.option("-k", "--draft-len", "k", type=click.IntRange(1, 15), default=6,
              show_default=True, help="Drafts per round (--spec-draft-n-max); DSpark ≤ 7.")
@click.option("-n", "--max-tokens", type=click.IntRange(8, 2048), default=128,
              show_default=True, help="Tokens a request generates: enough for whole rounds "
              "(llama-server drafts at most the tokens left; rounds that average under "
              "k − 0.2 drafts are flagged).")
@click.option("--prompts-per-task", type=click.IntRange(1, 16), default=3, show_default=True,
              help="Built-in json and code prompts each (5 or more in all give an interval).")
@click.option("-t", "--threads", type=int, callback=positive,
              help="Threads [default: the physical cores in this process's affinity].")
@click.option("--llama-bin", type=click.Path(path_type=Path, file_okay=False),
              help="A folder with llama-server (default: `cpuspec paths --build-native`'s).")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write JSON here.")
@save_options
def heads(target, methods, quant, lengths, k, max_tokens, prompts_per_task, threads, llama_bin,
          json_path, save, force):
    """Price EAGLE-3, DFlash, DSpark and a draft model in llama-server on this CPU.

    Each head is written shape-true (the published architecture and shapes, random weights:
    real costs, no real acceptance) beside a shape-true target; acceptance is given to
    llama-server (--spec-synth-len L), so the table says what each method buys here at each
    acceptance length, and where it breaks even. The methods' published acceptance lengths
    are then priced with the measured costs (labelled: published, not measured here).

    \b
    Examples:
      cpuspec heads
      cpuspec heads --on qwen3-8b --methods eagle3,draft --lengths 2,3 -k 3
      cpuspec heads --on qwen3.5-0.8b --methods mtp,mtp-file -k 1 --lengths 1.5,2
      cpuspec heads --methods eagle3 --quant Q4_0 --lengths 2,4
    """
    from cpuspec.harness.bench import environment
    from cpuspec.harness.heads import (HeadsConfig, chat_texts, context_for, measure_heads,
                                       probe_verify)
    from cpuspec.inputs.heads import head_of
    from cpuspec.inputs.registry import ModelError
    from cpuspec.inputs.shapes import ShapeError, shape_of
    from cpuspec.llama import native
    from cpuspec.llama.engine import EngineError
    from cpuspec.machine.hardware import default_threads, detect_hardware
    from cpuspec.report.heads import render_heads
    chosen, threads = _methods(methods), threads or default_threads()
    Ls = _lengths(lengths, k)
    try:
        shape = shape_of(target)
        _check_target(shape, chosen)
        plan = [head_of(m, target) for m in chosen if m not in ("draft", "mtp", "mtp-file")]
    except ShapeError as exc:
        raise click.UsageError(str(exc))
    too_long = [h.block_size for h in plan if h.method == "dspark" and k > h.block_size]
    if too_long:
        raise click.UsageError(f"-k {k}: DSpark drafts at most its block ({too_long[0]} "
                               f"tokens here); use -k {too_long[0]} or less")
    bin_dir = _server_bin(llama_bin)
    prompts = prompts_or_exit(["json", "code"], None, prompts_per_task, ["json", "code"])
    hw = detect_hardware()
    sink = prepare_outputs([json_path], [], force, save, "heads", hw.cpu_model)
    with guarded(sink):
        try:
            target_path, drafters = _files(shape, plan, chosen, quant)
            texts, longest = chat_texts(target_path, prompts)
            cfg = HeadsConfig(target_path, tuple(drafters), tuple(Ls), k, texts, max_tokens,
                              threads, bin_dir, context_for(longest, max_tokens, k))
            log("heads: the target's V(1)..V(k + 1) (β), in cpuspec's probe")
            settings = _settings(cfg, shape, plan, chosen, prompts) | {"target_quant": quant}
            settings["verify_probe_s"] = probe_verify(target_path, next(iter(texts.values())),
                                                      k, threads)
            doc = measure_heads(cfg, environment(threads), settings, log, sink)
        except (ShapeError, ModelError, EngineError, native.NativeError, ValueError) as exc:
            raise click.ClickException(str(exc))
        sink(doc)
    echo(render_heads(doc))
    finish_outputs(sink)


def _check_target(shape, chosen: list[str]) -> None:
    """mtp needs a target with MTP layers; draft a smaller model of the family's tokenizer
    (Qwen3.5 has none below 0.8B)."""
    from cpuspec.inputs.shapes import ShapeError
    mtp = [m for m in chosen if m.startswith("mtp")]
    if mtp and not shape.mtp_layers:
        raise ShapeError(f"{shape.name} has no MTP layer for --methods {mtp[0]}: qwen3.5-0.8b "
                         "has one (draft-mtp)")
    if "draft" in chosen and shape.arch == "qwen35":
        raise ShapeError(f"{shape.name}: no smaller Qwen3.5 shares its tokenizer to draft "
                         "with; leave draft out of --methods")
    if "draft" in chosen and shape.arch not in ("qwen2", "qwen3", "qwen3moe"):
        from cpuspec.inputs.shapes import family
        raise ShapeError(f"{shape.name} is {family(shape)}: the draft method's drafts are Qwen's "
                         "smallest (Qwen3-0.6B, Qwen2.5-0.5B), a draft of another family; "
                         "leave draft out of --methods")


def _files(shape, plan, chosen: list[str], quant: str = "Q4_K_M"):
    """The shape-true target (at `quant`), each head (Q8_0), the target's own MTP layer and the
    classic draft model (a shape-true Qwen3-0.6B at `quant`), written once and cached, all
    with one tokenizer."""
    import psutil

    from cpuspec.cli.models import SHAPE_TOKENIZER
    from cpuspec.harness.heads import Drafter
    from cpuspec.inputs.models import fetch_model
    from cpuspec.inputs.shapes import shape_of
    from cpuspec.llama.shape_true import write_head, write_mtp_only, write_shape_true
    tokenizer = fetch_model(registry().model(SHAPE_TOKENIZER), log).path
    memory = psutil.virtual_memory().total
    target = write_shape_true(shape, quant, tokenizer, memory, log)
    drafters = [Drafter(h.method, write_head(h, "Q8_0", tokenizer, memory, log),
                        f"{h.method} ({h.layers} layer{'s' * (h.layers > 1)})") for h in plan]
    if "mtp" in chosen:   # in the target's own file
        drafters.append(Drafter("mtp", target, f"mtp ({shape.mtp_layers} layer in the target)"))
    if "mtp-file" in chosen:   # the same layer, from its own file as the converter's --mtp
        drafters.append(Drafter("mtp-file", write_mtp_only(shape, quant, tokenizer, memory, log),
                                "mtp-file (MTP-only file, -md)"))
    if "draft" in chosen:   # the family's smallest model: Qwen3-0.6B, or Qwen2.5-0.5B
        small = shape_of("qwen3-0.6b" if shape.arch.startswith("qwen3") else "qwen2.5-0.5b")
        drafters.append(Drafter("draft", write_shape_true(small, quant, tokenizer, memory,
                                                          log), f"draft model {small.name}"))
    return target, drafters


def _settings(cfg, shape, plan, chosen, prompts) -> dict:
    from cpuspec.inputs.shapes import SHAPE_TRUE
    return {"target": str(cfg.target), "target_shape": shape.name, "label": SHAPE_TRUE,
            "k": cfg.k, "lengths": list(cfg.lengths), "methods": chosen,
            "heads": {h.method: {"name": h.name, "layers": h.layers,
                                 "block_size": h.block_size, "draft_vocab": h.draft_vocab,
                                 "target_layers": list(h.target_layers), "source": h.source,
                                 "quant": "Q8_0"} for h in plan}
            | {m: {"name": f"mtp-{shape.name}", "layers": shape.mtp_layers,
                   "block_size": None, "draft_vocab": None, "target_layers": [],
                   "source": "the target's own MTP layer (Qwen/Qwen3.5-0.8B config.json "
                             "mtp_num_hidden_layers)" + (", as an MTP-only file (convert_hf_to_"
                                                        "gguf.py --mtp)" if m != "mtp" else ""),
                   "quant": "target's"} for m in chosen if m.startswith("mtp")},
            "max_tokens": cfg.max_tokens, "threads": cfg.threads, "n_prompts": len(prompts),
            "prompts": [p.prompt_id for p in prompts], "argv": ["cpuspec", *sys.argv[1:]]}


def _server_bin(llama_bin):
    from cpuspec.llama import native
    try:
        bin_dir = native.find_bin_dir(llama_bin, need=[native.SERVER])
    except native.NativeError as exc:
        raise click.UsageError(str(exc))
    if bin_dir is None:
        raise click.UsageError("no llama-server found: run `cpuspec paths --build-native` once "
                               "(~15 min), or give --llama-bin DIR")
    return bin_dir
