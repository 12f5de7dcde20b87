"""Finding the real-text files the benchmarks read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, List


def files_under(root: Path, keep: Callable[[str], bool] = lambda name: True) -> List[Path]:
    """Regular files under ``root`` whose name ``keep`` accepts, sorted; links and
    ``__pycache__`` are skipped, and a missing ``root`` gives no files."""
    found: List[Path] = []
    if not root.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if not keep(name):
                continue
            path = Path(dirpath, name)
            if path.is_symlink() or not path.is_file():
                continue
            found.append(path)
    return sorted(found)
