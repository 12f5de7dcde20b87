"""HuggingFace compatibility (``tokenmill.huggingface``): tokenizer.json export and import,
the regex translation between fancy-regex and Oniguruma, and the HF-flavoured facade.

The oracle is ``tokenizers`` itself: an exported encoding must give HF the same ids as
tokenmill, an imported tokenizer.json must give tokenmill the same ids as HF, and the facade
must answer like ``tokenizers.Tokenizer``. Exports of cl100k_base and o200k_base take a few
seconds each, so they are made once per session.
"""

from __future__ import annotations

import json
import random
import sys

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

import tokenmill  # noqa: E402
from tokenmill import huggingface as hf  # noqa: E402
from tokenmill.corpus import stdlib_texts  # noqa: E402
from tokenmill.patterns import NAMED_PATTERNS  # noqa: E402

# The Split patterns of Llama 3 and Qwen2 as their tokenizer.json files spell them.
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = ["<|endoftext|>", "<|fim_middle|>"]
BYTE_CHAR = hf.bytes_to_unicode()

# --------------------------------------------------------------------------------------------
# Texts
# --------------------------------------------------------------------------------------------


def _chunks(texts, size=4000):
    return [t[i : i + size] for t in texts for i in range(0, len(t), size)]


@pytest.fixture(scope="session")
def sample():
    """~300 kB of standard-library sources, in chunks (so a mismatch names a small text)."""
    return _chunks(list(stdlib_texts(300_000)))


@pytest.fixture(scope="session")
def held_out():
    """Other standard-library sources, not used for training."""
    return _chunks(list(stdlib_texts(200_000, skip_bytes=3_000_000)))


def _adversarial():
    rnd = random.Random(1234)
    pool = [
        " ", "  ", "   ", "\n", "\n\n", "\r\n", "\t", " \n ", "\u3000", "\u00a0", "\u2028", "\x0b",
        "a", "A", "é", "ß", "İ", "ǅ", "\u0301", "1", "12", "123456", "٣٤", "½", "'s", "'S", "'ll",
        "'LL", "'Ve", "'ſ", "'\u212a", "😀", "👩‍👩‍👧", "中文", "한국어", "!", "?!", "/", "//", "...",
        "<|", "|>", "<|endoftext", "\ufeff", "\U000e0001", "\U0010ffff", "\ue000",
        "'ﬅ", "'ﬆ", "'ǈ", "'ǉ", "'ẞ", "'ß", "'İ", "'ı", "ǰ", "ΐ",  # case folds beyond ASCII
    ]
    fixed = [
        "", " ", "   ", "\n", "hello world", "Hello  World  ", "trailing spaces   ",
        "   leading", "a\n\n\nb", "tabs\t\tand\t\tspaces", "123 4567 89012 3.14159 1,000,000",
        "I'm here, you're there, he'll go, she'd've, it'S, THEY'RE", "'s's's", "don't'T",
        "emoji 😀😀😀 and 👩‍👩‍👧 family", "中文字符和日本語のテキスト", "Ünïcödé ñ ﬁ Ⅻ",
        "mixed\u3000ideographic\u00a0spaces", "x" * 3000, " " * 500, "\n" * 200, "9" * 100,
    ]
    return fixed + ["".join(rnd.choice(pool) for _ in range(rnd.randint(1, 60))) for _ in range(2000)]


ADVERSARIAL = _adversarial()


def _code_point_texts(step_contexts=37):
    """Every code point (surrogates excepted) in plain runs, and every 37th one after an
    apostrophe, a letter, a digit, a space and a newline."""
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    plain = ["".join(chars[i : i + 2000]) for i in range(0, len(chars), 2000)]
    some = chars[::step_contexts]
    contexts = ["".join(f"'{c} x{c}y 1{c}2 {c}{c} \n{c}" for c in some[i : i + 300]) for i in range(0, len(some), 300)]
    return plain + contexts


@pytest.fixture(scope="session")
def code_points():
    return _code_point_texts()


def _with_specials(texts, specials):
    out = []
    for i, t in enumerate(texts[:200]):
        s = specials[i % len(specials)]
        out.append(f"{s}{t[:50]}{s}{t[50:100]}{s}{s}")
    return out


# --------------------------------------------------------------------------------------------
# Encodings and their exports (made once per session)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def trained():
    """A small tokenmill vocabulary trained on standard-library sources, with specials."""
    return tokenmill.train_from_iterator(
        stdlib_texts(1_000_000, skip_bytes=400_000),
        1000,
        special_tokens=SPECIALS,
        progress=False,
        name="trained-1000",
    )


_EXPORTS: dict = {}


@pytest.fixture(scope="session")
def export_of(trained, get_pair):
    """Factory: (encoding, tokenizer.json dict, tokenizers.Tokenizer), made once per name."""

    def make(name):
        if name not in _EXPORTS:
            enc = trained if name == "trained" else get_pair(name).tm
            doc = hf.to_tokenizer_json(enc)
            _EXPORTS[name] = (enc, doc, Tokenizer.from_str(json.dumps(doc)))
        return _EXPORTS[name]

    return make


@pytest.fixture(params=["trained", "r50k_base", "cl100k_base", "o200k_base"])
def exported(request, export_of):
    return export_of(request.param)


