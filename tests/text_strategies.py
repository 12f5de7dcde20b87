"""Hypothesis strategies and hand-picked adversarial inputs shared by the parity tests."""

from __future__ import annotations

from hypothesis import strategies as st

# Every Unicode general category, surrogates (Cs) and unassigned (Cn) included.
any_char = st.characters(exclude_categories=())
# Only characters that are valid in UTF-8 (no lone surrogates).
valid_char = st.characters(codec="utf-8")

# Fragments chosen to poke at the pre-tokenisation regexes of r50k/p50k/cl100k/o200k.
FRAGMENTS = [
    # whitespace, alone and in runs, incl. the ones the patterns single out
    " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r", "\r\n", "\r\n\r\n", "\n\r", " \n", "\t\n",
    " \r\n", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u1680", "\u2000", "\u2009", "\u200a",
    "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\u200b", "\ufeff",
    # digits and numbers of other scripts
    "0", "7", "12", "123", "1234", "12345", "٣", "١٢٣٤", "߃", "०१२", "𝟘𝟙", "Ⅻ", "²", "½", "①",
    # letters: cases, titlecase, modifiers, other letters
    "a", "Z", "hello", "HELLO", "Hello", "hELLO", "x", "ǅ", "ǈ", "ʰ", "ª", "ß", "İ", "ı", "Ω",
    "ω", "Σ", "ς", "ﬁ", "ŉ", "\U0001d400", "\U0001d41a",
    # contractions, both cases, and case-folding look-alikes
    "'", "''", "'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'VE", "'m", "'M", "'ll",
    "'LL", "'Ll", "'d", "'D", "\u2019s", "\u2019", "ſ", "'ſ", "\u212a", "'\u212a", "I", "DON",
    "IT", "WE", "you",
    # emoji, ZWJ sequences, flags, modifiers, variation selectors
    "😀", "👍🏽", "👩\u200d💻", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "🇺🇸", "🇯🇵", "❤️", "\ufe0f",
    "\u200d", "\U000e0067",
    # CJK, Hangul, Thai, Arabic, Hebrew, Devanagari, Cyrillic, Greek
    "中", "中文", "日本語", "ひらがな", "カタカナ", "한국어", "ก่", "ภาษาไทย", "مرحبا", "שלום", "हिन्दी",
    "Привет", "Ελληνικά",
    # combining marks (Mn, Mc, Me)
    "e\u0301", "\u0301", "\u0301\u0301\u0301", "a\u0308\u0304", "\u20dd", "\u0903", "o\u0338",
    # punctuation and symbols
    "!", "?", "?!", ".", "...", ",", ";", ":", "-", "--", "—", "/", "//", "\\", "{", "}", "(",
    ")", "[", "]", "#", "@", "$", "%", "^", "&", "*", "_", "__", "+", "=", "<", ">", "|", "~",
    "`", '"', "«»", "¿", "€", "©", "™", "→", "∑", "\u00ad",
    # special-token text and look-alikes
    "<|endoftext|>", "<|endofprompt|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
    "<|", "|>", "<|endoftext", "endoftext|>", "<|endoftext|", "<<|endoftext|>",
    "<|endoftext|>>", "<|im_start|>", "<|startoftext|>", "<|return|>",
    # control characters, private use, non-characters
    "\x00", "\x01", "\x1b", "\x7f", "\x80", "\x9f", "\ue000", "\U000f0000", "\uffff", "\ufffd",
    "\U0010ffff",
]

LONE_SURROGATES = ["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00"]


def _joined(pieces):
    return "".join(pieces)


def _fragment_text(char_strategy, fragments, max_pieces):
    piece = st.one_of(
        st.sampled_from(fragments),
        st.sampled_from(fragments).flatmap(
            lambda f: st.integers(1, 40).map(lambda n, f=f: f * n)
        ),
        st.text(char_strategy, max_size=4),
    )
    return st.lists(piece, max_size=max_pieces).map(_joined)


# Arbitrary Unicode, including lone surrogates.
any_text = st.text(any_char, max_size=300)
# Arbitrary Unicode that is valid UTF-8.
valid_text = st.text(valid_char, max_size=300)
# Adversarial mixes of the fragments above (and runs of them), with some random characters.
fragment_text = _fragment_text(any_char, FRAGMENTS + LONE_SURROGATES, 40)
fragment_text_valid = _fragment_text(valid_char, FRAGMENTS, 40)


def has_surrogate(s: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in s)


def tiktoken_fixup(s: str) -> str:
    """What tiktoken does to a str containing surrogates before encoding it."""
    return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


