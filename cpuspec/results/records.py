"""Typed records for what flows between modules, with their JSON in and out in one place.

CostProbe: the cost probe's medians (V(n) per batch size n, the draft's decode, its catch-up
rate, both prefills) that every prediction, the adaptive policy, advise and tune price rounds
with. In a results file it is the "cost_probe" object, whose V(n) keys are strings (JSON);
here they are ints, converted once, and a probe missing what a prediction needs fails here
with its name rather than as a KeyError far away.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from cpuspec.results.schema import ResultsError
from cpuspec.machine.matrix import (MatrixEngine, build_uses, describe,  # noqa: F401
                                     engine_of_build)


class RecordError(ResultsError):
    """A record read from a results file lacks a field or has one of the wrong type."""


@dataclass(frozen=True)
class CostProbe:
    verify_s: dict[int, float]          # V(n): one target decode of n tokens, all n rows
    draft_s: float                      # d: one draft decode of 1 token
    catchup_s: float                    # the draft's time per token of a catch-up batch
    target_prefill_s: float = 0.0       # prefills of the probe's prompt (0: not timed,
    draft_prefill_s: float = 0.0        #   results of schema 1)
    prompt_tokens: int = 0              # ... of this many tokens
    position: int | None = None         # the KV position V(n) and d were timed at
    reps: int | None = None
    verify_samples_s: dict[int, list[float]] = field(default_factory=dict)
    draft_samples_s: list[float] = field(default_factory=list)
    catchup_samples_s: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if 1 not in self.verify_s:
            raise RecordError("a cost probe needs V(1), the target's one-token decode")

    @property
    def t(self) -> float:
        """T = V(1), a plain decode: the unit every cost is stated in."""
        return self.verify_s[1]

    def disturbed(self) -> str | None:
        """Why this probe cannot be a machine's costs, or None: a verify of n > 1 tokens
        timed well under one decode (β < −DISTURBED_BETA: it computes n rows, one at least as
        dear as the decode; seen after a SIGTERM on a loaded machine, a 3.2 s decode and
        β = −0.87), or a draft step that took no time."""
        t = self.verify_s[1]
        low = [n for n, v in sorted(self.verify_s.items()) if n > 1 and
               v < (1 - DISTURBED_BETA) * t]
        if low:
            n = low[0]
            return (f"V({n}) = {1e3 * self.verify_s[n]:.1f} ms against V(1) = {1e3 * t:.1f} "
                    f"ms (β({n - 1}) = {self.verify_s[n] / t - 1:.2f}): a verify cannot cost "
                    "less than one decode, so the machine was disturbed while it was timed")
        if not self.draft_s > 0 or not t > 0:
            return "a decode or draft step timed at no time at all"
        return None

    def prefill_s_per_token(self) -> float:
        """The draft's prefill time per prompt token (0 when the probe did not time it)."""
        return self.draft_prefill_s / self.prompt_tokens if self.prompt_tokens else 0.0

    def scaled_prefills(self, prompt_tokens: int,
                        draft_tokens: int | None = None) -> tuple[float, float]:
        """The target's and the draft's prefill scaled per token to a prompt of prompt_tokens,
        of which the draft reads draft_tokens (a draft window; None: all of them); 0 for probes
        without prefill timings."""
        if not self.prompt_tokens:
            return 0.0, 0.0
        draft_tokens = prompt_tokens if draft_tokens is None else draft_tokens
        return (self.target_prefill_s * prompt_tokens / self.prompt_tokens,
                self.draft_prefill_s * draft_tokens / self.prompt_tokens)

    @classmethod
    def of(cls, probe: "CostProbe | dict") -> "CostProbe":
        return probe if isinstance(probe, cls) else cls.from_dict(probe)

    @classmethod
    def from_dict(cls, d: dict) -> "CostProbe":
        """Read a results file's "cost_probe" (any schema version)."""
        if not isinstance(d, dict):
            raise RecordError("the cost probe is not an object")
        for key in ("verify_s", "draft_s"):
            if key not in d:
                raise RecordError(f"the cost probe has no {key!r}")
        try:
            verify = {int(n): float(v) for n, v in d["verify_s"].items()}
            draft_s = float(d["draft_s"])
            samples = {int(n): [float(x) for x in v]
                       for n, v in (d.get("verify_samples_s") or {}).items()}
        except (TypeError, ValueError, AttributeError) as exc:
            raise RecordError(f"the cost probe's times are not numbers: {exc}") from None
        return cls(verify_s=verify, draft_s=draft_s,
                   catchup_s=float(d.get("draft_catchup_s_per_token", draft_s)),
                   target_prefill_s=float(d.get("target_prefill_s", 0.0)),
                   draft_prefill_s=float(d.get("draft_prefill_s", 0.0)),
                   prompt_tokens=int(d.get("prompt_tokens") or 0),
                   position=d.get("position"), reps=d.get("reps"),
                   verify_samples_s=samples,
                   draft_samples_s=list(d.get("draft_samples_s") or []),
                   catchup_samples_s=list(d.get("draft_catchup_samples_s_per_token") or []))

    @classmethod
    def from_samples(cls, verify_samples: dict[int, list[float]], draft_samples: list[float],
                     catchup_samples: list[float], target_prefill_s: float,
                     draft_prefill_s: float, prompt_tokens: int, position: int,
                     reps: int) -> "CostProbe":
        """A probe from its timed repetitions: every cost is the median of its samples."""
        return cls(verify_s={n: statistics.median(v) for n, v in verify_samples.items()},
                   draft_s=statistics.median(draft_samples),
                   catchup_s=statistics.median(catchup_samples),
                   target_prefill_s=target_prefill_s, draft_prefill_s=draft_prefill_s,
                   prompt_tokens=prompt_tokens, position=position, reps=reps,
                   verify_samples_s=dict(verify_samples), draft_samples_s=list(draft_samples),
                   catchup_samples_s=list(catchup_samples))

    def to_dict(self) -> dict:
        """The results file's "cost_probe" object (V(n) keyed by strings, as JSON needs)."""
        return {"position": self.position, "reps": self.reps,
                "logit_rows": "all n (a verify reads every row)",
                "prompt_tokens": self.prompt_tokens,
                "target_prefill_s": self.target_prefill_s,
                "draft_prefill_s": self.draft_prefill_s,
                "verify_samples_s": {str(n): v for n, v in self.verify_samples_s.items()},
                "draft_samples_s": self.draft_samples_s,
                "verify_s": {str(n): v for n, v in self.verify_s.items()},
                "draft_s": self.draft_s,
                "draft_catchup_samples_s_per_token": self.catchup_samples_s,
                "draft_catchup_s_per_token": self.catchup_s}


