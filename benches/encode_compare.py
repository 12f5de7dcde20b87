"""Encoding throughput: tokenmill against its peers, all on the same real text, in one run.

The peers: tiktoken, HF tokenizers, fastokens, gigatoken, wordchipper and bpe_openai.

Fairness
--------
Every measurement happens in a fresh Python process (this script re-invoked with a hidden
``--worker`` flag), one per (library, encoding, regime, mode, repeat): several of these
libraries keep caches of encoded pieces in the process (tokenmill a bounded per-thread
piece cache, HF's BPE model a word cache, fastokens a piece cache that makes a second pass
over the same text several times faster), so no object or process-level cache may have
seen the text before. The worker builds its tokenizer, loads the text (written once by the
parent, so every library gets exactly the same documents), then times exactly one pass:
one encode call per document, in order, on the calling thread. It writes back the seconds,
the process CPU seconds (a library that spreads one call over several threads shows up
there, and is named under the table), the number of tokens, and SHA-256 digests of the ids
(per document, and of all documents: each document's length and ids as little-endian
uint32). A library's ids are "the same" when its digest equals tiktoken's for that text.

Every one-thread worker runs pinned to one CPU (the same CPU for every library; batch
workers are never pinned): a process free to move between CPUs leaves its caches behind at
each move, and on a 2-core VM that made one-thread figures both lower and far noisier
(``cpu_pinning.py`` gives the figures). ``--no-pin`` lets them move.

Rows, per encoding (``--encodings``):

* one thread: every installed library, a short cold run (``--short-mb``, default 4.5 MB)
  and a long stream (``--long-mb``, default 20 MB), each on its own, disjoint slice of the
  text; x = tokenmill's MB/s over the library's (above 1: tokenmill is faster). The short
  run includes whatever a library does on its first calls (lazy set-up) and caches that
  are still cold; the long run shows that amortised and the caches warmed by the stream;
  a third column, ``warm``, times the long stream again in a process whose fresh object
  first encoded the short slice, untimed (``--no-warm`` leaves it out): the timed text is
  still unseen, but one-time set-up is out of the figure and the caches start warm, as in
  a process that has been encoding for a while. A library with a costly first call (a
  lazily built automaton) looks slow in the long stream and shows its steady speed here.
  ``--seen`` adds a diagnostic column, ``seen``: the short slice timed a second time in the
  process that just encoded it, untimed. Every piece is then one the library met before,
  so this is its cache-hit path (and its scanning) alone. It is no fair figure of
  encoding speed: it measures where a library spends its time on a warm stream;
* one thread, paired: per round, tokenmill's MB/s over each library's in that round (the
  runs go in the order tokenmill, fastokens, gigatoken, wordchipper, bpe_openai, tiktoken,
  HF tokenizers, so the nearest peers run right after tokenmill); the median over the rounds
  and the range. The host's speed drifts over minutes, so each library's best run can come
  from a different spell; runs a few seconds apart mostly share one, which makes these
  ratios the steadier ones on a noisy host (with ``--repeat 1`` they equal the first table's);
* one thread, per CPU second: the same runs, in MB per CPU second of the worker process,
  with the share of the pass's wall time the process spent off a core (``off``) and the
  share of all cores' time the hypervisor took meanwhile (``steal``, from ``/proc/stat``).
  On a shared virtual machine the host takes cores away for stretches; wall-time figures
  then drop while CPU time leaves those stretches out, so these ratios are the steadier
  ones. A library that spreads a call over several threads is charged all their CPU time;
* one thread, page faults: the page faults the timed pass took (thousands; POSIX, from
  ``getrusage``), what they cost at this machine's price of a fault (``ms``: the count
  times the microseconds the parent measured for a first write to a new page, printed
  above the table) and that cost's share of the pass. Nearly all of them are the kernel
  mapping new memory, most of it for the ids returned: a pass keeps every list, so every
  library maps memory for as many ids, at about the same cost. For a fast library that
  fixed cost is a larger share of its pass, and it lowers that library's ratio to a slow
  one. (The kernel's own count of a process's system time is sampled at the clock's
  ticks on many kernels: for the same 12.6k faults it read 3 to 48 ms, so it is not
  used.)
* batch: tokenmill's and tiktoken's ``encode_ordinary_batch(docs, num_threads=<usable
  cores>)`` on the same two slices (fresh processes too), and tokenmill's batch MB/s over
  its own one-thread MB/s; a note names each batch run during which the hypervisor took at
  least 5% of the cores' time (the parallel speed-up then measures the host). Below the
  table, that ratio's two factors: the batch's MB per CPU second over the one-thread
  run's (1.00: running in parallel costs nothing per byte) and the cores the batch used
  on average (its CPU time over its wall time); with ``--repeat`` of 2 or more, also the
  batch over the one-thread run of the same round (median and range over the rounds);
* ids as arrays (``--numpy``): tokenmill's and tiktoken's ``encode_to_numpy(text,
  disallowed_special=())`` (the same ids as ``encode_ordinary``, as numpy ``uint32``
  arrays: no Python int or list is made), one call per document on the short and long
  slices, fresh processes too; numpy is imported before the timed pass (both libraries
  import it on their first call otherwise), with its BLAS on one thread (on import it
  starts a thread per core that spins for a while, taking a core from the pass). Beside each figure, the library's MB/s over
  its own one-thread (lists) MB/s: the share of a pass that goes to making lists. For
  data preparation that writes ids to arrays, and as a ceiling: how far each library
  gets when Python's lists are taken out. gigatoken's one-thread run, whose ids are arrays
  already, is repeated under them as a row of its own, x being tokenmill's arrays over it;
* worst cases (tokenmill and tiktoken, one call on one document each): 1 MB of one
  repeated letter, of letters and punctuation without whitespace (fixed seed), of digits
  (fixed seed) and of spaces; their MB/s, and tokenmill's over its own short-run MB/s
  (the target is at least 0.5); with ``--repeat`` of 2 or more, also that ratio within
  each round (median and range). The best of each figure can pair a run in one of the
  host's fast stretches with one in a slow stretch; the ratio within rounds does not.

MB = 10**6 bytes of UTF-8 text. ``--repeat N`` runs every measurement N times, each in a
fresh process, and keeps the fastest. The runs of one encoding go in N rounds (every
measurement once per round), so that a slow spell of the host does not fall on one
library's repeats alone.

How each library is loaded (nothing is downloaded; a library that is not installed, or
fails to load, is skipped with a one-line note; an encoding whose vocabulary is not in
tiktoken's cache is skipped):

* tiktoken, tokenmill: ``get_encoding(name)``, then a fresh ``Encoding(name, pat_str=...,
  mergeable_ranks=..., special_tokens=...)`` built from it; ``encode_ordinary(text)``.
  Vocabularies come from tiktoken's cache (``TIKTOKEN_CACHE_DIR``, else
  ``DATA_GYM_CACHE_DIR``, else ``<tmp>/data-gym-cache``); workers run with
  ``TOKENMILL_OFFLINE=1``.
* HF tokenizers: ``tokenmill.huggingface.to_hf_tokenizer(encoding)`` (skipped when that
  module is missing), with ``encode_special_tokens = True`` so that special-token text is
  encoded as ordinary text, as ``encode_ordinary`` does; ``encode(text,
  add_special_tokens=False).ids``.
* fastokens: ``Tokenizer.from_tiktoken(<the cached .tiktoken file>, encoding=name)``;
  ``encode_ordinary(text).ids``. As shipped, fastokens 0.3.5 encodes one text of 64 KiB or
  more on a thread pool of its own (one chunk per core; about 30% of the long slice's
  bytes are in such documents), so its "one thread" runs would use more than one core.
  The worker sets ``FASTOKENS_BPE_THREADS=1`` before importing it, which makes every call
  run on the calling thread, as for the other libraries; ``--fastokens-pool`` leaves its
  pool as shipped (the CPU-second table then charges it the pool's time). Its other
  settings are left as shipped (its segment cache, for chat traffic, is off unless
  ``FASTOKENS_SEGMENT_CACHE`` is set); what ``segment_cache_stats()`` reports after the
  pass is printed.
* gigatoken: ``Tokenizer.from_tiktoken(<the cached .tiktoken file>, pretokenizer=<its name
  for the encoding's split: "gpt2", "gpt4" or "o200k">, special_tokens=<the encoding's>)``;
  ``encode(text)``, its fastest call for one text, which returns a numpy ``uint32`` array
  (no Python ints or lists: its one-thread figures compare with tokenmill's arrays of
  ``--numpy`` as much as with its lists). Its tiktoken-compatible ``as_tiktoken()`` object
  returns lists but ran several times slower here, and raises ``NotImplementedError`` on
  text holding a special token's string, where ``encode_ordinary`` encodes it as ordinary
  text; ``encode`` turns such text into the special token, which the parity column would
  show. The worker sets ``RAYON_NUM_THREADS=1`` and numpy's BLAS to one thread before
  importing it (one encode call of a text runs on the calling thread either way), and
  imports numpy before the timed pass, as for ``--numpy``: gigatoken imports it on its
  first ``encode`` otherwise (0.12-0.16 s here; ``load_compare.py`` shows it as that
  call's time).
* wordchipper: ``Tokenizer.from_pretrained("openai:<name>")``; ``encode(text,
  special_filter=SpecialFilter.include_none())`` (its default filter turns special-token
  text into special tokens). It keeps its vocabulary under
  ``$XDG_CACHE_HOME/io.crates.wordchipper/openai/<name>/<name>.tiktoken`` and downloads it
  when missing; offline, wordchipper 0.9 silently writes an empty file there and then
  encodes to byte-level ids (a wordchipper bug). So the worker points ``XDG_CACHE_HOME`` at
  a temporary folder seeded with a copy of tiktoken's cached file before importing it,
  refuses a vocabulary of fewer than 1000 tokens, and its ids are checked against
  tiktoken's like every library's.
* bpe_openai: ``bpe_openai.get_encoding(name).encode_ordinary(text)``; its vocabularies
  (cl100k_base, o200k_base) ship inside the package, nothing is downloaded. Its
  ``encode_ordinary`` refuses texts of 10**6 characters or more and results of more than
  200,000 tokens, one reason documents are cut (below).

Text (no download; deterministic for a given machine; documents of several kinds, each a
file unless said otherwise, files in sorted path order, symbolic links, unreadable files,
files that are not UTF-8 and files with NUL bytes skipped, exact duplicates skipped):

* Python code: the running Python's standard-library sources (``tokenmill.corpus.stdlib_files``);
* C headers: ``/usr/include/**/*.h``;
* Rust code: ``$CARGO_HOME/registry/src/*/**/*.rs`` (``~/.cargo`` by default), if present;
* Go code: ``/usr/share/doc/**/*.go``;
* English docs: plain text and markdown under ``/usr/share/doc`` (``.txt``, ``.md``,
  ``.markdown``, ``.rst``, ``.text``, and changelog/README/NEWS/copyright/AUTHORS/TODO/
  THANKS/FAQ/BUGS/HISTORY files), ``.gz`` files decompressed;
* manpages: ``/usr/share/man/man*/*.gz``, decompressed roff source (``.so`` redirections
  skipped);
* UI text in many languages: every gettext catalogue
  ``/usr/share/locale/<lang>/LC_MESSAGES/*.mo`` parsed with ``gettext.GNUTranslations``,
  one document per catalogue (its translated messages, the header excluded, joined with
  newlines); catalogues are taken round-robin over the languages, so that any slice has
  many languages.

Documents longer than 100,000 characters are cut into pieces of at most that many (at a
line end where there is one), for every library alike. The kinds share the text equally,
except that a kind with less text than its share gives all it has and the others share the
rest; the short slice takes the first part of each kind's share, the long slice the next
(no document in both; the last document of a kind in a slice is cut to fit), so both have
the same mix. Inside a slice the kinds are interleaved evenly by bytes. The MB per kind
(and per language for UI text) of each slice, and a digest of each, are printed.

Usage:
    python benches/encode_compare.py                      # cl100k_base and o200k_base
    python benches/encode_compare.py --quick              # smoke test: 1 + 3 MB, one encoding
    python benches/encode_compare.py --encodings o200k_base --short-mb 4.5 --long-mb 20 --repeat 3
    python benches/encode_compare.py --libs tokenmill tiktoken fastokens
    python benches/encode_compare.py --numpy --libs tokenmill tiktoken   # ids as numpy arrays too
"""

