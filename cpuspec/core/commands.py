"""How the configuration cpuspec measured is written for llama.cpp's server and CLI and for
llama-cpp-python: pure functions of the configuration (no program is run here; native.py runs
them and checks the flags against the binaries' --help)."""
from __future__ import annotations

import re
import shlex
from typing import Sequence

from cpuspec.core.drafters import DRAFTERS

SERVER = "llama-server"
CLI = "llama-cli"

# llama-server's flags that cpuspec sets itself (`paths --server-flags` may not give them)
OWN_SERVER_FLAGS = frozenset({"-m", "--model", "-mu", "--model-url", "-hf", "-hfr", "--hf-repo",
                              "-hff", "--hf-file", "--host", "--port", "-np", "--parallel",
                              "-t", "--threads", "-c", "--ctx-size"})
# llama.cpp's speculative flags by their short names (common/arg.cpp); the long ones are
# --spec-*, --no-spec-*, --draft*, *-draft and --lookup-cache-* (is_speculative)
SPEC_SHORT_FLAGS = frozenset({"-md", "-td", "-tbd", "-ngld", "-devd", "-otd", "-ctkd", "-ctvd",
                              "-cmoed", "-ncmoed", "-Cd", "-Cbd", "-Crd", "-Crbd", "-hfd",
                              "-hfrd", "-lcs", "-lcd"})
DRAFT_MODEL_FLAGS = frozenset({"-md", "--model-draft", "--spec-draft-model", "-hfd", "-hfrd",
                               "--hf-repo-draft", "--spec-draft-hf"})
DRAFT_THREAD_FLAGS = frozenset({"-td", "--threads-draft", "--spec-draft-threads"})


def flag_name(word: str) -> str | None:
    """The flag a command-line word names, as llama.cpp reads it ('--threads=1' → '--threads',
    '--model_draft' → '--model-draft'), or None for a value: a word that does not start with
    '-', or a negative number (-ngl -1)."""
    if len(word) < 2 or word[0] != "-" or word[1].isdigit() or word[1] == ".":
        return None
    name = word.split("=", 1)[0]
    return name.replace("_", "-") if name.startswith("--") else name


def is_speculative(flag: str) -> bool:
    return flag in SPEC_SHORT_FLAGS or flag.endswith("-draft") or flag.startswith(
        ("--spec-", "--no-spec-", "--draft", "--lookup-cache"))


def split_server_flags(words: Sequence[str]) -> tuple[list[str], list[str]]:
    """(speculative, common): each flag with the values that follow it. The speculative ones
    are the SD server's alone; the common ones (-ngl, -b, -tb, ...) go to both servers, so
    SD ×raw compares like with like."""
    spec: list[str] = []
    common: list[str] = []
    dest = common
    for w in words:
        name = flag_name(w)
        if name is not None:
            dest = spec if is_speculative(name) else common
        dest.append(w)
    return spec, common


def spec_flags(draft: str | None, k: int, drafter: str, p_min: float = 0.0,
               n_min: int = 0) -> list[str]:
    """llama.cpp's speculative flags for a cpuspec configuration. p-min and n-min as measured
    (0 unless the run gated its drafts): with p-min 0, k tokens every round, as cpuspec's
    static policy drafts (llama.cpp's own defaults: n-max 3, p-min 0).
    lookup and the hybrid map to llama.cpp's ngram-simple drafter, which matches one n-gram
    length (cpuspec's lookup tries 6 down to 2): the nearest equivalent, not the same drafter."""
    spec = DRAFTERS[drafter]
    flags = ["--spec-type", ",".join(spec.llama_cpp_types)]
    if spec.ngram_size is not None:
        flags += ["--spec-ngram-simple-size-n", str(spec.ngram_size),
                  "--spec-ngram-simple-size-m", str(k)]
    if spec.uses_model:
        flags += ["-md", str(draft), "--spec-draft-n-max", str(k), "--spec-draft-n-min", str(n_min),
                  "--spec-draft-p-min", f"{p_min:g}"]
    return flags


