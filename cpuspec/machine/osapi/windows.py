"""Windows: GetLogicalProcessorInformationEx for the topology, psutil for the process's
affinity, SetThreadAffinityMask for one thread's.

Each RelationProcessorCore record is one physical core: Flags (LTP_PC_SMT), EfficiencyClass
(higher = faster; all 0 on a non-hybrid part, P-cores 1 and E-cores 0 on Intel hybrids) and the
logical CPUs as (group, mask) pairs. llama.cpp does not read EfficiencyClass; cpuspec does, so
`--p-cores` means P-cores there too. A thread's mask covers processor group 0 only (the first 64
logical CPUs). Windows 11 may park or throttle threads it deems background (EcoQoS): docs/
laptops.md. The doors to the OS are GLPI, SET_THREAD_MASK and REGISTRY; tests replace them
with a buffer laid out by the documented structs and recorded values.
"""
from __future__ import annotations

import os
import re
import struct
from typing import Callable

from cpuspec.machine.osapi.common import (RawCore, Topology, mask_of, rank_groups,
                                          tier_names, umask)

NAME = "win32"
# whether thread_affinity(tid) can read another thread's CPUs (None then means: ended)
READS_THREAD_AFFINITY = False
# how a program's file is named, and where cmake puts llama.cpp's programs (MSVC: per config)
EXE_SUFFIX = ".exe"
BUILD_BIN_DIRS = ("build/bin/Release", "build/bin")
# what builds llama.cpp here, and the line that says how to get it
COMPILERS = ("cl", "clang-cl", "gcc")
INSTALL_TOOLCHAIN = ('Visual Studio Build Tools (the "Desktop development with C++" workload) and '
                     'CMake, and run from a "Developer PowerShell"; or install a prebuilt CPU wheel of '
                     'llama-cpp-python')
PINNING = "process"
# Why not "thread": a thread's mask must lie inside the process's, and a new thread starts with
# the process's mask, not its creator's (Linux: its creator's). llama.cpp's OpenMP workers for
# the draft would not stay on the draft's cores, so the draft gets no cores of its own here.
NO_THREAD_PINNING = ("Windows starts each new thread on the whole process's cores, so the "
                     "draft's llama.cpp threads cannot be held to cores of their own; "
                     "--p-cores/--e-cores pin the whole process")
RELATION_PROCESSOR_CORE, RELATION_CACHE, RELATION_ALL = 0, 2, 0xFFFF
LTP_PC_SMT = 0x1
CPU_KEY = r"HARDWARE\DESCRIPTION\System\CentralProcessor\0"


def _glpi_ctypes() -> bytes:   # pragma: no cover (Windows only)
    import ctypes
    k32 = ctypes.WinDLL("kernel32", use_last_error=True)
    size = ctypes.c_ulong(0)
    k32.GetLogicalProcessorInformationEx(RELATION_ALL, None, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    if not k32.GetLogicalProcessorInformationEx(RELATION_ALL, buf, ctypes.byref(size)):
        raise OSError(ctypes.get_last_error(), "GetLogicalProcessorInformationEx failed")
    return buf.raw[:size.value]


def _set_thread_mask_ctypes(mask: int) -> int:   # pragma: no cover (Windows only)
    import ctypes
    k32 = ctypes.WinDLL("kernel32", use_last_error=True)
    k32.GetCurrentThread.restype = ctypes.c_void_p
    k32.SetThreadAffinityMask.restype = ctypes.c_size_t
    k32.SetThreadAffinityMask.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    old = k32.SetThreadAffinityMask(k32.GetCurrentThread(), mask)
    if not old:
        raise OSError(ctypes.get_last_error(), "SetThreadAffinityMask failed")
    return old


def _registry_winreg(name: str) -> str | None:   # pragma: no cover (Windows only)
    try:
        import winreg
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, CPU_KEY) as key:
            return str(winreg.QueryValueEx(key, name)[0]).strip()
    except OSError:
        return None


GLPI: Callable[[], bytes] = _glpi_ctypes
SET_THREAD_MASK: Callable[[int], int] = _set_thread_mask_ctypes
REGISTRY: Callable[[str], str | None] = _registry_winreg


def _group_masks(buf: bytes, at: int, count: int) -> list[int]:
    """GROUP_AFFINITY[count] at `at`: (KAFFINITY Mask, WORD Group, WORD Reserved[3]) → the
    logical CPU ids (group × 64 + bit)."""
    cpus = []
    for i in range(count):
        mask, group = struct.unpack_from("<QH", buf, at + 16 * i)
        cpus += [group * 64 + b for b in range(64) if mask >> b & 1]
    return cpus


