"""Shared fixtures for the tokenmill test-suite.

The parity tests compare tokenmill against tiktoken (the oracle). Both libraries load the
pretrained vocabularies from the tiktoken cache folder named by ``TIKTOKEN_CACHE_DIR``; nothing
is ever downloaded by the tests. When a vocabulary file is missing, the tests that need it are
skipped with a reason naming the file (or fail, when ``TOKENMILL_REQUIRE_VOCABS=1``).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import hashlib
import os
import pathlib
import sysconfig
import tempfile

import pytest
from hypothesis import HealthCheck, settings

# --------------------------------------------------------------------------------------
# Hypothesis profiles
# --------------------------------------------------------------------------------------
# "default": quick enough to keep the whole suite at a few minutes on 2 cores.
# "ci": the same amount of work, derandomised so a CI run is reproducible.
# "thorough": for local bug hunting (TOKENMILL_HYPOTHESIS_PROFILE=thorough).
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile(
    "default", max_examples=100, deadline=None, suppress_health_check=_SUPPRESS, print_blob=True
)
settings.register_profile(
    "ci", max_examples=100, deadline=None, suppress_health_check=_SUPPRESS, derandomize=True,
    database=None, print_blob=True,
)
settings.register_profile(
    "thorough", max_examples=2000, deadline=None, suppress_health_check=_SUPPRESS, print_blob=True
)
_profile = os.environ.get("TOKENMILL_HYPOTHESIS_PROFILE") or (
    "ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "default"
)
settings.load_profile(_profile)

# --------------------------------------------------------------------------------------
# Where the pretrained vocabularies live
# --------------------------------------------------------------------------------------
_REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent

if "TIKTOKEN_CACHE_DIR" not in os.environ:
    # Convenience for a checkout with the project's shared/ folder inside or beside it.
    for _candidate in (
        _REPO_ROOT / "shared" / "tiktoken_cache",
        _REPO_ROOT.parent / "shared" / "tiktoken_cache",
    ):
        if _candidate.is_dir():
            os.environ["TIKTOKEN_CACHE_DIR"] = str(_candidate)
            break

# The public URL tiktoken fetches each vocabulary from; its sha1 names the cache file.
_BLOB_BASE = "https://openaipublic.blob.core.windows.net/encodings/"

PRETRAINED = ["r50k_base", "p50k_base", "cl100k_base", "o200k_base"]

# encoding name -> the .tiktoken vocabulary file it is built from
_VOCAB_FILE_OF = {
    "r50k_base": "r50k_base",
    "p50k_base": "p50k_base",
    "p50k_edit": "p50k_base",
    "cl100k_base": "cl100k_base",
    "o200k_base": "o200k_base",
    "o200k_harmony": "o200k_base",
}


def tiktoken_cache_dir() -> str:
    """The folder tiktoken reads its cache from (same precedence as tiktoken.load)."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return os.environ["TIKTOKEN_CACHE_DIR"]
    if "DATA_GYM_CACHE_DIR" in os.environ:
        return os.environ["DATA_GYM_CACHE_DIR"]
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def vocab_cache_path(encoding_name: str) -> str:
    vocab = _VOCAB_FILE_OF[encoding_name]
    url = f"{_BLOB_BASE}{vocab}.tiktoken"
    return os.path.join(tiktoken_cache_dir(), hashlib.sha1(url.encode()).hexdigest())


def _missing_vocab(msg: str):
    if os.environ.get("TOKENMILL_REQUIRE_VOCABS", "") not in ("", "0"):
        pytest.fail(msg + " (TOKENMILL_REQUIRE_VOCABS is set)", pytrace=False)
    pytest.skip(msg)


