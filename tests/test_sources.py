"""Reading training documents from files: text, lines, JSON Lines, Parquet, globs,
directories and gzip, and training from them."""

from __future__ import annotations

import gzip
import json

import pytest

import tokenmill
from tokenmill.patterns import NANOCHAT_PATTERN
from tokenmill.sources import count_files, expand_paths, iter_documents

import bpe_reference as ref

DOCS = [
    "first document\nwith two lines\n",
    "second: héllo wörld 日本語 😀\n\n\nafter blank lines",
    "third, with \"quotes\" and a \\ backslash\ttab",
]


def write(path, text, encoding="utf-8"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode(encoding))
    return path


# ----------------------------------------------------------------------------------------
# text, lines, gzip
# ----------------------------------------------------------------------------------------


def test_text_is_one_document_per_file(tmp_path):
    files = [write(tmp_path / f"d{i}.txt", d) for i, d in enumerate(DOCS)]
    assert list(iter_documents([str(f) for f in files])) == DOCS
    assert list(iter_documents([str(f) for f in files], format="text")) == DOCS


def test_lines_is_one_document_per_non_empty_line(tmp_path):
    f = write(tmp_path / "a.txt", "one\ntwo two\n\n\nthree\r\nfour")
    assert list(iter_documents([str(f)], format="lines")) == ["one", "two two", "three", "four"]


def test_gzip_text_is_decompressed(tmp_path):
    plain = "\n".join(DOCS)
    gz = tmp_path / "corpus.txt.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write(plain)
    assert list(iter_documents([str(gz)])) == [plain]
    assert list(iter_documents([str(gz)], format="lines")) == [ln for ln in plain.split("\n") if ln]


