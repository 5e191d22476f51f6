"""The adaptive policy replayed on a recorded bench run, without a model: a design check.

Acceptance is replayed per prompt and per output position: greedy drafting and greedy
verification make the draft's proposal after t output tokens depend on those t tokens alone, so
the static k = k_max round that started after t tokens and kept a of its drafts says that a
round starting after t + j tokens (j ≤ a) keeps min(k, a − j) drafts. Where a round kept every
draft, whether the draft would also have guessed the target's bonus token is unknown; it is
taken to have (then its run goes on as the next round's does). That matters only to a round the
policy starts inside such a stretch, and is right about as often as a draft deep in a run is
kept (held-out set 3's json at 128 tokens on machine B: 53 % of rounds kept 6 drafts, 49 % all
7, so 92 % of the 7th drafts reached were kept). The adaptive rounds
of the same answers, recorded at other k and other points, are the check: tests/test_replay.py
wants at least 98 % of them predicted exactly. Costs are the run's
own: a batch size the loop verified 5 times or more at the median of those verifies, otherwise
the probe's timing; V(1) at the median of the raw mode's token times. Prompts keep their recorded
lengths, target prefills and answer lengths (an answer that ended before max_tokens ends there in
every mode), and the draft reads a prompt on its first draft, in the time the static mode's
draft took to read it in the run (the probe's cost per token where a file has no such timing).

What it leaves out: timing noise, and the rare prompt whose adaptive output differs from the
static one (a near-tie decided differently). A replayed ratio is the policy's decisions at steady
costs, not a prediction of the next run's wall time.

`refeed` is the other check: it feeds a run's own adaptive rounds, with their recorded timings,
back to a policy, which reproduces the run's decisions up to where a changed policy departs
from them (a decision that moving costs drove, which the steady replay cannot show)."""
from __future__ import annotations

import inspect
import statistics
from dataclasses import dataclass
from cpuspec.core.policy import AdaptivePolicy
from cpuspec.results.records import CostProbe
from cpuspec.core.speculative import RoundStats
from cpuspec.analysis.stats import e2e_tok_s
from cpuspec.core.window import window_reads

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


def acceptance_profile(rounds: list[list]) -> list[int]:
    """Per output position t (tokens emitted before a round, from 1): how many drafts in a row
    the target keeps from there, read off one generation's static rounds (module docstring)."""
    tail: list[int] = []         # the profile from the next round's start on
    for row in reversed(rounds):
        k, accepted, emitted = row[0], row[1], row[2]
        carry = 0
        if k and accepted == k and emitted == k + 1 and tail:
            carry = 1 + tail[0]  # the draft is taken to have guessed the target's bonus token
        tail = [max(accepted - j, 0) + carry for j in range(emitted)] + tail
    return [0] + tail            # t = 0: the first token comes from the prefill


