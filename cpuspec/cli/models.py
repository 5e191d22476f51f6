"""`cpuspec models`: list, fetch, verify, derive and locate the registered GGUF models."""
from __future__ import annotations

import json
import re

from pathlib import Path

import click

from cpuspec.cli.inputs import check_model_name, registry, resolve_model
from cpuspec.cli.log import echo, log
from cpuspec.cli.outputs import guarded
from cpuspec.inputs.models import (cached_model, cached_path, derive_model, derived_cache_path, fetch_model,
                     is_cached, verify_cached)
from cpuspec.inputs.registry import DERIVABLE_QUANTS, ModelError
from cpuspec.report.listings import render_models


@click.group()
def models():
    """List, fetch and locate the registered GGUF models.

    \b
    Examples:
      cpuspec models list
      cpuspec models fetch qwen2.5-coder-1.5b
      cpuspec models path qwen2.5-coder-0.5b-q4km
    """


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--local", is_flag=True, help="Every GGUF on this machine instead, by store "
              "(huggingface-hub's and llama.cpp's caches, LM Studio, Ollama, cpuspec's), "
              "with the name to give it to --target/--draft.")
def models_list(as_json, local):
    """List registered models and pairs, and whether each is cached and verified."""
    if local:
        return _list_local(as_json)
    reg = registry()
    rows = []
    for spec in reg.models.values():
        derived = derived_cache_path(spec, reg)
        derived = derived if derived and derived.is_file() and not is_cached(spec) else None
        rows.append({"name": spec.name, "repo": spec.repo, "file": spec.file,
                     "size_bytes": spec.size_bytes, "sha256": spec.sha256,
                     "mirror": bool(spec.mirror), "cached": is_cached(spec),
                     "derived": derived is not None,
                     "path": str(derived or cached_path(spec))})
    pairs = [{"name": p.name, "target": p.target, "draft": p.draft, "note": p.note,
              "default": p.name == reg.default_pair} for p in reg.pairs.values()]
    if as_json:
        echo(json.dumps({"models": rows, "pairs": pairs}, indent=1))
        return
    echo(render_models(rows, pairs))


def _list_local(as_json: bool) -> None:
    from cpuspec.cli.help import BadInput
    from cpuspec.inputs.refs import RefError, local_ggufs, quant_of
    from cpuspec.report.screen import grid
    try:
        found = local_ggufs()
    except RefError as exc:
        raise BadInput(str(exc)) from None
    rows = [{"store": g.store, "name": g.ref, "path": str(g.path), "size_bytes": g.size,
             "quant": quant_of(g.path.name) or quant_of(g.ref)} for g in found]
    if as_json:
        echo(json.dumps(rows, indent=1))
        return
    if not rows:
        echo("no GGUF model on this machine in huggingface-hub's or llama.cpp's caches, LM "
             "Studio, Ollama or cpuspec's folder")
        return
    echo(grid([[r["store"], r["name"], f"{r['size_bytes'] / 1e9:.2f} GB", r["quant"] or "-"]
               for r in rows], headers=["store", "name (for --target/--draft)", "size",
                                        "quant"], disable_numparse=True))


@models.command("drafts")
@click.argument("target")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def models_drafts(target, as_json):
    """Which GGUFs on this machine can draft for TARGET: those that share its tokenizer (the
    check SD applies), smallest first; the rest with the reason they are left out.

    \b
    Examples:
      cpuspec models drafts unsloth/Qwen3-8B-GGUF:Q4_K_M
      cpuspec models drafts ~/models/qwen2.5-7b-instruct-q4_k_m.gguf
    """
    from cpuspec.report.screen import grid
    name, size, want, path = _target_tokenizer(target)
    rows = draft_rows(path, want, size, name)
    if as_json:
        echo(json.dumps(rows, indent=1))
        return
    here = [r for r in rows if r["fits"] and r["on_machine"]]
    away = [r for r in rows if not r["on_machine"]]
    echo(f"Drafts for {name} ({size / 1e9:.2f} GB{'' if path else ', read from the hub'}) on "
         f"this machine: {len(here)} share its tokenizer"
         + (f"; {len(away)} more registered with cpuspec, not on this machine" if away else "")
         + (", smallest first:" if here or away else "."))
    if rows:
        echo(grid([_draft_line(r, size) for r in rows],
                  headers=["name (for --draft)", "store", "size", "quant", ""],
                  disable_numparse=True))
    if not here and not away:
        echo("None fits: a draft must share the target's tokenizer (the same family); "
             "fetch one with `cpuspec bench --target … --draft OWNER/REPO:Q8_0`.")
    elif away:
        echo("A model not on this machine shares the tokenizer cpuspec recorded for it (the "
             "whole check runs again when it is loaded); --draft NAME fetches or derives it.")


