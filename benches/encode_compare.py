"""Encoding throughput: tokenmill against tiktoken (and HF tokenizers when installed),
on the same real text in one run.

The text is the running Python's standard-library sources, which every machine has. Each
library gets fresh encoding objects; neither keeps a cache of encoded pieces, so a pass
over the text measures encoding, not lookups of earlier results. Ids are compared too:
a speed figure for wrong ids would be meaningless.

Usage:
    python benches/encode_compare.py [--encodings cl100k_base o200k_base] [--mb 8] [--repeat 3]

Vocabularies are read through tiktoken's cache (set TIKTOKEN_CACHE_DIR).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time


def best_of(repeat: int, fn) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encodings", nargs="+", default=["cl100k_base", "o200k_base"])
    ap.add_argument("--mb", type=float, default=8.0, help="megabytes of text (default 8)")
    ap.add_argument("--repeat", type=int, default=3, help="passes per figure; the best is kept")
    args = ap.parse_args()

    import tiktoken

    import tokenmill
    from tokenmill.corpus import stdlib_texts

    texts = list(stdlib_texts(int(args.mb * 1e6)))
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    cores = os.cpu_count() or 1
    print(f"machine: {platform.machine()}, {cores} cores, Python {platform.python_version()}")
    print(f"text: {len(texts)} standard-library files, {nbytes / 1e6:.1f} MB; best of {args.repeat}")
    print()
    header = f"{'encoding':<12} {'mode':<22} {'tiktoken MB/s':>14} {'tokenmill MB/s':>15} {'ratio':>7} {'same ids':>9}"
    print(header)
    print("-" * len(header))
    for name in args.encodings:
        ref = tiktoken.get_encoding(name)
        kwargs = dict(pat_str=ref._pat_str, mergeable_ranks=ref._mergeable_ranks, special_tokens=ref._special_tokens)
        tk = tiktoken.Encoding(name, **kwargs)
        tm = tokenmill.Encoding(name, **kwargs)

        t_tk, ids_tk = best_of(args.repeat, lambda: [tk.encode_ordinary(t) for t in texts])
        t_tm, ids_tm = best_of(args.repeat, lambda: [tm.encode_ordinary(t) for t in texts])
        mb = nbytes / 1e6
        print(f"{name:<12} {'1 thread':<22} {mb / t_tk:>14.1f} {mb / t_tm:>15.1f} {t_tk / t_tm:>7.2f} {str(ids_tk == ids_tm):>9}")

        label = f"batch, {cores} threads"
        t_tk, ids_tk = best_of(args.repeat, lambda: tk.encode_ordinary_batch(texts, num_threads=cores))
        t_tm, ids_tm = best_of(args.repeat, lambda: tm.encode_ordinary_batch(texts, num_threads=cores))
        print(f"{name:<12} {label:<22} {mb / t_tk:>14.1f} {mb / t_tm:>15.1f} {t_tk / t_tm:>7.2f} {str(ids_tk == ids_tm):>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
