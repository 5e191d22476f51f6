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
import threading

_requested = threading.Event()


def _on_signal(signum, frame):
    _requested.set()
    raise KeyboardInterrupt


def check() -> None:
    """Raise KeyboardInterrupt if a stop was asked for and not yet acted on (main thread
    only: a worker thread's exception would not stop the run)."""
    if _requested.is_set() and threading.current_thread() is threading.main_thread():
        raise KeyboardInterrupt


def wait_child(proc, poll_s: float = 0.1) -> int:
    """Wait for a child process while honouring a stop request: the child is killed (and
    reaped) and KeyboardInterrupt raised."""
    import subprocess
    try:
        while True:
            try:
                return proc.wait(timeout=poll_s)
            except subprocess.TimeoutExpired:
                check()
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def _quiet_unraisable(previous):
    def hook(unraisable):
        if unraisable.exc_type is KeyboardInterrupt and _requested.is_set():
            return   # ours, dropped where it could not be raised; check() raises it again
        previous(unraisable)
    return hook


@contextlib.contextmanager
def handled():
    """Install the handler for SIGINT and SIGTERM for the duration (main thread only), and
    forget a stop request on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    import sys
    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
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