from __future__ import annotations

from cpu_pinning import describe, one_cpu, pin
from machine_info import header_lines
from text_files import files_under

import argparse
import gc
import gettext
import gzip
import hashlib
import importlib.util
import json
import os
import random
import shutil
import string
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

#: --libs name -> (importable module, distribution name, label); tokenmill first, tiktoken second.
LIBRARIES: Dict[str, Tuple[str, str, str]] = {
    "tokenmill": ("tokenmill", "tokenmill", "tokenmill"),
    "tiktoken": ("tiktoken", "tiktoken", "tiktoken"),
    "hf": ("tokenizers", "tokenizers", "HF tokenizers"),
    "fastokens": ("fastokens", "fastokens", "fastokens"),
    "gigatoken": ("gigatoken", "gigatoken", "gigatoken"),
    "wordchipper": ("wordchipper", "wordchipper", "wordchipper"),
    "bpe_openai": ("bpe_openai", "bpe-openai", "bpe_openai"),
}
#: Order of the runs within a round (printing keeps LIBRARIES' order): the nearest peers right
#: after tokenmill, so that their paired ratios compare runs seconds apart.
RUN_ORDER = ("tokenmill", "fastokens", "gigatoken", "wordchipper", "bpe_openai", "tiktoken", "hf")
BATCH_LIBS = ("tokenmill", "tiktoken")
NUMPY_LIBS = ("tokenmill", "tiktoken")
#: Peers whose one-thread run already returns numpy arrays: repeated in the arrays table.
ARRAY_LIBS = ("gigatoken",)
#: gigatoken's names for the split patterns of tiktoken's encodings.
GIGATOKEN_PRETOKENIZERS = {"r50k_base": "gpt2", "cl100k_base": "gpt4", "o200k_base": "o200k"}
WORST_LIBS = ("tokenmill", "tiktoken")

BLOB_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
MAX_DOC_CHARS = 100_000
WORST_TARGET = 0.5
# A batch run during which the hypervisor took at least this share of the cores' time gets
# a note (its parallel speed-up then measures the host).
STEAL_NOTE = 0.05

#: kind -> label, in interleaving order.
KINDS: Dict[str, str] = {
    "python": "Python code (stdlib)",
    "c": "C headers",
    "rust": "Rust code",
    "go": "Go code",
    "docs": "English docs",
    "man": "manpages (roff)",
    "ui": "UI text (gettext)",
}
PROSE_SUFFIXES = (".txt", ".md", ".markdown", ".rst", ".text")
PROSE_PREFIXES = ("changelog", "readme", "news", "copyright", "authors", "todo", "thanks", "faq", "bugs", "history")

WORST_CASES: Dict[str, str] = {
    "letter": "one letter ('a')",
    "nospace": "letters+punct., no space",
    "digits": "digits",
    "spaces": "spaces",
}


# ---------------------------------------------------------------------------- text


def _read_text(path: Path) -> Optional[str]:
    """The file as text (``.gz`` decompressed), or None if unreadable, not UTF-8 or with NULs."""
    try:
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        if b"\0" in data:
            return None
        return data.decode("utf-8")
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError, ValueError):
        return None


def _is_prose(name: str) -> bool:
    stem = name[:-3] if name.endswith(".gz") else name
    return stem.lower().endswith(PROSE_SUFFIXES) or stem.lower().startswith(PROSE_PREFIXES)


def _cargo_src_roots() -> List[Path]:
    home = Path(os.environ.get("CARGO_HOME") or Path.home() / ".cargo")
    src = home / "registry" / "src"
    return sorted(p for p in src.glob("*") if p.is_dir()) if src.is_dir() else []


