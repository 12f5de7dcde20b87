"""Batch encoding of many short texts: tokenmill and tiktoken, in one run.

A batch of long documents keeps every thread busy encoding; a batch of many short texts
(lines, chat messages, titles) is where the per-text costs show: handing each result from
the thread that encoded it to the one that builds its Python list, and building that list.
This script takes the text of ``encode_compare.py``'s long stream, cuts it into its
non-empty lines, and times, for each library and encoding, in a fresh process each:

* ``one call each``: ``encode_ordinary(line)`` for every line, on the calling thread;
* ``batch``: one ``encode_ordinary_batch(lines, num_threads=<usable cores>)``.

It prints MB/s, the batch's speed over the same library's one-call-each speed, and
whether tokenmill's ids equal tiktoken's (a SHA-256 over all lists). Each figure is the
best of ``--repeat`` fresh processes. Python's cyclic garbage collector is off during the
timed calls, as in the other benchmarks, unless ``--gc-on`` leaves it on, as programs
run (before Python 3.12 it then runs inside the calls, over the lists they make). Nothing is downloaded: vocabularies come from
tiktoken's cache (``TIKTOKEN_CACHE_DIR``).

Usage:
    python benches/batch_short_texts.py [--mb 20] [--encodings cl100k_base o200k_base] [--repeat 3] [--gc-on]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Dict, List, Tuple

from encode_compare import build_slices
from fresh_process import parse_or_work, run_fresh
from machine_info import header_lines

LIBS = ("tokenmill", "tiktoken")
MODES = ("one call each", "batch")


def worker(spec: dict) -> None:
    module = __import__(spec["lib"])
    ref = module.get_encoding(spec["encoding"])
    enc = module.Encoding(
        spec["encoding"], pat_str=ref._pat_str, mergeable_ranks=ref._mergeable_ranks, special_tokens=ref._special_tokens
    )
    lines: List[str] = json.loads(Path(spec["lines"]).read_text(encoding="utf-8"))
    gc.collect()
    if not spec["gc_on"]:
        gc.disable()
    t0 = time.perf_counter()
    if spec["mode"] == "batch":
        out = enc.encode_ordinary_batch(lines, num_threads=spec["threads"])
    else:
        out = [enc.encode_ordinary(line) for line in lines]
    seconds = time.perf_counter() - t0
    gc.enable()
    digest = hashlib.sha256()
    for ids in out:
        digest.update(array("I", ids).tobytes() + b"\xff\xff\xff\xff")
    Path(spec["out"]).write_text(json.dumps({"seconds": seconds, "digest": digest.hexdigest()}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=20.0, help="MB of text to cut into lines (default 20)")
    ap.add_argument("--encodings", nargs="+", default=["cl100k_base", "o200k_base"])
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per figure; the best is kept")
    ap.add_argument("--gc-on", action="store_true", help="leave the garbage collector on during the timed calls")
    args = parse_or_work(ap, worker)
    if args is None:
        return 0

    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    print("\n".join(header_lines([("tokenmill", "tokenmill"), ("tiktoken", "tiktoken")])))
    (docs,), _ = build_slices([int(args.mb * 1e6)])
    lines = [line for _, _, text in docs for line in text.split("\n") if line.strip()]
    nbytes = sum(len(line.encode("utf-8")) for line in lines)
    print(f"text: {len(lines):,} non-empty lines, {nbytes / 1e6:.2f} MB ({nbytes / len(lines):.0f} bytes a line); batch threads: {threads}"
          f"; garbage collector {'on' if args.gc_on else 'off'} while timing")
    with tempfile.TemporaryDirectory(prefix="batch_short_texts-") as tmp:
        path = os.path.join(tmp, "lines.json")
        Path(path).write_text(json.dumps(lines, ensure_ascii=False), encoding="utf-8")
        for name in args.encodings:
            best: Dict[Tuple[str, str], dict] = {}
            for _ in range(args.repeat):  # in rounds, so a slow spell does not hit one figure only
                for lib in LIBS:
                    for mode in MODES:
                        spec = {"lib": lib, "encoding": name, "mode": mode, "lines": path, "threads": threads,
                                "gc_on": args.gc_on}
                        res = run_fresh(__file__, spec, tmp)
                        if res and ((lib, mode) not in best or res["seconds"] < best[(lib, mode)]["seconds"]):
                            best[(lib, mode)] = res
            print(f"== {name} ==")
            print(f"  {'library':<10} {'one call each':>14} {'batch':>10} {'batch / one each':>17} {'same ids':>9}")
            ref = best.get(("tiktoken", "one call each"))
            for lib in LIBS:
                one, bat = best.get((lib, "one call each")), best.get((lib, "batch"))
                mbps = [nbytes / r["seconds"] / 1e6 if r else None for r in (one, bat)]
                same = "ref" if lib == "tiktoken" else (
                    "?" if not ref else "yes" if all(r and r["digest"] == ref["digest"] for r in (one, bat)) else "NO"
                )
                ratio = f"{mbps[1] / mbps[0]:.2f}" if all(mbps) else "-"
                one_s, bat_s = (f"{v:.1f}" if v else "-" for v in mbps)
                print(f"  {lib:<10} {one_s:>14} {bat_s:>10} {ratio:>17} {same:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
