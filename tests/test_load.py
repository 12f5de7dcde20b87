"""Tests of tokenmill.load: the download cache, the .tiktoken parser/writer, GPT-2's files.

Nothing here touches the network: ``urllib.request.urlopen`` is replaced for every test, either
by a fake server or by a guard that fails the test.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import socket
import stat
import sys
import tempfile
import urllib.error
import urllib.request

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenmill.load as tm_load
from tokenmill import _core
from tokenmill.load import (
    VocabularyFormatError,
    VocabularyNotAvailableError,
    cache_dir,
    cache_path_for,
    data_gym_to_mergeable_bpe_ranks,
    dump_tiktoken_bpe,
    load_tiktoken_bpe,
    parse_tiktoken_bpe,
    read_cached_copy,
    read_file,
    read_file_cached,
)

# The folder holding the real pretrained vocabularies, captured before any test changes the
# environment.
REAL_CACHE_DIR = os.environ.get("TIKTOKEN_CACHE_DIR")

BLOB = "https://openaipublic.blob.core.windows.net/encodings/"
REAL_FILES = {
    "r50k_base": "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    "p50k_base": "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}

FAKE_URL = "https://vocab.example.invalid/encodings/tiny.tiktoken"
TINY_RANKS = {b"a": 0, b"b": 1, b"ab": 2, b" ": 3, b"\x00\xff": 4}


def sha1(s: str) -> str:
    return hashlib.sha1(s.encode()).hexdigest()


def sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def tiny_file_bytes() -> bytes:
    return b"".join(
        base64.b64encode(t) + b" " + str(r).encode() + b"\n"
        for t, r in sorted(TINY_RANKS.items(), key=lambda kv: kv[1])
    )


class FakeResponse(io.BytesIO):
    """Just enough of an http.client.HTTPResponse for tokenmill.load."""

    def __init__(self, data: bytes, content_length: int | None = None):
        super().__init__(data)
        length = len(data) if content_length is None else content_length
        self.headers = {"Content-Length": str(length)}


class FakeServer:
    """Stands in for urllib.request.urlopen and records the requests made."""

    def __init__(self, responses: dict[str, bytes] | None = None, error: Exception | None = None,
                 content_length: int | None = None):
        self.responses = responses or {}
        self.error = error
        self.content_length = content_length
        self.requests: list[tuple[str, float | None]] = []

    def __call__(self, request, timeout=None):
        url = request.full_url if isinstance(request, urllib.request.Request) else request
        self.requests.append((url, timeout))
        if self.error is not None:
            raise self.error
        if url not in self.responses:
            raise urllib.error.HTTPError(url, 404, "Not Found", {}, None)
        return FakeResponse(self.responses[url], self.content_length)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Fail any test that tries to reach the network; start from a clean environment."""

    def refuse(request, *args, **kwargs):
        url = getattr(request, "full_url", request)
        raise AssertionError(f"test tried to open {url}")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR", "TOKENMILL_OFFLINE",
                "TOKENMILL_DOWNLOAD_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh, user-specified cache folder."""
    folder = tmp_path / "cache"
    folder.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def server(monkeypatch):
    fake = FakeServer()
    monkeypatch.setattr(urllib.request, "urlopen", fake)
    return fake


# ---------------------------------------------------------------------------------------------
# Cache location and naming
# ---------------------------------------------------------------------------------------------


def test_cache_file_is_named_by_sha1_of_url(cache, monkeypatch):
    data = tiny_file_bytes()
    (cache / sha1(FAKE_URL)).write_bytes(data)
    monkeypatch.setenv("TOKENMILL_OFFLINE", "1")

    assert cache_path_for(FAKE_URL) == os.path.join(str(cache), sha1(FAKE_URL))
    assert read_file_cached(FAKE_URL) == data
    assert read_file_cached(FAKE_URL, expected_hash=sha256(data)) == data
    assert read_cached_copy(FAKE_URL, sha256(data)) == data
    assert load_tiktoken_bpe(FAKE_URL, expected_hash=sha256(data)) == TINY_RANKS


