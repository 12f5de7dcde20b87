"""Training time and memory: tokenmill against rustbpe, HuggingFace tokenizers and gigatoken,
on the same real text and the same split pattern, in one run.

Every (library, size, vocabulary) run happens in a fresh Python process (this script
re-invoked with a hidden ``--worker`` flag), so that the peak RSS belongs to that library
alone and nothing is cached between runs. The worker imports its library, loads the text
itself, then measures:

* time: the wall time of the training call alone (counting spans and learning merges;
  for tokenmill, the two phases' seconds are shown apart, from its trainer's statistics);
* peak RSS: ``getrusage(RUSAGE_SELF).ru_maxrss`` once training returned, and the increase
  over the baseline, the resident size just before training (interpreter, library and the
  loaded text included), which is the memory training itself needed.

The ratios are the library's figure over tokenmill's (time, and RSS increase); above 1 means
slower or bigger than tokenmill. tokenmill's and rustbpe's merges are compared token by token
(they should be identical: same counts, same tie-breaking); HuggingFace breaks ties
differently, so for it the share of tokenmill's learned tokens it learned too is shown.

The same pattern is used by all of them: nanochat's (``tokenmill.patterns.NANOCHAT_PATTERN``)
unless ``--pattern`` gives another (a name from ``tokenmill.patterns.NAMED_PATTERNS`` or a
regex). HF gets it as ``Split(Regex(pattern), behavior="isolated")`` followed by
``ByteLevel(add_prefix_space=False, use_regex=False)``, with ``ByteLevel.alphabet()`` as the
initial alphabet so that its 256 base tokens are the bytes, as for the others.
gigatoken's ``train_bpe`` splits with GPT-2's pattern only, so it runs only with ``--pattern
gpt2`` (and is skipped with a note otherwise). It takes one ``bytes`` object in which
``<|endoftext|>`` separates the documents: the worker joins the texts so before the
baseline is taken (that copy is input, not training's memory; a document that contains
that string is split there). It breaks ties as HuggingFace does, so for it too the share of
tokenmill's learned tokens is shown. What it prints while training is discarded.

Text (no download; deterministic for a given machine and environment), taken in this order
until the requested number of bytes (1 MB = 10**6 bytes of UTF-8) is reached, one file per
document, the last document cut to fit:

1. the running Python's standard-library ``.py`` sources (``tokenmill.corpus.stdlib_texts``:
   sorted paths under ``sysconfig.get_paths()["stdlib"]``, site-packages excluded), ~30 MB;
2. ``.py``, ``.pyi``, ``.txt``, ``.md`` and ``.rst`` files of the site-packages directories
   (``site.getsitepackages()``, ``site.getusersitepackages()`` and sysconfig's purelib and
   platlib, the directories in sorted order, the files of each in sorted path order);
3. every file under ``/usr/share/doc``, then under ``/usr/share/man`` (sorted paths;
   ``.gz`` files decompressed).

Files that are not valid UTF-8 or contain NUL bytes are skipped, as are symbolic links
(no file counts twice) and ``__pycache__``. If all of it is less than requested, the run
uses what there is; the MB actually used, and where they came from, are printed.

Usage:
    python benches/train_compare.py [--sizes 10 100] [--vocab 4096 32768]
        [--libs tokenmill rustbpe hf gigatoken] [--pattern nanochat] [--threads N]
    python benches/train_compare.py --sizes 2 --vocab 1024      # a quick smoke run

Thread count: by default each library uses all cores; ``--threads N`` passes ``threads=N``
to tokenmill and sets ``RAYON_NUM_THREADS`` (and ``RAYON_RS_NUM_CPUS``) to N in every
worker's environment, which rustbpe's and HuggingFace's rayon pools obey.
"""

from __future__ import annotations

from machine_info import machine_line, python_line, versions
from text_files import files_under

import argparse
import gc
import gzip
import hashlib
import importlib.util
import json
import os
import resource
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

#: --libs name -> (importable module, distribution name, label in the table)
LIBRARIES: Dict[str, Tuple[str, str, str]] = {
    "tokenmill": ("tokenmill", "tokenmill", "tokenmill"),
    "rustbpe": ("rustbpe", "rustbpe", "rustbpe"),
    "hf": ("tokenizers", "tokenizers", "hf tokenizers"),
    "gigatoken": ("gigatoken", "gigatoken", "gigatoken"),
}
#: The pattern name gigatoken's trainer splits with (the only one it has).
GIGATOKEN_PATTERN = "gpt2"
#: What gigatoken's trainer takes as the boundary between documents.
GIGATOKEN_SEPARATOR = "<|endoftext|>"

SITE_SUFFIXES = (".py", ".pyi", ".txt", ".md", ".rst")
DOC_ROOTS = ("/usr/share/doc", "/usr/share/man")


