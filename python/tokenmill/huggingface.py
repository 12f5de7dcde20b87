"""HuggingFace ``tokenizers`` compatibility: ``tokenizer.json`` export and import, and an
HF-flavoured view of an :class:`~tokenmill.Encoding`.

Export
    :func:`to_tokenizer_json` turns any encoding (pretrained or trained) into a
    ``tokenizer.json`` document that ``tokenizers.Tokenizer`` loads and that gives the same
    ids as tokenmill, and the same text back on decode. :func:`save_tokenizer_json` writes it,
    :func:`to_hf_tokenizer` returns a ``tokenizers.Tokenizer`` and :func:`to_transformers` a
    ``transformers.PreTrainedTokenizerFast``.

Import
    :func:`from_tokenizer_json` reads a byte-level BPE ``tokenizer.json`` (GPT-2 style or the
    ``Split`` + ``ByteLevel`` style of Llama 3 and Qwen2) into an encoding whose ids equal
    HF's, or raises ``ValueError`` saying why that cannot be guaranteed.

Facade
    :func:`token_to_id`, :func:`id_to_token`, :func:`get_vocab`, :func:`get_vocab_size` and
    :func:`encode_with_offsets` answer like the ``tokenizers.Tokenizer`` methods of the same
    names, taking the encoding as their first argument.

When the two algorithms agree
-----------------------------
tiktoken (and tokenmill) encode a piece by looking it up whole, and otherwise by repeatedly
merging the adjacent pair whose concatenation has the lowest rank (leftmost on ties); any
pair whose concatenation is a token is a candidate. HF's BPE merges the adjacent pair that
comes first in its merge list (leftmost on ties); only listed pairs are candidates, and the
whole-piece lookup happens only with ``ignore_merges: true``.

Call a token ``T``'s *tiktoken merge* the pair merged last when tiktoken runs on ``T``'s
bytes alone, without the whole-piece lookup (``T`` is *unreachable* when that run stops at
three or more tokens). Lemma: at any moment of any tiktoken run, two adjacent tokens whose
concatenation is a token ``T`` are ``T``'s tiktoken merge. (The span they cover was never
crossed by a merge, and a merge inside it was always the best pair inside it, so that span
went through the same states as ``T``'s bytes alone; that run has one two-token state.) So
tiktoken's candidates are always tiktoken merges, and by induction over the steps of a run
HF takes the same steps, on every input, when

* (B) every token's tiktoken merge is in the merge list (then HF sees the same candidates;
  any other listed pair is never adjacent, so it never applies), and
* (A) the tiktoken merges come in the list in the order of the ids they make (then HF picks
  the same candidate),

and the whole-piece lookups agree: with ``ignore_merges: true`` both look up; with
``ignore_merges: false`` (C) no unreachable token may be a whole piece by itself, since
tiktoken would look it up and HF could not build it. Export writes exactly the tiktoken
merges in id order, so (A), (B) and (C) hold by construction; import checks them and raises
``ValueError`` naming the first offending merge or token otherwise. Merge lists that hold
every split of every token (as transformers' tiktoken converter writes them, e.g. for
Llama 3) pass when the tiktoken merges among them are in id order.

The usual conversion splits each token with BPE restricted to *lower* ranks. That is the
same for cl100k_base, o200k_base and trained vocabularies, but not for a token that tiktoken
builds through a higher-ranked intermediate (``abc`` = 256 from ``a`` + ``bc`` = 257): the
restricted rule finds no merge for it, and HF would then split ``abcd`` differently.

The split pattern
-----------------
HF runs regexes on Oniguruma with Ruby syntax, tiktoken on fancy-regex. For tiktoken's
patterns the differences are: ``X{m,n}+`` is *not* possessive in Ruby syntax (it means
``(?:X{m,n})+``), so export writes ``(?>X{m,n})``; ``$``/``^`` mean end/start of *line* in
Ruby, so export writes ``\\z``/``\\A``; Ruby's dot-all flag is ``m``, not ``s``. Possessive
``?+ *+ ++``, ``(?i:...)``, ``(?!...)``, ``\\p{...}``, ``\\s``, ``\\d``, ``\\w`` mean the same
in both. :func:`tiktoken_pattern_to_onig` and :func:`onig_pattern_to_tiktoken` do these
rewrites and refuse constructs they cannot translate exactly. HF's ``Split`` with
``behavior="Isolated"`` keeps text the pattern does not match as extra pieces, where
tiktoken drops it; the standard patterns match every character, and for patterns that do
not, export uses ``behavior="Removed", invert=True`` (tiktoken's semantics) and import adds
an alternative matching the gaps. Whether a pattern matches every character is decided on a
probe text (every code point below U+3000 and every 7th above, alone and in the contexts
the standard patterns single out).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from tokenmill import _core
from tokenmill.core import AllowedSpecial, DisallowedSpecial, Encoding, _replace_surrogates
from tokenmill.pretrained import R50K_PATTERN

__all__ = [
    "EncodingWithOffsets",
    "bytes_to_unicode",
    "encode_with_offsets",
    "from_tokenizer_json",
    "get_vocab",
    "get_vocab_size",
    "id_to_token",
    "onig_pattern_to_tiktoken",
    "save_tokenizer_json",
    "tiktoken_merges",
    "tiktoken_pattern_to_onig",
    "to_hf_tokenizer",
    "to_tokenizer_json",
    "to_transformers",
    "token_bytes_to_string",
    "token_string_to_bytes",
    "token_to_id",
]

PathLike = Union[str, "os.PathLike[str]"]

#: The pre-tokenizer regex of HF's ``ByteLevel(use_regex=True)`` (GPT-2's split pattern).
#: tokenmill runs the equivalent r50k_base pattern, which its fast path recognises.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# ---------------------------------------------------------------------------------------------
# GPT-2's byte <-> unicode mapping
# ---------------------------------------------------------------------------------------------


def bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters.

    Bytes that are printable Latin-1 characters (``!``..``~``, ``¡``..``¬``, ``®``..``ÿ``)
    stand for themselves; the other 68 (controls, space, soft hyphen, ...) take the code
    points from U+0100 upwards, in byte order. So the space byte is ``Ġ`` (U+0120) and the
    newline byte ``Ċ`` (U+010A), as HF shows them.
    """
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(0x100 + extra)
            extra += 1
    return mapping


