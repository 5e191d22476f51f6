"""The commands that read results files: advise, report, compare, plot, runs."""
from __future__ import annotations

import contextlib
import importlib.util
import json
from pathlib import Path

import click

from cpuspec.core.commands import SERVER, hub_files, hub_names, invocations
from cpuspec.report import screen
from cpuspec.report.advice import (advise as advise_results, on_k, render_advice,
                                   render_advice_screen)
from cpuspec.cli.bench_report import print_bench
from cpuspec.cli.help import BadInput
from cpuspec.cli.loading import load_results, reads_results, run_names
from cpuspec.cli.log import echo, log
from cpuspec.report.compare import (mismatches, render_compare, render_compare_screen,
                                     render_compare_load, render_compare_sweeps,
                                     sweep_mismatches)
from cpuspec.report.paths import (draftless_lines, how_to_run, render_paths, server_share,
                                  render_paths_screen, server_paths_run)
from cpuspec.report.plots import PLOT_HINT, PlotError, render
from cpuspec.report.listings import render_per_prompt, render_runs
from cpuspec.report.tables import (per_prompt_rows, render_csv, render_rows_json, render_trace,
                     sweep_rows)
from cpuspec.results.schema import ResultsError, read_bench, read_json
from cpuspec.results.store import OutputError, resolve_run, results_dir, run_listing, saved_runs
from cpuspec.analysis.summary import OVERALL, summarize
from cpuspec.report.sweep import headline, render_sweep, render_sweep_screen, sweep_csv
from cpuspec.report.load import (load_mismatches, load_note, render_load,
                                  render_load_details)
from cpuspec.report.tune import render_tune, render_tune_screen
from cpuspec.report.measurements import (render_costs_file, render_quality,
                                         render_shape_validation, render_whatif)


@click.command()
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--details", is_flag=True, help="Every column, the full command lines and the "
              "draftless flags.")
@reads_results
def advise(run, as_json, details):
    """Per task: turn SD on (with the best k) or off (with the acceptance it would need).

    RUN is a results file of `cpuspec bench` (static policy) or a saved run's id (`cpuspec
    runs`). The per-position acceptance measured at k, and the bench's probe of the draft's cost
    and of the target's decode time for 1..k+1 tokens, give the predicted speedup for every k up
    to the measured one.

    \b
    Examples:
      cpuspec bench --json run.json && cpuspec advise run.json
      cpuspec advise 20261130T0541 --json
    """
    results, path = load_results(run)
    models, settings = results.get("models") or {}, results["settings"]
    found = server_paths_run((models.get("target") or {}).get("file") or "?",
                             (models.get("draft") or {}).get("file"),
                             settings.get("drafter", "model"), settings.get("threads"),
                             results.get("meta"))
    try:
        advice = advise_results(results, found[0] if found else None)
    except ResultsError as exc:
        raise click.ClickException(str(exc))
    if not advice:
        raise click.ClickException(f"{path}: no static SD runs to advise from (run "
                                   "the bench with --policy static)")
    if as_json:
        echo(json.dumps(advice, indent=1))
        return
    if not details:
        echo(_advise_screen(results, advice, run))
        return
    echo(render_advice(advice, results["settings"]["k"]))
    models, settings = results.get("models") or {}, results["settings"]
    target = (models.get("target") or {}).get("path")
    draft = (models.get("draft") or {}).get("path")
    on = {task: on_k(a, results["settings"]["k"]) for task, a in advice.items()
          if a["verdict"] == "ON"}
    if target and on:
        for k_best in sorted(set(on.values())):
            tasks = ", ".join(t for t, k in on.items() if k == k_best)
            echo(f"\nTo run it ({tasks}; k = {k_best}) outside cpuspec:")
            echo("\n".join(how_to_run(target, draft, k_best,
                                             settings.get("drafter", "model"),
                                             settings["threads"], indent="  ",
                                             meta=results.get("meta"),
                                             p_min=settings.get("p_min") or 0.0,
                                             tasks=[t for t, k in on.items()
                                                    if k == k_best and t != OVERALL],
                                             probe=results.get("cost_probe"),
                                             hub=hub_names(models),
                                             hub_files=hub_files(models))))
    if target:
        echo("\n" + "\n".join(draftless_lines(target, settings["threads"],
                                                     meta=results.get("meta"))))


