"""Training byte-level BPE vocabularies.

Documents stream in from any iterable of ``str`` (or from files, see
:mod:`tokenmill.sources`), a buffer at a time. Each buffer is split with the pattern and its
spans counted in Rust, in parallel, without the GIL; only the table of distinct spans is
kept. The merge loop then runs in Rust on those counts. The result is an ordinary
:class:`~tokenmill.Encoding`, with special tokens appended after the learned tokens.

Training is deterministic: the same documents give the same merges whatever the thread count
or buffer size, and, with the same pattern, the same merges as rustbpe (highest count first;
on equal counts the smaller ``(left, right)`` id pair).
"""

from __future__ import annotations

import operator
import time
import warnings
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence

from tokenmill import _core
from tokenmill.core import Encoding, _replace_surrogates
from tokenmill.patterns import DEFAULT_PATTERN, resolve_pattern
from tokenmill.progress import Progress


@dataclass
class TrainingStats:
    """What a training run did, for summaries and benchmarks."""

    documents: int = 0
    bytes: int = 0
    distinct_spans: int = 0
    total_spans: int = 0
    merges: int = 0
    counting_seconds: float = 0.0
    merging_seconds: float = 0.0


class Trainer:
    """Counts spans over documents fed in any number of calls, then learns merges.

    >>> trainer = Trainer(pattern="nanochat")
    >>> trainer.update(["first batch of documents", "..."])
    >>> trainer.update_from_iterator(more_documents, max_chars=10**9)
    >>> enc = trainer.train(vocab_size=32768, special_tokens=["<|bos|>"])

    Args:
        pattern: A name from :data:`tokenmill.patterns.NAMED_PATTERNS` or a regex.
        threads: Worker threads for counting, and for the largest merges (default: all cores).
        doc_cap: Truncate each document to this many characters (as nanochat's tok_train).
    """

    def __init__(self, pattern: str = DEFAULT_PATTERN, *, threads: Optional[int] = None, doc_cap: Optional[int] = None):
        if doc_cap is not None and doc_cap <= 0:
            raise ValueError(f"doc_cap must be positive, got {doc_cap}")
        if threads is not None and threads <= 0:
            raise ValueError(f"threads must be positive, got {threads}")
        self.pattern = resolve_pattern(pattern)
        self.threads = threads or _core.available_cores()
        self.doc_cap = doc_cap
        self._counter = _core.SpanCounter(self.pattern)
        self.stats = TrainingStats()

    # ------------------------------------------------------------------ counting

    def update(self, docs: Sequence[str]) -> None:
        """Counts the spans of a batch of documents (in parallel, without the GIL)."""
        docs = list(docs)
        for i, d in enumerate(docs):
            if not isinstance(d, str):
                raise TypeError(f"document {i} of the batch is a {type(d).__name__}; expected str")
        self._count(docs)

    def _count(self, docs: List[str]) -> None:
        if self.doc_cap is not None:
            docs = [d[: self.doc_cap] for d in docs]
        t0 = time.perf_counter()
        try:
            self._counter.update(docs, self.threads)
        except UnicodeEncodeError:
            docs = [_replace_surrogates(d) for d in docs]
            self._counter.update(docs, self.threads)
        self.stats.counting_seconds += time.perf_counter() - t0

    def update_from_iterator(
        self,
        iterator: Iterable[str],
        *,
        buffer_size: int = 8192,
        max_chars: Optional[int] = None,
        progress: bool = True,
    ) -> None:
        """Counts the spans of every document of ``iterator``, ``buffer_size`` at a time.

        Args:
            max_chars: Stop after the document that brings the total (after ``doc_cap``)
                past this many characters, as nanochat's tok_train does.
            progress: Show documents and bytes counted.

        Raises:
            TypeError: An item is not a ``str`` (the message gives its position).
        """
        if buffer_size <= 0:
            raise ValueError(f"buffer_size must be positive, got {buffer_size}")
        bar = Progress("counting", total=max_chars, unit="chars" if max_chars else "docs", enabled=progress)
        buf: List[str] = []
        chars = 0
        position = 0
        cap = self.doc_cap
        try:
            for doc in iterator:
                if not isinstance(doc, str):
                    raise TypeError(f"item {position} of the iterator is a {type(doc).__name__}; expected str")
                position += 1
                if cap is not None and len(doc) > cap:
                    doc = doc[:cap]
                buf.append(doc)
                n = len(doc)
                chars += n
                stop = max_chars is not None and chars > max_chars
                if len(buf) >= buffer_size or stop:
                    self._count(buf)
                    bar.update(sum(len(d) for d in buf) if max_chars else len(buf), MB=f"{self._counter.bytes / 1e6:.1f}")
                    buf = []
                if stop:
                    break
            if buf:
                self._count(buf)
                bar.update(sum(len(d) for d in buf) if max_chars else len(buf), MB=f"{self._counter.bytes / 1e6:.1f}")
        finally:
            bar.close(docs=f"{self._counter.documents:,}", MB=f"{self._counter.bytes / 1e6:.1f}")

    def add_span(self, span: str, count: int = 1) -> None:
        """Adds ``count`` occurrences of one already-split span."""
        self._counter.add_span(span, count)

    @property
    def documents(self) -> int:
        return self._counter.documents

    @property
    def bytes(self) -> int:
        return self._counter.bytes

    @property
    def distinct_spans(self) -> int:
        return self._counter.distinct_spans

    # ------------------------------------------------------------------ merging

    def train(
        self,
        vocab_size: int,
        *,
        special_tokens: Sequence[str] = (),
        name: str = "tokenmill",
        progress: bool = True,
    ) -> Encoding:
        """Learns ``vocab_size - 256 - len(special_tokens)`` merges and returns the encoding.

        Special tokens get the ids right after the learned tokens, in the order given.

        Raises:
            TypeError: ``vocab_size`` is not an int.
            ValueError: ``vocab_size`` leaves no room for the 256 byte tokens and the
                special tokens, a special token is empty or repeated, nothing was counted,
                or the distinct spans are too many for the merge loop to index (their ids
                and headers past 2^33 words, about 32 GiB, or one span past 2^32 - 1 bytes).
        """
        specials = list(special_tokens)
        for s in specials:
            if not isinstance(s, str) or not s:
                raise ValueError(f"special tokens must be non-empty strings, got {s!r}")
        if len(set(specials)) != len(specials):
            raise ValueError("special tokens must be distinct")
        try:
            vocab_size = operator.index(vocab_size)  # an int, a numpy integer
        except TypeError:
            raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__}") from None
        if vocab_size < 256 + len(specials):
            raise ValueError(
                f"vocab_size must be at least 256 + {len(specials)} (the byte tokens and the special tokens), got {vocab_size}"
            )
        if self._counter.distinct_spans == 0:
            raise ValueError("nothing to train on: no text was counted (the corpus is empty)")
        num_merges = vocab_size - 256 - len(specials)
        bar = Progress("merging", total=num_merges, unit="merges", enabled=progress)
        last = [0]

        def report(done: int, total: int, left: int, right: int, new_id: int, count: int) -> None:
            bar.update(done - last[0], last=f"{left}+{right}->{new_id}", count=count)
            last[0] = done

        t0 = time.perf_counter()
        try:
            merges, token_bytes = self._counter.learn_merges(num_merges, report if progress else None, self.threads)
        finally:
            bar.close()
        self.stats.merging_seconds += time.perf_counter() - t0
        self.stats.documents = self._counter.documents
        self.stats.bytes = self._counter.bytes
        self.stats.distinct_spans = self._counter.distinct_spans
        self.stats.total_spans = self._counter.total_spans
        self.stats.merges = len(merges)
        if len(merges) < num_merges:
            warnings.warn(
                f"only {len(merges)} of {num_merges} merges could be learned: no pair of tokens "
                f"occurs any more in the corpus; the vocabulary has {len(token_bytes) + len(specials)} tokens",
                stacklevel=2,
            )

        # Later duplicates of a byte string keep the later id, as in rustbpe/nanochat;
        # special ids start after the last learned id, so they never collide with one.
        ranks = {tok: i for i, tok in enumerate(token_bytes)}
        first_special = len(token_bytes)
        enc = Encoding(
            name,
            pat_str=self.pattern,
            mergeable_ranks=ranks,
            special_tokens={s: first_special + i for i, s in enumerate(specials)},
        )
        enc._merges = [tuple(m) for m in merges]  # type: ignore[attr-defined]
        return enc