class Replay:
    """One task of a recorded run: its prompts' lengths and target prefills, each prompt's
    acceptance profile from its static rounds, the probe's costs."""

    def __init__(self, rec: dict, task: str):
        if not rec.get("cost_probe"):
            raise ReplayError("the run has no cost probe to start the policy from")
        self.probe = CostProbe.of(rec["cost_probe"])
        self.k_max = int(rec["settings"]["k"])
        runs = [r for r in rec["runs"] if r["task"] == task and r["repetition"] == 0]
        raw = [r for r in runs if r["mode"] == "raw"]
        static = {r["prompt_id"]: r for r in runs if r["mode"] == "static"}
        raw = [r for r in raw if r["prompt_id"] in static and static[r["prompt_id"]]["rounds"]]
        if not raw:
            raise ReplayError(f"task {task!r} has no raw runs or no static rounds to replay")
        # (prompt tokens the draft reads, target prefill seconds, acceptance profile, the
        # draft's prefill seconds) per prompt, in run order; with a draft window the draft
        # reads the window, and the policy was told so (bench's Generator)
        window = rec["settings"].get("draft_window")

        def reads(r: dict) -> int:   # a follow-up turn's draft holds the earlier turns
            return window_reads(window, r["prompt_tokens"], r.get("reused_prompt_tokens", 0))
        self.prompts = [(reads(r), r["prefill_s"],
                         acceptance_profile(static[r["prompt_id"]]["rounds"]),
                         static[r["prompt_id"]].get("draft_prefill_s")
                         or reads(r) * self.probe.prefill_s_per_token())
                        for r in raw]
        timed: dict[int, list[float]] = {}
        for run in rec["runs"]:
            for k, _, _, _, verify_s, _ in run["rounds"]:
                timed.setdefault(k + 1, []).append(verify_s)
        self.v = {n: statistics.median(timed[n]) if len(timed.get(n, ())) >= MIN_TIMED else v
                  for n, v in self.probe.verify_s.items()}
        self.v[1] = statistics.median(t for run in rec["runs"] if run["mode"] == "raw"
                                      for t in run["token_latencies_s"])

    def policy(self, cls: type = AdaptivePolicy) -> AdaptivePolicy:
        """The policy as the run started it: from the probe's costs (cls: another version of
        the policy class, for comparing two)."""
        p = self.probe
        return cls(self.k_max, p.draft_s, p.verify_s, catchup_s=p.catchup_s,
                   prefill_s=p.prefill_s_per_token())

    def _round(self, k: int, profile: list[int], t: int, behind: int = 0
               ) -> tuple[int, float, float]:
        """(accepted, draft seconds, verify seconds) of a round of k drafts after t tokens,
        the draft first catching up on `behind` tokens that plain steps gave while it was
        idle (what the loop pays then: one batch, at the probe's catch-up cost per token)."""
        acc = min(k, profile[t])   # t < the answer's length = len(profile)
        catchup = behind * self.probe.catchup_s if k else 0.0
        return acc, k * self.probe.draft_s + catchup, self.v[k + 1]

    def _answer(self, profile: list[int], max_tokens: int, choose,
                observe=None) -> tuple[list[int], float]:
        """One answer's rounds, each of the k that choose(cap) gives (capped so that the
        answer ends at its recorded length, or max_tokens): the ks and the rounds' seconds.
        observe, if given, is told each round (the policy learns from it)."""
        ks, seconds, tokens = [], 0.0, 1
        n = min(max_tokens, len(profile))   # the answer's recorded length
        behind = 0     # plain steps since the draft last ran (it reads their tokens first)
        while tokens < n:
            cap = n - tokens - 1
            k = min(choose(cap), cap)
            acc, draft_s, verify_s = self._round(k, profile, tokens, behind)
            behind = 0 if k else behind + 1
            ks.append(k)
            seconds += draft_s + verify_s
            tokens += acc + 1
            if observe is not None:
                observe(RoundStats(k, acc, acc + 1, draft_s, verify_s, draft_s + verify_s))
        return ks, seconds

    def run(self, pol: AdaptivePolicy, max_tokens: int,
            prompts: list[tuple[int, float, list[int], float]] | None = None) -> Replayed:
        """Every prompt once, in order, under `pol` (its state carries over, as in a run)."""
        per_prompt, t_ad, t_raw = [], 0.0, 0.0
        prompts = self.prompts if prompts is None else prompts
        for unread, prefill, profile, draft_prefill in prompts:
            pol.new_generation(unread, max_tokens)
            ks, seconds = self._answer(profile, max_tokens, _chooser(pol), pol.observe)
            # the draft reads the prompt on its first draft, if the answer drafts at all
            t_ad += prefill + seconds + (draft_prefill if any(ks) else 0.0)
            t_raw += prefill + (min(max_tokens, len(profile)) - 1) * self.v[1]
            per_prompt.append(ks)
        return Replayed(per_prompt, t_ad, t_raw, self.static_seconds(max_tokens, prompts))

    def static_seconds(self, max_tokens: int,
                       prompts: list[tuple[int, float, list[int], float]] | None = None
                       ) -> float:
        """Static k = k_max on the same replay: every prompt's draft prefill and rounds."""
        return sum(prefill + draft_prefill
                   + self._answer(profile, max_tokens, lambda cap: self.k_max)[1]
                   for _, prefill, profile, draft_prefill
                   in (self.prompts if prompts is None else prompts))


def _chooser(pol):
    """pol.next_k as choose(cap): policies before the cap (older versions replayed with
    --against) take no argument, and the replay caps their k itself."""
    if len(inspect.signature(pol.next_k).parameters):
        return pol.next_k
    return lambda cap: pol.next_k()


def recorded_ratio(rec: dict, task: str, mode: str, base: str) -> float | None:
    """The run's own end-to-end speedup of `mode` over `base` on a task, as its report computes
    it (None where either mode is missing)."""
    runs = {m: [r for r in rec["runs"] if r["task"] == task and r["mode"] == m
                and r["repetition"] == 0] for m in (mode, base)}
    return e2e_tok_s(runs[mode]) / e2e_tok_s(runs[base]) if runs[mode] and runs[base] else None


def refeed(rec: dict, task: str, pol: AdaptivePolicy) -> list[tuple[str, list[list]]]:
    """The run's own adaptive rounds of `task`, fed back to `pol` with their recorded costs and
    timings (not steady ones), prompt by prompt as the run started them: per prompt, its id and
    the decisions `pol` logged before each recorded round. The run's own policy reproduces the
    recorded trace; a changed one shows where it first departs from it (after that point the
    recorded rounds are no longer what it would have seen)."""
    window = rec["settings"].get("draft_window")
    max_tokens = int(rec["settings"]["max_tokens"])
    out = []
    for r in rec["runs"]:
        if r["task"] != task or r["mode"] != "adaptive" or r["repetition"]:
            continue
        pol.new_generation(window_reads(window, r["prompt_tokens"],
                                        r.get("reused_prompt_tokens", 0)), max_tokens)
        start = len(pol.trace)
        for row in r["rounds"]:
            pol.next_k()
            pol.observe(RoundStats(*row))
        out.append((r["prompt_id"], pol.trace[start:]))
    return out
