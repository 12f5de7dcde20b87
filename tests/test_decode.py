"""Decoding entry points compared with tiktoken: results and exception types."""

from __future__ import annotations

import array
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parity_utils import assert_same_outcome
from text_strategies import fragment_text_valid

ERRORS_MODES = ["replace", "ignore", "strict", "backslashreplace", "surrogateescape"]


_ID_TABLES: dict = {}


def _id_tables(tt):
    """(valid ids, ids whose bytes are not valid UTF-8 on their own, unknown ids in range)."""
    if tt.name not in _ID_TABLES:
        _ID_TABLES[tt.name] = _compute_id_tables(tt)
    return _ID_TABLES[tt.name]


def _compute_id_tables(tt):
    ordinary = sorted(tt._mergeable_ranks.values())
    special = sorted(tt._special_tokens.values())
    valid = sorted(set(ordinary) | set(special))
    partial = []
    for token_bytes, rank in tt._mergeable_ranks.items():
        try:
            token_bytes.decode("utf-8")
        except UnicodeDecodeError:
            partial.append(rank)
    partial.sort()
    valid_set = set(valid)
    holes = [i for i in range(tt.max_token_value + 1) if i not in valid_set]
    return valid, partial, holes


def _id_lists(tt):
    valid, partial, _ = _id_tables(tt)
    one_id = st.one_of(st.sampled_from(valid), st.sampled_from(partial))
    return st.lists(one_id, max_size=40)


def _compare_all_decoders(tm, tt, ids):
    for errors in ERRORS_MODES:
        assert_same_outcome(lambda: tm.decode(ids, errors=errors),
                            lambda: tt.decode(ids, errors=errors),
                            context=f"decode({ids}, errors={errors!r})")
    assert_same_outcome(lambda: tm.decode(ids), lambda: tt.decode(ids), context=f"decode({ids})")
    assert_same_outcome(lambda: tm.decode_bytes(ids), lambda: tt.decode_bytes(ids),
                        context=f"decode_bytes({ids})")
    assert_same_outcome(lambda: tm.decode_tokens_bytes(ids), lambda: tt.decode_tokens_bytes(ids),
                        context=f"decode_tokens_bytes({ids})")
    assert_same_outcome(lambda: tm.decode_with_offsets(ids), lambda: tt.decode_with_offsets(ids),
                        context=f"decode_with_offsets({ids})")


# ----------------------------------------------------------------------------------------
# Random id sequences (valid ids, including partial UTF-8 tokens and special tokens)
# ----------------------------------------------------------------------------------------


@given(data=st.data())
def test_hyp_decode_random_ids(encs, data):
    tm, tt = encs
    ids = data.draw(_id_lists(tt))
    _compare_all_decoders(tm, tt, ids)


@given(data=st.data())
def test_hyp_decode_batch_random_ids(encs, data):
    tm, tt = encs
    batch = data.draw(st.lists(_id_lists(tt), max_size=8))
    # tiktoken's decode_batch is, by definition, [decode(ids) for ids in batch] (raising the
    # first item's error); computing it that way avoids a thread pool per example.
    for errors in ("replace", "ignore", "strict"):
        assert_same_outcome(lambda: tm.decode_batch(batch, errors=errors),
                            lambda: [tt.decode(ids, errors=errors) for ids in batch],
                            context=f"decode_batch(errors={errors!r})")
    assert_same_outcome(lambda: tm.decode_batch(batch),
                        lambda: [tt.decode(ids) for ids in batch])
    assert_same_outcome(lambda: tm.decode_batch(batch, num_threads=1),
                        lambda: [tt.decode(ids) for ids in batch])
    assert_same_outcome(lambda: tm.decode_bytes_batch(batch),
                        lambda: [tt.decode_bytes(ids) for ids in batch])
    assert_same_outcome(lambda: tm.decode_bytes_batch(batch, num_threads=2),
                        lambda: [tt.decode_bytes(ids) for ids in batch])
    # Past 4096 ids a batch is decoded on the pool: the same lists around a long one.
    at = data.draw(st.integers(min_value=0, max_value=len(batch)))
    big = batch[:at] + [tt.encode_ordinary("Fourscore and seven years ago; " * 700)] + batch[at:]
    assert sum(map(len, big)) >= 4096
    assert_same_outcome(lambda: tm.decode_bytes_batch(big, num_threads=2),
                        lambda: [tt.decode_bytes(ids) for ids in big])


