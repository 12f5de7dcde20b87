//! Bounded caches of encoded pieces. Real text repeats its words: once a piece is encoded,
//! the next occurrence costs one probe of a small table instead of a lookup in the large
//! vocabulary table (and possibly a byte-pair merge).
//!
//! Three tables, all bounded however much text passes:
//! * [`SharedPieces`], one per encoder and shared by every thread that encodes with it: a
//!   direct-mapped table (8 MiB) for pieces of at most 15 bytes that encode to at most
//!   [`MAX_TOKENS`] tokens (a new entry replaces whatever hashed to its slot). The
//!   encoder asks it first for every such piece, one byte long or fifteen, so that the
//!   common case is one probe with no branch on the piece's length. Batch
//!   workers thus warm one table together instead of each its own. It takes no lock:
//!   each slot is a small seqlock (a reader that overlaps a write sees a miss, never a
//!   mix of two entries), and a writer that finds a slot busy skips the write;
//! * [`WidePieces`], shared likewise and built the same way (1 MiB, slots of one cache
//!   line, and a byte of tag per slot read first): the pieces of at most 15 bytes with
//!   more tokens, up to [`WIDE_TOKENS`] (for more, a slot records only that the second
//!   level may hold them). The encoder asks it when the first level misses such a piece;
//! * [`PieceCache`], one per thread: an open-addressing table for the other pieces that
//!   needed byte-pair merging (pieces of more than 15 bytes, and short ones of more than
//!   [`WIDE_TOKENS`] tokens), each entry's key and tokens side by side in one pool (no
//!   allocation per entry), emptied whenever it holds [`MAX_LONG_ENTRIES`]. Its entries
//!   are tied to the encoder that wrote them, so encoders never see each other's
//!   results.
//!
//! Each thread also watches how often the caches answer ([`CacheUse`]) and skips both
//! levels for a while when recent pieces were almost never there (random text).

use std::cell::RefCell;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};

use std::hash::Hasher;

use rustc_hash::FxHasher;

use crate::error::Rank;
use crate::huge_pages::ZeroedTable;
use crate::prefetch::prefetch;

/// Slots of the shared first level (a power of two). 2^18 slots of 32 bytes (8 MiB), on
/// huge pages where the system grants them (see [`ZeroedTable`]). 2^16 slots once
/// measured 1.04-1.06x the speed of 2^14 on the encoding benchmark's long stream; larger
/// tables on small pages then lost on the short run, where most probes miss and each
/// miss also missed the TLB. On huge pages 2^18 slots ran, against 2^16 on small pages
/// (Rust harness, pinned, 6 ABBA groups): short run 1.01x (o200k) and 1.04x (cl100k),
/// long stream 1.06x and 1.03x, warm pass 1.06x and 1.07x.
const SLOT_BITS: u32 = 18;
const SLOTS: usize = 1 << SLOT_BITS;
/// Pieces encoding to more tokens than this are not kept in the first level.
pub const MAX_TOKENS: usize = 3;

/// A slot's `version` word: bit 0 is set while a writer fills the slot, bits 1-2 hold its
/// token count, and the bits above count the writes (a reader that sees the same word
/// before and after reading the slot read one entry whole). The count rides in the word
/// every probe reads anyway, so the key is compared as it is: with the count in the
/// key's top bits, as before, the mask that took it out cost a 64-bit constant, and in
/// the encoder's probe loop the registers it took made the compiler move values to and
/// fro (about 3% of the warm pass's instructions, cachegrind).
const WRITING: u32 = 1;
const COUNT_SHIFT: u32 = 1;
const COUNT_MASK: u32 = 3;
const WRITE_STEP: u32 = 1 << 3;
const _: () = assert!(MAX_TOKENS as u32 <= COUNT_MASK);

/// One first-level entry: 32 bytes, aligned so that a probe touches one cache line.
/// Unused token places hold `Rank::MAX`, never a token id (ids are below `u32::MAX`); a
/// zero key matches no piece.
#[derive(Default)]
#[repr(C, align(32))]
pub struct SharedSlot {
    version: AtomicU32,
    tokens: [AtomicU32; MAX_TOKENS],
    key: [AtomicU64; 2],
}

