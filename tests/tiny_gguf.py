"""Write tiny llama-architecture GGUF models with the `gguf` package, for tests.

F32 weights, a GPT-2 style byte-level BPE vocabulary (256 byte tokens, one merge, which the
loader requires, and an end-of-generation control token). Its batched and one-token logits agree
to ~1e-5, so greedy speculative decoding must reproduce plain decoding exactly.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from cpuspec.llama.probe_model import byte_vocab, write_llama_gguf

N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
N_LAYER = 2
N_CTX_TRAIN = 1024


def vocab() -> tuple[list[str], list[int], list[str]]:
    return byte_vocab()


EOS_ID = 257
N_VOCAB = 258


def make_weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def mat(n_out: int, n_in: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((n_out, n_in)) * scale / np.sqrt(n_in)).astype(np.float32)

    head_dim = N_EMBD // N_HEAD
    w = {"token_embd.weight": mat(N_VOCAB, N_EMBD, np.sqrt(N_EMBD)),
         "output_norm.weight": np.ones(N_EMBD, np.float32),
         "output.weight": mat(N_VOCAB, N_EMBD, 4.0)}
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = np.ones(N_EMBD, np.float32)
        w[p + "attn_q.weight"] = mat(N_EMBD, N_EMBD)
        w[p + "attn_k.weight"] = mat(N_HEAD_KV * head_dim, N_EMBD)
        w[p + "attn_v.weight"] = mat(N_HEAD_KV * head_dim, N_EMBD)
        w[p + "attn_output.weight"] = mat(N_EMBD, N_EMBD)
        w[p + "ffn_norm.weight"] = np.ones(N_EMBD, np.float32)
        w[p + "ffn_gate.weight"] = mat(N_FF, N_EMBD)
        w[p + "ffn_up.weight"] = mat(N_FF, N_EMBD)
        w[p + "ffn_down.weight"] = mat(N_EMBD, N_FF)
    # Keep the end token unlikely so generations run to max_tokens unless a test wants otherwise.
    w["output.weight"][EOS_ID] = 0.0
    return w


def perturb(weights: dict[str, np.ndarray], seed: int, scale: float) -> dict[str, np.ndarray]:
    """A 'draft' that mostly agrees with the target: the target's weights plus noise."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, a in weights.items():
        if name.endswith("norm.weight"):
            out[name] = a.copy()
        else:
            out[name] = (a + rng.standard_normal(a.shape).astype(np.float32)
                         * scale * float(np.std(a))).astype(np.float32)
    out["output.weight"][EOS_ID] = 0.0
    return out


def make_wide_weights(seed: int, n_ff: int, n_layer: int) -> dict[str, np.ndarray]:
    """A larger model of the same shape family (wider feed-forward, more layers), for tests
    that need llama.cpp's quantizer to run for a while."""
    rng = np.random.default_rng(seed)
    w = make_weights(seed)
    for i in range(n_layer):
        p = f"blk.{i}."
        base = {k.removeprefix("blk.0."): v for k, v in w.items() if k.startswith("blk.0.")}
        for k, v in base.items():
            w[p + k] = v
        w[p + "ffn_gate.weight"] = rng.standard_normal((n_ff, N_EMBD)).astype(np.float32)
        w[p + "ffn_up.weight"] = rng.standard_normal((n_ff, N_EMBD)).astype(np.float32)
        w[p + "ffn_down.weight"] = rng.standard_normal((N_EMBD, n_ff)).astype(np.float32)
    return w


def write_model(path: Path, weights: dict[str, np.ndarray], name: str = "tiny",
                swap_tokens: int | None = None) -> Path:
    """swap_tokens=i swaps the texts of tokens i and i + 1: same vocabulary size, another
    tokenizer (for the draft/target mismatch check)."""
    import gguf
    path = Path(path)
    tokens, types, merges = vocab()
    if swap_tokens is not None:
        i = swap_tokens
        tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
    write_llama_gguf(path, name, {
        "n_embd": N_EMBD, "n_head": N_HEAD, "n_head_kv": N_HEAD_KV, "n_ctx": N_CTX_TRAIN,
        "n_layer": sum(1 for t in weights if t.endswith("attn_q.weight")),
        "n_ff": weights["blk.0.ffn_up.weight"].shape[0]}, (tokens, types, merges), EOS_ID,
        [(t, arr, None) for t, arr in weights.items()], gguf.LlamaFileType.ALL_F32)
    return path
