"""What Linux and macOS share: process groups, flock. Linux adds PR_SET_PDEATHSIG (a child
dies with us even when we are SIGKILLed); macOS has no such call, so a child of a killed
cpuspec finishes on its own (its own timeouts bound it)."""
from __future__ import annotations

import contextlib
import os
import signal


def _no_core() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def popen_kwargs(preexec=None, core_dump: bool = True) -> dict:
    """A process group of its own (the terminal's Ctrl-C reaches us only; wait/stop kill the
    whole group), optionally no core file."""
    steps = [f for f in (preexec, None if core_dump else _no_core) if f]

    def child():
        for f in steps:
            f()
    return {"start_new_session": True, "preexec_fn": child if steps else None}


def kill_tree(proc) -> None:
    """SIGKILL the child's process group (its own, from popen_kwargs) or the child alone."""
    try:
        if proc.returncode is None and os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
        elif proc.returncode is None:
            proc.kill()
        else:   # reaped already (macOS before Python 3.13 polls): what it left in its group
            os.killpg(proc.pid, signal.SIGKILL)   # a live group's id is no one else's pid
    except (ProcessLookupError, PermissionError):
        pass


def exited(proc) -> bool:
    """Whether the child has exited, without reaping it (it stays a zombie, holding its pid
    and so its group's id until kill_tree has run)."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:   # reaped elsewhere already
        return True
    except AttributeError:      # no waitid (macOS before Python 3.13)
        return proc.poll() is not None


@contextlib.contextmanager
def locked(handle, wait: bool = True):
    """An exclusive lock on an open file, held for the block (flock: released on close and
    when the process dies). wait=False: BlockingIOError at once where another holds it."""
    import fcntl
    fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)


def rusage() -> dict:
    """This process's context switches and page faults so far (getrusage)."""
    import resource
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"voluntary_ctx_switches": ru.ru_nvcsw, "involuntary_ctx_switches": ru.ru_nivcsw,
            "minor_page_faults": ru.ru_minflt, "major_page_faults": ru.ru_majflt}


def load_average() -> float | None:
    """The 1-minute load average (None where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def sync_disks() -> None:
    """Written files' pages reach the disk now (sync)."""
    os.sync()


def keep_full_speed() -> bool:
    """Nothing throttles a foreground process here as Windows' EcoQoS does: nothing to do."""
    return True
