"""Start-up: how long each library takes, in a fresh process, from nothing to its first ids.

A command-line tool, a test or a short job loads its vocabulary in every process, often to
encode a few kilobytes: there the load is most of the work. Each measurement runs in a
fresh Python process (nothing imported, nothing cached in memory; the vocabulary file is in
the operating system's page cache after the first round, as it is for any repeated job):

* ``import``: importing the library;
* ``load``: building the encoder from the cached vocabulary file, as each library is
  usually loaded: ``get_encoding(name)`` for tokenmill, tiktoken and bpe_openai (whose
  vocabularies ship inside the package), ``Tokenizer.from_tiktoken(file)`` for fastokens,
  ``Tokenizer.from_pretrained("openai:<name>")`` for wordchipper (from a cache seeded with
  the same file), ``Tokenizer.from_tiktoken(file, pretokenizer=...)`` for gigatoken (whose
  ``encode`` returns a numpy array, made a list here; its first call imports numpy), and
  ``Tokenizer.from_file(tokenizer.json)`` for HF tokenizers (the file written beforehand by
  ``tokenmill.huggingface.save_tokenizer_json``);
* ``first``: the first call, ``encode_ordinary`` of a short English sentence (a library
  may build tables lazily);
* ``total``: the three together.

Each figure is the median of ``--repeat`` fresh processes, run in rounds (every library once
per round); ``x`` is the library's total over tokenmill's. ``same`` compares the first
call's ids with tiktoken's.

Usage:
    python benches/load_compare.py [--encodings cl100k_base o200k_base] [--repeat 7] [--libs ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

from encode_compare import LIBRARIES, RUN_ORDER, cached_vocab_file, gigatoken_setup, gigatoken_tokenizer
from fresh_process import parse_or_work, run_fresh
from machine_info import header_lines

SENTENCE = "The quick brown fox jumps over the lazy dog, then writes 42 lines of Python."
PARTS = ("import", "load", "first")


def _loader(lib: str, name: str, spec: dict) -> Tuple[Callable[[], object], Callable[[object], Callable[[str], List[int]]]]:
    """(import the library, then: build the encoder -> its encode_ordinary) for ``lib``."""
    if lib in ("tokenmill", "tiktoken", "bpe_openai"):
        return (lambda: __import__(lib)), (lambda m: m.get_encoding(name).encode_ordinary)
    if lib == "fastokens":
        os.environ["FASTOKENS_BPE_THREADS"] = "1"

        def fastokens_encoder(m):
            tok = m.Tokenizer.from_tiktoken(spec["vocab_file"], encoding=name)
            return lambda text: tok.encode_ordinary(text).ids

        return (lambda: __import__("fastokens")), fastokens_encoder
    if lib == "gigatoken":
        gigatoken_setup()

        def gigatoken_encoder(m):
            tok = gigatoken_tokenizer(m, name, spec["vocab_file"], spec["specials"])
            return lambda text: tok.encode(text).tolist()

        return (lambda: __import__("gigatoken")), gigatoken_encoder
    if lib == "wordchipper":
        seeded = Path(spec["tmp"], "xdg-cache", "io.crates.wordchipper", "openai", name, f"{name}.tiktoken")
        seeded.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(spec["vocab_file"], seeded)
        os.environ["XDG_CACHE_HOME"] = str(Path(spec["tmp"], "xdg-cache"))

        def wordchipper_encoder(m):
            tok = m.Tokenizer.from_pretrained(f"openai:{name}")
            flt = m.SpecialFilter.include_none()
            return lambda text: tok.encode(text, special_filter=flt)

        return (lambda: __import__("wordchipper")), wordchipper_encoder
    if lib == "hf":

        def hf_encoder(m):
            tok = m.Tokenizer.from_file(spec["tokenizer_json"])
            return lambda text: tok.encode(text, add_special_tokens=False).ids

        return (lambda: __import__("tokenizers")), hf_encoder
    raise ValueError(f"unknown library {lib!r}")


def worker(spec: dict) -> None:
    import_module, build = _loader(spec["lib"], spec["encoding"], spec)
    t0 = time.perf_counter()
    module = import_module()
    t1 = time.perf_counter()
    encode = build(module)
    t2 = time.perf_counter()
    ids = list(encode(SENTENCE))
    t3 = time.perf_counter()
    Path(spec["out"]).write_text(json.dumps({"import": t1 - t0, "load": t2 - t1, "first": t3 - t2, "ids": ids}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--encodings", nargs="+", default=["cl100k_base", "o200k_base"])
    ap.add_argument("--libs", nargs="+", default=list(RUN_ORDER), choices=RUN_ORDER)
    ap.add_argument("--repeat", type=int, default=7, help="fresh processes per figure; the median is kept")
    args = parse_or_work(ap, worker)
    if args is None:
        return 0

    import tokenmill
    libs = [lib for lib in args.libs if importlib.util.find_spec(LIBRARIES[lib][0]) is not None]
    print("\n".join(header_lines([(LIBRARIES[lib][2], LIBRARIES[lib][1]) for lib in libs])))
    with tempfile.TemporaryDirectory(prefix="load_compare-") as tmp:
        for name in args.encodings:
            vocab_file = cached_vocab_file(name)
            if vocab_file is None:
                continue
            specials = dict(tokenmill.get_encoding(name)._special_tokens)
            spec_base = {"encoding": name, "vocab_file": vocab_file, "tmp": tmp, "specials": specials}
            if "hf" in libs:
                from tokenmill.huggingface import save_tokenizer_json

                spec_base["tokenizer_json"] = str(save_tokenizer_json(tokenmill.get_encoding(name), Path(tmp, f"{name}.json")))
            runs: Dict[str, List[dict]] = {lib: [] for lib in libs}
            for _ in range(args.repeat):
                for lib in libs:
                    res = run_fresh(__file__, dict(spec_base, lib=lib), tmp)
                    if res is not None:
                        runs[lib].append(res)
            print(f"== {name}: seconds, median of {args.repeat} fresh processes ==")
            print(f"  {'library':<14}" + "".join(f" {p:>8}" for p in PARTS) + f" {'total':>8} {'x':>6} {'same':>6}")
            median = {lib: {p: statistics.median(r[p] for r in rs) for p in PARTS} for lib, rs in runs.items() if rs}
            totals = {lib: sum(m.values()) for lib, m in median.items()}
            ref = runs.get("tiktoken") or []
            for lib in libs:
                if lib not in median:
                    print(f"  {LIBRARIES[lib][2]:<14} (failed)")
                    continue
                ratio = totals[lib] / totals["tokenmill"] if "tokenmill" in totals else float("nan")
                same = "ref" if lib == "tiktoken" else "?" if not ref else "yes" if runs[lib][0]["ids"] == ref[0]["ids"] else "NO"
                print(f"  {LIBRARIES[lib][2]:<14}" + "".join(f" {median[lib][p]:>8.3f}" for p in PARTS)
                      + f" {totals[lib]:>8.3f} {ratio:>6.2f} {same:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
