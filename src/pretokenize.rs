//! Pre-tokenization: splitting text into pieces with the encoding's regex.
//!
//! tiktoken runs its patterns with `fancy-regex` because of the trailing-whitespace rule
//! `\s+(?!\S)` (a lookahead) and possessive quantifiers. Both are only needed for the
//! whitespace tail of the standard patterns, so for those we run an equivalent pattern
//! without them on a DFA-based engine (`regex-automata`) and re-apply the lookahead rule
//! by hand, which is several times faster. Any other pattern runs on `fancy-regex`,
//! exactly as tiktoken runs it.
//!
//! The rewrite: a pattern `P|\s+(?!\S)|\s+` behaves, at each match position, like `P`
//! if `P` matches there; else it takes the run of whitespace `w` starting there and
//! matches all of `w` if `w` ends the text, `w` minus its last character if `w` has two or
//! more characters and is followed by a non-space, else `w`. We search with `P|\s+`
//! (leftmost-first: the same positions and the same `P` matches) and shorten a
//! whitespace-only match followed by a non-space by one character when `P` does not match
//! at its start, i.e. when it came from the `\s+` branch.

use fancy_regex::Regex as FancyRegex;
use regex_automata::{meta::Regex as MetaRegex, Anchored, Input};

use crate::error::{Error, Result};
use crate::scanner::Scanner;

/// Whitespace tails that the fast path knows how to emulate; both mean the same thing.
const WHITESPACE_TAILS: &[&str] = &[r"|\s+(?!\S)|\s+", r"|\s+(?!\S)|\s"];

/// Prefixes (everything before the whitespace tail) of the standard patterns that use
/// possessive quantifiers, with the possessiveness removed. Each removal was checked by
/// hand to be a no-op for that pattern (what follows the possessive part cannot fail, or
/// cannot match what backtracking would give back; `\s++$` needs the whole run either way)
/// and is checked by differential tests against fancy-regex.
const POSSESSIVE_FREE_PREFIXES: &[(&str, &str)] = &[
    // r50k_base / p50k_base / gpt2 (tiktoken >= 0.10 form)
    (
        r"'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$",
        r"'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+$",
    ),
    // cl100k_base (tiktoken >= 0.10 form)
    (
        r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]",
        r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+$|\s*[\r\n]",
    ),
    // nanochat's GPT-4-style split (digits in groups of at most two)
    (
        r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]",
        r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]",
    ),
    // cl100k_base as published by earlier tiktoken releases
    (
        r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]",
        r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]",
    ),
];

/// Splits text into pieces with a given pattern, on the fastest engine that reproduces it
/// exactly.
pub enum Splitter {
    /// A hand-written scanner for a standard pattern (`scanner.rs`).
    Scan(Scanner),
    /// The DFA with the whitespace-lookahead rule re-applied by hand.
    Fast(FastSplitter),
    /// fancy-regex, for any other pattern.
    Fancy(FancyRegex),
}

/// The DFA-based path for patterns of the form `P|<whitespace tail>`.
pub struct FastSplitter {
    /// `P|\s+`
    search: MetaRegex,
    /// `P` alone, run anchored to tell which branch produced a whitespace match.
    prefix: MetaRegex,
}

impl Splitter {
    /// Compiles `pattern`; a pattern fancy-regex rejects is an `InvalidPattern` error.
    pub fn new(pattern: &str) -> Result<Self> {
        // A pattern with a scanner is one of the standard ones, character for character:
        // it compiles (the differential tests compile each), so its regex is not compiled
        // here (1.5-3.5 ms of every encoder's construction).
        if let Some(scanner) = Scanner::for_pattern(pattern) {
            return Ok(Splitter::Scan(scanner));
        }
        let fancy = compile_fancy(pattern)?;
        Ok(match FastSplitter::try_new(pattern) {
            Some(fast) => Splitter::Fast(fast),
            None => Splitter::Fancy(fancy),
        })
    }

