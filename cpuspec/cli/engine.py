"""The llama.cpp build under cpuspec: the matrix-engine check before a command runs a model,
and `cpuspec rebuild` (llama-cpp-python from its sdist with cpuspec's ggml patches)."""
from __future__ import annotations

import sys

import click

from cpuspec.cli.log import echo, log
from cpuspec.llama import build, native

# The commands that decode in this process or start llama.cpp's programs: on a CPU with AMX
# each first makes sure the build survives a batched decode (llama/build.py).
RUNS_MODELS = {"bench", "contention", "costs", "paths", "quality", "tune", "heads"}


def check_llama_build(say) -> None:
    """On a CPU with AMX: probe the installed build once (a child-process decode); where it
    dies, rebuild it with the patch (saying so and how long) or, with $CPUSPEC_REBUILD=0 or a
    failed rebuild, one line and exit 2."""
    try:
        state = build.check_build(say, native.sdist_dir)
    except build.BuildCrash as exc:
        echo(str(exc), err=True)
        sys.exit(2)
    except (build.BuildError, native.NativeError) as exc:
        echo(f"cpuspec: the AMX build check failed: {str(exc).splitlines()[0][:300]} "
                   f"(`{build.FIX_COMMAND}` shows the whole output)", err=True)
        sys.exit(2)
    if state == "rebuilt" and "llama_cpp" in sys.modules:
        build.restart_command()     # the old library is loaded here: run again on the new one


@click.command()
@click.option("--probe-only", is_flag=True, help="Only run the child-process decode and say "
              "whether this build survives it; rebuild nothing.")
def rebuild(probe_only):
    """Rebuild llama-cpp-python with cpuspec's ggml patches (the AMX tile fix).

    Builds the installed llama-cpp-python's version again from its sdist (the one `paths
    --build-native` uses), with the patches in cpuspec/llama/patches applied, and installs it
    in place with pip ($CMAKE_ARGS as for the first install); then decodes a 4-token batch in
    a child process. One build: about 5-10 minutes on 2 cores. cpuspec does this by itself
    the first time a command would crash on a CPU with AMX (set CPUSPEC_REBUILD=0 to be asked
    instead).

    \\b
    Examples:
      cpuspec rebuild
      cpuspec rebuild --probe-only
    """
    if not probe_only:
        try:
            with build.rebuild_lock(log):
                build.rebuild(log, native.sdist_dir(log))
        except (build.BuildError, native.NativeError) as exc:
            raise click.ClickException(str(exc))
    result = build.probe()
    if result.ok:
        build.remember(result, rebuilt=not probe_only)
    how = "survives" if result.ok else f"dies ({result.death})"
    engine = "the matrix engine ran it" if result.uses_amx else "no matrix engine ran it"
    echo(f"child-process decode of a 4-token batch: {how} in {result.seconds:.1f} s"
               + (f"; {engine}" if result.ok else ""))
    if not result.ok:
        sys.exit(2)
