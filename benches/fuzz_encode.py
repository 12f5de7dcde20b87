"""Differential fuzzing of the whole encoder against tiktoken, for as long as you give it.

The tests check parity on fixed and property-generated texts in a few minutes; this runs
for a time budget (``--seconds``, default 600) over texts that are larger and stranger,
the way the project checks each change to the engine before it lands:

* fragments of real documents spliced together (the code, docs, manpages and UI text in
  over 100 languages that ``encode_compare.py`` reads from this machine), cut at random
  places, including inside a word or between a character and its combining mark;
* random strings over an alphabet of ASCII, Latin, Greek, Cyrillic, Hebrew, Arabic,
  Devanagari, kana, Han and Hangul, with spaces, line breaks, digits, contractions, joiners,
  combining marks and emoji, from 1 to 70,000 characters;
* a few random words repeated up to 20,000 times (so that the piece caches answer most
  pieces, including pieces of more than three tokens and of more than 15 bytes);
* long runs of one character (letters, spaces, digits, line breaks: the run-by-run merge);
* now and then a long text (0.6-1.5 million characters) of real documents joined, which a
  batch on two threads cuts into chunks at line breaks and encodes in parallel.

A quarter of the texts go, instead of to a pretrained encoding, to one of a few variants
of the standard patterns over cl100k_base's vocabulary (other digit groups, with and without
possessive quantifiers, a GPT-2 split without contractions), which no scanner knows: they
run on the DFA or on fancy-regex (``--no-variants`` leaves them out).

Each text goes to ``encode_ordinary`` alone, to ``encode_ordinary_batch`` alone on two
threads (half the single texts: a long one is then cut into chunks) or, in one case in
five, in a batch of 4 or 16 texts on two threads (``encode_ordinary_batch``, or, every
other batch when numpy is installed, ``encode_batch_to_numpy`` with
``disallowed_special=()``); its ids must equal tiktoken's
``encode_ordinary``, and ``decode_bytes`` of them must give the text's UTF-8 back. Every
text is also counted (``count_tokens_ordinary`` alone, ``count_tokens_batch`` in a
batch), and its count must be the number of tiktoken's ids. Every pretrained encoding
found in tiktoken's cache takes part. The first difference stops the
run: the encoding and the text are written (as Python ``repr``) to a file whose path is
printed, and the exit status is 1. A run is reproducible from its ``--seed``, except that
a time budget ends it after a varying number of texts.

    python benches/fuzz_encode.py --seconds 900 --seed 14
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import encode_compare as ec  # noqa: E402

ENCODINGS = ["cl100k_base", "o200k_base", "r50k_base", "p50k_base"]

#: Variants of the standard patterns (name: pattern), each with cl100k_base's vocabulary:
#: none has a scanner, so each runs on the DFA or, with a possessive quantifier, on
#: fancy-regex.
VARIANTS = {
    "cl100k~digits4": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,4}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
    "cl100k~digits1": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+""",
    "qwen2-like": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "o200k~digits2": (
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
        r"""\p{N}{1,2}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
    ),
    "gpt2~no-contractions": r""" ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
}

RANGES = [(0x20, 0x7F), (0xA0, 0x250), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF), (0x900, 0x97F),
          (0x3040, 0x30FF), (0x4E00, 0x4E80), (0xAC00, 0xAC40)]
ALPHABET = [chr(c) for lo, hi in RANGES for c in range(lo, hi)] + [
    "\n", "\t", "\r", " ", "  ", "\u200d", "\u0301", "\U0001F600", "\U0001F468\u200d\U0001F469",
    "'s", "'LL", "'ve", "\u017f", "\u0130", "123", "4567",
]


class Texts:
    """The generators above, drawing from one seeded random source."""

    def __init__(self, rng: random.Random, documents: List[str]):
        self.rng = rng
        self.documents = documents

    def spliced(self) -> str:
        rng, parts = self.rng, []
        for _ in range(rng.randint(1, 6)):
            d = rng.choice(self.documents)
            a = rng.randrange(len(d) + 1)
            parts.append(d[a:a + rng.choice([5, 50, 500, 5000, 60000])])
        return "".join(parts)

    def random_chars(self) -> str:
        return "".join(self.rng.choices(ALPHABET, k=self.rng.choice([1, 3, 20, 200, 3000, 70000])))

    def repeated_words(self) -> str:
        rng = self.rng
        words = ["".join(rng.choices(ALPHABET, k=rng.randint(1, 24))) for _ in range(rng.randint(1, 40))]
        glue = [" ", "", "\n", "  ", "."]
        return "".join(rng.choice(words) + rng.choice(glue) for _ in range(rng.randint(1, 20000)))

    def long_spliced(self) -> str:
        rng, parts, size = self.rng, [], 0
        want = rng.randint(600_000, 1_500_000)
        while size < want:
            d = rng.choice(self.documents)
            a = rng.randrange(len(d) + 1)
            part = d[a:a + rng.choice([2000, 20000, 200000])]
            parts.append(part)
            size += len(part) + 1
        return "".join(parts)

    def run(self) -> str:
        rng = self.rng
        return rng.choice(["", " ", "a" * rng.randint(1, 300000), " " * rng.randint(1, 100000),
                           "1" * rng.randint(1, 50000), "\n" * rng.randint(1, 5000)])

    def next(self) -> str:
        k = self.rng.random()
        if k < 0.01 and self.documents:
            return self.long_spliced()
        if k < 0.4 and self.documents:
            return self.spliced()
        if k < 0.7:
            return self.random_chars()
        if k < 0.9:
            return self.repeated_words()
        return self.run()


