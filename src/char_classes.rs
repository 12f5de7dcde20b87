//! Unicode character classes for the hand-written pre-tokenizers (`scanner.rs`), taken
//! from `regex-syntax` — the same tables the regex engines use — so that `\p{L}`, `\p{N}`,
//! `\s` and the others mean exactly what they mean in the patterns.
//!
//! Lookup is two loads: a per-256-code-point block index, then a byte of flags in a
//! de-duplicated block.

use std::sync::OnceLock;

use regex_syntax::hir::{Class, HirKind};

/// `\p{L}`
pub const LETTER: u8 = 1;
/// `\p{N}`
pub const NUMBER: u8 = 2;
/// `\s` (Unicode `White_Space`)
pub const SPACE: u8 = 4;
/// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]` (o200k's upper-case word part)
pub const UPPERISH: u8 = 8;
/// `[\p{Ll}\p{Lm}\p{Lo}\p{M}]` (o200k's lower-case word part)
pub const LOWERISH: u8 = 16;
/// `\r` or `\n`
pub const NEWLINE: u8 = 32;

pub struct CharClasses {
    blocks: Vec<u16>,
    flags: Vec<u8>,
}

fn ranges(class: &str) -> Vec<(u32, u32)> {
    let hir = regex_syntax::ParserBuilder::new().build().parse(class).expect("built-in class");
    match hir.kind() {
        HirKind::Class(Class::Unicode(c)) => c.ranges().iter().map(|r| (r.start() as u32, r.end() as u32)).collect(),
        other => panic!("unexpected HIR for {class}: {other:?}"),
    }
}

impl CharClasses {
    fn build() -> Self {
        const N: usize = 0x110000;
        let mut all = vec![0u8; N];
        for (class, flag) in [
            (r"\p{L}", LETTER),
            (r"\p{N}", NUMBER),
            (r"\s", SPACE),
            (r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", UPPERISH),
            (r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]", LOWERISH),
            (r"[\r\n]", NEWLINE),
        ] {
            for (a, b) in ranges(class) {
                for f in &mut all[a as usize..=b as usize] {
                    *f |= flag;
                }
            }
        }
        let mut blocks = Vec::with_capacity(N / 256);
        let mut flags: Vec<u8> = Vec::new();
        let mut seen: std::collections::HashMap<&[u8], u16> = std::collections::HashMap::new();
        for chunk in all.chunks(256) {
            let id = *seen.entry(chunk).or_insert_with(|| {
                let id = (flags.len() / 256) as u16;
                flags.extend_from_slice(chunk);
                id
            });
            blocks.push(id);
        }
        Self { blocks, flags }
    }

    /// The shared table (built on first use, a few milliseconds).
    pub fn get() -> &'static CharClasses {
        static TABLE: OnceLock<CharClasses> = OnceLock::new();
        TABLE.get_or_init(Self::build)
    }

    #[inline(always)]
    pub fn of(&self, c: u32) -> u8 {
        let block = self.blocks[(c >> 8) as usize] as usize;
        self.flags[(block << 8) | (c & 0xff) as usize]
    }
}

/// The characters a case-insensitive `c` matches (e.g. `s`, `S` and `ſ` for `s`),
/// as the regex engines fold case.
pub fn case_variants(c: char) -> Vec<char> {
    let mut out = Vec::new();
    for (a, b) in ranges(&format!("(?i:[{c}])")) {
        for x in a..=b {
            out.extend(char::from_u32(x));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_agree_with_char_methods_where_they_should() {
        let t = CharClasses::get();
        for c in ['a', 'Z', 'é', '中', 'ǅ', 'ʰ'] {
            assert!(t.of(c as u32) & LETTER != 0, "{c}");
        }
        for c in ['0', '٣', 'Ⅻ', '½'] {
            assert!(t.of(c as u32) & NUMBER != 0, "{c}");
        }
        for c in 0..=0x10FFFFu32 {
            if let Some(ch) = char::from_u32(c) {
                assert_eq!(t.of(c) & SPACE != 0, ch.is_whitespace(), "U+{c:04X}");
            }
        }
        assert_eq!(t.of('\u{301}' as u32) & (UPPERISH | LOWERISH), UPPERISH | LOWERISH);
        assert_eq!(t.of('A' as u32) & (UPPERISH | LOWERISH), UPPERISH);
        assert_eq!(t.of('a' as u32) & (UPPERISH | LOWERISH), LOWERISH);
        assert_eq!(t.of('\n' as u32) & NEWLINE, NEWLINE);
    }

    #[test]
    fn case_folding_of_contraction_letters() {
        let mut s = case_variants('s');
        s.sort();
        assert_eq!(s, vec!['S', 's', 'ſ']);
        let mut t = case_variants('t');
        t.sort();
        assert_eq!(t, vec!['T', 't']);
    }
}