def test_decode_batch_matches_tiktoken_batch(encs):
    tm, tt = encs
    valid, partial, _ = _id_tables(tt)
    batch = [valid[i : i + 17] for i in range(0, 5000, 17)] + [partial[:5], [], partial[-3:]]
    for errors in ("replace", "ignore", "strict"):
        assert_same_outcome(lambda: tm.decode_batch(batch, errors=errors),
                            lambda: tt.decode_batch(batch, errors=errors))
    assert tm.decode_bytes_batch(batch) == tt.decode_bytes_batch(batch)


def _long_lists(tt, count=12):
    """Lists of ids long enough together (over 4,096 ids) that a batch of them is decoded
    on the pool threads, of varied lengths, with empty and one-id lists among them."""
    valid, partial, _ = _id_tables(tt)
    text = "Fourscore and seven years ago, 四十年前, ölçü 😀 — "
    lists = []
    for k in range(count):
        lists.append(tt.encode_ordinary(text * (5 + 40 * (k % 4))))
        lists.append([] if k % 3 == 0 else valid[k * 97 : k * 97 + k % 5])
    lists.append([partial[0], partial[-1]])  # invalid UTF-8 (replaced or kept as bytes)
    assert sum(map(len, lists)) >= 4096
    return lists


@pytest.mark.parametrize("num_threads", [1, 2])
def test_decode_batch_on_the_pool_matches_tiktoken(encs, num_threads):
    tm, tt = encs
    batch = _long_lists(tt)
    for errors in ("replace", "ignore", "surrogateescape"):
        assert tm.decode_batch(batch, errors=errors, num_threads=num_threads) == [
            tt.decode(ids, errors=errors) for ids in batch]
    expected = [tt.decode_bytes(ids) for ids in batch]
    assert tm.decode_bytes_batch(batch, num_threads=num_threads) == expected
    # Tuples, and many more lists than threads: the same.
    many = [tuple(ids) for ids in batch] * 25
    assert tm.decode_bytes_batch(many, num_threads=num_threads) == expected * 25


class _Ids:
    """A sequence of ids that is no list or tuple (read through the generic protocol)."""

    def __init__(self, ids):
        self.ids = ids

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return self.ids[i]


def test_decode_batch_on_the_pool_with_other_sequences_and_error_handlers(encs):
    """Lists the pool threads cannot read in place (int subclasses, other sequences) and
    error handlers of the user's are taken from the first such list on by
    the calling thread alone; the results are the same."""
    import codecs

    tm, tt = encs
    batch = _long_lists(tt)
    half = len(batch) // 2
    mixed = (batch[:half] + [np.array(batch[half], dtype=np.uint32), [_IntSubclass(i) for i in batch[1]],
             _Ids(batch[half + 1])] + batch[half + 2 :])
    plain = batch[:half] + [batch[half], batch[1], batch[half + 1]] + batch[half + 2 :]
    assert tm.decode_batch(mixed, num_threads=2) == [tt.decode(ids) for ids in plain]
    assert tm.decode_bytes_batch(mixed, num_threads=2) == [tt.decode_bytes(ids) for ids in plain]
    codecs.register_error("tokenmill_test_star", lambda e: ("*", e.end))
    assert tm.decode_batch(batch, errors="tokenmill_test_star", num_threads=2) == [
        tt.decode(ids, errors="tokenmill_test_star") for ids in batch]