# A probe whose verify of n > 1 tokens came out this much cheaper than one decode was timed on
# a disturbed machine (a flat GPU curve measures β ≈ 0 ± 0.03; 0.10 leaves room for that).
DISTURBED_BETA = 0.10


# ISA flags worth naming, and backends, as llama.cpp's system info spells them.
ISA_FLAGS = ("NEON", "ARM_FMA", "SVE", "SME", "AVX", "AVX2", "AVX_VNNI", "AVX512",
             "AVX512_VNNI", "AVX512_BF16", "AMX_INT8", "F16C", "FMA")
BACKENDS = ("CUDA", "METAL", "VULKAN", "SYCL", "HIP", "BLAS", "OPENMP", "REPACK")


def model_label(model: dict | None) -> str | None:
    """A recorded model as a screen names it: its file, or for an Ollama model (whose file is
    a blob named by its sha256) the Ollama name it was given by."""
    if not isinstance(model, dict):
        return None
    repo = model.get("repo")
    if isinstance(repo, str) and repo.startswith("ollama:"):
        return repo
    return model.get("file")


def _flags(info: str, names: tuple[str, ...]) -> list[str]:
    on = set(re.findall(r"(\w+) = 1", info or ""))
    return [n for n in names if n in on]


OS_LABELS = {"linux": "Linux", "darwin": "macOS", "win32": "Windows"}


