"""Where results go: output paths checked before any work starts, atomic writes, and the saved
runs under $CPUSPEC_HOME/results/ that `cpuspec runs`, `report` and `advise` find by id.

Nothing here overwrites an input (a prompts file, a GGUF model), writes two outputs to one
path, or replaces a read-only results file without --force.
"""
from __future__ import annotations

import datetime as dt
import functools
import gzip
import json
import os
import re
import socket
import stat
import tempfile
from pathlib import Path

from cpuspec.inputs.registry import cpuspec_home
from cpuspec.results.records import Machine
from cpuspec.results.schema import RESULTS_SUFFIXES, load_json

GGUF_MAGIC = b"GGUF"


class OutputError(ValueError):
    """An output path cannot be used; the message says why and what to do."""


def results_dir() -> Path:
    return cpuspec_home() / "results"


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _is_gguf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def check_output(path: Path, inputs: list[Path], force: bool = False) -> None:
    """Refuse, before minutes of measuring, an output that cannot be written or would destroy
    something: a folder, a missing or unwritable folder, an input of this run, a GGUF model,
    a file that is not a regular file, or a read-only file (unless force)."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"output file {path} is a folder")
    parent = path.parent
    if not parent.is_dir():
        raise OutputError(f"folder does not exist for output file {path}")
    for inp in inputs:
        if inp is not None and (_same(path, Path(inp)) or
                                path.resolve() == Path(inp).resolve()):
            raise OutputError(f"output file {path} is also an input of this run; "
                              "choose another name")
    if path.exists():
        if not path.is_file():
            raise OutputError(f"output file {path} is not a regular file")
        if _is_gguf(path):
            raise OutputError(f"output file {path} is a GGUF model; refusing to overwrite it")
        if not force and not (path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP |
                                                      stat.S_IWOTH)):
            raise OutputError(f"output file {path} is read-only; pass --force to replace it")
    try:  # the atomic write creates a temporary file beside the target: try exactly that
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".check", dir=parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise OutputError(f"cannot write output file {path}: {exc.strerror or exc}") from None


def check_outputs(outputs: list[Path | None], inputs: list[Path | None],
                  force: bool = False) -> None:
    """check_output for each given output, and no two of them on one path."""
    given = [Path(p) for p in outputs if p is not None]
    for i, a in enumerate(given):
        for b in given[:i]:
            if a.resolve() == b.resolve():
                raise OutputError(f"two outputs go to {a}; give each its own file")
    for p in given:
        check_output(p, [Path(x) for x in inputs if x is not None], force)


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write to a temporary file beside `path`, then rename: a crash mid-write never leaves a
    truncated file, and the old content stays until the new one is complete."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file 0600; give it the mode a plain open() would (or the mode of
        # the file it replaces), so a results file is as readable as any other output
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)   # by name: os.fchmod is POSIX only (Windows before 3.13)
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _strict(value):
    """NaN and infinities become null: a results file is strict JSON that any reader takes."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def write_json(results: dict, path: Path) -> None:
    """Write atomically (a crash mid-write never leaves a truncated results file), as strict
    JSON; to a name ending in .gz, gzip-compressed with no name or time in the header (the
    same results, the same bytes), as bench/results keeps its large files."""
    text = json.dumps(_strict(results), indent=1, allow_nan=False)
    write_atomic(Path(path), gzip.compress(text.encode(), 9, mtime=0)
                 if Path(path).name.endswith(".gz") else text)


def _umask() -> int:
    from cpuspec.machine import osapi
    return osapi.current().umask()


def check_home() -> None:
    """$CPUSPEC_HOME must be a folder (or not exist yet): a file there is a clear error."""
    home = cpuspec_home()
    if home.exists() and not home.is_dir():
        raise OutputError(f"CPUSPEC_HOME points to {home}, which is a file, not a folder; set "
                          "it to a folder")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:40] or "unknown"


def new_run_path(kind: str, cpu_model: str, now: dt.datetime | None = None) -> Path:
    """$CPUSPEC_HOME/results/<UTC time>-<host>-<CPU model>-<kind>.json, created now, so
    two runs started in the same second still get two files."""
    now = now or dt.datetime.now(dt.timezone.utc)
    stem = f"{now:%Y%m%dT%H%M%SZ}-{_slug(socket.gethostname())}-{_slug(cpu_model)}-{kind}"
    folder = results_dir()
    check_home()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot save the run under {folder}: {exc.strerror or exc}; set "
                          "CPUSPEC_HOME to a writable folder or pass --no-save") from None
    for i in range(1000):
        path = folder / (stem + (f"-{i + 1}" if i else "") + ".json")
        try:
            with open(path, "x"):
                pass
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise OutputError(f"cannot save the run under {folder}: {exc.strerror or exc}; "
                              "set CPUSPEC_HOME to a writable folder or pass --no-save") from None
    raise OutputError(f"too many runs named {stem} in {folder}")