def test_other_threads_run_while_a_batch_of_short_lists_is_decoded_on_one_thread(cl100k):
    """A long batch of short lists decoded on the calling thread alone lets a thread that
    waits for the GIL run every few milliseconds, as Python code would: it releases the
    GIL once it has held it for a switch interval. (Released list by list, the GIL went
    to no one: each brief release restarts a waiting thread's timeout, and the releasing
    thread takes the GIL back before the waiter wakes.) A spinning thread counts the times
    it gets the GIL back after losing it; during a batch that kept the GIL it could get it
    back only once, after the batch."""
    import threading
    import time

    tm, tt = cl100k
    distinct = [tt.encode(f"line {i}: some words, 12345") for i in range(500)]
    lists = distinct * 600  # 300,000 lists of about 10 ids: tens of milliseconds
    started = [float("inf")]
    resumed = [0]
    stop = threading.Event()

    def spin():
        last = time.perf_counter()
        while not stop.is_set():
            now = time.perf_counter()
            if now - last > 0.0005 and last > started[0]:
                resumed[0] += 1
            last = now

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    spinner = threading.Thread(target=spin)
    try:
        spinner.start()
        time.sleep(0.05)
        started[0] = time.perf_counter()
        got = tm.decode_batch(lists, num_threads=1)
        seconds = time.perf_counter() - started[0]
        resumed_during = resumed[0]
    finally:
        stop.set()
        sys.setswitchinterval(interval)
        spinner.join()
    assert got == [tt.decode(ids) for ids in distinct] * 600
    assert resumed_during >= 3, f"the spinning thread got the GIL back {resumed_during} times in {seconds * 1000:.0f} ms"


_REENTRANT_DECODE_SCRIPT = r"""
import codecs, sys
import tokenmill

enc = tokenmill.get_encoding(sys.argv[1])
text = "Fourscore and seven years ago, 四十年前 😀 " * 300
big = [enc.encode_ordinary(text)] * 8
bad = [enc.encode_single_token(b"\xe4")]   # a lone lead byte: not UTF-8 on its own
calls = []

def nested():
    calls.append(1)
    return enc.decode_batch(big, num_threads=2) == [text] * 8

class Ids:
    # A sequence whose reading calls a two-thread batch of its own.
    def __init__(self, ids):
        self.ids = ids
    def __len__(self):
        assert nested()
        return len(self.ids)
    def __getitem__(self, i):
        return self.ids[i]

def handler(e):
    assert nested()
    return ("?", e.end)

codecs.register_error("nested_batch", handler)
got = enc.decode_batch(big[:4] + [Ids(big[0])] + big[:3], num_threads=2)
assert got == [text] * 8, "sequence"
got = enc.decode_batch(big[:4] + [bad] + big[:3], errors="nested_batch", num_threads=2)
assert got == [text] * 4 + ["?"] + [text] * 3, "handler"
if sys.version_info >= (3, 12):
    import numpy as np

    class Exported(np.ndarray):
        # An array whose buffer export is Python code that calls a batch of its own:
        # not read in place (its ids come through the generic protocol instead).
        def __buffer__(self, flags):
            assert nested()
            return super().__buffer__(flags)

    arr = np.asarray(big[0], dtype=np.int64).view(Exported)
    got = enc.decode_batch(big[:4] + [arr] + big[:3], num_threads=2)
    assert got == [text] * 8, "array exported by Python code"
print("ok", len(calls) >= 2)
"""