_BYTE_TO_CHAR: Dict[int, str] = bytes_to_unicode()
# str.translate table: the Latin-1 character of each byte -> its GPT-2 character.
_LATIN1_TO_GPT2 = {b: c for b, c in _BYTE_TO_CHAR.items()}
_CHAR_TO_BYTE: Dict[str, int] = {c: b for b, c in _BYTE_TO_CHAR.items()}
# Every byte value except the UTF-8 continuation bytes 0x80..0xBF: deleting these from a
# token's bytes leaves its continuation bytes, whose count gives the characters it starts.
_NOT_CONTINUATION = bytes(b for b in range(256) if not 0x80 <= b < 0xC0)


def token_bytes_to_string(token: bytes) -> str:
    """A token's bytes as HF writes them in a byte-level vocabulary (``b" hi"`` -> ``"Ġhi"``)."""
    return token.decode("latin-1").translate(_LATIN1_TO_GPT2)


def token_string_to_bytes(token: str) -> Optional[bytes]:
    """The bytes of a byte-level token string (``"Ġhi"`` -> ``b" hi"``), or ``None`` when it
    has a character outside GPT-2's 256-character alphabet."""
    try:
        return bytes([_CHAR_TO_BYTE[c] for c in token])
    except KeyError:
        return None


# ---------------------------------------------------------------------------------------------
# Merges from ranks
# ---------------------------------------------------------------------------------------------


def tiktoken_merges(
    mergeable_ranks: Mapping[bytes, int],
) -> Tuple[List[Tuple[int, bytes, bytes]], List[bytes]]:
    """Every token's tiktoken merge (see the module docstring), and the unreachable tokens.

    For each token of two or more bytes, runs tiktoken's byte-pair merge on its bytes alone,
    without the whole-piece lookup; if the run ends with the token itself, the pair merged
    last is the only pair of adjacent tokens that tiktoken ever joins into that token, in
    any text. Written as a merge list
    sorted by the new token's rank, these make HF's BPE take the same steps as tiktoken.

    Returns:
        ``(merges, unreachable)``: ``merges`` is a list of ``(rank, left, right)`` sorted by
        rank; ``unreachable`` lists the tokens that the run does not rebuild (tiktoken only
        ever produces them by whole-piece lookup), in the mapping's order. Computed by the
        extension (``merge_list.rs``): about 0.3 s for o200k_base on a 2-core VM.

    Raises:
        TypeError: a key is not bytes or a rank not an int in ``[0, 2**32)``.
        ValueError: two tokens share a rank.
    """
    ranks = mergeable_ranks if type(mergeable_ranks) is dict else dict(mergeable_ranks)
    return _core.tiktoken_merges(ranks)


# ---------------------------------------------------------------------------------------------
# Regex translation between tiktoken's syntax (fancy-regex / Rust) and Oniguruma's Ruby syntax
# ---------------------------------------------------------------------------------------------

_BRACE_QUANTIFIER = re.compile(r"\{(\d+)(,\d*)?\}")
_HEX = re.compile(r"[0-9a-fA-F]+")
_SIMPLE_ESCAPES = set("dDwWsSnrtfv")
_ASSERTION_ESCAPES = set("bBAz")


