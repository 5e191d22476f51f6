"""A model by the name its owner already uses: a path, a Hugging Face reference as llama.cpp's
`-hf` takes it (`OWNER/REPO[:QUANT]`, `OWNER/REPO/FILE.gguf`, `hf://OWNER/REPO[@REV]/FILE`), or an
installed Ollama model (`ollama:NAME[:TAG]`); registered names (models.toml) are the registry's.

A file already on this machine is used where it is, never copied: huggingface-hub's cache (which
llama.cpp's `-hf` and llama-cpp-python's `from_pretrained` fill too; LLAMA_CACHE where set),
LM Studio's models folder, llama.cpp's older flat cache, Ollama's blobs. Its sha256 is computed
once and remembered by path, size and mtime (`known_files.json` in cpuspec's home), with where the
file came from: a results file names the repo, revision, file and sha256 of each model.

Hub files come through huggingface-hub (its cache, token, HF_HUB_OFFLINE and HF_ENDPOINT), are
checked against the hub's size and sha256, and a download cut short is never used (the hub
client removes its partial file)."""
from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cpuspec.inputs.registry import ModelError, cpuspec_home

Log = Callable[[str], None]
OLLAMA_PREFIX = "ollama:"
HF_PREFIX = "hf://"
# llama.cpp's choice when a repo is named without a quant (common/download.cpp find_best_model)
DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")
# file names that are not a model of their own (llama.cpp's gguf_filename_is_model)
NOT_A_MODEL = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
SPLIT = re.compile(r"^(.+)-(\d{5})-of-(\d{5})$", re.I)
REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
MANIFEST_MAX = 1 << 20    # bytes read of an Ollama manifest
# what is remembered of where a file came from (known_files.json)
ORIGIN_KEYS = ("repo", "revision", "file", "store", "verified", "public", "hf_ref")
HASH_CHUNK_BYTES = 1 << 22
# A hub that does not answer a TCP connect within this time is treated as unreachable.
HUB_PROBE_TIMEOUT_S = 3.0


class RefError(ModelError):
    """A model reference that cannot be resolved; the message says why and what to do."""


@dataclass(frozen=True)
class Ref:
    """A parsed reference. kind: path, hf, ollama or name (a models.toml entry)."""
    kind: str
    text: str
    repo: str | None = None       # hf: OWNER/REPO; ollama: NAME
    quant: str | None = None      # hf: the tag after ':'
    file: str | None = None       # hf: a file in the repo
    revision: str | None = None   # hf: @REV of hf://
    tag: str | None = None        # ollama


def _local_folder(text: str) -> bool:
    """The reference's first component is a folder here (./models/...): a relative path the
    user mistyped, said as a missing file, never sent to the hub as OWNER/REPO."""
    first = text.split("/", 1)[0]
    try:
        return "/" in text and bool(first) and Path(first).is_dir()
    except OSError:
        return False


def parse_ref(text: str, registered: set[str] = frozenset()) -> Ref:
    """What a --target/--draft value names. An existing path always wins; then ollama: and
    hf://; then a registered name; then OWNER/REPO[:QUANT] and OWNER/REPO/FILE.gguf; anything
    else is a path (that check_model_file then refuses if it is missing)."""
    text = str(text).strip()
    if not text:
        raise RefError("an empty model reference: give a .gguf path, OWNER/REPO[:QUANT] or "
                       "ollama:NAME[:TAG]")
    p = Path(text).expanduser()
    try:
        here = p.exists()
    except OSError:   # a name too long to be a path here
        here = False
    if here:
        return Ref("path", str(p))
    if text.startswith(OLLAMA_PREFIX):
        name = text[len(OLLAMA_PREFIX):]
        name, _, tag = name.rpartition(":") if ":" in name.split("/")[-1] else (name, "", "")
        if not name or not re.fullmatch(r"[\w.:/-]+", name) or ".." in name:
            raise RefError(f"{text!r}: an Ollama reference is ollama:NAME[:TAG], e.g. "
                           "ollama:qwen2.5-coder:1.5b")
        return Ref("ollama", text, repo=name, tag=tag or "latest")
    if text.startswith(HF_PREFIX):
        rest = text[len(HF_PREFIX):].removeprefix("models/")
        m = re.fullmatch(r"([\w.-]+/[\w.-]+)(?:@([\w.-]+))?(?:/(.+))?", rest)
        if not m:
            raise RefError(f"{text!r}: a hub reference is hf://OWNER/REPO[@REV][/FILE.gguf]")
        repo, rev, file = m.groups()
        if rev is not None and (rev in (".", "..") or rev.startswith(".")):
            raise RefError(f"{text!r}: {rev!r} is not a revision (a branch, tag or commit)")
        return Ref("hf", text, repo=_repo_id(repo, text), file=_in_repo(file, text),
                   revision=rev)
    if text in registered:
        return Ref("name", text)
    if _local_folder(text):   # models/qwen, models/q/qwen.gguf: a path mistyped, not a repo
        return Ref("path", str(p))
    head, _, quant = text.partition(":")
    if REPO.fullmatch(head) and not text.endswith(".gguf"):
        if ":" in text and not re.fullmatch(r"[\w.-]+", quant):
            raise RefError(f"{text!r}: a hub reference is OWNER/REPO[:QUANT], e.g. "
                           "unsloth/Qwen3-0.6B-GGUF:Q8_0")
        return Ref("hf", text, repo=_repo_id(head, text), quant=quant or None)
    parts = text.split("/")
    if text.endswith(".gguf") and len(parts) >= 3 and not text.startswith(("/", ".", "~")) \
            and REPO.fullmatch("/".join(parts[:2])):
        return Ref("hf", text, repo=_repo_id("/".join(parts[:2]), text),
                   file=_in_repo("/".join(parts[2:]), text))
    return Ref("path", str(p))