def _mo_text(path: Path) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a catalogue that does not parse is skipped
        return None
    messages = [v for k, v in catalog.items() if k != "" and isinstance(v, str) and v]
    text = "\n".join(messages)
    return None if "\0" in text else text


def _ui_documents() -> Iterator[Tuple[str, str]]:
    by_lang: Dict[str, List[Path]] = {}
    root = Path("/usr/share/locale")
    if root.is_dir():
        for lang_dir in sorted(root.iterdir()):
            mo_dir = lang_dir / "LC_MESSAGES"
            if lang_dir.is_symlink() or not mo_dir.is_dir():
                continue
            files = sorted(p for p in mo_dir.glob("*.mo") if p.is_file() and not p.is_symlink())
            if files:
                by_lang[lang_dir.name] = files
    rounds = max((len(v) for v in by_lang.values()), default=0)
    for i in range(rounds):
        for lang, files in by_lang.items():
            if i < len(files):
                text = _mo_text(files[i])
                if text:
                    yield f"{lang}/{files[i].name}", text


def _file_documents(paths: Sequence[Path], skip_so: bool = False) -> Iterator[Tuple[str, str]]:
    for path in paths:
        text = _read_text(path)
        if not text or not text.strip():
            continue
        if skip_so and text.startswith(".so ") and text.count("\n") <= 1:
            continue
        yield str(path), text


def _kind_documents(kind: str) -> Iterator[Tuple[str, str]]:
    if kind == "python":
        from tokenmill.corpus import stdlib_files

        yield from _file_documents(stdlib_files())
    elif kind == "c":
        yield from _file_documents(files_under(Path("/usr/include"), lambda n: n.endswith(".h")))
    elif kind == "rust":
        for root in _cargo_src_roots():
            yield from _file_documents(files_under(root, lambda n: n.endswith(".rs")))
    elif kind == "go":
        yield from _file_documents(files_under(Path("/usr/share/doc"), lambda n: n.endswith(".go")))
    elif kind == "docs":
        yield from _file_documents(files_under(Path("/usr/share/doc"), _is_prose))
    elif kind == "man":
        man = Path("/usr/share/man")
        dirs = sorted(p for p in man.glob("man*") if p.is_dir()) if man.is_dir() else []
        paths = [p for d in dirs for p in sorted(d.glob("*.gz")) if p.is_file() and not p.is_symlink()]
        yield from _file_documents(paths, skip_so=True)
    elif kind == "ui":
        yield from _ui_documents()


def _cut(text: str, limit: int = MAX_DOC_CHARS) -> Iterator[str]:
    """``text`` in pieces of at most ``limit`` characters, cut after a newline where possible."""
    while len(text) > limit:
        cut = text.rfind("\n", 0, limit) + 1
        if cut <= limit // 2:
            cut = limit
        yield text[:cut]
        text = text[cut:]
    if text:
        yield text


class _KindReader:
    """Reads one kind's documents lazily, skipping exact duplicates of any earlier document."""

    def __init__(self, kind: str, seen: set):
        self.kind = kind
        self.docs: List[Tuple[str, str, int]] = []  # (label, text, UTF-8 bytes)
        self.bytes = 0
        self.exhausted = False
        self._seen = seen
        self._it = _kind_documents(kind)

    def fill(self, target: float) -> None:
        while self.bytes < target and not self.exhausted:
            try:
                label, text = next(self._it)
            except StopIteration:
                self.exhausted = True
                return
            key = hashlib.sha1(text.encode("utf-8", "surrogatepass")).digest()
            if key in self._seen:
                continue
            self._seen.add(key)
            for piece in _cut(text):
                n = len(piece.encode("utf-8"))
                self.docs.append((label, piece, n))
                self.bytes += n


def build_slices(sizes: Sequence[int]) -> Tuple[List[List[Tuple[str, str, str]]], Dict[str, int]]:
    """Consecutive, disjoint slices of ``sizes`` bytes with the same mix of kinds (see the
    module docstring). Returns, per slice, its documents as (kind, label, text), and the
    bytes each kind contributes in all."""
    total = sum(sizes)
    seen: set = set()
    readers = {k: _KindReader(k, seen) for k in KINDS}
    quota: Dict[str, float] = {}
    pending = list(KINDS)
    budget = float(total)
    while pending:  # water-filling: a kind with less than its share gives all it has
        share = budget / len(pending)
        short = []
        for k in pending:
            readers[k].fill(share)
            if readers[k].exhausted and readers[k].bytes < share:
                short.append(k)
        if not short:
            for k in pending:
                quota[k] = share
            break
        for k in short:
            quota[k] = readers[k].bytes
            budget -= readers[k].bytes
            pending.remove(k)

    slices: List[List[Tuple[str, str, str]]] = []
    position = {k: 0 for k in KINDS}  # next document of each kind
    for size in sizes:
        per_kind: Dict[str, List[Tuple[str, str, int]]] = {}
        targets: Dict[str, float] = {}
        for k in KINDS:
            target = quota.get(k, 0.0) * size / total
            taken, got = [], 0
            docs = readers[k].docs
            while got < target:
                if position[k] == len(docs):  # read on: the share's last document was cut
                    readers[k].fill(readers[k].bytes + 1)
                    if position[k] == len(docs):
                        break
                label, text, n = docs[position[k]]
                position[k] += 1
                if got + n > target:
                    data = text.encode("utf-8")[: int(target - got)]
                    text = data.decode("utf-8", "ignore")
                    n = len(text.encode("utf-8"))
                    if not n:
                        break
                taken.append((label, text, n))
                got += n
            if taken:
                per_kind[k], targets[k] = taken, max(got, 1)
        # Interleave evenly by bytes: always continue the kind furthest behind its target.
        out: List[Tuple[str, str, str]] = []
        index = {k: 0 for k in per_kind}
        done = {k: 0 for k in per_kind}
        while True:
            open_kinds = [k for k in per_kind if index[k] < len(per_kind[k])]
            if not open_kinds:
                break
            k = min(open_kinds, key=lambda kk: done[kk] / targets[kk])
            label, text, n = per_kind[k][index[k]]
            index[k] += 1
            done[k] += n
            out.append((k, label, text))
        slices.append(out)
    return slices, {k: int(v) for k, v in quota.items()}


def worst_text(case: str, nbytes: int) -> str:
    if case == "letter":
        return "a" * nbytes
    if case == "spaces":
        return " " * nbytes
    if case == "digits":
        return "".join(random.Random(1).choices(string.digits, k=nbytes))
    if case == "nospace":
        return "".join(random.Random(0).choices(string.ascii_letters + string.punctuation, k=nbytes))
    raise ValueError(case)


def _language(label: str) -> str:
    return label.split("/", 1)[0]


def describe_slice(name: str, docs: List[Tuple[str, str, str]]) -> List[str]:
    per_kind: Dict[str, List[int]] = {}
    langs: Counter = Counter()
    digest = hashlib.blake2b(digest_size=8)
    total = 0
    for kind, label, text in docs:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
        total += len(data)
        c = per_kind.setdefault(kind, [0, 0])
        c[0] += 1
        c[1] += len(data)
        if kind == "ui":
            langs[_language(label)] += len(data)
    lines = [f"{name}: {total / 1e6:.2f} MB, {len(docs):,} documents, digest {digest.hexdigest()}"]
    for kind, label in KINDS.items():
        if kind in per_kind:
            n, b = per_kind[kind]
            lines.append(f"    {label:<22} {b / 1e6:>7.3f} MB {100 * b / max(total, 1):>5.1f}%  {n:>6,} documents")
        else:
            lines.append(f"    {label:<22} {'-':>7}    (none on this machine)")
    if langs:
        top = ", ".join(f"{lang} {b / 1e3:.0f} kB" for lang, b in langs.most_common(8))
        lines.append(f"    UI text: {len(langs)} languages; largest: {top}")
    return lines


# ---------------------------------------------------------------------------- worker


