"""Printing a bench run: the first screen, or everything with --details."""
from __future__ import annotations

from cpuspec.cli.log import close_log, echo

from cpuspec.report.advice import advise, render_advice
from cpuspec.results.schema import ResultsError
from cpuspec.report.tables import render_drift, render_audit, render_details, render_noise, render_table
from cpuspec.analysis.stats import INTERVAL_LEGEND
from cpuspec.analysis.summary import summarize_drift, noise_report, summarize
from cpuspec.report.verdict import render_verdict, run_header
from cpuspec.core.window import describe_window

def _first_screen(results: dict, s: dict, source: str | None) -> None:
    """The verdict screen: the cost model's advice where the probe can give it (a disturbed
    probe gives none, said in the warning line), the noise warning, the verdict."""
    has_static = any(r["mode"] == "static" for r in results["runs"])
    advice, refused = None, None
    if results.get("cost_probe") and has_static:
        try:
            advice = advise(results)
        except ResultsError as exc:     # a disturbed probe: no prediction from it
            refused = str(exc)
    noise = noise_report(results["runs"])
    warning = (f"WARNING: {len(noise['prompts'])} noisy prompt(s): their speedups are not "
               "trustworthy (--details says why and what to do)") if noise["flags"] else None
    if refused:
        warning = f"WARNING: {refused}" + (f"; {warning[9:]}" if warning else "")
    echo(run_header(results))
    echo(render_verdict(results, s, advice, source, warning))


def _settings_lines(results: dict) -> None:
    """What the windows mean, and the context depth and draft window the run measured at."""
    echo("Windows: end-to-end (e2e) = both prefills + every round, the headline; "
               f"decode-only = after the prefills. [95% CI] = {INTERVAL_LEGEND}.")
    depth = results.get("depth")
    if depth:
        held = depth["held_tokens"]
        echo(f"Depth: {depth['requested_tokens']} tokens of context before each prompt "
                   f"({min(held)}-{max(held)} tokens with the chat template), held in both "
                   "KV caches, read once and not timed.")
    window = results["settings"].get("draft_window")
    if window:
        echo(describe_window(window, "the draft", "the target"))


def _lossless_lines(results: dict) -> None:
    """The outputs that differ from target-only decoding, and the logit drift behind them."""
    diverged = render_audit(results.get("audit", []))
    if diverged:
        echo("Outputs that differ from target-only decoding (batched verify logits differ "
                   "slightly from one-token decoding; flips happen at near-ties):")
        echo(diverged)
    drift = render_drift(summarize_drift(results))
    if drift:
        echo(drift)


def print_bench(results: dict, fmt: str = "text", details: bool = False,
                source: str | None = None) -> None:
    """The bench's report, shared by `cpuspec bench` and `cpuspec report`: by default the
    first screen (verdict.render_verdict: verdict, advice, the next command); with details
    (or markdown) the full table, per-task details, audit, advice table, noise and build."""
    close_log()    # a progress bar ends before the results are printed
    if not results.get("runs"):
        from cpuspec.report.screen import wrap
        echo("\n".join(wrap(
            f"No generation was measured: the run ended "
            f"{results.get('ended') or 'before its first prompt'}, so there is nothing to "
            "judge. Run `cpuspec bench` again.")))
        return
    s = summarize(results)
    if not details and fmt == "text":
        _first_screen(results, s, source)
        return
    k = results["settings"]["k"]
    _settings_lines(results)
    echo(render_table(s, "github" if fmt == "markdown" else "simple"))
    echo("")
    echo(render_details(s, k))
    _lossless_lines(results)
    if results.get("cost_probe") and any(r["mode"] == "static" for r in results["runs"]):
        echo("\nAdvice (on or off: the measured end-to-end verdict; k* and the "
                   "predictions: the cost model, every k up to the one measured):")
        try:
            echo(render_advice(advise(results), k))
        except ResultsError as exc:
            echo(str(exc))
    q = results.get("quality")
    if q:
        echo(f"\nQuality beside the speed: the target's perplexity on the built-in "
                   f"{q['text_tokens']}-token text is {q['target_perplexity']:.2f} (compare "
                   "quants of one model with `cpuspec quality`, which adds agreement with a "
                   "reference).")
    info = results.get("meta", {}).get("llama_system_info")
    if info:
        echo(f"\nllama.cpp: {info}")
    warning = render_noise(noise_report(results["runs"]))
    if warning:
        echo("")
        echo(warning)
