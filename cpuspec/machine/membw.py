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
import os
import resource
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
    """Largest cache size listed for cpu0 (the last-level cache)."""
    best = 0
    for idx in (root / "sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (idx / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        best = max(best, int(text.rstrip("KMG")) * mult)
    return best or DEFAULT_LLC_BYTES


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

    def worker(i: int, cpu: int, kernel: str, start: threading.Barrier, out: list) -> None:
        os.sched_setaffinity(0, {cpu})  # this thread only
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
    return BandwidthResult(list(cpus), n_elements, n_elements * WORD_BYTES, gbps, samples)


def _stream_forever(cpu: int, n_elements: int, stop) -> None:  # pragma: no cover (subprocess)
    os.sched_setaffinity(0, {cpu})
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
        self._ru0 = resource.getrusage(resource.RUSAGE_SELF)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        self.delta = {"voluntary_ctx_switches": ru1.ru_nvcsw - self._ru0.ru_nvcsw,
                      "involuntary_ctx_switches": ru1.ru_nivcsw - self._ru0.ru_nivcsw,
                      "minor_page_faults": ru1.ru_minflt - self._ru0.ru_minflt,
                      "major_page_faults": ru1.ru_majflt - self._ru0.ru_majflt}

    def summary(self) -> dict:
        per_cpu = list(zip(*[s["cpu_percent"] for s in self.samples])) if self.samples else []
        mhz = [m for s in self.samples if s["cpu_mhz"] for m in s["cpu_mhz"]]
        return {"n_samples": len(self.samples),
                "cpu_percent_mean": [float(np.mean(c)) for c in per_cpu],
                "cpu_mhz_mean": float(np.mean(mhz)) if mhz else None,
                "rss_bytes_max": max((s["rss_bytes"] for s in self.samples), default=None),
                **getattr(self, "delta", {})}
