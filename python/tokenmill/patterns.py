"""Split patterns by name, for training.

``nanochat`` (the default) is nanochat's GPT-4-style pattern: like cl100k's but with numbers
in groups of at most two digits, which spends less of a small vocabulary on numbers.
"""

from __future__ import annotations

from typing import Dict

from tokenmill.pretrained import CL100K_PATTERN, O200K_PATTERN, R50K_PATTERN

#: nanochat's ``SPLIT_PATTERN``.
NANOCHAT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|"""
    r"""\s*[\r\n]|\s+(?!\S)|\s+"""
)

#: rustbpe's default pattern (GPT-4's split as published before tiktoken 0.10).
RUSTBPE_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|"""
    r"""\s*[\r\n]|\s+(?!\S)|\s+"""
)

NAMED_PATTERNS: Dict[str, str] = {
    "nanochat": NANOCHAT_PATTERN,
    "gpt2": R50K_PATTERN,
    "r50k": R50K_PATTERN,
    "cl100k": CL100K_PATTERN,
    "gpt4": CL100K_PATTERN,
    "o200k": O200K_PATTERN,
    "rustbpe": RUSTBPE_PATTERN,
}

DEFAULT_PATTERN = "nanochat"


def resolve_pattern(pattern: str) -> str:
    """A pattern name from :data:`NAMED_PATTERNS` becomes its regex; anything else is taken
    as a regex itself (it is compiled, and errors reported, by the engine)."""
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a str (a name or a regex), got {type(pattern).__name__}")
    return NAMED_PATTERNS.get(pattern, pattern)
