//! Bit-parallel pre-tokenization of the cl100k family of patterns (cl100k, its older
//! spellings, nanochat's two-digit variant) and of o200k over 64-byte windows of ASCII
//! text and two-byte letters. Both bytes of such a letter carry the letter bit (and, for
//! o200k, the upper-case bit of an upper-case letter), so the rules below, written for
//! ASCII, see a letter run of any length: every rule that looks one byte back looks at a
//! character that is ASCII or the end of such a run. Letters whose case o200k counts as
//! both, `ſ` (a contraction's `s`), and every other non-ASCII character end a window.
//!
//! The scanner (`scanner.rs`) decides each piece with a few branches on the characters at
//! its start, and on real text those branches are hard to predict: about one
//! misprediction per piece. Here the piece starts of a whole window come from its class
//! bitmaps (`ascii_classes.rs`) with shifts, masks and two additions, whatever the
//! pieces; the scanner then only walks the set bits.
//!
//! A window always begins where a piece begins, and what the pattern matches from there
//! on depends on nothing before it (the patterns have no look-behind), so bit 0 is treated
//! as the start of the text. The end of the window is unknown territory: the piece that
//! runs into it may go on, a whitespace run there may end in a way that moves its last
//! split, so piece starts are only reported up to the start of the last run of one kind
//! (letters, digits, whitespace, other). The caller emits the pieces before that point
//! and opens the next window where the last one starts.
//!
//! Within ASCII the two families differ only in their words: cl100k's contractions are
//! pieces of their own and its letter runs are never split, o200k splits letter runs by
//! case and ends a word with its contraction. The rules they share are listed at
//! `SharedStarts`.

use crate::ascii_classes::{Classes, WIDE_CL100K, WIDE_O200K};

/// The piece starts of the window at `text[at..at + 64]` under the cl100k family (bit
/// `j`: a piece starts at `at + j`, bit 0 always set), reported up to the highest one that
/// is certain; `None` when that is bit 0 (no whole piece in the window). To the shared
/// rules cl100k adds `'(?i:[sdmt]|ll|ve|re)`: an apostrophe that starts a piece, followed
/// by those letters, is a piece.
#[inline(always)]
pub fn cl100k_starts(text: &[u8], at: usize, max_digits: u32) -> Option<u64> {
    let c = Classes::of_wide(text[at..at + 64].try_into().unwrap(), WIDE_CL100K);
    if c.len == 0 {
        return None;
    }
    let shared = SharedStarts::of(&c, max_digits, 0);

    // Contractions: an apostrophe starting its piece with a letter after it.
    let mut contractions = 0;
    let mut quotes = c.apostrophe & shared.other & (c.letter >> 1);
    while quotes != 0 {
        let q = quotes.trailing_zeros() as usize;
        quotes &= quotes - 1;
        let a = text[at + q + 1] | 0x20;
        let b = if q + 2 < c.len as usize { text[at + q + 2] | 0x20 } else { 0 };
        let end = match (a, b) {
            (b's' | b'd' | b'm' | b't', _) => q + 2,
            (b'l', b'l') | (b'v' | b'r', b'e') => q + 3,
            _ => continue,
        };
        if end < 64 {
            contractions |= 1 << end;
        }
    }
    report(&c, shared.starts | contractions, shared.digits, 63)
}

