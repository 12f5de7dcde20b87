"""The ``tokenmill eval`` command and :mod:`tokenmill.evaluate`.

Every figure the command prints is checked against counts made here, independently, with
``Encoding.encode_ordinary`` one text at a time.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys

import pytest

import tokenmill
import tokenmill.load
import tokenmill.registry
from tokenmill import evaluate as ev
from tokenmill.cli import main
from tokenmill.corpus import stdlib_root, stdlib_split, stdlib_texts

ENGLISH = "The quick brown fox jumps over the lazy dog. Tokenizers split text into pieces.\n" * 6
GERMAN = "Der schnelle braune Fuchs springt über den faulen Hund. Größe, Maße, Übermut.\n" * 5
CODE = "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(add(i, i))\n" * 4
JAPANESE = "日本語のテキストをトークンに分割します。東京、大阪、京都。\n" * 3


# ---------------------------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory):
    """Two tokenizer specs: a saved vocab-400 directory trained on a standard-library slice,
    and cl100k_base if its vocabulary is cached (else a second trained directory)."""
    root = tmp_path_factory.mktemp("tokenizers")
    texts = list(stdlib_texts(300_000))
    small = tokenmill.save(tokenmill.train_from_iterator(texts, 400, progress=False), root / "small")
    found, _ = ev.load_tokenizers(["cl100k_base"])
    if found:
        return str(small), "cl100k_base"
    other = tokenmill.train_from_iterator(texts, 330, pattern="gpt2", progress=False)
    return str(small), str(tokenmill.save(other, root / "other"))


def encoding_of(spec: str):
    return tokenmill.load(spec) if "/" in spec else tokenmill.get_encoding(spec)


def label_of(spec: str) -> str:
    return spec.rstrip("/").rsplit("/", 1)[-1]


def counts(spec: str, texts):
    """(bytes, chars, tokens) of ``texts`` under ``spec``, counted one text at a time."""
    enc = encoding_of(spec)
    return (
        sum(len(t.encode("utf-8")) for t in texts),
        sum(len(t) for t in texts),
        sum(len(enc.encode_ordinary(t)) for t in texts),
    )


@pytest.fixture
def files(tmp_path):
    """Four small files in language directories: {path: text}."""
    layout = {
        "en/fox.txt": ENGLISH,
        "en/add.py": CODE,
        "de/fuchs.txt": GERMAN,
        "ja/nihongo.txt": JAPANESE,
    }
    out = {}
    for rel, text in layout.items():
        p = tmp_path / "data" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        out[str(p)] = text
    return out


def run(capsys, *args):
    rc = main(["eval", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def table_rows(out: str):
    """{label: cells} of the aligned table's body (labels and cells hold no spaces here)."""
    lines = out.splitlines()
    rules = [i for i, line in enumerate(lines) if line and set(line) == {"-"}]
    assert len(rules) >= 2, out
    body = [line.split() for line in lines[rules[0] + 1 : rules[-1] + 2] if line and set(line) != {"-"}]
    return {cells[0]: cells[1:] for cells in body}


def json_report(capsys, *args):
    rc, out, err = run(capsys, *args, "--format", "json")
    assert rc == 0, err
    return json.loads(out)


# ---------------------------------------------------------------------------------------------
# The table's numbers
# ---------------------------------------------------------------------------------------------


def test_text_table_equals_direct_counts(tokenizer_dirs, files, capsys):
    a, b = tokenizer_dirs
    paths = list(files)
    rc, out, err = run(capsys, *paths, "-t", a, b)
    assert rc == 0, err
    rows = table_rows(out)
    expected_rows = {**{p: [files[p]] for p in paths}, "(all)": list(files.values())}
    assert set(rows) == set(expected_rows)
    for label, texts in expected_rows.items():
        cells = rows[label]
        nbytes, nchars, ta = counts(a, texts)
        _, _, tb = counts(b, texts)
        assert cells[0] == str(len(texts))
        assert cells[1] == f"{nbytes:,}"
        # baseline: B/tok, tok/chr; then the other: B/tok, tok/chr, relative difference
        assert cells[2] == f"{nbytes / ta:.3f}"
        assert cells[3] == f"{ta / nchars:.4f}"
        assert cells[4] == f"{nbytes / tb:.3f}"
        assert cells[5] == f"{tb / nchars:.4f}"
        assert cells[6] == f"{((nbytes / tb) / (nbytes / ta) - 1) * 100:+.1f}%"
        assert len(cells) == 7
    # the header names both tokenizers, the baseline first, and the relative column
    assert re.search(rf"{re.escape(label_of(a))}\s+{re.escape(label_of(b))}", out)
    assert f"vs {label_of(a)}" in out
    assert re.search(rf"^  {re.escape(label_of(a))} +400 ids .*\(baseline\)$", out, re.M)