impl SharedSlot {
    /// The slot's tokens for the piece with [`inline_key`](crate::vocab::inline_key)
    /// `key`, written straight to `dst`: all [`MAX_TOKENS`] places are written whenever
    /// the key matches, and the count is returned only if the slot was not being written
    /// meanwhile. So the tokens go from the slot to their place with no stop on the way; a
    /// caller keeps the ids only up to the count it gets (the rest is overwritten later or
    /// left past its length).
    ///
    /// # Safety
    /// `dst` must be valid for writing [`MAX_TOKENS`] ids (unaligned).
    #[inline(always)]
    pub unsafe fn copy_to(&self, key: u128, dst: *mut Rank) -> Option<usize> {
        let before = self.version.load(Ordering::Acquire);
        if self.key[0].load(Ordering::Relaxed) != key as u64 || self.key[1].load(Ordering::Relaxed) != (key >> 64) as u64 {
            return None;
        }
        let tokens = [self.tokens[0].load(Ordering::Relaxed), self.tokens[1].load(Ordering::Relaxed), self.tokens[2].load(Ordering::Relaxed)];
        // SAFETY: the caller's promise.
        unsafe { dst.cast::<[Rank; MAX_TOKENS]>().write_unaligned(tokens) };
        fence(Ordering::Acquire);
        let after = self.version.load(Ordering::Relaxed);
        (before == after && before & WRITING == 0).then_some((before >> COUNT_SHIFT & COUNT_MASK) as usize)
    }
}

/// The first level (see the module documentation).
pub struct SharedPieces {
    /// A fixed-size array, indexed modulo its size: no bounds check, and no length to
    /// load, on the hit path.
    slots: ZeroedTable<[SharedSlot; SLOTS]>,
}

impl Default for SharedPieces {
    fn default() -> Self {
        // SAFETY: an all-zero slot is a valid, empty one (its atomics read 0; a zero key
        // matches no piece).
        Self { slots: unsafe { ZeroedTable::new_zeroed() } }
    }
}

impl SharedPieces {
    /// The slot of `key` (see [`SharedPieces::slot_at`]).
    #[inline(always)]
    pub fn index(key: u128) -> usize {
        // Fibonacci hashing of the folded key.
        let h = ((key as u64) ^ ((key >> 64) as u64).rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> (64 - SLOT_BITS)) as usize
    }

    #[inline(always)]
    fn slot(&self, key: u128) -> &SharedSlot {
        self.slot_at(Self::index(key))
    }

    /// The tokens cached for the piece with [`inline_key`](crate::vocab::inline_key)
    /// `key`, padded with `Rank::MAX`, and how many there are.
    #[inline(always)]
    pub fn get(&self, key: u128) -> Option<([Rank; MAX_TOKENS], usize)> {
        self.get_at(Self::index(key), key)
    }

    /// [`SharedPieces::get`] for a key whose slot is `i` (its [`SharedPieces::index`]).
    #[inline(always)]
    pub fn get_at(&self, i: usize, key: u128) -> Option<([Rank; MAX_TOKENS], usize)> {
        let mut tokens = [Rank::MAX; MAX_TOKENS];
        // SAFETY: `tokens` has room for MAX_TOKENS ids.
        let count = unsafe { self.slot_at(i).copy_to(key, tokens.as_mut_ptr()) }?;
        Some((tokens, count))
    }

    /// Slot `i` (an [`SharedPieces::index`]): the encoder finds it once per piece, when it
    /// prefetches it, and probes it later ([`SharedSlot::copy_to`]).
    #[inline(always)]
    pub fn slot_at(&self, i: usize) -> &SharedSlot {
        &self.slots[i % SLOTS]
    }

    /// Caches the tokens of a piece (nothing if there are more than [`MAX_TOKENS`], or if
    /// another thread is writing the slot just now).
    #[inline(always)]
    pub fn put(&self, key: u128, tokens: &[Rank]) {
        if tokens.len() > MAX_TOKENS {
            return;
        }
        let s = self.slot(key);
        write_entry(&s.version, &s.key, &s.tokens, WRITE_STEP, key, tokens, tokens.len());
    }
}