def report(out_dir: str, what: str, name: str, text: str) -> int:
    path = os.path.join(out_dir, f"fuzz_encode_{name}_{int(time.time())}.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(repr((name, text)))
    print(f"{what}: {name}, a text of {len(text):,} characters, written to {path}")
    return 1


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="time budget (default 600)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--real-mb", type=float, default=8.0,
                        help="MB of real documents to cut fragments from (0: none)")
    parser.add_argument("--encodings", nargs="+", default=ENCODINGS)
    parser.add_argument("--out", default=tempfile.gettempdir(), help="where a failing text is written")
    parser.add_argument("--no-variants", action="store_true",
                        help="only the pretrained encodings, not the variants of their patterns")
    args = parser.parse_args(argv)

    import tiktoken

    import tokenmill

    pairs: Dict[str, tuple] = {}
    for name in args.encodings:
        try:
            pairs[name] = (tiktoken.get_encoding(name), tokenmill.get_encoding(name))
        except Exception as e:  # a vocabulary that is not in the cache
            print(f"{name} skipped: {type(e).__name__}: {str(e).splitlines()[0]}")
    if not pairs:
        print("no encoding could be loaded (is TIKTOKEN_CACHE_DIR set?)")
        return 2

    documents: List[str] = []
    if args.real_mb > 0:
        slices, _ = ec.build_slices([int(args.real_mb * 1e6)])
        documents = [text for _, _, text in slices[0]]
    rng = random.Random(args.seed)
    texts = Texts(rng, documents)
    names = sorted(pairs)
    variants: List[str] = []
    if not args.no_variants and "cl100k_base" in pairs:
        ranks = pairs["cl100k_base"][0]._mergeable_ranks
        for vname, pattern in VARIANTS.items():
            kw = dict(name=vname, pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
            pairs[vname] = (tiktoken.Encoding(**kw), tokenmill.Encoding(**kw))
            variants.append(vname)
    print(f"seed {args.seed}, {args.seconds:.0f} s, encodings {', '.join(names + variants)}, "
          f"{len(documents):,} real documents")

    try:
        import numpy  # noqa: F401  (encode_batch_to_numpy's batches need it)

        arrays = True
    except ImportError:
        arrays = False
    start = last = time.monotonic()
    count = chars = batches = 0
    while time.monotonic() - start < args.seconds:
        name = rng.choice(variants) if variants and rng.random() < 0.25 else rng.choice(names)
        reference, encoding = pairs[name]
        batch = [texts.next() for _ in range(rng.choice([1, 1, 1, 1, 4, 16]))]
        want = [reference.encode_ordinary(t) for t in batch]
        if len(batch) == 1 and rng.random() < 0.5:
            got = [encoding.encode_ordinary(batch[0])]
        elif len(batch) == 1:
            got = encoding.encode_ordinary_batch(batch, num_threads=2)
        elif arrays and batches % 2:
            ids, offsets = encoding.encode_batch_to_numpy(batch, num_threads=2, disallowed_special=())
            got = [ids[a:b].tolist() for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
        else:
            got = encoding.encode_ordinary_batch(batch, num_threads=2)
        if len(batch) == 1:
            counts = [encoding.count_tokens_ordinary(batch[0])]
        else:
            counts = encoding.count_tokens_batch(batch, num_threads=2, disallowed_special=())
        batches += len(batch) > 1
        for text, w, g, n in zip(batch, want, got, counts):
            if list(g) != w:
                return report(args.out, "DIFFERENT IDS", name, text)
            if n != len(w):
                return report(args.out, "DIFFERENT COUNT", name, text)
            if encoding.decode_bytes(g) != text.encode("utf-8"):
                return report(args.out, "DECODING DIFFERS FROM THE TEXT", name, text)
            chars += len(text)
        count += len(batch)
        if time.monotonic() - last > 60:
            last = time.monotonic()
            print(f"  {last - start:5.0f} s: {count:,} texts, {chars / 1e6:,.1f}M characters", flush=True)
    print(f"seed {args.seed}: {count:,} texts, {chars / 1e6:,.1f}M characters, all equal")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