def invocations(target: str, draft: str | None, k: int, drafter: str, threads: int,
                n_ctx: int = 4096, p_min: float = 0.0, n_min: int = 0,
                draft_threads: int | None = None, slots: int = 1,
                hub: dict[str, str] | None = None) -> dict[str, list[str]]:
    """The command lines (argv) that run this configuration in llama.cpp's server and CLI:
    the threads, draft threads, p-min and n-min measured, and the server with `slots` slots
    (-np; cpuspec measures one request at a time, llama-server's default is 4). Greedy
    (temperature 0) is what cpuspec measured; the server takes the temperature per request.
    hub: the names llama.cpp's -hf and -hfd take for the target and draft where the run
    fetched them by those names (hub_names): the same files, fetched by llama.cpp."""
    hub = hub or {}
    # -hf also fetches and loads the repo's multimodal projector, which cpuspec did not run
    model = ["-hf", hub["target"], "--no-mmproj"] if hub.get("target") else ["-m", str(target)]
    spec = spec_flags(draft, k, drafter, p_min, n_min)
    if hub.get("draft") and "-md" in spec:
        i = spec.index("-md")
        spec[i:i + 2] = ["-hfd", hub["draft"]]
    common = [*model, *spec, "-t", str(threads), "-c", str(n_ctx)]
    if drafter != "lookup":
        common += ["-td", str(draft_threads or threads)]
    return {SERVER: [SERVER, *common, "-np", str(slots)],
            CLI: [CLI, *common, "--temp", "0"]}


# OWNER/REPO[:QUANT] as the hub spells names (huggingface-hub's validate_repo_id: ASCII letters,
# digits, '-', '_', '.', at most 96 each): anything else in a results file is not printed as one
HF_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9_.-]{1,96}"
                     r"(:[A-Za-z0-9_.-]{1,64})?")


def hub_names(models: dict) -> dict[str, str]:
    """Per role, the name llama.cpp's -hf takes for a model a run fetched from the hub by
    OWNER/REPO[:QUANT] (results' models[role]["hf_ref"]: llama.cpp picks the same file by
    the same rule); none for a file named by path, by its file in the repo or at a revision."""
    return {role: m["hf_ref"] for role, m in (models or {}).items()
            if isinstance(m, dict) and isinstance(m.get("hf_ref"), str)
            and HF_NAME.fullmatch(m["hf_ref"])}


def hub_files(models: dict) -> dict[str, tuple[str, str]]:
    """Per role, (repo, file) of a model a run fetched from the hub (hub_names vouches for
    the name) in one file: llama-cpp-python's from_pretrained fetches the same one."""
    out = {}
    for role, name in hub_names(models).items():
        file = models[role].get("file")
        if isinstance(file, str) and re.fullmatch(r"[A-Za-z0-9_.-][A-Za-z0-9_./-]*\.gguf", file) \
                and not re.search(r"-\d{5}-of-\d{5}\.gguf$", file):
            out[role] = (name.split(":")[0], file)
    return out


def python_snippet(target: str, draft: str | None, k: int, drafter: str, threads: int,
                   n_ctx: int = 4096, hub: dict[str, tuple[str, str]] | None = None) -> str:
    """The same configuration in llama-cpp-python, with cpuspec's DraftModel; hub: (repo,
    file) per role fetched from the hub (hub_files), by from_pretrained and hf_hub_download."""
    hub = hub or {}
    drafter_arg = "" if drafter == "model" else f", drafter={drafter!r}"
    draft_arg = (f"hf_hub_download({hub['draft'][0]!r}, {hub['draft'][1]!r})"
                 if "draft" in hub and draft else repr(str(draft) if draft else None))
    model = (f"Llama.from_pretrained({hub['target'][0]!r}, {hub['target'][1]!r}, "
             if "target" in hub else f"Llama(model_path={str(target)!r}, ")
    return (f"{model}n_ctx={n_ctx}, n_threads={threads}, "
            f"draft_model=cpuspec.DraftModel({draft_arg}, k={k}"
            f"{drafter_arg}, n_threads={threads}))")


def shell(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)