def test_json_has_exact_figures(tokenizer_dirs, files, capsys):
    a, b = tokenizer_dirs
    report = json_report(capsys, *files, "-t", a, b)
    assert report["baseline"] == label_of(a)
    assert [t["label"] for t in report["tokenizers"]] == [label_of(a), label_of(b)]
    assert report["tokenizers"][0]["n_vocab"] == 400
    assert report["unavailable"] == []
    by_label = {r["label"]: r for r in report["rows"]}
    assert [r["kind"] for r in report["rows"]] == ["group"] * 4 + ["total"]
    for label, texts in [*((p, [t]) for p, t in files.items()), ("(all)", list(files.values()))]:
        row = by_label[label]
        nbytes, nchars, ta = counts(a, texts)
        _, _, tb = counts(b, texts)
        assert (row["docs"], row["bytes"], row["chars"]) == (len(texts), nbytes, nchars)
        ra, rb = row["results"][label_of(a)], row["results"][label_of(b)]
        assert (ra["tokens"], rb["tokens"]) == (ta, tb)
        assert ra["bytes_per_token"] == nbytes / ta
        assert rb["tokens_per_char"] == tb / nchars
        assert ra["vs_baseline_pct"] == 0.0
        assert rb["vs_baseline_pct"] == pytest.approx((ta / tb - 1) * 100, rel=1e-12)


def test_baseline_option_changes_the_reference(tokenizer_dirs, files, capsys):
    a, b = tokenizer_dirs
    report = json_report(capsys, *files, "-t", a, b, "--baseline", b)
    assert report["baseline"] == label_of(b)
    total = report["rows"][-1]
    nbytes, _, ta = counts(a, list(files.values()))
    _, _, tb = counts(b, list(files.values()))
    assert total["results"][label_of(a)]["vs_baseline_pct"] == pytest.approx((tb / ta - 1) * 100, rel=1e-12)
    assert total["results"][label_of(b)]["vs_baseline_pct"] == 0.0
    # a baseline not among -t is added to the comparison
    report = json_report(capsys, *files, "-t", a, "--baseline", b)
    assert [t["label"] for t in report["tokenizers"]] == [label_of(b), label_of(a)]
    assert report["baseline"] == label_of(b)


def test_markdown_parses(tokenizer_dirs, files, capsys):
    a, b = tokenizer_dirs
    rc, out, err = run(capsys, *files, "-t", a, b, "--format", "markdown")
    assert rc == 0, err
    lines = out.strip().splitlines()
    table = [[c.strip() for c in line.strip()[1:-1].split(" | ")] for line in lines]
    assert all(line.startswith("| ") and line.endswith(" |") for line in lines[:1] + lines[2:])
    assert re.fullmatch(r"\|---(\|---:)+\|", lines[1])
    header, body = table[0], table[2:]
    la, lb = label_of(a), label_of(b)
    assert header == ["file", "docs", "bytes", f"{la} B/tok", f"{la} tok/chr", f"{lb} B/tok", f"{lb} tok/chr", f"{lb} vs {la}"]
    assert all(len(r) == len(header) for r in body)
    assert [r[0] for r in body] == [*files, "(all)"]
    nbytes, nchars, ta = counts(a, list(files.values()))
    _, _, tb = counts(b, list(files.values()))
    assert body[-1][1:] == [
        "4", f"{nbytes:,}", f"{nbytes / ta:.3f}", f"{ta / nchars:.4f}", f"{nbytes / tb:.3f}",
        f"{tb / nchars:.4f}", f"{(ta / tb - 1) * 100:+.1f}%",
    ]


