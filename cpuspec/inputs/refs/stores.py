"""Where GGUF files already lie on this machine, used in place: huggingface-hub's cache (which
llama.cpp's -hf and llama-cpp-python's from_pretrained fill too; LLAMA_CACHE where set),
LM Studio's models folder, llama.cpp's older flat cache, Ollama's blobs, cpuspec's own."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cpuspec.inputs.refs.names import (SPLIT, Ref, RefError, hub_ready, is_model_file,
                                       parse_ref, split_parts)
from cpuspec.inputs.registry import ModelError


OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"

MANIFEST_MAX = 1 << 20    # bytes read of an Ollama manifest



def hf_cache_dirs() -> list[Path]:
    """huggingface-hub's cache (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub) and
    LLAMA_CACHE where set (llama.cpp uses it as a hub-layout folder). RefError where
    huggingface-hub cannot start (an HF_ENDPOINT that is no URL)."""
    out = []
    if os.environ.get("LLAMA_CACHE"):
        out.append(Path(os.environ["LLAMA_CACHE"]))
    try:
        hub_ready()   # an HF_ENDPOINT that is no URL: one line (RefError), not a traceback
        from huggingface_hub import constants
        out.append(Path(constants.HF_HUB_CACHE))
    except ImportError:
        out.append(Path.home() / ".cache" / "huggingface" / "hub")
    return list(dict.fromkeys(out))


def lmstudio_models() -> Path | None:
    """LM Studio's models folder: LMSTUDIO_HOME, ~/.lmstudio-home-pointer, ~/.cache/lm-studio
    or ~/.lmstudio; its settings.json's downloadsFolder where set, else <home>/models."""
    home = None
    if os.environ.get("LMSTUDIO_HOME"):
        home = Path(os.environ["LMSTUDIO_HOME"])
    else:
        pointer = Path.home() / ".lmstudio-home-pointer"
        try:
            text = pointer.read_text().strip() if pointer.is_file() else ""
            home = Path(text) if text and Path(text).is_absolute() else None
        except (OSError, ValueError):   # unreadable, or not text
            home = None
        if home is None:
            legacy = Path.home() / ".cache" / "lm-studio"
            home = legacy if legacy.is_dir() else Path.home() / ".lmstudio"
    try:
        folder = json.loads((home / "settings.json").read_text()).get("downloadsFolder")
        # an absolute folder below the root only: '/' would make every GGUF LM Studio's
        if isinstance(folder, str) and Path(folder).is_absolute() and Path(folder).parent != \
                Path(folder):
            return Path(folder)
    except (OSError, ValueError, AttributeError):
        pass
    return home / "models"


