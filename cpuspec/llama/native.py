"""llama.cpp's own programs: where they are, how to build them, how to run the configuration
cpuspec found with them, and what they print.

The binaries come from the llama.cpp that the installed llama-cpp-python vendors (its sdist's
vendor/ folder, built with cmake on the CPU backend and cached under $CPUSPEC_HOME/native), from
a folder the user names (--llama-bin), from $CPUSPEC_LLAMA_BIN, or from PATH. The flag names
printed here are that version's (the test suite checks them against the binaries' --help when
the binaries are present).
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from cpuspec.llama.build import (PATCHES, TESTED_VERSIONS, apply_patches, patches_applied,
                                 rebuild_lock)
from cpuspec.machine.interrupt import ChildTimeout, start_child, wait_child
from cpuspec.core.commands import (CLI, SERVER, invocations, python_snippet, shell,  # noqa: F401
                       spec_flags)
from cpuspec.inputs.registry import cpuspec_home

BIN_ENV = "CPUSPEC_LLAMA_BIN"
SPECULATIVE = "llama-speculative-simple"
COMPLETION = "llama-completion"
BENCH = "llama-bench"
BUILD_TARGETS = (SPECULATIVE, COMPLETION, SERVER, CLI, BENCH)
# What `paths` runs; the server and CLI are only printed (and their flags checked).
MEASURED = (SPECULATIVE, COMPLETION)


class NativeError(RuntimeError):
    """A llama.cpp program is missing, failed, or printed something we cannot read."""


def vendored_version() -> str:
    """The installed llama-cpp-python's version, from its metadata: importing llama_cpp would
    load its library, which a rebuild is about to replace. With none installed (a reinstall
    cut short), the version cpuspec was tested on: `cpuspec rebuild` can bring it back."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("llama_cpp_python")
    except PackageNotFoundError:
        pass
    try:
        import llama_cpp
        return llama_cpp.__version__
    except Exception:   # not installed, or half removed
        return TESTED_VERSIONS[0]


def native_root() -> Path:
    """Where the installed version's sdist, its unpacked source and its builds live."""
    return cpuspec_home() / "native" / f"llama-cpp-python-{vendored_version()}"


def program(bin_dir: Path, name: str) -> Path:
    """A llama.cpp program's file in bin_dir, as this OS names it (llama-server.exe on
    Windows)."""
    from cpuspec.machine import osapi
    return Path(bin_dir) / (name + osapi.current().EXE_SUFFIX)


def has_programs(bin_dir: Path, names: Sequence[str]) -> bool:
    return all(program(bin_dir, t).is_file() for t in names)


def build_dir() -> Path:
    """Where cmake puts the programs: build/bin, or build/bin/Release with MSVC (a
    multi-config generator); the first that exists, else the first of this OS's."""
    from cpuspec.machine import osapi
    dirs = [native_root() / d for d in osapi.current().BUILD_BIN_DIRS]
    return next((d for d in dirs if d.is_dir()), dirs[0])


def find_bin_dir(explicit: Path | None = None, need: Sequence[str] = MEASURED) -> Path | None:
    """The first folder holding every program in `need`: --llama-bin, $CPUSPEC_LLAMA_BIN, the
    cached build of the vendored llama.cpp, then PATH. None when there is none. A folder the
    user named that lacks them is an error, not a fallback."""
    if explicit is not None:
        missing = [t for t in need if not program(explicit, t).is_file()]
        if missing:
            raise NativeError(f"{explicit} has no {', '.join(missing)}; build llama.cpp's tools "
                              f"there, or run `cpuspec paths --build-native`")
        return explicit
    candidates = [Path(os.environ[BIN_ENV])] if os.environ.get(BIN_ENV) else []
    candidates.append(build_dir())
    on_path = shutil.which(need[0]) if need else None
    if on_path:
        candidates.append(Path(on_path).parent)
    for d in candidates:
        if has_programs(d, need):
            return d
    return None


