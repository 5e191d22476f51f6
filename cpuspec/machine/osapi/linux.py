"""Linux: sysfs and /proc for the topology, sched_setaffinity per thread, PSI for noise.

Hybrid Intel parts list their P-cores and E-cores in /sys/devices/cpu_core/cpus and
/sys/devices/cpu_atom/cpus (also under /sys/bus/event_source/devices/); Arm big.LITTLE parts give
each core a cpu_capacity (1024 for the fastest) and, on many SoCs, number cores per cluster
(core_id restarts in each cluster_id: the key is package, cluster, core). Without either,
cores are grouped by cpufreq/cpuinfo_max_freq; one group means "not hybrid". The filesystem
root is a parameter so tests can use fake trees. Nothing here writes to sysfs.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path

from cpuspec.machine.osapi import common, posix
from cpuspec.machine.osapi.common import (FREQ_GROUP_TOLERANCE, RawCore, Topology,
                                           parse_cpu_list, rank_groups, tier_names)

NAME = "linux"
# whether thread_affinity(tid) can read another thread's CPUs (None then means: ended)
READS_THREAD_AFFINITY = True
# how a program's file is named, and where cmake puts llama.cpp's programs (MSVC: per config)
EXE_SUFFIX = ""
BUILD_BIN_DIRS = ("build/bin",)
# what builds llama.cpp here, and the line that says how to get it
COMPILERS = ("cc", "gcc", "clang")
INSTALL_TOOLCHAIN = ('a C/C++ compiler and CMake: `sudo apt-get install build-essential cmake` '
                     "(Debian/Ubuntu) or your distribution's equivalent")
PINNING = "thread"
ROOT = Path("/")
PSI_CPU = "proc/pressure/cpu"
# Arm flags that decide which ggml kernels run: dot product, int8 matmul, SVE, SME.
ARM_FLAGS = ("asimddp", "i8mm", "sve", "sve2", "sme", "sme2", "bf16")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cpuinfo_blocks(root: Path) -> list[dict[str, str]]:
    blocks, cur = [], {}
    for line in (_read(root / "proc/cpuinfo") or "").splitlines():
        if not line.strip():
            if cur:
                blocks.append(cur)
            cur = {}
            continue
        key, _, value = line.partition(":")
        cur.setdefault(key.strip(), value.strip())
    if cur:
        blocks.append(cur)
    return blocks


def cpu_model(root: Path = ROOT) -> str:
    for b in _cpuinfo_blocks(root):
        for key in ("model name", "Model", "Hardware"):
            if b.get(key):
                return b[key]
    return platform.processor() or platform.machine() or "unknown"


def cpu_id(root: Path = ROOT) -> str | None:
    """'family 25 model 17 stepping 1' (x86) or 'implementer 0x41 part 0xd0c' (Arm; on a
    big.LITTLE part every distinct part: 'implementer 0x41 part 0xd46+0xd47+0xd4d')."""
    blocks = _cpuinfo_blocks(root)
    first = blocks[0] if blocks else {}
    if "cpu family" in first and "model" in first:
        return (f"family {first['cpu family']} model {first['model']}"
                + (f" stepping {first['stepping']}" if "stepping" in first else ""))
    parts = list(dict.fromkeys(b["CPU part"] for b in blocks if "CPU part" in b))
    if "CPU implementer" in first and parts:
        return f"implementer {first['CPU implementer']} part {'+'.join(parts)}"
    return None


def cpu_flags(root: Path = ROOT) -> frozenset[str]:
    """The first processor's x86 `flags` or Arm `Features`."""
    for b in _cpuinfo_blocks(root):
        for key in ("flags", "Features"):
            if key in b:
                return frozenset(b[key].split())
    return frozenset()


def _parts_by_cpu(root: Path) -> dict[int, str]:
    return {int(b["processor"]): b["CPU part"] for b in _cpuinfo_blocks(root)
            if "CPU part" in b and b.get("processor", "").isdigit()}


def logical_cpus(root: Path = ROOT) -> list[int]:
    online = _read(root / "sys/devices/system/cpu/online")
    if online:
        return parse_cpu_list(online)
    return list(range(os.cpu_count() or 1))


def _hybrid_sets(root: Path) -> dict[str, list[int]] | None:
    for base in ("sys/devices", "sys/bus/event_source/devices"):
        p, e = _read(root / base / "cpu_core/cpus"), _read(root / base / "cpu_atom/cpus")
        if p and e:
            return {"P": parse_cpu_list(p), "E": parse_cpu_list(e)}
    return None


def _raw_cores(root: Path) -> list[RawCore]:
    by_core: dict[tuple[str, ...], list[int]] = {}
    info: dict[tuple[str, ...], tuple[int | None, int | None]] = {}
    parts = _parts_by_cpu(root)
    for cpu in logical_cpus(root):
        base = root / f"sys/devices/system/cpu/cpu{cpu}"
        pkg = _read(base / "topology/physical_package_id") or "0"
        cluster = _read(base / "topology/cluster_id") or "0"
        core = _read(base / "topology/core_id")
        key = (pkg, cluster, core if core is not None else f"cpu{cpu}")
        by_core.setdefault(key, []).append(cpu)
        f, cap = _read(base / "cpufreq/cpuinfo_max_freq"), _read(base / "cpu_capacity")
        old = info.get(key, (None, None))
        info[key] = (int(f) if f else old[0], int(cap) if cap else old[1])
    cores = [RawCore(k, tuple(sorted(v)), info[k][0], info[k][1], None,
                     parts.get(min(v))) for k, v in by_core.items()]
    return sorted(cores, key=lambda c: c.cpus[0])


