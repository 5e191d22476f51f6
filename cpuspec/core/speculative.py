"""Raw decoding and greedy speculative decoding (Leviathan et al. 2023; Chen et al. 2023).

Pure: no printing, no I/O. Both loops drive objects that follow the `Decoder` protocol (the
llama.cpp session in engine.py, or a scripted fake in tests) and return data: the tokens, one
record per speculative round, and the time of each phase.

Notation: `k` is the draft length; a round drafts k tokens with the draft model, verifies them
with one target decode of k + 1 positions, accepts the longest prefix on which the target's own
greedy choice agrees (`n_accepted`), and emits those plus one "bonus" token from the target:
n_accepted + 1 tokens for the price of k draft decodes and one (k + 1)-token target decode.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Callable, Protocol, Sequence


class Decoder(Protocol):
    """One model context holding a single sequence in its KV cache."""

    def eval(self, tokens: Sequence[int], pos: int, n_out: int) -> list[int]:
        """Decode `tokens` at positions pos.., return the greedy token after each of the last
        `n_out` of them (n_out ≤ len(tokens))."""

    def truncate(self, pos: int) -> None:
        """Forget KV positions ≥ pos."""

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens."""

    # Drafters that gate on confidence (p_min > 0) also have confidence(): the probability of
    # the token their last eval returned, over their 10 most likely tokens.


@dataclass(frozen=True)
class RoundStats:
    k: int             # tokens drafted this round (≤ the configured k near max_tokens / EOG)
    n_accepted: int    # drafted tokens the target agreed with
    n_emitted: int     # tokens this round added to the output (accepted + bonus, capped)
    draft_s: float     # draft decodes, catch-up included
    verify_s: float    # the target's (k + 1)-token decode and its argmax
    round_s: float     # the whole round: policy, bookkeeping and KV rollback included

    def as_row(self) -> list:
        return [getattr(self, f) for f in ROUND_FIELDS]


# The order of a round's fields in a results file's compact rows; defined here, once.
ROUND_FIELDS = tuple(f.name for f in fields(RoundStats))


@dataclass
class Generation:
    """One prompt's generation, timed in two windows:
      end-to-end (`e2e_s`): everything after the prompt is known: the target's prefill (which
        gives the first output token in both modes), the draft's prefill, and every round;
      decode-only (`decode_s`): from the end of both prefills to the last token.
    The headline speedup is end-to-end; decode-only is a detail."""
    prompt_tokens: int
    tokens: list[int]
    prefill_s: float                    # the target's prompt prefill
    decode_s: float                     # from the end of the prefills to the last token
    token_latencies_s: list[float]      # one per decode-phase token (len(tokens) - 1)
    rounds: list[RoundStats] = field(default_factory=list)   # empty for raw decoding
    stop: str = "max_tokens"            # or "eog"
    draft_prefill_s: float = 0.0        # the draft's prompt prefill (0 for raw decoding)
    extra: dict = field(default_factory=dict)   # schedule-specific counts (parallel)
    drafter_stats: dict = field(default_factory=dict)  # the hybrid drafter's counts
    reused: int = 0                     # prompt tokens already in the KV (a follow-up turn)
    # per round, each drafted token's confidence (draft.confidence()), where asked for: what
    # a p-min gate would have seen, so one ungated run prices every p-min (replay)
    draft_confidence: list[list[float]] | None = None
    # per round, the drafts its verify read (the batch was [the last emitted token, *drafts]
    # at the position after it): with the prompt and the tokens, every verify can be replayed
    # exactly (core/audit.py)
    batches: list[list[int]] = field(default_factory=list)

    @property
    def decode_tokens(self) -> int:
        return len(self.token_latencies_s)

    @property
    def e2e_s(self) -> float:
        return self.prefill_s + self.draft_prefill_s + self.decode_s


Clock = Callable[[], float]


def _stop_reason(decoder: Decoder, tokens: list[int], max_tokens: int) -> str | None:
    if tokens and decoder.is_eog(tokens[-1]):
        return "eog"
    if len(tokens) >= max_tokens:
        return "max_tokens"
    return None


def _check_reuse(prompt: Sequence[int], reuse: int) -> None:
    if not 0 <= reuse < len(prompt):
        raise ValueError(f"reuse must leave at least one prompt token to read: {reuse} of "
                         f"{len(prompt)}")