class _Translator:
    """A small recursive-descent rewriter for the regex syntax split patterns use.

    It tokenises the pattern (escapes, character classes, groups, quantifiers, anchors),
    rewrites the constructs whose meaning differs between the two engines, passes the rest
    through unchanged, and raises ``ValueError`` for anything it cannot translate exactly.
    Each item of a sequence is kept with its kind (``atom``, ``alt``, ``flags``, ``anchor``)
    so that a quantifier can wrap the atom before it.
    """

    def __init__(self, pattern: str, to_onig: bool) -> None:
        self.p = pattern
        self.to_onig = to_onig
        self.i = 0

    def fail(self, what: str) -> ValueError:
        target = "Oniguruma (HF tokenizers)" if self.to_onig else "tiktoken/fancy-regex"
        return ValueError(
            f"cannot translate the split pattern to {target} syntax: {what} at offset {self.i} "
            f"of {self.p!r}"
        )

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.p[j] if j < len(self.p) else ""

    # -- escapes --------------------------------------------------------------------------
    def braced(self) -> str:
        """Consumes ``{...}`` at the cursor and returns what is inside."""
        end = self.p.find("}", self.i)
        if end < 0:
            raise self.fail("unterminated {")
        inside = self.p[self.i + 1 : end]
        self.i = end + 1
        return inside

    def escape(self, in_class: bool) -> Tuple[str, str]:
        """Consumes one escape; returns its translation and its kind."""
        p, start = self.p, self.i
        if start + 1 >= len(p):
            raise self.fail("trailing backslash")
        c = p[start + 1]
        self.i = start + 2
        if c in "pP":
            if self.peek() == "{":
                name = self.braced()
            elif self.peek().isalpha():
                name = self.peek()
                self.i += 1
            else:
                raise self.fail(f"\\{c} without a property name")
            negate = c == "P"
            if name.startswith("^"):
                negate, name = not negate, name[1:]
            if not re.fullmatch(r"[A-Za-z_]+", name):
                raise self.fail(f"unsupported Unicode property {name!r}")
            return ("\\P{" if negate else "\\p{") + name + "}", "atom"
        if c in "xuU":
            if self.peek() == "{":
                digits = self.braced()
            else:
                width = {"x": 2, "u": 4, "U": 8}[c]
                digits = p[self.i : self.i + width]
                self.i += width
            if not _HEX.fullmatch(digits):
                raise self.fail(f"bad hexadecimal escape \\{c}{digits}")
            return "\\x{" + digits + "}", "atom"
        if c in _SIMPLE_ESCAPES:
            return "\\" + c, "atom"
        if c == "a":
            return "\\x{7}", "atom"
        if c == "e":
            return "\\x{1B}", "atom"
        if c in _ASSERTION_ESCAPES and not in_class:
            return "\\" + c, "anchor"
        if c == "Z" and not in_class:
            return ("\\Z" if self.to_onig else r"(?=\n?\z)"), "anchor"
        if c in "hH" and not self.to_onig:  # Oniguruma: a hexadecimal digit
            if in_class and c == "h":
                return "0-9a-fA-F", "atom"
            if not in_class:
                return ("[0-9a-fA-F]" if c == "h" else "[^0-9a-fA-F]"), "atom"
        if c.isdigit() and c != "0" and not in_class:
            while self.peek().isdigit():
                self.i += 1
            return p[start : self.i], "atom"  # a backreference
        if c == "k" and not in_class and self.peek() == "<":
            end = p.find(">", self.i)
            if end < 0:
                raise self.fail("unterminated \\k<name>")
            self.i = end + 1
            return p[start : self.i], "atom"
        if not c.isalnum() and not c.isspace():
            return "\\" + c, "atom"  # escaped punctuation: a literal in both engines
        raise self.fail(f"unsupported escape \\{c}")

    # -- character classes ------------------------------------------------------------------
    def char_class(self) -> str:
        p = self.p
        out = ["["]
        self.i += 1
        if self.peek() == "^":
            out.append("^")
            self.i += 1
        if self.peek() == "]":  # a leading ] is a literal; write it escaped for both engines
            out.append("\\]")
            self.i += 1
        while True:
            c = self.peek()
            if c == "":
                raise self.fail("unterminated character class")
            if c == "]":
                self.i += 1
                out.append("]")
                return "".join(out)
            if c == "\\":
                out.append(self.escape(in_class=True)[0])
            elif c == "[":
                if self.peek(1) == ":":
                    raise self.fail("POSIX character classes ([:name:]) mean different sets in the two engines")
                out.append(self.char_class())
            elif p.startswith("--", self.i) or p.startswith("~~", self.i):
                raise self.fail(f"class operator {p[self.i:self.i + 2]!r}")
            else:
                out.append(c)
                self.i += 1

    # -- groups and sequences ---------------------------------------------------------------
    def flags(self, letters: str) -> str:
        out = []
        for f in letters:
            if f == "i":
                out.append("i")
            elif f == "s" and self.to_onig:
                out.append("m")  # dot matches newline: Ruby calls it m
            elif f == "m" and not self.to_onig:
                out.append("s")
            else:
                raise self.fail(f"unsupported inline flag {f!r}")
        return "".join(out)

    def group(self, depth: int) -> Tuple[str, str]:
        """Consumes a whole group (or a flag switch such as ``(?i)``) at the cursor."""
        p, i = self.p, self.i
        if p.startswith("(?#", i):
            end = p.find(")", i)
            if end < 0:
                raise self.fail("unterminated comment")
            self.i = end + 1
            return "", "flags"
        opener = None
        if not p.startswith("(?", i):
            opener, self.i = "(", i + 1
        else:
            for candidate in ("(?:", "(?=", "(?!", "(?<=", "(?<!", "(?>"):
                if p.startswith(candidate, i):
                    opener, self.i = candidate, i + len(candidate)
                    break
        if opener is None:
            m = re.compile(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>").match(p, i)
            if m:
                opener, self.i = f"(?<{m.group(1)}>", m.end()
        if opener is None:
            m = re.compile(r"\(\?([A-Za-z]*)(?:-([A-Za-z]*))?([:)])").match(p, i)
            if not m:
                raise self.fail("unsupported group syntax")
            on, off = self.flags(m.group(1)), self.flags(m.group(2) or "")
            self.i = m.end()
            opener = "(?" + on + ("-" + off if off else "") + m.group(3)
            if m.group(3) == ")":
                return opener, "flags"
        body = self.sequence(depth + 1)
        kind = "anchor" if opener in ("(?=", "(?!", "(?<=", "(?<!") else "atom"
        return opener + body + ")", kind

    def sequence(self, depth: int) -> str:
        """Translates up to the ``)`` that closes the current group (consumed), or to the end
        of the pattern at depth 0."""
        items: List[Tuple[str, str]] = []
        p = self.p
        while self.i < len(p):
            c = p[self.i]
            if c == ")":
                if depth == 0:
                    raise self.fail("unbalanced )")
                self.i += 1
                return "".join(text for text, _ in items)
            if c == "(":
                items.append(self.group(depth))
            elif c == "[":
                items.append((self.char_class(), "atom"))
            elif c == "\\":
                items.append(self.escape(in_class=False))
            elif c in "*+?{":
                self.quantifier(items)
            elif c == "^":
                items.append(("\\A" if self.to_onig else "(?m:^)", "anchor"))
                self.i += 1
            elif c == "$":
                items.append(("\\z" if self.to_onig else "(?m:$)", "anchor"))
                self.i += 1
            elif c == "|":
                items.append(("|", "alt"))
                self.i += 1
            else:
                items.append((c, "atom"))
                self.i += 1
        if depth:
            raise self.fail("unbalanced (")
        return "".join(text for text, _ in items)

    def quantifier(self, items: List[Tuple[str, str]]) -> None:
        p = self.p
        c = p[self.i]
        if c == "{":
            m = _BRACE_QUANTIFIER.match(p, self.i)
            if not m:  # a literal brace
                items.append(("\\{", "atom"))
                self.i += 1
                return
            quant, self.i = m.group(0), m.end()
        else:
            quant, self.i = c, self.i + 1
        if not items or items[-1][1] != "atom":
            raise self.fail(f"quantifier {quant!r} with nothing to repeat")
        atom = items.pop()[0]
        suffix = self.peek()
        if suffix == "?":  # lazy: the same in both engines
            self.i += 1
            items.append((atom + quant + "?", "quantified"))
        elif suffix == "+":
            self.i += 1
            if c != "{":  # ?+ *+ ++ are possessive in both engines
                items.append((atom + quant + "+", "quantified"))
            elif self.to_onig:  # fancy-regex's possessive X{m,n}+ is an atomic group in Ruby
                items.append(("(?>" + atom + quant + ")", "quantified"))
            else:  # Ruby's X{m,n}+ is (?:X{m,n})+, and that + may itself be lazy or possessive
                items.append(("(?:" + atom + quant + ")", "atom"))
                self.i -= 1
                self.quantifier(items)
        else:
            items.append((atom + quant, "quantified"))


def tiktoken_pattern_to_onig(pattern: str) -> str:
    """Rewrites a tiktoken (fancy-regex) split pattern so that Oniguruma, as HF tokenizers
    runs it, matches exactly the same text.

    Rewrites ``X{m,n}+`` to ``(?>X{m,n})``, ``$`` to ``\\z``, ``^`` to ``\\A``, the flag
    ``s`` to ``m``, ``(?P<name>`` to ``(?<name>`` and ``\\u``/``\\U`` escapes to ``\\x{}``;
    everything else in tiktoken's patterns means the same in both engines.

    Raises:
        ValueError: The pattern uses a construct with no exact translation (the flags ``m``,
            ``x``, ``U``, ``u``, POSIX classes, class operators ``--``/``~~``, unknown escapes).
    """
    return _Translator(pattern, to_onig=True).sequence(0)


def onig_pattern_to_tiktoken(pattern: str) -> str:
    """Rewrites an Oniguruma (Ruby syntax) split pattern from a ``tokenizer.json`` into the
    syntax tokenmill runs (fancy-regex), with the same matches.

    Rewrites ``X{m,n}+`` to ``(?:X{m,n})+``, ``$``/``^`` to ``(?m:$)``/``(?m:^)``, ``\\Z`` to
    ``(?=\\n?\\z)``, ``\\h``/``\\H`` to hexadecimal-digit classes and the flag ``m`` to ``s``.

    Raises:
        ValueError: The pattern uses a construct with no exact translation.
    """
    return _Translator(pattern, to_onig=False).sequence(0)


# ---------------------------------------------------------------------------------------------
# Patterns that leave text unmatched
# ---------------------------------------------------------------------------------------------


def _probe_text() -> str:
    """Text with every code point below U+3000 and every 7th above, alone and after a space,
    letter, digit, apostrophe and newline, and runs of whitespace in the spots the standard
    patterns treat specially."""
    chars = [chr(c) for c in range(0x3000)]
    chars += [chr(c) for c in range(0x3000, 0x110000, 7) if not 0xD800 <= c < 0xE000]
    plain = "".join(chars)
    contexts = "".join(f" {c}a{c}1{c}'{c}\n{c}" for c in chars[:0x3000:3])
    spaces = "a  b \n\n c\t\t\r\n d   \n  e 1 2  3 \u3000\u3000x \u00a0 y'S 'll  "
    return plain + contexts + spaces + "end   "


_PROBE: Optional[str] = None
_BYTE_RANKS = {bytes([b]): b for b in range(256)}


def _matches_all_text(pattern: str) -> bool:
    """Whether splitting with ``pattern`` keeps every character of a broad probe text
    (tiktoken drops text the pattern does not match; HF's ``Isolated`` split keeps it)."""
    global _PROBE
    if _PROBE is None:
        _PROBE = _probe_text()
    splitter = _core.CoreBPE(_BYTE_RANKS, {}, pattern)
    data = _PROBE.encode("utf-8")
    return splitter.decode_bytes(splitter.encode_ordinary(_PROBE)) == data


# ---------------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------------


def _export_merges(enc: Encoding) -> List[Tuple[bytes, bytes]]:
    """The merges to export: the tiktoken merges of the encoding's ranks. For a trained
    encoding these are its training merges (checked; a mismatch only warns, since the
    tiktoken merges are the ones that reproduce tokenmill's ids)."""
    ranks = enc._mergeable_ranks
    merges, _unreachable = tiktoken_merges(ranks)
    training = getattr(enc, "_merges", None)
    if training is not None:
        by_id = {rank: token for token, rank in ranks.items()}
        derived = {rank: (ranks[left], ranks[right]) for rank, left, right in merges}
        for k, (left, right) in enumerate(training):
            new_id = 256 + k
            if new_id in by_id and derived.get(new_id) != (left, right):
                warnings.warn(
                    f"training merge {k} ({left} + {right} -> {new_id}) is not how tokenmill "
                    f"encodes token {new_id} ({derived.get(new_id)}); exporting the merges that "
                    f"reproduce tokenmill's ids",
                    stacklevel=3,
                )
                break
    return [(left, right) for _rank, left, right in merges]


def _added_token(content: str, token_id: int) -> Dict[str, Any]:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": True,
    }