def test_csv_parses_in_long_form(tokenizer_dirs, files, capsys):
    a, b = tokenizer_dirs
    rc, out, err = run(capsys, *files, "-t", a, b, "--format", "csv")
    assert rc == 0, err
    records = list(csv.DictReader(io.StringIO(out)))
    assert list(records[0]) == list(ev.CSV_FIELDS)
    assert len(records) == (len(files) + 1) * 2
    for rec in records:
        texts = list(files.values()) if rec["row"] == "(all)" else [files[rec["row"]]]
        spec = a if rec["tokenizer"] == label_of(a) else b
        nbytes, nchars, n = counts(spec, texts)
        assert (int(rec["bytes"]), int(rec["chars"]), int(rec["tokens"])) == (nbytes, nchars, n)
        assert float(rec["bytes_per_token"]) == nbytes / n
        assert float(rec["tokens_per_char"]) == n / nchars
        assert rec["kind"] == ("total" if rec["row"] == "(all)" else "group")
    assert {float(r["vs_baseline_pct"]) for r in records if r["tokenizer"] == label_of(a)} == {0.0}


# ---------------------------------------------------------------------------------------------
# Grouping and languages
# ---------------------------------------------------------------------------------------------


def test_group_by_dir_ext_and_languages(tokenizer_dirs, files, tmp_path, capsys):
    a, _ = tokenizer_dirs
    data = tmp_path / "data"
    by = lambda report: {r["label"]: r for r in report["rows"]}  # noqa: E731

    rows = by(json_report(capsys, data, "-t", a, "--group-by", "dir"))
    assert rows[str(data / "en")]["docs"] == 2
    assert rows[str(data / "en")]["bytes"] == len((ENGLISH + CODE).encode())
    assert rows[str(data / "en")]["results"][label_of(a)]["tokens"] == counts(a, [ENGLISH, CODE])[2]
    assert set(rows) == {str(data / d) for d in ("en", "de", "ja")} | {"(all)"}

    rows = by(json_report(capsys, data, "-t", a, "--group-by", "ext"))
    assert set(rows) == {".txt", ".py", "(all)"}
    assert rows[".txt"]["bytes"] == sum(len(t.encode()) for t in (ENGLISH, GERMAN, JAPANESE))

    report = json_report(capsys, data, "-t", a, "--lang-from-path")
    langs = {r["label"]: r for r in report["rows"] if r["kind"] == "language"}
    assert list(langs) == ["lang:de", "lang:en", "lang:ja"]
    assert langs["lang:de"]["chars"] == len(GERMAN)
    assert langs["lang:ja"]["results"][label_of(a)]["tokens"] == counts(a, [JAPANESE])[2]
    assert sum(r["bytes"] for r in langs.values()) == report["rows"][-1]["bytes"]
    # a file outside language directories counts as "(none)"
    extra = tmp_path / "misc.txt"
    extra.write_text("no language here", encoding="utf-8")
    report = json_report(capsys, data, extra, "-t", a, "--lang-from-path")
    assert [r["label"] for r in report["rows"] if r["kind"] == "language"] == [
        "lang:(none)", "lang:de", "lang:en", "lang:ja",
    ]


def test_language_of_paths():
    from pathlib import Path

    assert ev.language_of(Path("corpus/de/news.txt")) == "de"
    assert ev.language_of(Path("corpus/pt-BR/a/b.txt")) == "pt-BR"
    assert ev.language_of(Path("x/zh_Hans/doc.jsonl")) == "zh_Hans"
    assert ev.language_of(Path("src/lib/io.py")) is None  # no two-letter directory; file names not used
    assert ev.language_of(Path("en/de/x.txt")) == "de"  # the nearest wins


def test_jsonl_documents_and_limit(tokenizer_dirs, tmp_path, capsys):
    a, _ = tokenizer_dirs
    rows = [f"dökument {i}: " + "sömé tëxt " * (i + 1) for i in range(30)]  # bytes != chars
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"body": r}, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    report = json_report(capsys, src, "-t", a, "--column", "body")
    assert report["rows"][0]["docs"] == 30
    assert report["rows"][0]["results"][label_of(a)]["tokens"] == counts(a, rows)[2]
    # --limit-mb: documents up to and including the one that crosses the limit
    report = json_report(capsys, src, "-t", a, "--column", "body", "--limit-mb", "0.0005")
    taken, size = [], 0
    for r in rows:
        taken.append(r)
        size += len(r.encode())
        if size >= 500:  # bytes, not characters
            break
    assert report["rows"][0]["docs"] == len(taken) < 30
    assert report["rows"][0]["bytes"] == size


