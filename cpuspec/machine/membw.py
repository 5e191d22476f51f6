"""Memory bandwidth: a STREAM-style probe, background bandwidth streams, and psutil sampling.

Decoding one token reads every weight once, so on a CPU tok/s is bounded by
bandwidth ÷ bytes per token (the roofline). The draft model reads the same memory bus: that is
why a draft that is ~0.44× the target's bytes costs more than 0.44 of a target decode here.

STREAM (McCalpin) counts bytes as: copy 2 words per element, add 3, triad 3 (it ignores
write-allocate traffic). numpy computes triad a = b + s·c in two passes, so its triad figure is
a lower bound; copy is the cleanest number and the one used for rooflines.
"""
from __future__ import annotations

import multiprocessing as mp
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

WORD_BYTES = 8  # float64, as STREAM
STREAM_WORDS = {"copy": 2, "add": 3, "triad": 3}
# STREAM's rule: each array at least 4× the last-level cache, so the caches cannot help.
LLC_MULTIPLE = 4
DEFAULT_LLC_BYTES = 32 * 2**20
PROBE_TRIES = 5  # best of N, as STREAM reports


def stream_bytes(kernel: str, n_elements: int) -> int:
    """Bytes one pass of `kernel` moves over arrays of n_elements, counted as STREAM does."""
    return STREAM_WORDS[kernel] * WORD_BYTES * n_elements


def llc_bytes(root: Path = Path("/")) -> int:
    """The last-level cache's bytes as the OS lists it (machine/osapi), or a default."""
    from cpuspec.machine import osapi
    size = osapi.current().llc_bytes(root)
    return size or DEFAULT_LLC_BYTES


def _pin_or_not(cpu: int) -> bool:
    """Pin the calling thread to one CPU where the OS lets it; False where it cannot (macOS):
    the probe then runs unpinned and says so."""
    from cpuspec.machine import osapi
    try:
        osapi.current().pin_this_thread([cpu])
        return True
    except (osapi.PinningUnsupported, OSError):   # no affinity, or a CPU gone offline
        return False


def _kernel(kernel: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    if kernel == "copy":
        np.copyto(c, a)
    elif kernel == "add":
        np.add(a, b, out=c)
    else:  # triad
        np.multiply(c, 3.0, out=a)
        np.add(a, b, out=a)


@dataclass
class BandwidthResult:
    cpus: list[int]
    n_elements: int
    array_bytes: int
    gbps: dict[str, float]            # best of tries, per kernel
    samples_s: dict[str, list[float]] = field(default_factory=dict)
    pinned: bool = True               # False: the OS let no thread be pinned (macOS)

    def to_dict(self) -> dict:
        return asdict(self)


def probe_bandwidth(cpus: list[int], n_elements: int | None = None,
                    tries: int = PROBE_TRIES) -> BandwidthResult:
    """STREAM copy/add/triad on threads pinned one per CPU in `cpus`, each on its own slice of
    the arrays (numpy releases the GIL in these loops). GB/s = total bytes ÷ slowest thread."""
    if n_elements is None:
        n_elements = LLC_MULTIPLE * llc_bytes() // WORD_BYTES
    n_elements -= n_elements % len(cpus)
    a, b, c = (np.full(n_elements, v) for v in (1.0, 2.0, 0.0))
    chunk = n_elements // len(cpus)
    slices = [slice(i * chunk, (i + 1) * chunk) for i in range(len(cpus))]
    samples: dict[str, list[float]] = {k: [] for k in STREAM_WORDS}
    pinned = [True]

    def worker(i: int, cpu: int, kernel: str, start: threading.Barrier, out: list) -> None:
        if not _pin_or_not(cpu):   # this thread only
            pinned[0] = False
        s = slices[i]
        start.wait()
        t0 = time.perf_counter()
        _kernel(kernel, a[s], b[s], c[s])
        out[i] = time.perf_counter() - t0

    for _ in range(tries):
        for kernel in STREAM_WORDS:
            out = [0.0] * len(cpus)
            start = threading.Barrier(len(cpus))
            threads = [threading.Thread(target=worker, args=(i, cpu, kernel, start, out))
                       for i, cpu in enumerate(cpus)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            samples[kernel].append(max(out))
    gbps = {k: stream_bytes(k, n_elements) / min(v) / 1e9 for k, v in samples.items()}
    return BandwidthResult(list(cpus), n_elements, n_elements * WORD_BYTES, gbps, samples,
                           pinned[0])


def _stream_forever(cpu: int, n_elements: int, stop) -> None:  # pragma: no cover (subprocess)
    _pin_or_not(cpu)
    a, c = np.ones(n_elements), np.empty(n_elements)
    while not stop.is_set():
        np.copyto(c, a)


class BackgroundStreams:
    """n processes, each pinned to one CPU, copying large arrays until stopped: memory-bus
    load that competes with a decode the way a co-running draft (or any program) would."""

    def __init__(self, cpus: list[int], n_elements: int | None = None):
        self.cpus = cpus
        self.n_elements = n_elements or LLC_MULTIPLE * llc_bytes() // WORD_BYTES
        self.ctx = mp.get_context("spawn")
        self.stop = self.ctx.Event()
        self.procs: list = []

    def __enter__(self) -> "BackgroundStreams":
        for cpu in self.cpus:
            p = self.ctx.Process(target=_stream_forever, args=(cpu, self.n_elements, self.stop),
                                 daemon=True)
            p.start()
            self.procs.append(p)
        time.sleep(0.5 if self.cpus else 0)  # let them allocate and start streaming
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()


class Sampler:
    """psutil sampling on a thread while a phase runs: per-CPU utilisation and frequency, and
    the process's RSS; context switches and page faults as deltas over the phase."""

    def __init__(self, interval_s: float = 0.1):
        self.interval_s = interval_s
        self.samples: list[dict] = []
        self._stop = threading.Event()

    def _run(self) -> None:
        import psutil
        proc = psutil.Process()
        psutil.cpu_percent(percpu=True)
        while not self._stop.wait(self.interval_s):
            freqs = None
            try:
                freqs = [f.current for f in psutil.cpu_freq(percpu=True)] or None
            except Exception:  # not exposed in some VMs
                pass
            self.samples.append({"t": time.perf_counter(),
                                 "cpu_percent": psutil.cpu_percent(percpu=True),
                                 "cpu_mhz": freqs, "rss_bytes": proc.memory_info().rss})

    def __enter__(self) -> "Sampler":
        from cpuspec.machine import osapi
        self._ru0 = osapi.current().rusage()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        from cpuspec.machine import osapi
        ru1 = osapi.current().rusage()
        # None where the OS does not count it (Windows: no involuntary/major split)
        self.delta = {k: (ru1[k] - self._ru0[k] if ru1[k] is not None and
                          self._ru0[k] is not None else None) for k in ru1}

    def summary(self) -> dict:
        per_cpu = list(zip(*[s["cpu_percent"] for s in self.samples])) if self.samples else []
        mhz = [m for s in self.samples if s["cpu_mhz"] for m in s["cpu_mhz"]]
        return {"n_samples": len(self.samples),
                "cpu_percent_mean": [float(np.mean(c)) for c in per_cpu],
                "cpu_mhz_mean": float(np.mean(mhz)) if mhz else None,
                "rss_bytes_max": max((s["rss_bytes"] for s in self.samples), default=None),
                **getattr(self, "delta", {})}