def generate_raw(target: Decoder, prompt: Sequence[int], max_tokens: int,
                 clock: Clock = time.perf_counter, reuse: int = 0) -> Generation:
    """Target alone, one token per decode: the baseline speculative decoding must beat.
    reuse: the target's KV already holds prompt[:reuse] (an earlier turn of the same
    conversation, as a chat server keeps it); only the rest is prefilled and timed."""
    _check_reuse(prompt, reuse)
    target.truncate(reuse)
    t0 = clock()
    tokens = target.eval(prompt[reuse:], reuse, 1)
    t_prefill = clock()
    latencies = []
    t_prev = t_prefill
    while (stop := _stop_reason(target, tokens, max_tokens)) is None:
        tokens += target.eval(tokens[-1:], len(prompt) + len(tokens) - 1, 1)
        now = clock()
        latencies.append(now - t_prev)
        t_prev = now
    return Generation(len(prompt), tokens, t_prefill - t0, t_prev - t_prefill, latencies,
                      stop=stop, reused=reuse)


# A drafter answers this instead of a token when it has no guess (the lookup drafter).
NO_DRAFT = -1


def prefill_draft(draft: Decoder, tokens: Sequence[int], pos: int) -> list[int]:
    """The draft's read of a prompt at `pos`: the drafter's own `prefill` where it has one
    (the hybrid, whose rounds may leave the model behind, reads everything it lacks there),
    else one eval."""
    prefill = getattr(draft, "prefill", None)
    return prefill(tokens, pos) if prefill else draft.eval(tokens, pos, 1)


def draft_tokens(draft: Decoder, pending: Sequence[int], pos: int, k: int,
                 p_min: float = 0.0, seen: list[float] | None = None) -> tuple[list[int], int]:
    """Greedily draft up to k tokens; return them and the draft's KV length afterwards.
    `pending` holds the tokens the draft has not seen yet (the last emitted one, plus the
    previous round's last draft if it was accepted), placed at `pos`. The k-th draft is never
    decoded by the draft: the next round does that only if it is kept.

    p_min > 0: confidence-gated drafting, as llama.cpp's draft-simple does it
    (--spec-draft-p-min): drafting stops at the first token whose probability under the draft
    (draft.confidence(), over its 10 most likely tokens as llama.cpp's draft sampler sees
    them) is below p_min, and that token is dropped. A dropped token was never decoded by the
    draft, so the KV length is unchanged. `seen`, where given, gets every drafted token's
    confidence (the dropped one's too)."""
    drafts = draft.eval(pending, pos, 1)
    pos += len(pending)
    while True:
        if drafts[-1] == NO_DRAFT:
            drafts.pop()
            break
        if p_min > 0 or seen is not None:
            c = draft.confidence()
            if seen is not None:
                seen.append(c)
            if c < p_min:
                drafts.pop()
                break
        if len(drafts) >= k or draft.is_eog(drafts[-1]):
            break
        drafts += draft.eval(drafts[-1:], pos, 1)
        pos += 1
    return drafts, pos


def verify_greedy(target: Decoder, draft: Decoder, last: int, drafts: list[int], pos: int
                  ) -> tuple[int, int]:
    """One target decode of [last, *drafts] at pos; keep drafts while they equal the target's
    argmax. Returns (n_accepted, the target's next token after them)."""
    choice = target.eval([last, *drafts], pos, len(drafts) + 1)
    n_accepted = count_accepted(drafts, choice)
    return n_accepted, choice[n_accepted]


def cut_at_eog(decoder: Decoder, emitted: list[int]) -> list[int]:
    """A round's tokens up to and including the first end-of-generation token."""
    for i, tok in enumerate(emitted):
        if decoder.is_eog(tok):
            return emitted[:i + 1]
    return emitted


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens a and b share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def count_accepted(drafts: Sequence[int], target_choice: Sequence[int]) -> int:
    """Greedy verification: the longest prefix of drafts equal to the target's argmax choices."""
    return common_prefix(drafts, target_choice)


class KPolicy(Protocol):
    """Chooses each round's draft length (0: a plain target step) and learns from the round."""

    def next_k(self, cap: int | None = None) -> int:
        """The next round's draft length, at most `cap` (what fits before max_tokens)."""

    def observe(self, r: RoundStats) -> None: ...


