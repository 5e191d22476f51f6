"""The llama-cpp-python session: models, contexts, batches, logits and KV rollback.

Only llama-cpp-python's low-level API is used (llama_batch, llama_decode, llama_get_logits_ith,
llama_memory_seq_rm): the speculative loop is ours, not Llama.generate or its draft_model hook.
Each Session holds one sequence (seq_id 0) and one batch allocated once and reused; logits are
read through numpy views of llama.cpp's own buffer, without copies.
"""
from __future__ import annotations

import ctypes
import re
from pathlib import Path
from typing import Sequence

import numpy as np

import llama_cpp as ll

from cpuspec.machine import interrupt

SEQ = 0
# llama.cpp's speculative example accepts a draft whose vocabulary is at most this many ids
# larger or smaller than the target's (padding ids at the end; common/speculative.cpp).
VOCAB_MAX_SIZE_DIFFERENCE = 128


class EngineError(RuntimeError):
    """llama.cpp refused something (loading, decoding); the message says what."""


_backend_ready = False


_captured: list[bytes] | None = None   # the log lines of the load under way (Model.__init__)


@ll.llama_log_callback
def _quiet_log(level, text, user_data):  # llama.cpp's own logging would flood the terminal
    buf = _captured
    if buf is not None and text:
        buf.append(text)


# llama.cpp's load log, one line per buffer it allocated for the weights
# (src/llama-model.cpp, load_tensors: "%s: %12s model buffer size = %8.2f MiB"): the only place
# where it says which device holds the weights; n_gpu_layers is a request, not a placement.
_BUFFER_LINE = re.compile(rb"load_tensors:\s+(\S+) model buffer size =\s*([0-9.]+) MiB")
# A context's allocations (src/llama-context.cpp, llama-kv-cache.cpp): "%s compute buffer size"
# and "%s KV buffer size" name the backend of each: where its work and its KV cache live.
_CONTEXT_LINE = re.compile(rb"\s(\S+) (compute|KV) buffer size =\s*([0-9.]+) MiB")


def parse_context_buffers(lines: Sequence[bytes]) -> dict[str, int]:
    """{"compute:CPU": bytes, "KV:CPU": bytes, "compute:MTL0": ...} from a context's log."""
    out: dict[str, int] = {}
    for line in lines:
        m = _CONTEXT_LINE.search(line)
        if m:
            key = f"{m.group(2).decode()}:{m.group(1).decode(errors='replace')}"
            out[key] = out.get(key, 0) + round(float(m.group(3)) * 2**20)
    return out


def parse_model_buffers(lines: Sequence[bytes]) -> dict[str, int]:
    """{buffer name: bytes} from a model load's log lines (CPU_Mapped, CPU_REPACK, Vulkan0,
    CUDA0, ...); a name seen twice is summed."""
    out: dict[str, int] = {}
    for line in lines:
        m = _BUFFER_LINE.search(line)
        if m:
            name = m.group(1).decode(errors="replace")
            out[name] = out.get(name, 0) + round(float(m.group(2)) * 2**20)
    return out


def init_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        ll.llama_log_set(_quiet_log, ctypes.c_void_p(0))
        ll.llama_backend_init()
        _backend_ready = True


def system_info() -> str:
    init_backend()
    return ll.llama_print_system_info().decode(errors="replace").strip()


def supports_gpu_offload() -> bool:
    """Whether -ngl can place layers on a GPU: a GPU or iGPU in ggml's device list.
    llama_supports_gpu_offload() alone says yes for an RPC-enabled build with no GPU; it
    decides only where the device list cannot be read."""
    init_backend()
    devices = ggml_devices()
    if devices:
        return any(d.get("type") in ("GPU", "iGPU") for d in devices)
    return bool(ll.llama_supports_gpu_offload())


DEVICE_TYPES = ("CPU", "GPU", "iGPU", "accelerator", "meta")   # enum ggml_backend_dev_type


def ggml_devices() -> list[dict]:
    """ggml's devices as llama.cpp sees them (what -ngl offloads to): name, description, type
    and memory, read through ggml's C API in the libggml that llama-cpp-python loaded (its
    Python bindings do not wrap these). [] where that library cannot be found."""
    init_backend()
    lib_dir = Path(ll.__file__).parent / "lib"
    found = sorted(lib_dir.glob("libggml.so*")) + sorted(lib_dir.glob("libggml.dylib")) + \
        sorted(lib_dir.glob("ggml.dll"))
    if not found:
        return []
    try:
        return _read_devices(ctypes.CDLL(str(found[0])))
    except (OSError, AttributeError):   # another ggml, without these symbols
        return []


