//! A bounded cache of encoded pieces, one per thread, so that parallel batch encoding
//! takes no lock. Real text repeats its words: once a piece is encoded, the next occurrence
//! costs one probe of a table that stays in the CPU's cache instead of a lookup in the
//! large vocabulary table (and possibly a byte-pair merge).
//!
//! Two levels, both bounded however much text passes:
//! * a direct-mapped table for pieces of at most 15 bytes that encode to at most
//!   [`MAX_TOKENS`] tokens (a new entry replaces whatever hashed to its slot; a few hundred
//!   KiB per thread, small enough to stay in the CPU's cache);
//! * a hash map for the other pieces that needed byte-pair merging (long words, scripts
//!   with multi-byte characters), emptied whenever it reaches [`MAX_LONG_ENTRIES`].
//!
//! Entries are tied to the encoder that wrote them, so encoders never see each other's
//! results.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};

use rustc_hash::FxHashMap;

use crate::bpe::PairMemo;
use crate::error::Rank;

/// Slots per thread (a power of two).
const SLOT_BITS: u32 = 14;
const SLOTS: usize = 1 << SLOT_BITS;
/// Pieces encoding to more tokens than this are not cached.
pub const MAX_TOKENS: usize = 3;

/// One entry: 32 bytes, aligned so that a probe touches one cache line. Unused token
/// places hold `Rank::MAX`, never a token id (ids are below `u32::MAX`).
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
struct Slot {
    key: [u64; 2],
    tokens: [Rank; MAX_TOKENS],
    owner: u32,
}

/// Entries of the second level before it is emptied.
pub const MAX_LONG_ENTRIES: usize = 1 << 17;

pub struct PieceCache {
    /// Pair merges memoized for byte-pair merging (see `bpe::PairMemo`).
    pub pairs: PairMemo,
    slots: Box<[Slot]>,
    long: FxHashMap<Box<[u8]>, Box<[Rank]>>,
    long_owner: u32,
}

static NEXT_OWNER: AtomicU32 = AtomicU32::new(1);

/// A fresh owner id for a new encoder (0 marks an empty slot).
pub fn new_owner() -> u32 {
    NEXT_OWNER.fetch_add(1, Ordering::Relaxed).max(1)
}

thread_local! {
    static CACHE: RefCell<Option<PieceCache>> = const { RefCell::new(None) };
}

impl PieceCache {
    fn new() -> Self {
        Self { pairs: PairMemo::default(), slots: vec![Slot::default(); SLOTS].into_boxed_slice(), long: FxHashMap::default(), long_owner: 0 }
    }

    #[inline(always)]
    fn slot(key: u128) -> usize {
        // Fibonacci hashing of the folded key.
        let h = ((key as u64) ^ ((key >> 64) as u64).rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> (64 - SLOT_BITS)) as usize
    }

    #[inline(always)]
    fn split(key: u128) -> [u64; 2] {
        [key as u64, (key >> 64) as u64]
    }

    /// The tokens cached for `key` by `owner`, padded with `Rank::MAX`.
    #[inline(always)]
    pub fn get(&self, owner: u32, key: u128) -> Option<[Rank; MAX_TOKENS]> {
        let s = &self.slots[Self::slot(key)];
        (s.owner == owner && s.key == Self::split(key)).then_some(s.tokens)
    }

    #[inline(always)]
    pub fn put(&mut self, owner: u32, key: u128, tokens: &[Rank]) {
        if tokens.len() > MAX_TOKENS {
            return;
        }
        let s = &mut self.slots[Self::slot(key)];
        s.key = Self::split(key);
        s.owner = owner;
        s.tokens = [Rank::MAX; MAX_TOKENS];
        s.tokens[..tokens.len()].copy_from_slice(tokens);
    }

    /// The tokens of a piece that needed merging and does not fit the first level.
    #[inline]
    pub fn get_long(&self, owner: u32, piece: &[u8]) -> Option<&[Rank]> {
        if self.long_owner != owner {
            return None;
        }
        self.long.get(piece).map(|t| &t[..])
    }

    pub fn put_long(&mut self, owner: u32, piece: &[u8], tokens: &[Rank]) {
        if self.long_owner != owner || self.long.len() >= MAX_LONG_ENTRIES {
            self.long.clear();
            self.long_owner = owner;
        }
        self.long.insert(piece.into(), tokens.into());
    }

    /// Runs `f` with this thread's cache (created on first use). A re-entrant call gets a
    /// temporary cache instead of failing.
    pub fn with<R>(f: impl FnOnce(&mut PieceCache) -> R) -> R {
        CACHE.with(|cell| match cell.try_borrow_mut() {
            Ok(mut guard) => f(guard.get_or_insert_with(PieceCache::new)),
            Err(_) => f(&mut PieceCache::new()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::inline_key;

    #[test]
    fn owners_do_not_share_entries_and_long_results_are_skipped() {
        let mut c = PieceCache::new();
        let k = inline_key(b"hello");
        c.put(1, k, &[7, 8]);
        assert_eq!(c.get(1, k), Some([7, 8, Rank::MAX]));
        assert_eq!(c.get(2, k), None);
        assert_eq!(c.get(1, inline_key(b"hellp")), None);
        c.put(1, k, &[1, 2, 3, 4]);
        assert_eq!(c.get(1, k), Some([7, 8, Rank::MAX]));
        c.put(1, k, &[9]);
        assert_eq!(c.get(1, k), Some([9, Rank::MAX, Rank::MAX]));
        c.put_long(1, b"a long piece of text", &[1, 2, 3, 4]);
        assert_eq!(c.get_long(1, b"a long piece of text"), Some(&[1, 2, 3, 4][..]));
        assert_eq!(c.get_long(2, b"a long piece of text"), None);
        c.put_long(2, b"other", &[5]);
        assert_eq!(c.get_long(1, b"a long piece of text"), None);
    }
}