class StaticPolicy:
    """Draft k tokens every round (policy.py has the adaptive one)."""

    def __init__(self, k: int):
        if k < 1:
            raise ValueError("k must be ≥ 1")
        self.k = k

    def next_k(self, cap: int | None = None) -> int:
        return self.k if cap is None else min(self.k, cap)

    def observe(self, r: RoundStats) -> None:
        pass


Verify = Callable[[Decoder, Decoder, int, list[int], int], tuple[int, int]]


@dataclass
class _Run:
    """What both speculative loops keep while they go: the emitted tokens, one record per
    round, each decode-phase token's latency, and when the last round ended."""
    tokens: list[int]
    t_prev: float
    rounds: list[RoundStats] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    confidence: list[list[float]] | None = None   # per round, where recorded
    batches: list[list[int]] = field(default_factory=list)   # per round, its drafts

    def close_round(self, target: Decoder, drafts: list[int], n_accepted: int, next_token: int,
                    draft_s: float, verify_s: float, clock: Clock) -> RoundStats:
        """Emit the accepted drafts and the target's token (up to an end-of-generation token)
        and record the round. A round runs from the end of the previous one, so the policy's
        time counts too and the rounds add up to decode_s exactly; a token's latency is its
        round's time spread evenly over the round's tokens."""
        emitted = cut_at_eog(target, drafts[:n_accepted] + [next_token])
        self.tokens += emitted
        self.batches.append(list(drafts))
        now = clock()
        r = RoundStats(len(drafts), n_accepted, len(emitted), draft_s, verify_s, now - self.t_prev)
        self.rounds.append(r)
        self.latencies += [r.round_s / len(emitted)] * len(emitted)
        self.t_prev = now
        return r


def _keep_draft_kv(draft: Decoder, kv: int, keep: int) -> int:
    """Roll the draft's KV (length kv) back to at most `keep` positions; its new length."""
    n_kv = min(kv, keep)
    if n_kv < kv:
        draft.truncate(n_kv)
    return n_kv


def _round_drafts(draft: Decoder, tokens: list[int], n_prompt: int, n_draft_kv: int | None,
                  k: int, gate: tuple[float, int] = (0.0, 0), seen: list[float] | None = None
                  ) -> tuple[list[int], int | None]:
    """This round's drafts and the draft's KV length after them. Once prefilled, the draft's
    KV covers the prompt, so what it has not seen is a tail of tokens. gate: (p_min, n_min)
    as llama.cpp's --spec-draft-p-min and --spec-draft-n-min: fewer than n_min confident
    drafts are dropped (the round is a plain target step)."""
    if k <= 0:
        return [], n_draft_kv
    pending = tokens[n_draft_kv - n_prompt:] if n_draft_kv is not None else []
    drafts, kv = draft_tokens(draft, pending, n_draft_kv, k, gate[0], seen)
    return (drafts if len(drafts) >= gate[1] else []), kv


