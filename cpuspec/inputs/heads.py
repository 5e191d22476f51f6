"""Shape-true speculative heads (issue 58): EAGLE-3, DFlash and DSpark drafts with the published
architecture and shapes, and random weights, written as the vendored llama.cpp's loaders read
them (src/models/eagle3.cpp, src/models/dflash.cpp; common/speculative.cpp drives them from
llama-server with --spec-type draft-eagle3 | draft-dflash | draft-dspark and -md HEAD.gguf).

What a head costs per round depends on its shapes and types, not on its weights (the shape-true
argument of inputs/shapes.py), so a head written here drafts at the trained head's speed; its
drafts are noise, so acceptance is supplied by llama-server's synthetic acceptance
(--spec-synth-len / --spec-synth-rates), never measured, and every result says so.

MTP lives inside the target (qwen35, qwen35moe, qwen3next carry an MTP layer): it is the
shape-true Qwen3.5 of inputs/shapes.py, run with --spec-type draft-mtp and no -md; or its
MTP-only file (mtp_only_tensors: what convert_hf_to_gguf.py --mtp writes), run with -md. Pure:
the plans; llama/shape_true.py writes them."""
from __future__ import annotations

from dataclasses import dataclass, field

from cpuspec.inputs.shapes import Shape, ShapeError, shape_of

METHODS = ("eagle3", "dflash", "dspark")
SPEC_TYPE = {"eagle3": "draft-eagle3", "dflash": "draft-dflash", "dspark": "draft-dspark",
             "mtp": "draft-mtp", "mtp-file": "draft-mtp", "draft": "draft-simple"}
# llama.cpp's EAGLE-3 and DFlash read the target's hidden states at layer inputs
# (llama_set_embeddings_layer_inp): only graphs that expose them can be their targets
# (src/llama-graph.cpp, t_layer_inp; qwen2 does not)
HEAD_TARGET_ARCHS = ("qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next", "llama")
HEAD_QUANTS = ("Q8_0", "F16")


@dataclass(frozen=True)
class Head:
    """One head's architecture: a drafter of `method` for the target shape `target`."""
    method: str
    target: str                    # a shape name (inputs/shapes.py)
    layers: int                    # decoder layers of the head (EAGLE-3: 1)
    ff: int                        # its feed-forward width
    heads: int
    kv_heads: int
    head_dim: int
    draft_vocab: int | None        # a reduced draft vocabulary (d2t), None: the target's
    target_layers: tuple[int, ...]  # the target layers whose inputs it reads
    block_size: int = 16           # DFlash/DSpark: the block drafted in one pass
    markov_rank: int = 0           # DSpark: the Markov head's rank
    mask_token_id: int = 151669    # DFlash/DSpark: the mask token (an id of the target's)
    source: str = ""               # where the shapes were published
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def name(self) -> str:
        return f"{self.method}-{self.target}"

    def target_shape(self) -> Shape:
        return shape_of(self.target)


