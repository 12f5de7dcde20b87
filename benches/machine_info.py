"""A description of the machine and library versions, printed at the top of each benchmark."""

from __future__ import annotations

import os
import platform
import sys
from typing import Iterable, List, Tuple


def _first_field(path: str, prefix: str) -> str:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def machine_line() -> str:
    """CPU model, cores (and how many this process may use), memory, OS."""
    cores = os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    cpu = _first_field("/proc/cpuinfo", "model name") or platform.processor() or platform.machine()
    mem_kib = _first_field("/proc/meminfo", "MemTotal").split()
    mem = f", {int(mem_kib[0]) / 1024**2:.1f} GiB RAM" if mem_kib else ""
    return (
        f"machine: {cpu} ({platform.machine()}), {cores} cores ({usable} usable){mem}, "
        f"{platform.system()} {platform.release()}"
    )


def versions(libraries: Iterable[Tuple[str, str]]) -> List[str]:
    """``"label version"`` for each ``(label, distribution name)``."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for label, dist in libraries:
        try:
            out.append(f"{label} {version(dist)}")
        except PackageNotFoundError:
            out.append(f"{label} (not installed)")
    return out


def python_line() -> str:
    return f"Python {platform.python_version()} ({sys.executable})"


def header_lines(libraries: Iterable[Tuple[str, str]]) -> List[str]:
    """The first lines of every report: the machine, Python, and each ``(label,
    distribution name)``'s version."""
    return [machine_line(), python_line(), "versions: " + ", ".join(versions(libraries))]
