"""tokenmill: fast byte-level BPE.

* A drop-in replacement for tiktoken (``import tokenmill as tiktoken``): the same
  :class:`Encoding` API and the same token ids, computed by a Rust engine, with batch calls
  that run in parallel without the GIL.
* A fast trainer (:func:`train_from_iterator`, :class:`Trainer`, the ``tokenmill train``
  command) whose merges equal rustbpe's; :func:`save` and :func:`load` keep the result.
"""

from typing import TYPE_CHECKING, Any

from tokenmill import load  # the module; `tokenmill.load(dir)` also loads a saved encoding
from tokenmill._core import __version__
from tokenmill.core import Encoding
from tokenmill.load import (
    VocabularyFormatError,
    VocabularyNotAvailableError,
    dump_tiktoken_bpe,
    load_tiktoken_bpe,
)
from tokenmill.model import encoding_for_model, encoding_name_for_model
from tokenmill.patterns import NAMED_PATTERNS
from tokenmill.persist import save
from tokenmill.registry import get_encoding, list_encoding_names

if TYPE_CHECKING:
    from tokenmill.train import Trainer, train_from_iterator


def __getattr__(name: str) -> Any:
    # The trainer is imported on first use: it needs more of the standard library than
    # encoding does, and `import tokenmill` should stay quick.
    if name in ("Trainer", "train_from_iterator"):
        from tokenmill import train

        return getattr(train, name)
    raise AttributeError(f"module 'tokenmill' has no attribute {name!r}")

__all__ = [
    "Encoding",
    "NAMED_PATTERNS",
    "Trainer",
    "VocabularyFormatError",
    "VocabularyNotAvailableError",
    "__version__",
    "dump_tiktoken_bpe",
    "encoding_for_model",
    "encoding_name_for_model",
    "get_encoding",
    "list_encoding_names",
    "load",
    "load_tiktoken_bpe",
    "save",
    "train_from_iterator",
]
