"""The llama.cpp build cpuspec runs: its patches, the matrix-engine check, the rebuild.

llama-cpp-python builds llama.cpp with -march=native, so on a CPU with AMX (Intel Xeon since
Sapphire Rapids) ggml compiles its AMX kernels. In the llama.cpp that llama-cpp-python 0.3.36
vendors, those kernels load an unconfigured tile state when GCC 12 compiles them (the stores of
the configuration are dropped; patches/ggml-amx-tile-config.patch says why) and the first
batched decode dies with SIGSEGV. So, on such a CPU only:

- check_build() decodes a 4-token batch of a tiny Q8_0 model in a child process (probe_child)
  once per installed build; the result is kept under $CPUSPEC_HOME/engine;
- where the child dies, rebuild() builds llama-cpp-python again from its sdist with cpuspec's
  patches (pip; one build, about 5-10 minutes on 2 cores) and the child runs again;
- llama.cpp's own programs (cpuspec paths --build-native) are built from the same patched sdist.

On a CPU without a matrix engine none of this runs.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cpuspec.inputs.registry import cpuspec_home
from cpuspec.machine.hardware import cpu_id, cpu_model
from cpuspec.machine.interrupt import ChildTimeout, start_child, wait_child
from cpuspec.machine.matrix import matrix_engine

PATCH_DIR = Path(__file__).with_name("patches")
# Applied in this order to the unpacked sdist (patch -p1 from its root).
PATCHES = ("ggml-amx-tile-config.patch",)
APPLIED_MARK = ".cpuspec-patches"      # in the sdist folder: the patches applied there
PROBE_ARGV = [sys.executable, "-m", "cpuspec.llama.probe_child"]
# The probe loads a 1 MB model and decodes 5 tokens: a second here; a minute means it hangs.
PROBE_TIMEOUT_S = 120.0
REBUILD_ENV = "CPUSPEC_REBUILD"        # "0": never rebuild by itself, say what to run instead
FIX_COMMAND = "cpuspec rebuild"
REBUILD_TIME = "about 5-10 minutes on 2 cores"


class BuildError(RuntimeError):
    """A patch does not apply, a tool is missing, or pip's build failed; the message says."""


class BuildCrash(RuntimeError):
    """The installed build dies in the probe; str() is the one line a user reads."""


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    returncode: int
    seconds: float
    system_info: str = ""
    buffers: dict | None = None
    stderr_tail: str = ""

    @property
    def signal_name(self) -> str | None:
        if self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    @property
    def death(self) -> str:
        """How the child ended, in words: its signal's name, or its exit code."""
        return self.signal_name or f"exit {self.returncode}"

    @property
    def uses_amx(self) -> bool:
        """The weights went to ggml's AMX buffer: the matrix engine ran the probe's matmuls."""
        return bool(self.buffers and "AMX" in self.buffers)


# --- patches ---------------------------------------------------------------------------------

def _try_patch(src: Path, patch: Path, dry_run: bool = False, reverse: bool = False) -> bool:
    """Run GNU patch (or git apply) on src; whether it applied (or would)."""
    if shutil.which("patch"):
        # --force: no guessing that a patch is reversed (--batch would apply it reversed)
        argv = ["patch", "-p1", "--force", "--silent", "--no-backup-if-mismatch",
                *(["--reverse"] if reverse else []), *(["--dry-run"] if dry_run else []),
                "-i", str(patch)]
    elif shutil.which("git"):
        argv = ["git", "apply", "-p1", *(["-R"] if reverse else []),
                *(["--check"] if dry_run else []), str(patch)]
    else:
        raise BuildError("applying cpuspec's ggml patch needs `patch` or `git` "
                         "(Debian/Ubuntu: apt-get install patch)")
    return subprocess.run(argv, cwd=src, capture_output=True).returncode == 0


def patches_applied(src: Path) -> set[str]:
    """The patches applied to an unpacked sdist (none where it is not there)."""
    mark = src / APPLIED_MARK
    return set(mark.read_text().split()) if mark.is_file() else set()


