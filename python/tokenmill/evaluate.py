"""How well tokenizers compress text: the engine of the ``tokenmill eval`` command.

For each tokenizer (a directory written by :func:`tokenmill.save`, or the name of a
pretrained encoding such as ``gpt2`` or ``cl100k_base``) and each group of documents, it
counts UTF-8 bytes, characters and tokens, and reports

* **bytes per token**: UTF-8 bytes of the text divided by the number of tokens; higher means
  better compression (fewer tokens for the same text);
* **tokens per character**: tokens divided by Unicode code points; lower is better, and unlike
  bytes per token it does not favour scripts that need several bytes per character;
* **relative difference** of bytes per token from a baseline tokenizer, in percent:
  ``(bpt / bpt_baseline - 1) * 100``. The bytes are the same for every tokenizer, so this is
  also ``tokens_baseline / tokens - 1``: +10% means the baseline needs 10% more tokens.

Tokens are counted with :meth:`tokenmill.Encoding.count_tokens_batch` (with
``disallowed_special=()``), a batch at a time (on all cores, without the GIL, and without
making the ids), so special-token strings in the text count as plain text and memory stays
bounded whatever the input size.

Where the text comes from
-------------------------
*Files* (:func:`file_documents`): anything :func:`tokenmill.sources.iter_documents` reads
(plain text, one document per line, JSON Lines, Parquet; directories and globs). Documents
are grouped by file, by directory or by extension, and, optionally, by a language taken from
the directory names (``corpus/de/news.txt`` is German).

*The built-in default corpus* (:func:`default_documents`), built from what every Python
installation ships, with no download and no invented text:

``python-code``
    The standard-library ``.py`` files that ``tokenmill train`` holds out of its default
    training text (every 10th file in sorted path order, as in
    :func:`tokenmill.corpus.stdlib_split`), with their docstrings and comments cut out
    (found with :mod:`ast` and :mod:`tokenize`; lines left empty by the cut are dropped). A
    tokenizer trained with ``tokenmill train`` and no files has not seen this code.
    ``pydoc_data/topics.py`` (a dictionary of help pages, not code) and files this Python
    cannot parse are left out.
``english-prose``
    The docstrings (cleaned of indentation, as :func:`inspect.cleandoc` does) and comments
    (``#`` markers removed, consecutive comment lines joined, lines without a letter or digit
    dropped) of the same files: English technical prose, one document per file.
``chinese``, ``japanese``, ``korean``
    The UTF-8 copies of CPython's codec test texts in ``test/cjkencodings/``:
    ``gb2312-utf8.txt`` (Simplified Chinese) and ``big5-utf8.txt`` (Traditional Chinese),
    ``euc_jp-utf8.txt`` (Japanese) and ``euc_kr-utf8.txt`` (Korean); short paragraphs about
    Python, about 3 KB in all, so take their figures as indications only. The other files of
    that folder repeat these or are encoder stress tests, so they are not used. Python
    installations without the ``test`` package (many Linux distributions split it off) have
    no such text: these domains are then skipped, and the report says so. The standard
    library holds no other natural-language text besides English.
"""

from __future__ import annotations

import ast
import bisect
import contextlib
import csv
import inspect
import io
import json
import os
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

#: Tokenizers compared when none are named: GPT-2's, GPT-4's and GPT-4o's.
DEFAULT_TOKENIZERS = ("gpt2", "cl100k_base", "o200k_base")
#: How documents read from files are grouped into rows.
GROUP_BY = ("file", "dir", "ext")
#: Output formats of :func:`render`.
OUTPUT_FORMATS = ("text", "markdown", "csv", "json")
#: The default corpus holds out every HELD_OUT_EVERY-th standard-library file, like
#: :func:`tokenmill.corpus.stdlib_split` (whose default this must equal).
HELD_OUT_EVERY = 10
#: Standard-library files that are not code and so stay out of ``python-code``.
NOT_CODE = ("pydoc_data/topics.py",)
#: (domain, file in ``<stdlib>/test/cjkencodings``) of the default corpus' non-English text.
CJK_TEXTS = (
    ("chinese", "gb2312-utf8.txt"),
    ("chinese", "big5-utf8.txt"),
    ("japanese", "euc_jp-utf8.txt"),
    ("korean", "euc_kr-utf8.txt"),
)
TOTAL_LABEL = "(all)"
NO_LANGUAGE = "(none)"