    /// The DFA path, if the pattern has a whitespace tail it can emulate (for tests and
    /// benchmarks; `new` prefers a scanner when there is one).
    pub fn new_dfa(pattern: &str) -> Option<Self> {
        FastSplitter::try_new(pattern).map(Splitter::Fast)
    }

    /// Always uses fancy-regex (the reference behaviour; used by differential tests).
    pub fn new_reference(pattern: &str) -> Result<Self> {
        Ok(Splitter::Fancy(compile_fancy(pattern)?))
    }

    /// Whether the pattern runs on a scanner or the DFA (else on fancy-regex).
    pub fn is_fast(&self) -> bool {
        !matches!(self, Splitter::Fancy(_))
    }

    /// The engine in use: `"scanner"`, `"dfa"` or `"fancy-regex"`.
    pub fn engine(&self) -> &'static str {
        match self {
            Splitter::Scan(_) => "scanner",
            Splitter::Fast(_) => "dfa",
            Splitter::Fancy(_) => "fancy-regex",
        }
    }

    /// Calls `f` with each piece of `text`, in order. Empty matches are skipped.
    #[inline]
    pub fn for_each_piece<'t, F>(&self, text: &'t str, mut f: F) -> Result<()>
    where
        F: FnMut(&'t str) -> Result<()>,
    {
        match self {
            Splitter::Scan(scanner) => scanner.for_each_piece(text, f),
            Splitter::Fast(fast) => fast.for_each_piece(text, f),
            Splitter::Fancy(re) => {
                for m in re.find_iter(text) {
                    let m = m.map_err(|e| Error::RegexRuntime(e.to_string()))?;
                    if !m.as_str().is_empty() {
                        f(m.as_str())?;
                    }
                }
                Ok(())
            }
        }
    }

    /// All pieces of `text` (convenience for tests and diagnostics).
    pub fn pieces<'t>(&self, text: &'t str) -> Result<Vec<&'t str>> {
        let mut v = Vec::new();
        self.for_each_piece(text, |p| {
            v.push(p);
            Ok(())
        })?;
        Ok(v)
    }
}

fn compile_fancy(pattern: &str) -> Result<FancyRegex> {
    FancyRegex::new(pattern).map_err(|e| Error::InvalidPattern {
        pattern: pattern.to_string(),
        message: e.to_string(),
    })
}

impl FastSplitter {
    fn try_new(pattern: &str) -> Option<Self> {
        let prefix = WHITESPACE_TAILS.iter().find_map(|tail| pattern.strip_suffix(tail))?;
        let prefix = POSSESSIVE_FREE_PREFIXES
            .iter()
            .find(|(p, _)| *p == prefix)
            .map_or(prefix, |(_, free)| free);
        // A possessive quantifier (`x?+`, `x++`, `x{1,3}+`), which fancy-regex honours,
        // is accepted by regex-syntax too, but as a repetition of a repetition: `x?+` as
        // `(x?)+`, that is `x*`, and `\p{N}{1,3}+` as `\p{N}+`, which match other text. And
        // a bare flag directive such as `(?U)` holds to the end of the whole pattern, tail
        // included, where the DFA's search scopes it to `P`. A prefix with either (other
        // than the standard prefixes above, rewritten without their possessives) is left
        // to fancy-regex.
        if splits_otherwise_on_the_dfa(prefix) {
            return None;
        }
        let prefix_re = MetaRegex::new(prefix).ok()?;
        let search = MetaRegex::new(&format!(r"(?:{prefix})|\s+")).ok()?;
        // A pattern that can match the empty string is left to fancy-regex.
        if search.is_match("") || prefix_re.is_match("") {
            return None;
        }
        Some(FastSplitter { search, prefix: prefix_re })
    }

