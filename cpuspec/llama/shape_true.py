"""Writing a shape-true GGUF (inputs/shapes.py says what it is): gguf-py's writer, one tensor
in memory at a time, random quantized blocks written directly (no F16 pass) with fp16 scales
chosen so that dequantized weights have a spread of ~0.02 (no NaN, Inf or denormal scale), the
norms at 1 and the biases at 0, and the tokenizer copied from a real Qwen file. Written to a
temporary name, then renamed: never left half written."""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path
from typing import Callable

import numpy as np

from cpuspec.inputs.registry import models_dir
from cpuspec.inputs.shapes import (BLOCKS, HEADER_BYTES, SHAPE_KEY, SHAPE_TRUE,  # noqa: F401
                                   Shape, ShapeError, default_mix, file_bytes,
                                   is_shape_true, nbytes,
                                   quant_types, tensors)
from cpuspec.inputs.models import PARTIAL_SUFFIX, clean_stale_downloads

FILE_TYPES = {"Q4_0": 2, "Q8_0": 7, "Q4_K_M": 15, "MXFP4_MOE": 38}
WEIGHT_SPREAD = 0.02   # the standard deviation of a dequantized weight (a trained model's order)
# 2: every page random (1 tiled a pool of blocks, which a host can merge: not shape-true)
SHAPE_FORMAT = 3   # 3: Qwen3 files carry Qwen3's added tokens; heads (issue 58)


def _fp16(x: float) -> np.ndarray:
    return np.array([x], dtype=np.float16).view(np.uint8)


def _scale(b: np.ndarray, kind: str, rng: np.random.Generator) -> None:
    """Set the fp16 scales of random blocks b (n_blocks × block bytes, ggml-common.h's
    layouts) so that the dequantized weights spread by ~WEIGHT_SPREAD."""
    if kind == "Q4_0":      # d·(q − 8), q in 0..15: spread ≈ 4.6 d
        b[:, 0:2] = _fp16(WEIGHT_SPREAD / 4.6)
    elif kind == "Q5_0":    # d·(q − 16), q in 0..31
        b[:, 0:2] = _fp16(WEIGHT_SPREAD / 9.2)
    elif kind == "Q8_0":    # d·q, q an int8
        b[:, 0:2] = _fp16(WEIGHT_SPREAD / 74)
    elif kind == "Q4_K":    # d·sc·q − dmin·m, 6-bit sc and m, q in 0..15
        b[:, 0:2] = _fp16(WEIGHT_SPREAD / 150)
        b[:, 2:4] = _fp16(WEIGHT_SPREAD / 150)
    elif kind == "MXFP4":   # 2^(e − 128)·v, v an E2M1 value (±0..12): spread ≈ 5.85 d
        b[:, 0] = 120       # d = 2^-8: spread ≈ 0.023
    elif kind == "Q6_K":    # d·scale·(q − 32): int8 scales kept in 1..16
        b[:, 192:208] = rng.integers(1, 17, size=(len(b), 16), dtype=np.uint8)
        b[:, 208:210] = _fp16(WEIGHT_SPREAD / (8.5 * 18.5))
    else:
        raise ShapeError(f"no random blocks for {kind}")


# where each block type keeps its fp16 scales (ggml-common.h): zeroed, the block dequantizes to 0
ZERO_SCALES = {"Q4_0": slice(0, 2), "Q5_0": slice(0, 2), "Q8_0": slice(0, 2),
               "Q4_K": slice(0, 4), "Q6_K": slice(208, 210)}