def _check_64_bit() -> None:
    """The layout below is 64-bit Windows' (KAFFINITY is 8 bytes): a 32-bit Python reads
    other offsets."""
    import struct as _s
    if _s.calcsize("P") != 8:
        raise OSError("cpuspec reads Windows' processor records as a 64-bit Python does; "
                      "use a 64-bit Python")


def parse_glpi(buf: bytes) -> tuple[list[tuple[tuple[int, ...], int, bool]], int | None]:
    """SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX records → (cores as (cpus, EfficiencyClass,
    SMT), the largest cache's bytes). Layout (64-bit): Relationship DWORD, Size DWORD, then
    PROCESSOR_RELATIONSHIP {BYTE Flags, BYTE EfficiencyClass, BYTE Reserved[20], WORD
    GroupCount, GROUP_AFFINITY GroupMask[]} at 8 (masks at 32), or CACHE_RELATIONSHIP {BYTE
    Level, BYTE Associativity, WORD LineSize, DWORD CacheSize, DWORD Type, BYTE Reserved[18],
    WORD GroupCount, ...} at 8."""
    cores, llc, at = [], None, 0
    while at + 8 <= len(buf):
        relation, size = struct.unpack_from("<II", buf, at)
        if size < 8 or at + size > len(buf):
            raise ValueError(f"a processor record at byte {at} claims {size} bytes")
        if relation == RELATION_PROCESSOR_CORE:
            flags, eff = struct.unpack_from("<BB", buf, at + 8)
            (groups,) = struct.unpack_from("<H", buf, at + 30)
            cores.append((tuple(sorted(_group_masks(buf, at + 32, groups))), eff,
                          bool(flags & LTP_PC_SMT)))
        elif relation == RELATION_CACHE:
            (cache_bytes,) = struct.unpack_from("<I", buf, at + 12)
            llc = max(llc or 0, cache_bytes)
        at += size
    return cores, llc


def topology(root=None) -> Topology:
    _check_64_bit()
    cores, _ = parse_glpi(GLPI())
    groups = rank_groups([eff for _, eff, _ in cores])
    names = tier_names(len(groups), third="E")
    kinds = {v: names[i] for i, g in enumerate(groups) for v in g}
    if len(groups) == 3:     # Intel's low-power E-cores: the slowest of three classes
        kinds[groups[2][0]] = "LPE"
    raw = [RawCore(("0", str(i)), cpus, None, eff, kinds[eff], None)
           for i, (cpus, eff, _) in enumerate(cores)]
    method = "EfficiencyClass" if len(groups) > 1 else "not hybrid"
    return Topology(tuple(sorted(raw, key=lambda c: c.cpus[0])), method,
                    REGISTRY("ProcessorNameString") or "unknown", _cpu_id(), frozenset())


def _cpu_id() -> str | None:
    """'Intel64 Family 6 Model 154 Stepping 3' (the registry's Identifier) → 'family 6 model
    154 stepping 3', as Linux's /proc/cpuinfo gives it."""
    ident = REGISTRY("Identifier") or ""
    m = re.search(r"Family (\d+) Model (\d+) Stepping (\d+)", ident)
    return f"family {m[1]} model {m[2]} stepping {m[3]}" if m else (ident or None)


def memory_total_bytes() -> int | None:
    try:
        import psutil
        return int(psutil.virtual_memory().total)
    except Exception:
        return None


def governor_turbo(root=None) -> tuple[str | None, str | None]:
    return None, None


def llc_bytes(root=None) -> int | None:
    try:
        return parse_glpi(GLPI())[1]
    except (OSError, ValueError):
        return None


def physical_cores_all() -> int:
    """llama.cpp's default threads on Windows: every RelationProcessorCore (P and E alike)."""
    return len(parse_glpi(GLPI())[0])


# --- where threads run ----------------------------------------------------------------------

def process_affinity() -> list[int]:
    import psutil
    return sorted(psutil.Process().cpu_affinity())


def pin_process(cpus: list[int]) -> None:
    """The process's affinity: Windows applies it to every thread it has and will have."""
    import psutil
    psutil.Process().cpu_affinity(sorted(cpus))


def pin_this_thread(cpus: list[int]) -> None:
    if max(cpus) >= 64:
        from cpuspec.machine.osapi.common import PinningUnsupported
        raise PinningUnsupported("a thread's cores on Windows must lie in processor group 0 "
                                 f"(CPUs 0-63); {max(cpus)} does not")
    SET_THREAD_MASK(mask_of(cpus))


