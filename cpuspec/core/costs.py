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

from cpuspec.results.records import CostProbe


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
    """The break-even check from measured times (seconds; medians recommended): every round
    drafts k tokens."""
    if k < 1:
        raise ValueError("need k ≥ 1")
    return cost_model_per_round(k, a, target_decode_s, k * draft_per_token_s, verify_s, k)


def cost_model_per_round(k: int, a: float, target_decode_s: float, drafting_s: float,
                         verify_s: float, drafts: float) -> CostModel:
    """The break-even check for rounds whose drafts vary (prompt lookup, the hybrid), from
    mean seconds per round: α = drafting ÷ T, β = verify ÷ T − 1, c = drafting per draft ÷ T.
    k is the most a round may draft."""
    if target_decode_s <= 0:
        raise ValueError("need a positive target decode time")
    alpha = drafting_s / target_decode_s
    beta = verify_s / target_decode_s - 1.0
    break_even = 1.0 + alpha + beta
    return CostModel(k=k, a=a, c=alpha / drafts if drafts > 0 else 0.0, alpha=alpha,
                     beta=beta, break_even_a=break_even, margin=a - break_even,
                     predicted_speedup=a / break_even, pays=a > break_even)


def verdict_line(task: str, cm: CostModel, measured_speedup: float | None = None) -> str:
    sign = ">" if cm.pays else "<"
    line = (f"{task}: SD {'ON ' if cm.pays else 'OFF'}: a = {cm.a:.2f} {sign} 1 + α + β = "
            f"{cm.break_even_a:.2f} (α = {cm.alpha:.2f}, β = {cm.beta:.2f}, c = {cm.c:.2f}); "
            f"a ÷ (1 + α + β) = {cm.predicted_speedup:.2f}×")
    if measured_speedup is not None:
        line += f", measured {measured_speedup:.2f}×"
    return line


# --- choosing k: the cost model over all draft lengths (issue: know when to turn it off) ---
#
# With greedy drafting, the first i drafts of a round do not depend on k (for k ≥ i), so the
# probability that at least i drafts survive, P(n_accepted ≥ i), measured at one k_max serves
# every k ≤ k_max. Then, for draft length k:
#   E[tokens per round] = 1 + Σ_{i=1..k} P(n_accepted ≥ i)
#   time per round      = k · d + V(k + 1)        (d: draft time per token, V(n): target decode
#                                                  of n tokens, measured per n; V(1) = T)
#   speedup(k)          = E[tokens] · T ÷ time per round,   speedup(0) = 1 (raw decoding).


def expected_tokens(survival: list[float], k: int) -> float:
    """survival[i-1] = P(n_accepted ≥ i), i = 1..k_max."""
    if k > len(survival):
        raise ValueError(f"acceptance measured up to k = {len(survival)}, asked for k = {k}")
    return 1.0 + sum(survival[:k])