def test_cache_hit_needs_no_network_even_when_online(cache):
    data = tiny_file_bytes()
    (cache / sha1(FAKE_URL)).write_bytes(data)
    # the autouse guard fails the test if a download is attempted
    assert read_file_cached(FAKE_URL, expected_hash=sha256(data)) == data


def test_expected_hash_is_case_insensitive(cache):
    data = tiny_file_bytes()
    (cache / sha1(FAKE_URL)).write_bytes(data)
    assert read_file_cached(FAKE_URL, expected_hash=sha256(data).upper()) == data


def test_data_gym_cache_dir_is_the_fallback(tmp_path, monkeypatch):
    folder = tmp_path / "dg"
    folder.mkdir()
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(folder))
    monkeypatch.setenv("TOKENMILL_OFFLINE", "1")
    data = tiny_file_bytes()
    (folder / sha1(FAKE_URL)).write_bytes(data)
    assert cache_dir() == str(folder)
    assert read_file_cached(FAKE_URL, sha256(data)) == data


def test_tiktoken_cache_dir_takes_precedence(tmp_path, monkeypatch):
    first, second = tmp_path / "tk", tmp_path / "dg"
    first.mkdir()
    second.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(first))
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(second))
    monkeypatch.setenv("TOKENMILL_OFFLINE", "1")
    (first / sha1(FAKE_URL)).write_bytes(b"first")
    (second / sha1(FAKE_URL)).write_bytes(b"second")
    assert cache_dir() == str(first)
    assert read_file_cached(FAKE_URL) == b"first"


def test_default_cache_dir_is_in_the_temp_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert cache_dir() == os.path.join(str(tmp_path), "data-gym-cache")
    assert cache_path_for(FAKE_URL) == os.path.join(str(tmp_path), "data-gym-cache", sha1(FAKE_URL))


def test_empty_cache_dir_disables_caching(tmp_path, monkeypatch, server):
    other = tmp_path / "dg"
    other.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(other))  # must not be consulted
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    data = tiny_file_bytes()
    (other / sha1(FAKE_URL)).write_bytes(b"stale, must be ignored")
    server.responses[FAKE_URL] = data

    assert cache_dir() is None
    assert cache_path_for(FAKE_URL) is None
    assert read_file_cached(FAKE_URL, sha256(data)) == data
    assert read_file_cached(FAKE_URL, sha256(data)) == data
    assert len(server.requests) == 2  # fetched every time
    assert sorted(os.listdir(other)) == [sha1(FAKE_URL)]
    assert not (tmp_path / "data-gym-cache").exists()


