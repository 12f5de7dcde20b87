//! The vocabulary: mergeable byte strings with their ranks (= token ids), special tokens,
//! and the reverse table for decoding, all built once at construction.

use std::sync::OnceLock;

use hashbrown::HashTable;
use rustc_hash::FxHashMap;

use crate::error::{Error, Rank, Result};
use crate::prefetch::prefetch;
use crate::three_byte_tokens::ThreeByteTokens;
use crate::token_table::{ShortTokens, TokenFilter};

/// Ranks for byte strings plus a flat reverse table (id -> bytes) covering the mergeable
/// tokens and the special tokens.
pub struct Vocab {
    /// The tokens longer than [`INLINE_MAX`] (every shorter one is in `short`), their bytes
    /// in `decode_bytes`.
    long: HashTable<LongToken>,
    mergeable_count: usize,
    /// The tokens of four to [`INLINE_MAX`] bytes again (of one to [`INLINE_MAX`] when
    /// `three` is `None`), keyed inline (no pointer to chase on lookup): almost every
    /// lookup the encoder makes is for such a short string.
    short: ShortTokens,
    /// The three-byte tokens again, indexed by their first two bytes (`None` only for a
    /// vocabulary with more two-byte prefixes than it can number, or one that gives a
    /// three-byte string twice).
    three: Option<ThreeByteTokens>,
    /// The longest mergeable token: a longer string is never a token, without hashing it.
    max_len: usize,
    /// The tokens longer than [`INLINE_MAX`], by [`long_key`]: a string the filter stops
    /// is no token, found without hashing all its bytes for the large table.
    long_tokens: TokenFilter,
    /// For every single byte, its rank or `Rank::MAX` when the vocabulary lacks it.
    byte_ranks: [Rank; 256],
    /// For every two bytes `(a, b)` at `a << 8 | b`, the rank of the pair or `Rank::MAX`:
    /// byte-pair merging starts with a lookup of every adjacent byte pair, and a dense table
    /// (256 KiB) answers those without hashing or a probe of the large table.
    /// (An array, so that an index made of two bytes needs no bounds check.)
    pair_ranks: Box<[Rank; 1 << 16]>,
    special: FxHashMap<String, Rank>,
    /// Every token's bytes back to back, then [`DECODE_PAD`] zero bytes; `decode_spans[id]`
    /// is where the token's bytes start (low 32 bits) and how many there are (high 32),
    /// or [`UNKNOWN_ID`] for an id that is no token.
    decode_bytes: Vec<u8>,
    decode_spans: Vec<u64>,
    special_ids: Vec<bool>,
    sorted_tokens: OnceLock<Vec<Vec<u8>>>,
}

/// A token of more than [`INLINE_MAX`] bytes: where its bytes are in
/// `Vocab::decode_bytes`, and its id.
struct LongToken {
    start: u32,
    len: u32,
    id: Rank,
}

impl LongToken {
    #[inline]
    fn bytes<'a>(&self, decode_bytes: &'a [u8]) -> &'a [u8] {
        &decode_bytes[self.start as usize..(self.start + self.len) as usize]
    }
}

#[inline]
fn long_hash(bytes: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(bytes)
}

/// Decoding copies a token of at most this many bytes as this many bytes (one load and one
/// store, no call to `memcpy` for three or four bytes), then keeps only the token's own.
const DECODE_PAD: usize = 16;
/// The decoding span of an id that is no token.
const UNKNOWN_ID: u64 = u64::MAX;

/// Longest byte string stored in `Vocab::short`.
pub const INLINE_MAX: usize = 15;

/// Packs a byte string of at most [`INLINE_MAX`] bytes with its length into one key.
/// Byte `i` of the string is byte `i` of the key (little-endian), byte 15 is the length
/// and the bytes between are zero. Built from at most two overlapping word loads (no
/// copy through memory: this runs once per piece of text).
#[inline(always)]
pub fn inline_key(bytes: &[u8]) -> u128 {
    let n = bytes.len();
    assert!(n <= INLINE_MAX);
    let (lo, hi) = if n >= 8 {
        let lo = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        // Bytes n-8..n; the wanted bytes 8..n are its top n-8 bytes.
        let tail = u64::from_le_bytes(bytes[n - 8..].try_into().unwrap());
        (lo, if n == 8 { 0 } else { tail >> (8 * (16 - n)) })
    } else if n >= 4 {
        // Two overlapping 4-byte loads; shared bytes are equal, so OR joins them.
        let a = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as u64;
        let b = u32::from_le_bytes(bytes[n - 4..].try_into().unwrap()) as u64;
        (a | (b << (8 * (n - 4))), 0)
    } else if n > 0 {
        let (a, b, c) = (bytes[0] as u64, bytes[n / 2] as u64, bytes[n - 1] as u64);
        (a | (b << (8 * (n / 2))) | (c << (8 * (n - 1))), 0)
    } else {
        (0, 0)
    };
    (lo as u128) | (((hi | ((n as u64) << 56)) as u128) << 64)
}