# ---------------------------------------------------------------------------------------------
# Unavailable tokenizers
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """No vocabulary cached, none built in this process, network allowed by the environment,
    and every download attempt recorded (and failed)."""
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.delenv("TOKENMILL_OFFLINE", raising=False)
    monkeypatch.setattr(tokenmill.registry, "ENCODINGS", {})
    attempts = []

    def no_network(url, timeout):
        attempts.append(url)
        raise OSError("no network in the tests")

    monkeypatch.setattr(tokenmill.load, "_fetch_url", no_network)
    return attempts


def test_uncached_tokenizer_is_reported_not_downloaded(tokenizer_dirs, files, empty_cache, capsys):
    a, _ = tokenizer_dirs
    rc, out, err = run(capsys, *files, "-t", a, "cl100k_base", "nope_base", "./no/such/dir")
    assert rc == 0, err
    assert empty_cache == []  # nothing was downloaded, or even tried
    assert re.search(r"^  cl100k_base: unavailable: vocabulary not cached .*--allow-download", out, re.M)
    assert re.search(r"^  nope_base: unavailable: neither a saved tokenizer directory nor a known encoding", out, re.M)
    assert re.search(r"^  \./no/such/dir: unavailable: no such directory", out, re.M)
    rows = table_rows(out)
    nbytes, nchars, n = counts(a, list(files.values()))
    assert rows["(all)"] == ["4", f"{nbytes:,}", f"{nbytes / n:.3f}", f"{n / nchars:.4f}"]

    # machine formats: stdout stays parseable, the reasons go to stderr (and into the JSON)
    rc, out, err = run(capsys, *files, "-t", a, "cl100k_base", "--format", "json")
    assert rc == 0
    assert [u["spec"] for u in json.loads(out)["unavailable"]] == ["cl100k_base"]
    assert "cl100k_base: unavailable" in err
    rc, out, err = run(capsys, *files, "-t", a, "cl100k_base", "--format", "csv")
    assert rc == 0 and "cl100k_base: unavailable" in err
    assert {r["tokenizer"] for r in csv.DictReader(io.StringIO(out))} == {label_of(a)}
    assert empty_cache == []


def test_allow_download_tries_the_network(tokenizer_dirs, files, empty_cache, capsys):
    a, _ = tokenizer_dirs
    rc, out, err = run(capsys, *files, "-t", a, "cl100k_base", "--allow-download")
    assert rc == 0, err
    assert empty_cache and empty_cache[0].endswith("cl100k_base.tiktoken")
    assert re.search(r"^  cl100k_base: unavailable: vocabulary could not be downloaded", out, re.M)


def test_nothing_available_fails(files, empty_cache, capsys):
    rc, out, err = run(capsys, *files, "-t", "cl100k_base", "nope_base")
    assert rc == 2
    assert out == ""
    assert "cl100k_base: unavailable" in err and "no tokenizer could be loaded" in err


def test_unavailable_baseline_fails(tokenizer_dirs, files, empty_cache, capsys):
    a, _ = tokenizer_dirs
    rc, out, err = run(capsys, *files, "-t", a, "--baseline", "cl100k_base")
    assert rc == 2
    assert "baseline cl100k_base is unavailable" in err


def test_saved_tokenizer_given_as_input_is_refused(tokenizer_dirs, capsys):
    a, b = tokenizer_dirs
    rc, out, err = run(capsys, a, "-t", b)
    assert rc == 2
    assert "-t/--tokenizer" in err


def test_bad_input_fails_cleanly(tokenizer_dirs, tmp_path, capsys):
    a, _ = tokenizer_dirs
    rc, out, err = run(capsys, tmp_path / "nope.txt", "-t", a)
    assert rc == 2 and out == "" and "nope.txt" in err
    rc, out, err = run(capsys, "-t", a, "--lang-from-path")
    assert rc == 2 and out == "" and "apply to FILES" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    rc, out, err = run(capsys, empty, "-t", a)
    assert rc == 2 and out == "" and "no documents" in err