def _eagle3(target: str, source: str) -> Head:
    """An EAGLE-3 head as published for Qwen3 targets: one decoder layer of the target's width,
    heads and feed-forward, its attention reading [embedding, hidden] (2E), an fc from three
    of the target's layers (no eagle_aux_hidden_state_layer_ids in the configs: the layers
    the converter and vLLM default to, 2, N // 2, N - 3) and a 32 000-token draft vocabulary
    mapped to the target's by d2t."""
    t = shape_of(target)
    return Head("eagle3", target, 1, t.ff, t.heads, t.kv_heads, t.hd, 32000,
                (2, t.layers // 2, t.layers - 3), source=source)


# target_layer_ids [1, 9, 17, 25, 33] of the 36-layer Qwen3-4B/8B drafts; llama.cpp reads the
# inputs of the next layers (the converter writes ids + 1)
DFLASH_LAYERS = (2, 10, 18, 26, 34)


def _dflash(target: str, block: int, source: str, method: str = "dflash",
            markov_rank: int = 0) -> Head:
    """A DFlash drafter as published for Qwen3-4B/8B: 5 decoder layers of the target's width
    and heads, reading 5 target layers, a block of `block` tokens per pass, the target's
    embedding and output (no draft vocabulary), mask token 151669. DSpark adds a Markov head
    of rank 256 and a confidence head (DeepSpec's dspark_qwen3_*_block7)."""
    t = shape_of(target)
    return Head(method, target, 5, t.ff, t.heads, t.kv_heads, t.hd, None, DFLASH_LAYERS,
                block_size=block, markov_rank=markov_rank, source=source)


SRC_EAGLE3 = ("AngelSlim configs/qwen3-{1.7b,4b,8b}-eagle3.json; SpecForge "
              "configs/qwen3-{4b,8b}-eagle3.json")
SRC_DFLASH = "z-lab Qwen3-{4B,8B}-DFlash-b16 (SpecForge configs/qwen3-{4b,8b}-dflash.json)"
SRC_DSPARK = ("deepseek-ai/DeepSpec config/dspark/dspark_qwen3_{4b,8b}.py "
              "(dspark_qwen3_*_block7)")
HEADS = {h.name: h for h in [
    _eagle3("qwen3-1.7b", SRC_EAGLE3), _eagle3("qwen3-4b", SRC_EAGLE3),
    _eagle3("qwen3-8b", SRC_EAGLE3),
    _dflash("qwen3-4b", 16, SRC_DFLASH), _dflash("qwen3-8b", 16, SRC_DFLASH),
    _dflash("qwen3-4b", 7, SRC_DSPARK, "dspark", 256),
    _dflash("qwen3-8b", 7, SRC_DSPARK, "dspark", 256),
]}


def head_of(method: str, target: str) -> Head:
    if method not in METHODS:
        raise ShapeError(f"no method {method!r}: one of {', '.join(METHODS)} (mtp: the "
                         "target's own MTP layer, qwen3.5-0.8b)")
    t = shape_of(target)
    if t.arch not in HEAD_TARGET_ARCHS:
        raise ShapeError(f"{t.name} ({t.arch}) cannot carry {method} heads in this llama.cpp: "
                         "its graph exposes no layer inputs for the head to read; a Qwen3 "
                         "target can (qwen3-4b, qwen3-8b)")
    key = f"{method}-{t.name}"
    if key not in HEADS:
        raise ShapeError(f"no published {method} head for {t.name}: one of "
                         + ", ".join(h.target for h in HEADS.values() if h.method == method))
    return HEADS[key]


def head_tensors(h: Head) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor's name and ggml shape (ne0 first), as the loader requests them: no more
    (llama.cpp refuses a file with a tensor it did not ask for)."""
    t = h.target_shape()
    e, q, kv = t.hidden, h.heads * h.head_dim, h.kv_heads * h.head_dim
    out: list[tuple[str, tuple[int, ...]]] = []
    if h.method == "eagle3":
        out += [("fc.weight", (3 * e, e)), ("output_norm.weight", (e,)),
                ("output.weight", (e, h.draft_vocab or t.vocab))]
        if h.draft_vocab:
            out.append(("d2t", (h.draft_vocab,)))
        b = "blk.0."
        out += [(b + n, ne) for n, ne in [
            ("attn_norm.weight", (e,)), ("attn_norm_2.weight", (e,)),
            ("attn_q.weight", (2 * e, q)), ("attn_k.weight", (2 * e, kv)),
            ("attn_v.weight", (2 * e, kv)), ("attn_output.weight", (q, e)),
            ("ffn_norm.weight", (e,)), ("ffn_gate.weight", (e, h.ff)),
            ("ffn_up.weight", (e, h.ff)), ("ffn_down.weight", (h.ff, e))]]
        return out
    n_tl = len(h.target_layers)
    out += [("fc.weight", (n_tl * e, e)), ("enc.output_norm.weight", (e,)),
            ("output_norm.weight", (e,))]
    if h.method == "dspark":
        vd = h.draft_vocab or t.vocab
        out += [("markov_w1.weight", (h.markov_rank, t.vocab)),
                ("markov_w2.weight", (h.markov_rank, vd)),
                ("conf_proj.weight", (e + h.markov_rank, 1)), ("conf_proj.bias", (1,))]
        if h.draft_vocab:
            out += [("output.weight", (e, vd)), ("d2t", (vd,))]
    for i in range(h.layers):
        b = f"blk.{i}."
        out += [(b + n, ne) for n, ne in [
            ("attn_norm.weight", (e,)), ("attn_q.weight", (e, q)), ("attn_k.weight", (e, kv)),
            ("attn_v.weight", (e, kv)), ("attn_output.weight", (q, e)),
            ("attn_q_norm.weight", (h.head_dim,)), ("attn_k_norm.weight", (h.head_dim,)),
            ("ffn_norm.weight", (e,)), ("ffn_gate.weight", (e, h.ff)),
            ("ffn_up.weight", (e, h.ff)), ("ffn_down.weight", (h.ff, e))]]
    return out


def head_types(h: Head, quant: str) -> dict[str, str]:
    """As convert_hf_to_gguf writes a head (F32 for 1-D tensors, norms and biases; d2t I64)
    with its matrices at `quant` (Q8_0: what a CPU user runs; F16: the converter's output).
    conf_proj (one output row) stays F32 (a row too short to quantize)."""
    if quant not in HEAD_QUANTS:
        raise ShapeError(f"no quant {quant!r} for a head: one of {', '.join(HEAD_QUANTS)}")
    out = {}
    for name, ne in head_tensors(h):
        if name == "d2t":
            out[name] = "I64"
        elif len(ne) == 1 or name.startswith("conf_proj"):
            out[name] = "F32"
        else:
            out[name] = quant
    return out


def head_kv(h: Head) -> list[tuple[str, object, str]]:
    """The head's metadata: (key, value, kind) with kind u32 | f32 | bool | i32[] | str;
    keys as src/llama-arch.cpp names them (the installed gguf-py lacks the newer ones)."""
    t = h.target_shape()
    a = "eagle3" if h.method == "eagle3" else "dflash"
    kv: list[tuple[str, object, str]] = [
        (f"{a}.context_length", t.context, "u32"), (f"{a}.embedding_length", t.hidden, "u32"),
        (f"{a}.block_count", h.layers, "u32"), (f"{a}.feed_forward_length", h.ff, "u32"),
        (f"{a}.attention.head_count", h.heads, "u32"),
        (f"{a}.attention.head_count_kv", h.kv_heads, "u32"),
        (f"{a}.attention.key_length", h.head_dim, "u32"),
        (f"{a}.attention.value_length", h.head_dim, "u32"),
        (f"{a}.attention.layer_norm_rms_epsilon", t.eps, "f32"),
        (f"{a}.rope.freq_base", t.rope_base, "f32"),
        (f"{a}.target_layers", list(h.target_layers), "i32[]")]
    if h.method == "eagle3":
        kv += [("eagle3.target_hidden_size", t.hidden, "u32")]
    else:
        kv += [("dflash.block_size", h.block_size, "u32"),
               ("tokenizer.ggml.mask_token_id", h.mask_token_id, "u32")]
    if h.method == "dspark":
        kv += [("dflash.sample_from_anchor", True, "bool"),
               ("dflash.has_confidence_head", True, "bool")]
    return kv


def mtp_only_tensors(shape: Shape) -> list[tuple[str, tuple[int, ...]]]:
    """The MTP-only file of a model with MTP layers, as `convert_hf_to_gguf.py --mtp` writes it
    (conversion/qwen.py, _QwenMtpMixin.filter_tensors: it keeps embed_tokens, norm, lm_head and
    the mtp.* tensors, renamed to the layers after the trunk); its metadata stays the whole
    model's. The loader (src/models/qwen35.cpp) takes a file with MTP layers and no
    blk.0.attn_norm.weight as MTP-only: the trunk is not required."""
    from cpuspec.inputs.shapes import tensors
    if not shape.mtp_layers:
        raise ShapeError(f"{shape.name} has no MTP layer to write an MTP-only file of: "
                         "qwen3.5-0.8b has one")
    keep = ("token_embd.weight", "output_norm.weight", "output.weight")
    mtp = tuple(f"blk.{i}." for i in range(shape.layers, shape.layers + shape.mtp_layers))
    return [(n, ne) for n, ne in tensors(shape) if n in keep or n.startswith(mtp)]
