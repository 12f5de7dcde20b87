"""The ``tokenmill`` command line."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence


def _read_inputs(files: Sequence[str], limit_mb: float) -> List[str]:
    from tokenmill.corpus import stdlib_texts

    if not files:
        return list(stdlib_texts(int(limit_mb * 1e6)))
    texts = []
    for f in files:
        try:
            texts.append(Path(f).read_text(encoding="utf-8", errors="surrogateescape"))
        except OSError as e:
            raise SystemExit(f"tokenmill: cannot read {f}: {e.strerror or e}")
    return texts


def cmd_encode(args: argparse.Namespace) -> int:
    import tokenmill

    try:
        enc = tokenmill.get_encoding(args.encoding)
    except (ValueError, OSError) as e:
        print(f"tokenmill: {e}", file=sys.stderr)
        return 2
    texts = _read_inputs(args.files, args.limit_mb)
    source = ", ".join(args.files) if args.files else "the Python standard library's sources (built-in default)"
    nbytes = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
    t0 = time.perf_counter()
    if args.threads == 1:
        ids = [enc.encode_ordinary(t) for t in texts]
    else:
        ids = enc.encode_ordinary_batch(texts, num_threads=args.threads or tokenmill._core.available_cores())
    dt = time.perf_counter() - t0
    ntok = sum(len(x) for x in ids)
    print(f"encoded {len(texts)} text(s) from {source}")
    print(f"encoding:        {enc.name} ({enc.n_vocab} ids)")
    print(f"bytes:           {nbytes:,}")
    print(f"tokens:          {ntok:,}")
    print(f"bytes per token: {nbytes / max(ntok, 1):.3f}")
    print(f"time:            {dt:.3f} s ({nbytes / 1e6 / max(dt, 1e-9):.1f} MB/s)")
    if args.output:
        import numpy as np

        np.save(args.output, np.fromiter((i for x in ids for i in x), dtype=np.uint32, count=ntok))
        print(f"ids written to:  {args.output}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tokenmill", description="Fast byte-level BPE tokenizer.")
    sub = ap.add_subparsers(dest="command")
    enc = sub.add_parser("encode", help="encode files (default: the Python standard library's sources)")
    enc.add_argument("files", nargs="*", help="UTF-8 text files; none: the built-in default corpus")
    enc.add_argument("--encoding", default="cl100k_base", help="encoding name (default cl100k_base)")
    enc.add_argument("--threads", type=int, default=0, help="worker threads (default: all cores; 1: no batch)")
    enc.add_argument("--limit-mb", type=float, default=20.0, help="size of the default corpus sample in MB")
    enc.add_argument("--output", help="save all ids, concatenated, as a .npy uint32 array")
    enc.set_defaults(func=cmd_encode)
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if not getattr(args, "func", None):
        args = ap.parse_args(["encode", *(argv or [])])
    return args.func(args)
