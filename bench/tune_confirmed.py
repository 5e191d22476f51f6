"""Issue 60: how many answers a tune file confirmed, and at what cost.

    python bench/tune_confirmed.py BEFORE.json[.gz] RACE.json[.gz] ...

An answer is confirmed when it was measured on the confirm prompts with an interval (≥ 5
prompts): a distinct configuration (candidate, k, p-min), raw decoding on the reference target
not counted (it is the yardstick). A tune file written before the race (no "race" per task)
confirms its "recommended" and "best_sd" answers; a race file, every member it measured.
Prints per file: the answers confirmed per task, the generations its confirmation ran, and
the file's settings.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cpuspec.results.store import load_json  # noqa: E402


def _has_interval(conf: dict | None) -> bool:
    if not conf:
        return False
    st = conf.get("vs_reference_raw_stats") or {}
    return bool(conf.get("measured_speedup_ci") or st.get("ci"))


def confirmed(doc: dict) -> dict[str, list[str]]:
    """Per task, the configurations measured on ≥ 5 confirm prompts with an interval."""
    out = {}
    for task, rec in doc["recommendations"].items():
        answers = rec.get("race") or [rec[k] for k in ("recommended", "best_sd") if k in rec]
        seen = {}
        for a in answers:
            if _has_interval(a.get("confirmed")):
                gate = f" p-min {a['p_min']:g}" if a.get("p_min") else ""
                n = a["confirmed"].get("n_prompts")
                seen[(a["candidate"], a["k"], a.get("p_min", 0))] = \
                    f"{a['candidate']} k={a['k']}{gate} ({n} prompts)"
        out[task] = list(seen.values())
    return out


def generations(doc: dict) -> int:
    return sum(len(r.get("runs") or []) for r in doc.get("confirm_runs") or [])


def main(paths: list[str]) -> None:
    for path in paths:
        doc = load_json(Path(path))
        per_task = confirmed(doc)
        total = sum(len(v) for v in per_task.values())
        print(f"{path}: {total} answers confirmed; {generations(doc)} generations on the "
              f"confirm prompts; race size {doc.get('race_size', '- (before the race)')}; "
              f"argv {' '.join(doc['settings']['argv'][1:])}")
        for task, names in per_task.items():
            print(f"  {task}: {len(names)}: " + "; ".join(names))
        if doc.get("skipped_for_budget"):
            print("  skipped for the budget: " + "; ".join(doc["skipped_for_budget"]))


if __name__ == "__main__":
    main(sys.argv[1:])
