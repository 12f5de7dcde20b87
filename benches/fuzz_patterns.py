"""Differential fuzzing of custom split patterns against tiktoken, for as long as you give it.

``fuzz_encode.py`` checks the pretrained encodings (which run on tokenmill's hand-written
scanners) and five fixed variants of their patterns. A pattern nobody has written yet
takes another road. One that ends in the standard whitespace tail (``|\s+(?!\S)|\s+``)
runs on regex-automata's DFA, the tail's look-ahead applied by hand, when that engine
reads the rest as fancy-regex does (no look-around, no possessive or stacked quantifier,
no bare flag directive); any other runs on fancy-regex, as in tiktoken. This script
makes such patterns at random and compares each with tiktoken:

* alternations of one to six branches, each a few atoms (letters, numbers, cases, marks,
  punctuation, whitespace, ``\\w``, ``\\d``, ``.``, character sets) under greedy, lazy,
  possessive or bounded quantifiers, sometimes with an optional leading space, a
  trailing look-ahead or ``$``, a contraction branch, or a group with flags;
* ending in one of the whitespace tails of the standard patterns (``\\s+(?!\\S)|\\s+`` and
  the like, which decide whether the DFA may take the pattern) or in a plain ``\\s``;
* sometimes under a leading flag directive (``(?i)``, ``(?m)``, ``(?s)``, ``(?U)``, ``(?x)``);

each over cl100k_base's vocabulary and random texts of letters in both cases and in
several scripts, titlecase letters, modifier letters, digits, combining marks, emoji,
contractions, slashes, and whitespace and line breaks of ten kinds.

For each pattern: if tiktoken refuses it, tokenmill must refuse it with the same exception
type; otherwise every text's ``encode_ordinary`` must give tiktoken's ids (texts on which
tiktoken panics, such as those where the pattern matches the empty string, are left out),
and the texts together through ``encode_ordinary_batch`` on two threads and
``count_tokens_batch`` must give the same ids and counts. The first difference stops the
run: the pattern and the text are written (as Python ``repr``) to a file whose path is
printed, and the exit status is 1. A run is reproducible from its ``--seed``, except that
a time budget ends it after a varying number of patterns.

    python benches/fuzz_patterns.py --seconds 600 --seed 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import tempfile
import time
from typing import Iterator, List, Optional, Tuple

#: What a branch is made of: classes as the standard patterns write them, and others.
ATOMS = [
    r"\p{L}", r"\p{N}", r"[^\s\p{L}\p{N}]", r"[^\r\n\p{L}\p{N}]", r"\p{Lu}", r"\p{Ll}",
    r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]", r"\s", r"[\r\n]", r"\d",
    r"\w", r"[a-z]", r"[^\w\s]", r".", r"\S", r"'", r"[\r\n/]", r"\pP", r"\p{M}",
]
QUANTIFIERS = ["", "+", "*", "?", "{1,3}", "{1,4}", "{2}", "+?", "*?", "??", "++", "?+", "*+", "{1,3}+", "{1,2}?"]
CONTRACTIONS = ["'(?i:[sdmt]|ll|ve|re)", "'s|'t|'re|'ve|'m|'ll|'d", "(?i:'s|'t|'re)", "(?:'s|'t)"]
ENDINGS = [r"[\r\n]*", r"[\r\n/]*", r"(?!\S)", r"(?=\s)", r"$"]
TAILS = [r"\s+(?!\S)|\s+", r"\s*[\r\n]|\s+(?!\S)|\s+", r"\s*[\r\n]+|\s+(?!\S)|\s+", r"\s+", r"\s"]
FLAGS = ["", "", "", "(?i)", "(?m)", "(?s)", "(?U)", "(?x)"]
#: What texts are made of.
PARTS = [
    "a", "B", "z", "Q", "1", "22", "333", " ", "  ", "\t", "\n", "\r\n", "\r", "'s", "'LL", "'t",
    ".", "/", "//", "é", "Ä", "Д", "д", "中", "😀", "\u00a0", "\u2028", "\u3000", " x", "\u0301",
    "!?", "ǅ", "ʰ", "٣", "_", "-", "\x0b", "\x0c", "\u0085",
]


def branch(rng: random.Random) -> str:
    if rng.random() < 0.1:
        return rng.choice(CONTRACTIONS)
    parts = [rng.choice([" ?", "[ ]?", " "])] if rng.random() < 0.3 else []
    parts += [rng.choice(ATOMS) + rng.choice(QUANTIFIERS) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.15:
        parts.append(rng.choice(ENDINGS))
    body = "".join(parts)
    if rng.random() < 0.1:
        body = rng.choice(["(?i:", "(?:", "(?U:"]) + body + ")"
    return body


def pattern(rng: random.Random) -> str:
    branches = [branch(rng) for _ in range(rng.randint(1, 6))]
    return rng.choice(FLAGS) + "|".join(branches + [rng.choice(TAILS)])


def texts(rng: random.Random, count: int) -> List[str]:
    return ["".join(rng.choice(PARTS) for _ in range(rng.randint(0, 30))) for _ in range(count)]


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """The process's standard error (file descriptor 2) sent nowhere meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def compare(pat: str, ranks: dict, cases: List[str], tiktoken, tokenmill) -> Optional[Tuple[str, str]]:
    """The first difference between tiktoken and tokenmill on this pattern, as (what, text),
    or None."""
    kw = dict(name="fuzz", pat_str=pat, mergeable_ranks=ranks, special_tokens={})
    try:
        reference = tiktoken.Encoding(**kw)
        refused = None
    except Exception as e:  # tiktoken refuses the pattern
        refused = e
    try:
        encoding = tokenmill.Encoding(**kw)
    except Exception as e:
        if refused is None:
            return f"tokenmill refuses a pattern tiktoken takes: {type(e).__name__}: {e}", ""
        if type(e) is not type(refused):
            return f"refused with {type(e).__name__}, tiktoken with {type(refused).__name__}", ""
        return None
    if refused is not None:
        return f"tokenmill takes a pattern tiktoken refuses ({type(refused).__name__}: {refused})", ""
    kept, want = [], []
    with quiet_stderr():  # (a panic's message, printed by Rust's panic hook)
        for text in cases:
            try:
                want.append(reference.encode_ordinary(text))
            except BaseException:  # tiktoken panics (pyo3's PanicException is no Exception)
                continue
            kept.append(text)
    for text, ids in zip(kept, want):
        if encoding.encode_ordinary(text) != ids:
            return "encode_ordinary", text
    if encoding.encode_ordinary_batch(kept, num_threads=2) != want:
        return "encode_ordinary_batch on two threads", "\n".join(kept)
    if encoding.count_tokens_batch(kept, num_threads=2, disallowed_special=()) != [len(w) for w in want]:
        return "count_tokens_batch on two threads", "\n".join(kept)
    return None


