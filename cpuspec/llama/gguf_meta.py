"""A GGUF file's scalar and small-array metadata, read with gguf-py's reader (the tokenizer's
long arrays skipped): what the checks need to know before llama.cpp loads anything."""
from __future__ import annotations

from pathlib import Path
from typing import Callable


class GGUFMetaError(ValueError):
    """Not a readable GGUF file."""


def read_meta(path: Path, max_array: int = 64) -> dict:
    """key → value for every scalar and every array of at most max_array items."""
    from gguf import GGUFReader
    try:
        reader = GGUFReader(path)
    except (OSError, ValueError, IndexError, KeyError) as exc:   # KeyError: a key twice
        raise GGUFMetaError(f"{Path(path).name}: not a readable GGUF file ({exc})") from None
    out = {}
    for name, field in reader.fields.items():
        if len(field.data) > max_array:
            continue
        try:
            out[name] = field.contents()
        except (ValueError, IndexError, TypeError):
            continue
    return out


def tokenizer_of(path: Path) -> tuple[str | None, list[str]]:
    """A GGUF's tokenizer: its kind (tokenizer.ggml.model) and its tokens' texts."""
    from gguf import GGUFReader
    try:
        return _tokenizer(GGUFReader(path))
    except (OSError, ValueError, IndexError, KeyError) as exc:   # KeyError: a key twice
        raise GGUFMetaError(f"{Path(path).name}: not a readable GGUF file ({exc})") from None


def _tokenizer(reader) -> tuple[str | None, list[str]]:
    kind = reader.fields.get("tokenizer.ggml.model")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    return (str(kind.contents()) if kind is not None else None,
            list(tokens.contents()) if tokens is not None else [])


HEAD_FIRST = 16 << 20    # bytes read first: a 150 000-token vocabulary's header is ~8 MB
HEAD_MAX = 1 << 30       # no GGUF header is larger; past it the file is not a GGUF


def tokenizer_of_head(read: Callable[[int], bytes], size: int, name: str
                      ) -> tuple[str | None, list[str]]:
    """tokenizer_of for a file of `size` bytes that is not on this machine, from its first
    bytes only (read(n): the first n): gguf-py reads a sparse file of the same size holding
    them, and a header that runs past them (its data offset beyond, or the zeros after them
    read as keys) is read again four times longer."""
    import errno
    import tempfile
    if size <= 0:
        raise GGUFMetaError(f"{name}: not a GGUF file (0 bytes)")
    n = min(HEAD_FIRST, size)
    while True:
        head = read(n)
        try:
            got, why = _parse_head(head, size)
        except OSError as exc:
            raise GGUFMetaError(
                f"{name}: its listed size, {size} bytes, is not one a file here can have"
                if exc.errno == errno.EFBIG else f"{name}: its header could not be read into "
                f"{tempfile.gettempdir()} ({exc.strerror}): set TMPDIR to a folder with room") \
                from None
        if got is not None:
            return got
        if len(head) < n or n >= min(size, HEAD_MAX):
            raise GGUFMetaError(f"{name}: not a readable GGUF file ({why})")
        n = min(4 * n, size, HEAD_MAX)


def _parse_head(head: bytes, size: int) -> tuple[tuple | None, str]:
    """(tokenizer, '') where `head` holds the whole header of a GGUF of `size` bytes, else
    (None, why not): gguf-py reads a sparse temporary file of that size holding `head`."""
    import tempfile
    from gguf import GGUFReader
    with tempfile.NamedTemporaryFile(suffix=".gguf") as tmp:
        tmp.write(head)
        tmp.truncate(size)
        tmp.flush()
        try:
            reader = GGUFReader(tmp.name)
            if reader.data_offset <= len(head):
                return _tokenizer(reader), ""
            return None, "its header runs past the bytes read"
        except (ValueError, IndexError, KeyError) as exc:
            return None, str(exc)


def tokenizer_mismatch(target: tuple[str | None, list[str]],
                       draft: tuple[str | None, list[str]], max_size_difference: int) -> str | None:
    """Why a draft cannot draft for a target (None: it can): the check the engine applies to
    loaded models (llama/engine.py check_same_tokenizer), read from the files."""
    (tkind, ttok), (dkind, dtok) = target, draft
    if not dtok:
        return "no tokenizer in the file"
    if tkind != dkind:
        return f"another tokenizer kind ({dkind} against the target's {tkind})"
    if abs(len(ttok) - len(dtok)) > max_size_difference:
        return f"another vocabulary ({len(dtok)} tokens against the target's {len(ttok)})"
    for i, (a, b) in enumerate(zip(ttok, dtok)):
        if a != b:
            return f"another tokenizer (token {i} is {b!r}, the target's {a!r})"
    return None


def tokenizer_fingerprint(tokenizer: tuple[str | None, list[str]], hashed: int) -> str:
    """sha256 of a tokenizer's first `hashed` tokens' texts (each UTF-8, after its length as
    4 bytes): what models.toml records of a model so that a target can be checked against it
    without its file."""
    import hashlib
    h = hashlib.sha256()
    for text in tokenizer[1][:hashed]:
        b = text.encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(4, "little") + b)
    return h.hexdigest()


def fingerprint_mismatch(target: tuple[str | None, list[str]], pin, max_size_difference: int
                         ) -> str | None:
    """tokenizer_mismatch against a registered model's recorded tokenizer (`pin`: its kind,
    its number of tokens, and the sha256 of its first `hashed`): the same rule, with the
    tokens past `hashed` left to the check when both are loaded."""
    kind, tokens = target
    if pin.hashed < pin.tokens - max_size_difference:   # a hand-made record: too few checked
        return (f"its recorded fingerprint covers {pin.hashed} of its {pin.tokens} tokens, "
                f"fewer than the {pin.tokens - max_size_difference} any target shares")
    if kind != pin.kind:
        return f"another tokenizer kind ({pin.kind} against the target's {kind})"
    if abs(len(tokens) - pin.tokens) > max_size_difference:
        return f"another vocabulary ({pin.tokens} tokens against the target's {len(tokens)})"
    if len(tokens) < pin.hashed or tokenizer_fingerprint(target, pin.hashed) != pin.sha256:
        return "another tokenizer (its recorded fingerprint differs)"
    return None
