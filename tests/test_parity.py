"""Token ids must be identical to tiktoken's, for every encode entry point."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parity_utils import assert_ids_equal, assert_same_outcome, outcome, short
from text_strategies import (
    ADVERSARIAL,
    any_text,
    fragment_text,
    fragment_text_valid,
    has_surrogate,
    tiktoken_fixup,
    valid_text,
)


def _as_list(x):
    return list(x)


def check_encode_to_numpy(tm, tt, text, **kwargs):
    """encode_to_numpy must give a 1-d uint32 array with tiktoken's ids.

    tiktoken 0.14 does not apply its lone-surrogate fix-up in encode_to_numpy (it raises
    UnicodeEncodeError); for such text we accept either that same error or the ids that
    tiktoken's encode() gives for it.
    """
    tt_res = outcome(lambda: tt.encode_to_numpy(text, **kwargs))
    tm_res = outcome(lambda: tm.encode_to_numpy(text, **kwargs))
    if tm_res[0] == "ok":
        arr = tm_res[1]
        assert isinstance(arr, np.ndarray), type(arr)
        assert arr.dtype == np.uint32, arr.dtype
        assert arr.ndim == 1
    if tt_res[0] == "err" and isinstance(tt_res[1], UnicodeEncodeError):
        if tm_res[0] == "err":
            assert isinstance(tm_res[1], UnicodeEncodeError), repr(tm_res[1])
        else:
            assert_ids_equal(tm_res[1].tolist(), tt.encode(text, **kwargs), text, tt,
                             what="encode_to_numpy")
    elif tt_res[0] == "err":
        assert tm_res[0] == "err", (
            f"tiktoken raised {tt_res[1]!r} but tokenmill returned {short(tm_res[1])}"
        )
        assert isinstance(tm_res[1], type(tt_res[1])), (tm_res[1], tt_res[1])
    else:
        if tm_res[0] == "err":
            raise AssertionError(f"tokenmill raised {tm_res[1]!r}") from tm_res[1]
        assert_ids_equal(tm_res[1].tolist(), tt_res[1].tolist(), text, tt,
                         what="encode_to_numpy")


def check_all_encoders(tm, tt, text):
    """Every single-text encode entry point agrees with tiktoken on `text`."""
    assert_ids_equal(tm.encode_ordinary(text), tt.encode_ordinary(text), text, tt,
                     what="encode_ordinary")
    assert_same_outcome(lambda: tm.encode(text), lambda: tt.encode(text),
                        normalize=_as_list, context=f"encode({short(text, 80)})")
    assert_ids_equal(tm.encode(text, allowed_special="all"),
                     tt.encode(text, allowed_special="all"), text, tt,
                     what="encode(allowed_special='all')")
    assert_ids_equal(tm.encode(text, disallowed_special=()),
                     tt.encode(text, disallowed_special=()), text, tt,
                     what="encode(disallowed_special=())")
    check_encode_to_numpy(tm, tt, text, allowed_special="all")


# ----------------------------------------------------------------------------------------
# Standard-library corpus
# ----------------------------------------------------------------------------------------


def test_corpus_encode_ordinary_whole_files(encs, corpus):
    tm, tt = encs
    for path, text in corpus.files:
        assert_ids_equal(tm.encode_ordinary(text), tt.encode_ordinary(text), text, tt,
                         what=f"encode_ordinary({path})")


def test_corpus_encode_default_whole_files(encs, corpus):
    tm, tt = encs
    for path, text in corpus.files:
        assert_same_outcome(lambda: tm.encode(text), lambda: tt.encode(text),
                            normalize=_as_list, context=f"encode({path})")


def test_corpus_encode_to_numpy_whole_files(encs, corpus):
    tm, tt = encs
    for path, text in corpus.files:
        check_encode_to_numpy(tm, tt, text)


def test_corpus_concatenated(encs, corpus):
    tm, tt = encs
    text = "".join(corpus.texts)
    assert_ids_equal(tm.encode_ordinary(text), tt.encode_ordinary(text), text, tt,
                     what="encode_ordinary(whole corpus)")


def test_corpus_per_line(encs, corpus):
    tm, tt = encs
    lines = corpus.lines
    expected = [tt.encode_ordinary(line) for line in lines]
    got = [tm.encode_ordinary(line) for line in lines]
    for line, g, e in zip(lines, got, expected):
        assert_ids_equal(g, e, line, tt, what="encode_ordinary(line)")
    # lines without their line ending
    stripped = [line.rstrip("\r\n") for line in lines[::3]]
    for line in stripped:
        assert_ids_equal(tm.encode_ordinary(line), tt.encode_ordinary(line), line, tt,
                         what="encode_ordinary(stripped line)")


def test_corpus_lines_batch(encs, corpus):
    tm, tt = encs
    lines = corpus.lines
    expected = [tt.encode_ordinary(line) for line in lines]
    got = tm.encode_ordinary_batch(lines)
    assert len(got) == len(expected)
    for line, g, e in zip(lines, got, expected):
        assert_ids_equal(g, e, line, tt, what="encode_ordinary_batch(lines)")
    got = tm.encode_batch(lines, allowed_special="all")
    for line, g, e in zip(lines, got, expected):
        # the corpus holds no special-token text, so allowing all changes nothing
        assert_ids_equal(g, tt.encode(line, allowed_special="all"), line, tt,
                         what="encode_batch(lines)")


def test_corpus_files_batch(encs, corpus):
    tm, tt = encs
    texts = corpus.texts
    expected_ordinary = [tt.encode_ordinary(t) for t in texts]
    for kwargs in ({}, {"num_threads": 1}, {"num_threads": 3}):
        got = tm.encode_ordinary_batch(texts, **kwargs)
        assert len(got) == len(texts)
        for (path, text), g, e in zip(corpus.files, got, expected_ordinary):
            assert_ids_equal(g, e, text, tt, what=f"encode_ordinary_batch({kwargs}) {path}")
    tt_outcomes = [outcome(lambda t=t: tt.encode(t)) for t in texts]
    if all(kind == "ok" for kind, _ in tt_outcomes):
        got = tm.encode_batch(texts)
        for (path, text), g, (_, e) in zip(corpus.files, got, tt_outcomes):
            assert_ids_equal(g, e, text, tt, what=f"encode_batch {path}")
    else:  # some stdlib file holds special-token text: the batch must raise like tiktoken
        assert_same_outcome(lambda: tm.encode_batch(texts), lambda: tt.encode_batch(texts))


def test_corpus_batch_matches_tiktoken_batch(encs, corpus):
    """Against tiktoken's own encode_batch / encode_ordinary_batch (small sample)."""
    tm, tt = encs
    texts = corpus.texts[:40] + corpus.docstrings[:200]
    assert tm.encode_ordinary_batch(texts) == tt.encode_ordinary_batch(texts)
    assert_same_outcome(lambda: tm.encode_batch(texts), lambda: tt.encode_batch(texts))
    assert tm.encode_batch(texts, disallowed_special=()) == tt.encode_batch(
        texts, disallowed_special=()
    )


