//! Hand-written pre-tokenizers for the standard split patterns (GPT-2/r50k, cl100k,
//! nanochat's variant of cl100k, o200k). Each reproduces its regex's leftmost-first
//! matches exactly — alternatives in order, the backtracking of optional prefixes and of
//! `\s*`, possessive quantifiers, case-insensitive contractions (`ſ` folds to `s`), and the
//! `\s+(?!\S)` lookahead — in one forward pass with no regex machinery. Character classes
//! come from the regex engines' own Unicode tables (`char_classes.rs`). Differential tests
//! against fancy-regex (here and in the Python suite) check the equivalence. The cl100k
//! family and o200k split ASCII text and two-byte letters a window of 64 bytes at a time
//! (`bitwise_split.rs`) and fall back to the character-by-character scan here elsewhere.

use crate::bitwise_split;
use crate::char_classes::{CharClasses, LETTER, LOWERISH, NEWLINE, NUMBER, SPACE, UPPERISH};
use crate::prefetch::prefetch;

/// Which pattern a scanner reproduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+` and its
    /// possessive rewrite.
    R50k,
    /// cl100k's shape: case-insensitive contractions, letters with one optional leading
    /// non-letter, digits in groups of at most `max_digits`, punctuation runs with trailing
    /// newlines, whitespace ending in a newline, then the whitespace tail. With
    /// `run_to_end_first`, a whitespace run reaching the end of the text is one piece
    /// (`\s++$` placed before `\s*[\r\n]`, as in tiktoken ≥ 0.10's cl100k pattern).
    Cl100k { max_digits: usize, run_to_end_first: bool },
    /// o200k's shape: words split by letter case with optional contractions.
    O200k,
}