def _server_note(a: dict, share: str) -> str:
    """Where the server's k came from: its own rounds priced, or the loop's k with the share
    of the gain the server keeps (report/paths.server_share)."""
    s = a.get("server")
    if not s:
        return f"the loop's k, predicted; {share}"
    return (f"the server's own: predicted {s['server_speedup']:.2f}× decode, "
            f"{s['server_at_loop_k']:.2f}× at the loop's k = {s['k_loop']}; its rounds "
            f"priced from a paths run at k = {s['measured_at_k']}")


def _advise_screen(results: dict, advice: dict, ref: str) -> str:
    """advise on one screen: the table, then per k the llama-server command (model files by
    name) of the tasks the cost model turns on."""
    settings, models = results["settings"], results.get("models") or {}
    lines = [*screen.wrap("Predicted from this run's acceptance and cost probe (k* = the "
                          "best k up to the measured one); measured: this run's ×raw"), "",
             *render_advice_screen(advice, settings["k"])]
    target = (models.get("target") or {}).get("path")
    draft = (models.get("draft") or {}).get("path")
    # in llama-server: its own k where a saved paths run priced its rounds (server_k.py)
    on = {task: (a.get("server") or {}).get("k_server", on_k(a, settings["k"]))
          for task, a in advice.items() if a["verdict"] == "ON"
          and (task != OVERALL or len(advice) == 1)}
    off = [t for t, k in on.items() if k == 0]
    if off and target:
        s = advice[off[0]]["server"]
        lines += ["", *screen.wrap(
            f"llama-server for {', '.join(off)}: keep SD off (its own rounds priced from a paths "
            f"run at k = {s['measured_at_k']}: no k is predicted to pay there, at best "
            f"{s['server_speedup']:.2f}× decode at k = {max(s['table'], key=lambda r: r['server'])['k']})")]
    for k_best in sorted(set(on.values()) - {0}) if target else []:
        group = [t for t, k in on.items() if k == k_best]
        argv = invocations(target, draft, k_best, settings.get("drafter", "model"),
                           settings["threads"], p_min=settings.get("p_min") or 0.0,
                           n_min=settings.get("n_min") or 0,
                           draft_threads=settings.get("draft_threads"),
                           hub=hub_names(models))[SERVER]
        note = load_note(target, draft, k_best, results.get("meta"),
                         threads=settings.get("threads"),
                         drafter=settings.get("drafter", "model"),
                         p_min=settings.get("p_min") or 0.0)
        share = server_share(target, draft, k_best, settings.get("drafter", "model"),
                             settings["threads"], results.get("meta"),
                             settings.get("p_min") or 0.0, results.get("cost_probe"))
        lines += ["", *screen.wrap(f"llama-server for {', '.join(group)} (k = {k_best}; "
                                   f"{_server_note(advice[group[0]], share)}; {note}):"),
                  *screen.command(argv)]
    return "\n".join(lines + ["", *screen.more(ref, "every column; llama-cli and "
                                                    "llama-cpp-python; draftless flags",
                                              "advise")])


@click.command()
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "csv", "json"]),
              default="text", show_default=True)
@click.option("--details", is_flag=True, help="A bench file: everything measured, not only the "
              "one-screen verdict.")
@click.option("--per-prompt", is_flag=True, help="A bench file: one line per generation (its "
              "prefills, decode, rounds and speed against raw on the same prompt).")
@click.option("--tasks", "task_filter", help="With --per-prompt: only these tasks (comma list).")
@click.option("--trace", is_flag=True,
              help="Also print, per adaptive generation, where the policy changed its mind.")
