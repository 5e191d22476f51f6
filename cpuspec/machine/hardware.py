"""What machine a result came from, which cores the work runs on, and what the OS allows.

Everything the OS says comes through machine/osapi (Linux sysfs, macOS sysctl, Windows
GetLogicalProcessorInformationEx); this module sorts it into one record, chooses cores for
--p-cores/--e-cores, and pins where the OS lets a program pin. On Linux the filesystem root is a
parameter so tests can use fake sysfs trees; other OSes are simulated in tests through their
doors (osapi.darwin.SYSCTL, osapi.windows.GLPI). Nothing here writes to sysfs.
"""
from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cpuspec.machine import osapi
from cpuspec.machine.matrix import MatrixEngine, matrix_engine
from cpuspec.machine.osapi import PinningUnsupported, parse_cpu_list  # noqa: F401 (re-export)

ROOT = Path("/")


class HardwareError(ValueError):
    """A core selection cannot be satisfied; the message says what exists."""


@dataclass(frozen=True)
class Core:
    package: str
    core: str
    cpus: tuple[int, ...]      # logical CPUs (SMT siblings), ascending
    kind: str                  # "P", "E", "LPE" or Arm's middle "M"; "P" on non-hybrid parts
    max_freq_khz: int | None
    part: str | None = None    # Arm's "CPU part", Apple's perf level name


@dataclass
class HardwareInfo:
    cpu_model: str
    logical_cpus: int
    physical_cores: int
    smt_siblings: int           # logical CPUs per core (max)
    affinity: list[int]
    physical_cores_in_affinity: int
    # how core kinds were told apart: "intel-sysfs", "cpu-capacity" (Arm), "frequency-groups",
    # "EfficiencyClass" (Windows), "sysctl hw.perflevel" (macOS) or "not hybrid"
    hybrid: str
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
    os: str = "linux"             # "linux", "darwin", "win32"
    pinning: str = "thread"       # what the OS lets a program choose: thread, process, none
    default_threads: int | None = None
    default_threads_rule: str | None = None   # llama.cpp's rule on this OS, in words
    flags: list[str] = field(default_factory=list, repr=False)   # ISA flags (Arm, Apple)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cores"] = [asdict(c) for c in self.cores]
        d["matrix_engine"] = self.matrix_engine.to_dict() if self.matrix_engine else None
        return d


def current_affinity() -> list[int]:
    """The CPUs this process may run on (every CPU where the OS has no affinity)."""
    try:
        return osapi.current().process_affinity()
    except (OSError, AttributeError, NotImplementedError):
        return list(range(os.cpu_count() or 1))


def logical_cpu_count() -> int:
    """Logical CPUs on the machine, as the OS counts them (all of them, any affinity)."""
    topo = osapi.current().topology()
    return sum(len(c.cpus) for c in topo.cores) or os.cpu_count() or 1


def cpu_model(root: Path = ROOT) -> str:
    return osapi.current().topology(root).cpu_model


def cpu_id(root: Path = ROOT) -> str | None:
    return osapi.current().topology(root).cpu_id


def topology(root: Path = ROOT) -> tuple[str, list[Core]]:
    topo = osapi.current().topology(root)
    return topo.method, _cores(topo)


def _cores(topo) -> list[Core]:
    return [Core(c.key[0], ":".join(k for k in c.key[1:] if k != "0") or "0"
                 if len(c.key) > 2 else c.key[-1], c.cpus, c.kind or "P", c.max_freq_khz,
                 c.part) for c in topo.cores]


def memory_total_bytes() -> int | None:
    return osapi.current().memory_total_bytes()


def default_threads_rule(topo_method: str, cores: list[Core], aff: list[int],
                         machine: str) -> tuple[int, str]:
    """llama.cpp's own default thread count on this OS (common.cpp: cpu_get_num_math), and
    the rule in words: Linux x86 on a hybrid, the P-cores (it skips E-cores and SMT
    siblings); macOS, hw.perflevel0.physicalcpu; otherwise every physical core. cpuspec
    counts only the cores inside this process's affinity (a container's or `taskset`'s)."""
    mine = [c for c in cores if set(c.cpus) & set(aff)] or cores
    name = osapi.os_name()
    if name == "darwin":
        n = osapi.current().physical_performance_cores() or len(mine)
        return n, "llama.cpp's rule on macOS: the performance cores (hw.perflevel0.physicalcpu)"
    p_cores = [c for c in mine if c.kind == "P"]
    x86 = machine.lower() in ("x86_64", "amd64", "x64", "i686")
    # llama.cpp asks CPUID's hybrid bit (Intel only): a part told apart by frequency alone (an
    # AMD Zen 5 + Zen 5c laptop) keeps every core there
    if name == "linux" and x86 and topo_method == "intel-sysfs" and p_cores:
        return len(p_cores), ("llama.cpp's rule on Linux x86 hybrids: the physical P-cores "
                              "(E-cores and SMT siblings skipped)")
    where = {"win32": "Windows", "linux": "Linux"}.get(name, name)
    return len(mine), f"llama.cpp's rule on {where}: every physical core" + (
        " (P and E alike)" if len(p_cores) < len(mine) else "")