# A directory name that reads as a language: a two-letter ISO 639-1 code, optionally with a
# script or region subtag (en, de, pt-BR, pt_BR, zh-Hans, sr-Latn).
_LANGUAGE_DIR = re.compile(r"^[a-z]{2}(?:[-_](?:[A-Z]{2}|[A-Z][a-z]{3}|\d{3}))?$")
_CODING_COOKIE = re.compile(r"^[ \t\f]*#.*?coding[:=]")
_BATCH_BYTES = 8 << 20
_BATCH_DOCS = 4096


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """Vocabulary lookups inside use only what is cached: nothing is downloaded."""
    old = os.environ.get("TOKENMILL_OFFLINE")
    os.environ["TOKENMILL_OFFLINE"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["TOKENMILL_OFFLINE"]
        else:
            os.environ["TOKENMILL_OFFLINE"] = old


# ---------------------------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------------------------


@dataclass
class Tokenizer:
    """One tokenizer under evaluation.

    Attributes:
        label: Its column title: the encoding name, or the directory's base name (the path as
            given when two directories share a base name).
        spec: The argument it was named by.
        encoding: The loaded :class:`tokenmill.Encoding`.
        source: ``"pretrained"`` or the directory it was loaded from.
    """

    label: str
    spec: str
    encoding: Any
    source: str

    @property
    def n_vocab(self) -> int:
        """The number of token ids (learned, byte and special tokens)."""
        return self.encoding.n_vocab


@dataclass(frozen=True)
class Unavailable:
    """A tokenizer that could not be loaded, and a one-line reason why."""

    spec: str
    reason: str


def spec_key(spec: str) -> Tuple[str, str]:
    """What ``spec`` refers to, so that two spellings of one tokenizer compare equal: the
    resolved path of an existing directory, else the name itself."""
    if os.path.isdir(spec):
        return ("dir", str(Path(spec).resolve()))
    return ("name", spec)


def _looks_like_path(spec: str) -> bool:
    return os.sep in spec or "/" in spec or spec.startswith((".", "~"))


def load_tokenizers(
    specs: Sequence[str], *, allow_download: bool = False
) -> Tuple[List[Tokenizer], List[Unavailable]]:
    """Loads each tokenizer of ``specs`` (saved directories or pretrained names).

    A spec naming an existing directory is loaded from it (even if it is also an encoding's
    name); any other spec is a pretrained encoding name. A name whose vocabulary is not in the
    local cache is not downloaded unless
    ``allow_download`` is true: it is returned as :class:`Unavailable` instead, like any
    tokenizer that fails to load. A spec given twice (even spelled differently) is loaded once.

    Returns:
        The loaded tokenizers and the unavailable ones, each in the order of ``specs``.
    """
    import tokenmill
    from tokenmill.load import VocabularyNotAvailableError
    from tokenmill.persist import load as load_saved

    loaded: List[Tokenizer] = []
    missing: List[Unavailable] = []
    seen = set()
    for spec in specs:
        key = spec_key(spec)
        if key in seen:
            continue
        seen.add(key)
        if key[0] == "dir":
            try:
                enc = load_saved(spec)
            except (OSError, ValueError, KeyError) as e:
                missing.append(Unavailable(spec, f"cannot load the directory: {e}"))
                continue
            loaded.append(Tokenizer(Path(key[1]).name or spec, spec, enc, spec))
            continue
        try:
            with (contextlib.nullcontext() if allow_download else offline()):
                enc = tokenmill.get_encoding(spec)
        except VocabularyNotAvailableError as e:
            if allow_download:
                reason = f"vocabulary could not be downloaded from {e.url}: {e.reason}"
            else:
                where = f" (looked for {e.cache_path})" if e.cache_path else ""
                reason = f"vocabulary not cached{where}; not downloaded without --allow-download"
            missing.append(Unavailable(spec, reason))
            continue
        except ValueError:
            if os.path.exists(spec):
                reason = "not a directory (a saved tokenizer is the directory tokenmill.save writes)"
            elif _looks_like_path(spec):
                reason = "no such directory"
            else:
                known = ", ".join(tokenmill.list_encoding_names())
                reason = f"neither a saved tokenizer directory nor a known encoding ({known})"
            missing.append(Unavailable(spec, reason))
            continue
        except OSError as e:
            missing.append(Unavailable(spec, f"cannot load the vocabulary: {e}"))
            continue
        loaded.append(Tokenizer(spec, spec, enc, "pretrained"))
    labels = [t.label for t in loaded]
    for t in loaded:
        if labels.count(t.label) > 1:
            t.label = t.spec
    return loaded, missing


# ---------------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Document:
    """A text, the row (group) it counts towards, and its language if known."""

    text: str
    group: str
    language: Optional[str] = None


def language_of(path: Path) -> Optional[str]:
    """The language named by the nearest directory of ``path`` that is a language code
    (``en``, ``de``, ``pt-BR``, ``zh_Hans``: two lower-case letters, then optionally a region
    or script), or None. File names are not used (``io.py`` is not in Ido)."""
    for part in reversed(path.parent.parts):
        if _LANGUAGE_DIR.match(part):
            return part
    return None


def _group_of(path: Path, group_by: str) -> str:
    if group_by == "file":
        return str(path)
    if group_by == "dir":
        return str(path.parent)
    suffixes = [s.lower() for s in path.suffixes]
    if not suffixes:
        return "(none)"
    if suffixes[-1] == ".gz" and len(suffixes) > 1:
        return "".join(suffixes[-2:])
    return suffixes[-1]


def _check_not_a_tokenizer(paths: Sequence[str]) -> None:
    from tokenmill.persist import META_FILE, RANKS_FILE

    for p in paths:
        d = Path(p)
        if d.is_dir() and (d / META_FILE).is_file() and (d / RANKS_FILE).is_file():
            raise ValueError(f"{p} is a saved tokenizer, not text: name it with -t/--tokenizer")


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def file_documents(
    paths: Sequence[str],
    *,
    group_by: str = "file",
    lang_from_path: bool = False,
    input_format: str = "auto",
    column: str = "text",
    limit_bytes: Optional[int] = None,
) -> Iterator[Document]:
    """The documents of the files named by ``paths``, each tagged with its row.

    Args:
        paths: Files, directories (read recursively) or glob patterns.
        group_by: ``file`` (a row per file), ``dir`` (per parent directory) or ``ext`` (per
            file extension, ``.jsonl.gz`` counting as one).
        lang_from_path: Tag each document with :func:`language_of` its file.
        input_format, column: As for :func:`tokenmill.sources.iter_documents`.
        limit_bytes: Stop adding documents to a group once it holds this many UTF-8 bytes
            (the document that crosses the limit is kept; None: no limit).

    Raises:
        FileNotFoundError: A path matches no file.
        ValueError: Unknown ``group_by``, a malformed file, or a path that is a saved
            tokenizer directory (a likely mix-up of files and ``-t``).
    """
    import glob

    from tokenmill.sources import expand_paths, iter_documents

    if group_by not in GROUP_BY:
        raise ValueError(f"unknown grouping {group_by!r}; expected one of {', '.join(GROUP_BY)}")
    _check_not_a_tokenizer(paths)
    filled: Dict[str, int] = {}
    for path in expand_paths(paths):
        group = _group_of(path, group_by)
        if limit_bytes is not None and filled.get(group, 0) >= limit_bytes:
            continue
        language = language_of(path) if lang_from_path else None
        # Escaped so that a file name with glob characters names just that file.
        for text in iter_documents([glob.escape(str(path))], format=input_format, column=column):
            yield Document(text, group, language)
            filled[group] = filled.get(group, 0) + _utf8_len(text)
            if limit_bytes is not None and filled[group] >= limit_bytes:
                break


def split_python_source(source: str) -> Optional[Tuple[str, str]]:
    """Splits Python source into its code and its prose.

    Returns:
        ``(code, prose)``: the source with docstrings and comments cut out (lines that only
        held them dropped, trailing blanks of shortened lines removed), and the docstrings
        and comment blocks in source order, separated by blank lines. None when the source
        does not parse. Line endings are normalised to ``\\n`` first.
    """
    if "\r" in source:
        source = source.replace("\r\n", "\n").replace("\r", "\n")
    try:
        tree = ast.parse(source)
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (SyntaxError, ValueError, tokenize.TokenError):
        return None
    line_starts = [0] + [m.end() for m in re.finditer("\n", source)]

    def offset(lineno: int, col: int, col_in_bytes: bool) -> int:
        start = line_starts[lineno - 1]
        if col_in_bytes:
            line = source[start : start + col]  # col bytes are at most col characters
            col = len(line.encode("utf-8", "surrogatepass")[:col].decode("utf-8", "ignore"))
        return start + col

    cuts: List[Tuple[int, int]] = []
    prose: List[Tuple[int, str]] = []
    for node in _scopes(tree):
        first = node.body[0] if node.body else None
        if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)):
            continue
        if not isinstance(first.value.value, str):
            continue
        start = offset(first.lineno, first.col_offset, True)
        # (a parsed node always has its end; Python only types it optional)
        end_lineno = first.end_lineno if first.end_lineno is not None else first.lineno
        end_col = first.end_col_offset if first.end_col_offset is not None else first.col_offset
        cuts.append((start, offset(end_lineno, end_col, True)))
        doc = inspect.cleandoc(first.value.value).strip()
        if doc:
            prose.append((start, doc))

    block: List[str] = []
    block_start, last_row = 0, -2
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        (row, col), (erow, ecol) = tok.start, tok.end
        start = offset(row, col, False)
        cuts.append((start, offset(erow, ecol, False)))
        if row <= 2 and (tok.string.startswith("#!") or _CODING_COOKIE.match(tok.string)):
            continue
        line = re.sub(r"^#+ ?", "", tok.string).rstrip()
        own_line = not tok.line[:col].strip()  # a comment after code stands alone
        if block and not (own_line and row == last_row + 1):
            prose.append((block_start, "\n".join(block)))
            block = []
        if re.search(r"\w", line):
            if not block:
                block_start = start
            block.append(line)
        last_row = row if own_line else -2
    if block:
        prose.append((block_start, "\n".join(block)))

    prose.sort(key=lambda p: p[0])
    return _cut(source, line_starts, sorted(cuts)), "\n\n".join(text for _, text in prose)