/// The standard patterns a scanner reproduces, as their exact source strings.
const KNOWN: &[(&str, Family)] = &[
    (r"'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s", Family::R50k),
    (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+", Family::R50k),
    (
        r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s",
        Family::Cl100k { max_digits: 3, run_to_end_first: true },
    ),
    (
        r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
        Family::Cl100k { max_digits: 3, run_to_end_first: false },
    ),
    (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        Family::Cl100k { max_digits: 3, run_to_end_first: false },
    ),
    (
        r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
        Family::Cl100k { max_digits: 2, run_to_end_first: false },
    ),
    (
        concat!(
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|",
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|",
            r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
        ),
        Family::O200k,
    ),
];

/// The letters of the contractions fold case as the regex engines fold them: ASCII case
/// pairs, plus `ſ` (U+017F) for `s` (checked against regex-syntax in the tests).
#[inline(always)]
fn folds_to(c: u32, lower: u8) -> bool {
    c == lower as u32 || c == lower.to_ascii_uppercase() as u32 || (lower == b's' && c == 0x17F)
}

/// An ASCII character that `[^\r\n\p{L}\p{N}]` matches: the optional one-character
/// prefix of a word.
#[inline(always)]
fn ascii_prefix(x: u8) -> bool {
    x < 0x80 && !x.is_ascii_alphanumeric() && x != b'\r' && x != b'\n'
}

/// End of the run from `i` of ASCII bytes `x` with `x | fold` in `lo..=hi` (`fold` 0x20
/// makes letters lower case), eight bytes per step: per byte, adding `0x80 - lo` to the
/// 7-bit value sets its high bit exactly when it is at least `lo`, and adding `0x7F - hi`
/// exactly when it is above `hi` (no sum carries into the next byte).
#[inline(always)]
fn ascii_run(b: &[u8], mut i: usize, lo: u8, hi: u8, fold: u8) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = b.get(i..i + 8) {
        let w = u64::from_le_bytes(chunk.try_into().unwrap());
        let x = (w | (ONES * fold as u64)) & !HIGH;
        let at_least_lo = x.wrapping_add(ONES * (0x80 - lo) as u64);
        let above_hi = x.wrapping_add(ONES * (0x7F - hi) as u64);
        let inside = at_least_lo & !above_hi & !w & HIGH;
        if inside != HIGH {
            return i + ((!inside & HIGH).trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < b.len() && b[i] < 0x80 && (lo..=hi).contains(&(b[i] | fold)) {
        i += 1;
    }
    i
}

/// A scanner for one of the standard patterns.
pub struct Scanner {
    family: Family,
    classes: &'static CharClasses,
    ascii: [u8; 128],
}

impl Scanner {
    /// The exact pattern strings that have a scanner.
    pub fn known_patterns() -> impl Iterator<Item = &'static str> {
        KNOWN.iter().map(|&(p, _)| p)
    }

    /// The scanner reproducing `pattern`, if it is one of the standard patterns.
    pub fn for_pattern(pattern: &str) -> Option<Self> {
        KNOWN.iter().find(|(p, _)| *p == pattern).map(|&(_, family)| Self::new(family))
    }

    pub fn new(family: Family) -> Self {
        let classes = CharClasses::get();
        let mut ascii = [0u8; 128];
        for (c, slot) in ascii.iter_mut().enumerate() {
            *slot = classes.of(c as u32);
        }
        Self { family, classes, ascii }
    }

    pub fn family(&self) -> Family {
        self.family
    }

    /// Calls `f` with each piece of `text`, in order.
    #[inline]
    pub fn for_each_piece<'t, E>(&self, text: &'t str, mut f: impl FnMut(&'t str) -> Result<(), E>) -> Result<(), E> {
        for (i, end) in self.spans(text) {
            f(&text[i..end])?;
        }
        Ok(())
    }

    /// The pieces of `text` as an iterator of `(start, end)` byte offsets. The encoder
    /// loops over it directly, so that its per-piece work is inlined into the loop.
    #[inline(always)]
    pub fn spans<'s, 't>(&'s self, text: &'t str) -> Spans<'s, 't> {
        Spans { scanner: self, b: text.as_bytes(), i: 0, ends: 0, base: 0 }
    }

    /// `(flags, code point, byte length)` of the character at `i`.
    #[inline(always)]
    fn at(&self, b: &[u8], i: usize) -> (u8, u32, usize) {
        let x = b[i];
        if x < 0x80 {
            return (self.ascii[x as usize], x as u32, 1);
        }
        let (c, len) = if x < 0xE0 {
            (((x & 0x1F) as u32) << 6 | (b[i + 1] & 0x3F) as u32, 2)
        } else if x < 0xF0 {
            (((x & 0x0F) as u32) << 12 | ((b[i + 1] & 0x3F) as u32) << 6 | (b[i + 2] & 0x3F) as u32, 3)
        } else {
            (
                ((x & 0x07) as u32) << 18
                    | ((b[i + 1] & 0x3F) as u32) << 12
                    | ((b[i + 2] & 0x3F) as u32) << 6
                    | (b[i + 3] & 0x3F) as u32,
                4,
            )
        };
        (self.classes.of(c), c, len)
    }

    /// End of the run of characters from `i` having any flag of `mask`.
    #[inline(always)]
    fn run(&self, b: &[u8], i: usize, mask: u8) -> usize {
        // Letter runs, the most common, first take their ASCII stretch eight bytes at a time.
        let mut i = match mask {
            LETTER => ascii_run(b, i, b'a', b'z', 0x20),
            LOWERISH => ascii_run(b, i, b'a', b'z', 0),
            UPPERISH => ascii_run(b, i, b'A', b'Z', 0),
            _ => i,
        };
        // Those three classes have no ASCII members outside the ranges just scanned, so an
        // ASCII byte there ends the run.
        if matches!(mask, LETTER | LOWERISH | UPPERISH) && b.get(i).is_none_or(|&x| x < 0x80) {
            return i;
        }
        while i < b.len() {
            let (f, _, l) = self.at(b, i);
            if f & mask == 0 {
                break;
            }
            i += l;
        }
        i
    }

    /// End of the run of characters from `i` having no flag of `mask`.
    #[inline(always)]
    fn run_without(&self, b: &[u8], mut i: usize, mask: u8) -> usize {
        while i < b.len() {
            let (f, _, l) = self.at(b, i);
            if f & mask != 0 {
                break;
            }
            i += l;
        }
        i
    }

    #[inline(always)]
    fn flags_at(&self, b: &[u8], i: usize) -> u8 {
        if i < b.len() { self.at(b, i).0 } else { 0 }
    }

    /// `\p{N}{1,max}` given that one digit ends at `j`: up to `max - 1` more digits.
    #[inline(always)]
    fn digits(&self, b: &[u8], mut j: usize, max: usize) -> usize {
        for _ in 1..max {
            if j >= b.len() {
                break;
            }
            let (f, _, l) = self.at(b, j);
            if f & NUMBER == 0 {
                break;
            }
            j += l;
        }
        j
    }

    /// ` ?[^\s\p{L}\p{N}]+` at `i` (whose character is `c`), then any bytes `trailing`
    /// accepts (newlines, and for o200k slashes); `None` if it does not match.
    #[inline(always)]
    fn symbols(&self, b: &[u8], i: usize, c: u32, trailing: impl Fn(u8) -> bool) -> Option<usize> {
        const OTHER: u8 = SPACE | LETTER | NUMBER;
        let start = if c == ' ' as u32 { i + 1 } else { i };
        if start >= b.len() {
            return None;
        }
        let (fs, _, ls) = self.at(b, start);
        if fs & OTHER != 0 {
            return None;
        }
        let mut j = self.run_without(b, start + ls, OTHER);
        while j < b.len() && trailing(b[j]) {
            j += 1;
        }
        Some(j)
    }

    /// The whitespace tail `\s+(?!\S)|\s+` for the run `[i, end)` of whitespace: the whole
    /// run at the end of the text, else all but its last character when it has two or more.
    #[inline(always)]
    fn space_tail(b: &[u8], i: usize, first_len: usize, end: usize) -> usize {
        if end == b.len() || i + first_len == end {
            return end;
        }
        let mut last = end - 1;
        while b[last] & 0xC0 == 0x80 {
            last -= 1;
        }
        last
    }

    /// One past the last `\r` or `\n` in `[i, end)`, if any (`\s*[\r\n]` and `\s*[\r\n]+`).
    #[inline(always)]
    fn after_last_newline(b: &[u8], i: usize, end: usize) -> Option<usize> {
        b[i..end].iter().rposition(|&x| x == b'\n' || x == b'\r').map(|p| i + p + 1)
    }

    fn r50k(&self, b: &[u8], i: usize) -> usize {
        let (f, c, l) = self.at(b, i);
        if c == '\'' as u32 && i + 1 < b.len() {
            match b[i + 1] {
                b's' | b'd' | b'm' | b't' => return i + 2,
                b'l' if b.get(i + 2) == Some(&b'l') => return i + 3,
                b'v' | b'r' if b.get(i + 2) == Some(&b'e') => return i + 3,
                _ => {}
            }
        }
        let after_space = if c == ' ' as u32 { self.flags_at(b, i + 1) } else { 0 };
        if f & LETTER != 0 {
            return self.run(b, i + l, LETTER);
        }
        if after_space & LETTER != 0 {
            return self.run(b, i + 1, LETTER);
        }
        if f & NUMBER != 0 {
            return self.run(b, i + l, NUMBER);
        }
        if after_space & NUMBER != 0 {
            return self.run(b, i + 1, NUMBER);
        }
        const OTHER: u8 = SPACE | LETTER | NUMBER;
        if f & OTHER == 0 {
            return self.run_without(b, i + l, OTHER);
        }
        if c == ' ' as u32 && i + 1 < b.len() && after_space & OTHER == 0 {
            return self.run_without(b, i + 1, OTHER);
        }
        let end = self.run(b, i, SPACE);
        Self::space_tail(b, i, l, end)
    }

    #[inline(always)]
    fn cl100k(&self, b: &[u8], i: usize, max_digits: usize, run_to_end_first: bool) -> usize {
        let n = b.len();
        let (f, c, l) = self.at(b, i);
        // '(?i:[sdmt]|ll|ve|re)
        if c == '\'' as u32 && i + 1 < n {
            let (_, c1, l1) = self.at(b, i + 1);
            if folds_to(c1, b's') || folds_to(c1, b'd') || folds_to(c1, b'm') || folds_to(c1, b't') {
                return i + 1 + l1;
            }
            if i + 1 + l1 < n {
                let (_, c2, l2) = self.at(b, i + 1 + l1);
                if (folds_to(c1, b'l') && folds_to(c2, b'l'))
                    || ((folds_to(c1, b'v') || folds_to(c1, b'r')) && folds_to(c2, b'e'))
                {
                    return i + 1 + l1 + l2;
                }
            }
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if f & LETTER != 0 {
            return self.run(b, i + l, LETTER);
        }
        if f & (NEWLINE | LETTER | NUMBER) == 0 && self.flags_at(b, i + l) & LETTER != 0 {
            return self.run(b, i + l, LETTER);
        }
        // \p{N}{1,max_digits}
        if f & NUMBER != 0 {
            return self.digits(b, i + l, max_digits);
        }
        //  ?[^\s\p{L}\p{N}]+[\r\n]*
        if let Some(e) = self.symbols(b, i, c, |x| x == b'\r' || x == b'\n') {
            return e;
        }
        // Whitespace: [\s++$] \s*[\r\n] | \s+(?!\S) | \s
        let end = self.run(b, i, SPACE);
        if run_to_end_first && end == n {
            return n;
        }
        if let Some(e) = Self::after_last_newline(b, i, end) {
            return e;
        }
        Self::space_tail(b, i, l, end)
    }

    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)?` at `j`.
    #[inline(always)]
    fn o200k_contraction(&self, b: &[u8], j: usize) -> usize {
        let n = b.len();
        if j + 1 >= n || b[j] != b'\'' {
            return j;
        }
        let (_, c1, l1) = self.at(b, j + 1);
        if folds_to(c1, b's') || folds_to(c1, b't') || folds_to(c1, b'm') || folds_to(c1, b'd') {
            return j + 1 + l1;
        }
        if j + 1 + l1 < n {
            let (_, c2, l2) = self.at(b, j + 1 + l1);
            if ((folds_to(c1, b'r') || folds_to(c1, b'v')) && folds_to(c2, b'e')) || (folds_to(c1, b'l') && folds_to(c2, b'l')) {
                return j + 1 + l1 + l2;
            }
        }
        j
    }

    /// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+` at `s`, with the
    /// backtracking of the first run: the match ends after the last lower-ish character
    /// that the upper-ish run can give back to the lower-ish one. When there is no match,
    /// `Err` holds the end of the upper-ish run (the next alternative starts with it).
    fn upper_then_lower(&self, b: &[u8], s: usize) -> Result<usize, usize> {
        let u_end = self.run(b, s, UPPERISH);
        if self.flags_at(b, u_end) & LOWERISH != 0 {
            return Ok(self.run(b, u_end, LOWERISH));
        }
        // An ASCII upper-case letter is never lower-ish: nothing to give back.
        if b[s..u_end].is_ascii() {
            return Err(u_end);
        }
        let mut j = u_end;
        while j > s {
            j -= 1;
            while b[j] & 0xC0 == 0x80 {
                j -= 1;
            }
            let (f, _, l) = self.at(b, j);
            if f & LOWERISH != 0 {
                return Ok(j + l);
            }
        }
        Err(u_end)
    }

    #[inline(always)]
    fn o200k(&self, b: &[u8], i: usize) -> usize {
        const LETTERISH: u8 = UPPERISH | LOWERISH;
        // The commonest start, an ASCII lower-case letter: no prefix, no upper-case run, so
        // the first alternative is the lower-case run.
        if b[i].is_ascii_lowercase() {
            return self.o200k_contraction(b, self.run(b, i + 1, LOWERISH));
        }
        // Next commonest: an ASCII prefix (a space, punctuation) then a lower-case letter.
        if ascii_prefix(b[i]) && b.get(i + 1).is_some_and(u8::is_ascii_lowercase) {
            return self.o200k_contraction(b, self.run(b, i + 2, LOWERISH));
        }
        // Then a capitalised or all-capitals ASCII word, alone or after such a prefix. When
        // the capitals are followed by an ASCII byte, no lower-case letter can be given back
        // to the first alternative: it takes the lower-case run if one follows, else the
        // second alternative takes the capitals alone. A non-ASCII character after them
        // takes the general path.
        let caps = if b[i].is_ascii_uppercase() {
            Some(i)
        } else if ascii_prefix(b[i]) && b.get(i + 1).is_some_and(u8::is_ascii_uppercase) {
            Some(i + 1)
        } else {
            None
        };
        if let Some(caps) = caps {
            let u_end = ascii_run(b, caps + 1, b'A', b'Z', 0);
            match b.get(u_end) {
                Some(x) if x.is_ascii_lowercase() => return self.o200k_contraction(b, self.run(b, u_end + 1, LOWERISH)),
                Some(&x) if x >= 0x80 => {}
                _ => return self.o200k_contraction(b, u_end),
            }
        }
        let (f, c, l) = self.at(b, i);
        let prefixable = f & (NEWLINE | LETTER | NUMBER) == 0;
        // The two letter alternatives need a letter or mark here, or after a prefix.
        let letters_ahead = f & LETTERISH != 0 || (prefixable && self.flags_at(b, i + l) & LETTERISH != 0);
        if letters_ahead {
            if let Some(e) = self.o200k_words(b, i, l, prefixable) {
                return e;
            }
        }
        // \p{N}{1,3}
        if f & NUMBER != 0 {
            return self.digits(b, i + l, 3);
        }
        //  ?[^\s\p{L}\p{N}]+[\r\n/]*
        if let Some(e) = self.symbols(b, i, c, |x| matches!(x, b'\r' | b'\n' | b'/')) {
            return e;
        }
        // \s*[\r\n]+ | \s+(?!\S) | \s+
        let end = self.run(b, i, SPACE);
        if let Some(e) = Self::after_last_newline(b, i, end) {
            return e;
        }
        Self::space_tail(b, i, l, end)
    }

    /// o200k's two letter alternatives at `i` (whose character is `l` bytes long), in
    /// order, each with then without its optional prefix.
    #[inline(always)]
    fn o200k_words(&self, b: &[u8], i: usize, l: usize, prefixable: bool) -> Option<usize> {
        let n = b.len();
        // [^\r\n\p{L}\p{N}]?[upper]*[lower]+(contraction)?  — with, then without, the prefix
        let with_prefix = (prefixable && i + l < n).then(|| self.upper_then_lower(b, i + l));
        if let Some(Ok(e)) = with_prefix {
            return Some(self.o200k_contraction(b, e));
        }
        let without = self.upper_then_lower(b, i);
        if let Ok(e) = without {
            return Some(self.o200k_contraction(b, e));
        }
        // [^\r\n\p{L}\p{N}]?[upper]+[lower]*(contraction)?  — the upper runs were found above
        if let Some(Err(u)) = with_prefix {
            if u > i + l {
                return Some(self.o200k_contraction(b, self.run(b, u, LOWERISH)));
            }
        }
        match without {
            Err(u) if u > i => Some(self.o200k_contraction(b, self.run(b, u, LOWERISH))),
            _ => None,
        }
    }
}

/// What pads the copy of a text's last bytes that a window reads: no UTF-8 byte, so no
/// character a window classifies (it ends the window's prefix as a character of three
/// bytes or more would).
const TAIL_PAD: u8 = 0xFF;

/// How far ahead of each new window the text is prefetched. The processor's own
/// prefetcher follows a stream only within a 4 KiB page, and starts again at each new page
/// with a few misses; asking for the line 1 KiB ahead crosses into the next page early.
/// Rust harness, pinned, 4 ABBA groups (o200k / cl100k): long stream 1.040× / 1.009×,
/// short run 1.020× / 1.040×, warm pass 1.020× / 1.034×, 1 MB without whitespace 1.018× /
/// 1.030×; splitting alone 1.01-1.05×. From Python less, about 1% (16 rounds: 1.007-1.012×
/// in both regimes and encodings), where a non-ASCII text is read from the buffer it was
/// just converted into. 512 bytes ahead gained about half as much, 2 KiB as much or a
/// little less, 4 KiB less (PERFORMANCE.md, "Splitting text into pieces").
const PREFETCH_AHEAD: usize = 1024;

/// The pieces of a text (see [`Scanner::spans`]). The cl100k family and o200k take whole
/// windows of ASCII text and two-byte letters at a time (`bitwise_split.rs`; a text's last
/// 16-63 bytes from a copy padded with `TAIL_PAD`), and one piece at a time elsewhere
/// (other non-ASCII text, fewer than 16 bytes left, runs longer than a window); r50k one
/// piece at a time.
pub struct Spans<'s, 't> {
    scanner: &'s Scanner,
    b: &'t [u8],
    /// Start of the next piece.
    i: usize,
    /// Ends of the pieces still to come from the last window, as bits from `base`.
    ends: u64,
    base: usize,
}

impl Spans<'_, '_> {
    /// Whether every piece has been handed out.
    #[inline(always)]
    pub fn is_done(&self) -> bool {
        self.i >= self.b.len()
    }

    /// The end of the next piece, from a new window of the text at the next piece's start
    /// when `starts` finds whole pieces in it (`None` otherwise). A window is not tried
    /// when a character of three or four bytes, which ends it, comes within its first
    /// sixteen bytes.
    #[inline(always)]
    fn window(&mut self, starts: impl FnOnce(&[u8], usize) -> Option<u64>) -> Option<usize> {
        let (b, i) = (self.b, self.i);
        // (past the text's end the address is only a hint: a prefetch never faults)
        prefetch(b.as_ptr().wrapping_add(i + PREFETCH_AHEAD));
        let padded: [u8; 64];
        let (w, text, at) = match b.get(i..i + 64) {
            Some(w) => (w, b, i),
            None => {
                // The text's last 16 to 63 bytes: a copy padded with bytes that end a
                // window, as a character of three bytes or more does mid-text. The last
                // run before them is left to the per-character path, as it is there.
                let tail = b.get(i..).filter(|t| t.len() >= 16)?;
                let mut copy = [TAIL_PAD; 64];
                copy[..tail.len()].copy_from_slice(tail);
                padded = copy;
                (&padded[..], &padded[..], 0)
            }
        };
        let (x, y) = (u64::from_le_bytes(w[..8].try_into().unwrap()), u64::from_le_bytes(w[8..16].try_into().unwrap()));
        // A byte of 0xE0 or more leads such a character (bits 7, 6 and 5 set).
        let three = |v: u64| v & (v << 1) & (v << 2) & 0x8080_8080_8080_8080;
        if three(x) | three(y) != 0 {
            return None;
        }
        let starts = starts(text, at)?;
        (self.ends, self.base) = (starts & (starts - 1), i);
        Some(self.pop())
    }

    /// The end of the next piece of the last window.
    #[inline(always)]
    fn pop(&mut self) -> usize {
        let e = self.base + self.ends.trailing_zeros() as usize;
        self.ends &= self.ends - 1;
        e
    }
}

impl Iterator for Spans<'_, '_> {
    type Item = (usize, usize);

    #[inline(always)]
    fn next(&mut self) -> Option<(usize, usize)> {
        let (b, i, scanner) = (self.b, self.i, self.scanner);
        if i >= b.len() {
            return None;
        }
        let end = if self.ends != 0 {
            self.pop()
        } else {
            match scanner.family {
                Family::Cl100k { max_digits, run_to_end_first } => self
                    .window(|b, i| bitwise_split::cl100k_starts(b, i, max_digits as u32))
                    .unwrap_or_else(|| scanner.cl100k(b, i, max_digits, run_to_end_first)),
                Family::O200k => self.window(bitwise_split::o200k_starts).unwrap_or_else(|| scanner.o200k(b, i)),
                Family::R50k => scanner.r50k(b, i),
            }
        };
        debug_assert!(end > i && std::str::from_utf8(&b[i..end]).is_ok());
        self.i = end;
        Some((i, end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::char_classes::case_variants;

    #[test]
    fn ascii_runs_agree_with_the_class_table() {
        // Every ASCII byte, at every position of an 8-byte word and in the tail loop, and
        // a non-ASCII byte: the fast run stops exactly where the per-character run stops.
        let scanner = Scanner::new(Family::O200k);
        let mut bytes: Vec<u8> = (0u8..128).collect();
        bytes.push(0xC3);
        for mask in [LETTER, LOWERISH, UPPERISH] {
            for &stop in &bytes {
                for len in 0..20 {
                    for fill in [b'a', b'Q'] {
                        let mut text = vec![fill; len];
                        text.push(stop);
                        if stop == 0xC3 {
                            text.push(0xA9); // "é"
                        }
                        text.extend_from_slice(b"zz");
                        let fast = scanner.run(&text, 0, mask);
                        let mut slow = 0;
                        while slow < text.len() {
                            let (f, _, l) = scanner.at(&text, slow);
                            if f & mask == 0 {
                                break;
                            }
                            slow += l;
                        }
                        assert_eq!(fast, slow, "mask {mask:#x}, {len} x {fill:?} then {stop:#x}");
                    }
                }
            }
        }
    }

    #[test]
    fn contraction_letters_fold_as_the_regex_engines_fold() {
        for letter in "sdmtlvre".chars() {
            for c in case_variants(letter) {
                assert!(folds_to(c as u32, letter as u8), "{c:?} should fold to {letter}");
            }
            for c in 0..0x3000u32 {
                if folds_to(c, letter as u8) {
                    assert!(case_variants(letter).contains(&char::from_u32(c).unwrap()));
                }
            }
        }
    }

    #[test]
    fn every_known_pattern_has_a_scanner() {
        for (p, fam) in KNOWN {
            assert_eq!(Scanner::for_pattern(p).map(|s| s.family()), Some(*fam));
        }
        assert!(Scanner::for_pattern(r"\w+").is_none());
    }
}