def detect_hardware(root: Path = ROOT, affinity: list[int] | None = None) -> HardwareInfo:
    api = osapi.current()
    aff = current_affinity() if affinity is None else sorted(affinity)
    topo = api.topology(root)
    cores = _cores(topo)
    kinds: dict[str, list[int]] = {}
    for c in cores:
        kinds.setdefault(c.kind, []).extend(c.cpus)
    kinds = {k: sorted(v) for k, v in kinds.items()}
    gov, turbo = api.governor_turbo(root)
    machine = platform.machine()
    n_threads, rule = default_threads_rule(topo.method, cores, aff, machine)
    return HardwareInfo(
        cpu_model=topo.cpu_model, logical_cpus=sum(len(c.cpus) for c in cores),
        physical_cores=len(cores), smt_siblings=max((len(c.cpus) for c in cores), default=1),
        affinity=aff, physical_cores_in_affinity=sum(1 for c in cores
                                                     if set(c.cpus) & set(aff)),
        hybrid=topo.method, cores_by_kind=kinds, memory_total_bytes=api.memory_total_bytes(),
        governor=gov, turbo=turbo, machine=machine, cores=cores,
        cpu_id=topo.cpu_id, matrix_engine=matrix_engine(root, flags=topo.flags),
        os=api.NAME, pinning=api.PINNING, default_threads=n_threads,
        default_threads_rule=rule, flags=sorted(topo.flags))


def physical_cores(cpus: list[int], root: Path = ROOT) -> int:
    _, cores = topology(root)
    return sum(1 for c in cores if set(c.cpus) & set(cpus)) or len(cpus)


# More threads than this many per logical CPU only oversubscribes (OpenMP threads spin: 10-20×
# slower) and can stall the whole machine.
MAX_THREADS_PER_CPU = 4


def default_threads() -> int:
    """llama.cpp's own default on this OS (default_threads_rule), inside this process's
    affinity: the thread count a user of llama.cpp gets without -t."""
    return max(1, detect_hardware().default_threads or 1)


def require_pinning(what: str) -> None:
    """Refuse an option that needs pinning where the OS has none: one line, HardwareError."""
    if osapi.pinning() == "none":
        raise HardwareError(f"{what}: {_no_pinning_reason()}")


def _no_pinning_reason() -> str:
    return getattr(osapi.current(), "NO_PINNING",
                   "this OS lets no program choose the cores its threads run on")


def select_cpus(hw: HardwareInfo, p_cores: int = 0, e_cores: int = 0, smt: bool = False
                ) -> list[int]:
    """Logical CPUs for N P-cores and M E-cores inside the allowed affinity: one per physical
    core (its first allowed sibling) unless smt. On a non-hybrid CPU every core is a P-core."""
    if p_cores < 0 or e_cores < 0 or p_cores + e_cores == 0:
        raise HardwareError("ask for at least one core (--p-cores N and/or --e-cores M)")
    if hw.pinning == "none":
        flags = " ".join(f"--{k}-cores" for k, n in (("p", p_cores), ("e", e_cores)) if n)
        raise HardwareError(f"{flags}: {_no_pinning_reason()}")
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
    """An explicit CPU list for the draft (--draft-cores 4-7) must lie inside the allowed
    affinity, on an OS that pins each thread (Linux): elsewhere it is refused, with why."""
    if hw.pinning == "none":
        raise HardwareError(f"--draft-cores {_fmt_list(cpus)}: {_no_pinning_reason()}")
    if hw.pinning == "process":
        reason = getattr(osapi.current(), "NO_THREAD_PINNING",
                         "this OS pins a whole process, not one thread")
        raise HardwareError(f"--draft-cores {_fmt_list(cpus)}: {reason}")
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
    where the whole bench runs. The draft gets CPUs of its own through CoreOwner. Where the
    OS cannot pin, a pin to the CPUs the process already has is nothing to do, and any other
    raises PinningUnsupported (the CLI refused such options before)."""

    def __init__(self) -> None:
        self.current: frozenset[int] | None = None

    def pin(self, cpus: list[int]) -> None:
        want = frozenset(cpus)
        if want == self.current:
            return
        if osapi.pinning() == "none":
            if want != frozenset(current_affinity()):
                raise PinningUnsupported(_no_pinning_reason())
            self.current = want
            return
        osapi.current().pin_process(sorted(want))
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
        self.error: Exception | None = None
        self._thread.start()
        self._ready.wait()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        import threading
        try:
            if self.cpus:   # none: a thread of its own, unpinned (an OS without affinity)
                osapi.current().pin_this_thread(self.cpus)   # this thread only
        except Exception as exc:   # handed to the constructor, raised there
            self.error = exc
            self._ready.set()
            return
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
    api = osapi.current()
    for t in psutil.Process().threads():
        cpus = api.thread_affinity(t.id)
        if cpus is None and api.READS_THREAD_AFFINITY:
            continue    # ended meanwhile
        # where the OS cannot read a thread's CPUs (Windows, macOS): grouped as unknown (-1)
        out[t.id] = {"cpus": cpus if cpus is not None else [-1],
                     "cpu_s": t.user_time + t.system_time}
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
