//! Character classes of 64 bytes at once, one bit per byte: the input of the bit-parallel
//! pre-tokenizer (`bitwise_split.rs`). Only a prefix of the window is classified: its
//! ASCII characters and, when asked, the two-byte letters among them that the pattern's
//! rules treat exactly as ASCII letters (Latin, Greek, Cyrillic, ...). Any other byte of
//! 0x80 or more ends it (its character needs the Unicode tables and the scanner).
//!
//! On x86 the bytes are compared sixteen at a time with SSE2 (part of every x86-64 CPU)
//! through `safe_arch`'s safe wrappers; elsewhere eight at a time in a `u64` (SWAR). Both
//! give the same bitmaps, checked against the scanner's class table in the tests.

use std::sync::OnceLock;

use crate::char_classes::{case_variants, CharClasses, LETTER, LOWERISH, UPPERISH};

/// Bitmaps of one window: bit `j` describes byte `j`. Bits at and past [`Classes::len`]
/// are zero in every class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Classes {
    /// `[A-Za-z]` (`\p{L}` within ASCII)
    pub letter: u64,
    /// `[A-Z]` (`\p{Lu}` within ASCII)
    pub upper: u64,
    /// `[0-9]` (`\p{N}` within ASCII)
    pub digit: u64,
    /// Tab, line feed, vertical tab, form feed, carriage return and space (`\s` within
    /// ASCII: the Unicode `White_Space` property)
    pub space: u64,
    /// `\r` and `\n`
    pub newline: u64,
    /// The space character alone
    pub blank: u64,
    /// `'`
    pub apostrophe: u64,
    /// `/`
    pub slash: u64,
    /// Bits of the ASCII prefix: `(1 << len) - 1`
    pub valid: u64,
    /// Length of the ASCII prefix (64 when the whole window is ASCII)
    pub len: u32,
}

impl Classes {
    /// Classifies the ASCII prefix of `window`.
    #[inline(always)]
    pub fn of(window: &[u8; 64]) -> Self {
        Self::masked(classify(window))
    }

    /// As [`Classes::of`], the prefix going on through two-byte letters that `family`
    /// ([`WIDE_CL100K`] or [`WIDE_O200K`]) takes in: both bytes of such a letter are in
    /// `letter`, and in `upper` too when it is upper case only.
    #[inline(always)]
    pub fn of_wide(window: &[u8; 64], family: u8) -> Self {
        let mut raw = classify(window);
        if raw.high != 0 {
            widen(&mut raw, window, family);
        }
        Self::masked(raw)
    }

    /// The bitmaps of `raw` cut at its first byte of 0x80 or more.
    #[inline(always)]
    fn masked(raw: Raw) -> Self {
        let len = raw.high.trailing_zeros();
        let valid = if len == 64 { !0 } else { (1u64 << len) - 1 };
        Self {
            letter: raw.letter & valid,
            upper: raw.upper & valid,
            digit: raw.digit & valid,
            space: raw.space & valid,
            newline: raw.newline & valid,
            blank: raw.blank & valid,
            apostrophe: raw.apostrophe & valid,
            slash: raw.slash & valid,
            valid,
            len,
        }
    }

    /// ASCII characters in none of the other classes (`[^\s\p{L}\p{N}]` within ASCII).
    #[inline(always)]
    pub fn other(&self) -> u64 {
        self.valid & !(self.letter | self.digit | self.space)
    }
}

/// Two-byte letters a cl100k-family window takes in: every `\p{L}` of U+0080..U+07FF but
/// those that fold to a contraction's letter (`ſ`, which the scanner's contraction rule
/// must see).
pub const WIDE_CL100K: u8 = 1;
/// Two-byte letters an o200k window takes in: those of [`WIDE_CL100K`] that are upper
/// case only (`Lu`, `Lt`) or lower case only (`Ll`); `Lm` and `Lo` count as both cases
/// in o200k's pattern, which the window's case split does not model.
pub const WIDE_O200K: u8 = 2;
/// Upper case only, as o200k's pattern sees it.
const WIDE_UPPER: u8 = 4;

/// [`WIDE_CL100K`], [`WIDE_O200K`] and [`WIDE_UPPER`] for each code point below U+0800.
fn wide_letters() -> &'static [u8; 0x800] {
    static TABLE: OnceLock<[u8; 0x800]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let classes = CharClasses::get();
        let folded: Vec<char> = "sdmtlvre".chars().flat_map(case_variants).collect();
        let mut t = [0u8; 0x800];
        for (c, slot) in t.iter_mut().enumerate().skip(0x80) {
            let f = classes.of(c as u32);
            if f & LETTER == 0 || folded.iter().any(|&x| x as usize == c) {
                continue;
            }
            *slot = WIDE_CL100K;
            let (upper, lower) = (f & UPPERISH != 0, f & LOWERISH != 0);
            if upper != lower {
                *slot |= WIDE_O200K;
            }
            if upper && !lower {
                *slot |= WIDE_UPPER;
            }
        }
        t
    })
}

