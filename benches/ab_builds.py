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

``--count`` counts instead of timing (``callgrind_counts.py``; needs valgrind): each build
runs the mode's pass once, in a process of its own under callgrind, with collection on only
inside the timed calls (``encode_ordinary``, or ``encode_single_piece`` in ``merge`` mode;
``warm``'s first slice goes through ``count_ordinary``, which fills the same caches). It
prints each build's instructions, mispredicted branches and simulated cache misses and
their ratios: the same from run to run to within a few in a hundred thousand, so a change of a
fraction of a percent shows, but blind to prefetching and memory latency. Each build
takes a minute or more.
"""

import argparse
import gc
import importlib.util
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import callgrind_counts  # noqa: E402
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
    ap.add_argument(
        "--count",
        action="store_true",
        help="count instructions, mispredicted branches and simulated cache misses under valgrind's callgrind instead of timing (not in train mode)",
    )
    ap.add_argument("--count-child", nargs=2, metavar=("BUILD", "INPUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.count_child:
        return count_child(*args.count_child)
    if args.count and args.mode == "train":
        raise SystemExit("--count does not count training")
    if args.count and not callgrind_counts.available():
        raise SystemExit("--count needs valgrind, which is not installed")
    rounds = args.rounds or (100 if args.mode == "merge" else 16)
    if args.mode != "train" and not args.count:
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
    if args.count:
        work = {"ranks": ranks, "specials": specials, "pattern": pattern, "mode": args.mode}
        if args.mode == "merge":
            work["pieces"] = pieces
            what = f"{len(pieces):,} pieces"
        else:
            work["warm"], work["timed"] = warm, timed
            what = f"{nbytes / 1e6:.2f} MB"
        return count_builds({"before": args.before, "after": args.after}, work, f"{args.encoding} {args.mode} {args.kind}, {what}")

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


def count_builds(builds: dict, work: dict, label: str) -> int:
    """Runs ``work`` once per build under callgrind (see ``--count``) and prints the counts."""
    counted = {}
    with tempfile.TemporaryDirectory() as tmp:
        work_file = Path(tmp, "work.pickle")
        work_file.write_bytes(pickle.dumps(work, protocol=pickle.HIGHEST_PROTOCOL))
        function = "*__pymethod_encode_single_piece__" if work["mode"] == "merge" else "*__pymethod_encode_ordinary__"
        for name, build in builds.items():
            out = Path(tmp, f"{name}.callgrind")
            argv = [sys.executable, str(Path(__file__).resolve()), build, build, "--count-child", build, str(work_file)]
            env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict layouts in both runs
            done = subprocess.run(callgrind_counts.command(out, [function], argv), capture_output=True, text=True, env=env)
            if done.returncode != 0:
                raise SystemExit(f"{name}: the counted run failed:\n{done.stderr[-2000:]}")
            counted[name] = callgrind_counts.summary(callgrind_counts.totals(out))
    print(f"{label}, counted under callgrind (caches: {', '.join(callgrind_counts.CACHE_MODEL)}):")
    for figure in counted["before"]:
        b, a = counted["before"][figure], counted["after"][figure]
        print(f"  {figure:<18} before {b:>15,}  after {a:>15,}  after / before {a / b if b else float('nan'):.4f}")
    return 0


def count_child(build: str, work_file: str) -> int:
    """The counted process of ``--count``: one pass of the work on a fresh encoder of one build."""
    work = pickle.loads(Path(work_file).read_bytes())
    core = load_core(build, "counted").CoreBPE(work["ranks"], work["specials"], work["pattern"])
    if work["mode"] == "merge":
        for p in work["pieces"]:
            core.encode_single_piece(p)
        return 0
    warm_up = getattr(core, "count_ordinary", None) or (lambda text: core.encode(text, set(), set()))
    for text in work["warm"]:
        warm_up(text)
    kept = [core.encode_ordinary(text) for text in work["timed"]]  # kept, as encode_compare.py keeps them
    del kept
    return 0


if __name__ == "__main__":
    sys.exit(main())