@dataclass(frozen=True)
class Machine:
    """What a run ran on, from its own record (its "meta" and settings): the CPU, the ISA and
    backends llama.cpp was built with, threads and cores. `label()` names it in a line, for
    tables and figure captions; `same_as()` says whether two records come from one machine."""
    cpu: str
    cpu_id: str | None
    isa: list[str]
    backend: list[str]
    threads: int | str | None
    cpus: list[int] | None
    cores: str
    llama_cpp_python: str | None
    started_at: str | None
    system_info: str = ""
    # the CPU's matrix engine (None: a record from before it was recorded)
    matrix_engine: MatrixEngine | None = None
    # the OS ("linux", "darwin", "win32") and what it let cpuspec pin ("thread", "process",
    # "none"); None in records from before they were recorded
    os: str | None = None
    pinning: str | None = None

    @property
    def matrix_used(self) -> bool | None:
        """Whether the build ran the CPU's matrix engine (None: no engine, or not known)."""
        return build_uses(self.matrix_engine, self.system_info)

    def matrix_phrase(self) -> str:
        return describe(self.matrix_engine, self.matrix_used)

    @classmethod
    def of(cls, results: dict) -> "Machine":
        meta = results.get("meta") or {}
        hw = meta.get("hardware") or {}
        info = meta.get("llama_system_info", "") or ""
        settings = results.get("settings") or {}
        kinds = hw.get("cores_by_kind") or {}
        # a sweep's settings hold no threads: its rows do (one value, or each of them)
        threads = settings.get("threads") or "/".join(
            str(t) for t in sorted({r["threads"] for r in results.get("rows") or []
                                    if r.get("threads")})) or None
        return cls(cpu=hw.get("cpu_model", "?"), cpu_id=hw.get("cpu_id"),
                   isa=_flags(info, ISA_FLAGS), backend=_flags(info, BACKENDS),
                   threads=threads, cpus=settings.get("cpus"),
                   cores=" ".join(f"{k}:{len(v)}" for k, v in kinds.items()),
                   llama_cpp_python=meta.get("llama_cpp_python_version"),
                   started_at=meta.get("started_at"), system_info=info,
                   matrix_engine=MatrixEngine.from_dict(hw.get("matrix_engine")),
                   os=hw.get("os") if isinstance(hw.get("os"), str) else None,
                   pinning=hw.get("pinning") if isinstance(hw.get("pinning"), str) else None)

    def platform_phrase(self) -> str:
        """'macOS, no pinning, P:4 E:4': where two laptops differ beyond the CPU ('' for a
        record from before the OS was recorded)."""
        if not self.os:
            return ""
        name = OS_LABELS.get(self.os, self.os)
        pin = {"thread": "pinning per thread", "process": "pinning per process",
               "none": "no pinning"}.get(self.pinning or "", "pinning ?")
        return f"{name}, {pin}" + (f", {self.cores}" if self.cores else "")

    def label(self) -> str:
        isa = "AVX512" if "AVX512" in self.isa else "AVX2" if "AVX2" in self.isa else \
            "NEON" if "NEON" in self.isa else "/".join(self.isa[:2]) or "?"
        if "AVX_VNNI" in self.isa:  # AMD shipped it from Zen 5 on: it tells two EPYC VMs apart
            isa += "+AVX_VNNI"
        used = self.matrix_used
        if used is not None:        # one build with the CPU's matrix engine, one without
            isa += f"+{self.matrix_engine.name.split()[-1]}" if used else \
                f", {self.matrix_engine.name.split()[-1]} off"
        cpu = f"{self.cpu} ({self.cpu_id})" if self.cpu_id else self.cpu
        return f"{cpu} [{isa}]" + (f" {self.threads}t" if self.threads else "")

    def same_as(self, other: "Machine") -> bool:
        """One machine: the same CPU model and the same llama.cpp build (its system info)."""
        return (self.cpu, self.system_info) == (other.cpu, other.system_info)

    def to_dict(self) -> dict:
        return {"cpu": self.cpu, "cpu_id": self.cpu_id, "isa": self.isa,
                "backend": self.backend, "threads": self.threads, "cpus": self.cpus,
                "cores": self.cores, "llama_cpp_python": self.llama_cpp_python,
                "started_at": self.started_at,
                "matrix_engine": self.matrix_engine.to_dict() if self.matrix_engine else None,
                "matrix_engine_used": self.matrix_used, "os": self.os,
                "pinning": self.pinning}


