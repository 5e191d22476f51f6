"""What machine a result came from, and which cores the work runs on.

Topology comes from sysfs: per logical CPU its package, core and max frequency; hybrid Intel
parts list their P-cores and E-cores in /sys/devices/cpu_core/cpus and /sys/devices/cpu_atom/cpus
(also under /sys/bus/event_source/devices/). Without those, cores are grouped by
cpufreq/cpuinfo_max_freq; one group means "not hybrid". The filesystem root is a parameter so
tests can use fake trees. Nothing here writes to sysfs: governor and turbo are reported only.
"""
from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cpuspec.machine.matrix import MatrixEngine, matrix_engine

ROOT = Path("/")
# Cores whose max frequencies differ by less than this fraction are one class (frequency
# tables of one core type differ by a bin or two at most).
FREQ_GROUP_TOLERANCE = 0.05


class HardwareError(ValueError):
    """A core selection cannot be satisfied; the message says what exists."""


@dataclass(frozen=True)
class Core:
    package: str
    core: str
    cpus: tuple[int, ...]      # logical CPUs (SMT siblings), ascending
    kind: str                  # "P", "E" or "LPE"; "P" on non-hybrid parts
    max_freq_khz: int | None


@dataclass
class HardwareInfo:
    cpu_model: str
    logical_cpus: int
    physical_cores: int
    smt_siblings: int           # logical CPUs per core (max)
    affinity: list[int]
    physical_cores_in_affinity: int
    hybrid: str                 # "intel-sysfs", "frequency-groups" or "not hybrid"
    cores_by_kind: dict[str, list[int]]   # kind → logical CPUs
    memory_total_bytes: int | None
    governor: str | None
    turbo: str | None
    machine: str
    cores: list[Core] = field(default_factory=list, repr=False)
    # The part's identity where the model name is vague ("AMD EPYC" on a cloud VM): x86
    # family/model/stepping, or ARM implementer/part. Two VMs with the same name can be
    # different generations (and SD can pay on one and not the other).
    cpu_id: str | None = None
    # The matrix engine inside the CPU (Intel AMX, Arm SME, Apple's): machine/matrix.py.
    matrix_engine: MatrixEngine | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cores"] = [asdict(c) for c in self.cores]
        d["matrix_engine"] = self.matrix_engine.to_dict() if self.matrix_engine else None
        return d


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


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def current_affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def cpu_model(root: Path = ROOT) -> str:
    text = _read(root / "proc/cpuinfo") or ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def cpu_id(root: Path = ROOT) -> str | None:
    """'family 25 model 17 stepping 1' (x86) or 'implementer 0x41 part 0xd0c' (ARM), from the
    first processor in /proc/cpuinfo."""
    fields: dict[str, str] = {}
    for line in (_read(root / "proc/cpuinfo") or "").splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    if "cpu family" in fields and "model" in fields:
        return (f"family {fields['cpu family']} model {fields['model']}"
                + (f" stepping {fields['stepping']}" if "stepping" in fields else ""))
    if "CPU implementer" in fields and "CPU part" in fields:
        return f"implementer {fields['CPU implementer']} part {fields['CPU part']}"
    return None


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


def _freq_classes(freqs: list[int]) -> list[list[int]]:
    """Distinct max frequencies grouped within FREQ_GROUP_TOLERANCE, highest group first."""
    groups: list[list[int]] = []
    for f in sorted(set(freqs), reverse=True):
        if groups and f >= groups[-1][0] * (1 - FREQ_GROUP_TOLERANCE):
            groups[-1].append(f)
        else:
            groups.append([f])
    return groups


def _classify(cores: list[tuple[str, str, tuple[int, ...], int | None]], root: Path
              ) -> tuple[str, dict[tuple[str, str], str]]:
    hybrid = _hybrid_sets(root)
    kinds: dict[tuple[str, str], str] = {}
    if hybrid:
        e_cores = [c for c in cores if c[2][0] in hybrid["E"]]
        # Low-power E-cores (Meteor Lake's SoC tile) are atom cores with a lower max frequency.
        e_groups = _freq_classes([c[3] for c in e_cores if c[3]])
        for pkg, core, cpus, freq in cores:
            if cpus[0] in hybrid["P"]:
                kinds[(pkg, core)] = "P"
            elif len(e_groups) > 1 and freq is not None and freq not in e_groups[0]:
                kinds[(pkg, core)] = "LPE"
            else:
                kinds[(pkg, core)] = "E"
        return "intel-sysfs", kinds
    groups = _freq_classes([c[3] for c in cores if c[3]])
    if len(groups) > 1 and all(c[3] for c in cores):
        for pkg, core, cpus, freq in cores:
            kinds[(pkg, core)] = "P" if freq in groups[0] else "E"
        return "frequency-groups", kinds
    return "not hybrid", {(c[0], c[1]): "P" for c in cores}