# ---------------------------------------------------------------------------- text


def _site_dirs() -> List[Path]:
    dirs = list(getattr(site, "getsitepackages", lambda: [])())
    user = getattr(site, "getusersitepackages", lambda: None)()
    if user:
        dirs.append(user)
    paths = sysconfig.get_paths()
    dirs += [paths["purelib"], paths["platlib"]]
    unique = {Path(d).resolve() for d in dirs if d and Path(d).is_dir()}
    return sorted(unique)


def _site_texts() -> Iterator[str]:
    seen = set()
    for d in _site_dirs():
        for path in files_under(d, lambda name: name.endswith(SITE_SUFFIXES)):
            real = path.resolve()
            if real in seen:
                continue
            seen.add(real)
            try:
                yield path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue


def _doc_texts(root: str) -> Iterator[str]:
    if not os.path.isdir(root):
        return
    for path in files_under(Path(root)):
        try:
            data = path.read_bytes()
            if path.name.endswith(".gz"):
                data = gzip.decompress(data)
            if b"\0" in data:
                continue
            yield data.decode("utf-8")
        except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError):
            continue


def _sources() -> Iterator[Tuple[str, Iterator[str]]]:
    from tokenmill.corpus import stdlib_texts

    yield "Python standard library", stdlib_texts()
    yield "site-packages", _site_texts()
    for root in DOC_ROOTS:
        yield root, _doc_texts(root)


def load_texts(limit_bytes: int) -> Tuple[List[str], dict]:
    """The first ``limit_bytes`` bytes of text (see the module docstring), as documents,
    with what was used: documents, bytes, a digest and bytes per source."""
    texts: List[str] = []
    total = 0
    digest = hashlib.blake2b(digest_size=8)
    per_source: Dict[str, List[int]] = {}
    for label, docs in _sources():
        for doc in docs:
            if not doc:
                continue
            data = doc.encode("utf-8")
            if total + len(data) > limit_bytes:
                data = data[: limit_bytes - total]
                doc = data.decode("utf-8", "ignore")
                data = doc.encode("utf-8")
            if data:
                texts.append(doc)
                total += len(data)
                digest.update(len(data).to_bytes(8, "little"))
                digest.update(data)
                counts = per_source.setdefault(label, [0, 0])
                counts[0] += 1
                counts[1] += len(data)
            if total >= limit_bytes:
                break
        if total >= limit_bytes:
            break
    info = {"documents": len(texts), "bytes": total, "digest": digest.hexdigest(), "sources": per_source}
    return texts, info


# ---------------------------------------------------------------------------- memory


def _kib(maxrss: int) -> int:
    return maxrss // 1024 if sys.platform == "darwin" else maxrss  # bytes on macOS, KiB on Linux


def peak_rss_kib() -> int:
    return _kib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def current_rss_kib() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return peak_rss_kib()


# ---------------------------------------------------------------------------- worker