def test_empty_cache_dir_offline_error_says_caching_is_disabled(monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    monkeypatch.setenv("TOKENMILL_OFFLINE", "1")
    with pytest.raises(VocabularyNotAvailableError) as info:
        read_file_cached(FAKE_URL)
    msg = str(info.value)
    assert FAKE_URL in msg
    assert "disabled" in msg
    assert sha1(FAKE_URL) in msg
    assert info.value.cache_path is None


# ---------------------------------------------------------------------------------------------
# Hash checking, re-fetching, offline errors
# ---------------------------------------------------------------------------------------------


def test_corrupt_cached_file_is_refetched(cache, server):
    good = tiny_file_bytes()
    path = cache / sha1(FAKE_URL)
    path.write_bytes(b"corrupted")
    server.responses[FAKE_URL] = good

    assert read_file_cached(FAKE_URL, expected_hash=sha256(good)) == good
    assert [url for url, _ in server.requests] == [FAKE_URL]
    assert path.read_bytes() == good
    assert sorted(os.listdir(cache)) == [sha1(FAKE_URL)]  # no temporary files left behind


def test_corrupt_cached_file_offline_raises_clear_error(cache, monkeypatch):
    good = tiny_file_bytes()
    path = cache / sha1(FAKE_URL)
    path.write_bytes(b"corrupted")
    monkeypatch.setenv("TOKENMILL_OFFLINE", "1")

    with pytest.raises(VocabularyNotAvailableError) as info:
        read_file_cached(FAKE_URL, expected_hash=sha256(good))
    msg = str(info.value)
    assert FAKE_URL in msg
    assert str(path) in msg
    assert "sha256" in msg
    assert "TOKENMILL_OFFLINE" in msg
    assert not path.exists()  # the corrupt copy was discarded


def test_cached_file_without_expected_hash_is_trusted(cache, monkeypatch):
    (cache / sha1(FAKE_URL)).write_bytes(b"anything")
    monkeypatch.setenv("TOKENMILL_OFFLINE", "1")
    assert read_file_cached(FAKE_URL) == b"anything"


def test_offline_missing_file_error_names_url_and_cache_path(cache, monkeypatch):
    monkeypatch.setenv("TOKENMILL_OFFLINE", "1")
    expected_path = os.path.join(str(cache), sha1(FAKE_URL))
    with pytest.raises(VocabularyNotAvailableError) as info:
        load_tiktoken_bpe(FAKE_URL)
    err = info.value
    assert isinstance(err, OSError)
    msg = str(err)
    assert FAKE_URL in msg
    assert expected_path in msg
    assert "TIKTOKEN_CACHE_DIR" in msg
    assert err.url == FAKE_URL
    assert err.cache_path == expected_path


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_offline_values(cache, monkeypatch, value):
    monkeypatch.setenv("TOKENMILL_OFFLINE", value)
    assert tm_load.is_offline()
    with pytest.raises(VocabularyNotAvailableError):
        read_file_cached(FAKE_URL)


@pytest.mark.parametrize("value", ["", "0", "false", "no"])
def test_not_offline_values(monkeypatch, value):
    monkeypatch.setenv("TOKENMILL_OFFLINE", value)
    assert not tm_load.is_offline()


@pytest.mark.parametrize(
    "error",
    [
        urllib.error.URLError(socket.gaierror(-2, "Name or service not known")),
        urllib.error.HTTPError(FAKE_URL, 503, "Service Unavailable", {}, None),
        socket.timeout("timed out"),
        ConnectionResetError(104, "Connection reset by peer"),
    ],
    ids=["dns", "http-503", "timeout", "reset"],
)
def test_download_failure_raises_clear_error(cache, monkeypatch, error):
    server = FakeServer(error=error)
    monkeypatch.setattr(urllib.request, "urlopen", server)
    with pytest.raises(VocabularyNotAvailableError) as info:
        read_file_cached(FAKE_URL)
    msg = str(info.value)
    assert FAKE_URL in msg
    assert os.path.join(str(cache), sha1(FAKE_URL)) in msg
    assert info.value.__cause__ is error
    assert len(server.requests) == 1


def test_truncated_download_is_an_error(cache, monkeypatch):
    data = tiny_file_bytes()
    server = FakeServer({FAKE_URL: data}, content_length=len(data) + 10)
    monkeypatch.setattr(urllib.request, "urlopen", server)
    with pytest.raises(VocabularyNotAvailableError, match="truncated"):
        read_file_cached(FAKE_URL)
    assert os.listdir(cache) == []


def test_downloaded_data_with_wrong_hash_raises_value_error(cache, server):
    server.responses[FAKE_URL] = b"not what was expected"
    with pytest.raises(ValueError) as info:
        read_file_cached(FAKE_URL, expected_hash=sha256(tiny_file_bytes()))
    assert not isinstance(info.value, VocabularyNotAvailableError)
    assert FAKE_URL in str(info.value)
    assert os.listdir(cache) == []  # nothing bad was cached


def test_download_fills_cache(cache, server):
    data = tiny_file_bytes()
    server.responses[FAKE_URL] = data
    assert read_file_cached(FAKE_URL, sha256(data)) == data
    assert sorted(os.listdir(cache)) == [sha1(FAKE_URL)]
    assert (cache / sha1(FAKE_URL)).read_bytes() == data
    # second call is served from the cache
    assert read_file_cached(FAKE_URL, sha256(data)) == data
    assert len(server.requests) == 1


def test_download_creates_missing_cache_dir(tmp_path, monkeypatch, server):
    folder = tmp_path / "a" / "b"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(folder))
    server.responses[FAKE_URL] = b"x"
    assert read_file_cached(FAKE_URL) == b"x"
    assert (folder / sha1(FAKE_URL)).read_bytes() == b"x"