def _hf_ids(tok, texts):
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def _assert_same_ids(expected, actual, texts, what):
    bad = [i for i, (a, b) in enumerate(zip(expected, actual)) if a != b]
    assert len(expected) == len(actual)
    if bad:
        i = bad[0]
        a, b = expected[i], actual[i]
        j = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
        pytest.fail(
            f"{what}: {len(bad)} of {len(texts)} texts differ; first: text {texts[i][:80]!r}..., "
            f"at token {j}: expected {a[max(0, j - 2) : j + 3]}, got {b[max(0, j - 2) : j + 3]}"
        )


# --------------------------------------------------------------------------------------------
# The byte <-> unicode mapping
# --------------------------------------------------------------------------------------------


def test_byte_alphabet_is_hf_byte_level_alphabet():
    assert len(set(BYTE_CHAR.values())) == 256
    assert set(BYTE_CHAR.values()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert BYTE_CHAR[ord(" ")] == "Ġ" and BYTE_CHAR[ord("\n")] == "Ċ" and BYTE_CHAR[ord("a")] == "a"


def test_byte_mapping_matches_hf_byte_by_byte():
    # HF's ByteLevel maps the UTF-8 bytes of the text; each of chr(1)..chr(255) covers bytes
    # 0x01..0x7f directly and 0x80..0xff as UTF-8 continuation/lead bytes.
    text = "".join(chr(i) for i in range(256))
    ((piece, _),) = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(text)
    assert piece == hf.token_bytes_to_string(text.encode("utf-8"))
    all_bytes = bytes(range(256))
    assert hf.token_string_to_bytes(hf.token_bytes_to_string(all_bytes)) == all_bytes
    assert hf.token_string_to_bytes("héllo ☃") is None  # space and snowman are not in the alphabet


# --------------------------------------------------------------------------------------------
# Regex translation
# --------------------------------------------------------------------------------------------


def _hf_pieces(pre_tokenizer, text):
    return [p for p, _ in pre_tokenizer.pre_tokenize_str(text)]


def _tm_pieces(pattern, text):
    bytes_only = {bytes([b]): b for b in range(256)}
    enc = tokenmill.Encoding("p", pat_str=pattern, mergeable_ranks=bytes_only, special_tokens={})
    return enc._core_bpe.split(text)


@pytest.mark.parametrize(
    "pattern, onig",
    [
        (r"\p{N}{1,3}+", r"(?>\p{N}{1,3})"),
        (r"\s++$|\s", r"\s++\z|\s"),
        (r"^a|b$", r"\Aa|b\z"),
        (r"(?s:.)+x?+y*+", r"(?m:.)+x?+y*+"),
        (r"(?P<w>a)\k<w>\u00e9\x41\U0001F600", r"(?<w>a)\k<w>\x{00e9}\x{41}\x{0001F600}"),
        (r"[^\s\p{L}\pN][]a]\.", r"[^\s\p{L}\p{N}][\]a]\."),
        (r"(?i:'s)(?i)x(?#comment)", r"(?i:'s)(?i)x"),
    ],
)
def test_tiktoken_to_onig_rewrites(pattern, onig):
    assert hf.tiktoken_pattern_to_onig(pattern) == onig


@pytest.mark.parametrize(
    "onig, pattern",
    [
        (r"\p{N}{1,3}+", r"(?:\p{N}{1,3})+"),
        (r"\d{2}+?", r"(?:\d{2})+?"),
        (r"\s+$|^x", r"\s+(?m:$)|(?m:^)x"),
        (r"\h+\H\Z", r"[0-9a-fA-F]+[^0-9a-fA-F](?=\n?\z)"),
        (r"(?m:.)", r"(?s:.)"),
        (r"\uFFFF[\h]", r"\x{FFFF}[0-9a-fA-F]"),
        (LLAMA3_PATTERN, LLAMA3_PATTERN),
    ],
)
def test_onig_to_tiktoken_rewrites(onig, pattern):
    assert hf.onig_pattern_to_tiktoken(onig) == pattern


@pytest.mark.parametrize(
    "pattern, text",
    [
        (r"\p{N}{1,3}+", "1234567 89"),  # not possessive in Ruby syntax: one piece in Onig
        (r"\s+$|\S+", "ab  \n  cd  "),  # $ is end of line in Ruby syntax
        (r"^\S|\s+|\S+", "ab\ncd"),  # ^ is start of line in Ruby syntax
    ],
)
def test_untranslated_patterns_split_differently_in_onig(pattern, text):
    """The rewrites are needed: Oniguruma reads these tiktoken patterns differently, and reads
    the translations like tokenmill reads the originals (Removed+invert keeps just the
    matches, as tiktoken does)."""
    raw = _hf_pieces(pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True), text)
    translated = Regex(hf.tiktoken_pattern_to_onig(pattern))
    onig = _hf_pieces(pre_tokenizers.Split(translated, behavior="removed", invert=True), text)
    assert raw != _tm_pieces(pattern, text)
    assert onig == _tm_pieces(pattern, text)


def test_onig_patterns_read_back_like_hf():
    for onig, text in [(r"\p{N}{1,2}+", "12345 6"), (r"\S+$|\s+", "ab  \ncd"), (r"\h+|.", "beef xyz")]:
        hf_split = _hf_pieces(pre_tokenizers.Split(Regex(onig), behavior="removed", invert=True), text)
        assert _tm_pieces(hf.onig_pattern_to_tiktoken(onig), text) == hf_split, onig


