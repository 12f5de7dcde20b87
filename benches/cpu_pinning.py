"""Pinning one-thread measurements to one CPU.

A process the scheduler may move between CPUs leaves its caches behind at every move. On
the project's 2-core VM, one-thread encoding runs that were free to move were slower and
far noisier than the same runs pinned to one CPU: the Rust harness's short slice ran at
about 70 MB/s unpinned and 107-142 MB/s pinned, and the paired ratios of
``encode_compare.py`` against gigatoken ranged 1.10-1.53 (short) and 0.86-1.36 (long)
unpinned, 1.07-1.28 and 1.10-1.28 pinned, in runs minutes apart. Every library's worker is
pinned the same way, so no library gains from it over another; batch runs, which need
every core, are never pinned.
"""

from __future__ import annotations

import os
from typing import Optional


def one_cpu(enabled: bool = True) -> Optional[int]:
    """The CPU that one-thread runs are pinned to: the highest one this process may run on
    (the first CPU usually takes more of the machine's interrupts). None when pinning is
    off, unsupported here, or there is only one CPU to run on anyway."""
    if not enabled or not hasattr(os, "sched_getaffinity") or not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[-1] if len(cpus) > 1 else None


def pin(cpu: Optional[int]) -> None:
    """Keeps the calling process (and the threads it starts later) on ``cpu``; nothing for
    None."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def describe(cpu: Optional[int]) -> str:
    """One line for a benchmark's header."""
    if cpu is None:
        return "one-thread runs: not pinned (free to move between CPUs)"
    return f"one-thread runs: pinned to CPU {cpu} (--no-pin: free to move); batches use every CPU"