def test_unwritable_default_cache_is_tolerated(tmp_path, monkeypatch, server):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "data-gym-cache").write_bytes(b"a file where the folder should be")
    server.responses[FAKE_URL] = b"payload"
    assert read_file_cached(FAKE_URL) == b"payload"


def test_unwritable_user_cache_raises(tmp_path, monkeypatch, server):
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(blocker / "cache"))
    server.responses[FAKE_URL] = b"payload"
    with pytest.raises(OSError) as info:
        read_file_cached(FAKE_URL)
    assert not isinstance(info.value, VocabularyNotAvailableError)


def test_download_timeout_is_passed_and_configurable(cache, server, monkeypatch):
    server.responses[FAKE_URL] = b"x"
    read_file(FAKE_URL)
    assert server.requests[-1] == (FAKE_URL, tm_load.DEFAULT_DOWNLOAD_TIMEOUT)
    monkeypatch.setenv("TOKENMILL_DOWNLOAD_TIMEOUT", "2.5")
    read_file(FAKE_URL)
    assert server.requests[-1] == (FAKE_URL, 2.5)


def test_local_paths_are_read_directly(tmp_path, cache, monkeypatch):
    monkeypatch.setenv("TOKENMILL_OFFLINE", "1")  # local files are not network access
    f = tmp_path / "vocab.tiktoken"
    data = tiny_file_bytes()
    f.write_bytes(data)
    assert read_file(str(f)) == data
    assert read_file_cached(str(f), expected_hash=sha256(data)) == data
    assert load_tiktoken_bpe(str(f)) == TINY_RANKS
    assert load_tiktoken_bpe(f.as_uri()) == TINY_RANKS
    assert os.listdir(cache) == []  # local files are not copied into the cache
    with pytest.raises(ValueError, match="sha256"):
        read_file_cached(str(f), expected_hash=sha256(b"other"))
    with pytest.raises(FileNotFoundError):
        read_file_cached(str(tmp_path / "missing.tiktoken"))


def test_other_schemes_need_blobfile(monkeypatch):
    monkeypatch.setitem(sys.modules, "blobfile", None)  # make `import blobfile` fail
    with pytest.raises(ImportError, match="blobfile"):
        read_file("gs://bucket/vocab.tiktoken")
    with pytest.raises(ImportError, match="blobfile"):
        dump_tiktoken_bpe(TINY_RANKS, "az://account/container/vocab.tiktoken")


# ---------------------------------------------------------------------------------------------
# The .tiktoken format
# ---------------------------------------------------------------------------------------------


def test_dump_load_round_trip(tmp_path):
    ranks = {bytes([i]): i for i in range(256)}
    ranks.update({b"hello": 1000, b" world": 300, b"\xe2\x82\xac": 257, b"\n\n": 256})
    path = tmp_path / "out.tiktoken"
    dump_tiktoken_bpe(ranks, str(path))
    assert load_tiktoken_bpe(str(path)) == ranks
    assert sorted(os.listdir(tmp_path)) == ["out.tiktoken"]  # no temporary file left
    lines = path.read_bytes().splitlines()
    written_ranks = [int(line.split()[1]) for line in lines]
    assert written_ranks == sorted(ranks.values())
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_dump_overwrites_and_matches_tiktoken_format(tmp_path):
    path = tmp_path / "out.tiktoken"
    path.write_bytes(b"old contents\n")
    dump_tiktoken_bpe(TINY_RANKS, str(path))
    assert path.read_bytes() == tiny_file_bytes()


def test_dump_failure_leaves_target_untouched(tmp_path, monkeypatch):
    path = tmp_path / "out.tiktoken"
    path.write_bytes(b"original")

    def broken_replace(src, dst):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        dump_tiktoken_bpe(TINY_RANKS, str(path))
    assert path.read_bytes() == b"original"
    assert sorted(os.listdir(tmp_path)) == ["out.tiktoken"]


@pytest.mark.parametrize(
    "ranks",
    [{b"a": 0, b"b": 0}, {b"": 0}, {"a": 0}, {b"a": -1}, {b"a": 1.0}, {b"a": True}],
    ids=["dup-rank", "empty-token", "str-token", "negative", "float", "bool"],
)
def test_dump_rejects_unloadable_vocab(tmp_path, ranks):
    path = tmp_path / "out.tiktoken"
    with pytest.raises(ValueError):
        dump_tiktoken_bpe(ranks, str(path))
    assert not path.exists()


