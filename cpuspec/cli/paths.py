"""cpuspec paths: the same configuration measured in llama.cpp's programs, llama-server and
llama-cpp-python, and a load test of llama-server."""
from __future__ import annotations

import shlex
from pathlib import Path

import click

from cpuspec.llama import native

from cpuspec.harness import paths as core
from cpuspec.harness.bench import environment
from cpuspec.cli.checks import check_limits, check_spec_files
from cpuspec.cli.inputs import (check_model_name, check_pair, prompts_or_exit,
                                refuse_shape_true, registry, resolve_model)
from cpuspec.cli.log import echo, log
from cpuspec.cli.options import (finite, positive, save_options, task_list)
from cpuspec.cli.outputs import finish_outputs, guarded, prepare_outputs
from cpuspec.core.drafters import NAMES as DRAFTER_NAMES
from cpuspec.machine.hardware import default_threads, detect_hardware
from cpuspec.report.load import render_load
from cpuspec.report.paths import render_paths_screen
from cpuspec.inputs.registry import ModelError
from cpuspec.results.schema import SCHEMA_VERSION



def _chosen_paths(path_list: str, drafter: str, draft, llama_bin, build_native: bool,
                  native_rounds: bool) -> list[str]:
    """--paths as a list, checked against the drafter and the llama.cpp flags."""
    chosen = list(dict.fromkeys(p.strip() for p in path_list.split(",") if p.strip()))
    bad = [p for p in chosen if p not in core.ALL_PATHS]
    if not chosen or bad:
        raise click.BadParameter(f"unknown path {', '.join(bad) or repr(path_list)}; choose "
                                 f"from {', '.join(core.ALL_PATHS)}", param_hint="'--paths'")
    if core.REDECODE in chosen and drafter != "model":
        raise click.BadParameter(f"{core.REDECODE} imitates llama.cpp's draft model: it needs "
                                 "--drafter model", param_hint="'--paths'")
    if core.REDECODE in chosen and core.CPUSPEC not in chosen:
        raise click.BadParameter(f"{core.REDECODE} is timed against cpuspec's raw decoding: "
                                 f"add {core.CPUSPEC} to the list", param_hint="'--paths'")
    if drafter == "lookup" and draft:
        raise click.BadParameter("--drafter lookup drafts from the context and loads no draft "
                                 "model; drop --draft", param_hint="'--draft'")
    native_flags = [f for f, on in (("--llama-bin", llama_bin is not None),
                                    ("--build-native", build_native),
                                    ("--native-rounds", native_rounds)) if on]
    server_ok = [f for f in native_flags if f != "--native-rounds"]
    if native_flags and core.LLAMA_CPP not in chosen and (
            not set(core.SERVER_PATHS) & set(chosen) or len(server_ok) < len(native_flags)):
        raise click.UsageError(f"{', '.join(native_flags)} apply to the {core.LLAMA_CPP} path "
                               f"(--llama-bin and --build-native to {core.LLAMA_SERVER} too); "
                               f"add {core.LLAMA_CPP} to --paths")
    return chosen