/// The [`inline_key`] of the first `n` bytes of `window` (`1 <= n <= INLINE_MAX`): one
/// 16-byte load and a mask, with no branch on `n`.
#[inline(always)]
pub fn window_key(window: &[u8; 16], n: usize) -> u128 {
    (u128::from_le_bytes(*window) & KEY_MASKS[n & 15]) | ((n as u128) << 120)
}

/// The filter key of a string of more than [`INLINE_MAX`] bytes: its first and last
/// eight bytes and its length (two loads, whatever its length).
#[inline(always)]
fn long_key(bytes: &[u8]) -> u128 {
    let n = bytes.len();
    let first = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let last = u64::from_le_bytes(bytes[n - 8..].try_into().unwrap());
    first as u128 | ((last ^ (n as u64) << 56) as u128) << 64
}

/// `KEY_MASKS[n]` keeps the low `n` bytes of a `u128` (a table: a shift of a `u128` by a
/// variable amount takes several instructions and branches).
const KEY_MASKS: [u128; 16] = {
    let mut masks = [0u128; 16];
    let mut n = 1;
    while n < 16 {
        masks[n] = (1u128 << (8 * n)) - 1;
        n += 1;
    }
    masks
};

/// The id below which any vocabulary may place its tokens, however few (see
/// [`id_limit`]); above it, ids must stay below four times the number of tokens.
pub const MAX_SPARSE_ID: usize = 1 << 24;

/// One more than the largest id a vocabulary of `tokens` tokens may use.
fn id_limit(tokens: usize) -> usize {
    MAX_SPARSE_ID.max(4 * tokens)
}

/// How many ids ahead of the one being decoded [`Vocab::decode_into`] prefetches.
const DECODE_AHEAD: usize = 16;

