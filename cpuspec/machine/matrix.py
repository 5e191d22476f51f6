"""The matrix engine inside the CPU, and whether the llama.cpp build uses it.

A matrix engine multiplies tiles of a matrix in one instruction: Intel AMX (Xeon since Sapphire
Rapids; flags amx_tile, amx_int8, amx_bf16, amx_fp16 in /proc/cpuinfo), Arm SME (Features sme,
sme2) and Apple's undocumented AMX (every Apple silicon Mac; reached only through Accelerate).
It makes a batched matmul far cheaper than the same number of one-token ones, which is what a
speculative verify of k + 1 tokens is: β, the verify's cost over one decode, shrinks.

Which build uses it is read from llama.cpp's system info: ggml lists only the features it was
compiled with ("AMX_INT8 = 1", "SME = 1"); Accelerate shows as a BLAS backend on macOS.
"""
from __future__ import annotations

import platform
import re
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path("/")
AMX_FLAGS = ("amx_tile", "amx_int8", "amx_bf16", "amx_fp16", "amx_complex")
SME_FEATURES = ("sme", "sme2", "sme2p1", "smei16i64", "smef64f64")
# what each engine's ggml kernels need to be in the build, as llama_print_system_info says it
SYSTEM_INFO_FLAG = {"Intel AMX": "AMX_INT8", "Arm SME": "SME"}


@dataclass(frozen=True)
class MatrixEngine:
    name: str | None                  # "Intel AMX", "Arm SME", "Apple AMX"; None: none found
    features: tuple[str, ...] = ()    # as the OS names them (amx_int8, sme2, ...)

    def to_dict(self) -> dict:
        return {"name": self.name, "features": list(self.features)}

    @classmethod
    def from_dict(cls, d: dict | None) -> "MatrixEngine | None":
        """None for a record written before matrix engines were recorded (not known)."""
        if not isinstance(d, dict):
            return None
        name = d.get("name")
        feats = d.get("features")
        return cls(name if isinstance(name, str) else None,
                   tuple(f for f in feats if isinstance(f, str))
                   if isinstance(feats, list) else ())


def matrix_engine(root: Path = ROOT, system: str | None = None,
                  machine: str | None = None, flags: frozenset[str] | None = None
                  ) -> MatrixEngine:
    """The CPU's matrix engine (the OS's own flags, from machine/osapi where not given;
    nothing is executed). system: 'linux', 'darwin' or 'win32'."""
    from cpuspec.machine import osapi
    system = {"Linux": "linux", "Darwin": "darwin", "Windows": "win32"}.get(
        system or "", system or osapi.os_name())
    machine = machine or platform.machine()
    if flags is None:
        from cpuspec.machine.osapi import linux   # /proc/cpuinfo's flags, read in one place
        flags = linux.cpu_flags(root) if system == "linux" else \
            osapi.current().topology(root).flags
    amx = tuple(f for f in AMX_FLAGS if f in flags)
    if amx:
        return MatrixEngine("Intel AMX", amx)
    sme = tuple(f for f in SME_FEATURES if f in flags)
    if sme:
        return MatrixEngine("Arm SME", sme)
    if system == "darwin" and machine == "arm64":
        return MatrixEngine("Apple AMX", ("apple-silicon",))
    return MatrixEngine(None)


def build_uses(engine: MatrixEngine | None, system_info: str | None) -> bool | None:
    """Whether the llama.cpp build whose system info this is runs the engine's kernels; None
    where it cannot be said (no engine, no system info, or an engine ggml reaches only
    through a BLAS library: Apple's, through Accelerate)."""
    if engine is None or engine.name is None or not system_info:
        return None
    flag = SYSTEM_INFO_FLAG.get(engine.name)
    if flag is None:
        return None
    return re.search(rf"\b{flag} = 1\b", system_info) is not None


def engine_of_build(system_info: str | None) -> tuple[str | None, int | None]:
    """(engine, 1) where a build's system info says it ran an engine's kernels (ggml lists
    AMX_INT8 or SME only when compiled in); (None, None) otherwise: not known. For records
    written before the CPU's engine was."""
    for name, flag in SYSTEM_INFO_FLAG.items():
        if system_info and re.search(rf"\b{flag} = 1\b", system_info):
            return name, 1
    return None, None


def describe(engine: MatrixEngine | None, uses: bool | None) -> str:
    """One phrase: 'Intel AMX (amx_tile, amx_int8, amx_bf16), compiled into this build'. Compiled
    in, by the build's system info: whether the tiles ran is the build check's to say (its
    probe puts the weights in AMX buffers: `cpuspec hw`)."""
    if engine is None:
        return "not recorded"
    if engine.name is None:
        return "none"
    text = f"{engine.name} ({', '.join(engine.features)})"
    if uses is True:
        return f"{text}, compiled into this build"
    if uses is False:
        return f"{text}, NOT compiled into this build"
    if engine.name == "Apple AMX":
        return f"{text}, reached only through Accelerate (a BLAS build)"
    return text
