"""The adaptive policy replayed on a recorded bench run, without a model: a design check.

Each replayed round keeps as many drafts as the next recorded static round did (at most the k
the policy chose), at the costs the run's own rounds took: a batch size the loop verified 5
times or more at the median of those verifies, otherwise at the probe's timing; V(1) at the
median of the raw mode's token times. Prompts keep their recorded lengths and target prefills,
and the draft reads a prompt (at the probe's prefill cost per token) on its first draft.

What it uses and what it does not: the acceptance comes from the static rounds, in their order,
cycled; a round with a smaller k than static's shifts the alignment, so acceptance runs are
approximate. Timing noise is not replayed, so a replayed ratio is the policy's decisions at
steady costs, not a prediction of the next run's wall time."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from itertools import cycle

from .policy import AdaptivePolicy
from .records import CostProbe
from .speculative import RoundStats
from .stats import e2e_tok_s

MIN_TIMED = 5   # verifies of one batch size the loop must have made before its median is used


class ReplayError(ValueError):
    """The record cannot be replayed (no cost probe, no raw or static runs of the task)."""


@dataclass
class Replayed:
    """One pass over a task's prompts: the k chosen per round, per prompt, and the seconds."""
    ks: list[list[int]]
    adaptive_s: float
    raw_s: float
    static_s: float


class Replay:
    """One task of a recorded run: its prompts' lengths and target prefills, the accepted
    counts of its static rounds, the probe's costs."""

    def __init__(self, rec: dict, task: str):
        if not rec.get("cost_probe"):
            raise ReplayError("the run has no cost probe to start the policy from")
        self.probe = CostProbe.of(rec["cost_probe"])
        self.k_max = int(rec["settings"]["k"])
        runs = [r for r in rec["runs"] if r["task"] == task and r["repetition"] == 0]
        raw = [r for r in runs if r["mode"] == "raw"]
        self.prompts = [(r["prompt_tokens"], r["prefill_s"]) for r in raw]
        self.accepts = [row[1] for r in runs if r["mode"] == "static" for row in r["rounds"]]
        if not self.prompts or not self.accepts:
            raise ReplayError(f"task {task!r} has no raw runs or no static rounds to replay")
        timed: dict[int, list[float]] = {}
        for run in rec["runs"]:
            for k, _, _, _, verify_s, _ in run["rounds"]:
                timed.setdefault(k + 1, []).append(verify_s)
        self.v = {n: statistics.median(timed[n]) if len(timed.get(n, ())) >= MIN_TIMED else v
                  for n, v in self.probe.verify_s.items()}
        self.v[1] = statistics.median(t for run in rec["runs"] if run["mode"] == "raw"
                                      for t in run["token_latencies_s"])

    def policy(self) -> AdaptivePolicy:
        """The policy as the run started it: from the probe's costs."""
        p = self.probe
        return AdaptivePolicy(self.k_max, p.draft_s, p.verify_s, catchup_s=p.catchup_s,
                              prefill_s=p.prefill_s_per_token())

    def _round(self, k: int, accepts) -> tuple[int, float, float]:
        """(accepted, draft seconds, verify seconds) of one round of k drafts."""
        acc = min(k, next(accepts)) if k else 0
        return acc, k * self.probe.draft_s, self.v[k + 1]

    def run(self, pol: AdaptivePolicy, max_tokens: int,
            prompts: list[tuple[int, float]] | None = None) -> Replayed:
        """Every prompt once, in order, under `pol` (its state carries over, as in a run)."""
        accepts = cycle(self.accepts)
        per_prompt, t_ad, t_raw = [], 0.0, 0.0
        prompts = self.prompts if prompts is None else prompts
        for unread, prefill in prompts:
            pol.new_generation(unread, max_tokens)
            ks, tokens, read = [], 1, False
            t_ad += prefill
            while tokens < max_tokens:
                k = min(pol.next_k(), max_tokens - tokens - 1)
                ks.append(k)
                if k and not read:   # the draft reads the prompt on its first draft
                    t_ad += unread * self.probe.prefill_s_per_token()
                    read = True
                acc, draft_s, verify_s = self._round(k, accepts)
                t_ad += draft_s + verify_s
                tokens += acc + 1
                pol.observe(RoundStats(k, acc, acc + 1, draft_s, verify_s, draft_s + verify_s))
            t_raw += prefill + (max_tokens - 1) * self.v[1]
            per_prompt.append(ks)
        return Replayed(per_prompt, t_ad, t_raw, self.static_seconds(max_tokens, prompts))

    def static_seconds(self, max_tokens: int,
                       prompts: list[tuple[int, float]] | None = None) -> float:
        """Static k = k_max on the same replay: every prompt's draft prefill and rounds."""
        accepts, t = cycle(self.accepts), 0.0
        for unread, prefill in self.prompts if prompts is None else prompts:
            t += prefill + unread * self.probe.prefill_s_per_token()
            tokens = 1
            while tokens < max_tokens:
                k = min(self.k_max, max_tokens - tokens - 1)
                acc, draft_s, verify_s = self._round(k, accepts)
                t += draft_s + verify_s if k else self.v[1]
                tokens += acc + 1
        return t


def recorded_ratio(rec: dict, task: str, mode: str, base: str) -> float | None:
    """The run's own end-to-end speedup of `mode` over `base` on a task, as its report computes
    it (None where either mode is missing)."""
    runs = {m: [r for r in rec["runs"] if r["task"] == task and r["mode"] == m
                and r["repetition"] == 0] for m in (mode, base)}
    return e2e_tok_s(runs[mode]) / e2e_tok_s(runs[base]) if runs[mode] and runs[base] else None
