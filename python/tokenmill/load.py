"""Reading, caching, parsing and writing BPE vocabulary files.

This module is the pure-Python I/O layer of tokenmill. It understands two on-disk formats:

* the ``.tiktoken`` format: one ``<base64 of the token bytes> <rank>`` pair per line, and
* GPT-2's original "data gym" pair of files (``vocab.bpe`` with the merges, ``encoder.json``
  with the token-to-id map).

Remote vocabularies are downloaded once and kept in a local cache that follows the same
conventions as tiktoken's, so that a cache folder filled by either library serves both:

* the folder is ``$TIKTOKEN_CACHE_DIR`` if that variable is set, else ``$DATA_GYM_CACHE_DIR``,
  else ``<system temp dir>/data-gym-cache``; setting the chosen variable to the empty string
  turns caching off;
* each file is stored under the hex sha1 of its URL (``hashlib.sha1(url.encode()).hexdigest()``).

Setting ``TOKENMILL_OFFLINE=1`` forbids all network access: a vocabulary that is not already
in the cache then raises :class:`VocabularyNotAvailableError` straight away, with a message that
says which file is needed and where to put it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import sys
import types
import urllib.parse
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Tuple

from tokenmill import _core

if TYPE_CHECKING:  # pragma: no cover
    from tokenmill.core import Encoding

__all__ = [
    "VocabularyNotAvailableError",
    "VocabularyFormatError",
    "read_file",
    "read_file_cached",
    "cache_dir",
    "cache_path_for",
    "read_cached_copy",
    "is_offline",
    "parse_tiktoken_bpe",
    "load_tiktoken_bpe",
    "dump_tiktoken_bpe",
    "data_gym_to_mergeable_bpe_ranks",
]

#: Seconds to wait for a remote server before giving up on a download. Can be overridden with
#: the ``TOKENMILL_DOWNLOAD_TIMEOUT`` environment variable.
DEFAULT_DOWNLOAD_TIMEOUT: float = 60.0

_OFFLINE_ENV = "TOKENMILL_OFFLINE"
_TIMEOUT_ENV = "TOKENMILL_DOWNLOAD_TIMEOUT"
_TRUE_VALUES = frozenset({"1", "true", "yes", "on"})
_USER_AGENT = "tokenmill (+https://pypi.org/project/tokenmill/)"

# Longest excerpt of an offending line quoted in an error message.
_MAX_QUOTED_LINE = 120


class VocabularyNotAvailableError(OSError):
    """A vocabulary file is neither in the local cache nor obtainable right now.

    Raised by :func:`read_file_cached` (and so by every loader built on it) when the file has
    no valid cached copy and downloading it failed or was forbidden by ``TOKENMILL_OFFLINE``.

    Attributes:
        url: the location the vocabulary is published at.
        cache_path: the exact file the cache was searched for, or ``None`` when caching is
            disabled.
        reason: a short description of why the file could not be fetched.
    """

    def __init__(self, message: str, *, url: str, cache_path: Optional[str], reason: str):
        super().__init__(message)
        self.url = url
        self.cache_path = cache_path
        self.reason = reason

    def __str__(self) -> str:  # OSError.__str__ would show the args tuple oddly
        return str(self.args[0]) if self.args else ""


class VocabularyFormatError(ValueError):
    """A vocabulary file is malformed (bad base64, bad rank, duplicates, ...).

    Attributes:
        source: the file (or URL) the data came from.
        lineno: 1-based line number of the offending line, or ``None`` if not line-specific.
    """

    def __init__(self, message: str, *, source: str, lineno: Optional[int] = None):
        super().__init__(message)
        self.source = source
        self.lineno = lineno


# ---------------------------------------------------------------------------------------------
# Raw reading
# ---------------------------------------------------------------------------------------------


def _is_remote(path: str) -> bool:
    """True for ``scheme://`` locations other than ``file://``."""
    return "://" in path and not path.startswith("file://")


def _file_url_to_path(url: str) -> str:
    """Turn a ``file://`` URL into a local path."""
    import urllib.request  # (deferred, as below: the HTTP stack takes a while to import)

    parsed = urllib.parse.urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise ValueError(f"file URL {url!r} does not refer to this machine")
    return urllib.request.url2pathname(parsed.path)


