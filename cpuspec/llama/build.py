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

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cpuspec.inputs.registry import cpuspec_home
from cpuspec.machine.hardware import cpu_id, cpu_model
from cpuspec.machine import interrupt, osapi
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
# The llama-cpp-python releases cpuspec's ggml patches (llama/patches) were written and
# tested on; pyproject.toml pins the first. Another version is built all the same where the
# patches apply, and refused in one line where they do not (apply_patches).
TESTED_VERSIONS = ("0.3.36",)
REBUILD_TIME = "about 5-10 minutes on 2 cores"


class BuildError(RuntimeError):
    """A patch does not apply, a tool is missing, or pip's build failed; the message says."""


class BuildCrash(RuntimeError):
    """The installed build dies in the probe; str() is the one line a user reads."""


# Signals that mean the build itself died (ggml's AMX tile bug: SIGSEGV or SIGILL; an abort
# in ggml: SIGABRT). Any other end (killed, stopped, timed out) says nothing about the build.
CRASH_SIGNALS = frozenset(getattr(signal, n) for n in ("SIGSEGV", "SIGILL", "SIGBUS", "SIGFPE",
                                                       "SIGABRT") if hasattr(signal, n))


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    returncode: int
    seconds: float
    system_info: str = ""
    buffers: dict | None = None
    stderr_tail: str = ""
    timed_out: bool = False
    module: str | None = None    # the llama_cpp package the child imported (its __init__)

    @property
    def crashed(self) -> bool:
        """Died of a signal that only a broken build sends itself (CRASH_SIGNALS)."""
        return not self.timed_out and self.returncode < 0 and \
            -self.returncode in CRASH_SIGNALS

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
    version = Path(src).name.rpartition("-")[2]
    if version not in TESTED_VERSIONS:
        log(f"build: cpuspec's patches were tested on llama-cpp-python "
            f"{', '.join(TESTED_VERSIONS)}; this is {version}: each is applied where it fits "
            "(or found already in the source), and the build stops in one line where one "
            "does not")
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
    for f in sorted([f for pat in ("*.so*", "*.dylib", "*.dll") for f in lib.glob(pat)]
                    if lib else []):
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