def generate_speculative(target: Decoder, draft: Decoder, prompt: Sequence[int],
                         max_tokens: int, k: int | KPolicy,
                         clock: Clock = time.perf_counter,
                         verify: Verify = verify_greedy, reuse: int = 0,
                         gate: tuple[float, int] = (0.0, 0),
                         record_confidence: bool = False) -> Generation:
    """Speculative decoding. Greedy by default: with exact arithmetic its output equals
    generate_raw's. `k` is a fixed draft length or a policy that picks one per round
    (policy.py); `verify` is the acceptance rule (sampling.py has the stochastic one);
    `gate` = (p_min, n_min) stops a round's drafting at the first unsure draft token
    (draft_tokens), so a round drafts between 0 and k; record_confidence keeps each drafted
    token's confidence per round (Generation.draft_confidence; drafters with confidence()).

    Invariant at the start of a round, with n = len(prompt) + len(tokens): the target's KV holds
    positions [0, n - 1) and tokens[-1] (at position n - 1) is emitted but not yet decoded; the
    draft's KV holds positions [0, n_draft_kv) with n_draft_kv ≤ n - 1.

    The draft reads the prompt only when the first round drafts (a policy that never speculates
    never pays the draft's prefill), timed as draft_prefill_s: outside the round and the
    decode-only window, inside the end-to-end one. reuse: both KVs already hold
    prompt[:reuse] (a follow-up turn); both read only the rest."""
    policy = StaticPolicy(k) if isinstance(k, int) else k
    _check_reuse(prompt, reuse)
    target.truncate(reuse)
    draft.truncate(reuse)
    t0 = clock()
    run = _Run(target.eval(prompt[reuse:], reuse, 1), clock())
    t_prefill, draft_prefill_s = run.t_prev, 0.0
    n_draft_kv = None  # the draft has not read the prompt yet
    run.confidence = [] if record_confidence else None
    while (stop := _stop_reason(target, run.tokens, max_tokens)) is None:
        n = len(prompt) + len(run.tokens)
        # Never draft past max_tokens: k drafts + 1 bonus must fit in what remains.
        cap = max_tokens - len(run.tokens) - 1
        k_round = min(policy.next_k(cap), cap)
        if k_round > 0 and n_draft_kv is None:  # the draft's prompt prefill, on first use
            draft_prefill_s += _read_prompt_into_draft(draft, prompt, reuse, run, clock)
            n_draft_kv = len(prompt)
        t_draft_start = clock()
        seen = [] if run.confidence is not None else None
        drafts, draft_kv = _round_drafts(draft, run.tokens, len(prompt), n_draft_kv, k_round,
                                         gate, seen)
        t_drafted = clock()
        n_accepted, next_token = verify(target, draft, run.tokens[-1], drafts, n - 1)
        t_verified = clock()
        # Roll back rejected positions. Target: keep tokens[-1] and the accepted drafts. Draft:
        # it decoded the pending tokens and drafts (all but a model's last) at n..; keep the
        # accepted ones among them.
        if n_accepted < len(drafts):
            target.truncate(n + n_accepted)
        if draft_kv is not None:
            n_draft_kv = _keep_draft_kv(draft, draft_kv, n + n_accepted)
        policy.observe(run.close_round(target, drafts, n_accepted, next_token,
                                       t_drafted - t_draft_start, t_verified - t_drafted, clock))
        if seen is not None:
            run.confidence.append(seen)
    return Generation(len(prompt), run.tokens, t_prefill - t0,
                      run.t_prev - t_prefill - draft_prefill_s, run.latencies, run.rounds, stop,
                      draft_prefill_s=draft_prefill_s, reused=reuse,
                      draft_confidence=run.confidence, batches=run.batches)


def _read_prompt_into_draft(draft: Decoder, prompt: Sequence[int], reuse: int, run: _Run,
                            clock: Clock) -> float:
    """The draft's prompt prefill, on the first round that drafts; its seconds, kept out of
    that round's time."""
    t0 = clock()
    prefill_draft(draft, prompt[reuse:], reuse)
    spent = clock() - t0
    run.t_prev += spent
    return spent


# --- a parallel schedule: the draft works on the next round while the target verifies --------

def draft_ahead(draft: Decoder, last_draft: int, pos: int, k: int) -> tuple[list[int], int]:
    """Run on the draft's own thread during a verify, assuming every draft is accepted: decode
    the round's last draft (at `pos`), guess the target's bonus token (e1), and draft k more
    after it. Returns [e1, ..., e_{k+1}] and the draft's KV length (the last guess is not
    decoded, as in draft_tokens)."""
    guesses = draft.eval([last_draft], pos, 1)
    pos += 1
    while len(guesses) < k + 1 and not draft.is_eog(guesses[-1]):
        guesses += draft.eval(guesses[-1:], pos, 1)
        pos += 1
    return guesses, pos


def _new_ahead_stats() -> dict:
    """Generation.extra of the parallel schedule. ahead_s / ahead_decodes: the draft's own time
    per decode on its thread (a round's draft_s holds only what this thread waited for, ~0 on a
    hit, so c is measured here)."""
    return {"hits": 0, "misses": 0, "hidden_draft_s": 0.0, "discarded_drafts": 0,
            "ahead_s": 0.0, "ahead_decodes": 0}