impl Vocab {
    /// Builds a vocabulary. Two mergeable byte strings with one id are rejected (decoding
    /// would be ambiguous). As in tiktoken, special tokens may share an id (o200k_harmony
    /// names id 200018 twice) or reuse a mergeable id: decoding then prefers the mergeable
    /// bytes, then the special token given first.
    pub fn new<B: AsRef<[u8]>>(tokens: impl IntoIterator<Item = (B, Rank)>, special_tokens: Vec<(String, Rank)>) -> Result<Self> {
        // The tokens' bytes are copied once, in the order given (for a vocabulary read from
        // a file, rank order), and every table below is built from that copy: reading each
        // token where the caller keeps it, once per table, missed the processor's caches
        // at every token (o200k_base: 63 ms to build, 22 now).
        let mut given: Vec<u8> = Vec::new();
        let mut spans: Vec<(Rank, usize, usize)> = Vec::new();
        for (bytes, id) in tokens {
            let bytes = bytes.as_ref();
            spans.push((id, given.len(), bytes.len()));
            given.extend_from_slice(bytes);
        }
        let special: FxHashMap<String, Rank> = special_tokens.iter().cloned().collect();
        let max_id = spans
            .iter()
            .map(|&(id, _, _)| id)
            .chain(special.values().copied())
            .max()
            .map_or(0, |m| m as usize + 1);
        // The tables below hold a place for every id up to the largest (about 8 bytes each
        // when built): a vocabulary whose ids leave most places empty is refused with an
        // error, not allowed to ask for gigabytes (a special token at id 4e9 of a
        // 257-token vocabulary wanted 64 GB and aborted the process).
        if max_id > (u32::MAX as usize) {
            return Err(Error::InvalidVocabulary("token id too large".into()));
        }
        let limit = id_limit(spans.len() + special.len());
        if max_id > limit {
            return Err(Error::InvalidVocabulary(format!(
                "token id {} is too large for a vocabulary of {} tokens: tokenmill indexes its tables by id, \
                 so ids must stay below {limit} (2^24, or four times the number of tokens if that is more)",
                max_id - 1,
                spans.len() + special.len()
            )));
        }
        let mut by_id: Vec<Option<&[u8]>> = vec![None; max_id];
        let mut mergeable = vec![false; max_id];
        let mut special_ids = vec![false; max_id];
        for &(id, start, len) in &spans {
            if by_id[id as usize].replace(&given[start..start + len]).is_some() {
                return Err(Error::InvalidVocabulary(format!(
                    "token id {id} is assigned to more than one byte string"
                )));
            }
            mergeable[id as usize] = true;
        }
        for (text, id) in &special_tokens {
            let slot = &mut by_id[*id as usize];
            if slot.is_none() {
                *slot = Some(text.as_bytes());
            }
            special_ids[*id as usize] = true;
        }
        let total: usize = by_id.iter().map(|b| b.map_or(0, <[u8]>::len)).sum();
        if total > u32::MAX as usize {
            return Err(Error::InvalidVocabulary("vocabulary too large".into()));
        }
        let mut decode_bytes = Vec::with_capacity(total + DECODE_PAD);
        let mut decode_spans = Vec::with_capacity(max_id);
        for entry in &by_id {
            decode_spans.push(match entry {
                Some(b) => {
                    decode_bytes.extend_from_slice(b);
                    (decode_bytes.len() - b.len()) as u64 | (b.len() as u64) << 32
                }
                None => UNKNOWN_ID,
            });
        }
        decode_bytes.extend_from_slice(&[0; DECODE_PAD]);
        drop(by_id);
        drop(given);
        // The mergeable tokens by id, read from `decode_bytes` (one pass through memory).
        let tokens = || {
            decode_spans.iter().zip(&mergeable).enumerate().filter(|(_, (_, &m))| m).map(|(id, (&span, _))| {
                let start = span as u32 as usize;
                (&decode_bytes[start..start + (span >> 32) as usize], id as Rank)
            })
        };
        let mut byte_ranks = [Rank::MAX; 256];
        let mut pair_ranks: Box<[Rank; 1 << 16]> = vec![Rank::MAX; 1 << 16].into_boxed_slice().try_into().expect("65,536 places");
        let repeated = || Error::InvalidVocabulary("a byte string is given more than one id".into());
        for (bytes, id) in tokens() {
            let place = match *bytes {
                [a] => &mut byte_ranks[a as usize],
                [a, b] => &mut pair_ranks[(a as usize) << 8 | b as usize],
                _ => continue,
            };
            // (no id is Rank::MAX: ids were checked to fit below it)
            if std::mem::replace(place, id) != Rank::MAX {
                return Err(repeated());
            }
        }
        let three = ThreeByteTokens::new(tokens().filter_map(|(k, id)| Some((<[u8; 3]>::try_from(k).ok()?, id))));
        // The dense tables and the three-byte table answer every lookup of one to three
        // bytes, so the short tokens' table holds only the longer ones: with o200k_base,
        // its table of entries of up to five bytes halves (53k tokens of four or five bytes,
        // against 76k of one to five), and the whole stays more in the CPU's caches
        // (o200k_base: 1.05-1.07x from the Rust harness, short run, long stream and warm
        // pass; cl100k_base, whose table keeps its size, 1.01-1.02x). Without a three-byte
        // table (or when it finds a three-byte string given twice) the short tokens' table
        // holds them all, and tells a repeated one.
        let shortest = if three.is_some() { 4 } else { 1 };
        let short = ShortTokens::new(tokens().filter(|(k, _)| (shortest..=INLINE_MAX).contains(&k.len())).map(|(k, id)| (inline_key(k), id))).ok_or_else(repeated)?;
        let max_len = tokens().map(|(k, _)| k.len()).max().unwrap_or(0);
        let longs: Vec<LongToken> = (decode_spans.iter().zip(&mergeable).enumerate())
            .filter(|&(_, (&span, &m))| m && (span >> 32) as usize > INLINE_MAX)
            .map(|(id, (&span, _))| LongToken { start: span as u32, len: (span >> 32) as u32, id: id as Rank })
            .collect();
        let long_tokens = TokenFilter::new(longs.iter().map(|e| long_key(e.bytes(&decode_bytes))));
        let mut long = HashTable::with_capacity(longs.len());
        for e in longs {
            let k = e.bytes(&decode_bytes);
            match long.entry(long_hash(k), |o: &LongToken| o.bytes(&decode_bytes) == k, |o: &LongToken| long_hash(o.bytes(&decode_bytes))) {
                hashbrown::hash_table::Entry::Occupied(_) => return Err(repeated()),
                hashbrown::hash_table::Entry::Vacant(slot) => slot.insert(e),
            };
        }
        let mergeable_count = spans.len();
        Ok(Self {
            long,
            mergeable_count,
            short,
            three,
            max_len,
            long_tokens,
            byte_ranks,
            pair_ranks,
            special,
            decode_bytes,
            decode_spans,
            special_ids,
            sorted_tokens: OnceLock::new(),
        })
    }