def run_id(path: Path) -> str:
    """A results file's name without .json or .json.gz: a saved run's id, a run's name."""
    name = Path(path).name
    return next((name[:-len(s)] for s in RESULTS_SUFFIXES if name.endswith(s)),
                Path(path).stem)


def results_files(folder: Path, recursive: bool = False) -> list[Path]:
    """The results files in a folder (with recursive, and in its subfolders): NAME.json and
    NAME.json.gz, regular files only (a FIFO or a device named *.json would block the reader
    forever), in the order of their names without .gz (a file compressed keeps its place)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [p for s in RESULTS_SUFFIXES
             for p in (folder.rglob if recursive else folder.glob)("*" + s) if p.is_file()]
    found.sort(key=lambda p: (p.with_name(p.name.removesuffix(".gz")), p.name))
    # NAME.json beside NAME.json.gz is one run (the plain one, first in that order), not two
    return [p for i, p in enumerate(found)
            if not (i and p.name.endswith(".gz")
                    and found[i - 1] == p.with_name(p.name.removesuffix(".gz")))]


def saved_runs() -> list[Path]:
    check_home()
    return results_files(results_dir())


def resolve_run(ref: str) -> Path:
    """A results file path, or the id of a saved run (its file name without .json or .json.gz,
    or a unique prefix of it, or a unique substring)."""
    path = Path(ref)
    if path.exists():
        return path
    runs = saved_runs()
    if len(ref.strip(" -_.")) < 4:   # "-" or "a" is in every id: name more of it
        raise OutputError(f"no results file {ref!r}; a saved run's id needs 4 or more of its "
                          "characters (see `cpuspec runs`)")
    for match in (lambda s: s == ref, lambda s: s.startswith(ref), lambda s: ref in s):
        found = [p for p in runs if match(run_id(p))]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise OutputError(f"{ref!r} matches {len(found)} saved runs: "
                              + ", ".join(run_id(p) for p in found[:5])
                              + ("…" if len(found) > 5 else "") + "; give more of the id")
    raise OutputError(f"no results file or saved run {ref!r} (see `cpuspec runs`)")


def run_listing(path: Path) -> dict:
    """One line of `cpuspec runs`: id, kind, date, machine, pair, tasks (the figures are
    computed by the reader, from the runs). A file that cannot be read, or whose header is
    damaged, is listed as such with the reason; it never stops the listing of the others."""
    row = {"id": run_id(path), "path": str(path)}
    try:
        data = load_json(path)
    except ValueError:   # ResultsError: missing, damaged, truncated
        return row | {"kind": "unreadable"}
    if not isinstance(data, dict):
        return row | {"kind": "unreadable"}
    meta, settings = data.get("meta", {}), data.get("settings", {})
    hw = meta.get("hardware", {}) if isinstance(meta, dict) else None
    kind = data.get("kind", "bench" if "runs" in data else "?")
    tasks = settings.get("tasks") or [] if isinstance(settings, dict) else None
    problem = ("meta is not an object" if not isinstance(meta, dict) else
               "settings is not an object" if not isinstance(settings, dict) else
               "meta.hardware is not an object" if not isinstance(hw, dict) else
               "settings.tasks is not a list of names"
               if not (isinstance(tasks, list) and all(isinstance(t, str) for t in tasks)) else
               "kind is not a name" if not isinstance(kind, str) else None)
    if problem:
        return row | {"kind": "damaged", "problem": problem}
    complete = data.get("complete", True) is not False
    ended = data.get("ended")
    return row | {"kind": kind, "date": str(meta.get("started_at", "")),
                  "machine": str(hw.get("cpu_model", "?")), "threads": settings.get("threads"),
                  "pair": settings.get("pair"), "tasks": ",".join(tasks),
                  "complete": complete,
                  "status": "" if complete else "failed" if isinstance(ended, str)
                  and ended.startswith("failed") else "interrupted"}


class ResultsSink:
    """Every JSON destination of one run (the saved run, --json): rewritten atomically after
    each finished prompt or point, so an interrupted run keeps what it measured."""

    def __init__(self, paths: list[Path], reserved: list[Path] = (), log=None):
        self.paths = [Path(p) for p in paths]
        # files created empty to claim a name (the saved run): removed if nothing is written
        self.reserved = [Path(p) for p in reserved]
        self.last: dict | None = None   # what was measured last (in memory, written or not)
        self.written: dict[Path, str] = {}    # per file, what it holds now, in words (the
        # document itself keeps growing after it was written)
        self.failed: dict[Path, str] = {}     # per file, why the last write failed
        self.log = log

    def discard_unwritten(self) -> None:
        """Remove the reserved files that never got any results (a bad model name, an
        interrupt during loading, a full disk): no empty results file is left behind."""
        for p in self.reserved:
            if p in self.written:
                continue
            try:
                if p.stat().st_size == 0:
                    p.unlink()
            except OSError:
                pass
        self.paths = [p for p in self.paths if p not in self.reserved or p in self.written]

    def __call__(self, results: dict) -> None:
        """Write every destination. A write that fails (a full disk, a folder gone) does not
        stop the run: the results stay in memory, the file keeps what it last held, and
        finish() says so at the end. A document that measured nothing yet (no generation,
        point or candidate) is not written: an interrupt before the first leaves no file and
        a file the user named (--json, --force) as it was."""
        self.last = results
        if _measured_nothing(results):
            return
        for p in self.paths:
            try:
                write_json(results, p)
            except OSError as exc:
                if p not in self.failed and self.log is not None:
                    self.log(f"cannot write {p} ({exc.strerror or exc}); measuring goes on, "
                             "the results are kept in memory")
                self.failed[p] = exc.strerror or str(exc)
            else:
                self.written[p] = _count(results)
                self.failed.pop(p, None)

    def mark_ended(self, how: str) -> None:
        """Rewrite the last results with how the run ended early ("interrupted", "failed:
        …"), so that `cpuspec runs` can tell them apart; nothing if nothing was written."""
        if self.last is not None and self.written:
            self({**self.last, "complete": False, "ended": how})

    def failures(self, printed: bool = True) -> str | None:
        """What could not be written, and what each such file holds: None when all went.
        printed: the command printed its summary of everything measured."""
        if not self.failed:
            return None
        parts = []
        for p, why in self.failed.items():
            held = self.written.get(p)
            parts.append(f"cannot write {p} ({why}); it holds "
                         + (held + " from an earlier write" if held is not None else
                            "nothing"))
        if not printed:
            return "; ".join(parts)
        return ("; ".join(parts) + ". What was printed above is from everything measured ("
                + (_count(self.last) if self.last is not None else "nothing") + "); free "
                "some space and run again to save it")

    def kept(self) -> str:
        """What an interrupted run leaves, in words."""
        good = [p for p in self.paths if p in self.written and p not in self.failed]
        if not good:
            return "nothing was saved" + (f" ({self.failures(False)})" if self.failed else "")
        return (f"{self.written[good[0]]} kept in {', '.join(map(str, good))} "
                f"(\"complete\": false)")


def _measured_nothing(doc: dict) -> bool:
    """An unfinished document whose lists of measurements (runs, rows, measured) are all
    empty (documents of other kinds, without such lists, always count as measured)."""
    lists = [doc[k] for k in ("runs", "rows", "measured", "raw_runs", "points", "ranking")
             if isinstance(doc.get(k), list)]
    return bool(lists) and not any(lists) and not doc.get("complete")


def _count(doc: dict) -> str:
    """How much a results document holds, in words."""
    for key, what in (("runs", "generations"), ("rows", "sweep points"),
                      ("measured", "tune candidates")):
        if isinstance(doc.get(key), list):
            return f"{len(doc[key])} {what}"
    return "the results so far"


@functools.lru_cache(maxsize=256)
def _read_saved(path: Path, mtime_ns: int, size: int) -> dict | None:
    """A saved paths or load run, parsed once per process and version of the file (advise and
    the first screen ask for several of them: load_note, server_paths_run, measured_paths).
    None where it is not one. Callers must not change the dict."""
    try:
        doc = load_json(path)
        doc["settings"]["target"]
    except (ValueError, KeyError, TypeError):   # ValueError: ResultsError, unreadable
        return None
    return doc


def saved_paths_runs(meta: dict | None, kind: str = "paths"):
    """Complete saved `cpuspec paths` runs of `kind` (paths, or load: `--concurrency`), newest
    first, as (doc, path); with `meta` (the environment of the file being printed), only those
    from the same machine (CPU model and llama.cpp's system info): a recorded file from
    elsewhere is not answered with this machine's runs."""
    try:
        runs = saved_runs()
    except OutputError:
        return
    for path in reversed(runs):
        if not run_id(path).endswith("-paths"):
            continue
        try:
            st = path.stat()
            doc = _read_saved(path, st.st_mtime_ns, st.st_size)
        except OSError:
            continue
        if doc is not None and doc.get("complete") and doc.get("kind", "paths") == kind and (
                meta is None or Machine.of(doc).same_as(Machine.of({"meta": meta}))):
            yield doc, path