def remember(result: ProbeResult, rebuilt: bool, rebuild_failed: str | None = None) -> bool:
    """What the probe found for this build (and a rebuild that failed: not tried again
    unasked), under $CPUSPEC_HOME/engine. Best effort: a home that cannot be written (read
    only, full, a file in the way) only means the next command probes again (False). Written
    to a temporary file of its own, then renamed: two commands at once never mix results."""
    path = _record_path()
    text = json.dumps({"ok": result.ok, "uses_amx": result.uses_amx,
                       "rebuild_failed": rebuild_failed, "system_info": result.system_info,
                       "buffers": result.buffers, "rebuilt_by_cpuspec": rebuilt,
                       "patches": list(PATCHES) if rebuilt else [],
                       "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
        return True
    except OSError:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        return False


def probe(argv: list[str] | None = None, timeout_s: float = PROBE_TIMEOUT_S,
          env: dict | None = None) -> ProbeResult:
    """Run the probe child (no core file): ok, or how it died. env: the child's environment
    (a rebuilt wheel's trial folder on PYTHONPATH)."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = start_child(argv or PROBE_ARGV, core_dump=False, stdout=out, stderr=err,
                           text=True, env=env)
        timed_out = False
        try:
            rc = wait_child(proc, timeout_s=timeout_s)
        except ChildTimeout:
            rc, timed_out = -int(getattr(signal, "SIGKILL", 9)), True
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
                       buffers=report.get("buffers"), stderr_tail=stderr[-2000:],
                       timed_out=timed_out, module=report.get("llama_cpp"))


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
    "no engine", "known", "sound", "rebuilt" or "could not tell" (the child timed out or was
    killed from outside: never taken for a crash, never remembered); raises BuildCrash with the line to print where
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
    if not result.crashed:   # timed out or killed from outside: nothing known, nothing kept
        log("cpuspec: could not tell whether this llama-cpp-python build survives this CPU's "
            "AMX: the check's child process "
            + (f"ran past {PROBE_TIMEOUT_S:g} s" if result.timed_out
               else f"was stopped ({result.death})")
            + " (a slow or busy machine?); nothing rebuilt, the next command checks again; "
            f"if this run then dies with SIGSEGV, `{FIX_COMMAND}` fixes the build")
        return "could not tell"
    if rebuild_ok is None:
        rebuild_ok = os.environ.get(REBUILD_ENV, "1") != "0"
    if not rebuild_ok:
        raise BuildCrash(crash_line(result, rebuilt=False))
    return _rebuild_and_probe(log, sdist, result)


def _rebuild_and_probe(log: Callable[[str], None], sdist: Callable[[Callable], Path],
                       result: ProbeResult) -> str:
    """The build died (result): rebuild it under the lock (or, where another command rebuilt
    it meanwhile, probe that one), then probe the rebuilt build; "rebuilt", or BuildCrash /
    BuildError with what failed (remembered, unless a timeout or a kill stopped it)."""
    key = build_key()
    with rebuild_lock(log) as waited:
        if waited or build_key() != key:   # another command may have rebuilt it meanwhile
            done = _rebuilt_meanwhile(log, installed=build_key() != key)
            if done is not None:
                return done
        log(f"cpuspec: this llama-cpp-python build dies ({result.death}) in a batched decode "
            f"on this CPU's AMX: a known bug in ggml's tile setup (docs/troubleshooting.md). "
            f"Rebuilding it with cpuspec's fix, once: {REBUILD_TIME}")
        try:
            rebuild(log, sdist(log))
        except BuildError as exc:
            if not getattr(exc, "transient", False):   # a timeout or a kill: tried next time
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


def _rebuilt_meanwhile(log: Callable[[str], None], installed: bool) -> str | None:
    """After waiting on another command: what the build now is, probed again. "rebuilt"
    where it survives; where another build was installed (`installed`) and still dies, or
    the other command's rebuild failed, that failure (BuildCrash); None where nothing was
    installed and nothing failed (the other was stopped, or it was `cpuspec rebuild` that
    failed): this command rebuilds it, under the lock it now holds."""
    known = known_result()
    if known is not None and known.get("rebuild_failed"):
        raise BuildCrash(f"cpuspec: another cpuspec command's rebuild of llama-cpp-python "
                         f"failed ({known['rebuild_failed']}); `{FIX_COMMAND}` tries again "
                         "and shows pip's output")
    result = probe()
    if result.ok:
        remember(result, rebuilt=True)
        log("cpuspec: another cpuspec command rebuilt llama-cpp-python meanwhile; it decodes "
            "on AMX")
        return "rebuilt"
    if installed:
        raise BuildCrash(crash_line(result, rebuilt=True))
    return None


@contextlib.contextmanager
def rebuild_lock(log: Callable[[str], None]):
    """One rebuild at a time on this machine, every step of it (the sdist's download and
    unpacking, the patch, the wheel, the swap): a lock under $CPUSPEC_HOME/engine. Yields
    whether it had to wait for another command (which says so first). A home that cannot be
    written takes no lock (as remember())."""
    path = cpuspec_home() / "engine" / "rebuild.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")
    except OSError:
        yield False
        return
    lock = osapi.current().locked
    with handle, contextlib.ExitStack() as held:
        try:
            held.enter_context(lock(handle, wait=False))
            waited = False
        except BlockingIOError:
            log("cpuspec: another cpuspec command is rebuilding llama-cpp-python; waiting for "
                "it to finish")
            held.enter_context(lock(handle))
            waited = True
        yield waited


# The installed build's backends, from the libraries in its package (llama_cpp/lib), and the
# cmake flag that builds each: a rebuild keeps them (pip records no CMAKE_ARGS of its own).
BACKEND_LIBS = {"vulkan": "-DGGML_VULKAN=on", "cuda": "-DGGML_CUDA=on",
                "metal": "-DGGML_METAL=on", "hip": "-DGGML_HIP=on", "sycl": "-DGGML_SYCL=on",
                "blas": "-DGGML_BLAS=on", "opencl": "-DGGML_OPENCL=on"}


def _lib_backends(names) -> set[str]:
    """Backends among library file names (libggml-vulkan.so, ggml-cuda.dll, ...)."""
    found = set()
    for name in names:
        base = Path(name).name.lower()
        for b in BACKEND_LIBS:
            if re.match(rf"(lib)?ggml-{b}\b", base):
                found.add(b)
    return found


def installed_backends() -> set[str]:
    """The installed llama-cpp-python's GPU (and BLAS) backends, by its library files; never
    imports it (a rebuild is about to replace it)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return set()
    lib = Path(list(spec.submodule_search_locations)[0]) / "lib"
    return _lib_backends(p.name for p in lib.iterdir()) if lib.is_dir() else set()


def backend_flags(args: str) -> dict[str, bool]:
    """Each backend a CMAKE_ARGS string sets, on or off (-DGGML_CUDA=on / =OFF / =0 ...);
    only the exact flag counts (-DGGML_BLAS_VENDOR is not -DGGML_BLAS)."""
    out = {}
    for b, flag in BACKEND_LIBS.items():
        name = flag.split("=")[0]
        for m in re.finditer(rf"(?<![\w-]){re.escape(name)}=(\S+)", args, re.I):
            out[b] = m.group(1).strip("'\"").lower() in ("on", "1", "true", "yes", "y")
    return out


def rebuild_cmake_args(env: dict | None = None) -> tuple[str, set[str]]:
    """$CMAKE_ARGS as this shell has them, plus the flag of each backend the installed build
    has that they do not name (a Vulkan or CUDA build comes back a Vulkan or CUDA build), and
    the backends the wheel must then carry (the user's own =off respected)."""
    args = (env if env is not None else os.environ).get("CMAKE_ARGS", "")
    named = backend_flags(args)
    extra = [BACKEND_LIBS[b] for b in sorted(installed_backends()) if b not in named]
    want = {b for b, on in named.items() if on} | \
        {b for b in installed_backends() if b not in named}
    return " ".join([args, *extra]).strip(), want


def _pip(argv: list[str], env: dict | None = None,
         die_with_parent: bool = True) -> tuple[int, str]:
    """Run pip (or a stand-in) in a child process group: its exit code and output's tail. A
    stop request kills the group (machine/interrupt); die_with_parent=False lets it finish
    even if cpuspec is killed (the swap: a reinstall cut half way leaves no llama_cpp)."""
    with tempfile.TemporaryFile("w+", errors="replace") as out:
        proc = start_child(argv, stdout=out, stderr=subprocess.STDOUT, text=True, env=env,
                           die_with_parent=die_with_parent)
        rc = wait_child(proc)
        out.seek(0)
        return rc, out.read()[-1500:]


def _swap_in(wheel: Path) -> tuple[int, str]:
    """Install the checked wheel over the old build: seconds, with Ctrl-C and SIGTERM held
    until pip is done (a reinstall cut half way would leave no llama_cpp at all)."""
    with interrupt.deferred():
        return _pip([sys.executable, "-m", "pip", "install", "--no-deps", "--force-reinstall",
                     "--no-cache-dir", str(wheel)], die_with_parent=False)


def rebuild(log: Callable[[str], None], src: Path, pip_argv: list[str] | None = None) -> float:
    """Build llama-cpp-python again from its unpacked sdist `src` with cpuspec's patches, and
    install it only once it is known good. Steps: a wheel is built apart (pip wheel, with
    rebuild_cmake_args: the user's CMAKE_ARGS and the installed build's backends); it must
    carry those backends; unpacked beside, it must import and pass the probe; then it is
    swapped in (interrupts held for those seconds). Ctrl-C or a failure at any earlier step
    leaves the installed build as it was. The caller holds rebuild_lock (one rebuild at a
    time, from the sdist on). Seconds taken. pip_argv replaces the wheel build's command
    (tests)."""
    t0 = time.monotonic()
    apply_patches(src, log)
    cmake, want = rebuild_cmake_args()
    env = {**os.environ, "CMAKE_ARGS": cmake}
    with tempfile.TemporaryDirectory(prefix=".rebuild-", dir=Path(src).parent) as tmp:
        log(f"build: pip wheel {Path(src).name} with cpuspec's patches ({REBUILD_TIME})"
            + (f"; CMAKE_ARGS={cmake}" if cmake else ""))
        rc, tail = _pip(pip_argv or [sys.executable, "-m", "pip", "wheel", "--no-deps",
                                     "--no-cache-dir", "-w", tmp, str(Path(src).resolve())],
                        env)
        if rc != 0:
            raise BuildError(f"pip could not build llama-cpp-python with the patch (exit {rc};"
                             f" the installed build is unchanged):\n{tail}")
        wheel = _checked_wheel(Path(tmp), want)
        trial = Path(tmp) / "trial"
        with zipfile.ZipFile(wheel) as z:
            z.extractall(trial)
        result = probe(env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(trial), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)})
        if result.ok and not _loaded_from(result, trial):
            raise BuildError(f"the check of the rebuilt wheel loaded llama_cpp from "
                             f"{result.module or 'an unknown place'}, not from the wheel; not "
                             "installed: the installed build is unchanged")
        if not result.ok:
            exc = BuildError("the rebuilt llama-cpp-python "
                             + ("fails the check" if result.crashed or result.returncode > 0
                                else "could not be checked") + f" ({result.death}); not "
                             "installed: the installed build is unchanged")
            exc.transient = not result.crashed and result.returncode <= 0
            raise exc
        rc, tail = _swap_in(wheel)
        if rc != 0:
            raise BuildError(f"pip could not install the rebuilt wheel (exit {rc}):\n{tail}")
    seconds = time.monotonic() - t0
    log(f"build: llama-cpp-python rebuilt in {seconds / 60:.1f} min")
    return seconds


def _loaded_from(result: "ProbeResult", folder: Path) -> bool:
    """Whether the probe child imported llama_cpp from `folder` (the trial of a new wheel),
    as its report says."""
    try:
        return bool(result.module) and Path(result.module).resolve().is_relative_to(
            folder.resolve())
    except (OSError, ValueError):
        return False


def _checked_wheel(folder: Path, want: set[str]) -> Path:
    """The one wheel pip built, carrying every backend asked for."""
    wheels = sorted(folder.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"pip built {len(wheels)} wheels, not one; nothing installed")
    with zipfile.ZipFile(wheels[0]) as z:
        has = _lib_backends(z.namelist())
    lacking = sorted(want - has)
    if lacking:
        raise BuildError(f"the rebuilt wheel has no {', '.join(lacking)} backend, which the "
                         "installed build has; not installed (check CMAKE_ARGS and the "
                         "backend's SDK)")
    return wheels[0]


def restart_command() -> None:
    """Run this command again in a fresh interpreter (the old llama.cpp library is loaded in
    this one)."""
    argv = [sys.executable, "-m", "cpuspec", *sys.argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)
