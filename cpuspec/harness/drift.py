"""What "lossless" means on this machine (issue 78): the target's logits for the same prefix
from a (k + 1)-token batch against one-token decodes.

Over the first prompts' plain-decoding outputs (the text the target itself writes), each
position's logits are taken twice: on plain decoding's path (the prompt's prefill, then one token
per decode) and as a row of a (k + 1)-token batch evaluated on that same KV (so the difference is
the batched row's own kernels, not drift carried in the cache). Per position: the largest
|Δlogit| over the vocabulary, whether the argmax flips, and the total-variation distance between
the two next-token distributions at the run's temperature (1.0 for a greedy run). Summaries are
computed on read (analysis/summary.py); the record keeps every position's three numbers.
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

# Positions measured per run: ~2 plain generations of 128 tokens on top of a default bench
# (its cost is recorded beside it, `seconds`).
DRIFT_POSITIONS = 256


def _softmax(row: np.ndarray, temperature: float) -> np.ndarray:
    z = row / temperature
    z = np.exp(z - z.max())
    return z / z.sum()


def _compare(one: np.ndarray, batched: np.ndarray, temperature: float) -> list[float]:
    """[largest |Δlogit|, argmax flipped (0/1), total-variation distance at temperature]."""
    return [float(np.abs(one - batched).max()), float(one.argmax() != batched.argmax()),
            float(0.5 * np.abs(_softmax(one, temperature) - _softmax(batched, temperature))
                  .sum())]


def drift_of_text(target, prompt: Sequence[int], text: Sequence[int], k: int,
                  temperature: float) -> list[list[float]]:
    """Per position of `text` after `prompt` (in chunk order from the end): _compare of its
    one-token and batched logits. One-token logits: prefill, then one token per decode, each
    row copied. Batched: chunks of k + 1 tokens, each evaluated on the one-token KV truncated
    to where it starts."""
    n_prompt = len(prompt)
    target.truncate(0)
    target.eval(list(prompt), 0, 1)
    one = [np.array(target.logits(1)[0], dtype=np.float64)]
    for i, tok in enumerate(text[:-1]):
        target.eval([tok], n_prompt + i, 1)
        one.append(np.array(target.logits(1)[0], dtype=np.float64))
    out = []
    # a chunk starting at output index s reads text[s - 1 : s + k] at n_prompt + s - 1; its
    # rows are the logits after text[:s], ..., text[:s + k]: one[s], ..., one[s + k]. Taken
    # from the last chunk back, so each truncate removes only later positions: every chunk
    # reads a KV written one token at a time (the row's own drift, none carried in the cache)
    for s in reversed(range(1, len(text), k + 1)):
        chunk = list(text[s - 1:s + k])
        target.truncate(n_prompt + s - 1)
        target.eval(chunk, n_prompt + s - 1, len(chunk))
        rows = np.array(target.logits(len(chunk)), dtype=np.float64)
        out += [_compare(one[s + r], rows[r], temperature) for r in range(len(chunk))
                if s + r < len(one)]
    return out


def measure_drift(target, texts: Sequence[tuple[Sequence[int], Sequence[int]]], k: int,
                  temperature: float, max_positions: int = DRIFT_POSITIONS) -> dict:
    """Over (prompt, plain decoding's output) pairs until max_positions positions are
    measured: the raw record (positions as [max |Δlogit|, flip, TV]) and its cost."""
    t0, positions = time.perf_counter(), []
    for prompt, text in texts:
        room = max_positions - len(positions)
        if room <= 1:
            break
        positions += drift_of_text(target, prompt, list(text)[:room + 1], k, temperature)
    return {"k": k, "batch": k + 1, "temperature": temperature or 1.0,
            "positions": [[round(x, 6) for x in p] for p in positions],
            "seconds": time.perf_counter() - t0,
            "measured_at": "each position's logits one token at a time vs as a row of a "
                           f"{k + 1}-token batch on the same KV (the row's own kernels)"}