def _download_timeout() -> float:
    raw = os.environ.get(_TIMEOUT_ENV, "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(
                f"{_TIMEOUT_ENV} must be a number of seconds, got {raw!r}"
            ) from None
        if value > 0:
            return value
    return DEFAULT_DOWNLOAD_TIMEOUT


def _fetch_url(url: str, timeout: float) -> bytes:
    import urllib.request

    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        data = response.read()
        declared = response.headers.get("Content-Length") if response.headers else None
    if declared is not None:
        try:
            expected_len = int(declared)
        except ValueError:
            expected_len = -1
        if expected_len >= 0 and len(data) != expected_len:
            raise OSError(
                f"truncated download from {url}: received {len(data)} bytes, "
                f"the server announced {expected_len}"
            )
    return data


def read_file(blobpath: str) -> bytes:
    """Return the full contents of a local file or a remote object.

    Args:
        blobpath: a local filesystem path or ``file://`` URL (read directly), an
            ``http://``/``https://`` URL
            (fetched with :mod:`urllib.request`, with a timeout of
            :data:`DEFAULT_DOWNLOAD_TIMEOUT` seconds unless ``TOKENMILL_DOWNLOAD_TIMEOUT`` says
            otherwise), or any other ``scheme://`` location understood by the optional
            ``blobfile`` package (e.g. ``az://``, ``gs://``).

    Returns:
        The bytes of the file. No caching is done here; see :func:`read_file_cached`.

    Raises:
        OSError: the file cannot be opened, or the download failed (including
            :class:`urllib.error.URLError` and timeouts).
        ImportError: ``blobpath`` uses a scheme that needs ``blobfile`` and it is not installed.
    """
    blobpath = os.fspath(blobpath)
    if "://" not in blobpath or blobpath.startswith("file://"):
        local = _file_url_to_path(blobpath) if blobpath.startswith("file://") else blobpath
        with open(local, "rb") as f:
            return f.read()
    if blobpath.startswith(("http://", "https://")):
        return _fetch_url(blobpath, _download_timeout())
    try:
        import blobfile  # type: ignore[import-not-found]
    except ImportError as e:
        scheme = blobpath.split("://", 1)[0]
        raise ImportError(
            f"reading {scheme}:// locations such as {blobpath!r} requires the optional "
            f"'blobfile' package; install it with `pip install blobfile`, or download the file "
            f"and pass its local path instead"
        ) from e
    return blobfile.read_bytes(blobpath)


# ---------------------------------------------------------------------------------------------
# The download cache
# ---------------------------------------------------------------------------------------------


def is_offline() -> bool:
    """True when ``TOKENMILL_OFFLINE`` is set to a true value (``1``, ``true``, ``yes``, ``on``)."""
    return os.environ.get(_OFFLINE_ENV, "").strip().lower() in _TRUE_VALUES


