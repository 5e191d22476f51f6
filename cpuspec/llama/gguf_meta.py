"""A GGUF file's scalar and small-array metadata, read with gguf-py's reader (the tokenizer's
long arrays skipped): what the checks need to know before llama.cpp loads anything."""
from __future__ import annotations

from pathlib import Path


class GGUFMetaError(ValueError):
    """Not a readable GGUF file."""


def read_meta(path: Path, max_array: int = 64) -> dict:
    """key → value for every scalar and every array of at most max_array items."""
    from gguf import GGUFReader
    try:
        reader = GGUFReader(path)
    except (OSError, ValueError, IndexError) as exc:
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