def test_corpus_docstrings(encs, corpus):
    tm, tt = encs
    for doc in corpus.docstrings:
        assert_ids_equal(tm.encode_ordinary(doc), tt.encode_ordinary(doc), doc, tt,
                         what="encode_ordinary(docstring)")
    got = tm.encode_ordinary_batch(corpus.docstrings)
    assert got == [tt.encode_ordinary(d) for d in corpus.docstrings]


def test_corpus_roundtrip(encs, corpus):
    tm, _ = encs
    for path, text in corpus.files:
        ids = tm.encode_ordinary(text)
        assert tm.decode(ids) == text, path
        assert tm.decode_bytes(ids) == text.encode("utf-8"), path


# ----------------------------------------------------------------------------------------
# Hypothesis-generated text
# ----------------------------------------------------------------------------------------


@given(text=any_text)
def test_hyp_encode_ordinary_any_unicode(encs, text):
    tm, tt = encs
    assert_ids_equal(tm.encode_ordinary(text), tt.encode_ordinary(text), text, tt,
                     what="encode_ordinary")


@given(text=fragment_text)
def test_hyp_encode_ordinary_fragments(encs, text):
    tm, tt = encs
    assert_ids_equal(tm.encode_ordinary(text), tt.encode_ordinary(text), text, tt,
                     what="encode_ordinary")


