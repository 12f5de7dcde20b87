"""``tokenmill bench``: tokenmill against tiktoken on the user's text, a fresh process per figure."""

from __future__ import annotations

import json
import re

import pytest

import tokenmill
from tokenmill import benchmark
from tokenmill.cli import main

TEXT = (
    "The bench encodes this text with each library. héllo wörld, 日本語のテキスト 😀 <|endoftext|>\n"
    "    def f(x):\n        return x ** 2  # numbers 12 345 6789\n"
) * 30


def table_rows(out: str) -> dict:
    """The report's rows by library: the cells after the library's name."""
    lines = out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("library"))
    rows = {}
    for line in lines[start + 1:]:
        if not line.strip():
            break
        name, rest = line.split(None, 1)
        rows[name] = rest
    return rows


def tokens_cell(row: str) -> int:
    return int(re.search(r"\s([\d,]+)\s+(?:-|same|DIFFERENT)$", row).group(1).replace(",", ""))


@pytest.fixture
def jsonl_docs(tmp_path):
    docs = [TEXT, "second document: ¿qué tal? — 12345 678\n" * 10, "third " * 50]
    f = tmp_path / "docs.jsonl"
    f.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    return f, docs


def test_bench_times_both_libraries_in_fresh_processes_and_finds_the_same_ids(cl100k, jsonl_docs, capsys):
    enc, tik = cl100k
    f, docs = jsonl_docs
    rc = main(["bench", str(f), "--encoding", "cl100k_base", "--repeat", "2", "-q"])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    rows = table_rows(out)
    assert set(rows) == {"tokenmill", "tiktoken"}
    want = sum(len(tik.encode_ordinary(d)) for d in docs)
    assert tokens_cell(rows["tokenmill"]) == want and tokens_cell(rows["tiktoken"]) == want
    assert rows["tiktoken"].endswith("same")
    assert f"in {len(docs)} document(s)" in out and "2 rounds" in out
    # the ratio cell: median and range of two rounds
    assert re.search(r"\d+\.\d\d \(\d+\.\d\d-\d+\.\d\d\)", rows["tiktoken"])


def test_bench_batches_on_several_threads(cl100k, jsonl_docs, capsys):
    f, docs = jsonl_docs
    rc = main(["bench", str(f), "--threads", "2", "--libs", "tiktoken", "-q"])  # tokenmill runs anyway
    out, _ = capsys.readouterr()
    assert rc == 0
    assert "2 threads (encode_ordinary_batch)" in out
    assert table_rows(out)["tiktoken"].endswith("same")


def test_bench_gives_tiktoken_a_vocabulary_trained_with_tokenmill(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    saved = tmp_path / "enc"
    assert main(["train", str(corpus), "--vocab-size", "320", "--pattern", "cl100k", "--output", str(saved), "-q"]) == 0
    capsys.readouterr()
    rc = main(["bench", str(corpus), "--encoding", str(saved), "-q"])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    rows = table_rows(out)
    assert rows["tiktoken"].endswith("same")
    assert tokens_cell(rows["tokenmill"]) == len(tokenmill.load(saved).encode_ordinary(TEXT))


def test_a_difference_in_the_ids_names_the_document_and_fails(cl100k, jsonl_docs, monkeypatch, capsys):
    f, docs = jsonl_docs
    real = benchmark._measure_in_fresh_process

    def tampered(library, *args):
        result = real(library, *args)
        if library == "tiktoken":  # as if tiktoken disagreed on the second document
            result["digests"][1] = "0" * 16
        return result

    monkeypatch.setattr(benchmark, "_measure_in_fresh_process", tampered)
    rc = main(["bench", str(f), "--encoding", "cl100k_base", "-q"])
    out, _ = capsys.readouterr()
    assert rc == 1
    assert table_rows(out)["tiktoken"].endswith("DIFFERENT")
    assert f"differ from tokenmill's first in document 2: {f}, document 2" in out


def test_first_difference_compares_every_round_and_the_document_count():
    docs = benchmark.Documents(["a", "b", "c"], "test", ["a", "b", "c"], 3)

    def run(digests):
        return {"seconds": 1.0, "load_seconds": 0.1, "tokens": 3, "digests": digests, "version": "x"}

    same = ["1", "2", "3"]
    c = benchmark.Comparison("cl100k_base", 1, 2, docs, [
        benchmark.LibraryResult("tokenmill", [run(same), run(same)]),
        benchmark.LibraryResult("tiktoken", [run(same), run(["1", "2", "9"])]),
    ])
    assert c.first_difference("tiktoken") == 2  # only the second round differs
    assert c.mismatches() == {"tiktoken": 2}
    c.results[1].runs = [run(same), run(["1", "2"])]
    assert c.first_difference("tiktoken") == 2  # a missing document
    c.results[1].runs = [run(same), run(same)]
    assert c.first_difference("tiktoken") is None and c.mismatches() == {}
    c.results[0].runs[1] = run(["0", "2", "3"])  # tokenmill itself not repeatable
    assert c.first_difference("tiktoken") == 0


def test_a_library_that_fails_is_reported_unavailable(cl100k, jsonl_docs, monkeypatch, capsys):
    f, _ = jsonl_docs
    real = benchmark._measure_in_fresh_process

    def failing(library, *args):
        if library == "tiktoken":
            raise RuntimeError("tiktoken is not installed (pip install tiktoken)")
        return real(library, *args)

    monkeypatch.setattr(benchmark, "_measure_in_fresh_process", failing)
    assert main(["bench", str(f), "-q"]) == 0
    out, _ = capsys.readouterr()
    assert "unavailable: tiktoken is not installed" in table_rows(out)["tiktoken"]

    def all_failing(library, *args):
        raise RuntimeError("boom")

    monkeypatch.setattr(benchmark, "_measure_in_fresh_process", all_failing)
    assert main(["bench", str(f), "-q"]) == 2


def test_bad_arguments_and_unknown_encodings_fail_clearly(cl100k, jsonl_docs, tmp_path, capsys):
    f, _ = jsonl_docs
    assert main(["bench", str(f), "--repeat", "0"]) == 2
    assert "--repeat" in capsys.readouterr().err
    assert main(["bench", str(f), "--limit-mb", "0"]) == 2
    assert main(["bench", str(f), "--encoding", "no_such_encoding", "-q"]) == 2
    assert "no_such_encoding" in capsys.readouterr().err
    assert main(["bench", str(tmp_path / "missing.txt"), "-q"]) == 2
    assert "missing.txt" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", str(f), "--libs", "nosuchlib"])


def test_the_limit_keeps_whole_documents_up_to_about_that_size(tmp_path):
    files = []
    for k in range(5):
        p = tmp_path / f"doc{k}.txt"
        p.write_text("x" * 1000, encoding="utf-8")
        files.append(str(p))
    docs = benchmark.read_documents(files, limit_bytes=2500)
    assert [len(t) for t in docs.texts] == [1000, 1000, 1000]
    assert docs.labels == files[:3] and docs.nbytes == 3000
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="no documents"):
        benchmark.read_documents([str(empty)])
