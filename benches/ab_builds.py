"""Two builds of tokenmill's extension against each other, in one process, alternating.

On a host whose speed wanders (a shared VM: the same build's pass can run 1.4x faster or
slower from one process to the next), single runs and even runs in alternating fresh
processes say little about a change of a few percent. This script loads both builds'
``_core`` modules into one process and times them in turns, round after round, each
round on fresh encoders, then prints the median ratio and its quartiles.

A build is a directory holding a ``tokenmill`` package with its compiled ``_core``
(for example a copy of ``python/tokenmill`` after ``maturin develop``, saved before the
change). Text is the encoding benchmark's (``encode_compare.build_slices``).

Modes:
* ``merge``: merging alone, ``encode_single_piece`` over the long slice's pieces that the
  short slice lacks and that are no token (no cache helps them), optionally by kind and
  by length in bytes (``--min-bytes``/``--max-bytes``); each round times a quarter of
  them on one encoder per build;
* ``short``, ``long``, ``warm``: a pass over the documents as in ``encode_compare.py``
  (``warm``: the long slice after the short one, on the same fresh encoder);
* ``nospace``: the benchmark's megabyte of letters and punctuation without whitespace;
* ``train``: training's merge loop alone (``SpanCounter.learn_merges``, ``--vocab-size``,
  ``--threads``) on the spans of ``--train-mb`` of the standard library's sources
  (nanochat's pattern), counted once per build before the rounds; both builds must learn
  the same merges.

The process is pinned to one CPU (``cpu_pinning.py``; ``--no-pin`` lets it move), except in
``train`` mode, whose counting uses every core.

A pass drops each list of ids as soon as it is made (its memory is then reused by the
next call); ``--keep`` keeps them all until the pass ends, as ``encode_compare.py`` does,
so that the lists take new memory and its page faults.

Example: ``python benches/ab_builds.py BEFORE AFTER --mode merge --kind ui --min-bytes 16``
prints ``AFTER / BEFORE`` speed.
"""

import argparse
import gc
import importlib.util
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_pinning import describe, one_cpu, pin  # noqa: E402
from encode_compare import KINDS, build_slices, worst_text  # noqa: E402
from first_seen_pieces import new_pieces  # noqa: E402


