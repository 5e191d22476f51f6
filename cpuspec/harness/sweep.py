"""llama-bench-style sweeps: comma lists and ranges expand to a cartesian product of points,
ordered so each model pair loads as rarely as possible; every finished point is handed to a
callback at once (the CLI prints its row and rewrites the JSON), so an interrupted sweep keeps
what it measured.

Value syntax (as llama-bench): `4`, `1,2,4`, `1-8` (1..8), `1-8+2` (1,3,5,7), `1-16*2`
(1,2,4,8,16), and comma lists of those.
"""
from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass
from typing import Callable, Sequence

from cpuspec.harness.bench import BenchConfig, load_pair, resolve_models, run_bench
from cpuspec.machine.hardware import CorePinner, check_cpus, current_affinity, select_cpus, split_for_parallel
from cpuspec.inputs.models import derive_model
from cpuspec.report.tables import sweep_figures
from cpuspec.results.schema import SCHEMA_VERSION

_RANGE = re.compile(r"^(\d+)-(\d+)(?:([+*])(\d+))?$")
# Axes in loading order: the quants and GPU layers decide which models are loaded, cores are
# re-pinned, threads, k and the depth change only the contexts.
AXES = ("target_quant", "draft_quant", "n_gpu_layers", "draft_gpu_layers", "p_cores",
        "e_cores", "threads", "k", "depth", "p_min")
# The quant axes take quant types ("" = the file as given); the others, integers.
QUANT_AXES = ("target_quant", "draft_quant")


# Values one list may expand to (a sweep's size is checked against MAX_SWEEP_POINTS later; this
# only keeps `1-1000000000` from filling memory before that check).
MAX_VALUES = 10_000


class SweepError(ValueError):
    """A value list cannot be parsed; the message quotes it."""


def parse_values(text: str, minimum: int = 1, name: str = "value") -> list[int]:
    out: list[int] = []
    for item in str(text).split(","):
        item = item.strip()
        if re.fullmatch(r"-\d+", item):
            raise SweepError(f"{name}: {item}: must be at least {minimum}")
        if item.isdigit():
            values = [int(item)]
        else:
            m = _RANGE.match(item)
            if not m:
                raise SweepError(f"{name}: {item!r} is not a number or a range like 1-8, "
                                 "1-8+2 or 1-16*2")
            lo, hi, op, step = int(m[1]), int(m[2]), m[3], int(m[4] or 1)
            if hi < lo:
                raise SweepError(f"{name}: range {item!r} runs backwards")
            if op == "*":
                if lo < 1 or step < 2:
                    raise SweepError(f"{name}: {item!r}: a *-range needs a start ≥ 1 and a "
                                     "factor ≥ 2")
                values, v = [], lo
                while v <= hi:
                    values.append(v)
                    v *= step
            else:
                if step < 1:
                    raise SweepError(f"{name}: {item!r}: the step must be ≥ 1")
                if (hi - lo) // step + 1 > MAX_VALUES:
                    raise SweepError(f"{name}: {item!r} has {(hi - lo) // step + 1} values, "
                                     f"more than {MAX_VALUES}")
                values = list(range(lo, hi + 1, step))
        for v in values:
            if v < minimum:
                raise SweepError(f"{name}: {v}: must be at least {minimum}")
        out += values
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class Point:
    target_quant: str = ""   # a derived variant of the target in this quant ("" = as given)
    draft_quant: str = ""
    n_gpu_layers: int = 0
    draft_gpu_layers: int = 0
    p_cores: int = 0
    e_cores: int = 0
    threads: int = 0
    k: int = 4
    depth: int = 0           # tokens of context held before each prompt (bench --depth)
    p_min: float = 0.0       # the static policy's confidence gate (bench --p-min)

    def key(self) -> tuple:
        return tuple(getattr(self, a) for a in AXES)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def label(self, axes: Sequence[str] | None = None) -> str:
        """`threads=2, k=4, p_min=0.0` for progress lines: the axes set away from their
        defaults (a quant of "" is the file as given; 0 threads, GPU layers or cores), and
        every axis that varies in the sweep (`axes`), a zero among them too."""
        items = self.as_dict().items()
        return ", ".join(f"{a}={v}" for a, v in items if v or a in (axes or ()))