def topology(root: Path = ROOT) -> tuple[str, list[Core]]:
    by_core: dict[tuple[str, str], list[int]] = {}
    freq: dict[tuple[str, str], int | None] = {}
    for cpu in logical_cpus(root):
        base = root / f"sys/devices/system/cpu/cpu{cpu}"
        pkg = _read(base / "topology/physical_package_id") or "0"
        core = _read(base / "topology/core_id")
        key = (pkg, core if core is not None else f"cpu{cpu}")
        by_core.setdefault(key, []).append(cpu)
        f = _read(base / "cpufreq/cpuinfo_max_freq")
        freq[key] = int(f) if f else freq.get(key)
    raw = [(k[0], k[1], tuple(sorted(v)), freq[k]) for k, v in by_core.items()]
    raw.sort(key=lambda c: c[2][0])
    hybrid, kinds = _classify(raw, root)
    return hybrid, [Core(p, c, cpus, kinds[(p, c)], f) for p, c, cpus, f in raw]


def memory_total_bytes() -> int | None:
    try:
        import psutil
        return int(psutil.virtual_memory().total)
    except Exception:
        return None


def _governor_turbo(root: Path) -> tuple[str | None, str | None]:
    gov = _read(root / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    no_turbo = _read(root / "sys/devices/system/cpu/intel_pstate/no_turbo")
    boost = _read(root / "sys/devices/system/cpu/cpufreq/boost")
    turbo = ("off" if no_turbo == "1" else "on") if no_turbo is not None else \
        (("on" if boost == "1" else "off") if boost is not None else None)
    return gov, turbo


def detect_hardware(root: Path = ROOT, affinity: list[int] | None = None) -> HardwareInfo:
    aff = current_affinity() if affinity is None else sorted(affinity)
    hybrid, cores = topology(root)
    kinds: dict[str, list[int]] = {}
    for c in cores:
        kinds.setdefault(c.kind, []).extend(c.cpus)
    kinds = {k: sorted(v) for k, v in kinds.items()}
    gov, turbo = _governor_turbo(root)
    return HardwareInfo(
        cpu_model=cpu_model(root), logical_cpus=sum(len(c.cpus) for c in cores),
        physical_cores=len(cores), smt_siblings=max((len(c.cpus) for c in cores), default=1),
        affinity=aff, physical_cores_in_affinity=sum(1 for c in cores
                                                     if set(c.cpus) & set(aff)),
        hybrid=hybrid, cores_by_kind=kinds, memory_total_bytes=memory_total_bytes(),
        governor=gov, turbo=turbo, machine=platform.machine(), cores=cores,
        cpu_id=cpu_id(root), matrix_engine=matrix_engine(root))


def physical_cores(cpus: list[int], root: Path = ROOT) -> int:
    _, cores = topology(root)
    return sum(1 for c in cores if set(c.cpus) & set(cpus)) or len(cpus)


# More threads than this many per logical CPU only oversubscribes (OpenMP threads spin: 10-20×
# slower) and can stall the whole machine.
MAX_THREADS_PER_CPU = 4


def default_threads() -> int:
    """llama.cpp decodes fastest with one thread per physical core it may run on."""
    return max(1, physical_cores(current_affinity()))


def select_cpus(hw: HardwareInfo, p_cores: int = 0, e_cores: int = 0, smt: bool = False
                ) -> list[int]:
    """Logical CPUs for N P-cores and M E-cores inside the allowed affinity: one per physical
    core (its first allowed sibling) unless smt. On a non-hybrid CPU every core is a P-core."""
    if p_cores < 0 or e_cores < 0 or p_cores + e_cores == 0:
        raise HardwareError("ask for at least one core (--p-cores N and/or --e-cores M)")
    allowed = set(hw.affinity)
    chosen: list[int] = []
    for kind, n in (("P", p_cores), ("E", e_cores)):
        if n == 0:
            continue
        if kind == "E" and hw.hybrid == "not hybrid":
            raise HardwareError(f"--e-cores {n}: this CPU ({hw.cpu_model}) is not hybrid; it "
                                f"has {hw.physical_cores} cores of one kind: use --p-cores")
        of_kind = [c for c in hw.cores if c.kind == kind]
        usable = [c for c in of_kind if set(c.cpus) & allowed]
        if n > len(usable):
            outside = len(of_kind) - len(usable)
            raise HardwareError(
                f"--{kind.lower()}-cores {n}: only {len(usable)} {kind}-cores are available"
                + (f" ({outside} more are outside this process's CPU affinity "
                   f"{_fmt_list(hw.affinity)})" if outside else ""))
        for c in usable[:n]:
            mine = [cpu for cpu in c.cpus if cpu in allowed]
            chosen += mine if smt else mine[:1]
    return sorted(chosen)


def split_for_parallel(hw: HardwareInfo, p_cores: int, e_cores: int, smt: bool = False
                       ) -> tuple[list[int], list[int]]:
    """The default core split of the parallel schedule on a hybrid CPU: the target on the
    P-cores (its decode is the critical path), the draft on the E-cores (idle during plain
    decoding)."""
    if not p_cores or not e_cores:
        raise HardwareError("the parallel schedule's default split needs --p-cores N and "
                            "--e-cores M (or give --draft-cores)")
    return select_cpus(hw, p_cores, 0, smt), select_cpus(hw, 0, e_cores, smt)


def check_cpus(hw: HardwareInfo, cpus: list[int]) -> list[int]:
    """An explicit CPU list (e.g. --draft-cores 4-7) must lie inside the allowed affinity."""
    outside = sorted(set(cpus) - set(hw.affinity))
    if outside:
        raise HardwareError(f"CPUs {_fmt_list(outside)} are outside this process's CPU "
                            f"affinity {_fmt_list(hw.affinity)}")
    if not cpus:
        raise HardwareError("empty CPU list")
    return sorted(set(cpus))


def _fmt_list(cpus: list[int]) -> str:
    return ",".join(map(str, cpus))


class CorePinner:
    """Moves every thread of this process (llama.cpp's workers included) onto a CPU set:
    where the whole bench runs. The draft gets CPUs of its own through CoreOwner."""

    def __init__(self) -> None:
        self.current: frozenset[int] | None = None

    def pin(self, cpus: list[int]) -> None:
        want = frozenset(cpus)
        if want == self.current:
            return
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), want)
            except (ProcessLookupError, PermissionError):
                pass  # a thread that ended meanwhile
        os.sched_setaffinity(0, want)
        self.current = want


