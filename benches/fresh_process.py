"""Running a benchmark's measurement in a fresh Python process.

Several libraries keep caches of what they encoded (tokenmill's piece caches, fastokens'
and HF's word caches), so a fair figure comes from a process that has seen nothing: the
benchmark script runs itself again with ``--worker <spec as JSON>``, the worker writes its
result as JSON to ``spec["out"]``, and this reads it back.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional


def run_fresh(script: str, spec: dict, tmp: str) -> Optional[dict]:
    """``script --worker spec`` in a new process (nothing downloaded: ``TOKENMILL_OFFLINE``
    set); what it wrote, or ``None`` with a one-line note if it failed."""
    spec = dict(spec, out=os.path.join(tmp, "out.json"))
    proc = subprocess.run(
        [sys.executable, os.path.abspath(script), "--worker", json.dumps(spec)],
        env=dict(os.environ, TOKENMILL_OFFLINE="1"),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        what = " ".join(str(spec[k]) for k in ("lib", "mode") if k in spec)
        print(f"  {what} failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
        return None
    return json.loads(Path(spec["out"]).read_text())


def parse_or_work(ap: argparse.ArgumentParser, worker: Callable[[dict], object]) -> Optional[argparse.Namespace]:
    """Parses the command line of a script that measures through :func:`run_fresh`. In the
    fresh process (``--worker``, added here) it runs ``worker(spec)`` and returns ``None``;
    otherwise it returns the arguments."""
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return None
    return args