def _data(name: str, ne: tuple[int, ...], kind: str, rng: np.random.Generator,
          vocab: int = 0, zero: bool = False) -> np.ndarray:
    """A tensor's bytes. Every page of a quantized tensor is random, none repeats: a tiled
    pool of blocks (identical pages) decoded 1.4× faster than the real file at Q8_0 on a VM
    whose host merges identical pages, so random data must fill each tensor whole
    (docs/shape-true.md)."""
    if kind == "F32" and len(ne) > 1 and not name.endswith(".bias"):
        # a small matrix kept in F32 (a head's conf_proj, an MoE's router)
        if zero:   # a router of zeros: every token to the same experts
            return np.zeros(ne[::-1], dtype=np.float32)
        return (rng.standard_normal(ne[::-1]) * WEIGHT_SPREAD).astype(np.float32)
    if kind == "F32":   # norms 1; biases 0; the delta-net's A (−exp(A_log)) −1: a decay
        value = 0.0 if name.endswith(".bias") else -1.0 if name.endswith("ssm_a") else 1.0
        return np.full(ne[::-1], value, dtype=np.float32)
    if kind == "F16":
        return (rng.standard_normal(ne[::-1]) * WEIGHT_SPREAD).astype(np.float16)
    if kind == "I64":    # d2t: distinct target token ids, ascending, as the converter writes
        return np.sort(rng.choice(vocab, size=ne[0], replace=False)).astype(np.int64)
    blck, size = BLOCKS[kind]
    n_blocks = int(np.prod(ne)) // blck
    b = np.frombuffer(bytearray(rng.bytes(n_blocks * size)), dtype=np.uint8)
    b = b.reshape(n_blocks, size)
    _scale(b, kind, rng)
    if zero and kind == "MXFP4":   # its E8M0 scale has no 0: the values 0 (nibbles 0 and 8,
        b[:, 1:] &= 0x88           # +0 and −0), the pages still random
    elif zero:   # weights of 0 from random pages: the scales 0, the quants left random
        b[:, ZERO_SCALES[kind]] = 0
    return b.reshape(-1)


# Qwen3's tokens after Qwen2.5's (tokenizer_config.json's added_tokens_decoder of the Qwen3
# models: the rest of the vocabulary is Qwen2.5's), type USER_DEFINED as <tool_call> is
QWEN3_ADDED = {151665: "<tool_response>", 151666: "</tool_response>", 151667: "<think>",
               151668: "</think>"}
USER_DEFINED = 4


def added_tokens(shape: Shape) -> dict[int, str]:
    """Tokens a family adds to the tokenizer file it is written with: Qwen3's four."""
    return QWEN3_ADDED if shape.arch.startswith("qwen3") else {}


def tokenizer_id(tokenizer_file: Path) -> str:
    """Which tokenizer file a shape-true file was written with: its name and size (a cached
    file written with another tokenizer is written again, not returned)."""
    return f"{tokenizer_file.name} {tokenizer_file.stat().st_size}"


def _copy_tokenizer(writer, tokenizer_file: Path, vocab: int,
                    added: dict[int, str] | None = None) -> None:
    """The tokenizer's fields of a real Qwen file; the token list padded to the model's
    vocabulary as convert_hf_to_gguf pads it ([PADi], type UNUSED), with the family's own
    added tokens (`added`: id → text) in their places."""
    from gguf import GGUFReader, GGUFValueType
    writer.add_string("cpuspec.tokenizer_from", tokenizer_file.name)   # gpt-oss: a stand-in
    writer.add_string("cpuspec.tokenizer_id", tokenizer_id(tokenizer_file))
    reader = GGUFReader(tokenizer_file)
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                          "tokenizer.ggml.scores"):
            pad = vocab - len(value)
            if pad < 0:
                raise ShapeError(f"{tokenizer_file.name} has {len(value)} tokens, more than "
                                 f"the model's vocabulary of {vocab}")
            value = list(value) + ([f"[PAD{i}]" for i in range(len(value), vocab)]
                                   if field.name.endswith("tokens") else
                                   [0.0] * pad if field.name.endswith("scores") else [5] * pad)
            for i, text in (added or {}).items() if not field.name.endswith("scores") else ():
                if i < vocab:
                    value[i] = text if field.name.endswith("tokens") else USER_DEFINED
        writer.add_key_value(field.name, value, vtype, sub_type=sub)