def _bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's byte -> printable character map, which HF's ByteLevel uses."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def worker(spec: dict) -> int:
    lib, vocab, pattern, threads = spec["lib"], spec["vocab"], spec["pattern"], spec["threads"]

    # Import and set up first, so that the baseline includes the library.
    phases: Dict[str, float] = {}  # tokenmill's counting and merging seconds
    if lib == "tokenmill":
        import tokenmill

        def train():
            # What train_from_iterator does, with the trainer kept for its phase timings.
            trainer = tokenmill.Trainer(pattern, threads=threads)
            trainer.update_from_iterator(iter(texts), progress=False)
            enc = trainer.train(vocab, progress=False)
            phases.update(counting=trainer.stats.counting_seconds, merging=trainer.stats.merging_seconds)
            return enc

        def tokens_of(enc) -> List[bytes]:
            merges = getattr(enc, "_merges", None)
            if merges is None:  # by id from the ranks (ids are contiguous)
                return [t for t, _ in sorted(enc._mergeable_ranks.items(), key=lambda kv: kv[1])]
            toks = [bytes([b]) for b in range(256)]
            for a, b in merges:
                toks.append(toks[a] + toks[b])
            return toks

    elif lib == "rustbpe":
        import rustbpe

        tok = rustbpe.Tokenizer()

        def train():
            tok.train_from_iterator(iter(texts), vocab, pattern=pattern)
            return tok

        def tokens_of(t) -> List[bytes]:
            ranks = sorted(((bytes(k), v) for k, v in t.get_mergeable_ranks()), key=lambda kv: kv[1])
            if [v for _, v in ranks] != list(range(len(ranks))):
                raise RuntimeError("rustbpe's ranks are not the ids 0..n-1")
            return [k for k, _ in ranks]

    elif lib == "hf":
        from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        trainer = trainers.BpeTrainer(
            vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
        )

        def train():
            tok.train_from_iterator(iter(texts), trainer=trainer, length=len(texts))
            return tok

        def tokens_of(t) -> List[bytes]:
            decode = {c: b for b, c in _bytes_to_unicode().items()}
            by_id = sorted(t.get_vocab().items(), key=lambda kv: kv[1])
            return [bytes(decode[c] for c in s) for s, _ in by_id]

    elif lib == "gigatoken":
        import gigatoken

        def train():
            # Its Rust code prints progress on the process's own streams: silenced at the
            # file-descriptor level for the call.
            saved = [os.dup(1), os.dup(2)]
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
                return gigatoken.train_bpe(joined, vocab, [])
            finally:
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                for fd in saved + [devnull]:
                    os.close(fd)

        def tokens_of(result) -> List[bytes]:
            by_id = result[0]
            if sorted(by_id) != list(range(len(by_id))):
                raise RuntimeError("gigatoken's ids are not 0..n-1")
            return [by_id[i] for i in range(len(by_id))]

    else:
        raise ValueError(f"unknown library {lib!r}")

    texts, info = load_texts(int(spec["mb"] * 1e6))
    if lib == "gigatoken":
        joined = GIGATOKEN_SEPARATOR.encode().join(t.encode("utf-8") for t in texts)
    gc.collect()
    baseline = current_rss_kib()
    peak_before = peak_rss_kib()
    t0 = time.perf_counter()
    result = train()
    seconds = time.perf_counter() - t0
    peak = peak_rss_kib()
    tokens = tokens_of(result)

    out = {
        "lib": lib,
        "seconds": seconds,
        "baseline_kib": baseline,
        "peak_before_kib": peak_before,
        "peak_kib": peak,
        "text": info,
        "tokens": [t.hex() for t in tokens],
        "phases": phases,
    }
    Path(spec["out"]).write_text(json.dumps(out))
    return 0


# ---------------------------------------------------------------------------- parent


def machine_lines(libs: List[str]) -> List[str]:
    names = [(LIBRARIES[lib][2], LIBRARIES[lib][1]) for lib in libs]
    return [machine_line(), f"{python_line()}; {', '.join(versions(names))}"]


def run_worker(spec: dict, env: Dict[str, str]) -> Tuple[Optional[dict], str]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        return None, log
    return json.loads(Path(spec["out"]).read_text()), log


def compare_merges(ref: List[str], other: List[str]) -> str:
    if ref == other:
        return f"merges identical ({len(ref) - 256})"
    for i, (a, b) in enumerate(zip(ref, other)):
        if a != b:
            return f"merges DIFFER from id {i}: tokenmill {bytes.fromhex(a)!r}, rustbpe {bytes.fromhex(b)!r}"
    return f"merges DIFFER: tokenmill learned {len(ref) - 256}, rustbpe {len(other) - 256} (common prefix equal)"


