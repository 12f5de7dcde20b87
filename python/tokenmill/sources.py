"""Reading training documents from files: plain text (a document per file or per line),
JSON Lines, and Parquet (streamed in record batches, so multi-GB files stay in bounded
memory). Paths may be files, directories (read recursively) or glob patterns.
"""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

FORMATS = ("auto", "text", "lines", "jsonl", "parquet")


def expand_paths(paths: Sequence[str]) -> List[Path]:
    """Files named by ``paths`` (globs expanded, directories walked), sorted per argument.

    Raises:
        FileNotFoundError: A path or pattern matches no file.
    """
    out: List[Path] = []
    for p in paths:
        matches = sorted(glob.glob(os.path.expanduser(p), recursive=True)) if glob.has_magic(p) else [p]
        if not matches:
            raise FileNotFoundError(f"no file matches {p!r}")
        for m in matches:
            mp = Path(m)
            if mp.is_dir():
                out.extend(sorted(f for f in mp.rglob("*") if f.is_file()))
            elif mp.is_file():
                out.append(mp)
            else:
                raise FileNotFoundError(f"no such file: {m}")
    return out


def _format_of(path: Path, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz", ".ndjson")):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    return "text"


def _open_text(path: Path):
    if path.suffix == ".gz":
        import gzip

        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def iter_documents(
    paths: Sequence[str],
    *,
    format: str = "auto",
    column: str = "text",
    batch_size: int = 1024,
) -> Iterator[str]:
    """Yields the documents of every file of ``paths``.

    Args:
        format: ``text`` (one document per file), ``lines`` (one per non-empty line),
            ``jsonl`` (the ``column`` field of each JSON object), ``parquet`` (the ``column``
            column), or ``auto`` (by file extension: ``.jsonl``, ``.parquet``, else text).
        column: The field or column holding the text.
        batch_size: Rows per Parquet record batch.

    Raises:
        ValueError: Unknown format, a JSON line that is not an object with a string
            ``column``, or a Parquet file without ``column``.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    for path in expand_paths(paths):
        fmt = _format_of(path, format)
        if fmt == "text":
            with _open_text(path) as f:
                yield f.read()
        elif fmt == "lines":
            with _open_text(path) as f:
                for line in f:
                    line = line.rstrip("\n")
                    if line:
                        yield line
        elif fmt == "jsonl":
            yield from _iter_jsonl(path, column)
        else:
            yield from _iter_parquet(path, column, batch_size)


def _iter_jsonl(path: Path, field: str) -> Iterator[str]:
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from e
            if not isinstance(obj, dict) or field not in obj:
                raise ValueError(f"{path}:{lineno}: no {field!r} field")
            text = obj[field]
            if text is None:
                continue
            if not isinstance(text, str):
                raise ValueError(f"{path}:{lineno}: field {field!r} is a {type(text).__name__}, not a string")
            yield text


def _iter_parquet(path: Path, column: str, batch_size: int) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ImportError("reading Parquet needs pyarrow: pip install 'tokenmill[parquet]'") from e
    pf = pq.ParquetFile(path)
    names = pf.schema_arrow.names
    if column not in names:
        raise ValueError(f"{path} has no column {column!r} (columns: {', '.join(names)})")
    for batch in pf.iter_batches(batch_size=batch_size, columns=[column]):
        for text in batch.column(0).to_pylist():
            if text is not None:
                yield text


def count_files(paths: Sequence[str]) -> Optional[int]:
    """The number of files ``paths`` names (None if it cannot be told cheaply)."""
    try:
        return len(expand_paths(paths))
    except OSError:
        return None
