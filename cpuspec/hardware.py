"""What machine a result came from: CPU model, cores, affinity, memory.

The sysfs/procfs root is a parameter so tests can point it at fake trees.
"""
from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class HardwareInfo:
    cpu_model: str
    logical_cpus: int
    affinity: list[int]
    physical_cores_in_affinity: int
    memory_total_bytes: int | None
    machine: str

    def to_dict(self) -> dict:
        return asdict(self)


def current_affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def cpu_model(root: Path = Path("/")) -> str:
    try:
        for line in (root / "proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def core_id(cpu: int, root: Path = Path("/")) -> tuple[str, str]:
    """(package, core) of a logical CPU; SMT siblings share it."""
    topo = root / f"sys/devices/system/cpu/cpu{cpu}/topology"
    try:
        return ((topo / "physical_package_id").read_text().strip(),
                (topo / "core_id").read_text().strip())
    except OSError:
        return ("?", str(cpu))  # no topology: count every logical CPU as a core


def physical_cores(cpus: list[int], root: Path = Path("/")) -> int:
    return len({core_id(c, root) for c in cpus})


def memory_total_bytes() -> int | None:
    try:
        import psutil
        return int(psutil.virtual_memory().total)
    except Exception:
        return None


def detect_hardware(root: Path = Path("/")) -> HardwareInfo:
    aff = current_affinity()
    return HardwareInfo(cpu_model=cpu_model(root), logical_cpus=os.cpu_count() or len(aff),
                        affinity=aff, physical_cores_in_affinity=physical_cores(aff, root),
                        memory_total_bytes=memory_total_bytes(), machine=platform.machine())


def default_threads() -> int:
    """llama.cpp decodes fastest with one thread per physical core it may run on."""
    return max(1, physical_cores(current_affinity()))
