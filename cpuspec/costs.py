"""When speculative decoding pays: the rule a > 1 + α + β.

With T the time of one target decode (one token):
  a = tokens emitted per round (accepted drafts + the target's bonus token);
  c = draft cost per drafted token ÷ T, so the k drafts cost α·T with α = k·c;
  β = (time of the target's (k + 1)-token verify decode ÷ T) − 1.
A round then costs (1 + α + β)·T and yields a tokens, against a tokens in a·T for plain decoding:
  predicted speedup = a ÷ (1 + α + β), break-even when a = 1 + α + β.
On a GPU, c is small and β ≈ 0 (the verify batch rides on the same weight read); on a CPU the
draft competes for the same memory bandwidth and compute, so both are large.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CostModel:
    k: int
    a: float              # mean tokens emitted per full round
    c: float              # draft cost per token ÷ target cost per token
    alpha: float          # k · c
    beta: float           # verify(k + 1) ÷ decode(1) − 1
    break_even_a: float   # 1 + α + β
    margin: float         # a − (1 + α + β): > 0 means speculation pays
    predicted_speedup: float
    pays: bool

    def to_dict(self) -> dict:
        return asdict(self)


def cost_model(k: int, a: float, target_decode_s: float, draft_per_token_s: float,
               verify_s: float) -> CostModel:
    """The break-even check from measured times (seconds; medians recommended)."""
    if k < 1 or target_decode_s <= 0:
        raise ValueError("need k ≥ 1 and a positive target decode time")
    c = draft_per_token_s / target_decode_s
    alpha = k * c
    beta = verify_s / target_decode_s - 1.0
    break_even = 1.0 + alpha + beta
    return CostModel(k=k, a=a, c=c, alpha=alpha, beta=beta, break_even_a=break_even,
                     margin=a - break_even, predicted_speedup=a / break_even,
                     pays=a > break_even)


def verdict_line(task: str, cm: CostModel, measured_speedup: float | None = None) -> str:
    sign = ">" if cm.pays else "<"
    line = (f"{task}: SD {'ON ' if cm.pays else 'OFF'}: a = {cm.a:.2f} {sign} 1 + α + β = "
            f"{cm.break_even_a:.2f} (α = {cm.alpha:.2f}, β = {cm.beta:.2f}, c = {cm.c:.2f}); "
            f"predicted {cm.predicted_speedup:.2f}×")
    if measured_speedup is not None:
        line += f", measured {measured_speedup:.2f}×"
    return line