# Prose long enough to push a batch past the size below which it is encoded on the
# calling thread (4096 characters), so that the texts around it go through the pool.
POOL_FILLER = "The quick brown fox jumps over the lazy dog; 1234 naïve cafés. " * 80


@given(texts=st.lists(st.one_of(fragment_text, any_text), max_size=12),
       at=st.integers(min_value=0, max_value=12),
       num_threads=st.sampled_from([2, 8]))
def test_hyp_batch_through_the_pool(encs, texts, at, num_threads):
    tm, tt = encs
    texts = texts[:at] + [POOL_FILLER] + texts[at:]
    assert sum(map(len, texts)) >= 4096
    assert tm.encode_ordinary_batch(texts, num_threads=num_threads) == [
        tt.encode_ordinary(t) for t in texts
    ]
    assert tm.encode_batch(texts, allowed_special="all", num_threads=num_threads) == [
        tt.encode(t, allowed_special="all") for t in texts
    ]
    assert_same_outcome(lambda: tm.encode_batch(texts, num_threads=num_threads),
                        lambda: tt.encode_batch(texts, num_threads=num_threads))


@given(text=st.one_of(fragment_text, any_text))
def test_hyp_encode_variants(encs, text):
    tm, tt = encs
    check_all_encoders(tm, tt, text)


@given(texts=st.lists(st.one_of(fragment_text, valid_text), max_size=12),
       num_threads=st.sampled_from([None, 1, 2, 8]))
def test_hyp_batch(encs, texts, num_threads):
    tm, tt = encs
    kw = {} if num_threads is None else {"num_threads": num_threads}
    assert tm.encode_ordinary_batch(texts, **kw) == [tt.encode_ordinary(t) for t in texts]
    assert tm.encode_batch(texts, allowed_special="all", **kw) == [
        tt.encode(t, allowed_special="all") for t in texts
    ]
    assert tm.encode_batch(texts, disallowed_special=(), **kw) == [
        tt.encode(t, disallowed_special=()) for t in texts
    ]
    assert_same_outcome(lambda: tm.encode_batch(texts, **kw),
                        lambda: tt.encode_batch(texts, **kw))


@given(text=st.one_of(fragment_text_valid, valid_text))
def test_hyp_roundtrip_valid_text(encs, text):
    tm, _ = encs
    for ids in (tm.encode_ordinary(text), tm.encode(text, allowed_special="all"),
                tm.encode(text, disallowed_special=())):
        assert tm.decode(ids) == text
        assert tm.decode(ids, errors="strict") == text
        assert tm.decode_bytes(ids) == text.encode("utf-8")


@given(text=st.one_of(fragment_text, any_text))
def test_hyp_surrogates_replaced_like_tiktoken(encs, text):
    tm, tt = encs
    ids = tm.encode_ordinary(text)
    assert_ids_equal(ids, tt.encode_ordinary(text), text, tt, what="encode_ordinary")
    assert tm.decode(ids) == (tiktoken_fixup(text) if has_surrogate(text) else text)


@given(data=st.binary(max_size=200))
def test_hyp_encode_bytes(encs, data):
    tm, tt = encs
    assert_ids_equal(tm._encode_bytes(data), tt._encode_bytes(data), data, tt,
                     what="_encode_bytes")
    assert tm.decode_bytes(tm._encode_bytes(data)) == data


@given(piece=st.one_of(st.binary(min_size=1, max_size=40),
                       st.text(st.characters(codec="utf-8"), min_size=1, max_size=20)))
