//! The ranks of the vocabulary's three-byte tokens, indexed by their first two bytes.
//!
//! Three-byte strings are the commonest lookup of byte-pair merging (44% of the lookups of
//! three or more bytes made while merging the distinct pieces of a 20 MB stream with
//! cl100k_base; 62% of them are tokens), and three-byte pieces are common in text whose
//! pieces never repeat. The general token
//! table answers them with a Bloom filter probe and a hash table probe whose entry is
//! usually a load from the last-level cache or memory. Here the first two bytes index a
//! dense table of groups, and a group's 256-bit set says which third bytes make a token;
//! the rank follows by counting bits. cl100k_base's 11,939 three-byte tokens share 2,341
//! two-byte prefixes: 128 KiB of group numbers, 110 KiB of groups and 47 KiB of ranks, all
//! likely to stay in the CPU's second-level cache. The answer is exact (no false positive
//! to confirm), and a string whose first two bytes start no three-byte token needs one
//! load.

use crate::error::Rank;

/// One two-byte prefix's tokens: for each 64-value quarter of the third byte, which
/// values make a token, and the index in `ranks` of the first token of that quarter.
#[derive(Clone, Copy, Default)]
struct Group {
    bits: [u64; 4],
    base: [u32; 4],
}

pub struct ThreeByteTokens {
    /// For each first two bytes `a << 8 | b`, one more than the index of their group, or 0
    /// when no three-byte token starts with them (an array, so that an index made of two
    /// bytes needs no bounds check).
    group_of: Box<[u16; 1 << 16]>,
    groups: Box<[Group]>,
    /// Ranks in order of (prefix group, third byte).
    ranks: Box<[Rank]>,
}

impl ThreeByteTokens {
    /// The table of `tokens`, the `(bytes, rank)` of every three-byte token; `None` if they
    /// have more distinct two-byte prefixes than a group number can count (no real
    /// vocabulary comes near 65,535) or if a string comes twice (the vocabulary then finds
    /// it among all its short tokens and reports it).
    pub fn new(tokens: impl IntoIterator<Item = ([u8; 3], Rank)>) -> Option<Self> {
        let mut tokens: Vec<([u8; 3], Rank)> = tokens.into_iter().collect();
        tokens.sort_unstable();
        let mut group_of: Box<[u16; 1 << 16]> = vec![0u16; 1 << 16].into_boxed_slice().try_into().expect("65,536 places");
        let mut groups: Vec<Group> = Vec::new();
        let mut ranks = Vec::with_capacity(tokens.len());
        for ([a, b, c], rank) in tokens {
            let prefix = (a as usize) << 8 | b as usize;
            if group_of[prefix] == 0 {
                if groups.len() >= u16::MAX as usize {
                    return None;
                }
                groups.push(Group::default());
                group_of[prefix] = groups.len() as u16;
            }
            let g = &mut groups[group_of[prefix] as usize - 1];
            let q = (c >> 6) as usize;
            if g.bits[q] == 0 {
                // Tokens arrive sorted, so this quarter's first token is the next rank.
                g.base[q] = ranks.len() as u32;
            }
            if g.bits[q] & 1 << (c & 63) != 0 {
                return None;
            }
            g.bits[q] |= 1 << (c & 63);
            ranks.push(rank);
        }
        Some(Self { group_of, groups: groups.into_boxed_slice(), ranks: ranks.into_boxed_slice() })
    }

    /// The rank of the three bytes `a b c`, `Rank::MAX` when they are no token.
    #[inline(always)]
    pub fn get(&self, a: u8, b: u8, c: u8) -> Rank {
        let g = self.group_of[(a as usize) << 8 | b as usize] as usize;
        if g == 0 {
            return Rank::MAX;
        }
        let group = &self.groups[g - 1];
        let q = (c >> 6) as usize;
        let bit = 1u64 << (c & 63);
        let word = group.bits[q];
        if word & bit == 0 {
            return Rank::MAX;
        }
        self.ranks[group.base[q] as usize + (word & (bit - 1)).count_ones() as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_token_and_nothing_else() {
        // Tokens spread over every quarter of the third byte, prefixes with one token and
        // with all 256, ranks in no particular order.
        let mut tokens: Vec<[u8; 3]> = Vec::new();
        for c in 0..=255u8 {
            tokens.push([0, 0, c]);
        }
        for (i, p) in [[1u8, 2], [255, 255], [b' ', b't'], [0x80, 0x00]].iter().enumerate() {
            for c in (0..=255u8).filter(|c| (*c as usize * 7 + i) % 5 < 2) {
                tokens.push([p[0], p[1], c]);
            }
        }
        tokens.push([9, 9, 63]);
        tokens.push([9, 9, 64]);
        let rank = |t: &[u8; 3]| (t[0] as Rank * 65_521 + t[1] as Rank * 257 + t[2] as Rank * 31) % 1_000_003;
        let table = ThreeByteTokens::new(tokens.iter().map(|t| (*t, rank(t)))).unwrap();
        let set: std::collections::HashSet<[u8; 3]> = tokens.iter().copied().collect();
        for a in [0u8, 1, 9, b' ', 0x80, 255] {
            for b in [0u8, 2, 9, b't', 255] {
                for c in 0..=255u8 {
                    let t = [a, b, c];
                    let want = if set.contains(&t) { rank(&t) } else { Rank::MAX };
                    assert_eq!(table.get(a, b, c), want, "{t:?}");
                }
            }
        }
    }

    #[test]
    fn a_string_given_twice_makes_no_table() {
        assert!(ThreeByteTokens::new([(*b"abc", 7), (*b"abd", 8)]).is_some());
        assert!(ThreeByteTokens::new([(*b"abc", 7), (*b"abd", 8), (*b"abc", 9)]).is_none());
    }

    #[test]
    fn empty_vocabulary_has_no_tokens() {
        let table = ThreeByteTokens::new(std::iter::empty()).unwrap();
        assert_eq!(table.get(b'a', b'b', b'c'), Rank::MAX);
    }
}
