"""Lossless, proven (issue 78): greedy SD's output checked against the target itself.

Greedy speculative decoding is lossless in exact arithmetic. On a CPU a (k + 1)-token verify
runs other kernels than a one-token decode (batched matmuls, another accumulation order), so a
near-tie between the target's top two logits can go the other way: SD's output then differs
from plain decoding's without anything being wrong. A loop defect (a KV rollback off by one, a
dropped bonus token) also makes the outputs differ. Two checks tell them apart:

* the exact audit (`replay_exact`): replay the target over SD's own output, teacher-forced, in
  SD's own rounds: the same start positions, the same batches (each round's recorded drafts),
  the same rollbacks. Its argmaxes must reproduce SD's tokens one for one; any mismatch is a
  defect of the loop, with its round and position. It is written apart from the loop (nothing
  here calls speculative.py's round code) so that it can disagree with it.
* at the first divergence from plain decoding (`classify_divergence`): the target's logits for
  both tokens on both paths, one-token (what raw decoding ran) and batched (SD's own round).
  "numeric" where each path's argmax is its own run's token (the target itself ranks the two
  differently on the two paths), "defect" otherwise; and whether the flip is the batched row's
  own (SD's exact batch on a prefix decoded one token at a time flips too) or carried in the
  KV cache (it does not: earlier batched verifies left slightly other keys and values).

Pure: no I/O. The target is a Decoder with logits(n_out) (the last eval's rows).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class ExactAudit:
    """The exact audit of one SD output: ok, or the first round whose replay disagreed."""
    ok: bool
    rounds: int                     # rounds replayed
    round: int | None = None        # the first disagreeing round (-1: the prompt's prefill)
    position: int | None = None     # its first disagreeing output index
    expected: int | None = None     # SD's token there
    replayed: int | None = None     # the target's argmax under SD's batch there

    def to_dict(self) -> dict:
        return asdict(self)


def _emitted(decoder, drafts: Sequence[int], choice: Sequence[int]) -> tuple[int, list[int]]:
    """Accepted drafts (while equal to the target's argmax) and the target's own token after
    them, up to an end-of-generation token: what a greedy round emits."""
    n = 0
    while n < len(drafts) and drafts[n] == choice[n]:
        n += 1
    out = list(drafts[:n]) + [choice[n]]
    for i, tok in enumerate(out):
        if decoder.is_eog(tok):
            return n, out[:i + 1]
    return n, out


def replay_exact(target, prompt: Sequence[int], tokens: Sequence[int],
                 batches: Sequence[Sequence[int]], reuse: int = 0,
                 stop_before: int | None = None,
                 capture: tuple[int, int, dict] | None = None) -> ExactAudit:
    """Replay SD's verifies on the target: prefill prompt[reuse:] at reuse, then per round the
    batch [last token, *drafts] at the position after the output so far, keeping what the
    round's argmaxes accept and rolling the rest back. stop_before=r leaves the target's KV as
    SD's was at the start of round r; capture=(r, row, into) keeps round r's logit row `row`
    in into["row"] on the way (classify_divergence's batched path, at no extra decode)."""
    target.truncate(reuse)
    first = target.eval(list(prompt[reuse:]), reuse, 1)[0]
    if not tokens or first != tokens[0]:
        return ExactAudit(False, 0, -1, 0, tokens[0] if tokens else None, first)
    out = [first]
    for r, drafts in enumerate(batches):
        if r == stop_before:
            break
        pos = len(prompt) + len(out) - 1
        choice = target.eval([out[-1], *drafts], pos, len(drafts) + 1)
        if capture is not None and capture[0] == r:
            capture[2]["row"] = _row(target, len(drafts) + 1, capture[1])
        n_acc, emitted = _emitted(target, drafts, choice)
        want = list(tokens[len(out):len(out) + len(emitted)])
        if emitted != want:
            i = next((i for i, (a, b) in enumerate(zip(emitted, want)) if a != b),
                     min(len(emitted), len(want)))
            return ExactAudit(False, r + 1, r, len(out) + i,
                              want[i] if i < len(want) else None,
                              emitted[i] if i < len(emitted) else None)
        out += emitted
        target.truncate(pos + 1 + n_acc)
    if stop_before is None and out != list(tokens):
        return ExactAudit(False, len(batches), len(batches), len(out),
                          tokens[len(out)] if len(out) < len(tokens) else None, None)
    return ExactAudit(True, len(batches) if stop_before is None else stop_before)


def locate(tokens: Sequence[int], batches: Sequence[Sequence[int]], n_emitted: Sequence[int],
           j: int) -> tuple[int, int, int]:
    """The round that emitted output index j (≥ 1; index 0 is the prefill's), the row of its
    batch that chose it, and the output index its batch started after (its first token)."""
    start = 1
    for r, n in enumerate(n_emitted):
        if j < start + n:
            return r, j - start, start
        start += n
    raise ValueError(f"output index {j} is past the {len(batches)} rounds' {start} tokens")


def _row(target, n_out: int, row: int) -> np.ndarray:
    return np.array(target.logits(n_out)[row], dtype=np.float64)


def one_token_paths(target, prompt: Sequence[int], raw: Sequence[int], sd: Sequence[int],
                    drafts: Sequence[int], start: int, row: int, j: int,
                    reuse: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """On plain decoding's path (the prompt in one prefill, then one token per decode) over
    the prefix both outputs share: SD's exact batch of the round that chose index j
    ([sd[start - 1], *drafts]) evaluated on that one-token KV (its row `row`: flips there are
    the batched row's own), then, rolled back, the one-token logits after raw[:j]. One prefix
    serves both (start - 1 ≤ j: the round began inside the shared prefix)."""
    n = len(prompt)
    target.truncate(reuse)
    target.eval(list(prompt[reuse:]), reuse, 1)
    for i, tok in enumerate(raw[:start - 1]):
        target.eval([tok], n + i, 1)
    batch = [sd[start - 1], *drafts]
    target.eval(batch, n + start - 1, len(batch))
    kv_free = _row(target, len(batch), row)
    target.truncate(n + start - 1)
    for i in range(start - 1, j):     # j ≥ start: at least one decode
        target.eval([raw[i]], n + i, 1)
    return _row(target, 1, 0), kv_free


def one_token_logits(target, prompt: Sequence[int], prefix: Sequence[int],
                     reuse: int = 0) -> np.ndarray:
    """The target's logits after prompt + prefix on plain decoding's path."""
    target.truncate(reuse)
    target.eval(list(prompt[reuse:]), reuse, 1)
    for i, tok in enumerate(prefix):
        target.eval([tok], len(prompt) + i, 1)
    return _row(target, 1, 0)


def classify_divergence(target, prompt: Sequence[int], raw: Sequence[int],
                        sd: Sequence[int], batches: Sequence[Sequence[int]],
                        n_emitted: Sequence[int], j: int, reuse: int = 0,
                        batched: np.ndarray | None = None) -> dict:
    """At output index j, where SD's token first differs from raw decoding's: both tokens'
    logits on the one-token path and on SD's batched path (its own round, on the KV its earlier
    rounds left: `batched`, as replay_exact captured it, else replayed here), "numeric" when
    each path's argmax is its own run's token, else "defect"; and where the flip comes from
    ("batch row", "kv cache", or "neither" path of the two)."""
    raw_tok, sd_tok = raw[j], sd[j]
    out = {"raw_token": raw_tok, "sd_token": sd_tok}
    if j == 0:   # both read the prompt in the same prefill: a difference there is no kernel's
        one = one_token_logits(target, prompt, [], reuse)
        out.update(_top2(one, sd_tok), kind="defect",
                   why="the first token (the prompt's prefill) differs",
                   one_token={"raw": float(one[raw_tok]), "sd": float(one[sd_tok])})
        return out
    r, row, start = locate(sd, batches, n_emitted, j)
    if batched is None:
        cap: dict = {}
        replay_exact(target, prompt, sd, batches, reuse, stop_before=r + 1,
                     capture=(r, row, cap))
        batched = cap.get("row")
    one, kv_free = one_token_paths(target, prompt, raw, sd, batches[r], start, row, j, reuse)
    out.update(_top2(one, sd_tok))
    if batched is None:   # the replay stopped before round r (a defect earlier on)
        out.update(kind="defect", why="SD's own rounds do not replay up to this one",
                   one_token={"raw": float(one[raw_tok]), "sd": float(one[sd_tok])})
        return out
    one_ok, batched_ok = int(one.argmax()) == raw_tok, int(batched.argmax()) == sd_tok
    flip = int(kv_free.argmax())
    out.update(round=r, row=row,
               one_token={"raw": float(one[raw_tok]), "sd": float(one[sd_tok])},
               batched={"raw": float(batched[raw_tok]), "sd": float(batched[sd_tok])},
               one_token_margin=float(one[raw_tok] - one[sd_tok]),
               batched_margin=float(batched[sd_tok] - batched[raw_tok]),
               drift="batch row" if flip == sd_tok else "kv cache" if flip == raw_tok
               else "neither")
    if one_ok and batched_ok:
        out.update(kind="numeric", why="the target ranks the two tokens differently on the "
                   "one-token and the batched path")
    elif not batched_ok:
        out.update(kind="defect", why="SD's own batch does not give SD's token")
    else:   # SD is the target's under its batch: it is plain decoding that did not replay
        out.update(kind="unreproducible", why="plain decoding's replay does not give raw's "
                   "token: raw's run is not reproducible here, SD's is")
    return out


def _top2(one: np.ndarray, sd_tok: int) -> dict:
    """The one-token path's top two tokens and their margin (the fields older files carry)."""
    top1, top2 = (int(t) for t in np.argsort(one)[-2:][::-1])
    return {"raw_top1": top1, "raw_top2": top2, "raw_top2_margin": float(one[top1] - one[top2]),
            "sd_choice_is_raw_runner_up": sd_tok == top2}