def test_hyp_encode_single_piece(encs, piece):
    tm, tt = encs
    assert_ids_equal(tm._encode_single_piece(piece), tt._encode_single_piece(piece), piece, tt,
                     what="_encode_single_piece")


# ----------------------------------------------------------------------------------------
# Hand-picked adversarial inputs
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [t for _, t in ADVERSARIAL], ids=[i for i, _ in ADVERSARIAL])
def test_adversarial(encs, text):
    tm, tt = encs
    check_all_encoders(tm, tt, text)
    assert tm.encode_ordinary_batch([text, text[:1000]]) == [
        tt.encode_ordinary(text), tt.encode_ordinary(text[:1000])
    ]
    ids = tm.encode_ordinary(text)
    assert tm.decode(ids) == (tiktoken_fixup(text) if has_surrogate(text) else text)


@pytest.mark.parametrize(
    "prefix,suffix", [("", ""), ("x", ""), ("", "x"), (" ", " "), ("a ", "\n"), ("'", "s")]
)
def test_whitespace_combinations(encs, prefix, suffix):
    """Every combination of up to 4 whitespace characters, wrapped in a little context."""
    import itertools

    tm, tt = encs
    alphabet = [" ", "\t", "\n", "\r", "\xa0", "\u3000", "x", "1", "!"]
    texts = [
        prefix + "".join(combo) + suffix
        for n in range(1, 5)
        for combo in itertools.product(alphabet, repeat=n)
    ]
    got = tm.encode_ordinary_batch(texts)
    for text, g in zip(texts, got):
        assert_ids_equal(g, tt.encode_ordinary(text), text, tt, what="encode_ordinary")
    for text in texts[:: 7]:
        assert_ids_equal(tm.encode_ordinary(text), tt.encode_ordinary(text), text, tt,
                         what="encode_ordinary")


def _sample_code_points():
    cps = list(range(0, 0x800))  # all 1- and 2-byte characters
    cps += list(range(0x800, 0x10000, 11))  # 3-byte characters, surrogates included
    cps += list(range(0xD800, 0xE000, 64))
    cps += list(range(0x10000, 0x110000, 173))  # 4-byte characters
    cps += [0xFFFD, 0xFFFE, 0xFFFF, 0x10000, 0x10FFFF, 0x1F600, 0x212A, 0x17F]
    return cps


def test_single_characters(encs):
    tm, tt = encs
    for cp in _sample_code_points():
        ch = chr(cp)
        assert_ids_equal(tm.encode_ordinary(ch), tt.encode_ordinary(ch), ch, tt,
                         what=f"encode_ordinary(chr({cp:#x}))")
        assert_ids_equal(tm.encode(ch, allowed_special="all"),
                         tt.encode(ch, allowed_special="all"), ch, tt,
                         what=f"encode(chr({cp:#x}))")


def test_single_characters_with_context(encs):
    """Each sampled character after a space, a letter and an apostrophe, and before one."""
    tm, tt = encs
    texts = []
    for cp in _sample_code_points()[::3]:
        ch = chr(cp)
        texts += [" " + ch, "a" + ch, "'" + ch, ch + "a", ch + " ", ch * 3, "1" + ch + "2"]
    got = tm.encode_ordinary_batch(texts)
    for text, g in zip(texts, got):
        assert_ids_equal(g, tt.encode_ordinary(text), text, tt, what="encode_ordinary")


def test_all_code_points_in_blocks(encs):
    """Every code point outside the surrogates, in runs of consecutive code points."""
    tm, tt = encs
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    block = 997
    texts = ["".join(map(chr, cps[i : i + block])) for i in range(0, len(cps), block)]
    got = tm.encode_ordinary_batch(texts)
    for text, g in zip(texts, got):
        assert_ids_equal(g, tt.encode_ordinary(text), text, tt,
                         what=f"encode_ordinary(block from {ord(text[0]):#x})")