/// As [`cl100k_starts`], for o200k. Its words split where a lower-case letter is followed
/// by an upper-case one (`[upper]*[lower]+` and `[upper]+[lower]*` both end there), and a
/// contraction is the end of the word before it rather than a piece of its own:
/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)?` after the word's letters. Everything else (prefixes,
/// punctuation runs with their newlines, whitespace, digit groups of three) is cl100k's.
#[inline(always)]
pub fn o200k_starts(text: &[u8], at: usize) -> Option<u64> {
    let c = Classes::of_wide(text[at..at + 64].try_into().unwrap(), WIDE_O200K);
    if c.len == 0 {
        return None;
    }
    let shared = SharedStarts::of(&c, 3, c.slash);
    let lower = c.letter & !c.upper;
    let mut starts = shared.starts | (c.upper & (lower << 1));

    // An apostrophe right after a word's letters (a letter that is no contraction's)
    // takes the contraction's letters into that word; the character after them starts the
    // next piece. An apostrophe whose letters are not all in the window's ASCII prefix
    // is undecided: report only what comes before its word.
    let len = c.len as usize;
    let mut limit = 63;
    let mut after_contraction = 0;
    let mut quotes = c.apostrophe & (c.letter << 1);
    while quotes != 0 {
        let q = quotes.trailing_zeros() as usize;
        quotes &= quotes - 1;
        if q == after_contraction {
            continue;
        }
        if q + 1 >= len {
            // (the character after it may be `ſ`, which folds to `s`)
            limit = q as u32 - 1;
            break;
        }
        let a = text[at + q + 1] | 0x20;
        let end = if matches!(a, b's' | b'd' | b'm' | b't') {
            q + 2
        } else if !matches!(a, b'l' | b'v' | b'r') {
            continue;
        } else if q + 2 == 64 {
            limit = q as u32 - 1;
            break;
        } else {
            // Past the ASCII prefix this is a byte of 0x80 or more: no match, as no other
            // character folds to `e` or `l`.
            match (a, text[at + q + 2] | 0x20) {
                (b'l', b'l') | (b'v' | b'r', b'e') => q + 3,
                _ => continue,
            }
        };
        starts &= !(((1u64 << (end - q)) - 1) << q);
        if end < 64 {
            starts |= 1 << end;
        }
        after_contraction = end;
    }
    report(&c, starts, shared.digits, limit)
}

/// The piece starts the two families share. With `L` letters, `D` digits, `S` whitespace,
/// `N` `\r`/`\n`, `W` whitespace other than `N`, `O` everything else:
/// * `[^\r\n\p{L}\p{N}]?\p{L}+`: a letter run starts a piece unless the character before
///   it is `W` (the last character of a whitespace run always starts a piece of its own)
///   or an `O` that starts a piece of its own, that is an `O` run of length one not led by
///   a space;
/// * `\p{N}{1,3}`: digit runs split every three digits from their start (two for nanochat);
/// * ` ?[^\s\p{L}\p{N}]+[\r\n]*`: an `O` run is one piece, with the space before it if
///   there is one, and with the `N`s right after it (o200k's `[\r\n/]*` also takes the
///   slashes among them: `trailing` is `/` there);
/// * `\s*[\r\n]`, `\s+(?!\S)`, `\s`: a whitespace run (less the newlines an `O` run took)
///   starts a piece; if it holds newlines, a piece starts after its last one; if two or
///   more `W`s end it, its last character starts a piece (which takes a following letter
///   run, or, if it is a space, a following `O` run);
/// * `\s++$`: only at the end of the text, which a window never reports.
struct SharedStarts {
    starts: u64,
    /// Starts of `O` runs (the contractions of cl100k begin at one of them).
    other: u64,
    /// Starts of digit groups.
    digits: u64,
}

impl SharedStarts {
    #[inline(always)]
    fn of(c: &Classes, max_digits: u32, trailing: u64) -> Self {
        let (letter, digit, space, newline, blank) = (c.letter, c.digit, c.space, c.newline, c.blank);
        let w = space & !newline;

        // The newlines (and `trailing` characters) right after an `O` run belong to its
        // piece: adding the first newline's bit carries through the rest of the run and
        // clears it. A `trailing` character is itself an `O`, so a run of them may hold
        // more newlines after one: those bits are set again by their addition, hence the
        // `| first`.
        let other = c.other();
        let first = newline & (other << 1);
        let tail = newline | trailing;
        let taken = (tail & !tail.wrapping_add(first)) | first;
        let other = other & !taken;
        // Whitespace runs, less those newlines.
        let ws = space & !taken;
        let ws_last = ws & !(ws >> 1);
        // After the last newline of a whitespace run: the run's final `W`s, when a newline
        // precedes them. A `W` run is final when no newline follows it; mark whole runs by
        // spreading their final bit downwards.
        let w_final_end = w & !(w >> 1) & !(newline >> 1);
        let after_newline = spread_down(w_final_end, w) & (newline << 1);
        // The last of two or more `W`s ending a run.
        let ws_split = ws_last & w & (w << 1);
        let spaces = (ws & !(ws << 1)) | after_newline | ws_split;

        // `O` runs, unless a space leads them; those that start their own piece may take a
        // letter run right after them.
        let other_starts = other & !(other << 1) & !(blank << 1);
        let letters = letter & !(letter << 1) & !((w | other_starts) << 1);

        let mut digits = digit & !(digit << 1);
        // Bits with `max_digits` digits ending there.
        let full = match max_digits {
            3 => digit & (digit << 1) & (digit << 2),
            2 => digit & (digit << 1),
            _ => (1..max_digits).fold(digit, |full, k| full & (digit << k)),
        };
        let mut group = digits;
        loop {
            group = (group << max_digits) & full;
            if group == 0 {
                break;
            }
            digits |= group;
        }
        Self { starts: spaces | other_starts | letters | digits, other: other_starts, digits }
    }
}

/// `starts` cut to what is certain, and to at most bit `limit`. The last run of one kind
/// reaching the window's end may go on past it: report starts up to its first character.
/// In a run of digits the groups' starts are certain: report up to the last (a megabyte of
/// digits then takes one window per 63 digits, not one per group).
#[inline(always)]
fn report(c: &Classes, starts: u64, digits: u64, limit: u32) -> Option<u64> {
    let top = c.len - 1;
    let last = if c.digit >> top & 1 == 1 {
        63 - digits.leading_zeros()
    } else {
        let kind = [c.letter, c.space, c.other()].into_iter().find(|k| k >> top & 1 == 1).unwrap_or(0);
        let before = c.valid & !kind;
        if before == 0 { 0 } else { 64 - before.leading_zeros() }
    };
    let starts = starts & (2u64 << last.min(limit)).wrapping_sub(1);
    (starts > 1).then_some(starts)
}

/// The bits of `within` from which a run of `within` bits reaches a bit of `seeds`
/// (itself in `within`), in six doubling steps.
#[inline(always)]
fn spread_down(seeds: u64, within: u64) -> u64 {
    let (mut g, mut p) = (seeds, within);
    for k in [1, 2, 4, 8, 16, 32] {
        g |= p & (g >> k);
        p &= p >> k;
    }
    g
}

#[cfg(test)]
mod tests {
    use crate::pretokenize::Splitter;
    use crate::scanner::{Family, Scanner};

    /// Long, mostly ASCII strings (so that windows are used) made of the pieces that
    /// decide the splits: letters and the contraction letters in both cases, words that
    /// change case, apostrophes, digit runs, every kind of ASCII whitespace in runs,
    /// punctuation (slashes among it) and control bytes, and now and then a non-ASCII
    /// letter, space or mark to cut a window short.
    fn generate(state: &mut u64) -> String {
        const ATOMS: &[&str] = &[
            " ", " ", " ", "  ", "    ", "\t", "\n", "\n", "\r\n", "\r", "\u{b}", "\u{c}", "a", "x", "Q", "s", "S", "t",
            "d", "m", "l", "L", "v", "e", "E", "r", "R", "'", "'", "''", "1", "42", "2026", "1234567", ".", "(", ")",
            "\"", "-", "/", "{", "}", ";", "\0", "\u{1f}", "\u{7f}", "the", "Hello", "don't", "WE'LL", "you're",
            " 's", "'ve", "é", "中", "\u{a0}", "\u{85}", "\u{301}", "ſ", "fooBar", "HTTPServer", "aB", "IT'S", "'Ll", "'rE",
            "\u{2b0}", "Привет", "мир", "Ωμέγα", "ǅ", "ǈ", "ß", "ı", "İ", "\u{149}", "µ", "ª", "שלום", "مرحبا", "²", "«", "»",
            "¿", "\u{37e}", "\u{2bc}", "\u{1c0}", "ſt", "'ſ", "'Ś", "Ω'S", "é's", "ÉTÉ", "éTé", "ÀB", "aÉ", "\u{7ff}", "\u{80}",
        ];
        let mut next = || {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            *state
        };
        let mut s = String::new();
        let target = 64 + (next() % 256) as usize;
        while s.len() < target {
            let atom = ATOMS[(next() % ATOMS.len() as u64) as usize];
            // Non-ASCII atoms are rarer, so most windows run their full length; those of
            // two-byte characters only (which windows may take in) less so.
            let wide = atom.chars().all(|c| c.len_utf8() <= 2);
            if !atom.is_ascii() && next() % if wide { 2 } else { 8 } != 0 {
                continue;
            }
            let repeat = if next() % 10 == 0 { 1 + (next() % 70) as usize } else { 1 };
            for _ in 0..repeat {
                s.push_str(atom);
            }
        }
        s
    }

    #[test]
    fn windows_split_as_fancy_regex_does() {
        let patterns: Vec<&str> = Scanner::known_patterns()
            .filter(|p| matches!(Scanner::for_pattern(p).map(|s| s.family()), Some(Family::Cl100k { .. } | Family::O200k)))
            .collect();
        assert_eq!(patterns.len(), 5);
        let splitters: Vec<(Splitter, Splitter)> =
            patterns.iter().map(|p| (Splitter::new(p).unwrap(), Splitter::new_reference(p).unwrap())).collect();
        let mut state = 0x853C_49E6_748F_EA9Bu64;
        for _ in 0..3000 {
            let text = generate(&mut state);
            for (p, (scan, reference)) in patterns.iter().zip(&splitters) {
                assert_eq!(scan.pieces(&text).unwrap(), reference.pieces(&text).unwrap(), "pattern {p} on {text:?}");
            }
        }
    }
}