@pytest.mark.parametrize(
    "pattern", [r"(?m)^a", r"(?x) a b", r"(?U)a+", r"[[:alpha:]]", r"[a--b]", r"\Qa\E", r"\p{gc=L}", r"*a", r"a)", r"(a"]
)
def test_untranslatable_patterns_raise(pattern):
    with pytest.raises(ValueError, match="cannot translate"):
        hf.tiktoken_pattern_to_onig(pattern)


@pytest.mark.parametrize("name", sorted(set(NAMED_PATTERNS) - {"gpt4", "gpt2"}))
def test_named_patterns_split_identically_in_onig(name, sample, code_points):
    """tokenmill's pattern and its Oniguruma translation give the same pieces (HF's Split on
    the translation vs tokenmill's split on the original) on real, adversarial and every
    code point's text."""
    pattern = NAMED_PATTERNS[name]
    split = pre_tokenizers.Split(Regex(hf.tiktoken_pattern_to_onig(pattern)), behavior="isolated")
    for text in sample[:15] + ADVERSARIAL[:300] + code_points[::11]:
        assert _hf_pieces(split, text) == _tm_pieces(pattern, text), (name, text[:100])


@pytest.mark.parametrize("onig", [LLAMA3_PATTERN, QWEN2_PATTERN], ids=["llama3", "qwen2"])
def test_llama3_and_qwen2_patterns_read_back_identically(onig, sample, code_points):
    split = pre_tokenizers.Split(Regex(onig), behavior="isolated")
    pattern = hf.onig_pattern_to_tiktoken(onig)
    for text in sample[:15] + ADVERSARIAL[:300] + code_points[::11]:
        assert _hf_pieces(split, text) == _tm_pieces(pattern, text), text[:100]


def test_gpt2_byte_level_regex_equals_r50k_pattern(sample, code_points):
    """HF's ByteLevel(use_regex=True) split is what import maps to r50k_base's pattern."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    for text in sample[:15] + ADVERSARIAL[:300] + code_points[::11]:
        expected = _hf_pieces(byte_level, text)
        got = [hf.token_bytes_to_string(p.encode("utf-8")) for p in _tm_pieces(hf.R50K_PATTERN, text)]
        assert got == expected, text[:100]


# --------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------


def test_export_gives_tokenmill_ids(exported, sample):
    enc, _doc, tok = exported
    texts = sample + ADVERSARIAL + _with_specials(sample + ADVERSARIAL, sorted(enc._special_tokens))
    _assert_same_ids(enc.encode_batch(texts, allowed_special="all"), _hf_ids(tok, texts), texts, enc.name)


@pytest.mark.parametrize("name", ["trained", "o200k_base"])
def test_export_gives_tokenmill_ids_on_every_code_point(name, export_of, code_points):
    """Oniguruma's and tokenmill's Unicode tables agree on every code point: the trained
    encoding's pattern (nanochat's, like cl100k's) uses \\p{L}, \\p{N}, \\s and (?i:...),
    o200k's the letter subcategories and \\p{M}. The other patterns get every 11th code
    point in the pattern tests."""
    enc, _doc, tok = export_of(name)
    _assert_same_ids(enc.encode_batch(code_points), _hf_ids(tok, code_points), code_points, enc.name)


def test_export_decodes_back(exported, sample):
    enc, _doc, tok = exported
    texts = sample[:30] + ADVERSARIAL[:500] + _with_specials(ADVERSARIAL, sorted(enc._special_tokens))[:50]
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=False) == text
        assert enc.decode(ids) == text


def test_export_special_tokens_keep_their_ids(exported):
    enc, doc, tok = exported
    for text, token_id in enc._special_tokens.items():
        assert tok.token_to_id(text) == token_id
        assert tok.encode(f"a{text}b", add_special_tokens=False).ids == enc.encode(f"a{text}b", allowed_special="all")
    assert all(a["special"] for a in doc["added_tokens"])


def test_export_document_shape(exported):
    enc, doc, _tok = exported
    model = doc["model"]
    assert model["type"] == "BPE" and model["ignore_merges"] is True and model["byte_fallback"] is False
    steps = doc["pre_tokenizer"]["pretokenizers"]
    assert [s["type"] for s in steps] == ["Split", "ByteLevel"]
    assert steps[0]["behavior"] == "Isolated" and steps[1]["use_regex"] is False and steps[1]["add_prefix_space"] is False
    assert doc["decoder"]["type"] == "ByteLevel"
    multi_byte = sum(1 for t in enc._mergeable_ranks if len(t) > 1)
    assert len(model["merges"]) == multi_byte  # every token of these vocabularies is built by a merge
    for left, right in model["merges"][:2000]:
        assert model["vocab"][left + right] > max(model["vocab"][left], model["vocab"][right])
    # Specials right after the vocabulary keep their ids in HF as added tokens alone; those of
    # cl100k_base and o200k_base leave gaps, so they are also listed in the model's vocabulary.
    listed = {s: model["vocab"][s] for s in enc._special_tokens if s in model["vocab"]}
    if enc.name in ("cl100k_base", "o200k_base"):
        assert listed == enc._special_tokens
    else:
        assert listed == {} and len(model["vocab"]) == len(enc._mergeable_ranks)


def test_save_tokenizer_json(trained, tmp_path):
    path = hf.save_tokenizer_json(trained, tmp_path / "x.json")
    assert path == tmp_path / "x.json"
    assert Tokenizer.from_file(str(path)).encode("hello world").ids == trained.encode("hello world")
    assert hf.save_tokenizer_json(trained, tmp_path) == tmp_path / "tokenizer.json"
    assert json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8")) == hf.to_tokenizer_json(trained)


def test_trained_export_uses_the_training_merges(trained):
    merges, unreachable = hf.tiktoken_merges(trained._mergeable_ranks)
    ranks = trained._mergeable_ranks
    assert not unreachable
    assert [(ranks[a], ranks[b]) for _, a, b in merges] == list(trained._merges)
    assert [rank for rank, _, _ in merges] == list(range(256, 256 + len(trained._merges)))


def test_export_checks_training_merges(trained):
    """Exported merges are always the ones that reproduce tokenmill's ids; training merges
    that disagree with them (here: forged) only warn."""
    forged = tokenmill.Encoding(
        "forged", pat_str=trained._pat_str, mergeable_ranks=trained._mergeable_ranks, special_tokens={}
    )
    forged._merges = list(trained._merges)
    forged._merges[5] = forged._merges[6]
    with pytest.warns(UserWarning, match="training merge 5"):
        doc = hf.to_tokenizer_json(forged)
    ranks = trained._mergeable_ranks
    by_string = {hf.token_bytes_to_string(t): r for t, r in ranks.items()}
    assert [(by_string[a], by_string[b]) for a, b in doc["model"]["merges"]] == list(trained._merges)


def test_tiktoken_merges_of_cl100k(export_of):
    """The exported merges of cl100k_base are what tokenmill's own merge loop does."""
    enc, doc, _ = export_of("cl100k_base")
    ranks = enc._mergeable_ranks
    merges = [(hf.token_string_to_bytes(a), hf.token_string_to_bytes(b)) for a, b in doc["model"]["merges"]]
    assert len(merges) == len(ranks) - 256  # no unreachable token
    last = {ranks[left + right]: (ranks[left], ranks[right]) for left, right in merges}
    assert list(last) == sorted(last) and len(last) == len(merges)
    # Independent check with tokenmill's Rust merge loop: without the tokens of a token's
    # length (none of which can occur inside it), encoding its bytes stops one merge short.
    for length in (3, 6, 9):
        shorter = {t: r for t, r in ranks.items() if len(t) < length}
        engine = tokenmill.Encoding("shorter", pat_str=enc._pat_str, mergeable_ranks=shorter, special_tokens={})
        for token in [t for t in ranks if len(t) == length][::7]:
            assert tuple(engine._encode_single_piece(token)) == last[ranks[token]], token