def _draft_line(r: dict, size: int) -> list[str]:
    if not r["fits"]:
        why = f"left out: {r['why_not']}"
    elif not r["on_machine"]:
        why = f"fits; {r['how']}"
    else:
        why = "fits" if r["size_bytes"] < size else "fits, but not smaller than the target"
    weight = f"{r['size_bytes'] / 1e9:.2f} GB" if r["size_bytes"] else \
        f"≤{r['at_most'] / 1e9:.2f} GB" if r.get("at_most") else "-"
    return [r["name"], r["store"], weight, r["quant"] or "-", why]


def _target_tokenizer(target: str) -> tuple[str, int, tuple, Path | None]:
    """(name, size, tokenizer, path) of the target: a hub file not on this machine is read
    from the hub's copy, its header only (path None: nothing downloaded); any other
    reference is resolved to its file as bench resolves it."""
    from cpuspec.cli.help import BadInput
    from cpuspec.cli.inputs import model_path, parse_model
    from cpuspec.core.text import printable
    from cpuspec.inputs.refs import RefError, fetch_plan, plan_ref, remote_head, size_on_disk
    from cpuspec.llama.gguf_meta import GGUFMetaError, tokenizer_of, tokenizer_of_head
    ref = parse_model(registry(), target)
    try:
        with guarded():
            plan = plan_ref(ref) if ref.kind == "hf" else None
            head = remote_head(plan) if plan is not None else None
            if head is None:   # on this machine (the plan's copy), or not a hub reference
                path = fetch_plan(plan, log).path if plan is not None else model_path(ref)
                name = ref.text if ref.kind == "ollama" else path.name   # not its blob's
                return name, size_on_disk(path), tokenizer_of(path), path
            read, first = head
            name = f"{ref.repo}/{plan.name}"
            whole = sum(plan.meta[p].get("size") or 0 for p in plan.parts)
            return name, whole, tokenizer_of_head(read, first, name), None
    except (RefError, GGUFMetaError) as exc:
        raise BadInput(printable(str(exc))) from None


def draft_rows(path: Path | None, want: tuple | None = None, size: int | None = None,
               name: str | None = None) -> list[dict]:
    """Every GGUF on this machine but the target itself (path; None: it is not on this
    machine, `name` its OWNER/REPO/FILE), whether it can draft for it (shares its tokenizer,
    `want`: read from path where not given) and why not; then the registered models not on
    this machine whose recorded tokenizer it shares and that are smaller than it (`size`);
    those that fit first, those here before those not, smallest first."""
    from cpuspec.cli.help import BadInput
    from cpuspec.inputs.refs import RefError, local_ggufs, quant_of, size_on_disk
    from cpuspec.llama.engine import VOCAB_MAX_SIZE_DIFFERENCE
    from cpuspec.llama.gguf_meta import GGUFMetaError, tokenizer_mismatch, tokenizer_of
    try:
        want = want or tokenizer_of(path)
        found = local_ggufs()
    except (GGUFMetaError, RefError) as exc:
        from cpuspec.core.text import printable
        raise BadInput(printable(str(exc))) from None
    rows, here = [], {n for n in (name, path.name if path else None) if n}
    for g in found:
        here |= {g.ref, g.path.name, str(g.path.resolve())}
        try:
            if path is not None and g.path.resolve() == path.resolve():
                continue
            why = tokenizer_mismatch(want, tokenizer_of(g.path), VOCAB_MAX_SIZE_DIFFERENCE)
        except (GGUFMetaError, OSError) as exc:
            why = f"unreadable ({exc})"
        rows.append({"name": g.ref, "store": g.store, "size_bytes": g.size,
                     "quant": quant_of(g.path.name) or quant_of(g.ref), "fits": why is None,
                     "why_not": why, "on_machine": True})
    if size is None and path is not None:
        size = size_on_disk(path)
    rows += registered_drafts(want, size, here)
    return sorted(rows, key=lambda r: (not r["fits"], not r["on_machine"],
                                       r["size_bytes"] or r.get("at_most") or 0))