def _ids_digests(all_ids: List[Sequence[int]]) -> Tuple[str, List[str], int]:
    total = hashlib.sha256()
    per_doc = []
    tokens = 0
    for ids in all_ids:
        if hasattr(ids, "dtype"):  # a numpy array (--numpy): its uint32s, little-endian
            raw = ids.astype("<u4", copy=False).tobytes()
        else:
            data = array("I", ids)
            if data.itemsize != 4:  # pragma: no cover - 'I' is 4 bytes on every supported platform
                data = array("L", ids)
            if sys.byteorder != "little":  # pragma: no cover
                data.byteswap()
            raw = data.tobytes()
        total.update(len(ids).to_bytes(8, "little"))
        total.update(raw)
        per_doc.append(hashlib.sha256(raw).hexdigest()[:16])
        tokens += len(ids)
    return total.hexdigest(), per_doc, tokens


def cached_vocab_file(name: str) -> Optional[str]:
    """The path of ``name``'s vocabulary in tiktoken's cache, or ``None`` after a one-line
    note saying it is skipped (nothing is downloaded)."""
    from tokenmill.load import cache_path_for

    path = cache_path_for(BLOB_URL.format(name=name))
    if path is None or not os.path.isfile(path):
        print(f"note: {name} skipped: its vocabulary is not in tiktoken's cache ({path}); nothing is downloaded")
        return None
    return path


def _tiktoken_like(module, name: str):
    ref = module.get_encoding(name)
    return module.Encoding(
        name, pat_str=ref._pat_str, mergeable_ranks=ref._mergeable_ranks, special_tokens=ref._special_tokens
    )


def _build(lib: str, name: str, spec: dict, tmp: str) -> Tuple[Callable[[str], Sequence[int]], object, dict]:
    """(encode one text, the library object, notes) for ``lib``."""
    notes: dict = {}
    if lib in ("tokenmill", "tiktoken"):
        module = __import__(lib)
        enc = _tiktoken_like(module, name)
        return enc.encode_ordinary, enc, notes
    if lib == "hf":
        import tokenmill
        from tokenmill.huggingface import to_hf_tokenizer

        tok = to_hf_tokenizer(tokenmill.get_encoding(name))
        tok.encode_special_tokens = True  # special-token text is ordinary text, as in encode_ordinary
        return (lambda text: tok.encode(text, add_special_tokens=False).ids), tok, notes
    if lib == "fastokens":
        if not spec.get("fastokens_pool"):
            # Read when its pool is first built: one thread, the calling one.
            os.environ["FASTOKENS_BPE_THREADS"] = "1"
        import fastokens

        tok = fastokens.Tokenizer.from_tiktoken(spec["vocab_file"], encoding=name)
        return (lambda text: tok.encode_ordinary(text).ids), tok, notes
    if lib == "gigatoken":
        gigatoken_setup()
        import gigatoken
        import tokenmill

        tok = gigatoken_tokenizer(gigatoken, name, spec["vocab_file"], tokenmill.get_encoding(name)._special_tokens)
        return tok.encode, tok, notes
    if lib == "wordchipper":
        seeded = Path(tmp, "xdg-cache", "io.crates.wordchipper", "openai", name, f"{name}.tiktoken")
        seeded.parent.mkdir(parents=True)
        shutil.copyfile(spec["vocab_file"], seeded)
        size = seeded.stat().st_size
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp, "xdg-cache"))
        import wordchipper

        tok = wordchipper.Tokenizer.from_pretrained(f"openai:{name}")
        if seeded.stat().st_size != size or tok.vocab_size < 1000:
            raise RuntimeError(
                f"wordchipper loaded a vocabulary of {tok.vocab_size} tokens (seeded file now "
                f"{seeded.stat().st_size} bytes, was {size}): it did not use the seeded copy"
            )
        flt = wordchipper.SpecialFilter.include_none()
        return (lambda text: tok.encode(text, special_filter=flt)), tok, notes
    if lib == "bpe_openai":
        import bpe_openai

        enc = bpe_openai.get_encoding(name)
        return enc.encode_ordinary, enc, notes
    raise ValueError(f"unknown library {lib!r}")