def _hf_added_ids(vocab: Mapping[str, int], contents: Sequence[str]) -> List[int]:
    """The ids ``tokenizers`` gives added tokens when it loads a file: the model's id when the
    content is in the model's vocabulary, else the next id after the vocabulary (it ignores the
    ids written in the file; checked against tokenizers 0.23)."""
    size = len(vocab)
    given: Dict[str, int] = {}
    out = []
    for content in contents:
        if content in given:
            token_id = given[content]
        elif content in vocab:
            token_id = vocab[content]
        else:
            top = max(given.values(), default=None)
            token_id = size if top is None or top < size else top + 1
        given[content] = token_id
        out.append(token_id)
    return out


def _is_text(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def to_tokenizer_json(enc: Encoding) -> Dict[str, Any]:
    """The ``tokenizer.json`` document of ``enc``, as a dict (``json.dump`` it, or use
    :func:`save_tokenizer_json`).

    The model is a byte-level BPE with ``ignore_merges: true`` (tiktoken looks a piece up
    whole before merging) and the tiktoken merges of ``enc``'s ranks (its training merges for
    a trained encoding); the pre-tokenizer is ``Split`` on ``enc``'s pattern (translated for
    Oniguruma) then ``ByteLevel(add_prefix_space=False, use_regex=False)``; the decoder is
    ``ByteLevel``; special tokens are added tokens with ``special: true``. HF's ``encode(text)``
    then equals ``enc.encode(text, allowed_special="all")`` and ``decode`` gives the text back.

    Special tokens whose ids do not follow the vocabulary contiguously (cl100k_base's, say)
    are also written into the model's vocabulary, because ``tokenizers`` ignores the ids of
    added tokens that are not there. One HF limitation remains: its ByteLevel decoder reads a
    special token whose text uses only characters of GPT-2's byte alphabet as byte-level
    characters, so ``<|café|>`` decodes to ``<|caf\ufffd|>`` in HF (the ids are unaffected;
    ASCII special tokens decode correctly).

    Raises:
        ValueError: The pattern cannot be translated; two special tokens share an id (HF can
            give an id to one added token only; o200k_harmony has such a pair); a special
            token's text is also the byte-level string of an ordinary token with another id,
            or would read as one in the model's vocabulary.
    """
    ranks = enc._mergeable_ranks
    pattern = tiktoken_pattern_to_onig(enc._pat_str)
    if _matches_all_text(enc._pat_str):
        split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    else:  # keep only the matches, as tiktoken does
        split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Removed", "invert": True}

    string_of = {token: token_bytes_to_string(token) for token in ranks}
    vocab = {string_of[token]: rank for token, rank in sorted(ranks.items(), key=lambda kv: kv[1])}
    merges = [[string_of[left], string_of[right]] for left, right in _export_merges(enc)]

    specials = sorted(enc._special_tokens.items(), key=lambda kv: (kv[1], kv[0]))
    seen_ids: Dict[int, str] = {}
    for text, token_id in specials:
        if token_id in seen_ids:
            raise ValueError(
                f"special tokens {seen_ids[token_id]!r} and {text!r} share id {token_id}; a "
                f"tokenizer.json can give an id to one added token only (build an Encoding "
                f"without one of them to export it)"
            )
        seen_ids[token_id] = text
        if vocab.get(text, token_id) != token_id:
            raise ValueError(
                f"special token {text!r} (id {token_id}) is also the byte-level string of "
                f"ordinary token {vocab[text]}; tokenizers would give the added token id {vocab[text]}"
            )
    contents = [text for text, _ in specials]
    wanted = [token_id for _, token_id in specials]
    if _hf_added_ids(vocab, contents) != wanted:
        for text, token_id in specials:
            raw = token_string_to_bytes(text)
            if text not in vocab and raw is not None and raw != text.encode("utf-8") and _is_text(raw):
                raise ValueError(
                    f"special token {text!r} must be listed in the model's vocabulary to keep id "
                    f"{token_id}, where it would also read as the byte-level token {raw!r}"
                )
            vocab.setdefault(text, token_id)

    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_added_token(text, token_id) for text, token_id in specials],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                split,
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": vocab,
            "merges": merges,
        },
    }


