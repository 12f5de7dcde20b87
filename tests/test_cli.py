"""The ``tokenmill`` command line: ``train``, ``encode`` and ``count``."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import tokenmill
from tokenmill.cli import main
from tokenmill.corpus import stdlib_split
from tokenmill.patterns import NAMED_PATTERNS, NANOCHAT_PATTERN

import bpe_reference as ref

TEXT = (
    "The command line trains a vocabulary. The vocabulary is saved; the saved vocabulary loads.\n"
    "héllo wörld, héllo again — 日本語のテキスト 😀😀 and numbers 12 345 6789.\n"
) * 20


def summary_value(out: str, label: str) -> str:
    m = re.search(rf"^\s*{label}:\s+(.*)$", out, re.M)
    assert m, f"no {label!r} line in:\n{out}"
    return m.group(1)


def first_int(s: str) -> int:
    return int(re.match(r"([\d,]+)", s).group(1).replace(",", ""))


@pytest.fixture
def corpus_file(tmp_path):
    f = tmp_path / "corpus.txt"
    f.write_text(TEXT, encoding="utf-8")
    return f


def test_train_writes_a_loadable_directory_and_a_summary(corpus_file, tmp_path, capsys):
    out_dir = tmp_path / "enc"
    rc = main(["train", str(corpus_file), "--vocab-size", "300", "--output", str(out_dir), "-q"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert err == ""  # -q: no progress output
    spans = ref.count_spans([TEXT], NANOCHAT_PATTERN)
    assert first_int(summary_value(out, "documents")) == 1
    assert first_int(summary_value(out, "bytes read")) == len(TEXT.encode("utf-8"))
    assert summary_value(out, "distinct spans") == f"{len(spans):,} (of {sum(spans.values()):,})"
    assert re.match(r"[\d.]+ s \(", summary_value(out, "counting"))
    assert re.match(r"[\d.]+ s \(44 merges, ", summary_value(out, "merging"))
    assert str(out_dir) in out

    enc = tokenmill.load(out_dir)
    assert enc.n_vocab == 300
    assert enc._pat_str == NANOCHAT_PATTERN
    assert [tuple(m) for m in enc._merges] == ref.learn_merges(spans, 44)


def test_train_is_the_default_command(corpus_file, tmp_path, capsys):
    rc = main([str(corpus_file), "--vocab-size", "280", "--output", str(tmp_path / "e"), "-q"])
    assert rc == 0
    assert [tuple(m) for m in tokenmill.load(tmp_path / "e")._merges] == ref.train([TEXT], NANOCHAT_PATTERN, 24)
    assert "not saved" not in capsys.readouterr().out


def test_train_without_output_saves_nothing(corpus_file, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["train", str(corpus_file), "--vocab-size", "270", "-q"]) == 0
    assert "not saved" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_train_options_reach_the_trainer(tmp_path, capsys):
    rows = [f"row {i}: " + "wörds and more wörds " * (i % 7 + 1) for i in range(40)]
    src = tmp_path / "data.jsonl"
    src.write_text("".join(json.dumps({"content": r}, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out_dir = tmp_path / "enc"
    rc = main([
        "train", str(src), "--format", "jsonl", "--column", "content", "--pattern", "gpt2",
        "--doc-cap", "50", "--special", "<|bos|>", "<|eos|>", "--vocab-size", "290",
        "--threads", "1", "--buffer-size", "3", "--name", "mine", "--output", str(out_dir), "-q",
    ])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert first_int(summary_value(out, "documents")) == 40
    assert first_int(summary_value(out, "bytes read")) == sum(len(r[:50].encode()) for r in rows)
    enc = tokenmill.load(out_dir)
    assert enc.name == "mine"
    assert enc._pat_str == NAMED_PATTERNS["gpt2"]
    assert enc._special_tokens == {"<|bos|>": 288, "<|eos|>": 289}
    assert [tuple(m) for m in enc._merges] == ref.train(rows, NAMED_PATTERNS["gpt2"], 32, doc_cap=50)


def test_train_on_a_slice_of_the_default_corpus(tmp_path, capsys):
    out_dir = tmp_path / "enc"
    rc = main(["train", "--max-chars", "200000", "--vocab-size", "300", "--output", str(out_dir), "-q"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "standard library" in out
    # What the command should have read: training files in order, up to and including the
    # one that brings the character count past max_chars.
    docs, held_out = stdlib_split()
    taken, chars = [], 0
    for d in docs:
        taken.append(d)
        chars += len(d)
        if chars > 200_000:
            break
    assert chars > 200_000, "the standard library's sources are too small"
    assert first_int(summary_value(out, "documents")) == len(taken)
    assert first_int(summary_value(out, "bytes read")) == sum(len(d.encode("utf-8")) for d in taken)
    assert "compression on held-out text" in out
    enc = tokenmill.load(out_dir)
    want = tokenmill.train_from_iterator(taken, 300, progress=False)
    assert [tuple(m) for m in enc._merges] == [tuple(m) for m in want._merges]
    assert enc._mergeable_ranks == want._mergeable_ranks


def test_train_progress_goes_to_stderr(corpus_file, capsys):
    assert main(["train", str(corpus_file), "--vocab-size", "340"]) == 0
    out, err = capsys.readouterr()
    assert re.search(r"^tokenmill: merging: +\d+% ", err, re.M), err
    assert "tokenmill:" not in out


def test_empty_corpus_fails_and_writes_nothing(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    out_dir = tmp_path / "enc"
    rc = main(["train", str(empty), "--vocab-size", "300", "--output", str(out_dir), "-q"])
    out, err = capsys.readouterr()
    assert rc != 0
    assert "empty" in err
    assert not out_dir.exists()


def test_missing_input_fails_and_writes_nothing(tmp_path, capsys):
    out_dir = tmp_path / "enc"
    rc = main(["train", str(tmp_path / "nope.txt"), "--vocab-size", "300", "--output", str(out_dir), "-q"])
    assert rc != 0
    assert "nope.txt" in capsys.readouterr().err
    assert not out_dir.exists()


def test_bad_vocab_size_fails_and_writes_nothing(corpus_file, tmp_path, capsys):
    out_dir = tmp_path / "enc"
    rc = main(["train", str(corpus_file), "--vocab-size", "200", "--output", str(out_dir), "-q"])
    assert rc != 0
    assert "vocab_size" in capsys.readouterr().err
    assert not out_dir.exists()


def test_encode_with_a_saved_directory(corpus_file, tmp_path, capsys):
    out_dir = tmp_path / "enc"
    assert main(["train", str(corpus_file), "--vocab-size", "350", "--output", str(out_dir), "-q"]) == 0
    capsys.readouterr()
    other = tmp_path / "other.txt"
    other_text = "Another text: héllo wörld 日本語 😀 the vocabulary.\n" * 3
    other.write_text(other_text, encoding="utf-8")
    ids_file = tmp_path / "ids.npy"
    rc = main(["encode", "--encoding", str(out_dir), str(corpus_file), str(other), "--output", str(ids_file)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    enc = tokenmill.load(out_dir)
    want = enc.encode_ordinary(TEXT) + enc.encode_ordinary(other_text)
    assert first_int(summary_value(out, "tokens")) == len(want)
    assert first_int(summary_value(out, "bytes")) == len(TEXT.encode()) + len(other_text.encode())
    assert summary_value(out, "encoding").startswith("tokenmill (350 ids)")
    np = pytest.importorskip("numpy")
    assert np.load(ids_file).tolist() == want


def test_encode_with_a_directory_that_is_not_an_encoding(tmp_path, corpus_file, capsys):
    rc = main(["encode", "--encoding", str(tmp_path), str(corpus_file)])
    assert rc != 0
    assert capsys.readouterr().err


def test_python_dash_m_help():
    for args in (["--help"], ["train", "--help"], ["encode", "--help"], ["count", "--help"]):
        r = subprocess.run([sys.executable, "-m", "tokenmill", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "usage: tokenmill" in r.stdout
    r = subprocess.run([sys.executable, "-m", "tokenmill", "--help"], capture_output=True, text=True, timeout=60)
    assert "train" in r.stdout and "encode" in r.stdout and "count" in r.stdout
    r = subprocess.run([sys.executable, "-m", "tokenmill", "train", "--help"], capture_output=True, text=True, timeout=60)
    for opt in ("--vocab-size", "--output", "--max-chars", "--doc-cap", "--pattern", "--format", "--column", "--special"):
        assert opt in r.stdout


def test_count_prints_a_line_per_file_and_a_total(corpus_file, tmp_path, capsys):
    out_dir = tmp_path / "enc"
    assert main(["train", str(corpus_file), "--vocab-size", "350", "--output", str(out_dir), "-q"]) == 0
    capsys.readouterr()
    enc = tokenmill.load(out_dir)
    other = tmp_path / "other.txt"
    other_text = "Another text: héllo wörld 日本語 😀 <|endoftext|> the vocabulary.\n" * 3
    other.write_text(other_text, encoding="utf-8")
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"caf\xe9 \xff\xfe ok\n")  # not UTF-8: undecodable bytes replaced
    rc = main(["count", "--encoding", str(out_dir), "--threads", "2", str(corpus_file), str(other), str(bad)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    want = [len(enc.encode_ordinary(t)) for t in (TEXT, other_text, "caf\ufffd \ufffd\ufffd ok\n")]
    lines = [line.split(None, 1) for line in out.splitlines()]
    assert lines == [[str(n), name] for n, name in zip([*want, sum(want)], [str(corpus_file), str(other), str(bad), "total"])]


def test_count_reads_standard_input_and_can_allow_special_tokens(cl100k, capsys, monkeypatch):
    import io

    text = "hello <|endoftext|> world\n"
    enc, _ = cl100k  # (the command's default encoding)
    for args, want in ((["count"], enc.encode_ordinary(text)),
                       (["count", "-", "--allow-special"], enc.encode(text, allowed_special="all"))):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
        assert main(args) == 0
        assert capsys.readouterr().out.split() == [str(len(want)), "-"]


def test_count_reports_an_unreadable_file_and_counts_the_rest(corpus_file, tmp_path, capsys):
    out_dir = tmp_path / "enc"
    assert main(["train", str(corpus_file), "--vocab-size", "300", "--output", str(out_dir), "-q"]) == 0
    capsys.readouterr()
    missing = tmp_path / "missing.txt"
    rc = main(["count", "--encoding", str(out_dir), str(missing), str(corpus_file)])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "cannot read" in err and str(missing) in err
    n = len(tokenmill.load(out_dir).encode_ordinary(TEXT))
    assert out.split() == [str(n), str(corpus_file), str(n), "total"]
    assert main(["count", "--encoding", str(out_dir), "--threads", "0", str(corpus_file)]) == 2
