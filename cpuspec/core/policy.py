"""Draft-length policies: how many tokens to draft in the next round (0 = a plain target step).

StaticPolicy drafts k every round. AdaptivePolicy picks k each round from the cost model:

* Acceptance is a Beta posterior per draft position i over "draft i is accepted when the
  drafts before it were" (counts with forgetting, so it follows a change of regime; survival
  is the product over positions), not a point estimate: a few
  unlucky early rounds move the mean but not the verdict, because the policy switches
  speculation OFF only when even an optimistic bound (mean + 1.5 sd) says no k pays.
* Costs (the draft's time per token, the target's decode time per batch size, the draft's
  catch-up cost per token) are running means from the cost probe on. The probe counts as one
  observation of each batch size, so the first verifies in the loop move it fast; and where
  the mean says SD pays, the choice of k is optimistic about the batch sizes the loop has not
  verified yet too (the probe's one timing of a size can be far off), so a k the probe
  priced too dear gets tried once and priced by the loop.
* While OFF the counts slowly forget, so the optimistic bound climbs back. Re-entry happens at
  the start of a prompt, where it costs only the draft's prompt prefill, once that bound says
  SD may pay and either the mean says so too (from enough rounds of evidence, not the prior's
  pull as the counts forget) or the plain decoding since the switch-off pays for the try
  (what the last stretch of speculation lost is at most REENTRY_BUDGET of it);
  mid-generation probes happen only where catching the draft up on the skipped tokens is
  cheap.
* The draft's prompt prefill is priced before a generation speculates: where reading the
  unread prompt would cost the draft more than the predicted gain over the answer's tokens
  can save (a long input, a short answer), the generation runs plain and the draft never
  reads it; what the task learned is kept for the next prompt. Where the mean prices it out
  but the optimistic bound pays it back with a margin (EXPLORE_MARGIN), the prompt is tried
  (explored): otherwise a task whose first inputs are long would never learn that SD pays on
  it.
* Every decision is logged in `trace` (k, mean and optimistic predicted speedup, reason) for
  the results file.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from cpuspec.core.costs import best_draft_length
from cpuspec.core.speculative import RoundStats, StaticPolicy

__all__ = ["AdaptivePolicy", "PolicyParams", "StaticPolicy"]   # StaticPolicy: with the loop


@dataclass(frozen=True)
class PolicyParams:
    """Every tuning constant of AdaptivePolicy, each with why it has its value and where that
    value was set (docs/adaptive-policy.md#parameters has the full reasoning; the versions that
    set them, v1-v9, are in docs/adaptive-history.md). Set on recorded runs of machines B and C:
    regression pins, not evidence that another value does worse."""
    # weight of a new timing in the running cost means: ~the last 10 rounds dominate
    ewma_weight: float = 0.1
    # acceptance prior per draft position, so SD is tried before anything is known
    prior_survival: float = 0.8
    # ... worth this many observed rounds, so the first rounds decide quickly
    prior_weight: float = 2.0
    # forgetting per observed round (~50 rounds of memory: follows a change of task)
    round_decay: float = 0.98
    # forgetting per plain step while off (slow: the bound climbs back over many steps)
    off_step_decay: float = 0.999
    # forgetting per new prompt of the task
    generation_decay: float = 0.9
    # switch off when even the mean + 1.5 sd bound of the best k predicts a loss
    z_off: float = 1.5
    # re-enter (and choose k optimistically) on the mean + 1 sd bound
    z_on: float = 1.0
    # a batch size the loop has not verified is priced this fraction below the probe (the
    # probe's one timing wanders; machine B, V(8))
    cost_prior_spread: float = 0.25
    # the predicted speedup below which SD is off: break-even
    switch_off_speedup: float = 1.0
    # re-entry must promise this much: the draft's prefill and ~8 learning rounds cost 7-15 %
    # (simulation + held-out run)
    switch_on_speedup: float = 1.15
    # a task switched off re-enters once its last loss is at most this share of the plain
    # decoding since (machine B, held-out story)
    reentry_budget: float = 0.03
    # ... or at once when the mean itself predicts this speedup (machine B, held-out set 4, json)
    reentry_mean: float = 1.0
    # ... from at least this many decayed drafted rounds, not the prior's pull (machine C,
    # held-out long set 2)
    reentry_mean_evidence: int = 8
    # while on, one plain step in this many rounds re-times V(1), the yardstick (machine B,
    # held-out story)
    v1_refresh_rounds: int = 16
    # ... which moves V(1) alone by this weight
    v1_refresh_weight: float = 0.5
    # a long prompt the mean prices out is tried only if the bound pays its prefill back this
    # many times (replays of machine B's runs)
    explore_margin: float = 1.5
    # draft one position past the mean's k while that position has fewer rounds than this
    # (machine C, held-out long set 3)
    extend_evidence: int = 8
    # ... and the last position has at least this many decayed rounds
    extend_proof: int = 2
    # ... with a posterior mean of at least this (replays of 163 recorded task rows)
    extend_survival: float = 0.9
    # after a probe the draft has caught up: switching on needs only break-even
    probe_switch_on_speedup: float = 1.0
    # switch off on the mean (not only the bound) after this many decayed rounds
    min_evidence_rounds: int = 8
    # while off mid-generation, one probe round every this many plain steps
    probe_every_steps: int = 64
    # a probe drafts this many tokens (the cheapest)
    probe_k: int = 1
    # a probe that kept every draft shrinks the counts by this (a change of regime)
    probe_success_decay: float = 0.5
    # when costs alone rule SD out, probe this many times less often
    costs_rule_out_probe_factor: int = 8
    # mid-generation probes only where the draft's catch-up costs at most this share of the
    # target decodes it spans
    probe_budget: float = 0.03


DEFAULT = PolicyParams()


@dataclass
class AdaptivePolicy:
    k_max: int
    draft_s: float                      # prior: draft time per token (cost probe)
    verify_s: dict[int, float]          # prior: target decode time of n tokens, n = 1..k_max+1
    catchup_s: float = 0.0              # prior: draft time per token of a catch-up batch
    prefill_s: float = 0.0              # prior: the draft's prompt prefill time per token
    on: bool = True
    steps_off: int = 0
    history: list[int] = field(default_factory=list)   # k chosen each round
    trace: list[list] = field(default_factory=list)     # [k, mean ×, optimistic ×, reason]
    p: PolicyParams = field(default_factory=lambda: DEFAULT)   # the tuning constants

    def __post_init__(self) -> None:
        if self.k_max < 1 or any(n not in self.verify_s for n in range(1, self.k_max + 2)):
            raise ValueError("need k_max ≥ 1 and verify times for 1..k_max+1 tokens")
        self.verify_s = dict(self.verify_s)
        self.verified = {n: 0 for n in self.verify_s}   # the loop's verifies of n tokens
        # Decayed counts, per draft position i: rounds that reached it (drafts 1..i-1 accepted,
        # i drafted), and rounds in which it was accepted too.
        self.drafted = [0.0] * self.k_max
        self.survived = [0.0] * self.k_max
        self._after_off = False
        self._steps_before = 0
        self._new_generation = True
        self._probed = False
        self._unread, self._budget = 0, 0   # this generation: prompt tokens, answer tokens
        self._plain_generation = False      # priced out: no drafting in this generation
        self._plain_figures = [1.0, 1.0]    # ... and the predictions that priced it out
        # Seconds lost to speculation since it was last switched on, against plain decoding at
        # V(1) (net: rounds that paid cancel rounds that lost), the loss of the stretch that
        # ended in the last switch-off (0 where it paid), and the plain decoding since then.
        self._loss_s, self._reentry_cost_s, self._plain_off_s = 0.0, 0.0, 0.0
        self._sd_rounds = 0    # SD rounds since the last plain step
        self._skip_draft_cost = False   # the next SD round follows a V(1) refresh step

    # --- acceptance ---------------------------------------------------------------------------

    def _survival(self, z: float) -> list[float]:
        """P(n_accepted ≥ i) as the product of per-position conditional acceptance rates
        P(draft i accepted | draft i − 1 accepted), each a posterior mean (z = 0) or an
        optimistic bound (mean + z sd). Conditional rates, because a rejection at position 1
        says nothing about position 2: a bad first draft must not condemn longer drafts."""
        out, prev = [], 1.0
        for i in range(self.k_max):
            mean, weight = self._posterior(i)
            sd = math.sqrt(mean * (1 - mean) / (weight + 1))
            prev *= min(mean + z * sd, 1.0)
            out.append(prev)
        return out

    def _posterior(self, i: int) -> tuple[float, float]:
        """Position i + 1's conditional acceptance: its posterior mean and the weight (prior +
        decayed rounds) behind it."""
        n, s = self.drafted[i], self.survived[i]
        w, prior = self.p.prior_weight, self.p.prior_survival
        a, b = s + w * prior, n - s + w * (1 - prior)
        return a / (a + b), a + b

    def conditional(self, i: int) -> float:
        """The posterior mean of P(draft i + 1 accepted | the drafts before it accepted)."""
        return self._posterior(i)[0]

    def extends(self, k: int) -> bool:
        """Whether to draft one position past the mean's k to learn it: position k is proven
        (p.extend_proof rounds, mean ≥ p.extend_survival), position k + 1 is thinly known and
        no worse than the prior (PolicyParams.extend_evidence)."""
        return k < self.k_max and self.drafted[k] < self.p.extend_evidence and \
            self.drafted[k - 1] >= self.p.extend_proof and \
            self.conditional(k - 1) >= self.p.extend_survival - 1e-9 and \
            self.conditional(k) >= self.p.prior_survival - 1e-9

    @property
    def survival(self) -> list[float]:
        return self._survival(0.0)

    def _decay(self, factor: float) -> None:
        self.drafted = [n * factor for n in self.drafted]
        self.survived = [s * factor for s in self.survived]

    # --- decisions ----------------------------------------------------------------------------

    def best(self, z: float = 0.0, explore_costs: bool = False) -> tuple[int, float]:
        """The k ≥ 1 with the best predicted speedup (mean survival, or its bound at z), and
        that speedup; below 1.0 when no draft length pays. explore_costs: each V(n) at its
        optimistic bound until the loop has verified n once (p.cost_prior_spread), for
        choosing k only."""
        verify = self.verify_s
        if explore_costs:   # V(1), plain decoding, is the yardstick: never discounted
            verify = {n: v * (1.0 - self.p.cost_prior_spread) if n > 1 and not self.verified.get(n)
                      else v for n, v in self.verify_s.items()}
        return best_draft_length(self._survival(z), self.draft_s, verify)

    def costs_rule_out(self) -> bool:
        """True when no k pays even if every draft were accepted."""
        return best_draft_length([1.0] * self.k_max, self.draft_s,
                                 self.verify_s)[1] < self.p.switch_off_speedup

    def new_generation(self, unread_prompt_tokens: int = 0, max_tokens: int = 0) -> None:
        """A new prompt: what was learned is kept, weighing a little less; the draft starts in
        step with the target (it prefills the prompt when first used), so re-entry is cheap
        unless the prompt is long: unread_prompt_tokens (what the draft would have to read)
        and max_tokens (the most the answer can save on) price that prefill (0: not priced)."""
        self._unread, self._budget = unread_prompt_tokens, max_tokens
        self._plain_generation = False
        self.steps_off = 0
        self._after_off = False
        self._steps_before = 0
        self._new_generation = True
        self._decay(self.p.generation_decay)

    def probes_pay(self) -> bool:
        """Catching the draft up after plain steps is cheap enough to probe mid-generation."""
        return self.catchup_s <= self.p.probe_budget * self.verify_s[1]

    def reentry_affordable(self) -> bool:
        """The plain decoding since the last switch-off pays for trying again: what the last
        stretch of speculation lost, plus the draft's prefill of this prompt, is at most
        p.reentry_budget of it."""
        return self.p.reentry_budget * self._plain_off_s >= \
            self._reentry_cost_s + self._unread * self.prefill_s

    def _switch_off(self) -> None:
        self.on, self.steps_off = False, 0
        self._reentry_cost_s, self._plain_off_s, self._loss_s = max(self._loss_s, 0.0), 0.0, 0.0

    def prefill_outweighs_gain(self, speedup: float, margin: float = 1.0) -> bool:
        """At a generation's start: `margin` times the draft's prefill of the unread prompt
        costs more than a decode `speedup` saves over the answer's max_tokens,
        (1 − 1/speedup)·max_tokens·V(1).
        A decode that saves nothing (speedup ≤ 1) never pays a prefill back. False where
        nothing is priced (no prompt, answer length or prefill cost given)."""
        if not self._budget or not self._unread or not self.prefill_s:
            return False
        if speedup <= 1.0:
            return True
        saved = (1.0 - 1.0 / speedup) * self._budget * self.verify_s[1]
        return margin * self._unread * self.prefill_s > saved

    def next_k(self, cap: int | None = None) -> int:
        """The next round's k, at most `cap` (the loop's room before max_tokens); history
        and trace record the k the loop will run."""
        k = self._choose_k()
        if cap is not None and k > cap:
            k = max(cap, 0)
            self.history[-1] = k
            self.trace[-1][0] = k
        return k

    def _choose_k(self) -> int:
        if self._plain_generation:
            # Nothing is learned on plain steps and their costs rescale together, so the
            # figures of the decision hold for the whole generation: no recomputing per token.
            return self._record(0, *self._plain_figures,
                                "plain: this prompt's prefill outweighs the gain")
        _, s_mean = self.best()
        _, s_opt = self.best(self.p.z_off if self.on else self.p.z_on)
        starting, self._new_generation = self._new_generation, False
        probed, self._probed = self._probed, False
        explore = ""
        if starting and self.on and self.prefill_outweighs_gain(s_mean):
            explore = self._explore_or_plain(s_mean, s_opt)
            if self._plain_generation:
                return self._record(0, *self._plain_figures, explore)
        reason = self._switch(s_mean, s_opt, starting, probed) or explore or \
            ("on" if self.on else "off")
        if self.on:
            choice, reason = self._k_while_on(s_mean, reason)
        elif self._probe_due(s_opt):
            choice, self.steps_off = min(self.p.probe_k, self.k_max), 0
            reason, self._probed = "probe", True
        else:
            choice = 0
        return self._record(choice, round(s_mean, 4), round(s_opt, 4), reason)

    def _record(self, choice: int, s_mean: float, s_opt: float, reason: str) -> int:
        self.history.append(choice)
        self.trace.append([choice, s_mean, s_opt, reason])
        return choice

    def _explore_or_plain(self, s_mean: float, s_opt: float) -> str:
        """At a generation's start, where the mean prices the draft's prefill out. If the
        optimistic bound (acceptance at its 1-sd bound, unverified batch sizes at theirs) pays
        it back p.explore_margin times over, the prompt is tried: what is learned serves the
        task's next prompts, and the evidence bounds the loss (a losing task switches off
        within ~8 rounds, and its bound then prices the next long input out). Otherwise the
        whole generation runs plain (self._plain_generation). Returns the reason."""
        s_explore = self.best(self.p.z_on, explore_costs=True)[1]
        if self.prefill_outweighs_gain(s_explore, self.p.explore_margin):
            self._plain_generation = True
            self._plain_figures = [round(s_mean, 4), round(s_opt, 4)]
            return (f"plain for this prompt: the draft's prefill of {self._unread} tokens "
                    f"costs more than a {s_mean:.2f}× decode saves on {self._budget} tokens")
        return (f"explore: the prefill of {self._unread} tokens is paid back if the "
                f"decode reaches its optimistic {s_explore:.2f}×")

    def _switch(self, s_mean: float, s_opt: float, starting: bool, probed: bool) -> str:
        """Switch speculation off or on where the evidence says so; the reason, or "" where
        nothing changed."""
        if self.costs_rule_out():
            if self.on:
                self._switch_off()
            return "off: even 100 % acceptance cannot pay at these costs"
        if self.on and s_opt < self.p.switch_off_speedup:
            self._switch_off()
            return "switched off: the optimistic bound predicts a loss at every k"
        if self.on and s_mean < self.p.switch_off_speedup and \
                self.drafted[0] >= self.p.min_evidence_rounds:
            self._switch_off()
            return "switched off: the mean of enough rounds predicts a loss at every k"
        if not self.on and starting and s_opt > self.p.switch_on_speedup and \
                not self.prefill_outweighs_gain(s_opt):
            mean_pays = s_mean >= self.p.reentry_mean and \
                self.drafted[0] >= self.p.reentry_mean_evidence
            if mean_pays or self.reentry_affordable():
                self.on = True
                return "re-entry at a new prompt: " + (
                    "the mean pays" if mean_pays else
                    "the optimistic bound pays, and the plain decoding since pays for the try")
        if not self.on and probed and s_mean > self.p.probe_switch_on_speedup:
            self.on = True
            return "switched on: a probe showed that SD pays"
        return ""

    def _k_while_on(self, s_mean: float, reason: str) -> tuple[int, str]:
        """Where the mean says SD pays: optimism in the face of uncertainty, the best k under
        the 1-sd bound and the batch sizes' optimistic costs, so that a draft position rarely
        tried (its interval still wide) or a verify size never timed in the loop gets tried;
        with evidence the bounds meet the means. Where the mean says it loses but the evidence
        is thin: the mean's least bad k, the cheapest way to find out."""
        k_mean, _ = self.best()
        choice = self.best(self.p.z_on, explore_costs=True)[0] \
            if s_mean >= self.p.switch_on_speedup else k_mean
        if s_mean < self.p.switch_on_speedup and self.extends(choice):
            choice += 1
            reason = f"extend: draft position {choice} to learn it"
        if self._sd_rounds >= self.p.v1_refresh_rounds:
            choice, reason = 0, "plain step: V(1), the yardstick, timed again"
        return choice, reason

    def _probe_due(self, s_opt: float) -> bool:
        """While off: whether this step drafts a probe (cheap catch-up, enough plain steps
        since the last one, and a bound that could pay or costs that rule SD out)."""
        ruled_out = self.costs_rule_out()
        return self.probes_pay() and self.steps_off >= self.p.probe_every_steps * (
            self.p.costs_rule_out_probe_factor if ruled_out else 1) and (
            s_opt > self.p.probe_switch_on_speedup or ruled_out)

    def observe(self, r: RoundStats) -> None:
        w = self.p.ewma_weight
        if r.k == 0:
            self.steps_off += 1
            if not self.on:
                self._decay(self.p.off_step_decay)
                self._plain_off_s += r.verify_s
            if self._sd_rounds:
                # right after SD rounds the other costs are fresh: only the yardstick moves.
                # The next round's draft batch holds this step's token too: it times neither
                # a draft step nor a catch-up, so it teaches no draft cost.
                self._sd_rounds = 0
                self._skip_draft_cost = True
                self.verify_s[1] += self.p.v1_refresh_weight * (r.verify_s - self.verify_s[1])
                return
            self._steps_before = self.steps_off
            self._after_off, self._skip_draft_cost = True, False
            # A plain step measures only V(1). A change in it while the other costs go unseen is
            # the whole machine speeding up or slowing down (other load, clocks), which scales
            # every phase alike: rescale them all, so c and β stay as last measured and a slow
            # spell cannot make speculation look profitable.
            factor = (self.verify_s[1] + w * (r.verify_s - self.verify_s[1])) / self.verify_s[1]
            self.verify_s = {n: v * factor for n, v in self.verify_s.items()}
            self.draft_s *= factor
            self.catchup_s *= factor
            return
        self._sd_rounds += 1
        # what this round cost beyond plain decoding of the tokens it gave
        self._loss_s += r.draft_s + r.verify_s - (r.n_accepted + 1) * self.verify_s[1]
        if not self.on and r.n_accepted == r.k:
            # A probe that kept every draft while the task was off: the regime may have
            # changed, so the old evidence against SD counts for less.
            self._decay(self.p.probe_success_decay)
        self._decay(self.p.round_decay)
        # Greedy drafts: position i is the same draft for any k ≥ i. Position i was tried
        # only if the drafts before it were accepted.
        for i in range(1, min(r.k, r.n_accepted + 1) + 1):
            self.drafted[i - 1] += 1.0
            self.survived[i - 1] += float(r.n_accepted >= i)
        if self._skip_draft_cost:
            pass
        elif self._after_off:  # the draft caught up on the plain steps first: learn that cost
            caught_up = max(self._steps_before, 1)
            spent = max(r.draft_s - r.k * self.draft_s, 0.0) / caught_up
            self.catchup_s += w * (spent - self.catchup_s)
        else:
            self.draft_s += w * (r.draft_s / r.k - self.draft_s)
        self._after_off = self._skip_draft_cost = False
        self.steps_off = 0
        # the probe's timing counts as one observation of this batch size, then a running mean
        n = r.k + 1
        self.verified[n] = self.verified.get(n, 0) + 1
        w_n = max(w, 1.0 / (self.verified[n] + 1))
        self.verify_s[n] += w_n * (r.verify_s - self.verify_s[n])