def save_tokenizer_json(enc: Encoding, path: PathLike) -> Path:
    """Writes ``enc`` as a ``tokenizer.json`` (see :func:`to_tokenizer_json`) and returns the
    file's path. ``path`` is the file to write, or an existing directory to write
    ``tokenizer.json`` into."""
    out = Path(path)
    if out.is_dir():
        out = out / "tokenizer.json"
    text = json.dumps(to_tokenizer_json(enc), ensure_ascii=False)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)
    return out


def to_hf_tokenizer(enc: Encoding) -> Any:
    """``enc`` as a ``tokenizers.Tokenizer`` (needs the ``tokenizers`` package)."""
    try:
        from tokenizers import Tokenizer
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("to_hf_tokenizer needs the tokenizers package: pip install tokenizers") from e
    return Tokenizer.from_str(json.dumps(to_tokenizer_json(enc), ensure_ascii=False))


def to_transformers(enc: Encoding, **kwargs: Any) -> Any:
    """``enc`` as a ``transformers.PreTrainedTokenizerFast``.

    Keyword arguments go to ``PreTrainedTokenizerFast`` (``eos_token="<|endoftext|>"``,
    ``model_max_length=...``); ``clean_up_tokenization_spaces`` defaults to ``False``, as
    anything else would change decoded text.

    Raises:
        ImportError: transformers is not installed.
    """
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError as e:
        raise ImportError(
            "to_transformers needs the transformers package (pip install transformers); "
            "to_hf_tokenizer and save_tokenizer_json work without it"
        ) from e
    kwargs.setdefault("clean_up_tokenization_spaces", False)
    return PreTrainedTokenizerFast(tokenizer_object=to_hf_tokenizer(enc), **kwargs)


# ---------------------------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------------------------


def _load_document(source: Any) -> Tuple[Dict[str, Any], Optional[str]]:
    """The tokenizer.json document of ``source`` and a default name for the encoding."""
    if isinstance(source, Mapping):
        return dict(source), None
    backend = getattr(source, "backend_tokenizer", None)  # transformers' fast tokenizers
    if backend is not None:
        source = backend
    if hasattr(source, "to_str") and not isinstance(source, (str, bytes, os.PathLike)):
        return json.loads(source.to_str()), None
    if isinstance(source, str) and source.lstrip().startswith("{"):
        return json.loads(source), None
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            path = path / "tokenizer.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON: {e}") from e
        stem = path.parent.name if path.name == "tokenizer.json" and path.parent.name else path.stem
        return data, stem
    raise TypeError(
        "expected a tokenizer.json path, a dict, or a tokenizers.Tokenizer, got " + type(source).__name__
    )


def _describe(component: Mapping[str, Any]) -> str:
    return str(component.get("type", component))


