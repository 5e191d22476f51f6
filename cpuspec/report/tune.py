"""`cpuspec tune`'s printer: the ranking, the two answers per task with their confirmations,
the `cpuspec bench` line of each, and how to run each SD answer outside cpuspec."""
from __future__ import annotations

import shlex

from cpuspec.analysis.sequential import PRECISION
from cpuspec.core.commands import SERVER, hub_files, hub_names, invocations
from cpuspec.report import screen
from cpuspec.report.load import load_note
from cpuspec.report.paths import how_to_run, server_share
from cpuspec.report.tables import speedup_cell
from cpuspec.core.window import describe_window


def config_of(command: str) -> dict | None:
    """The configuration a recommended `cpuspec bench` line runs (None: not an SD one)."""
    args = shlex.split(command)

    def opt(*names, default=None):
        for name in names:
            if name in args and args.index(name) + 1 < len(args):
                return args[args.index(name) + 1]
        return default
    if opt("--target") is None or opt("-k") is None:
        return None
    return {"target": opt("--target"), "draft": opt("--draft"), "k": int(opt("-k")),
            "drafter": opt("--drafter", default="model"),
            "threads": int(opt("--threads", default="1")),
            "p_min": float(opt("--p-min", default="0")),
            "tasks": [t for t in opt("--tasks", default="").split(",") if t]}


def run_it_elsewhere(command: str, meta: dict | None = None, models: dict | None = None
                     ) -> list[str]:
    """Under a recommended SD configuration's `cpuspec bench` line: the same configuration in
    llama.cpp's server and CLI and in llama-cpp-python (models fetched from the hub by the
    names llama.cpp takes: `models`, the measured run's record), and what `cpuspec paths`
    measured of it here (paths_report.how_to_run)."""
    c = config_of(command)
    if c is None:
        return []
    return how_to_run(c["target"], c["draft"], c["k"], c["drafter"], c["threads"],
                      meta=meta, p_min=c["p_min"], tasks=c["tasks"] or None,
                      hub=hub_names(models or {}), hub_files=hub_files(models or {}))


def _measured_run(doc: dict, candidate: str | None) -> dict:
    """The results of a measured candidate's bench run ({} where the file holds none): its
    cost probe, and its models record (which names llama.cpp's -hf takes for them)."""
    return next((m.get("results") or {} for m in doc.get("measured") or []
                 if candidate is not None and isinstance(m, dict)
                 and m.get("candidate") == candidate), {})


def _models_of(doc: dict, candidate: str | None) -> dict:
    return _measured_run(doc, candidate).get("models") or {}


def _probe_of(doc: dict, candidate: str | None) -> dict | None:
    return _measured_run(doc, candidate).get("cost_probe")


def render_tune_screen(doc: dict, source: str | None = "RUN") -> str:
    """One screen: per task, the answer where SD pays most (or SD off), measured against raw
    on prompts the search did not choose on, its verdict (only an interval is one) and the
    terms of the rule; then the llama-server command of an answer measured faster."""
    rows, server = [], None
    answers = {task: (r.get("best_sd") or r) if "recommended" in r else r
               for task, r in doc["recommendations"].items()}
    # an SD answer that tune's race stopped as slower than another answer (raw decoding on a
    # faster quant, another draft or k) is not the one to serve
    beaten = {task: m for task, r in doc["recommendations"].items()
              for m in (r.get("race") or []) if isinstance(m, dict)
              and m.get("state") == "slower" and _same(m, answers[task])}
    names, prefix = screen.short_names([b["candidate"] for b in answers.values()])
    verdicts: dict[str, str] = {}
    for (task, best), name in zip(answers.items(), names):
        c, t = best.get("confirmed") or {}, best.get("terms") or {}
        ci, rng = _ci_range(c)
        verdict = screen.verdict_of(ci, rng)
        if verdict == "-":
            verdict = "SD off" if not best.get("pays") else "predicted"
        verdicts[task] = verdict
        rows.append([screen.cut(task, 12), screen.cut(name, 36), _k_cell(best),
                     screen.speedup(c.get("measured_speedup"), ci, rng), verdict,
                     f"{t['a']:.2f} vs {t['break_even_a']:.2f}" if t else "-"])
        if verdict == "faster" and server is None and task not in beaten \
                and config_of(best["command"]):
            server = (task, config_of(best["command"]), _probe_of(doc, best["candidate"]),
                      _models_of(doc, best["candidate"]))
    spent = doc.get("wall_s")
    lines = [*screen.wrap("cpuspec tune: where SD pays most per task, measured ×raw on prompts "
                          "the search did not choose on (95 % interval; *: a range)"
                          + (f"; models {prefix}…" if prefix else "")
                          + (f"; {spent / 60:.1f} min of wall time" if spent else "")), "",
             screen.table(["task", "target + draft", "k", "measured ×raw", "verdict",
                           "a vs 1+α+β"], rows)]
    lines += _fastest_screen(doc)
    if beaten:
        lines += screen.wrap("Beaten in tune's race, × the leader at the look that stopped "
                             "it, on the same prompts: " + "; ".join(
                                 f"{task} by {m['behind']}, {_vs_leader(m)} at "
                                 f"{m.get('at') or m.get('prompts')} prompts"
                                 for task, m in beaten.items()), "  ")
    lines.append("")
    lines += screen.more(source, "the ranking, the fastest per task, predictions, every "
                                 "command")
    return "\n".join(lines + _next_lines(doc, server, beaten, answers, verdicts))