/// Takes the two-byte letters of `family` at the start of the window's non-ASCII part
/// into its classes, up to the first byte that is anything else.
#[inline(always)]
fn widen(raw: &mut Raw, window: &[u8; 64], family: u8) {
    let table = wide_letters();
    loop {
        let j = raw.high.trailing_zeros() as usize;
        if j >= 63 {
            return;
        }
        let (a, b) = (window[j], window[j + 1]);
        if !(0xC2..=0xDF).contains(&a) || b & 0xC0 != 0x80 {
            return;
        }
        let f = table[((a as usize & 0x1F) << 6) | (b as usize & 0x3F)];
        if f & family == 0 {
            return;
        }
        let both = 3u64 << j;
        raw.letter |= both;
        if f & WIDE_UPPER != 0 {
            raw.upper |= both;
        }
        raw.high &= !both;
    }
}

/// Unmasked bitmaps; `high` marks bytes of 0x80 or more (their other bits mean nothing).
#[derive(Default)]
struct Raw {
    letter: u64,
    upper: u64,
    digit: u64,
    space: u64,
    newline: u64,
    blank: u64,
    apostrophe: u64,
    slash: u64,
    high: u64,
}

#[cfg(all(any(target_arch = "x86", target_arch = "x86_64"), target_feature = "sse2"))]
#[inline(always)]
fn classify(window: &[u8; 64]) -> Raw {
    use safe_arch::*;
    let splat = |x: u8| set_splat_i8_m128i(x as i8);
    let mask = |m: m128i| move_mask_i8_m128i(m) as u16 as u64;
    let mut raw = Raw::default();
    for (k, chunk) in window.chunks_exact(16).enumerate() {
        let v = load_unaligned_m128i(chunk.try_into().unwrap());
        let shift = 16 * k;
        // Signed comparisons: bytes of 0x80 or more are negative and fall in no range.
        let lower = bitor_m128i(v, splat(0x20));
        let letter = bitand_m128i(cmp_gt_mask_i8_m128i(lower, splat(b'a' - 1)), cmp_lt_mask_i8_m128i(lower, splat(b'z' + 1)));
        let upper = bitand_m128i(cmp_gt_mask_i8_m128i(v, splat(b'A' - 1)), cmp_lt_mask_i8_m128i(v, splat(b'Z' + 1)));
        let digit = bitand_m128i(cmp_gt_mask_i8_m128i(v, splat(b'0' - 1)), cmp_lt_mask_i8_m128i(v, splat(b'9' + 1)));
        let blank = cmp_eq_mask_i8_m128i(v, splat(b' '));
        let controls = bitand_m128i(cmp_gt_mask_i8_m128i(v, splat(0x08)), cmp_lt_mask_i8_m128i(v, splat(0x0E)));
        let newline = bitor_m128i(cmp_eq_mask_i8_m128i(v, splat(b'\n')), cmp_eq_mask_i8_m128i(v, splat(b'\r')));
        raw.letter |= mask(letter) << shift;
        raw.upper |= mask(upper) << shift;
        raw.digit |= mask(digit) << shift;
        raw.space |= mask(bitor_m128i(controls, blank)) << shift;
        raw.newline |= mask(newline) << shift;
        raw.blank |= mask(blank) << shift;
        raw.apostrophe |= mask(cmp_eq_mask_i8_m128i(v, splat(b'\''))) << shift;
        raw.slash |= mask(cmp_eq_mask_i8_m128i(v, splat(b'/'))) << shift;
        raw.high |= mask(v) << shift;
    }
    raw
}

#[cfg(not(all(any(target_arch = "x86", target_arch = "x86_64"), target_feature = "sse2")))]
#[inline(always)]
fn classify(window: &[u8; 64]) -> Raw {
    classify_swar(window)
}

