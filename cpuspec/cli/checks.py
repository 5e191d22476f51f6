"""Refusals before any work: limits, gates, depths, flags that cannot apply, offload on a CPU-only build."""
from __future__ import annotations


import math
from pathlib import Path

import click

from cpuspec.machine.hardware import MAX_THREADS_PER_CPU, logical_cpu_count
from cpuspec.inputs.tasks import depth_bound

def check_gate(p_min, n_min, drafter, policies, schedule, temperature=0.0,
               ks=None) -> None:
    """--p-min/--n-min gate the static policy's draft model (the hybrid's model part too);
    n-min above k would drop every draft."""
    if not any(p_min) and not n_min:
        return
    given = ", ".join(f for f, on in (("--p-min", any(p_min)), ("--n-min", n_min)) if on)
    verb = "gate" if "," in given else "gates"
    if ks and n_min > min(ks):
        raise click.BadParameter(f"{n_min} is more than k = {min(ks)}: every round would drop "
                                 "its drafts (llama.cpp drops a draft shorter than n-min)",
                                 param_hint="'--n-min'")
    if drafter == "lookup":
        raise click.UsageError(f"{given} {verb} a draft model's drafts on its confidence; "
                               "--drafter lookup has none (use --drafter model or hybrid)")
    if not policies:
        raise click.UsageError(f"{given} {verb} SD's drafts; --policy off runs raw decoding "
                               "only (use --policy static)")
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


# Draft lengths above this probe 33+ batch sizes and leave acceptance statistics empty: no CPU
# (or GPU) pays at such k (llama.cpp's --draft-max defaults to 16).
MAX_K = 32




# A sweep bigger than this runs for hours; ask for --yes.
MAX_SWEEP_POINTS = 200


# Prompts × repetitions above this (the built-in suites have 8 per task) run for hours: ask
# for --yes, as for a sweep.
MAX_GENERATIONS = 200


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
        raise click.UsageError(
            f"{n_prompts} prompts × {repetitions} repetition(s) is more than "
            f"{MAX_GENERATIONS} generations per mode (hours of measuring); use "
            "--prompts-per-task to take fewer, or pass --yes to run them all")
    if n_points > MAX_SWEEP_POINTS and not yes:
        raise click.UsageError(
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
    limit = MAX_THREADS_PER_CPU * logical_cpu_count()
    for t in list(threads or []) + ([draft_threads] if draft_threads else []):
        if t > limit:
            raise click.BadParameter(
                f"{t} is more than {limit} ({MAX_THREADS_PER_CPU} per logical CPU of this "
                "machine): the threads would only queue for the CPUs",
                param_hint="'--threads'")


def check_spec_files(target: Path, server_flags: tuple[str, ...] | None) -> None:
    """Before any server starts: a head given with --server-flags (-md HEAD, --spec-type
    draft-eagle3 | draft-dflash | draft-dspark) must fit the target (its width, the target
    layers it reads), and draft-mtp without a head needs a target with MTP layers: each
    mismatch is one line and exit 2, not a server that dies loading."""
    from cpuspec.core.commands import flag_name
    from cpuspec.llama.gguf_meta import GGUFMetaError, read_meta
    words = list(server_flags or ())
    names = [flag_name(w) for w in words]
    head = next((words[i + 1] for i, n in enumerate(names)
                 if n in ("-md", "--model-draft", "--spec-draft-model")
                 and i + 1 < len(words)), None)
    types = ",".join(words[i + 1] for i, n in enumerate(names)
                     if n == "--spec-type" and i + 1 < len(words))
    if not target.is_file() or not (head or "draft-mtp" in types):
        return
    try:
        t = read_meta(target)
        h = read_meta(Path(head)) if head else None
    except GGUFMetaError as exc:
        raise click.UsageError(str(exc))
    arch = t.get("general.architecture")
    if "draft-mtp" in types and not head and not t.get(f"{arch}.nextn_predict_layers"):
        raise click.UsageError(f"{target.name} ({arch}) has no MTP layers ({arch}."
                               "nextn_predict_layers): --spec-type draft-mtp needs a target "
                               "that carries them (Qwen3.5, Qwen3-Next) or an MTP file (-md)")
    if h is None:
        return
    from cpuspec.core.text import printable   # file names reach the terminal cleaned
    head, target = printable(head), Path(printable(str(target)))
    harch = h.get("general.architecture")
    width = t.get(f"{arch}.embedding_length")
    layers = t.get(f"{arch}.block_count")
    want = h.get("eagle3.target_hidden_size") if harch == "eagle3" else \
        h.get("dflash.embedding_length") if harch == "dflash" else None
    if want is not None and width is not None and want != width:
        raise click.UsageError(f"{Path(head).name} is a {harch} head for a target {want} wide; "
                               f"{target.name} is {width} wide: give the head made for it")
    reads = h.get(f"{harch}.target_layers") or []
    if layers is not None and reads and max(reads) >= layers:
        raise click.UsageError(f"{Path(head).name} reads target layer {max(reads)}; "
                               f"{target.name} has {layers}: give the head made for it")