def _textbook_merges(ranks):
    """tiktoken_merges the slow way: each token's bytes merged by lowest rank (leftmost on
    ties), every pair re-ranked at every step, until two parts are left."""
    merges, unreachable = [], []
    for token, rank in ranks.items():
        if len(token) < 2:
            continue
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 2:
            found = [(ranks[a + b], i) for i, (a, b) in enumerate(zip(parts, parts[1:])) if a + b in ranks]
            if not found:
                break
            i = min(found)[1]
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) == 2:
            merges.append((rank, parts[0], parts[1]))
        else:
            unreachable.append(token)
    return sorted(merges), unreachable


@pytest.mark.parametrize("seed", range(6))
def test_tiktoken_merges_match_the_textbook_run(seed):
    # Strings over three letters at random ranks: many tokens are built through
    # higher-ranked intermediates, and some are unreachable.
    rng = random.Random(seed)
    ranks = {bytes([b]): b for b in range(256)}
    strings = list({"".join(rng.choice("abc") for _ in range(rng.randint(2, 9))).encode() for _ in range(400)})
    rng.shuffle(strings)
    ranks.update({t: 256 + i for i, t in enumerate(strings)})
    items = list(ranks.items())
    rng.shuffle(items)
    shuffled = dict(items)  # the unreachable tokens come in the mapping's order
    merges, unreachable = hf.tiktoken_merges(shuffled)
    assert (merges, unreachable) == _textbook_merges(shuffled)
    assert len(merges) > 100 and len(unreachable) > 20
    assert hf.tiktoken_merges(types_mapping(shuffled)) == (merges, unreachable)


def types_mapping(d):
    """A read-only mapping that is not a dict."""
    import types

    return types.MappingProxyType(d)


def test_tiktoken_merges_refuse_a_vocabulary_that_is_not_one():
    with pytest.raises(ValueError, match="more than one"):
        hf.tiktoken_merges({b"a": 0, b"b": 0})
    with pytest.raises(TypeError, match="bytes"):
        hf.tiktoken_merges({"a": 0})
    # (as tiktoken's constructor refuses such ranks)
    with pytest.raises(OverflowError):
        hf.tiktoken_merges({b"a": -1})
    with pytest.raises(TypeError):
        hf.tiktoken_merges({b"a": 1.5})


def _tiny_encoding(extra):
    ranks = {bytes([b]): b for b in range(256)}
    ranks.update({k.encode(): v for k, v in extra.items()})
    return tokenmill.Encoding("tiny", pat_str=NAMED_PATTERNS["r50k"], mergeable_ranks=ranks, special_tokens={})


