"""Counting tokens without making them: every count must be the length of tiktoken's ids
(or tiktoken's error) for the same call."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from parity_utils import assert_same_outcome
from text_strategies import ADVERSARIAL, any_text, fragment_text, valid_text

# Enough prose to push a batch past the size below which it is counted on the calling
# thread (4096 characters), so that the texts around it go through the pool.
POOL_FILLER = "The quick brown fox jumps over the lazy dog; 1234 naïve cafés. " * 80


def check_counts(tm, tt, text):
    """Each single-text count agrees with the length of tiktoken's ids, or its error."""
    assert tm.count_tokens_ordinary(text) == len(tt.encode_ordinary(text))
    assert tm.count_tokens(text, allowed_special="all") == len(tt.encode(text, allowed_special="all"))
    assert tm.count_tokens(text, disallowed_special=()) == len(tt.encode(text, disallowed_special=()))
    # (by default, text that looks like a special token raises tiktoken's ValueError)
    assert_same_outcome(lambda: tm.count_tokens(text), lambda: len(tt.encode(text)),
                        context="count_tokens")


@given(text=st.one_of(fragment_text, any_text))
def test_hyp_counts(encs, text):
    tm, tt = encs
    check_counts(tm, tt, text)


@pytest.mark.parametrize("text", [t for _, t in ADVERSARIAL], ids=[i for i, _ in ADVERSARIAL])
def test_adversarial_counts(encs, text):
    tm, tt = encs
    check_counts(tm, tt, text)


def test_long_text_counts(encs, corpus):
    """Texts whose ids the engine hands over many times (thousands at a time), with special
    tokens among them."""
    tm, tt = encs
    text = "".join(corpus.texts)[:1_500_000]
    assert tm.count_tokens_ordinary(text) == len(tt.encode_ordinary(text))
    marked = "<|endoftext|>".join([text[:400_000], text[400_000:800_000], ""])
    assert tm.count_tokens(marked, allowed_special="all") == len(tt.encode(marked, allowed_special="all"))
    with pytest.raises(ValueError):
        tm.count_tokens(marked)


@given(texts=st.lists(st.one_of(fragment_text, any_text), max_size=12),
       at=st.integers(min_value=0, max_value=12),
       num_threads=st.sampled_from([1, 2, 8]))
def test_hyp_batch_counts(encs, texts, at, num_threads):
    tm, tt = encs
    texts = texts[:at] + [POOL_FILLER] + texts[at:]
    assert tm.count_tokens_batch(texts, disallowed_special=(), num_threads=num_threads) == [
        len(tt.encode_ordinary(t)) for t in texts
    ]
    assert tm.count_tokens_batch(texts, allowed_special="all", num_threads=num_threads) == [
        len(tt.encode(t, allowed_special="all")) for t in texts
    ]
    assert_same_outcome(lambda: tm.count_tokens_batch(texts, num_threads=num_threads),
                        lambda: [len(ids) for ids in tt.encode_batch(texts, num_threads=num_threads)])


@given(texts=st.lists(valid_text, max_size=8))
@example(texts=["fine", "<|endoftext|>"])
def test_hyp_small_batch_counts(encs, texts):
    """Batches small enough to be counted on the calling thread. (The texts may spell a
    special token, which both must then refuse alike.)"""
    tm, tt = encs
    assert_same_outcome(lambda: tm.count_tokens_batch(texts), lambda: [len(ids) for ids in tt.encode_batch(texts)])


def test_batch_counts_files_and_one_huge_text(encs, corpus):
    """Whole files on every thread count, and one text long enough to be cut into chunks
    for all threads, between short ones."""
    tm, tt = encs
    files = corpus.texts[:200]
    want = [len(tt.encode_ordinary(t)) for t in files]
    for threads in (1, 2, 4):
        assert tm.count_tokens_batch(files, disallowed_special=(), num_threads=threads) == want
    huge = "".join(corpus.texts)[:2_000_000]
    batch = ["a", huge, "", "b c"]
    assert tm.count_tokens_batch(batch, disallowed_special=(), num_threads=4) == [
        len(tt.encode_ordinary(t)) for t in batch
    ]


def test_batch_count_errors(cl100k):
    tm, tt = cl100k
    texts = [POOL_FILLER, "fine", "a <|endoftext|> b", POOL_FILLER]
    with pytest.raises(ValueError, match="endoftext"):
        tm.count_tokens_batch(texts, num_threads=2)
    assert tm.count_tokens_batch(texts, allowed_special={"<|endoftext|>"}, num_threads=2) == [
        len(tt.encode(t, allowed_special={"<|endoftext|>"})) for t in texts
    ]
    for value in (b"hello", None, 5, ["hello"]):
        for call in (lambda: tm.count_tokens_batch(["ok", value]),
                     lambda: tm.count_tokens_batch(["ok", value], allowed_special="all"),
                     lambda: tm.count_tokens_batch([POOL_FILLER, value], disallowed_special=())):
            with pytest.raises(TypeError):
                call()
        for call in (lambda: tm.count_tokens(value), lambda: tm.count_tokens_ordinary(value)):
            with pytest.raises(TypeError):
                call()
    # Any iterable of str, as the encoding batches take.
    assert tm.count_tokens_batch(iter(["a b", "c"])) == [2, 1]
    assert tm.count_tokens_batch(("a b", "c"), disallowed_special=()) == [2, 1]
    assert tm.count_tokens_batch([]) == []


def test_counts_with_lone_surrogates(cl100k):
    """Lone surrogates are replaced by U+FFFD first, as tiktoken's encode does."""
    tm, tt = cl100k
    text = "a\ud800b \udfff" * 3
    assert tm.count_tokens_ordinary(text) == len(tt.encode_ordinary(text))
    assert tm.count_tokens(text) == len(tt.encode(text))
    assert tm.count_tokens_batch([text, "x"], num_threads=2) == [len(tt.encode(text)), 1]
    assert tm.count_tokens_batch([text], disallowed_special=()) == [len(tt.encode_ordinary(text))]
