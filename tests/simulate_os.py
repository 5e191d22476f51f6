"""Another OS, simulated on this Linux: what cpuspec's OS layer (machine/osapi) reads there,
answered from data laid out as the real interfaces give it (not read off a Mac or a Windows
machine: see each file's header), and the Linux-only calls taken away.

What is simulated and how (docs/laptops.md says the same):
* sys.platform is set ("darwin", "win32"); os.name stays "posix", since pathlib and subprocess
  read it to choose their own implementations (setting it would simulate the standard library,
  not cpuspec). cpuspec itself never reads os.name: tests/test_laptops.py checks that.
* Functions that do not exist there are removed: os.sched_* and os.waitid (macOS has neither
  before Python 3.13); on Windows also os.killpg, os.getpgid, os.setsid, os.fchmod,
  os.getloadavg, os.sync, os.getuid, os.fork, signal.SIGKILL and
  SIGHUP, and fcntl and resource (their imports fail); on macOS psutil's Process.cpu_affinity
  (psutil has none there).
* The OS's own interfaces answer from recorded data: macOS sysctl values
  (tests/recorded/os/*.sysctl.txt), a Windows GetLogicalProcessorInformationEx buffer laid out
  here with ctypes structures that mirror winnt.h, and its registry values; Windows' affinity
  calls (psutil's cpu_affinity, SetThreadAffinityMask) are recorded, not applied.
* click, multiprocessing and urllib.request are imported before the OS is simulated (FIRST):
  they choose their own implementations (ctypes.windll, _winapi, _scproxy) from sys.platform
  at import.
* Windows' Popen creationflags are recorded and dropped (Linux's Popen refuses them), and
  msvcrt.locking is a recording stand-in.

Run as a program, it simulates an OS before cpuspec is imported (import-time code included):
    python tests/simulate_os.py win32 -- --help
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import types
from pathlib import Path

RECORDED = Path(__file__).parent / "recorded" / "os"
MACS = {"m1": "macbook-air-m1.sysctl.txt", "m4pro": "macbook-pro-m4-pro.sysctl.txt"}


# --- Windows: the documented structs (winnt.h), 64-bit ---------------------------------------

class GROUP_AFFINITY(ctypes.Structure):
    _fields_ = [("Mask", ctypes.c_uint64), ("Group", ctypes.c_uint16),
                ("Reserved", ctypes.c_uint16 * 3)]


class PROCESSOR_RELATIONSHIP(ctypes.Structure):
    _fields_ = [("Flags", ctypes.c_ubyte), ("EfficiencyClass", ctypes.c_ubyte),
                ("Reserved", ctypes.c_ubyte * 20), ("GroupCount", ctypes.c_uint16),
                ("GroupMask", GROUP_AFFINITY * 1)]


class CACHE_RELATIONSHIP(ctypes.Structure):
    _fields_ = [("Level", ctypes.c_ubyte), ("Associativity", ctypes.c_ubyte),
                ("LineSize", ctypes.c_uint16), ("CacheSize", ctypes.c_uint32),
                ("Type", ctypes.c_uint32), ("Reserved", ctypes.c_ubyte * 18),
                ("GroupCount", ctypes.c_uint16), ("GroupMask", GROUP_AFFINITY * 1)]


class _Union(ctypes.Union):
    _fields_ = [("Processor", PROCESSOR_RELATIONSHIP), ("Cache", CACHE_RELATIONSHIP)]


class SLPI_EX(ctypes.Structure):
    """SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX with the members used here."""
    _anonymous_ = ("u",)
    _fields_ = [("Relationship", ctypes.c_uint32), ("Size", ctypes.c_uint32), ("u", _Union)]


RelationProcessorCore, RelationCache = 0, 2


def glpi_buffer(cores: list[tuple[list[int], int]], l3_bytes: int | None = None) -> bytes:
    """Records as GetLogicalProcessorInformationEx(RelationAll) returns them: one per core
    (its logical CPUs in group 0, its EfficiencyClass; LTP_PC_SMT where it has two), then an
    L3 cache record. Each record's Size is the offset after its last group mask, as Windows
    sets it."""
    out = b""
    size = SLPI_EX.u.offset + PROCESSOR_RELATIONSHIP.GroupMask.offset + \
        ctypes.sizeof(GROUP_AFFINITY)
    for cpus, eff in cores:
        rec = SLPI_EX(Relationship=RelationProcessorCore, Size=size)
        rec.Processor.Flags = 1 if len(cpus) > 1 else 0
        rec.Processor.EfficiencyClass = eff
        rec.Processor.GroupCount = 1
        rec.Processor.GroupMask[0].Mask = sum(1 << c for c in cpus)
        out += bytes(rec)[:size]
    if l3_bytes:
        csize = SLPI_EX.u.offset + CACHE_RELATIONSHIP.GroupMask.offset + \
            ctypes.sizeof(GROUP_AFFINITY)
        rec = SLPI_EX(Relationship=RelationCache, Size=csize)
        rec.Cache.Level, rec.Cache.CacheSize, rec.Cache.GroupCount = 3, l3_bytes, 1
        rec.Cache.GroupMask[0].Mask = (1 << 20) - 1
        out += bytes(rec)[:csize]
    return out


# i7-12700H: 6 P-cores with SMT (logical 0-11, EfficiencyClass 1), 8 E-cores (12-19, class
# 0), 24 MB L3: Windows numbers the P-cores' siblings first, as on Linux.
I7_12700H = [([2 * i, 2 * i + 1], 1) for i in range(6)] + [([12 + i], 0) for i in range(8)]
I7_12700H_L3 = 24 * 2**20


def read_sysctl(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition(":")
            out[key.strip()] = value.strip()
    return out


# Modules that choose their own implementation from sys.platform when imported (click's
# console: ctypes.windll; multiprocessing: _winapi; urllib.request: _scproxy on macOS): imported
# as this OS's before the simulation, as they would be on the real one.
FIRST = ("click", "multiprocessing.context", "urllib.request", "http.client", "asyncio",
         "concurrent.futures", "sysconfig", "pyarrow", "duckdb")


class Calls(list):
    """What the simulated OS was asked to do, in order."""


def _setattr(target, name, value, mp):
    if mp is None:
        setattr(target, name, value)
    else:
        mp.setattr(target, name, value)


def _delattr(target, name, mp):
    if mp is None:
        if hasattr(target, name):
            delattr(target, name)
    else:
        mp.delattr(target, name, raising=False)


def _setitem(d, key, value, mp):
    if mp is None:
        d[key] = value
    else:
        mp.setitem(d, key, value)


def simulate(os_name: str, mp=None, mac: str = "m1") -> Calls:
    """Make this process look like `os_name` ("darwin" or "win32") to cpuspec; with a pytest
    MonkeyPatch everything is undone after the test. Returns the list the simulated OS
    records its affinity calls and children into."""
    import importlib

    import psutil

    from cpuspec.machine.osapi import darwin, windows
    for name in FIRST:   # each chooses its own implementation from sys.platform at import
        importlib.import_module(name)
    __import__("sysconfig").get_config_vars()    # cached: read once, as this OS's
    calls = Calls()
    _setattr(sys, "platform", os_name, mp)
    gone = ("sched_getaffinity", "sched_setaffinity", "waitid") + (
        ("killpg", "getpgid", "setsid", "fchmod", "getloadavg", "sync", "getuid", "geteuid",
         "fork") if os_name == "win32" else ())
    for name in gone:
        _delattr(os, name, mp)
    for mod in ("fcntl", "resource") if os_name == "win32" else ():
        _setitem(sys.modules, mod, None, mp)
    if os_name == "darwin":
        values = read_sysctl(RECORDED / MACS[mac])

        def sysctl(name, kind):
            v = values.get(name)
            return None if v is None else kind(v)
        _setattr(darwin, "SYSCTL", sysctl, mp)
        _delattr(psutil.Process, "cpu_affinity", mp)
        _setattr(__import__("platform"), "machine", lambda: "arm64", mp)
    elif os_name == "win32":
        registry = json.loads((RECORDED / "i7-12700h.registry.json").read_text())
        buf = glpi_buffer(I7_12700H, I7_12700H_L3)
        n_cpus = 20
        state = {"process": list(range(n_cpus))}

        def cpu_affinity(self, cpus=None):
            if cpus is None:
                return list(state["process"])
            calls.append(("process_affinity", sorted(cpus)))
            state["process"] = sorted(cpus)

        def set_thread_mask(mask):
            calls.append(("thread_mask", [b for b in range(64) if mask >> b & 1]))
            return (1 << n_cpus) - 1

        _setattr(windows, "GLPI", lambda: buf, mp)
        _setattr(windows, "REGISTRY", registry.get, mp)
        _setattr(windows, "SET_THREAD_MASK", set_thread_mask, mp)
        _setattr(windows, "SET_POWER_THROTTLING",
                 lambda state: calls.append(("power_throttling", state)) or True, mp)
        _setattr(psutil.Process, "cpu_affinity", cpu_affinity, mp)
        for sig in ("SIGKILL", "SIGHUP"):
            _delattr(signal, sig, mp)
        _setitem(sys.modules, "msvcrt", _fake_msvcrt(calls), mp)
        _setattr(subprocess, "Popen", _popen_recording(calls), mp)
        _setattr(__import__("platform"), "machine", lambda: "AMD64", mp)
    else:
        raise ValueError(f"simulate: {os_name}?")
    return calls


def _fake_msvcrt(calls):
    m = types.ModuleType("msvcrt")
    m.LK_NBLCK, m.LK_UNLCK, m.LK_LOCK = 2, 0, 1
    m.locking = lambda fd, mode, n: calls.append(("locking", mode, n))
    return m


def _popen_recording(calls):
    real = subprocess.Popen

    class Popen(real):
        def __init__(self, argv, *a, creationflags=0, **kw):
            calls.append(("popen", creationflags))
            super().__init__(argv, *a, **kw)
    return Popen


if __name__ == "__main__":   # python tests/simulate_os.py OS [--mac m1] -- CPUSPEC ARGS
    args = sys.argv[1:]
    os_name, rest = args[0], args[args.index("--") + 1:] if "--" in args else []
    mac = args[args.index("--mac") + 1] if "--mac" in args else "m1"
    real_cdll = ctypes.CDLL

    class CDLL(real_cdll):   # Windows: CDLL(None) raises TypeError (no dlopen(NULL))
        def __init__(self, name, *a, **kw):
            if name is None and os_name == "win32":
                raise TypeError("expected str, bytes or os.PathLike object, not NoneType")
            super().__init__(name, *a, **kw)
    ctypes.CDLL = CDLL
    simulate(os_name, None, mac)
    from cpuspec.cli.main import main
    main(rest, prog_name="cpuspec")