/// The portable version: eight bytes per `u64`.
#[cfg_attr(all(any(target_arch = "x86", target_arch = "x86_64"), target_feature = "sse2"), allow(dead_code))]
#[inline(always)]
fn classify_swar(window: &[u8; 64]) -> Raw {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Per byte of `x` (all below 0x80): high bit set when it lies in `lo..=hi`. Adding
    // `0x80 - lo` sets the high bit exactly when the byte is at least `lo`, adding `0x7F - hi`
    // exactly when it is above `hi`; no sum carries into the next byte.
    let within = |x: u64, lo: u8, hi: u8| x.wrapping_add(ONES * (0x80 - lo) as u64) & !x.wrapping_add(ONES * (0x7F - hi) as u64) & HIGH;
    let equal = |x: u64, c: u8| within(x, c, c);
    // The high bit of each byte, gathered into the low eight bits (byte `j` to bit `j`).
    let gather = |m: u64| (m >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56;
    let mut raw = Raw::default();
    for (k, chunk) in window.chunks_exact(8).enumerate() {
        let w = u64::from_le_bytes(chunk.try_into().unwrap());
        let x = w & !HIGH;
        let ascii = !w & HIGH;
        let shift = 8 * k;
        let blank = equal(x, b' ') & ascii;
        raw.letter |= gather(within(x | (ONES * 0x20), b'a', b'z') & ascii) << shift;
        raw.upper |= gather(within(x, b'A', b'Z') & ascii) << shift;
        raw.digit |= gather(within(x, b'0', b'9') & ascii) << shift;
        raw.space |= gather((within(x, 0x09, 0x0D) | blank) & ascii) << shift;
        raw.newline |= gather((equal(x, b'\n') | equal(x, b'\r')) & ascii) << shift;
        raw.blank |= gather(blank) << shift;
        raw.apostrophe |= gather(equal(x, b'\'') & ascii) << shift;
        raw.slash |= gather(equal(x, b'/') & ascii) << shift;
        raw.high |= gather(w & HIGH) << shift;
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::char_classes::{CharClasses, LETTER, LOWERISH, NEWLINE, NUMBER, SPACE, UPPERISH};

    /// The bitmaps byte by byte from the scanner's class table.
    fn reference(window: &[u8; 64]) -> Classes {
        let table = CharClasses::get();
        let len = window.iter().position(|&x| x >= 0x80).unwrap_or(64) as u32;
        let mut c = Classes { len, valid: if len == 64 { !0 } else { (1 << len) - 1 }, ..Classes::default() };
        for (j, &x) in window.iter().enumerate().take(len as usize) {
            let f = table.of(x as u32);
            let bit = 1u64 << j;
            let set = |on: bool, map: &mut u64| {
                if on {
                    *map |= bit;
                }
            };
            set(f & LETTER != 0, &mut c.letter);
            set(f & UPPERISH != 0 && f & LOWERISH == 0, &mut c.upper);
            set(f & NUMBER != 0, &mut c.digit);
            set(f & SPACE != 0, &mut c.space);
            set(f & NEWLINE != 0, &mut c.newline);
            set(x == b' ', &mut c.blank);
            set(x == b'\'', &mut c.apostrophe);
            set(x == b'/', &mut c.slash);
        }
        c
    }

    /// Every two-byte character, twice in a row at positions all over an ASCII window
    /// (the last ones cut by its end): the prefix takes the character in exactly when it
    /// is a letter of the family (not `ſ`, and for o200k of one case only), with the class
    /// table's letter and case bits, and the ASCII around it keeps its classes.
    #[test]
    fn two_byte_letters_extend_the_prefix_as_the_class_table_says() {
        let table = CharClasses::get();
        for family in [WIDE_CL100K, WIDE_O200K] {
            for code in 0x80..0x800u32 {
                let ch = char::from_u32(code).unwrap();
                let f = table.of(code);
                let one_case = (f & UPPERISH != 0) != (f & LOWERISH != 0);
                let taken = f & LETTER != 0 && ch != 'ſ' && (family == WIDE_CL100K || one_case);
                let upper = f & UPPERISH != 0 && f & LOWERISH == 0;
                let mut utf8 = [0u8; 2];
                ch.encode_utf8(&mut utf8);
                for j in 0..64 {
                    let mut window = [0u8; 64];
                    for (k, slot) in window.iter_mut().enumerate() {
                        *slot = [b'a', b' ', b'Q', b'.', b'7'][(k + j) % 5];
                    }
                    // The same window with `a` where the character's bytes go.
                    let mut plain = window;
                    for k in j..(j + 4).min(64) {
                        window[k] = utf8[(k - j) % 2];
                        plain[k] = b'a';
                    }
                    let c = Classes::of_wide(&window, family);
                    let want_len = match (taken, j) {
                        (false, _) => j,
                        // A lead byte in the last place: its character is not whole.
                        (true, 61 | 63) => 63,
                        (true, _) => 64,
                    };
                    assert_eq!(c.len as usize, want_len, "U+{code:04X} at {j}, family {family}");
                    // The ASCII window cut where this one should end; the character's bytes
                    // (`a` there) then differ from it only in being upper case or not.
                    if want_len < 64 {
                        plain[want_len] = 0x80;
                    }
                    let mut want = Classes::of(&plain);
                    let before_end = if j + 4 >= 64 { !0 } else { (1u64 << (j + 4)) - 1 };
                    let ours = want.valid & (!0u64 << j) & before_end;
                    if upper {
                        want.upper |= ours;
                    }
                    assert_eq!(c, want, "U+{code:04X} at {j}, family {family}");
                }
            }
        }
    }

    fn swar(window: &[u8; 64]) -> Classes {
        Classes::masked(classify_swar(window))
    }

    #[test]
    fn every_byte_at_every_position_matches_the_class_table() {
        // Each byte value at each of the 64 positions, among filler that changes with it,
        // and a window cut short by a byte of 0x80 or more at every position.
        for x in 0..=255u8 {
            for j in 0..64 {
                let mut window = [0u8; 64];
                for (k, slot) in window.iter_mut().enumerate() {
                    *slot = [b'a', b' ', b'7', b'\n', b'.', b'\'', b'Z', b'\t'][(k + x as usize) % 8];
                }
                window[j] = x;
                let want = reference(&window);
                assert_eq!(Classes::of(&window), want, "byte {x:#x} at {j}");
                assert_eq!(swar(&window), want, "byte {x:#x} at {j} (SWAR)");
            }
        }
    }
}