# ---------------------------------------------------------------------------------------------
# Plot
# ---------------------------------------------------------------------------------------------


def test_plot_writes_a_png(tokenizer_dirs, files, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    a, b = tokenizer_dirs
    png = tmp_path / "chart.png"
    rc, out, err = run(capsys, *files, "-t", a, b, "--plot", png)
    assert rc == 0, err
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert f"plot saved to {png}" in out


def test_plot_without_matplotlib_fails_first(tokenizer_dirs, files, tmp_path, monkeypatch, capsys):
    a, _ = tokenizer_dirs
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    png = tmp_path / "chart.png"
    rc, out, err = run(capsys, *files, "-t", a, "--plot", png)
    assert rc == 2
    assert "tokenmill[plot]" in err
    assert out == "" and not png.exists()


# ---------------------------------------------------------------------------------------------
# The built-in default corpus
# ---------------------------------------------------------------------------------------------


def test_default_corpus_table(tokenizer_dirs, capsys):
    a, b = tokenizer_dirs
    docs, notes = ev.default_documents(40_000)
    docs = list(docs)
    rc, out, err = run(capsys, "-t", a, b, "--limit-mb", "0.04")
    assert rc == 0, err
    rows = table_rows(out)
    domains = list(dict.fromkeys(d.group for d in docs))
    assert domains[:2] == ["python-code", "english-prose"]
    assert set(rows) == {*domains, "(all)"}
    for domain in [*domains, "(all)"]:
        texts = [d.text for d in docs if domain == "(all)" or d.group == domain]
        nbytes, nchars, ta = counts(a, texts)
        _, _, tb = counts(b, texts)
        assert rows[domain][:4] == [str(len(texts)), f"{nbytes:,}", f"{nbytes / ta:.3f}", f"{ta / nchars:.4f}"]
        assert rows[domain][6] == f"{(ta / tb - 1) * 100:+.1f}%"
    for note in notes:
        assert note in out
    cjk = stdlib_root() / "test" / "cjkencodings"
    if cjk.is_dir():
        assert domains[2:] == ["chinese", "japanese", "korean"]
        assert "korean: test/cjkencodings/euc_kr-utf8.txt" in out
    else:
        assert domains[2:] == [] and "skipped" in out


def test_default_corpus_is_the_held_out_stdlib():
    """The code and prose domains come from exactly the files `tokenmill train` holds out."""
    held, _, _ = ev.default_corpus_parts()
    _, want = stdlib_split()
    not_code = {(stdlib_root() / rel).read_text(encoding="utf-8") for rel in ev.NOT_CODE}
    # Both skip a file that is not UTF-8 (some Pythons ship a few Latin-1 test modules).
    texts = []
    for p in held:
        try:
            texts.append(p.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            continue
    assert texts == [t for t in want if t not in not_code]


SAMPLE = '''#!/usr/bin/env python3
# -*- coding: utf-8 -*-
"""Módule docstring: héllo.

Second paragraph.
"""
import os  # inline comment

# ----------------
# A block comment
# over two lines.
x = "# not a comment"   # but this is

class Ünïcode: """Clâss doc on one line."""

def f(a):
    """Fünction
       doc."""
    s = "été"; return a  # trailing
'''


def test_split_python_source():
    code, prose = ev.split_python_source(SAMPLE)
    assert code == (
        'import os\n\nx = "# not a comment"\n\nclass Ünïcode:\n\ndef f(a):\n    s = "été"; return a\n'
    )
    assert prose.split("\n\n") == [
        "Módule docstring: héllo.", "Second paragraph.", "inline comment",
        "A block comment\nover two lines.", "but this is", "Clâss doc on one line.",
        "Fünction\ndoc.", "trailing",
    ]
    assert ev.split_python_source("def broken(:\n") is None
    assert ev.split_python_source(SAMPLE.replace("\n", "\r\n")) == (code, prose)


def test_help_lists_eval(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    assert "eval" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    out = capsys.readouterr().out
    for opt in ("--tokenizer", "--baseline", "--group-by", "--lang-from-path", "--format", "--plot", "--allow-download"):
        assert opt in out
