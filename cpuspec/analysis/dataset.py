"""The open results dataset: one tidy row per (run, task, configuration), computed from a
results file (bench: per task; what-if: per shape-true target), with the machine, the models,
the settings and the results, and nothing that identifies a person (no hostname, user name,
file path or prompt text: the prompts are a sha256). docs/dataset.md documents every column;
DATASET_SCHEMA is its version, and results/parquet.py reads older versions through a
migration."""
from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any

from cpuspec.analysis.summary import OVERALL, summarize, summarize_drift
from cpuspec.analysis.whatif import ASSUMED_P, whatif_row
from cpuspec.results.records import Machine, engine_of_build

DATASET_SCHEMA = 5


def _method_of_drafter(drafter: str | None) -> str | None:
    """Schema 1 had no method: every run of it drafted with a separate draft model ("draft",
    llama.cpp's draft-simple) or an n-gram drafter (lookup, hybrid, gated kinds)."""
    if drafter is None:
        return None
    return "draft" if drafter in ("model", "gated") else f"ngram ({drafter})"


def _to_2(table):
    """Schema 1 → 2: the `method` column (issue 58), from each row's drafter."""
    import pyarrow as pa
    if "method" in table.column_names:
        return table
    drafters = table.column("drafter").to_pylist() if "drafter" in table.column_names \
        else [None] * table.num_rows
    col = pa.array([_method_of_drafter(d) for d in drafters], pa.string())
    at = table.column_names.index("drafter") + 1 if "drafter" in table.column_names \
        else table.num_columns
    return table.add_column(at, "method", col)


def _to_3(table):
    """Schema 2 → 3: `matrix_engine` and `matrix_engine_used` (issue 68), from each row's
    llama_system_info where its build ran an engine, unknown (null) otherwise; and what a row's
    interval is (issue 69): `ci_level`, `design`, `stopped_at`, `prompts_planned` null, since
    a schema-2 row may hold a fixed run's 95 % interval or a sequential look's 1 − α/K
    (95-99.2 %),
    and its "not significant" may be an undecided task (leaderboard says "?")."""
    import pyarrow as pa
    if "matrix_engine" in table.column_names:
        return table
    at = table.column_names.index("verdict") + 1 if "verdict" in table.column_names \
        else table.num_columns
    for name, typ in (("ci_level", pa.float64()), ("design", pa.string()),
                      ("stopped_at", pa.int64()), ("prompts_planned", pa.int64())):
        table = table.add_column(at, name, pa.nulls(table.num_rows, typ))
        at += 1
    infos = table.column("llama_system_info").to_pylist() \
        if "llama_system_info" in table.column_names else [None] * table.num_rows
    pairs = [engine_of_build(i) for i in infos]
    at = table.column_names.index("device") + 1 if "device" in table.column_names \
        else table.num_columns
    table = table.add_column(at, "matrix_engine", pa.array([p[0] for p in pairs], pa.string()))
    return table.add_column(at + 1, "matrix_engine_used",
                            pa.array([p[1] for p in pairs], pa.int64()))


def _to_4(table):
    """Schema 3 → 4: `target_repo` and `draft_repo` (issue 70: the public name a model came
    by, a hub repo or an Ollama name), null in rows written before they were recorded."""
    import pyarrow as pa
    if "target_repo" in table.column_names:
        return table
    for role in ("target", "draft"):
        at = table.column_names.index(f"{role}_label") + 1 \
            if f"{role}_label" in table.column_names else table.num_columns
        table = table.add_column(at, f"{role}_repo", pa.nulls(table.num_rows, pa.string()))
    return table


def _to_5(table):
    """Schema 4 → 5: `pinning` (issue 77: what the OS let cpuspec choose, thread / process /
    none), null in rows written before it was recorded (all of them on Linux: "thread"); the
    audit's classes and the logit drift (issue 78: `audit_numeric`, `audit_defect`,
    `drift_*`), null: not measured then."""
    import pyarrow as pa
    if "pinning" in table.column_names:
        return table
    at = table.column_names.index("os") + 1 if "os" in table.column_names \
        else table.num_columns
    table = table.add_column(at, "pinning", pa.nulls(table.num_rows, pa.string()))
    at = table.column_names.index("audit_n") + 1 if "audit_n" in table.column_names \
        else table.num_columns
    arrow = {"int": pa.int64(), "float": pa.float64()}
    for name, typ in AUDIT_DRIFT_COLUMNS:
        table = table.add_column(at, name, pa.nulls(table.num_rows, arrow[typ]))
        at += 1
    return table