class CoreOwner:
    """A worker thread pinned to `cpus` that runs every call of one model. llama.cpp's OpenMP
    build keeps one thread team per calling thread, created on its first decode, and new
    threads inherit their creator's affinity: so the model's whole team stays on these CPUs,
    while another model, driven from another thread, keeps its own. (ctypes releases the GIL
    during llama_decode.)"""

    def __init__(self, cpus: list[int], name: str = "model"):
        import queue
        import threading
        self.cpus = list(cpus)
        self._calls: "queue.Queue" = queue.Queue()
        self._ready = threading.Event()
        self.native_id: int | None = None
        self._thread = threading.Thread(target=self._run, name=f"cpuspec-{name}", daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        import threading
        os.sched_setaffinity(0, set(self.cpus))  # this thread only (Linux: 0 = the caller)
        self.native_id = threading.get_native_id()
        self._ready.set()
        while (item := self._calls.get()) is not None:
            fn, args, done = item
            try:
                done.set_result(fn(*args))
            except BaseException as exc:  # handed to the caller, raised there
                done.set_exception(exc)

    def submit(self, fn, *args):
        """Run fn(*args) on this thread; returns a Future at once."""
        from concurrent.futures import Future
        done: Future = Future()
        self._calls.put((fn, args, done))
        return done

    def call(self, fn, *args):
        return self.submit(fn, *args).result()

    def close(self) -> None:
        self._calls.put(None)
        self._thread.join(timeout=10)


def thread_census() -> dict[int, dict]:
    """Every thread of this process: its CPU affinity and CPU seconds so far (psutil)."""
    import psutil
    out = {}
    for t in psutil.Process().threads():
        try:
            cpus = sorted(os.sched_getaffinity(t.id))
        except OSError:  # ended meanwhile
            continue
        out[t.id] = {"cpus": cpus, "cpu_s": t.user_time + t.system_time}
    return out


def census_delta(before: dict[int, dict], after: dict[int, dict]) -> list[dict]:
    """CPU seconds each thread used between two censuses, grouped by affinity: the proof of
    where each model's threads ran."""
    groups: dict[tuple, dict] = {}
    for tid, a in after.items():
        used = a["cpu_s"] - before.get(tid, {"cpu_s": 0.0})["cpu_s"]
        g = groups.setdefault(tuple(a["cpus"]), {"cpus": a["cpus"], "threads": 0,
                                                  "cpu_s": 0.0})
        g["threads"] += 1
        g["cpu_s"] += used
    return sorted(groups.values(), key=lambda g: g["cpus"])


class OwnedDecoder:
    """A model session whose every call runs on its CoreOwner's thread, so its llama.cpp
    threads stay on the owner's CPUs (how the draft gets its own cores)."""

    def __init__(self, session, owner):
        self.session, self.owner = session, owner

    def eval(self, tokens, pos, n_out):
        return self.owner.call(self.session.eval, tokens, pos, n_out)

    def decode(self, tokens, pos, n_out):
        self.owner.call(self.session.decode, tokens, pos, n_out)

    def logits(self, n_out):
        return self.session.logits(n_out)

    def confidence(self):
        return self.owner.call(self.session.confidence)

    def truncate(self, pos):
        self.owner.call(self.session.truncate, pos)

    def is_eog(self, token):
        return self.session.is_eog(token)