def _settle_ahead(draft: Decoder, extra: dict, hit: bool, guesses: list[int],
                  spec_kv: int | None, spec_s: float, waited_s: float, n_draft_kv: int,
                  keep: int) -> tuple[list[int], int]:
    """After a verify: on a hit, the draft-ahead's guesses are the next round's drafts;
    otherwise they are discarded and the draft's KV rolled back to the accepted tokens. The
    draft-ahead's time (spec_s; None as spec_kv where none ran) is counted, and how much of
    it the verify hid (all but what this thread waited for after it, waited_s). Returns (the
    next round's ready drafts, the draft's KV length)."""
    ran = spec_kv is not None
    extra["hidden_draft_s"] += max(spec_s - waited_s, 0.0)
    if ran:   # draft_ahead decoded the last draft and every guess but one
        extra["ahead_s"] += spec_s
        extra["ahead_decodes"] += len(guesses)
    if hit:
        extra["hits"] += 1
        return guesses[1:], spec_kv
    if ran:
        extra["misses"] += 1
        extra["discarded_drafts"] += len(guesses)
    kv = spec_kv if ran else n_draft_kv
    return [], _keep_draft_kv(draft, kv, keep)


def generate_speculative_parallel(target: Decoder, draft: Decoder, prompt: Sequence[int],
                                  max_tokens: int, k: int, submit: Callable,
                                  draft_async: Decoder | None = None,
                                  clock: Clock = time.perf_counter,
                                  reuse: int = 0) -> Generation:
    """Greedy speculative decoding where the draft, on its own cores, drafts round r + 1 while
    the target verifies round r, assuming round r is fully accepted. If it was, and the
    target's bonus token is the draft's first guess, round r + 1 starts with its drafts ready;
    otherwise they are discarded and the draft's KV rolled back (the serial step): the target's
    greedy choices either way, as in generate_speculative.

    `submit(fn, *args)` runs fn on the draft's thread and returns a future; `draft` is used
    from this thread for serial drafting (it forwards to the draft's thread), `draft_async` is
    the same model called directly on its thread (default: `draft`). Per round, draft_s is the
    drafting this thread waited for (serial drafting, and the wait for the draft-ahead after
    the verify); Generation.extra counts hits, misses and the drafting hidden. reuse: both
    KVs hold prompt[:reuse] already (a depth): kept, only the rest is read."""
    if k < 1:
        raise ValueError("k must be ≥ 1")
    _check_reuse(prompt, reuse)
    draft_async, _ = draft_async or draft, (target.truncate(reuse), draft.truncate(reuse))
    t0 = clock()
    prefill = submit(draft_async.eval, list(prompt[reuse:]), reuse, 1)  # both prefills at once
    tokens, t_target = target.eval(prompt[reuse:], reuse, 1), clock()
    prefill.result()
    run = _Run(tokens, clock())
    t_prefill = run.t_prev
    n_draft_kv = len(prompt)
    ahead: list[int] = []
    extra = _new_ahead_stats()
    while (stop := _stop_reason(target, run.tokens, max_tokens)) is None:
        n = len(prompt) + len(run.tokens)
        k_round = min(k, max_tokens - len(run.tokens) - 1)
        t_start = clock()
        if ahead and k_round > 0:
            drafts = ahead[:k_round]
        else:
            drafts, n_draft_kv = _round_drafts(draft, run.tokens, len(prompt), n_draft_kv,
                                               k_round)
        t_drafted = clock()
        spec = None
        if drafts and not any(target.is_eog(d) for d in drafts):
            last_pos = n + len(drafts) - 1            # where drafts[-1] sits
            draft.truncate(last_pos)                  # the draft holds drafts[:-1], no more
            spec = submit(_timed, draft_ahead, draft_async, drafts[-1], last_pos, k)
        n_accepted, next_token = verify_greedy(target, draft, run.tokens[-1], drafts, n - 1)
        t_verified = clock()
        guesses, spec_kv, spec_s = spec.result() if spec else ([], None, 0.0)
        t_joined = clock()
        if n_accepted < len(drafts):
            target.truncate(n + n_accepted)
        hit = spec is not None and n_accepted == len(drafts) and guesses[:1] == [next_token]
        ahead, n_draft_kv = _settle_ahead(draft, extra, hit, guesses, spec_kv, spec_s,
                                          t_joined - t_verified, n_draft_kv, n + n_accepted)
        run.close_round(target, drafts, n_accepted, next_token,
                        (t_drafted - t_start) + (t_joined - t_verified), t_verified - t_drafted,
                        clock)
    return Generation(len(prompt), run.tokens, t_target - t0, run.t_prev - t_prefill,
                      run.latencies, run.rounds, stop, draft_prefill_s=t_prefill - t_target,
                      extra=extra, reused=reuse, batches=run.batches)


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return (*out, time.perf_counter() - t0)
