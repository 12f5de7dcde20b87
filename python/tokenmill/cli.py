"""The ``tokenmill`` command line: ``train`` (the default), ``encode``, ``count``, ``eval`` and ``bench``."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from tokenmill.persist import load_saved_or_named

DEFAULT_VOCAB_SIZE = 8192


def _bytes_per_token(enc, texts: Sequence[str]) -> float:
    n_bytes = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
    n_tokens = sum(enc.count_tokens_batch(list(texts), disallowed_special=()))
    return n_bytes / max(n_tokens, 1)


def _compression_table(trained, held_out: Sequence[str]) -> List[str]:
    from tokenmill.evaluate import load_tokenizers

    base = _bytes_per_token(trained, held_out)
    rows: List[Tuple[str, Optional[int], Optional[float]]] = [("trained", trained.n_vocab, base)]
    for label, name in (("GPT-2", "gpt2"), ("GPT-4", "cl100k_base")):
        found, _ = load_tokenizers([name])  # cached vocabularies only: nothing is downloaded
        if not found:
            rows.append((f"{label} ({name})", None, None))
            continue
        enc = found[0].encoding
        rows.append((f"{label} ({name})", enc.n_vocab, _bytes_per_token(enc, held_out)))
    lines = [f"  {'tokenizer':<22} {'vocab':>8} {'bytes/token':>12} {'vs trained':>11}"]
    for label, n, bpt in rows:
        if bpt is None:
            lines.append(f"  {label:<22} {'':>8} {'(vocabulary not cached)':>24}")
        else:
            rel = "" if label == "trained" else f"{(bpt - base) / base * 100:+.1f}%"
            lines.append(f"  {label:<22} {n:>8,} {bpt:>12.3f} {rel:>11}")
    return lines


def cmd_train(args: argparse.Namespace) -> int:
    import tokenmill
    from tokenmill.corpus import stdlib_split
    from tokenmill.sources import iter_documents

    held_out: List[str] = []
    if args.files:
        docs = iter_documents(args.files, format=args.format, column=args.column)
        source = f"{len(args.files)} path(s)"
    else:
        docs, held_out = stdlib_split()
        source = "the Python standard library's sources (built-in default; every 10th file held out)"
    if args.eval:
        held_out = list(iter_documents(args.eval, format=args.format, column=args.column))

    trainer = tokenmill.Trainer(args.pattern, threads=args.threads, doc_cap=args.doc_cap)
    progress = not args.quiet
    t0 = time.perf_counter()
    trainer.update_from_iterator(docs, buffer_size=args.buffer_size, max_chars=args.max_chars, progress=progress)
    t_count = time.perf_counter() - t0
    t1 = time.perf_counter()
    enc = trainer.train(args.vocab_size, special_tokens=args.special or (), name=args.name, progress=progress)
    t_merge = time.perf_counter() - t1
    merges = trainer.stats.merges

    print(f"trained on {source}")
    print(f"  documents:      {trainer.documents:,}")
    print(f"  bytes read:     {trainer.bytes:,} ({trainer.bytes / 1e6:.1f} MB)")
    print(f"  distinct spans: {trainer.distinct_spans:,} (of {trainer.stats.total_spans:,})")
    print(f"  counting:       {t_count:.2f} s ({trainer.bytes / 1e6 / max(t_count, 1e-9):.1f} MB/s, {trainer.threads} threads)")
    print(f"  merging:        {t_merge:.2f} s ({merges:,} merges, {merges / max(t_merge, 1e-9):,.0f} merges/s)")
    print(f"  vocabulary:     {enc.n_vocab:,} tokens ({merges:,} merges + 256 bytes + {len(enc._special_tokens)} special)")
    if held_out:
        print(f"compression on held-out text ({sum(len(t.encode('utf-8', 'surrogatepass')) for t in held_out) / 1e6:.1f} MB):")
        for line in _compression_table(enc, held_out):
            print(line)
    if args.output:
        out = tokenmill.save(enc, args.output)
        print(f"saved to {out}/ (load it with tokenmill.load({str(out)!r}))")
    else:
        print("not saved (use --output DIR to keep it)")
    return 0


def _read_texts(files: Sequence[str], limit_mb: float) -> List[str]:
    from tokenmill.corpus import stdlib_texts

    if not files:
        return list(stdlib_texts(int(limit_mb * 1e6)))
    texts = []
    for f in files:
        try:
            texts.append(Path(f).read_text(encoding="utf-8", errors="replace"))
        except OSError as e:
            raise SystemExit(f"tokenmill: cannot read {f}: {e.strerror or e}")
    return texts


def cmd_encode(args: argparse.Namespace) -> int:
    import tokenmill

    try:
        enc = load_saved_or_named(args.encoding)
    except (ValueError, OSError) as e:
        print(f"tokenmill: {e}", file=sys.stderr)
        return 2
    texts = _read_texts(args.files, args.limit_mb)
    source = ", ".join(args.files) if args.files else "the Python standard library's sources (built-in default)"
    nbytes = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
    threads = args.threads or tokenmill._core.available_cores()
    t0 = time.perf_counter()
    if args.output:
        # Straight into one array of ids: no Python list or int is made.
        flat, _ = enc.encode_batch_to_numpy(texts, num_threads=threads, disallowed_special=())
        ntok = len(flat)
    else:
        if threads == 1:
            ids = [enc.encode_ordinary(t) for t in texts]
        else:
            ids = enc.encode_ordinary_batch(texts, num_threads=threads)
        ntok = sum(len(x) for x in ids)
    dt = time.perf_counter() - t0
    print(f"encoded {len(texts)} text(s) from {source}")
    print(f"  encoding:        {enc.name} ({enc.n_vocab:,} ids)")
    print(f"  bytes:           {nbytes:,}")
    print(f"  tokens:          {ntok:,}")
    print(f"  bytes per token: {nbytes / max(ntok, 1):.3f}")
    print(f"  time:            {dt:.3f} s ({nbytes / 1e6 / max(dt, 1e-9):.1f} MB/s)")
    if args.output:
        import numpy as np

        np.save(args.output, flat)
        print(f"  ids written to:  {args.output}")
    return 0


#: ``tokenmill count`` reads files until about this much text is waiting, counts it as one
#: batch and prints its lines, so that memory stays bounded over many files.
_COUNT_BATCH_BYTES = 64 << 20


def cmd_count(args: argparse.Namespace) -> int:
    """``tokenmill count``: the number of tokens in each file (``-`` or none: standard
    input), one line each as ``wc`` prints them, then a total when there are several.
    Files are read as UTF-8 (undecodable bytes replaced); special-token text counts as
    ordinary text unless ``--allow-special``. A file that cannot be read is reported and
    skipped, and the status is then 1."""
    import tokenmill

    if args.threads is not None and args.threads < 1:
        raise ValueError("--threads must be at least 1")
    try:
        enc = load_saved_or_named(args.encoding)
    except (ValueError, OSError) as e:
        print(f"tokenmill: {e}", file=sys.stderr)
        return 2
    threads = args.threads or tokenmill._core.available_cores()
    special = {"allowed_special": "all"} if args.allow_special else {"disallowed_special": ()}
    files = list(args.files) or ["-"]
    total = 0
    names: List[str] = []
    texts: List[str] = []
    waiting = 0

    def flush() -> None:
        nonlocal total, waiting
        for name, n in zip(names, enc.count_tokens_batch(texts, num_threads=threads, **special)):
            print(f"{n:>10} {name}", flush=True)
            total += n
        names.clear()
        texts.clear()
        waiting = 0

    failed = False
    for f in files:
        try:
            data = sys.stdin.buffer.read() if f == "-" else Path(f).read_bytes()
        except OSError as e:
            # (as wc does: said, and the other files still counted; the status says so)
            flush()
            print(f"tokenmill: cannot read {f}: {e.strerror or e}", file=sys.stderr)
            failed = True
            continue
        names.append(f)
        texts.append(data.decode("utf-8", errors="replace"))
        waiting += len(data)
        if waiting >= _COUNT_BATCH_BYTES:
            flush()
    flush()
    if len(files) > 1:
        print(f"{total:>10} total")
    return 1 if failed else 0


def cmd_eval(args: argparse.Namespace) -> int:
    """``tokenmill eval``: bytes per token and tokens per character of each tokenizer, per row
    of text, relative to a baseline (see :mod:`tokenmill.evaluate`). Tokenizers that cannot be
    loaded (an uncached vocabulary without ``--allow-download``, a typo) are reported and left
    out; it fails (2) only when none loads, or the ``--baseline`` named does not."""
    from tokenmill import evaluate as ev

    if args.plot:
        ev.require_matplotlib()  # fail before the work, not after
    if args.limit_mb is not None and args.limit_mb <= 0:
        raise ValueError("--limit-mb must be positive")
    if args.threads is not None and args.threads < 1:
        raise ValueError("--threads must be at least 1")
    specs = list(args.tokenizer or ev.DEFAULT_TOKENIZERS)
    baseline_key = ev.spec_key(args.baseline) if args.baseline else None
    if baseline_key and baseline_key not in [ev.spec_key(s) for s in specs]:
        specs.insert(0, args.baseline)
    tokenizers, unavailable = ev.load_tokenizers(specs, allow_download=args.allow_download)
    machine = args.format != "text"
    if machine or not tokenizers:  # the text report lists them itself; keep other formats parseable
        for u in unavailable:
            print(f"tokenmill: eval: {u.spec}: unavailable: {u.reason}", file=sys.stderr)
    if not tokenizers:
        print("tokenmill: error: no tokenizer could be loaded", file=sys.stderr)
        return 2
    baseline = tokenizers[0].label
    if baseline_key:
        match = [t for t in tokenizers if ev.spec_key(t.spec) == baseline_key]
        if not match:
            print(f"tokenmill: error: the baseline {args.baseline} is unavailable", file=sys.stderr)
            return 2
        baseline = match[0].label

    limit = None if args.limit_mb is None else int(args.limit_mb * 1e6)
    notes: List[str] = []
    if args.files:
        docs = ev.file_documents(
            args.files, group_by=args.group_by, lang_from_path=args.lang_from_path,
            input_format=args.input_format, column=args.column, limit_bytes=limit,
        )
        source, title = ", ".join(args.files), args.group_by
    else:
        if args.group_by != "file" or args.lang_from_path:
            raise ValueError("--group-by and --lang-from-path apply to FILES; the default corpus has a row per domain")
        from tokenmill.corpus import stdlib_root

        docs, notes = ev.default_documents(limit)
        source, title = f"the built-in default corpus, from the standard library in {stdlib_root()}", "domain"
    result = ev.evaluate(
        docs, tokenizers, baseline=baseline, threads=args.threads,
        group_title=title, source=source, notes=notes, unavailable=unavailable,
    )
    sys.stdout.write(ev.render(result, args.format))
    if args.plot:
        ev.plot(result, args.plot)
        print(f"plot saved to {args.plot}", file=sys.stderr if machine else sys.stdout)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """``tokenmill bench``: tokenmill's speed against tiktoken's on the same text, each figure
    from a fresh process, and whether the ids are the same (see :mod:`tokenmill.benchmark`).
    Exit status 1 if any library's ids differ from tokenmill's, 2 if tokenmill cannot run."""
    import tokenmill
    from tokenmill import benchmark
    from tokenmill.evaluate import offline
    from tokenmill.load import VocabularyNotAvailableError

    if args.repeat < 1:
        raise ValueError("--repeat must be at least 1")
    if args.threads < 0:
        raise ValueError("--threads must be at least 1 (0: all cores)")
    if args.limit_mb <= 0:
        raise ValueError("--limit-mb must be positive")
    threads = args.threads or tokenmill._core.available_cores()
    # The encoding is loaded here first, so that a typo or a vocabulary that is not cached
    # fails at once, with tokenmill's message, instead of in every worker.
    try:
        with (contextlib.nullcontext() if args.allow_download else offline()):
            load_saved_or_named(args.encoding)
    except VocabularyNotAvailableError as e:
        print(f"tokenmill: {e}", file=sys.stderr)
        return 2
    except (ValueError, OSError, KeyError) as e:
        print(f"tokenmill: cannot load the encoding {args.encoding}: {e}", file=sys.stderr)
        return 2
    docs = benchmark.read_documents(
        args.files, input_format=args.input_format, column=args.column, limit_bytes=int(args.limit_mb * 1e6)
    )

    def progress(line: str) -> None:
        if not args.quiet:
            print(f"  {line}", file=sys.stderr, flush=True)

    libraries = ["tokenmill", *(lib for lib in args.libs if lib != "tokenmill")]
    result = benchmark.compare(
        docs, args.encoding, libraries=libraries, threads=threads, repeat=args.repeat,
        offline=not args.allow_download, progress=progress,
    )
    sys.stdout.write(benchmark.render(result))
    if result.result("tokenmill") is None:
        return 2
    return 1 if result.mismatches() else 0


def build_parser() -> argparse.ArgumentParser:
    from tokenmill.sources import FORMATS

    ap = argparse.ArgumentParser(prog="tokenmill", description="Fast byte-level BPE: train, encode, count, evaluate and benchmark.")
    sub = ap.add_subparsers(dest="command")

    tr = sub.add_parser("train", help="train a vocabulary (default corpus: the Python standard library's sources)")
    tr.add_argument("files", nargs="*", help="files, directories or globs; none: the built-in default corpus")
    tr.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE, help=f"total vocabulary size (default {DEFAULT_VOCAB_SIZE})")
    tr.add_argument("--pattern", default="nanochat", help="split pattern: nanochat (default), gpt2, r50k, cl100k, o200k, or a regex")
    tr.add_argument("--format", default="auto", choices=FORMATS, help="input format (default: by extension)")
    tr.add_argument("--column", default="text", help="JSONL field / Parquet column with the text (default text)")
    tr.add_argument("--output", "-o", help="directory to save the trained encoding in")
    tr.add_argument("--doc-cap", type=int, help="truncate each document to this many characters")
    tr.add_argument("--max-chars", type=int, help="stop reading after this many characters")
    tr.add_argument("--threads", type=int, help="threads for counting and for the largest merges (default: all cores)")
    tr.add_argument("--special", nargs="+", metavar="TOKEN", help="special tokens, appended after the learned tokens")
    tr.add_argument("--buffer-size", type=int, default=8192, help="documents per counting batch (default 8192)")
    tr.add_argument("--eval", nargs="+", metavar="FILE", help="held-out files to measure compression on")
    tr.add_argument("--name", default="tokenmill", help="the encoding's name")
    tr.add_argument("--quiet", "-q", action="store_true", help="no progress output")
    tr.set_defaults(func=cmd_train)

    enc = sub.add_parser("encode", help="encode files (default: the Python standard library's sources)")
    enc.add_argument("files", nargs="*", help="UTF-8 text files; none: the built-in default corpus")
    enc.add_argument("--encoding", default="cl100k_base", help="encoding name or saved directory (default cl100k_base)")
    enc.add_argument("--threads", type=int, default=0, help="worker threads (default: all cores; 1: no batch)")
    enc.add_argument("--limit-mb", type=float, default=20.0, help="size of the default corpus sample in MB")
    enc.add_argument("--output", help="save all ids, concatenated, as a .npy uint32 array")
    enc.set_defaults(func=cmd_encode)

    cnt = sub.add_parser(
        "count",
        help="count the tokens of files or standard input, a line per file as wc prints them",
        description=(
            "The number of tokens in each file (- or no file: standard input), then a total when "
            "there are several. Files are read as UTF-8, undecodable bytes replaced; no ids are made."
        ),
    )
    cnt.add_argument("files", nargs="*", help="files; - or none: standard input")
    cnt.add_argument("--encoding", default="cl100k_base", help="encoding name or saved directory (default cl100k_base)")
    cnt.add_argument("--threads", type=int, help="worker threads (default: all cores)")
    cnt.add_argument(
        "--allow-special", action="store_true",
        help="count special-token text (<|endoftext|>) as one special token (default: as ordinary text)",
    )
    cnt.set_defaults(func=cmd_count)

    from tokenmill.evaluate import DEFAULT_TOKENIZERS, GROUP_BY, OUTPUT_FORMATS

    ev = sub.add_parser(
        "eval",
        help="compare tokenizers' compression (bytes per token) per file, domain or language",
        description=(
            "Bytes per token (higher = better compression) and tokens per character of each "
            "tokenizer, per file, domain or language, with the relative difference from a "
            "baseline. Without files: the built-in default corpus (standard-library code, its "
            "docstrings and comments, and Chinese/Japanese/Korean text where this Python ships "
            "its test package). Put FILES before -t, or end the -t list with --."
        ),
    )
    ev.add_argument("files", nargs="*", help="files, directories or globs; none: the built-in default corpus")
    ev.add_argument(
        "-t", "--tokenizer", action="extend", nargs="+", metavar="NAME_OR_DIR",
        help=f"saved tokenizer directories or pretrained names (default: {' '.join(DEFAULT_TOKENIZERS)})",
    )
    ev.add_argument("--baseline", metavar="NAME_OR_DIR", help="tokenizer relative differences refer to (default: the first)")
    ev.add_argument("--group-by", default="file", choices=GROUP_BY, help="a row per file (default), directory or extension")
    ev.add_argument("--lang-from-path", action="store_true", help="also a row per language, from directory names like en/, de/, pt-BR/")
    ev.add_argument("--format", default="text", choices=OUTPUT_FORMATS, help="output format (default text)")
    ev.add_argument("--input-format", default="auto", choices=FORMATS, help="input format (default: by extension)")
    ev.add_argument("--column", default="text", help="JSONL field / Parquet column with the text (default text)")
    ev.add_argument("--limit-mb", type=float, help="read at most about this many MB per row (default: all)")
    ev.add_argument("--threads", type=int, help="encoding threads (default: all cores)")
    ev.add_argument("--plot", metavar="FILE.png", help="also save a bar chart (needs matplotlib: tokenmill[plot])")
    ev.add_argument(
        "--allow-download", action="store_true",
        help="download pretrained vocabularies that are not cached (default: report them as unavailable)",
    )
    ev.set_defaults(func=cmd_eval)

    from tokenmill.benchmark import LIBRARIES

    be = sub.add_parser(
        "bench",
        help="time tokenmill against tiktoken on your text, and check that the ids are the same",
        description=(
            "Encodes the same documents with each library, each figure in a fresh process (a new "
            "encoder, text it has not seen), and prints MB/s, tokenmill's speed over each "
            "library's, the tokens, and whether every document's ids equal tokenmill's (exit "
            "status 1 if not). Without files: the Python standard library's sources."
        ),
    )
    be.add_argument("files", nargs="*", help="files, directories or globs; none: the built-in default corpus")
    be.add_argument("--encoding", default="cl100k_base", help="encoding name or saved directory (default cl100k_base)")
    be.add_argument(
        "--libs", nargs="+", choices=LIBRARIES, default=list(LIBRARIES),
        help=f"libraries to time (default: {' '.join(LIBRARIES)}); tokenmill, the reference, always runs",
    )
    be.add_argument("--threads", type=int, default=1, help="1 (default): encode_ordinary per document; N: encode_ordinary_batch on N threads; 0: all cores")
    be.add_argument("--repeat", type=int, default=1, help="rounds, libraries in alternating order (default 1)")
    be.add_argument("--limit-mb", type=float, default=20.0, help="read at most about this many MB (default 20)")
    be.add_argument("--input-format", default="auto", choices=FORMATS, help="input format (default: by extension)")
    be.add_argument("--column", default="text", help="JSONL field / Parquet column with the text (default text)")
    be.add_argument("--allow-download", action="store_true", help="download a pretrained vocabulary that is not cached")
    be.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    be.set_defaults(func=cmd_bench)
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("train", "encode", "count", "eval", "bench", "-h", "--help"):
        argv = ["train", *argv]
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"tokenmill: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tokenmill: interrupted", file=sys.stderr)
        return 130