def shared_tokens(ref: List[str], other: List[str]) -> str:
    learned = set(ref[256:])
    if not learned:
        return ""
    common = len(learned & set(other))
    return f"{100 * common / len(learned):.1f}% of tokenmill's tokens"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[10, 100], help="MB of text (default 10 100)")
    ap.add_argument("--vocab", nargs="+", type=int, default=[4096, 32768], help="vocabulary sizes (default 4096 32768)")
    ap.add_argument("--libs", nargs="+", choices=list(LIBRARIES), default=list(LIBRARIES), help="libraries to run")
    ap.add_argument("--pattern", default="nanochat", help="pattern name or regex for all libraries (default nanochat)")
    ap.add_argument("--threads", type=int, default=None, help="threads for every library (default: all cores)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        return worker(json.loads(args.worker))

    from tokenmill.patterns import resolve_pattern

    if any(s <= 0 for s in args.sizes) or any(v < 257 for v in args.vocab):
        ap.error("sizes must be positive and vocabulary sizes above 256")
    if args.threads is not None and args.threads <= 0:
        ap.error("--threads must be positive")
    pattern = resolve_pattern(args.pattern)

    libs = [lib for lib in LIBRARIES if lib in args.libs]  # tokenmill first: the others are compared to it
    missing = [lib for lib in libs if importlib.util.find_spec(LIBRARIES[lib][0]) is None]
    for lib in missing:
        print(f"note: {LIBRARIES[lib][2]} is not installed (no module {LIBRARIES[lib][0]!r}); skipped")
    libs = [lib for lib in libs if lib not in missing]
    if "gigatoken" in libs and pattern != resolve_pattern(GIGATOKEN_PATTERN):
        print(f"note: gigatoken skipped: its trainer splits with GPT-2's pattern only (--pattern {GIGATOKEN_PATTERN})")
        libs.remove("gigatoken")
    if not libs:
        print("nothing to run")
        return 1

    env = dict(os.environ)
    if args.threads is not None:
        env["RAYON_NUM_THREADS"] = env["RAYON_RS_NUM_CPUS"] = str(args.threads)
    for line in machine_lines(libs):
        print(line)
    threads = f"{args.threads}" if args.threads else f"all {os.cpu_count() or 1} cores"
    print(f"threads: {threads}; pattern: {args.pattern if args.pattern != pattern else 'custom'} {pattern!r}")
    print("time: the training call only (for tokenmill also split into counting and merging); RSS: peak, and increase over the RSS before training;")
    print("ratios: library / tokenmill (time, RSS increase); one fresh process per row")
    print()

    header = (
        f"{'library':<14} {'MB':>7} {'vocab':>7} {'time s':>9} {'peak MiB':>9} {'+MiB':>8} "
        f"{'x time':>7} {'x mem':>7}  merges"
    )
    print(header)
    print("-" * (len(header) + 40))
    sys.stdout.flush()

    texts_seen: Dict[float, dict] = {}
    problems: List[str] = []
    with tempfile.TemporaryDirectory(prefix="train_compare-") as tmp:
        for mb in args.sizes:
            for vocab in args.vocab:
                ref: Optional[dict] = None
                for lib in libs:
                    spec = {
                        "lib": lib,
                        "mb": mb,
                        "vocab": vocab,
                        "pattern": pattern,
                        "threads": args.threads,
                        "out": os.path.join(tmp, f"{lib}-{mb}-{vocab}.json"),
                    }
                    res, log = run_worker(spec, env)
                    label = LIBRARIES[lib][2]
                    if res is None:
                        tail = "\n    ".join(log.splitlines()[-8:])
                        print(f"{label:<14} {mb:>7g} {vocab:>7} FAILED:\n    {tail}")
                        problems.append(f"{label} {mb:g} MB vocab {vocab} failed")
                        continue
                    if log:
                        problems.append(f"{label} {mb:g} MB vocab {vocab} said: {log.splitlines()[-1]}")
                    info = res["text"]
                    first = texts_seen.setdefault(mb, info)
                    if (info["bytes"], info["digest"]) != (first["bytes"], first["digest"]):
                        problems.append(f"{label} {mb:g} MB vocab {vocab}: the text differs from the first run's")
                    if res["peak_before_kib"] > res["peak_kib"] - 1024:
                        problems.append(
                            f"{label} {mb:g} MB vocab {vocab}: loading the text peaked at "
                            f"{res['peak_before_kib'] / 1024:.0f} MiB, so the training peak may be hidden"
                        )
                    peak = res["peak_kib"] / 1024
                    inc = max(0, res["peak_kib"] - res["baseline_kib"]) / 1024
                    res["inc"] = inc
                    learned = len(res["tokens"])
                    if lib == "tokenmill":
                        ref = res
                        ratio_t = ratio_m = "1.00"
                        note = f"{learned - 256} learned"
                        if res.get("phases"):
                            note += f" (counting {res['phases']['counting']:.2f} s, merging {res['phases']['merging']:.2f} s)"
                    elif ref is not None:
                        ratio_t = f"{res['seconds'] / ref['seconds']:.2f}"
                        ratio_m = f"{inc / ref['inc']:.2f}" if ref["inc"] > 0 else "-"
                        if lib == "rustbpe":
                            note = compare_merges(ref["tokens"], res["tokens"])
                            if not note.startswith("merges identical"):
                                problems.append(f"rustbpe {mb:g} MB vocab {vocab}: {note}")
                        else:
                            note = f"n/a; {learned - 256} learned, shares {shared_tokens(ref['tokens'], res['tokens'])}"
                    else:
                        ratio_t = ratio_m = "-"
                        note = f"{learned - 256} learned"
                    if learned != vocab:
                        note += f" (vocab {learned}, not {vocab})"
                    print(
                        f"{label:<14} {info['bytes'] / 1e6:>7.1f} {vocab:>7} {res['seconds']:>9.2f} {peak:>9.1f} "
                        f"{inc:>8.1f} {ratio_t:>7} {ratio_m:>7}  {note}"
                    )
                    sys.stdout.flush()

    print()
    for mb, info in texts_seen.items():
        parts = ", ".join(f"{label} {n:,} files {b / 1e6:.1f} MB" for label, (n, b) in info["sources"].items())
        short = "" if info["bytes"] >= int(mb * 1e6) else f" (only {info['bytes'] / 1e6:.1f} MB available)"
        print(f"text for {mb:g} MB: {info['documents']:,} documents, {info['bytes'] / 1e6:.2f} MB{short}: {parts}")
    for p in problems:
        print(f"note: {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