def test_export_of_token_built_against_rank_order():
    """'abc' (rank 256) forms only after 'bc' (rank 257): tiktoken merges a + bc last. A merge
    derived with only lower ranks would leave 'abc' unbuildable and HF would give a, bc."""
    enc = _tiny_encoding({"abc": 256, "bc": 257})
    doc = hf.to_tokenizer_json(enc)
    assert doc["model"]["merges"] == [["a", "bc"], ["b", "c"]]
    tok = Tokenizer.from_str(json.dumps(doc))
    for text in ["abcd", "xabc abcabc", "bcd"]:
        assert tok.encode(text).ids == enc.encode(text)


def test_export_needs_ignore_merges():
    """' qz' is a token no merge builds (neither ' q' nor 'qz' is a token); tiktoken finds it
    by whole-piece lookup, and so does HF, but only with ignore_merges."""
    enc = _tiny_encoding({" qz": 256})
    doc = hf.to_tokenizer_json(enc)
    assert doc["model"]["merges"] == []
    text = "a qz"
    assert Tokenizer.from_str(json.dumps(doc)).encode(text).ids == enc.encode(text)
    doc["model"]["ignore_merges"] = False
    assert Tokenizer.from_str(json.dumps(doc)).encode(text).ids != enc.encode(text)


def test_export_of_pattern_that_skips_text():
    """tiktoken drops text its pattern does not match: export then splits with Removed+invert."""
    enc = tokenmill.Encoding(
        "letters", pat_str=r"\p{L}+|\p{N}", mergeable_ranks=_tiny_encoding({})._mergeable_ranks, special_tokens={}
    )
    doc = hf.to_tokenizer_json(enc)
    split = doc["pre_tokenizer"]["pretokenizers"][0]
    assert (split["behavior"], split["invert"]) == ("Removed", True)
    tok = Tokenizer.from_str(json.dumps(doc))
    for text in ["hello, world! 42", "  x  ", "😀a😀"]:
        assert tok.encode(text).ids == enc.encode(text)


def test_export_refuses_what_hf_cannot_hold():
    ranks = _tiny_encoding({"hello": 256})._mergeable_ranks
    shared = tokenmill.Encoding("s", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={"<a>": 300, "<b>": 300})
    with pytest.raises(ValueError, match="share id 300"):
        hf.to_tokenizer_json(shared)
    clash = tokenmill.Encoding("s", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={"hello": 300})
    with pytest.raises(ValueError, match="also the byte-level string of ordinary token 256"):
        hf.to_tokenizer_json(clash)
    with pytest.raises(ValueError, match="cannot translate"):
        hf.to_tokenizer_json(tokenmill.Encoding("s", pat_str=r"(?m)^\S+|\s+", mergeable_ranks=ranks, special_tokens={}))
    # id 400 leaves a gap, so the special goes into the model's vocabulary, where 'Ġx' means ' x'
    gap = tokenmill.Encoding("s", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={"Ġx": 400})
    with pytest.raises(ValueError, match="would also read as the byte-level token"):
        hf.to_tokenizer_json(gap)


# --------------------------------------------------------------------------------------------
# Import
# --------------------------------------------------------------------------------------------


def _train_hf(style, ignore_merges, texts, vocab_size=1500):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        pattern = LLAMA3_PATTERN if style == "llama3" else QWEN2_PATTERN
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
        )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=SPECIALS,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


_HF_TRAINED: dict = {}


@pytest.fixture(scope="session")
def hf_trained():
    """Factory: a byte-level BPE trained by HF tokenizers, by style and ignore_merges."""
    texts = list(stdlib_texts(1_000_000, skip_bytes=400_000))

    def make(style, ignore_merges):
        key = (style, ignore_merges)
        if key not in _HF_TRAINED:
            _HF_TRAINED[key] = _train_hf(style, ignore_merges, texts)
        return _HF_TRAINED[key]

    return make


@pytest.mark.parametrize(
    "style, ignore_merges",
    [("gpt2", False), ("gpt2", True), ("llama3", True), ("llama3", False), ("qwen2", False)],
)
def test_import_gives_hf_ids(style, ignore_merges, hf_trained, held_out, code_points, tmp_path):
    tok = hf_trained(style, ignore_merges)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    enc = hf.from_tokenizer_json(path)
    assert enc.name == tmp_path.name
    assert enc._core_bpe.fast_pretokenizer  # gpt2 -> r50k's pattern; llama3/qwen2 as written
    texts = held_out + ADVERSARIAL + _with_specials(held_out + ADVERSARIAL, SPECIALS) + code_points[::32]
    _assert_same_ids(_hf_ids(tok, texts), enc.encode_batch(texts, allowed_special="all"), texts, style)
    assert enc._special_tokens == {s: tok.token_to_id(s) for s in SPECIALS}


def test_import_accepts_every_source_form(hf_trained, tmp_path):
    tok = hf_trained("llama3", True)
    tok.save(str(tmp_path / "tokenizer.json"))
    doc = json.loads(tok.to_str())
    encs = [
        hf.from_tokenizer_json(tok),
        hf.from_tokenizer_json(doc, name="x"),
        hf.from_tokenizer_json(tok.to_str()),
        hf.from_tokenizer_json(tmp_path),
        hf.from_tokenizer_json(str(tmp_path / "tokenizer.json")),
    ]
    text = "def f(x):\n    return x + 1  # <|endoftext|>"
    assert len({tuple(e.encode(text, allowed_special="all")) for e in encs}) == 1
    assert encs[0].name == "huggingface" and encs[1].name == "x"