def _with_kinds(cores: list[RawCore], root: Path) -> tuple[str, list[RawCore]]:
    from dataclasses import replace
    hybrid = _hybrid_sets(root)
    if hybrid:
        # Low-power E-cores (Meteor Lake's SoC tile) are atom cores with a lower max frequency.
        e_groups = rank_groups([c.max_freq_khz for c in cores
                                if c.cpus[0] in hybrid["E"] and c.max_freq_khz],
                               FREQ_GROUP_TOLERANCE)
        def kind(c):
            if c.cpus[0] in hybrid["P"]:
                return "P"
            lpe = len(e_groups) > 1 and c.max_freq_khz and c.max_freq_khz not in e_groups[0]
            return "LPE" if lpe else "E"
        return "intel-sysfs", [replace(c, kind=kind(c)) for c in cores]
    caps = [c.capacity for c in cores]
    if all(caps) and len(set(caps)) > 1:      # Arm big.LITTLE: up to three tiers
        groups = rank_groups(caps)
        names = tier_names(len(groups))
        tier = {v: names[i] for i, g in enumerate(groups) for v in g}
        return "cpu-capacity", [replace(c, kind=tier[c.capacity]) for c in cores]
    freqs = [c.max_freq_khz for c in cores]
    groups = rank_groups([f for f in freqs if f], FREQ_GROUP_TOLERANCE)
    if len(groups) > 1 and all(freqs):
        return "frequency-groups", [replace(c, kind="P" if c.max_freq_khz in groups[0]
                                            else "E") for c in cores]
    return "not hybrid", [replace(c, kind="P") for c in cores]


def topology(root: Path | None = None) -> Topology:
    root = root or ROOT
    method, cores = _with_kinds(_raw_cores(root), root)
    return Topology(tuple(cores), method, cpu_model(root), cpu_id(root), cpu_flags(root))


def memory_total_bytes() -> int | None:
    try:
        import psutil
        return int(psutil.virtual_memory().total)
    except Exception:
        return None


def governor_turbo(root: Path | None = None) -> tuple[str | None, str | None]:
    root = root or ROOT
    gov = _read(root / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    no_turbo = _read(root / "sys/devices/system/cpu/intel_pstate/no_turbo")
    boost = _read(root / "sys/devices/system/cpu/cpufreq/boost")
    turbo = ("off" if no_turbo == "1" else "on") if no_turbo is not None else \
        (("on" if boost == "1" else "off") if boost is not None else None)
    return gov, turbo


def llc_bytes(root: Path | None = None) -> int | None:
    """Largest cache size listed for cpu0 (the last-level cache)."""
    root = root or ROOT
    best = 0
    for idx in (root / "sys/devices/system/cpu/cpu0/cache").glob("index*"):
        text = _read(idx / "size")
        if not text:
            continue
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        try:
            best = max(best, int(text.rstrip("KMG")) * mult)
        except ValueError:
            continue
    return best or None


# --- where threads run ---------------------------------------------------------------------

def process_affinity() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def pin_process(cpus: list[int]) -> None:
    """Every thread of this process (llama.cpp's workers included) onto `cpus`."""
    want = set(cpus)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), want)
        except (ProcessLookupError, PermissionError):
            pass  # a thread that ended meanwhile
    os.sched_setaffinity(0, want)


def pin_this_thread(cpus: list[int]) -> None:
    os.sched_setaffinity(0, set(cpus))   # Linux: 0 = the calling thread


def thread_affinity(tid: int) -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(tid))
    except OSError:   # ended meanwhile
        return None


# --- noise, process facts -----------------------------------------------------------------

def cpu_pressure_us(root: Path | None = None) -> float | None:
    """PSI's cumulative 'some' stall of the CPU, in µs; None where the kernel has no PSI."""
    root = root or ROOT
    text = _read(root / PSI_CPU)
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith("some"):
            for field in line.split():
                if field.startswith("total="):
                    return float(field[6:])
    return None


def umask() -> int:
    try:  # Linux says it without changing it
        for line in (_read(ROOT / "proc/self/status") or "").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (ValueError, IndexError):
        pass
    return common.umask()


# --- children and locks ---------------------------------------------------------------------

def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: the kernel SIGKILLs this child when cpuspec dies, SIGKILL included.
    (prctl is looked up before the fork: no dlopen between fork and exec.)"""
    if _PRCTL is not None:
        _PRCTL(1, 9)   # PR_SET_PDEATHSIG, SIGKILL


try:
    import ctypes
    _PRCTL = ctypes.CDLL(None).prctl
except (OSError, AttributeError, TypeError):
    _PRCTL = None


def popen_kwargs(core_dump: bool = True, die_with_parent: bool = True) -> dict:
    return posix.popen_kwargs(_die_with_parent if die_with_parent else None, core_dump)


# what Linux and macOS do alike (posix.py)
kill_tree, exited, locked, rusage = posix.kill_tree, posix.exited, posix.locked, posix.rusage
load_average, sync_disks = posix.load_average, posix.sync_disks
keep_full_speed = posix.keep_full_speed
