"""Definitions of the built-in pretrained encodings.

Each public function here returns the keyword arguments for
``tokenmill.Encoding(**kwargs)``: a dict with the keys ``name``, ``pat_str``,
``mergeable_ranks``, ``special_tokens`` and, where the vocabulary size is pinned,
``explicit_n_vocab``. The vocabularies themselves are the files OpenAI publishes (the same
URLs, and the same sha256 checksums, that tiktoken 0.14 uses); they are read through
:mod:`tokenmill.load`, so they are downloaded at most once and shared with tiktoken's cache.

:data:`ENCODING_CONSTRUCTORS` maps each encoding name to its function; the registry
(:mod:`tokenmill.registry`) builds and memoises the :class:`~tokenmill.Encoding` objects.
"""

from __future__ import annotations

from typing import Any, Callable, Dict

from tokenmill import load as _load
from tokenmill.load import (
    VocabularyNotAvailableError,
    data_gym_to_mergeable_bpe_ranks,
    load_tiktoken_bpe,
)

__all__ = [
    "ENDOFTEXT",
    "STARTOFTEXT",
    "FIM_PREFIX",
    "FIM_MIDDLE",
    "FIM_SUFFIX",
    "ENDOFPROMPT",
    "R50K_PATTERN",
    "CL100K_PATTERN",
    "O200K_PATTERN",
    "gpt2",
    "r50k_base",
    "p50k_base",
    "p50k_edit",
    "cl100k_base",
    "o200k_base",
    "o200k_harmony",
    "ENCODING_CONSTRUCTORS",
]

# ---------------------------------------------------------------------------------------------
# Special token names
# ---------------------------------------------------------------------------------------------

ENDOFTEXT = "<|endoftext|>"
STARTOFTEXT = "<|startoftext|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_MIDDLE = "<|fim_middle|>"
FIM_SUFFIX = "<|fim_suffix|>"
ENDOFPROMPT = "<|endofprompt|>"

# ---------------------------------------------------------------------------------------------
# Pre-tokenisation patterns. Token ids depend on these byte for byte; do not "tidy" them.
# ---------------------------------------------------------------------------------------------

#: Pattern of gpt2, r50k_base, p50k_base and p50k_edit. It splits text the same way as the
#: pattern of the original GPT-2 release,
#: ``'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+``,
#: but uses possessive quantifiers, which backtracking engines run much faster.
R50K_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
)

#: Pattern of cl100k_base: case-insensitive contractions, letters with at most one leading
#: non-letter/non-digit, digits in groups of at most three, punctuation runs, newlines.
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
    r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)

_O200K_ALTERNATIVES = (
    # a word: optional leading symbol, upper/title-case run, then a lower-case run, contraction
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    # a word that is mostly upper case
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    # up to three digits
    r"""\p{N}{1,3}""",
    # punctuation, with trailing newlines or slashes
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    # whitespace ending in newlines
    r"""\s*[\r\n]+""",
    # whitespace not followed by text, then any whitespace
    r"""\s+(?!\S)""",
    r"""\s+""",
)

#: Pattern of o200k_base and o200k_harmony.
O200K_PATTERN = "|".join(_O200K_ALTERNATIVES)

# ---------------------------------------------------------------------------------------------
# Where the vocabularies are published
# ---------------------------------------------------------------------------------------------

_BLOB_ROOT = "https://openaipublic.blob.core.windows.net"

GPT2_VOCAB_BPE_URL = f"{_BLOB_ROOT}/gpt-2/encodings/main/vocab.bpe"
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
GPT2_ENCODER_JSON_URL = f"{_BLOB_ROOT}/gpt-2/encodings/main/encoder.json"
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"

R50K_URL = f"{_BLOB_ROOT}/encodings/r50k_base.tiktoken"
R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
P50K_URL = f"{_BLOB_ROOT}/encodings/p50k_base.tiktoken"
P50K_SHA256 = "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069"
CL100K_URL = f"{_BLOB_ROOT}/encodings/cl100k_base.tiktoken"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
O200K_URL = f"{_BLOB_ROOT}/encodings/o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

EncodingKwargs = Dict[str, Any]

# ---------------------------------------------------------------------------------------------
# Constructors
# ---------------------------------------------------------------------------------------------


