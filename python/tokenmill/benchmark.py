"""tokenmill against tiktoken on your own text: the engine of the ``tokenmill bench`` command.

It answers the two questions of anyone about to switch: how much faster is tokenmill on
*my* text and machine, and does it give the very same ids? Each library encodes the same
documents with the same encoding, and the report gives MB/s, tokenmill's speed over each
library's, the number of tokens, and whether every document's ids equal tokenmill's.

How it keeps the figures fair
-----------------------------
* **A fresh process per figure.** Every (library, round) runs in a new Python process that
  loads the encoding, reads the documents and encodes them once. No library meets text it
  has seen before (a warm cache re-encodes seen text many times faster than new text), and
  none inherits another's state, such as the UTF-8 copy CPython attaches to a ``str`` the
  first time a binding asks for one.
* **The same call as a program makes.** One thread: ``encode_ordinary`` once per document,
  every list of ids kept. Several threads: ``encode_ordinary_batch(docs, num_threads=N)``.
  Loading the vocabulary is timed apart (``load s``) and left out of MB/s.
* **Paired rounds.** With ``--repeat R``, the libraries run in turn, in alternating order,
  R times. A host's speed drifts over minutes, so the ratio is the median of each round's
  ratio, and MB/s the median of each library's rounds.

Ids are compared per document (a digest of each list), so a difference names the first
document where it occurs. Special-token text counts as ordinary text (``encode_ordinary``),
as in a tokenizer's training data.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import json
import os
import pickle
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

#: Libraries ``tokenmill bench`` can time, in the order of its report.
LIBRARIES = ("tokenmill", "tiktoken")


@dataclass
class Documents:
    """The text under test: the documents, where they came from (the whole source, and a
    label per document), and their UTF-8 size."""

    texts: List[str]
    source: str
    labels: List[str]
    nbytes: int


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def read_documents(
    files: Sequence[str], *, input_format: str = "auto", column: str = "text", limit_bytes: Optional[int] = None
) -> Documents:
    """The documents of ``files`` (any :func:`tokenmill.sources.iter_documents` input), or of
    the built-in default corpus (the standard library's sources) when there are none; at most
    about ``limit_bytes`` of UTF-8 (the document that crosses the limit is kept whole).

    Raises:
        ValueError: No document, or a bad ``input_format``.
        FileNotFoundError: A path matches no file.
    """
    texts: List[str] = []
    labels: List[str] = []
    size = 0
    if files:
        from tokenmill.sources import expand_paths, iter_documents

        for path in expand_paths(files):
            for k, text in enumerate(iter_documents([str(path)], format=input_format, column=column)):
                texts.append(text)
                labels.append(f"{path}" if k == 0 else f"{path}, document {k + 1}")
                size += _utf8_len(text)
                if limit_bytes is not None and size >= limit_bytes:
                    break
            if limit_bytes is not None and size >= limit_bytes:
                break
        source = ", ".join(files)
    else:
        from tokenmill.corpus import stdlib_root, stdlib_texts

        texts = list(stdlib_texts(limit_bytes))
        labels = [f"standard-library file {k + 1}" for k in range(len(texts))]
        size = sum(map(_utf8_len, texts))
        source = f"the Python standard library's sources in {stdlib_root()} (built-in default)"
    if not texts:
        raise ValueError(f"no documents in {source}")
    return Documents(texts, source, labels, size)


# ---------------------------------------------------------------------------------------------
# One figure, in its own process
# ---------------------------------------------------------------------------------------------


def _load(library: str, encoding: str) -> Any:
    """``library``'s encoder for ``encoding`` (a pretrained name or a directory written by
    :func:`tokenmill.save`)."""
    from tokenmill.persist import load_saved_or_named

    if library == "tokenmill":
        return load_saved_or_named(encoding)
    if library == "tiktoken":
        import tiktoken

        if not os.path.isdir(encoding) and encoding in tiktoken.list_encoding_names():
            return tiktoken.get_encoding(encoding)
        # A vocabulary tiktoken has no name for (one trained with tokenmill): the same ranks,
        # pattern and special tokens, read by tokenmill and handed to tiktoken's constructor.
        enc = load_saved_or_named(encoding)
        return tiktoken.Encoding(
            enc.name, pat_str=enc._pat_str, mergeable_ranks=enc._mergeable_ranks, special_tokens=enc._special_tokens
        )
    raise ValueError(f"unknown library {library!r}; expected one of {', '.join(LIBRARIES)}")


def document_digests(all_ids: Iterable[Sequence[int]]) -> Tuple[List[str], int]:
    """A short digest of each document's ids, and the number of ids in all."""
    digests = []
    total = 0
    for ids in all_ids:
        total += len(ids)
        digests.append(hashlib.blake2b(array("I", ids).tobytes(), digest_size=8).hexdigest())
    return digests, total


