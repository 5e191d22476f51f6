"""Ctrl-C and SIGTERM that are honoured in every phase.

Python runs a signal handler between bytecodes, and llama.cpp calls back into Python for every
log line (engine._quiet_log): a KeyboardInterrupt raised inside a ctypes callback (or in an
at-fork hook when a child process starts) is reported as "unraisable" and dropped. A run that
loads models, quantizes or decodes could therefore swallow the one SIGTERM that `timeout` sends
(seen: `cpuspec tune` went on for 20 minutes). So the handler also sets a flag; the engine
checks it after every call into llama.cpp, a wait for a child process checks it ten times a
second, and the end of the command checks it once more: a dropped interrupt is raised again
within one decode. The dropped one is not printed as a traceback.
"""
from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time

from cpuspec.machine import osapi

_requested = threading.Event()
_last_signal: int | None = None     # the signal that asked us to stop (its exit code: 128 + it)
# What stops a command: Ctrl-C, `kill`/`timeout`, and a terminal that closed.
STOP_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM,
                                 getattr(signal, "SIGHUP", None)) if s is not None)


def _on_signal(signum, frame):
    global _last_signal
    _last_signal = signum
    _requested.set()
    raise KeyboardInterrupt


def exit_code() -> int:
    """The shell's code for the signal that stopped us: 130 for Ctrl-C (and a KeyboardInterrupt
    of no signal), 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + int(_last_signal or signal.SIGINT)


def check() -> None:
    """Raise KeyboardInterrupt if a stop was asked for and not yet acted on (main thread
    only: a worker thread's exception would not stop the run)."""
    if _requested.is_set() and threading.current_thread() is threading.main_thread():
        raise KeyboardInterrupt


class ChildTimeout(RuntimeError):
    """A child process ran past its time limit (it has been killed)."""


def start_child(argv, core_dump: bool = True, die_with_parent: bool = True, **kwargs):
    """Start a program in a process group of its own (POSIX: a session; Windows: a new process
    group), so that the terminal's Ctrl-C reaches us only and wait_child can stop it with
    everything it started (a shell script's children too); on Linux it is also killed if we
    are (SIGKILL gives us no chance to). core_dump=False for a child expected to crash: it
    leaves no core file behind. How each OS does it: machine/osapi."""
    return subprocess.Popen(argv, **osapi.current().popen_kwargs(core_dump, die_with_parent),
                            **kwargs)


def wait_child(proc, poll_s: float = 0.1, timeout_s: float | None = None) -> int:
    """Wait for a child process while honouring a stop request and a time limit: on either,
    or on any other exception, the child's process group is killed (and the child reaped)
    and KeyboardInterrupt, ChildTimeout or the exception raised. Whatever the child left
    running in its group when it exited is killed too: the child is reaped only after that,
    so its pid (the group's id) cannot have been given to another process meanwhile."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while not exited(proc):
            time.sleep(poll_s)
            check()
            if deadline is not None and time.monotonic() > deadline:
                raise ChildTimeout(f"stopped after {timeout_s:g} s")
    finally:
        _kill_group(proc)
    return proc.wait()


def stop_child(proc) -> int:
    """Stop a child started by start_child now: kill its process group, reap it; its exit
    status (negative: the signal)."""
    _kill_group(proc)
    return proc.returncode


def exited(proc) -> bool:
    """Whether the child has exited, without reaping it where the OS allows (POSIX: it stays
    a zombie, holding its pid and so its group's id)."""
    return osapi.current().exited(proc)


def _kill_group(proc) -> None:
    """Kill the child with everything it started (its process group, or its tree on
    Windows), then reap it."""
    osapi.current().kill_tree(proc)
    proc.wait()


def _cut_by_us(unraisable) -> bool:
    """An unraisable exception our stop request caused: our KeyboardInterrupt, dropped where it
    could not be raised (check() raises it again), or logging's after-fork hook failing to
    release the lock its before-fork hook never took because our interrupt cut that hook
    ("cannot release un-acquired lock": seen in tests/test_signals.py's derive, SIGTERM at 0 s)."""
    if not _requested.is_set():
        return False
    hook_of_logging = getattr(unraisable.object, "__module__", None) == "logging"
    return unraisable.exc_type is KeyboardInterrupt or (
        hook_of_logging and unraisable.exc_type is RuntimeError)


def _quiet_unraisable(previous):
    def hook(unraisable):
        if not _cut_by_us(unraisable):
            previous(unraisable)
    return hook


@contextlib.contextmanager
def deferred():
    """Hold Ctrl-C, SIGTERM and SIGHUP for a block that must not be cut half way (a pip
    reinstall of the library cpuspec runs on): a stop asked for meanwhile is acted on right
    after it (KeyboardInterrupt, main thread only). Inside, wait_child sees no stop request,
    so the child is not killed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    check()   # a stop already asked for: acted on before the block starts, not inside it
    held: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum))
                for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    if held:
        global _last_signal
        _last_signal = held[0]
        _requested.set()
        check()


@contextlib.contextmanager
def handled():
    """Install the handler for SIGINT, SIGTERM and SIGHUP for the duration (main thread
    only), and forget a stop request on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    global _last_signal
    _last_signal = None
    previous = {s: signal.signal(s, _on_signal) for s in STOP_SIGNALS}
    previous_hook, sys.unraisablehook = sys.unraisablehook, _quiet_unraisable(
        sys.unraisablehook)
    try:
        yield
        check()   # asked to stop where it could not be raised, and nothing checked since
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        sys.unraisablehook = previous_hook
        _requested.clear()