    /// The rank of a mergeable byte string.
    #[inline]
    pub fn rank(&self, bytes: &[u8]) -> Option<Rank> {
        match bytes.len() {
            1 => {
                let r = self.byte_ranks[bytes[0] as usize];
                (r != Rank::MAX).then_some(r)
            }
            2 => {
                let r = self.pair_rank(bytes[0], bytes[1]);
                (r != Rank::MAX).then_some(r)
            }
            3 => {
                let r = self.three_rank(bytes[0], bytes[1], bytes[2]);
                (r != Rank::MAX).then_some(r)
            }
            n if n <= INLINE_MAX => self.short.get(inline_key(bytes)),
            n if n > self.max_len => None,
            _ if !self.long_tokens.may_hold(long_key(bytes)) => None,
            _ => self.long.find(long_hash(bytes), |e| e.bytes(&self.decode_bytes) == bytes).map(|e| e.id),
        }
    }

    /// The rank of a string of at least three bytes, `Rank::MAX` when it is no token: what
    /// a merge step asks of two adjacent parts (one of them merged already, so never fewer
    /// than three bytes). Inlined where it is used, with the lengths in the order merging
    /// meets them and no case for one or two bytes; longer strings go out of line.
    #[inline(always)]
    pub fn merged_rank(&self, bytes: &[u8]) -> Rank {
        debug_assert!(bytes.len() >= 3);
        if bytes.len() <= INLINE_MAX {
            if bytes.len() == 3 {
                return self.three_rank(bytes[0], bytes[1], bytes[2]);
            }
            return self.short.get(inline_key(bytes)).unwrap_or(Rank::MAX);
        }
        self.rank(bytes).unwrap_or(Rank::MAX)
    }

    /// The rank of one byte, `Rank::MAX` when the vocabulary lacks it.
    #[inline(always)]
    pub fn byte_rank(&self, byte: u8) -> Rank {
        self.byte_ranks[byte as usize]
    }

    /// The rank of the two bytes `a b`, `Rank::MAX` when they are no token.
    #[inline(always)]
    pub fn pair_rank(&self, a: u8, b: u8) -> Rank {
        self.pair_ranks[(a as usize) << 8 | b as usize]
    }

    /// The rank of the three bytes `a b c`, `Rank::MAX` when they are no token.
    #[inline(always)]
    pub fn three_rank(&self, a: u8, b: u8, c: u8) -> Rank {
        match &self.three {
            Some(t) => t.get(a, b, c),
            None => self.short.get(inline_key(&[a, b, c])).unwrap_or(Rank::MAX),
        }
    }

    /// The rank of a string of 4..=[`INLINE_MAX`] bytes given by its [`inline_key`]
    /// (shorter ones are not in that table: [`Vocab::rank`] answers them).
    #[inline]
    pub fn rank_inline(&self, key: u128) -> Option<Rank> {
        debug_assert!((4..=INLINE_MAX).contains(&((key >> 120) as usize)), "rank_inline of a key of {} bytes", key >> 120);
        self.short.get(key)
    }

    /// How many mergeable tokens there are.
    pub fn mergeable_count(&self) -> usize {
        self.mergeable_count
    }