def run(seed: int, seconds: float, max_patterns: Optional[int], per_pattern: int, out_dir: Optional[str]) -> int:
    import tiktoken

    import tokenmill

    try:
        ranks = tiktoken.get_encoding("cl100k_base")._mergeable_ranks
    except Exception as e:  # the vocabulary is not in the cache
        print(f"cl100k_base is not available: {type(e).__name__}: {str(e).splitlines()[0]}")
        return 2
    rng = random.Random(seed)
    start = last = time.monotonic()
    count = cases = 0
    while time.monotonic() - start < seconds and (max_patterns is None or count < max_patterns):
        pat = pattern(rng)
        batch = texts(rng, per_pattern)
        found = compare(pat, ranks, batch, tiktoken, tokenmill)
        if found is not None:
            what, text = found
            print(f"DIFFERENT: {what}, pattern {pat!r}")
            if out_dir is not None:
                path = os.path.join(out_dir, f"fuzz_patterns_{int(time.time())}.txt")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(repr((pat, text)))
                print(f"the pattern and text written to {path}")
            return 1
        count += 1
        cases += len(batch)
        if time.monotonic() - last > 60:
            last = time.monotonic()
            print(f"  {last - start:5.0f} s: {count:,} patterns", flush=True)
    print(f"seed {seed}: {count:,} patterns, {cases:,} texts, all equal")
    return 0


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="time budget (default 600)")
    parser.add_argument("--patterns", type=int, default=None, help="stop after this many patterns")
    parser.add_argument("--texts", type=int, default=200, help="random texts per pattern (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=tempfile.gettempdir(), help="where a failing pattern is written")
    args = parser.parse_args(argv)
    return run(args.seed, args.seconds, args.patterns, args.texts, args.out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