def build(log: Callable[[str], None], targets: Sequence[str] = BUILD_TARGETS) -> Path:
    """Build llama.cpp's programs from the sdist of the installed llama-cpp-python (pip
    download, cmake; CPU backend, no curl) with cpuspec's ggml patches (llama/build.py), with
    $CMAKE_ARGS as pip's build of llama-cpp-python takes them (the same flags for both).
    About 15 minutes on 2 cores, once."""
    bin_dir = build_dir()
    root = native_root()
    src = root / f"llama_cpp_python-{vendored_version()}"
    if has_programs(bin_dir, targets) and patches_applied(src) == set(PATCHES):
        return bin_dir
    check_toolchain()
    # cpuspec's ggml patches (the AMX tile fix): an older build without them is rebuilt, and
    # cmake recompiles only what they touch; the sdist is fetched and patched under the AMX
    # rebuild's lock (it patches the same folder)
    with rebuild_lock(log):
        src = sdist_dir(log)
        apply_patches(src, log)
    log("native: cmake configure and build (CPU backend; once, ~15 min on 2 cores)")
    _run(["cmake", "-S", str(src / "vendor" / "llama.cpp"), "-B", str(root / "build"),
                  "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
                  "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=ON",
                  "-DLLAMA_BUILD_EXAMPLES=ON", "-DLLAMA_BUILD_TOOLS=ON",
                  *shlex.split(os.environ.get("CMAKE_ARGS", ""))], None)
    _run(["cmake", "--build", str(root / "build"), "--config", "Release", "-j",
                  str(os.cpu_count() or 2), "--target", *targets], None)
    return build_dir()


def check_toolchain() -> None:
    """CMake and a compiler must be on PATH before a 15-minute build starts: one line that
    says what to install on this OS (machine/osapi), not cmake's own error."""
    from cpuspec.machine import osapi
    api = osapi.current()
    lacking = [n for n, ok in (("CMake", shutil.which("cmake")),
                               ("a C/C++ compiler", any(shutil.which(c) for c in api.COMPILERS)))
               if not ok]
    if lacking:
        raise NativeError(f"building llama.cpp needs {' and '.join(lacking)}, not found on "
                          f"PATH; install {api.INSTALL_TOOLCHAIN}")


def sdist_archive(log: Callable[[str], None]) -> Path:
    """The installed llama-cpp-python's sdist as pip downloads it (once, beside the build).
    pip writes it whole or not at all; a download that fails says so in one line."""
    version = vendored_version()
    root = native_root()
    root.mkdir(parents=True, exist_ok=True)
    archive = root / f"llama_cpp_python-{version}.tar.gz"
    if not archive.is_file():
        log(f"native: pip download llama-cpp-python=={version} (sdist)")
        try:
            _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                  ":all:", "-q", "-d", str(root), f"llama-cpp-python=={version}"], None)
        except NativeError as exc:
            raise NativeError(f"could not download llama-cpp-python=={version}'s source from "
                              f"the package index (offline, a proxy, or the version gone?): "
                              f"{str(exc).splitlines()[-1][:200]}") from None
        if not archive.is_file():
            raise NativeError(f"pip downloaded no {archive.name} into {root}")
    return archive


def _safe_members(tar: tarfile.TarFile, dest: Path) -> list:
    """The archive's members, refused where one would land outside dest or is a device, as
    tarfile's "data" filter does (absent from Python 3.11.0-3.11.3)."""
    root = dest.resolve()
    for m in tar.getmembers():
        target = (dest / m.name).resolve()
        # no links at all (an sdist needs none, and a chain of them can point out), no devices
        if not target.is_relative_to(root) or m.isdev() or m.issym() or m.islnk():
            raise NativeError(f"{tar.name}: {m.name!r} would land outside {dest}, or is a "
                              "link or a device: refused")
    return tar.getmembers()