# issue 78: per row, its outputs' divergences the target explains / the loop's defects; per
# run, the batched-vs-one-token logit drift (analysis/summary.summarize_drift)
AUDIT_DRIFT_COLUMNS = [("audit_numeric", "int"), ("audit_defect", "int"),
                       ("drift_max_dlogit_median", "float"), ("drift_max_dlogit_max", "float"),
                       ("drift_flips_per_1k", "float"), ("drift_tv_mean", "float"),
                       ("drift_batch", "int")]


# version → function(Arrow table) → the table at version + 1
MIGRATIONS: dict = {1: _to_2, 2: _to_3, 3: _to_4, 4: _to_5}
# every column, in order, with its Arrow type name (results/parquet.py maps them)
COLUMNS: list[tuple[str, str]] = [
    ("dataset_schema", "int"), ("row_id", "str"), ("run_id", "str"), ("kind", "str"),
    ("month", "str"),
    # the machine
    ("machine_fingerprint", "str"), ("cpu_vendor", "str"), ("cpu_name", "str"),
    ("cpu_family", "int"), ("cpu_model", "int"), ("cpu_stepping", "int"), ("isa", "str"),
    ("threads", "int"), ("logical_cpus", "int"), ("p_cpus", "int"), ("e_cpus", "int"),
    ("memory_gib", "float"), ("bandwidth_gbps", "float"), ("os", "str"), ("pinning", "str"),
    ("llama_cpp_python", "str"), ("llama_system_info", "str"), ("backend", "str"),
    ("device", "str"), ("matrix_engine", "str"), ("matrix_engine_used", "int"),
    # the models
    ("target_sha256", "str"), ("target_quant", "str"), ("target_params", "int"),
    ("target_label", "str"), ("target_repo", "str"), ("draft_sha256", "str"),
    ("draft_quant", "str"), ("draft_params", "int"), ("draft_label", "str"),
    ("draft_repo", "str"),
    # the settings
    ("task", "str"), ("k", "int"), ("drafter", "str"), ("method", "str"),
    ("policy", "str"), ("p_min", "float"),
    ("max_tokens", "int"), ("depth", "int"), ("temperature", "float"),
    ("prompts_sha256", "str"), ("n_prompts", "int"),
    # the results
    ("raw_tok_s", "float"), ("sd_tok_s", "float"), ("sd_speedup", "float"),
    ("sd_ci_low", "float"), ("sd_ci_high", "float"), ("verdict", "str"),
    ("ci_level", "float"), ("design", "str"), ("stopped_at", "int"), ("prompts_planned", "int"),
    ("adaptive_speedup", "float"), ("a", "float"), ("alpha", "float"), ("beta", "float"),
    ("break_even_a", "float"), ("acceptance_pct", "float"), ("zero_accept_pct", "float"),
    ("raw_p99_ms", "float"), ("sd_p99_ms", "float"), ("audit_identical", "int"),
    ("audit_n", "int"), *AUDIT_DRIFT_COLUMNS,
    # the what-if (a shape-true target's costs): break-even acceptance at k = 1..8, the best
    # SD ×raw at acceptance 0.8
    *[(f"break_even_p_k{k}", "float") for k in range(1, 9)],
    ("best_sd_at_p80", "float"), ("c", "float"), ("decode_tok_s", "float"),
]
NAMES = [n for n, _ in COLUMNS]
_QUANT = re.compile(r"\b(Q\d_K(?:_[SML])?|Q\d_\d|IQ\d_\w+|F16|BF16|F32)\b", re.I)


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and x == x and x not in (
        float("inf"), float("-inf")) else None


def _quant(model: dict) -> str | None:
    """A model's quant type from its llama.cpp description or its file name."""
    for text in (model.get("desc"), model.get("file")):
        m = _QUANT.search(str(text or "").replace(" - Medium", "_M").replace(" - Small", "_S"))
        if m:
            return m.group(1).upper()
    return None


def _label(model: dict) -> str:
    if model.get("shape_true"):
        return "shape-true"
    derived = model.get("derived") or model.get("source") == "derived" or \
        re.search(r"\.from-[0-9a-f]{12}\.gguf$", str(model.get("file") or ""))
    return "derived" if derived else "real"


def _cpu_id(hw: dict) -> tuple[int | None, int | None, int | None]:
    m = re.match(r"family (\d+) model (\d+) stepping (\d+)", hw.get("cpu_id") or "")
    return tuple(int(x) for x in m.groups()) if m else (None, None, None)


