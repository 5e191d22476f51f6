"""macOS: sysctl for the topology, no thread affinity at all.

Apple silicon has performance and efficiency clusters, listed by `hw.nperflevels` and
`hw.perflevelN.{name,physicalcpu,logicalcpu,l2cachesize}` (perflevel0 the fastest); memory is
`hw.memsize`, the name `machdep.cpu.brand_string`, the ISA `hw.optional.arm.FEAT_*`. macOS has
no affinity API (ggml's affinity call is a no-op there; psutil has no cpu_affinity): a program
chooses only how many threads it runs, so the CPU ids below are nominal, numbered as macOS
numbers them (efficiency cores first on Apple silicon). SYSCTL is the one door to the OS here:
sysctlbyname through ctypes, or `sysctl -n` where that fails; tests replace it with recorded
values of published machines.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
from typing import Callable

from cpuspec.machine.osapi import posix
from cpuspec.machine.osapi.common import PinningUnsupported, RawCore, Topology, umask

NAME = "darwin"
# whether thread_affinity(tid) can read another thread's CPUs (None then means: ended)
READS_THREAD_AFFINITY = False
# how a program's file is named, and where cmake puts llama.cpp's programs (MSVC: per config)
EXE_SUFFIX = ""
BUILD_BIN_DIRS = ("build/bin",)
# what builds llama.cpp here, and the line that says how to get it
COMPILERS = ("cc", "clang")
INSTALL_TOOLCHAIN = ("Xcode's command-line tools and CMake: `xcode-select --install`, then `brew "
                     'install cmake`')
PINNING = "none"
NO_PINNING = ("macOS lets no program choose the cores its threads run on (no affinity API); "
              "only the thread count can be set: use --threads N")
# hw.optional.arm.FEAT_* that decide which ggml kernels run, as Linux on Arm names them.
ARM_FEATURES = {"FEAT_DotProd": "asimddp", "FEAT_I8MM": "i8mm", "FEAT_BF16": "bf16",
                "FEAT_SME": "sme", "FEAT_SME2": "sme2"}


def _sysctl_c(name: str, kind: type) -> str | int | None:
    """sysctlbyname: `kind` int (the value's bytes, little-endian) or str (text)."""
    try:
        libc = ctypes.CDLL("/usr/lib/libc.dylib")
    except OSError:
        return _sysctl_cmd(name, kind)
    size = ctypes.c_size_t(0)
    if libc.sysctlbyname(name.encode(), None, ctypes.byref(size), None, 0) != 0:
        return None
    buf = ctypes.create_string_buffer(size.value)
    if libc.sysctlbyname(name.encode(), buf, ctypes.byref(size), None, 0) != 0:
        return None
    raw = buf.raw[:size.value]
    return int.from_bytes(raw, "little") if kind is int else \
        raw.rstrip(b"\0").decode(errors="replace")


def _sysctl_cmd(name: str, kind: type) -> str | int | None:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True,
                             timeout=5)
        return kind(out.stdout.strip()) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


# The one door to the OS: SYSCTL(name, int | str) → the value, or None where the name is not
# there. Tests set it to a recorded machine's values.
SYSCTL: Callable[[str, type], str | int | None] = _sysctl_c


def _int(name: str) -> int | None:
    v = SYSCTL(name, int)
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _str(name: str) -> str | None:
    v = SYSCTL(name, str)
    return str(v) if v not in (None, "") else None


def cpu_flags() -> frozenset[str]:
    return frozenset(flag for feat, flag in ARM_FEATURES.items()
                     if _int(f"hw.optional.arm.{feat}") == 1)


def topology(root=None) -> Topology:
    """Cores per perf level; CPU ids numbered from the slowest level up (as macOS numbers
    Apple silicon's CPUs). An Intel Mac (no perf levels) is one level of hw.physicalcpu
    cores with hw.logicalcpu CPUs."""
    levels = _int("hw.nperflevels") or 0
    cores: list[RawCore] = []
    specs = []
    for i in range(levels):
        phys, logical = _int(f"hw.perflevel{i}.physicalcpu"), _int(f"hw.perflevel{i}.logicalcpu")
        if phys:
            specs.append((i, phys, logical or phys, _str(f"hw.perflevel{i}.name")))
    if not specs:
        phys = _int("hw.physicalcpu") or os.cpu_count() or 1
        specs = [(0, phys, _int("hw.logicalcpu") or phys, None)]
    kinds = {0: "P", 1: "E"} if len(specs) > 1 else {0: "P"}
    cpu = 0
    for level, phys, logical, name in sorted(specs, key=lambda s: -s[0]):
        per_core = max(1, logical // phys)
        for c in range(phys):
            cores.append(RawCore(("0", f"perflevel{level}", str(c)),
                                 tuple(range(cpu, cpu + per_core)), None, None,
                                 kinds.get(level, "E"), name))
            cpu += per_core
    method = "sysctl hw.perflevel" if levels else "sysctl hw.physicalcpu (one kind)"
    return Topology(tuple(sorted(cores, key=lambda c: c.cpus[0])),
                    method if len(specs) > 1 else "not hybrid",
                    _str("machdep.cpu.brand_string") or "Apple", _cpu_id(), cpu_flags())


def _cpu_id() -> str | None:
    fam = _int("hw.cpufamily")
    if fam is not None:
        return f"cpufamily 0x{fam & 0xFFFFFFFF:08x}"
    return None


def memory_total_bytes() -> int | None:
    return _int("hw.memsize")


def governor_turbo(root=None) -> tuple[str | None, str | None]:
    return None, None


def llc_bytes(root=None) -> int | None:
    return _int("hw.perflevel0.l2cachesize") or _int("hw.l2cachesize")


def physical_performance_cores() -> int | None:
    """llama.cpp's own default threads on macOS: hw.perflevel0.physicalcpu, else
    hw.physicalcpu (common.cpp, cpu_get_num_physical_cores)."""
    return _int("hw.perflevel0.physicalcpu") or _int("hw.physicalcpu")


# --- where threads run: nowhere a program can choose --------------------------------------

def process_affinity() -> list[int]:
    n = _int("hw.logicalcpu") or os.cpu_count() or 1
    return list(range(n))


def pin_process(cpus: list[int]) -> None:
    raise PinningUnsupported(NO_PINNING)


def pin_this_thread(cpus: list[int]) -> None:
    raise PinningUnsupported(NO_PINNING)


def thread_affinity(tid: int) -> list[int] | None:
    return None


def cpu_pressure_us(root=None) -> float | None:
    return None


# --- children and locks (POSIX; no PR_SET_PDEATHSIG on macOS) --------------------------------

def popen_kwargs(core_dump: bool = True, die_with_parent: bool = True) -> dict:
    return posix.popen_kwargs(None, core_dump)


# what Linux and macOS do alike (posix.py)
kill_tree, exited, locked, rusage = posix.kill_tree, posix.exited, posix.locked, posix.rusage
load_average, sync_disks = posix.load_average, posix.sync_disks
keep_full_speed = posix.keep_full_speed
