//! A bounded cache of encoded pieces, one per thread, so that parallel batch encoding
//! takes no lock. Real text repeats its words: once a piece is encoded, the next occurrence
//! costs one probe of a table that stays in the CPU's cache instead of a lookup in the
//! large vocabulary table (and possibly a byte-pair merge).
//!
//! Two levels, both bounded however much text passes:
//! * a direct-mapped table for pieces of at most 15 bytes that encode to at most
//!   [`MAX_TOKENS`] tokens (a new entry replaces whatever hashed to its slot; a few hundred
//!   KiB per thread, small enough to stay in the CPU's cache);
//! * an open-addressing table for the other pieces that needed byte-pair merging (long
//!   words, scripts with multi-byte characters), its keys and tokens stored in two pools
//!   (no allocation per entry), emptied whenever it holds [`MAX_LONG_ENTRIES`].
//!
//! Entries are tied to the encoder that wrote them, so encoders never see each other's
//! results.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};

use std::hash::Hasher;

use rustc_hash::FxHasher;

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

/// Slots of the second level (a power of two), and the entries it holds before it is
/// emptied (three quarters of the slots).
const LONG_BITS: u32 = 16;
pub const MAX_LONG_ENTRIES: usize = (1 << LONG_BITS) / 4 * 3;
/// Longest piece the second level keeps.
pub const MAX_LONG_KEY: usize = 255;

/// A second-level slot: where the key's bytes and its tokens are in the pools. `hash` is 0
/// for an empty slot (hashes are made odd).
#[derive(Clone, Copy, Default)]
struct LongSlot {
    hash: u32,
    key_at: u32,
    tokens_at: u32,
    key_len: u8,
    tokens_len: u8,
}

struct LongCache {
    owner: u32,
    slots: Box<[LongSlot]>,
    keys: Vec<u8>,
    tokens: Vec<Rank>,
    len: usize,
}

impl LongCache {
    fn new() -> Self {
        Self { owner: 0, slots: Box::default(), keys: Vec::new(), tokens: Vec::new(), len: 0 }
    }

    #[inline]
    fn hash(piece: &[u8]) -> u32 {
        let mut h = FxHasher::default();
        h.write(piece);
        (h.finish() >> 32) as u32 | 1
    }

    #[inline]
    fn get(&self, owner: u32, piece: &[u8]) -> Option<&[Rank]> {
        if self.owner != owner || self.slots.is_empty() {
            return None;
        }
        let hash = Self::hash(piece);
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let s = self.slots[i];
            if s.hash == 0 {
                return None;
            }
            if s.hash == hash && s.key_len as usize == piece.len() {
                let k = s.key_at as usize;
                if &self.keys[k..k + piece.len()] == piece {
                    let t = s.tokens_at as usize;
                    return Some(&self.tokens[t..t + s.tokens_len as usize]);
                }
            }
            i = (i + 1) & mask;
        }
    }

    fn put(&mut self, owner: u32, piece: &[u8], tokens: &[Rank]) {
        if piece.len() > MAX_LONG_KEY || tokens.len() > MAX_LONG_KEY {
            return;
        }
        if self.slots.is_empty() {
            self.slots = vec![LongSlot::default(); 1 << LONG_BITS].into_boxed_slice();
        }
        if self.owner != owner || self.len >= MAX_LONG_ENTRIES {
            self.slots.fill(LongSlot::default());
            self.keys.clear();
            self.tokens.clear();
            self.len = 0;
            self.owner = owner;
        }
        let hash = Self::hash(piece);
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        while self.slots[i].hash != 0 {
            i = (i + 1) & mask; // (a piece already present is not put again: callers look first)
        }
        self.slots[i] = LongSlot {
            hash,
            key_at: self.keys.len() as u32,
            tokens_at: self.tokens.len() as u32,
            key_len: piece.len() as u8,
            tokens_len: tokens.len() as u8,
        };
        self.keys.extend_from_slice(piece);
        self.tokens.extend_from_slice(tokens);
        self.len += 1;
    }
}

pub struct PieceCache {
    /// Pair merges memoized for byte-pair merging (see `bpe::PairMemo`).
    pub pairs: PairMemo,
    slots: Box<[Slot]>,
    long: LongCache,
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
        Self { pairs: PairMemo::default(), slots: vec![Slot::default(); SLOTS].into_boxed_slice(), long: LongCache::new() }
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
        self.long.get(owner, piece)
    }

    pub fn put_long(&mut self, owner: u32, piece: &[u8], tokens: &[Rank]) {
        self.long.put(owner, piece, tokens);
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
        assert_eq!(c.get_long(2, b"other"), Some(&[5][..]));
    }

    #[test]
    fn second_level_is_bounded_and_keeps_what_it_was_given() {
        let mut c = PieceCache::new();
        let key = |i: usize| format!("piece number {i}").into_bytes();
        let n = 2 * MAX_LONG_ENTRIES + 5;
        for i in 0..n {
            c.put_long(1, &key(i), &[i as Rank, 7, 8, 9]);
            assert!(c.long.len <= MAX_LONG_ENTRIES);
            assert_eq!(c.get_long(1, &key(i)), Some(&[i as Rank, 7, 8, 9][..]));
        }
        // Emptied when full: what came after the last emptying is there, nothing before.
        for i in n - 5..n {
            assert_eq!(c.get_long(1, &key(i)), Some(&[i as Rank, 7, 8, 9][..]));
        }
        assert_eq!(c.get_long(1, &key(n - 6)), None);
        assert!(c.long.keys.len() < MAX_LONG_ENTRIES * 32);
        c.put_long(1, &[b'x'; MAX_LONG_KEY + 1], &[1, 2, 3, 4]);
        assert_eq!(c.get_long(1, &[b'x'; MAX_LONG_KEY + 1]), None);
    }
}
