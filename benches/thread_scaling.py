"""Batch encoding across thread counts: how tokenmill's and tiktoken's batches scale with cores.

The one-thread benchmark (``encode_compare.py``) says how fast each library encodes on one
core; this one says what a batch gets from more cores. It times
``encode_ordinary_batch(texts, num_threads=n)`` for n = 1, 2, 4, ... up to the usable
cores (``--threads`` picks others), each in a fresh process with a fresh object (the same
set-up as ``encode_compare.py``: ``get_encoding(name)``, then a new ``Encoding`` built from
its ranks), on three batches cut from the same text:

* ``docs``: the documents as they come (each at most 100,000 characters);
* ``lines``: their non-empty lines, as many short texts (chat messages, titles, rows);
* ``tail``: the documents, with the last quarter of the text joined into one document at
  the end of the batch. A batch that hands out whole documents has all cores but one idle
  while that one encodes it; tokenmill cuts a long text into chunks encoded in parallel.

For each it prints MB/s, the speed-up over the same library's one-thread batch, tokenmill's
MB/s over tiktoken's, the cores tokenmill's batch kept busy on average (its process CPU
time over the call's wall time), and whether the ids are tiktoken's (a SHA-256 over every
list). The text is ``encode_compare.py``'s long stream (``--mb``, default 20 MB), or the
documents of a JSON list given by ``--docs`` (``--save-docs`` writes that file), so that two
machines can be measured on the same text. Nothing is downloaded: vocabularies come from
tiktoken's cache (``TIKTOKEN_CACHE_DIR``).

``--libs tokenmill-arrays`` adds tokenmill's ``encode_batch_to_numpy(texts,
disallowed_special=())``: the same ids, in one numpy array with offsets, and no Python
list or int made (which only the calling thread can make).

Usage:
    python benches/thread_scaling.py [--mb 20] [--encodings cl100k_base o200k_base]
        [--threads 1 2 4 8 16] [--batches docs lines tail] [--repeat 1]
    python benches/thread_scaling.py --save-docs docs.json     # write the text and stop
    python benches/thread_scaling.py --docs docs.json          # measure on that text
    python benches/thread_scaling.py --libs tokenmill tokenmill-arrays tiktoken
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import resource
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from encode_compare import build_slices
from fresh_process import parse_or_work, run_fresh
from machine_info import header_lines

LIBS = ("tokenmill", "tiktoken")
# tokenmill's encode_batch_to_numpy: the same batches, ids into one array (no lists made)
ARRAYS = "tokenmill-arrays"
BATCHES = ("docs", "lines", "tail")


def cut(docs: List[str], batch: str) -> List[str]:
    """The texts of one of the batches (see the module's docstring)."""
    if batch == "docs":
        return docs
    if batch == "lines":
        return [line for doc in docs for line in doc.split("\n") if line.strip()]
    total = sum(len(d) for d in docs)
    head: List[str] = []
    size = 0
    for i, doc in enumerate(docs):
        if size + len(doc) > total * 3 // 4:
            return head + ["".join(docs[i:])]
        head.append(doc)
        size += len(doc)
    return head


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker(spec: dict) -> None:
    arrays = spec["lib"] == ARRAYS
    module = __import__("tokenmill" if arrays else spec["lib"])
    if arrays:
        import numpy  # noqa: F401  (imported on the first call otherwise: ~0.1 s inside the timing)
    ref = module.get_encoding(spec["encoding"])
    enc = module.Encoding(
        spec["encoding"], pat_str=ref._pat_str, mergeable_ranks=ref._mergeable_ranks, special_tokens=ref._special_tokens
    )
    docs: List[str] = json.loads(Path(spec["docs"]).read_text(encoding="utf-8"))
    texts = cut(docs, spec["batch"])
    del docs
    gc.collect()
    gc.disable()
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()
    if arrays:
        flat, offsets = enc.encode_batch_to_numpy(texts, num_threads=spec["threads"], disallowed_special=())
    else:
        out = enc.encode_ordinary_batch(texts, num_threads=spec["threads"])
    seconds = time.perf_counter() - t0
    cpu = cpu_seconds() - cpu0
    gc.enable()
    digest = hashlib.sha256()
    if arrays:
        for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
            digest.update(flat[start:end].tobytes() + b"\xff\xff\xff\xff")
    else:
        for ids in out:
            digest.update(array("I", ids).tobytes() + b"\xff\xff\xff\xff")
    Path(spec["out"]).write_text(json.dumps({"seconds": seconds, "cpu": cpu, "digest": digest.hexdigest()}))


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_threads() -> List[int]:
    cores = usable_cores()
    counts = [1]
    while counts[-1] * 2 <= cores:
        counts.append(counts[-1] * 2)
    if counts[-1] != cores:
        counts.append(cores)
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=20.0, help="MB of encode_compare's long stream (default 20)")
    ap.add_argument("--docs", help="a JSON list of documents to use instead")
    ap.add_argument("--save-docs", help="write the documents as a JSON list to this file and stop")
    ap.add_argument("--encodings", nargs="+", default=["cl100k_base", "o200k_base"])
    ap.add_argument("--threads", nargs="+", type=int, help="thread counts (default: 1, 2, 4, ... up to the usable cores)")
    ap.add_argument("--batches", nargs="+", default=list(BATCHES), choices=BATCHES)
    ap.add_argument("--libs", nargs="+", default=list(LIBS), choices=LIBS + (ARRAYS,),
                    help=f"libraries (default: {' '.join(LIBS)}); {ARRAYS}: tokenmill's encode_batch_to_numpy")
    ap.add_argument("--repeat", type=int, default=1, help="fresh processes per figure; the best is kept")
    args = parse_or_work(ap, worker)
    if args is None:
        return 0
    if args.threads and min(args.threads) < 1:
        ap.error("--threads must be at least 1")

    if args.docs:
        docs: List[str] = json.loads(Path(args.docs).read_text(encoding="utf-8"))
        if not isinstance(docs, list) or not all(isinstance(d, str) for d in docs):
            ap.error(f"{args.docs} is not a JSON list of strings")
    else:
        (slice_,), _ = build_slices([int(args.mb * 1e6)])
        docs = [text for _, _, text in slice_]
    if args.save_docs:
        Path(args.save_docs).write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
        print(f"wrote {len(docs):,} documents to {args.save_docs}")
        return 0

    counts = args.threads or default_threads()
    print("\n".join(header_lines([(lib, lib) for lib in dict.fromkeys("tokenmill" if lib == ARRAYS else lib for lib in args.libs)])))
    print(f"usable cores: {usable_cores()}; thread counts: {' '.join(map(str, counts))}")
    for batch in args.batches:
        texts = cut(docs, batch)
        nbytes = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
        print(f"batch {batch}: {len(texts):,} texts, {nbytes / 1e6:.2f} MB, longest {max(map(len, texts)):,} characters")
    with tempfile.TemporaryDirectory(prefix="thread_scaling-") as tmp:
        path = os.path.join(tmp, "docs.json")
        Path(path).write_text(json.dumps(docs, ensure_ascii=False), encoding="utf-8")
        for name in args.encodings:
            for batch in args.batches:
                nbytes = sum(len(t.encode("utf-8", "surrogatepass")) for t in cut(docs, batch))
                best: Dict[Tuple[str, int], dict] = {}
                for _ in range(args.repeat):  # in rounds, so a slow spell does not hit one figure only
                    for n in counts:
                        for lib in args.libs:
                            spec = {"lib": lib, "encoding": name, "batch": batch, "docs": path, "threads": n}
                            res = run_fresh(__file__, spec, tmp)
                            if res and ((lib, n) not in best or res["seconds"] < best[(lib, n)]["seconds"]):
                                best[(lib, n)] = res
                print_table(name, batch, nbytes, counts, args.libs, best)
    return 0