def thread_affinity(tid: int) -> list[int] | None:
    return None   # Windows has no call that reads another thread's mask


def cpu_pressure_us(root=None) -> float | None:
    return None


# --- children and locks ---------------------------------------------------------------------
# CREATE_NEW_PROCESS_GROUP: the console's Ctrl-C reaches cpuspec, not the child directly (as a
# POSIX session does); CREATE_NO_WINDOW keeps a console program from opening a window.
CREATE_NEW_PROCESS_GROUP, CREATE_NO_WINDOW = 0x00000200, 0x08000000


def popen_kwargs(core_dump: bool = True, die_with_parent: bool = True) -> dict:
    # Windows writes no core files. A crashing child may show Windows' error dialog until its
    # time limit kills it (llama.cpp's programs run with one: $CPUSPEC_NATIVE_TIMEOUT_S).
    return {"creationflags": CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW}


def kill_tree(proc) -> None:
    """Kill the child and everything it started (psutil walks the tree: Windows has no
    process groups to signal)."""
    import psutil
    try:
        parent = psutil.Process(proc.pid)
        family = parent.children(recursive=True) + [parent]
    except psutil.Error:
        family = []
    for p in family:
        try:
            p.kill()
        except psutil.Error:
            pass
    if proc.returncode is None:
        try:
            proc.kill()
        except OSError:
            pass


def exited(proc) -> bool:
    return proc.poll() is not None


def locked(handle, wait: bool = True):
    """msvcrt.locking on the file's first byte, retried until it is ours (LK_NBLCK fails at
    once where LK_LOCK would give up after 10 s); wait=False: BlockingIOError at once where
    another holds it."""
    import contextlib
    import time

    @contextlib.contextmanager
    def hold():
        import msvcrt
        fd = handle.fileno()
        handle.seek(0)
        while True:
            try:
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                break
            except OSError:
                if not wait:
                    raise BlockingIOError("the lock is held") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            handle.seek(0)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    return hold()


def rusage() -> dict:
    """What Windows counts (psutil): context switches (no voluntary/involuntary split: all are
    given as voluntary) and page faults (no minor/major split: all as minor)."""
    import psutil
    p = psutil.Process()
    ctx, mem = p.num_ctx_switches(), p.memory_info()
    return {"voluntary_ctx_switches": ctx.voluntary, "involuntary_ctx_switches": None,
            "minor_page_faults": getattr(mem, "num_page_faults", None),
            "major_page_faults": None}


def load_average() -> float | None:
    """Windows keeps no load average (psutil emulates one only after a warm-up): None."""
    return None


def sync_disks() -> None:
    """Windows has no sync(); a file closed by this process is in the OS cache, which a read
    serves as Linux's page cache does: nothing to do."""


# --- EcoQoS ---------------------------------------------------------------------------------
# Windows 11 may run a process it deems background at low speed on the E-cores (EcoQoS);
# llama.cpp turns that off for itself (PR #12995). PROCESS_POWER_THROTTLING_STATE with
# ControlMask = EXECUTION_SPEED and StateMask = 0: "always run at full speed".
PROCESS_POWER_THROTTLING_CURRENT_VERSION = 1
PROCESS_POWER_THROTTLING_EXECUTION_SPEED = 0x1
PROCESS_POWER_THROTTLING = 4     # PROCESS_INFORMATION_CLASS ProcessPowerThrottling


def _set_power_throttling_ctypes(state: bytes) -> bool:   # pragma: no cover (Windows only)
    import ctypes
    k32 = ctypes.WinDLL("kernel32", use_last_error=True)
    k32.GetCurrentProcess.restype = ctypes.c_void_p
    buf = ctypes.create_string_buffer(state, len(state))
    return bool(k32.SetProcessInformation(ctypes.c_void_p(k32.GetCurrentProcess()),
                                          PROCESS_POWER_THROTTLING, buf, len(state)))


SET_POWER_THROTTLING: Callable[[bytes], bool] = _set_power_throttling_ctypes


def keep_full_speed() -> bool:
    """Ask Windows not to throttle this process (EcoQoS off), as llama.cpp does; False where
    the call failed (Windows 10 before 1709 has no such class)."""
    state = struct.pack("<III", PROCESS_POWER_THROTTLING_CURRENT_VERSION,
                        PROCESS_POWER_THROTTLING_EXECUTION_SPEED, 0)
    try:
        return SET_POWER_THROTTLING(state)
    except (OSError, AttributeError):
        return False