def _hub_ready() -> None:
    """huggingface-hub imported; it reads HF_ENDPOINT when imported and refuses one that is
    no URL (ValueError), said in one line."""
    try:
        import huggingface_hub.constants  # noqa: F401
    except ValueError as exc:
        raise RefError(f"huggingface-hub cannot start: {exc} (is HF_ENDPOINT "
                       f"{os.environ.get('HF_ENDPOINT', '')!r} a URL?)") from None


def _repo_id(repo: str, text: str) -> str:
    """A repo id the hub accepts (huggingface-hub's own rule: no '..', '--', leading or
    trailing '.' or '-', at most 96 characters)."""
    _hub_ready()
    from huggingface_hub.utils import validate_repo_id
    try:
        validate_repo_id(repo)
    except ValueError:
        raise RefError(f"{text!r}: {repo!r} is not a Hugging Face repo id (OWNER/REPO)") \
            from None
    return repo


def _plain(path: str) -> bool:
    """A path inside a repo that names nothing outside it and carries no control character."""
    return not (path.startswith("/") or {".", "..", ""} & set(path.split("/"))
                or re.search(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", path))


def _in_repo(file: str | None, text: str) -> str | None:
    """A file's path inside a repo: relative, no '.' or '..' part."""
    if file is not None and not _plain(file):
        raise RefError(f"{text!r}: {file!r} is not a path inside a repo")
    return file


# ---------------------------------------------------------------- the hash cache

def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def hub_unreachable() -> str | None:
    """None where the hub answers; else why not, in words. One quick request through
    huggingface-hub's own HTTP session (so its proxies, HTTPS_PROXY / HTTP_PROXY / NO_PROXY,
    and HF_ENDPOINT apply, as to every download after it), so an unreachable hub costs
    seconds, not huggingface-hub's retry loop (five retries with back-off per file)."""
    from huggingface_hub import constants
    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    endpoint = constants.ENDPOINT
    try:
        from huggingface_hub import get_session   # reads HF_ENDPOINT when first imported
        get_session().head(endpoint, timeout=HUB_PROBE_TIMEOUT_S)
        return None
    except Exception as exc:   # connection, proxy, TLS, a malformed HF_ENDPOINT: one line
        proxy = _proxy_for(endpoint)
        how = f"through the proxy {proxy}" if proxy else f"at {endpoint}"
        return f"the hub did not answer {how} ({type(exc).__name__})"


def _proxy_for(url: str) -> str | None:
    """The proxy a request to url goes through, as the environment sets it (NO_PROXY kept)."""
    try:
        host = urllib.parse.urlparse(url).hostname or ""
        if urllib.request.proxy_bypass(host):
            return None
        return urllib.request.getproxies().get(urllib.parse.urlparse(url).scheme)
    except (ValueError, TypeError):
        return None


def hub_reachable() -> bool:
    global _LAST_UNREACHABLE
    _LAST_UNREACHABLE = hub_unreachable()
    return _LAST_UNREACHABLE is None


# why the hub was out of reach when last asked (said in the error that follows it)
_LAST_UNREACHABLE: str | None = None


def _known_path() -> Path:
    return cpuspec_home() / "known_files.json"


def _known() -> dict:
    try:
        data = json.loads(_known_path().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
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
    contents is dropped. Under a lock (two cpuspec processes keep each other's entries). Best
    effort: a read-only home still works, it only hashes again."""
    from cpuspec.machine import osapi
    try:
        real, st = str(Path(path).resolve()), Path(path).stat()
        folder = _known_path().parent
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".known_files.lock", "w") as lock, osapi.current().locked(lock):
            known = _known()
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


# ---------------------------------------------------------------- the stores

def hf_cache_dirs() -> list[Path]:
    """huggingface-hub's cache (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub) and
    LLAMA_CACHE where set (llama.cpp uses it as a hub-layout folder)."""
    out = []
    if os.environ.get("LLAMA_CACHE"):
        out.append(Path(os.environ["LLAMA_CACHE"]))
    try:
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
    if os.environ.get("OLLAMA_MODELS"):
        return [Path(os.environ["OLLAMA_MODELS"])]
    return [Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]


def _snapshot(repo_dir: Path, revision: str | None) -> Path | None:
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
class _Copy:
    """One store's copy of (some of) a repo's files: repo path → file on this machine."""
    store: str
    commit: str | None       # a hub-cache snapshot's commit
    files: dict[str, Path]


def _copies(repo: str, revision: str | None) -> list[_Copy]:
    """The copies of a repo's GGUFs on this machine, store by store: huggingface-hub's cache
    (and LLAMA_CACHE), then LM Studio's folder (which keeps no revision: used only where none
    is asked). Files only (a snapshot link whose blob is gone is no copy)."""
    out: list[_Copy] = []
    folder = "models--" + repo.replace("/", "--")
    for cache in hf_cache_dirs():
        snap = _snapshot(cache / folder, revision)
        if snap is not None:
            files = {f.relative_to(snap).as_posix(): f for f in sorted(snap.rglob("*.gguf"))
                     if f.is_file()}
            out.append(_Copy("huggingface-hub cache", snap.name, files))
    if revision is not None:
        return out
    lms = lmstudio_models()
    if lms is not None and (lms / repo).is_dir() and \
            (lms / repo).resolve().is_relative_to(lms.resolve()):
        out.append(_Copy("LM Studio", None, {
            f.relative_to(lms / repo).as_posix(): f for f in sorted((lms / repo).rglob("*.gguf"))
            if f.is_file()}))
    # llama.cpp's older flat cache (OWNER_REPO_FILE.gguf) is not read as a repo's copy: its
    # names cannot say where the repo's name ends (acme_tiny_v2_m.gguf); it is listed, by path
    return [c for c in out if c.files]


def is_model_file(path: str) -> bool:
    """A model file as llama.cpp's -hf takes one (common/download.cpp,
    gguf_filename_is_model): case-sensitive, so `X-MTP-Q4_K_M.gguf` is a model to llama.cpp,
    and cpuspec must pick what llama.cpp would."""
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".gguf") and not any(s in name for s in NOT_A_MODEL)


def split_parts(path: str) -> list[str]:
    """A split model's parts in order (the file alone where it is not split)."""
    m = SPLIT.match(path.removesuffix(".gguf"))
    if not m:
        return [path]
    count = m.group(3)
    return [f"{m.group(1)}-{i:05d}-of-{count}.gguf" for i in range(1, int(count) + 1)]


def pick_file(files: list[str], quant: str | None, repo: str) -> str:
    """llama.cpp's choice (common/download.cpp find_best_model): the first model file whose
    path holds QUANT followed by '.' or '-' (any case; a split model by its first part);
    without a quant Q4_K_M, then Q8_0, then the first model file."""
    models = [f for f in files if is_model_file(f)]
    firsts = [f for f in models if not SPLIT.match(f.removesuffix(".gguf"))
              or SPLIT.match(f.removesuffix(".gguf")).group(2) == "00001"]
    for tag in ([quant] if quant else list(DEFAULT_QUANTS)):
        pattern = re.compile(re.escape(tag) + r"[.-]", re.I)
        hit = next((f for f in firsts if pattern.search(f)), None)
        if hit:
            return hit
    if not quant and firsts:
        return firsts[0]
    have = sorted({q for f in firsts if (q := quant_of(f))})
    if quant:
        raise RefError(f"{repo} has no {quant} GGUF; it has: {', '.join(have) or 'none'} "
                       f"(e.g. {repo}:{have[0] if have else 'Q4_K_M'})")
    raise RefError(f"{repo} holds no GGUF model file")


def quant_of(name: str) -> str | None:
    """The quant in a GGUF's file name (Q4_K_M, Q8_0, IQ4_XS, F16, BF16, MXFP4 ...)."""
    stem = SPLIT.sub(r"\1", name.rsplit("/", 1)[-1].removesuffix(".gguf"))
    m = re.search(r"(?:^|[-._])((?:I?Q\d+(?:_[A-Z0-9]+)*)|BF16|F16|F32|MXFP4(?:_MOE)?)$",
                  stem, re.I)
    return m.group(1).upper() if m else None


# ---------------------------------------------------------------- resolving

@dataclass
class Resolved:
    """A reference resolved to a file on this machine (the first part of a split model)."""
    path: Path
    sha256: str
    origin: dict   # repo, revision, file, store, verified, public


@dataclass
class Plan:
    """What resolving a reference will do, decided before anything is downloaded: the file
    picked (its parts), the hub's commit and each part's size and sha256 (None offline), the
    copy on this machine that holds every part (None: a download)."""
    ref: Ref
    name: str
    parts: list[str]
    commit: str | None = None
    meta: dict | None = None
    copy: _Copy | None = None
    public: bool = False
    blob: Path | None = None   # ollama: the model layer's blob
    hf_ref: str | None = None  # the name llama.cpp's -hf picks this file by (llama_cpp_name)

    def missing_bytes(self) -> int:
        if self.copy is not None or self.blob is not None or not self.meta:
            return 0
        return sum(self.meta[p].get("size") or 0 for p in self.parts)


def plan_ref(ref: Ref) -> Plan | None:
    """The plan of a hub or Ollama reference (RefError where it cannot be resolved: an unknown
    repo, a quant it lacks, a gated repo, a missing part, an Ollama model not installed); None
    for a path or a registered name."""
    if ref.kind == "ollama":
        blob = _ollama_blob(ref)
        return Plan(ref, blob.name, [blob.name], blob=blob, public=_ollama_public(ref.repo))
    if ref.kind != "hf":
        return None
    listed = _listing(ref.repo, ref.revision)
    copies = _copies(ref.repo, ref.revision)
    if listed is None:   # offline: what this machine holds of the repo, by the same rule
        for copy in copies:
            try:
                name = ref.file or pick_file(list(copy.files), ref.quant, ref.repo)
            except RefError:
                continue
            parts = split_parts(name)
            if all(p in copy.files for p in parts):
                return Plan(ref, name, parts, copy.commit, None, copy)
        where = "no copy of it" if not copies else "no whole copy of that file"
        raise RefError(f"{ref.text}: {where} on this machine, and the hub is out of reach: "
                       f"{_LAST_UNREACHABLE or 'offline, or no network'}")
    commit, files, private = listed
    # a name the listing gave is used only as a plain path inside the repo
    files = {f: m for f, m in files.items() if _plain(f)}
    name = ref.file or pick_file(list(files), ref.quant, ref.repo)
    if name not in files:
        raise RefError(f"{ref.repo} has no file {name}")
    parts = split_parts(name)
    missing = [p for p in parts if p not in files]
    if missing:
        raise RefError(f"{ref.repo}: {name} is a split model whose part {missing[0]} is not "
                       "in the repo")
    meta = {p: files[p] for p in parts}
    copy = next((c for c in copies if all(p in c.files and (meta[p]["size"] is None or
                 c.files[p].stat().st_size == meta[p]["size"]) for p in parts)), None)
    return Plan(ref, name, parts, commit, meta, copy, public=not private,
                hf_ref=llama_cpp_name(ref, name, list(files)))


def resolve_ref(ref: Ref, log: Log = lambda _: None) -> Resolved | None:
    """The file a reference names, on this machine (downloaded if it must be); None for a path
    or a registered name (the registry's)."""
    plan = plan_ref(ref)
    return None if plan is None else fetch_plan(plan, log)


def check_room(plans: list[Plan | None]) -> None:
    """Every download the plans need fits on the disk of huggingface-hub's cache, together."""
    need = sum(p.missing_bytes() for p in plans if p is not None)
    if not need:
        return
    from huggingface_hub import constants
    cache = Path(constants.HF_HUB_CACHE)
    cache.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(cache).free
    if need + (64 << 20) > free:
        raise RefError(f"the download needs {need / 1e9:.1f} GB; {cache} has {free / 1e9:.1f} "
                       "GB free: make room, or point HF_HOME at a disk that has it")


def fetch_plan(plan: Plan, log: Log = lambda _: None) -> Resolved:
    """Carry a plan out: the copy on this machine, verified against the hub's sha256 where
    the hub was listed (a blob named by its sha256 needs no hashing), else a download of every
    part, verified; an Ollama blob, verified against its digest once."""
    ref = plan.ref
    if plan.blob is not None:
        return _ollama_resolved(plan, log)
    origin = {"repo": ref.repo, "revision": plan.commit or ref.revision, "file": plan.name,
              "store": None, "public": plan.public, "hf_ref": plan.hf_ref,
              # verified: a sha256 was compared
              "verified": bool(plan.meta) and all(plan.meta[p].get("sha256")
                                                   for p in plan.parts)}
    if plan.copy is not None:
        digests = [_verified(plan.copy.files[p], (plan.meta or {}).get(p, {}).get("sha256"),
                             log) for p in plan.parts]
        if all(d is not None for d in digests):
            origin["store"] = plan.copy.store
            path = plan.copy.files[plan.parts[0]]
            remember(path, digests[0], origin)
            return Resolved(path, digests[0], origin)
        log(f"{plan.copy.store}: its copy of {ref.repo}/{plan.name} is not the hub's (sha256 "
            "differs); downloading it")
    check_room([Plan(ref, plan.name, plan.parts, plan.commit, plan.meta)])
    # a copy found damaged: the hub cache's own blob is replaced, not returned again
    got = [_download(ref.repo, ref.revision, p, plan.meta[p], log, force=plan.copy is not None,
                     listed=plan.commit) for p in plan.parts]
    origin["store"] = "huggingface-hub cache"
    remember(got[0][0], got[0][1], origin)
    return Resolved(got[0][0], got[0][1], origin)


def llama_cpp_name(ref: Ref, name: str, files: list[str]) -> str | None:
    """The name llama.cpp's -hf (and -hfd) takes to fetch the file picked, checked against
    the repo's listing by llama.cpp's rule (pick_file): OWNER/REPO:QUANT, or OWNER/REPO where
    its default picks it. None where no name picks it, at a revision (-hf takes none), or where
    the repo holds a preset.ini (-hf then fetches only that: common/download.cpp)."""
    if ref.revision is not None or "preset.ini" in files:
        return None
    # the quant named, else the file's own (explicit: the same file wherever llama.cpp runs),
    # else the default rule where the user asked for it
    tags = [t for t in dict.fromkeys((ref.quant, quant_of(name))) if t]
    for tag in tags + ([None] if not (ref.quant or ref.file) else []):
        try:
            if pick_file(files, tag, ref.repo) == name:
                return f"{ref.repo}:{tag}" if tag else ref.repo
        except RefError:
            continue
    return None


def remote_head(plan: Plan) -> tuple[Callable[[int], bytes], int] | None:
    """(read, size) of a planned hub file that is not on this machine: read(n) gives the first
    n bytes of its first part, fetching by range requests at the listed commit only what an
    earlier call did not (huggingface-hub's HfFileSystem; nothing written to its cache), size that part's size as the hub lists it.
    None where the plan has a copy here, or no listing (offline)."""
    if plan.copy is not None or plan.blob is not None or not plan.meta:
        return None
    first = plan.parts[0]
    size = plan.meta[first].get("size")
    if size is None:
        raise RefError(f"{plan.ref.repo}/{first}: the hub lists no size for it; fetch it "
                       "with bench and ask again")
    from huggingface_hub import HfFileSystem
    ref, got = plan.ref, bytearray()

    def read(n: int) -> bytes:   # only the bytes not read yet, by range requests
        try:
            if len(got) < n:
                with HfFileSystem().open(f"{ref.repo}/{first}", "rb", cache_type="none",
                                         revision=plan.commit or ref.revision) as f:
                    f.seek(len(got))
                    got.extend(f.read(n - len(got)))
            return bytes(got[:n])
        except KeyboardInterrupt:
            raise
        except Exception as exc:   # the hub's HTTP errors, a dropped connection
            raise RefError(f"{ref.repo}/{first}: reading its header failed ({type(exc).__name__}"
                           f": {str(exc).splitlines()[0][:160] if str(exc) else ''})") from None
    return read, size


def _verified(path: Path, want: str | None, log: Log) -> str | None:
    """The file's sha256 where it is the hub's (or nothing was listed to check it against);
    None where it differs."""
    digest = file_sha256(path, log)   # hashed once (a blob's name is no proof of its bytes)
    return digest if want is None or digest == want else None


def _listing(repo: str, revision: str | None) -> tuple[str, dict[str, dict], bool] | None:
    """The repo's commit, files (path → size, sha256) and whether it is private, from the
    hub (its tree, which pages past a thousand files); None where the hub is out of reach
    (offline, unreachable)."""
    if not hub_reachable():
        return None
    from huggingface_hub import HfApi
    from huggingface_hub import errors
    api = HfApi()
    try:
        info = api.model_info(repo, revision=revision)
        files = {}
        for f in api.list_repo_tree(repo, revision=info.sha, recursive=True):
            if getattr(f, "size", None) is None:   # a folder
                continue
            lfs = getattr(f, "lfs", None)
            files[f.path] = {"size": f.size, "sha256": getattr(lfs, "sha256", None)
                             if lfs is not None else None}
    except errors.GatedRepoError:
        raise RefError(f"{repo} is gated: accept its terms on its hub page, then log in "
                       "(`hf auth login`, or set HF_TOKEN)") from None
    except errors.RevisionNotFoundError:
        raise RefError(f"{repo} has no revision {revision!r}") from None
    except errors.RepositoryNotFoundError:
        raise RefError(f"no repo {repo} on the hub (a private one needs `hf auth login` or "
                       "HF_TOKEN; a file needs its path to exist)") from None
    except KeyboardInterrupt:
        raise
    except Exception as exc:   # the hub's HTTP errors, a dropped connection, a proxy's page
        raise RefError(f"{repo}: the hub did not answer as the hub ({type(exc).__name__}: "
                       f"{str(exc).splitlines()[0][:160] if str(exc) else ''})") from None
    return info.sha, files, bool(getattr(info, "private", False))


def _download(repo: str, revision: str | None, name: str, meta: dict, log: Log,
              force: bool = False, listed: str | None = None) -> tuple[Path, str]:
    """One part, through huggingface-hub into its cache (by branch, as llama.cpp's -hf does,
    so the cache's refs/ stay current), verified against the listing made at commit `listed`;
    a download that fails or differs leaves nothing to be used."""
    from huggingface_hub import hf_hub_download
    size, want = meta.get("size"), meta.get("sha256")
    log(f"hub: downloading {repo}/{name}" + (f" ({size / 1e9:.2f} GB)" if size else ""))
    try:
        path = Path(hf_hub_download(repo, name, revision=revision or "main",
                                    force_download=force))
    except KeyboardInterrupt:
        raise
    except Exception as exc:   # a dropped connection, a full disk: the partial file is gone
        raise RefError(_download_failed(f"{repo}/{name}", exc)) from None
    digest = sha256_file(path)
    if want is not None and digest != want:
        blob = path.resolve()
        path.unlink(missing_ok=True)
        blob.unlink(missing_ok=True)
        got = _snapshot_commit(path, name)
        if listed and got and got != listed:
            raise RefError(f"{repo} changed on the hub while cpuspec fetched it (listed at "
                           f"{listed[:12]}, downloaded at {got[:12]}, another {name}): removed, "
                           "run it again")
        raise RefError(f"{repo}/{name}: the downloaded file's sha256 {digest[:12]}… is not the "
                       f"hub's {want[:12]}…; removed, run it again")
    remember(path, digest)
    return path, digest


def _download_failed(what: str, exc: Exception) -> str:
    """One line for a download that failed: a disk that filled (or cannot hold a file that
    large, or a quota) says where to make room."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        from huggingface_hub import constants
        return (f"{what}: the download could not be written ({exc.strerror}): make room in "
                f"{constants.HF_HUB_CACHE}, or point HF_HOME at a disk that can hold it, and "
                "run it again")
    return (f"{what}: the download failed ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:160] if str(exc) else ''}); run it again to retry")


def _snapshot_commit(path: Path, name: str) -> str | None:
    """The commit of the hub-cache snapshot a downloaded file lies in (…/snapshots/COMMIT/NAME)."""
    parts = path.parts
    depth = len(Path(name).parts)
    if len(parts) > depth + 1 and parts[-depth - 2] == "snapshots":
        return parts[-depth - 1]
    return None


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


def _ollama_public(name: str) -> bool:
    """An Ollama name anyone can pull: the library's (a hub repo pulled through hf.co may be
    a private one, pulled with a key)."""
    return "/" not in name


def _ollama_blob(ref: Ref) -> Path:
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


def _ollama_resolved(plan: Plan, log: Log) -> Resolved:
    ref, blob = plan.ref, plan.blob
    sha = file_sha256(blob, log)
    if sha != blob.name.removeprefix("sha256-"):
        raise RefError(f"{ref.text}: the blob's sha256 is not its name's: a damaged store")
    origin = {"repo": f"ollama:{ref.repo}:{ref.tag}", "revision": None, "file": blob.name,
              "store": "Ollama", "verified": True, "public": plan.public}
    remember(blob, sha, origin)
    return Resolved(blob, sha, origin)


# ---------------------------------------------------------------- what is on this machine

@dataclass(frozen=True)
class LocalGGUF:
    store: str
    ref: str        # how to name it to cpuspec
    path: Path
    size: int


def local_ggufs() -> list[LocalGGUF]:
    """Every GGUF model file cpuspec can see on this machine, by store (first parts only)."""
    out: list[LocalGGUF] = []

    def add(store: str, ref: str, path: Path) -> None:
        try:   # regular files only: a FIFO would block whoever reads it, a folder is none
            if not all(p.is_file() for p in _parts_on_disk(path)):
                return
            size = sum(p.stat().st_size for p in _parts_on_disk(path))
        except OSError:
            return
        out.append(LocalGGUF(store, ref, path, size))
    for cache in hf_cache_dirs():
        if not cache.is_dir():
            continue
        for repo_dir in sorted(cache.glob("models--*--*")):
            repo = repo_dir.name.removeprefix("models--").replace("--", "/", 1)
            snap = _snapshot(repo_dir, None)
            for f in sorted(snap.rglob("*.gguf")) if snap else []:
                rel = f.relative_to(snap).as_posix()
                if _first_part(rel):
                    add("huggingface-hub cache", f"{repo}/{rel}", f)
    lms = lmstudio_models()
    if lms is not None and lms.is_dir():
        for f in sorted(lms.glob("*/*/**/*.gguf")):
            rel = f.relative_to(lms).as_posix()
            if _first_part(rel):
                add("LM Studio", str(f), f)
    flat = llamacpp_flat_cache()
    if flat.is_dir():
        for f in sorted(flat.glob("*.gguf")):
            if _first_part(f.name):
                add("llama.cpp cache", str(f), f)
    for root in ollama_roots():
        for manifest in sorted(root.glob("manifests/*/*/*/*")) if root.is_dir() else []:
            host, ns, model, tag = manifest.parts[-4:]
            name = model if (host, ns) == ("registry.ollama.ai", "library") else \
                f"{host}/{ns}/{model}"
            try:   # the blob's name is its sha256: listing hashes nothing
                blob = _ollama_blob(Ref("ollama", f"ollama:{name}:{tag}", repo=name, tag=tag))
            except RefError:
                continue
            add("Ollama", f"ollama:{name}:{tag}", blob)
    from cpuspec.inputs.registry import load_registry, models_dir
    own = models_dir()
    try:   # a registered model by its name
        names = {own / s.file: n for n, s in load_registry().models.items()}
    except ModelError:
        names = {}
    if own.is_dir():
        for f in sorted(own.rglob("*.gguf")):
            if "shape-true" not in f.parts:
                add("cpuspec", names.get(f, str(f)), f)
    return out


def _first_part(rel: str) -> bool:
    m = SPLIT.match(rel.removesuffix(".gguf"))
    return is_model_file(rel) and (m is None or m.group(2) == "00001")


def _parts_on_disk(path: Path) -> list[Path]:
    m = SPLIT.match(path.name.removesuffix(".gguf"))
    if not m:
        return [path]
    return [path.with_name(p) for p in split_parts(path.name)]