def _check_normalizer(normalizer: Any, ignore: bool) -> None:
    if normalizer is None:
        return
    if normalizer.get("type") == "Sequence" and not normalizer.get("normalizers"):
        return
    if ignore:
        return
    raise ValueError(
        f"unsupported normalizer {_describe(normalizer)}: it changes the text before "
        f"tokenization and a tokenmill Encoding has no normalizer (pass ignore_normalizer=True "
        f"to drop it; the ids then equal HF's only on text it leaves unchanged)"
    )


def _flatten_pre_tokenizer(pre: Any) -> List[Dict[str, Any]]:
    if pre is None:
        return []
    if pre.get("type") == "Sequence":
        out: List[Dict[str, Any]] = []
        for step in pre.get("pretokenizers", []):
            out.extend(_flatten_pre_tokenizer(step))
        return out
    return [pre]


def _rust_escape(text: str) -> str:
    """``text`` as a regex matching exactly it."""
    return "".join("\\" + c if c in "\\.+*?()|[]{}^$" else c for c in text)


def _known_patterns() -> Dict[str, str]:
    """Oniguruma form -> tokenmill's own spelling, for the named patterns (so that an exported
    encoding imports with the pattern tokenmill's fast pre-tokenizer recognises)."""
    from tokenmill.patterns import NAMED_PATTERNS

    return {tiktoken_pattern_to_onig(p): p for p in NAMED_PATTERNS.values()}


def _split_pattern(pre: Any) -> Tuple[str, bool]:
    """The tiktoken pattern equivalent to a byte-level pre-tokenizer, and whether HF keeps
    text it does not match (``Isolated``) rather than dropping it."""
    steps = _flatten_pre_tokenizer(pre)
    if not steps or steps[-1].get("type") != "ByteLevel":
        kinds = ", ".join(_describe(s) for s in steps) or "none"
        raise ValueError(
            f"unsupported pre-tokenizer ({kinds}): only byte-level BPE is supported, which needs a "
            f"ByteLevel pre-tokenizer last"
        )
    byte_level, before = steps[-1], steps[:-1]
    if byte_level.get("add_prefix_space", True):
        raise ValueError(
            "unsupported pre-tokenizer ByteLevel(add_prefix_space=True): it adds a space before "
            "the text, which a tokenmill Encoding does not do"
        )
    if byte_level.get("use_regex", True):
        if before:
            raise ValueError(
                "unsupported pre-tokenizer: "
                + ", ".join(_describe(s) for s in before)
                + " before ByteLevel(use_regex=True) splits the text twice"
            )
        return R50K_PATTERN, False
    if not before:
        return r"[\s\S]+", False  # no split: the whole text is one piece
    if len(before) > 1 or before[0].get("type") != "Split":
        raise ValueError(
            "unsupported pre-tokenizer sequence: "
            + ", ".join(_describe(s) for s in steps)
            + " (supported: ByteLevel(use_regex=True), or one Split then ByteLevel(use_regex=False))"
        )
    split = before[0]
    spec = split.get("pattern", {})
    if "Regex" in spec:
        pattern = _known_patterns().get(spec["Regex"]) or onig_pattern_to_tiktoken(spec["Regex"])
    elif "String" in spec:
        pattern = _rust_escape(spec["String"])
    else:
        raise ValueError(f"unsupported Split pattern {spec!r}")
    behavior, invert = split.get("behavior"), bool(split.get("invert", False))
    if behavior == "Isolated" and not invert:
        return pattern, True
    if behavior == "Removed" and invert:
        return pattern, False
    raise ValueError(
        f"unsupported Split(behavior={behavior!r}, invert={invert}): only Isolated, or Removed "
        f"with invert=True, split text into the pattern's matches"
    )


def _parse_merges(raw: Iterable[Any]) -> List[Tuple[str, str]]:
    out = []
    for i, m in enumerate(raw):
        if isinstance(m, str):
            parts = m.split(" ")
            if len(parts) != 2:
                raise ValueError(f"merge {i} ({m!r}) is not two tokens separated by a space")
            out.append((parts[0], parts[1]))
        elif isinstance(m, (list, tuple)) and len(m) == 2:
            out.append((str(m[0]), str(m[1])))
        else:
            raise ValueError(f"merge {i} ({m!r}) is not a pair of tokens")
    return out


def _check_bpe_model(model: Mapping[str, Any]) -> None:
    kind = model.get("type") or ("BPE" if "merges" in model else "unknown")
    if kind != "BPE":
        raise ValueError(f"unsupported model type {kind}: only byte-level BPE models can be imported")
    if model.get("dropout") not in (None, 0, 0.0):
        raise ValueError(f"unsupported BPE dropout={model['dropout']}: dropout makes encoding random")
    if model.get("byte_fallback"):
        raise ValueError("unsupported BPE byte_fallback=True: that is a SentencePiece-style model, not byte-level BPE")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise ValueError(f"unsupported BPE {key}={model[key]!r}: byte-level BPE has none")


