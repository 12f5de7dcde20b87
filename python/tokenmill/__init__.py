"""tokenmill: fast byte-level BPE.

A drop-in replacement for tiktoken (``import tokenmill as tiktoken``): the same
:class:`Encoding` API and the same token ids, computed by a Rust engine, with batch calls
that run in parallel without the GIL.
"""

from tokenmill._core import __version__
from tokenmill.core import Encoding
from tokenmill.load import (
    VocabularyFormatError,
    VocabularyNotAvailableError,
    dump_tiktoken_bpe,
    load_tiktoken_bpe,
)
from tokenmill.model import encoding_for_model, encoding_name_for_model
from tokenmill.registry import get_encoding, list_encoding_names

__all__ = [
    "Encoding",
    "VocabularyFormatError",
    "VocabularyNotAvailableError",
    "__version__",
    "dump_tiktoken_bpe",
    "encoding_for_model",
    "encoding_name_for_model",
    "get_encoding",
    "list_encoding_names",
    "load_tiktoken_bpe",
]
