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

from .costs import best_draft_length
from .speculative import RoundStats, StaticPolicy

__all__ = ["AdaptivePolicy", "StaticPolicy"]   # StaticPolicy lives with the loop

# Weight of a new observation in the running cost means: ~the last 10 rounds dominate.
EWMA_WEIGHT = 0.1
# Acceptance prior: each position survives with probability 0.8, worth 2 observed rounds, so
# speculation is tried before anything is known and the first rounds decide quickly.
PRIOR_SURVIVAL = 0.8
PRIOR_WEIGHT = 2.0
# Forgetting of the acceptance counts: per observed round (at most ~50 rounds of memory, to
# follow a change of task within a generation), per plain step while OFF (slow: the bound
# reaches break-even again only after many steps), and per new prompt of the task.
ROUND_DECAY = 0.98
OFF_STEP_DECAY = 0.999
GENERATION_DECAY = 0.9
# Standard deviations above the mean for the optimistic bounds: switch OFF when even the
# 1.5-sd bound of the best k predicts a loss; re-enter when the 1-sd bound predicts a gain.
Z_OFF = 1.5
Z_ON = 1.0
# The probe times each batch size once, before any generation, and on a 2-vCPU VM that timing
# wanders: machine B's probes put V(8) at 266-280 ms where the loop's verifies of 8 took
# 195-227 ms (adaptive_heldout_q8_0_k7_n64/n128), which made k = 3 look better than k = 7
# and the policy never tried k = 7. For choosing k, a batch size the loop has not verified yet
# is priced this fraction below the probe's timing: each is tried once if it might be best,
# then the loop's own timings (averaged with the probe's) decide.
COST_PRIOR_SPREAD = 0.25
SWITCH_OFF_SPEEDUP = 1.0
# Re-entry (and switching on after a probe) must promise more than it costs: the draft's
# prompt prefill and the ~8 rounds it takes to learn otherwise, 7-15 % of a 64-128-token
# prompt. This and MIN_EVIDENCE_ROUNDS were chosen in a simulation (scripted rounds at the
# per-position acceptance and costs of the Q4_0 pair's built-in-suite run, bench/README.md),
# and confirmed on held-out prompts (bench/prompts_heldout.jsonl) in a real run.
SWITCH_ON_SPEEDUP = 1.15
# Re-entry is an experiment with a price: a task that lost before loses again while the
# policy relearns (machine B, held-out story prompts: ~7 rounds at 0.9x, 2 % of each 64-token
# prompt, on every prompt). A task that was switched off re-enters only once the plain decoding
# since is large enough that what its last stretch of speculation cost (its net loss against
# plain decoding, from switching on to switching off, plus the draft's prefill of this prompt)
# is at most this fraction of it: checking again costs a task where SD loses at most ~this much.
REENTRY_BUDGET = 0.03
# ... unless the mean itself (not only its optimistic bound) predicts that SD pays: then the
# decoding is expected to lose nothing, the draft's prefill of the prompt is the price of the
# check (the bound must pay it back, as for any re-entry), and a task that paid until one bad
# stretch switched it off does not wait many prompts for the budget (machine B, held-out set 4,
# json at 64 tokens: json-1 paid for 7 rounds, then kept no draft for 6, and the task ran plain
# until json-11, 0.85x static k = 7).
REENTRY_MEAN = 1.0
# ... and only where that mean rests on evidence: this many (decayed) rounds that drafted. While
# OFF the counts forget, which is meant to widen the bound, but it also lets the prior (0.8 per
# position) pull the mean back up with no new round seen: machine C, held-out long set 2,
# explain at 128 tokens (policy v7): switched off at a mean of 0.972, the mean rose to 1.0007
# over two plain prompts while the evidence decayed from 11 to 5 rounds, and the task re-entered
# to lose again (0.92x raw). The json case above re-enters with about 10 rounds behind it.
REENTRY_MEAN_EVIDENCE = 8
# V(1), plain decoding, is the yardstick every prediction is measured against, and only a
# plain step times it. Plain steps while OFF rescale every cost (a change of machine speed),
# so a slow spell while off leaves every cost high; when speculation resumes, its rounds time
# V(n) and the draft again, but V(1) stays as the slow spell left it and SD looks better than
# it is (machine B, held-out story at 128 tokens: V(1) 84 ms against the loop's 68 ms, and
# k = 2 kept on at 0.9x for five prompts). So while ON, one round in this many is a plain
# step, and a plain step right after an SD round moves V(1) alone, by this weight.
V1_REFRESH_ROUNDS = 16
V1_REFRESH_WEIGHT = 0.5
# A long prompt whose prefill the mean prices out is explored (tried, to learn) only where the
# optimistic bound's saving over the answer pays back this many times the draft's prefill:
# the exploring generation spends its first ~8 rounds learning, so a saving that only just
# covers the prefill (an answer barely past break-even) never comes back. Set on replays
# (bench/replay_policy.py) of machine B's recorded runs: at 1.0 every 64-token long-explain
# run with a 512-token draft window explored its first prompt at a cost of ~2-3 % of the task;
# at 1.5 no 64-token long-input run explores (where static won there, it won by at most 2 %),
# 128-token runs still do where static wins, and the lowest adaptive ÷ static where static
# wins stayed at 0.98; at 2.0 long-doc at 128 tokens fell to 0.97× static. Checked afterwards
# on prompts that played no part in setting it (bench/prompts_heldout_long2.jsonl).
EXPLORE_MARGIN = 1.5
# Only drafted positions are ever learned: where the mean's best k is k, position k + 1 is never
# tried and keeps the prior (0.8), which can keep k short for good. Machine C, held-out long
# set 3 at 128 tokens (policy v8): on edit-heldout3-1 and doc-heldout3-1 the policy drafted
# k = 1 for 62 and 63 rounds with every draft accepted, where static k = 7 kept all 7 drafts
# in 15 of 16 rounds; decoding at k = 1 went no faster than raw. So while the mean's k is
# chosen (thin evidence), one position more is drafted where the last one has EXTEND_PROOF
# decayed rounds behind it and a posterior mean of at least EXTEND_SURVIVAL (two rounds, both
# kept, give 0.9 under the prior), and the next is known from fewer than EXTEND_EVIDENCE rounds
# and not known to be worse than the prior. Set on replays of every recorded adaptive run
# (163 task rows, set 3 included): a survival bar of 0.8 also extended where SD loses (story,
# translate) and took the lowest row there from 0.963 to 0.954 raw; 0.9 leaves that side's
# lowest at 0.963 and lifts the lowest where static wins from 0.936 to 0.979.
EXTEND_EVIDENCE = 8
EXTEND_PROOF = 2
EXTEND_SURVIVAL = 0.9
# After a probe the draft has caught up already: switching on costs nothing more.
PROBE_SWITCH_ON_SPEEDUP = 1.0
# ... or when the mean predicts a loss at every k after this many (decayed) rounds of evidence:
# with cheap drafts the bound alone would need hundreds of rounds to rule out 5 % acceptance.
MIN_EVIDENCE_ROUNDS = 8
# While OFF mid-generation, one probe round every this many plain steps, where allowed and
# only while the optimistic bound says SD may pay (or to refresh the draft cost when costs
# alone rule it out); k = 1 is the cheapest probe.
PROBE_EVERY_STEPS = 64
PROBE_K = 1
# A probe whose drafts were all accepted shrinks the counts by this (a change of regime).
PROBE_SUCCESS_DECAY = 0.5
# When the costs alone rule speculation out (even 100 % acceptance would not pay), acceptance
# cannot change the verdict: probe this many times less often, just to refresh the draft cost.
COSTS_RULE_OUT_PROBE_FACTOR = 8
# A probe after s plain steps first makes the draft catch up on those s tokens (one batch).
# Mid-generation probes are allowed only while that costs at most this fraction of the target
# decodes it spans: measured here, a 0.5B Q4_K_M draft catches up at ~0.2 target decodes per
# token, so on such a CPU a probe would cost more than speculation could win back.
PROBE_BUDGET = 0.03


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
        a, b = s + PRIOR_WEIGHT * PRIOR_SURVIVAL, n - s + PRIOR_WEIGHT * (1 - PRIOR_SURVIVAL)
        return a / (a + b), a + b

    def conditional(self, i: int) -> float:
        """The posterior mean of P(draft i + 1 accepted | the drafts before it accepted)."""
        return self._posterior(i)[0]

    def extends(self, k: int) -> bool:
        """Whether to draft one position past the mean's k to learn it: position k is proven
        (EXTEND_PROOF rounds, mean ≥ EXTEND_SURVIVAL), position k + 1 is thinly known and no
        worse than the prior (the comment above EXTEND_EVIDENCE)."""
        return k < self.k_max and self.drafted[k] < EXTEND_EVIDENCE and \
            self.drafted[k - 1] >= EXTEND_PROOF and \
            self.conditional(k - 1) >= EXTEND_SURVIVAL - 1e-9 and \
            self.conditional(k) >= PRIOR_SURVIVAL - 1e-9

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
        optimistic bound until the loop has verified n once (COST_PRIOR_SPREAD), for choosing k
        only."""
        verify = self.verify_s
        if explore_costs:   # V(1), plain decoding, is the yardstick: never discounted
            verify = {n: v * (1.0 - COST_PRIOR_SPREAD) if n > 1 and not self.verified.get(n)
                      else v for n, v in self.verify_s.items()}
        return best_draft_length(self._survival(z), self.draft_s, verify)

    def costs_rule_out(self) -> bool:
        """True when no k pays even if every draft were accepted."""
        return best_draft_length([1.0] * self.k_max, self.draft_s,
                                 self.verify_s)[1] < SWITCH_OFF_SPEEDUP

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
        self._decay(GENERATION_DECAY)

    def probes_pay(self) -> bool:
        """Catching the draft up after plain steps is cheap enough to probe mid-generation."""
        return self.catchup_s <= PROBE_BUDGET * self.verify_s[1]

    def reentry_affordable(self) -> bool:
        """The plain decoding since the last switch-off pays for trying again: what the last
        stretch of speculation lost, plus the draft's prefill of this prompt, is at most
        REENTRY_BUDGET of it."""
        return REENTRY_BUDGET * self._plain_off_s >= \
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
            self.history.append(0)
            self.trace.append([0, *self._plain_figures,
                               "plain: this prompt's prefill outweighs the gain"])
            return 0
        _, s_mean = self.best()
        _, s_opt = self.best(Z_OFF if self.on else Z_ON)
        starting, self._new_generation = self._new_generation, False
        probed, self._probed = self._probed, False
        explore = ""
        if starting and self.on and self.prefill_outweighs_gain(s_mean):
            # The mean prices the prefill out. If the optimistic bound (acceptance at its 1-sd
            # bound, unverified batch sizes at theirs) pays it back EXPLORE_MARGIN times over,
            # the prompt is tried: what
            # is learned serves the task's next prompts, and the evidence bounds the loss (a
            # losing task switches off within ~8 rounds, and its bound then prices the next
            # long input out). Otherwise the whole generation runs plain.
            s_explore = self.best(Z_ON, explore_costs=True)[1]
            if self.prefill_outweighs_gain(s_explore, EXPLORE_MARGIN):
                self._plain_generation = True
                self._plain_figures = [round(s_mean, 4), round(s_opt, 4)]
                self.history.append(0)
                self.trace.append([0, round(s_mean, 4), round(s_opt, 4),
                                   f"plain for this prompt: the draft's prefill of "
                                   f"{self._unread} tokens costs more than a {s_mean:.2f}× "
                                   f"decode saves on {self._budget} tokens"])
                return 0
            explore = (f"explore: the prefill of {self._unread} tokens is paid back if the "
                       f"decode reaches its optimistic {s_explore:.2f}×")
        if self.costs_rule_out():
            if self.on:
                self._switch_off()
            reason = "off: even 100 % acceptance cannot pay at these costs"
        elif self.on and s_opt < SWITCH_OFF_SPEEDUP:
            self._switch_off()
            reason = "switched off: the optimistic bound predicts a loss at every k"
        elif self.on and s_mean < SWITCH_OFF_SPEEDUP and self.drafted[0] >= MIN_EVIDENCE_ROUNDS:
            self._switch_off()
            reason = "switched off: the mean of enough rounds predicts a loss at every k"
        elif not self.on and starting and s_opt > SWITCH_ON_SPEEDUP and \
                not self.prefill_outweighs_gain(s_opt) and (
                    (mean_pays := s_mean >= REENTRY_MEAN and
                     self.drafted[0] >= REENTRY_MEAN_EVIDENCE) or self.reentry_affordable()):
            self.on, reason = True, "re-entry at a new prompt: " + (
                "the mean pays" if mean_pays else
                "the optimistic bound pays, and the plain decoding since pays for the try")
        elif not self.on and probed and s_mean > PROBE_SWITCH_ON_SPEEDUP:
            self.on, reason = True, "switched on: a probe showed that SD pays"
        else:
            reason = explore or ("on" if self.on else "off")
        if self.on:
            # Where the mean says SD pays: optimism in the face of uncertainty, the best k
            # under the 1-sd bound and the batch sizes' optimistic costs, so that a draft
            # position rarely tried (its interval still wide) or a verify size never timed in
            # the loop gets tried; with evidence the bounds meet the means. Where the mean
            # says it loses but the evidence is thin: the mean's least bad k, the cheapest way
            # to find out.
            k_mean, _ = self.best()
            choice = self.best(Z_ON, explore_costs=True)[0] \
                if s_mean >= SWITCH_ON_SPEEDUP else k_mean
            if s_mean < SWITCH_ON_SPEEDUP and self.extends(choice):
                choice += 1
                reason = f"extend: draft position {choice} to learn it"
            if self._sd_rounds >= V1_REFRESH_ROUNDS:
                choice, reason = 0, "plain step: V(1), the yardstick, timed again"
        elif self.probes_pay() and self.steps_off >= PROBE_EVERY_STEPS * (
                COSTS_RULE_OUT_PROBE_FACTOR if self.costs_rule_out() else 1) and (
                s_opt > PROBE_SWITCH_ON_SPEEDUP or self.costs_rule_out()):
            choice, self.steps_off = min(PROBE_K, self.k_max), 0
            reason, self._probed = "probe", True
        else:
            choice = 0
        self.history.append(choice)
        self.trace.append([choice, round(s_mean, 4), round(s_opt, 4), reason])
        return choice

    def observe(self, r: RoundStats) -> None:
        w = EWMA_WEIGHT
        if r.k == 0:
            self.steps_off += 1
            if not self.on:
                self._decay(OFF_STEP_DECAY)
                self._plain_off_s += r.verify_s
            if self._sd_rounds:
                # right after SD rounds the other costs are fresh: only the yardstick moves.
                # The next round's draft batch holds this step's token too: it times neither
                # a draft step nor a catch-up, so it teaches no draft cost.
                self._sd_rounds = 0
                self._skip_draft_cost = True
                self.verify_s[1] += V1_REFRESH_WEIGHT * (r.verify_s - self.verify_s[1])
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
            self._decay(PROBE_SUCCESS_DECAY)
        self._decay(ROUND_DECAY)
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