def from_tokenizer_json(
    source: Any,
    name: Optional[str] = None,
    *,
    ignore_normalizer: bool = False,
) -> Encoding:
    """Builds an :class:`~tokenmill.Encoding` from a byte-level BPE ``tokenizer.json``.

    Supported: a BPE model with a ``ByteLevel(add_prefix_space=False)`` pre-tokenizer, either
    alone with ``use_regex=True`` (GPT-2 style) or after one ``Split`` on a regex with
    ``use_regex=False`` (Llama 3, Qwen2), ``ignore_merges`` true or false. Added tokens become
    special tokens. The encoding's ``encode(text, allowed_special="all")`` then equals HF's
    ``encode(text, add_special_tokens=False).ids``: post-processors (BOS/EOS templates),
    truncation and padding are not part of an Encoding and are ignored.

    Args:
        source: A path to a ``tokenizer.json`` (or to a directory holding one), the parsed
            JSON as a dict, its text, a ``tokenizers.Tokenizer``, or a transformers fast
            tokenizer.
        name: The encoding's name (default: the directory or file name, else "huggingface").
        ignore_normalizer: Drop a normalizer instead of refusing the file (e.g. Qwen2's NFC);
            ids then equal HF's only on text the normalizer leaves unchanged.

    Raises:
        ValueError: The model is not supported (WordPiece, Unigram, WordLevel, BPE with
            dropout, byte_fallback or subword affixes, not byte-level), a normalizer or
            pre-tokenizer changes or splits text in a way an Encoding cannot, or rank-based
            BPE would not give HF's ids: ids not in merge order, a token that rank-based BPE
            builds from a pair the merge list lacks, a whole-piece lookup that HF
            (``ignore_merges: false``) would not make, an added token with
            ``lstrip``/``rstrip``/``single_word`` or whose id tokenizers would not keep. The
            message names the first offending item. (An Encoding's ids are its ranks, so
            ids out of merge order cannot be renumbered away.)
    """
    data, default_name = _load_document(source)
    model = data.get("model")
    if not isinstance(model, Mapping):
        raise ValueError("not a tokenizer.json: no model")
    _check_bpe_model(model)
    _check_normalizer(data.get("normalizer"), ignore_normalizer)
    pattern, keeps_gaps = _split_pattern(data.get("pre_tokenizer"))
    decoder = data.get("decoder")
    if decoder is not None and decoder.get("type") != "ByteLevel":
        raise ValueError(f"unsupported decoder {_describe(decoder)}: byte-level BPE decodes with ByteLevel")

    vocab: Dict[str, int] = {str(k): int(v) for k, v in model.get("vocab", {}).items()}
    added = list(data.get("added_tokens") or [])
    added_ids = {a.get("content"): a.get("id") for a in added}
    ranks: Dict[bytes, int] = {}
    owner: Dict[int, str] = {}
    for token, token_id in vocab.items():
        if added_ids.get(token) == token_id:
            # An added token also in the model's vocabulary: HF splits added tokens off before
            # the model runs, so the model never produces this id; it is a special token only.
            continue
        raw = token_string_to_bytes(token)
        if raw is None:
            raise ValueError(
                f"vocabulary token {token!r} (id {token_id}) is not a byte-level token (it has "
                f"characters outside GPT-2's byte alphabet): not a byte-level BPE model"
            )
        if token_id in owner:
            raise ValueError(f"tokens {owner[token_id]!r} and {token!r} share id {token_id}")
        owner[token_id] = token
        ranks[raw] = token_id
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise ValueError(
            f"the vocabulary lacks {len(missing)} of the 256 byte tokens (first: "
            f"{_BYTE_TO_CHAR[missing[0]]!r} for byte 0x{missing[0]:02x}); byte-level BPE needs all"
        )

    specials: Dict[str, int] = {}
    hf_ids = _hf_added_ids(vocab, [a.get("content", "") for a in added])
    for a, hf_id in zip(added, hf_ids):
        content, token_id = a.get("content", ""), int(a.get("id", -1))
        if not content:
            raise ValueError("an added token has no content")
        for option in ("lstrip", "rstrip", "single_word"):
            if a.get(option):
                raise ValueError(
                    f"unsupported added token {content!r} with {option}=True: it changes how the "
                    f"text around it is split, which special tokens do not do"
                )
        if hf_id != token_id:
            raise ValueError(
                f"added token {content!r} has id {token_id} in the file, but tokenizers gives it "
                f"id {hf_id} when loading (added tokens outside the vocabulary are numbered after it)"
            )
        specials[content] = token_id

    if keeps_gaps and not _matches_all_text(pattern):
        # HF keeps the text between matches as pieces; tiktoken drops it. Match it too.
        pattern = f"(?:{pattern})|(?:(?!(?:{pattern}))[\\s\\S])+"
        if not _matches_all_text(pattern):
            raise ValueError("unsupported Split pattern: it can match the empty string")

    enc = Encoding(
        name or default_name or "huggingface",
        pat_str=pattern,
        mergeable_ranks=ranks,
        special_tokens=specials,
    )
    _check_merges(enc, vocab, _parse_merges(model.get("merges", [])), bool(model.get("ignore_merges", False)))
    return enc


def _show(enc: Encoding, token_id: int) -> str:
    return f"{token_id} ({token_bytes_to_string(enc.decode_single_token_bytes(token_id))!r})"


def _check_merges(enc: Encoding, vocab: Mapping[str, int], merges: List[Tuple[str, str]], ignore_merges: bool) -> None:
    """Raises ValueError unless rank-based BPE on ``enc`` equals HF's BPE with ``merges``
    (conditions (A), (B) and (C) of the module docstring)."""
    ranks = enc._mergeable_ranks
    index: Dict[Tuple[int, int], int] = {}  # (left id, right id) -> priority, as HF keeps it
    for i, (left, right) in enumerate(merges):
        ids = [vocab.get(left), vocab.get(right), vocab.get(left + right)]
        if None in ids:
            absent = [t for t, tid in zip((left, right, left + right), ids) if tid is None][0]
            raise ValueError(f"merge {i} ({left!r} + {right!r}) uses {absent!r}, which is not in the vocabulary")
        index[(ids[0], ids[1])] = i  # type: ignore[index]  # a repeated pair: the last one counts

    derived, unreachable = tiktoken_merges(ranks)
    previous: Optional[Tuple[int, int, int, int]] = None  # merge index, new id, left id, right id
    for rank, left_bytes, right_bytes in derived:
        left_id, right_id = ranks[left_bytes], ranks[right_bytes]
        found = index.get((left_id, right_id))
        if found is None:  # (B)
            raise ValueError(
                f"rank-based BPE builds token {_show(enc, rank)} from {_show(enc, left_id)} + "
                f"{_show(enc, right_id)}, but the merge list has no such merge, so tokenmill and HF "
                f"would tokenize differently"
            )
        if previous is not None and found < previous[0]:  # (A)
            j, other, other_left, other_right = previous
            raise ValueError(
                f"merge {found} ({_show(enc, left_id)} + {_show(enc, right_id)} -> id {rank}) comes "
                f"before merge {j} ({_show(enc, other_left)} + {_show(enc, other_right)} -> id "
                f"{other}) although it makes the larger id: tokenmill applies merges in token-id "
                f"order, so it needs the ids in merge order"
            )
        previous = (found, rank, left_id, right_id)

    if not ignore_merges and unreachable:
        texts, ids = [], []
        for token in unreachable:
            try:
                texts.append(token.decode("utf-8"))
            except UnicodeDecodeError:
                continue  # not valid text, so never a piece by itself
            ids.append(ranks[token])
        for text, token_id, got in zip(texts, ids, enc.encode_ordinary_batch(texts)):
            if got == [token_id]:
                raise ValueError(
                    f"token {token_id} ({token_bytes_to_string(text.encode('utf-8'))!r}) cannot be built "
                    f"by merges, yet the text {text!r} is a single piece: tokenmill looks it up "
                    f"whole but HF (ignore_merges=false) would split it"
                )


