"""A rustbpe-compatible tokenizer, so that code written for ``rustbpe`` (e.g. nanochat's
tokenizer training) runs by swapping the import::

    from tokenmill import rustbpe
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(texts, vocab_size=32768)
    ranks = {bytes(k): v for k, v in tok.get_mergeable_ranks()}

The merges are identical to rustbpe's for the same input and pattern; encoding uses
tokenmill's engine on the learned ranks.
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Tuple

from tokenmill.core import Encoding
from tokenmill.patterns import RUSTBPE_PATTERN
from tokenmill.train import Trainer


class Tokenizer:
    """rustbpe's ``Tokenizer``: train, then encode and decode."""

    def __init__(self) -> None:
        self._pattern = ""
        self._encoding: Optional[Encoding] = None
        # Untrained, the vocabulary is the 256 byte tokens (as rustbpe's).
        self._ranks: List[Tuple[bytes, int]] = [(bytes([b]), b) for b in range(256)]

    def train_from_iterator(
        self,
        iterator: Iterable[str],
        vocab_size: int,
        buffer_size: int = 8192,
        pattern: Optional[str] = None,
    ) -> None:
        """Trains ``vocab_size - 256`` merges on the strings of ``iterator``."""
        if vocab_size < 256:
            raise ValueError(f"vocab_size must be at least 256, got {vocab_size}")
        trainer = Trainer(pattern if pattern is not None else RUSTBPE_PATTERN)
        trainer.update_from_iterator(iterator, buffer_size=buffer_size, progress=False)
        self._pattern = trainer.pattern
        if trainer.distinct_spans == 0:
            ranks = {bytes([b]): b for b in range(256)}
            self._encoding = Encoding("rustbpe", pat_str=self._pattern, mergeable_ranks=ranks, special_tokens={})
        else:
            self._encoding = trainer.train(vocab_size, name="rustbpe", progress=False)
        merges = getattr(self._encoding, "_merges", [])
        tokens: List[bytes] = [bytes([b]) for b in range(256)]
        for a, b in merges:
            tokens.append(tokens[a] + tokens[b])
        self._ranks = [(t, i) for i, t in enumerate(tokens)]

    def get_pattern(self) -> str:
        return self._pattern

    def get_mergeable_ranks(self) -> List[Tuple[bytes, int]]:
        """``(token bytes, id)`` for every token, by id."""
        return list(self._ranks)

    @property
    def vocab_size(self) -> int:
        return 256 + max(0, len(self._ranks) - 256)

    def _enc(self) -> Encoding:
        if self._encoding is None:
            raise ValueError("the tokenizer is not trained yet: call train_from_iterator first")
        return self._encoding

    def encode(self, text: str) -> List[int]:
        return self._enc().encode_ordinary(text)

    def decode(self, ids: List[int]) -> str:
        """Decodes ids; raises ``UnicodeDecodeError`` if the bytes are not valid UTF-8."""
        return self._enc().decode(ids, errors="strict")

    def batch_encode(self, texts: List[str]) -> List[List[int]]:
        return self._enc().encode_ordinary_batch(texts)