def expected_tokens_iid(alpha: float, k: int) -> float:
    """Leviathan et al. (2023), eq. 1: E[tokens] = (1 − α^(k+1)) ÷ (1 − α) for i.i.d. acceptance
    rate α."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(survival: list[float], k: int, draft_s: float,
                      verify_s: dict[int, float]) -> float:
    """Measured-cost generalisation; verify_s[n] = time of a target decode of n tokens."""
    if k == 0:
        return 1.0
    t = verify_s[1]
    return expected_tokens(survival, k) * t / (k * draft_s + verify_s[k + 1])


def break_even_acceptance(k: int, draft_s: float, verify_s: dict[int, float]) -> float | None:
    """The i.i.d. per-token acceptance rate at which draft length k breaks even (speedup 1);
    None when even perfect acceptance does not pay."""
    need = (k * draft_s + verify_s[k + 1]) / verify_s[1]  # tokens per round needed
    if expected_tokens_iid(1.0, k) <= need:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection: expected_tokens_iid grows monotonically with alpha
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens_iid(mid, k) < need else (lo, mid)
    return hi


@dataclass(frozen=True)
class KChoice:
    k: int
    expected_tokens: float
    predicted_speedup: float
    break_even_acceptance: float | None


def choose_k(survival: list[float], draft_s: float, verify_s: dict[int, float]
             ) -> tuple[int, list[KChoice]]:
    """Best draft length k* in 0..k_max (0 = raw decoding) and the table behind it."""
    table = [KChoice(0, 1.0, 1.0, None)]
    for k in range(1, len(survival) + 1):
        if k + 1 not in verify_s:
            break
        table.append(KChoice(k, expected_tokens(survival, k),
                             predicted_speedup(survival, k, draft_s, verify_s),
                             break_even_acceptance(k, draft_s, verify_s)))
    best = max(table, key=lambda c: c.predicted_speedup)
    return best.k, table


def best_draft_length(survival: list[float], draft_s: float, verify_s: dict[int, float]
                      ) -> tuple[int, float]:
    """choose_k's best k ≥ 1 and its predicted speedup, without the table's break-even
    acceptances (a bisection per k): what a policy asks every round."""
    best_k, best = 0, float("-inf")
    for k in range(1, len(survival) + 1):
        if k + 1 not in verify_s:
            break
        s = predicted_speedup(survival, k, draft_s, verify_s)
        if s > best:
            best_k, best = k, s
    return best_k, best


def extrapolate_survival(survival: list[float], k_to: int) -> list[float]:
    """survival measured to len(survival), extended to k_to by assuming each further draft is
    accepted (given the ones before it) as often as the last measured one was. An assumption,
    labelled as such wherever it is shown: it only says where measuring a longer k is worth it."""
    if not survival:
        raise ValueError("no survival to extrapolate")
    last = survival[-1]
    rate = last / survival[-2] if len(survival) > 1 and survival[-2] > 0 else last
    return list(survival) + [last * rate ** i for i in range(1, k_to - len(survival) + 1)]


def beyond_measured(survival: list[float], draft_s: float, verify_s: dict[int, float]
                    ) -> list[KChoice]:
    """KChoice rows for every k past the measured survival that the verify curve covers,
    with extrapolated acceptance (extrapolate_survival)."""
    k_to = max(verify_s) - 1
    if k_to <= len(survival):
        return []
    _, table = choose_k(extrapolate_survival(survival, k_to), draft_s, verify_s)
    return table[len(survival) + 1:]


# --- an end-to-end prediction from the cost probe (measured apart from any generation) ---

def predict_generation_s(probe: CostProbe | dict, survival: list[float], k: int, prompt_tokens: int,
                         n_tokens: int, draft_prompt_tokens: int | None = None
                         ) -> tuple[float, float]:
    """Predicted seconds of one generation of n_tokens after a prompt of prompt_tokens, raw and
    with SD at draft length k, from the probe's costs: prefills scaled per prompt token (the
    draft's per token it reads: draft_prompt_tokens under a draft window), then
    n_tokens − 1 decode steps (the first token comes from the prefill) at V(1) each for raw, or
    at (k·d + V(k + 1)) per round of E[tokens] for SD. Probes without prefill timings (results
    of schema 1) give the decode-only window."""
    p = CostProbe.of(probe)
    target_prefill, draft_prefill = p.scaled_prefills(prompt_tokens, draft_prompt_tokens)
    steps = max(n_tokens - 1, 0)
    raw = target_prefill + steps * p.t
    rounds = steps / expected_tokens(survival, k)
    sd = target_prefill + draft_prefill + rounds * (k * p.draft_s + p.verify_s[k + 1])
    return raw, sd


def round_terms(probe: CostProbe | dict, rounds: list[tuple[int, int, int]], k: int,
                model_share: float = 1.0, catchup_tokens_per_round: float = 0.0,
                gate_k: int | None = None) -> tuple[float, float, float]:
    """(a, α, β) of recorded rounds replayed at draft length k ≤ the k they were recorded at:
    a round that drafted j and kept n would have drafted min(j, k) and kept min(n, k). With
    T = V(1): a = mean tokens per round; α·T = mean drafting per round (d for the share of
    drafts the draft model made, lookup's priced at the probe's d too: for the lookup drafter
    it is the lookup's own cost; plus the hybrid's catch-up batches at the probe's catch-up
    rate); (1 + β)·T = mean V(drafts + 1). A fixed-k model drafter's full rounds give the same
    a as the survival curve. gate_k: the rounds were drafted at k = gate_k with a confidence
    gate (p-min): a round that stopped at j < gate_k drafts also decoded the token it dropped,
    j + 1 draft decodes (at most k)."""
    if not rounds:
        raise ValueError("no rounds to replay")
    p = CostProbe.of(probe)
    verify, t, d = p.verify_s, p.t, p.draft_s
    catchup = catchup_tokens_per_round * p.catchup_s
    drafting = verifying = tokens = 0.0
    for drafted, accepted, emitted in rounds:
        j = min(drafted, k)
        decodes = min(drafted + 1, k) if gate_k and drafted < gate_k else j
        drafting += model_share * decodes * d + catchup
        verifying += verify[j + 1]
        tokens += min(emitted, min(accepted, k) + 1)
    n = len(rounds)
    return tokens / n, drafting / n / t, verifying / n / t - 1.0


def predict_rounds_generation_s(probe: CostProbe | dict, rounds: list[tuple[int, int, int]], k: int,
                                prompt_tokens: int, n_tokens: int, model_share: float = 1.0,
                                catchup_tokens_per_round: float = 0.0,
                                draft_prompt_tokens: int | None = None,
                                gate_k: int | None = None) -> tuple[float, float]:
    """As predict_generation_s, for drafters whose drafts per round vary (prompt lookup, the
    hybrid): the recorded rounds replayed at k (round_terms), (1 + α + β)·T per round of a
    tokens."""
    p = CostProbe.of(probe)
    a, alpha, beta = round_terms(p, rounds, k, model_share, catchup_tokens_per_round, gate_k)
    t = p.t
    target_prefill, draft_prefill = p.scaled_prefills(prompt_tokens, draft_prompt_tokens)
    steps = max(n_tokens - 1, 0)
    raw = target_prefill + steps * t
    sd = target_prefill + draft_prefill + steps * t * (1.0 + alpha + beta) / a
    return raw, sd


def ceiling_speedup(verify_s: dict[int, float], draft_s: float, k: int) -> float:
    """SD ×raw at draft length k with every draft accepted: k + 1 tokens per draft-and-verify
    round against k + 1 plain decodes. An upper bound; 1.0 at k = 0."""
    if k == 0:
        return 1.0
    return (k + 1) * verify_s[1] / (k * draft_s + verify_s[k + 1])


def cost_curve(probe: CostProbe | dict) -> list[dict]:
    """Per batch size n of a probe: V(n), V(n)/V(1), β at k = n − 1, the time per token, and
    the speedup SD would reach at k = n − 1 if every draft were accepted (an upper bound)."""
    p = CostProbe.of(probe)
    verify, t, d = p.verify_s, p.t, p.draft_s
    rows = []
    for n in sorted(verify):
        k = n - 1
        rows.append({"n": n, "verify_ms": 1e3 * verify[n], "v_over_v1": verify[n] / t,
                     "beta": verify[n] / t - 1, "ms_per_token": 1e3 * verify[n] / n,
                     "ceiling_speedup": ceiling_speedup(verify, d, k)})
    return rows


def predict_parallel_generation_s(probe: CostProbe | dict, survival: list[float], k: int,
                                  prompt_tokens: int, n_tokens: int) -> tuple[float, float]:
    """As predict_generation_s, for the parallel schedule (the draft drafts round r + 1 during
    round r's verify). A round finds its drafts ready (a hit) when round r kept all k drafts
    and the target's bonus is the draft's guess; the guess is taken to match as often as draft
    k was accepted after draft k − 1 (the last conditional rate measured). Every round waits
    for the draft-ahead (its last draft and k guesses: (k + 1)·d) beside the verify, so a round
    costs max((k + 1)·d, V(k + 1)), and a miss drafts serially first, k·d more. The prefills
    run at the same time: the longer of the two."""
    p = CostProbe.of(probe)
    verify = p.verify_s
    target_prefill, draft_prefill = p.scaled_prefills(prompt_tokens)
    d, v = p.draft_s, verify[k + 1]
    steps = max(n_tokens - 1, 0)
    all_kept = survival[k - 1]
    guess_ok = survival[k - 1] / survival[k - 2] if k > 1 and survival[k - 2] > 0 else all_kept
    hit = all_kept * guess_ok
    round_s = max((k + 1) * d, v) + (1 - hit) * k * d
    rounds = steps / expected_tokens(survival, k)
    raw = target_prefill + steps * verify[1]
    return raw, max(target_prefill, draft_prefill) + rounds * round_s
