"""Which encoding each OpenAI model uses.

The tables hold the same model-to-encoding facts as tiktoken 0.14. A model name is resolved
by an exact match in :data:`MODEL_TO_ENCODING` first, then by the first matching prefix in
:data:`MODEL_PREFIX_TO_ENCODING` (checked in the order listed), which covers dated snapshots,
fine-tunes and Azure deployment names without listing each one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict

from tokenmill.registry import get_encoding

if TYPE_CHECKING:  # pragma: no cover
    from tokenmill.core import Encoding

__all__ = [
    "MODEL_TO_ENCODING",
    "MODEL_PREFIX_TO_ENCODING",
    "encoding_name_for_model",
    "encoding_for_model",
]

#: Model-name prefix -> encoding name. Order matters: the first prefix that matches wins.
MODEL_PREFIX_TO_ENCODING: Dict[str, str] = {
    # reasoning models
    "o1-": "o200k_base",
    "o3-": "o200k_base",
    "o4-mini-": "o200k_base",
    # chat models (dated snapshots and variants)
    "gpt-5": "o200k_base",
    "gpt-4.5-": "o200k_base",
    "gpt-4.1-": "o200k_base",
    "chatgpt-4o-": "o200k_base",
    "gpt-4o-": "o200k_base",
    "gpt-4-": "cl100k_base",
    "gpt-3.5-turbo-": "cl100k_base",
    "gpt-35-turbo-": "cl100k_base",  # Azure spelling
    "gpt-oss-": "o200k_harmony",
    # fine-tuned models ("ft:<base model>:...")
    "ft:gpt-4o": "o200k_base",
    "ft:gpt-4": "cl100k_base",
    "ft:gpt-3.5-turbo": "cl100k_base",
    "ft:davinci-002": "cl100k_base",
    "ft:babbage-002": "cl100k_base",
}

#: Exact model name -> encoding name.
MODEL_TO_ENCODING: Dict[str, str] = {
    # reasoning models
    "o1": "o200k_base",
    "o3": "o200k_base",
    "o4-mini": "o200k_base",
    # chat models
    "gpt-5": "o200k_base",
    "gpt-4.1": "o200k_base",
    "gpt-4o": "o200k_base",
    "gpt-4": "cl100k_base",
    "gpt-3.5-turbo": "cl100k_base",
    "gpt-3.5": "cl100k_base",
    "gpt-35-turbo": "cl100k_base",  # Azure spelling
    # base models
    "davinci-002": "cl100k_base",
    "babbage-002": "cl100k_base",
    # embedding models
    "text-embedding-ada-002": "cl100k_base",
    "text-embedding-3-small": "cl100k_base",
    "text-embedding-3-large": "cl100k_base",
    # deprecated completion models
    "text-davinci-003": "p50k_base",
    "text-davinci-002": "p50k_base",
    "text-davinci-001": "r50k_base",
    "text-curie-001": "r50k_base",
    "text-babbage-001": "r50k_base",
    "text-ada-001": "r50k_base",
    "davinci": "r50k_base",
    "curie": "r50k_base",
    "babbage": "r50k_base",
    "ada": "r50k_base",
    # deprecated code models
    "code-davinci-002": "p50k_base",
    "code-davinci-001": "p50k_base",
    "code-cushman-002": "p50k_base",
    "code-cushman-001": "p50k_base",
    "davinci-codex": "p50k_base",
    "cushman-codex": "p50k_base",
    # deprecated edit models
    "text-davinci-edit-001": "p50k_edit",
    "code-davinci-edit-001": "p50k_edit",
    # deprecated first-generation embedding and search models
    "text-similarity-davinci-001": "r50k_base",
    "text-similarity-curie-001": "r50k_base",
    "text-similarity-babbage-001": "r50k_base",
    "text-similarity-ada-001": "r50k_base",
    "text-search-davinci-doc-001": "r50k_base",
    "text-search-curie-doc-001": "r50k_base",
    "text-search-babbage-doc-001": "r50k_base",
    "text-search-ada-doc-001": "r50k_base",
    "code-search-babbage-code-001": "r50k_base",
    "code-search-ada-code-001": "r50k_base",
    # open models
    "gpt2": "gpt2",
    "gpt-2": "gpt2",
}


def encoding_name_for_model(model_name: str) -> str:
    """Return the name of the encoding the model ``model_name`` uses.

    An exact entry in :data:`MODEL_TO_ENCODING` wins; otherwise the first prefix of
    :data:`MODEL_PREFIX_TO_ENCODING` that ``model_name`` starts with decides. Prefix matching
    also accepts names of models that do not exist (e.g. ``gpt-4o-anything``).

    Raises:
        KeyError: the name matches neither table.
    """
    encoding_name = MODEL_TO_ENCODING.get(model_name)
    if encoding_name is not None:
        return encoding_name
    for prefix, encoding_name in MODEL_PREFIX_TO_ENCODING.items():
        if model_name.startswith(prefix):
            return encoding_name
    raise KeyError(
        f"No known encoding for the model {model_name!r}. Pick one explicitly with "
        f"tokenmill.get_encoding(name), e.g. 'o200k_base' for recent OpenAI models."
    )


def encoding_for_model(model_name: str) -> "Encoding":
    """Return the :class:`~tokenmill.Encoding` that the model ``model_name`` uses.

    Raises:
        KeyError: the model name is not recognised (see :func:`encoding_name_for_model`).
    """
    return get_encoding(encoding_name_for_model(model_name))