def test_parse_tolerates_blank_lines_crlf_and_tabs():
    data = b"\nYQ== 0\r\n\r\nYg==\t1\n   \nYWI= 2"
    assert parse_tiktoken_bpe(data) == {b"a": 0, b"b": 1, b"ab": 2}
    assert parse_tiktoken_bpe(b"") == {}
    assert parse_tiktoken_bpe(b"\n\n") == {}


def test_parse_accepts_any_rank_order():
    assert parse_tiktoken_bpe(b"YQ== 7\nYg== 3\nYWI= 0010\n") == {b"a": 7, b"b": 3, b"ab": 10}


MALFORMED = {
    "bad-base64-char": b"YQ=! 3",
    "bad-padding": b"YQ= 3",
    "truncated-base64": b"Y 3",
    "padding-in-the-middle": b"YQ==YQ== 3",
    "leading-padding": b"==== 3",
    "missing-rank": b"Yw==",
    "non-integer-rank": b"Yw== three",
    "float-rank": b"Yw== 3.0",
    "negative-rank": b"Yw== -3",
    "signed-rank": b"Yw== +3",
    "extra-field": b"Yw== 3 4",
    "duplicate-token": b"YQ== 3",
    "duplicate-rank": b"Yw== 1",
}


@pytest.mark.parametrize("bad_line", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_line_is_reported_with_line_number(tmp_path, bad_line):
    # line 1 and 2 are good, line 3 is blank, line 4 is the bad one
    data = b"YQ== 0\nYg== 1\n\n" + bad_line + b"\nZA== 5\n"
    path = tmp_path / "broken.tiktoken"
    path.write_bytes(data)
    with pytest.raises(ValueError) as info:
        load_tiktoken_bpe(str(path))
    err = info.value
    assert isinstance(err, VocabularyFormatError)
    msg = str(err)
    assert "line 4" in msg
    assert str(path) in msg
    assert repr(bad_line) in msg
    assert err.lineno == 4


def test_duplicate_messages_point_at_first_occurrence():
    dup_token = r"line 3: duplicate token \(first seen on line 1\)"
    dup_rank = r"line 2: duplicate rank 0 \(first seen on line 1\)"
    with pytest.raises(VocabularyFormatError, match=dup_token):
        parse_tiktoken_bpe(b"YQ== 0\nYg== 1\nYQ== 2\n", "x.tiktoken")
    with pytest.raises(VocabularyFormatError, match=dup_rank):
        parse_tiktoken_bpe(b"YQ== 0\nYg== 0\n", "x.tiktoken")


def test_long_offending_line_is_truncated():
    bad = b"A" * 5000 + b" 1 2"
    with pytest.raises(VocabularyFormatError) as info:
        parse_tiktoken_bpe(b"YQ== 0\n" + bad + b"\n", "big.tiktoken")
    msg = str(info.value)
    assert "line 2" in msg
    assert len(msg) < 400
    assert "5004 bytes" in msg


def _reference_parse(data: bytes):
    """Obviously-correct line-by-line parser used as the oracle for the fast path."""
    out: dict[bytes, int] = {}
    ranks = set()
    for raw in data.split(b"\n"):
        fields = raw.split()
        if not fields:
            continue
        if len(fields) != 2:
            return None
        try:
            token = base64.b64decode(fields[0], validate=True)
        except ValueError:
            return None
        if not token or not fields[1].isdigit():
            return None
        rank = int(fields[1])
        if token in out or rank in ranks:
            return None
        out[token] = rank
        ranks.add(rank)
    return out


def _parse_or_none(data: bytes):
    try:
        return parse_tiktoken_bpe(data)
    except ValueError:
        return None


vocab_dicts = st.dictionaries(
    st.binary(min_size=1, max_size=6), st.integers(min_value=0, max_value=10**6), max_size=30
).filter(lambda d: len(set(d.values())) == len(d))


@given(vocab_dicts, st.sampled_from([b"\n", b"\r\n"]), st.sampled_from([b" ", b"\t", b"  "]),
       st.booleans(), st.booleans())
def test_parse_formatting_variants(ranks, newline, sep, blank_lines, sort_by_rank):
    items = sorted(ranks.items(), key=lambda kv: kv[1]) if sort_by_rank else list(ranks.items())
    lines = [base64.b64encode(t) + sep + str(r).encode() for t, r in items]
    if blank_lines:
        lines = [x for line in lines for x in (line, b"")]
    data = newline.join(lines) + newline
    assert parse_tiktoken_bpe(data) == ranks


_LINE_PIECES = st.sampled_from(
    [b"YQ==", b"Yg==", b"YWI=", b"QUJD", b"QUJDRA==", b"AAAA=", b"QQ", b"QQ=", b"=", b"Y Q",
     b"0", b"1", b"2", b"01", b"-1", b" ", b"\t", b"\r", b"x!", b"MTIz", b"123"]
)


@given(st.lists(st.lists(_LINE_PIECES, max_size=4).map(b" ".join), max_size=8))
def test_parse_agrees_with_reference_on_arbitrary_input(lines):
    data = b"\n".join(lines)
    assert _parse_or_none(data) == _reference_parse(data)


@given(st.lists(st.lists(_LINE_PIECES, max_size=4).map(b" ".join), max_size=8))
def test_extension_parser_accepts_nothing_the_reference_refuses(lines):
    data = b"\n".join(lines)
    fast = _core.parse_tiktoken_canonical(data)
    if fast is not None:
        assert fast == _reference_parse(data)


@given(
    st.dictionaries(st.binary(min_size=1, max_size=40), st.integers(0, 2**32 + 5), max_size=40),
    st.booleans(),
)
def test_extension_parser_reads_every_canonical_file(ranks, final_newline):
    lines = [base64.b64encode(t) + b" " + str(r).encode() for t, r in ranks.items()]
    data = b"\n".join(lines) + (b"\n" if final_newline else b"")
    fast = _core.parse_tiktoken_canonical(data)
    distinct = len(set(ranks.values())) == len(ranks)
    if distinct and all(r < 2**32 for r in ranks.values()):
        assert fast == ranks
    else:
        # Repeated ranks are an error and ranks past 32 bits are no token id: both are left
        # to the line-by-line parser, which reads the second kind too.
        assert fast is None
        if distinct:
            assert parse_tiktoken_bpe(data) == ranks


# ---------------------------------------------------------------------------------------------
# The real vocabularies, compared with tiktoken's loader
# ---------------------------------------------------------------------------------------------


def _real_file_or_skip(name: str) -> str:
    if not REAL_CACHE_DIR:
        pytest.skip("TIKTOKEN_CACHE_DIR is not set, so the pretrained vocabularies are unavailable")
    path = os.path.join(REAL_CACHE_DIR, sha1(BLOB + name + ".tiktoken"))
    if not os.path.isfile(path):
        pytest.skip(f"vocabulary file for {name} not found at {path}")
    return path


@pytest.mark.parametrize("name", list(REAL_FILES))
def test_real_vocabularies_match_tiktoken(name, monkeypatch):
    _real_file_or_skip(name)
    import tiktoken.load as tt_load

    def refuse(blobpath):
        raise AssertionError(f"tiktoken tried to download {blobpath}")

    monkeypatch.setattr(tt_load, "read_file", refuse)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", REAL_CACHE_DIR)
    monkeypatch.setenv("TOKENMILL_OFFLINE", "1")
    url = BLOB + name + ".tiktoken"
    ours = load_tiktoken_bpe(url, expected_hash=REAL_FILES[name])
    theirs = tt_load.load_tiktoken_bpe(url, expected_hash=REAL_FILES[name])
    assert ours == theirs
    assert list(ours.items()) == list(theirs.items())
    # the slow path must agree with the fast path on real data too
    data = read_file_cached(url, REAL_FILES[name])
    assert tm_load._parse_slow(data, url) == ours


# ---------------------------------------------------------------------------------------------
# GPT-2's data gym files
# ---------------------------------------------------------------------------------------------


def _write_data_gym(folder, merges, encoder_overrides=None, drop=None):
    """Write a small but genuine vocab.bpe/encoder.json pair using GPT-2's byte alphabet."""
    order, char_to_byte = tm_load._data_gym_alphabet()
    byte_to_char = {b: c for c, b in char_to_byte.items()}

    def enc(bs: bytes) -> str:
        return "".join(byte_to_char[b] for b in bs)

    encoder = {enc(bytes([b])): i for i, b in enumerate(order)}
    for left, right in merges:
        encoder[enc(left + right)] = len(encoder)
    encoder["<|endoftext|>"] = len(encoder)
    if encoder_overrides:
        encoder.update({enc(k): v for k, v in encoder_overrides.items()})
    if drop:
        del encoder[enc(drop)]
    vocab = "#version: 0.2\n" + "".join(f"{enc(a)} {enc(b)}\n" for a, b in merges)
    vocab_path = folder / "vocab.bpe"
    encoder_path = folder / "encoder.json"
    vocab_path.write_text(vocab, encoding="utf-8")
    encoder_path.write_text(json.dumps(encoder), encoding="utf-8")
    return str(vocab_path), str(encoder_path)


MERGES = [(b" ", b"t"), (b"h", b"e"), (b" t", b"he"), (b"\n", b"\n"), (b"\xe2", b"\x82")]


def test_data_gym_matches_tiktoken(tmp_path, monkeypatch):
    import tiktoken.load as tt_load

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # keep tiktoken from caching local paths
    vocab, encoder = _write_data_gym(tmp_path, MERGES)
    ours = data_gym_to_mergeable_bpe_ranks(vocab, encoder)
    theirs = tt_load.data_gym_to_mergeable_bpe_ranks(vocab, encoder)
    assert ours == theirs
    assert ours[b" the"] == 258
    assert len(ours) == 256 + len(MERGES)


def test_data_gym_hashes_are_checked(tmp_path):
    vocab, encoder = _write_data_gym(tmp_path, MERGES)
    with open(vocab, "rb") as f:
        good = sha256(f.read())
    data_gym_to_mergeable_bpe_ranks(vocab, encoder, vocab_bpe_hash=good)
    with pytest.raises(ValueError, match="sha256"):
        data_gym_to_mergeable_bpe_ranks(vocab, encoder, vocab_bpe_hash=sha256(b"x"))


def test_data_gym_clobber_one_byte_tokens_matches_tiktoken(tmp_path, monkeypatch):
    import tiktoken.load as tt_load

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    # encoder.json that swaps the ids of two single bytes
    order, _ = tm_load._data_gym_alphabet()
    a, b = bytes([order[0]]), bytes([order[1]])
    vocab, encoder = _write_data_gym(tmp_path, MERGES, encoder_overrides={a: 1, b: 0})
    with pytest.raises(ValueError, match="do not describe the same vocabulary"):
        data_gym_to_mergeable_bpe_ranks(vocab, encoder)
    ours = data_gym_to_mergeable_bpe_ranks(vocab, encoder, clobber_one_byte_tokens=True)
    theirs = tt_load.data_gym_to_mergeable_bpe_ranks(vocab, encoder, clobber_one_byte_tokens=True)
    assert ours == theirs
    assert ours[a] == 1 and ours[b] == 0


def test_data_gym_mismatch_raises_value_error(tmp_path):
    vocab, encoder = _write_data_gym(tmp_path, MERGES, drop=b"he")
    with pytest.raises(ValueError, match="only in"):
        data_gym_to_mergeable_bpe_ranks(vocab, encoder)
    vocab, encoder = _write_data_gym(tmp_path, MERGES, encoder_overrides={b"he": 9999})
    with pytest.raises(ValueError, match="different ids"):
        data_gym_to_mergeable_bpe_ranks(vocab, encoder)


def test_data_gym_malformed_merge_line(tmp_path):
    vocab, encoder = _write_data_gym(tmp_path, MERGES)
    with open(vocab, "a", encoding="utf-8") as f:
        f.write("a b c\n")
    with pytest.raises(VocabularyFormatError, match="line 7"):
        data_gym_to_mergeable_bpe_ranks(vocab, encoder)
