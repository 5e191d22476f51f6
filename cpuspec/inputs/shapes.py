"""Shape-true models: a real Qwen architecture (hyperparameters, tensor names, shapes and
per-tensor quant types) whose weights are random quantized blocks. ggml's CPU kernels do the
same work for any values of a tensor of a given shape and type, so such a file decodes and
verifies at the real model's speed: the cost side of a > 1 + α + β without downloading it.
It has no real acceptance: every result labels it SHAPE_TRUE, and bench refuses it for
acceptance. Pure: the shapes and the type rule; llama/shape_true.py writes the file.

The shapes are the models' published configs (Hugging Face config.json: hidden_size,
num_hidden_layers, num_attention_heads, num_key_value_heads, intermediate_size, vocab_size),
as issue 50 lists them for Qwen2.5 and as llama.cpp's qwen3 loader reads them for Qwen3."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SHAPE_TRUE = "shape-true (random weights)"
SHAPE_KEY = "cpuspec.shape_true"   # the metadata key every shape-true file carries
QK_K = 256   # the k-quants' block: a row must hold a whole number of them


@dataclass(frozen=True)
class Shape:
    name: str
    arch: str            # llama.cpp's architecture: qwen2 (QKV bias) or qwen3 (q/k norms)
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ff: int
    vocab: int
    head_dim: int | None = None      # qwen3: 128, whatever hidden / heads is
    eps: float = 1e-6
    rope_base: float = 1e6
    context: int = 32768
    # qwen35 (Qwen3.5: gated delta-net layers, every full_interval-th layer full attention
    # with a gated query, MTP layers after the trunk, tied embeddings, partial and multi-
    # section rope): linear = (key heads, value heads, head dim, conv kernel)
    linear: tuple[int, int, int, int] | None = None
    full_interval: int = 4
    mtp_layers: int = 0
    tied: bool = False
    rope_dims: int | None = None
    mrope: tuple[int, ...] | None = None
    # qwen3moe: experts per layer, used per token, each one's feed-forward width; the routing
    # written (llama/shape_true.py ZEROED): "spread" (tokens of a batch to different experts,
    # a verify's worst case) or "same" (every token to the same experts, its best case)
    experts: int = 0
    experts_used: int = 0
    expert_ff: int = 0
    router: str = "random"
    swa: int = 0         # gemma3: the sliding window of its local layers (5 of every 6);
    #                      gpt-oss: of every other layer
    yarn: tuple[float, int] | None = None   # gpt-oss: YaRN's factor and original context
    mix: str | None = None   # the quant mix (MIXES); None: the architecture's (default_mix)

    def is_recurrent(self, i: int) -> bool:
        """A gated delta-net layer (qwen35's trunk; its MTP layers are full attention)."""
        return self.linear is not None and i < self.layers and (i + 1) % self.full_interval != 0

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def params(self) -> int:
        """Weights of every tensor the file holds (embedding and output apart where the file
        has both; experts all counted; Qwen3.5's delta-net and MTP layers as written)."""
        total = 0
        for _, ne in tensors(self):
            n = 1
            for x in ne:
                n *= x
            total += n
        return total

    def active_params(self) -> int:
        """Weights one token reads: an MoE's used experts only, and one row of an embedding
        table that is not also the output (a tied one is read whole, as the output)."""
        out = self.params()
        if has_output(self):
            out -= self.hidden * (self.vocab - 1)
        if self.experts:
            out -= self.layers * 3 * self.hidden * self.expert_ff * (
                self.experts - self.experts_used)
        return out


SHAPES = {s.name: s for s in [
    # tied: tie_word_embeddings in the published config (Qwen2.5 and Qwen3 up to 3B/4B)
    Shape("qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 151936, tied=True),
    Shape("qwen2.5-1.5b", "qwen2", 1536, 28, 12, 2, 8960, 151936, tied=True),
    Shape("qwen2.5-3b", "qwen2", 2048, 36, 16, 2, 11008, 151936, tied=True),
    Shape("qwen2.5-7b", "qwen2", 3584, 28, 28, 4, 18944, 152064),
    Shape("qwen2.5-14b", "qwen2", 5120, 48, 40, 8, 13824, 152064, eps=1e-5),
    Shape("qwen2.5-32b", "qwen2", 5120, 64, 40, 8, 27648, 152064, eps=1e-5),
    Shape("qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 3072, 151936, head_dim=128, tied=True),
    Shape("qwen3-1.7b", "qwen3", 2048, 28, 16, 8, 6144, 151936, head_dim=128, tied=True),
    Shape("qwen3-4b", "qwen3", 2560, 36, 32, 8, 9728, 151936, head_dim=128, tied=True),
    # Llama 3.2 1B/3B and 3.1 8B/70B (meta-llama config.json: hidden_size, num_hidden_layers,
    # num_attention_heads, num_key_value_heads, head_dim, intermediate_size, vocab 128256,
    # rope_theta 500000 with llama3 rope scaling: the converter's rope_freqs.weight; 1B and
    # 3B tie their embeddings); 70B only as a size for the what-if's arithmetic
    Shape("llama3.2-1b", "llama", 2048, 16, 32, 8, 8192, 128256, head_dim=64, eps=1e-5,
          rope_base=5e5, context=131072, tied=True),
    Shape("llama3.2-3b", "llama", 3072, 28, 24, 8, 8192, 128256, head_dim=128, eps=1e-5,
          rope_base=5e5, context=131072, tied=True),
    Shape("llama3.1-8b", "llama", 4096, 32, 32, 8, 14336, 128256, head_dim=128, eps=1e-5,
          rope_base=5e5, context=131072),
    Shape("llama3.1-70b", "llama", 8192, 80, 64, 8, 28672, 128256, head_dim=128, eps=1e-5,
          rope_base=5e5, context=131072),
    Shape("qwen3-8b", "qwen3", 4096, 36, 32, 8, 12288, 151936, head_dim=128),
    Shape("qwen3-14b", "qwen3", 5120, 40, 40, 8, 17408, 151936, head_dim=128),
    Shape("qwen3-32b", "qwen3", 5120, 64, 64, 8, 25600, 151936, head_dim=128),
    # Qwen/Qwen3-30B-A3B config.json: 48 layers, 32/4 heads of 128, 128 experts of width 768,
    # 8 used per token, every layer MoE (intermediate_size 6144 unused)
    Shape("qwen3-30b-a3b", "qwen3moe", 2048, 48, 32, 4, 6144, 151936, head_dim=128,
          experts=128, experts_used=8, expert_ff=768, router="spread"),
    Shape("qwen3-30b-a3b-same-route", "qwen3moe", 2048, 48, 32, 4, 6144, 151936,
          head_dim=128, experts=128, experts_used=8, expert_ff=768, router="same"),
    # Qwen/Qwen3.5-0.8B config.json text_config: 24 layers ([linear × 3, full] × 6), 1 MTP
    # layer, linear_num_key_heads 16, linear_num_value_heads 16, head dims 128, conv 4,
    # rope_theta 1e7, partial_rotary_factor 0.25 (64 of 256), mrope_section [11, 11, 10]
    Shape("qwen3.5-0.8b", "qwen35", 1024, 24, 8, 2, 3584, 248320, head_dim=256, rope_base=1e7,
          linear=(16, 16, 128, 4), mtp_layers=1, tied=True, rope_dims=64,
          mrope=(11, 11, 10, 0)),
    # Gemma 3 (google-deepmind/gemma gemma/gm/nn/_gemma.py and _config.py; the real 270M
    # GGUF's header): 270M 640 × 18 layers, 4/1 heads of 256, ff 2048; 1B 1152 × 26, 4/1,
    # ff 6912; 4B 2560 × 34, 8/4, ff 10240; 12B 3840 × 48, 16/8, ff 15360; 27B 5376 × 62,
    # 32/16 heads of 128, ff 21504; tied embeddings over 262 144 tokens (262 208 from 4B:
    # the image tokens); sliding window 512 (270M, 1B) or 1024, five local layers to a global
    *[Shape(n, "gemma3", e, layers, h, kv, ff, vocab, head_dim=hd, tied=True, swa=w,
            context=ctx)
      for n, e, layers, h, kv, ff, vocab, hd, w, ctx in [
          ("gemma3-270m", 640, 18, 4, 1, 2048, 262144, 256, 512, 32768),
          ("gemma3-1b", 1152, 26, 4, 1, 6912, 262144, 256, 512, 32768),
          ("gemma3-4b", 2560, 34, 8, 4, 10240, 262208, 256, 1024, 131072),
          ("gemma3-12b", 3840, 48, 16, 8, 15360, 262208, 256, 1024, 131072),
          ("gemma3-27b", 5376, 62, 32, 16, 21504, 262208, 128, 1024, 131072)]],
    # openai/gpt-oss-20b and -120b config.json: 2880 wide, 24 / 36 layers, 64/8 heads of 64,
    # 32 / 128 experts of width 2880 (intermediate_size), 4 used per token, vocabulary 201088,
    # rope_theta 150000 with YaRN (factor 32 over 4096), sliding window 128 on every other
    # layer; biases on q/k/v/o, the router and the experts, a sink per head; the published
    # GGUF's MXFP4 experts (src/models/openai-moe.cpp reads them)
    *[Shape(n, "gpt-oss", 2880, layers, 64, 8, 2880, 201088, head_dim=64, eps=1e-5,
            rope_base=150000, context=131072, experts=experts, experts_used=4,
            expert_ff=2880, router="spread", swa=128, yarn=(32.0, 4096))
      for n, layers, experts in [("gpt-oss-20b", 24, 32), ("gpt-oss-120b", 36, 128)]],
]}
SIZE_ALIASES = {"0.5b": "qwen2.5-0.5b", "1.5b": "qwen2.5-1.5b", "3b": "qwen2.5-3b",
                "7b": "qwen2.5-7b", "14b": "qwen2.5-14b", "32b": "qwen2.5-32b"}
QUANTS = ("Q4_K_M", "Q4_0", "Q8_0", "MXFP4_MOE")
# gpt-oss is published in one form: llama-quantize's MXFP4_MOE (experts MXFP4, every other
# matrix Q8_0), the only quant its shape-true files take; the other models take the rest
MXFP4_ONLY = "gpt-oss"


def only_quant(shape: "Shape") -> str | None:
    """The one quant a shape is written in (gpt-oss: MXFP4_MOE), None where it takes any."""
    return "MXFP4_MOE" if shape.arch == MXFP4_ONLY else None
# elements per block, bytes per block (ggml-common.h)
BLOCKS = {"F32": (1, 4), "F16": (1, 2), "I64": (1, 8), "Q4_0": (32, 18), "Q5_0": (32, 22), "Q8_0": (32, 34),
          "Q4_K": (256, 144), "Q6_K": (256, 210), "MXFP4": (32, 17)}
# llama.cpp's tensor_type_fallback: a row that does not hold whole k-quant blocks
FALLBACK = {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}


# How a file's quant types were chosen (issue 59): "llama-quantize", current llama.cpp's
# llama_tensor_get_type (its counters by layer number; a tied model has no output.weight, its
# embedding takes the output's type; Q4_0 keeps the output at Q6_K); "pinned", the rule the
# pinned Qwen2.5 files were quantized with (counters in name order: blk.0, blk.1, blk.10; an
# output.weight even where the model ties it; Q4_0 and Q8_0 pure); "pure", every matrix the
# base type (llama-quantize --pure).
MIXES = ("llama-quantize", "pinned", "pure")


def default_mix(arch: str) -> str:
    """Qwen2.5 and Qwen3 as the pinned Qwen files (and every recorded run) hold them; the
    architectures added since as current llama.cpp quantizes them."""
    return "pinned" if arch in ("qwen2", "qwen3") else "llama-quantize"


def mix_of(shape: Shape) -> str:
    return shape.mix or default_mix(shape.arch)


def has_output(shape: Shape) -> bool:
    """Whether the file holds output.weight: an untied model's, or a tied one's written by
    the pinned files' converter."""
    return not shape.tied or mix_of(shape) == "pinned"


class ShapeError(ValueError):
    """An unknown model name or quant type."""


FAMILIES = {"qwen2": "Qwen2.5", "qwen3": "Qwen3", "qwen3moe": "Qwen3", "qwen35": "Qwen3.5",
            "gemma3": "Gemma 3", "llama": "Llama 3", "gpt-oss": "gpt-oss"}


def family(shape: Shape) -> str:
    """The tokenizer family a shape belongs to: a draft and its target must share it."""
    return FAMILIES.get(shape.arch, shape.arch)


def shape_of(name: str) -> Shape:
    key = SIZE_ALIASES.get(name.lower(), name.lower())
    if key not in SHAPES:
        raise ShapeError(f"no shape named {name!r}: one of "
                         + ", ".join([*SIZE_ALIASES, *SHAPES]))
    return SHAPES[key]


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's layers that get more bits in Q4_K_M (attn_v, ffn_down)."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _fit(kind: str, ne0: int) -> str:
    blck = BLOCKS[kind][0]
    return kind if ne0 % blck == 0 else FALLBACK.get(kind, "F32")


def tensors(shape: Shape) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor's name and ggml shape (ne0 first), in the order the pinned files hold
    them: the output and embedding, then each layer's tensors."""
    if shape.arch == "qwen35":
        return _qwen35_tensors(shape)
    if shape.arch == "gemma3":
        return _gemma3_tensors(shape)
    if shape.arch == "gpt-oss":
        return _gpt_oss_tensors(shape)
    e, q, kv = shape.hidden, shape.heads * shape.hd, shape.kv_heads * shape.hd
    # Llama 3's rope scaling: one rope_freqs.weight (n_rot / 2 factors), as the converter
    # writes it (src/models/llama.cpp reads it for layer 0, the rest share it)
    out = [("rope_freqs.weight", (shape.hd // 2,))] if shape.arch == "llama" else []
    out += [("token_embd.weight", (e, shape.vocab)), ("output_norm.weight", (e,))]
    if has_output(shape):
        out.append(("output.weight", (e, shape.vocab)))
    for i in range(shape.layers):
        b = f"blk.{i}."
        layer = [("attn_norm.weight", (e,)), ("attn_q.weight", (e, q)),
                 ("attn_k.weight", (e, kv)), ("attn_v.weight", (e, kv)),
                 ("attn_output.weight", (q, e)), ("ffn_norm.weight", (e,))]
        if shape.experts:
            n, f = shape.experts, shape.expert_ff
            layer += [("ffn_gate_inp.weight", (e, n)), ("ffn_gate_exps.weight", (e, f, n)),
                      ("ffn_up_exps.weight", (e, f, n)), ("ffn_down_exps.weight", (f, e, n))]
        else:
            layer += [("ffn_gate.weight", (e, shape.ff)), ("ffn_up.weight", (e, shape.ff)),
                      ("ffn_down.weight", (shape.ff, e))]
        if shape.arch == "qwen2":
            layer += [("attn_q.bias", (q,)), ("attn_k.bias", (kv,)), ("attn_v.bias", (kv,))]
        elif shape.arch != "llama":
            layer += [("attn_q_norm.weight", (shape.hd,)), ("attn_k_norm.weight", (shape.hd,))]
        out += [(b + n, ne) for n, ne in layer]
    return out


def _qwen35_tensors(shape: Shape) -> list[tuple[str, tuple[int, ...]]]:
    """Qwen3.5 as src/models/qwen35.cpp requests it: the trunk's gated delta-net layers
    (attn_qkv, attn_gate, ssm_*), its full-attention layers (a query twice as wide: the
    output gate) and the MTP layers after them (a full-attention block with nextn.eh_proj
    over [embedding, hidden], enorm, hnorm and shared_head_norm; the embedding and the
    output are the trunk's). Tied: no output.weight."""
    e, q, kv, ff = shape.hidden, shape.heads * shape.hd, shape.kv_heads * shape.hd, shape.ff
    kh, vh, hd, conv = shape.linear
    kd, vd = kh * hd, vh * hd
    out = [("token_embd.weight", (e, shape.vocab)), ("output_norm.weight", (e,))]
    if has_output(shape):
        out.append(("output.weight", (e, shape.vocab)))
    full = [("attn_q.weight", (e, 2 * q)), ("attn_k.weight", (e, kv)),
            ("attn_v.weight", (e, kv)), ("attn_output.weight", (q, e)),
            ("attn_q_norm.weight", (shape.hd,)), ("attn_k_norm.weight", (shape.hd,))]
    linear = [("attn_qkv.weight", (e, 2 * kd + vd)), ("attn_gate.weight", (e, vd)),
              ("ssm_conv1d.weight", (conv, 2 * kd + vd)), ("ssm_dt.bias", (vh,)),
              ("ssm_a", (vh,)), ("ssm_beta.weight", (e, vh)), ("ssm_alpha.weight", (e, vh)),
              ("ssm_norm.weight", (hd,)), ("ssm_out.weight", (vd, e))]
    ffn = [("ffn_gate.weight", (e, ff)), ("ffn_down.weight", (ff, e)),
           ("ffn_up.weight", (e, ff))]
    nextn = [("nextn.eh_proj.weight", (2 * e, e)), ("nextn.enorm.weight", (e,)),
             ("nextn.hnorm.weight", (e,)), ("nextn.shared_head_norm.weight", (e,))]
    for i in range(shape.layers + shape.mtp_layers):
        layer = [("attn_norm.weight", (e,)), ("post_attention_norm.weight", (e,)),
                 *(linear if shape.is_recurrent(i) else full), *ffn,
                 *(nextn if i >= shape.layers else [])]
        out += [(f"blk.{i}.{n}", ne) for n, ne in layer]
    return out


def _gemma3_tensors(shape: Shape) -> list[tuple[str, tuple[int, ...]]]:
    """Gemma 3 as src/models/gemma3.cpp requests it (q/k norms, a norm after attention and
    after the feed-forward; tied: no output.weight), in the real 270M file's order (each
    block's tensors by name)."""
    e, q, kv, ff = shape.hidden, shape.heads * shape.hd, shape.kv_heads * shape.hd, shape.ff
    out = [("output_norm.weight", (e,)), ("token_embd.weight", (e, shape.vocab)),
           *([("output.weight", (e, shape.vocab))] if has_output(shape) else [])]
    layer = sorted([("attn_k.weight", (e, kv)), ("attn_k_norm.weight", (shape.hd,)),
                    ("attn_norm.weight", (e,)), ("attn_output.weight", (q, e)),
                    ("attn_q.weight", (e, q)), ("attn_q_norm.weight", (shape.hd,)),
                    ("attn_v.weight", (e, kv)), ("ffn_down.weight", (ff, e)),
                    ("ffn_gate.weight", (e, ff)), ("ffn_norm.weight", (e,)),
                    ("ffn_up.weight", (e, ff)), ("post_attention_norm.weight", (e,)),
                    ("post_ffw_norm.weight", (e,))])
    for i in range(shape.layers):
        out += [(f"blk.{i}.{n}", ne) for n, ne in layer]
    return out


def _gpt_oss_tensors(shape: Shape) -> list[tuple[str, tuple[int, ...]]]:
    """gpt-oss as src/models/openai-moe.cpp requests it: untied output, a norm before and
    after attention, q/k/v/o with biases, a sink per head, a biased router and biased experts
    (gate, up, down)."""
    e, q, kv = shape.hidden, shape.heads * shape.hd, shape.kv_heads * shape.hd
    n, f = shape.experts, shape.expert_ff
    out = [("token_embd.weight", (e, shape.vocab)), ("output_norm.weight", (e,)),
           ("output.weight", (e, shape.vocab))]
    layer = [("attn_norm.weight", (e,)), ("post_attention_norm.weight", (e,)),
             ("attn_q.weight", (e, q)), ("attn_q.bias", (q,)), ("attn_k.weight", (e, kv)),
             ("attn_k.bias", (kv,)), ("attn_v.weight", (e, kv)), ("attn_v.bias", (kv,)),
             ("attn_output.weight", (q, e)), ("attn_output.bias", (e,)),
             ("attn_sinks.weight", (shape.heads,)),
             ("ffn_gate_inp.weight", (e, n)), ("ffn_gate_inp.bias", (n,)),
             ("ffn_gate_exps.weight", (e, f, n)), ("ffn_gate_exps.bias", (f, n)),
             ("ffn_up_exps.weight", (e, f, n)), ("ffn_up_exps.bias", (f, n)),
             ("ffn_down_exps.weight", (f, e, n)), ("ffn_down_exps.bias", (e, n))]
    for i in range(shape.layers):
        out += [(f"blk.{i}.{name}", ne) for name, ne in layer]
    return out


def _mxfp4_moe(plan: list) -> dict[str, str]:
    """llama-quantize's MXFP4_MOE (llama-quant.cpp): the experts (3-D) MXFP4, every other
    matrix Q8_0, the output and embedding included; 1-D tensors, biases and the router F32."""
    return {n: "F32" if len(ne) == 1 or n.endswith(".bias") or "ffn_gate_inp" in n
            else "MXFP4" if len(ne) == 3 else _fit("Q8_0", ne[0]) for n, ne in plan}


def _layer_order(name: str) -> tuple[int, str]:
    """Current llama.cpp's quantizer visits layers by number (blk.2 before blk.10)."""
    parts = name.split(".")
    return (int(parts[1]), name) if parts[0] == "blk" else (-1, name)


def quant_types(shape: Shape, quant: str) -> dict[str, str]:
    """Per tensor, the type llama.cpp's quantizer gives it (llama_tensor_get_type) under the
    shape's mix (MIXES): 1-D tensors stay F32; Q4_K_M gives Q6_K to the output (a tied
    model's embedding where the file has no output.weight) and, where use_more_bits says, to
    attn_v and ffn_down, Q4_K elsewhere, with the fallback where a row holds no whole 256
    block; the counters of attn_v and ffn_down run by layer number ("llama-quantize") or in
    name order (blk.0, blk.1, blk.10, …: "pinned", as the quantizer of the pinned Qwen files
    visited them). Q4_0 keeps the output at Q6_K under "llama-quantize"; "pure" gives every
    matrix the base type."""
    if quant not in QUANTS:
        raise ShapeError(f"no quant {quant!r} for shape-true files: one of {', '.join(QUANTS)}")
    mix = mix_of(shape)
    if mix not in MIXES:
        raise ShapeError(f"no mix {mix!r}: one of {', '.join(MIXES)}")
    if (shape.arch == MXFP4_ONLY) != (quant == "MXFP4_MOE"):
        raise ShapeError(f"{shape.name}: gpt-oss is written as its published MXFP4_MOE file, "
                         "every other model as Q4_K_M, Q4_0 or Q8_0")
    plan = tensors(shape)
    if quant == "MXFP4_MOE":
        return _mxfp4_moe(plan)
    # 1-D tensors, the delta-net's conv kernels and the MoE router (llama-quantize never
    # quantizes them)
    types = {n: "F32" for n, ne in plan
             if len(ne) == 1 or "ssm_conv1d" in n or "ffn_gate_inp" in n}
    matrices = [(n, ne) for n, ne in plan if n not in types]
    base = "Q4_K" if quant == "Q4_K_M" else quant
    out_name = "output.weight" if has_output(shape) else "token_embd.weight"
    if mix == "pure" or (quant != "Q4_K_M" and (mix == "pinned" or quant == "Q8_0")):
        return types | {n: _fit(base, ne[0]) for n, ne in matrices}
    if quant == "Q4_0":   # llama-quantize: the output at Q6_K, every other matrix Q4_0
        return types | {n: _fit("Q6_K" if n == out_name else base, ne[0]) for n, ne in matrices}
    # attn_qkv counts as attn_v (category_is_attn_v)
    order = _layer_order if mix == "llama-quantize" else None
    for kinds in (("attn_v.weight", "attn_qkv.weight"),
                  ("ffn_down.weight", "ffn_down_exps.weight")):
        named = sorted((n for n, _ in matrices if n.endswith(kinds)), key=order)
        for j, name in enumerate(named):
            ne0 = dict(matrices)[name][0]
            types[name] = _fit("Q6_K" if use_more_bits(j, len(named)) else "Q4_K", ne0)
    for name, ne in matrices:
        if name == out_name:   # a tied embedding is the output (has_tied_embeddings)
            types[name] = _fit("Q6_K", ne[0])
        elif name not in types:
            types[name] = _fit("Q4_K", ne[0])
    return types


def nbytes(ne: tuple[int, ...], kind: str) -> int:
    blck, size = BLOCKS[kind]
    n = 1
    for x in ne:
        n *= x
    return n // blck * size


def file_bytes(shape: Shape, quant: str) -> int:
    """The tensor data's bytes (the file is this plus its metadata, ~10 MB)."""
    types = quant_types(shape, quant)
    return sum(nbytes(ne, types[n]) for n, ne in tensors(shape))


HEADER_BYTES = 1 << 16   # llama/shape_true.py writes SHAPE_KEY before the tokenizer's arrays


def is_shape_true(path: Path) -> bool:
    """Whether a GGUF is a shape-true file: its metadata holds SHAPE_KEY, which
    write_shape_true puts in the first HEADER_BYTES (read alone: no model is parsed)."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_BYTES)
    except OSError:
        return False
    return head[:4] == b"GGUF" and SHAPE_KEY.encode() in head