# ---------------------------------------------------------------------------------------------
# HF-flavoured facade
# ---------------------------------------------------------------------------------------------


class EncodingWithOffsets(NamedTuple):
    """What :func:`encode_with_offsets` returns (like the useful parts of HF's ``Encoding``)."""

    #: Token ids.
    ids: List[int]
    #: Each token as HF writes it: byte-level strings (``"Ġworld"``), special tokens as text.
    tokens: List[str]
    #: ``(start, end)`` character offsets into the text, per token. A token that holds only
    #: part of a character gets that whole character's span, as in HF.
    offsets: List[Tuple[int, int]]


def token_to_id(enc: Encoding, token: str) -> Optional[int]:
    """The id of a token given as HF writes it (byte-level string such as ``"Ġhello"``, or a
    special token's text), or ``None``. Special tokens are looked up first, as in HF."""
    special = enc._special_tokens.get(token)
    if special is not None:
        return special
    raw = token_string_to_bytes(token)
    return None if raw is None else enc._mergeable_ranks.get(raw)


def id_to_token(enc: Encoding, token_id: int) -> Optional[str]:
    """The token of an id as HF writes it (see :func:`token_to_id`), or ``None``."""
    if not isinstance(token_id, int) or token_id < 0:
        return None
    try:
        raw = enc.decode_single_token_bytes(token_id)
    except (KeyError, OverflowError, ValueError):
        return None
    special = _special_texts(enc).get(token_id)
    return special if special is not None else token_bytes_to_string(raw)


def _special_texts(enc: Encoding) -> Dict[int, str]:
    """Special token id -> text (the first text given, when several share an id)."""
    out: Dict[int, str] = {}
    for text, token_id in enc._special_tokens.items():
        out.setdefault(token_id, text)
    return out


def get_vocab(enc: Encoding, with_added_tokens: bool = True) -> Dict[str, int]:
    """Token string -> id for the whole vocabulary, as HF's ``get_vocab``: byte-level strings
    for ordinary tokens, plus the special tokens' texts when ``with_added_tokens``."""
    vocab = {token_bytes_to_string(token): rank for token, rank in enc._mergeable_ranks.items()}
    if with_added_tokens:
        vocab.update(enc._special_tokens)
    return vocab


def get_vocab_size(enc: Encoding, with_added_tokens: bool = True) -> int:
    """The number of tokens, as HF's ``get_vocab_size``: the ordinary tokens, plus the
    distinct special-token texts when ``with_added_tokens`` (not ``max id + 1``: see
    ``enc.n_vocab`` for that)."""
    n = len(enc._mergeable_ranks)
    if with_added_tokens:
        n += sum(
            1
            for text in enc._special_tokens
            if (raw := token_string_to_bytes(text)) is None or raw not in enc._mergeable_ranks
        )
    return n


def encode_with_offsets(
    enc: Encoding,
    text: str,
    *,
    allowed_special: AllowedSpecial = set(),  # noqa: B006
    disallowed_special: DisallowedSpecial = "all",
) -> EncodingWithOffsets:
    """Encodes ``text`` (same arguments and ids as ``enc.encode``) and returns the ids with
    HF-style token strings and character offsets.

    Offsets index ``text`` (Python string indices): a token covering bytes ``[a, b)`` of the
    UTF-8 text gets ``(start, end)`` from the character holding byte ``a`` to the one holding
    byte ``b - 1``, so tokens that split a character (emoji, CJK) each get that character's
    span, as HF gives them. Lone surrogates, which encoding replaces by U+FFFD, keep their
    own one-character spans.
    """
    ids = enc.encode(text, allowed_special=allowed_special, disallowed_special=disallowed_special)
    pieces = enc.decode_tokens_bytes(ids)
    special_text = _special_texts(enc)
    tokens: List[str] = []
    offsets: List[Tuple[int, int]] = []
    started = 0  # characters started by the bytes so far
    for token_id, raw in zip(ids, pieces):
        continuation = len(raw.translate(None, _NOT_CONTINUATION))
        start = started - 1 if raw and 0x80 <= raw[0] < 0xC0 else started
        started += len(raw) - continuation
        offsets.append((max(start, 0), started))
        special = special_text.get(token_id)
        tokens.append(special if special is not None else token_bytes_to_string(raw))
    if any(0xD800 <= ord(c) < 0xE000 for c in text):
        offsets = _surrogate_offsets(text, offsets)
    return EncodingWithOffsets(ids, tokens, offsets)


def _surrogate_offsets(text: str, offsets: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """Maps offsets into the surrogate-free text that was encoded back onto ``text``: a valid
    surrogate pair became one character, a lone surrogate one U+FFFD."""
    fixed = _replace_surrogates(text)
    position = []  # index in text of each character of fixed, plus the end
    i = 0
    for c in fixed:
        position.append(i)
        if ord(c) > 0xFFFF and not (len(text) > i and ord(text[i]) > 0xFFFF):
            i += 2  # came from a surrogate pair
        else:
            i += 1
    position.append(len(text))
    return [(position[a], position[b]) for a, b in offsets]
