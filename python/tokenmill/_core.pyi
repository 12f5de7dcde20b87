"""Type stubs for the Rust extension ``tokenmill._core``."""

import builtins
from typing import AbstractSet, Callable, Collection, Literal, Optional, Sequence, Union

__version__: str

_Allowed = Union[Literal["all"], AbstractSet[str]]
_Disallowed = Union[Literal["all"], Collection[str]]

def available_cores() -> int:
    """The number of cores batch calls may use."""

def parse_tiktoken_canonical(contents: bytes) -> dict[bytes, int] | None:
    """A ``.tiktoken`` file in its canonical form (``<base64> <rank>`` lines, single spaces,
    ``\\n`` line ends, no repeated token or rank) as ``{token: rank}``; ``None`` for any other
    form, which :func:`tokenmill.load.parse_tiktoken_bpe` then parses line by line."""

def tiktoken_merges(
    mergeable_ranks: dict[bytes, int],
) -> tuple[list[tuple[int, bytes, bytes]], list[bytes]]:
    """Every token's tiktoken merge as ``(rank, left, right)``, sorted by rank, and the tokens
    no merge run rebuilds, in the dict's order (see :func:`tokenmill.huggingface.tiktoken_merges`)."""

class CoreBPE:
    """The compiled encoder behind :class:`tokenmill.Encoding`."""

    def __init__(
        self, mergeable_ranks: dict[bytes, int], special_tokens: dict[str, int], pattern: str
    ) -> None: ...
    @property
    def fast_pretokenizer(self) -> bool:
        """Whether the pattern runs on a hand-written scanner or the DFA (else on fancy-regex)."""
    def encode_ordinary(self, text: str) -> list[int]: ...
    def encode(self, text: str, allowed_special: _Allowed, disallowed_special: _Disallowed | None = None) -> list[int]:
        """Without ``disallowed_special``, as tiktoken's ``CoreBPE.encode(text, allowed_special)``."""
    def encode_to_bytes(
        self, text: str, allowed_special: _Allowed, disallowed_special: _Disallowed | None = None
    ) -> bytes:
        """Token ids as native-endian uint32 bytes."""
    def encode_to_tiktoken_buffer(self, text: str, allowed_special: _Allowed) -> bytes:
        """tiktoken's name for ``encode_to_bytes`` without ``disallowed_special``."""
    def encode_batch(
        self, texts: Sequence[str], allowed_special: _Allowed, disallowed_special: _Disallowed, num_threads: int
    ) -> list[list[int]]: ...
    def encode_ordinary_batch(self, texts: Sequence[str], num_threads: int) -> list[list[int]]: ...
    def count_ordinary(self, text: str) -> int:
        """The number of ids ``encode_ordinary`` would return, without making them."""
    def count(self, text: str, allowed_special: _Allowed, disallowed_special: _Disallowed) -> int:
        """The number of ids ``encode`` would return (or its error), without making them."""
    def count_ordinary_batch(self, texts: Sequence[str], num_threads: int) -> list[int]: ...
    def count_batch(
        self, texts: Sequence[str], allowed_special: _Allowed, disallowed_special: _Disallowed, num_threads: int
    ) -> list[int]: ...
    def encode_batch_to_bytes(
        self, texts: Sequence[str], allowed_special: _Allowed, disallowed_special: _Disallowed, num_threads: int
    ) -> tuple[bytes, bytes]:
        """Native-endian uint32 ids of every text, one after the other, and int64 offsets."""
    def encode_with_unstable(
        self, text: str, allowed_special: _Allowed, disallowed_special: _Disallowed | None = None
    ) -> tuple[list[int], list[list[int]]]: ...
    def encode_single_token(self, piece: bytes) -> int: ...
    def encode_single_piece(self, piece: bytes) -> list[int]: ...
    def _encode_bytes(self, data: bytes) -> list[int]: ...
    def decode_bytes(self, tokens: Sequence[int]) -> bytes: ...
    def decode_bytes_batch(self, batch: Sequence[Sequence[int]], num_threads: int) -> list[bytes]: ...
    def decode_str(self, tokens: Sequence[int], errors: str) -> str: ...
    def decode_str_batch(self, batch: Sequence[Sequence[int]], errors: str, num_threads: int) -> list[str]: ...
    def decode_single_token_bytes(self, token: int) -> bytes: ...
    def decode_tokens_bytes(self, tokens: Sequence[int]) -> list[bytes]: ...
    def token_byte_values(self) -> list[bytes]: ...
    def split(self, text: str) -> list[str]:
        """The pieces the pre-tokenizer splits ``text`` into."""

class SpanCounter:
    """Span counts for training: fed batches of documents, then turned into merges."""

    def __init__(self, pattern: str) -> None: ...
    def update(self, docs: Sequence[str], num_threads: int) -> None:
        """Splits and counts a batch of documents in parallel, without the GIL."""
    def add_span(self, span: str, count: int) -> None: ...
    @property
    def documents(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def distinct_spans(self) -> int: ...
    @property
    def total_spans(self) -> int: ...
    def learn_merges(
        self,
        num_merges: int,
        progress: Optional[Callable[[int, int, int, int, int, int], object]] = None,
        threads: int = 1,
    ) -> tuple[list[tuple[int, int]], list[builtins.bytes]]:
        """Learns up to ``num_merges`` merges (merges found in many spans split over up to
        ``threads`` threads, with the same result); returns them and every token's bytes by id."""
