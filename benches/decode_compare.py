"""Decoding throughput: tokenmill and its peers on the same ids, in one run.

The ids are tiktoken's for the documents of ``encode_compare.py``'s long stream (20 MB by
default), computed once by this script and handed to every library as Python lists of
ints, which is what decoding is usually given. Each library decodes them in a fresh
process (its object built there, as in ``encode_compare.py``), one call per document:

* ``decode``: to ``str`` (invalid UTF-8 replaced, tiktoken's default), for every library;
* ``decode_bytes``: to ``bytes``, for the libraries that have it (gigatoken's ``decode``
  returns bytes, so it is timed here, and its ``decode`` column adds the step to ``str``);
* ``decode_batch``: all documents in one call, on the usable cores, for tokenmill and
  tiktoken.

``--lines`` gives one list per non-empty line of the documents instead (many short lists,
as in ``batch_short_texts.py``; the counts of MB/s are the lines' bytes), and
``--batch-threads N`` sets ``decode_batch``'s threads (default: the usable cores).
``--ids-as numpy`` hands them over as numpy ``uint32`` arrays instead (what
``encode_to_numpy`` returns, and how token shards are usually kept; made before the
timed pass). A library that refuses arrays shows ``-``.

MB/s counts the decoded text's UTF-8 bytes; ``x`` is tokenmill's MB/s over the library's.
``same`` says whether the library's strings equal tiktoken's (a SHA-256 over all of them).
Each figure is the best of ``--repeat`` fresh processes, run in rounds.

Usage:
    python benches/decode_compare.py [--mb 20] [--encodings cl100k_base o200k_base] [--repeat 3] [--libs ...]
                                     [--ids-as list|numpy] [--lines] [--batch-threads N]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

from encode_compare import LIBRARIES, RUN_ORDER, _build, build_slices, cached_vocab_file
from fresh_process import parse_or_work, run_fresh
from machine_info import header_lines

MODES = ("decode", "decode_bytes", "decode_batch")


def _decoders(lib: str, obj: object, threads: int) -> Dict[str, Callable]:
    """Each mode's call for ``lib`` (built by ``encode_compare._build``), where it has one."""
    if lib in ("tokenmill", "tiktoken"):
        return {
            "decode": obj.decode,
            "decode_bytes": obj.decode_bytes,
            "decode_batch": lambda batch: obj.decode_batch(batch, num_threads=threads),
        }
    if lib == "hf":
        return {"decode": lambda ids: obj.decode(ids, skip_special_tokens=False)}
    if lib == "gigatoken":
        # Its `decode` returns bytes: that is this table's decode_bytes. To str, invalid
        # UTF-8 replaced as tiktoken's decode does, it takes one more step in Python.
        return {"decode": lambda ids: obj.decode(ids).decode("utf-8", "replace"), "decode_bytes": obj.decode}
    out = {"decode": obj.decode}
    if hasattr(obj, "decode_bytes"):
        out["decode_bytes"] = obj.decode_bytes
    return out


def worker(spec: dict) -> None:
    with tempfile.TemporaryDirectory(prefix="decode_compare-") as tmp:
        _, obj, _ = _build(spec["lib"], spec["encoding"], spec, tmp)
        call = _decoders(spec["lib"], obj, spec["threads"]).get(spec["mode"])
        if call is None:
            Path(spec["out"]).write_text(json.dumps(None))
            return
        ids: List[List[int]] = json.loads(Path(spec["ids"]).read_text())
        if spec.get("ids_as") == "numpy":
            import numpy as np

            ids = [np.array(x, dtype=np.uint32) for x in ids]
        gc.collect()
        gc.disable()
        t0 = time.perf_counter()
        out = call(ids) if spec["mode"] == "decode_batch" else [call(x) for x in ids]
        seconds = time.perf_counter() - t0
        gc.enable()
    digest = hashlib.sha256()
    for item in out:
        digest.update((item if isinstance(item, bytes) else item.encode("utf-8", "surrogatepass")) + b"\xff")
    Path(spec["out"]).write_text(json.dumps({"seconds": seconds, "digest": digest.hexdigest()}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=20.0, help="MB of the long stream to decode (default 20)")
    ap.add_argument("--encodings", nargs="+", default=["cl100k_base", "o200k_base"])
    ap.add_argument("--libs", nargs="+", default=list(RUN_ORDER), choices=RUN_ORDER)
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per figure; the best is kept")
    ap.add_argument("--ids-as", choices=("list", "numpy"), default="list",
                    help="give the ids as lists of ints (default) or as numpy uint32 arrays")
    ap.add_argument("--lines", action="store_true",
                    help="one list of ids per non-empty line of the documents (many short lists) instead of per document")
    ap.add_argument("--batch-threads", type=int, default=0,
                    help="num_threads of decode_batch (default: the usable cores)")
    args = parse_or_work(ap, worker)
    if args is None:
        return 0

    import tiktoken
    libs = [lib for lib in args.libs if importlib.util.find_spec(LIBRARIES[lib][0]) is not None]
    print("\n".join(header_lines([(LIBRARIES[lib][2], LIBRARIES[lib][1]) for lib in libs])))
    (docs,), _ = build_slices([int(args.mb * 1e6)])
    texts = [text for _, _, text in docs]
    if args.lines:
        texts = [line for text in texts for line in text.split("\n") if line.strip()]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = args.batch_threads or cores
    with tempfile.TemporaryDirectory(prefix="decode_compare-") as tmp:
        for name in args.encodings:
            vocab_file = cached_vocab_file(name)
            if vocab_file is None:
                continue
            ids = tiktoken.get_encoding(name).encode_ordinary_batch(texts)
            path = os.path.join(tmp, f"{name}.json")
            Path(path).write_text(json.dumps(ids))
            nbytes = sum(len(t.encode("utf-8")) for t in texts)
            print(f"== {name}: {len(texts):,} {'lines' if args.lines else 'documents'}, {sum(map(len, ids)):,} ids "
                  f"as {args.ids_as}, {nbytes / 1e6:.2f} MB of text; decode_batch on {threads} threads ==")
            best: Dict[Tuple[str, str], dict] = {}
            for _ in range(args.repeat):
                for lib in libs:
                    for mode in MODES:
                        spec = {"lib": lib, "encoding": name, "mode": mode, "ids": path, "vocab_file": vocab_file,
                                "ids_as": args.ids_as, "threads": threads}
                        res = run_fresh(__file__, spec, tmp)
                        if res and ((lib, mode) not in best or res["seconds"] < best[(lib, mode)]["seconds"]):
                            best[(lib, mode)] = res
            print(f"  {'library':<14}" + "".join(f" {m + ' MB/s':>18} {'x':>6}" for m in MODES) + f" {'same':>6}")
            for lib in libs:
                row = f"  {LIBRARIES[lib][2]:<14}"
                for mode in MODES:
                    res, mine = best.get((lib, mode)), best.get(("tokenmill", mode))
                    mbps = nbytes / res["seconds"] / 1e6 if res else None
                    ratio = mine["seconds"] and res and res["seconds"] / mine["seconds"] if mine else None
                    row += f" {mbps:>18.1f} {ratio:>6.2f}" if mbps else f" {'-':>18} {'-':>6}"
                ref = best.get(("tiktoken", "decode"))
                own = best.get((lib, "decode"))
                same = "ref" if lib == "tiktoken" else "?" if not (ref and own) else "yes" if own["digest"] == ref["digest"] else "NO"
                print(row + f" {same:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