def _resolve_cache_dir() -> Tuple[Optional[str], bool]:
    """Return ``(folder or None if caching is disabled, whether the user chose the folder)``."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            value = os.environ[var]
            return (value if value != "" else None), True
    import tempfile  # (deferred: only needed without a cache variable)

    return os.path.join(tempfile.gettempdir(), "data-gym-cache"), False


def cache_dir() -> Optional[str]:
    """The folder remote vocabulary files are cached in, or ``None`` if caching is disabled.

    Resolution order: ``$TIKTOKEN_CACHE_DIR``, ``$DATA_GYM_CACHE_DIR``, then
    ``os.path.join(tempfile.gettempdir(), "data-gym-cache")``. A variable that is set to the
    empty string disables caching (the later fallbacks are not consulted).
    """
    return _resolve_cache_dir()[0]


def _cache_key(blobpath: str) -> str:
    return hashlib.sha1(blobpath.encode()).hexdigest()


def cache_path_for(blobpath: str) -> Optional[str]:
    """The path a cached copy of ``blobpath`` is (or would be) stored at.

    This is ``<cache folder>/<sha1 hex digest of the blobpath string>``, or ``None`` when
    caching is disabled.
    """
    folder = cache_dir()
    if folder is None:
        return None
    return os.path.join(folder, _cache_key(os.fspath(blobpath)))


def _sha256_matches(data: bytes, expected_hash: Optional[str]) -> bool:
    if not expected_hash:
        return True
    return hashlib.sha256(data).hexdigest() == expected_hash.strip().lower()


def read_cached_copy(blobpath: str, expected_hash: Optional[str] = None) -> Optional[bytes]:
    """Return the cached copy of ``blobpath`` if one exists and is valid, else ``None``.

    Never touches the network and never modifies the cache. A copy whose sha256 differs from
    ``expected_hash`` (when given) counts as absent.
    """
    path = cache_path_for(blobpath)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data if _sha256_matches(data, expected_hash) else None


def _atomic_write(path: str, data: bytes, mode: Optional[int] = None) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder + os.replace."""
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp_path = tempfile.mkstemp(
        dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is None:
            try:
                mode = os.stat(path).st_mode & 0o7777
            except OSError:
                mode = 0o644
        try:
            os.chmod(tmp_path, mode)
        except OSError:  # pragma: no cover - e.g. filesystems without permissions
            pass
        os.replace(tmp_path, path)
    except BaseException:
        try:
            os.unlink(tmp_path)
        except OSError:
            pass
        raise


def _unavailable(
    blobpath: str,
    cache_path: Optional[str],
    reason: str,
    stale_note: str = "",
) -> VocabularyNotAvailableError:
    if cache_path is None:
        where = (
            "Caching is disabled (TIKTOKEN_CACHE_DIR or DATA_GYM_CACHE_DIR is set to an empty "
            "string), so no cached copy was looked for."
        )
        how = (
            f"To use it without network access, download {blobpath} on a machine that can "
            f"reach it, put it in a folder under the name {_cache_key(blobpath)} (the sha1 of "
            f"its URL), and set TIKTOKEN_CACHE_DIR to that folder."
        )
    else:
        where = f"Looked for a cached copy at: {cache_path}"
        how = (
            f"To use it without network access, either download {blobpath} on a machine that "
            f"can reach it and save it as {cache_path}, or set TIKTOKEN_CACHE_DIR to a folder "
            f"that holds it under the name {os.path.basename(cache_path)} (the sha1 of its URL)."
        )
    message = (
        f"The vocabulary file {blobpath} is not available: it is not in the local cache and "
        f"{reason}.\n{where}\n"
    )
    if stale_note:
        message += stale_note + "\n"
    message += how
    return VocabularyNotAvailableError(message, url=blobpath, cache_path=cache_path, reason=reason)


def read_file_cached(blobpath: str, expected_hash: Optional[str] = None) -> bytes:
    """Return the contents of ``blobpath``, using and filling the local download cache.

    Remote files (any ``scheme://`` other than ``file://``) are looked up in the cache folder
    (see :func:`cache_dir`) under the sha1 of ``blobpath``. A cached copy is returned if its
    sha256 matches ``expected_hash`` (or if no hash is given); a copy that does not match is
    deleted and the file is fetched again. Freshly downloaded data is checked against
    ``expected_hash`` and then written into the cache atomically (temporary file + rename).

    Local paths and ``file://`` URLs are read directly and are not copied into the cache;
    ``expected_hash`` is still checked.

    Failing to write into the *default* cache folder (the system temp dir) is ignored, since the
    data is already in hand; failing to write into a folder chosen through
    ``TIKTOKEN_CACHE_DIR``/``DATA_GYM_CACHE_DIR`` raises, as it is likely a configuration error.

    Args:
        blobpath: the file's location (local path or URL).
        expected_hash: optional hex sha256 the contents must have.

    Returns:
        The file's bytes.

    Raises:
        VocabularyNotAvailableError: a remote file is not cached (or its cached copy is
            corrupt) and it cannot be downloaded, either because the download failed or because
            ``TOKENMILL_OFFLINE`` is set. The message names the URL, the cache path that was
            searched and how to supply the file.
        ValueError: the data read or downloaded does not have the expected sha256.
        OSError: a local file cannot be read, or the user-chosen cache folder is not writable.
    """
    blobpath = os.fspath(blobpath)
    if not _is_remote(blobpath):
        data = read_file(blobpath)
        if not _sha256_matches(data, expected_hash):
            raise ValueError(
                f"sha256 mismatch for {blobpath}: expected {expected_hash}, "
                f"got {hashlib.sha256(data).hexdigest()}"
            )
        return data

    folder, user_specified = _resolve_cache_dir()
    cache_path = os.path.join(folder, _cache_key(blobpath)) if folder is not None else None

    stale_note = ""
    if cache_path is not None:
        cached: Optional[bytes] = None
        try:
            with open(cache_path, "rb") as f:
                cached = f.read()
        except OSError:
            pass  # missing or unreadable: same as not cached
        if cached is not None:
            if _sha256_matches(cached, expected_hash):
                return cached
            try:
                os.remove(cache_path)
                fate = "it was deleted"
            except OSError:
                fate = "it was ignored (and could not be deleted)"
            stale_note = (
                f"A cached copy exists at {cache_path} but its sha256 "
                f"({hashlib.sha256(cached).hexdigest()}) does not match the expected "
                f"{expected_hash}; {fate}."
            )

    if is_offline():
        raise _unavailable(
            blobpath, cache_path, f"network access is disabled ({_OFFLINE_ENV} is set)", stale_note
        )

    import http.client
    import urllib.error

    try:
        contents = read_file(blobpath)
    except (OSError, http.client.HTTPException) as e:
        # URLError, HTTPError, socket timeouts, truncated transfers, ...
        if isinstance(e, urllib.error.URLError) and not isinstance(e, urllib.error.HTTPError):
            detail = e.reason
        else:
            detail = e
        raise _unavailable(
            blobpath, cache_path, f"downloading it failed ({detail})", stale_note
        ) from e

    if not _sha256_matches(contents, expected_hash):
        raise ValueError(
            f"sha256 mismatch for the data downloaded from {blobpath}: expected "
            f"{expected_hash}, got {hashlib.sha256(contents).hexdigest()}. The download may be "
            f"corrupted or the file may have changed upstream; try again."
        )

    if cache_path is not None and folder is not None:
        try:
            os.makedirs(folder, exist_ok=True)
            _atomic_write(cache_path, contents, mode=0o644)
        except OSError:
            if user_specified:
                raise
    return contents


# ---------------------------------------------------------------------------------------------
# The .tiktoken format
# ---------------------------------------------------------------------------------------------

def _quote_line(line: bytes) -> str:
    if len(line) > _MAX_QUOTED_LINE:
        return repr(line[:_MAX_QUOTED_LINE]) + f"... ({len(line)} bytes)"
    return repr(line)


def _format_error(source: str, lineno: int, line: bytes, problem: str) -> VocabularyFormatError:
    return VocabularyFormatError(
        f"{source}: line {lineno}: {problem}: {_quote_line(line)}", source=source, lineno=lineno
    )


def _parse_fast(contents: bytes) -> Optional[Dict[bytes, int]]:
    """Parse a canonically formatted file quickly, or return ``None`` to defer to the slow path.

    The canonical form is what the published files use: every non-empty line is exactly
    ``<base64 token> <digits>``, lines end in ``\\n``, and no token or rank repeats. The
    extension parses it (about 4x faster than Python's own tools for o200k_base). Whatever it
    accepts, the line-by-line parser would accept with the same result; everything else
    (including every malformed file) is left to that parser, which produces the precise error.
    """
    return _core.parse_tiktoken_canonical(bytes(contents))


def _b64decode_strict(token: bytes) -> bytes:
    return base64.b64decode(token, validate=True)


def _parse_slow(contents: bytes, source: str) -> Dict[bytes, int]:
    """Line-by-line parser with precise error reporting (the reference semantics)."""
    result: Dict[bytes, int] = {}
    token_line: Dict[bytes, int] = {}
    rank_line: Dict[int, int] = {}
    for lineno, raw in enumerate(contents.split(b"\n"), start=1):
        line = raw[:-1] if raw.endswith(b"\r") else raw
        fields = line.split()
        if not fields:
            continue  # blank line
        if len(fields) == 1:
            raise _format_error(source, lineno, line, "missing rank (expected '<base64> <rank>')")
        if len(fields) > 2:
            raise _format_error(
                source, lineno, line, f"expected 2 fields '<base64> <rank>', found {len(fields)}"
            )
        token_b64, rank_text = fields
        try:
            token = _b64decode_strict(token_b64)
        except (binascii.Error, ValueError):
            raise _format_error(source, lineno, line, "invalid base64 token") from None
        if not token:
            raise _format_error(source, lineno, line, "token decodes to an empty byte string")
        if not rank_text.isdigit():
            raise _format_error(source, lineno, line, "rank is not a non-negative integer")
        rank = int(rank_text)
        if token in token_line:
            raise _format_error(
                source, lineno, line, f"duplicate token (first seen on line {token_line[token]})"
            )
        if rank in rank_line:
            first = rank_line[rank]
            raise _format_error(
                source, lineno, line, f"duplicate rank {rank} (first seen on line {first})"
            )
        token_line[token] = lineno
        rank_line[rank] = lineno
        result[token] = rank
    return result


def parse_tiktoken_bpe(contents: bytes, source: str = "<bytes>") -> Dict[bytes, int]:
    """Parse the text of a ``.tiktoken`` file into a ``{token bytes: rank}`` dict.

    Each non-blank line must be ``<base64 token> <rank>`` (whitespace-separated; ``\\r\\n`` line
    endings are accepted). Validation is strict: the token must be valid base64 (checked with
    ``base64.b64decode(..., validate=True)``) and non-empty, the rank a non-negative decimal
    integer, and neither tokens nor ranks may repeat.

    Args:
        contents: the raw file contents.
        source: the name of the file, used in error messages.

    Raises:
        VocabularyFormatError: (a :class:`ValueError`) for the first malformed line; the message
            holds the source, the 1-based line number and the offending line (truncated if long).
    """
    fast = _parse_fast(contents)
    if fast is not None:
        return fast
    return _parse_slow(contents, source)


def load_tiktoken_bpe(
    tiktoken_bpe_file: str, expected_hash: Optional[str] = None
) -> Dict[bytes, int]:
    """Load a ``.tiktoken`` vocabulary into a ``{token bytes: rank}`` dict.

    The file is obtained with :func:`read_file_cached` (so URLs are cached and, if
    ``expected_hash`` is given, sha256-checked) and parsed with :func:`parse_tiktoken_bpe`.
    The result is not memoised; every call re-reads and re-parses.

    Raises:
        VocabularyFormatError: (a :class:`ValueError`) the file is malformed; the message names
            the file, the line number and the line.
        VocabularyNotAvailableError: a remote file could not be obtained.
        ValueError: sha256 mismatch.
    """
    tiktoken_bpe_file = os.fspath(tiktoken_bpe_file)
    contents = read_file_cached(tiktoken_bpe_file, expected_hash)
    return parse_tiktoken_bpe(contents, tiktoken_bpe_file)


def _serialize_tiktoken_bpe(bpe_ranks: Mapping[bytes, int]) -> bytes:
    seen_ranks: Dict[int, bytes] = {}
    for token, rank in bpe_ranks.items():
        if not isinstance(token, (bytes, bytearray)) or not token:
            raise ValueError(f"tokens must be non-empty bytes, got {token!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise ValueError(f"rank of {bytes(token)!r} must be a non-negative int, got {rank!r}")
        if rank in seen_ranks:
            raise ValueError(
                f"rank {rank} is used by both {seen_ranks[rank]!r} and {bytes(token)!r}"
            )
        seen_ranks[rank] = bytes(token)
    b64 = binascii.b2a_base64
    return b"".join(
        b64(seen_ranks[rank], newline=False) + b" %d\n" % rank for rank in sorted(seen_ranks)
    )


def dump_tiktoken_bpe(bpe_ranks: Mapping[bytes, int], tiktoken_bpe_file: str) -> None:
    """Write ``{token bytes: rank}`` to a ``.tiktoken`` file, one line per token, by rank.

    Local paths are written atomically (a temporary file in the same folder is renamed over the
    target) and need no extra dependency. ``scheme://`` destinations are written with the
    optional ``blobfile`` package.

    Raises:
        ValueError: a token is not non-empty bytes, a rank is not a non-negative int, or two
            tokens share a rank (such a file could not be loaded back).
        ImportError: a remote destination was given and ``blobfile`` is not installed.
    """
    tiktoken_bpe_file = os.fspath(tiktoken_bpe_file)
    data = _serialize_tiktoken_bpe(bpe_ranks)
    if "://" in tiktoken_bpe_file and not tiktoken_bpe_file.startswith("file://"):
        try:
            import blobfile  # type: ignore[import-not-found]
        except ImportError as e:
            raise ImportError(
                f"writing to {tiktoken_bpe_file!r} requires the optional 'blobfile' package; "
                f"install it with `pip install blobfile`, or write to a local path"
            ) from e
        with blobfile.BlobFile(tiktoken_bpe_file, "wb") as f:
            f.write(data)
        return
    if tiktoken_bpe_file.startswith("file://"):
        tiktoken_bpe_file = _file_url_to_path(tiktoken_bpe_file)
    _atomic_write(tiktoken_bpe_file, data)


# ---------------------------------------------------------------------------------------------
# GPT-2's data gym format
# ---------------------------------------------------------------------------------------------


def _data_gym_alphabet() -> Tuple[List[int], Dict[str, int]]:
    """GPT-2's reversible byte <-> printable character mapping.

    Returns ``(byte values in single-byte rank order, {stand-in character: byte value})``.
    Bytes whose character is printable (and not a space) stand for themselves and come first;
    the remaining bytes are represented by consecutive code points from U+0100 on.
    """
    direct = [b for b in range(256) if chr(b).isprintable() and b != ord(" ")]
    direct_set = set(direct)
    shifted = [b for b in range(256) if b not in direct_set]
    order = direct + shifted
    char_to_byte = {chr(b): b for b in direct}
    char_to_byte.update({chr(256 + i): b for i, b in enumerate(shifted)})
    return order, char_to_byte


def _data_gym_ranks(
    vocab_bpe: bytes,
    encoder_json: bytes,
    clobber_one_byte_tokens: bool = False,
    vocab_source: str = "vocab.bpe",
    encoder_source: str = "encoder.json",
) -> Dict[bytes, int]:
    byte_order, char_to_byte = _data_gym_alphabet()

    def to_bytes(text: str, source: str) -> bytes:
        try:
            return bytes(char_to_byte[ch] for ch in text)
        except KeyError as e:
            raise ValueError(
                f"{source}: {text!r} contains {e.args[0]!r}, which is not part of GPT-2's byte "
                f"alphabet"
            ) from None

    ranks: Dict[bytes, int] = {bytes([b]): i for i, b in enumerate(byte_order)}

    try:
        merges_text = vocab_bpe.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{vocab_source}: not valid UTF-8 ({e})") from None
    lines = merges_text.split("\n")
    for lineno, line in enumerate(lines, start=1):
        if lineno == 1 and line.startswith("#"):
            continue  # "#version: ..." header
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise VocabularyFormatError(
                f"{vocab_source}: line {lineno}: expected a merge '<left> <right>', "
                f"found {len(parts)} fields: {_quote_line(line.encode('utf-8'))}",
                source=vocab_source,
                lineno=lineno,
            )
        merged = to_bytes(parts[0], vocab_source) + to_bytes(parts[1], vocab_source)
        if merged in ranks:
            raise VocabularyFormatError(
                f"{vocab_source}: line {lineno}: the merge produces {merged!r}, which already "
                f"has rank {ranks[merged]}",
                source=vocab_source,
                lineno=lineno,
            )
        ranks[merged] = len(ranks)

    try:
        encoder = json.loads(encoder_json)
    except ValueError as e:
        raise ValueError(f"{encoder_source}: not valid JSON ({e})") from None
    if not isinstance(encoder, dict):
        raise ValueError(f"{encoder_source}: expected a JSON object mapping tokens to ids")
    encoder_ranks = {to_bytes(k, encoder_source): v for k, v in encoder.items()}
    # The two special tokens are not mergeable BPE tokens.
    encoder_ranks.pop(b"<|endoftext|>", None)
    encoder_ranks.pop(b"<|startoftext|>", None)

    if clobber_one_byte_tokens:
        for token, rank in encoder_ranks.items():
            if len(token) == 1:
                ranks[token] = rank

    # The ranks implied by the merge order must be exactly the ids of encoder.json, since BPE
    # applies merges in rank order.
    if ranks != encoder_ranks:
        only_merges = [t for t in ranks if t not in encoder_ranks]
        only_encoder = [t for t in encoder_ranks if t not in ranks]
        differing = [t for t in ranks if t in encoder_ranks and ranks[t] != encoder_ranks[t]]
        details = []
        if only_merges:
            details.append(f"{len(only_merges)} token(s) only in {vocab_source}, e.g. "
                           f"{only_merges[0]!r}")
        if only_encoder:
            details.append(f"{len(only_encoder)} token(s) only in {encoder_source}, e.g. "
                           f"{only_encoder[0]!r}")
        if differing:
            t = differing[0]
            details.append(
                f"{len(differing)} token(s) with different ids, e.g. {t!r}: "
                f"{ranks[t]} from the merges vs {encoder_ranks[t]!r} in {encoder_source}"
            )
        raise ValueError(
            f"{vocab_source} and {encoder_source} do not describe the same vocabulary: "
            + "; ".join(details)
        )
    return ranks


def data_gym_to_mergeable_bpe_ranks(
    vocab_bpe_file: str,
    encoder_json_file: str,
    vocab_bpe_hash: Optional[str] = None,
    encoder_json_hash: Optional[str] = None,
    clobber_one_byte_tokens: bool = False,
) -> Dict[bytes, int]:
    """Build a ``{token bytes: rank}`` dict from GPT-2's original ``vocab.bpe``/``encoder.json``.

    The 256 single bytes get ranks 0-255 in GPT-2's order (printable bytes first), then each
    merge listed in ``vocab.bpe`` gets the next rank. The result is cross-checked against
    ``encoder.json`` (ignoring its ``<|endoftext|>``/``<|startoftext|>`` entries).

    Args:
        vocab_bpe_file: location of ``vocab.bpe`` (path or URL, read via
            :func:`read_file_cached`).
        encoder_json_file: location of ``encoder.json``.
        vocab_bpe_hash: optional expected sha256 of ``vocab.bpe``.
        encoder_json_hash: optional expected sha256 of ``encoder.json``.
        clobber_one_byte_tokens: take the ids of single-byte tokens from ``encoder.json``
            instead of GPT-2's default byte order.

    Raises:
        ValueError: the files are malformed or disagree with each other.
        VocabularyNotAvailableError: a remote file could not be obtained.
    """
    vocab_bpe = read_file_cached(vocab_bpe_file, vocab_bpe_hash)
    encoder_json = read_file_cached(encoder_json_file, encoder_json_hash)
    return _data_gym_ranks(
        vocab_bpe,
        encoder_json,
        clobber_one_byte_tokens=clobber_one_byte_tokens,
        vocab_source=os.fspath(vocab_bpe_file),
        encoder_source=os.fspath(encoder_json_file),
    )



# ---------------------------------------------------------------------------------------------
# `tokenmill.load(directory)` loads a saved encoding (see tokenmill.persist) while
# `tokenmill.load` stays this module, as `tiktoken.load` is for tiktoken users.
# ---------------------------------------------------------------------------------------------


class _CallableModule(types.ModuleType):
    def __call__(self, directory: "os.PathLike[str] | str") -> "Encoding":
        """Loads an encoding saved with :func:`tokenmill.save` (see :func:`tokenmill.persist.load`)."""
        from tokenmill.persist import load as _load_saved

        return _load_saved(directory)


sys.modules[__name__].__class__ = _CallableModule
