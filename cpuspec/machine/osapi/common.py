"""Records and helpers every OS module shares (psutil's _common.py): nothing here asks which
OS it is on."""
from __future__ import annotations

import os
from dataclasses import dataclass

# What the OS lets a program choose about where its threads run:
# * "thread": each thread's own CPU set (Linux sched_setaffinity, Windows
#   SetThreadAffinityMask): the target and the draft can each get cores of their own;
# * "process": one CPU set for the whole process only;
# * "none": nothing (macOS: no affinity API; the thread count is the only axis).
PINNING_MODES = ("thread", "process", "none")


class PinningUnsupported(RuntimeError):
    """This OS lets no program choose the CPUs its threads run on; the message says so."""


@dataclass(frozen=True)
class RawCore:
    """One physical core as an OS reports it, before cores are sorted into kinds: its key
    (unique on the machine), its logical CPUs, and what the OS says of its speed class
    (Linux: max frequency or cpu_capacity; Windows: EfficiencyClass; macOS: perf level)."""
    key: tuple[str, ...]
    cpus: tuple[int, ...]
    max_freq_khz: int | None = None
    capacity: int | None = None        # Linux cpu_capacity (Arm), Windows EfficiencyClass
    kind: str | None = None            # where the OS names the kind itself (P, E, LPE)
    part: str | None = None            # Arm "CPU part" / Apple perf level name


@dataclass(frozen=True)
class Topology:
    """An OS's answer: the cores, how their kinds were told apart, and the CPU's names."""
    cores: tuple[RawCore, ...]
    method: str                        # how kinds were told apart (hw prints it)
    cpu_model: str
    cpu_id: str | None
    flags: frozenset[str] = frozenset()


def parse_cpu_list(text: str) -> list[int]:
    """'0-3,8,10-11' → [0, 1, 2, 3, 8, 10, 11]."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-")
            out += range(int(lo), int(hi) + 1)
        else:
            out.append(int(part))
    return sorted(set(out))


def mask_of(cpus) -> int:
    """A bit mask of CPU ids (Windows' KAFFINITY, group 0)."""
    mask = 0
    for c in cpus:
        mask |= 1 << int(c)
    return mask


# Cores whose max frequencies differ by less than this fraction are one class. Within one
# core type the favoured cores (Intel's Turbo Boost Max 3.0, AMD's preferred cores) run up to
# ~13 % above the rest (i7-6950X: 4.0 against 3.5 GHz, Intel's specification); between two
# types the gap is 20 % or more (i7-12700H P 4.7 / E 3.5 GHz, Core Ultra 7 155H P 4.8 / E 3.8 /
# LP-E 2.5, Ryzen AI 9 HX 370 Zen 5 5.1 / Zen 5c 3.3 GHz). 5 % split a favoured core from its
# kind and called the rest E-cores on a part that has none.
FREQ_GROUP_TOLERANCE = 0.15


def rank_groups(values: list[int], tolerance: float = 0.0) -> list[list[int]]:
    """Distinct values grouped within `tolerance` (a fraction of the group's top), highest
    group first."""
    groups: list[list[int]] = []
    for v in sorted(set(values), reverse=True):
        if groups and v >= groups[-1][0] * (1 - tolerance):
            groups[-1].append(v)
        else:
            groups.append([v])
    return groups


def tier_names(n: int, third: str = "M") -> list[str]:
    """Kinds of n speed tiers, fastest first: P; P, E; P, `third`, E (Arm's middle cores:
    "M"); four or more: P, M..., E."""
    if n <= 1:
        return ["P"] * n
    return ["P"] + [third] * (n - 2) + ["E"]


def umask() -> int:
    """The process's umask, read by setting it and setting it back (the only portable way;
    Linux reads it from /proc without changing it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
