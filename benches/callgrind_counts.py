"""Counting instead of timing: a command run under valgrind's callgrind, with collection on
only inside chosen functions, and the counts it leaves behind.

On a host whose speed wanders, a change of a few percent cannot be timed reliably, but
it can be counted: instructions, mispredicted branches and cache misses of a simulated
processor are the same from one run to the next (to within a few in a hundred thousand: the
interpreter's work inside a call varies a little). The counts model neither prefetching
nor memory latency nor the host's state, so they complement timings and never replace
them. The simulated caches are set to this project's usual test host (an AMD Zen 3:
32 KiB, 8-way first-level caches, 512 KiB 8-way L2 as the last level), since valgrind's
own detection of the last level is unreliable on virtual machines.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict, List, Sequence

#: The simulated caches: first-level instruction and data caches, and the last level.
CACHE_MODEL = ("--I1=32768,8,64", "--D1=32768,8,64", "--LL=524288,8,64")


def available() -> bool:
    """Whether valgrind is installed."""
    return shutil.which("valgrind") is not None


def command(out_file: Path, functions: Sequence[str], argv: Sequence[str]) -> List[str]:
    """The command that runs ``argv`` under callgrind, collecting only while inside one of
    ``functions`` (callgrind's patterns, ``*`` matching any run of characters; they must
    not call one another, or entering the inner one would switch collection off)."""
    if not functions:
        raise ValueError("name at least one function to count")
    toggles = [f"--toggle-collect={f}" for f in functions]
    return [
        "valgrind",
        "--tool=callgrind",
        "--collect-atstart=no",
        *toggles,
        "--cache-sim=yes",
        "--branch-sim=yes",
        *CACHE_MODEL,
        f"--callgrind-out-file={out_file}",
        *argv,
    ]


def totals(out_file: Path) -> Dict[str, int]:
    """The total of each event in a callgrind output file, by event name (``Ir``,
    ``D1mr``, ``Bcm``, ...)."""
    events: List[str] = []
    found: Dict[str, int] = {}
    for line in Path(out_file).read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith(("totals:", "summary:")) and events:
            values = [int(v) for v in line.split()[1:]]
            found = dict(zip(events, values + [0] * (len(events) - len(values))))
            if line.startswith("totals:"):
                break
    if not found:
        raise ValueError(f"{out_file}: no totals in it (did the run collect anything?)")
    return found


def summary(counts: Dict[str, int]) -> Dict[str, int]:
    """The figures compared: instructions, mispredicted branches (conditional and
    indirect), first-level data misses and last-level misses (reads and writes)."""
    return {
        "instructions": counts.get("Ir", 0),
        "mispredicted": counts.get("Bcm", 0) + counts.get("Bim", 0),
        "L1 data misses": counts.get("D1mr", 0) + counts.get("D1mw", 0),
        "last-level misses": counts.get("ILmr", 0) + counts.get("DLmr", 0) + counts.get("DLmw", 0),
    }