@contextlib.contextmanager
def _no_downloads():
    """Make any attempt by tiktoken (or tokenmill, if it has the same hook) to fetch a URL fail."""
    patched = []
    import tiktoken.load

    modules = [tiktoken.load]
    try:
        import tokenmill.load as tm_load  # type: ignore

        modules.append(tm_load)
    except Exception:  # pragma: no cover - depends on tokenmill's layout
        pass
    for mod in modules:
        orig = getattr(mod, "read_file", None)
        if not callable(orig):
            continue

        def guarded(blobpath, *args, __orig=orig, **kwargs):
            if isinstance(blobpath, str) and "://" in blobpath:
                raise RuntimeError(f"test-suite refuses to download {blobpath}")
            return __orig(blobpath, *args, **kwargs)

        mod.read_file = guarded
        patched.append((mod, orig))
    try:
        yield
    finally:
        for mod, orig in patched:
            mod.read_file = orig


@dataclasses.dataclass(frozen=True)
class EncPair:
    name: str
    tm: object  # tokenmill.Encoding
    tt: object  # tiktoken.Encoding

    def __iter__(self):  # allows `tm, tt = pair`
        return iter((self.tm, self.tt))


@functools.lru_cache(maxsize=None)
def load_pair(name: str) -> EncPair:
    """(tokenmill, tiktoken) encodings for a registered name, each via its own get_encoding."""
    path = vocab_cache_path(name)
    if not os.path.exists(path):
        _missing_vocab(
            f"vocabulary for {name} not available: expected tiktoken cache file {path} "
            f"(set TIKTOKEN_CACHE_DIR to the folder holding the pretrained vocabularies)"
        )
    import tiktoken

    import tokenmill

    with _no_downloads():
        try:
            tt = tiktoken.get_encoding(name)
        except RuntimeError as e:  # the cache file exists but was rejected (hash mismatch)
            _missing_vocab(f"tiktoken could not load {name} from {path} without network: {e}")
        tm = tokenmill.get_encoding(name)
    return EncPair(name, tm, tt)


@pytest.fixture(scope="session", params=PRETRAINED)
def encs(request) -> EncPair:
    """Parametrised (tokenmill_encoding, tiktoken_encoding) pair over the pretrained encodings."""
    return load_pair(request.param)


@pytest.fixture(scope="session")
def get_pair():
    """Factory fixture: get_pair("o200k_harmony") -> EncPair (skips if the vocab is missing)."""
    return load_pair


@pytest.fixture(scope="session")
def cl100k() -> EncPair:
    return load_pair("cl100k_base")


@pytest.fixture(scope="session")
def o200k() -> EncPair:
    return load_pair("o200k_base")


# --------------------------------------------------------------------------------------
# Corpus: the running Python's standard library sources
# --------------------------------------------------------------------------------------
CORPUS_TARGET_CHARS = 3_000_000
_CORPUS_STRIDE = 8


@dataclasses.dataclass(frozen=True)
class Corpus:
    files: list  # list[tuple[str, str]]: (path relative to the stdlib, text)
    docstrings: list  # list[str]

    @property
    def texts(self) -> list:
        return [t for _, t in self.files]

    @functools.cached_property
    def lines(self) -> list:
        return [line for t in self.texts for line in t.splitlines(keepends=True)]


def _docstrings(source: str) -> list:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append(doc)
    return out


@functools.lru_cache(maxsize=None)
def _load_corpus() -> Corpus:
    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(
        p
        for p in stdlib.rglob("*.py")
        if "site-packages" not in p.parts and "dist-packages" not in p.parts and p.is_file()
    )
    files = []
    total = 0
    for p in paths[::_CORPUS_STRIDE]:
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        files.append((p.relative_to(stdlib).as_posix(), text))
        total += len(text)
        if total >= CORPUS_TARGET_CHARS:
            break
    if total < 100_000:
        pytest.skip(f"standard-library sources not found under {stdlib}")
    docs = [d for _, text in files for d in _docstrings(text)]
    return Corpus(files=files, docstrings=docs)


@pytest.fixture(scope="session")
def corpus() -> Corpus:
    """Deterministic ~3 MB sample of the standard library's .py sources plus their docstrings."""
    return _load_corpus()