@reads_results
def report(run, fmt, details, per_prompt, task_filter, trace):
    """Print the summary of a results file or saved run (`cpuspec runs` lists them).

    \b
    Examples:
      cpuspec report results.json --format markdown
      cpuspec report 20261130T0541
    """
    if task_filter is not None and not per_prompt:
        raise click.UsageError("--tasks picks the lines of --per-prompt: add --per-prompt "
                               "(the summary's tables show every task)")
    results, path = load_results(run, bench_only=False)
    if results.get("complete") is False:
        kept = (f"{len(results.get('rows') or [])} sweep points" if results.get("kind") ==
                "sweep" else f"{len(results.get('runs') or [])} generations of "
                f"{len(results.get('prompts') or [])} prompts × modes")
        ended = results.get("ended")
        how = (ended if isinstance(ended, str) and ended.startswith("failed") else
               "it was interrupted")
        note = f"(incomplete run: {how}; {kept} kept)"
        # on stderr for csv and json, whose stdout a program reads; above the table otherwise
        echo(note, err=fmt in ("csv", "json"))
    kind = results.get("kind")
    if kind != "bench":
        _refuse_bench_only(kind, fmt, per_prompt, task_filter, trace)
        echo(_render_other(results, path, run, details, fmt))
        return
    if per_prompt:
        _print_per_prompt(results, path, task_filter, fmt)
        return
    s = summarize(results)
    if fmt == "json":
        echo(render_rows_json(s))
    elif fmt == "csv":
        echo(render_csv(s), nl=False)
    else:
        print_bench(results, fmt, details or trace, run)
        if trace:
            echo("\nAdaptive decisions per generation:")
            echo(render_trace(results["runs"]))


def _refuse_bench_only(kind, fmt: str, per_prompt: bool, task_filter, trace: bool) -> None:
    """Options a file of another kind cannot honour are refused (exit 2), never ignored."""
    given = [name for name, on in (("--per-prompt", per_prompt), ("--tasks", task_filter),
                                   ("--trace", trace)) if on]
    if fmt in ("csv", "json") and kind not in ("costs", "sweep"):
        given.append(f"--format {fmt}")
    if fmt == "markdown" and kind not in ("sweep",):
        given.append("--format markdown")
    if given:
        raise click.UsageError(f"{', '.join(given)}: for bench files; this is a {kind} file "
                               "(its text report, and --details, are what it has)")


def _render_other(results: dict, path, ref: str, details: bool, fmt: str) -> str:
    """The report of a paths, tune, sweep, costs or quality file: one screen, or --details."""
    kind, meta = results.get("kind"), results.get("meta") or {}
    if kind == "tune":
        if not isinstance(results.get("recommendations"), dict):
            raise click.ClickException(f"{path}: a damaged tune file (no recommendations)")
        return render_tune(results) if details else render_tune_screen(results, ref)
    if kind == "sweep":
        if not isinstance(results.get("rows"), list) or not isinstance(results.get("axes"), list):
            raise click.ClickException(f"{path}: a damaged sweep file (no rows or axes)")
        rows = sweep_rows(results)
        if fmt == "csv":
            return sweep_csv(rows).rstrip("\n")
        if fmt == "json":
            return json.dumps(rows, indent=1, default=str)
        if not details and fmt == "text":
            return render_sweep_screen(rows, results["axes"], meta.get("ggml_devices"), ref)
        line = headline(rows, meta.get("ggml_devices"))
        return render_sweep(rows, results["axes"], "github" if fmt == "markdown" else "simple",
                            devices=meta.get("ggml_devices")) + (f"\n{line}" if line else "")
    if kind == "paths":
        if not isinstance(results.get("runs"), list) or "settings" not in results:
            raise click.ClickException(f"{path}: a damaged paths file (no runs or settings)")
        return render_paths(results) if details else render_paths_screen(results, ref)
    if kind == "costs" and isinstance(results.get("cost_probe"), dict):
        return render_costs_file(results, fmt)
    if kind == "quality" and isinstance(results.get("models"), list):
        return render_quality(results)
    if kind == "whatif" and isinstance(results.get("rows"), list):
        return render_whatif(results)
    if kind == "shape_validation" and isinstance(results.get("probes"), dict):
        return render_shape_validation(results)
    if kind == "heads" and isinstance(results.get("runs"), list):
        from cpuspec.report.heads import render_heads
        return render_heads(results, ref)
    if kind == "load" and isinstance(results.get("levels"), list):
        return render_load_details(results) if details else render_load(results, ref)
    raise click.ClickException(f"{path}: a {kind} file; report prints bench, paths, load, "
                               "tune, sweep, costs, what-if, heads and quality files")


