"""Tests of tokenmill.registry, tokenmill.model and tokenmill.pretrained.

The facts (model tables, URLs, hashes, special token ids, patterns) are checked against
tiktoken 0.14, the reference. Nothing is downloaded: loaders are either replaced by recorders or
run with ``TOKENMILL_OFFLINE=1`` against the cache named by ``TIKTOKEN_CACHE_DIR``.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
import threading
import urllib.request
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest

import tokenmill.load as tm_load
import tokenmill.model as tm_model
import tokenmill.pretrained as tm_pretrained
import tokenmill.registry as tm_registry
from tokenmill.load import VocabularyNotAvailableError

REAL_CACHE_DIR = os.environ.get("TIKTOKEN_CACHE_DIR")

BUILTIN_NAMES = [
    "gpt2", "r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base", "o200k_harmony",
]

# encoding -> the .tiktoken file its ranks come from (gpt2 via the r50k_base fallback)
_VOCAB_OF = {
    "gpt2": "r50k_base",
    "r50k_base": "r50k_base",
    "p50k_base": "p50k_base",
    "p50k_edit": "p50k_base",
    "cl100k_base": "cl100k_base",
    "o200k_base": "o200k_base",
    "o200k_harmony": "o200k_base",
}


def _vocab_path(vocab: str) -> str:
    url = f"https://openaipublic.blob.core.windows.net/encodings/{vocab}.tiktoken"
    return os.path.join(REAL_CACHE_DIR or "", hashlib.sha1(url.encode()).hexdigest())


@pytest.fixture
def real_cache(monkeypatch):
    """Use the real vocabulary cache, offline. Skips if it is not configured."""
    if not REAL_CACHE_DIR:
        pytest.skip("TIKTOKEN_CACHE_DIR is not set, so the pretrained vocabularies are unavailable")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", REAL_CACHE_DIR)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    monkeypatch.setenv("TOKENMILL_OFFLINE", "1")
    return REAL_CACHE_DIR


def _need_vocab(encoding_name: str) -> None:
    path = _vocab_path(_VOCAB_OF[encoding_name])
    if not os.path.isfile(path):
        pytest.skip(f"vocabulary for {encoding_name} not found at {path}")


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(request, *args, **kwargs):
        raise AssertionError(f"test tried to open {getattr(request, 'full_url', request)}")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


# ---------------------------------------------------------------------------------------------
# Model name -> encoding
# ---------------------------------------------------------------------------------------------


def test_model_tables_equal_tiktoken():
    import tiktoken.model as tt_model

    assert tm_model.MODEL_TO_ENCODING == tt_model.MODEL_TO_ENCODING
    # prefix order matters (first match wins)
    assert list(tm_model.MODEL_PREFIX_TO_ENCODING.items()) == list(
        tt_model.MODEL_PREFIX_TO_ENCODING.items()
    )


EXTRA_MODEL_NAMES = [
    "gpt-4o-2024-05-13", "gpt-4o-mini", "chatgpt-4o-latest", "gpt-4-0314", "gpt-4-32k",
    "gpt-4-turbo", "gpt-3.5-turbo-0301", "gpt-3.5-turbo-16k", "gpt-35-turbo-16k",
    "gpt-4.1-nano", "gpt-4.5-preview", "gpt-5-mini", "gpt-5", "o1-preview", "o3-mini",
    "o4-mini-2025-04-16", "gpt-oss-120b", "gpt-oss-20b", "ft:gpt-4o-mini:org::abc",
    "ft:gpt-4-0613:org::x", "ft:gpt-3.5-turbo-0125:org::y", "ft:davinci-002:org::z",
    "ft:babbage-002:o::q",
]
UNKNOWN_MODEL_NAMES = ["", "llama-3", "gpt-3", "text-davinci", "o2", "GPT-4", "claude"]


@pytest.mark.parametrize(
    "model",
    sorted(
        set(tm_model.MODEL_TO_ENCODING)
        | set(tm_model.MODEL_PREFIX_TO_ENCODING)
        | set(EXTRA_MODEL_NAMES)
    ),
)
def test_encoding_name_for_model_agrees_with_tiktoken(model):
    import tiktoken.model as tt_model

    assert tm_model.encoding_name_for_model(model) == tt_model.encoding_name_for_model(model)


def test_every_tiktoken_model_name_is_known():
    import tiktoken.model as tt_model

    for model in list(tt_model.MODEL_TO_ENCODING) + list(tt_model.MODEL_PREFIX_TO_ENCODING):
        assert tm_model.encoding_name_for_model(model) == tt_model.encoding_name_for_model(model)


@pytest.mark.parametrize("model", UNKNOWN_MODEL_NAMES)
def test_unknown_model_raises_key_error(model):
    import tiktoken.model as tt_model

    with pytest.raises(KeyError):
        tt_model.encoding_name_for_model(model)
    with pytest.raises(KeyError):
        tm_model.encoding_name_for_model(model)
    with pytest.raises(KeyError):
        tm_model.encoding_for_model(model)


def test_model_encodings_are_registered():
    names = set(tm_registry.list_encoding_names())
    assert set(tm_model.MODEL_TO_ENCODING.values()) <= names
    assert set(tm_model.MODEL_PREFIX_TO_ENCODING.values()) <= names


# ---------------------------------------------------------------------------------------------
# Pretrained definitions: the same facts as tiktoken_ext.openai_public
# ---------------------------------------------------------------------------------------------


class _Recorder:
    """Replaces a vocabulary loader: records its (normalised) arguments, returns a marker."""

    def __init__(self, real):
        self.signature = inspect.signature(real)
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, *args, **kwargs):
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        self.calls.append(dict(bound.arguments))
        return {b"<marker>": 0}


def _record(monkeypatch, module, real_bpe, real_gym):
    bpe, gym = _Recorder(real_bpe), _Recorder(real_gym)
    monkeypatch.setattr(module, "load_tiktoken_bpe", bpe)
    monkeypatch.setattr(module, "data_gym_to_mergeable_bpe_ranks", gym)
    return bpe, gym


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_pretrained_definitions_match_tiktoken(name, monkeypatch, tmp_path):
    import tiktoken.load as tt_load
    import tiktoken_ext.openai_public as openai_public

    # an empty cache, offline: gpt2 has nothing to fall back on and calls the data gym loader
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TOKENMILL_OFFLINE", "1")
    tt_bpe, tt_gym = _record(monkeypatch, openai_public, tt_load.load_tiktoken_bpe,
                             tt_load.data_gym_to_mergeable_bpe_ranks)
    tm_bpe, tm_gym = _record(monkeypatch, tm_pretrained, tm_load.load_tiktoken_bpe,
                             tm_load.data_gym_to_mergeable_bpe_ranks)

    theirs = openai_public.ENCODING_CONSTRUCTORS[name]()
    ours = tm_pretrained.ENCODING_CONSTRUCTORS[name]()

    assert ours.keys() == theirs.keys()
    assert ours["name"] == theirs["name"] == name
    assert ours["pat_str"] == theirs["pat_str"]
    assert ours.get("explicit_n_vocab") == theirs.get("explicit_n_vocab")
    assert ours["special_tokens"] == theirs["special_tokens"]
    assert list(ours["special_tokens"].items()) == list(theirs["special_tokens"].items())
    assert ours["mergeable_ranks"] == theirs["mergeable_ranks"]  # the marker
    # same URLs and sha256 hashes
    assert tm_bpe.calls == tt_bpe.calls
    assert tm_gym.calls == tt_gym.calls


def test_pattern_constants():
    import tiktoken_ext.openai_public as openai_public

    assert tm_pretrained.R50K_PATTERN == openai_public.r50k_pat_str
    assert tm_pretrained.ENCODING_CONSTRUCTORS["cl100k_base"] is tm_pretrained.cl100k_base
    assert tm_pretrained.CL100K_PATTERN.startswith("'(?i:[sdmt]|ll|ve|re)|")
    assert tm_pretrained.O200K_PATTERN.count("|") >= 6
    assert tm_pretrained.ENDOFTEXT == openai_public.ENDOFTEXT
    assert tm_pretrained.FIM_PREFIX == openai_public.FIM_PREFIX
    assert tm_pretrained.FIM_MIDDLE == openai_public.FIM_MIDDLE
    assert tm_pretrained.FIM_SUFFIX == openai_public.FIM_SUFFIX
    assert tm_pretrained.ENDOFPROMPT == openai_public.ENDOFPROMPT


def test_gpt2_falls_back_to_cached_r50k_vocabulary(real_cache):
    _need_vocab("r50k_base")
    kwargs = tm_pretrained.gpt2()
    r50k = tm_pretrained.r50k_base()
    assert kwargs["name"] == "gpt2"
    assert kwargs["explicit_n_vocab"] == 50257
    assert kwargs["mergeable_ranks"] == r50k["mergeable_ranks"]
    assert len(kwargs["mergeable_ranks"]) == 50256


def test_gpt2_unavailable_offline_names_both_sources(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TOKENMILL_OFFLINE", "1")
    with pytest.raises(VocabularyNotAvailableError) as info:
        tm_pretrained.gpt2()
    msg = str(info.value)
    assert tm_pretrained.GPT2_VOCAB_BPE_URL in msg
    assert tm_pretrained.R50K_URL in msg
    assert str(tmp_path) in msg


@pytest.mark.parametrize("name", [n for n in BUILTIN_NAMES if n != "gpt2"])
def test_pretrained_offline_without_cache_raises_clear_error(name, tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TOKENMILL_OFFLINE", "1")
    with pytest.raises(VocabularyNotAvailableError) as info:
        tm_pretrained.ENCODING_CONSTRUCTORS[name]()
    assert str(tmp_path) in str(info.value)
    assert ".tiktoken" in str(info.value)


# ---------------------------------------------------------------------------------------------
# Registry: names, argument checking, plugins
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def fresh_registry():
    tm_registry._reset()
    yield tm_registry
    tm_registry._reset()


def test_list_encoding_names_has_the_builtins_first(fresh_registry):
    names = tm_registry.list_encoding_names()
    assert names[: len(BUILTIN_NAMES)] == BUILTIN_NAMES
    assert len(names) == len(set(names))


@pytest.mark.parametrize("bad", [None, 123, b"cl100k_base", ["cl100k_base"]])
def test_get_encoding_rejects_non_strings(bad):
    with pytest.raises(ValueError):
        tm_registry.get_encoding(bad)


def test_get_encoding_unknown_name_lists_known_names():
    with pytest.raises(ValueError) as info:
        tm_registry.get_encoding("cl200k_base")
    msg = str(info.value)
    assert "cl200k_base" in msg
    for name in BUILTIN_NAMES:
        assert name in msg


PLUGIN_OK = '''
def tiny():
    return {
        "name": "tm_test_tiny",
        "pat_str": r"\\S+|\\s+",
        "mergeable_ranks": {bytes([i]): i for i in range(256)},
        "special_tokens": {"<|tiny_end|>": 256},
    }

def fake_cl100k():
    raise AssertionError("a plugin must not replace a built-in encoding")

ENCODING_CONSTRUCTORS = {"tm_test_tiny": tiny, "cl100k_base": fake_cl100k}
'''

PLUGIN_BROKEN = '''
raise ImportError("this plugin is broken on purpose")
'''

PLUGIN_EMPTY = '''
X = 1
'''


@pytest.fixture
def plugins(tmp_path, monkeypatch, fresh_registry):
    pkg = tmp_path / "tiktoken_ext"
    pkg.mkdir()
    (pkg / "tm_test_plugin_ok.py").write_text(PLUGIN_OK)
    (pkg / "tm_test_plugin_broken.py").write_text(PLUGIN_BROKEN)
    (pkg / "tm_test_plugin_empty.py").write_text(PLUGIN_EMPTY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield fresh_registry
    for mod in list(sys.modules):
        if mod.startswith("tiktoken_ext.tm_test_plugin"):
            del sys.modules[mod]


def test_plugins_add_names_but_never_replace_builtins(plugins):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = plugins.list_encoding_names()
    assert "tm_test_tiny" in names
    assert names[: len(BUILTIN_NAMES)] == BUILTIN_NAMES
    assert plugins.ENCODING_CONSTRUCTORS["cl100k_base"] is tm_pretrained.cl100k_base
    messages = [str(w.message) for w in caught]
    assert any("tm_test_plugin_broken" in m for m in messages), messages
    assert any("tm_test_plugin_empty" in m for m in messages), messages
    assert "tiktoken_ext.openai_public" not in plugins._plugin_modules
    assert "tiktoken_ext.tm_test_plugin_ok" in plugins._plugin_modules


def test_broken_plugin_does_not_break_unknown_name_error(plugins):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="tm_test_tiny"):
            plugins.get_encoding("no_such_encoding")


# ---------------------------------------------------------------------------------------------
# Registry with real Encoding objects (needs the compiled extension)
# ---------------------------------------------------------------------------------------------


def test_plugin_encoding_is_built(plugins):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        enc = plugins.get_encoding("tm_test_tiny")
    assert enc.name == "tm_test_tiny"
    assert enc.encode("ab c") == [97, 98, 32, 99]
    assert plugins.get_encoding("tm_test_tiny") is enc


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_get_encoding_builtins(name, real_cache, monkeypatch):
    _need_vocab(name)
    import tiktoken
    import tiktoken.load as tt_load

    def refuse(blobpath):
        raise AssertionError(f"tiktoken tried to download {blobpath}")

    monkeypatch.setattr(tt_load, "read_file", refuse)
    enc = tm_registry.get_encoding(name)
    assert enc.name == name
    assert tm_registry.get_encoding(name) is enc
    assert tm_registry.ENCODINGS[name] is enc
    # gpt2's vocabulary is r50k_base's (tiktoken would have to download gpt2's own files)
    reference = tiktoken.get_encoding("r50k_base" if name == "gpt2" else name)
    assert enc.n_vocab == reference.n_vocab
    assert enc.encode("hello world <|endoftext|>", allowed_special="all") == reference.encode(
        "hello world <|endoftext|>", allowed_special="all"
    )


def test_get_encoding_is_thread_safe(real_cache, fresh_registry):
    _need_vocab("r50k_base")
    barrier = threading.Barrier(8)

    def get(_):
        barrier.wait()
        return tm_registry.get_encoding("r50k_base")

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(get, range(8)))
    assert all(r is results[0] for r in results)


def test_encoding_for_model(real_cache):
    _need_vocab("cl100k_base")
    _need_vocab("o200k_base")
    assert tm_model.encoding_for_model("gpt-4") is tm_registry.get_encoding("cl100k_base")
    assert tm_model.encoding_for_model("gpt-4o-2024-05-13") is tm_registry.get_encoding(
        "o200k_base"
    )