def _hparams(writer, shape: Shape, quant: str, prefix: str = "") -> None:
    a = shape.arch
    writer.add_name(f"{prefix}{shape.name} {quant} {SHAPE_TRUE}")
    writer.add_uint32(SHAPE_KEY, SHAPE_FORMAT)
    writer.add_uint32(f"{a}.context_length", shape.context)
    writer.add_uint32(f"{a}.embedding_length", shape.hidden)
    writer.add_uint32(f"{a}.block_count", shape.layers + shape.mtp_layers)
    writer.add_uint32(f"{a}.feed_forward_length", shape.ff)
    writer.add_uint32(f"{a}.attention.head_count", shape.heads)
    writer.add_uint32(f"{a}.attention.head_count_kv", shape.kv_heads)
    writer.add_float32(f"{a}.rope.freq_base", shape.rope_base)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", shape.eps)
    if shape.head_dim:
        writer.add_uint32(f"{a}.attention.key_length", shape.head_dim)
        writer.add_uint32(f"{a}.attention.value_length", shape.head_dim)
    if shape.linear:
        _linear_hparams(writer, shape)
    if shape.swa:
        writer.add_uint32(f"{a}.attention.sliding_window", shape.swa)
    if shape.yarn:
        writer.add_string(f"{a}.rope.scaling.type", "yarn")
        writer.add_float32(f"{a}.rope.scaling.factor", shape.yarn[0])
        writer.add_uint32(f"{a}.rope.scaling.original_context_length", shape.yarn[1])
    if shape.experts:
        writer.add_uint32(f"{a}.expert_count", shape.experts)
        writer.add_uint32(f"{a}.expert_used_count", shape.experts_used)
        writer.add_uint32(f"{a}.expert_feed_forward_length", shape.expert_ff)
    writer.add_uint32("general.file_type", FILE_TYPES[quant])
    writer.add_quantization_version(2)


def _linear_hparams(writer, shape: Shape) -> None:
    """qwen35's keys as convert_hf_to_gguf writes them (conversion/qwen.py Qwen3NextModel,
    _Qwen35MRopeMixin, the MTP mixin's nextn_predict_layers)."""
    a = shape.arch
    kh, vh, hd, conv = shape.linear
    _add(writer, f"{a}.ssm.conv_kernel", conv, "u32")
    _add(writer, f"{a}.ssm.state_size", hd, "u32")
    _add(writer, f"{a}.ssm.group_count", kh, "u32")
    _add(writer, f"{a}.ssm.time_step_rank", vh, "u32")
    _add(writer, f"{a}.ssm.inner_size", vh * hd, "u32")
    _add(writer, f"{a}.full_attention_interval", shape.full_interval, "u32")
    _add(writer, f"{a}.rope.dimension_count", shape.rope_dims or shape.hd, "u32")
    if shape.mrope:
        _add(writer, f"{a}.rope.dimension_sections", list(shape.mrope), "i32[]")
    if shape.mtp_layers:
        _add(writer, f"{a}.nextn_predict_layers", shape.mtp_layers, "u32")


def shape_path(shape: Shape, quant: str) -> Path:
    """The cached file; the spread routing is in its name, so a file written with random
    routing before it existed is never taken for it."""
    route = "-spread" if shape.router == "spread" else ""
    mix = f"-{shape.mix}" if shape.mix and shape.mix != default_mix(shape.arch) else ""
    return models_dir() / "shape-true" / \
        f"{shape.name}{route}-{quant.lower()}{mix}.shape-true-v{SHAPE_FORMAT}.gguf"


def check_room(shape: Shape, quant: str, folder: Path, memory_bytes: int) -> int:
    """The bytes the file needs; refused (ShapeError, saying how much) where the disk could
    not hold it or the memory could not hold it while it runs."""
    need = file_bytes(shape, quant) + 64 * 2 ** 20
    free = shutil.disk_usage(folder).free
    if need > free:
        raise ShapeError(f"{shape.name} {quant} needs {need / 1e9:.1f} GB on disk; "
                         f"{folder} has {free / 1e9:.1f} GB free")
    if need > 0.9 * memory_bytes:
        raise ShapeError(f"{shape.name} {quant} needs {need / 1e9:.1f} GB of memory to run; "
                         f"this machine has {memory_bytes / 1e9:.1f} GB")
    return need


# An MoE's routing under random weights. Random quantized blocks give every hidden state a large
# shared component (their weights' mean is not 0), so a random router sends every token of a
# batch to the same experts: no worst case. "spread": the layers' output projections are 0
# (zero scales over random pages: the same kernels and bytes), so each token's hidden state
# stays its own embedding row and a random router spreads tokens over the experts; "same": a
# router of zeros sends every token to the same experts (the best case).
ZEROED = {"spread": ("attn_output.weight", "ffn_down_exps.weight"),
          "same": ("ffn_gate_inp.weight",), "random": ()}