def _next_lines(doc: dict, server, beaten: dict, answers: dict, verdicts: dict) -> list[str]:
    """The screen's last line: serve an answer measured faster (the SD answer, else the
    fastest where it beat the reference's raw), run what beat it, or what the evidence asks."""
    if server is None:   # else the fastest answer, where it was measured faster than the
        # reference's raw decoding
        server = next(((task, config_of(rec["command"]), _probe_of(doc, rec["candidate"]),
                        _models_of(doc, rec["candidate"]))
                       for task, rec, verdict in _fastest_answers(doc) if verdict == "faster"
                       and rec["k"] and task not in beaten and config_of(rec["command"])), None)
    if server:
        task, c, probe, models = server
        argv = invocations(c["target"], c["draft"], c["k"], c["drafter"], c["threads"],
                           p_min=c["p_min"], hub=hub_names(models))[SERVER]
        note = load_note(c["target"], c["draft"], c["k"], doc.get("meta"),
                         threads=c["threads"], drafter=c["drafter"], p_min=c["p_min"])
        share = server_share(c["target"], c["draft"], c["k"], c["drafter"], c["threads"],
                             doc.get("meta"), c["p_min"], probe, short=True)
        return screen.wrap(f"Next: serve it ({task}; k = {c['k']}; {note}; {share}):",
                           "  ") + screen.command(argv)
    if beaten:
        return screen.wrap(f"Next: run what beat the SD answer ({', '.join(beaten)}); the "
                           "commands: cpuspec report RUN --details")
    return _next_without_verdict(answers, verdicts)


def _ci_range(c: dict) -> tuple:
    """A confirmation's interval and range; files written before the range existed stored 2
    prompts' min and max as an interval: a range."""
    ci = c.get("measured_speedup_ci") if c.get("n_prompts") else None
    rng = c.get("measured_speedup_range") or (c.get("measured_speedup_ci")
                                              if not c.get("n_prompts") else None)
    return ci, rng


def _next_without_verdict(answers: dict, verdicts: dict) -> list[str]:
    """What to do where no SD answer was measured faster: a lead over too few prompts is
    confirmed on more; an answer the rule says pays (a > 1 + α + β) that the measurement did
    not separate from raw is measured on more prompts; where a is short of 1 + α + β
    everywhere, `cpuspec costs` shows which cost is high; where nothing was measured, say
    so."""
    lead = next((t for t, v in verdicts.items() if v == "faster*"), None)
    rule = next((t for t, b in answers.items() if (b.get("terms") or {}) and b["terms"]["a"]
                 > b["terms"]["break_even_a"] and verdicts[t] not in ("slower", "slower*")),
                None)
    task = lead or rule
    if task is not None:
        b = answers[task]
        n = (b.get("confirmed") or {}).get("n_prompts")
        why = (f"{task} leads over {n or 'too few'} prompts (a range, not an interval)"
               if lead else
               f"the rule says SD pays for {task} (a = {b['terms']['a']:.2f} > 1 + α + β = "
               f"{b['terms']['break_even_a']:.2f}) but the measurement did not separate it "
               "from raw")
        return screen.wrap(f"Next: {why}; the evidence is thin, not negative. Confirm it on "
                           "more prompts (bench runs until its interval decides):", "  ") \
            + screen.command(b["command"])
    if any(b.get("terms") for b in answers.values()):
        return screen.wrap("Next: SD was not measured faster, and a is short of 1 + α + β for "
                           "every task; cpuspec costs shows which cost term is high")
    return screen.wrap("Next: no SD answer was measured (interrupted, or every candidate "
                       "skipped); run cpuspec tune again with a larger --budget")