    #[inline]
    fn for_each_piece<'t, F>(&self, text: &'t str, mut f: F) -> Result<()>
    where
        F: FnMut(&'t str) -> Result<()>,
    {
        let bytes = text.as_bytes();
        let mut anchored = Input::new(text).anchored(Anchored::Yes);
        let mut pos = 0;
        while pos < text.len() {
            // The standard patterns match at every position, so the next match almost always
            // starts where the last one ended: an anchored search needs only a forward scan.
            anchored.set_start(pos);
            let m = match self.search.find(anchored.clone()) {
                Some(m) => m,
                None => match self.search.find(Input::new(text).range(pos..)) {
                    Some(m) => m,
                    None => break,
                },
            };
            let (start, mut end) = (m.start(), m.end());
            if end < text.len() && is_whitespace_run(bytes, start, end) && !starts_with_whitespace(text, end) {
                if let Some(last) = last_char_start(text, start, end) {
                    // Two or more characters: keep the last one for the next piece, unless
                    // this match came from `P` rather than from the whitespace tail.
                    let anchored = Input::new(text).range(start..).anchored(Anchored::Yes);
                    if self.prefix.find(anchored).is_none() {
                        end = last;
                    }
                }
            }
            f(&text[start..end])?;
            pos = end;
        }
        Ok(())
    }
}

/// Whether the prefix `pattern`, searched as `(?:pattern)|\s+` by the DFA, could split
/// otherwise than the whole pattern does on fancy-regex: it has a quantifier applied
/// straight to another (`a++`, `a?+`, `a{1,3}+`, not `(a+)+`), which is how a possessive
/// quantifier parses in regex-syntax, or a bare flag directive (`(?U)`, not `(?U:...)`),
/// which in the whole pattern holds for the whitespace tail too. A pattern regex-syntax
/// cannot parse has neither as far as this goes (compiling it fails anyway).
fn splits_otherwise_on_the_dfa(pattern: &str) -> bool {
    use regex_syntax::ast::Ast;
    fn otherwise(ast: &Ast) -> bool {
        match ast {
            Ast::Repetition(r) => matches!(*r.ast, Ast::Repetition(_)) || otherwise(&r.ast),
            Ast::Flags(_) => true,
            Ast::Group(g) => otherwise(&g.ast),
            Ast::Alternation(a) => a.asts.iter().any(otherwise),
            Ast::Concat(c) => c.asts.iter().any(otherwise),
            _ => false,
        }
    }
    regex_syntax::ast::parse::Parser::new().parse(pattern).is_ok_and(|ast| otherwise(&ast))
}

/// Whether `text[start..end]` is entirely whitespace (Unicode `White_Space`, as `\s`).
#[inline]
fn is_whitespace_run(bytes: &[u8], start: usize, end: usize) -> bool {
    let s = &bytes[start..end];
    if s.is_ascii() {
        return s.iter().all(|&b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c));
    }
    // SAFETY-free: slice boundaries come from regex matches, so they are char boundaries.
    std::str::from_utf8(s).is_ok_and(|s| s.chars().all(char::is_whitespace))
}

#[inline]
fn starts_with_whitespace(text: &str, at: usize) -> bool {
    text[at..].chars().next().is_some_and(char::is_whitespace)
}

/// Start of the last character of `text[start..end]` when it has at least two characters.
#[inline]
fn last_char_start(text: &str, start: usize, end: usize) -> Option<usize> {
    let mut it = text[start..end].char_indices().rev();
    let (last, _) = it.next()?;
    it.next()?;
    Some(start + last)
}

#[cfg(test)]
mod tests {
    use super::*;

    const R50K: &str = r"'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s";
    const R50K_OLD: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
    const CL100K: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s";
    const O200K: &str = concat!(
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|",
        r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    );
    const NANOCHAT: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";

    const CL100K_OLD: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
    const CL100K_OLDEST: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

    const ALL: &[&str] = &[R50K, R50K_OLD, CL100K, CL100K_OLD, CL100K_OLDEST, O200K, NANOCHAT];

    #[test]
    fn every_pattern_with_a_scanner_compiles_as_a_regex() {
        // `Splitter::new` skips compiling these; the scanner stands in for the regex.
        let known: Vec<&str> = Scanner::known_patterns().collect();
        assert!(known.len() >= ALL.len());
        for p in known {
            assert!(Splitter::new_reference(p).is_ok(), "{p}");
            assert_eq!(Splitter::new(p).unwrap().engine(), "scanner", "{p}");
        }
    }