def test_import_ignores_post_processor(hf_trained, held_out):
    """A BOS template (as in Llama 3) is not part of an Encoding: ids equal HF's without it."""
    tok = Tokenizer.from_str(hf_trained("llama3", True).to_str())
    tok.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", tok.token_to_id("<|endoftext|>"))]
    )
    enc = hf.from_tokenizer_json(tok)
    assert tok.encode("hi").ids[0] == tok.token_to_id("<|endoftext|>")
    _assert_same_ids(_hf_ids(tok, held_out), enc.encode_batch(held_out), held_out, "template")


@pytest.mark.parametrize("name", ["trained", "cl100k_base", "o200k_base"])
def test_export_import_round_trip(name, export_of, sample):
    enc, doc, _ = export_of(name)
    back = hf.from_tokenizer_json(doc)
    assert back._mergeable_ranks == enc._mergeable_ranks
    assert back._special_tokens == enc._special_tokens
    assert back._pat_str == enc._pat_str  # the named pattern, so tokenmill's fast path applies
    texts = sample[:20] + ADVERSARIAL[:300]
    assert back.encode_batch(texts, allowed_special="all") == enc.encode_batch(texts, allowed_special="all")


# -- what import refuses ---------------------------------------------------------------------


def _tiny_doc(extra=None, merges=(), ignore_merges=False, **changes):
    """A GPT-2-style tokenizer.json over the 256 bytes plus ``extra`` tokens."""
    vocab = {BYTE_CHAR[b]: b for b in range(256)}
    vocab.update(extra or {})
    doc = {
        "version": "1.0",
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": ignore_merges, "vocab": vocab, "merges": [list(m) for m in merges],
        },
    }
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            doc[section][field] = value
        else:
            doc[section] = value
    return doc


def test_import_refuses_merges_out_of_id_order():
    doc = _tiny_doc({"ab": 257, "bc": 256}, [("a", "b"), ("b", "c")])
    # the two algorithms really differ here: HF merges a+b first, tiktoken b+c (lower id)
    assert Tokenizer.from_str(json.dumps(doc)).encode("abc").ids == [257, ord("c")]
    assert _tiny_encoding({"ab": 257, "bc": 256}).encode("abc") == [ord("a"), 256]
    message = r"merge 0 \(97 \('a'\) \+ 98 \('b'\) -> id 257\) comes before merge 1 .* -> id 256\)"
    with pytest.raises(ValueError, match=message):
        hf.from_tokenizer_json(doc)


def test_import_refuses_merge_that_rank_bpe_does_not_make():
    extra = {"ab": 256, "bc": 257, "abc": 258}
    doc = _tiny_doc(extra, [("a", "b"), ("b", "c"), ("a", "bc")], ignore_merges=True)
    assert Tokenizer.from_str(json.dumps(doc)).encode("abcx").ids == [256, ord("c"), ord("x")]
    assert _tiny_encoding(extra).encode("abcx") == [258, ord("x")]
    message = r"builds token 258 \('abc'\) from 256 \('ab'\) \+ 99 \('c'\), but the merge list has no such merge"
    with pytest.raises(ValueError, match=message):
        hf.from_tokenizer_json(doc)
    hf.from_tokenizer_json(_tiny_doc(extra, [("a", "b"), ("b", "c"), ("ab", "c")], ignore_merges=True))
    # Listing the other split as well is harmless: a and bc are never next to each other.
    both = _tiny_doc(extra, [("a", "b"), ("b", "c"), ("a", "bc"), ("ab", "c")], ignore_merges=True)
    enc, tok = hf.from_tokenizer_json(both), Tokenizer.from_str(json.dumps(both))
    for text in ["abcx", "abcabc", "xabcbc ab bc"]:
        assert enc.encode(text) == tok.encode(text).ids