def print_table(name: str, batch: str, nbytes: int, counts: List[int], libs: List[str], best: Dict[Tuple[str, int], dict]) -> None:
    def mbps(lib: str, n: int) -> Optional[float]:
        res = best.get((lib, n))
        return nbytes / res["seconds"] / 1e6 if res else None

    def fmt(v: Optional[float], spec: str) -> str:
        return format(v, spec) if v is not None else "-"

    print(f"== {name}, batch {batch} ==")
    head = f"  {'threads':>7}"
    for lib in libs:
        head += f" {lib + ' MB/s':>15} {'x own 1':>8}"
    if "tokenmill" in libs and "tiktoken" in libs:
        head += f" {'tm / tt':>8}"
    if "tokenmill" in libs:
        head += f" {'tm cores':>9}"
    head += f" {'same ids':>9}"
    print(head)
    for n in counts:
        row = f"  {n:>7}"
        for lib in libs:
            v, one = mbps(lib, n), mbps(lib, counts[0])
            row += f" {fmt(v, '.1f'):>15} {fmt(v / one if v and one else None, '.2f'):>8}"
        if "tokenmill" in libs and "tiktoken" in libs:
            tm, tt = mbps("tokenmill", n), mbps("tiktoken", n)
            row += f" {fmt(tm / tt if tm and tt else None, '.2f'):>8}"
        if "tokenmill" in libs:
            res = best.get(("tokenmill", n))
            row += f" {fmt(res['cpu'] / res['seconds'] if res else None, '.1f'):>9}"
        ref = best.get(("tiktoken", n))
        mine = [best[(lib, n)] for lib in ("tokenmill", ARRAYS) if (lib, n) in best]
        same = "?" if not (ref and mine) else "yes" if all(r["digest"] == ref["digest"] for r in mine) else "NO"
        row += f" {same:>9}"
        print(row)


if __name__ == "__main__":
    sys.exit(main())
