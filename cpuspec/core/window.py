"""The draft reads a window of a long prompt: its first `head` and last `tail` tokens.

Pure: no I/O. A Decoder over the draft model (speculative.Decoder). On a long input the
draft's prefill of the whole prompt is most of what SD loses (1,773 tokens: 8 s of a 60 s
answer on machine B); the draft needs the prompt's opening (the chat template, the
instruction, the start of a text the answer copies) and its end (what the answer continues
from), not the middle. MagicDec and TriForce give the draft such a compressed context at long
lengths. The output stays the target's: the window changes only what the draft guesses.

Positions: the loop speaks the target's positions; the draft holds the window contiguously
(tokens [0, head) then the last `tail` at head..), so a position p past the dropped middle is
p - dropped in the draft. The window opens on an eval of more than head + tail tokens at
position 0 (a prompt, or a conversation a follow-up reuses); a truncate to a position at or
below `head` closes it."""
from __future__ import annotations

from typing import Sequence


def parse_window(text: str) -> tuple[int, int] | None:
    """'HEAD,TAIL' (tokens) or 'off'; ValueError with the reason otherwise."""
    if text.strip().lower() in ("off", "0", "none"):
        return None
    parts = [s.strip() for s in text.split(",")]
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"'{text}' is not HEAD,TAIL (two token counts, e.g. 256,256) or off")
    head, tail = int(parts[0]), int(parts[1])
    if tail < 1:
        raise ValueError("TAIL must be at least 1 token (the draft continues from the "
                         "prompt's last token)")
    return head, tail


def describe_window(window: Sequence[int], reader: str, others: str) -> str:
    """The line every report prints of a run with a draft window (bench's and tune's)."""
    return (f"Draft window: {reader} read the first {window[0]} and last {window[1]} tokens of "
            f"a prompt longer than {sum(window)}; {others} read all of it.")


def window_reads(window: Sequence[int] | None, prompt_tokens: int, reuse: int = 0) -> int:
    """Tokens the draft's prefill reads of a prompt of this length whose first `reuse` tokens
    it holds already, under `window` (None: the whole prompt); the price the adaptive policy
    charges (bench's Generator, the replay)."""
    if window and reuse == 0 and prompt_tokens > sum(window):
        return sum(window)
    return prompt_tokens - reuse


def window_tokens(tokens: Sequence[int], head: int, tail: int) -> list[int]:
    """What the draft reads of `tokens`: all of them, or the first head and last tail."""
    tokens = list(tokens)
    if len(tokens) <= head + tail:
        return tokens
    return tokens[:head] + tokens[len(tokens) - tail:]


class WindowedDraft:
    """The draft model, reading only the first `head` and last `tail` tokens of a prompt
    longer than head + tail. `dropped` is the middle it skipped in the current sequence (0:
    it holds everything); `skipped_tokens` counts every token skipped so far."""

    def __init__(self, inner, head: int, tail: int):
        if head < 0 or tail < 1:
            raise ValueError("a draft window needs head ≥ 0 and tail ≥ 1")
        self.inner, self.head, self.tail = inner, head, tail
        self.dropped = 0
        self.skipped_tokens = 0

    def reads(self, prompt_tokens: int, reuse: int = 0) -> int:
        return window_reads((self.head, self.tail), prompt_tokens, reuse)

    def _map(self, tokens: Sequence[int], pos: int, n_out: int) -> tuple[list[int], int]:
        tokens = list(tokens)
        if pos == 0 and len(tokens) > self.head + self.tail:
            if n_out > self.tail:
                raise ValueError(f"draft window: {n_out} outputs asked of a prompt whose "
                                 f"last {self.tail} tokens are read")
            self.dropped = len(tokens) - self.head - self.tail
            self.skipped_tokens += self.dropped
            return window_tokens(tokens, self.head, self.tail), 0
        if pos == 0:
            self.dropped = 0
            return tokens, 0
        if self.dropped and pos < self.head + self.dropped:
            raise ValueError(f"draft window: eval at position {pos}, inside the dropped "
                             f"middle [{self.head}, {self.head + self.dropped})")
        return tokens, pos - self.dropped if self.dropped else pos

    def eval(self, tokens: Sequence[int], pos: int, n_out: int) -> list[int]:
        toks, at = self._map(tokens, pos, n_out)
        return self.inner.eval(toks, at, n_out)

    def decode(self, tokens: Sequence[int], pos: int, n_out: int) -> None:
        toks, at = self._map(tokens, pos, n_out)
        self.inner.decode(toks, at, n_out)

    def confidence(self) -> float:
        return self.inner.confidence()

    def logits(self, n_out: int):
        return self.inner.logits(n_out)

    def truncate(self, pos: int) -> None:
        if self.dropped and self.head < pos < self.head + self.dropped:
            raise ValueError(f"draft window: truncate to {pos}, inside the dropped middle "
                             f"[{self.head}, {self.head + self.dropped})")
        if pos <= self.head:
            self.dropped = 0
        self.inner.truncate(pos - self.dropped)

    def is_eog(self, token: int) -> bool:
        return self.inner.is_eog(token)
