"""A nanochat-compatible tokenizer with chat rendering.

:class:`Tokenizer` wraps a :class:`tokenmill.Encoding` and offers the methods of nanochat's
tokenizer (``train_from_iterator``, ``from_directory``, ``from_pretrained``, ``encode``,
``decode``, ``encode_special``, ``render_conversation``, ...), so code written against
nanochat's ``nanochat.tokenizer`` can use tokenmill instead. It adds:

* chat **templates**: the tokens that delimit roles are a :class:`ChatTemplate` object, not
  hard-coded. :data:`NANOCHAT` (the default) reproduces nanochat's layout, id for id;
  :data:`CHATML` is the ``<|im_start|>role\\n ... <|im_end|>\\n`` layout, with the same rule for
  what is supervised;
* errors instead of assertions: a malformed conversation raises :class:`ValueError` naming
  the message (its index in the conversation as given, and its role) and what is wrong;
* :meth:`Tokenizer.token_bytes`, the byte length of every token id, for bits-per-byte
  evaluation.

A conversation is ``{"messages": [...]}`` (nanochat's form) or the list of messages itself.
Each message is ``{"role": ..., "content": ...}``, with the roles ``"system"`` (only as the
first message), then ``"user"`` and ``"assistant"`` alternating, starting with ``"user"``.
User and system content is a ``str``; assistant content is a ``str`` or a list of parts
``{"type": "text" | "python" | "python_output", "text": str}``.

Rendering (:meth:`Tokenizer.render_conversation`) returns the token ids and a mask of the
same length: 1 where the token is something the assistant writes (its text, its python tool
calls with their delimiters, the token that ends its turn), 0 everywhere else (the BOS
token, system and user turns, the token that opens an assistant turn, python outputs with
their delimiters, which come from the tool at inference time). Text inside messages is
always encoded as ordinary text: a message that contains ``"<|assistant_end|>"`` gets the
tokens of those characters, never the special token.

>>> from tokenmill.chat import Tokenizer
>>> tok = Tokenizer.train_from_iterator(documents, vocab_size=32768)
>>> ids, mask = tok.render_conversation({"messages": [
...     {"role": "user", "content": "What is 2+2?"},
...     {"role": "assistant", "content": "4"},
... ]})
>>> tok.save("out/tokenizer")
"""

from __future__ import annotations

import copyreg
import dataclasses
import json
import os
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterable,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
    overload,
)

from tokenmill import persist
from tokenmill.core import Encoding
from tokenmill.patterns import NANOCHAT_PATTERN

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "BOS_TOKEN",
    "CHATML",
    "CHAT_FILE",
    "ChatTemplate",
    "Conversation",
    "NANOCHAT",
    "NANOCHAT_PICKLE",
    "SPECIAL_TOKENS",
    "TEMPLATES",
    "Tokenizer",
]

#: The token that starts every document and every rendered conversation (nanochat's name).
BOS_TOKEN = "<|bos|>"

#: nanochat's special tokens, in nanochat's order: the default set of a trained
#: :class:`Tokenizer`, appended after the learned tokens (so ``<|bos|>`` gets the first id
#: after them).
SPECIAL_TOKENS: Tuple[str, ...] = (
    BOS_TOKEN,
    "<|user_start|>",
    "<|user_end|>",
    "<|assistant_start|>",
    "<|assistant_end|>",
    "<|python_start|>",
    "<|python_end|>",
    "<|output_start|>",
    "<|output_end|>",
)

#: The file, next to the encoding's files, where :meth:`Tokenizer.save` records the BOS token
#: and the chat template.
CHAT_FILE = "chat_template.json"
#: The file nanochat saves its tokenizer in (a pickled ``tiktoken.Encoding``).
NANOCHAT_PICKLE = "tokenizer.pkl"
_CHAT_FORMAT_VERSION = 1

#: A conversation: ``{"messages": [...]}`` or the list of messages.
Conversation = Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]

_ROLES = ("system", "user", "assistant")
_PART_TYPES = ("text", "python", "python_output")


