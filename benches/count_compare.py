"""Counting tokens: tokenmill's ``count_tokens_ordinary`` against ``len(encode_ordinary(text))``.

Counting is what a program does to check a prompt against a context window or to size a
dataset. Without a counting call, every library builds the list of ids only to take its
length; tokenmill's ``count_tokens*`` run the same engine but make no list, int or array.

The text is the encoding benchmark's long slice (``encode_compare.build_slices``: code,
docs, manpages and UI text in many languages, 20 MB by default). Every figure is one fresh
Python process (this script re-invoked with ``--worker``), so no cache has seen the text,
timing one call per document on one thread; then, with ``--threads`` (default: the usable
cores), one batch call over all the documents. Rows:

* ``tokenmill count``: ``count_tokens_ordinary(doc)``; batch: ``count_tokens_batch(docs,
  disallowed_special=())``;
* ``tokenmill len(encode)``: ``len(encode_ordinary(doc))``; batch: the lengths of
  ``encode_ordinary_batch(docs)``'s lists;
* ``tiktoken len(encode)``, and ``fastokens len(encode)`` where it is installed (one
  thread; it has no batch call here).

Each worker reports its counts; every row must give tiktoken's count for every document
(the ``same`` column). The runs go in rounds (every row once, then again, ``--repeat``
times); MB/s is the best round, and ``x`` the median over rounds of tokenmill count's
speed over the row's in the same round.

``--one-process`` asks instead what a long-running program sees (a service counting the
tokens of request after request): one process times tokenmill's ways of counting in
turns, ``--repeat`` rounds (at least 6), each on a fresh encoder: ``count_tokens_ordinary``,
``len(encode_ordinary(doc))`` (each list dropped at once, so its ints' reference counts
are touched again as it is freed) and the lists kept until the pass ends.

    python benches/count_compare.py                       # cl100k_base and o200k_base, 3 rounds
    python benches/count_compare.py --encodings o200k_base --repeat 5 --long-mb 10
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from encode_compare import BLOB_URL, _tiktoken_like, build_slices, describe_slice  # noqa: E402

#: row name -> (library, how it counts one text, how it counts a batch or None).
ROWS: Dict[str, Tuple[str, str, Optional[str]]] = {
    "tokenmill count": ("tokenmill", "count", "count_batch"),
    "tokenmill len(encode)": ("tokenmill", "len_encode", "len_encode_batch"),
    "fastokens len(encode)": ("fastokens", "len_encode", None),
    "tiktoken len(encode)": ("tiktoken", "len_encode", "len_encode_batch"),
}


def _ways(lib: str, name: str, vocab_file: str) -> Dict[str, Callable[[List[str], int], List[int]]]:
    """The library's ways of counting the tokens of documents (``how`` -> docs, threads ->
    counts): ``count`` and ``len_encode`` one call per document, ``count_batch`` and
    ``len_encode_batch`` one batch call."""
    if lib in ("tokenmill", "tiktoken"):
        enc = _tiktoken_like(__import__(lib), name)
        encode = enc.encode_ordinary
        ways: Dict[str, Callable[[List[str], int], List[int]]] = {
            "len_encode": lambda docs, _: [len(encode(d)) for d in docs],
            "len_encode_batch": lambda docs, threads: [len(ids) for ids in enc.encode_ordinary_batch(docs, num_threads=threads)],
        }
        if lib == "tokenmill":
            count = enc.count_tokens_ordinary
            ways["count"] = lambda docs, _: [count(d) for d in docs]
            ways["count_batch"] = lambda docs, threads: enc.count_tokens_batch(docs, disallowed_special=(), num_threads=threads)
        return ways
    if lib == "fastokens":
        os.environ["FASTOKENS_BPE_THREADS"] = "1"  # every call on the calling thread
        import fastokens

        tok = fastokens.Tokenizer.from_tiktoken(vocab_file, encoding=name)
        return {"len_encode": lambda docs, _: [len(tok.encode_ordinary(d).ids) for d in docs]}
    raise ValueError(lib)


def worker(spec: dict) -> int:
    way = _ways(spec["lib"], spec["encoding"], spec["vocab_file"])[spec["how"]]
    docs: List[str] = json.loads(Path(spec["docs"]).read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    counts = way(docs, spec["threads"])
    seconds = time.perf_counter() - t0
    Path(spec["out"]).write_text(json.dumps({"seconds": seconds, "counts": counts}))
    return 0


def one_process(spec: dict) -> int:
    """Tokenmill's ways of counting in turns in this one process, fresh encoders each round."""
    import gc

    import tiktoken
    import tokenmill

    docs: List[str] = json.loads(Path(spec["docs"]).read_text(encoding="utf-8"))
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    ref = tiktoken.get_encoding(spec["encoding"])
    want = [len(ref.encode_ordinary(d)) for d in docs]

    def fresh():
        return _tiktoken_like(tokenmill, spec["encoding"])

    ways: Dict[str, Callable[[object], list]] = {
        "count_tokens_ordinary": lambda e: [e.count_tokens_ordinary(d) for d in docs],
        "len(encode_ordinary)": lambda e: [len(e.encode_ordinary(d)) for d in docs],
        "encode_ordinary, kept": lambda e: [e.encode_ordinary(d) for d in docs],
    }
    seconds: Dict[str, List[float]] = {k: [] for k in ways}
    gc.collect()
    gc.disable()
    for r in range(max(spec["rounds"], 6)):
        order = list(ways.items()) if r % 2 == 0 else list(reversed(ways.items()))
        for k, f in order:
            enc = fresh()
            t0 = time.perf_counter()
            out = f(enc)
            seconds[k].append(time.perf_counter() - t0)
            got = out if k != "encode_ordinary, kept" else [len(ids) for ids in out]
            if got != want:
                raise SystemExit(f"{k}: counts differ from tiktoken's")
            del out, got
            gc.collect()
    base = seconds["count_tokens_ordinary"]
    print(f"{spec['encoding']}: {nbytes / 1e6:.1f} MB, {len(docs):,} documents, {len(base)} rounds in one process (counts: same as tiktoken's)")
    for k, v in seconds.items():
        ratios = [b / a for a, b in zip(base, v)]
        x = "" if k == "count_tokens_ordinary" else f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        print(f"  {k:<24} {nbytes / 1e6 / statistics.median(v):>7.1f} MB/s  {x}")
    return 0