def test_python_code_run_by_a_decoding_batch_may_start_another(cl100k):
    """Reading a list that is no list of ints or array read in place, or an error handler
    of the user's, runs Python code on the batch's calling thread; such code may decode a batch of its own
    on the same pool. Run in a child process, as a deadlock there would hold the GIL."""
    try:
        r = subprocess.run([sys.executable, "-c", _REENTRANT_DECODE_SCRIPT, cl100k.tt.name],
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("a decoding batch started from Python code run by another one hung")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ok", "True"]


@pytest.mark.parametrize("num_threads", [1, 2])
@pytest.mark.parametrize("big", [False, True], ids=["few_ids", "pool"])
def test_decode_batch_raises_the_first_failing_lists_error(encs, num_threads, big):
    """tiktoken decodes a batch list by list, so the first list that fails decides the
    exception: an id that is no token (KeyError), a list that holds no ids (TypeError), or,
    under errors="strict", bytes that are not UTF-8 (UnicodeDecodeError). Whatever the
    order of the bad lists, and whether or not the batch is decoded on the pool."""
    tm, tt = encs
    _, partial, holes = _id_tables(tt)
    bad = {"unknown": [holes[0]] if holes else [tt.max_token_value + 1], "no_ids": ["x"],
           "not_utf8": [partial[0]], "negative": [-1]}
    good = _long_lists(tt) if big else [[tt.encode_single_token("a")]] * 3
    for first in bad:
        for second in bad:
            if first == second:
                continue
            for at in (0, len(good) // 2, len(good)):
                batch = good[:at] + [bad[first]] + good[at:] + [bad[second]] + good[:2]
                ctx = f"{first} at {at}, then {second}, num_threads={num_threads}"
                assert_same_outcome(
                    lambda: tm.decode_batch(batch, errors="strict", num_threads=num_threads),
                    lambda: [tt.decode(ids, errors="strict") for ids in batch], context=ctx)
                assert_same_outcome(
                    lambda: tm.decode_bytes_batch(batch, num_threads=num_threads),
                    lambda: [tt.decode_bytes(ids) for ids in batch], context=ctx)


@given(text=fragment_text_valid)
def test_hyp_decode_with_offsets_of_encoded_text(encs, text):
    tm, tt = encs
    ids = tt.encode(text, allowed_special="all")
    assert tm.decode_with_offsets(ids) == tt.decode_with_offsets(ids)
    assert tm.decode_tokens_bytes(ids) == tt.decode_tokens_bytes(ids)
    assert tm.decode(ids) == text


# ----------------------------------------------------------------------------------------
# Sequences that split multi-byte characters
# ----------------------------------------------------------------------------------------

SPLIT_TEXTS = ["é", "中", "😀", "a中b", "😀😀", "e\u0301", "👩\u200d💻", "\U0010ffff", "\ufeff"]


@pytest.mark.parametrize("text", SPLIT_TEXTS)
def test_decode_split_multibyte(encs, text):
    tm, tt = encs
    raw = text.encode("utf-8")
    byte_ids = [tt.encode_single_token(bytes([b])) for b in raw]
    sequences = [byte_ids[:k] for k in range(len(byte_ids) + 1)]
    sequences += [byte_ids[k:] for k in range(len(byte_ids))]
    sequences += [byte_ids[1:] + byte_ids[:1], byte_ids[::-1], byte_ids[:-1] * 2]
    sequences += [byte_ids[:-1] + [tt.eot_token] + byte_ids[-1:]]
    for seq in sequences:
        _compare_all_decoders(tm, tt, seq)


def test_decode_every_partial_token(encs):
    """Each token that is not valid UTF-8 by itself, alone and followed by 'a'."""
    tm, tt = encs
    _, partial, _ = _id_tables(tt)
    a = tt.encode_single_token("a")
    for i in partial:
        for ids in ([i], [i, a], [a, i, i]):
            for errors in ("replace", "ignore", "strict"):
                assert_same_outcome(lambda: tm.decode(ids, errors=errors),
                                    lambda: tt.decode(ids, errors=errors),
                                    context=f"decode({ids}, errors={errors!r})")
    batch = [[i, a] for i in partial]
    assert tm.decode_batch(batch) == tt.decode_batch(batch)
    assert tm.decode_bytes_batch(batch) == tt.decode_bytes_batch(batch)


# ----------------------------------------------------------------------------------------
# Every token, special ids, token_byte_values
# ----------------------------------------------------------------------------------------


def test_decode_single_token_bytes_every_token(encs):
    tm, tt = encs
    valid, _, _ = _id_tables(tt)
    for i in valid:
        assert tm.decode_single_token_bytes(i) == tt.decode_single_token_bytes(i), i
    assert tm.decode_tokens_bytes(valid) == tt.decode_tokens_bytes(valid)
    assert tm.decode_bytes(valid) == tt.decode_bytes(valid)


def test_token_byte_values(encs):
    tm, tt = encs
    assert tm.token_byte_values() == tt.token_byte_values()


def test_decode_special_ids(encs):
    tm, tt = encs
    for s, i in tt._special_tokens.items():
        for ids in ([i], [i, i], [tt.encode_single_token("a"), i], [i, 0]):
            _compare_all_decoders(tm, tt, ids)
        assert tm.decode([i]) == s
        assert tm.decode_single_token_bytes(i) == s.encode()


# ----------------------------------------------------------------------------------------
# Invalid ids and wrong types: same exception type as tiktoken
# ----------------------------------------------------------------------------------------


def _bad_ids(encs):
    _, _, holes = _id_tables(encs.tt)
    n = encs.tt.max_token_value + 1
    unknown = holes[:3] + holes[-3:] + [n, n + 1, n + 1000, 2**31 - 1, 2**32 - 1]
    overflow = [-1, -(2**31), -(2**63), -(2**64), 2**32, 2**63, 2**64, 10**30]
    return unknown, overflow


def test_decode_unknown_and_out_of_range_ids(encs):
    tm, tt = encs
    unknown, overflow = _bad_ids(encs)
    good = tt.encode_single_token("a")
    for bad in unknown + overflow:
        for ids in ([bad], [good, bad], [bad, good]):
            for fn in ("decode", "decode_bytes", "decode_tokens_bytes", "decode_with_offsets"):
                assert_same_outcome(lambda: getattr(tm, fn)(ids), lambda: getattr(tt, fn)(ids),
                                    context=f"{fn}({ids})")
        assert_same_outcome(lambda: tm.decode_single_token_bytes(bad),
                            lambda: tt.decode_single_token_bytes(bad),
                            context=f"decode_single_token_bytes({bad})")
        batch = [[good], [good, bad]]
        assert_same_outcome(lambda: tm.decode_batch(batch), lambda: tt.decode_batch(batch),
                            context=f"decode_batch({batch})")
        assert_same_outcome(lambda: tm.decode_bytes_batch(batch),
                            lambda: tt.decode_bytes_batch(batch),
                            context=f"decode_bytes_batch({batch})")
    # the documented contract, independently of the comparison above
    for bad in unknown:
        with pytest.raises(KeyError):
            tm.decode([bad])
        with pytest.raises(KeyError):
            tm.decode_bytes([bad])
        with pytest.raises(KeyError):
            tm.decode_single_token_bytes(bad)


WRONG_TYPE_INPUTS = {
    "None": lambda: None,
    "str": lambda: "ab",
    "bytes": lambda: b"ab",
    "int": lambda: 5,
    "float_item": lambda: [1.5],
    "str_item": lambda: ["a"],
    "None_item": lambda: [None],
    "list_item": lambda: [[1]],
    "bytes_item": lambda: [b"x"],
    "iterator": lambda: iter([1, 2]),
    "generator": lambda: (i for i in [1, 2]),
    "dict": lambda: {1: 2},
    "set": lambda: {1, 2},
}


@pytest.mark.parametrize("make", list(WRONG_TYPE_INPUTS.values()), ids=list(WRONG_TYPE_INPUTS))
def test_decode_wrong_types(encs, make):
    tm, tt = encs
    for fn in ("decode", "decode_bytes", "decode_tokens_bytes", "decode_with_offsets"):
        assert_same_outcome(lambda: getattr(tm, fn)(make()), lambda: getattr(tt, fn)(make()),
                            context=f"{fn}({make()!r})")


@pytest.mark.parametrize("value", [1.5, "1", None, b"1"], ids=repr)
def test_decode_single_token_bytes_wrong_types(encs, value):
    tm, tt = encs
    assert_same_outcome(lambda: tm.decode_single_token_bytes(value),
                        lambda: tt.decode_single_token_bytes(value))


def test_decode_bogus_error_handler(encs):
    tm, tt = encs
    a = tt.encode_single_token("a")
    partial = _id_tables(tt)[1][0]
    for ids in ([a], [partial]):
        assert_same_outcome(lambda: tm.decode(ids, errors="no_such_handler"),
                            lambda: tt.decode(ids, errors="no_such_handler"),
                            context=f"decode({ids}, errors='no_such_handler')")


# ----------------------------------------------------------------------------------------
# Input containers: tuples, numpy arrays, empty inputs
# ----------------------------------------------------------------------------------------


def test_decode_accepts_sequences_and_numpy(encs):
    tm, tt = encs
    text = "hello world, 你好 😀"
    ids = tt.encode(text)
    arr = tt.encode_to_numpy(text)
    for value in (tuple(ids), arr, np.array(ids, dtype=np.int64), [np.uint32(i) for i in ids],
                  tm.encode_to_numpy(text), range(0, 0)):
        assert_same_outcome(lambda: tm.decode(value), lambda: tt.decode(value),
                            context=f"decode({type(value).__name__})")
        assert_same_outcome(lambda: tm.decode_bytes(value), lambda: tt.decode_bytes(value),
                            context=f"decode_bytes({type(value).__name__})")
        assert_same_outcome(lambda: tm.decode_with_offsets(value),
                            lambda: tt.decode_with_offsets(value),
                            context=f"decode_with_offsets({type(value).__name__})")
    assert tm.decode(tm.encode_to_numpy(text)) == text


_INT_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
               np.intc, np.uintc, np.longlong, np.ulonglong, np.intp, np.uintp]


def _ids_fitting(tt, dtype):
    """Valid ids, partial-UTF-8 ones among them, that the integer type can hold."""
    valid, partial, _ = _id_tables(tt)
    top = min(np.iinfo(dtype).max, tt.max_token_value)
    small = [i for i in valid if i <= top]
    return small[:: max(1, len(small) // 300)] + [i for i in partial if i <= top][:20]


def _arrays_of(ids, dtype, tmp_path):
    """The same ids in every array layout decoding reads in place: contiguous, strided,
    running backwards through memory (a negative stride), unaligned, a numpy.memmap, an
    array.array and a memoryview."""
    a = np.array(ids, dtype=dtype)
    doubled = np.repeat(a, 2)
    path = tmp_path / f"ids_{np.dtype(dtype).name}.bin"
    a.tofile(path)
    mm = np.memmap(path, dtype=dtype, mode="r", shape=a.shape) if len(ids) else a
    out = {"contiguous": a, "strided": doubled[::2], "backwards": a[::-1].copy()[::-1],
           "memmap": mm, "memoryview": memoryview(a)}
    if a.itemsize > 1:
        # items at odd addresses (a view one byte into a buffer)
        out["unaligned"] = np.frombuffer(b"\0" + a.tobytes(), dtype=dtype, offset=1)
        assert len(ids) == 0 or not out["unaligned"].flags.aligned
    code = np.dtype(dtype).char
    if code in "bBhHiIlLqQ":
        out["array.array"] = array.array(code, ids)
    return out


def test_decode_reads_integer_arrays_in_place_with_tiktokens_results(encs, tmp_path):
    """One-dimensional integer arrays (numpy of every integer type, strided and memory-
    mapped ones, array.array, memoryview) are read in place: the same strings, bytes and
    batches as tiktoken, which reads them one item at a time."""
    tm, tt = encs
    for dtype in _INT_DTYPES:
        ids = _ids_fitting(tt, dtype)
        for layout, arr in _arrays_of(ids, dtype, tmp_path).items():
            ctx = f"{np.dtype(dtype).name} {layout}"
            assert tm.decode_bytes(arr) == tt.decode_bytes(ids), ctx
            for errors in ("replace", "strict", "surrogateescape"):
                assert_same_outcome(lambda: tm.decode(arr, errors=errors), lambda: tt.decode(ids, errors=errors),
                                    context=f"decode({ctx}, errors={errors!r})")
            assert tm.decode_batch([arr, ids, arr[:0]], num_threads=2) == tt.decode_batch([ids, ids, []])
            assert tm.decode_tokens_bytes(arr) == tt.decode_tokens_bytes(ids), ctx
            assert_same_outcome(lambda: tm.decode_with_offsets(arr), lambda: tt.decode_with_offsets(ids),
                                context=f"decode_with_offsets({ctx})")
    # Pooled batches of arrays (over 4,096 ids in all) give the same results as of lists.
    batch = _long_lists(tt)
    arrays = [np.array(ids, dtype=np.uint32 if k % 2 else np.int64) for k, ids in enumerate(batch)]
    assert tm.decode_batch(arrays, num_threads=2) == [tt.decode(ids) for ids in batch]
    assert tm.decode_bytes_batch(arrays, num_threads=2) == [tt.decode_bytes(ids) for ids in batch]
    # The rows of a two-dimensional array (a batch of equal-length sequences) are views.
    rows = np.array([ids[:500] for ids in batch if len(ids) >= 500] * 4, dtype=np.int32)
    assert len(rows) >= 8
    assert tm.decode_batch(rows, num_threads=2) == tt.decode_batch(rows)


def test_decode_of_arrays_that_are_not_plain_ids_fails_or_works_as_tiktoken(encs):
    """Arrays whose items are no token ids (negative, too large, unknown), or that are not
    one-dimensional native integers (floats, bools, objects, two dimensions, no
    dimension, the other byte order): tiktoken's result or exception type, also as the
    first failing list of a batch."""
    tm, tt = encs
    good = tt.encode("hello world, 你好")
    unknown, overflow = _bad_ids(encs)
    cases = {
        "float64": np.array(good, dtype=np.float64),
        "bool": np.array([True, False, True]),
        "object": np.array(good, dtype=object),
        "2-d": np.array([good, good], dtype=np.int64),
        "0-d": np.array(good[0], dtype=np.int64),
        "int32, other byte order": np.array(good, dtype=np.dtype(np.int32).newbyteorder()),
        "uint32, other byte order": np.array(good, dtype=np.dtype(np.uint32).newbyteorder()),
        "uint16, other byte order": np.array([i for i in good if i < 2**16], dtype=np.dtype(np.uint16).newbyteorder()),
        "empty": np.array([], dtype=np.int64),
    }
    for bad in unknown + overflow:
        for dtype in (np.int64, np.uint64, np.int32, np.uint32):
            info = np.iinfo(dtype)
            if info.min <= bad <= info.max:
                cases[f"{np.dtype(dtype).name} with {bad}"] = np.array(good + [bad] + good, dtype=dtype)
    cases["int8 with -1"] = np.array([1, 2, -1], dtype=np.int8)
    cases["array.array of doubles"] = array.array("d", good)
    cases["array.array of floats"] = array.array("f", good[:3])
    cases["array.array with -1"] = array.array("q", good + [-1])
    cases["array.array with an unknown id"] = array.array("Q", good + [unknown[0]])
    cases["array.array of bytes"] = array.array("B", [i for i in good if i < 256])
    for name, arr in cases.items():
        for fn in ("decode", "decode_bytes", "decode_tokens_bytes"):
            assert_same_outcome(lambda: getattr(tm, fn)(arr), lambda: getattr(tt, fn)(arr), context=f"{fn}({name})")
        for batch in ([good, arr], [arr, good]):
            assert_same_outcome(lambda: tm.decode_bytes_batch(batch, num_threads=2),
                                lambda: tt.decode_bytes_batch(batch, num_threads=2), context=f"batch({name})")
    # In a pooled batch, the first failing array raises its error, as in tiktoken's loop.
    batch = _long_lists(tt)
    arrays = [np.array(ids, dtype=np.int64) for ids in batch]
    for bad_at, bad in ((3, -1), (len(arrays) - 2, unknown[0])):
        broken = arrays[:bad_at] + [np.array(list(batch[bad_at]) + [bad], dtype=np.int64)] + arrays[bad_at + 1 :]
        assert_same_outcome(lambda: tm.decode_batch(broken, num_threads=2), lambda: tt.decode_batch(broken),
                            context=f"pooled batch with {bad} in list {bad_at}")


class _IntSubclass(int):
    pass


class _ListSubclass(list):
    pass


def test_decode_reads_lists_and_tuples_of_ints_as_any_sequence(encs):
    """Lists and tuples of plain ints are read in place; everything else (int subclasses,
    bools, numpy scalars, list subclasses, out-of-range ints) goes through the generic
    extraction. Either way: tiktoken's bytes, or an exception of tiktoken's type."""
    tm, tt = encs
    ids = tt.encode("hello world, 你好 😀 " * 20)
    unknown, overflow = _bad_ids(encs)
    cases = {
        "list": list(ids),
        "tuple": tuple(ids),
        "int subclass": ids[:5] + [_IntSubclass(ids[5])] + ids[6:],
        "bool": [True] + ids + [False],
        "numpy scalars": ids[:3] + [np.int64(ids[3]), np.uint32(ids[4])] + ids[5:],
        "list subclass": _ListSubclass(ids),
        "largest": ids + [2**32 - 1],
    }
    for bad in overflow + unknown[:2]:
        cases[f"list with {bad}"] = ids + [bad]
        cases[f"tuple with {bad}"] = (bad,) + tuple(ids)
    for name, value in cases.items():
        for fn in ("decode", "decode_bytes", "decode_tokens_bytes"):
            assert_same_outcome(lambda: getattr(tm, fn)(value), lambda: getattr(tt, fn)(value),
                                context=f"{fn}({name})")
        batch = [list(ids), value]
        assert_same_outcome(lambda: tm.decode_bytes_batch(batch, num_threads=2),
                            lambda: tt.decode_bytes_batch(batch, num_threads=2), context=f"batch({name})")
    assert tm.decode_bytes(tuple(ids)) == tt.decode_bytes(ids)


def test_empty_inputs(encs):
    tm, tt = encs
    assert tm.decode([]) == tt.decode([]) == ""
    assert tm.decode([], errors="strict") == ""
    assert tm.decode_bytes([]) == tt.decode_bytes([]) == b""
    assert tm.decode_tokens_bytes([]) == tt.decode_tokens_bytes([]) == []
    assert tm.decode_with_offsets([]) == tt.decode_with_offsets([]) == ("", [])
    assert tm.decode_batch([]) == tt.decode_batch([]) == []
    assert tm.decode_batch([[]]) == tt.decode_batch([[]]) == [""]
    assert tm.decode_batch([[], []], num_threads=1) == ["", ""]
    assert tm.decode_bytes_batch([]) == tt.decode_bytes_batch([]) == []
    assert tm.decode_bytes_batch([[]]) == tt.decode_bytes_batch([[]]) == [b""]
    assert tm.encode_batch([]) == tt.encode_batch([]) == []
    assert tm.encode_ordinary_batch([]) == tt.encode_ordinary_batch([]) == []
    assert tm.encode_batch([""]) == tt.encode_batch([""]) == [[]]
    arr = tm.encode_to_numpy("")
    assert arr.dtype == np.uint32 and arr.shape == (0,)


def test_decode_with_offsets_values(encs):
    tm, tt = encs
    for text in ["hello world", "我非常渴望与人工智能一起工作", "😀 a 😀😀", "e\u0301e\u0301",
                 "<|endoftext|> x", "\n\n  x  ", "ab" * 50]:
        ids = tt.encode(text, allowed_special="all")
        assert tm.decode_with_offsets(ids) == tt.decode_with_offsets(ids), text
    # offsets when a token boundary splits a character: bytes of the same character
    raw_ids = [tt.encode_single_token(bytes([b])) for b in "a中😀b".encode()]
    assert_same_outcome(lambda: tm.decode_with_offsets(raw_ids),
                        lambda: tt.decode_with_offsets(raw_ids))
    # invalid UTF-8 -> tiktoken raises (UnicodeDecodeError)
    res = assert_same_outcome(lambda: tm.decode_with_offsets(raw_ids[:2]),
                              lambda: tt.decode_with_offsets(raw_ids[:2]))
    assert res[0] == "err" and isinstance(res[1], UnicodeDecodeError)
