"""A file's sha256, computed once and remembered by path, size and mtime (known_files.json in
cpuspec's home), with where the file came from."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from cpuspec.inputs.refs.names import Log
from cpuspec.inputs.registry import cpuspec_home


# what is remembered of where a file came from (known_files.json)
ORIGIN_KEYS = ("repo", "revision", "file", "store", "verified", "public", "hf_ref")

HASH_CHUNK_BYTES = 1 << 22



def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


def _known_path() -> Path:
    return cpuspec_home() / "known_files.json"


def _known() -> dict:
    try:
        data = json.loads(_known_path().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError, RecursionError):   # RecursionError: nested past Python's depth
        return {}


def recall(path: Path) -> dict | None:
    """What is remembered of a file (sha256, where it came from), while its size and mtime are
    those it was hashed at."""
    try:
        real, st = str(Path(path).resolve()), Path(path).stat()
    except OSError:
        return None
    rec = _known().get(real)
    if isinstance(rec, dict) and rec.get("size_bytes") == st.st_size and \
            rec.get("mtime_ns") == st.st_mtime_ns and isinstance(rec.get("sha256"), str):
        return rec
    return None


def remember(path: Path, sha256: str, origin: dict | None = None) -> None:
    """Keep a file's sha256 (and origin) for next time; an origin remembered for other
    contents is dropped, and so is every file that is gone (the list never grows past the
    files there are). Under a lock (two cpuspec processes keep each other's entries). Best
    effort: a read-only home still works, it only hashes again."""
    from cpuspec.machine import osapi
    try:
        real, st = str(Path(path).resolve()), Path(path).stat()
        folder = _known_path().parent
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".known_files.lock", "w") as lock, osapi.current().locked(lock):
            known = {p: rec for p, rec in _known().items() if os.path.exists(p)}
            old = known.get(real) if isinstance(known.get(real), dict) else {}
            keep = {k: v for k, v in old.items() if k in ORIGIN_KEYS} \
                if old.get("sha256") == sha256 else {}
            known[real] = {**keep, **(origin or {}), "sha256": sha256,
                           "size_bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
            fd, tmp = tempfile.mkstemp(prefix=".known_files.", dir=folder)
            try:   # written whole, then renamed: a crash never leaves half a file
                with os.fdopen(fd, "w") as f:
                    json.dump(known, f, indent=0)
                os.replace(tmp, _known_path())
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    except OSError:
        pass


def file_sha256(path: Path, log: Log = lambda _: None) -> str:
    """The file's sha256, hashed once (recall/remember)."""
    rec = recall(path)
    if rec:
        return rec["sha256"]
    size = Path(path).stat().st_size
    if size > 1 << 30:
        log(f"hashing {Path(path).name} ({size / 1e9:.1f} GB) once; remembered after")
    digest = sha256_file(path)
    remember(path, digest)
    return digest