def _vocab_file(name: str) -> str:
    """Where tiktoken's cache keeps ``name``'s vocabulary (fastokens reads the file)."""
    from tokenmill.load import cache_path_for

    return cache_path_for(BLOB_URL.format(name=name)) or ""


def run(spec: dict, timeout: float) -> Optional[dict]:
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout,
    )
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()
        print(f"  {spec['row']} ({spec['mode']}): failed: {tail[-1] if tail else proc.returncode}", file=sys.stderr)
        return None
    return json.loads(Path(spec["out"]).read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--encodings", nargs="+", default=["cl100k_base", "o200k_base"])
    ap.add_argument("--long-mb", type=float, default=20.0, help="MB of text (default 20)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--threads", type=int, default=0, help="batch threads (default: the usable cores; 1: no batch rows)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one worker may take")
    ap.add_argument("--one-process", action="store_true", help="tokenmill's ways of counting in turns in one process")
    args = ap.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        return one_process(spec) if spec.get("one_process") else worker(spec)

    threads = args.threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    rows = [r for r, (lib, _, _) in ROWS.items() if importlib.util.find_spec(lib) is not None]
    tagged = build_slices([int(args.long_mb * 1e6)])[0][0]
    docs = [t for _, _, t in tagged]
    nbytes = sum(len(t.encode("utf-8")) for t in docs)
    for line in describe_slice("text", tagged):
        print(line)
    modes = ["single"] + (["batch"] if threads > 1 else [])
    with tempfile.TemporaryDirectory() as tmp:
        docs_file = os.path.join(tmp, "docs.json")
        Path(docs_file).write_text(json.dumps(docs), encoding="utf-8")
        if args.one_process:
            for name in args.encodings:
                spec = {"one_process": True, "encoding": name, "docs": docs_file, "rounds": args.repeat}
                proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)], timeout=args.timeout * 10)
                if proc.returncode != 0:
                    return proc.returncode
            return 0
        print(f"one fresh process per figure, {args.repeat} rounds; batch rows on {threads} threads; x = tokenmill count's MB/s / the row's, paired by round\n")
        for name in args.encodings:
            results: Dict[Tuple[str, str], List[Optional[dict]]] = {}
            for r in range(args.repeat):
                for mode in modes:
                    for row in rows:
                        lib, one, batch = ROWS[row]
                        how = one if mode == "single" else batch
                        if how is None:
                            continue
                        spec = {"row": row, "lib": lib, "how": how, "mode": mode, "encoding": name, "threads": threads,
                                "vocab_file": _vocab_file(name), "docs": docs_file,
                                "out": os.path.join(tmp, f"out-{name}-{r}-{mode}-{lib}-{how}.json")}
                        results.setdefault((row, mode), []).append(run(spec, args.timeout))
            ref = next((res["counts"] for res in results.get(("tiktoken len(encode)", "single"), []) if res), None)
            print(f"{name}: {nbytes / 1e6:.1f} MB, {len(docs):,} documents" + (f", {sum(ref):,} tokens" if ref else ""))
            print(f"  {'':<24} {'mode':<7} {'MB/s':>8} {'x':>7}  {'rounds x':<13} same")
            for mode in modes:
                base = results.get(("tokenmill count", mode), [])
                for row in rows:
                    runs = results.get((row, mode))
                    if not runs:
                        continue
                    ok = [res for res in runs if res]
                    best = max((nbytes / 1e6 / res["seconds"] for res in ok), default=None)
                    ratios = [res["seconds"] / b["seconds"] for b, res in zip(base, runs) if b and res]
                    same = "-" if ref is None else ("yes" if ok and all(res["counts"] == ref for res in ok) else "NO")
                    x = f"{statistics.median(ratios):.2f}" if ratios and row != "tokenmill count" else ""
                    span = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios and row != "tokenmill count" else ""
                    mbps = f"{best:.1f}" if best else "failed"
                    print(f"  {row:<24} {mode:<7} {mbps:>8} {x:>7}  {span:<13} {same}")
            print()
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