def apply_patches(src: Path, log: Callable[[str], None]) -> list[str]:
    """Apply cpuspec's patches to an unpacked llama-cpp-python sdist, each once; a patch that
    is already in the source (a release with the fix) is passed over. Names applied now."""
    mark = src / APPLIED_MARK
    done = patches_applied(src)
    applied = []
    for name in PATCHES:
        if name in done:
            continue
        patch = PATCH_DIR / name
        if _try_patch(src, patch, dry_run=True, reverse=True):
            log(f"build: {name} is already in {src.name}")
        elif not _try_patch(src, patch, dry_run=True):
            raise BuildError(f"{name} does not apply to {src.name} (another llama.cpp than the "
                             f"one it was written for: see {patch})")
        else:
            if not _try_patch(src, patch):
                raise BuildError(f"{name} failed to apply to {src}")
            log(f"build: applied {name} to {src.name}")
            applied.append(name)
        done.add(name)
        mark.write_text("\n".join(sorted(done)) + "\n")
    return applied


# --- the installed build -------------------------------------------------------------------

def installed_library_dir() -> Path | None:
    """llama_cpp's lib/ folder (the compiled llama.cpp), found without importing it."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    lib = Path(list(spec.submodule_search_locations)[0]) / "lib"
    return lib if lib.is_dir() else None


def build_key() -> str:
    """Names this build on this CPU: the shared libraries' names, sizes and mtimes, and the
    CPU. A rebuild, another install or another machine gets another key."""
    h = hashlib.sha256()
    lib = installed_library_dir()
    for f in sorted(lib.glob("*.so*") if lib else []):
        st = f.stat()
        h.update(f"{f.name} {st.st_size} {st.st_mtime_ns}\n".encode())
    h.update(f"{cpu_model()} {cpu_id()}".encode())
    return h.hexdigest()[:20]


def _record_path() -> Path:
    return cpuspec_home() / "engine" / f"probe-{build_key()}.json"


def known_result() -> dict | None:
    """What the probe found for this build on this CPU, if it ran before."""
    try:
        return json.loads(_record_path().read_text())
    except (OSError, ValueError):
        return None


def remember(result: ProbeResult, rebuilt: bool, rebuild_failed: str | None = None) -> None:
    """What the probe found for this build (and a rebuild that failed: not tried again
    unasked), under $CPUSPEC_HOME/engine."""
    path = _record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"ok": result.ok, "uses_amx": result.uses_amx,
                               "rebuild_failed": rebuild_failed,
                               "system_info": result.system_info,
                               "buffers": result.buffers, "rebuilt_by_cpuspec": rebuilt,
                               "patches": list(PATCHES) if rebuilt else [],
                               "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
    tmp.replace(path)


def probe(argv: list[str] | None = None, timeout_s: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """Run the probe child (no core file): ok, or how it died."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = start_child(argv or PROBE_ARGV, core_dump=False, stdout=out, stderr=err,
                           text=True)
        try:
            rc = wait_child(proc, timeout_s=timeout_s)
        except ChildTimeout:
            rc = -int(getattr(signal, "SIGKILL", 9))
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    seconds = time.monotonic() - t0
    report: dict = {}
    if rc == 0:
        try:
            report = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            rc = 1
    return ProbeResult(ok=rc == 0, returncode=rc, seconds=seconds,
                       system_info=report.get("system_info", ""),
                       buffers=report.get("buffers"), stderr_tail=stderr[-2000:])


def crash_line(result: ProbeResult, rebuilt: bool) -> str:
    how = result.death
    if rebuilt:
        return (f"cpuspec: llama-cpp-python still dies ({how}) in a child-process decode after "
                f"its rebuild with cpuspec's AMX patch; build it without AMX for now "
                f"(docs/troubleshooting.md) and please report it")
    return (f"cpuspec: this llama-cpp-python build dies ({how}) in a child-process decode on "
            f"this CPU's AMX (ggml's tile setup, docs/troubleshooting.md); fix: `{FIX_COMMAND}` "
            f"({REBUILD_TIME}, once)")


def amx_platform() -> bool:
    """The AMX bug and its rebuild concern Linux on x86 only: the patch's tile permission call
    (arch_prctl) and GCC's build are Linux's; macOS and Windows never probe or rebuild."""
    import platform

    from cpuspec.machine import osapi
    return osapi.os_name() == "linux" and platform.machine().lower() in ("x86_64", "amd64")