def _read_devices(lib) -> list[dict]:
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(lib, name).restype = ctypes.c_char_p
        getattr(lib, name).argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                            ctypes.POINTER(ctypes.c_size_t)]
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        kind = lib.ggml_backend_dev_type(dev)
        out.append({"name": (lib.ggml_backend_dev_name(dev) or b"").decode(errors="replace"),
                    "description": (lib.ggml_backend_dev_description(dev) or b"").decode(
                        errors="replace"),
                    "type": DEVICE_TYPES[kind] if 0 <= kind < len(DEVICE_TYPES) else str(kind),
                    "memory_total_bytes": total.value, "memory_free_bytes": free.value})
    return out


class Model:
    """A loaded GGUF model and its vocabulary."""

    def __init__(self, path: Path | str, n_gpu_layers: int = 0):
        init_backend()
        self.path = Path(path)
        if self.path.is_dir():
            raise EngineError(f"model file {self.path} is a folder; pass the .gguf file in it")
        if not self.path.is_file():
            raise EngineError(f"model file not found: {self.path}")
        params = ll.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        self.n_gpu_layers = n_gpu_layers
        global _captured
        _captured = []
        try:
            self.ptr = ll.llama_model_load_from_file(str(self.path).encode(), params)
            lines = _captured
        finally:
            _captured = None
        interrupt.check()
        # where the weights went: {buffer name: bytes}, and the part on a device other than
        # the CPU (a GPU's own memory; host-side buffers such as Vulkan_Host are not counted)
        # (None where the log said nothing: another library took the callback, or llama.cpp
        # changed the line; a device's buffer is named after it: Vulkan0, CUDA0, MTL0_Mapped)
        self.buffers = parse_model_buffers(lines)
        devices = tuple(d["name"] for d in ggml_devices() if d["type"] != "CPU" and d["name"])
        self.offloaded_bytes = sum(b for name, b in self.buffers.items()
                                   if name.startswith(devices)) if self.buffers else None
        if not self.ptr:
            raise EngineError(f"llama.cpp could not load {self.path} (not a valid GGUF model?)")
        self.vocab = ll.llama_model_get_vocab(self.ptr)
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        self.size_bytes = int(ll.llama_model_size(self.ptr))
        self.n_params = int(ll.llama_model_n_params(self.ptr))
        self.n_ctx_train = int(ll.llama_model_n_ctx_train(self.ptr))
        buf = ctypes.create_string_buffer(256)
        ll.llama_model_desc(self.ptr, buf, len(buf))
        self.desc = buf.value.decode(errors="replace")

    def close(self) -> None:
        if self.ptr:
            ll.llama_model_free(self.ptr)
            self.ptr = None

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def tokenize(self, text: str, parse_special: bool = True) -> list[int]:
        data = text.encode()
        add_bos = bool(ll.llama_vocab_get_add_bos(self.vocab))
        n_max = len(data) + 16
        buf = (ll.llama_token * n_max)()
        n = ll.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_bos, parse_special)
        if n < 0:
            raise EngineError(f"tokenization needs {-n} tokens, more than {n_max}")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode(errors="replace")

    def token_text(self, token: int) -> bytes:
        return ll.llama_vocab_get_text(self.vocab, token) or b""

    def is_eog(self, token: int) -> bool:
        return bool(ll.llama_vocab_is_eog(self.vocab, token))

    def format_chat(self, user_text: str, history: Sequence[tuple[str, str]] = ()) -> str:
        """The user message in the model's chat template, ready for the assistant's reply,
        after the earlier (user, assistant) turns of `history`; the plain texts one after the
        other when the model has no template (tiny test models)."""
        tmpl = ll.llama_model_chat_template(self.ptr, None)
        if not tmpl:
            return "".join(u + a for u, a in history) + user_text
        turns = [m for (u, a) in history for m in ((b"user", u), (b"assistant", a))]
        turns.append((b"user", user_text))
        msgs = (ll.llama_chat_message * len(turns))()
        keep = []   # the encoded contents must outlive the call
        for i, (role, text) in enumerate(turns):
            keep.append(text.encode())
            msgs[i].role = role
            msgs[i].content = keep[-1]
        size = 4 * sum(len(t) for _, t in turns) + 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = ll.llama_chat_apply_template(tmpl, msgs, len(turns), True, buf, size)
            if n < 0:
                raise EngineError("llama.cpp does not support this model's chat template")
            if n <= size:
                return buf.raw[:n].decode(errors="replace")
            size = n
        raise EngineError("chat template output did not fit")