def train_from_iterator(
    iterator: Iterable[str],
    vocab_size: int,
    *,
    pattern: str = DEFAULT_PATTERN,
    special_tokens: Sequence[str] = (),
    buffer_size: int = 8192,
    doc_cap: Optional[int] = None,
    max_chars: Optional[int] = None,
    progress: bool = True,
    threads: Optional[int] = None,
    name: str = "tokenmill",
) -> Encoding:
    """Trains a byte-level BPE encoding on the documents of ``iterator``.

    Args:
        iterator: Any iterable of ``str`` (a list, a generator, a dataset column, ...).
        vocab_size: Total size, counting the 256 byte tokens and the special tokens.
        pattern: A pattern name (``nanochat``, ``gpt2``/``r50k``, ``cl100k``, ``o200k``) or a regex.
        special_tokens: Appended after the learned tokens, in this order.
        buffer_size: Documents per parallel counting batch.
        doc_cap: Truncate each document to this many characters.
        max_chars: Stop reading once this many characters were counted.
        progress: Show progress bars (log lines when not on a terminal).
        threads: Threads for counting and for the largest merges (default: all cores).
        name: The encoding's name.

    Returns:
        The trained :class:`~tokenmill.Encoding` (save it with :func:`tokenmill.save`).
    """
    trainer = Trainer(pattern, threads=threads, doc_cap=doc_cap)
    trainer.update_from_iterator(iterator, buffer_size=buffer_size, max_chars=max_chars, progress=progress)
    return trainer.train(vocab_size, special_tokens=special_tokens, name=name, progress=progress)