def llamacpp_flat_cache() -> Path:
    """llama.cpp's older -hf cache (OWNER_REPO_FILE.gguf in one folder)."""
    if os.environ.get("LLAMA_CACHE"):
        return Path(os.environ["LLAMA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llama.cpp"


def ollama_roots() -> list[Path]:
    """Ollama's stores that can be read: $OLLAMA_MODELS, else the user's and the service's
    (a service home this user may not enter is left out, not an error)."""
    if os.environ.get("OLLAMA_MODELS"):
        roots = [Path(os.environ["OLLAMA_MODELS"])]
    else:
        roots = [Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]
    out = []
    for r in roots:
        try:
            r.is_dir() and os.listdir(r)
            out.append(r)
        except OSError:   # not searchable by this user
            continue
    return out


def snapshot(repo_dir: Path, revision: str | None) -> Path | None:
    """A hub-cache repo folder's snapshot for `revision` (a branch via refs/, or a commit)."""
    rev = revision or "main"
    ref = repo_dir / "refs" / rev
    try:
        commit = ref.read_text().strip() if ref.is_file() else rev
    except (OSError, ValueError):   # unreadable, or not text
        return None
    if not re.fullmatch(r"[0-9a-f]{40}", commit):   # refs hold a commit, nothing else
        return None
    snap = repo_dir / "snapshots" / commit
    return snap if snap.is_dir() else None


@dataclass
class Copy:
    """One store's copy of (some of) a repo's files: repo path → file on this machine."""
    store: str
    commit: str | None       # a hub-cache snapshot's commit
    files: dict[str, Path]


def copies(repo: str, revision: str | None) -> list[Copy]:
    """The copies of a repo's GGUFs on this machine, store by store: huggingface-hub's cache
    (and LLAMA_CACHE), then LM Studio's folder (which keeps no revision: used only where none
    is asked). Files only (a snapshot link whose blob is gone is no copy)."""
    out: list[Copy] = []
    folder = "models--" + repo.replace("/", "--")
    for cache in hf_cache_dirs():
        snap = snapshot(cache / folder, revision)
        if snap is not None:
            files = {f.relative_to(snap).as_posix(): f for f in sorted(snap.rglob("*.gguf"))
                     if f.is_file()}
            out.append(Copy("huggingface-hub cache", snap.name, files))
    if revision is not None:
        return out
    lms = lmstudio_models()
    if lms is not None and (lms / repo).is_dir() and \
            (lms / repo).resolve().is_relative_to(lms.resolve()):
        out.append(Copy("LM Studio", None, {
            f.relative_to(lms / repo).as_posix(): f for f in sorted((lms / repo).rglob("*.gguf"))
            if f.is_file()}))
    # llama.cpp's older flat cache (OWNER_REPO_FILE.gguf) is not read as a repo's copy: its
    # names cannot say where the repo's name ends (acme_tiny_v2_m.gguf); it is listed, by path
    return [c for c in out if c.files]


def _ollama_manifest(name: str, tag: str) -> tuple[Path, Path] | None:
    """(manifest, models root) of an installed Ollama model, as Ollama names it: NAME is
    [HOST/][NAMESPACE/]MODEL (registry.ollama.ai and library by default)."""
    parts = name.split("/")
    if len(parts) > 3:
        return None
    host, ns, model = ["registry.ollama.ai", "library"][:3 - len(parts)] + parts
    for root in ollama_roots():
        base = root / "manifests" / host / ns
        want = base / model / tag
        if want.is_file():
            return want, root
        if base.is_dir():   # Ollama compares names case-insensitively
            for m in base.iterdir():
                if m.name.lower() == model.lower() and m.is_dir():
                    for t in m.iterdir():
                        if t.name.lower() == tag.lower() and t.is_file():
                            return t, root
    return None


def ollama_public(name: str) -> bool:
    """An Ollama name anyone can pull: the library's (a hub repo pulled through hf.co may be
    a private one, pulled with a key)."""
    return "/" not in name


def ollama_blob(ref: Ref) -> Path:
    """An installed Ollama model's GGUF blob (its manifest's model layer), not yet hashed."""
    found = _ollama_manifest(ref.repo, ref.tag)
    if found is None:
        roots = ", ".join(str(r) for r in ollama_roots())
        raise RefError(f"{ref.text}: not installed in Ollama (looked in {roots}; OLLAMA_MODELS "
                       f"names another store); `ollama pull {ref.repo}:{ref.tag}` installs it")
    manifest, root = found
    try:
        with open(manifest, "rb") as f:   # a manifest is ~1 KB: a larger file is none
            text = f.read(MANIFEST_MAX + 1)
        if len(text) > MANIFEST_MAX:
            raise ValueError("too large")
        layers = json.loads(text).get("layers") or []
        layer = next(x for x in layers if isinstance(x, dict)
                     and x.get("mediaType") == OLLAMA_MODEL_LAYER)
        digest = str(layer["digest"])
    except (OSError, ValueError, StopIteration, KeyError, AttributeError):
        raise RefError(f"{ref.text}: its manifest ({manifest}) names no model layer") from None
    m = re.fullmatch(r"sha256[:-]([0-9a-f]{64})", digest)
    blob = root / "blobs" / f"sha256-{m.group(1)}" if m else None
    if blob is None or not blob.is_file():
        raise RefError(f"{ref.text}: its model layer {digest[:20]}… is missing from "
                       f"{root / 'blobs'}")
    with open(blob, "rb") as f:
        if f.read(4) != b"GGUF":
            raise RefError(f"{ref.text}: its model layer is not a GGUF file (a model Ollama "
                           "stores in another format); pass a .gguf instead")
    return blob


@dataclass(frozen=True)
class LocalGGUF:
    store: str
    ref: str        # how to name it to cpuspec
    path: Path
    size: int


def local_ggufs() -> list[LocalGGUF]:
    """Every GGUF model file cpuspec can see on this machine, by store (first parts only):
    huggingface-hub's caches, LM Studio, llama.cpp's flat cache, Ollama, cpuspec's own."""
    out: list[LocalGGUF] = []
    for store, ref, path in [*_hub_cache_files(), *_lmstudio_files(), *_flat_cache_files(),
                             *_ollama_files(), *_own_files()]:
        try:   # regular files only: a FIFO would block whoever reads it, a folder is none
            parts = _parts_on_disk(path)
            if all(p.is_file() for p in parts):
                out.append(LocalGGUF(store, ref, path, sum(p.stat().st_size for p in parts)))
        except OSError:
            continue
    return out


def _hub_cache_files():
    """(store, name, path) of each model in huggingface-hub's caches: OWNER/REPO/FILE."""
    for cache in hf_cache_dirs():
        for repo_dir in sorted(cache.glob("models--*--*")) if cache.is_dir() else []:
            repo = repo_dir.name.removeprefix("models--").replace("--", "/", 1)
            snap = snapshot(repo_dir, None)
            for f in sorted(snap.rglob("*.gguf")) if snap else []:
                rel = f.relative_to(snap).as_posix()
                if _first_part(rel):
                    yield "huggingface-hub cache", f"{repo}/{rel}", f


def _lmstudio_files():
    """(store, name, path) of each model in LM Studio's folder (lmstudio_name)."""
    lms = lmstudio_models()
    for f in sorted(lms.glob("*/*/**/*.gguf")) if lms is not None and lms.is_dir() else []:
        rel = f.relative_to(lms).as_posix()
        if _first_part(rel):
            yield "LM Studio", lmstudio_name(rel) or str(f), f


def _flat_cache_files():
    """(store, path, path) of each model in llama.cpp's older flat cache: by path."""
    flat = llamacpp_flat_cache()
    for f in sorted(flat.glob("*.gguf")) if flat.is_dir() else []:
        if _first_part(f.name):
            yield "llama.cpp cache", str(f), f


def _ollama_files():
    """(store, ollama:NAME:TAG, blob) of each installed Ollama model whose model layer is a
    file here (the blob's name is its sha256: listing hashes nothing)."""
    for root in ollama_roots():
        for manifest in sorted(root.glob("manifests/*/*/*/*")) if root.is_dir() else []:
            host, ns, model, tag = manifest.parts[-4:]
            name = model if (host, ns) == ("registry.ollama.ai", "library") else \
                f"{host}/{ns}/{model}"
            try:
                blob = ollama_blob(Ref("ollama", f"ollama:{name}:{tag}", repo=name, tag=tag))
            except RefError:
                continue
            yield "Ollama", f"ollama:{name}:{tag}", blob


def _own_files():
    """(store, name, path) of each model in cpuspec's folder: a registered one (fetched or
    derived) by its registered name, any other by its path; shape-true files left out."""
    from cpuspec.inputs.registry import derived_cache_path, load_registry, models_dir
    own = models_dir()
    try:
        reg = load_registry()
        names = {own / s.file: n for n, s in reg.models.items()}
        names.update({derived_cache_path(s, reg): n for n, s in reg.models.items()
                      if s.derive_from})
    except ModelError:
        names = {}
    for f in sorted(own.rglob("*.gguf")) if own.is_dir() else []:
        if "shape-true" not in f.parts:
            yield "cpuspec", names.get(f, str(f)), f


def lmstudio_name(rel: str) -> str | None:
    """The name an LM Studio model (PUBLISHER/REPO/FILE below its folder) is given by:
    PUBLISHER/REPO/FILE, as the hub's files are named (copies() finds it in LM Studio's
    folder, offline too), where it reads as one; None: by its path."""
    try:
        ref = parse_ref(rel)
    except RefError:
        return None
    return rel if ref.kind == "hf" and ref.file and ref.repo == "/".join(rel.split("/")[:2]) \
        else None


def _first_part(rel: str) -> bool:
    m = SPLIT.match(rel.removesuffix(".gguf"))
    return is_model_file(rel) and (m is None or m.group(2) == "00001")


def size_on_disk(path: Path) -> int:
    """A model file's bytes, every part of a split one (OSError where one is missing)."""
    return sum(p.stat().st_size for p in _parts_on_disk(path))


def _parts_on_disk(path: Path) -> list[Path]:
    m = SPLIT.match(path.name.removesuffix(".gguf"))
    if not m:
        return [path]
    return [path.with_name(p) for p in split_parts(path.name)]