def _gpt2_mergeable_ranks() -> Dict[bytes, int]:
    """GPT-2's ranks, from wherever they can be had with the least network traffic."""
    vocab_bpe = _load.read_cached_copy(GPT2_VOCAB_BPE_URL, GPT2_VOCAB_BPE_SHA256)
    encoder_json = _load.read_cached_copy(GPT2_ENCODER_JSON_URL, GPT2_ENCODER_JSON_SHA256)
    if vocab_bpe is not None and encoder_json is not None:
        return _load._data_gym_ranks(
            vocab_bpe,
            encoder_json,
            vocab_source=GPT2_VOCAB_BPE_URL,
            encoder_source=GPT2_ENCODER_JSON_URL,
        )
    r50k = _load.read_cached_copy(R50K_URL, R50K_SHA256)
    if r50k is not None:
        # Same ranks as GPT-2's data gym files, already on disk.
        return _load.parse_tiktoken_bpe(r50k, R50K_URL)
    try:
        return data_gym_to_mergeable_bpe_ranks(
            vocab_bpe_file=GPT2_VOCAB_BPE_URL,
            encoder_json_file=GPT2_ENCODER_JSON_URL,
            vocab_bpe_hash=GPT2_VOCAB_BPE_SHA256,
            encoder_json_hash=GPT2_ENCODER_JSON_SHA256,
        )
    except VocabularyNotAvailableError as e:
        r50k_path = _load.cache_path_for(R50K_URL)
        encoder_path = _load.cache_path_for(GPT2_ENCODER_JSON_URL)
        hint = (
            f"\ngpt2's original vocabulary consists of two files: {GPT2_VOCAB_BPE_URL} and "
            f"{GPT2_ENCODER_JSON_URL}"
            + (f" (cached as {encoder_path})" if encoder_path else "")
            + f".\nAlternatively, gpt2 can be built from the r50k_base vocabulary alone (its "
            f"ranks are identical): download {R50K_URL}"
            + (f" and save it as {r50k_path}." if r50k_path else " into the cache folder.")
        )
        raise VocabularyNotAvailableError(
            str(e) + hint, url=e.url, cache_path=e.cache_path, reason=e.reason
        ) from e


def gpt2() -> EncodingKwargs:
    """The encoding of the original GPT-2 release (50,257 tokens).

    Its ranks come from GPT-2's "data gym" files (``vocab.bpe`` + ``encoder.json``). Because
    those ranks are identical to r50k_base's, the vocabulary is obtained from the first source
    that works, in this order:

    1. valid cached copies of both data gym files;
    2. a valid cached copy of the r50k_base ``.tiktoken`` file (common on machines that have
       only ever used tiktoken's newer encodings; no network needed);
    3. downloading the data gym files.

    If none works (e.g. offline with an empty cache), the
    :class:`~tokenmill.load.VocabularyNotAvailableError` names both ways of providing it.
    """
    return {
        "name": "gpt2",
        "explicit_n_vocab": 50257,
        "pat_str": R50K_PATTERN,
        "mergeable_ranks": _gpt2_mergeable_ranks(),
        "special_tokens": {ENDOFTEXT: 50256},
    }


def r50k_base() -> EncodingKwargs:
    """The encoding of the GPT-3 era models such as ``davinci`` (50,257 tokens)."""
    mergeable_ranks = load_tiktoken_bpe(R50K_URL, expected_hash=R50K_SHA256)
    return {
        "name": "r50k_base",
        "explicit_n_vocab": 50257,
        "pat_str": R50K_PATTERN,
        "mergeable_ranks": mergeable_ranks,
        "special_tokens": {ENDOFTEXT: 50256},
    }


def p50k_base() -> EncodingKwargs:
    """The encoding of ``text-davinci-002/003`` and the Codex models (50,281 ids).

    r50k_base's vocabulary extended with 24 tokens for runs of spaces (ids 50257-50280, useful
    for code); id 50256 stays ``<|endoftext|>``.
    """
    mergeable_ranks = load_tiktoken_bpe(P50K_URL, expected_hash=P50K_SHA256)
    return {
        "name": "p50k_base",
        "explicit_n_vocab": 50281,
        "pat_str": R50K_PATTERN,
        "mergeable_ranks": mergeable_ranks,
        "special_tokens": {ENDOFTEXT: 50256},
    }