# Hand-picked inputs: (id, text)
_N = 100_000
ADVERSARIAL = [
    ("empty", ""),
    ("run_letter_a", "a" * _N),
    ("run_letter_upper", "A" * _N),
    ("run_letters_ab", "ab" * (_N // 2)),
    ("run_spaces", " " * _N),
    ("run_spaces_then_word", " " * _N + "word"),
    ("word_then_run_spaces", "word" + " " * _N),
    ("run_tabs", "\t" * _N),
    ("run_digits", "1" * _N),
    ("run_digits_mixed", "1234567890" * (_N // 10)),
    ("run_newlines", "\n" * _N),
    ("run_crlf", "\r\n" * (_N // 2)),
    ("run_cr", "\r" * _N),
    ("run_mixed_whitespace", " \t\n\r\x0b\x0c\xa0\u3000" * (_N // 8)),
    ("run_space_newline", " \n" * (_N // 2)),
    ("run_punct", "!" * _N),
    ("run_punct_mixed", "!?.,;:-_/\\()[]{}<>" * (_N // 18)),
    ("run_punct_newlines", ".\n" * (_N // 2)),
    ("run_e_acute_combining", "e" + "\u0301" * 20_000),
    ("run_combining_only", "\u0301" * 20_000),
    ("run_cjk", "中" * 30_000),
    ("run_emoji", "😀" * 20_000),
    ("run_zwj_family", "👨\u200d👩\u200d👧\u200d👦" * 3_000),
    ("run_apostrophe_s", "'s" * 20_000),
    ("run_lt", "<" * _N),
    ("run_special_token_text", "<|endoftext|>" * 5_000),
    ("no_whitespace_mixed", ("abc123!?ÀÉ中文😀" * 5_000)),
    ("no_whitespace_word", "Supercalifragilisticexpialidocious" * 2_000),
    ("emoji", "I ❤️ 🐍 and 🦀! 👍🏽👍🏿 🇺🇸🇯🇵 🏳️\u200d🌈"),
    ("zwj_sequences", "👩\u200d💻 👨\u200d👩\u200d👧\u200d👦 👁\u200d🗨 🧑🏽\u200d🚀"),
    ("cjk", "我能吞下玻璃而不伤身体。私はガラスを食べられます。나는 유리를 먹을 수 있어요."),
    ("combining", "e\u0301 n\u0303 a\u0308\u0304 Z\u0351\u0352\u0357\u0358 o\u0338 \u0301start"),
    ("mixed_scripts", "Hello Привет Γειά 你好 مرحبا שלום नमस्ते สวัสดี 123 ١٢٣ ०१२"),
    ("contractions_upper", "I'LL DON'T 'S IT'S WE'VE THEY'RE I'M HE'D YOU'LL"),
    ("contractions_mixed", "I'll don't 'S it's We'Ve they'rE i'M he'D you'Ll 's's''s' 'S'S"),
    ("contractions_curly", "I\u2019ll don\u2019t it\u2019s"),
    ("long_s_kelvin", "'ſ 'ſt \u212aelvin 'K IT'ſ ſ'S"),
    ("lookalike_open", "<|endoftext|"),
    ("lookalike_double_close", "<|endoftext|>>"),
    ("lookalike_double_open", "<<|endoftext|>"),
    ("endofprompt", "<|endofprompt|>"),
    ("fim_prefix", "<|fim_prefix|>"),
    ("fim_all", "<|fim_prefix|>a<|fim_middle|>b<|fim_suffix|>"),
    ("lookalike_spaces", "< |endoftext| >"),
    ("lookalike_case", "<|ENDOFTEXT|>"),
    ("trailing_space", "hello world "),
    ("trailing_spaces", "hello world     "),
    ("trailing_tab", "hello\t"),
    ("trailing_newline", "hello\n"),
    ("trailing_mixed_ws", "hello \t \n \r\n  "),
    ("ws_before_newline", "hello   \nworld"),
    ("ws_before_crlf", "hello \t\r\nworld"),
    ("ws_between_newlines", "a\n   \n\t\nb"),
    ("spaces_before_word", "a     b"),
    ("spaces_before_punct", "a     !b"),
    ("spaces_before_digit", "a     1b"),
    ("newline_then_spaces", "a\n    b"),
    ("code", "def f(x):\n    return x**2  # square\n\n\tif x:\r\n\t\tpass\n"),
    ("digits_grouping", "1 12 123 1234 12345 123456 1234567 3.14159 1,000,000 0x1F 1e-9"),
    ("punct_then_newlines", "end.\n\n\nNext!\r\n\r\n?"),
    ("unicode_whitespace", "a\u00a0b\u2000c\u3000d\u2028e\u2029f\u0085g\u1680h"),
    ("control_chars", "\x00\x01\x02\x1b[0m\x7f\x80\x9f"),
    ("bom_zwsp", "\ufeffhello\u200bworld\u200d"),
    ("private_use_noncharacters", "\ue000\uf8ff\U000f0000\U0010ffff\uffff\ufffe"),
    ("replacement_char", "\ufffd\ufffd a\ufffd"),
    ("lone_surrogate_high", "a\ud800b"),
    ("lone_surrogate_low", "a\udfffb"),
    ("surrogate_pair_halves", "x\ud83d\ude00y"),
    ("surrogates_only", "\ud800\udc00\udbff"),
    ("surrogate_then_special", "\ud800<|endoftext|>"),
]