def expand(axes: dict[str, list[int]]) -> list[Point]:
    """Cartesian product, ordered by AXES (GPU layers outermost: one model load per pair)."""
    names = [a for a in AXES if a in axes]
    points = [Point(**dict(zip(names, combo)))
              for combo in itertools.product(*(axes[a] for a in names))]
    return sorted(points, key=Point.key)


def varying(points: list[Point]) -> list[str]:
    return [a for a in AXES if len({getattr(p, a) for p in points}) > 1]


@dataclass
class Plan:
    """Where every point runs, checked before anything runs: its CPUs per (P-cores, E-cores)
    choice (None: not pinned), the draft's own CPUs, and what the plan decided by itself."""
    points: list[Point]
    cpus_of: dict[tuple[int, int], list[int] | None]
    draft_cpus: list[int] | None
    notes: list[str]

    @property
    def is_sweep(self) -> bool:
        p = self.points[0]
        return len(self.points) > 1 or bool(p.n_gpu_layers or p.draft_gpu_layers
                                            or p.target_quant or p.draft_quant)


def plan(hw, axes: dict[str, list], smt: bool, draft_cpus: list[int] | None,
         schedule: str) -> Plan:
    """Expand the axes and choose every point's CPUs (hardware.select_cpus); the parallel
    schedule without --draft-cores splits a hybrid CPU's P-cores (target) from its E-cores
    (draft). Raises HardwareError or SweepError."""
    points = expand(axes)
    cpus_of = {(p.p_cores, p.e_cores): select_cpus(hw, p.p_cores, p.e_cores, smt)
               if (p.p_cores or p.e_cores) else None for p in points}
    notes = []
    if draft_cpus:
        draft_cpus = check_cpus(hw, draft_cpus)
    elif schedule == "parallel" and hw.pinning != "thread":
        notes.append("parallel schedule, unpinned: this OS gives no thread cores of its own, "
                     "so the target's and the draft's threads share the process's cores as it "
                     "schedules them (-td sets the draft's threads)")
    elif schedule == "parallel":
        if len(points) > 1 or hw.hybrid == "not hybrid":
            raise SweepError("--schedule parallel needs --draft-cores (the draft's own CPUs); "
                             "on a hybrid CPU, --p-cores N --e-cores M puts the target on P "
                             "and the draft on E")
        p0 = points[0]
        target_cpus, draft_cpus = split_for_parallel(hw, p0.p_cores, p0.e_cores, smt)
        cpus_of[(p0.p_cores, p0.e_cores)] = target_cpus
        notes.append(f"parallel schedule: target on P-cores {target_cpus}, draft on E-cores "
                     f"{draft_cpus}")
    return Plan(points, cpus_of, draft_cpus, notes)


def point_config(base: BenchConfig, p: Point, plan: Plan, default_threads: int,
                 warn: Callable[[str], None]) -> BenchConfig:
    """One point's bench configuration: its k, its CPUs and its threads (default: one per
    chosen CPU, else default_threads), warning when the threads outnumber the CPUs."""
    cpus = plan.cpus_of[(p.p_cores, p.e_cores)]
    n_cpus = len(cpus or current_affinity())
    n_threads = p.threads or (len(cpus) if cpus else default_threads)
    if n_threads > n_cpus:
        warn(f"WARNING: --threads {n_threads} is more than the {n_cpus} CPUs this process "
             f"may use; threads will share cores and decode slower (try --threads {n_cpus})")
    return dataclasses.replace(base, threads=n_threads, k=p.k, cpus=cpus, depth=p.depth,
                               p_min=p.p_min)


def sweep_document(points: list[Point], meta: dict, argv: list[str], gpu_ok: bool) -> dict:
    """A sweep's results file before its first point: rows and points are added as they end."""
    return {"schema_version": SCHEMA_VERSION, "kind": "sweep", "complete": False,
            "axes": varying(points) or ["threads"], "meta": meta, "settings": {"argv": argv},
            "gpu_offload_supported": gpu_ok, "rows": [], "points": []}


def add_point(doc: dict, point: Point, results: dict) -> dict:
    """Record one finished point in the sweep's document: its coordinates in "rows", its raw
    runs in "points"; returns its row with the figures, computed as every reader computes them
    (sweep_rows). (Files written before 2026-12-03 may hold GPU points skipped on a CPU build,
    rows with "skipped": such points are now refused before the sweep starts.)"""
    doc["rows"].append(point.as_dict() | {"threads": results["settings"]["threads"]})
    doc["points"].append(results)
    return sweep_row(point, results)