def p50k_edit() -> EncodingKwargs:
    """p50k_base plus the three fill-in-the-middle special tokens, for the edit models."""
    mergeable_ranks = load_tiktoken_bpe(P50K_URL, expected_hash=P50K_SHA256)
    return {
        "name": "p50k_edit",
        "pat_str": R50K_PATTERN,
        "mergeable_ranks": mergeable_ranks,
        "special_tokens": {
            ENDOFTEXT: 50256,
            FIM_PREFIX: 50281,
            FIM_MIDDLE: 50282,
            FIM_SUFFIX: 50283,
        },
    }


def cl100k_base() -> EncodingKwargs:
    """The encoding of GPT-3.5/GPT-4 and the ``text-embedding-3`` models (~100k tokens)."""
    mergeable_ranks = load_tiktoken_bpe(CL100K_URL, expected_hash=CL100K_SHA256)
    return {
        "name": "cl100k_base",
        "pat_str": CL100K_PATTERN,
        "mergeable_ranks": mergeable_ranks,
        "special_tokens": {
            ENDOFTEXT: 100257,
            FIM_PREFIX: 100258,
            FIM_MIDDLE: 100259,
            FIM_SUFFIX: 100260,
            ENDOFPROMPT: 100276,
        },
    }


def o200k_base() -> EncodingKwargs:
    """The encoding of GPT-4o, GPT-4.1, GPT-5 and the o-series models (~200k tokens)."""
    mergeable_ranks = load_tiktoken_bpe(O200K_URL, expected_hash=O200K_SHA256)
    return {
        "name": "o200k_base",
        "pat_str": O200K_PATTERN,
        "mergeable_ranks": mergeable_ranks,
        "special_tokens": {ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
    }


def _harmony_special_tokens(base: Dict[str, int]) -> Dict[str, int]:
    named = {
        STARTOFTEXT: 199998,
        ENDOFTEXT: 199999,
        "<|return|>": 200002,
        "<|constrain|>": 200003,
        "<|channel|>": 200005,
        "<|start|>": 200006,
        "<|end|>": 200007,
        "<|message|>": 200008,
        "<|call|>": 200012,
    }
    ids_in_use = set(named.values())
    special = dict(base)
    # Ids 200000-200012 not given a name above are reserved, then every id up to 201087.
    for token_id in range(200000, 200013):
        if token_id not in ids_in_use:
            named[f"<|reserved_{token_id}|>"] = token_id
    for name, token_id in sorted(named.items(), key=lambda item: item[1]):
        special[name] = token_id
    for token_id in range(200013, 201088):
        special[f"<|reserved_{token_id}|>"] = token_id
    return special


def o200k_harmony() -> EncodingKwargs:
    """o200k_base with the special tokens of OpenAI's "harmony" chat format (gpt-oss models).

    Adds ``<|startoftext|>`` (199998), the message-structure tokens ``<|return|>``,
    ``<|constrain|>``, ``<|channel|>``, ``<|start|>``, ``<|end|>``, ``<|message|>``,
    ``<|call|>`` and reserved placeholders ``<|reserved_N|>`` for every other id from 200000
    to 201087. ``<|endofprompt|>`` keeps id 200018 as in o200k_base; as in tiktoken, that id
    also has the reserved name ``<|reserved_200018|>``, so two special names share it.
    """
    base = o200k_base()
    return {
        "name": "o200k_harmony",
        "pat_str": base["pat_str"],
        "mergeable_ranks": base["mergeable_ranks"],
        "special_tokens": _harmony_special_tokens(base["special_tokens"]),
    }


#: Encoding name -> function returning the ``Encoding`` keyword arguments.
ENCODING_CONSTRUCTORS: Dict[str, Callable[[], EncodingKwargs]] = {
    "gpt2": gpt2,
    "r50k_base": r50k_base,
    "p50k_base": p50k_base,
    "p50k_edit": p50k_edit,
    "cl100k_base": cl100k_base,
    "o200k_base": o200k_base,
    "o200k_harmony": o200k_harmony,
}
