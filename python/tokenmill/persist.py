"""Saving an encoding to a directory and loading it back.

A saved encoding is a directory with two files:

* ``tokenizer.tiktoken``: the mergeable ranks in tiktoken's format (``base64 rank`` lines),
  so tiktoken's own ``load_tiktoken_bpe`` reads it too;
* ``tokenmill.json``: the name, split pattern, special tokens and, for trained encodings,
  the merges in training order.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Union

from tokenmill.core import Encoding
from tokenmill.load import dump_tiktoken_bpe, load_tiktoken_bpe

RANKS_FILE = "tokenizer.tiktoken"
META_FILE = "tokenmill.json"
FORMAT_VERSION = 1

PathLike = Union[str, "os.PathLike[str]"]


def save(encoding: Encoding, directory: PathLike) -> Path:
    """Writes ``encoding`` into ``directory`` (created if needed) and returns its path."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    dump_tiktoken_bpe(encoding._mergeable_ranks, str(out / RANKS_FILE))
    meta = {
        "format": "tokenmill",
        "version": FORMAT_VERSION,
        "name": encoding.name,
        "pattern": encoding._pat_str,
        "special_tokens": encoding._special_tokens,
    }
    merges = getattr(encoding, "_merges", None)
    if merges is not None:
        meta["merges"] = [list(m) for m in merges]
    tmp = out / (META_FILE + ".tmp")
    tmp.write_text(json.dumps(meta, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, out / META_FILE)
    return out


def load(directory: PathLike) -> Encoding:
    """Loads an encoding saved by :func:`save`.

    Raises:
        FileNotFoundError: The directory lacks one of the two files.
        ValueError: A file is malformed.
    """
    d = Path(directory)
    meta_path, ranks_path = d / META_FILE, d / RANKS_FILE
    for p in (meta_path, ranks_path):
        if not p.is_file():
            raise FileNotFoundError(f"{p} not found: {d} is not a saved tokenmill encoding")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{meta_path} is not valid JSON: {e}") from e
    if meta.get("format") != "tokenmill" or meta.get("version") != FORMAT_VERSION:
        raise ValueError(f"{meta_path}: unsupported format {meta.get('format')!r} version {meta.get('version')!r}")
    enc = Encoding(
        meta["name"],
        pat_str=meta["pattern"],
        mergeable_ranks=load_tiktoken_bpe(str(ranks_path)),
        special_tokens={str(k): int(v) for k, v in meta["special_tokens"].items()},
    )
    if "merges" in meta:
        enc._merges = [tuple(m) for m in meta["merges"]]  # type: ignore[attr-defined]
    return enc


def load_saved_or_named(name_or_dir: PathLike) -> Encoding:
    """The encoding saved in directory ``name_or_dir`` by :func:`save` if there is one, else
    the pretrained encoding of that name (:func:`tokenmill.get_encoding`). What the command
    line's ``--encoding NAME_OR_DIR`` options take."""
    if os.path.isdir(name_or_dir):
        return load(name_or_dir)
    from tokenmill.registry import get_encoding

    return get_encoding(str(name_or_dir))