    /// For every standard pattern: its scanner, its DFA path and the fancy-regex
    /// reference, compiled once.
    fn splitters() -> Vec<(&'static str, Splitter, Splitter, Splitter)> {
        ALL.iter()
            .map(|p| {
                let scan = Splitter::new(p).unwrap();
                assert_eq!(scan.engine(), "scanner", "pattern should have a scanner: {p}");
                let dfa = Splitter::new_dfa(p).unwrap_or_else(|| panic!("pattern should have a DFA path: {p}"));
                (*p, scan, dfa, Splitter::new_reference(p).unwrap())
            })
            .collect()
    }

    fn check(splitters: &[(&str, Splitter, Splitter, Splitter)], text: &str) {
        for (p, scan, dfa, reference) in splitters {
            let want = reference.pieces(text).unwrap();
            assert_eq!(scan.pieces(text).unwrap(), want, "scanner, pattern {p} on {text:?}");
            assert_eq!(dfa.pieces(text).unwrap(), want, "dfa, pattern {p} on {text:?}");
        }
    }

    #[test]
    fn whitespace_tail_matches_fancy_regex() {
        let cases = [
            "", " ", "  ", "a  b", "a   ", "  \n  x", "\n\n\nx", "x \t\u{3000}y", "\r\n\r\n  foo",
            "hello world  ", "   leading", "a\u{a0}\u{a0}b", "tabs\t\t\tx", "x\n \n \ny", " \u{2003}\u{2003}x",
            "I'LL DON'T 's 'S ſ", "123456789 12", "emoji 🙂‍↔️  👍🏽", "中文  测试\n\n", "e\u{301}\u{301}  x",
            "!!!  ???\n\n", "   \n", " \r\n  \r\n x", "a\u{b}\u{c}b  \u{85}z",
            // Capitals (o200k's fast path): alone, after a prefix, then lower case, a
            // contraction, a digit, a non-ASCII letter or mark, or the end of the text.
            "ABC", " ABC", "ABCdef", " Abc,", "-QQ'LL", "XYZ1", "ABCé", " ABÇde", "A\u{301}b", "\tHTTPServer's",
            "I", " I'm", "OK.\nOK", "!A", "/Path/To", "ABC\u{2028}", "Zz\u{300}",
        ];
        let splitters = splitters();
        for t in cases {
            check(&splitters, t);
        }
    }

    #[test]
    fn generated_text_matches_fancy_regex() {
        let atoms = [
            " ", "  ", "\t", "\n", "\r\n", "\r", "a", "B", "z", "'s", "'S", "'ll", "'LL", "'Re", "1", "22", "333",
            "!", "?", "/", "...", "é", "e\u{301}", "ſ", "\u{212a}", "中", "\u{3000}", "\u{a0}", "\u{2028}", "🙂",
            "👩‍💻", "<|endoftext|>", "Ünïcödé", "\u{b}", "x", "9", "\u{661}\u{662}", "ǅ", "ʰ", "\u{300}",
        ];
        let splitters = splitters();
        let mut state = 0x2545F4914F6CDD1Du64;
        for _ in 0..4000 {
            let mut s = String::new();
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let n = (state % 24) as usize;
            for _ in 0..n {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                s.push_str(atoms[(state % atoms.len() as u64) as usize]);
            }
            check(&splitters, &s);
        }
    }