def check_same_tokenizer(target: Model, draft: Model) -> None:
    """Speculative decoding compares token ids, so both models must mean the same by each id."""
    if abs(target.n_vocab - draft.n_vocab) > VOCAB_MAX_SIZE_DIFFERENCE:
        raise EngineError(f"the draft's vocabulary ({draft.n_vocab} tokens) differs from the "
                          f"target's ({target.n_vocab}): draft and target must share a tokenizer "
                          "(pick a draft from the same family)")
    for tok in range(min(target.n_vocab, draft.n_vocab)):
        if target.token_text(tok) != draft.token_text(tok):
            raise EngineError(
                f"the draft's tokenizer differs from the target's: token {tok} is "
                f"{draft.token_text(tok)!r} in the draft, {target.token_text(tok)!r} in the "
                "target: draft and target must share a tokenizer")


# llama.cpp's draft sampler keeps the 10 most likely tokens (common/speculative.cpp: top_k 10)
CONFIDENCE_TOP_K = 10


class Session:
    """One llama.cpp context holding one sequence; implements speculative.Decoder."""

    def __init__(self, model: Model, n_ctx: int, n_threads: int,
                 n_threads_batch: int | None = None, n_batch: int = 512):
        self.model = model
        self.n_vocab = model.n_vocab
        self.n_ctx = n_ctx
        params = ll.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = min(n_batch, n_ctx)
        params.n_seq_max = 1
        params.n_threads = n_threads
        params.n_threads_batch = n_threads_batch or n_threads
        # A CPU run on a GPU build (Metal by default on a Mac, CUDA, Vulkan): no layer offloaded
        # is not enough, llama.cpp still offloads large batches' ops of CPU-held weights to the
        # device (op_offload; llama.cpp #8164). Off where no layer is offloaded.
        self.op_offload = bool(getattr(model, "n_gpu_layers", 0))
        if hasattr(params, "op_offload"):
            params.op_offload = self.op_offload
        global _captured
        _captured = []
        try:
            self.ctx = ll.llama_init_from_model(model.ptr, params)
            lines = _captured
        finally:
            _captured = None
        # where the context's work and KV cache live, as llama.cpp reported it
        self.buffers = parse_context_buffers(lines)
        if not self.ctx:
            raise EngineError(f"llama.cpp could not create a context of {n_ctx} tokens")
        self.mem = ll.llama_get_memory(self.ctx)
        self.n_batch = params.n_batch
        self.batch = ll.llama_batch_init(self.n_batch, 0, 1)
        # Every batch slot belongs to sequence 0: set once, never touched again.
        for i in range(self.n_batch):
            self.batch.n_seq_id[i] = 1
            self.batch.seq_id[i][0] = SEQ
        self._is_eog = model.is_eog
        self._recurrent = bool(ll.llama_model_is_recurrent(model.ptr)
                               or ll.llama_model_is_hybrid(model.ptr))
        # a recurrent model's tokens at each position, what its state is rebuilt from (None:
        # not kept, for every other model, or not known after a decode past the end)
        self._held: list[int] | None = [] if self._recurrent else None

    def close(self) -> None:
        if self.ctx:
            ll.llama_batch_free(self.batch)
            ll.llama_free(self.ctx)
            self.ctx = None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def decode(self, tokens: Sequence[int], pos: int, n_out: int) -> None:
        """Decode tokens at positions pos.. with logits for the last n_out of them."""
        n = len(tokens)
        if not self.ctx:
            raise EngineError("this llama.cpp context is closed")
        if pos + n > self.n_ctx:
            raise EngineError(f"context full: {pos + n} tokens > n_ctx {self.n_ctx}")
        if n and not (0 <= min(tokens) and max(tokens) < self.n_vocab):
            bad = next(t for t in tokens if not 0 <= t < self.n_vocab)
            raise EngineError(f"token id {bad} is outside {self.model.path.name}'s vocabulary "
                              f"of {self.n_vocab}: draft and target must share a tokenizer")
        if self._held is not None and pos > len(self._held):
            self._held = None    # positions never seen: a recurrent state cannot be rebuilt
        elif self._held is not None:
            del self._held[pos:]
        for start in range(0, n, self.n_batch):  # long prompts go in n_batch-sized pieces
            chunk = tokens[start:start + self.n_batch]
            b = self.batch
            first_out = n - n_out - start
            for i, tok in enumerate(chunk):
                b.token[i] = tok
                b.pos[i] = pos + start + i
                b.logits[i] = i >= first_out
            b.n_tokens = len(chunk)
            rc = ll.llama_decode(self.ctx, b)
            interrupt.check()   # a Ctrl-C dropped inside a log callback is raised here
            if rc != 0:
                raise EngineError(f"llama_decode failed with code {rc}")
            if self._held is not None:
                self._held.extend(chunk)

    def logits(self, n_out: int) -> np.ndarray:
        """The last decode's last n_out logit rows, as an (n_out, n_vocab) view (no copy). Rows of
        outputs are contiguous in llama.cpp's buffer, in batch order."""
        if not self.ctx:
            raise EngineError("this llama.cpp context is closed")
        ptr = ll.llama_get_logits_ith(self.ctx, -n_out)
        if not ptr:
            raise EngineError("llama.cpp returned no logits")
        return np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab))

    def confidence(self) -> float:
        """The probability of the last decode's greedy token (its last logit row) over the 10
        most likely tokens, as llama.cpp's draft sampler (top-k 10, then softmax) gives it to
        --spec-draft-p-min."""
        top = np.partition(self.logits(1)[0], -CONFIDENCE_TOP_K)[-CONFIDENCE_TOP_K:]
        return float(1.0 / np.exp(top - top.max()).sum())

    def eval(self, tokens: Sequence[int], pos: int, n_out: int) -> list[int]:
        """The greedy token after each of the last n_out tokens. More than n_batch of them
        span several decodes, and llama.cpp keeps only the last one's logits: the tokens
        before them go in one decode, then each n_batch piece is read before the next."""
        # decode() splits at multiples of n_batch: the rows fit one decode when the last
        # n_out tokens all lie in its last piece
        last_piece = (len(tokens) - 1) // self.n_batch * self.n_batch if tokens else 0
        if len(tokens) - n_out >= last_piece:
            self.decode(tokens, pos, n_out)
            return self.logits(n_out).argmax(axis=1).tolist()
        head, out = len(tokens) - n_out, []
        if head:
            self.decode(tokens[:head], pos, 0)
        for start in range(head, len(tokens), self.n_batch):
            piece = tokens[start:start + self.n_batch]
            self.decode(piece, pos + start, len(piece))
            out += self.logits(len(piece)).argmax(axis=1).tolist()
        return out

    def truncate(self, pos: int) -> None:
        """Forget positions ≥ pos. A recurrent or hybrid model (Qwen3.5's delta-net layers)
        keeps one state, not one entry per position: llama.cpp cannot cut it back, so it is
        cleared and the tokens before pos decoded again (untimed by every caller)."""
        if ll.llama_memory_seq_rm(self.mem, SEQ, pos, -1):
            if self._held is not None:
                del self._held[pos:]
            return
        if not self._recurrent or self._held is None or pos > len(self._held):
            raise EngineError(f"llama.cpp could not remove KV positions ≥ {pos}")
        keep = self._held[:pos]
        self.clear()
        if keep:
            self.decode(keep, 0, 0)

    @property
    def recurrent(self) -> bool:
        """A recurrent or hybrid model: truncate() re-decodes, so only untimed callers may."""
        return self._recurrent

    def kv_len(self) -> int:
        """Positions held in the KV cache (llama.cpp's own count)."""
        return int(ll.llama_memory_seq_pos_max(self.mem, SEQ)) + 1

    def clear(self) -> None:
        ll.llama_memory_clear(self.mem, True)
        self._held = [] if self._recurrent else None

    def is_eog(self, token: int) -> bool:
        return self._is_eog(token)