OS_SYSTEM_NAMES = {"linux": "Linux", "darwin": "Darwin", "win32": "Windows"}


def machine_columns(doc: dict) -> dict:
    """The machine, as the run recorded it: no hostname, no user, no path."""
    meta = doc.get("meta") or {}
    hw = meta.get("hardware") or {}
    m = Machine.of(doc)
    family, model, stepping = _cpu_id(hw)
    kinds = hw.get("cores_by_kind") or {}
    name = hw.get("cpu_model") or "?"
    vendor = next((v for v in ("AMD", "Intel", "Apple", "Ampere", "Qualcomm", "ARM")
                   if v.lower() in name.lower()), None)
    mem = hw.get("memory_total_bytes")
    devices = meta.get("ggml_devices") or []
    gpu = next((d for d in devices if d.get("type") in ("GPU", "iGPU")), None)
    out = {"cpu_vendor": vendor, "cpu_name": name, "cpu_family": family, "cpu_model": model,
           "cpu_stepping": stepping, "isa": " ".join(m.isa), "threads": _int(m.threads),
           "logical_cpus": hw.get("logical_cpus"), "p_cpus": len(kinds.get("P", [])),
           "e_cpus": len(kinds.get("E", [])),
           "memory_gib": round(mem / 2 ** 30, 1) if mem else None,
           "bandwidth_gbps": _num((meta.get("bandwidth") or {}).get("copy_gbps")),
           # the OS as platform.system() names it (Linux, Darwin, Windows): the run's own
           # record where it has one (hardware.os), else its platform string
           "os": OS_SYSTEM_NAMES.get(hw.get("os"), None)
           or (meta.get("platform") or "").split("-")[0] or None,
           "pinning": hw.get("pinning") if isinstance(hw.get("pinning"), str) else None,
           "llama_cpp_python": meta.get("llama_cpp_python_version"),
           "llama_system_info": meta.get("llama_system_info"),
           "backend": " ".join(m.backend) or "CPU",
           "device": (gpu or {}).get("description") or "CPU",
           **_matrix_columns(m)}
    key = json.dumps([out[k] for k in ("cpu_vendor", "cpu_name", "cpu_family", "cpu_model",
                                       "cpu_stepping", "isa", "memory_gib", "backend",
                                       "logical_cpus")])
    out["machine_fingerprint"] = hashlib.sha256(key.encode()).hexdigest()[:16]
    return out


def _matrix_columns(m: Machine) -> dict:
    """The CPU's matrix engine ("none" where it has none) and whether the build ran it; a run
    recorded before engines were, as a schema-2 row migrates (its build's system info)."""
    if m.matrix_engine is None:
        name, used = engine_of_build(m.system_info)
        return {"matrix_engine": name, "matrix_engine_used": used}
    used = m.matrix_used
    return {"matrix_engine": m.matrix_engine.name or "none",
            "matrix_engine_used": None if used is None else int(used)}


def _int(x: Any) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


def model_columns(doc: dict, target: dict | None = None) -> dict:
    models = doc.get("models") or {}
    out = {}
    for role, m in (("target", target or models.get("target") or {}),
                    ("draft", models.get("draft") or {})):
        out |= {f"{role}_sha256": m.get("sha256"), f"{role}_quant": _quant(m),
                f"{role}_params": m.get("n_params"), f"{role}_label": _label(m) if m else None,
                f"{role}_repo": public_repo(m.get("repo")) if m.get("public") is True
                else None}
    return out


def public_repo(repo: object) -> str | None:
    """A model's repo as it may leave the machine, where the run recorded it as public (a
    public hub repo, an Ollama library name): OWNER/REPO or ollama:NAME:TAG; nothing else (a
    local file's path, a private repo's name may name the user)."""
    text = str(repo or "")
    if re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", text) or \
            re.fullmatch(r"ollama:[\w.:/-]+", text) and ".." not in text:
        return text
    return None


