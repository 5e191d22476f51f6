"""A tiny llama-architecture GGUF whose matrices take ggml's matrix-engine path (AMX): Q8_0
weights, every row and column a multiple of 32 (what ggml-cpu/amx/amx.cpp's supports_op asks
of a Q8_0 weight), written with the `gguf` package in a second.

It has a GPT-2 style byte-level vocabulary (256 byte tokens, one merge, which llama.cpp's loader
requires, and an end-of-generation control token), padded with unused control tokens to a
multiple of 32. The weights are random: the model exists to run kernels, not to say anything.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

N_EMBD = 256          # K of every projection: 8 Q8_0 blocks of 32
N_HEAD = 4
N_FF = 512
N_VOCAB = 288         # 256 bytes + a merge + end-of-generation + 30 padding ids
N_CTX_TRAIN = 512


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable-unicode map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def byte_vocab() -> tuple[list[str], list, list[str]]:
    """(tokens, token types, merges): the 256 byte tokens, the merge " t" and "<|end|>"."""
    import gguf
    byte_tokens = [bytes_to_unicode()[b] for b in range(256)]
    merged = byte_tokens[ord(" ")] + byte_tokens[ord("t")]
    tokens = byte_tokens + [merged, "<|end|>"]
    types = [gguf.TokenType.NORMAL] * 257 + [gguf.TokenType.CONTROL]
    merges = [f"{byte_tokens[ord(' ')]} {byte_tokens[ord('t')]}"]
    return tokens, types, merges


def write_probe_model(path: Path, seed: int = 0) -> Path:
    """One transformer block with Q8_0 projections and a Q8_0 output matrix."""
    import gguf
    from gguf import quants
    rng = np.random.default_rng(seed)
    tokens, types, merges = byte_vocab()
    eos = len(tokens) - 1
    tokens += [f"<|pad{i}|>" for i in range(N_VOCAB - len(tokens))]
    types += [gguf.TokenType.UNUSED] * (N_VOCAB - len(types))

    def q8(n_out: int, n_in: int) -> tuple[np.ndarray, gguf.GGMLQuantizationType]:
        w = (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(np.float32)
        return quants.quantize(w, gguf.GGMLQuantizationType.Q8_0), \
            gguf.GGMLQuantizationType.Q8_0

    weights = {"token_embd.weight": q8(N_VOCAB, N_EMBD), "output.weight": q8(N_VOCAB, N_EMBD)}
    for name, shape in [("attn_q", (N_EMBD, N_EMBD)), ("attn_k", (N_EMBD, N_EMBD)),
                        ("attn_v", (N_EMBD, N_EMBD)), ("attn_output", (N_EMBD, N_EMBD)),
                        ("ffn_gate", (N_FF, N_EMBD)), ("ffn_up", (N_FF, N_EMBD)),
                        ("ffn_down", (N_EMBD, N_FF))]:
        weights[f"blk.0.{name}.weight"] = q8(*shape)
    norms = {"output_norm.weight": np.ones(N_EMBD, np.float32),
             "blk.0.attn_norm.weight": np.ones(N_EMBD, np.float32),
             "blk.0.ffn_norm.weight": np.ones(N_EMBD, np.float32)}

    tensors = [(name, data, qtype) for name, (data, qtype) in weights.items()] + \
        [(name, arr, None) for name, arr in norms.items()]
    write_llama_gguf(path, "cpuspec-matrix-engine-probe",
                     {"n_embd": N_EMBD, "n_head": N_HEAD, "n_head_kv": N_HEAD, "n_ff": N_FF,
                      "n_layer": 1, "n_ctx": N_CTX_TRAIN},
                     (tokens, types, merges), eos, tensors, gguf.LlamaFileType.MOSTLY_Q8_0)
    return Path(path)


def write_llama_gguf(path: Path, name: str, hp: dict, vocab: tuple, eos: int, tensors: list,
                     file_type) -> Path:
    """A llama-architecture GGUF: hyperparameters hp (n_embd, n_head, n_head_kv, n_ff,
    n_layer, n_ctx), a GPT-2 style vocabulary (tokens, types, merges), end-of-generation id
    eos, and tensors as (name, data, raw quant type or None for float data)."""
    import gguf
    tokens, types, merges = vocab
    wr = gguf.GGUFWriter(str(path), "llama")
    wr.add_name(name)
    wr.add_context_length(hp["n_ctx"])
    wr.add_embedding_length(hp["n_embd"])
    wr.add_block_count(hp["n_layer"])
    wr.add_feed_forward_length(hp["n_ff"])
    wr.add_head_count(hp["n_head"])
    wr.add_head_count_kv(hp["n_head_kv"])
    wr.add_rope_dimension_count(hp["n_embd"] // hp["n_head"])
    wr.add_layer_norm_rms_eps(1e-5)
    wr.add_file_type(file_type)
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("default")
    wr.add_token_list(tokens)
    wr.add_token_types(types)
    wr.add_token_merges(merges)
    wr.add_bos_token_id(eos)
    wr.add_eos_token_id(eos)
    wr.add_add_bos_token(False)
    for tname, data, qtype in tensors:
        if qtype is None:
            wr.add_tensor(tname, data)
        else:
            wr.add_tensor(tname, data, raw_dtype=qtype)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return Path(path)