def _fastest_answers(doc: dict) -> list[tuple[str, dict, str]]:
    """Per task, the fastest answer where it is not the SD answer (a faster quant, another
    draft or k) nor the reference's own raw decoding, with its verdict against the
    reference's raw on the same prompts."""
    ref = doc.get("reference_target") or doc["candidates"][0].split(" + ")[0]
    out = []
    for task, r in doc["recommendations"].items():
        rec, best = r.get("recommended"), r.get("best_sd")
        if not rec or not best or _same(rec, best) or (
                not rec["k"] and rec["candidate"].removesuffix(" (SD off)") == ref):
            continue
        st = (rec.get("confirmed") or {}).get("vs_reference_raw_stats") or {}
        out.append((task, rec, screen.verdict_of(st.get("ci"), st.get("range"))))
    return out


def _fastest_screen(doc: dict) -> list[str]:
    """The fastest answers (_fastest_answers) against the reference target's raw decoding, with
    the race members each could not be separated from."""
    fastest = _fastest_answers(doc)
    if not fastest:
        return []
    ref = doc.get("reference_target") or doc["candidates"][0].split(" + ")[0]
    names, _ = screen.short_names([rec["candidate"] for _, rec, _ in fastest])
    rows = [[screen.cut(task, 12), screen.cut(name, 40), _k_cell(rec),
             _measured(rec.get("confirmed") or {}, "vs_reference_raw"), verdict]
            for (task, rec, verdict), name in zip(fastest, names)]
    ties = [t for t in _not_separated(doc) if t.split(":")[0] in {f[0] for f in fastest}]
    return ["", *screen.wrap(f"Fastest per task, × {ref}'s raw speed on the same prompts:"),
            screen.table(["task", "configuration", "k", "measured ×ref raw", "verdict"], rows),
            *[w for t in ties for w in screen.wrap(t, "  ")]]


def _same(a: dict, b: dict) -> bool:
    """Two answers are one configuration: the same candidate, k and p-min."""
    return all(a.get(f) == b.get(f) for f in ("candidate", "k", "p_min"))


def _vs_leader(m: dict) -> str:
    """A stopped race member's paired ratio to the leader, with its interval."""
    v = m.get("vs_leader") or {}
    ci = f" [{v['ci'][0]:.2f}, {v['ci'][1]:.2f}]" if v.get("ci") else ""
    return f"{v.get('ratio') or 0:.2f}×{ci}"


def _measured(c: dict, key: str) -> str:
    """A confirmed figure with its interval, or its range below 5 prompts. Files written
    before the range existed stored two prompts' min and max as an interval: shown as a
    range."""
    if not c or c.get(key) is None:
        return "-"
    if key == "vs_reference_raw":
        st = c.get("vs_reference_raw_stats")
        if st:
            return speedup_cell({"speedup": st["speedup"], "speedup_ci": st["ci"],
                                 "speedup_range": st["range"], "speedup_units": st["units"]},
                                "") or "-"
        return f"{c[key]:.2f} (scaled)"
    ci, rng, n = c.get("measured_speedup_ci"), c.get("measured_speedup_range"), \
        c.get("n_prompts")
    if n is None and ci:          # an older file: its "interval" came from 2 prompts
        ci, rng, n = None, ci, 2
    return speedup_cell({"speedup": c[key], "speedup_ci": ci, "speedup_range": rng,
                         "speedup_units": n}, "") or "-"


def _audit(c: dict) -> str:
    return f"{c['audit']['identical']}/{c['audit']['n']}" if c.get("audit") else "-"