def test_invalid_utf8_is_replaced_not_fatal(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_bytes(b"ok \xff\xfe bytes")
    assert list(iter_documents([str(f)])) == ["ok \ufffd\ufffd bytes"]


def test_unknown_format_is_a_value_error(tmp_path):
    f = write(tmp_path / "a.txt", "x")
    with pytest.raises(ValueError, match="format"):
        list(iter_documents([str(f)], format="csv"))


# ----------------------------------------------------------------------------------------
# JSON Lines
# ----------------------------------------------------------------------------------------


def write_jsonl(path, rows, field="text"):
    lines = [json.dumps({field: r, "id": i}, ensure_ascii=False) for i, r in enumerate(rows)]
    return write(path, "\n".join(lines) + "\n")


def test_jsonl_reads_the_text_field(tmp_path):
    f = write_jsonl(tmp_path / "a.jsonl", DOCS)
    assert list(iter_documents([str(f)])) == DOCS  # auto: by extension
    g = write_jsonl(tmp_path / "b.data", DOCS)
    assert list(iter_documents([str(g)], format="jsonl")) == DOCS


def test_jsonl_field_name_is_configurable(tmp_path):
    f = write_jsonl(tmp_path / "a.jsonl", DOCS, field="content")
    assert list(iter_documents([str(f)], column="content")) == DOCS
    with pytest.raises(ValueError, match=r"a\.jsonl:1\b.*'text'"):
        list(iter_documents([str(f)]))


def test_jsonl_skips_blank_lines_and_nulls(tmp_path):
    f = write(tmp_path / "a.ndjson", '{"text": "a"}\n\n   \n{"text": null}\n{"text": "b"}\n')
    assert list(iter_documents([str(f)])) == ["a", "b"]


@pytest.mark.parametrize(
    "bad_line",
    ['{"text": "unterminated', "not json at all", '["a", "list"]', '{"other": "x"}', '{"text": 42}'],
)
def test_jsonl_malformed_line_names_file_and_line(tmp_path, bad_line):
    f = write(tmp_path / "corpus.jsonl", '{"text": "one"}\n\n{"text": "two"}\n' + bad_line + '\n{"text": "five"}\n')
    it = iter_documents([str(f)])
    assert next(it) == "one" and next(it) == "two"  # streamed: good lines come before the error
    with pytest.raises(ValueError) as ei:
        next(it)
    assert f"{f}:4" in str(ei.value)


def test_gzip_jsonl(tmp_path):
    gz = tmp_path / "a.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        for d in DOCS:
            fh.write(json.dumps({"text": d}) + "\n")
    assert list(iter_documents([str(gz)])) == DOCS


# ----------------------------------------------------------------------------------------
# Parquet
# ----------------------------------------------------------------------------------------

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError:  # pragma: no cover - pyarrow is a test dependency
    pa = pq = None

needs_pyarrow = pytest.mark.skipif(pa is None, reason="pyarrow is not installed")


def write_parquet(path, columns, row_group_size=None):
    table = pa.table(columns)
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


@needs_pyarrow
def test_parquet_reads_the_text_column(tmp_path):
    rows = [f"row {i} {'é' * (i % 5)} 日本" for i in range(50)]
    f = write_parquet(tmp_path / "a.parquet", {"id": list(range(50)), "text": rows}, row_group_size=7)
    assert list(iter_documents([str(f)])) == rows
    assert list(iter_documents([str(f)], batch_size=3)) == rows
    assert list(iter_documents([str(f)], format="parquet", batch_size=1000)) == rows


@needs_pyarrow
def test_parquet_column_is_configurable_and_nulls_skipped(tmp_path):
    f = write_parquet(tmp_path / "a.parquet", {"body": ["x", None, "y", "z"], "text": ["t1", "t2", "t3", "t4"]})
    assert list(iter_documents([str(f)], column="body")) == ["x", "y", "z"]
    assert list(iter_documents([str(f)])) == ["t1", "t2", "t3", "t4"]


@needs_pyarrow
def test_parquet_without_the_column_is_a_value_error(tmp_path):
    f = write_parquet(tmp_path / "a.parquet", {"content": ["a", "b"]})
    with pytest.raises(ValueError, match="'text'") as ei:
        list(iter_documents([str(f)]))
    assert "content" in str(ei.value)  # the columns it does have
    with pytest.raises(ValueError, match="'body'"):
        list(iter_documents([str(f)], column="body"))
    with pytest.raises(ValueError, match="'text'"):
        tokenmill.train_from_iterator(iter_documents([str(f)]), 300, progress=False)


@needs_pyarrow
def test_parquet_is_streamed_in_record_batches(tmp_path, monkeypatch):
    rows = [f"document number {i}" for i in range(100)]
    f = write_parquet(tmp_path / "a.parquet", {"text": rows}, row_group_size=10)

    def refuse(*a, **k):
        raise AssertionError("the whole Parquet file was read at once")

    monkeypatch.setattr(pq, "read_table", refuse)
    monkeypatch.setattr(pq.ParquetFile, "read", refuse)
    sizes = []
    orig = pq.ParquetFile.iter_batches

    def spy(self, *a, **k):
        for b in orig(self, *a, **k):
            sizes.append(b.num_rows)
            yield b

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    it = iter_documents([str(f)], batch_size=8)
    assert next(it) == rows[0]
    assert len(sizes) == 1 and sizes[0] <= 10  # only the first batch was read so far
    assert [rows[0], *it] == rows
    assert max(sizes) <= 10 and sum(sizes) == 100


# ----------------------------------------------------------------------------------------
# paths: globs, directories, mixtures
# ----------------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path):
    write(tmp_path / "b.txt", "bee")
    write(tmp_path / "a.txt", "ay")
    write(tmp_path / "sub" / "c.txt", "sea")
    write(tmp_path / "sub" / "deeper" / "d.md", "dee")
    write_jsonl(tmp_path / "sub" / "e.jsonl", ["jay one", "jay two"])
    return tmp_path


def test_glob_is_expanded_and_sorted(tree):
    assert list(iter_documents([str(tree / "*.txt")])) == ["ay", "bee"]
    assert list(iter_documents([str(tree / "**" / "*.txt")])) == ["ay", "bee", "sea"]


def test_directory_is_walked_recursively(tree):
    docs = list(iter_documents([str(tree / "sub")]))
    assert docs == ["sea", "dee", "jay one", "jay two"]  # sorted paths: c.txt, deeper/d.md, e.jsonl
    assert sorted(list(iter_documents([str(tree)]))) == sorted(["ay", "bee", "sea", "dee", "jay one", "jay two"])
    assert count_files([str(tree)]) == 5


def test_paths_keep_argument_order(tree):
    docs = list(iter_documents([str(tree / "sub" / "c.txt"), str(tree / "a.txt"), str(tree / "*.txt")]))
    assert docs == ["sea", "ay", "ay", "bee"]
    assert [p.name for p in expand_paths([str(tree / "b.txt"), str(tree / "a.txt")])] == ["b.txt", "a.txt"]


def test_missing_paths_are_file_not_found(tree):
    with pytest.raises(FileNotFoundError):
        list(iter_documents([str(tree / "nope.txt")]))
    with pytest.raises(FileNotFoundError):
        list(iter_documents([str(tree / "*.nothing")]))


def test_training_from_files_matches_the_reference(tree):
    docs = ["ay", "bee", "sea", "dee", "jay one", "jay two"]
    enc = tokenmill.train_from_iterator(iter_documents([str(tree)]), 266, progress=False)
    want = ref.train(docs, NANOCHAT_PATTERN, 10)
    assert len(want) == 10
    assert [tuple(m) for m in enc._merges] == want
