"""A cheap quality proxy beside every speed figure: a faster quant is a win only if its output
is still acceptable.

* Perplexity of the target on a fixed built-in text (prose and code, written for this project),
  computed through the same engine the bench uses: exp of the mean negative log-likelihood of
  each next token, all logit rows read in chunks.
* Top-1 agreement with a reference model: the reference decodes greedily on the built-in
  prompts; the candidate reads the same prompt + output (teacher forcing) and we count the
  positions where its argmax equals the reference's token. 1.0 means the candidate would have
  generated exactly the reference's output, token for token.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from cpuspec.core.speculative import generate_raw

# Tokens per decode when reading all logit rows (151936 floats per row: 64 rows ≈ 39 MB).
CHUNK_TOKENS = 64

QUALITY_TEXT = """\
A lighthouse keeper kept a ledger of every ship that passed the point, with the hour, the wind
and the state of the sea. When the ledger was full he bound it with string and put it on the
shelf beside the others, forty years of weather in blue cloth covers.

def moving_average(values, window):
    \"\"\"Return the averages of each run of `window` consecutive values.\"\"\"
    if window <= 0:
        raise ValueError("window must be positive")
    total = sum(values[:window])
    averages = [total / window]
    for i in range(window, len(values)):
        total += values[i] - values[i - window]
        averages.append(total / window)
    return averages

The configuration file sets the port to 8080, enables compression for responses larger than
one kilobyte, and writes its logs to /var/log/service.log, rotated every day at midnight.
{"name": "inventory", "version": "1.4.2", "items": [{"sku": "A-100", "quantity": 12},
{"sku": "B-220", "quantity": 0}], "updated": "2024-03-18T09:30:00Z"}
In the morning the fog lifted from the harbour, and the fishing boats went out one after the
other, their engines loud in the still air.
"""


def log_softmax_at(rows: np.ndarray, targets: Sequence[int]) -> np.ndarray:
    """log p(target) per row, in float64."""
    z = np.asarray(rows, dtype=np.float64)
    m = z.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
    return z[np.arange(len(targets)), list(targets)] - lse


def perplexity(session, tokens: Sequence[int], chunk: int = CHUNK_TOKENS) -> float:
    """exp(mean NLL of tokens[1:] given what precedes them), one sequence from position 0."""
    session.truncate(0)
    nll, count = 0.0, 0
    for start in range(0, len(tokens) - 1, chunk):
        piece = list(tokens[start:start + chunk])
        session.decode(piece, start, len(piece))
        rows = session.logits(len(piece))
        nxt = list(tokens[start + 1:start + 1 + len(piece)])
        lp = log_softmax_at(rows[:len(nxt)], nxt)
        nll -= float(lp.sum())
        count += len(nxt)
    return float(np.exp(nll / count))


def top1_agreement(session, prompt: Sequence[int], reference_output: Sequence[int]) -> float:
    """Share of the reference's output tokens that the candidate's argmax reproduces, reading
    the prompt and the reference's output (teacher forcing)."""
    if not reference_output:
        return float("nan")
    session.truncate(0)
    first = session.eval(list(prompt), 0, 1)
    rest = session.eval(list(reference_output[:-1]), len(prompt), len(reference_output) - 1) \
        if len(reference_output) > 1 else []
    choices = first + rest
    return float(np.mean([c == r for c, r in zip(choices, reference_output)]))


# the verify batch the logit drift is measured at: k = 4, bench's default draft length
QUALITY_DRIFT_K = 4


def run_quality(candidates: list, reference, prompts: list, max_tokens: int, threads: int,
                log=lambda _: None) -> dict:
    """Perplexity on QUALITY_TEXT, top-1 agreement with `reference` on `prompts`, and the
    batched-vs-one-token logit drift over the reference's outputs (harness/drift.py), for each
    candidate (FetchedModel). Returns the per-model figures."""
    from cpuspec.harness.drift import measure_drift
    from cpuspec.llama.engine import Model, Session, check_same_tokenizer
    with Model(reference.path) as ref:
        encoded = [ref.tokenize(ref.format_chat(p.text)) for p in prompts]
        n_ctx = max(max(map(len, encoded)) + max_tokens, len(ref.tokenize(QUALITY_TEXT))) + 16
        log(f"quality: reference {reference.path.name} decodes {len(prompts)} prompts")
        with Session(ref, n_ctx, threads) as s:
            outputs = [generate_raw(s, toks, max_tokens).tokens for toks in encoded]
        out = {"reference": reference.to_dict(), "text_tokens": len(ref.tokenize(QUALITY_TEXT)),
               "prompts": [p.prompt_id for p in prompts], "max_tokens": max_tokens,
               "models": []}
        for cand in candidates:
            log(f"quality: {cand.path.name}")
            with Model(cand.path) as m, Session(m, n_ctx, threads) as s:
                check_same_tokenizer(ref, m)
                agree = {p.prompt_id: top1_agreement(s, toks, o)
                         for p, toks, o in zip(prompts, encoded, outputs)}
                drift = measure_drift(s, list(zip(encoded, outputs)), QUALITY_DRIFT_K, 1.0)
                out["models"].append({**cand.to_dict(), "desc": m.desc, "drift": drift,
                                      "perplexity": perplexity(s, m.tokenize(QUALITY_TEXT)),
                                      "top1_agreement": agree,
                                      "top1_agreement_mean": float(np.mean(list(
                                          agree.values())))})
    return out


def target_perplexity(target_m, threads: int) -> dict:
    """The target's perplexity on the built-in text (bench's quality line), through the same
    engine; 16 tokens of slack in the context."""
    from cpuspec.llama.engine import Session
    tokens = target_m.tokenize(QUALITY_TEXT)
    with Session(target_m, len(tokens) + 16, threads) as s:
        return {"target_perplexity": perplexity(s, tokens), "text_tokens": len(tokens),
                "text": "cpuspec.harness.quality.QUALITY_TEXT"}