def _depth_value(row: dict) -> float:
    return row.get("calibrated_speedup", row["predicted_speedup"])


def _depth_cell(row: dict) -> str:
    if "calibrated_speedup" in row:
        return f"{row['predicted_speedup']:.2f} → {row['calibrated_speedup']:.2f}"
    return f"{row['predicted_speedup']:.2f}"


def render_tune(doc: dict) -> str:
    ppl = doc.get("target_perplexity", {})
    ref = doc.get("reference_target") or doc["candidates"][0].split(" + ")[0]
    fast, sd, lines = [], [], []
    for task, r in doc["recommendations"].items():
        if "recommended" not in r:   # first files: one answer, SD against its own target
            r = {"recommended": r, "best_sd": r}
        fast.append(_fastest_row(task, r["recommended"], ref, ppl))
        sd.append(_best_sd_row(task, r["best_sd"]))
        lines += _task_lines(task, r, doc)
    out = []
    window = (doc.get("settings") or {}).get("draft_window")
    if window:
        out += [describe_window(window, "every draft model", "lookup and the targets"), ""]
    if doc.get("ranking"):
        out += _ranking_lines(doc)
    out += _answer_tables(doc, fast, sd, ref, ppl)
    out += _race_lines(doc, ref)
    out += _depth_lines(doc.get("depth_predictions") or {})
    if doc.get("skipped_for_budget"):
        out.append("skipped for the budget: " + "; ".join(doc["skipped_for_budget"]))
    return "\n".join(out + lines)


def _k_cell(rec: dict) -> str:
    """An answer's draft length, with its p-min where it gates ("-": SD off)."""
    if not rec["k"]:
        return "-"
    return f"{rec['k']}, p-min {rec['p_min']:g}" if rec.get("p_min") else str(rec["k"])


def _fastest_row(task: str, rec: dict, ref: str, ppl: dict) -> list:
    target = rec["candidate"].split(" + ")[0].removesuffix(" (SD off)")
    c = rec.get("confirmed", {})
    return [task, rec["candidate"], _k_cell(rec),
            f"{rec['predicted_vs_reference_raw']:.2f}",
            _measured(c, "vs_reference_raw") if c or rec["k"] or target != ref
            else "1 (itself)",
            _audit(c), f"{ppl[target]:.2f}" if target in ppl else "-"]


def _best_sd_row(task: str, best: dict) -> list:
    c = best.get("confirmed", {})
    t = best.get("terms") or {}
    pv = best["predicted_vs_reference_raw"]
    return [task, best["candidate"], _k_cell(best), f"{best['predicted_speedup']:.2f}",
            _measured(c, "measured_speedup"), f"{pv:.2f}" if pv == pv else "-",
            _measured(c, "vs_reference_raw"), _audit(c),
            f"{t['a']:.2f} vs {t['break_even_a']:.2f}" if t else "-"]


def _task_lines(task: str, r: dict, doc: dict) -> list[str]:
    """The commands of a task's answers, why SD does not pay where it does not, and how
    finely each confirmation resolves."""
    rec, best, meta = r["recommended"], r["best_sd"], doc.get("meta")
    t = best.get("terms") or {}
    lines = [f"{task}: fastest: {rec['command']}"]
    if rec["k"] and rec["command"] != best["command"]:
        lines += run_it_elsewhere(rec["command"], meta,
                                  _models_of(doc, rec.get("candidate")))
    if best["pays"]:
        lines.append(f"{task}: SD pays most: {best['command']}")
        lines += run_it_elsewhere(best["command"], meta,
                                  _models_of(doc, best.get("candidate")))
    elif best.get("ruled_out_by_cost_curve"):
        lines.append(f"{task}: SD cannot pay with any candidate: the best cost curve, "
                     f"{best['candidate']}, allows at most {best['predicted_speedup']:.2f}× "
                     f"(k = {best['k']}) even with every draft accepted")
    elif t:
        short = t["break_even_a"] - t["a"]
        lines.append(
            f"{task}: SD does not pay with any candidate: the best, {best['candidate']} at "
            f"k = {_k_cell(best)}, yields a = {t['a']:.2f} tokens per round against a round "
            f"cost of 1 + α + β = {t['break_even_a']:.2f} decodes (α = {t['alpha']:.2f} "
            f"drafting, β = {t['beta']:.2f} verifying); a is short by {short:.2f}")
    for key, what in (("best_sd", "SD ×raw"), ("recommended", "fastest ×ref raw")):
        conf = r[key].get("confirmed") or {}
        # the figure each table shows: SD against its own raw, the fastest against the
        # reference's raw
        st = conf.get("vs_reference_raw_stats") if key == "recommended" else conf
        if st and st.get("resolves"):
            lines.append(f"{task}: {what} confirmed on {conf['n_prompts']} prompts; its "
                         f"interval resolves differences of ±{st['resolves']:.2f}")
    return lines


