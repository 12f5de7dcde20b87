"""The BPE trainer: merges against a from-scratch reference trainer and against rustbpe,
determinism, save/load, nanochat's doc_cap/max_chars, input validation, progress output.

Every expected merge list is computed here (by :mod:`bpe_reference` or by rustbpe), never
written down by hand.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import sys
import time
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tiktoken
import tiktoken.load
import tokenmill
from tokenmill import rustbpe as tm_rustbpe
from tokenmill.corpus import stdlib_texts
from tokenmill.patterns import NAMED_PATTERNS, NANOCHAT_PATTERN, RUSTBPE_PATTERN

import bpe_reference as ref
import rustbpe  # the reference implementation (a test dependency)


# ----------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------


def train(docs, vocab_size, **kw):
    kw.setdefault("progress", False)
    return tokenmill.train_from_iterator(docs, vocab_size, **kw)


def expected_merges(docs, num_merges, pattern="nanochat", doc_cap=None):
    return ref.train(docs, NAMED_PATTERNS.get(pattern, pattern), num_merges, doc_cap=doc_cap)


def check_against_reference(docs, num_merges, pattern="nanochat", specials=(), **kw):
    """Trains with tokenmill and with the reference; merges, ranks and specials must agree,
    and tokenmill must warn exactly when fewer merges than asked for exist."""
    want = expected_merges(docs, num_merges, pattern, doc_cap=kw.get("doc_cap"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        enc = train(docs, 256 + len(specials) + num_merges, pattern=pattern, special_tokens=list(specials), **kw)
    got = [tuple(m) for m in enc._merges]
    assert got == want, f"docs={docs!r} pattern={pattern!r}"
    assert enc._mergeable_ranks == ref.mergeable_ranks(want)
    assert enc._pat_str == NAMED_PATTERNS.get(pattern, pattern)
    first = 256 + len(want)
    assert enc._special_tokens == {s: first + i for i, s in enumerate(specials)}
    short = [w for w in caught if issubclass(w.category, UserWarning) and "merges could be learned" in str(w.message)]
    assert bool(short) == (len(want) < num_merges), [str(w.message) for w in caught]
    return enc


@functools.lru_cache(maxsize=None)
def stdlib_sample(limit_bytes: int) -> tuple:
    texts = tuple(stdlib_texts(limit_bytes))
    if sum(len(t) for t in texts) < limit_bytes // 2:
        pytest.skip("the standard library's sources are not available")
    return texts


def ranks_by_id(enc) -> list:
    return sorted(enc._mergeable_ranks.items(), key=lambda kv: kv[1])


# ----------------------------------------------------------------------------------------
# 1. the reference trainer
# ----------------------------------------------------------------------------------------


def test_reference_trainer_sanity():
    # The oracle itself: a hand-checkable case, so a broken oracle cannot pass silently.
    # "aaab" x1: pairs (a,a)=2, (a,b)=1 -> (a,a); then [aa, a, b]: (aa,a)=1, (a,b)=1 ->
    # the tie goes to the smaller pair (97, 98).
    assert ref.learn_merges({"aaab": 1}, 5) == [(97, 97), (97, 98), (256, 257)]
    assert ref.merge_span([1, 1, 1, 1, 1], (1, 1), 9) == [9, 9, 1]


@pytest.mark.parametrize(
    "docs",
    [
        # ties everywhere: every pair occurs once
        ["abcd"],
        ["dcba", "abcd", "bcda"],
        ["ab cd", "cd ab", "ef gh", "gh ef"],
        ["xy yx xy yx", "zw wz"],
        # repeated characters: overlapping pairs, runs of odd and even lengths
        ["aaaa"],
        ["aaa"],
        ["a" * 17],
        ["a" * n for n in range(1, 12)],
        [" ".join("z" * n for n in (2, 3, 4, 5, 6, 7, 8, 9, 16, 31))],
        ["abababab babababa aabbaabb"],
        ["!!!!!!! ...... ????? ---", "       ", "\n\n\n\n\n"],
        # multi-byte UTF-8: accents, CJK, emoji (4-byte, ZWJ sequences, skin tones)
        ["héllo wörld, café crème brûlée", "naïve façade déjà vu"],
        ["日本語の文章です。日本語 日本 日本語", "中文中文中文 中国"],
        ["😀😀😀 😀 👍🏽👍🏽 👩\u200d💻 👨\u200d👩\u200d👧", "🇺🇸🇯🇵🇺🇸"],
        ["éééé ééé éé é", "ààà"],
        # single-byte spans next to longer ones
        ["a b c d e f g a b c", "x y z", "ab"],
        ["1 2 3 12 123 1234 12345", "0 00 000 0000"],
        # contractions, punctuation, whitespace handling of the pattern
        ["I'm here, you're there; they'll've gone!  \n\n  It's   ok\r\n\r\nOK?"],
    ],
)
@pytest.mark.parametrize("num_merges", [1, 5, 40])
def test_matches_reference_on_small_corpora(docs, num_merges):
    check_against_reference(docs, num_merges)


@pytest.mark.parametrize("pattern", sorted(NAMED_PATTERNS) + [r"\S+|\s+", r"\w+|[^\w\s]+|\s+", r"."])
def test_matches_reference_with_every_pattern(pattern):
    docs = [
        "The quick brown fox's 12345 jumps; the QUICK fox  \n\n jumped 678 times!!",
        "héllo héllo 日本語日本語 😀😀 aaaaaaa aaaa aaa",
        "def f(x):\n    return x ** 2  # 2024-01-01\r\n",
    ]
    check_against_reference(docs, 60, pattern)


def test_matches_reference_with_weighted_counts():
    # Counts that make many different pairs tie at the same weighted count.
    docs = ["ab"] * 3 + ["cd"] * 3 + ["ba"] * 3 + ["abcd"] * 2 + ["dcba"] * 2 + ["aaaa"] * 5
    docs = [" ".join(docs[i::3]) for i in range(3)]
    check_against_reference(docs, 30)


def test_single_byte_spans_only_learn_nothing():
    # With a one-character pattern and ASCII text no span has a pair: nothing can be learned.
    with pytest.warns(UserWarning, match="merges could be learned"):
        enc = train(["abc abc", "xyz"], 300, pattern=r".")
    assert enc._merges == []
    assert enc._mergeable_ranks == {bytes([b]): b for b in range(256)}
    # ... whereas a multi-byte character is a span of several bytes, so it has pairs.
    check_against_reference(["abc é 日 😀", "é"], 10, pattern=r".")


def test_fewer_merges_than_requested_warns():
    with pytest.warns(UserWarning, match=r"only 2 of 44 merges"):
        enc = train(["abc"], 300)
    assert [tuple(m) for m in enc._merges] == expected_merges(["abc"], 44)
    assert enc.n_vocab == 258


def test_exact_number_of_merges_does_not_warn():
    docs = ["abcabc abc"]
    n = len(expected_merges(docs, 1000))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        enc = train(docs, 256 + n)
    assert len(enc._merges) == n
    with pytest.warns(UserWarning):
        train(docs, 256 + n + 1)


ALPHABET = "aab ba\n\t'sSxé日本😀👍🏽12,.!-\r"
FRAGMENTS = ["a", "ab", "é", "日本", "😀", " ", "\n", "1", "'s", "xy", "!", "aa", "\r\n", "👍🏽"]

doc_strategy = st.one_of(
    st.text(alphabet=ALPHABET, max_size=30),
    st.lists(
        st.tuples(st.sampled_from(FRAGMENTS), st.integers(1, 9)).map(lambda t: t[0] * t[1]),
        max_size=8,
    ).map("".join),
)


@settings(max_examples=70, deadline=None)
@given(
    docs=st.lists(doc_strategy, max_size=6),
    num_merges=st.integers(0, 50),
    pattern=st.sampled_from(["nanochat", "gpt2", "cl100k", "o200k", "rustbpe", r"\S+|\s+", r"."]),
    specials=st.sampled_from([(), ("<|bos|>",), ("<|a|>", "<|b|>")]),
    doc_cap=st.one_of(st.none(), st.integers(1, 20)),
    threads=st.sampled_from([1, 2]),
    buffer_size=st.sampled_from([1, 3, 8192]),
)
def test_matches_reference_on_generated_corpora(docs, num_merges, pattern, specials, doc_cap, threads, buffer_size):
    if not ref.count_spans(docs, NAMED_PATTERNS.get(pattern, pattern), doc_cap):
        with pytest.raises(ValueError, match="empty"):
            train(docs, 256 + len(specials) + num_merges, pattern=pattern, doc_cap=doc_cap)
        return
    check_against_reference(
        docs, num_merges, pattern, specials, doc_cap=doc_cap, threads=threads, buffer_size=buffer_size
    )


@settings(max_examples=30, deadline=None)
@given(
    spans=st.dictionaries(st.text(alphabet="abcé日 ", min_size=1, max_size=8), st.integers(1, 1000), max_size=12),
    num_merges=st.integers(1, 40),
)
def test_add_span_matches_reference(spans, num_merges):
    # add_span feeds pre-split spans with counts, bypassing the pattern.
    trainer = tokenmill.Trainer()
    for s, c in spans.items():
        trainer.add_span(s, c)
    if not spans:
        with pytest.raises(ValueError):
            trainer.train(300, progress=False)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        enc = trainer.train(256 + num_merges, progress=False)
    assert [tuple(m) for m in enc._merges] == ref.learn_merges(spans, num_merges)
    assert trainer.distinct_spans == len(spans)


# ----------------------------------------------------------------------------------------
# 2. the same merges as rustbpe on real text
# ----------------------------------------------------------------------------------------

RUSTBPE_BYTES = 3_000_000


@pytest.fixture(scope="module")
def real_text():
    return list(stdlib_sample(RUSTBPE_BYTES))


def _rustbpe_ranks(tok):
    return [(bytes(t), int(i)) for t, i in tok.get_mergeable_ranks()]


@pytest.mark.parametrize(
    "vocab_size, pattern",
    [(512, None), (2048, None), (1024, NANOCHAT_PATTERN)],
    ids=["512-default", "2048-default", "1024-nanochat"],
)
def test_same_merges_as_rustbpe(real_text, vocab_size, pattern):
    kw = {} if pattern is None else {"pattern": pattern}
    theirs = rustbpe.Tokenizer()
    theirs.train_from_iterator(iter(real_text), vocab_size=vocab_size, **kw)
    want = _rustbpe_ranks(theirs)
    assert len(want) == vocab_size

    ours = tm_rustbpe.Tokenizer()
    ours.train_from_iterator(iter(real_text), vocab_size=vocab_size, **kw)
    got = ours.get_mergeable_ranks()
    assert len(got) == len(want)
    first_diff = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    assert got == want, f"first difference at id {first_diff}: tokenmill {got[first_diff]!r}, rustbpe {want[first_diff]!r}"
    assert ours.get_pattern() == theirs.get_pattern()
    assert ours.vocab_size == theirs.vocab_size == vocab_size

    enc = train(iter(real_text), vocab_size, pattern="rustbpe" if pattern is None else pattern)
    assert enc._mergeable_ranks == dict(want)
    if pattern is None:
        assert theirs.get_pattern() == RUSTBPE_PATTERN


@pytest.fixture(scope="module")
def trained_pair(real_text):
    texts = real_text[:40]
    theirs, ours = rustbpe.Tokenizer(), tm_rustbpe.Tokenizer()
    theirs.train_from_iterator(iter(texts), vocab_size=700)
    ours.train_from_iterator(iter(texts), vocab_size=700)
    return theirs, ours


def test_untrained_rustbpe_tokenizer_looks_the_same():
    theirs, ours = rustbpe.Tokenizer(), tm_rustbpe.Tokenizer()
    assert ours.get_pattern() == theirs.get_pattern()
    assert ours.vocab_size == theirs.vocab_size


def test_untrained_rustbpe_tokenizer_has_the_byte_tokens():
    # rustbpe's untrained Tokenizer already lists the 256 byte tokens.
    theirs, ours = rustbpe.Tokenizer(), tm_rustbpe.Tokenizer()
    assert ours.get_mergeable_ranks() == _rustbpe_ranks(theirs)


def test_rustbpe_tokenizer_signatures_match():
    import inspect

    for name in ("train_from_iterator", "encode", "decode", "batch_encode", "get_pattern", "get_mergeable_ranks"):
        sig = getattr(rustbpe.Tokenizer, name).__text_signature__
        want = [p.strip().split("=")[0].lstrip("$") for p in sig.strip("()").split(",")]
        got = list(inspect.signature(getattr(tm_rustbpe.Tokenizer, name)).parameters)
        assert got == want, name


@pytest.mark.filterwarnings("ignore:only .* merges could be learned")
@pytest.mark.parametrize("docs, vocab_size", [(["abc"], 300), ([], 300), ([""], 300), (["aaaa bbbb"], 257), (["x"], 256)])
def test_rustbpe_tokenizer_on_tiny_corpora(docs, vocab_size):
    theirs, ours = rustbpe.Tokenizer(), tm_rustbpe.Tokenizer()
    theirs.train_from_iterator(iter(docs), vocab_size)
    ours.train_from_iterator(iter(docs), vocab_size)
    assert ours.get_mergeable_ranks() == _rustbpe_ranks(theirs)
    assert ours.vocab_size == theirs.vocab_size
    assert ours.get_pattern() == theirs.get_pattern()
    assert ours.encode("abc aaaa") == theirs.encode("abc aaaa")


def test_rustbpe_tokenizer_behaves_the_same(trained_pair, real_text):
    theirs, ours = trained_pair
    assert ours.get_pattern() == theirs.get_pattern()
    assert ours.vocab_size == theirs.vocab_size == 700
    assert ours.get_mergeable_ranks() == _rustbpe_ranks(theirs)
    samples = [
        "",
        "hello world",
        "def train_from_iterator(self, iterator):\n    return None\n",
        "héllo wörld 日本語 😀👍🏽 I'm 12345 tokens!!\r\n\r\n  x",
        real_text[50][:5000],
        real_text[51][:5000],
    ]
    for s in samples:
        ids = ours.encode(s)
        assert ids == theirs.encode(s), s[:80]
        assert ours.decode(ids) == theirs.decode(ids) == s
    assert ours.batch_encode(samples) == theirs.batch_encode(samples)
    assert ours.batch_encode(samples) == [ours.encode(s) for s in samples]


def test_rustbpe_tokenizer_buffer_size_and_pattern_are_honoured(real_text):
    texts = real_text[:30]
    theirs, ours = rustbpe.Tokenizer(), tm_rustbpe.Tokenizer()
    theirs.train_from_iterator(iter(texts), vocab_size=400, buffer_size=3, pattern=r"\S+|\s+")
    ours.train_from_iterator(iter(texts), vocab_size=400, buffer_size=3, pattern=r"\S+|\s+")
    assert ours.get_pattern() == theirs.get_pattern() == r"\S+|\s+"
    assert ours.get_mergeable_ranks() == _rustbpe_ranks(theirs)


# ----------------------------------------------------------------------------------------
# 3. determinism
# ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def det_text():
    return list(stdlib_sample(800_000))


@pytest.fixture(scope="module")
def det_baseline(det_text):
    return train(det_text, 1200, threads=1, buffer_size=8192)._merges


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_same_merges_whatever_the_thread_count(det_text, det_baseline, threads):
    assert train(det_text, 1200, threads=threads)._merges == det_baseline


def test_merges_split_over_threads_match_the_reference():
    """Merges found in thousands of distinct spans are split over the threads (the stdlib
    sample above has none that large): the merges are the reference's and the same on any
    number of threads."""
    import random

    rng = random.Random(5)
    words = {" " + "".join(rng.choice("abcdef") for _ in range(rng.randint(3, 7))) for _ in range(20_000)}
    docs = ["".join(w * rng.randint(1, 3) for w in sorted(words)[i : i + 50]) for i in range(0, len(words), 50)]
    one = train(docs, 256 + 300, threads=1)._merges
    assert one[:40] == expected_merges(docs, 40)
    for threads in (2, 3):
        assert train(docs, 256 + 300, threads=threads)._merges == one


@pytest.mark.parametrize("buffer_size", [1, 7, 8192])
def test_same_merges_whatever_the_buffer_size(det_text, det_baseline, buffer_size):
    assert train(iter(det_text), 1200, buffer_size=buffer_size, threads=2)._merges == det_baseline


def test_same_merges_with_several_updates(det_text, det_baseline):
    trainer = tokenmill.Trainer(threads=2)
    for i in range(0, len(det_text), 13):
        trainer.update(det_text[i : i + 13])
    enc = trainer.train(1200, progress=False)
    assert enc._merges == det_baseline

    # Mixed: some batches by update, the rest by update_from_iterator.
    trainer = tokenmill.Trainer(threads=1)
    trainer.update(det_text[:5])
    trainer.update_from_iterator(iter(det_text[5:]), buffer_size=9, progress=False)
    assert trainer.train(1200, progress=False)._merges == det_baseline
    assert trainer.documents == len(det_text)
    assert trainer.bytes == sum(len(t.encode("utf-8")) for t in det_text)


def test_same_merges_whatever_the_document_order(det_text, det_baseline):
    assert train(list(reversed(det_text)), 1200, threads=2)._merges == det_baseline


def test_repeated_training_is_identical(det_text):
    a = train(det_text[:60], 600)
    b = train(det_text[:60], 600)
    assert a._merges == b._merges and a._mergeable_ranks == b._mergeable_ranks
    # One trainer trained twice gives the same result (training does not consume the counts).
    trainer = tokenmill.Trainer()
    trainer.update(det_text[:60])
    assert trainer.train(600, progress=False)._merges == a._merges
    assert trainer.train(600, progress=False)._merges == a._merges
    # A smaller vocabulary is a prefix of a larger one.
    assert trainer.train(400, progress=False)._merges == a._merges[:144]


def test_documents_of_every_storage_width_and_lone_surrogates():
    """CPython stores a str as ASCII, Latin-1, UCS-2 or UCS-4; counting reads each
    correctly, and lone surrogates are replaced by U+FFFD first, as in encoding."""
    docs = ["plain ascii words and more words", "café crème brûlée café", "日本語の文 日本語",
            "emoji 😀😀 emoji", "caf\udce9 au lait", "lone \ud800 high"] * 3
    fixed = [d.encode("utf-16", "surrogatepass").decode("utf-16", "replace") for d in docs]
    trained = train(docs, 290, threads=2)
    assert trained._merges == train(fixed, 290, threads=1)._merges
    assert trained._merges == expected_merges(fixed, 290 - 256)


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "win32", reason="needs POSIX fork")
def test_training_in_a_forked_child(det_text, det_baseline):
    """A child forked after the parent trained has none of the parent's pool threads:
    counting and the sort of the spans must not wait for them. The child gets a deadline,
    so that a regression fails here rather than hanging the run."""
    assert train(det_text, 1200, threads=2)._merges == det_baseline  # pools exist now
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads, 3.12+
        pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            code = 0 if train(det_text, 1200, threads=2)._merges == det_baseline else 2
        except BaseException:  # noqa: BLE001
            code = 3
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("training in the forked child did not finish in 60 s")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0


# ----------------------------------------------------------------------------------------
# 4. save / load, special tokens, parity of the trained vocabulary with tiktoken
# ----------------------------------------------------------------------------------------

SPECIALS = ["<|bos|>", "<|user_start|>", "<|user_end|>"]


@pytest.fixture(scope="module")
def trained(det_text):
    return train(det_text, 1000, special_tokens=SPECIALS, name="tm-test")


def test_special_tokens_follow_the_learned_tokens(trained):
    assert trained.n_vocab == 1000
    assert len(trained._merges) == 1000 - 256 - len(SPECIALS)
    assert trained._special_tokens == {s: 997 + i for i, s in enumerate(SPECIALS)}
    assert max(trained._mergeable_ranks.values()) == 996
    assert trained.name == "tm-test"
    assert trained.encode("<|user_start|>hi<|user_end|>", allowed_special="all")[0] == 998
    assert trained.encode("<|user_start|>hi<|user_end|>", allowed_special="all")[-1] == 999


def test_special_tokens_change_nothing_but_the_merge_count(det_text, trained):
    plain = train(det_text, 1000 - len(SPECIALS))
    assert plain._merges == trained._merges
    assert plain._mergeable_ranks == trained._mergeable_ranks


def test_save_load_roundtrip(trained, det_text, tmp_path):
    out = tokenmill.save(trained, tmp_path / "enc")
    assert (out / "tokenizer.tiktoken").is_file() and (out / "tokenmill.json").is_file()
    loaded = tokenmill.load(out)
    assert loaded._mergeable_ranks == trained._mergeable_ranks
    assert loaded._special_tokens == trained._special_tokens
    assert loaded._pat_str == trained._pat_str == NANOCHAT_PATTERN
    assert loaded.name == trained.name == "tm-test"
    assert [tuple(m) for m in loaded._merges] == [tuple(m) for m in trained._merges]
    assert loaded.n_vocab == trained.n_vocab
    text = "\n".join(det_text[:5]) + "<|bos|> héllo 日本語 😀"
    assert loaded.encode(text, allowed_special="all") == trained.encode(text, allowed_special="all")
    assert loaded.encode_ordinary_batch(det_text[:20]) == trained.encode_ordinary_batch(det_text[:20])
    # The ranks file is in tiktoken's own format.
    assert tiktoken.load.load_tiktoken_bpe(str(out / "tokenizer.tiktoken")) == trained._mergeable_ranks
    # Saving again over the same directory works and still loads.
    tokenmill.save(loaded, out)
    assert tokenmill.load(str(out))._mergeable_ranks == trained._mergeable_ranks


def test_save_load_roundtrip_with_custom_pattern(tmp_path):
    pattern = r"\S+|\s+"
    docs = ["héllo héllo wörld wörld", "aaaa aaaa"]
    enc = train(docs, 266, pattern=pattern, name="custom")
    loaded = tokenmill.load(tokenmill.save(enc, tmp_path))
    assert loaded._pat_str == pattern
    assert [tuple(m) for m in loaded._merges] == expected_merges(docs, 10, pattern)
    assert loaded.encode("héllo aaaa") == enc.encode("héllo aaaa")


def test_load_rejects_a_directory_that_is_not_a_saved_encoding(tmp_path):
    with pytest.raises(FileNotFoundError):
        tokenmill.load(tmp_path)


def test_trained_vocabulary_gives_tiktoken_ids(trained, real_text):
    tt = tiktoken.Encoding(
        "tm-test",
        pat_str=trained._pat_str,
        mergeable_ranks=trained._mergeable_ranks,
        special_tokens=trained._special_tokens,
    )
    sample = real_text[100:160]
    assert trained.encode_ordinary_batch(sample) == tt.encode_ordinary_batch(sample)
    for text in sample[:10]:
        assert trained.encode(text) == tt.encode(text)
    special_text = "<|bos|>héllo<|user_start|> 日本語 😀 I'm\r\n\r\n <|user_end|><|user_end|>x<|bos"
    got = trained.encode(special_text, allowed_special="all")
    assert got == tt.encode(special_text, allowed_special="all")
    assert trained.decode(got) == special_text
    with pytest.raises(ValueError):
        trained.encode(special_text)
    with pytest.raises(ValueError):
        tt.encode(special_text)


# ----------------------------------------------------------------------------------------
# 5. doc_cap and max_chars, as in nanochat's tok_train
# ----------------------------------------------------------------------------------------


def test_doc_cap_truncates_each_document():
    docs = ["é" * 100, "abc", "x" * 10]
    trainer = tokenmill.Trainer(doc_cap=7)
    trainer.update_from_iterator(docs, progress=False)
    assert trainer.documents == 3
    assert trainer.bytes == 7 * 2 + 3 + 7
    trainer.update(["日" * 9])  # update() applies the cap too
    assert trainer.bytes == 7 * 2 + 3 + 7 + 7 * 3
    check_against_reference(["héllo wörld " * 5, "ab" * 40, "日本語" * 7], 20, doc_cap=13)


@pytest.mark.parametrize(
    "max_chars, n_docs",
    [(0, 1), (9, 1), (10, 2), (25, 3), (29, 3), (30, 4), (39, 4), (40, 5), (10**9, 5)],
)
def test_max_chars_stops_after_the_document_that_passes_it(max_chars, n_docs):
    docs = ["é" * 10] * 5  # 10 characters, 20 bytes each: max_chars counts characters
    it = iter(docs)
    trainer = tokenmill.Trainer()
    trainer.update_from_iterator(it, max_chars=max_chars, progress=False)
    assert trainer.documents == n_docs
    assert trainer.bytes == 20 * n_docs
    assert len(list(it)) == len(docs) - n_docs  # nothing read past the stopping document


@pytest.mark.filterwarnings("ignore:only .* merges could be learned")
@pytest.mark.parametrize("doc_cap, max_chars", [(4, 10), (4, 12), (7, 20), (100, 25)])
def test_max_chars_counts_characters_after_doc_cap(doc_cap, max_chars):
    docs = ["abcdefghij", "klmnopqrst", "uvwxyzabcd", "efghijklmn", "opqrstuvwx", "yz"]
    # nanochat: truncate to doc_cap, add the length, yield, stop once the total > max_chars.
    taken, total = [], 0
    for d in docs:
        d = d[:doc_cap]
        taken.append(d)
        total += len(d)
        if total > max_chars:
            break
    trainer = tokenmill.Trainer(doc_cap=doc_cap)
    trainer.update_from_iterator(docs, max_chars=max_chars, buffer_size=2, progress=False)
    assert trainer.documents == len(taken)
    assert trainer.bytes == sum(len(d) for d in taken)
    enc = train(docs, 280, doc_cap=doc_cap, max_chars=max_chars)
    assert [tuple(m) for m in enc._merges] == ref.train(taken, NANOCHAT_PATTERN, 24)


def test_invalid_doc_cap_threads_buffer_size():
    with pytest.raises(ValueError):
        tokenmill.Trainer(doc_cap=0)
    with pytest.raises(ValueError):
        tokenmill.Trainer(threads=0)
    with pytest.raises(ValueError):
        train(["abc"], 300, buffer_size=0)


# ----------------------------------------------------------------------------------------
# 6. bad input
# ----------------------------------------------------------------------------------------


def test_non_str_item_from_a_generator_names_its_position():
    def gen():
        yield "first document"
        yield "second"
        yield "third"
        yield b"bytes are not text"
        yield "fifth"

    with pytest.raises(TypeError, match=r"\b3\b") as ei:
        train(gen(), 300)
    assert "bytes" in str(ei.value)
    with pytest.raises(TypeError, match=r"\b0\b"):
        train(iter([None, "x"]), 300)
    with pytest.raises(TypeError, match=r"\b2\b"):
        train(["a", "b", 7], 300, buffer_size=1)


def test_non_str_item_in_update_names_its_position():
    trainer = tokenmill.Trainer()
    with pytest.raises(TypeError, match=r"\b2\b") as ei:
        trainer.update(["ok", "fine", 3.5, "never"])
    assert "float" in str(ei.value)
    assert trainer.documents == 0  # the batch was rejected as a whole
    with pytest.raises(TypeError, match=r"\b0\b"):
        trainer.update([b"abc"])


@pytest.mark.parametrize("specials", [[], ["<|a|>"], ["<|a|>", "<|b|>", "<|c|>"]])
def test_vocab_size_must_hold_bytes_and_specials(specials):
    docs = ["hello hello world"]
    too_small = 255 + len(specials)
    with pytest.raises(ValueError, match="vocab_size"):
        train(docs, too_small, special_tokens=specials)
    with pytest.raises(ValueError):
        train(docs, 100, special_tokens=specials)
    enc = train(docs, 256 + len(specials), special_tokens=specials)  # room for no merge
    assert enc._merges == []
    assert enc.n_vocab == 256 + len(specials)


def test_vocab_size_must_be_an_int():
    np = pytest.importorskip("numpy")
    docs = ["hello hello world"]
    for bad in (300.0, 300.5, "300", None):
        with pytest.raises(TypeError, match="vocab_size must be an int"):
            train(docs, bad)
    assert train(docs, np.int64(258)).n_vocab == train(docs, 258).n_vocab == 258


def test_bad_special_tokens():
    with pytest.raises(ValueError):
        train(["abc"], 300, special_tokens=["<|a|>", "<|a|>"])
    with pytest.raises(ValueError):
        train(["abc"], 300, special_tokens=[""])


@pytest.mark.parametrize("pattern", ["(unclosed", "[a-", r"\p{NoSuchProperty}+", "*a", "a)", "\\"])
def test_invalid_pattern_is_a_value_error(pattern):
    with pytest.raises(ValueError, match="pattern"):
        tokenmill.Trainer(pattern)
    with pytest.raises(ValueError, match="pattern"):
        train(["some text"], 300, pattern=pattern)
    with pytest.raises(ValueError):
        tm_rustbpe.Tokenizer().train_from_iterator(["some text"], 300, pattern=pattern)


@pytest.mark.parametrize("docs", [[], [""], ["", "", ""]])
def test_empty_corpus_is_a_value_error(docs):
    with pytest.raises(ValueError, match="empty"):
        train(iter(docs), 300)
    trainer = tokenmill.Trainer()
    trainer.update(docs)
    with pytest.raises(ValueError):
        trainer.train(300, progress=False)


def test_pattern_that_matches_nothing_is_an_empty_corpus():
    with pytest.raises(ValueError):
        train(["abc def"], 300, pattern=r"\d+")


# ----------------------------------------------------------------------------------------
# 9. progress output
# ----------------------------------------------------------------------------------------


def test_progress_writes_log_lines_off_a_terminal(capsys, det_text):
    train(det_text[:40], 800, progress=True)
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    merging = [ln for ln in lines if re.match(r"tokenmill: merging: +\d+% ", ln)]
    assert merging, err[:2000]
    pcts = [int(re.match(r"tokenmill: merging: +(\d+)%", ln).group(1)) for ln in merging]
    assert pcts == sorted(pcts) and pcts[-1] == 100
    assert any(ln.startswith("tokenmill: counting:") for ln in lines)
    assert "\r" not in err  # plain log lines, no progress-bar redraws


def test_no_progress_writes_nothing(capsys, det_text):
    train(det_text[:40], 800, progress=False)
    trainer = tokenmill.Trainer()
    trainer.update_from_iterator(det_text[:40], progress=False, max_chars=10_000)
    trainer.train(400, progress=False)
    assert capsys.readouterr() == ("", "")


def _span_counter():
    counter = tokenmill._core.SpanCounter(r"\w+|\s+")
    counter.update(["hello world " * 1000 + " ".join(f"w{i}x{i * 7}" for i in range(3000))], 1)
    return counter


def test_an_exception_from_the_progress_callback_ends_the_merge_loop_as_itself():
    """The merge loop calls its progress callback with the GIL taken back; an exception the
    callback raises stops the loop at once and comes out of ``learn_merges`` unchanged."""
    calls = []

    class Stop(Exception):
        pass

    def progress(*args):
        calls.append(args)
        if len(calls) == 3:
            raise Stop("enough")

    with pytest.raises(Stop, match="enough"):
        _span_counter().learn_merges(200, progress, 1)
    assert len(calls) == 3
    # Without the exception the same loop goes on to the end.
    merges, _ = _span_counter().learn_merges(200, lambda *a: None, 1)
    assert len(merges) == 200


def test_ctrl_c_during_the_merge_loop_raises_keyboard_interrupt():
    """Signal handlers run each time the loop takes the GIL back: a Ctrl-C that arrives
    during training stops it there."""
    import _thread

    calls = []

    def progress(*args):
        calls.append(args)
        if len(calls) == 2:
            _thread.interrupt_main()  # as a Ctrl-C arriving now

    with pytest.raises(KeyboardInterrupt):
        _span_counter().learn_merges(200, progress, 1)
    assert len(calls) == 2