def _print_per_prompt(results: dict, path, task_filter: str | None, fmt: str) -> None:
    tasks = [t for t in (task_filter or "").split(",") if t] or None
    rows = per_prompt_rows(results, tasks)
    if not rows:
        raise BadInput(f"{path}: no generations"
                                   + (f" of {task_filter}" if task_filter else ""))
    echo(render_per_prompt(rows, fmt == "markdown"))


@click.command()
@click.argument("runs", nargs=-1)
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "csv", "json"]),
              default="text", show_default=True)
@click.option("--force", is_flag=True, help="Compare runs whose workload differs.")
@click.option("--details", is_flag=True, help="Every metric per task and run (the wide table).")
@reads_results
def compare(runs, fmt, force, details):
    """Bench, sweep or load runs side by side, from any machines: files or saved-run ids.

    One column per run, labelled by its machine (CPU, ISA, threads); per task the end-to-end
    speeds and speedup with its 95 % interval, a, c, β, 1 + α + β, p99 latencies, and run 2 ÷
    run 1 for two runs. Runs of different workloads (models, k, prompts, max tokens,
    temperature, drafter) are refused, naming the difference, unless --force.

    \b
    Examples:
      cpuspec compare bench/results/avx2-build/bench_2threads.json.gz \\
        bench/results/bench_2threads.json.gz
      cpuspec compare 20261130T0541 20261201T0900 --format markdown
    """
    if len(runs) < 2:
        raise click.UsageError("give two or more results files or run ids")
    kinds = [_kind_of(r) for r in runs]
    for r, kind in zip(runs, kinds):   # an unreadable file gets its own message first
        if kind is None:
            load_results(r, bench_only=False)
    if set(kinds) not in ({"bench"}, {"sweep"}, {"load"}):
        raise click.UsageError("compare takes bench files, sweep files with sweep files, or "
                               "load files (paths --concurrency) with load files; these are: "
                               + ", ".join(map(str, kinds)))
    if set(kinds) == {"load"}:
        loaded = [load_results(r, bench_only=False) for r in runs]
        if fmt != "text":
            raise click.UsageError("load runs are compared as text only")
        docs = [res for res, _ in loaded]
        _check_workloads(load_mismatches(docs), force, "load runs")
        echo(render_compare_load(docs, run_names([path for _, path in loaded])))
        return
    if set(kinds) == {"sweep"}:
        loaded = [load_results(r, bench_only=False) for r in runs]
        _compare_sweeps([res for res, _ in loaded], run_names([path for _, path in loaded]),
                        fmt, force)
        return
    loaded = [load_results(r) for r in runs]   # bench files only (sweeps go with sweeps)
    results = [res for res, _ in loaded]
    _check_workloads(mismatches(results), force, "runs")
    names = run_names([path for _, path in loaded])
    echo(render_compare(results, names, fmt) if details or fmt != "text"
               else render_compare_screen(results, names))


def _kind_of(ref: str) -> str | None:
    """A results file's kind, read without validating it (None where it cannot be read)."""
    try:
        doc = read_json(resolve_run(ref))
    except (OutputError, ResultsError):
        return None
    return doc.get("kind") if isinstance(doc, dict) else None


def _compare_sweeps(results: list[dict], names: list[str], fmt: str, force: bool) -> None:
    if fmt != "text":
        raise click.UsageError("sweeps are compared as text only; `cpuspec report SWEEP "
                               "--format markdown` gives one sweep's table as markdown")
    _check_workloads(sweep_mismatches(results), force, "sweeps")
    echo(render_compare_sweeps(results, names))