def sdist_dir(log: Callable[[str], None]) -> Path:
    """The installed llama-cpp-python's sdist, unpacked once beside the build (cpuspec's
    builds patch it there: llama/build.py). Unpacked into a folder of its own, then renamed:
    a half-unpacked folder is never taken for the source; a damaged archive is removed (the
    next command downloads it again) and said in one line."""
    archive = sdist_archive(log)
    src = archive.parent / archive.name.removesuffix(".tar.gz")
    if src.is_dir():
        return src
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=archive.parent))
    try:
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")
            else:   # Python 3.11.0-3.11.3
                tar.extractall(tmp, members=_safe_members(tar, tmp))
        unpacked = tmp / src.name
        if not unpacked.is_dir():
            raise NativeError(f"{archive.name} holds no {src.name}/ folder")
        os.replace(unpacked, src)
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        archive.unlink(missing_ok=True)
        raise NativeError(f"{archive.name} is damaged ({exc}); removed: the next command "
                          "downloads it again") from None
    except OSError as exc:
        if src.is_dir():   # another command unpacked it meanwhile
            return src
        raise NativeError(f"{archive.name} could not be unpacked in {archive.parent} "
                          f"({exc.strerror or exc}); make room there and run it again") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return src


def vendored_vocab(name: str, log: Callable[[str], None]) -> Path:
    """A vocabulary-only GGUF the vendored llama.cpp ships (models/ggml-vocab-NAME.gguf: the
    tokenizer of a family, such as llama-bpe, Llama 3's)."""
    path = sdist_dir(log) / "vendor" / "llama.cpp" / "models" / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        raise NativeError(f"the vendored llama.cpp has no {path.name}")
    return path


def help_flags(bin_dir: Path, tool: str) -> set[str]:
    """Every flag that `tool --help` lists as working: an option line's flags (before its
    description), less those whose description says the argument has been removed (llama.cpp
    keeps --draft-max and others in its help only to say so)."""
    proc = subprocess.run([str(program(bin_dir, tool)), "--help"], capture_output=True, text=True,
                          timeout=60)
    flags: set[str] = set()
    entry: list[str] = []
    for line in (proc.stdout + proc.stderr).splitlines() + [""]:
        if line.startswith("-") or not line.strip():
            if entry and "has been removed" not in " ".join(entry):
                head = re.split(r"\s{2,}", entry[0].strip())[0]
                flags |= set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", head))
            entry = [line] if line.startswith("-") else []
        elif entry:
            entry.append(line)
    return flags


def unknown_flags(argv: Sequence[str], known: set[str]) -> list[str]:
    return [a for a in argv[1:] if a.startswith("-") and not _is_number(a) and a not in known]


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


# --- running the programs and reading what they print ---------------------------------------

@dataclass
class NativeRun:
    """One generation by a llama.cpp program, in cpuspec's end-to-end window: the prompt's
    prefill (both models' for SD) plus every decode."""
    tokens: int
    prefill_s: float
    decode_s: float
    text: str
    drafted: int = 0
    accepted: int = 0
    rounds: list[tuple[int, int]] = field(default_factory=list)  # (accepted, drafted)
    # per_round: from the debug log's timestamps, each round's drafting (the previous round's
    # end to its last draft) and the rest (target verify, the draft's re-decode, sampling), ms
    round_phases_ms: list[tuple[float, float]] = field(default_factory=list)
    target_eval_ms: float | None = None    # the target's one-token decodes (llama_perf)
    target_eval_runs: int | None = None
    prompt_eval_ms: float | None = None    # the target's batches: the prompt, and for SD
    prompt_eval_tokens: int | None = None  # every verify batch
    sampling_ms: float | None = None
    total_ms: float | None = None          # llama_perf's wall clock since the program's reset
    draft_gen_ms: float | None = None      # SD: time inside the drafter's draft() calls
    draft_calls: int | None = None         # SD: rounds that asked the drafter
    acc_rate_pos: list[float] = field(default_factory=list)  # SD: accepted share by position

    @property
    def e2e_s(self) -> float:
        return self.prefill_s + self.decode_s


# How both programs are timed (recorded in a paths file's settings; files without it were
# timed with raw = llama_perf's timers without warm-up, SD = its wall clock after warm-up)
WINDOW = "wall clock after llama.cpp's warm-up, both programs"

_LINE = r"{}\s+(\d+) tokens in\s+([\d.]+) seconds"