/// Writes an entry into a slot guarded by the seqlock of its `version` word (see
/// [`SharedSlot`]): the key, the `tokens` (the places past them set to `Rank::MAX`), then
/// the next write number (a multiple of `write_step`) with `count` in the count bits.
/// Nothing if another thread is writing the slot just now; whether it wrote.
#[inline(always)]
fn write_entry(version: &AtomicU32, key_words: &[AtomicU64; 2], places: &[AtomicU32], write_step: u32, key: u128, tokens: &[Rank], count: usize) -> bool {
    let v = version.load(Ordering::Relaxed);
    if v & WRITING != 0 || version.compare_exchange(v, v | WRITING, Ordering::Relaxed, Ordering::Relaxed).is_err() {
        return false;
    }
    fence(Ordering::Release);
    key_words[0].store(key as u64, Ordering::Relaxed);
    key_words[1].store((key >> 64) as u64, Ordering::Relaxed);
    for (k, t) in places.iter().enumerate() {
        t.store(tokens.get(k).copied().unwrap_or(Rank::MAX), Ordering::Relaxed);
    }
    // The next write number, with this entry's count (and the writing bit clear).
    let next = (v & !(write_step - 1)).wrapping_add(write_step) | (count as u32) << COUNT_SHIFT;
    version.store(next, Ordering::Release);
    true
}

/// Slots of the wide table (a power of two): 2^14 slots of 64 bytes, 1 MiB.
const WIDE_BITS: u32 = 14;
const WIDE_SLOTS: usize = 1 << WIDE_BITS;
/// The most tokens a wide slot holds.
pub const WIDE_TOKENS: usize = 11;
/// The count [`WidePieces::get`] returns for a piece of more than [`WIDE_TOKENS`] tokens,
/// which the second level holds (a slot records only that).
pub const WIDE_OVERFLOW: usize = WIDE_COUNT_MASK as usize;
/// A wide slot's `version` word: bit 0 while a writer fills it, the count in bits 1-4,
/// the write number above.
const WIDE_COUNT_MASK: u32 = 15;
const WIDE_WRITE_STEP: u32 = 1 << 5;
const _: () = assert!(WIDE_TOKENS as u32 <= WIDE_COUNT_MASK);

/// One entry of [`WidePieces`]: one cache line.
#[derive(Default)]
#[repr(C, align(64))]
struct WideSlot {
    version: AtomicU32,
    tokens: [AtomicU32; WIDE_TOKENS],
    key: [AtomicU64; 2],
}

/// Short pieces (at most 15 bytes) of more than [`MAX_TOKENS`] and at most
/// [`WIDE_TOKENS`] tokens, shared by every thread like [`SharedPieces`] and with the same
/// seqlocks, keyed by the same inline key: a probe is one cache line, where the second
/// level, which held these pieces before, hashes the piece's bytes and reads a slot and
/// then its pool. Measured by counting (`benches/ab_builds.py --count`, the pass from
/// Python under callgrind), cl100k's 20 MB stream: 1.6% fewer instructions, 6.2% fewer
/// mispredicted branches, 3.3% fewer L1 misses and 2.2% fewer L2-sized last-level misses;
/// its UI text alone 3.0%, 6.9%, 8.0% and 6.6%; o200k's stream 0.6%, 5.4% and 1.0% fewer,
/// last-level misses 0.2% more. Timings on the 2-core host that measured it were within
/// its noise.
///
/// Most probes find nothing (on the benchmark's 4.5 MB slices, 68% of them for cl100k and
/// 82% for o200k; on the 20 MB stream 58% and 82%), and a probe of the slots alone waited
/// for memory: `perf` put 96% of the lookup's time on its first load, and the lookup at
/// 5-6% of the encoding. So each slot has a byte of tag, in a table of 16 KiB that stays
/// in the core's caches, and a probe whose tag differs stops there. Rust harness, pinned,
/// 4 ABBA groups each: 1.12x (cl100k) and 1.16x (o200k) on the short slices, 1.08x and
/// 1.06x on the stream; 0.2-0.3% more instructions and 1-2% fewer simulated last-level
/// misses.
pub struct WidePieces {
    slots: Box<[WideSlot]>,
    /// One byte per slot, from the hash of the key it holds (never 0, the byte of an empty
    /// slot), read before the slot: 16 KiB, which stays in a core's caches where the
    /// slots do not. Most probes of a cold or mixed text find no entry, and the tag
    /// answers all but about one in 128 of them without the slot's cache miss. Only a
    /// hint: the slot's key decides.
    tags: Box<[AtomicU8]>,
}