def _server_flags(text: str | None, chosen: list[str]) -> tuple[str, ...] | None:
    """--server-flags as argv words, checked for what cpuspec sets itself (long, short and
    '=' forms): the speculative ones go to the SD server, the others to both servers
    (harness/paths.server_argv). -k, --p-min and --draft, which they replace in the SD server,
    are refused beside them where the server is the only path (other paths run them)."""
    from cpuspec.core.commands import OWN_SERVER_FLAGS, flag_name, split_server_flags
    if text is None:
        return None
    if not set(core.SERVER_PATHS) & set(chosen):
        raise click.UsageError(f"--server-flags applies to the {core.LLAMA_SERVER} paths; add "
                               f"{core.LLAMA_SERVER} to --paths")
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--server-flags'") from None
    names = [n for n in map(flag_name, words) if n is not None]
    taken = list(dict.fromkeys(n for n in names
                               if n in OWN_SERVER_FLAGS or n.startswith("--fim-")))
    if not words or taken:
        raise click.BadParameter(
            "cpuspec sets both servers' model, threads, context, host, port and slots"
            f"{': not ' + ', '.join(taken) if taken else ''}", param_hint="'--server-flags'")
    from cpuspec.llama.server import SECRET_FLAGS
    secret = [n for n in names if n in SECRET_FLAGS]
    if secret:   # the client sends no key, and a key is never kept in a results file
        raise click.BadParameter(f"{', '.join(secret)}: cpuspec's client sends no key to the "
                                 "servers it starts on 127.0.0.1; leave it out",
                                 param_hint="'--server-flags'")
    joined = [flag_name(w) for w in words if flag_name(w) is not None and "=" in w]
    if joined:
        raise click.BadParameter("llama.cpp reads a flag's value from the next word: "
                                 + ", ".join(f"{n} VALUE, not {n}=VALUE" for n in joined),
                                 param_hint="'--server-flags'")
    if not split_server_flags(words)[0]:
        raise click.BadParameter(
            "name the SD server's speculative flags (--spec-type, --spec-default, -md, "
            "--spec-draft-*, ...); the other flags are given to both servers",
            param_hint="'--server-flags'")
    ctx = click.get_current_context()
    beside = [flag for name, flag in (("k", "-k"), ("p_min", "--p-min"), ("draft", "--draft"))
              if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
    if beside and set(chosen) <= set(core.SERVER_PATHS):
        raise click.UsageError(
            f"{', '.join(beside)} would not reach the SD server, the only path measured: "
            "--server-flags replaces its speculative flags. Give them there "
            "(--spec-draft-n-max N, --spec-draft-p-min P, -md FILE), or leave --server-flags "
            "out")
    return words


def _native_bin_dir(chosen: list[str], build_native: bool, llama_bin):
    """Where llama.cpp's programs are (built first with --build-native): --llama-bin, else
    the first folder holding every program the chosen paths run, else the first holding one
    path's. The llama.cpp and llama-server paths whose programs are not there are dropped
    from `chosen`, with a note, where other paths remain; an error where none would."""
    need = {core.LLAMA_CPP: native.MEASURED, core.LLAMA_SERVER: (native.SERVER,),
            core.LLAMA_SERVER_CHAT: (native.SERVER,)}
    wanted = [p for p in chosen if p in need]
    try:
        built = native.build(log) if build_native else None
        if llama_bin is not None:   # a folder the user named must hold them: no fallback
            lacking = [t for p in wanted for t in need[p] if not native.program(llama_bin, t).is_file()]
            if lacking:
                raise click.UsageError(
                    f"{llama_bin} has no {', '.join(lacking)}; build llama.cpp's tools there, "
                    "run `cpuspec paths --build-native`, or leave the path out of --paths")
        bin_dir = llama_bin or built or native.find_bin_dir(None, [t for p in wanted
                                                                   for t in need[p]])
        for p in wanted if bin_dir is None else []:
            bin_dir = bin_dir or native.find_bin_dir(None, need[p])
    except native.NativeError as exc:
        raise click.ClickException(str(exc))
    missing = [p for p in wanted
               if bin_dir is None or not native.has_programs(bin_dir, need[p])]
    if missing:
        names = ", ".join(t for p in missing for t in need[p])
        where = "(give --llama-bin DIR, or --build-native)"
        if len(missing) == len(chosen):
            raise click.ClickException(f"nothing to measure: llama.cpp's {names} not found "
                                       f"{where}")
        log(f"llama.cpp: no {names} found {where}; measuring without the "
            f"{' and '.join(missing)} path")
        for p in missing:
            chosen.remove(p)
    return bin_dir


@click.command()
@click.option("--pair", help="Model pair from models.toml [default: the default pair].")
@click.option("--target", help="Target: a registered name, a GGUF file, OWNER/REPO[:QUANT] or "
              "ollama:NAME[:TAG] [default: the pair's].")
@click.option("--draft", help="Draft, named as --target [default: the pair's].")
@click.option("-k", "--draft-len", "k", type=click.IntRange(1, 32), default=4, show_default=True,
              help="Draft tokens per round (llama.cpp's --spec-draft-n-max).")
@click.option("--drafter", type=click.Choice(DRAFTER_NAMES), default="model",
              show_default=True, help="As for `cpuspec bench`.")
@click.option("--tasks", callback=task_list, default="json,code", show_default=True,
              help="Comma list of built-in tasks.")
@click.option("--prompts-per-task", type=click.IntRange(1, 16), default=5, show_default=True,
              help="Prompts per task (5 or more for an interval over all of them).")
@click.option("-n", "--max-tokens", type=click.IntRange(2, 1024), default=64, show_default=True,
              help="Tokens generated per prompt.")
@click.option("-t", "--threads", type=int, callback=positive,
              help="Threads for every path [default: the physical cores].")
@click.option("--paths", "path_list", default="cpuspec,llama-cpp-python,llama.cpp,llama-server",
              show_default=True, help="Comma list of cpuspec, cpuspec+redecode, "
              "llama-cpp-python, llama.cpp, llama-server, llama-server-chat (the same "
              "servers asked at /v1/chat/completions, as an OpenAI client asks; llama.cpp's "
              "programs: left out, with a note, where they are not built).")
@click.option("--llama-bin", type=click.Path(path_type=Path, file_okay=False),
              help="Folder with llama.cpp's llama-speculative-simple, llama-completion and "
                   "llama-server [default: $CPUSPEC_LLAMA_BIN, cpuspec's build, then PATH].")
@click.option("--p-min", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0,
              callback=lambda c, p, v: finite(v, "--p-min"),
              show_default=True, help="Gate every path's drafts on the draft's confidence, as "
              "llama.cpp's --spec-draft-p-min (not llama-cpp-python's DraftModel).")
@click.option("--server-flags", metavar="FLAGS",
              help="The SD server's speculative flags in place of the configuration's, e.g. "
                   "'--spec-type ngram-mod' or '--spec-default' (llama-server path only).")
@click.option("--build-native", is_flag=True, help="Build llama.cpp's programs from the "
              "installed llama-cpp-python's sources first (once, ~15 min on 2 cores).")
@click.option("--native-rounds", is_flag=True, help="Run llama.cpp's SD once more per prompt, "
              "untimed, logging each round's accepted/drafted.")
@click.option("--prompts", "prompts_file", type=click.Path(path_type=Path),
              help="Your own prompts (JSONL, as for `cpuspec bench`); --tasks then picks "
                   "among its tasks.")
@click.option("--concurrency", metavar="1,2,4", help="Load test: llama-server, plain and with "
              "SD, with this many requests in flight (-np N), each level in turn.")
@click.option("--batches", type=click.IntRange(1, 50), default=12, show_default=True,
              help="With --concurrency: the most batches per level and server; a level stops "
                   "at the first look (5, 8, 12 batches) that decides it (5+: an interval).")
@click.option("--fixed", is_flag=True,
              help="With --concurrency: run every batch of every level (the fixed design).")
@click.option("--requests-per-client", type=click.IntRange(1, 20), default=1,
              show_default=True, help="With --concurrency: requests each client sends per "
              "batch, one after another.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write JSON here.")
@save_options
def paths(pair, target, draft, k, drafter, tasks, prompts_per_task, max_tokens, threads,
          path_list, llama_bin, p_min, server_flags, build_native, native_rounds, prompts_file,
          concurrency, batches, fixed, requests_per_client, json_path, save, force):
    """Does the speedup reach your stack? One configuration through cpuspec's loop,
    llama-cpp-python (with cpuspec.DraftModel) and llama.cpp's own programs, each SD ×raw.

    \b
    Examples:
      cpuspec paths --target T.gguf --draft D.gguf -k 7
      cpuspec paths --paths cpuspec,cpuspec+redecode,llama.cpp --build-native
      cpuspec paths --paths cpuspec,llama-server --server-flags '--spec-type ngram-mod'
      cpuspec paths --target T.gguf --draft D.gguf -k 7 --concurrency 1,2,4
    """
    from cpuspec.llama.engine import EngineError
    levels = _levels(concurrency)
    _check_load_flags(levels, path_list, prompts_file, tasks)
    if levels:   # a load test runs the server path alone
        path_list = core.LLAMA_SERVER
    chosen = _chosen_paths(path_list, drafter, draft, llama_bin, build_native, native_rounds)
    # with a prompts file, --tasks picks among its tasks (as for bench); alone, the suites
    given_tasks = click.get_current_context().get_parameter_source("tasks") == \
        click.core.ParameterSource.COMMANDLINE
    prompts = prompts_or_exit(tasks if given_tasks or not prompts_file else None, prompts_file,
                              prompts_per_task)
    extra = _server_flags(server_flags, chosen)
    if p_min and (drafter == "lookup" or {core.LLAMA_CPP_PYTHON, core.REDECODE} & set(chosen)):
        raise click.UsageError("--p-min gates a draft model's drafts: it needs --drafter model "
                               f"or hybrid, and {core.LLAMA_CPP_PYTHON}'s DraftModel and the "
                               f"{core.REDECODE} imitation have no gate (leave them out of "
                               "--paths)")
    threads = threads or default_threads()
    check_limits([k], max_tokens, [threads], None)
    check_pair(pair)
    reg = registry()
    names = [target or reg.pair(pair).target] + ([] if drafter == "lookup" else
                                                 [draft or reg.pair(pair).draft])
    bin_dir = _paths_preflight(reg, names, chosen, build_native, llama_bin)
    check_spec_files(Path(names[0]), extra)
    sink = prepare_outputs([json_path], [Path(n) for n in names if n.endswith(".gguf")],
                            force, save, "paths", detect_hardware().cpu_model)
    with guarded(sink):
        try:
            files = [resolve_model(reg, n).path for n in names]
            cfg = core.PathsConfig(files[0], files[1] if len(files) > 1 else None, k, drafter,
                                   prompts, max_tokens, threads, tuple(chosen), bin_dir,
                                   native_rounds, extra, p_min)
            save_doc = lambda d: sink({"schema_version": SCHEMA_VERSION, **d})  # noqa: E731
            doc = _load_test(cfg, levels, batches, requests_per_client, save_doc, fixed) \
                if levels \
                else core.measure_paths(cfg, environment(threads), log, save_doc)
        except (ModelError, EngineError, native.NativeError, ValueError) as exc:
            raise click.ClickException(str(exc))
        save_doc(doc)
    source = str(json_path) if json_path else "RUN"
    echo(render_load(doc, source) if levels else render_paths_screen(doc, source))
    finish_outputs(sink)


def _paths_preflight(reg, names: list[str], chosen: list[str], build_native: bool,
                     llama_bin) -> Path | None:
    """Before any model loads: the model names (no shape-true file: its acceptance is noise),
    llama.cpp's programs where a path needs them, and $CPUSPEC_NATIVE_TIMEOUT_S."""
    for name in names:
        check_model_name(reg, name)
        refuse_shape_true(Path(name))   # by its metadata, whatever the file's name
    bin_dir = _native_bin_dir(chosen, build_native, llama_bin) \
        if {core.LLAMA_CPP, *core.SERVER_PATHS} & set(chosen) else None
    if bin_dir is not None:
        from cpuspec.llama.native import NativeError, call_timeout_s
        try:
            call_timeout_s()
        except NativeError as exc:
            raise click.UsageError(str(exc))
    return bin_dir


def _check_load_flags(levels: list[int], path_list: str, prompts_file, tasks) -> None:
    """Flags that cannot apply are refused (exit 2), never ignored: the load test's own
    flags without --concurrency, another --paths with it."""
    ctx = click.get_current_context()
    given = {name for name in ("batches", "requests_per_client", "path_list", "tasks", "fixed")
             if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}
    if not levels and given & {"batches", "requests_per_client", "fixed"}:
        raise click.UsageError("--batches, --fixed and --requests-per-client go with "
                               "--concurrency")
    if levels and "path_list" in given and path_list.strip() != core.LLAMA_SERVER:
        raise click.UsageError("--concurrency load-tests llama-server alone: leave --paths "
                               "out (or give --paths llama-server)")


MAX_CONCURRENCY = 64   # clients are threads of this process: a load test, not a flood


def _levels(concurrency: str | None) -> list[int]:
    if concurrency is None:   # --concurrency '' is refused below, never the run without load
        return []
    try:
        levels = [int(x) for x in concurrency.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{concurrency!r}: a comma list of whole numbers, e.g. 1,2,4",
                                 param_hint="'--concurrency'")
    if not levels or not all(1 <= n <= MAX_CONCURRENCY for n in levels):
        raise click.BadParameter(f"{concurrency!r}: each level from 1 to {MAX_CONCURRENCY}",
                                 param_hint="'--concurrency'")
    return list(dict.fromkeys(levels))


def _load_test(cfg, levels: list[int], batches: int, per_client: int, save_doc,
               fixed: bool = False) -> dict:
    """`paths --concurrency`: harness/load.py with the paths command's server flags, each
    level stopping under the sequential design (--fixed: every batch)."""
    from cpuspec.analysis.sequential import ALPHA, PRECISION
    from cpuspec.harness.load import LoadConfig, measure_load
    texts, per_slot, followups = core.server_texts(cfg)
    lcfg = LoadConfig(cfg, tuple(levels), batches, per_client,
                      None if fixed else {"alpha": ALPHA, "precision": PRECISION})
    doc = measure_load(lcfg, environment(cfg.threads),
                       lambda n_ctx, sd: core.server_argv(cfg, n_ctx, sd), texts, per_slot,
                       log, save_doc)
    if followups:
        doc["followups"] = followups
    return doc