def run_speculative(bin_dir: Path, target: str, draft: str | None, prompt: str, n: int, k: int,
                    threads: int, n_ctx: int, drafter: str = "model",
                    per_round: bool = False, p_min: float = 0.0) -> NativeRun:
    """llama-speculative-simple, greedy, on one prompt (chat-formatted text; specials are
    parsed). Its "encoded" window holds both prompt prefills, "decoded" every round.
    per_round: log at debug level to read each round's accepted/drafted (the logging costs
    time: not for timed runs)."""
    argv = [str(program(bin_dir, SPECULATIVE)), "-m", str(target), *spec_flags(draft, k, drafter, p_min),
            "-p", prompt, "-n", str(n), "--temp", "0", "--top-k", "1", "--seed", "1",
            "-t", str(threads), "-tb", str(threads), "-c", str(n_ctx),
            *(["-v"] if per_round else ["-lv", "4"])]
    if drafter != "lookup":
        argv += ["-td", str(threads), "-tbd", str(threads)]
    out, err = _run_logged(argv, "decoded")
    enc = re.search(_LINE.format("encoded"), err)
    dec = re.search(_LINE.format("decoded"), err)
    drafted = re.search(r"n_drafted\s*=\s*(\d+)", err)
    accepted = re.search(r"n_accept\s*=\s*(\d+)", err)
    if not (enc and dec and drafted and accepted):
        raise NativeError(f"{SPECULATIVE} printed no timing:\n{err[-2000:]}")
    if int(dec.group(1)) <= 0 or float(enc.group(2)) + float(dec.group(2)) <= 0:
        raise NativeError(f"{SPECULATIVE} generated nothing ({dec.group(1)} tokens in "
                          f"{dec.group(2)} s); its log ends:\n{err[-2000:]}")
    rounds = [(int(a), int(d)) for a, d in
              re.findall(r"accepted (\d+)/(\d+) draft tokens", err)]
    run = NativeRun(int(dec.group(1)), float(enc.group(2)), float(dec.group(2)),
                    _generated_text(out, prompt), int(drafted.group(1)), int(accepted.group(1)),
                    rounds, _round_phases(err) if per_round else [])
    _perf(err, run)
    return run


def run_completion(bin_dir: Path, target: str, prompt: str, n: int, threads: int,
                   n_ctx: int) -> NativeRun:
    """llama-completion, greedy, no conversation mode: the target alone on one prompt.
    Timed as llama-speculative-simple is: both programs warm their target up first (llama.cpp's
    default), and both windows are wall clock from before the prompt's prefill to the last
    token. Here that is llama_perf's "total time" (the program resets it just before it
    tokenizes the prompt); its "prompt eval time" splits the prefill off."""
    argv = [str(program(bin_dir, COMPLETION)), "-m", str(target), "-p", prompt, "-n", str(n),
            "--temp", "0", "--top-k", "1", "--seed", "1", "-t", str(threads), "-tb",
            str(threads), "-c", str(n_ctx), "-no-cnv", "--no-display-prompt", "-sp"]
    out, err = _run_logged(argv, "total time")
    run = NativeRun(0, 0.0, 0.0, out)
    _perf(err, run)
    if run.prompt_eval_ms is None or run.target_eval_runs is None or run.total_ms is None:
        raise NativeError(f"{COMPLETION} printed no timing:\n{err[-2000:]}")
    if run.target_eval_runs + run.prompt_eval_tokens <= 0 or run.total_ms <= 0:
        raise NativeError(f"{COMPLETION} generated nothing (0 tokens in {run.total_ms:g} ms); "
                          f"its log ends:\n{err[-2000:]}")
    # the first token comes from the prompt's prefill, each later one from a decode
    run.tokens = run.target_eval_runs + 1
    run.prefill_s = run.prompt_eval_ms / 1e3
    run.decode_s = max(run.total_ms - run.prompt_eval_ms, 0.0) / 1e3
    return run


def _stamp(line: str) -> float:
    """Seconds from a llama.cpp log line's timestamp (minutes.seconds.ms.us)."""
    m, sec, ms, us = (int(x) for x in line.split(maxsplit=1)[0].split("."))
    return 60 * m + sec + ms / 1e3 + us / 1e6


