"""A reference resolved to a file on this machine: planned first (the file picked, the hub's
commit, sizes and sha256, the copy here that holds it), every download's room checked, then
carried out (a copy verified, or a download)."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from cpuspec.inputs.refs import hub
from cpuspec.inputs.refs.hashes import file_sha256, remember
from cpuspec.inputs.refs.names import (Log, Ref, RefError, is_model_file, llama_cpp_name,
                                      pick_file, plain, split_parts)
from cpuspec.inputs.refs.stores import Copy, copies, ollama_blob, ollama_public



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
    copy: Copy | None = None
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
        blob = ollama_blob(ref)
        return Plan(ref, blob.name, [blob.name], blob=blob, public=ollama_public(ref.repo))
    if ref.kind != "hf":
        return None
    if ref.file is not None and not is_model_file(ref.file):   # README.md, mmproj, safetensors
        raise RefError(f"{ref.text}: {ref.file} is not a GGUF model file (a .gguf that is not "
                       "an mmproj, imatrix or draft head)")
    held = copies(ref.repo, ref.revision)
    try:
        listed = hub.listing(ref.repo, ref.revision)
    except RefError:   # no such repo on the hub (an LM Studio folder of one's own), gated,
        plan = _held_plan(ref, held)   # private: the copy this machine holds, unverified
        if plan is None:
            raise
        return plan
    if listed is None:   # offline: what this machine holds of the repo, by the same rule
        plan = _held_plan(ref, held)
        if plan is not None:
            return plan
        where = "no copy of it" if not held else "no whole copy of that file"
        raise RefError(f"{ref.text}: {where} on this machine, and the hub is out of reach: "
                       f"{hub.LAST_UNREACHABLE or 'offline, or no network'}")
    commit, files, private = listed
    # a name the listing gave is used only as a plain path inside the repo
    files = {f: m for f, m in files.items() if plain(f)}
    name = ref.file or pick_file(list(files), ref.quant, ref.repo)
    if name not in files:
        raise RefError(f"{ref.repo} has no file {name}")
    parts = split_parts(name)
    missing = [p for p in parts if p not in files]
    if missing:
        raise RefError(f"{ref.repo}: {name} is a split model whose part {missing[0]} is not "
                       "in the repo")
    meta = {p: files[p] for p in parts}
    copy = next((c for c in held if all(p in c.files and (meta[p]["size"] is None or
                 c.files[p].stat().st_size == meta[p]["size"]) for p in parts)), None)
    return Plan(ref, name, parts, commit, meta, copy, public=not private,
                hf_ref=llama_cpp_name(ref, name, list(files)))


def _held_plan(ref: Ref, held: list) -> Plan | None:
    """The plan of the first copy on this machine that holds the file the reference names
    whole (by the quant rule where it names no file); None: none does."""
    for copy in held:
        try:
            name = ref.file or pick_file(list(copy.files), ref.quant, ref.repo)
        except RefError:
            continue
        parts = split_parts(name)
        if all(p in copy.files for p in parts):
            return Plan(ref, name, parts, copy.commit, None, copy)
    return None


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
    """_fetch_plan, with a file this user cannot read or a cache folder that cannot be made
    said in one line (RefError), not a traceback."""
    try:
        return _fetch_plan(plan, log)
    except OSError as exc:
        raise RefError(f"{plan.ref.text}: {exc.filename or ''}: {exc.strerror or exc}") \
            from None


def _fetch_plan(plan: Plan, log: Log = lambda _: None) -> Resolved:
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
        digests = [hub.verified_digest(plan.copy.files[p], (plan.meta or {}).get(p, {}).get("sha256"),
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
    got = [hub.download(ref.repo, ref.revision, p, plan.meta[p], log, force=plan.copy is not None,
                     listed=plan.commit) for p in plan.parts]
    origin["store"] = "huggingface-hub cache"
    remember(got[0][0], got[0][1], origin)
    return Resolved(got[0][0], got[0][1], origin)


def _ollama_resolved(plan: Plan, log: Log) -> Resolved:
    ref, blob = plan.ref, plan.blob
    sha = file_sha256(blob, log)
    if sha != blob.name.removeprefix("sha256-"):
        raise RefError(f"{ref.text}: the blob's sha256 is not its name's: a damaged store")
    origin = {"repo": f"ollama:{ref.repo}:{ref.tag}", "revision": None, "file": blob.name,
              "store": "Ollama", "verified": True, "public": plan.public}
    remember(blob, sha, origin)
    return Resolved(blob, sha, origin)