def top2_margin(session: Session, prompt: Sequence[int], prefix: Sequence[int],
                keep: int = 0) -> tuple:
    """Replay plain decoding (prompt prefill, then one token per decode, as generate_raw does)
    and return (top-1 id, top-2 id, logit margin) of the target's choice after `prefix`.
    keep: the session holds prompt[:keep] already (a depth or a conversation, as the raw run
    had it): only the rest is read again, and prompt[:keep] stays in the KV cache."""
    if keep:
        session.truncate(keep)
    else:
        session.clear()
    session.decode(prompt[keep:], keep, 1)
    for i, tok in enumerate(prefix):
        session.decode([tok], len(prompt) + i, 1)
    row = session.logits(1)[0]
    top2 = np.argpartition(row, -2)[-2:]
    first, second = sorted(top2.tolist(), key=lambda t: -row[t])
    return first, second, float(row[first] - row[second])


# Quant types `cpuspec models derive` writes, by llama.cpp's names.
QUANT_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "Q4_K_S", "Q4_K_M", "Q5_K_S",
               "Q5_K_M", "Q6_K")


def quantize_gguf(src: Path, dst: Path, quant: str, pure: bool = True,
                  threads: int | None = None) -> None:
    """Requantize a GGUF with llama.cpp's own quantizer (what `llama-quantize
    --allow-requantize [--pure] SRC DST QUANT` does). `pure` keeps every tensor in `quant`,
    the tied output/embedding included, instead of the mixed K-quant recipe."""
    import os
    if quant not in QUANT_TYPES:
        raise EngineError(f"unknown quant {quant!r}; choose from {', '.join(QUANT_TYPES)}")
    init_backend()
    params = ll.llama_model_quantize_default_params()
    params.ftype = getattr(ll, f"LLAMA_FTYPE_MOSTLY_{quant}")
    params.allow_requantize = True
    params.pure = pure
    params.nthread = threads or os.cpu_count() or 1
    rc = ll.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise EngineError(f"llama.cpp could not quantize {src} to {quant} (code {rc})")


