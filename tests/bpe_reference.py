"""A textbook byte-level BPE trainer, the oracle for tokenmill's trainer.

It recounts every adjacent pair from scratch after each merge (slow, obviously right): split
each document with the ``regex`` module, count the distinct spans, then repeatedly merge the
pair with the highest count (weighted by span count; overlapping pairs such as the two
``(a, a)`` of ``"aaa"`` both count), on equal counts the smallest ``(left, right)`` pair,
left to right and non-overlapping in every span, giving merge ``k`` the id ``256 + k``.
"""

from __future__ import annotations

import collections
from typing import Dict, Iterable, List, Optional, Tuple

import regex

Pair = Tuple[int, int]


def count_spans(docs: Iterable[str], pattern: str, doc_cap: Optional[int] = None) -> Dict[str, int]:
    """Distinct spans of ``docs`` (split with ``pattern``) and how often each occurs."""
    rx = regex.compile(pattern)
    counts: Dict[str, int] = collections.Counter()
    for doc in docs:
        if doc_cap is not None:
            doc = doc[:doc_cap]
        for m in rx.finditer(doc):
            if m.group():
                counts[m.group()] += 1
    return dict(counts)


def merge_span(ids: List[int], pair: Pair, new_id: int) -> List[int]:
    out: List[int] = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def learn_merges(span_counts: Dict[str, int], num_merges: int) -> List[Pair]:
    """Up to ``num_merges`` merges (fewer when no pair is left) for the given span counts."""
    words = [(list(s.encode("utf-8")), c) for s, c in span_counts.items()]
    merges: List[Pair] = []
    for k in range(num_merges):
        pc: Dict[Pair, int] = collections.Counter()
        for ids, c in words:
            for p in zip(ids, ids[1:]):
                pc[p] += c
        if not pc:
            break
        best = min(pc, key=lambda p: (-pc[p], p))
        new_id = 256 + k
        words = [(merge_span(ids, best, new_id), c) for ids, c in words]
        merges.append(best)
    return merges


def train(docs: Iterable[str], pattern: str, num_merges: int, doc_cap: Optional[int] = None) -> List[Pair]:
    return learn_merges(count_spans(docs, pattern, doc_cap), num_merges)


def token_bytes(merges: List[Pair]) -> List[bytes]:
    """The bytes of every token, by id."""
    toks = [bytes([b]) for b in range(256)]
    for a, b in merges:
        toks.append(toks[a] + toks[b])
    return toks


def mergeable_ranks(merges: List[Pair]) -> Dict[bytes, int]:
    """``{token bytes: id}``; a byte string made twice keeps its later id."""
    return {t: i for i, t in enumerate(token_bytes(merges))}
