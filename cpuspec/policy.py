"""Draft-length policies: how many tokens to draft in the next round (0 = a plain target step).

StaticPolicy drafts k every round. AdaptivePolicy keeps running estimates of the per-position
acceptance (survival), the draft's cost per token and the target's decode time per batch size,
picks the k with the best predicted speedup from the cost model each round, turns speculation
off when no k pays, and probes now and then to see whether it pays again.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .costs import choose_k
from .speculative import RoundStats

# Weight of a new observation in the running means: ~the last 10 rounds dominate, enough to
# follow a change of task within a generation, few enough to ride out one odd round.
EWMA_WEIGHT = 0.1
# Turn speculation on only when the best k is predicted this much faster than raw, and off
# when it drops below break-even: the gap stops it from flapping between rounds.
SWITCH_ON_SPEEDUP = 1.05
SWITCH_OFF_SPEEDUP = 1.0
# While off, one probe round every this many plain steps. On a CPU where speculation does not
# pay (c ≈ 0.6, β(4) ≈ 1.9), a k = 2 probe costs ~2 decodes extra: ~3 % of 64 steps.
PROBE_EVERY_STEPS = 64
PROBE_K = 2
# When the costs alone rule speculation out (even 100 % acceptance would not pay), acceptance
# cannot change the verdict: probe this many times less often, just to refresh the draft cost.
COSTS_RULE_OUT_PROBE_FACTOR = 8
# A probe after s plain steps first makes the draft catch up on those s tokens (one batch).
# Probing is allowed only while that costs at most this fraction of the target decodes it
# spans: measured here, a 0.5B draft catches up at ~0.2 target decodes per token, so on such a
# CPU a probe would cost more than speculation could win back, and adaptive stays off.
PROBE_BUDGET = 0.03
# Optimistic prior for acceptance before anything is observed, so that speculation is tried.
PRIOR_SURVIVAL = 0.8


class StaticPolicy:
    def __init__(self, k: int):
        if k < 1:
            raise ValueError("k must be ≥ 1")
        self.k = k

    def next_k(self) -> int:
        return self.k

    def observe(self, r: RoundStats) -> None:
        pass


@dataclass
class AdaptivePolicy:
    k_max: int
    draft_s: float                      # prior: draft time per token (cost probe)
    verify_s: dict[int, float]          # prior: target decode time of n tokens, n = 1..k_max+1
    catchup_s: float = 0.0              # prior: draft time per token of a catch-up batch
    survival: list[float] = field(default_factory=list)
    on: bool = True
    steps_off: int = 0
    history: list[int] = field(default_factory=list)   # k chosen each round

    def __post_init__(self) -> None:
        if self.k_max < 1 or any(n not in self.verify_s for n in range(1, self.k_max + 2)):
            raise ValueError("need k_max ≥ 1 and verify times for 1..k_max+1 tokens")
        self.verify_s = dict(self.verify_s)
        if not self.survival:
            self.survival = [PRIOR_SURVIVAL ** i for i in range(1, self.k_max + 1)]
        self._after_off = False
        self._steps_before = 0

    def best(self) -> tuple[int, float]:
        k, table = choose_k(self.survival, self.draft_s, self.verify_s)
        return k, table[k].predicted_speedup

    def costs_rule_out(self) -> bool:
        """True when no k pays even if every draft were accepted."""
        _, table = choose_k([1.0] * self.k_max, self.draft_s, self.verify_s)
        return max(c.predicted_speedup for c in table[1:]) < SWITCH_OFF_SPEEDUP

    def new_generation(self) -> None:
        """A new prompt: the draft starts in step with the target (both prefill the prompt),
        so no catch-up is pending; what was learned is kept."""
        self.steps_off = 0
        self._after_off = False
        self._steps_before = 0

    def probes_pay(self) -> bool:
        """Catching the draft up after plain steps is cheap enough to probe at all."""
        return self.catchup_s <= PROBE_BUDGET * self.verify_s[1]

    def next_k(self) -> int:
        k, speedup = self.best()
        if self.on and (k == 0 or speedup < SWITCH_OFF_SPEEDUP):
            self.on, self.steps_off = False, 0
        elif not self.on and k > 0 and speedup > SWITCH_ON_SPEEDUP:
            self.on = True
        if self.on:
            choice = k
        elif self.probes_pay() and self.steps_off >= PROBE_EVERY_STEPS * (
                COSTS_RULE_OUT_PROBE_FACTOR if self.costs_rule_out() else 1):
            choice, self.steps_off = min(PROBE_K, self.k_max), 0
        else:
            choice = 0
        self.history.append(choice)
        return choice

    def observe(self, r: RoundStats) -> None:
        w = EWMA_WEIGHT
        if r.k == 0:
            self.steps_off += 1
            self._steps_before = self.steps_off
            # A plain step measures only V(1). A change in it while the other costs go unseen is
            # the whole machine speeding up or slowing down (other load, clocks), which scales
            # every phase alike: rescale them all, so c and β stay as last measured and a slow
            # spell cannot make speculation look profitable.
            factor = (self.verify_s[1] + w * (r.verify_s - self.verify_s[1])) / self.verify_s[1]
            self.verify_s = {n: v * factor for n, v in self.verify_s.items()}
            self.draft_s *= factor
            self.catchup_s *= factor
            self._after_off = True
            return
        for i in range(1, r.k + 1):  # greedy drafts: position i is the same draft for any k ≥ i
            self.survival[i - 1] += w * (float(r.n_accepted >= i) - self.survival[i - 1])
        for i in range(r.k + 1, self.k_max + 1):  # keep survival non-increasing in i
            self.survival[i - 1] = min(self.survival[i - 1], self.survival[r.k - 1])
        if self._after_off:  # the draft caught up on the plain steps first: learn that cost
            caught_up = max(self._steps_before, 1)
            spent = max(r.draft_s - r.k * self.draft_s, 0.0) / caught_up
            self.catchup_s += w * (spent - self.catchup_s)
        else:
            self.draft_s += w * (r.draft_s / r.k - self.draft_s)
        self._after_off = False
        self.steps_off = 0
        self.verify_s[r.k + 1] += w * (r.verify_s - self.verify_s[r.k + 1])