def host_steal_seconds() -> Optional[float]:
    """CPU seconds the hypervisor has taken from this machine's cores since boot (the
    ``steal`` column of Linux's ``/proc/stat``, summed over cores); None where unknown."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK") if fields[0] == "cpu" else None
    except (OSError, IndexError, ValueError):
        return None


def page_faults() -> Optional[int]:
    """The page faults (minor and major) this process has taken so far, or None where
    ``getrusage`` is missing (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_minflt + u.ru_majflt


#: Pages per mapping, and mappings, that ``fault_microseconds`` times by default.
FAULT_PAGES, FAULT_ROUNDS = 4096, 5


def fault_microseconds(pages: int = FAULT_PAGES, rounds: int = FAULT_ROUNDS) -> Optional[float]:
    """What one page fault costs on this machine: microseconds per page for a first write
    to each page of a new anonymous mapping (the median of ``rounds`` mappings of
    ``pages`` pages), or None where that cannot be measured."""
    import mmap

    if page_faults() is None:
        return None
    size = pages * mmap.PAGESIZE
    costs = []
    for _ in range(rounds):
        m = mmap.mmap(-1, size)
        f0, t0 = page_faults(), time.perf_counter()
        for at in range(0, size, mmap.PAGESIZE):
            m[at] = 1
        t, faults = time.perf_counter() - t0, page_faults() - f0
        m.close()
        if faults > 0:
            costs.append(t / faults * 1e6)
    return statistics.median(costs) if costs else None


def _one_blas_thread() -> None:
    """numpy's BLAS starts a thread per core on import, which spins for a while on a core the
    timed pass would otherwise have to itself; no BLAS is used here. Call before numpy loads."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def gigatoken_setup() -> None:
    """Call before gigatoken loads: its thread pool and numpy's BLAS on one thread each (one
    encode call of a text runs on the calling thread either way)."""
    _one_blas_thread()
    os.environ["RAYON_NUM_THREADS"] = "1"  # read when its pool is first built


def gigatoken_tokenizer(gigatoken, name: str, vocab_file: str, specials: Dict[str, int]):
    """gigatoken's tokenizer for tiktoken's encoding ``name`` from its cached file."""
    if name not in GIGATOKEN_PRETOKENIZERS:
        raise ValueError(f"no gigatoken pretokenizer known for {name}")
    return gigatoken.Tokenizer.from_tiktoken(vocab_file, pretokenizer=GIGATOKEN_PRETOKENIZERS[name], special_tokens=dict(specials))


def worker(spec: dict) -> int:
    lib, name, mode = spec["lib"], spec["encoding"], spec["mode"]
    pin(spec.get("cpu"))  # before any library starts a thread
    tmp = spec["tmp"]  # a folder of the parent's, removed by it even if this process is killed
    t0 = time.perf_counter()
    encode, obj, notes = _build(lib, name, spec, tmp)
    if mode == "numpy" or lib in ARRAY_LIBS:
        # Imported here, untimed: a program that wants arrays has numpy loaded already.
        # tokenmill's encode_to_numpy and gigatoken's encode both import it on their first
        # call otherwise: 0.12-0.16 s here, about as long as gigatoken's whole short run.
        _one_blas_thread()
        import numpy  # noqa: F401
    if mode == "numpy":

        def encode(text: str, _to_numpy=obj.encode_to_numpy) -> Sequence[int]:
            return _to_numpy(text, disallowed_special=())

    build_s = time.perf_counter() - t0
    # The documents are read only now, and nothing touches them before the timed pass
    # (CPython caches a str's UTF-8 form on first use: every library pays it once).
    docs: List[str] = json.loads(Path(spec["docs"]).read_text(encoding="utf-8"))
    if spec.get("warmup"):
        # Other text first, untimed (the ``warm`` regime).
        for d in json.loads(Path(spec["warmup"]).read_text(encoding="utf-8")):
            encode(d)
    gc.collect()
    gc.disable()
    faults0 = page_faults()
    steal0 = host_steal_seconds()
    c0 = time.process_time()
    t0 = time.perf_counter()
    doc_seconds: List[float] = []
    if mode == "batch":
        all_ids = obj.encode_ordinary_batch(docs, num_threads=spec["threads"])
    else:
        # Each document's time too (two clock reads a document, the same for every
        # library), for the table of where a long stream's time goes by kind of text.
        all_ids = []
        clock = time.perf_counter
        for d in docs:
            start = clock()
            all_ids.append(encode(d))
            doc_seconds.append(clock() - start)
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - c0
    steal1 = host_steal_seconds()
    faults1 = page_faults()
    gc.enable()
    if lib == "fastokens":
        stats = getattr(obj, "segment_cache_stats", None)
        notes["segment_cache_stats"] = repr(stats()) if callable(stats) else "(no segment_cache_stats)"
    digest, per_doc, tokens = _ids_digests(all_ids)
    out = {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "steal_seconds": None if steal0 is None or steal1 is None else steal1 - steal0,
        "page_faults": None if faults0 is None or faults1 is None else faults1 - faults0,
        "build_seconds": build_s,
        "doc_seconds": doc_seconds,
        "tokens": tokens,
        "digest": digest,
        "doc_digests": per_doc,
        "notes": notes,
    }
    Path(spec["out"]).write_text(json.dumps(out))
    return 0


# ---------------------------------------------------------------------------- parent


def machine_lines() -> List[str]:
    libs = [(label, dist) for _, dist, label in LIBRARIES.values()]
    return header_lines(libs)


def run_worker(spec: dict, env: Dict[str, str], timeout: float) -> Tuple[Optional[dict], str]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:g} s"
    log = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        return None, log or f"exit status {proc.returncode}"
    return json.loads(Path(spec["out"]).read_text()), log


def _last_line(log: str) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


class Runner:
    """Runs measurements (best of ``repeat`` fresh processes) and remembers problems."""

    def __init__(self, env: Dict[str, str], repeat: int, timeout: float, tmp: str, total: int, cpu: Optional[int] = None):
        self.env, self.repeat, self.timeout, self.tmp = env, repeat, timeout, tmp
        self.cpu = cpu  # where the one-thread runs are pinned (``cpu_pinning.one_cpu``)
        self.total, self.count = total, 0
        self.notes: List[str] = []
        self.failed: Dict[Tuple[str, str], str] = {}  # (lib, encoding) -> why; later runs skipped

    def measure_rounds(self, items: List[Tuple[Tuple[str, ...], dict, str]]) -> Dict[Tuple[str, ...], Optional[dict]]:
        """Best of ``repeat`` runs of each ``(key, spec, what)``, keyed by ``key`` (None where
        none succeeded); the repeats' digests must agree.

        The runs go in rounds: every item once, then every item again, and so on. This
        host's speed drifts over minutes, so repeats of one item run back to back could all
        fall in a slow spell that its peers missed; in rounds, every library's best is
        drawn from the same stretch of time.
        """
        best: Dict[Tuple[str, ...], Optional[dict]] = {key: None for key, _, _ in items}
        digests: Dict[Tuple[str, ...], set] = {key: set() for key, _, _ in items}
        # Every round's wall seconds per item (None for a run that failed), for paired ratios.
        per_round: Dict[Tuple[str, ...], List[Optional[float]]] = {key: [] for key, _, _ in items}
        done = set()  # worst cases that failed or timed out: one such run is the answer
        for _ in range(self.repeat):
            for key, spec, what in items:
                if key in done or (spec["lib"], spec["encoding"]) in self.failed:
                    per_round[key].append(None)
                    continue
                res = self._run_once(spec, what)
                per_round[key].append(res.get("seconds") if res else None)
                if res is None or "timeout" in res:
                    if spec["mode"] == "worst":
                        best[key] = best[key] or res
                        done.add(key)
                    continue
                digests[key].add(res["digest"])
                if best[key] is None or res["seconds"] < best[key]["seconds"]:
                    best[key] = res
        for key, _, what in items:
            if len(digests[key]) > 1:
                self.notes.append(f"{what}: the ids differ between repeats")
            if best[key] is not None and "seconds" in best[key]:
                best[key] = dict(best[key], round_seconds=per_round[key])
        return best

    def _run_once(self, spec: dict, what: str) -> Optional[dict]:
        """One fresh-process run of ``spec``: its result, ``{"timeout": why}`` for a worst
        case that timed out, or None when it failed. A library that fails on ordinary text
        is marked failed for the encoding (its other runs are skipped); one that fails on a
        worst case (tiktoken's regex overflows its stack on a megabyte of spaces with
        o200k's pattern) only loses that case."""
        self.count += 1
        spec = dict(spec, out=os.path.join(self.tmp, f"out-{self.count}.json"))
        spec["tmp"] = os.path.join(self.tmp, f"worker-{self.count}")
        spec["cpu"] = None if spec["mode"] == "batch" else self.cpu
        os.mkdir(spec["tmp"])
        res, log = run_worker(spec, self.env, self.timeout)
        if res is None:
            why = _last_line(log)
            print(f"[{self.count}/{self.total}] {what}: FAILED: {why}", file=sys.stderr, flush=True)
            if spec["mode"] == "worst":
                self.notes.append(f"{what} failed: {why}")
                return {"timeout": why} if why.startswith("timed out") else None
            self.failed[(spec["lib"], spec["encoding"])] = why
            self.notes.append(f"{LIBRARIES[spec['lib']][2]} skipped for {spec['encoding']}: {why}")
            return None
        if log:
            self.notes.append(f"{what} said: {_last_line(log)}")
        mb = spec["bytes"] / 1e6
        print(
            f"[{self.count}/{self.total}] {what}: {mb / res['seconds']:.1f} MB/s "
            f"({res['seconds']:.2f} s, built in {res['build_seconds']:.1f} s)",
            file=sys.stderr,
            flush=True,
        )
        return res


def parity(res: Optional[dict], ref: Optional[dict], docs: Optional[list], what: str, notes: List[str]) -> str:
    if res is None or "digest" not in res:
        return ""
    if ref is None or "digest" not in ref:
        return "?"
    if res["digest"] == ref["digest"]:
        return "yes"
    bad = [i for i, (a, b) in enumerate(zip(res["doc_digests"], ref["doc_digests"])) if a != b]
    where = ""
    if bad and docs is not None:
        kinds = Counter(docs[i][0] for i in bad)
        first = docs[bad[0]]
        where = f"; by kind: {dict(kinds)}; first: document {bad[0]} ({first[0]}: {first[1]})"
    notes.append(
        f"{what}: ids differ from tiktoken's in {len(bad)} of {len(res['doc_digests'])} documents "
        f"({res['tokens']:,} tokens against {ref['tokens']:,}){where}"
    )
    return "NO"


def _mbps(res: Optional[dict], nbytes: int, clock: str = "seconds") -> Optional[float]:
    """MB per second of ``clock``: ``"seconds"`` (wall) or ``"cpu_seconds"``."""
    if res is None or not res.get(clock):
        return None
    return nbytes / 1e6 / res[clock]


def _fmt(v: Optional[float], width: int, digits: int = 1) -> str:
    return f"{v:>{width}.{digits}f}" if v is not None else f"{'-':>{width}}"


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


def _header(first: str, regimes: Sequence[str], tail: str = "") -> None:
    header = f"  {first:<15}" + "".join(f" {r + ' MB/s':>11} {'x':>6}" for r in regimes) + f" {'same ids':>9}" + tail
    print(header)
    print("  " + "-" * (len(header) - 2))


def _same(marks: List[str]) -> str:
    shown = [m for m in marks if m]
    return "" if not shown else (shown[0] if len(set(shown)) == 1 else "/".join(shown))


def print_single(name, libs, single, nbytes, texts, notes: List[str]) -> None:
    """The one-thread table of one encoding; parity problems and oddities go to ``notes``."""
    print(f"== {name} ==")
    print("one thread (" + ", ".join(f"{r} {n / 1e6:.2f} MB" for r, n in nbytes.items()) + "):")
    _header("library", list(nbytes))
    tm = {r: _mbps(single.get(("tokenmill", r)), n) for r, n in nbytes.items()}
    for lib in libs:
        label = LIBRARIES[lib][2]
        if not any(single.get((lib, r)) for r in nbytes):
            print(f"  {label:<15} skipped (see the notes)")
            continue
        row, same = f"  {label:<15}", []
        for r, n in nbytes.items():
            res = single.get((lib, r))
            v = _mbps(res, n)
            row += f" {_fmt(v, 11)} {_fmt(_ratio(tm[r], v), 6, 2)}"
            if lib == "tiktoken":
                same.append("ref" if res is not None else "")
            else:
                same.append(parity(res, single.get(("tiktoken", r)), texts[r], f"{name} {r} {label}", notes))
            if res is None:
                continue
            cores = _cores(res)
            if cores is not None and cores > 1.1:
                notes.append(
                    f"{name} {r} {label}: used {cores:.1f} cores on average "
                    f"(CPU s / wall s) in its one-thread pass"
                )
            if "segment_cache_stats" in res["notes"]:
                notes.append(f"{name} {r} fastokens segment_cache_stats(): {res['notes']['segment_cache_stats']}")
        print(f"{row} {_same(same):>9}")


def round_ratios(res: Optional[dict], nbytes: int, other: Optional[dict], other_bytes: int) -> List[float]:
    """The MB/s of run ``res`` (over ``nbytes``) over the MB/s of run ``other`` (over
    ``other_bytes``) in each round where both ran. The two runs of a round come seconds
    apart, so both mostly see the host in the same state: on this kind of shared host
    one-thread runs of the same build land near one of two speeds, sometimes 1.5x apart,
    and a ratio of the best of each can pair the fast state with the slow one."""
    if not res or not other:
        return []
    pairs = zip(res.get("round_seconds", []), other.get("round_seconds", []))
    return [(nbytes / a) / (other_bytes / b) for a, b in pairs if a and b]


def paired_ratios(single, lib: str, regime: str) -> List[float]:
    """tokenmill's speed over ``lib``'s in each round where both ran (the same text)."""
    return round_ratios(single.get(("tokenmill", regime)), 1, single.get((lib, regime)), 1)


def _median_range(q: List[float]) -> str:
    q = sorted(q)
    return f"{statistics.median(q):.2f} ({q[0]:.2f}..{q[-1]:.2f})"


def print_paired(libs, single, nbytes) -> None:
    """Per library, the median and range over the rounds of tokenmill's speed over its
    speed in the same round."""
    rounds = max((len(r.get("round_seconds", [])) for r in single.values() if r), default=0)
    print(f"one thread, paired (x in each round, runs seconds apart; median and range of {rounds} rounds):")
    header = f"  {'library':<15}" + "".join(f" {r + ' x':>9} {'range':>12}" for r in nbytes)
    print(header)
    print("  " + "-" * (len(header) - 2))
    for lib in libs:
        if lib == "tokenmill" or not any(single.get((lib, r)) for r in nbytes):
            continue
        row = f"  {LIBRARIES[lib][2]:<15}"
        for r in nbytes:
            q = sorted(paired_ratios(single, lib, r))
            if not q:
                row += f" {'-':>9} {'':>12}"
                continue
            row += f" {statistics.median(q):>9.2f} {f'{q[0]:.2f}..{q[-1]:.2f}':>12}"
        print(row)


def _share(part: Optional[float], whole: float) -> Optional[float]:
    return None if part is None or whole <= 0 else max(0.0, min(1.0, part / whole))


def _cores(res: Optional[dict]) -> Optional[float]:
    """The cores a run used on average: its CPU seconds over its wall seconds."""
    return res["cpu_seconds"] / res["seconds"] if res and res.get("seconds") else None


def _steal_share(res: Optional[dict]) -> Optional[float]:
    """The share of all the machine's cores' time the hypervisor took during a run."""
    if res is None or "seconds" not in res:
        return None
    return _share(res.get("steal_seconds"), res["seconds"] * (os.cpu_count() or 1))


def _pct(v: Optional[float], width: int) -> str:
    return f"{100 * v:>{width - 1}.0f}%" if v is not None else f"{'-':>{width}}"


def print_cpu(libs, single, nbytes) -> None:
    """The one-thread figures again, per CPU second of the worker instead of per wall
    second. On a virtual machine whose host is busy, the hypervisor takes the cores away
    for stretches ("steal"): the wall clock runs on, so wall-time MB/s drop, while the
    process's CPU time (Linux with steal-time accounting) leaves those stretches out.
    ``off``: the share of the pass's wall time the process was not on a core; ``steal``:
    the share of all cores' time the hypervisor took meanwhile. A library that spreads a
    call over several threads is charged all their CPU time (such runs are named in the
    notes)."""
    rows = [lib for lib in libs if any(single.get((lib, r)) for r in nbytes)]
    if not rows:
        return
    print("one thread, per CPU second (stretches the hypervisor took the core away left out):")
    header = f"  {'library':<15}" + "".join(f" {r + ' MB/s':>11} {'x':>6} {'off':>5} {'steal':>6}" for r in nbytes)
    print(header)
    print("  " + "-" * (len(header) - 2))
    tm = {r: _mbps(single.get(("tokenmill", r)), n, "cpu_seconds") for r, n in nbytes.items()}
    for lib in rows:
        row = f"  {LIBRARIES[lib][2]:<15}"
        for r, n in nbytes.items():
            res = single.get((lib, r))
            v = _mbps(res, n, "cpu_seconds")
            off = _share(res["seconds"] - res["cpu_seconds"], res["seconds"]) if res and v else None
            row += f" {_fmt(v, 11)} {_fmt(_ratio(tm[r], v), 6, 2)} {_pct(off, 5)} {_pct(_steal_share(res), 6)}"
        print(row)


def print_faults(libs, single, nbytes, fault_us: Optional[float]) -> None:
    """Per library and regime, the page faults of the one-thread pass (thousands), their
    cost at ``fault_us`` microseconds each (ms) and that cost's share of the pass's wall
    time. A pass keeps every list of ids it makes, so the kernel maps new memory for all
    of them; that costs every library about the same time, a larger share of a faster
    pass's."""
    rows = [lib for lib in libs if any((single.get((lib, r)) or {}).get("page_faults") is not None for r in nbytes)]
    if not rows:
        return
    price = f"{fault_us:.2f} µs a fault, measured here" if fault_us else "no price measured"
    print(f"one thread, page faults (thousands in the timed pass; ms: their cost at {price}; share: of the pass):")
    header = f"  {'library':<15}" + "".join(f" {r + ' faults':>13} {'ms':>6} {'share':>6}" for r in nbytes)
    print(header)
    print("  " + "-" * (len(header) - 2))
    for lib in rows:
        row = f"  {LIBRARIES[lib][2]:<15}"
        for r in nbytes:
            res = single.get((lib, r)) or {}
            faults = res.get("page_faults")
            if faults is None:
                row += f" {'-':>13} {'-':>6} {'-':>6}"
                continue
            cost = faults * fault_us / 1e6 if fault_us else None
            row += f" {faults / 1000:>13.1f} {_fmt(None if cost is None else cost * 1000, 6, 0)} {_pct(_share(cost, res['seconds']), 6)}"
        print(row)


#: Kinds of text with fewer bytes than this in a stream are marked in the table by kind.
SMALL_KIND = 100_000


def print_kinds(libs, single, texts, regime: str = "long") -> None:
    """One library per column: MB/s on each kind of text within the one-thread pass over
    ``regime`` (from per-document times; the caches warm across kinds as in the stream), and
    each kind's share of tokenmill's time."""
    docs = texts.get(regime)
    cols = [lib for lib in libs if (single.get((lib, regime)) or {}).get("doc_seconds")]
    if not docs or "tokenmill" not in cols:
        return
    size: Dict[str, int] = Counter()
    secs: Dict[str, Counter] = {lib: Counter() for lib in cols}
    for i, (kind, _, text) in enumerate(docs):
        size[kind] += len(text.encode("utf-8"))
        for lib in cols:
            secs[lib][kind] += single[(lib, regime)]["doc_seconds"][i]
    kinds = [k for k in KINDS if k in size]
    total_tm = sum(secs["tokenmill"].values()) or 1.0
    print(f"by kind of text, {regime} stream, one thread (MB/s; x = tokenmill / library; share of tokenmill's time):")
    head = f"  {'kind':<22}" + "".join(f" {LIBRARIES[lib][2][:12]:>12}" + ("" if lib == "tokenmill" else f" {'x':>5}") for lib in cols)
    print(head + f" {'share':>6}")
    print("  " + "-" * (len(head) + 5))
    for k in kinds:
        tm = size[k] / 1e6 / secs["tokenmill"][k] if secs["tokenmill"][k] else None
        row = f"  {KINDS[k]:<22}"
        for lib in cols:
            v = size[k] / 1e6 / secs[lib][k] if secs[lib][k] else None
            row += f" {_fmt(v, 12)}" + ("" if lib == "tokenmill" else f" {_fmt(_ratio(tm, v), 5, 2)}")
        # (a kind the machine has little of, such as Go code from a few files, is timed
        # over too little text for its ratios to mean much)
        small = f"  ({size[k] / 1e3:.0f} kB: too little text to compare)" if size[k] < SMALL_KIND else ""
        print(row + f" {100 * secs['tokenmill'][k] / total_tm:>5.1f}%" + small)


def _row_against_own(name, lib, results, single, nbytes, texts, mode: str, notes: List[str]) -> str:
    """A table row of ``lib``'s runs in ``mode`` (``results``, keyed (lib, regime)): per regime
    its MB/s and tokenmill's over it, whether its ids are tiktoken's, then its MB/s over its
    own one-thread run's."""
    label = LIBRARIES[lib][2]
    row, same, own = f"  {label:<15}", [], []
    for r, n in nbytes.items():
        res = results.get((lib, r))
        v = _mbps(res, n)
        row += f" {_fmt(v, 11)} {_fmt(_ratio(_mbps(results.get(('tokenmill', r)), n), v), 6, 2)}"
        same.append(parity(res, single.get(("tiktoken", r)), texts[r], f"{name} {r} {label} {mode}", notes))
        own.append(f"{r} {_fmt(_ratio(v, _mbps(single.get((lib, r)), n)), 0, 2)}")
    return f"{row} {_same(same):>9}  {', '.join(own)}"


def print_batch(name, libs, batch, single, nbytes, texts, threads: int, notes: List[str]) -> None:
    print(f"batch, encode_ordinary_batch(docs, num_threads={threads}):")
    _header("library", list(nbytes), "  batch / own one-thread MB/s")
    lines: List[str] = []  # each library's factors, printed under the table
    for lib in BATCH_LIBS:
        if lib not in libs:
            continue
        label = LIBRARIES[lib][2]
        print(_row_against_own(name, lib, batch, single, nbytes, texts, "batch", notes))
        factors = []
        for r, n in nbytes.items():
            res = batch.get((lib, r))
            # The wall-time ratio's two factors: the cores the batch got (the host may take
            # one away) and the work a CPU second does with several threads against one
            # (the cost of running in parallel). Both together tell a slow host from slow code.
            eff = _ratio(_mbps(res, n, "cpu_seconds"), _mbps(single.get((lib, r)), n, "cpu_seconds"))
            cores = _cores(res)
            if eff is not None and cores is not None:
                factors.append(f"{r} {eff:.2f} on {cores:.2f} cores")
            steal = _steal_share(res)
            if steal is not None and steal >= STEAL_NOTE:
                notes.append(
                    f"{name} {r} {label} batch: the hypervisor took {100 * steal:.0f}% of the cores' time "
                    f"during the run (its wall-time MB/s, and the batch / one-thread ratio, suffer)"
                )
        if factors:
            lines.append(f"  {label} batch MB per CPU second / own one-thread's: {', '.join(factors)}")
        paired = {r: round_ratios(batch.get((lib, r)), n, single.get((lib, r)), n) for r, n in nbytes.items()}
        if max(map(len, paired.values()), default=0) > 1:
            cells = [f"{r} {_median_range(q)}" for r, q in paired.items() if q]
            lines.append(f"  {label} batch / own one-thread, paired in each round (median, range): {', '.join(cells)}")
    for line in lines:
        print(line)


def print_numpy(name, libs, arrays, single, nbytes, texts, notes: List[str]) -> None:
    print("ids as numpy arrays, encode_to_numpy(text, disallowed_special=()), one call per document:")
    _header("library", list(nbytes), "  arrays / own lists MB/s")
    for lib in NUMPY_LIBS:
        if lib in libs:
            print(_row_against_own(name, lib, arrays, single, nbytes, texts, "numpy", notes))
    for lib in ARRAY_LIBS:
        if lib not in libs:
            continue
        # Its one-thread run (arrays already; its parity was checked in that table).
        row = f"  {LIBRARIES[lib][2]:<15}"
        for r, n in nbytes.items():
            v = _mbps(single.get((lib, r)), n)
            row += f" {_fmt(v, 11)} {_fmt(_ratio(_mbps(arrays.get(('tokenmill', r)), n), v), 6, 2)}"
        print(f"{row} {'':>9}  (its one-thread run: arrays already)")
        paired = {r: round_ratios(arrays.get(("tokenmill", r)), n, single.get((lib, r)), n) for r, n in nbytes.items()}
        if max(map(len, paired.values()), default=0) > 1:
            cells = [f"{r} {_median_range(q)}" for r, q in paired.items() if q]
            print(f"  tokenmill arrays / {LIBRARIES[lib][2]}, paired in each round (median, range): {', '.join(cells)}")


def print_worst(name, worst, nbytes: int, short: Optional[dict], short_bytes: int, notes: List[str]) -> None:
    tm_short = _mbps(short, short_bytes)
    print(
        f"worst cases ({nbytes / 1e6:g} MB, one document, one call; "
        f"target: tokenmill >= {WORST_TARGET} x its own short-run MB/s):"
    )
    header = (
        f"  {'text':<26} {'tokenmill MB/s':>15} {'tiktoken MB/s':>14} {'x':>6} "
        f"{'/ short run':>12} {'target':>7} {'same ids':>9}"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for case, label in WORST_CASES.items():
        rtm, rtk = worst.get(("tokenmill", case)), worst.get(("tiktoken", case))
        vtm, vtk = _mbps(rtm, nbytes), _mbps(rtk, nbytes)
        rel = _ratio(vtm, tm_short)
        target = "" if rel is None else ("ok" if rel >= WORST_TARGET else "BELOW")
        same = parity(rtm, rtk, None, f"{name} worst case {case}: tokenmill", notes)
        ctm = "timeout" if rtm and "timeout" in rtm else _fmt(vtm, 0)
        ctk = "timeout" if rtk and "timeout" in rtk else _fmt(vtk, 0)
        print(
            f"  {label:<26} {ctm:>15} {ctk:>14} {_fmt(_ratio(vtm, vtk), 6, 2)} "
            f"{_fmt(rel, 12, 2)} {target:>7} {same:>9}"
        )
    paired = {label: round_ratios(worst.get(("tokenmill", case)), nbytes, short, short_bytes) for case, label in WORST_CASES.items()}
    if max(map(len, paired.values()), default=0) > 1:
        print("  tokenmill / its short run, paired in each round (median, range):")
        for label, q in paired.items():
            if q:
                print(f"    {label:<26} {_median_range(q)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encodings", nargs="+", default=["cl100k_base", "o200k_base"])
    ap.add_argument("--short-mb", type=float, default=4.5, help="MB of the short cold run (default 4.5)")
    ap.add_argument("--long-mb", type=float, default=20.0, help="MB of the long stream (default 20)")
    ap.add_argument("--worst-mb", type=float, default=1.0, help="MB of each worst-case text (default 1)")
    ap.add_argument("--no-warm", action="store_true", help="leave out the long stream after a warm-up (the warm column)")
    ap.add_argument(
        "--seen",
        action="store_true",
        help="diagnostic column: the short slice again, after the same object encoded it (cache hits only)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="fresh-process runs per figure; the best is kept")
    ap.add_argument("--libs", nargs="+", choices=list(LIBRARIES), default=list(LIBRARIES), help="libraries to run")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one worker may take (default 300)")
    ap.add_argument("--quick", action="store_true", help="smoke test: short 1 MB, long 3 MB, the first encoding only")
    ap.add_argument(
        "--fastokens-pool",
        action="store_true",
        help="let fastokens encode a long text on its own thread pool, as shipped (default: one thread)",
    )
    ap.add_argument(
        "--numpy",
        action="store_true",
        help="also time tokenmill's and tiktoken's encode_to_numpy (ids as arrays, no lists) on the short and long slices",
    )
    ap.add_argument("--no-pin", action="store_true", help="let one-thread runs move between CPUs (default: pinned to one)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        return worker(json.loads(args.worker))

    if args.quick:
        args.short_mb, args.long_mb, args.encodings = 1.0, 3.0, args.encodings[:1]
    if min(args.short_mb, args.long_mb, args.worst_mb) <= 0 or args.repeat < 1:
        ap.error("sizes must be positive and --repeat at least 1")

    started = time.perf_counter()
    for line in machine_lines():
        print(line)

    libs = [lib for lib in LIBRARIES if lib in args.libs]
    for lib in list(libs):
        module, _, label = LIBRARIES[lib]
        if importlib.util.find_spec(module) is None:
            print(f"note: {label} is not installed (no module {module!r}); skipped")
            libs.remove(lib)
        elif lib == "hf" and importlib.util.find_spec("tokenmill.huggingface") is None:
            print("note: HF tokenizers skipped: tokenmill.huggingface (to_hf_tokenizer) is not available")
            libs.remove(lib)
    encodings = []
    vocab_files: Dict[str, str] = {}
    for name in args.encodings:
        path = cached_vocab_file(name)
        if path is None:
            continue
        encodings.append(name)
        vocab_files[name] = path
    if not libs or not encodings:
        print("nothing to run")
        return 1

    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    regimes = {"short": int(args.short_mb * 1e6), "long": int(args.long_mb * 1e6)}
    t0 = time.perf_counter()
    slices, _ = build_slices(list(regimes.values()))
    corpus_s = time.perf_counter() - t0
    texts = dict(zip(regimes, slices))
    nbytes = {r: sum(len(t.encode("utf-8")) for _, _, t in docs) for r, docs in texts.items()}
    batch_bytes = dict(nbytes)
    print(f"text (built in {corpus_s:.1f} s; kinds share equally unless short of text, same mix in both slices):")
    for r, docs in texts.items():
        for line in describe_slice(f"  {r} slice", docs):
            print(line)
    if not args.no_warm:
        # The long slice again, timed after the short one went through the same object.
        texts["warm"], nbytes["warm"] = texts["long"], nbytes["long"]
        print("  warm: the long slice, timed after the same fresh object encoded the short slice (untimed)")
    if args.seen:
        texts["seen"], nbytes["seen"] = texts["short"], nbytes["short"]
        print("  seen: the short slice timed again after the same object encoded it (untimed): a diagnostic of cache hits")
    print(
        f"each figure: one fresh process per (library, encoding, regime, mode), best of {args.repeat} (in rounds); "
        f"one encode call per document; MB = 10**6 bytes of UTF-8; x = tokenmill MB/s / library MB/s"
    )
    cpu = one_cpu(not args.no_pin)
    print(describe(cpu))
    fault_us = fault_microseconds()
    if fault_us:
        print(
            f"a page fault costs {fault_us:.2f} µs here (a first write to a new page; "
            f"median of {FAULT_ROUNDS} mappings of {FAULT_PAGES} pages)"
        )
    if "fastokens" in libs:
        print(
            "fastokens: its own thread pool for long texts, as shipped (--fastokens-pool)"
            if args.fastokens_pool
            else "fastokens: FASTOKENS_BPE_THREADS=1, every call on the calling thread (--fastokens-pool: as shipped)"
        )
    print()
    sys.stdout.flush()

    n_single = len(libs) * len(nbytes)
    n_batch = len([lib for lib in BATCH_LIBS if lib in libs]) * len(regimes)
    numpy_libs: Tuple[str, ...] = ()
    if args.numpy:
        if importlib.util.find_spec("numpy") is None:
            print("note: --numpy skipped: numpy is not installed")
        else:
            numpy_libs = NUMPY_LIBS
    n_numpy = len([lib for lib in numpy_libs if lib in libs]) * len(regimes)
    n_worst = len([lib for lib in WORST_LIBS if lib in libs]) * len(WORST_CASES)
    total_runs = len(encodings) * (n_single + n_batch + n_numpy + n_worst) * args.repeat

    env = dict(os.environ)
    env["TOKENMILL_OFFLINE"] = "1"
    env["HF_HUB_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory(prefix="encode_compare-") as tmp:
        doc_files = {}
        for r, docs in texts.items():
            if r == "warm":
                continue
            doc_files[r] = os.path.join(tmp, f"{r}.json")
            Path(doc_files[r]).write_text(json.dumps([t for _, _, t in docs], ensure_ascii=False), encoding="utf-8")
        if "warm" in texts:
            doc_files["warm"] = doc_files["long"]
        if "seen" in texts:
            doc_files["seen"] = doc_files["short"]
        worst_bytes = int(args.worst_mb * 1e6)
        for case in WORST_CASES:
            doc_files[case] = os.path.join(tmp, f"worst-{case}.json")
            Path(doc_files[case]).write_text(json.dumps([worst_text(case, worst_bytes)]), encoding="utf-8")

        runner = Runner(env, args.repeat, args.timeout, tmp, total_runs, cpu)
        for name in encodings:
            base = {"encoding": name, "vocab_file": vocab_files[name], "threads": threads, "fastokens_pool": args.fastokens_pool}

            items: List[Tuple[Tuple[str, ...], dict, str]] = []

            def add(mode: str, cases, mode_libs, size: Callable[[str], int], label: str) -> None:
                """One item per (library in both mode_libs and libs, case), keyed (mode, lib, case)."""
                # (a library missing from RUN_ORDER runs last)
                ordered = sorted(mode_libs, key=lambda lib: RUN_ORDER.index(lib) if lib in RUN_ORDER else len(RUN_ORDER))
                for case in cases:
                    for lib in (lib for lib in ordered if lib in libs):
                        spec = dict(base, lib=lib, mode=mode, docs=doc_files[case], bytes=size(case))
                        if case in ("warm", "seen"):
                            spec["warmup"] = doc_files["short"]
                        what = label.format(name=name, case=case, lib=LIBRARIES[lib][2])
                        items.append(((mode, lib, case), spec, what))

            add("single", nbytes, libs, nbytes.__getitem__, "{name} {case} {lib}")
            add("batch", regimes, BATCH_LIBS, nbytes.__getitem__, "{name} {case} {lib} batch")
            add("numpy", regimes, numpy_libs, nbytes.__getitem__, "{name} {case} {lib} numpy")
            add("worst", WORST_CASES, WORST_LIBS, lambda _: worst_bytes, "{name} worst {case} {lib}")
            got = runner.measure_rounds(items)
            single, batch, arrays, worst = (
                {(lib, case): res for (m, lib, case), res in got.items() if m == mode}
                for mode in ("single", "batch", "numpy", "worst")
            )

            print_single(name, libs, single, nbytes, texts, runner.notes)
            print_paired(libs, single, nbytes)
            print_cpu(libs, single, nbytes)
            print_faults(libs, single, nbytes, fault_us)
            print_kinds(libs, single, texts)
            if "warm" in texts:
                print_kinds(libs, single, texts, "warm")
            if batch:
                print_batch(name, libs, batch, single, batch_bytes, texts, threads, runner.notes)
            if arrays:
                print_numpy(name, libs, arrays, single, batch_bytes, texts, runner.notes)
            if worst:
                print_worst(name, worst, worst_bytes, single.get(("tokenmill", "short")), nbytes["short"], runner.notes)
            print()
            sys.stdout.flush()

    for note in dict.fromkeys(runner.notes):
        print(f"note: {note}")
    print(f"total time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