# --- noise: what else ran while a window was measured ---------------------------------------

# A generation during which programs other than cpuspec used more than this many CPUs on
# average is flagged as disturbed. A quiet 2-vCPU VM measured 0.00-0.03 here; one
# `while 1: pass` beside the bench takes ~0.5-1.0 (bench/README.md, noise check).
NOISY_OTHER_CPUS = 0.15
# psutil counts CPU time in 10 ms ticks per CPU: below this window the estimate above is
# mostly rounding, so it is recorded but not judged.
MIN_WINDOW_FOR_CPU_TIMES_S = 0.5
# Linux's pressure-stall information (the kernel's pressure/cpu file, "some", in µs; machine/osapi): the share of the
# time some runnable task waited for a CPU. A generation with more than this share is flagged.
# Measured here over 1-3 s generations: quiet ≤ 3 %; one spinning program beside a 2-thread
# bench ~50 %; a short Python script run by hand during a 1 s generation 10 %, which at a
# 10 % threshold made quiet-run checks flaky.
NOISY_CPU_PRESSURE = 0.20
# Windows shorter than this are recorded but not judged (pressure, speed outliers): one 3 ms
# scheduling hiccup is 20 % of a 15 ms generation of the tiny test models, on a quiet machine.
MIN_JUDGED_WINDOW_S = 0.2
# A generation slower than this fraction of its task's median speed (same mode) is an outlier:
# on a quiet machine the prompts of one task differ by ~10-20 % in speed, not 2×.
OUTLIER_FRACTION_OF_MEDIAN = 0.5


@dataclass
class NoiseSample:
    """Machine activity during one measured window: CPUs used by other programs (and by the
    hypervisor, as steal), the share of the time some task waited for a CPU (Linux PSI), and
    the load average at its end."""
    wall_s: float
    own_cpu_s: float
    other_cpu_s: float      # busy CPU time of the whole machine minus this process's
    steal_cpu_s: float
    load_avg_1m: float | None
    cpu_pressure: float | None = None   # None where the OS has no PSI (macOS, Windows, older Linux)

    @property
    def other_cpus(self) -> float:
        """Average number of CPUs other programs kept busy during the window."""
        return self.other_cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def reasons(self) -> list[str]:
        """Why this window is not a clean measurement; empty when it is."""
        out = []
        if self.wall_s >= MIN_JUDGED_WINDOW_S and self.cpu_pressure is not None \
                and self.cpu_pressure > NOISY_CPU_PRESSURE:
            out.append(f"tasks waited for a CPU {100 * self.cpu_pressure:.0f}% of the time")
        if self.wall_s >= MIN_WINDOW_FOR_CPU_TIMES_S and self.other_cpus > NOISY_OTHER_CPUS:
            out.append(f"other programs used {self.other_cpus:.2f} CPUs")
        return out

    def to_dict(self) -> dict:
        return {"wall_s": self.wall_s, "own_cpu_s": self.own_cpu_s,
                "other_cpu_s": self.other_cpu_s, "steal_cpu_s": self.steal_cpu_s,
                "other_cpus": self.other_cpus, "cpu_pressure": self.cpu_pressure,
                "load_avg_1m": self.load_avg_1m}


def noise_reasons(d: dict) -> list[str]:
    """reasons() of a NoiseSample saved with to_dict()."""
    return NoiseSample(d["wall_s"], d["own_cpu_s"], d["other_cpu_s"], d["steal_cpu_s"],
                       d.get("load_avg_1m"), d.get("cpu_pressure")).reasons()