def registered_drafts(want: tuple, size: int | None, here: set[str]) -> list[dict]:
    """The registered models not on this machine (neither their file, nor OWNER/REPO/FILE,
    nor cpuspec's copy among `here`, the target's names included) whose recorded tokenizer
    `want` shares and that are smaller than the target (`size`; a derived one by the most
    it can weigh, derived_at_most): cpuspec fetches or derives each by its name."""
    from cpuspec.inputs.refs import quant_of
    from cpuspec.llama.engine import VOCAB_MAX_SIZE_DIFFERENCE
    from cpuspec.llama.gguf_meta import fingerprint_mismatch
    reg, rows, shared = registry(), [], {}   # shared: each recorded tokenizer's check, once
    for spec in reg.models.values():
        pin, derived = reg.tokenizer(spec), derived_cache_path(spec, reg)
        names = {spec.file, f"{spec.repo}/{spec.file}", str(cached_path(spec).resolve())}
        names |= {str(derived.resolve())} if derived else set()
        if pin is None or names & here:
            continue
        bound = spec.size_bytes or derived_at_most(spec, reg)
        if bound is None or (size is not None and bound >= size):
            continue
        if pin not in shared:
            shared[pin] = fingerprint_mismatch(want, pin, VOCAB_MAX_SIZE_DIFFERENCE) is None
        if not shared[pin]:
            continue
        rows.append({"name": spec.name, "store": "not on this machine",
                     "size_bytes": spec.size_bytes, "at_most": bound,
                     "quant": spec.quant or quant_of(spec.file), "fits": True,
                     "why_not": None, "on_machine": False,
                     "how": f"fetched (offline: derived from {spec.derive_from})"
                     if spec.derive_from else
                     "fetched" + (" (offline: from its PyPI mirror)" if spec.mirror else "")})
    return rows


def derived_at_most(spec, reg) -> int | None:
    """The most a derived model can weigh: its parent's size × the derived type's bits per
    weight ÷ the parent's type's (gguf-py's block sizes). A bound, not a size: a file's
    tensors weigh at least its type's bits per weight (llama.cpp's mixes and fallbacks only
    add), so the parent holds at most size × 8 ÷ those bits of weights, and a pure derivation
    puts each in the new type."""
    from cpuspec.inputs.refs import quant_of
    parent = reg.models.get(spec.derive_from) if spec.derive_from else None
    if parent is None or parent.size_bytes is None:
        return None
    mine, theirs = _bits_per_weight(spec.quant), _bits_per_weight(quant_of(parent.file))
    return round(parent.size_bytes * mine / theirs) if mine and theirs else None


def _bits_per_weight(quant: str | None) -> float | None:
    """A llama.cpp type's bits per weight (Q4_K_M: its Q4_K), from gguf-py's block sizes."""
    import gguf
    try:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[
            re.sub(r"_[SML]$", "", (quant or "").upper())]]
    except KeyError:
        return None
    return 8 * size / block


def pair_draft_file(pair: str | None) -> Path | None:
    """The file of the pair's draft, fetched now where it is not in cpuspec's cache (bench
    would fetch it next); None where it cannot be had (bench then says why)."""
    reg = registry()
    p = reg.pairs.get(pair or reg.default_pair)
    spec = reg.models.get(p.draft) if p else None
    if spec is None:
        return None
    if is_cached(spec):
        return cached_path(spec)
    try:
        with guarded():   # Ctrl-C in the fetch: exit 130, nothing half-written kept
            return fetch_model(spec, log).path
    except ModelError:
        return None


def check_default_draft(target: Path, draft: Path | None) -> None:
    """A target named without a draft takes the pair's draft: where that draft is on this
    machine and does not share the target's tokenizer, say which drafts here do (exit 2)
    rather than fail after loading both."""
    from cpuspec.llama.engine import VOCAB_MAX_SIZE_DIFFERENCE
    from cpuspec.llama.gguf_meta import GGUFMetaError, tokenizer_mismatch, tokenizer_of
    if draft is None or not draft.is_file():
        return
    try:
        why = tokenizer_mismatch(tokenizer_of(target), tokenizer_of(draft),
                                 VOCAB_MAX_SIZE_DIFFERENCE)
    except GGUFMetaError:
        return   # the loader says what is wrong with it
    if why is None:
        return
    fits = [r["name"] for r in draft_rows(target) if r["fits"] and r["on_machine"]][:4]
    raise click.UsageError(
        f"the default draft ({draft.name}) cannot draft for {target.name}: {why}. "
        + (f"Drafts on this machine that share its tokenizer: {', '.join(fits)}; give one with "
           "--draft" if fits else "No GGUF on this machine shares its tokenizer: give --draft "
           "OWNER/REPO:QUANT of the target's family")
        + f" (`cpuspec models drafts {target}` lists them).")