# how a race member that stopped stands to the leader (tune/search.py logs it the same way)
WITHIN = f"±{PRECISION * 100:g} %"   # the design's precision (analysis/sequential.py)
STOPPED = {"slower": "slower than", "no difference": f"within {WITHIN} of"}


def _race_outcome(m: dict) -> str:
    """How a race member ended: ahead, stopped behind the leader (at how many prompts, its
    paired ratio to the leader), or still in when the prompts (or the budget) ran out."""
    if m["state"] == "leader":
        return "leader"
    if m["state"] in STOPPED:
        return f"{STOPPED[m['state']]} the leader at {m['prompts']}: {_vs_leader(m)}"
    return "cut short by the budget" if m["state"] == "cut short" else \
        "in to the last prompt, not separated"


def _race_lines(doc: dict, ref: str) -> list[str]:
    """Each task's confirmation race: its members, what each measured, how each ended."""
    from cpuspec.report.screen import grid
    rows = []
    for task, r in doc["recommendations"].items():
        for m in r.get("race") or []:
            c = m.get("confirmed") or {}
            own = m["candidate"].removesuffix(" (SD off)") == ref and not m["k"]
            rows.append([task, m["candidate"], _k_cell(m), f"{m['predicted_vs_reference_raw']:.2f}",
                         "1 (itself)" if own else _measured(c, "vs_reference_raw"),
                         _measured(c, "measured_speedup") if m["k"] else "-",
                         m["prompts"], _race_outcome(m)])
    if not rows:
        return []
    return ["", f"The confirmation race per task, on the other prompts (the {doc.get('race_size')} "
            "answers predicted fastest and the one where SD pays most): a member stops at a look "
            "(5, 8, 12, ... prompts) once its paired ratio to the leader lies below 1 or within "
            f"{WITHIN} (α split over the looks and the pairs); each member's intervals keep 95 % "
            "over the looks and the members:",
            grid(rows, headers=["task", "configuration", "k", "predicted ×ref raw",
                                    "measured ×ref raw", "measured ×raw", "prompts", "outcome"],
                     disable_numparse=True)]


def _ranking_lines(doc: dict) -> list[str]:
    """The cost-curve ceilings (and pilot predictions) in the order tune measured them."""
    from cpuspec.report.screen import grid
    piloted = any("pilot_score" in r for r in doc["ranking"])

    def status(r: dict) -> str:
        return "skipped: cannot pay" if r["ruled_out"] else "measured" if any(
            m["candidate"] == r["candidate"] for m in doc["measured"]) else "skipped: budget"

    def pilot_cells(r: dict) -> list[str]:
        if "pilot_score" not in r:
            return ["-", "-"]
        return [f"{r['pilot_speedup']:.2f} / {r['pilot_vs_reference_raw']:.2f}",
                f"{r['pilot_task']}, k = {r['pilot_k']}"]
    rows = sorted(doc["ranking"], key=lambda r: (-r.get("pilot_score", float("-inf")),
                                                 -r["ceiling"]))
    return ["Cost curves first: the most each candidate could give with every draft "
            "accepted ((k + 1)·V(1) ÷ (k·d + V(k + 1)); d = 0 for lookup)"
            + ("; then each drafter's pilot acceptance on "
               f"{', '.join(doc.get('pilot_prompts', []))} ({doc.get('pilot_tokens')} "
               "tokens) through each candidate's curve, best task and k, ×own raw / "
               "×reference raw; measured in that order:" if piloted else ":"),
            grid([[r["candidate"], f"{r['ceiling']:.2f}", r["ceiling_k"],
                       *(pilot_cells(r) if piloted else []), status(r)] for r in rows],
                     headers=["candidate", "ceiling ×raw", "at k",
                              *(["pilot predicted ×raw / ×ref raw", "at"]
                                if piloted else []), ""],
                     disable_numparse=True), ""]