impl Default for WidePieces {
    fn default() -> Self {
        Self { slots: (0..WIDE_SLOTS).map(|_| WideSlot::default()).collect(), tags: (0..WIDE_SLOTS).map(|_| AtomicU8::new(0)).collect() }
    }
}

impl WidePieces {
    /// The slot of `key` and its tag.
    #[inline(always)]
    fn place(key: u128) -> (usize, u8) {
        let h = ((key as u64) ^ ((key >> 64) as u64).rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((h >> (64 - WIDE_BITS)) as usize % WIDE_SLOTS, (h >> 32) as u8 | 1)
    }

    /// Appends the tokens cached for the piece with inline key `key`; how many, or `None`
    /// when the piece is not there (or its slot is being written just now).
    /// [`WIDE_OVERFLOW`], with nothing appended, for a piece of more tokens than a slot
    /// holds: the second level may have them.
    #[inline]
    pub fn get(&self, key: u128, out: &mut Vec<Rank>) -> Option<usize> {
        let (i, tag) = Self::place(key);
        if self.tags[i].load(Ordering::Relaxed) != tag {
            // Not here: the piece is about to be merged, and if it has more than
            // MAX_TOKENS tokens, put in this slot, which is usually in no cache of the
            // processor's. Brought in now, during the merge.
            prefetch(&self.slots[i]);
            return None;
        }
        let s = &self.slots[i];
        let before = s.version.load(Ordering::Acquire);
        if s.key[0].load(Ordering::Relaxed) != key as u64 || s.key[1].load(Ordering::Relaxed) != (key >> 64) as u64 {
            return None;
        }
        let mut tokens = [0; WIDE_TOKENS];
        for (t, a) in tokens.iter_mut().zip(&s.tokens) {
            *t = a.load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        let after = s.version.load(Ordering::Relaxed);
        if before != after || before & WRITING != 0 {
            return None;
        }
        let count = ((before >> COUNT_SHIFT) & WIDE_COUNT_MASK) as usize;
        if count <= WIDE_TOKENS {
            out.extend_from_slice(&tokens[..count]);
        }
        Some(count)
    }

    /// Caches the tokens of a piece of more than [`MAX_TOKENS`] tokens (nothing if another
    /// thread is writing the slot just now); for more than [`WIDE_TOKENS`], only that
    /// the piece has that many.
    #[inline]
    pub fn put(&self, key: u128, tokens: &[Rank]) {
        if tokens.len() <= MAX_TOKENS {
            return;
        }
        let (count, tokens) = if tokens.len() > WIDE_TOKENS { (WIDE_OVERFLOW, &[][..]) } else { (tokens.len(), tokens) };
        let (i, tag) = Self::place(key);
        let s = &self.slots[i];
        if write_entry(&s.version, &s.key, &s.tokens, WIDE_WRITE_STEP, key, tokens, count) {
            self.tags[i].store(tag, Ordering::Relaxed);
        }
    }
}

/// Slots of the second level (a power of two), and the entries it holds before it is
/// emptied (three quarters of the slots).
const LONG_BITS: u32 = 16;
pub const MAX_LONG_ENTRIES: usize = (1 << LONG_BITS) / 4 * 3;
/// Longest piece the second level keeps.
pub const MAX_LONG_KEY: usize = 255;
/// Bits of the second level's presence filter (2^18 bits, 32 KiB): at most one set per
/// entry, so that when it is full, 17% of the pieces it does not hold still find their bit
/// set.
const PRESENT_BITS: u32 = 18;

/// The word and bit of the presence filter for a piece of this hash: its top bits (the
/// slot comes from its low bits).
#[inline(always)]
fn present_bit(hash: u32) -> (usize, u64) {
    let b = (hash >> (32 - PRESENT_BITS)) as usize;
    (b / 64, 1 << (b % 64))
}

/// A second-level slot: where its entry starts in the pool, and the lengths of its key and
/// tokens. `hash` is 0 for an empty slot (hashes are made odd).
#[derive(Clone, Copy, Default)]
struct LongSlot {
    hash: u32,
    at: u32,
    key_len: u8,
    tokens_len: u8,
}

/// Words of the pool that hold a key of `len` bytes (the last one padded with zeros).
#[inline(always)]
fn key_words(len: usize) -> usize {
    len.div_ceil(4)
}

/// The per-thread second level (see the module documentation).
pub struct PieceCache {
    owner: u64,
    slots: Box<[LongSlot]>,
    /// One bit per hash value (see [`present_bit`]), set for every entry: most pieces
    /// looked for here are not here (a short piece is, only if it has more than
    /// [`MAX_TOKENS`] tokens), and a clear bit says so without reading a slot, a load that
    /// usually misses the processor's caches.
    present: Box<[u64]>,
    /// The entries: each key's bytes (in [`key_words`] words, in memory order), then its
    /// tokens. A hit reads one place for both, not one pool for keys and another for
    /// tokens.
    pool: Vec<u32>,
    len: usize,
    /// Whether caching pays on the text this thread sees just now.
    pub usage: CacheUse,
}

/// Pieces per measuring window of [`CacheUse`], the hits below which caching stops (a
/// tenth), the pieces encoded without the caches before measuring again, and the shorter
/// window of that measuring again (`USE_WINDOW >> RECHECK_SHIFT` pieces).
const USE_WINDOW: u32 = 2048;
const USE_MIN_HITS: u32 = USE_WINDOW / 10;
const BYPASS_PIECES: u32 = 32 * USE_WINDOW;
const RECHECK_SHIFT: u32 = 2;

/// Decides whether to use the piece caches. On real text most pieces are found there (85%
/// of those of 3 to 15 bytes, over a long stream); on text where pieces never repeat
/// (random characters, hashes, base64) almost none are (3-4%), and then every probe is a
/// cache miss that buys nothing and every insertion evicts something useful. So hits are
/// counted over windows of `USE_WINDOW` pieces; after a window with under 10% hits the
/// caches are skipped for the next `BYPASS_PIECES` pieces, then measured again, over a
/// window a quarter as long: on such text a window's probes and insertions each miss the
/// processor's caches, several times the cost of a piece encoded without them, and the
/// caches kept what they held, so text that repeats again finds its common words at once.
/// Only speed depends on this, never the tokens.
#[derive(Default)]
pub struct CacheUse {
    seen: u32,
    hits: u32,
    bypass: u32,
    /// 0 for a full window, [`RECHECK_SHIFT`] while measuring again after a bypass.
    shift: u32,
}

impl CacheUse {
    /// Whether the next piece should go through the caches.
    #[inline(always)]
    pub fn caching(&mut self) -> bool {
        if self.bypass == 0 {
            return true;
        }
        self.bypass -= 1;
        false
    }

    /// Whether the caches are in use just now (unlike [`CacheUse::caching`], counts
    /// nothing).
    #[inline(always)]
    pub fn probing(&self) -> bool {
        self.bypass == 0
    }

    /// Counts a piece found in the first level; only pieces of more than three bytes
    /// count (`counted`), as in [`CacheUse::record`]. Without a branch on `counted`: it
    /// follows the lengths of the pieces, which real text makes hard to predict (a
    /// branch there was a fifth of the mispredictions of a warm pass, in cachegrind).
    #[inline(always)]
    pub fn count_hit(&mut self, counted: bool) {
        self.tally(counted as u32, counted as u32);
    }

    /// Counts `n` pieces of more than three bytes found in the first level, counted by the
    /// caller as it went (see [`CacheUse::count_hit`]).
    #[inline(always)]
    pub fn count_hits(&mut self, n: u32) {
        self.tally(n, n);
    }

    /// Counts a piece that went through the caches, found there or not.
    #[inline(always)]
    pub fn record(&mut self, hit: bool) {
        self.tally(hit as u32, 1);
    }

    /// Adds `hits` found pieces of `seen` counted ones to the window.
    #[inline(always)]
    fn tally(&mut self, hits: u32, seen: u32) {
        self.hits += hits;
        self.seen += seen;
        if self.seen >= USE_WINDOW >> self.shift {
            self.close_window();
        }
    }

    /// Ends a window of counted pieces: too few hits turn the caches off for a while.
    #[cold]
    fn close_window(&mut self) {
        if self.hits < USE_MIN_HITS >> self.shift {
            self.bypass = BYPASS_PIECES;
            self.shift = RECHECK_SHIFT;
        } else {
            self.shift = 0;
        }
        self.seen = 0;
        self.hits = 0;
    }
}

impl PieceCache {
    fn new() -> Self {
        Self { owner: 0, slots: Box::default(), present: Box::default(), pool: Vec::new(), len: 0, usage: CacheUse::default() }
    }

    #[inline]
    fn hash(piece: &[u8]) -> u32 {
        let mut h = FxHasher::default();
        h.write(piece);
        (h.finish() >> 32) as u32 | 1
    }

    /// The tokens of a piece that needed merging and does not fit the first level.
    #[inline]
    pub fn get_long(&self, owner: u64, piece: &[u8]) -> Option<&[Rank]> {
        if self.owner != owner || self.slots.is_empty() {
            return None;
        }
        let hash = Self::hash(piece);
        let (word, bit) = present_bit(hash);
        let mask = self.slots.len() - 1;
        if self.present[word] & bit == 0 {
            // The piece is about to be merged and put, and its put starts at this slot,
            // which is usually in no cache of the processor's: brought in now, during the
            // merge, instead of when the put needs it.
            prefetch(&self.slots[hash as usize & mask]);
            return None;
        }
        let mut i = hash as usize & mask;
        loop {
            let s = self.slots[i];
            if s.hash == 0 {
                return None;
            }
            if s.hash == hash && s.key_len as usize == piece.len() {
                let at = s.at as usize;
                let words = key_words(piece.len());
                let entry = &self.pool[at..at + words + s.tokens_len as usize];
                let (key, tokens) = entry.split_at(words);
                // SAFETY: the key's words hold at least `piece.len()` bytes, and any bytes of
                // a `u32` are valid `u8`s.
                let key = unsafe { std::slice::from_raw_parts(key.as_ptr().cast::<u8>(), piece.len()) };
                if key == piece {
                    return Some(tokens);
                }
            }
            i = (i + 1) & mask;
        }
    }

    pub fn put_long(&mut self, owner: u64, piece: &[u8], tokens: &[Rank]) {
        if piece.len() > MAX_LONG_KEY || tokens.len() > MAX_LONG_KEY {
            return;
        }
        if self.slots.is_empty() {
            self.slots = vec![LongSlot::default(); 1 << LONG_BITS].into_boxed_slice();
            self.present = vec![0; 1 << (PRESENT_BITS - 6)].into_boxed_slice();
        }
        if self.owner != owner || self.len >= MAX_LONG_ENTRIES {
            self.slots.fill(LongSlot::default());
            self.present.fill(0);
            self.pool.clear();
            self.len = 0;
            self.owner = owner;
        }
        let hash = Self::hash(piece);
        let (word, bit) = present_bit(hash);
        self.present[word] |= bit;
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        while self.slots[i].hash != 0 {
            i = (i + 1) & mask; // (a piece already present is not put again: callers look first)
        }
        self.slots[i] = LongSlot { hash, at: self.pool.len() as u32, key_len: piece.len() as u8, tokens_len: tokens.len() as u8 };
        self.pool.extend(piece.chunks(4).map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            u32::from_ne_bytes(w)
        }));
        self.pool.extend_from_slice(tokens);
        self.len += 1;
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

static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// A fresh owner id for a new encoder (0 marks an empty cache). 64 bits, so that no two
/// encoders of a process ever share one: a thread's second level then never answers one
/// encoder with another's ids (32 bits wrapped after 2^32 encoders).
pub fn new_owner() -> u64 {
    NEXT_OWNER.fetch_add(1, Ordering::Relaxed)
}

thread_local! {
    static CACHE: RefCell<Option<PieceCache>> = const { RefCell::new(None) };
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::inline_key;

    #[test]
    fn caching_stops_while_pieces_do_not_repeat_and_resumes_after() {
        let mut u = CacheUse::default();
        // Real text: plenty of hits, caching never stops.
        for i in 0..10 * USE_WINDOW {
            assert!(u.caching());
            u.record(i % 3 != 0);
        }
        // Pieces that never repeat: after one window, the next BYPASS_PIECES skip the caches.
        for _ in 0..USE_WINDOW {
            assert!(u.caching());
            u.record(false);
        }
        for _ in 0..BYPASS_PIECES {
            assert!(!u.caching());
        }
        // Then measured again: hits keep caching on.
        for _ in 0..3 * USE_WINDOW {
            assert!(u.caching());
            u.record(true);
        }
        // Just under the threshold stops it; just at it does not.
        for i in 0..USE_WINDOW {
            u.record(i < USE_MIN_HITS);
        }
        assert!(u.caching());
        for i in 0..USE_WINDOW {
            u.record(i < USE_MIN_HITS - 1);
        }
        assert!(!u.caching());
        // Measured again after a bypass: over a quarter window, whose tenth decides.
        let recheck = USE_WINDOW >> RECHECK_SHIFT;
        for _ in 1..BYPASS_PIECES {
            assert!(!u.caching());
        }
        for _ in 0..recheck {
            assert!(u.caching());
            u.record(false);
        }
        assert!(!u.caching(), "a quarter window without hits starts another bypass");
        for _ in 1..BYPASS_PIECES {
            assert!(!u.caching());
        }
        for i in 0..recheck {
            u.record(i < (USE_MIN_HITS >> RECHECK_SHIFT) - 1);
        }
        assert!(!u.caching(), "one hit short of a quarter window's tenth");
        for _ in 1..BYPASS_PIECES {
            assert!(!u.caching());
        }
        for i in 0..recheck {
            u.record(i < USE_MIN_HITS >> RECHECK_SHIFT);
        }
        // Enough hits: caching goes on, and the next window is a full one again.
        for _ in 0..USE_WINDOW - 1 {
            assert!(u.caching());
            u.record(false);
        }
        assert!(u.caching(), "a full window is not over after USE_WINDOW - 1 pieces");
        u.record(false);
        assert!(!u.caching());
    }

    #[test]
    fn first_level_keeps_short_results_only() {
        let c = SharedPieces::default();
        let k = inline_key(b"hello");
        assert_eq!(c.get(k), None);
        c.put(k, &[7, 8]);
        assert_eq!(c.get(k), Some(([7, 8, Rank::MAX], 2)));
        assert_eq!(c.get(inline_key(b"hellp")), None);
        c.put(k, &[1, 2, 3, 4]);
        assert_eq!(c.get(k), Some(([7, 8, Rank::MAX], 2)));
        c.put(k, &[9]);
        assert_eq!(c.get(k), Some(([9, Rank::MAX, Rank::MAX], 1)));
        c.put(k, &[4, 5, 6]);
        assert_eq!(c.get(k), Some(([4, 5, 6], 3)));
        let mut copied = [0; MAX_TOKENS];
        // SAFETY: `copied` has room for MAX_TOKENS ids.
        assert_eq!(unsafe { c.slot_at(SharedPieces::index(k)).copy_to(k, copied.as_mut_ptr()) }, Some(3));
        assert_eq!(copied, [4, 5, 6]);
        // SAFETY: as above.
        assert_eq!(unsafe { c.slot_at(SharedPieces::index(inline_key(b"hellp"))).copy_to(inline_key(b"hellp"), copied.as_mut_ptr()) }, None);
    }

    #[test]
    fn first_level_never_mixes_entries_under_concurrent_writes() {
        // Pieces whose tokens (one to three of them) are a function of the key, all hashing
        // to one slot; several threads write and read it at once. A read, either kind,
        // returns the right tokens and count or a miss.
        let c = SharedPieces::default();
        let target = SharedPieces::index(inline_key(b"w0"));
        let keys: Vec<u128> = (0..8 * SLOTS as u32).map(|i| inline_key(format!("w{i}").as_bytes())).filter(|&k| SharedPieces::index(k) == target).take(8).collect();
        assert!(keys.len() >= 4);
        let hits = AtomicU64::new(0);
        let tokens = |i: usize| [i as Rank, 1000 + i as Rank, 2000 + i as Rank][..1 + i % 3].to_vec();
        std::thread::scope(|s| {
            for t in 0..4 {
                let (c, keys, hits) = (&c, &keys, &hits);
                s.spawn(move || {
                    for round in 0..50_000 {
                        let i = (round * 7 + t * 13) % keys.len();
                        c.put(keys[i], &tokens(i));
                        for (j, &k) in keys.iter().enumerate() {
                            if let Some((got, n)) = c.get(k) {
                                assert_eq!(got[..n], tokens(j));
                                hits.fetch_add(1, Ordering::Relaxed);
                            }
                            let mut copied = [0 as Rank; MAX_TOKENS];
                            // SAFETY: `copied` has room for MAX_TOKENS ids.
                            if let Some(n) = unsafe { c.slot_at(target).copy_to(k, copied.as_mut_ptr()) } {
                                assert_eq!(copied[..n], tokens(j));
                                hits.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
        assert!(hits.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn wide_table_keeps_four_to_eleven_tokens_and_marks_more() {
        let c = WidePieces::default();
        let k = inline_key(b"strings");
        let mut out = vec![42];
        assert_eq!(c.get(k, &mut out), None);
        c.put(k, &[1, 2, 3]);
        assert_eq!(c.get(k, &mut out), None, "three tokens belong to the first level");
        for n in MAX_TOKENS + 1..=WIDE_TOKENS {
            let tokens: Vec<Rank> = (0..n as Rank).map(|t| 100 * n as Rank + t).collect();
            c.put(k, &tokens);
            out.truncate(1);
            assert_eq!(c.get(k, &mut out), Some(n));
            assert_eq!(out[1..], tokens);
            assert_eq!(c.get(inline_key(b"strinhs"), &mut out), None);
        }
        c.put(k, &[7; WIDE_TOKENS + 1]);
        out.truncate(1);
        assert_eq!(c.get(k, &mut out), Some(WIDE_OVERFLOW));
        assert_eq!(out, [42], "a mark appends nothing");
    }

    #[test]
    fn wide_table_never_mixes_entries_under_concurrent_writes() {
        // As for the first level: keys sharing one slot, each with its own tokens (four to
        // eleven, or a mark for twelve), written and read by several threads at once.
        let c = WidePieces::default();
        let all: Vec<u128> = (0..200_000u32).map(|i| inline_key(format!("w{i}").as_bytes())).collect();
        // (Their tags mostly differ: a probe of a key other than the last written mostly
        // stops at its tag, while the last one's probes race the writers on the slot.)
        let target = WidePieces::place(all[0]).0;
        let keys: Vec<u128> = all.into_iter().filter(|&k| WidePieces::place(k).0 == target).take(8).collect();
        assert!(keys.len() >= 4);
        let hits = AtomicU64::new(0);
        let tokens = |i: usize| (0..4 + (i * 5) % 9).map(|t| (1000 * i + t) as Rank).collect::<Vec<_>>();
        std::thread::scope(|s| {
            for t in 0..4 {
                let (c, keys, hits) = (&c, &keys, &hits);
                s.spawn(move || {
                    let mut out = Vec::new();
                    for round in 0..30_000 {
                        let i = (round * 7 + t * 13) % keys.len();
                        c.put(keys[i], &tokens(i));
                        for (j, &k) in keys.iter().enumerate() {
                            out.clear();
                            match c.get(k, &mut out) {
                                Some(WIDE_OVERFLOW) => assert!(tokens(j).len() > WIDE_TOKENS && out.is_empty()),
                                Some(n) => {
                                    assert_eq!((n, &out[..]), (tokens(j).len(), &tokens(j)[..]));
                                    hits.fetch_add(1, Ordering::Relaxed);
                                }
                                None => assert!(out.is_empty()),
                            }
                        }
                    }
                });
            }
        });
        assert!(hits.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn owners_do_not_share_long_entries() {
        let mut c = PieceCache::new();
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
            assert!(c.len <= MAX_LONG_ENTRIES);
            assert_eq!(c.get_long(1, &key(i)), Some(&[i as Rank, 7, 8, 9][..]));
        }
        // Emptied when full: what came after the last emptying is there, nothing before.
        for i in n - 5..n {
            assert_eq!(c.get_long(1, &key(i)), Some(&[i as Rank, 7, 8, 9][..]));
        }
        assert_eq!(c.get_long(1, &key(n - 6)), None);
        assert!(c.pool.len() < MAX_LONG_ENTRIES * 16);
        c.put_long(1, &[b'x'; MAX_LONG_KEY + 1], &[1, 2, 3, 4]);
        assert_eq!(c.get_long(1, &[b'x'; MAX_LONG_KEY + 1]), None);
    }
}
