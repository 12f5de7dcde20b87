"""Merging speed: every library on pieces it has never seen, each piece once.

On a long stream most pieces of text are words a tokenizer has met before, and every
library with a piece cache answers those from it; what is left is the byte-pair merging
of the pieces met for the first time. This benchmark isolates that part. It takes the
two slices of ``encode_compare.py`` (the same code, docs, manpages and UI text),
pre-tokenizes the long one, and keeps each distinct piece of at least ``--min-bytes``
bytes that is no token (so it must be merged) and that the short slice lacks, one per
line: a text where every piece but the newlines is new. Pieces with whitespace after
their first character are left out (a line break after them could change how they
split), and the text is checked to pre-tokenize back into exactly those pieces and
newlines.

Each library encodes that text in a fresh process (``encode_compare.py``'s worker): a
fresh object first encodes the short slice, untimed, so that one-time set-up is out of
the figure, then makes one encode call per document of 1,000 pieces; best of
``--repeat`` runs in rounds. The figures are MB/s, nanoseconds per piece and tokenmill's
speed over each library's (best runs, and paired per round), with a parity column
against tiktoken. Scanning and the cache probes of the newlines are in every figure, so
the time per piece is an upper bound on a merge.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import encode_compare as ec  # noqa: E402
from cpu_pinning import describe, one_cpu  # noqa: E402


def new_pieces(split: Callable[[str], List[str]], ranks, short_docs, long_docs, kind: str = "all") -> Iterator[Tuple[str, bytes]]:
    """The long slice's distinct pieces that the short slice lacks and that are no token,
    as (str, UTF-8 bytes), in order of first appearance; with ``kind``, only in documents
    of that kind."""
    seen = {p for _, _, text in short_docs for p in split(text)}
    for k, _, text in long_docs:
        if kind != "all" and k != kind:
            continue
        for p in split(text):
            if p in seen:
                continue
            seen.add(p)
            b = p.encode("utf-8")
            if b not in ranks:
                yield p, b


def first_seen_documents(name: str, short_mb: float, long_mb: float, min_bytes: int) -> Tuple[List[str], List[str]]:
    """(the short slice's documents, the long slice's distinct non-token pieces that the
    short slice lacks, one per line, in documents)."""
    import tokenmill

    enc = tokenmill.get_encoding(name)
    (short_docs, slice_docs), _ = ec.build_slices([int(short_mb * 1e6), int(long_mb * 1e6)])
    pieces = [
        p
        for p, b in new_pieces(enc._core_bpe.split, enc._mergeable_ranks, short_docs, slice_docs)
        if len(b) >= min_bytes and p[0] != "\n" and not any(c.isspace() for c in p[1:])
    ]
    docs: List[str] = []
    for start in range(0, len(pieces), 1000):
        chunk = pieces[start : start + 1000]
        doc = "\n".join(chunk) + "\n"
        # The pieces must come back as they are (a piece and its newline could join).
        split = [p for p in enc._core_bpe.split(doc) if p != "\n"]
        if split != chunk:
            chunk = [p for p in chunk if enc._core_bpe.split(p + "\n") == [p, "\n"]]
            doc = "\n".join(chunk) + "\n"
            if [p for p in enc._core_bpe.split(doc) if p != "\n"] != chunk:
                continue
        docs.append(doc)
    return [text for _, _, text in short_docs], docs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--encodings", nargs="+", default=["cl100k_base", "o200k_base"])
    ap.add_argument("--short-mb", type=float, default=4.5, help="MB of the warm-up text (default 4.5)")
    ap.add_argument("--long-mb", type=float, default=20.0, help="MB of text the pieces come from (default 20)")
    ap.add_argument("--min-bytes", type=int, default=5, help="shortest piece kept (default 5 bytes)")
    ap.add_argument("--repeat", type=int, default=3, help="fresh-process runs per figure; the best is kept")
    ap.add_argument("--no-pin", action="store_true", help="let the runs move between CPUs (default: pinned to one)")
    ap.add_argument("--libs", nargs="+", default=["tokenmill", "fastokens", "wordchipper", "bpe_openai", "tiktoken"], choices=list(ec.LIBRARIES))
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()
    from tokenmill.load import cache_path_for

    for line in ec.machine_lines():
        print(line)
    libs = [lib for lib in ec.RUN_ORDER if lib in args.libs and importlib.util.find_spec(ec.LIBRARIES[lib][0])]
    if "tokenmill" not in libs:
        print("tokenmill is not installed")
        return 1
    if "fastokens" in libs:
        print("fastokens: FASTOKENS_BPE_THREADS=1, every call on the calling thread")
    cpu = one_cpu(not args.no_pin)
    print(describe(cpu))
    env = dict(os.environ, TOKENMILL_OFFLINE="1", HF_HUB_OFFLINE="1")
    with tempfile.TemporaryDirectory(prefix="first_seen-") as tmp:
        for name in args.encodings:
            path = cache_path_for(ec.BLOB_URL.format(name=name))
            if path is None or not os.path.isfile(path):
                print(f"note: {name} skipped: its vocabulary is not in tiktoken's cache ({path})")
                continue
            warmup, docs = first_seen_documents(name, args.short_mb, args.long_mb, args.min_bytes)
            count = sum(d.count("\n") for d in docs)  # one piece a line
            nbytes = sum(len(d.encode("utf-8")) for d in docs)
            work = os.path.join(tmp, name)
            os.mkdir(work)
            doc_file, warmup_file = os.path.join(work, "pieces.json"), os.path.join(work, "warmup.json")
            Path(doc_file).write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
            Path(warmup_file).write_text(json.dumps(warmup, ensure_ascii=False), encoding="utf-8")
            print(f"\n== {name} ==")
            print(
                f"{count:,} distinct pieces of {args.min_bytes}+ bytes that are no token, from {args.long_mb:g} MB "
                f"of text, none in the {args.short_mb:g} MB warm-up; {nbytes / 1e6:.2f} MB with their newlines, "
                f"{len(docs)} documents"
            )
            # One encode call per document on the calling thread ("threads" is for batches).
            base = {"encoding": name, "vocab_file": path, "threads": 1, "fastokens_pool": False}
            items = [((lib,), dict(base, lib=lib, mode="single", docs=doc_file, warmup=warmup_file, bytes=nbytes), f"{name} {lib}") for lib in libs]
            runner = ec.Runner(env, args.repeat, args.timeout, work, len(items) * args.repeat, cpu)
            got: Dict[tuple, dict] = runner.measure_rounds(items)
            ref = got.get(("tiktoken",))
            tm = got[("tokenmill",)]
            if tm is None:
                print("  tokenmill failed:", *runner.notes)
                continue
            print(f"  {'library':<14} {'MB/s':>7} {'ns/piece':>9} {'x':>6} {'paired x':>9}  same ids")
            for lib in libs:
                res = got[(lib,)]
                label = ec.LIBRARIES[lib][2]
                if res is None:
                    print(f"  {label:<14} failed")
                    continue
                mbps = nbytes / res["seconds"] / 1e6
                ns = res["seconds"] * 1e9 / count
                x = res["seconds"] / tm["seconds"]
                pairs = [b / a for a, b in zip(tm["round_seconds"], res["round_seconds"]) if a and b]
                same = "ref" if lib == "tiktoken" else ("yes" if ref and res["digest"] == ref["digest"] else ("?" if not ref else "NO"))
                print(f"  {label:<14} {mbps:7.1f} {ns:9.0f} {x:6.2f} {statistics.median(pairs):9.2f}  {same}")
            for note in runner.notes:
                print("note:", note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