def _names_to_specs(reg, names):
    specs = []
    for name in names or [reg.default_pair]:
        if name in reg.pairs:
            specs += [reg.model(reg.pairs[name].target), reg.model(reg.pairs[name].draft)]
        elif name in reg.models:
            specs.append(reg.models[name])
        else:
            raise click.ClickException(f"unknown model or pair {name!r}; see `cpuspec models "
                                       "list`")
    return specs


@models.command("fingerprint")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def models_fingerprint(file):
    """Print the `tokenizer = {…}` line that records FILE's tokenizer in models.toml, so that
    `models drafts` can offer the model for a target while its file is not on this machine.

    \b
    Example:
      cpuspec models fingerprint ~/.cache/cpuspec/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
    """
    from cpuspec.cli.help import BadInput
    from cpuspec.core.text import printable
    from cpuspec.llama.engine import VOCAB_MAX_SIZE_DIFFERENCE
    from cpuspec.llama.gguf_meta import GGUFMetaError, tokenizer_fingerprint, tokenizer_of
    try:
        kind, tokens = tok = tokenizer_of(file)
    except GGUFMetaError as exc:
        raise BadInput(printable(str(exc))) from None
    if kind is None or not tokens:
        raise BadInput(f"{printable(file.name)}: no tokenizer in the file")
    # A target within the size rule has at least this many tokens: they are the ones hashed.
    hashed = max(1, len(tokens) - VOCAB_MAX_SIZE_DIFFERENCE)
    echo(f"tokenizer = {{ kind = {json.dumps(kind)}, tokens = {len(tokens)}, "
         f'hashed = {hashed}, sha256 = "{tokenizer_fingerprint(tok, hashed)}" }}')


@models.command("fetch")
@click.argument("names", nargs=-1)
def models_fetch(names):
    """Fetch models or pairs (default: the default pair) into the cache, verified by sha256."""
    reg = registry()
    for spec in _names_to_specs(reg, names):
        with guarded():
            try:
                got = fetch_model(spec, log)
            except ModelError as exc:
                raise click.ClickException(str(exc))
        echo(f"{spec.name}: {got.path} ({got.source}, "
                   f"{'verified' if got.verified else 'UNVERIFIED'})")


