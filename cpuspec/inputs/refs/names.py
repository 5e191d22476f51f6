"""What a --target/--draft value names, and which file of a repo llama.cpp's -hf picks: the
reference's grammar (a path, OWNER/REPO[:QUANT], OWNER/REPO/FILE.gguf, hf://, ollama:NAME[:TAG]),
a repo id the hub accepts, and llama.cpp's own file rule (common/download.cpp)."""
from __future__ import annotations

import os
import re
from urllib.parse import unquote
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cpuspec.inputs.registry import ModelError


Log = Callable[[str], None]

OLLAMA_PREFIX = "ollama:"

HF_PREFIX = "hf://"

# llama.cpp's choice when a repo is named without a quant (common/download.cpp find_best_model)
DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")

# file names that are not a model of their own (llama.cpp's gguf_filename_is_model)
NOT_A_MODEL = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")

SPLIT = re.compile(r"^(.+)-(\d{5})-of-(\d{5})$", re.I)

REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")



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


def local_folder(text: str) -> bool:
    """The reference's first component is a folder here (./models/...): a relative path the
    user mistyped, said as a missing file, never sent to the hub as OWNER/REPO."""
    first = text.split("/", 1)[0]
    if ":" in text:   # OWNER/REPO:QUANT is the hub's syntax, whatever folders lie here
        return False
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
    try:
        p = Path(text).expanduser()
        here = p.exists()
    except RuntimeError:   # ~user of no such user
        raise RefError(f"{text!r}: no home folder for {text.split('/')[0]!r}") from None
    except OSError:   # a name too long to be a path here
        p, here = Path(text), False
    if here:
        return Ref("path", str(p))
    if text.startswith(OLLAMA_PREFIX):
        name = text[len(OLLAMA_PREFIX):]
        if name.endswith(":"):
            raise RefError(f"{text!r}: an empty tag; an Ollama reference is ollama:NAME[:TAG], "
                           "e.g. ollama:qwen2.5-coder:1.5b")
        name, _, tag = name.rpartition(":") if ":" in name.split("/")[-1] else (name, "", "")
        if not name or not re.fullmatch(r"[\w.:/-]+", name) or ".." in name:
            raise RefError(f"{text!r}: an Ollama reference is ollama:NAME[:TAG], e.g. "
                           "ollama:qwen2.5-coder:1.5b")
        return Ref("ollama", text, repo=name, tag=tag or "latest")
    if text.startswith(HF_PREFIX):
        rest = text[len(HF_PREFIX):].removeprefix("models/")
        # a revision as huggingface-hub's HfFileSystem reads one: refs/pr/N and
        # refs/convert/NAME whole, any other with its slashes written %2F
        m = re.fullmatch(r"([\w.-]+/[\w.-]+)(?:@(refs/pr/\d+|refs/convert/\w+|[\w.%-]+))?"
                         r"(?:/(.+))?", rest)
        if not m:
            raise RefError(f"{text!r}: a hub reference is hf://OWNER/REPO[@REV][/FILE.gguf]")
        repo, rev, file = m.groups()
        rev = unquote(rev) if rev is not None else None
        if rev is not None and (rev.startswith(".") or "\\" in rev or any(
                part in ("", ".", "..") for part in rev.split("/")) or
                any(ord(c) < 0x20 or ord(c) == 0x7F for c in rev)):
            raise RefError(f"{text!r}: {rev!r} is not a revision (a branch, tag or commit)")
        return Ref("hf", text, repo=repo_id(repo, text), file=in_repo(file, text),
                   revision=rev)
    if text in registered:
        return Ref("name", text)
    if local_folder(text):   # models/qwen, models/q/qwen.gguf: a path mistyped, not a repo
        return Ref("path", str(p))
    head, _, quant = text.partition(":")
    if REPO.fullmatch(head) and not text.endswith(".gguf"):
        if ":" in text and not re.fullmatch(r"[\w.-]+", quant):
            raise RefError(f"{text!r}: a hub reference is OWNER/REPO[:QUANT], e.g. "
                           "unsloth/Qwen3-0.6B-GGUF:Q8_0")
        return Ref("hf", text, repo=repo_id(head, text), quant=quant or None)
    parts = text.split("/")
    if text.endswith(".gguf") and len(parts) >= 3 and not text.startswith(("/", ".", "~")) \
            and REPO.fullmatch("/".join(parts[:2])):
        return Ref("hf", text, repo=repo_id("/".join(parts[:2]), text),
                   file=in_repo("/".join(parts[2:]), text))
    return Ref("path", str(p))


def hub_ready() -> None:
    """huggingface-hub imported; it reads HF_ENDPOINT when imported and refuses one that is
    no URL (ValueError), said in one line."""
    try:
        import huggingface_hub.constants  # noqa: F401
    except ValueError as exc:
        raise RefError(f"huggingface-hub cannot start: {exc} (is HF_ENDPOINT "
                       f"{os.environ.get('HF_ENDPOINT', '')!r} a URL?)") from None


def repo_id(repo: str, text: str) -> str:
    """A repo id the hub accepts (huggingface-hub's own rule: no '..', '--', leading or
    trailing '.' or '-', at most 96 characters)."""
    hub_ready()
    from huggingface_hub.utils import validate_repo_id
    try:
        validate_repo_id(repo)
    except ValueError:
        raise RefError(f"{text!r}: {repo!r} is not a Hugging Face repo id (OWNER/REPO)") \
            from None
    return repo


def plain(path: str) -> bool:
    """A path inside a repo that names nothing outside it and carries no control character."""
    return not (path.startswith("/") or {".", "..", ""} & set(path.split("/"))
                or re.search(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", path))


def in_repo(file: str | None, text: str) -> str | None:
    """A file's path inside a repo: relative, no '.' or '..' part."""
    if file is not None and not plain(file):
        raise RefError(f"{text!r}: {file!r} is not a path inside a repo")
    return file


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
    if not 1 <= int(m.group(2)) <= int(count):   # -00001-of-00000, -00003-of-00002: no split
        return [path]
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
