"""Pathological inputs: long runs that are one piece, or none at all.

Each must encode to the same ids as tiktoken where tiktoken copes, round-trip, and never
fail: tiktoken's fancy-regex overflows its stack on 1 MB of spaces with o200k_base, which
tokenmill's pre-tokenizer does not.
"""

from __future__ import annotations

import random

import pytest

N = 200_000


def _cases() -> dict:
    rng = random.Random(7)
    return {
        "one letter": "a" * N,
        "two letters": "ab" * (N // 2),
        "spaces": " " * N,
        "newlines": "\n" * N,
        "crlf": "\r\n" * (N // 2),
        "digits": "".join(rng.choice("0123456789") for _ in range(N)),
        "no whitespace": "".join(rng.choice("abcdefghij.,;:!?-()") for _ in range(N)),
        "one CJK char": "中" * (N // 3),
        "combining marks": "e" + "\u0301" * (N // 2),
    }


@pytest.mark.parametrize("name", ["r50k_base", "cl100k_base", "o200k_base"])
@pytest.mark.parametrize("case", list(_cases()))
def test_long_runs_match_tiktoken(get_pair, name: str, case: str) -> None:
    tm, tt = get_pair(name)
    text = _cases()[case]
    ids = tm.encode_ordinary(text)
    assert tm.decode(ids) == text
    assert ids == tt.encode_ordinary(text)


def test_megabyte_of_spaces_with_o200k_does_not_fail(get_pair) -> None:
    tm, _ = get_pair("o200k_base")
    text = " " * 1_000_000
    ids = tm.encode_ordinary(text)
    assert tm.decode(ids) == text
    # Every token but the last is a run of spaces of the vocabulary's longest kind.
    assert len(set(ids[:-1])) == 1