    #[test]
    fn random_code_points_match_fancy_regex() {
        // Code points drawn from every class the patterns distinguish, with ASCII, quotes,
        // contraction letters and whitespace over-represented.
        let pools: &[&[u32]] = &[
            &[0x20, 0x20, 0x20, 0x9, 0xA, 0xD, 0xB, 0xC, 0x85, 0xA0, 0x1680, 0x2000, 0x2028, 0x2029, 0x202F, 0x3000],
            &[0x27, 0x27, 0x73, 0x53, 0x17F, 0x74, 0x54, 0x64, 0x6D, 0x6C, 0x4C, 0x76, 0x65, 0x45, 0x72, 0x52, 0x212A],
            &[0x41, 0x5A, 0x61, 0x7A, 0xC9, 0xE9, 0x1C5, 0x2B0, 0x4E2D, 0x3042, 0x5D0, 0x627, 0x3B1, 0x391, 0x10400, 0x10428],
            &[0x300, 0x301, 0x36F, 0x94D, 0x20DD, 0xFE0F, 0x200D, 0x1F3FD],
            &[0x30, 0x39, 0x661, 0x966, 0x2167, 0xBD, 0x2460, 0x1D7CE],
            &[0x21, 0x2F, 0x2C, 0x2E, 0x3F, 0x2D, 0x5F, 0x7E, 0xB6, 0x2014, 0x1F600, 0x1F44D, 0x3002, 0xFF01, 0x0],
        ];
        let splitters = splitters();
        let mut state = 0x9E3779B97F4A7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 40) as usize;
            let mut s = String::new();
            for _ in 0..len {
                let pool = pools[(next() % pools.len() as u64) as usize];
                let cp = pool[(next() % pool.len() as u64) as usize];
                s.push(char::from_u32(cp).unwrap());
            }
            check(&splitters, &s);
        }
    }

    #[test]
    fn other_patterns_use_fancy_regex_and_bad_ones_fail() {
        let s = Splitter::new(r"\w+(?=x)|.").unwrap();
        assert!(!s.is_fast());
        assert_eq!(s.pieces("abx").unwrap(), vec!["ab", "x"]);
        assert!(matches!(Splitter::new("(unclosed"), Err(Error::InvalidPattern { .. })));
    }

    /// Patterns with the standard whitespace tail that are not standard themselves: with
    /// possessive quantifiers (regex-syntax would take `x?+` for `(x?)+`) or a bare flag
    /// they run on fancy-regex, otherwise on the DFA; either way split as fancy-regex
    /// splits.
    #[test]
    fn other_patterns_with_the_whitespace_tail_split_as_fancy_regex_does() {
        let possessive = [
            // cl100k's modern spelling with other digit groups, and variations
            r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,4}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
            r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,2}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s",
            r" ?\p{L}++| ?\p{N}{1,3}+| ?[^\s\p{L}\p{N}]*+\.|\s+(?!\S)|\s+",
            // (a bare flag: here lazy quantifiers for the whitespace tail too)
            r"(?U)\p{L}+|\p{N}+|\s+(?!\S)|\s+",
        ];
        let plain = [
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            r"[\p{L}+?*]+|\p{N}{1,4}|\(\+\)+|\p{N}+?|\s+(?!\S)|\s+",
        ];
        let texts = [
            "😀22  😀/.中a中B's!?", "  é\u{2028}\r\n a\u{a0}B", "\u{301}\r\n x!?'s", "1234567 89 ++ (+)(+) a+b?",
            "x   !?'LL Д\t\t.", "'s's 'LL\n\n  \n", "a\u{3000}\u{3000}'LLД",
        ];
        for (patterns, engine) in [(&possessive[..], "fancy-regex"), (&plain[..], "dfa")] {
            for p in patterns {
                let s = Splitter::new(p).unwrap();
                assert_eq!(s.engine(), engine, "{p}");
                let reference = Splitter::new_reference(p).unwrap();
                for t in texts {
                    assert_eq!(s.pieces(t).unwrap(), reference.pieces(t).unwrap(), "{p} on {t:?}");
                }
            }
        }
        for p in ["a++", "(?:b|a?+)", "x{1,3}+", "(?U)a+", "b|(?i)a"] {
            assert!(splits_otherwise_on_the_dfa(p), "{p}");
        }
        for p in [r"(a+)+", r"\p{N}+", r"[+?]+\++", r"(?i:'s|'t)|\p{L}+", r"(?U:a+)b"] {
            assert!(!splits_otherwise_on_the_dfa(p), "{p}");
        }
    }

    #[test]
    fn backtrack_limit_is_an_error() {
        let s = Splitter::new(r"(a+)+\1b").unwrap();
        let text = "a".repeat(5000);
        assert!(matches!(s.pieces(&text), Err(Error::RegexRuntime(_))));
    }
}
