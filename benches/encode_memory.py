"""What encoding leaves behind in the caller's strings, and what its lists of ids hold:
tokenmill and its peers, in one run.

CPython stores a ``str`` one, two or four bytes a character. A binding that asks it for
the text as UTF-8 (``PyUnicode_AsUTF8AndSize``, which is what a PyO3 ``&str`` argument
does) gets a UTF-8 copy of every string that is not pure ASCII, and CPython keeps that
copy attached to the string for as long as the string lives. Encoding a corpus held in
memory can then grow it by more than half. This script measures it, for each library in a
fresh process:

* ``strings``: ``sys.getsizeof`` summed over the documents, before and after one
  ``encode_ordinary`` call each (``sys.getsizeof`` counts a string's UTF-8 copy once it
  has one), and the number of ids (the same for every library that encodes exactly);
* ``lists``: what the returned lists hold while they are kept, in ``sys.getsizeof``:
  the lists themselves (8 bytes a place), and each distinct int object they refer to,
  once, leaving out CPython's own cached ints (-5 to 256), which exist anyway. A library
  that makes an int for every place pays for it at every place; one whose lists share an
  int per id pays once per distinct id. A library that returns numpy arrays (gigatoken)
  shows the arrays, data included, under ``lists`` and no int objects.

(The process's resident memory is no measure of this: the copies mostly land in memory
the process had freed already.)

The documents are the non-ASCII ones of ``encode_compare.py``'s long stream (by default
20 MB, of which the documents not pure ASCII are a part: the UI catalogues in many
languages, and the docs and code that hold a few non-ASCII characters), each a new string
object in every process. How each library is loaded is ``encode_compare.py``'s.

Usage:
    python benches/encode_memory.py [--mb 20] [--encoding cl100k_base] [--libs tokenmill tiktoken ...]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import List

from encode_compare import BLOB_URL, LIBRARIES, RUN_ORDER, _build, build_slices
from fresh_process import parse_or_work, run_fresh
from machine_info import header_lines


def _held_bytes(ids) -> int:
    """What one returned list (or numpy array) of ids holds, its own int objects aside."""
    size = sys.getsizeof(ids)
    # sys.getsizeof counts a numpy array's data only when the array owns it.
    if hasattr(ids, "nbytes") and getattr(ids, "base", None) is not None:
        size += ids.nbytes
    return size


def worker(spec: dict) -> None:
    with tempfile.TemporaryDirectory(prefix="encode_memory-") as tmp:
        encode, _, _ = _build(spec["lib"], spec["encoding"], spec, tmp)
        # New string objects, none of them converted to UTF-8 before.
        docs: List[str] = ["".join(list(d)) for d in json.loads(Path(spec["docs"]).read_text(encoding="utf-8"))]
        encode("warm up")
        gc.collect()
        before = sum(map(sys.getsizeof, docs))
        lists = [encode(d) for d in docs]
        gc.collect()
        after = sum(map(sys.getsizeof, docs))
        tokens = sum(map(len, lists))
        list_bytes = sum(map(_held_bytes, lists))
        # A numpy array (gigatoken's result) holds no int objects: iterating it would make
        # new scalars that nothing keeps.
        ints = {id(x): x for ids in lists if isinstance(ids, list) for x in ids if not -5 <= x <= 256 or x is not int(str(x))}
        int_bytes = sum(map(sys.getsizeof, ints.values()))
    Path(spec["out"]).write_text(json.dumps({"before": before, "after": after, "tokens": tokens, "lists": list_bytes,
                                             "ints": int_bytes, "distinct": len(ints)}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=20.0, help="MB of the long stream to take the documents from (default 20)")
    ap.add_argument("--encoding", default="cl100k_base")
    ap.add_argument("--libs", nargs="+", default=list(RUN_ORDER), choices=RUN_ORDER)
    args = parse_or_work(ap, worker)
    if args is None:
        return 0

    from tokenmill.load import cache_path_for

    vocab_file = cache_path_for(BLOB_URL.format(name=args.encoding))
    if vocab_file is None or not os.path.isfile(vocab_file):
        print(f"{args.encoding}'s vocabulary is not in tiktoken's cache ({vocab_file}); nothing is downloaded")
        return 1
    libs = [lib for lib in args.libs if importlib.util.find_spec(LIBRARIES[lib][0]) is not None]
    print("\n".join(header_lines([(LIBRARIES[lib][2], LIBRARIES[lib][1]) for lib in libs])))
    (docs,), _ = build_slices([int(args.mb * 1e6)])
    texts = [text for _, _, text in docs if not text.isascii()]
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    print(f"text: the {len(texts):,} documents of {len(docs):,} that are not pure ASCII, {nbytes / 1e6:.2f} MB of UTF-8; "
          f"{args.encoding}, one encode_ordinary call each, the lists kept")
    print(f"  {'library':<14} {'strings MB before':>18} {'after':>8} {'x':>6} {'ids':>11} {'lists MB':>9} "
          f"{'ints MB':>8} {'int objects':>12}")
    with tempfile.TemporaryDirectory(prefix="encode_memory-") as tmp:
        path = os.path.join(tmp, "docs.json")
        Path(path).write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
        for lib in libs:
            res = run_fresh(__file__, {"lib": lib, "encoding": args.encoding, "docs": path, "vocab_file": vocab_file}, tmp)
            if res:
                print(f"  {LIBRARIES[lib][2]:<14} {res['before'] / 1e6:>18.1f} {res['after'] / 1e6:>8.1f} "
                      f"{res['after'] / res['before']:>6.2f} {res['tokens']:>11,} {res['lists'] / 1e6:>9.1f} "
                      f"{res['ints'] / 1e6:>8.1f} {res['distinct']:>12,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
