"""Long texts, one call: from 128 KiB of UTF-8 on, `encode` and `encode_ordinary` have the
engine write the ids straight into the item array of the list they return, and
`encode_to_numpy` into the bytes object under its array; both start with room for three
ids per four bytes and grow when a text has more.

Every such text must still give tiktoken's ids, with and without special tokens, whether
its ids fit the first room or not, and the list must be an ordinary list, sized to its
ids.
"""

from __future__ import annotations

import gc
import random
import string
import sys
import tracemalloc

import numpy as np
import pytest

# The size from which the direct path is taken (`DIRECT_LIST_FROM` in src/python.rs).
DIRECT_FROM = 1 << 17

STORED = {
    "ascii": "plain words, 12345 and more words; code(x) {y}\n",
    "latin1": "café crème brûlée à la mode, ÿ and \xa0 too\n",
    "ucs2": "данные 数据 ĀāŁ ߿ࠀ and words\n",
    "ucs4": "emoji 😀😀 𝔘𝔫𝔦 中文 é and words\n",
}


def _prose(stored: str) -> str:
    line = STORED[stored]
    return line * (DIRECT_FROM // len(line.encode()) + 50)


def _dense(stored: str, rng: random.Random) -> str:
    """Text without whitespace with more ids than the list's first room (about 0.95 ids
    a byte with cl100k, 0.85 with o200k): random characters of U+0100..U+07FF, stored
    at least as wide as asked."""
    widest = {"ascii": "", "latin1": "é", "ucs2": "ł", "ucs4": "😀"}[stored]
    chars = [chr(rng.randrange(0x100, 0x800)) for _ in range(DIRECT_FROM // 2 + 2000)]
    if stored == "ascii":
        chars = rng.choices(string.ascii_letters + string.punctuation, k=DIRECT_FROM + 5000)
    elif stored == "latin1":
        chars = [chr(rng.randrange(0xA1, 0x100)) for _ in range(DIRECT_FROM // 2 + 2000)]
    return widest + "".join(chars)


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
@pytest.mark.parametrize("stored", list(STORED))
@pytest.mark.parametrize("shape", ["prose", "dense"])
def test_long_texts_give_tiktokens_ids(get_pair, name: str, stored: str, shape: str) -> None:
    tm, tt = get_pair(name)
    text = _prose(stored) if shape == "prose" else _dense(stored, random.Random(len(stored)))
    nbytes = len(text.encode())
    assert nbytes >= DIRECT_FROM
    expected = tt.encode_ordinary(text)
    if shape == "dense" and stored in ("ucs2", "ucs4"):
        # (what the case is here for: more ids than the first room)
        assert len(expected) > 0.75 * nbytes
    assert tm.encode_ordinary(text) == expected
    assert tm.encode(text) == expected
    assert tm.encode(text, allowed_special="all") == tt.encode(text, allowed_special="all")
    array = tm.encode_to_numpy(text)
    assert array.dtype == np.uint32 and array.shape == (len(expected),)
    assert array.tolist() == expected
    assert tm.encode_to_numpy(text, allowed_special="all").tolist() == tt.encode(text, allowed_special="all")


def test_a_byte_level_vocabulary_has_one_id_a_byte() -> None:
    """Every byte its own token: ids past the list's first room all along."""
    import tiktoken

    import tokenmill

    spec = dict(
        name="bytes_only",
        pat_str=r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={"<|end|>": 256},
    )
    tm, tt = tokenmill.Encoding(**spec), tiktoken.Encoding(**spec)
    text = ("héllo wörld, 数据 😀 <|end|> and more\n" * 8000)[: DIRECT_FROM + 777]
    ids = tm.encode(text, allowed_special="all")
    assert ids == tt.encode(text, allowed_special="all")
    assert tm.encode_ordinary(text) == list(text.encode()) == tt.encode_ordinary(text)
    assert tm.encode_to_numpy(text, allowed_special="all").tolist() == ids
    assert tm.decode(ids) == text


@pytest.mark.parametrize("shape", ["prose", "dense"])
def test_the_list_is_an_ordinary_list_sized_to_its_ids(cl100k, shape: str) -> None:
    tm, tt = cl100k
    text = _prose("ucs2") if shape == "prose" else _dense("ucs2", random.Random(5))
    ids = tm.encode_ordinary(text)
    expected = tt.encode_ordinary(text)
    assert type(ids) is list and ids == expected
    # No room kept beyond the ids (the first room was three places for four bytes), as
    # the list says and as its memory is: with the ints already made (above), encoding
    # the text again allocates the list and its item array, nothing else that stays.
    assert sys.getsizeof(ids) - sys.getsizeof([]) == 8 * len(ids)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        again = tm.encode_ordinary(text)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert again == expected
    assert 8 * len(again) <= grown <= 8 * len(again) + 1024
    assert gc.is_tracked(ids)
    ids.append(5)
    ids.extend([1, 2])
    ids.insert(0, 7)
    del ids[1:1001]
    assert ids == [7] + expected[1000:] + [5, 1, 2]
    ids.sort()
    assert ids == sorted([7] + expected[1000:] + [5, 1, 2])
    del ids[:]
    assert ids == []


def test_special_tokens_in_long_texts(cl100k) -> None:
    tm, tt = cl100k
    body = _prose("latin1")
    text = "<|endoftext|>" + body + "<|endoftext|>" + body + "<|fim_prefix|>"
    for allowed in ("all", {"<|endoftext|>"}):
        kwargs = dict(allowed_special=allowed, disallowed_special=())
        assert tm.encode(text, **kwargs) == tt.encode(text, **kwargs)
    # (the same exception, naming the same token; the wording is tokenmill's own)
    with pytest.raises(ValueError, match=r"disallowed special token '<\|endoftext\|>'"):
        tt.encode(text)
    with pytest.raises(ValueError, match=r"disallowed special token '<\|endoftext\|>'"):
        tm.encode(text)
    late = body + body + "<|endoftext|>"
    with pytest.raises(ValueError):
        tm.encode(late)
    with pytest.raises(ValueError, match=r"disallowed special token '<\|endoftext\|>'"):
        tm.encode_to_numpy(late)
    assert tm.encode(late, disallowed_special=()) == tt.encode(late, disallowed_special=())
    assert tm.encode_to_numpy(text, allowed_special="all").tolist() == tt.encode(text, allowed_special="all")


@pytest.mark.parametrize("at", [0, DIRECT_FROM // 2, -1])
def test_a_lone_surrogate_in_a_long_text(cl100k, at: int) -> None:
    tm, tt = cl100k
    body = _prose("ucs2")
    at = at % len(body)
    text = body[:at] + "\ud800" + body[at:]
    with pytest.raises(UnicodeEncodeError) as ours:
        tm._core_bpe.encode_ordinary(text)
    assert ours.value.start == at
    # The public calls do what tiktoken's do.
    assert tm.encode_ordinary(text) == tt.encode_ordinary(text)
    assert tm.encode(text) == tt.encode(text)
    assert tm.encode_to_numpy(text).tolist() == tt.encode(text)


def test_long_texts_from_several_threads_at_once(cl100k) -> None:
    """The engine writes into each call's own array with the GIL released, so calls from
    several threads overlap; each must get its own text's ids (those of one thread alone,
    which the tests above check against tiktoken)."""
    from concurrent.futures import ThreadPoolExecutor

    tm, _ = cl100k
    texts = [("línea %d: ¿qué tal? данные 数据 😀 " % k) * (4000 + 1000 * k) for k in range(4)]
    alone = [tm.encode_ordinary(t) for t in texts]
    order = [k % 4 for k in range(24)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda k: tm.encode_ordinary(texts[k]), order))
        arrays = list(pool.map(lambda k: tm.encode_to_numpy(texts[k]).tolist(), order))
    assert got == [alone[k] for k in order]
    assert arrays == [alone[k] for k in order]


# Code whose lines often end in punctuation and begin with `/`: o200k's pattern makes
# `}\n//` one piece (`[^\s\p{L}\p{N}]+[\r\n/]*`), so a text cut into chunks for several
# threads must not be cut between such a newline and its slash.
SLASHED = "int f(int x);\n// the next one\nstatic int y = 2;\n/* block */\nx = y;\n}\n//\nreturn;\n"


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "r50k_base", "p50k_base"])
def test_a_long_text_cut_for_threads_gives_the_whole_texts_ids(get_pair, name: str) -> None:
    tm, tt = get_pair(name)
    text = SLASHED * (3_000_000 // len(SLASHED))
    expected = tt.encode_ordinary(text)
    for threads in (2, 4):
        assert tm.encode_ordinary_batch([text], num_threads=threads)[0] == expected, threads
        assert tm.encode_batch(["a", text, "b"], num_threads=threads)[1] == expected, threads
        ids, offsets = tm.encode_batch_to_numpy([text, "c"], num_threads=threads)
        assert ids[offsets[0]:offsets[1]].tolist() == expected, threads
        assert tm.count_tokens_batch([text], num_threads=threads) == [len(expected)], threads