def check_build(log: Callable[[str], None], sdist: Callable[[Callable], Path],
                rebuild_ok: bool | None = None) -> str:
    """On a CPU with AMX, make sure the installed llama-cpp-python survives a batched decode:
    probe it once per build; where it dies, rebuild it with the patches (unless $CPUSPEC_REBUILD
    is 0) and probe again; sdist(log) gives the unpacked sdist (native.sdist_dir). Returns
    "no engine", "known", "sound" or "rebuilt"; raises BuildCrash with the line to print where
    it still dies, BuildError where the child failed otherwise or the rebuild failed."""
    if "amx_tile" not in matrix_engine().features or not amx_platform():
        return "no engine"
    known = known_result()
    if known is not None and known.get("ok"):
        return "known"
    if known is not None and known.get("rebuild_failed"):   # tried once: not again unasked
        raise BuildCrash(f"cpuspec: this llama-cpp-python build dies on this CPU's AMX and "
                         f"cpuspec's rebuild of it failed before ({known['rebuild_failed']}); "
                         f"`{FIX_COMMAND}` tries again and shows pip's output")
    result = probe()
    if result.ok:
        remember(result, rebuilt=False)
        return "sound"
    if result.returncode >= 0:     # an error, not a crash: a rebuild would not help
        raise BuildError(f"the build check's child process failed (exit {result.returncode}), "
                         f"not by a signal: {result.stderr_tail.strip()[-400:]}")
    if rebuild_ok is None:
        rebuild_ok = os.environ.get(REBUILD_ENV, "1") != "0"
    if not rebuild_ok:
        raise BuildCrash(crash_line(result, rebuilt=False))
    log(f"cpuspec: this llama-cpp-python build dies ({result.death}) in a batched decode on this CPU's "
        f"AMX: a known bug in ggml's tile setup (docs/troubleshooting.md). Rebuilding it with "
        f"cpuspec's fix, once: {REBUILD_TIME}")
    try:
        rebuild(log, sdist(log))
    except BuildError as exc:
        remember(result, rebuilt=False, rebuild_failed=str(exc).splitlines()[0][:200])
        raise
    result = probe()
    if not result.ok:
        remember(result, rebuilt=True,
                 rebuild_failed=f"the rebuilt build still dies ({result.death})")
        raise BuildCrash(crash_line(result, rebuilt=True))
    remember(result, rebuilt=True)
    log(f"cpuspec: the rebuilt llama-cpp-python decodes on AMX"
        f"{' (weights in AMX buffers)' if result.uses_amx else ''}")
    return "rebuilt"


def rebuild(log: Callable[[str], None], src: Path, pip_argv: list[str] | None = None) -> float:
    """Build llama-cpp-python again from its unpacked sdist `src` with cpuspec's patches and
    install it in place (pip; with $CMAKE_ARGS as this shell has them: the first install's are
    not recorded, so a GPU build must be rebuilt with its CMAKE_ARGS set). Seconds taken."""
    t0 = time.monotonic()
    apply_patches(src, log)
    argv = pip_argv or [sys.executable, "-m", "pip", "install", "--no-deps",
                        "--force-reinstall", "--no-cache-dir", str(Path(src).resolve())]
    log(f"build: pip install {src.name} with cpuspec's patches ({REBUILD_TIME})")
    with tempfile.TemporaryFile("w+", errors="replace") as out:
        proc = start_child(argv, stdout=out, stderr=subprocess.STDOUT, text=True)
        rc = wait_child(proc)
        out.seek(0)
        tail = out.read()[-1500:]
    if rc != 0:
        raise BuildError(f"pip could not build llama-cpp-python with the patch (exit {rc}):\n"
                         f"{tail}")
    seconds = time.monotonic() - t0
    log(f"build: llama-cpp-python rebuilt in {seconds / 60:.1f} min")
    return seconds


def restart_command() -> None:
    """Run this command again in a fresh interpreter (the old llama.cpp library is loaded in
    this one)."""
    argv = [sys.executable, "-m", "cpuspec", *sys.argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