@pytest.mark.parametrize("name", ["trained", "r50k_base"])
def test_import_of_merge_list_with_every_split(name, export_of, held_out):
    """transformers' tiktoken converter (used for Llama 3) lists every split of every token,
    sorted by the token's id and then by the parts' ids, so the tiktoken merge is often not
    a token's first split. Import accepts such lists and matches HF."""
    enc, doc, _ = export_of(name)
    ranks = enc._mergeable_ranks
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        splits = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        merges += sorted(splits, key=lambda pair: (ranks[pair[0]], ranks[pair[1]]))
    doc = dict(doc, model=dict(doc["model"], merges=[[hf.token_bytes_to_string(a), hf.token_bytes_to_string(b)] for a, b in merges]))
    assert len(merges) > sum(1 for token in ranks if len(token) > 1)  # more splits than tokens
    back = hf.from_tokenizer_json(doc)
    assert back._mergeable_ranks == ranks
    tok = Tokenizer.from_str(json.dumps(doc))
    texts = held_out[:20] + ADVERSARIAL + ["=" * n + " " * n + "-" * (n // 2) for n in range(1, 80)]
    _assert_same_ids(_hf_ids(tok, texts), back.encode_batch(texts, allowed_special="all"), texts, name)


def test_import_refuses_lookup_hf_would_not_make():
    doc = _tiny_doc({"xyz": 256}, ignore_merges=False)
    assert Tokenizer.from_str(json.dumps(doc)).encode("xyz").ids == [ord("x"), ord("y"), ord("z")]
    message = r"token 256 \('xyz'\) cannot be built by merges, yet the text 'xyz' is a single piece"
    with pytest.raises(ValueError, match=message):
        hf.from_tokenizer_json(doc)
    # With ignore_merges HF looks it up too; and a merge-less token that is never a whole
    # piece (the pattern splits ' x' from 'yz') is harmless either way.
    ok = _tiny_doc({"xyz": 256}, ignore_merges=True)
    assert hf.from_tokenizer_json(ok).encode("xyz") == Tokenizer.from_str(json.dumps(ok)).encode("xyz").ids == [256]
    hf.from_tokenizer_json(_tiny_doc({"x,y": 256}, ignore_merges=False))


def test_import_of_token_built_against_rank_order():
    extra = {"abc": 256, "bc": 257}
    doc = _tiny_doc(extra, [("a", "bc"), ("b", "c")], ignore_merges=False)
    enc = hf.from_tokenizer_json(doc)
    tok = Tokenizer.from_str(json.dumps(doc))
    for text in ["abcd abc", "bcbc", "aabcc"]:
        assert enc.encode(text) == tok.encode(text).ids


def _wordpiece():
    return json.loads(Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]")).to_str())


def _unigram():
    return json.loads(Tokenizer(models.Unigram([("a", -1.0), ("b", -2.0)], 0, False)).to_str())


def _wordlevel():
    return json.loads(Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")).to_str())


def _with_normalizer(normalizer):
    tok = Tokenizer.from_str(json.dumps(_tiny_doc()))
    tok.normalizer = normalizer
    return json.loads(tok.to_str())


def _split_doc(behavior, invert=False, pattern=r"\s+"):
    return _tiny_doc(pre_tokenizer={
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": behavior, "invert": invert},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        ],
    })


def _added(**options):
    token = {
        "id": 256, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False,
        "normalized": False, "special": True,
    }
    token.update(options)
    return _tiny_doc(added_tokens=[token])


REFUSED = {
    "wordpiece": (_wordpiece, "unsupported model type WordPiece"),
    "unigram": (_unigram, "unsupported model type Unigram"),
    "wordlevel": (_wordlevel, "unsupported model type WordLevel"),
    "nfkc": (lambda: _with_normalizer(normalizers.NFKC()), "unsupported normalizer NFKC"),
    "lowercase": (lambda: _with_normalizer(normalizers.Lowercase()), "unsupported normalizer Lowercase"),
    "prefix-space": (
        lambda: _tiny_doc(pre_tokenizer__add_prefix_space=True),
        r"ByteLevel\(add_prefix_space=True\)",
    ),
    "dropout": (lambda: _tiny_doc(model__dropout=0.1), "dropout"),
    "byte-fallback": (lambda: _tiny_doc(model__byte_fallback=True), "byte_fallback"),
    "suffix": (lambda: _tiny_doc(model__end_of_word_suffix="</w>"), "end_of_word_suffix"),
    "not-byte-level": (
        lambda: _tiny_doc(pre_tokenizer={"type": "Whitespace"}),
        r"unsupported pre-tokenizer \(Whitespace\)",
    ),
    "no-pre-tokenizer": (lambda: _tiny_doc(pre_tokenizer=None), r"unsupported pre-tokenizer \(none\)"),
    "metaspace-decoder": (
        lambda: _tiny_doc(decoder={"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}),
        "unsupported decoder Metaspace",
    ),
    "char-vocab": (lambda: _tiny_doc({"▁the": 256}), "not a byte-level token"),
    "missing-byte": (
        lambda: _tiny_doc(model__vocab={BYTE_CHAR[b]: b for b in range(255)}),
        r"lacks 1 of the 256 byte tokens",
    ),
    "split-merged": (lambda: _split_doc("MergedWithPrevious"), "MergedWithPrevious"),
    "split-then-regex": (
        lambda: _tiny_doc(pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": r"\d"}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}]}),
        "splits the text twice",
    ),
    "digits": (
        lambda: _tiny_doc(pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}),
        "Digits",
    ),
    "lstrip": (lambda: _added(lstrip=True), "lstrip=True"),
    "renumbered-added-token": (lambda: _added(id=999), "has id 999 in the file, but tokenizers gives it id 256"),
    "merge-outside-vocab": (lambda: _tiny_doc(merges=[("a", "b")]), "uses 'ab', which is not in the vocabulary"),
    "untranslatable-regex": (lambda: _split_doc("Isolated", pattern=r"\G\s"), "cannot translate"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_import_refuses_unsupported(case):
    make, message = REFUSED[case]
    with pytest.raises(ValueError, match=message):
        hf.from_tokenizer_json(make())


def test_refused_documents_are_valid_for_hf():
    """The refusals above are about tokenmill, not malformed files: HF loads them."""
    hf_accepts = set(REFUSED) - {
        "char-vocab", "missing-byte", "renumbered-added-token", "merge-outside-vocab", "untranslatable-regex"
    }
    for case in sorted(hf_accepts):
        Tokenizer.from_str(json.dumps(REFUSED[case][0]()))


def test_import_can_drop_a_normalizer():
    doc = _with_normalizer(normalizers.NFC())
    enc = hf.from_tokenizer_json(doc, ignore_normalizer=True)
    tok = Tokenizer.from_str(json.dumps(doc))
    assert enc.encode("café") == tok.encode("café").ids  # NFC text: the normalizer changes nothing


def test_import_of_isolated_split_keeps_unmatched_text():
    """HF's Isolated split keeps text the pattern does not match; import matches it too."""
    doc = _split_doc("Isolated", pattern=r"\p{L}+")
    enc, tok = hf.from_tokenizer_json(doc), Tokenizer.from_str(json.dumps(doc))
    for text in ["hello, world 42!", "  ", "a😀b"]:
        assert enc.encode(text) == tok.encode(text).ids
        assert enc.decode(enc.encode(text)) == text
    removed = _split_doc("Removed", invert=True, pattern=r"\p{L}+")
    enc, tok = hf.from_tokenizer_json(removed), Tokenizer.from_str(json.dumps(removed))
    assert enc.encode("hello, world 42!") == tok.encode("hello, world 42!").ids


# --------------------------------------------------------------------------------------------
# The HF-flavoured facade, against tokenizers.Tokenizer on the same vocabulary
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def trained_pair(trained):
    return trained, Tokenizer.from_str(json.dumps(hf.to_tokenizer_json(trained)))


def test_token_to_id_and_id_to_token_match_hf(trained_pair):
    enc, tok = trained_pair
    for token, token_id in tok.get_vocab(with_added_tokens=True).items():
        assert hf.token_to_id(enc, token) == token_id
    for token in ["Ġ" * 40, "not a token", "héllo ☃", "<|nope|>", ""]:
        assert hf.token_to_id(enc, token) is None and tok.token_to_id(token) is None
    for token_id in range(enc.n_vocab + 3):
        assert hf.id_to_token(enc, token_id) == tok.id_to_token(token_id)
    assert hf.id_to_token(enc, -1) is None


def test_vocab_matches_hf(trained_pair, exported):
    enc, tok = trained_pair
    assert hf.get_vocab(enc) == tok.get_vocab(with_added_tokens=True)
    assert hf.get_vocab(enc, with_added_tokens=False) == tok.get_vocab(with_added_tokens=False)
    assert hf.get_vocab_size(enc) == tok.get_vocab_size() == 1000
    assert hf.get_vocab_size(enc, with_added_tokens=False) == tok.get_vocab_size(with_added_tokens=False) == 998
    enc, _doc, tok = exported  # pretrained too (their specials sit in the model's vocabulary)
    assert hf.get_vocab(enc) == tok.get_vocab(with_added_tokens=True)
    assert hf.get_vocab_size(enc) == tok.get_vocab_size()


def test_encode_with_offsets_matches_hf(trained_pair, sample):
    enc, tok = trained_pair
    texts = ["héllo wörld 😀😀 中文字 <|endoftext|> x<|fim_middle|>", "👩‍👩‍👧 family"] + ADVERSARIAL[:400]
    texts += _with_specials(ADVERSARIAL, SPECIALS)[:100] + sample[:5]
    for text in texts:
        ours = hf.encode_with_offsets(enc, text, allowed_special="all")
        theirs = tok.encode(text, add_special_tokens=False)
        assert ours.ids == theirs.ids
        assert ours.tokens == theirs.tokens
        assert ours.offsets == theirs.offsets, text
        assert all(0 <= a < b <= len(text) for a, b in ours.offsets)
        assert [a for a, _ in ours.offsets] == sorted(a for a, _ in ours.offsets)


def test_encode_with_offsets_follows_encode_rules(trained_pair):
    enc, _tok = trained_pair
    with pytest.raises(ValueError):
        hf.encode_with_offsets(enc, "x <|endoftext|>")  # disallowed by default, as encode
    plain = hf.encode_with_offsets(enc, "x <|endoftext|>", disallowed_special=())
    assert plain.ids == enc.encode_ordinary("x <|endoftext|>") and "<|endoftext|>" not in plain.tokens
    # Surrogates: a valid pair (two code units) is one character; a lone one becomes U+FFFD.
    pair = hf.encode_with_offsets(enc, "a\ud83d\ude00b")
    assert pair.ids == enc.encode("a😀b") and pair.offsets[0] == (0, 1) and pair.offsets[-1] == (3, 4)
    assert {span for span in pair.offsets[1:-1]} == {(1, 3)}
    lone = hf.encode_with_offsets(enc, "a\ud800b")
    assert lone.ids == enc.encode("a\ufffdb") and lone.offsets[0] == (0, 1) and lone.offsets[-1] == (2, 3)


# --------------------------------------------------------------------------------------------
# transformers
# --------------------------------------------------------------------------------------------


def test_to_transformers(trained, tmp_path):
    transformers = pytest.importorskip("transformers")
    fast = hf.to_transformers(trained, eos_token="<|endoftext|>")
    assert isinstance(fast, transformers.PreTrainedTokenizerFast)
    text = "hello  world <|endoftext|> 😀 'S 123456"
    ids = fast(text)["input_ids"]
    assert ids == trained.encode(text, allowed_special="all")
    assert fast.decode(ids) == text and fast.eos_token_id == trained._special_tokens["<|endoftext|>"]
    fast.save_pretrained(str(tmp_path))
    assert hf.from_tokenizer_json(tmp_path).encode(text, allowed_special="all") == ids
    assert hf.from_tokenizer_json(fast).encode(text, allowed_special="all") == ids


def test_to_transformers_without_transformers(trained, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match="pip install transformers"):
        hf.to_transformers(trained)
