"""The :class:`Encoding` class: a drop-in replacement for :class:`tiktoken.Encoding`.

All the work happens in the Rust extension (``tokenmill._core``); this module resolves
arguments the way tiktoken does, applies tiktoken's fix-up for lone surrogates, and keeps
the attributes tiktoken users reach for (``_pat_str``, ``_mergeable_ranks``,
``_special_tokens``).
"""

from __future__ import annotations

import array
import functools
import math
import operator
import re
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, AbstractSet, Collection, Literal, Sequence, Union

from tokenmill import _core

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

AllowedSpecial = Union[Literal["all"], AbstractSet[str]]
DisallowedSpecial = Union[Literal["all"], Collection[str]]

_DEFAULT_THREADS = 8


def _replace_surrogates(text: str) -> str:
    """Replaces lone surrogates by U+FFFD (and joins valid surrogate pairs), as tiktoken does
    before encoding a ``str`` that is not valid UTF-8."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class TokenTypeError(TypeError, AssertionError):
    """A token id that is not an int. tiktoken asserts here, so this is also an
    ``AssertionError`` for code written against it."""


class VocabularySizeError(ValueError, AssertionError):
    """``explicit_n_vocab`` disagrees with the vocabulary. tiktoken asserts here, so this is
    also an ``AssertionError`` for code written against it."""


_MAX_THREADS = 1 << 16


def _threads(num_threads: object) -> int:
    """tiktoken's ``num_threads``, which it gives to ``ThreadPoolExecutor``: None means the
    default, a number below 1 fails, any other number (a numpy int, a float) is taken up
    to the next whole thread. The engine uses at most the cores available."""
    if num_threads is None:
        return _core.available_cores()
    if num_threads <= 0:  # type: ignore[operator]
        raise ValueError("num_threads must be greater than 0")
    try:
        n = operator.index(num_threads)  # type: ignore[arg-type]
    except TypeError:
        n = _MAX_THREADS if num_threads >= _MAX_THREADS else math.ceil(num_threads)  # type: ignore[operator,call-overload]
    return min(n, _MAX_THREADS)


def _as_list(texts: object) -> list:
    # (the engine reads an exact list's items in place; a subclass, which may iterate its
    # own way, is iterated as tiktoken iterates it, and so is anything else: a str is
    # one text per character, as tiktoken's batch calls take it, and bytes are ints)
    return texts if type(texts) is list else list(texts)  # type: ignore[call-overload]


@functools.lru_cache(maxsize=64)
def _search_for(tokens: frozenset) -> re.Pattern:
    """A regex that finds any of ``tokens`` (tiktoken's check for disallowed special tokens,
    made where the text is not valid UTF-8 and the engine cannot look)."""
    return re.compile("|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True)))


def _batch_type_error(texts: list) -> TypeError:
    """A TypeError naming the first item of a batch that is not a str."""
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            return TypeError(f"expected a list of str; item {i} is a {type(t).__name__}")
    return TypeError("expected a list of str")


class Encoding:
    """A byte-level BPE encoding, with the same constructor and methods as
    :class:`tiktoken.Encoding` and the same results, byte for byte.

    Args:
        name: The encoding's name. Encodings with different special tokens should have
            different names.
        pat_str: The regex that splits text into pieces before byte-pair merging.
        mergeable_ranks: Token bytes to rank; the rank is both the token id and the merge
            priority (lower merges first).
        special_tokens: Special token text to token id.
        explicit_n_vocab: If given, the number of tokens, checked against the vocabulary.

    Raises:
        ValueError: If ``pat_str`` does not compile, the vocabulary is inconsistent, or
            ``explicit_n_vocab`` does not match.
    """

    def __init__(
        self,
        name: str,
        *,
        pat_str: str,
        mergeable_ranks: dict[bytes, int],
        special_tokens: dict[str, int],
        explicit_n_vocab: int | None = None,
    ) -> None:
        self.name = name
        self._pat_str = pat_str
        self._mergeable_ranks = mergeable_ranks
        self._special_tokens = special_tokens

        ranks = mergeable_ranks.values()  # (tiktoken's AttributeError for None)
        if not ranks:
            raise ValueError("mergeable_ranks is empty: an encoding needs at least one token")
        self.max_token_value = max(max(ranks), max(special_tokens.values(), default=0))
        if explicit_n_vocab:
            n = len(mergeable_ranks) + len(special_tokens)
            if n != explicit_n_vocab:
                raise VocabularySizeError(
                    f"explicit_n_vocab={explicit_n_vocab} but the vocabulary has {n} tokens "
                    f"({len(mergeable_ranks)} mergeable + {len(special_tokens)} special)"
                )
            if self.max_token_value != explicit_n_vocab - 1:
                raise VocabularySizeError(
                    f"explicit_n_vocab={explicit_n_vocab} but the largest token id is "
                    f"{self.max_token_value}"
                )
        self._special_token_values = set(special_tokens.values())
        self._core_bpe = _core.CoreBPE(mergeable_ranks, special_tokens, pat_str)

    def __repr__(self) -> str:
        return f"<Encoding {self.name!r}>"

    # ------------------------------------------------------------------ special-token arguments

    def _special_args(self, allowed_special, disallowed_special, texts, batch: bool = False):
        """``allowed_special`` and ``disallowed_special`` resolved as tiktoken resolves them,
        with its errors: ``disallowed_special`` other than ``"all"`` is made a frozenset
        once (a generator is read once, a str gives its characters), in a batch even when
        empty (tiktoken's ``TypeError`` for ``None``); ``allowed_special`` must be ``"all"``
        or a set, which tiktoken's engine finds out only after the disallowed tokens have
        been looked for in ``texts`` (the text, or a batch's first). The engine takes
        ``"all"`` as it is."""
        if disallowed_special != "all" and (batch or disallowed_special):
            if not isinstance(disallowed_special, frozenset):
                disallowed_special = frozenset(disallowed_special)
        if not (isinstance(allowed_special, (set, frozenset)) or allowed_special == "all"):
            disallowed_special = self._disallowed_set(allowed_special, disallowed_special)
            for text in texts:
                self._check_as_given(text, set(), disallowed_special)
                raise TypeError(
                    f'allowed_special must be "all" or a set of str, got {type(allowed_special).__name__}'
                )
        return allowed_special, (disallowed_special or ())

    def _check_as_given(self, text: str, allowed_special, disallowed_special) -> None:
        """tiktoken's check for disallowed special tokens, on ``text`` as given: run where
        ``text`` holds lone surrogates (and is encoded with them replaced, without the
        check), as tiktoken checks before it replaces them."""
        disallowed_special = self._disallowed_set(allowed_special, disallowed_special)
        if disallowed_special and (match := _search_for(disallowed_special).search(text)):
            token = match.group()
            self._core_bpe.encode(token, set(), frozenset([token]))  # raises its ValueError
            raise ValueError(f"disallowed special token {token!r}")  # (not reached)

    def _disallowed_set(self, allowed_special, disallowed_special):
        """``disallowed_special`` as tiktoken makes it: ``"all"`` is every special token not
        allowed (a set difference, which refuses an ``allowed_special`` that is no set)."""
        if disallowed_special != "all":
            return disallowed_special
        allowed = self.special_tokens_set if allowed_special == "all" else allowed_special
        return frozenset(self.special_tokens_set - allowed)

    def _overrides(self, name: str) -> bool:
        """Whether a subclass overrides method ``name``, which tiktoken's batch and
        per-token methods then call for each item."""
        return getattr(type(self), name) is not getattr(Encoding, name)

    # ------------------------------------------------------------------ encoding

    def encode_ordinary(self, text: str) -> list[int]:
        """Encodes ``text``, treating special-token text as ordinary text.

        Same as ``encode(text, disallowed_special=())``, but faster.

        >>> enc.encode_ordinary("hello world")
        [15339, 1917]
        """
        try:
            return self._core_bpe.encode_ordinary(text)
        except UnicodeEncodeError:
            return self._core_bpe.encode_ordinary(_replace_surrogates(text))

    def encode(
        self,
        text: str,
        *,
        allowed_special: AllowedSpecial = set(),  # noqa: B006
        disallowed_special: DisallowedSpecial = "all",
    ) -> list[int]:
        """Encodes ``text`` into token ids.

        Special tokens are recognised only when allowed: by default text that looks like a
        special token raises ``ValueError`` (it could be an injection). ``allowed_special``
        lists the special tokens to encode as such (``"all"`` for every one);
        ``disallowed_special`` lists those that raise (``"all"``, the default, means every
        special token not allowed; ``()`` encodes them as ordinary text).

        Lone surrogates in ``text`` are replaced by U+FFFD, as tiktoken does.

        >>> enc.encode("hello world")
        [15339, 1917]
        >>> enc.encode("<|endoftext|>", allowed_special="all")
        [100257]
        """
        if (allowed_special.__class__ is set or allowed_special == "all") and (
            disallowed_special == "all" or not disallowed_special
        ):
            disallowed_special = disallowed_special or ()  # (the common forms, at once)
        else:
            allowed_special, disallowed_special = self._special_args(allowed_special, disallowed_special, (text,))
        try:
            return self._core_bpe.encode(text, allowed_special, disallowed_special)
        except UnicodeEncodeError:
            self._check_as_given(text, allowed_special, disallowed_special)
            return self._core_bpe.encode(_replace_surrogates(text), allowed_special, ())

    def encode_to_numpy(
        self,
        text: str,
        *,
        allowed_special: AllowedSpecial = set(),  # noqa: B006
        disallowed_special: DisallowedSpecial = "all",
    ) -> npt.NDArray[np.uint32]:
        """Like :meth:`encode`, returning a ``numpy.uint32`` array (no Python ints made)."""
        import numpy as np

        allowed_special, disallowed_special = self._special_args(allowed_special, disallowed_special, (text,))
        try:
            raw = self._core_bpe.encode_to_bytes(text, allowed_special, disallowed_special)
        except UnicodeEncodeError:
            self._check_as_given(text, allowed_special, disallowed_special)
            raw = self._core_bpe.encode_to_bytes(_replace_surrogates(text), allowed_special, ())
        return np.frombuffer(raw, dtype=np.uint32)

    def encode_ordinary_batch(
        self, text: list[str], *, num_threads: int = _DEFAULT_THREADS
    ) -> list[list[int]]:
        """Encodes many texts in parallel (in Rust, without the GIL), ignoring special
        tokens. ``num_threads`` caps the worker count (at most the cores available).

        >>> enc.encode_ordinary_batch(["hello world", "goodbye world"])
        [[15339, 1917], [19045, 29474, 1917]]
        """
        if self._overrides("encode_ordinary"):
            with ThreadPoolExecutor(num_threads) as e:
                return list(e.map(self.encode_ordinary, text))
        return self._ordinary_batch(self._core_bpe.encode_ordinary_batch, text, num_threads)

    def _ordinary_batch(self, core_call, text, num_threads):
        """``core_call(texts, num_threads)`` with tiktoken's argument checks, its TypeError
        for an item that is no str, and its fix-up of lone surrogates."""
        num_threads = _threads(num_threads)
        texts = _as_list(text)
        try:
            return core_call(texts, num_threads)
        except TypeError as e:
            raise _batch_type_error(texts) from e
        except UnicodeEncodeError:
            return core_call([_replace_surrogates(t) for t in texts], num_threads)

    def encode_batch(
        self,
        text: list[str],
        *,
        num_threads: int = _DEFAULT_THREADS,
        allowed_special: AllowedSpecial = set(),  # noqa: B006
        disallowed_special: DisallowedSpecial = "all",
    ) -> list[list[int]]:
        """Encodes many texts in parallel (in Rust, without the GIL). See :meth:`encode`
        for ``allowed_special`` and ``disallowed_special``.

        >>> enc.encode_batch(["hello world", "goodbye world"])
        [[15339, 1917], [19045, 29474, 1917]]
        """
        if self._overrides("encode"):
            texts = _as_list(text)
            allowed_special, disallowed_special = self._special_args(allowed_special, disallowed_special, texts[:1], batch=True)
            disallowed_special = self._disallowed_set(allowed_special, disallowed_special)
            encoder = functools.partial(self.encode, allowed_special=allowed_special, disallowed_special=disallowed_special)
            with ThreadPoolExecutor(num_threads) as e:
                return list(e.map(encoder, texts))
        return self._special_batch(
            self._core_bpe.encode_batch, text, num_threads, allowed_special, disallowed_special
        )

    def _special_batch(self, core_call, text, num_threads, allowed_special, disallowed_special):
        """``core_call(texts, allowed_special, disallowed_special, num_threads)`` with
        tiktoken's argument checks, its TypeError for an item that is no str, and its
        fix-up of lone surrogates (the texts encoded again with them replaced)."""
        num_threads = _threads(num_threads)
        texts = _as_list(text)
        allowed_special, disallowed_special = self._special_args(allowed_special, disallowed_special, texts[:1], batch=True)
        try:
            return core_call(texts, allowed_special, disallowed_special, num_threads)
        except TypeError as e:
            first = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
            if first is None:
                raise
            # (the texts before it are encoded first, as tiktoken's loop goes: a disallowed
            # special token among them is the error)
            for t in texts[:first]:
                self._check_as_given(t, allowed_special, disallowed_special)
            raise _batch_type_error(texts) from e
        except UnicodeEncodeError:
            for t in texts:
                self._check_as_given(t, allowed_special, disallowed_special)
            return core_call([_replace_surrogates(t) for t in texts], allowed_special, (), num_threads)

    def encode_batch_to_numpy(
        self,
        text: list[str],
        *,
        num_threads: int = _DEFAULT_THREADS,
        allowed_special: AllowedSpecial = set(),  # noqa: B006
        disallowed_special: DisallowedSpecial = "all",
    ) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.int64]]:
        """Encodes many texts in parallel (in Rust, without the GIL) into one
        ``numpy.uint32`` array of all their ids, one text after the other, and a
        ``numpy.int64`` array of ``len(text) + 1`` offsets: text ``i``'s ids (what
        :meth:`encode` gives for it) are ``ids[offsets[i]:offsets[i + 1]]``. No Python int
        or list is made, so this uses every core where :meth:`encode_batch`, whose lists
        only one thread can make, does not. See :meth:`encode` for ``allowed_special`` and
        ``disallowed_special``; ``disallowed_special=()`` gives :meth:`encode_ordinary`'s ids.

        >>> ids, offsets = enc.encode_batch_to_numpy(["hello world", "goodbye world"])
        >>> ids.tolist(), offsets.tolist()
        ([15339, 1917, 19045, 29474, 1917], [0, 2, 5])
        """
        import numpy as np

        ids, offsets = self._special_batch(
            self._core_bpe.encode_batch_to_bytes, text, num_threads, allowed_special, disallowed_special
        )
        return np.frombuffer(ids, dtype=np.uint32), np.frombuffer(offsets, dtype=np.int64)

    # ------------------------------------------------------------------ counting

    def count_tokens(
        self,
        text: str,
        *,
        allowed_special: AllowedSpecial = set(),  # noqa: B006
        disallowed_special: DisallowedSpecial = "all",
    ) -> int:
        """The number of ids :meth:`encode` gives for ``text``, with its arguments and its
        errors, without making them: no list is built (nor freed), and the engine's ids are
        counted a few thousand at a time, so a text of any length is counted in a few KB.

        >>> enc.count_tokens("hello world")
        2
        >>> enc.count_tokens("<|endoftext|>", allowed_special="all")
        1
        """
        allowed_special, disallowed_special = self._special_args(allowed_special, disallowed_special, (text,))
        try:
            return self._core_bpe.count(text, allowed_special, disallowed_special)
        except UnicodeEncodeError:
            self._check_as_given(text, allowed_special, disallowed_special)
            return self._core_bpe.count(_replace_surrogates(text), allowed_special, ())

    def count_tokens_ordinary(self, text: str) -> int:
        """The number of ids :meth:`encode_ordinary` gives for ``text``, without making them.

        >>> enc.count_tokens_ordinary("<|endoftext|>")
        7
        """
        try:
            return self._core_bpe.count_ordinary(text)
        except UnicodeEncodeError:
            return self._core_bpe.count_ordinary(_replace_surrogates(text))

    def count_tokens_batch(
        self,
        text: list[str],
        *,
        num_threads: int = _DEFAULT_THREADS,
        allowed_special: AllowedSpecial = set(),  # noqa: B006
        disallowed_special: DisallowedSpecial = "all",
    ) -> list[int]:
        """The number of ids of each text, counted in parallel (in Rust, without the GIL)
        and without making lists: what ``[len(ids) for ids in enc.encode_batch(text)]``
        gives, with :meth:`encode_batch`'s arguments and errors (each worker holds one
        text's ids at a time). ``disallowed_special=()`` (with nothing allowed) counts as
        :meth:`encode_ordinary` encodes.

        >>> enc.count_tokens_batch(["hello world", "goodbye world"])
        [2, 3]
        """
        if not allowed_special and not disallowed_special:
            return self._ordinary_batch(self._core_bpe.count_ordinary_batch, text, num_threads)
        return self._special_batch(
            self._core_bpe.count_batch, text, num_threads, allowed_special, disallowed_special
        )

    def encode_with_unstable(
        self,
        text: str,
        *,
        allowed_special: AllowedSpecial = set(),  # noqa: B006
        disallowed_special: DisallowedSpecial = "all",
    ) -> tuple[list[int], list[list[int]]]:
        """Encodes ``text`` into the tokens that cannot change whatever text follows, plus
        every token sequence the rest could become once more text is appended.

        Every completion, appended to the stable tokens, decodes to bytes starting with
        ``text``. As in tiktoken, this API should itself be considered unstable.
        """
        allowed_special, disallowed_special = self._special_args(allowed_special, disallowed_special, (text,))
        try:
            return self._core_bpe.encode_with_unstable(text, allowed_special, disallowed_special)
        except UnicodeEncodeError:
            self._check_as_given(text, allowed_special, disallowed_special)
            return self._core_bpe.encode_with_unstable(_replace_surrogates(text), allowed_special, ())

    def encode_single_token(self, text_or_bytes: str | bytes) -> int:
        """Returns the id of a text (or bytes) that is exactly one token, special tokens
        included. Raises ``KeyError`` otherwise.

        >>> enc.encode_single_token("hello")
        15339
        """
        if isinstance(text_or_bytes, str):
            text_or_bytes = text_or_bytes.encode("utf-8")
        return self._core_bpe.encode_single_token(text_or_bytes)

    # ------------------------------------------------------------------ decoding

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        """Decodes token ids into bytes. Raises ``KeyError`` for an unknown id.

        ``tokens`` may be any sequence of ints, as in tiktoken. A list or tuple of ints and
        a one-dimensional integer array (numpy, including ``numpy.memmap``; ``array.array``;
        ``memoryview``) are read in place, without converting each item to a Python int:
        an array of ids decodes faster than the same ids in a list.

        >>> enc.decode_bytes([15339, 1917])
        b'hello world'
        """
        return self._core_bpe.decode_bytes(tokens)

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        """Decodes token ids into a string.

        Tokens need not end on character boundaries, so the bytes may not be valid UTF-8;
        they are decoded as ``bytes.decode("utf-8", errors)`` would (the default
        ``"replace"`` is lossy, ``"strict"`` raises), without making the bytes first.
        ``tokens`` is read as in :meth:`decode_bytes` (arrays of ids in place).

        >>> enc.decode([15339, 1917])
        'hello world'
        """
        return self._core_bpe.decode_str(tokens, errors)

    def decode_single_token_bytes(self, token: int) -> bytes:
        """The bytes of one token, special tokens included. Raises ``KeyError`` if unknown.

        >>> enc.decode_single_token_bytes(15339)
        b'hello'
        """
        return self._core_bpe.decode_single_token_bytes(token)

    def decode_tokens_bytes(self, tokens: Sequence[int]) -> list[bytes]:
        """The bytes of each token (useful to visualise a tokenization).

        >>> enc.decode_tokens_bytes([15339, 1917])
        [b'hello', b' world']
        """
        if self._overrides("decode_single_token_bytes"):
            return [self.decode_single_token_bytes(token) for token in tokens]
        if not isinstance(tokens, (list, tuple, memoryview, array.array)) and not hasattr(tokens, "__array_interface__"):
            # tiktoken accepts any iterable here; lists, tuples and arrays (numpy's and the
            # standard library's, read in place; an array that holds no ids fails as
            # tiktoken's loop would) go as they are
            tokens = list(tokens)
        return self._core_bpe.decode_tokens_bytes(tokens)

    def decode_with_offsets(self, tokens: Sequence[int]) -> tuple[str, list[int]]:
        """Decodes tokens into text plus, per token, the index of the character where it
        starts (or of the first character it contributes bytes to, when a token starts in
        the middle of a character). Raises ``UnicodeDecodeError`` on invalid UTF-8.

        >>> enc.decode_with_offsets([15339, 1917])
        ('hello world', [0, 5])
        """
        token_bytes = self.decode_tokens_bytes(tokens)
        offsets = []
        chars = 0  # characters started so far
        for tb in token_bytes:
            starts_mid_char = bool(tb) and 0x80 <= tb[0] < 0xC0
            offsets.append(max(0, chars - starts_mid_char))
            chars += sum(1 for b in tb if not 0x80 <= b < 0xC0)
        return b"".join(token_bytes).decode("utf-8", errors="strict"), offsets

    def decode_batch(
        self,
        batch: Sequence[Sequence[int]],
        *,
        errors: str = "replace",
        num_threads: int = _DEFAULT_THREADS,
    ) -> list[str]:
        """Decodes many token lists (in parallel) into strings; the first list that fails
        raises its error, as a loop of ``decode`` calls would."""
        if self._overrides("decode"):
            with ThreadPoolExecutor(num_threads) as e:
                return list(e.map(functools.partial(self.decode, errors=errors), batch))
        return self._core_bpe.decode_str_batch(list(batch), errors, _threads(num_threads))

    def decode_bytes_batch(
        self, batch: Sequence[Sequence[int]], *, num_threads: int = _DEFAULT_THREADS
    ) -> list[bytes]:
        """Decodes many token lists (in parallel) into bytes; the first list that fails
        raises its error, as a loop of ``decode_bytes`` calls would."""
        if self._overrides("decode_bytes"):
            with ThreadPoolExecutor(num_threads) as e:
                return list(e.map(self.decode_bytes, batch))
        return self._core_bpe.decode_bytes_batch(list(batch), _threads(num_threads))

    # ------------------------------------------------------------------ vocabulary

    def token_byte_values(self) -> list[bytes]:
        """Every mergeable token's bytes, sorted."""
        return self._core_bpe.token_byte_values()

    @property
    def eot_token(self) -> int:
        """The id of ``<|endoftext|>`` (``KeyError`` if the encoding has none)."""
        return self._special_tokens["<|endoftext|>"]

    @functools.cached_property
    def special_tokens_set(self) -> set[str]:
        """The special tokens' texts."""
        return set(self._special_tokens.keys())

    def is_special_token(self, token: int) -> bool:
        """Whether ``token`` is the id of a special token."""
        if not isinstance(token, int):
            raise TokenTypeError(f"expected an int token id, got {type(token).__name__}")
        return token in self._special_token_values

    @property
    def n_vocab(self) -> int:
        """``max_token_value + 1`` (kept for compatibility with tiktoken)."""
        return self.max_token_value + 1

    # ------------------------------------------------------------------ HuggingFace-flavoured API

    def token_to_id(self, token: str) -> int | None:
        """The id of a token written as HuggingFace writes it (byte-level string such as
        ``"Ġhello"``, or a special token's text), or ``None``."""
        from tokenmill import huggingface

        return huggingface.token_to_id(self, token)

    def id_to_token(self, token_id: int) -> str | None:
        """The token of an id, written as HuggingFace writes it, or ``None``."""
        from tokenmill import huggingface

        return huggingface.id_to_token(self, token_id)

    def get_vocab(self, with_added_tokens: bool = True) -> dict[str, int]:
        """Token string -> id for the whole vocabulary, as ``tokenizers``' ``get_vocab``."""
        from tokenmill import huggingface

        return huggingface.get_vocab(self, with_added_tokens)

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        """The number of tokens, as ``tokenizers``' ``get_vocab_size`` (``n_vocab`` is
        ``max_token_value + 1`` instead)."""
        from tokenmill import huggingface

        return huggingface.get_vocab_size(self, with_added_tokens)

    def encode_with_offsets(
        self,
        text: str,
        *,
        allowed_special: AllowedSpecial = set(),  # noqa: B006
        disallowed_special: DisallowedSpecial = "all",
    ):
        """Like :meth:`encode`, returning ids, HuggingFace-style token strings and the
        ``(start, end)`` character span of every token
        (:class:`tokenmill.huggingface.EncodingWithOffsets`)."""
        from tokenmill import huggingface

        return huggingface.encode_with_offsets(
            self, text, allowed_special=allowed_special, disallowed_special=disallowed_special
        )

    def save_tokenizer_json(self, path: str) -> str:
        """Writes a HuggingFace ``tokenizer.json`` giving the same ids (see
        :func:`tokenmill.huggingface.save_tokenizer_json`); returns its path."""
        from tokenmill import huggingface

        return str(huggingface.save_tokenizer_json(self, path))

    # ------------------------------------------------------------------ private API kept from tiktoken

    def _encode_single_piece(self, text_or_bytes: str | bytes) -> list[int]:
        """Byte-pair encodes one piece without regex splitting (special tokens ignored)."""
        if isinstance(text_or_bytes, str):
            text_or_bytes = text_or_bytes.encode("utf-8")
        return self._core_bpe.encode_single_piece(text_or_bytes)

    def _encode_only_native_bpe(self, text: str) -> list[int]:
        """Splits with the third-party ``regex`` module in Python, then merges in Rust
        (a slow reference path, kept for compatibility)."""
        import regex

        out: list[int] = []
        for piece in regex.findall(self._pat_str, text):
            out.extend(self._core_bpe.encode_single_piece(piece.encode("utf-8")))
        return out

    def _encode_bytes(self, text: bytes) -> list[int]:
        """Encodes bytes that may not be valid UTF-8."""
        return self._core_bpe._encode_bytes(text)

    # ------------------------------------------------------------------ pickling

    def __getstate__(self) -> object:
        from tokenmill import registry

        # A registered encoding pickles by name; anything else by value.
        if registry.ENCODINGS.get(self.name) is self:
            return self.name
        return {
            "name": self.name,
            "pat_str": self._pat_str,
            "mergeable_ranks": self._mergeable_ranks,
            "special_tokens": self._special_tokens,
        }

    def __setstate__(self, value: object) -> None:
        from tokenmill import registry

        if isinstance(value, str):
            self.__dict__ = registry.get_encoding(value).__dict__
            return
        self.__init__(**value)  # type: ignore[misc, arg-type]
