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
        "one letter, odd length": "z" * (N + 7),
        "equals signs": "=" * (N + 1),
        "dashes then equals": "-" * (N // 2) + "=" * (N // 2 + 3),
        "tabs": "\t" * N,
        "three letter runs": "a" * (N // 3) + "b" * (N // 3) + "a" * (N // 3 + 1),
        "short runs then a long one": "ab" * 20 + "a" * N,
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


@pytest.mark.parametrize("name", ["r50k_base", "cl100k_base", "o200k_base"])
def test_pieces_of_few_long_runs_match_tiktoken(get_pair, name: str) -> None:
    # Long pieces made of a few runs of repeated characters (merged run by run), with run
    # lengths around powers of two, where the merge levels change.
    tm, tt = get_pair(name)
    rng = random.Random(11)
    for _ in range(40):
        alphabet = rng.choice(["ab", "xyz", "=-", "*#", "  \t", "aA", "é", "é中"])
        text = "".join(rng.choice(alphabet) * (rng.choice([1, 2, 3, 127, 128, 129, 255, 256, 1000]) + rng.randrange(3)) for _ in range(rng.randrange(1, 6)))
        assert tm.encode_ordinary(text) == tt.encode_ordinary(text), repr(text[:80])


@pytest.mark.parametrize("name", ["r50k_base", "cl100k_base", "o200k_base"])
def test_text_whose_pieces_never_repeat_then_real_text(get_pair, name: str) -> None:
    # Random characters: almost no piece repeats, so the encoder stops using its piece
    # caches for a while (a speed decision only). What it encodes meanwhile, and after it
    # uses them again, must still be tiktoken's ids, in one call or spread over calls.
    import string

    tm, tt = get_pair(name)
    rng = random.Random(11)
    noise = "".join(rng.choice(string.ascii_letters + string.punctuation) for _ in range(60_000))
    prose = (
        "The quick brown fox doesn't jump over 1234567 lazy dogs; it's been said they'll "
        "never learn.\n\tdef encode(self, text: str) -> list[int]:  # 42\n"
        "Съешь же ещё этих мягких французских булок. 今日は良い天気ですね。 Ünïcödé façade.\n"
    ) * 40
    texts = [noise, prose, noise + prose, prose + noise + prose, noise[:7_000] + prose + noise[7_000:]]
    for text in texts:
        assert tm.encode_ordinary(text) == tt.encode_ordinary(text)
    assert tm.encode_ordinary_batch(texts * 3, num_threads=2) == tt.encode_ordinary_batch(texts * 3)


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_text_whose_pieces_stop_and_start_repeating_matches_tiktoken(get_pair, name: str) -> None:
    # Real text (the piece caches answer, and the encoder looks pieces up ahead of
    # encoding them), then random text without whitespace long enough for the caches to
    # be skipped partway through a call (the pieces found ahead are then encoded without
    # the caches), then real text again: in one call, and in calls of every part.
    tm, tt = get_pair(name)
    rng = random.Random(11)
    words = "the quick brown fox jumps over the lazy dog while tokens repeat again and again".split()
    real = " ".join(rng.choice(words) for _ in range(20_000))
    noise = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ.,;:!?-()[]") for _ in range(120_000))
    for text in (real + noise + real, noise + real + noise, real[:5_000] + noise[:9_000]):
        assert tm.encode_ordinary(text) == tt.encode_ordinary(text)
    parts = (real, noise, real)
    assert [tm.encode_ordinary(p) for p in parts] == [tt.encode_ordinary(p) for p in parts]