_SCOPES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _scopes(tree: ast.AST) -> Iterator[Union[ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef]]:
    """The module, classes and functions of ``tree`` (the nodes that may have a docstring),
    found by visiting statements only, which is much faster than :func:`ast.walk`."""
    stack: List[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES):
            yield node
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, name, None)
            if isinstance(children, list):
                stack.extend(c for c in children if isinstance(c, ast.AST))


def _cut(source: str, line_starts: List[int], cuts: List[Tuple[int, int]]) -> str:
    """``source`` without the character ranges ``cuts`` (sorted, disjoint); a line that the
    cut leaves blank is dropped, and one it shortens loses its trailing blanks."""
    ends = line_starts[1:] + [len(source)]
    touched: set[int] = set()
    for s, e in cuts:
        first = bisect.bisect_right(line_starts, s) - 1
        last = bisect.bisect_right(line_starts, max(e - 1, s)) - 1
        touched.update(range(first, last + 1))
    cut_starts = [s for s, _ in cuts]
    out: List[str] = []
    for i, (ls, le) in enumerate(zip(line_starts, ends)):
        if i not in touched:
            out.append(source[ls:le])
            continue
        kept, pos = [], ls
        j = max(bisect.bisect_right(cut_starts, ls) - 1, 0)
        while j < len(cuts) and cuts[j][0] < le:
            s, e = cuts[j]
            if e > ls:
                kept.append(source[pos : max(s, ls)])
                pos = max(pos, min(e, le))
            j += 1
        kept.append(source[pos:le])
        line = "".join(kept).rstrip()
        if line:
            out.append(line + ("\n" if source[ls:le].endswith("\n") else ""))
    return "".join(out)


