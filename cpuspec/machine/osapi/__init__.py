"""The one door to the operating system (as psutil's __init__ over _pslinux/_psosx/_pswindows).

Every other module of cpuspec asks here: where this process may run and how to pin it, what the
cores are, what the OS says of noise, how to start and stop a child, how to lock a file. The OS
module is chosen on each call from sys.platform (so a test can simulate another OS), and what an
OS cannot do is a value (`pinning() == "none"`), never an AttributeError three modules later.
"""
from __future__ import annotations

import sys
from types import ModuleType

from cpuspec.machine.osapi.common import (PINNING_MODES, PinningUnsupported, RawCore,
                                           Topology, parse_cpu_list)

__all__ = ["PINNING_MODES", "PinningUnsupported", "RawCore", "Topology", "parse_cpu_list",
           "current", "os_name", "pinning"]


def current() -> ModuleType:
    """The module for the OS this runs on: Linux (and any other POSIX with sysfs), macOS or
    Windows."""
    if sys.platform == "darwin":
        from cpuspec.machine.osapi import darwin
        return darwin
    if sys.platform in ("win32", "cygwin"):
        from cpuspec.machine.osapi import windows
        return windows
    from cpuspec.machine.osapi import linux
    return linux


def os_name() -> str:
    """'linux', 'darwin' or 'win32', as results record it."""
    return current().NAME


def pinning() -> str:
    """What this OS lets a program choose: 'thread' (each thread its own CPUs), 'process'
    or 'none'."""
    return current().PINNING