def quantize_in_child(src: Path, dst: Path, quant: str, pure: bool = True) -> None:
    """quantize_gguf in a child process: llama_model_quantize runs for minutes inside one C
    call, where no signal handler of this process can run, so Ctrl-C or SIGTERM stops the
    child instead (and the child dies with this process: PR_SET_PDEATHSIG)."""
    import subprocess
    import sys

    code = ("import sys; from pathlib import Path; from cpuspec.llama.engine import quantize_gguf, "
            "EngineError\ntry: quantize_gguf(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3],"
            " sys.argv[4] == '1')\nexcept EngineError as e: sys.exit(str(e))")
    import tempfile
    with tempfile.TemporaryFile("w+") as errors:
        proc = interrupt.start_child([sys.executable, "-c", code, str(src), str(dst), quant,
                                      "1" if pure else "0"], stdout=subprocess.DEVNULL,
                                     stderr=errors, text=True)
        interrupt.wait_child(proc)
        errors.seek(0)
        err = errors.read()
    if proc.returncode != 0:
        raise EngineError(err.strip().splitlines()[-1] if err.strip() else
                          f"llama.cpp could not quantize {src} to {quant} "
                          f"(exit {proc.returncode})")


def model_file_type(path: Path) -> str | None:
    """llama.cpp's name for a GGUF's declared file type (general.file_type), such as
    'Q4_K_M', read from the header without loading the weights; None when it declares none."""
    init_backend()
    params = ll.llama_model_default_params()
    params.vocab_only = True
    ptr = ll.llama_model_load_from_file(str(path).encode(), params)
    if not ptr:
        return None
    try:
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_model_meta_val_str(ptr, b"general.file_type", buf, len(buf))
        if n < 0:
            return None
        value = int(buf.value.decode())
    except ValueError:
        return None
    finally:
        ll.llama_model_free(ptr)
    names = {getattr(ll, a): a.removeprefix("LLAMA_FTYPE_MOSTLY_").removeprefix("LLAMA_FTYPE_")
             for a in dir(ll) if a.startswith("LLAMA_FTYPE_") and
             isinstance(getattr(ll, a), int) and a != "LLAMA_FTYPE_GUESSED"}
    return names.get(value, str(value))