def default_corpus_parts() -> Tuple[List[Path], List[Tuple[str, Path]], List[str]]:
    """The files of the built-in default corpus.

    Returns:
        The held-out standard-library sources, the ``(domain, path)`` CJK texts that exist,
        and notes describing each domain (and any that had to be skipped).
    """
    from tokenmill.corpus import stdlib_files, stdlib_root

    root = stdlib_root()
    held = [p for i, p in enumerate(stdlib_files()) if i % HELD_OUT_EVERY == 0]
    held = [p for p in held if p.relative_to(root).as_posix() not in NOT_CODE]
    cjk_dir = root / "test" / "cjkencodings"
    cjk = [(domain, cjk_dir / name) for domain, name in CJK_TEXTS if (cjk_dir / name).is_file()]
    notes = [
        f"python-code: {len(held)} standard-library files (every {HELD_OUT_EVERY}th, the ones "
        "`tokenmill train` holds out), docstrings and comments cut",
        "english-prose: the docstrings and comments of those files",
    ]
    for domain in dict.fromkeys(d for d, _ in cjk):
        names = ", ".join(p.relative_to(root).as_posix() for d, p in cjk if d == domain)
        notes.append(f"{domain}: {names} (CPython's codec test texts)")
    if not cjk:
        notes.append(
            f"chinese, japanese, korean: skipped, as this Python lacks {cjk_dir} (its test "
            "package is not installed) and the standard library has no other non-English text"
        )
    return held, cjk, notes