def write_shape_true(shape: Shape, quant: str, tokenizer_file: Path, memory_bytes: int,
                     log: Callable[[str], None] = lambda _: None, seed: int = 0) -> Path:
    """The shape-true file of `shape` at `quant`, written once and cached."""
    dest = shape_path(shape, quant)

    def need() -> int:
        return check_room(shape, quant, dest.parent, memory_bytes)
    zeros = frozenset(n for n, _ in tensors(shape) if n.endswith(ZEROED[shape.router]))
    return _write_cached(dest, shape.arch, lambda w: _hparams(w, shape, quant), tensors(shape),
                         quant_types(shape, quant), tokenizer_file, shape.vocab, need, log,
                         seed, added_tokens(shape), zeros)


def write_head(head, quant: str, tokenizer_file: Path, memory_bytes: int,
               log: Callable[[str], None] = lambda _: None, seed: int = 0) -> Path:
    """The shape-true head (inputs/heads.py) at `quant` (its matrices; norms F32, d2t I64),
    with its target's tokenizer, written once and cached beside the shape-true targets."""
    from cpuspec.inputs.heads import head_kv, head_tensors, head_types
    t = head.target_shape()
    dest = models_dir() / "shape-true" / \
        f"{head.name}-{quant.lower()}.shape-true-v{SHAPE_FORMAT}.gguf"
    plan, types = head_tensors(head), head_types(head, quant)
    arch = "eagle3" if head.method == "eagle3" else "dflash"

    def need() -> int:
        return _room(plan, types, dest.parent, memory_bytes, f"{head.name} {quant}")

    def kv(writer) -> None:
        writer.add_name(f"{head.name} {quant} {SHAPE_TRUE}")
        writer.add_uint32(SHAPE_KEY, SHAPE_FORMAT)
        writer.add_string("cpuspec.method", head.method)
        for key, value, kind in head_kv(head):
            _add(writer, key, value, kind)
        writer.add_uint32("general.file_type", FILE_TYPES.get(quant, 1))
        writer.add_quantization_version(2)
    return _write_cached(dest, arch, kv, plan, types, tokenizer_file, t.vocab, need, log,
                         seed, added_tokens(t))


def write_mtp_only(shape: Shape, quant: str, tokenizer_file: Path, memory_bytes: int,
                   log: Callable[[str], None] = lambda _: None, seed: int = 0) -> Path:
    """The MTP-only file of `shape` (inputs/heads.py mtp_only_tensors: the converter's --mtp
    output, "mtp-" before the shape's own file name) at `quant`, the whole model's metadata
    and types, written once and cached: a draft for -md with --spec-type draft-mtp."""
    from cpuspec.inputs.heads import mtp_only_tensors
    plan = mtp_only_tensors(shape)
    types = {n: t for n, t in quant_types(shape, quant).items() if n in dict(plan)}
    dest = shape_path(shape, quant)
    dest = dest.with_name(f"mtp-{dest.name}")
    return _write_cached(dest, shape.arch, lambda w: _hparams(w, shape, quant, "mtp-"), plan,
                         types, tokenizer_file, shape.vocab,
                         lambda: _room(plan, types, dest.parent, memory_bytes,
                                       f"mtp-{shape.name} {quant}"),
                         log, seed, added_tokens(shape))


def _room(plan: list, types: dict, folder: Path, memory_bytes: int, what: str) -> int:
    """The bytes a small file (a head, an MTP layer) needs; refused where the disk or the
    memory could not hold it."""
    size = sum(nbytes(ne, types[n]) for n, ne in plan) + 64 * 2 ** 20
    free = shutil.disk_usage(folder).free
    if size > free or size > 0.9 * memory_bytes:
        raise ShapeError(f"{what} needs {size / 1e9:.2f} GB; {folder} has {free / 1e9:.1f} GB "
                         "free")
    return size


def _add(writer, key: str, value, kind: str) -> None:
    """One metadata value of an exact type (llama.cpp checks scalar types strictly)."""
    from gguf import GGUFValueType
    if kind == "u32":
        writer.add_uint32(key, int(value))
    elif kind == "f32":
        writer.add_float32(key, float(value))
    elif kind == "bool":
        writer.add_bool(key, bool(value))
    elif kind == "str":
        writer.add_string(key, str(value))
    elif kind == "i32[]":
        writer.add_key_value(key, [int(x) for x in value], GGUFValueType.ARRAY,
                             sub_type=GGUFValueType.INT32)
    else:
        raise ValueError(f"unknown metadata kind {kind}")