@models.command("verify")
@click.argument("names", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def models_verify(names, as_json):
    """Hash cached models (default: every registered one) and compare with their pins.

    \b
    Examples:
      cpuspec models verify
      cpuspec models verify qwen2.5-coder-1.5b
    """
    reg = registry()
    specs = _names_to_specs(reg, names) if names else list(reg.models.values())
    rows = [verify_cached(spec) for spec in specs]
    if as_json:
        echo(json.dumps(rows, indent=1))
    else:
        for r in rows:
            echo(f"{r['name']}: {r['status']}" + (f" ({r['path']})" if r["status"] !=
                                                         "not cached" else ""))
    bad = [r["name"] for r in rows if r["status"] == "MISMATCH"]
    if bad:
        raise click.ClickException(f"{', '.join(bad)}: the cached file differs from its sha256 "
                                   "pin; the next run fetches it again")


@models.command("derive")
@click.argument("name")
@click.option("--quant", required=True, metavar="TYPE",
              help="llama.cpp quant type: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K_S, "
                   "Q4_K_M, Q5_K_S, Q5_K_M, Q6_K.")
@click.option("--force", is_flag=True,
              help="Write the pure variant even when the source is already of that quant.")
def models_derive(name, quant, force):
    """Requantize a model (registered name or GGUF file) to another quant type, cached.

    What `llama-quantize --allow-requantize --pure IN OUT TYPE` writes: every tensor in TYPE,
    the tied output too. A requantized K-quant has the official file's kernels and speed, not
    exactly its quality; results record it as derived, with its parent's sha256.

    \b
    Examples:
      cpuspec models derive qwen2.5-coder-1.5b-q4km --quant Q4_0
      cpuspec bench --target "$(cpuspec models derive my.gguf --quant Q4_0)" --draft ...
    """
    quant = quant.upper()
    if quant not in DERIVABLE_QUANTS:
        raise click.BadParameter(f"{quant} is not one of {', '.join(DERIVABLE_QUANTS)}",
                                 param_hint="'--quant'")
    from cpuspec.llama.engine import model_file_type
    reg = registry()
    check_model_name(reg, name)
    with guarded():
        try:
            parent = resolve_model(reg, name)
            if not force and model_file_type(parent.path) == quant:
                raise click.ClickException(
                    f"{parent.path.name} is already {quant} (its general.file_type); a pure "
                    f"requantization would write every tensor in {quant}, a different file "
                    "from this one. Use the file as it is, or pass --force to write the pure "
                    "variant anyway")
            got = derive_model(parent, quant, log)
        except ModelError as exc:
            raise click.ClickException(str(exc))
    log(f"{got.spec.name}: derived from {parent.path.name} (sha256 {parent.sha256[:12]}…); "
         f"{got.derived['note']}")
    echo(str(got.path))


@models.command("path")
@click.argument("name")
def models_path(name):
    """Print the cached file of a model; nothing is fetched or built (`cpuspec models fetch
    NAME` does that).

    \b
    Examples:
      cpuspec models path qwen2.5-coder-1.5b-q4km
      cpuspec bench --target "$(cpuspec models path qwen2.5-coder-1.5b-q4_0)" ...
    """
    reg = registry()
    try:
        got = cached_model(reg, reg.model(name), log)
    except ModelError as exc:
        raise click.ClickException(str(exc))
    if got is None:
        raise click.ClickException(f"{name} is not in the cache (or its cached file no longer "
                                   f"matches its pin); `cpuspec models fetch {name}` fetches "
                                   "or derives it")
    echo(str(got))


@models.command("shape")
@click.argument("name")
@click.option("--quant", metavar="TYPE",
              help="Q4_K_M (llama.cpp's mix), Q4_0 or Q8_0 (pure under --mix pinned and pure; "
                   "llama-quantize keeps a Q4_0's output at Q6_K); gpt-oss: MXFP4_MOE, its "
                   "published form (MXFP4 experts, the rest Q8_0) [default: Q4_K_M; gpt-oss "
                   "MXFP4_MOE].")
@click.option("--tokenizer", "given_tokenizer", type=click.Path(exists=True, dir_okay=False,
                                                               path_type=Path),
              help="A GGUF whose tokenizer the file carries (any file with tokenizer.* "
              "fields, such as llama.cpp's models/ggml-vocab-qwen2.gguf); default: the pinned "
              "Qwen2.5 0.5B (a Gemma 3: the real Gemma 3 270M; a Llama 3: the vendored "
              "llama.cpp's ggml-vocab-llama-bpe.gguf; gpt-oss: its ggml-vocab-gpt-2.gguf, a "
              "stand-in padded to 201088 tokens), fetched if missing.")
@click.option("--mix", type=click.Choice(["llama-quantize", "pinned", "pure"]),
              help="How the quant types are chosen: llama-quantize (current llama.cpp's "
                   "rule), pinned (the rule of the pinned Qwen2.5 files), pure (every matrix "
                   "the base type) [default: pinned for Qwen2.5 and Qwen3, llama-quantize for "
                   "the rest].")
def models_shape(name, quant, given_tokenizer, mix):
    """Write a shape-true GGUF: a real Qwen, Gemma 3, Llama 3 or gpt-oss architecture, random
    weights.

    NAME is 0.5b, 1.5b, 3b, 7b, 14b, 32b (Qwen2.5), qwen3-0.6b ... qwen3-14b, qwen3-30b-a3b,
    qwen3.5-0.8b, gemma3-270m ... gemma3-27b, llama3.2-1b, llama3.2-3b, llama3.1-8b,
    llama3.1-70b or gpt-oss-20b, gpt-oss-120b (a bad name lists them all). The file has
    the published config's shapes and llama.cpp's per-tensor quant types, so it decodes and
    verifies at that model's speed on this CPU (the cost side of SD), but its outputs are
    noise: it is labelled "shape-true (random weights)" everywhere and bench refuses it for
    acceptance. Use it with `cpuspec costs --target PATH`. Cached under $CPUSPEC_HOME.

    \b
    Examples:
      cpuspec models shape 7b
      cpuspec models shape gemma3-4b --mix pure
      cpuspec costs --target "$(cpuspec models shape 14b --quant Q4_0)" --draft D.gguf
    """
    import dataclasses

    import psutil

    from cpuspec.inputs.shapes import ShapeError, only_quant, quant_types, shape_of
    from cpuspec.llama.shape_true import write_shape_true
    with guarded():   # Ctrl-C and SIGTERM: the .partial file removed, exit 130
        try:
            shape = dataclasses.replace(shape_of(name), mix=mix)
            if only_quant(shape) and mix:
                raise ShapeError("gpt-oss has one quant rule (MXFP4_MOE): leave --mix out")
            quant = (quant or only_quant(shape) or "Q4_K_M").upper()
            quant_types(shape, quant)   # a bad quant is said before any fetch
            if given_tokenizer is not None:
                _check_tokenizer_file(given_tokenizer)
        except ShapeError as exc:    # a name, a quant or a tokenizer the user gave: exit 2
            raise click.UsageError(str(exc))
        try:
            tokenizer = given_tokenizer or tokenizer_file(shape.arch, log)
            path = write_shape_true(shape, quant, tokenizer,
                                    psutil.virtual_memory().total, log)
        except (ShapeError, ModelError) as exc:
            raise click.ClickException(str(exc))
    echo(str(path))


def _check_tokenizer_file(path: Path) -> None:
    """--tokenizer: a regular GGUF file with a tokenizer (tokenizer.ggml.model), before any
    write: anything else would be copied into a file llama.cpp cannot load."""
    from cpuspec.inputs.shapes import ShapeError
    from cpuspec.llama.gguf_meta import read_meta
    if not path.is_file():
        raise ShapeError(f"--tokenizer {path}: not a regular file")
    from cpuspec.llama.gguf_meta import GGUFMetaError
    try:
        meta = read_meta(path)
    except GGUFMetaError as exc:   # names the file and says why already
        raise ShapeError(f"--tokenizer {path.parent / str(exc)}") from None
    except Exception as exc:   # gguf-py's reader raises what a damaged file makes it
        raise ShapeError(f"--tokenizer {path}: not a readable GGUF file "
                         f"({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})"
                         ) from None
    if "tokenizer.ggml.model" not in meta:
        raise ShapeError(f"--tokenizer {path}: a GGUF without a tokenizer (no "
                         "tokenizer.ggml.model field)")


# the pinned Qwen2.5 file whose tokenizer a shape-true file carries; a Gemma 3's, the real
# Gemma 3 270M's; a Llama 3's, the vendored llama.cpp's Llama 3 vocabulary
SHAPE_TOKENIZER = "qwen2.5-coder-0.5b-q4km"
FAMILY_TOKENIZER = {"gemma3": "gemma-3-270m-q4km"}
# gpt-oss's o200k tokenizer is out of reach here (no vocabulary of it is vendored, the hub is
# closed): its shape-true files carry GPT-2's byte-level BPE padded to 201088 tokens, a
# stand-in that gives the real embedding and output shapes (costs only; labelled so)
VENDORED_VOCAB = {"llama": "llama-bpe", "gpt-oss": "gpt-2"}


# shapes with a real file registered here: a what-if pair's draft is the real one
REAL_FILES = {"gemma3-270m": "gemma-3-270m-q4km", "qwen2.5-0.5b": "qwen2.5-coder-0.5b-q4km"}


def real_draft(shape_name: str, log) -> Path | None:
    """The real file of a shape where one is registered (fetched if missing), else None."""
    name = REAL_FILES.get(shape_name)
    return fetch_model(registry().model(name), log).path if name else None


def tokenizer_file(arch: str, log) -> Path:
    """The file whose tokenizer a shape-true file of `arch` carries: a registered model
    (fetched if missing), or a vocabulary the vendored llama.cpp ships (its sdist fetched)."""
    from cpuspec.llama import native
    if arch in VENDORED_VOCAB:
        try:
            return native.vendored_vocab(VENDORED_VOCAB[arch], log)
        except native.NativeError as exc:
            raise ModelError(f"no tokenizer for a shape-true {arch}: {exc}") from None
    return fetch_model(registry().model(FAMILY_TOKENIZER.get(arch, SHAPE_TOKENIZER)), log).path