def load_core(build: str, tag: str):
    """The ``_core`` module of the build in directory ``build``, under its own name."""
    found = sorted(Path(build, "tokenmill").glob("_core*.so")) + sorted(Path(build, "tokenmill").glob("_core*.pyd"))
    if not found:
        raise SystemExit(f"{build}: no tokenmill/_core extension in it")
    spec = importlib.util.spec_from_file_location(f"ab_{tag}._core", found[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", help="directory of the first build (the baseline)")
    ap.add_argument("after", help="directory of the second build")
    ap.add_argument("--encoding", default="o200k_base")
    ap.add_argument("--mode", choices=["merge", "short", "long", "warm", "nospace", "train"], default="merge")
    ap.add_argument("--kind", choices=["all", *KINDS], default="all", help="kind of text (default: all)")
    ap.add_argument("--min-bytes", type=int, default=0, help="merge mode: shortest piece kept")
    ap.add_argument("--max-bytes", type=int, default=1 << 30, help="merge mode: longest piece kept")
    ap.add_argument("--rounds", type=int, default=0, help="rounds (default: 100 for merge, 16 otherwise)")
    ap.add_argument("--vocab-size", type=int, default=32768, help="train mode: vocabulary size (default 32768)")
    ap.add_argument("--train-mb", type=float, default=20.0, help="train mode: MB of text whose spans are counted (default 20)")
    ap.add_argument("--threads", type=int, default=1, help="train mode: threads for the merge loop, in builds that take them (default 1)")
    ap.add_argument(
        "--keep", action="store_true", help="keep every list of ids until the pass ends, as encode_compare.py does (default: drop each at once)"
    )
    ap.add_argument("--no-pin", action="store_true", help="let the process move between CPUs (default: pinned to one, except in train mode)")
    args = ap.parse_args()
    rounds = args.rounds or (100 if args.mode == "merge" else 16)
    if args.mode != "train":
        cpu = one_cpu(not args.no_pin)
        pin(cpu)
        print(describe(cpu))

    import tiktoken

    ref = tiktoken.get_encoding(args.encoding)
    ranks, specials, pattern = ref._mergeable_ranks, ref._special_tokens, ref._pat_str
    cores = {"before": load_core(args.before, "before"), "after": load_core(args.after, "after")}
    fresh = {name: (lambda m=m: m.CoreBPE(ranks, specials, pattern)) for name, m in cores.items()}

    if args.mode == "train":
        from tokenmill.corpus import stdlib_texts
        from tokenmill.patterns import NANOCHAT_PATTERN

        docs = list(stdlib_texts(int(args.train_mb * 1e6)))
        counters = {}
        for name, core in cores.items():
            counters[name] = core.SpanCounter(NANOCHAT_PATTERN)
            counters[name].update(docs, num_threads=core.available_cores())
        num_merges = args.vocab_size - 256

        def learn(name: str):
            try:
                return counters[name].learn_merges(num_merges, None, args.threads)
            except TypeError:  # a build from before the merge loop took threads
                return counters[name].learn_merges(num_merges)

        learned = {name: learn(name)[0] for name in counters}
        if learned["before"] != learned["after"]:
            raise SystemExit("the two builds learn different merges")
        print(f"{sum(len(d.encode()) for d in docs) / 1e6:.1f} MB counted; each round learns {len(learned['after']):,} merges")
        timed = []
    elif args.mode == "nospace":
        warm, timed = [], [worst_text("nospace", 1_000_000)]
    else:
        short, long_ = build_slices([4_500_000, 20_000_000])[0]
        pick = lambda docs: [t for k, _, t in docs if args.kind == "all" or k == args.kind]  # noqa: E731
    if args.mode == "merge":
        split = fresh["before"]().split
        pieces = [b for _, b in new_pieces(split, ranks, short, long_, args.kind) if max(2, args.min_bytes) <= len(b) <= args.max_bytes]
        if not pieces:
            raise SystemExit("no pieces of that kind and length")
        one = {name: make() for name, make in fresh.items()}
        if any(one["before"].encode_single_piece(p) != one["after"].encode_single_piece(p) for p in pieces):
            raise SystemExit("the two builds merge some piece differently")
        chunk = pieces[: max(1, len(pieces) // 4)]
        print(f"{len(pieces):,} pieces, {sum(map(len, pieces)) / len(pieces):.1f} bytes on average; each round merges {len(chunk):,}")
    elif args.mode not in ("nospace", "train"):
        warm = pick(short) if args.mode == "warm" else []
        timed = pick(short) if args.mode == "short" else pick(long_)
    nbytes = sum(len(t.encode()) for t in timed) if args.mode != "merge" else sum(map(len, chunk))

    def one_round(name: str) -> float:
        """Seconds of the timed work on a fresh encoder of build ``name``."""
        if args.mode == "train":
            t0 = time.perf_counter()
            learn(name)
            return time.perf_counter() - t0
        core = one[name] if args.mode == "merge" else fresh[name]()
        if args.mode == "merge":
            f = core.encode_single_piece
            t0 = time.perf_counter()
            for p in chunk:
                f(p)
            return time.perf_counter() - t0
        for text in warm:
            core.encode_ordinary(text)
        f = core.encode_ordinary
        if args.keep:
            kept = []
            keep = kept.append
            t0 = time.perf_counter()
            for text in timed:
                keep(f(text))
            took = time.perf_counter() - t0
            del kept
            return took
        t0 = time.perf_counter()
        for text in timed:
            f(text)
        return time.perf_counter() - t0

    ratios, seconds = [], {"before": [], "after": []}
    gc.collect()
    gc.disable()
    for r in range(rounds):
        took = {name: one_round(name) for name in (("before", "after") if r % 2 == 0 else ("after", "before"))}
        gc.collect()
        for name, s in took.items():
            seconds[name].append(s)
        ratios.append(took["before"] / took["after"])
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    if args.mode == "train":
        print(
            f"train, vocab {args.vocab_size}: after / before {statistics.median(ratios):.3f} (quartiles {q1:.3f}-{q3:.3f}, "
            f"{rounds} rounds); median seconds before {statistics.median(seconds['before']):.3f}, "
            f"after {statistics.median(seconds['after']):.3f}"
        )
        return 0
    mbps = {name: nbytes / 1e6 / statistics.median(s) for name, s in seconds.items()}
    print(
        f"{args.encoding} {args.mode} {args.kind}: after / before {statistics.median(ratios):.3f} "
        f"(quartiles {q1:.3f}-{q3:.3f}, {rounds} rounds); median MB/s before {mbps['before']:.1f}, after {mbps['after']:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