def default_documents(limit_bytes: Optional[int] = None) -> Tuple[Iterator[Document], List[str]]:
    """The built-in default corpus (see the module docstring for where each domain comes from).

    Args:
        limit_bytes: Stop adding documents to a domain once it holds this many UTF-8 bytes.

    Returns:
        An iterator over the documents (read lazily, in a fixed order) and notes describing
        the domains.
    """
    held, cjk, notes = default_corpus_parts()

    def documents() -> Iterator[Document]:
        filled = {"python-code": 0, "english-prose": 0}

        def room(domain: str) -> bool:
            return limit_bytes is None or filled.get(domain, 0) < limit_bytes

        for path in held:
            if not (room("python-code") or room("english-prose")):
                break
            try:
                parts = split_python_source(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                continue
            if parts is None:
                continue
            for domain, text in zip(("python-code", "english-prose"), parts):
                if text and room(domain):
                    filled[domain] += _utf8_len(text)
                    yield Document(text, domain)
        for domain, path in cjk:
            if room(domain):
                text = path.read_text(encoding="utf-8")
                filled[domain] = filled.get(domain, 0) + _utf8_len(text)
                yield Document(text, domain)

    return documents(), notes


# ---------------------------------------------------------------------------------------------
# Counting
# ---------------------------------------------------------------------------------------------


@dataclass
class Row:
    """Counts for one row of the table: a group, a language, or all text.

    Attributes:
        label: The group, ``lang:<code>`` for a language, or ``(all)``.
        kind: ``"group"``, ``"language"`` or ``"total"``.
        docs, bytes, chars: Documents, UTF-8 bytes and characters counted.
        tokens: Tokens per tokenizer label.
    """

    label: str
    kind: str
    docs: int = 0
    bytes: int = 0
    chars: int = 0
    tokens: Dict[str, int] = field(default_factory=dict)

    def bytes_per_token(self, tokenizer: str) -> Optional[float]:
        """UTF-8 bytes per token (None when there are no tokens)."""
        n = self.tokens.get(tokenizer, 0)
        return self.bytes / n if n else None

    def tokens_per_char(self, tokenizer: str) -> Optional[float]:
        """Tokens per character (None when there is no text)."""
        return self.tokens.get(tokenizer, 0) / self.chars if self.chars else None


@dataclass
class Evaluation:
    """The result of :func:`evaluate`.

    Attributes:
        tokenizers: The tokenizers evaluated, in column order.
        baseline: The label of the tokenizer relative differences refer to.
        rows: The groups in order of appearance, then the languages (sorted), then all text.
        group_title: What a group is (``file``, ``dir``, ``ext``, ``domain``).
        source: Where the text came from, in words.
        notes: Lines describing the text (e.g. the default corpus' domains).
        unavailable: Tokenizers that could not be loaded.
    """

    tokenizers: List[Tokenizer]
    baseline: str
    rows: List[Row]
    group_title: str = "group"
    source: str = ""
    notes: List[str] = field(default_factory=list)
    unavailable: List[Unavailable] = field(default_factory=list)

    def relative(self, row: Row, tokenizer: str) -> Optional[float]:
        """The relative difference of ``tokenizer``'s bytes per token on ``row`` from the
        baseline's, in percent (positive: it compresses better than the baseline)."""
        bpt, base = row.bytes_per_token(tokenizer), row.bytes_per_token(self.baseline)
        if bpt is None or base is None:
            return None
        return (bpt / base - 1.0) * 100.0

    @property
    def total(self) -> Row:
        """The row over all text."""
        return self.rows[-1]


def evaluate(
    documents: Iterable[Document],
    tokenizers: Sequence[Tokenizer],
    *,
    baseline: Optional[str] = None,
    threads: Optional[int] = None,
    **info: Any,
) -> Evaluation:
    """Encodes every document with every tokenizer and counts bytes, characters and tokens.

    Args:
        documents: The documents, each tagged with its group (and language).
        tokenizers: At least one.
        baseline: The label of the baseline tokenizer (default: the first).
        threads: Worker threads of the batch encoder (default: all cores).
        **info: ``group_title``, ``source``, ``notes``, ``unavailable`` for the result.

    Raises:
        ValueError: No tokenizer, an unknown baseline, or no documents.
    """
    if not tokenizers:
        raise ValueError("no tokenizer to evaluate")
    labels = [t.label for t in tokenizers]
    baseline = labels[0] if baseline is None else baseline
    if baseline not in labels:
        raise ValueError(f"baseline {baseline!r} is not among the tokenizers ({', '.join(labels)})")
    groups: Dict[str, Row] = {}
    languages: Dict[str, Row] = {}  # a row per language, "(none)" included; shown if any
    total = Row(TOTAL_LABEL, "total")
    batch: List[Tuple[Document, List[Row]]] = []
    batch_bytes = 0

    def flush() -> None:
        texts = [doc.text for doc, _ in batch]
        for tok in tokenizers:
            counts = tok.encoding.count_tokens_batch(texts, num_threads=threads, disallowed_special=())
            for (_, rows), n in zip(batch, counts):
                for row in rows:
                    row.tokens[tok.label] = row.tokens.get(tok.label, 0) + n
        batch.clear()

    for doc in documents:
        lang = doc.language or NO_LANGUAGE
        rows = [
            groups.setdefault(doc.group, Row(doc.group, "group")),
            languages.setdefault(lang, Row(f"lang:{lang}", "language")),
            total,
        ]
        size = _utf8_len(doc.text)
        for row in rows:
            row.docs += 1
            row.bytes += size
            row.chars += len(doc.text)
        batch.append((doc, rows))
        batch_bytes += size
        if batch_bytes >= _BATCH_BYTES or len(batch) >= _BATCH_DOCS:
            flush()
            batch_bytes = 0
    flush()
    if total.docs == 0:
        raise ValueError("no text to evaluate: the input holds no documents")
    langs = [languages[k] for k in sorted(languages)] if set(languages) != {NO_LANGUAGE} else []
    for row in [*groups.values(), *langs, total]:
        for label in labels:
            row.tokens.setdefault(label, 0)
    return Evaluation(list(tokenizers), baseline, [*groups.values(), *langs, total], **info)


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------


def _num(x: Optional[float], digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:+.1f}%"


def _columns(ev: Evaluation) -> List[Tuple[Optional[str], str, Any]]:
    """(tokenizer label or None, sub-column title, cell function of a row) for each column."""
    cols: List[Tuple[Optional[str], str, Any]] = [
        (None, ev.group_title, lambda r: r.label),
        (None, "docs", lambda r: f"{r.docs:,}"),
        (None, "bytes", lambda r: f"{r.bytes:,}"),
    ]
    for t in ev.tokenizers:
        label = t.label
        cols.append((label, "B/tok", lambda r, k=label: _num(r.bytes_per_token(k), 3)))
        cols.append((label, "tok/chr", lambda r, k=label: _num(r.tokens_per_char(k), 4)))
        if label != ev.baseline:
            cols.append((label, f"vs {ev.baseline}", lambda r, k=label: _pct(ev.relative(r, k))))
    return cols


def render_text(ev: Evaluation) -> str:
    """The report as an aligned plain-text table with a few lines of context."""
    lines = [f"text: {ev.source}"] + [f"  {n}" for n in ev.notes]
    lines.append("tokenizers:")
    width = max(len(t.label) for t in ev.tokenizers)
    for t in ev.tokenizers:
        where = "" if t.source == "pretrained" else f"  saved in {t.source}"
        base = "  (baseline)" if t.label == ev.baseline else ""
        lines.append(f"  {t.label:<{width}}  {t.n_vocab:>9,} ids{where}{base}")
    for u in ev.unavailable:
        lines.append(f"  {u.spec}: unavailable: {u.reason}")
    lines.append("")

    cols = _columns(ev)
    body = [[f(r) for _, _, f in cols] for r in ev.rows]
    widths = [max(len(title), *(len(cells[i]) for cells in body)) for i, (_, title, _) in enumerate(cols)]
    # Segments: each common column alone, then each tokenizer's columns together under its label.
    segments: List[Tuple[Optional[str], List[int]]] = []
    for i, (owner, _, _) in enumerate(cols):
        if owner is not None and segments and segments[-1][0] == owner:
            segments[-1][1].append(i)
        else:
            segments.append((owner, [i]))
    for owner, idx in segments:  # a label wider than its columns widens the first one
        if owner is not None:
            have = sum(widths[i] for i in idx) + 2 * (len(idx) - 1)
            widths[idx[0]] += max(0, len(owner) - have)

    def join(cells: List[str], spanning: bool = False) -> str:
        out = []
        for k, (owner, idx) in enumerate(segments):
            sep = "" if k == 0 else ("    " if owner is not None else "  ")
            if spanning:
                span = sum(widths[i] for i in idx) + 2 * (len(idx) - 1)
                text = "" if owner is None else owner
                out.append(sep + text.center(span))
            else:
                parts = [cells[i].ljust(widths[i]) if i == 0 else cells[i].rjust(widths[i]) for i in idx]
                out.append(sep + "  ".join(parts))
        return "".join(out).rstrip()

    lines.append(join([], spanning=True))
    lines.append(join([title for _, title, _ in cols]))
    rule = "-" * len(join(["-" * w for w in widths]))
    lines.append(rule)
    previous = None
    for r, cells in zip(ev.rows, body):
        if previous is not None and r.kind != previous:
            lines.append(rule)
        lines.append(join(cells))
        previous = r.kind
    lines.append("")
    lines.append(
        "B/tok: UTF-8 bytes per token (higher = better compression); tok/chr: tokens per character "
        f"(lower = better); vs {ev.baseline}: relative difference of B/tok from the baseline"
    )
    return "\n".join(lines) + "\n"


def render_markdown(ev: Evaluation) -> str:
    """The table in GitHub-flavoured Markdown, one column per (tokenizer, measure)."""
    cols = _columns(ev)
    titles = [title if owner is None else f"{owner} {title}" for owner, title, _ in cols]

    def cell(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(cell(t) for t in titles) + " |"]
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|")
    for r in ev.rows:
        lines.append("| " + " | ".join(cell(f(r)) for _, _, f in cols) + " |")
    return "\n".join(lines) + "\n"


CSV_FIELDS = (
    "row", "kind", "docs", "bytes", "chars", "tokenizer", "n_vocab", "tokens",
    "bytes_per_token", "tokens_per_char", "vs_baseline_pct",
)


def _records(ev: Evaluation) -> Iterator[Dict[str, Any]]:
    for r in ev.rows:
        for t in ev.tokenizers:
            yield {
                "row": r.label, "kind": r.kind, "docs": r.docs, "bytes": r.bytes, "chars": r.chars,
                "tokenizer": t.label, "n_vocab": t.n_vocab, "tokens": r.tokens[t.label],
                "bytes_per_token": r.bytes_per_token(t.label),
                "tokens_per_char": r.tokens_per_char(t.label),
                "vs_baseline_pct": ev.relative(r, t.label),
            }


def render_csv(ev: Evaluation) -> str:
    """The results in long form: a line per (row, tokenizer) with raw counts and full-precision
    ratios (``vs_baseline_pct`` is 0 for the baseline itself, empty when undefined)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for rec in _records(ev):
        w.writerow({k: ("" if v is None else repr(v) if isinstance(v, float) else v) for k, v in rec.items()})
    return buf.getvalue()


def render_json(ev: Evaluation) -> str:
    """The results as one JSON object: ``source``, ``notes``, ``baseline``, ``tokenizers``,
    ``unavailable``, and ``rows`` (each with its counts and, per tokenizer label, ``tokens``,
    ``bytes_per_token``, ``tokens_per_char`` and ``vs_baseline_pct``)."""
    doc = {
        "source": ev.source,
        "notes": ev.notes,
        "group_by": ev.group_title,
        "baseline": ev.baseline,
        "tokenizers": [
            {"label": t.label, "spec": t.spec, "source": t.source, "name": t.encoding.name, "n_vocab": t.n_vocab}
            for t in ev.tokenizers
        ],
        "unavailable": [{"spec": u.spec, "reason": u.reason} for u in ev.unavailable],
        "rows": [
            {
                "label": r.label, "kind": r.kind, "docs": r.docs, "bytes": r.bytes, "chars": r.chars,
                "results": {
                    t.label: {
                        "tokens": r.tokens[t.label],
                        "bytes_per_token": r.bytes_per_token(t.label),
                        "tokens_per_char": r.tokens_per_char(t.label),
                        "vs_baseline_pct": ev.relative(r, t.label),
                    }
                    for t in ev.tokenizers
                },
            }
            for r in ev.rows
        ],
    }
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"


def render(ev: Evaluation, fmt: str = "text") -> str:
    """The report in ``fmt``: one of :data:`OUTPUT_FORMATS`."""
    renderers = {"text": render_text, "markdown": render_markdown, "csv": render_csv, "json": render_json}
    if fmt not in renderers:
        raise ValueError(f"unknown output format {fmt!r}; expected one of {', '.join(OUTPUT_FORMATS)}")
    return renderers[fmt](ev)


# ---------------------------------------------------------------------------------------------
# Plot
# ---------------------------------------------------------------------------------------------


def require_matplotlib() -> None:
    """Raises ImportError, saying how to install it, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise ImportError("--plot needs matplotlib: pip install 'tokenmill[plot]'") from e


def plot(ev: Evaluation, path: str) -> None:
    """Saves a grouped bar chart of bytes per token (a group of bars per row, a bar per
    tokenizer) to ``path``; the file type follows its extension (``.png``, ``.svg``, ...).

    Raises:
        ImportError: matplotlib is not installed.
    """
    require_matplotlib()
    from matplotlib.figure import Figure  # no pyplot: no global state, no display needed

    def short(label: str) -> str:
        return label if len(label) <= 24 else "…" + label[-23:]

    rows = ev.rows
    n = len(ev.tokenizers)
    width = 0.8 / n
    fig = Figure(figsize=(max(6.0, 1.0 + len(rows) * (0.5 + 0.35 * n)), 4.8), layout="constrained")
    ax = fig.add_subplot()
    for k, t in enumerate(ev.tokenizers):
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(rows))]
        values = [r.bytes_per_token(t.label) for r in rows]
        bars = ax.bar(xs, [v or 0.0 for v in values], width, label=f"{t.label} ({t.n_vocab:,})")
        ax.bar_label(bars, labels=[_num(v, 2) if v is not None else "" for v in values], fontsize=7, padding=1)
    tilt = len(rows) > 6
    ax.set_xticks(range(len(rows)), [short(r.label) for r in rows], rotation=30 if tilt else 0, ha="right" if tilt else "center")
    ax.set_ylabel("bytes per token (higher = better)")
    ax.set_title(f"Compression by {ev.group_title}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # beside the bars
    ax.margins(y=0.12)
    fig.savefig(path, dpi=120)
