"""The built-in default corpus: the running Python's standard-library sources.

Every machine with Python has them, so commands and benchmarks can run on real text with
no download. Files are taken in sorted path order, so a given Python version always yields
the same text.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path
from typing import Iterator, List, Optional, Tuple


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
    for text in _read_all(stdlib_files()):
        size = len(text.encode("utf-8"))
        if seen < skip_bytes:
            seen += size
            continue
        yield text
        given += size
        if limit_bytes is not None and given >= limit_bytes:
            return


def stdlib_split(held_out_every: int = 10) -> Tuple[Iterator[str], List[str]]:
    """The standard-library sources split into training text and held-out text.

    Every ``held_out_every``-th file (in sorted order) is held out; returns an iterator over
    the training files' texts and the list of held-out texts.
    """
    files = stdlib_files()
    held = [p for i, p in enumerate(files) if i % held_out_every == 0]
    train = [p for i, p in enumerate(files) if i % held_out_every != 0]
    return _read_all(train), list(_read_all(held))


def _read_all(paths: List[Path]) -> Iterator[str]:
    for path in paths:
        try:
            yield path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