# ---------------------------------------------------------------------------------------
# Templates
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatTemplate:
    """How a conversation is laid out in tokens: the text that surrounds each kind of turn.

    Each delimiter is a string that may mix special tokens (those listed in
    ``special_tokens``, which the tokenizer encodes as single special ids) with ordinary text
    (encoded as text), e.g. ``"<|im_start|>user\\n"``. A conversation renders as::

        BOS
        [system_start SYSTEM system_end]          # when system_start is set
        user_start USER user_end                   # the first USER may carry the system text
        assistant_start ANSWER assistant_end after_assistant
        user_start USER user_end
        ...

    where an ANSWER is its text, or its parts in order: text as is, python tool calls as
    ``python_start CODE python_end``, tool outputs as ``output_start OUTPUT output_end``.

    The mask is the same for every template: supervised (1) are the answer text, the python
    tool calls with their delimiters, and ``assistant_end`` — what the assistant itself
    writes; everything else, ``after_assistant`` included, is unsupervised (0).

    Attributes:
        name: A short name (recorded by :meth:`Tokenizer.save`).
        special_tokens: The special tokens the delimiters use; each must appear in at least
            one delimiter, and the tokenizer's encoding must have them all.
        user_start: Opens a user turn.
        user_end: Closes a user turn.
        assistant_start: Opens an assistant turn (also what
            :meth:`Tokenizer.render_for_completion` ends with). Not empty.
        assistant_end: Closes an assistant turn; the model learns to write it, so it tells
            the sampler to stop. Not empty.
        python_start: Opens a python tool call inside an assistant turn. Not empty.
        python_end: Closes a python tool call. Not empty.
        output_start: Opens a tool output inside an assistant turn. Not empty.
        output_end: Closes a tool output. Not empty.
        after_assistant: Text after ``assistant_end`` that the runtime adds, not the model
            (ChatML's newline); unsupervised. Default empty.
        system_start: Opens a system turn. ``None`` (the default, nanochat's way): there is
            no system turn, and a leading system message is prepended to the first user
            message, joined by ``system_separator``.
        system_end: Closes a system turn; set exactly when ``system_start`` is.
        system_separator: Joins the system text and the first user message's text when
            ``system_start`` is ``None``. Default ``"\\n\\n"``, as in nanochat.
    """

    name: str
    special_tokens: Tuple[str, ...]
    user_start: str
    user_end: str
    assistant_start: str
    assistant_end: str
    python_start: str
    python_end: str
    output_start: str
    output_end: str
    after_assistant: str = ""
    system_start: Optional[str] = None
    system_end: Optional[str] = None
    system_separator: str = "\n\n"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"ChatTemplate.name must be a non-empty str, got {self.name!r}")
        specials = self.special_tokens
        if isinstance(specials, str) or not isinstance(specials, Iterable):
            raise TypeError(
                f"ChatTemplate.special_tokens must be a sequence of str, got {type(specials).__name__}"
            )
        specials = tuple(specials)
        object.__setattr__(self, "special_tokens", specials)
        for s in specials:
            if not isinstance(s, str) or not s:
                raise ValueError(f"ChatTemplate.special_tokens: {s!r} is not a non-empty str")
        if len(set(specials)) != len(specials):
            raise ValueError(f"ChatTemplate.special_tokens has duplicates: {list(specials)}")
        for field in ("user_start", "user_end", "assistant_start", "assistant_end",
                      "python_start", "python_end", "output_start", "output_end",
                      "after_assistant", "system_separator"):
            value = getattr(self, field)
            if not isinstance(value, str):
                raise TypeError(f"ChatTemplate.{field} must be a str, got {type(value).__name__}")
        for field in ("assistant_start", "assistant_end", "python_start", "python_end",
                      "output_start", "output_end"):
            if not getattr(self, field):
                raise ValueError(f"ChatTemplate.{field} must not be empty")
        if (self.system_start is None) != (self.system_end is None):
            raise ValueError("ChatTemplate.system_start and system_end must both be set or both be None")
        for field in ("system_start", "system_end"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"ChatTemplate.{field} must be a str or None, got {type(value).__name__}")
        delimiters = self.delimiters()
        for s in specials:
            if not any(s in d for d in delimiters.values()):
                raise ValueError(f"ChatTemplate {self.name!r}: special token {s!r} appears in no delimiter")

    def delimiters(self) -> Dict[str, str]:
        """Every delimiter field that is set, by field name."""
        fields = ["user_start", "user_end", "assistant_start", "assistant_end", "after_assistant",
                  "python_start", "python_end", "output_start", "output_end"]
        if self.system_start is not None:
            fields += ["system_start", "system_end"]
        return {f: getattr(self, f) for f in fields}

    def to_dict(self) -> Dict[str, Any]:
        """The template as JSON-ready data (:meth:`from_dict` reads it back)."""
        d = dataclasses.asdict(self)
        d["special_tokens"] = list(self.special_tokens)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ChatTemplate":
        """A template from :meth:`to_dict`'s data. Raises ``ValueError`` for unknown keys."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ChatTemplate fields: {unknown}")
        return cls(**dict(data))


#: nanochat's layout: ``<|bos|><|user_start|>...<|user_end|><|assistant_start|>...<|assistant_end|>``,
#: with python tool calls in ``<|python_start|>...<|python_end|>`` and their outputs in
#: ``<|output_start|>...<|output_end|>``; a system message is merged into the first user message.
NANOCHAT = ChatTemplate(
    name="nanochat",
    special_tokens=SPECIAL_TOKENS[1:],
    user_start="<|user_start|>",
    user_end="<|user_end|>",
    assistant_start="<|assistant_start|>",
    assistant_end="<|assistant_end|>",
    python_start="<|python_start|>",
    python_end="<|python_end|>",
    output_start="<|output_start|>",
    output_end="<|output_end|>",
)

#: The ChatML layout: ``<|im_start|>role\\n...<|im_end|>\\n`` for every turn, system turns
#: included. ChatML has no standard for tool calls, so python calls and outputs use
#: nanochat's ``<|python_start|>``/``<|python_end|>``/``<|output_start|>``/``<|output_end|>``.
#: The assistant's ``<|im_end|>`` is supervised, the newline after it is not.
CHATML = ChatTemplate(
    name="chatml",
    special_tokens=(
        "<|im_start|>",
        "<|im_end|>",
        "<|python_start|>",
        "<|python_end|>",
        "<|output_start|>",
        "<|output_end|>",
    ),
    system_start="<|im_start|>system\n",
    system_end="<|im_end|>\n",
    user_start="<|im_start|>user\n",
    user_end="<|im_end|>\n",
    assistant_start="<|im_start|>assistant\n",
    assistant_end="<|im_end|>",
    after_assistant="\n",
    python_start="<|python_start|>",
    python_end="<|python_end|>",
    output_start="<|output_start|>",
    output_end="<|output_end|>",
)

#: The built-in templates by name.
TEMPLATES: Dict[str, ChatTemplate] = {"nanochat": NANOCHAT, "chatml": CHATML}


def _resolve_template(template: Union[ChatTemplate, str, None]) -> Optional[ChatTemplate]:
    if template is None or isinstance(template, ChatTemplate):
        return template
    if isinstance(template, str):
        try:
            return TEMPLATES[template]
        except KeyError:
            raise ValueError(f"unknown chat template {template!r}; built-in ones: {sorted(TEMPLATES)}") from None
    raise TypeError(f"template must be a ChatTemplate, a template name or None, got {type(template).__name__}")


# ---------------------------------------------------------------------------------------
# Conversation validation
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Message:
    index: int  # position in the conversation as given
    role: str
    content: Any  # str, or a tuple of (type, text) parts for the assistant


def _where(index: int, role: Any) -> str:
    return f"message {index} (role {role!r})"


def _check_conversation(conversation: Conversation) -> List[_Message]:
    """Validates a conversation and returns its messages; raises ``ValueError`` (or
    ``TypeError`` when the conversation itself is not a dict or list) naming the message."""
    if isinstance(conversation, Mapping):
        if "messages" not in conversation:
            raise ValueError("conversation has no 'messages' key")
        messages = conversation["messages"]
    else:
        messages = conversation
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(
            f"a conversation must be {{'messages': [...]}} or a list of messages, got {type(messages).__name__}"
        )
    if len(messages) == 0:
        raise ValueError("conversation is empty: it needs at least one user message")

    out: List[_Message] = []
    expected = "user"
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            raise ValueError(f"message {i} is a {type(msg).__name__}; expected a dict with 'role' and 'content'")
        if "role" not in msg:
            raise ValueError(f"message {i} has no 'role'")
        role = msg["role"]
        if role not in _ROLES:
            raise ValueError(f"{_where(i, role)}: unknown role; expected one of {', '.join(map(repr, _ROLES))}")
        if role == "system":
            if i != 0:
                raise ValueError(f"{_where(i, role)}: a system message is only allowed as the first message")
            if len(messages) == 1:
                raise ValueError(f"{_where(i, role)}: a system message must be followed by a user message")
        elif role != expected:
            raise ValueError(
                f"{_where(i, role)}: expected a {expected!r} message here "
                "(after an optional system message, roles alternate user, assistant, user, ...)"
            )
        else:
            expected = "assistant" if role == "user" else "user"
        if "content" not in msg:
            raise ValueError(f"{_where(i, role)} has no 'content'")
        content = msg["content"]
        if role == "assistant":
            content = _check_parts(i, content)
        elif not isinstance(content, str):
            raise ValueError(f"{_where(i, role)}: content must be a str, got {type(content).__name__}")
        out.append(_Message(i, role, content))
    return out


def _check_parts(i: int, content: Any) -> Any:
    where = _where(i, "assistant")
    if isinstance(content, str):
        return content
    if not isinstance(content, (list, tuple)):
        raise ValueError(f"{where}: content must be a str or a list of parts, got {type(content).__name__}")
    parts = []
    for j, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise ValueError(f"{where}, part {j}: expected a dict with 'type' and 'text', got {type(part).__name__}")
        if "type" not in part:
            raise ValueError(f"{where}, part {j} has no 'type'")
        kind = part["type"]
        if kind not in _PART_TYPES:
            raise ValueError(
                f"{where}, part {j}: unknown part type {kind!r}; expected one of {', '.join(map(repr, _PART_TYPES))}"
            )
        if "text" not in part:
            raise ValueError(f"{where}, part {j} (type {kind!r}) has no 'text'")
        text = part["text"]
        if not isinstance(text, str):
            raise ValueError(f"{where}, part {j} (type {kind!r}): text must be a str, got {type(text).__name__}")
        parts.append((kind, text))
    return tuple(parts)


# ---------------------------------------------------------------------------------------
# Loading nanochat's pickle without tiktoken, and without running arbitrary code
# ---------------------------------------------------------------------------------------


class _EncodingUnpickler(pickle.Unpickler):
    """Unpickles a pickled ``tiktoken.Encoding`` (or tokenmill one) as a tokenmill
    :class:`Encoding`; refuses every other global, so a hostile file cannot run code."""

    _ALLOWED = {
        ("tiktoken.core", "Encoding"): Encoding,
        ("tiktoken", "Encoding"): Encoding,
        ("tokenmill.core", "Encoding"): Encoding,
        ("tokenmill", "Encoding"): Encoding,
        ("copyreg", "_reconstructor"): copyreg._reconstructor,  # type: ignore[attr-defined]  # (private, undeclared)
        ("builtins", "object"): object,
    }

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refusing to load {module}.{name}: {NANOCHAT_PICKLE} should only hold a tiktoken Encoding"
            ) from None


def _load_nanochat_pickle(path: Path) -> Encoding:
    with open(path, "rb") as f:
        enc = _EncodingUnpickler(f).load()
    if not isinstance(enc, Encoding):
        raise ValueError(f"{path} does not hold an Encoding but a {type(enc).__name__}")
    return enc


# ---------------------------------------------------------------------------------------
# The tokenizer
# ---------------------------------------------------------------------------------------


class _InputTypeError(TypeError, ValueError):
    """Input of the wrong type. nanochat raises ``ValueError`` here, so this is both."""


class Tokenizer:
    """A BPE tokenizer with nanochat's interface and chat rendering.

    Args:
        enc: The encoding (a :class:`tokenmill.Encoding`; a ``tiktoken.Encoding`` works too).
        bos_token: The special token that starts documents and rendered conversations.
        template: The chat layout (a :class:`ChatTemplate` or a built-in template's name), or
            ``None`` for a tokenizer without chat rendering.

    Raises:
        ValueError: The encoding lacks ``bos_token`` or one of the template's special tokens.

    Attributes:
        enc: The wrapped encoding.
        bos_token: The BOS token's text.
        bos_token_id: Its id.
        template: The chat template, or ``None``.
    """

    def __init__(
        self,
        enc: Encoding,
        bos_token: str = BOS_TOKEN,
        template: Union[ChatTemplate, str, None] = NANOCHAT,
    ) -> None:
        self.enc = enc
        self.template = _resolve_template(template)
        specials = enc.special_tokens_set
        if bos_token not in specials:
            raise ValueError(
                f"encoding {enc.name!r} has no special token {bos_token!r} to use as BOS "
                f"(its special tokens: {sorted(specials)})"
            )
        self.bos_token = bos_token
        self.bos_token_id: int = enc._special_tokens[bos_token]
        self._delims: Dict[str, List[int]] = {}
        if self.template is not None:
            missing = [s for s in self.template.special_tokens if s not in specials]
            if missing:
                raise ValueError(
                    f"chat template {self.template.name!r} needs special tokens that encoding "
                    f"{enc.name!r} lacks: {missing}. Train with them (Tokenizer.train_from_iterator("
                    f"..., template=...)), use from_pretrained(..., add_template_tokens=True), or "
                    f"pass template=None"
                )
            allowed = set(self.template.special_tokens)
            for field, text in self.template.delimiters().items():
                self._delims[field] = enc.encode(text, allowed_special=allowed, disallowed_special=())
        self._token_bytes: Optional[List[int]] = None

    def __repr__(self) -> str:
        t = self.template.name if self.template is not None else None
        return f"<Tokenizer encoding={self.enc.name!r} vocab_size={self.get_vocab_size()} bos={self.bos_token!r} template={t!r}>"

    # ------------------------------------------------------------------ construction

    @classmethod
    def train_from_iterator(
        cls,
        text_iterator: Iterable[str],
        vocab_size: int,
        *,
        pattern: str = NANOCHAT_PATTERN,
        template: Union[ChatTemplate, str, None] = NANOCHAT,
        bos_token: str = BOS_TOKEN,
        special_tokens: Optional[Sequence[str]] = None,
        doc_cap: Optional[int] = None,
        max_chars: Optional[int] = None,
        buffer_size: int = 8192,
        threads: Optional[int] = None,
        progress: bool = True,
        name: str = "tokenmill",
    ) -> "Tokenizer":
        """Trains a tokenizer on the documents of ``text_iterator`` with tokenmill's trainer.

        Args:
            text_iterator: Any iterable of ``str``.
            vocab_size: The total vocabulary size, counting the 256 byte tokens and the
                special tokens (nanochat's meaning).
            pattern: The split regex or a pattern name; nanochat's by default.
            template: The chat template (its special tokens are added).
            bos_token: The BOS token.
            special_tokens: The special tokens, appended after the learned tokens in this
                order. Default: ``bos_token`` then the template's special tokens, which for
                the default template is :data:`SPECIAL_TOKENS` (nanochat's nine, in
                nanochat's order, so ids match a nanochat tokenizer trained on the same text).
            doc_cap: Truncate each document to this many characters.
            max_chars: Stop reading after this many characters.
            buffer_size: Documents per parallel counting batch.
            threads: Counting threads (default: all cores).
            progress: Show progress.
            name: The encoding's name.

        Raises:
            ValueError: ``vocab_size`` leaves no room for the 256 byte tokens and the
                special tokens, or the corpus is empty.
        """
        from tokenmill.train import train_from_iterator

        tpl = _resolve_template(template)
        if special_tokens is None:
            wanted = [bos_token] + (list(tpl.special_tokens) if tpl is not None else [])
            special_tokens = list(dict.fromkeys(wanted))
        enc = train_from_iterator(
            text_iterator,
            vocab_size,
            pattern=pattern,
            special_tokens=special_tokens,
            buffer_size=buffer_size,
            doc_cap=doc_cap,
            max_chars=max_chars,
            progress=progress,
            threads=threads,
            name=name,
        )
        return cls(enc, bos_token, tpl)

    @classmethod
    def from_directory(
        cls,
        tokenizer_dir: Union[str, "os.PathLike[str]"],
        *,
        template: Union[ChatTemplate, str, None] = None,
        bos_token: Optional[str] = None,
    ) -> "Tokenizer":
        """Loads a tokenizer from a directory.

        Two layouts are read: tokenmill's (``tokenizer.tiktoken`` + ``tokenmill.json``, as
        written by :meth:`save` or :func:`tokenmill.save`) and nanochat's (``tokenizer.pkl``,
        a pickled ``tiktoken.Encoding``; read without tiktoken, and without unpickling
        anything but an encoding).

        Args:
            tokenizer_dir: The directory.
            template: The chat template. Default: the one :meth:`save` recorded; else
                :data:`NANOCHAT` when the encoding has its special tokens; else none.
            bos_token: The BOS token. Default: the one :meth:`save` recorded, else ``<|bos|>``.

        Raises:
            FileNotFoundError: The directory holds neither layout.
            ValueError: A file is malformed, or the encoding lacks the tokens asked for.
        """
        d = Path(tokenizer_dir)
        if (d / persist.META_FILE).is_file():
            enc = persist.load(d)
        elif (d / NANOCHAT_PICKLE).is_file():
            enc = _load_nanochat_pickle(d / NANOCHAT_PICKLE)
        else:
            raise FileNotFoundError(
                f"{d}: no tokenizer found (expected {persist.RANKS_FILE} + {persist.META_FILE}, "
                f"as tokenmill saves them, or nanochat's {NANOCHAT_PICKLE})"
            )
        saved_bos, saved_template, has_saved = BOS_TOKEN, None, False
        chat_path = d / CHAT_FILE
        if chat_path.is_file():
            try:
                meta = json.loads(chat_path.read_text(encoding="utf-8"))
                if meta.get("format") != "tokenmill-chat" or meta.get("version") != _CHAT_FORMAT_VERSION:
                    raise ValueError(f"unsupported format {meta.get('format')!r} version {meta.get('version')!r}")
                saved_bos = meta["bos_token"]
                tpl_data = meta["template"]
                saved_template = None if tpl_data is None else ChatTemplate.from_dict(tpl_data)
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{chat_path} is malformed: {e}") from e
            has_saved = True
        if template is None:
            if has_saved:
                template = saved_template
            elif all(s in enc.special_tokens_set for s in NANOCHAT.special_tokens):
                template = NANOCHAT
        return cls(enc, bos_token if bos_token is not None else saved_bos, template)

    @classmethod
    def from_pretrained(
        cls,
        tiktoken_name: str,
        *,
        template: Union[ChatTemplate, str, None] = None,
        add_template_tokens: bool = False,
    ) -> "Tokenizer":
        """A tokenizer on a pretrained tiktoken encoding (``"gpt2"``, ``"cl100k_base"``, ...).

        As in nanochat, the BOS token is the encoding's ``<|endoftext|>``. The pretrained
        encodings have no chat tokens, so by default the tokenizer has no chat template (it
        encodes and decodes; rendering conversations raises ``ValueError``).

        Args:
            tiktoken_name: A name :func:`tokenmill.get_encoding` knows.
            template: A chat template to use.
            add_template_tokens: Give the template's special tokens that the encoding lacks
                new ids after its largest id (in the template's order), making a new encoding
                named ``"<name>+<template>"``; the ids of the existing tokens do not change.

        Raises:
            tokenmill.VocabularyNotAvailableError: The vocabulary is not cached and cannot be
                downloaded.
            ValueError: ``template`` is set, its tokens are missing and
                ``add_template_tokens`` is false.
        """
        from tokenmill.registry import get_encoding

        enc = get_encoding(tiktoken_name)
        tpl = _resolve_template(template)
        if add_template_tokens:
            if tpl is None:
                raise ValueError("add_template_tokens=True needs a template")
            missing = [s for s in tpl.special_tokens if s not in enc.special_tokens_set]
            if missing:
                specials = dict(enc._special_tokens)
                for k, s in enumerate(missing):
                    specials[s] = enc.max_token_value + 1 + k
                enc = Encoding(
                    f"{enc.name}+{tpl.name}",
                    pat_str=enc._pat_str,
                    mergeable_ranks=enc._mergeable_ranks,
                    special_tokens=specials,
                )
        return cls(enc, "<|endoftext|>", tpl)

    def save(self, tokenizer_dir: Union[str, "os.PathLike[str]"]) -> Path:
        """Writes the tokenizer into ``tokenizer_dir`` (created if needed): the encoding as
        :func:`tokenmill.save` writes it, plus ``chat_template.json`` (the BOS token and the
        template). :meth:`from_directory` reads it back. Returns the directory's path."""
        out = persist.save(self.enc, tokenizer_dir)
        meta = {
            "format": "tokenmill-chat",
            "version": _CHAT_FORMAT_VERSION,
            "bos_token": self.bos_token,
            "template": self.template.to_dict() if self.template is not None else None,
        }
        tmp = out / (CHAT_FILE + ".tmp")
        tmp.write_text(json.dumps(meta, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, out / CHAT_FILE)
        return out

    # ------------------------------------------------------------------ vocabulary

    def get_vocab_size(self) -> int:
        """The number of token ids: the largest id plus one (special tokens included)."""
        return self.enc.n_vocab

    def get_special_tokens(self) -> Set[str]:
        """The texts of the special tokens (a new ``set[str]``)."""
        return set(self.enc.special_tokens_set)

    def id_to_token(self, id: int) -> str:
        """The text of one token (``"\\ufffd"`` replaces bytes that are not valid UTF-8 alone)."""
        return self.enc.decode([id])

    def encode_special(self, text: str) -> int:
        """The id of the special token ``text`` (or of any text that is exactly one token).

        Raises:
            KeyError: ``text`` is not a single token.
        """
        tok = self.enc._special_tokens.get(text)
        if tok is not None:
            return tok
        try:
            return self.enc.encode_single_token(text)
        except KeyError:
            raise KeyError(f"{text!r} is not a token of encoding {self.enc.name!r}") from None

    def get_bos_token_id(self) -> int:
        """The BOS token's id."""
        return self.bos_token_id

    def decode_single_token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token (special tokens included)."""
        return self.enc.decode_single_token_bytes(token_id)

    @overload
    def token_bytes(self, as_numpy: Literal[False] = ...) -> List[int]: ...
    @overload
    def token_bytes(self, as_numpy: Literal[True]) -> "npt.NDArray[np.int32]": ...

    def token_bytes(self, as_numpy: bool = False) -> Union[List[int], "npt.NDArray[np.int32]"]:
        """The byte length of every token id, for bits-per-byte evaluation.

        Entry ``i`` is the number of bytes token ``i`` decodes to; special tokens count 0
        (they stand for no text), and so do ids that are no token at all (gaps some
        pretrained vocabularies have). The length is :meth:`get_vocab_size`. This is what
        nanochat's ``tok_train`` saves as ``token_bytes.pt``: the bytes of a text equal
        the sum of ``token_bytes()[i]`` over its ids ``i``.

        Args:
            as_numpy: Return a ``numpy.int32`` array (``torch.from_numpy`` takes it as is)
                instead of a new ``list[int]``. Needs numpy.
        """
        if self._token_bytes is None:
            lengths = [0] * self.get_vocab_size()
            for token, rank in self.enc._mergeable_ranks.items():  # special tokens stay 0
                lengths[rank] = len(token)
            self._token_bytes = lengths
        if as_numpy:
            import numpy as np

            return np.array(self._token_bytes, dtype=np.int32)
        return list(self._token_bytes)

    # ------------------------------------------------------------------ encoding

    def _special_id(self, value: Union[str, int], what: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise _InputTypeError(f"{what} must be a special token's text or a token id, got {type(value).__name__}")
        if isinstance(value, int):
            if not 0 <= value < self.get_vocab_size():
                raise ValueError(f"{what}={value} is not a token id (vocabulary size {self.get_vocab_size()})")
            return value
        return self.encode_special(value)

    @overload
    def encode(self, text: str, prepend: Union[str, int, None] = ..., append: Union[str, int, None] = ...,
               num_threads: int = ...) -> List[int]: ...
    @overload
    def encode(self, text: List[str], prepend: Union[str, int, None] = ..., append: Union[str, int, None] = ...,
               num_threads: int = ...) -> List[List[int]]: ...

    def encode(
        self,
        text: Union[str, List[str]],
        prepend: Union[str, int, None] = None,
        append: Union[str, int, None] = None,
        num_threads: int = 8,
    ) -> Union[List[int], List[List[int]]]:
        """Encodes a text, or a list of texts in parallel, as ordinary text.

        Special-token text inside ``text`` is encoded as ordinary characters, never as the
        special token (as in nanochat); add special tokens with ``prepend``/``append``.

        Args:
            text: A ``str`` (returns ``list[int]``) or a list of ``str`` (returns one list of
                ids per text, encoded in parallel in Rust without the GIL).
            prepend: A token put before the ids (of each text): a special token's text or an id.
            append: A token put after the ids (of each text): a special token's text or an id.
            num_threads: Worker threads for a list.

        Raises:
            TypeError: ``text`` is neither a str nor a list of str (also a ``ValueError``,
                as nanochat raises).
            KeyError: ``prepend``/``append`` is text that is not a token.
        """
        pre = self._special_id(prepend, "prepend") if prepend is not None else None
        post = self._special_id(append, "append") if append is not None else None
        if isinstance(text, str):
            ids = self.enc.encode_ordinary(text)
            if pre is not None:
                ids.insert(0, pre)
            if post is not None:
                ids.append(post)
            return ids
        if isinstance(text, (list, tuple)):
            rows = self.enc.encode_ordinary_batch(list(text), num_threads=num_threads)
            if pre is not None:
                rows = [[pre] + row for row in rows]
            if post is not None:
                for row in rows:
                    row.append(post)
            return rows
        raise _InputTypeError(f"expected a str or a list of str, got {type(text).__name__}")

    def __call__(self, *args: Any, **kwargs: Any) -> Union[List[int], List[List[int]]]:
        """Same as :meth:`encode`."""
        return self.encode(*args, **kwargs)

    def decode(self, ids: Sequence[int]) -> str:
        """Decodes ids into text (special tokens as their text; invalid UTF-8 replaced)."""
        return self.enc.decode(ids)

    # ------------------------------------------------------------------ chat

    def _require_template(self) -> ChatTemplate:
        if self.template is None:
            raise ValueError(
                f"this tokenizer (encoding {self.enc.name!r}) has no chat template; create it with "
                "template=NANOCHAT or CHATML (from_pretrained also needs add_template_tokens=True)"
            )
        return self.template

    def render_conversation(
        self, conversation: Conversation, max_tokens: Optional[int] = 2048
    ) -> Tuple[List[int], List[int]]:
        """Renders a conversation into token ids and a training mask.

        The layout is the template's (see :class:`ChatTemplate`); with :data:`NANOCHAT` it
        is nanochat's, id for id: ``<|bos|>``, then each user turn as
        ``<|user_start|> text <|user_end|>`` and each assistant turn as
        ``<|assistant_start|> answer <|assistant_end|>``; a leading system message is
        prepended to the first user message's text, joined by a blank line.

        The mask is 1 for tokens the assistant writes (its text, its python tool calls with
        their delimiters, and the token ending its turn) and 0 for all others (BOS, system
        and user turns, the token opening an assistant turn, tool outputs with their
        delimiters).

        Args:
            conversation: ``{"messages": [...]}`` or the list of messages (see the module
                documentation). It is not modified.
            max_tokens: Keep at most this many tokens (the first ones); ``None`` keeps all.

        Returns:
            ``(ids, mask)``, two lists of the same length.

        Raises:
            ValueError: The conversation is malformed (the message names the message's index
                and role), or the tokenizer has no chat template.
        """
        _check_max_tokens(max_tokens)
        tpl = self._require_template()
        messages = _check_conversation(conversation)
        ids, mask = self._render(tpl, messages)
        if max_tokens is not None:
            del ids[max_tokens:], mask[max_tokens:]
        return ids, mask

    def render_for_completion(self, conversation: Conversation, max_tokens: Optional[int] = 2048) -> List[int]:
        """Renders a conversation as a prompt for the assistant's next answer (for RL and
        evaluation): the last message, which must be the assistant's, is dropped, the rest is
        rendered as by :meth:`render_conversation` (truncated to ``max_tokens``, as nanochat
        does), and the template's ``assistant_start`` is appended.

        Raises:
            ValueError: The conversation is malformed, or its last message is not the
                assistant's.
        """
        _check_max_tokens(max_tokens)
        tpl = self._require_template()
        messages = _check_conversation(conversation)
        last = messages[-1]
        if last.role != "assistant":
            raise ValueError(
                f"{_where(last.index, last.role)}: render_for_completion needs the last message "
                "to be the assistant's (it is replaced by the completion)"
            )
        ids, _ = self._render(tpl, messages[:-1])
        if max_tokens is not None:
            del ids[max_tokens:]
        ids.extend(self._delims["assistant_start"])
        return ids

    def _render(self, tpl: ChatTemplate, messages: List[_Message]) -> Tuple[List[int], List[int]]:
        delims = self._delims
        encode = self.enc.encode_ordinary
        ids: List[int] = [self.bos_token_id]
        mask: List[int] = [0]

        def add(tokens: List[int], supervised: int) -> None:
            ids.extend(tokens)
            mask.extend([supervised] * len(tokens))

        system_text: Optional[str] = None
        for msg in messages:
            if msg.role == "system":
                if tpl.system_start is None:
                    system_text = msg.content
                else:
                    add(delims["system_start"], 0)
                    add(encode(msg.content), 0)
                    add(delims["system_end"], 0)
            elif msg.role == "user":
                text = msg.content
                if system_text is not None:
                    text = system_text + tpl.system_separator + text
                    system_text = None
                add(delims["user_start"], 0)
                add(encode(text), 0)
                add(delims["user_end"], 0)
            else:
                add(delims["assistant_start"], 0)
                if isinstance(msg.content, str):
                    add(encode(msg.content), 1)
                else:
                    for kind, text in msg.content:
                        if kind == "text":
                            add(encode(text), 1)
                        elif kind == "python":
                            add(delims["python_start"], 1)
                            add(encode(text), 1)
                            add(delims["python_end"], 1)
                        else:  # python_output: written by the tool, not the model
                            add(delims["output_start"], 0)
                            add(encode(text), 0)
                            add(delims["output_end"], 0)
                add(delims["assistant_end"], 1)
                add(delims["after_assistant"], 0)
        return ids, mask

    def visualize_tokenization(
        self,
        ids: Sequence[int],
        mask: Sequence[int],
        with_token_id: bool = False,
        *,
        color: Optional[bool] = None,
    ) -> str:
        """Shows a rendering token by token, for debugging :meth:`render_conversation`.

        Tokens are joined by ``|``. In colour, supervised tokens are green and unsupervised
        ones red (ids, if shown, grey), as in nanochat. In plain text, each run of supervised
        tokens is wrapped in ``[[`` and ``]]``::

            <|bos|>|<|user_start|>|Hi|<|user_end|>|<|assistant_start|>|[[Hello|<|assistant_end|>]]

        Args:
            ids: Token ids.
            mask: Their mask (nonzero: supervised), the same length as ``ids``.
            with_token_id: Show each token's id after it, in parentheses: ``Hello(1234)``.
            color: Use ANSI colours. ``None`` (default): when standard output is a terminal
                and the ``NO_COLOR`` environment variable is not set.

        Raises:
            ValueError: ``ids`` and ``mask`` differ in length.
        """
        if len(ids) != len(mask):
            raise ValueError(f"ids and mask differ in length: {len(ids)} and {len(mask)}")
        if color is None:
            color = _stdout_is_terminal() and not os.environ.get("NO_COLOR")
        pieces = []
        if color:
            green, red, gray, reset = "\033[92m", "\033[91m", "\033[90m", "\033[0m"
            for tok, m in zip(ids, mask):
                piece = f"{green if m else red}{self.id_to_token(tok)}{reset}"
                if with_token_id:
                    piece += f"{gray}({tok}){reset}"
                pieces.append(piece)
            return "|".join(pieces)
        n = len(ids)
        for k, (tok, m) in enumerate(zip(ids, mask)):
            piece = self.id_to_token(tok)
            if with_token_id:
                piece += f"({tok})"
            if m and (k == 0 or not mask[k - 1]):
                piece = "[[" + piece
            if m and (k == n - 1 or not mask[k + 1]):
                piece += "]]"
            pieces.append(piece)
        return "|".join(pieces)


def _check_max_tokens(max_tokens: Optional[int]) -> None:
    if max_tokens is None:
        return
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise TypeError(f"max_tokens must be an int or None, got {type(max_tokens).__name__}")
    if max_tokens < 0:
        raise ValueError(f"max_tokens must not be negative, got {max_tokens}")


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed stdout
        return False