def measure(library: str, encoding: str, docs_path: str, threads: int) -> Dict[str, Any]:
    """Loads ``library``'s encoder, reads the pickled documents and encodes them once, timed.
    Meant for a fresh process (see the module documentation)."""
    t0 = time.perf_counter()
    enc = _load(library, encoding)
    load_seconds = time.perf_counter() - t0
    with open(docs_path, "rb") as f:
        texts: List[str] = pickle.load(f)
    gc.collect()
    gc.disable()
    t0 = time.perf_counter()
    if threads > 1:
        all_ids = enc.encode_ordinary_batch(texts, num_threads=threads)
    else:
        all_ids = [enc.encode_ordinary(t) for t in texts]
    seconds = time.perf_counter() - t0
    gc.enable()
    digests, tokens = document_digests(all_ids)
    module = sys.modules[library]
    return {
        "version": getattr(module, "__version__", "?"),
        "load_seconds": load_seconds,
        "seconds": seconds,
        "tokens": tokens,
        "digests": digests,
    }


def _measure_in_fresh_process(library: str, encoding: str, docs_path: str, threads: int, offline: bool) -> Dict[str, Any]:
    """:func:`measure` in a new interpreter; raises RuntimeError with its error if it fails."""
    if importlib.util.find_spec(library) is None:
        raise RuntimeError(f"{library} is not installed (pip install {library})")
    cmd = [sys.executable, "-m", "tokenmill.benchmark", library, encoding, docs_path, str(threads)]
    env = dict(os.environ)
    if offline:
        env["TOKENMILL_OFFLINE"] = "1"
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        lines = [line for line in run.stderr.strip().splitlines() if line.strip()]
        raise RuntimeError(lines[-1] if lines else f"exited with status {run.returncode}")
    return json.loads(run.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------------------------


@dataclass
class LibraryResult:
    """One library's rounds (``runs``: what :func:`measure` returned), or why it has none."""

    library: str
    runs: List[Dict[str, Any]] = field(default_factory=list)
    error: Optional[str] = None

    def mb_per_s(self, nbytes: int) -> List[float]:
        return [nbytes / 1e6 / max(r["seconds"], 1e-9) for r in self.runs]


@dataclass
class Comparison:
    """Everything ``tokenmill bench`` reports."""

    encoding: str
    threads: int
    repeat: int
    documents: Documents
    results: List[LibraryResult]

    def result(self, library: str) -> Optional[LibraryResult]:
        return next((r for r in self.results if r.library == library and r.runs), None)

    def speedup(self, library: str) -> Optional[Tuple[float, float, float]]:
        """tokenmill's MB/s over ``library``'s: the median of the rounds' ratios, and their
        range; None if either has no figure."""
        ours, theirs = self.result("tokenmill"), self.result(library)
        if ours is None or theirs is None:
            return None
        ratios = [t["seconds"] / max(o["seconds"], 1e-9) for o, t in zip(ours.runs, theirs.runs)]
        return statistics.median(ratios), min(ratios), max(ratios)

    def first_difference(self, library: str) -> Optional[int]:
        """The index of the first document whose ids from ``library`` differ from tokenmill's
        (in any round), or None if every document's ids are the same."""
        ours, theirs = self.result("tokenmill"), self.result(library)
        if ours is None or theirs is None:
            return None
        reference = ours.runs[0]["digests"]
        for run in ours.runs[1:] + theirs.runs:
            for k, (a, b) in enumerate(zip(reference, run["digests"])):
                if a != b:
                    return k
            if len(run["digests"]) != len(reference):
                return min(len(run["digests"]), len(reference))
        return None

    def mismatches(self) -> Dict[str, int]:
        """Each library whose ids differ from tokenmill's, with its first differing document."""
        found = {}
        for res in self.results:
            if res.library != "tokenmill":
                k = self.first_difference(res.library)
                if k is not None:
                    found[res.library] = k
        return found


def compare(
    documents: Documents,
    encoding: str,
    *,
    libraries: Sequence[str] = LIBRARIES,
    threads: int = 1,
    repeat: int = 1,
    offline: bool = True,
    progress: Optional[Any] = None,
) -> Comparison:
    """Times each of ``libraries`` on ``documents`` with ``encoding``, ``repeat`` rounds of a
    fresh process each (see the module documentation). A library that fails to load or run is
    kept with its error and skipped in later rounds. ``offline``: tokenmill's loader uses only
    cached vocabularies (found as tiktoken finds them, so tiktoken finds them too).
    ``progress``, if given, is called with a line of text before each run."""
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    if threads < 1:
        raise ValueError("threads must be at least 1")
    unknown = [lib for lib in libraries if lib not in LIBRARIES]
    if unknown:
        raise ValueError(f"unknown library {unknown[0]!r}; expected one of {', '.join(LIBRARIES)}")
    results = [LibraryResult(lib) for lib in dict.fromkeys(libraries)]
    with tempfile.TemporaryDirectory(prefix="tokenmill-bench-") as tmp:
        docs_path = str(Path(tmp, "documents.pickle"))
        with open(docs_path, "wb") as f:
            pickle.dump(documents.texts, f, protocol=pickle.HIGHEST_PROTOCOL)
        for round_ in range(repeat):
            order = results if round_ % 2 == 0 else results[::-1]
            for res in order:
                if res.error is not None:
                    continue
                if progress is not None:
                    progress(f"round {round_ + 1}/{repeat}: {res.library}")
                try:
                    res.runs.append(_measure_in_fresh_process(res.library, encoding, docs_path, threads, offline))
                except RuntimeError as e:
                    res.error = str(e)
                    res.runs.clear()
    return Comparison(encoding, threads, repeat, documents, results)


def machine() -> str:
    """The processor's model name (where the system says it), its usable cores and Python's
    version: what a speed depends on."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return f"{model or 'unknown processor'}, {cores} usable core(s), Python {platform.python_version()}"


def render(c: Comparison) -> str:
    """The report of :func:`compare`, as text."""
    mode = "1 thread (encode_ordinary per document)" if c.threads == 1 else f"{c.threads} threads (encode_ordinary_batch)"
    rounds = (
        "1 round" if c.repeat == 1
        else f"{c.repeat} rounds in alternating order: medians, and for × the median and range of the rounds' ratios"
    )
    lines = [
        f"tokenmill bench: {c.encoding}, {mode}",
        f"text: {c.documents.nbytes / 1e6:.2f} MB in {len(c.documents.texts):,} document(s) from {c.documents.source}",
        f"machine: {machine()}",
        f"each figure from a fresh process (a new encoder, text it has not seen); {rounds}",
        "× = tokenmill's MB/s over the library's; ids = whether every document's ids equal tokenmill's",
        "",
    ]
    header = ("library", "version", "load s", "MB/s", "tokenmill ×", "tokens", "ids")
    nbytes = c.documents.nbytes
    mismatches = c.mismatches()
    rows = []
    for res in c.results:
        if not res.runs:
            rows.append((res.library, "", "", "", "", "", f"unavailable: {res.error}"))
            continue
        s = c.speedup(res.library)
        if res.library == "tokenmill":
            times, ids = "1.00", "-"
        elif s is None:  # tokenmill has no figure to compare with
            times, ids = "", "?"
        else:
            times = f"{s[0]:.2f}" if c.repeat == 1 else f"{s[0]:.2f} ({s[1]:.2f}-{s[2]:.2f})"
            ids = "DIFFERENT" if res.library in mismatches else "same"
        rows.append((
            res.library,
            str(res.runs[0]["version"]),
            f"{statistics.median(r['load_seconds'] for r in res.runs):.2f}",
            f"{statistics.median(res.mb_per_s(nbytes)):.1f}",
            times,
            f"{res.runs[0]['tokens']:,}",
            ids,
        ))
    widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(header)]
    for row in (header, *rows):
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])] + [
            row[k].rjust(widths[k]) for k in range(2, 6)
        ] + [row[6]]
        lines.append("  ".join(cells).rstrip())
    for library, k in mismatches.items():
        lines.append("")
        lines.append(f"{library}'s ids differ from tokenmill's first in document {k + 1}: {c.documents.labels[k]}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    """``python -m tokenmill.benchmark LIBRARY ENCODING DOCS_PICKLE THREADS``: one figure,
    printed as a line of JSON (used by :func:`compare`)."""
    library, encoding, docs_path, threads = argv
    print(json.dumps(measure(library, encoding, docs_path, int(threads))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