def run_id(doc: dict) -> str:
    """A content address of the run: the same file exported twice is the same id."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:20]


@functools.lru_cache(maxsize=1)
def _builtin_texts() -> frozenset[str]:
    from cpuspec.inputs.tasks import ALL_TASKS, builtin_prompts
    return frozenset(p.text for p in builtin_prompts(list(ALL_TASKS)))


def public_task(task: str) -> str:
    """A task's name as it may leave the machine: cpuspec's own task names (and overall)
    verbatim, any other (a user's own prompts file) as "user"."""
    from cpuspec.inputs.tasks import ALL_TASKS, OVERALL as ALL
    return task if task in ALL_TASKS or task == ALL else "user"


def prompts_digest(doc: dict) -> str | None:
    """The sha256 of the prompts' texts where every one is a built-in prompt (public text, so
    runs on the same suite can be matched); None for a user's own prompts, whose short texts
    an unsalted hash would let anyone guess and confirm."""
    texts = [p.get("text", "") for p in doc.get("prompts") or []]
    if not texts or not set(texts) <= _builtin_texts():
        return None
    return hashlib.sha256(json.dumps(texts).encode()).hexdigest()


def _policies(s: dict) -> str | None:
    pol = s.get("policies")
    pol = [pol] if isinstance(pol, str) else pol if isinstance(pol, (list, tuple)) else []
    return ",".join(str(p) for p in pol) or None


def _base(doc: dict) -> dict:
    s = doc.get("settings") or {}
    started = (doc.get("meta") or {}).get("started_at") or ""
    return {"dataset_schema": DATASET_SCHEMA, "run_id": run_id(doc), "kind": doc.get("kind"),
            "month": started[:7] or None, **machine_columns(doc), **model_columns(doc),
            "drafter": s.get("drafter"),
            "method": s.get("method") or _method_of_drafter(s.get("drafter")),
            "p_min": _num(s.get("p_min")),
            "max_tokens": s.get("max_tokens"), "depth": _int(s.get("depth")),
            "temperature": _num(s.get("temperature")), "k": s.get("k"),
            "prompts_sha256": prompts_digest(doc), "policy": _policies(s)}


def _drift_columns(doc: dict) -> dict:
    d = summarize_drift(doc) or {}
    return {"drift_max_dlogit_median": _num(d.get("max_dlogit_median")),
            "drift_max_dlogit_max": _num(d.get("max_dlogit_max")),
            "drift_flips_per_1k": _num(d.get("flips_per_1k")),
            "drift_tv_mean": _num(d.get("tv_mean")), "drift_batch": d.get("batch")}


def bench_rows(doc: dict) -> list[dict]:
    base = _base(doc)
    drift = _drift_columns(doc)
    rows = []
    for task, s in summarize(doc).items():
        cost = s.get("cost") or {}
        ci = s.get("sd_speedup_ci") or [None, None]
        audit = s.get("audit") or {}
        lat = {m: (s.get(f"{m}_latency_ms") or {}).get("p99") for m in ("raw", "sd")}
        rows.append(base | {
            "task": public_task(task), "_key": task, "n_prompts": s.get("sd_speedup_units") or s.get("n_generations"),
            "raw_tok_s": _num(s.get("raw_tok_s")), "sd_tok_s": _num(s.get("sd_tok_s")),
            "sd_speedup": _num(s.get("sd_speedup")), "sd_ci_low": _num(ci[0]),
            "sd_ci_high": _num(ci[1]), **_interval_columns(s, ci),
            "adaptive_speedup": _num(s.get("adaptive_speedup")), "a": _num(s.get("a")),
            "alpha": _num(cost.get("alpha")), "beta": _num(cost.get("beta")),
            "break_even_a": _num(cost.get("break_even_a")),
            "acceptance_pct": _num(s.get("acceptance_pct")),
            "zero_accept_pct": _num(s.get("zero_accept_pct")),
            "raw_p99_ms": _num(lat["raw"]), "sd_p99_ms": _num(lat["sd"]),
            "audit_identical": audit.get("identical"), "audit_n": audit.get("n"),
            "audit_numeric": audit.get("numeric"), "audit_defect": audit.get("defect"),
            **drift,
            "bandwidth_gbps": base["bandwidth_gbps"] or _decode_gbps(doc, s)})
    return rows


# what a stopping look's state is called in the dataset ("continue": the run was cut between
# looks, no verdict)
LOOK_VERDICT = {"faster": "faster", "slower": "slower", "no difference": "not significant",
                "undecided": "undecided"}
FIXED_LEVEL = 0.95     # the fixed design's t-interval (analysis/stats.py)


def _interval_columns(s: dict, ci) -> dict:
    """What a task's interval is: the design, its level (a fixed run's 95 %, a sequential
    look's 1 − α/K), where it stopped of how many prompts planned, and the verdict (a
    sequential task that ran out of prompts undecided is `undecided`, not "not significant")."""
    seq = s.get("sequential")
    has_ci = ci[0] is not None
    if not seq:
        return {"verdict": s.get("sd_significance"), "design": "fixed",
                "ci_level": FIXED_LEVEL if has_ci else None}
    if seq.get("state") == "pooled":   # tasks stopped at different looks: no interval
        return {"verdict": None, "design": "sequential", "ci_level": None}
    return {"verdict": LOOK_VERDICT.get(seq.get("state")), "design": "sequential",
            "ci_level": _num(seq.get("level")) if has_ci else None,
            "stopped_at": seq.get("units"), "prompts_planned": seq.get("planned")}


def _decode_gbps(doc: dict, s: dict) -> float | None:
    """Where the run probed no bandwidth: the bandwidth its plain decode achieved, the
    target's weight bytes read per token × raw decode t/s (a lower bound on the machine's)."""
    target = (doc.get("models") or {}).get("target") or {}
    weights, tok_s = target.get("weight_bytes"), _num(s.get("raw_decode_tok_s"))
    return round(weights * tok_s / 1e9, 2) if isinstance(weights, (int, float)) and tok_s \
        else None


def whatif_rows(doc: dict) -> list[dict]:
    base = _base(doc)
    rows = []
    for r in doc.get("rows") or []:
        if "cost_probe" not in r:
            continue
        w = whatif_row(r["cost_probe"])
        rows.append(base | model_columns(doc, r.get("target")) | {
            "task": f"what-if {r['shape']}", "c": w["c"], "decode_tok_s": w["decode_tok_s"],
            **{f"break_even_p_k{k}": w["break_even_p"].get(k) for k in range(1, 9)},
            "best_sd_at_p80": w["best"][0.8]["sd_speedup"] if 0.8 in ASSUMED_P else None})
    return rows


def heads_rows(doc: dict) -> list[dict]:
    """A heads run (cpuspec heads): one row per drafter and synthetic acceptance length, its
    method, SD ×raw end to end with its interval, the round's cost in plain decodes (as
    break_even_a); the target and the heads shape-true, the acceptance given, not measured."""
    from cpuspec.analysis.heads import summarize_heads
    base = _base(doc)
    s = doc.get("settings") or {}
    rows = []
    for label, sm in summarize_heads(doc).items():
        for p in sm["points"]:
            st = p["e2e"]
            ci = st["ci"] or [None, None]
            rows.append(base | {
                "task": f"heads {s.get('target_shape', '?')} L={p['length']:g}",
                "_key": f"{label}/{p['length']:g}",
                **_heads_quants(s, sm["method"]),
                "method": sm["method"], "drafter": label, "k": s.get("k"),
                "target_label": "shape-true", "draft_label": "shape-true",
                "target_params": None, "n_prompts": p["prompts"],
                "sd_speedup": _num(st["speedup"]), "sd_ci_low": _num(ci[0]),
                "sd_ci_high": _num(ci[1]), "verdict": st["significance"],
                "design": "fixed", "ci_level": FIXED_LEVEL if ci[0] is not None else None,
                "a": _num(p["a"]), "break_even_a": _num(p["round_cost"])})
    return rows


def _heads_quants(settings: dict, method: str) -> dict:
    """The quant types a heads run used: the target's as recorded (older runs: its file
    name); a head's its own; a draft model and an MTP-only file the target's; the target's own
    MTP layer has no file of its own (None)."""
    target = settings.get("target_quant") or _quant({"file": settings.get("target")})
    head = (settings.get("heads") or {}).get(method) or {}
    draft = None if method == "mtp" else target if method in ("draft", "mtp-file") \
        else head.get("quant")
    return {"target_quant": target, "draft_quant": draft}


def dataset_rows(doc: dict) -> list[dict]:
    """Every row of one results file (bench or what-if; other kinds give none), each with
    every column (None where it does not apply) and its own content-addressed row_id."""
    kind = doc.get("kind")
    rows = bench_rows(doc) if kind == "bench" else whatif_rows(doc) if kind == "whatif" \
        else heads_rows(doc) if kind == "heads" else []
    out = []
    for r in rows:
        full = {n: r.get(n) for n in NAMES}
        key = r.get("_key", full["task"])   # the task's own name: two user tasks, two rows
        full["row_id"] = hashlib.sha256(
            f"{full['run_id']}/{key}/{full['target_quant']}".encode()).hexdigest()[:20]
        out.append(full)
    return out


def is_overall(row: dict) -> bool:
    return row.get("task") == OVERALL