def _check_workloads(diff: list[str], force: bool, what: str) -> None:
    """Refuse runs of different workloads (naming the differences) unless --force."""
    if diff and not force:
        raise click.ClickException(f"these {what} measured different workloads, so their "
                                   "numbers are not comparable: " + "; ".join(diff)
                                   + " (--force compares them anyway)")
    if diff:
        log("WARNING: comparing different workloads: " + "; ".join(diff))


@click.command()
@click.argument("runs", nargs=-1)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True,
              help="Folder for the PNG and SVG files (created if missing).")
@click.option("--title", help="A first caption line for every figure, e.g. the machine in "
                              "words ('2-core AMD EPYC (Zen 4) VM').")
@click.option("--force", is_flag=True, help="Replace figures already in --out.")
@reads_results
def plot(runs, out_dir, title, force):
    """Figures for bench, costs and sweep runs (files or saved-run ids): PNG and SVG.

    speedup per task with 95 % intervals; a against 1 + α + β (break-even); the verify-cost
    curve V(n)/V(1); sweeps; per-token latency CDFs. Each carries a caption line with the
    machine, models, k and threads. Needs the optional extra: pip install 'cpuspec[plot]'.

    \b
    Examples:
      cpuspec plot bench/results/bench_2threads.json.gz bench/results/costs_q4_0.json --out figs
    """
    if importlib.util.find_spec("matplotlib") is None:
        raise click.ClickException(PLOT_HINT)
    if not runs:
        raise click.UsageError("give one or more results files or run ids")
    if not str(out_dir).strip() or str(out_dir) == ".":
        raise click.UsageError("--out: name a folder for the figures (not the current one)")
    loaded = [load_results(r, bench_only=False) for r in runs]
    if out_dir.exists() and not out_dir.is_dir():
        raise click.UsageError(f"--out {out_dir} is a file, not a folder")
    if not force and out_dir.is_dir() and any(out_dir.glob("*.png")) | any(
            out_dir.glob("*.svg")):
        raise click.UsageError(f"--out {out_dir} holds figures already: another folder, or "
                               "--force to replace them")
    created = not out_dir.exists()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        files = render([res for res, _ in loaded], run_names([p for _, p in loaded]),
                       out_dir, title)
        if not files:
            raise PlotError("nothing in these runs to plot (no generations, points or "
                            "cost curve)")
    except (PlotError, OSError) as exc:
        if created:                       # a folder made for figures that never came
            with contextlib.suppress(OSError):
                out_dir.rmdir()
        raise click.ClickException(str(exc) if isinstance(exc, PlotError) else
                                   f"cannot write figures to {out_dir}: {exc}")
    for f in files:
        echo(str(f))


def _with_speedups(row: dict) -> dict:
    """A bench run's listing with its SD ×raw per task, computed from its runs as `report`
    computes them; a file that does not validate is listed as damaged, with the reason."""
    if row.get("kind") != "bench":
        return row
    try:
        summary = summarize(read_bench(Path(row["path"])))
    except ResultsError as exc:
        return row | {"kind": "damaged", "problem": str(exc).split(": ", 1)[-1]}
    row["speedups"] = " ".join(f"{t} {s['sd_speedup']:.2f}" for t, s in summary.items()
                               if isinstance(s.get("sd_speedup"), float)
                               and s["sd_speedup"] == s["sd_speedup"])
    return row


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def runs(as_json):
    """List the saved runs under $CPUSPEC_HOME/results, newest last.

    \b
    Examples:
      cpuspec runs
      cpuspec report $(cpuspec runs --json | jq -r '.[-1].id')
    """
    try:
        rows = [_with_speedups(run_listing(p)) for p in saved_runs()]
    except OutputError as exc:
        raise click.ClickException(str(exc))
    if as_json:
        echo(json.dumps(rows, indent=1))
        return
    if not rows:
        echo(f"no saved runs yet in {results_dir()} (cpuspec bench saves every run "
                   "unless --no-save)")
        return
    echo(render_runs(rows))