def run_sweep(base: BenchConfig, points: list[Point],
              point_cfg: Callable[[BenchConfig, Point], BenchConfig],
              on_point: Callable[[Point, dict], None],
              log: Callable[[str], None] = lambda _: None) -> None:
    """Run every point; on_point(point, results) after each one. Offloaded points need a GPU
    build (the CLI refuses them before this runs on one without)."""
    fetched = resolve_models(base, log)
    initial_cpus = current_affinity()
    pinner = CorePinner()
    varying = [a for a in AXES if len({getattr(p, a) for p in points}) > 1]
    for (tq, dq, ngl, dgl), group in itertools.groupby(
            points, lambda p: (p.target_quant, p.draft_quant, p.n_gpu_layers,
                               p.draft_gpu_layers)):
        group = list(group)
        load_cfg = dataclasses.replace(base, n_gpu_layers=ngl, draft_gpu_layers=dgl)
        shared: dict = {}   # what this loaded pair's points measured once (below)
        with load_pair(load_cfg, log, quantized(fetched, tq, dq, log)) as loaded:
            for p in group:
                cfg = reuse_shared(point_cfg(load_cfg, p), shared)
                # A point without pinning runs where the sweep started, not on the CPUs of
                # the pinned point before it.
                pinner.pin(cfg.cpus or initial_cpus)
                log(f"measuring point {p.label(varying)}")
                results = run_bench(cfg, log, loaded)
                on_point(p, keep_shared(cfg, results, shared, p.label(varying)))


# What the points on one loaded pair share instead of measuring it again (issue 60: at B‴'s
# speeds two cost probes and a perplexity took ~40 s of a point, more than 5 prompts):
# * the target's perplexity: the same weights give the same text the same score, whatever a
#   point's k, threads or CPUs; the first point measures it, the others carry it ("from");
# * the cost probe: it times decodes, which change with the threads, the CPUs and the depth,
#   not with k or p-min; the first point of each (threads, CPUs, depth) measures its probes
#   before and after its prompts, the next ones reuse its first (BenchConfig.probes: no end
#   probe, so no drift band, as tune's race; a k past the probe's curve probes afresh).
def _probe_key(cfg: BenchConfig) -> tuple:
    return cfg.threads, tuple(cfg.cpus or ()), cfg.depth


def reuse_shared(cfg: BenchConfig, shared: dict) -> BenchConfig:
    """The point's configuration taking what an earlier point on this pair measured."""
    if cfg.quality and "quality" in shared:
        cfg = dataclasses.replace(cfg, quality=False)
    if cfg.probes is None and _probe_key(cfg) in shared:
        cfg = dataclasses.replace(cfg, probes=shared[_probe_key(cfg)])
    return cfg


def keep_shared(cfg: BenchConfig, results: dict, shared: dict, label: str) -> dict:
    """After a point: what it measured that the next points may share, and what it shares
    recorded in its results (a perplexity it did not measure carries where it came from)."""
    if "quality" in results and "quality" not in shared:
        shared["quality"] = {**results["quality"],
                             "from": f"sweep point {label} (the same loaded target)"}
    elif "quality" in shared and "quality" not in results:
        results["quality"] = shared["quality"]
    probe = results.get("cost_probe")
    if probe and "cost_probes_from" not in results:   # measured by this point: the widest
        known = shared.get(_probe_key(cfg), {}).get("cost_probe", {})  # curve serves the rest
        if len(probe.get("verify_s", ())) > len(known.get("verify_s", ())):
            shared[_probe_key(cfg)] = {
                "cost_probe": probe,
                "from": f"sweep point {label} (the same loaded pair, threads, CPUs and depth)"}
    return results



def quantized(fetched: tuple, target_quant: str, draft_quant: str,
              log: Callable[[str], None]) -> tuple:
    """The fetched (target, draft, pair name) with each model replaced by its derived variant
    in the quant asked for (models.derive_model: requantized, cached, labelled derived)."""
    if not (target_quant or draft_quant):
        return fetched
    target, draft, pair = fetched
    if target_quant:
        target = derive_model(target, target_quant, log)
    if draft_quant and draft is not None:
        draft = derive_model(draft, draft_quant, log)
    return target, draft, pair


def sweep_row(point: Point, results: dict) -> dict:
    """One row per point: its coordinates and the overall figures."""
    row = point.as_dict()
    return row | {"threads": results["settings"]["threads"]} | sweep_figures(results)
