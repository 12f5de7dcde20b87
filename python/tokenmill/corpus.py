"""The built-in default corpus: the running Python's standard-library sources.

Every machine with Python has them, so commands and benchmarks can run on real text with
no download. Files are taken in sorted path order, so a given Python version always yields
the same text.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path
from typing import Iterator, List, Optional


def stdlib_root() -> Path:
    """The directory of the running Python's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files() -> List[Path]:
    """Every ``.py`` file of the standard library (third-party packages excluded), sorted."""
    root = stdlib_root()
    skip = {"site-packages", "dist-packages", "__pycache__"}
    return sorted(p for p in root.rglob("*.py") if not skip.intersection(p.relative_to(root).parts))


def stdlib_texts(limit_bytes: Optional[int] = None, *, skip_bytes: int = 0) -> Iterator[str]:
    """Yields standard-library sources as text, one file per item.

    Args:
        limit_bytes: Stop once this many UTF-8 bytes were yielded (None: all files).
        skip_bytes: First skip files until this many bytes were passed over, so that two
            calls can yield disjoint samples (e.g. training and held-out text).
    """
    seen = 0
    given = 0
    for path in stdlib_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        size = len(text.encode("utf-8"))
        if seen < skip_bytes:
            seen += size
            continue
        yield text
        given += size
        if limit_bytes is not None and given >= limit_bytes:
            return