    /// The mergeable tokens with their ids, in id order.
    pub fn tokens(&self) -> impl Iterator<Item = (&[u8], Rank)> + '_ {
        // (A special token may reuse a mergeable token's id: the id then decodes to the
        // mergeable bytes, whose rank is the id.)
        (0..self.decode_spans.len() as Rank).filter_map(|id| {
            let bytes = self.token_bytes(id)?;
            (!self.special_ids[id as usize] || self.rank(bytes) == Some(id)).then_some((bytes, id))
        })
    }

    pub fn special_tokens(&self) -> &FxHashMap<String, Rank> {
        &self.special
    }

    pub fn special_id(&self, text: &str) -> Option<Rank> {
        self.special.get(text).copied()
    }

    pub fn is_special(&self, id: Rank) -> bool {
        self.special_ids.get(id as usize).copied().unwrap_or(false)
    }

    /// How many ids there are: every token id, mergeable or special, is below this.
    pub fn id_count(&self) -> usize {
        self.decode_spans.len()
    }

    /// The bytes of any token (mergeable or special).
    #[inline]
    pub fn token_bytes(&self, id: Rank) -> Option<&[u8]> {
        let (start, len) = self.decode_span(id)?;
        Some(&self.decode_bytes[start..start + len])
    }

    /// The bytes of a mergeable token; `None` for an id that is only a special token's
    /// (an id both, which decodes to its mergeable bytes, gives those).
    pub fn mergeable_bytes(&self, id: Rank) -> Option<&[u8]> {
        let bytes = self.token_bytes(id)?;
        (!self.is_special(id) || self.rank(bytes) == Some(id)).then_some(bytes)
    }

    /// Where a token's bytes are in `decode_bytes`, and how many.
    #[inline(always)]
    fn decode_span(&self, id: Rank) -> Option<(usize, usize)> {
        match *self.decode_spans.get(id as usize)? {
            UNKNOWN_ID => None,
            span => Some((span as u32 as usize, (span >> 32) as usize)),
        }
    }

    /// Appends the bytes of `tokens` to `out`; fails on the first unknown id.
    ///
    /// The entry of the id `DECODE_AHEAD` places on is prefetched: ids land all over a
    /// table of 8 bytes an id (1.6 MB for o200k_base), larger than a core's L2 cache.
    /// From Python, a call per document of the 20 MB stream's ids, 10 alternating fresh
    /// processes each: `decode_bytes` 1.04x (cl100k) and 1.06x (o200k), `decode` 1.03x and
    /// 1.10x.
    pub fn decode_into(&self, tokens: &[Rank], out: &mut Vec<u8>) -> Result<()> {
        for (i, &t) in tokens.iter().enumerate() {
            if let Some(&ahead) = tokens.get(i + DECODE_AHEAD) {
                if let Some(span) = self.decode_spans.get(ahead as usize) {
                    prefetch(span);
                }
            }
            let (start, len) = self.decode_span(t).ok_or(Error::UnknownTokenId(t))?;
            if len > DECODE_PAD {
                out.extend_from_slice(&self.decode_bytes[start..start + len]);
                continue;
            }
            // All DECODE_PAD bytes from the token's start (the padding at the end of
            // `decode_bytes` makes them exist for the last token too) into the spare room,
            // then only the token's own are kept.
            out.reserve(DECODE_PAD);
            let from: [u8; DECODE_PAD] = self.decode_bytes[start..start + DECODE_PAD].try_into().expect("padded");
            // SAFETY: `reserve` made room for DECODE_PAD bytes after the end, all written
            // here as one (unaligned) store; the `len <= DECODE_PAD` of them kept are the
            // token's.
            unsafe {
                std::ptr::write_unaligned(out.as_mut_ptr().add(out.len()).cast::<[u8; DECODE_PAD]>(), from);
                out.set_len(out.len() + len);
            }
        }
        Ok(())
    }

    pub fn decode(&self, tokens: &[Rank]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(tokens.len() * 4);
        self.decode_into(tokens, &mut out)?;
        Ok(out)
    }

    /// All mergeable token byte strings, sorted (built on first use).
    pub fn sorted_tokens(&self) -> &[Vec<u8>] {
        self.sorted_tokens.get_or_init(|| {
            let mut v: Vec<Vec<u8>> = self.tokens().map(|(t, _)| t.to_vec()).collect();
            v.sort_unstable();
            v
        })
    }

    /// The id of a mergeable token, then of a special token (as tiktoken's
    /// `encode_single_token`).
    pub fn single_token(&self, bytes: &[u8]) -> Result<Rank> {
        if let Some(r) = self.rank(bytes) {
            return Ok(r);
        }
        std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| self.special.get(s).copied())
            .ok_or_else(|| Error::UnknownToken(bytes.to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_far_above_the_number_of_tokens_are_refused() {
        let bytes = || (0..=255u8).map(|b| (vec![b], b as Rank));
        let with_special = |id: Rank| Vocab::new(bytes(), vec![("<x>".to_string(), id)]);
        // Up to 2^24 whatever the vocabulary's size (tests often put specials at 100257).
        let v = with_special(MAX_SPARSE_ID as Rank - 1).unwrap();
        assert_eq!(v.special_tokens().get("<x>"), Some(&(MAX_SPARSE_ID as Rank - 1)));
        for id in [MAX_SPARSE_ID as Rank, 4_000_000_000, u32::MAX] {
            let err = with_special(id).err().expect("refused");
            assert!(matches!(err, Error::InvalidVocabulary(_)), "{err}");
        }
        // A mergeable token so placed is refused too.
        let err = Vocab::new(bytes().chain([(b"ab".to_vec(), 3_000_000_000)]), vec![]).err().expect("refused");
        assert!(err.to_string().contains("3000000000"), "{err}");
        // Above 2^24, ids up to four times the number of tokens.
        assert_eq!(id_limit(257), MAX_SPARSE_ID);
        assert_eq!(id_limit(5_000_000), 20_000_000);
    }

    #[test]
    fn window_keys_equal_inline_keys() {
        // Every length, with the bytes after the piece zero, all ones, or anything.
        let text: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8).collect();
        for n in 1..=INLINE_MAX {
            for start in 0..16 {
                let mut window: [u8; 16] = text[start..start + 16].try_into().unwrap();
                assert_eq!(window_key(&window, n), inline_key(&window[..n]), "n={n} start={start}");
                window[n..].fill(0xFF);
                assert_eq!(window_key(&window, n), inline_key(&window[..n]));
                window[n..].fill(0);
                assert_eq!(window_key(&window, n), inline_key(&window[..n]));
            }
        }
    }

    #[test]
    fn long_tokens_are_found_and_other_long_strings_are_not() {
        // 2,000 tokens of 16-128 bytes next to the 256 bytes; each is found, and so is
        // nothing else: the same string with one byte changed (first, middle, last), one
        // byte longer and one shorter.
        let mut ranks: FxHashMap<Vec<u8>, Rank> = (0..=255u8).map(|b| (vec![b], b as Rank)).collect();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut long = Vec::new();
        for i in 0..2000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = 16 + (x % 113) as usize;
            let t: Vec<u8> = (0..len).map(|j| b'a' + ((x >> (j % 50)) as u8 ^ j as u8) % 26).collect();
            if ranks.insert(t.clone(), 256 + i).is_none() {
                long.push(t);
            }
        }
        let vocab = Vocab::new(ranks.clone(), vec![]).unwrap();
        for t in &long {
            assert_eq!(vocab.rank(t), ranks.get(t).copied());
            let n = t.len();
            for at in [0, n / 2, n - 1] {
                let mut other = t.clone();
                other[at] ^= 0x80;
                assert_eq!(vocab.rank(&other), None);
            }
            let mut longer = t.clone();
            longer.push(b'z');
            assert_eq!(vocab.rank(&longer), ranks.get(&longer).copied());
            assert_eq!(vocab.rank(&t[..n - 1]), ranks.get(&t[..n - 1]).copied());
        }
    }

    #[test]
    fn merged_rank_agrees_with_the_map_for_three_bytes_and_more() {
        // Tokens of 2 to 40 bytes over a small alphabet, so that many strings looked up
        // are one byte away from a token; every substring of three bytes or more of some
        // longer strings is asked for, tokens and not.
        let mut ranks: FxHashMap<Vec<u8>, Rank> = (0..=255u8).map(|b| (vec![b], b as Rank)).collect();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut strings = Vec::new();
        for i in 0..4000u32 {
            let r = next();
            let len = 2 + (r % 39) as usize;
            let t: Vec<u8> = (0..len).map(|j| b"ab\xc3\xa9 "[((r >> (j % 60)) as usize ^ j) % 5]).collect();
            ranks.entry(t.clone()).or_insert(256 + i);
            strings.push(t);
        }
        let vocab = Vocab::new(ranks.clone(), vec![]).unwrap();
        let mut found = 0;
        for s in strings.iter().take(400) {
            let mut longer = s.clone();
            longer.extend_from_slice(&strings[s.len()]);
            for a in 0..longer.len() {
                for b in a + 3..=longer.len() {
                    let want = ranks.get(&longer[a..b]).copied().unwrap_or(Rank::MAX);
                    assert_eq!(vocab.merged_rank(&longer[a..b]), want, "{:?}", &longer[a..b]);
                    found += (want != Rank::MAX) as usize;
                }
            }
        }
        assert!(found > 1000, "only {found} tokens among the strings asked for");
    }

    fn small() -> Vocab {
        let mut ranks = FxHashMap::default();
        for b in 0..=255u8 {
            ranks.insert(vec![b], b as Rank);
        }
        ranks.insert(b"ab".to_vec(), 256);
        Vocab::new(ranks, vec![("<|end|>".to_string(), 300)]).unwrap()
    }

    #[test]
    fn decodes_mergeable_and_special_and_rejects_gaps() {
        let v = small();
        assert_eq!(v.decode(&[256, 99, 300]).unwrap(), b"abc<|end|>");
        assert_eq!(v.decode(&[257]), Err(Error::UnknownTokenId(257)));
        assert_eq!(v.decode(&[100_000]), Err(Error::UnknownTokenId(100_000)));
        assert!(v.is_special(300) && !v.is_special(256) && !v.is_special(9999));
    }

    #[test]
    fn decodes_tokens_of_every_length_in_any_order() {
        // Tokens of 1..=40 bytes (both sides of the 16-byte copy), ids with a gap, the
        // longest and the shortest last in the table (next to its padding), an empty
        // special token; decoded one by one, all together, and in reverse.
        let mut ranks = FxHashMap::default();
        for b in 0..=255u8 {
            ranks.insert(vec![b], b as Rank);
        }
        let tokens: Vec<Vec<u8>> = (1..=40usize).map(|n| (0..n).map(|i| (n * 7 + i * 13) as u8 | 1).collect()).collect();
        for (k, t) in tokens.iter().enumerate().filter(|(_, t)| t.len() > 1) {
            ranks.insert(t.clone(), 300 + 2 * k as Rank);
        }
        ranks.insert(vec![0xEE; 33], 500);
        ranks.insert(vec![0xEF, 0xF0], 501);
        let v = Vocab::new(ranks.clone(), vec![("".into(), 502)]).unwrap();
        let mut all: Vec<(Rank, Vec<u8>)> = ranks.iter().map(|(b, &r)| (r, b.clone())).collect();
        all.push((502, Vec::new()));
        all.sort();
        for (id, bytes) in &all {
            assert_eq!(v.decode(&[*id]).unwrap(), *bytes, "id {id}");
            assert_eq!(v.token_bytes(*id), Some(&bytes[..]));
        }
        for order in [all.clone(), all.iter().rev().cloned().collect()] {
            let ids: Vec<Rank> = order.iter().map(|(id, _)| *id).collect();
            let mut want: Vec<u8> = b"kept".to_vec();
            order.iter().for_each(|(_, b)| want.extend_from_slice(b));
            let mut out = b"kept".to_vec();
            v.decode_into(&ids, &mut out).unwrap();
            assert_eq!(out, want);
        }
        assert_eq!(v.decode(&[302, 303]), Err(Error::UnknownTokenId(303)));
        assert_eq!(v.token_bytes(303), None);
        assert_eq!(v.token_bytes(503), None);
    }

    #[test]
    fn rejects_duplicate_ids() {
        let mut ranks = FxHashMap::default();
        ranks.insert(b"a".to_vec(), 0);
        ranks.insert(b"b".to_vec(), 0);
        assert!(matches!(
            Vocab::new(ranks, vec![]),
            Err(Error::InvalidVocabulary(_))
        ));
    }

    #[test]
    fn rejects_a_byte_string_given_two_ids() {
        for t in [&b"a"[..], b"ab", b"abc", b"abcd", b"abcde", b"abcdefgh", b"abcdefghijklm", b"abcdefghijklmnopqrstuvwxyz"] {
            let tokens = vec![(t.to_vec(), 0), (b"other".to_vec(), 1), (t.to_vec(), 2)];
            assert!(matches!(Vocab::new(tokens, vec![]), Err(Error::InvalidVocabulary(_))), "{t:?}");
        }
    }

    #[test]
    fn tokens_are_the_mergeable_ones_in_id_order() {
        // A special token on a mergeable id (which decodes to the mergeable bytes), one on
        // an id of its own, and a gap.
        let tokens = vec![(b"xyz".to_vec(), 3), (b"a".to_vec(), 0), (b"abcdefghijklmnopq".to_vec(), 1), (b"<s>".to_vec(), 5)];
        let v = Vocab::new(tokens, vec![("<s>".to_string(), 5), ("<e>".to_string(), 3), ("<t>".to_string(), 7)]).unwrap();
        let got: Vec<(Vec<u8>, Rank)> = v.tokens().map(|(t, id)| (t.to_vec(), id)).collect();
        assert_eq!(got, vec![(b"a".to_vec(), 0), (b"abcdefghijklmnopq".to_vec(), 1), (b"xyz".to_vec(), 3), (b"<s>".to_vec(), 5)]);
        assert_eq!(v.mergeable_count(), 4);
        assert_eq!(v.sorted_tokens(), &[b"<s>".to_vec(), b"a".to_vec(), b"abcdefghijklmnopq".to_vec(), b"xyz".to_vec()][..]);
        assert_eq!(v.single_token(b"<t>").unwrap(), 7);
        assert_eq!(v.single_token(b"abcdefghijklmnopq").unwrap(), 1);
    }

    #[test]
    fn special_tokens_may_share_ids_first_one_decodes() {
        let mut ranks = FxHashMap::default();
        ranks.insert(b"a".to_vec(), 0);
        let specials = vec![("<s>".to_string(), 0), ("<x>".to_string(), 5), ("<y>".to_string(), 5)];
        let v = Vocab::new(ranks, specials).unwrap();
        assert_eq!(v.decode(&[0, 5]).unwrap(), b"a<x>");
        assert_eq!(v.special_id("<y>"), Some(5));
    }

    #[test]
    fn three_byte_strings_ranked_by_either_table() {
        // Two vocabularies with the same three-byte tokens among others: one with few
        // two-byte prefixes (the prefix-indexed table answers), one with a three-byte
        // token for every prefix (too many to number: the general table answers). Every
        // three-byte string over a small alphabet gets the rank the map gives it.
        let alphabet = [0u8, b'a', b'b', b' ', 0x80, 0xFF];
        for every_prefix in [false, true] {
            let mut ranks: FxHashMap<Vec<u8>, Rank> = (0..=255u8).map(|b| (vec![b], b as Rank)).collect();
            let mut next = 256;
            let mut add = |t: Vec<u8>, ranks: &mut FxHashMap<Vec<u8>, Rank>| {
                if let std::collections::hash_map::Entry::Vacant(e) = ranks.entry(t) {
                    e.insert(next);
                    next += 1;
                }
            };
            for (i, &a) in alphabet.iter().enumerate() {
                for (j, &b) in alphabet.iter().enumerate() {
                    for (k, &c) in alphabet.iter().enumerate() {
                        if (i * 7 + j * 3 + k) % 4 == 0 {
                            add(vec![a, b, c], &mut ranks);
                        }
                    }
                }
            }
            add(b"ab".to_vec(), &mut ranks);
            add(b"abab".to_vec(), &mut ranks);
            if every_prefix {
                for p in 0..=u16::MAX {
                    add(vec![(p >> 8) as u8, p as u8, b'z'], &mut ranks);
                }
            }
            let v = Vocab::new(ranks.clone(), vec![]).unwrap();
            assert_eq!(v.three.is_none(), every_prefix);
            for &a in &alphabet {
                for &b in &alphabet {
                    for c in [0u8, b'a', b'b', b'z', b' ', 0x80, 0xC0, 0xFF] {
                        let t = [a, b, c];
                        assert_eq!(v.rank(&t), ranks.get(&t[..]).copied(), "{t:?}");
                        assert_eq!(v.three_rank(a, b, c), ranks.get(&t[..]).copied().unwrap_or(Rank::MAX), "{t:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_short_string_ranked_as_the_map_says_with_or_without_the_three_byte_table() {
        // Tokens of one to six bytes over four letters (the short tokens' table holds only
        // those of four bytes or more when the three-byte table exists, and all of them
        // when it does not): every string of one to six of those letters gets the rank the
        // map gives it, whichever tables answer.
        let alphabet = [b'a', b'b', 0xC3, b' '];
        let (mut strings, mut layer): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (Vec::new(), vec![vec![]]);
        for _ in 0..6 {
            layer = layer.iter().flat_map(|s| alphabet.iter().map(move |&c| [&s[..], &[c]].concat())).collect();
            strings.extend(layer.iter().cloned());
        }
        for every_prefix in [false, true] {
            let mut ranks: FxHashMap<Vec<u8>, Rank> = (0..=255u8).map(|b| (vec![b], b as Rank)).collect();
            for (i, s) in strings.iter().enumerate() {
                if s.len() > 1 && (i * 7 + s.len()) % 3 == 0 {
                    let next = ranks.len() as Rank;
                    ranks.entry(s.clone()).or_insert(next);
                }
            }
            if every_prefix {
                for p in 0..=u16::MAX {
                    let next = ranks.len() as Rank;
                    ranks.entry(vec![(p >> 8) as u8, p as u8, b'z']).or_insert(next);
                }
            }
            let v = Vocab::new(ranks.clone(), vec![]).unwrap();
            assert_eq!(v.three.is_none(), every_prefix);
            let mut found = 0;
            for s in &strings {
                let want = ranks.get(s).copied();
                assert_eq!(v.rank(s), want, "{s:?}");
                if s.len() >= 4 {
                    assert_eq!(v.rank_inline(inline_key(s)), want, "{s:?}");
                }
                found += want.is_some() as usize;
            }
            assert!(found > 1000, "only {found} tokens among the strings");
        }
    }

    #[test]
    fn inline_key_is_bytes_then_zeros_then_length() {
        let data: Vec<u8> = (1..=15).map(|i| i * 17).collect();
        for n in 0..=INLINE_MAX {
            let mut buf = [0u8; 16];
            buf[..n].copy_from_slice(&data[..n]);
            buf[15] = n as u8;
            assert_eq!(inline_key(&data[..n]), u128::from_le_bytes(buf), "length {n}");
        }
    }

    #[test]
    fn single_token_lookup() {
        let v = small();
        assert_eq!(v.single_token(b"ab").unwrap(), 256);
        assert_eq!(v.single_token(b"<|end|>").unwrap(), 300);
        assert!(v.single_token(b"abc").is_err());
        assert_eq!(v.rank(b"a"), Some(97));
    }
}
