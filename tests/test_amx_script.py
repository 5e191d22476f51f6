"""Issue 68: bench/amx_vs_noamx.sh has never run (no machine of the project's since it was
written has AMX). What can be checked without one: every cpuspec command it runs parses
with today's CLI (options, choices, files), so a renamed flag fails here, not hours into
the first AMX machine's session; and on a CPU without AMX it exits 2 before building."""
import re
import shlex
import subprocess
from pathlib import Path

import click
import pytest

from cpuspec.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "amx_vs_noamx.sh"
# the loop variables, one value each ($p: every pair the loop names, checked in
# test_the_script_runs_every_stage_it_names)
LOOPS = {"${p#qwen2.5-coder-1.5b}": "", '"$p"': "qwen2.5-coder-1.5b-q8_0", '"$t"': "2",
         "$b": "amx"}


def invocations() -> list[list[str]]:
    """The cpuspec arguments of each `run NAME BUILD …` and `cs BUILD …` line."""
    out = []
    for line in SCRIPT.read_text().replace("\\\n", " ").splitlines():
        m = re.search(r'\brun "[^"]+" "\$b" (.*?)(;|$)', line) or \
            re.search(r'\bcs "\$b" ([a-z].*?)(>|;|$)', line)
        if m:
            text = m.group(1)
            for var, value in LOOPS.items():
                text = text.replace(var, value)
            args = shlex.split(text)
            out.append(args if "--json" in args or args[0] in ("hw", "rebuild")
                       else args + ["--json", "out.json"])   # run() adds --json
    return out


def parse(args: list[str]) -> click.Command:
    import warnings
    ctx = main.make_context("cpuspec", list(args))
    cmd = main
    while isinstance(cmd, click.Group):
        with warnings.catch_warnings():   # click 8.2 keeps the command's name apart still
            warnings.simplefilter("ignore", DeprecationWarning)
            left = [*ctx.protected_args, *ctx.args]
        name, cmd, rest = cmd.resolve_command(ctx, left)
        ctx = cmd.make_context(name, rest, parent=ctx)
    return cmd


def test_the_script_runs_every_stage_it_names():
    found = invocations()
    assert {a[0] for a in found} == {"hw", "rebuild", "costs", "bench", "tune", "paths",
                                     "heads"}, found
    costs = [a for a in found if a[0] == "costs"]   # the cost curves, sizes and the MoE
    assert {next((o for o in ("--pair", "--sizes", "--pairs") if o in a), None)
            for a in costs} == {"--pair", "--sizes", "--pairs"}, costs
    # the pairs the costs loop walks are registered ones
    from cpuspec.inputs.registry import load_registry
    loop = re.search(r"for p in ([^;]+);", SCRIPT.read_text()).group(1).split()
    assert loop and set(loop) <= set(load_registry().pairs), loop


@pytest.mark.parametrize("args", invocations(), ids=lambda a: " ".join(a)[:60])
def test_each_cpuspec_command_of_the_script_parses(args, monkeypatch):
    monkeypatch.chdir(ROOT)   # its prompt files are named from the repository's root
    parse(args)


def test_without_amx_it_stops_before_building(tmp_path):
    if "amx_tile" in Path("/proc/cpuinfo").read_text():
        pytest.skip("this CPU has AMX")
    res = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "amx")})
    assert res.returncode == 2 and "has no AMX" in res.stderr
    assert not (ROOT / ".venv-noamx").exists() and not (tmp_path / "amx").exists()