def _round_phases(err: str) -> list[tuple[float, float]]:
    """Per round, from a debug log: (drafting ms, verify + re-decode + sampling ms). A round
    logs a candidate line per draft token, then "accepted a/d draft tokens"."""
    phases, last_cand, prev_end = [], None, None
    for line in err.splitlines():
        if "draft candidate   0," in line:
            last_cand = _stamp(line)
        elif "draft tokens, the last target token" in line and last_cand is not None:
            end = _stamp(line)
            if prev_end is not None:
                phases.append((1e3 * (last_cand - prev_end), 1e3 * (end - last_cand)))
            prev_end, last_cand = end, None
    return phases


def _perf(err: str, run: NativeRun) -> None:
    ev = re.search(r"\beval time =\s+([\d.]+) ms /\s+(\d+) runs", err)
    if ev:
        run.target_eval_ms, run.target_eval_runs = float(ev.group(1)), int(ev.group(2))
    pe = re.search(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens", err)
    if pe:
        run.prompt_eval_ms, run.prompt_eval_tokens = float(pe.group(1)), int(pe.group(2))
    dur = re.search(r"dur\(b,g,a\) = ([\d.]+), ([\d.]+), ([\d.]+) ms", err)
    if dur:
        run.draft_gen_ms = float(dur.group(2))
    calls = re.search(r"#calls\(b,g,a\) =\s+(\d+)\s+(\d+)\s+(\d+)", err)
    if calls:
        run.draft_calls = int(calls.group(2))
    pos = re.search(r"#acc rate/pos = \(([\d., ]*)\)", err)
    if pos:
        run.acc_rate_pos = [float(x) for x in pos.group(1).split(",") if x.strip()]
    total = re.search(r"\btotal time =\s+([\d.]+) ms", err)
    if total:
        run.total_ms = float(total.group(1))
    sm = re.search(r"sampling time =\s+([\d.]+) ms", err)
    if sm:
        run.sampling_ms = float(sm.group(1))


def _generated_text(out: str, prompt: str) -> str:
    text = out.strip("\n")
    return text[len(prompt):] if text.startswith(prompt) else text


# llama.cpp prints its log from a worker thread; now and then (2 runs in 20 seen, a tiny model)
# a program exits 0 before the thread wrote its closing lines, timing included. Such a run is
# run again, up to this many times in all.
LOG_TRIES = 3


def _run_logged(argv: list[str], marker: str) -> tuple[str, str]:
    for _ in range(LOG_TRIES):
        out, err = _run(argv)
        if marker in err:
            break
    return out, err


# A call to one of llama.cpp's programs that runs longer than this is stopped (a load, a
# prompt and at most 1,024 tokens take a minute or two here); $CPUSPEC_NATIVE_TIMEOUT_S
# changes it. Builds have no limit.
TIMEOUT_ENV = "CPUSPEC_NATIVE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 900.0


def call_timeout_s() -> float:
    raw = os.environ.get(TIMEOUT_ENV)
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise NativeError(f"${TIMEOUT_ENV} must be a number of seconds, not {raw!r}") from None
    if not value > 0:
        raise NativeError(f"${TIMEOUT_ENV} must be above 0, not {raw!r}")
    return value


def _run(argv: list[str], timeout_s: float | None = -1.0) -> tuple[str, str]:
    """Run a program to the end in a process group of its own (Ctrl-C, SIGTERM, an error or
    the time limit kill the group), its output through files: a verbose llama.cpp fills a
    pipe and would wait for us forever. timeout_s -1: the call limit; None: no limit."""
    limit = call_timeout_s() if timeout_s == -1.0 else timeout_s
    name = Path(argv[0]).name
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out_f, \
            tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err_f:
        try:
            proc = start_child(argv, stdout=out_f, stderr=err_f, text=True)
        except OSError as exc:
            raise NativeError(f"{argv[0]} cannot be run ({exc.strerror or exc}); is it a "
                              f"built llama.cpp program, executable by you?") from None
        try:
            rc = wait_child(proc, timeout_s=limit)
        except ChildTimeout:
            raise NativeError(f"{name} ran longer than {limit:g} s and was stopped (set "
                              f"${TIMEOUT_ENV} for a longer limit)") from None
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    if rc != 0:
        raise NativeError(f"{name} exited {rc}:\n{err[-2000:]}")
    return out, err


# --- what tune and advise print under an SD recommendation ---------------------------------
