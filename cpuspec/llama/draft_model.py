"""A draft model for llama-cpp-python's own speculative decoding.

llama-cpp-python's high-level `Llama` takes `draft_model=`, any `LlamaDraftModel`, and ships
only prompt lookup. This one is backed by a GGUF draft model (or by cpuspec's lookup, or the
hybrid of both), so the configuration `cpuspec tune` finds can run where people run models:

    from llama_cpp import Llama
    import cpuspec
    llm = Llama(model_path=TARGET, draft_model=cpuspec.DraftModel(DRAFT, k=7))
    llm.create_completion(prompt, max_tokens=128, temperature=0)

Llama.generate calls the draft model with every token so far (prompt and output) and verifies
what it returns in one batch. The draft keeps its own KV cache in step: it remembers which
tokens it holds, keeps the longest prefix they share with the new context (accepted drafts
stay, rejected ones are rolled back) and decodes only the rest, so the prompt is read once per
conversation, not once per round — and a follow-up turn that extends the same conversation
reuses it. Drafting is cpuspec's own (speculative.draft_tokens over the same Decoders as the
bench), so what the bench measures is what this runs.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from llama_cpp.llama_speculative import LlamaDraftModel

from cpuspec.machine.hardware import MAX_THREADS_PER_CPU, default_threads
from cpuspec.core.drafters import DRAFTERS as REGISTRY
from cpuspec.core.speculative import common_prefix, draft_tokens

DRAFTERS = tuple(n for n, d in REGISTRY.items() if d.in_draft_model)
# As for `cpuspec bench -k`: no CPU gains from longer drafts (llama.cpp's --draft-max is 16).
MAX_K = 32


def _whole(value, name: str, lo: int, hi: int | None, what: str | None = None) -> int:
    """A whole number in [lo, hi] (numpy integers too; never a bool), else ValueError."""
    import operator
    what = what or f"from {lo} to {hi}"
    try:
        if isinstance(value, bool):
            raise TypeError
        n = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be a whole number {what}, not {value!r}") from None
    if n < lo or (hi is not None and n > hi):
        raise ValueError(f"{name} must be a whole number {what}, not {value!r}")
    return n


class DraftModel(LlamaDraftModel):
    """Greedy drafts of up to k tokens per call for `Llama(draft_model=...)`.

    drafter: "model" (the GGUF at model_path drafts every token), "hybrid" (prompt lookup on
    an 8-token match, else the model; the model catches up on lookup's tokens in one batch),
    or "lookup" (n-gram lookup only; model_path may be None). n_ctx bounds the conversation
    the draft can follow; past it, it drafts nothing and generation goes on without it."""

    def __init__(self, model_path: str | Path | None, k: int = 4, *, drafter: str = "model",
                 n_ctx: int = 4096, n_threads: int | None = None, n_gpu_layers: int = 0):
        max_threads = MAX_THREADS_PER_CPU * (os.cpu_count() or 1)
        k = _whole(k, "k", 1, MAX_K)
        if drafter not in DRAFTERS:
            raise ValueError(f"drafter must be one of {', '.join(DRAFTERS)}, not {drafter!r}")
        n_ctx = _whole(n_ctx, "n_ctx", k + 2, None, f"at least k + 2 = {k + 2}")
        if n_threads is not None:
            n_threads = _whole(n_threads, "n_threads", 1, max_threads,
                               f"from 1 to {max_threads} ({MAX_THREADS_PER_CPU} per logical "
                               "CPU here)")
        # llama.cpp reads a negative -ngl as "every layer": a whole number ≥ 0 here
        n_gpu_layers = _whole(n_gpu_layers, "n_gpu_layers", 0, None, "of 0 or more")
        self.k, self.drafter, self.n_ctx = k, drafter, n_ctx
        self.model = self.session = None
        self.closed = False
        self.n_vocab: int | None = None   # the draft model's; lookup copies any id
        if drafter == "lookup":
            if model_path is not None:
                raise ValueError("drafter 'lookup' drafts from the context alone and loads no "
                                 f"model: pass model_path=None, not {str(model_path)!r}")
            self.decoder = REGISTRY["lookup"].make(None)
        else:
            if model_path is None:
                raise ValueError(f"drafter {drafter!r} needs a draft model file")
            path = Path(model_path)
            if path.is_dir():
                raise ValueError(f"draft model {path} is a folder; pass the .gguf file in it")
            if not path.is_file():
                raise FileNotFoundError(f"draft model file not found: {path}")
            from cpuspec.llama.engine import EngineError, Model, Session
            try:
                self.model = Model(path, n_gpu_layers)
                self.session = Session(self.model, n_ctx, n_threads or default_threads())
            except EngineError as exc:
                self.close()
                raise ValueError(str(exc)) from None
            self.decoder = REGISTRY[drafter].make(self.session)
            self.n_vocab = self.model.n_vocab
        self.held: list[int] = []   # the tokens the drafter's KV (or history) holds
        self.stats = {"calls": 0, "drafts": 0, "tokens_read": 0}

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        if self.closed:
            raise RuntimeError("this DraftModel is closed; make a new one")
        ctx = self._token_ids(input_ids)
        self.stats["calls"] += 1
        if not ctx or len(ctx) + self.k + 1 > self.n_ctx:
            return np.array([], dtype=np.intc)
        # Keep what the new context shares with what the drafter holds; read only the rest
        # (at least the last token: its logits give the first draft).
        keep = min(common_prefix(self.held, ctx), len(ctx) - 1)
        self.decoder.truncate(keep)
        drafts, pos = draft_tokens(self.decoder, ctx[keep:], keep, self.k)
        self.held = ctx + drafts[:pos - len(ctx)]
        self.stats["drafts"] += len(drafts)
        self.stats["tokens_read"] += len(ctx) - keep
        return np.array(drafts, dtype=np.intc)

    def _token_ids(self, input_ids) -> list[int]:
        ids = np.asarray(input_ids)
        if ids.ndim != 1 or not (ids.size == 0 or np.issubdtype(ids.dtype, np.integer)):
            raise TypeError(f"input_ids must be a 1-D sequence of whole token ids, not "
                            f"{ids.dtype} of shape {ids.shape}")
        ctx = ids.tolist()
        if ctx and self.n_vocab is not None and not 0 <= min(ctx) <= max(ctx) < self.n_vocab:
            bad = next(t for t in ctx if not 0 <= t < self.n_vocab)
            raise ValueError(f"token id {bad} is outside the draft's vocabulary of "
                             f"{self.n_vocab}: draft and target must share a tokenizer")
        return ctx

    def close(self) -> None:
        self.closed = True
        if self.session is not None:
            self.session.close()
            self.session = None
        if self.model is not None:
            self.model.close()
            self.model = None

    def __del__(self):  # pragma: no cover (interpreter-dependent timing)
        try:
            self.close()
        except Exception:
            pass