def _not_separated(doc: dict) -> list[str]:
    """The race members that stopped within the precision of the leader: "fastest" there is
    the leader of a tie, and the one stopped may be as fast or faster (within about twice
    the precision, its interval's width)."""
    out = []
    for task, r in doc["recommendations"].items():
        ties = [m for m in r.get("race") or [] if isinstance(m, dict)
                and m.get("state") == "no difference"]
        if ties:
            out.append(f"{task}: not separated from " + "; ".join(
                f"{m['candidate']} (k {m['k'] or '-'}; {WITHIN}, {_vs_leader(m)} the leader "
                f"at {m.get('at') or m['prompts']} prompts)" for m in ties))
    return out


def _answer_tables(doc: dict, fast: list, sd: list, ref: str, ppl: dict) -> list[str]:
    """The two answer tables, the targets' perplexity and what predicted and measured mean."""
    from cpuspec.report.screen import grid
    scaled = any("vs_reference_raw" in (r.get(k, r).get("confirmed") or {}) and
                 "vs_reference_raw_stats" not in r.get(k, r)["confirmed"]
                 for r in doc["recommendations"].values() for k in ("recommended", "best_sd"))
    return [f"Fastest per task, against raw decoding on {ref} (the first target); SD off "
            "where raw decoding on some target is faster than any SD configuration:",
            grid(fast, headers=["task", "configuration", "k", "predicted ×ref raw",
                                    "measured ×ref raw", "same output", "target perplexity"],
                     disable_numparse=True),
            *_not_separated(doc),
            "",
            "Where SD pays most, against raw decoding on the same target:",
            grid(sd, headers=["task", "target + draft", "k", "predicted ×raw",
                                  "measured ×raw [95% CI]", "predicted ×ref raw",
                                  "measured ×ref raw", "same output", "a vs 1+α+β"],
                     disable_numparse=True),
            "target perplexity on the built-in text: " + ", ".join(
                f"{n} {v:.2f}" for n, v in ppl.items()),
            f"(predicted: the choosing runs' costs and acceptance, on prompts "
            f"{', '.join(doc['tune_prompts'])}; measured on prompts "
            f"{', '.join(doc['confirm_prompts'])}; 95 % intervals from ≥ 5 prompts, ranges "
            "below; measured ×ref raw "
            + ("(scaled): the measured ×raw times the choosing runs' raw-speed ratio)"
               if scaled else "pairs each prompt with the reference's raw run on it)")]


def _depth_lines(depth: dict) -> list[str]:
    """SD at depth as predicted for each task's pick, and where it crosses 1."""
    from cpuspec.report.screen import grid
    if not depth:
        return []
    ds = sorted({r["depth"] for d in depth.values() for r in d["by_depth"]})
    out = ["", "SD at depth, predicted (" + next(iter(depth.values()))["predicted_from"]
           + "; `cpuspec bench --depth` measures it):",
           grid([[task, d["candidate"], _k_cell(d),
                      *[next((_depth_cell(r) for r in d["by_depth"] if r["depth"] == x),
                             "-") for x in ds],
                      f"{d['crossover']} at {d['crossover_depth']}" if d["crossover"]
                      else "-" if not d["by_depth"] else "pays at every depth"
                      if _depth_value(d["by_depth"][0]) > 1 else "pays at no depth"]
                     for task, d in depth.items()],
                    headers=["task", "target + draft", "k",
                             *[f"×raw at {x}" for x in ds], "crossover"],
                    disable_numparse=True)]
    if any("calibration" in d for d in depth.values()):
        out.append("(a → b: a from the choosing prompts; b = a × confirmed ÷ predicted at "
                   "depth 0, " + ", ".join(f"{t} {d['calibration']:.2f}" for t, d in
                                           depth.items() if "calibration" in d)
                   + "; the crossover is read from b)")
    return out