def _write_cached(dest: Path, arch: str, add_kv: Callable, plan: list, types: dict,
                  tokenizer_file: Path, vocab: int, need: Callable[[], int],
                  log: Callable[[str], None], seed: int, added: dict[int, str],
                  zeros: frozenset = frozenset()) -> Path:
    """Write a GGUF of random tensors (plan: names and ggml shapes; types: each one's type;
    zeros: F32 matrices written as zeros) once: to a temporary name, then renamed; a file cut
    short is written again."""
    from gguf import GGMLQuantizationType, GGUFWriter
    if dest.is_file():
        state = _cached_state(dest, plan, types, tokenizer_file)
        if state is None:
            return dest
        log(f"shape-true: {dest.name} {state}; writing it again")
    partial = dest.with_name(f"{dest.name}.{os.getpid()}{PARTIAL_SUFFIX}")
    rng = np.random.default_rng(seed)
    writer = None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        clean_stale_downloads(dest.parent, log)   # what a killed write left
        dest.unlink(missing_ok=True)               # a file cut short: its room is counted free
        size = need()
        log(f"shape-true: writing {dest.name} ({size / 1e9:.1f} GB, random weights)")
        writer = GGUFWriter(partial, arch)
        add_kv(writer)
        _copy_tokenizer(writer, tokenizer_file, vocab, added)
        for name, ne in plan:
            kind = types[name]
            writer.add_tensor_info(name, ne[::-1], np.dtype(np.float32),
                                   nbytes(ne, kind), raw_dtype=GGMLQuantizationType[kind])
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for name, ne in plan:
            writer.write_tensor_data(_data(name, ne, types[name], rng, vocab, name in zeros))
        writer.close()
        os.replace(partial, dest)
    except OSError as exc:
        raise ShapeError(f"cannot write {dest}: {_reason(exc, dest.parent)}") from None
    finally:   # no error of its own here (a read-only disk refuses even this unlink)
        with contextlib.suppress(OSError):
            if writer is not None:
                writer.close()
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
    return dest


def _reason(exc: OSError, folder: Path) -> str:
    """What stopped a write, in words. numpy's tofile says a short write as "N requested and
    M written", with no errno: where the folder has no room left, that is a full disk."""
    full = exc.errno == errno.ENOSPC
    if exc.errno is None and "requested and" in str(exc):
        with contextlib.suppress(OSError):
            full = shutil.disk_usage(folder).free < 64 * 2 ** 20
    return "no space left on the device" if full else str(exc)


def _cached_state(path: Path, plan: list, types: dict, tokenizer_file: Path) -> str | None:
    """None where a cached GGUF is whole, holds exactly the tensors, shapes and types the plan
    asks for and was written with this tokenizer; else what is wrong with it: a copy cut short
    (a crash before its pages reached the disk, a copy that ran out of room), one written under
    another quant rule (an older cpuspec's mix under the same name) or with another tokenizer
    is written again, never loaded. A file from before the tokenizer's size was recorded is
    matched by the tokenizer's name."""
    from gguf import GGUFReader
    try:
        reader = GGUFReader(path)
        end = max(t.data_offset + int(t.n_bytes) for t in reader.tensors)
        if not end <= path.stat().st_size < end + reader.alignment:
            return "is cut short"
        held = {t.name: ([int(x) for x in t.shape], t.tensor_type.name) for t in reader.tensors}
        made = {key: _string(reader, key) for key in ("cpuspec.tokenizer_id",
                                                      "cpuspec.tokenizer_from")}
    except (OSError, ValueError, IndexError):
        return "is cut short"
    want = {n: (list(ne), types[n]) for n, ne in plan}
    if held != want:
        return "holds other tensors or types (another quant rule)"
    if made["cpuspec.tokenizer_id"] is not None:
        same = made["cpuspec.tokenizer_id"] == tokenizer_id(tokenizer_file)
    else:
        same = made["cpuspec.tokenizer_from"] == tokenizer_file.name
    return None if same else (f"was written with another tokenizer "
                              f"({made['cpuspec.tokenizer_from']})")


def _string(reader, key: str) -> str | None:
    """A string field of a GGUF, None where it has none."""
    field = reader.fields.get(key)
    if field is None:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")
