//! Byte-pair merging of one pre-tokenized piece by rank, with tiktoken's exact semantics:
//! repeatedly merge the adjacent pair whose concatenation has the lowest rank, the leftmost
//! one on ties, until no adjacent pair forms a token.
//!
//! Three implementations give identical results: a compact scan for short pieces (the
//! common case, cache friendly); for long pieces (e.g. 1 MB of letters and punctuation,
//! where the scan would be quadratic) a sweep over pairs bucketed by rank, linear in
//! practice; and, should the sweep meet a vocabulary where a merge creates a lower-ranked
//! pair, a heap over a linked list, O(n log n) always. Long pieces made of a few runs of one
//! repeated byte go to `bpe_runs` first. The long-piece merges may consult a [`PairMemo`].

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};

use rustc_hash::FxHashMap;

use crate::bpe_runs;
use crate::error::{Error, Rank, Result};
use crate::vocab::Vocab;

/// Pieces at least this long use the heap-based merge.
pub const LONG_PIECE: usize = 128;

/// Reusable buffers so that merging allocates nothing in steady state.
#[derive(Default)]
pub struct Scratch {
    buckets: Buckets,
    sweep: Vec<u32>,
    ids: Vec<Rank>,
    next: Vec<u32>,
    prev: Vec<u32>,
    pair_rank: Vec<Rank>,
    heap: BinaryHeap<Reverse<(Rank, u32)>>,
}

/// Appends the tokens of `piece` to `out`, for a piece the caller has found not to be a
/// token itself (as tiktoken checks before merging). The merge relies on that: once two
/// parts are left, their concatenation is the whole piece, so it is not looked up.
#[inline]
pub fn encode_piece(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>, s: &mut Scratch, memo: Option<&PairMemo>) -> Result<()> {
    debug_assert!(vocab.rank(piece).is_none(), "encode_piece on a piece that is a token");
    merge_piece_with(vocab, piece, out, s, memo, true)
}

/// [`encode_piece`] for text whose pieces do not repeat, which the encoder meets while its
/// piece caches are skipped (random characters, hashes, base64): there a piece of five
/// bytes merges in closed form too (`merge_five`; 1 MB without whitespace, Rust harness:
/// 1.02x cl100k, 1.07x o200k). On text whose pieces repeat, the few five-byte pieces
/// merged take the general merge, whose search for the lowest pair has no branch that
/// depends on the ranks: the closed form there measured within the noise (0.97-1.00x).
#[inline]
pub fn encode_unrepeated_piece(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>, s: &mut Scratch, memo: Option<&PairMemo>) -> Result<()> {
    debug_assert!(vocab.rank(piece).is_none(), "encode_unrepeated_piece on a piece that is a token");
    if piece.len() == 5 {
        if let Some(done) = merge_five(vocab, piece, out) {
            return done;
        }
    }
    merge_piece_with(vocab, piece, out, s, memo, true)
}

/// Byte-pair merges a piece that may itself be a token (tiktoken's `byte_pair_encode`, with
/// no whole-piece lookup first): the result need not be that one token.
pub fn merge_piece(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>, s: &mut Scratch, memo: Option<&PairMemo>) -> Result<()> {
    merge_piece_with(vocab, piece, out, s, memo, false)
}

#[inline(always)]
fn merge_piece_with(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>, s: &mut Scratch, memo: Option<&PairMemo>, not_a_token: bool) -> Result<()> {
    match piece.len() {
        0 => Ok(()),
        1 => {
            out.push(vocab.rank(piece).ok_or_else(|| Error::UnencodableBytes(piece.to_vec()))?);
            Ok(())
        }
        n if n < LONG_PIECE => merge_short(vocab, piece, out, not_a_token),
        _ => {
            if bpe_runs::merge_runs(vocab, piece, out, memo)? {
                return Ok(());
            }
            if !merge_by_rank_buckets(vocab, piece, out, s, memo)? {
                merge_long(vocab, piece, out, s, memo)?;
            }
            Ok(())
        }
    }
}

#[inline]
fn rank_of(vocab: &Vocab, bytes: &[u8]) -> Rank {
    vocab.rank(bytes).unwrap_or(Rank::MAX)
}

/// Pieces of 2..[`LONG_PIECE`] bytes: quadratic in the worst case but with tiny
/// constants. The parts live in arrays on the stack, sized for the piece (most pieces are a
/// few bytes; see [`merge_in_arrays`]).
///
/// No [`PairMemo`] here: for pieces this short a rank comes straight from the vocabulary
/// table about as fast (most pairs are no token, and the table's control bytes answer
/// those), while on text where every piece is new (the memo then mostly misses) the memo
/// probe was one more cache miss per pair: measured, the memo made random text without
/// whitespace about 16-19% slower and real text no faster.
///
/// `not_a_token`: the caller knows the whole piece is no token, so the last pair (two
/// parts whose concatenation is the piece) is not looked up: one lookup fewer per piece,
/// and on text whose pieces are all new the lookups are most of the cost.
///
/// The closed forms of two to four bytes are inlined where this is called, and the merge in
/// arrays is a call: its function saves six registers and sets up a frame of 2 KiB, which
/// on text without whitespace (60% of its pieces merged, most of them of two to four
/// bytes) was a tenth of the merge's instructions.
#[inline(always)]
pub(crate) fn merge_short(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>, not_a_token: bool) -> Result<()> {
    debug_assert!((2..LONG_PIECE).contains(&piece.len()));
    if not_a_token && piece.len() <= 4 {
        let done = match piece.len() {
            2 => merge_two(vocab, piece, out),
            3 => merge_three(vocab, piece, out),
            _ => merge_four(vocab, piece, out),
        };
        if let Some(done) = done {
            return done;
        }
    }
    merge_short_in_arrays(vocab, piece, out, not_a_token)
}

/// [`merge_short`]'s general case: the arrays sized for the piece.
#[inline(never)]
fn merge_short_in_arrays(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>, not_a_token: bool) -> Result<()> {
    if piece.len() <= 8 {
        merge_in_arrays::<8>(vocab, piece, out, not_a_token)
    } else if piece.len() <= 16 {
        merge_in_arrays::<16>(vocab, piece, out, not_a_token)
    } else if piece.len() <= 32 {
        merge_in_arrays::<32>(vocab, piece, out, not_a_token)
    } else if piece.len() <= 64 {
        merge_in_arrays::<64>(vocab, piece, out, not_a_token)
    } else {
        merge_in_arrays::<LONG_PIECE>(vocab, piece, out, not_a_token)
    }
}

/// Three bytes that are no token (the commonest piece of text whose pieces never repeat):
/// the two byte pairs come from the dense table, the lower one (the left on a tie) merges,
/// and the pair left then is the whole piece, which is no token. No hashing at all. `None`
/// when a byte has no token of its own (the general merge reports that).
#[inline(always)]
fn merge_three(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>) -> Option<Result<()>> {
    let [a, b, c] = [piece[0], piece[1], piece[2]];
    let (ra, rb, rc) = (vocab.byte_rank(a), vocab.byte_rank(b), vocab.byte_rank(c));
    if ra == Rank::MAX || rb == Rank::MAX || rc == Rank::MAX {
        return None;
    }
    let (ab, bc) = (vocab.pair_rank(a, b), vocab.pair_rank(b, c));
    settle(out, ab, bc, [ra, rb, rc], [ab, rc], [ra, bc]);
    Some(Ok(()))
}

/// The last step of a closed-form merge: two adjacent pairs of ranks `left` and `right`
/// remain, and whichever merges leaves parts that make up the whole piece (no token). The
/// left pair merges if its rank is the lower or equal (leftmost wins), else the right one,
/// unless neither is a token.
///
/// The chosen ids are written as four places at once and the length advanced by their
/// count: the three choices differ in length, and copying a slice of a length known only
/// at run time is a call to `memcpy`, whose branches on the length mispredict (1 MB
/// without whitespace: 1.03-1.04x without that call).
#[inline(always)]
fn settle<const N: usize, const L: usize, const R: usize>(out: &mut Vec<Rank>, left: Rank, right: Rank, neither: [Rank; N], if_left: [Rank; L], if_right: [Rank; R]) {
    const { assert!(N <= 4 && L <= 4 && R <= 4) };
    let padded = |ids: &[Rank]| {
        let mut four = [Rank::MAX; 4];
        four[..ids.len()].copy_from_slice(ids);
        four
    };
    let (ids, count) = if left == Rank::MAX && right == Rank::MAX {
        (padded(&neither), N)
    } else if left <= right {
        (padded(&if_left), L)
    } else {
        (padded(&if_right), R)
    };
    out.reserve(4);
    // SAFETY: `reserve` made room for four more ids past the length; the first `count` of
    // the four written are the piece's ids.
    unsafe {
        out.as_mut_ptr().add(out.len()).cast::<[Rank; 4]>().write_unaligned(ids);
        out.set_len(out.len() + count);
    }
}

/// Two bytes that are no token: their two tokens. `None` when a byte has no token of its
/// own (the general merge reports that).
#[inline(always)]
fn merge_two(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>) -> Option<Result<()>> {
    let (ra, rb) = (vocab.byte_rank(piece[0]), vocab.byte_rank(piece[1]));
    if ra == Rank::MAX || rb == Rank::MAX {
        return None;
    }
    out.extend_from_slice(&[ra, rb]);
    Some(Ok(()))
}

/// Four bytes `abcd` that are no token, merged in closed form: the lowest of the three
/// byte pairs (dense table, leftmost on a tie) merges first, then the two pairs left
/// around it need at most two lookups of three bytes, and whichever merges leaves two
/// parts whose concatenation is the piece, no token. `None` when a byte has no token of
/// its own (the general merge reports that).
#[inline(always)]
fn merge_four(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>) -> Option<Result<()>> {
    // (As an array, its length is known wherever the lookups below slice it.)
    let piece: &[u8; 4] = piece.try_into().ok()?;
    let [a, b, c, d] = *piece;
    let (ra, rb, rc, rd) = (vocab.byte_rank(a), vocab.byte_rank(b), vocab.byte_rank(c), vocab.byte_rank(d));
    if ra == Rank::MAX || rb == Rank::MAX || rc == Rank::MAX || rd == Rank::MAX {
        return None;
    }
    let pairs = [vocab.pair_rank(a, b), vocab.pair_rank(b, c), vocab.pair_rank(c, d)];
    four_parts(vocab, piece, out, [ra, rb, rc, rd], [1, 2, 3], pairs);
    Some(Ok(()))
}

/// Five bytes `abcde` that are no token, merged in closed form: the lowest of the four
/// byte pairs merges first (leftmost on a tie), which leaves four parts for
/// [`four_parts`]; the pairs it made need one or two lookups of three bytes. `None` when a
/// byte has no token of its own (the general merge reports that).
#[inline(always)]
fn merge_five(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>) -> Option<Result<()>> {
    let piece: &[u8; 5] = piece.try_into().ok()?;
    let [a, b, c, d, e] = *piece;
    let r = [vocab.byte_rank(a), vocab.byte_rank(b), vocab.byte_rank(c), vocab.byte_rank(d), vocab.byte_rank(e)];
    if r.contains(&Rank::MAX) {
        return None;
    }
    let (ab, bc, cd, de) = (vocab.pair_rank(a, b), vocab.pair_rank(b, c), vocab.pair_rank(c, d), vocab.pair_rank(d, e));
    let three = |s: usize| vocab.three_rank(piece[s], piece[s + 1], piece[s + 2]);
    if ab <= bc && ab <= cd && ab <= de {
        if ab == Rank::MAX {
            out.extend_from_slice(&r);
            return Some(Ok(()));
        }
        four_parts(vocab, piece, out, [ab, r[2], r[3], r[4]], [2, 3, 4], [three(0), cd, de]);
    } else if bc <= cd && bc <= de {
        four_parts(vocab, piece, out, [r[0], bc, r[3], r[4]], [1, 3, 4], [three(0), three(1), de]);
    } else if cd <= de {
        four_parts(vocab, piece, out, [r[0], r[1], cd, r[4]], [1, 2, 4], [ab, three(1), three(2)]);
    } else {
        four_parts(vocab, piece, out, [r[0], r[1], r[2], de], [1, 2, 3], [ab, bc, three(2)]);
    }
    Some(Ok(()))
}

/// The end of a closed-form merge of a piece that is no token, from four parts (ids
/// `ids`, the later three starting at the offsets `starts`) and the ranks of their three
/// pairs: the lowest pair merges (leftmost on a tie), which leaves two pairs, each of
/// them either a pair already ranked or a string of the piece to look up, and then
/// [`settle`] finishes.
#[inline(always)]
fn four_parts(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>, ids: [Rank; 4], starts: [usize; 3], pairs: [Rank; 3]) {
    let [i0, i1, i2, i3] = ids;
    let [s1, _, s3] = starts;
    let [p01, p12, p23] = pairs;
    if p01 <= p12 && p01 <= p23 {
        if p01 == Rank::MAX {
            out.extend_from_slice(&ids);
            return;
        }
        // [p01, i2, i3]: (p01 i2) against p23.
        let left = rank_of(vocab, &piece[..s3]);
        settle(out, left, p23, [p01, i2, i3], [left, i3], [p01, p23]);
    } else if p12 <= p23 {
        // [i0, p12, i3]: (i0 p12) against (p12 i3).
        let (left, right) = (rank_of(vocab, &piece[..s3]), rank_of(vocab, &piece[s1..]));
        settle(out, left, right, [i0, p12, i3], [left, i3], [i0, right]);
    } else {
        // [i0, i1, p23]: p01 against (i1 p23).
        let right = rank_of(vocab, &piece[s1..]);
        settle(out, p01, right, [i0, i1, p23], [p01, p23], [i0, right]);
    }
}

/// The merge of [`merge_short`] for pieces of at most `N` bytes. Parts are linked in
/// arrays on the stack: part `k` (while it lasts) spans bytes `k..end[k]`, and merging it
/// with the next part keeps index `k`, so a merge rewrites a few entries and moves
/// nothing. `keys[k]` holds the rank of merging part `k` with the next one in its high
/// half and `k` in its low half, so that the lowest key is the lowest rank, leftmost on
/// ties: it is found in fixed trees of comparisons, with no branch that depends on the
/// ranks (cachegrind: 17-28% fewer simulated mispredictions than shifting the arrays and
/// scanning with branches). For pieces of 33-127 bytes a tree also beat a scan of the
/// first `n` keys, whose minimum is one long chain of dependent comparisons (merging
/// alone: 1.3x on such pieces of UI text). From 32 keys on, the keys are grouped (4 or 8
/// a group, [`group_size`]) and each group's lowest is kept: a merge step changes at most
/// three keys, so it recomputes three groups and then takes the lowest of the groups'
/// minima, instead of a tree over all `N` keys (for 64 keys, 28 comparisons instead of
/// 63). For 16 keys a tree over all of them costs less: 15 comparisons, where the groups
/// take 12 but also the groups' index arithmetic and their minima's stores and loads
/// (pieces of 9-16 bytes merged 1.03x, with 2.5% fewer instructions). A part that is
/// gone, the last part, and a pair that is no token all have the key `GONE` or one of
/// rank `Rank::MAX`: the merging stops when the lowest key is one of those.
#[inline(always)]
fn merge_in_arrays<const N: usize>(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>, not_a_token: bool) -> Result<()> {
    const GONE: u64 = (Rank::MAX as u64) << 32;
    let n = piece.len();
    debug_assert!(n <= N && N <= 256 && N.is_power_of_two());
    // At first every part is one byte: part `k` ends at `k + 1` and follows part `k - 1`
    // (constant arrays, copied in a few stores). A part's id is written when it is made by
    // a merge; a part still one byte at the end takes its byte's rank then.
    let mut end: [u8; N] = const { offsets(1) };
    let mut prev: [u8; N] = const { offsets(usize::MAX) };
    let mut ids = [0 as Rank; N];
    let mut keys = [GONE; N];
    // The first pairs' ranks come from the dense byte-pair table. For arrays of 8 and 16
    // the loop runs over all `N - 1` places (unrolled), the bytes' indices clamped to the
    // piece and the keys past its end set to `GONE` by a mask: a loop over the piece's
    // `n - 1` pairs ends where its length says, a branch mispredicted about once a piece
    // (12-13% of merging's mispredictions; pieces of up to 16 bytes merged 1.02-1.03x).
    // For 32 the longer fixed loop cost 2% more instructions than it saved.
    if N <= 16 {
        for k in 0..N - 1 {
            let (a, b) = (piece[k.min(n - 1)], piece[(k + 1).min(n - 1)]);
            let key = (vocab.pair_rank(a, b) as u64) << 32 | k as u64;
            let real = ((k + 1 < n) as u64).wrapping_neg();
            keys[k] = key & real | GONE & !real;
        }
    } else {
        for k in 0..n - 1 {
            keys[k] = (vocab.pair_rank(piece[k], piece[k + 1]) as u64) << 32 | k as u64;
        }
    }
    let mut parts = n;
    // The key of merging the part at `k` with the next one, which ends at `e`. (A function
    // marked to be inlined: as a closure it stayed a call per lookup.)
    #[inline(always)]
    fn key(vocab: &Vocab, piece: &[u8], k: usize, e: usize) -> u64 {
        debug_assert!(k < e && e <= piece.len());
        // SAFETY: `k` starts a part and `e` ends the part after it, so `k < e`, and no part
        // ends past the piece.
        let bytes = unsafe { piece.get_unchecked(k..e) };
        (vocab.merged_rank(bytes) as u64) << 32 | k as u64
    }
    // For 32 keys or more, the lowest of each group of `size` keys is kept, and a merge
    // updates only the groups of the (at most three) keys it changed.
    let grouped = N >= 32;
    let size = group_size(N);
    let mut mins = [GONE; GROUPS];
    if grouped {
        for (g, m) in mins.iter_mut().enumerate().take(N / size) {
            *m = group_lowest(&keys, g, size);
        }
    }
    loop {
        let lowest = if grouped { lowest_of(mins, N / size) } else { lowest_of(keys, N) };
        let best = (lowest >> 32) as Rank;
        if best == Rank::MAX {
            break;
        }
        // (Every index below is less than `N`; masked with `N - 1`, the arrays need no bounds
        // checks.)
        let at = lowest as u32 as usize & (N - 1);
        let right = end[at] as usize & (N - 1);
        ids[at] = best;
        end[at] = end[right];
        keys[right] = GONE;
        parts -= 1;
        // Two parts left of a piece that is no token: their concatenation is the piece, so
        // nothing more merges.
        if parts == 1 || (parts == 2 && not_a_token) {
            break;
        }
        let after = end[at] as usize;
        // (When no part follows, this writes a place no part reads: `prev[0]`, or one
        // past the piece.)
        prev[after & (N - 1)] = at as u8;
        let mut left = at;
        if at > 0 {
            left = prev[at] as usize & (N - 1);
            keys[left] = key(vocab, piece, left, after);
        }
        keys[at] = if after < n { key(vocab, piece, at, end[after & (N - 1)] as usize) } else { GONE };
        if grouped {
            // (`left <= at < right`: the same group is often found twice; recomputing it
            // costs less than a branch on it.)
            for k in [left, at, right] {
                mins[(k / size) % GROUPS] = group_lowest(&keys, k / size, size);
            }
        }
    }
    // Every part is a token: a merged part took the rank of its merge, a part of one
    // byte is that byte's token; only a byte the vocabulary lacks has none.
    // (Written into room reserved once: with a `push` per id, the extension's build
    // counted 1.0-3.8% more instructions merging and 7-12% more mispredicted branches.)
    out.reserve(n);
    let mut k = 0;
    while k < n {
        let e = end[k & (N - 1)] as usize;
        let id = if e == k + 1 { vocab.byte_rank(piece[k]) } else { ids[k & (N - 1)] };
        if id == Rank::MAX {
            return Err(Error::UnencodableBytes(piece[k..e].to_vec()));
        }
        // SAFETY: room for `n` ids was reserved, and a piece of `n` bytes has at most `n`
        // parts.
        unsafe {
            let len = out.len();
            *out.as_mut_ptr().add(len) = id;
            out.set_len(len + 1);
        }
        k = e;
    }
    Ok(())
}

/// `[d, 1 + d, 2 + d, ...]` as bytes, wrapping: the first links of [`merge_in_arrays`]'
/// parts (`d` 1 for where each ends, `usize::MAX` for the part before each).
const fn offsets<const N: usize>(d: usize) -> [u8; N] {
    let mut a = [0u8; N];
    let mut k = 0;
    while k < N {
        a[k] = k.wrapping_add(d) as u8;
        k += 1;
    }
    a
}

/// Keys per group in [`merge_in_arrays`]' arrays of `n` keys: the fewest comparisons per
/// merge step (three groups recomputed, then the lowest of the groups' minima).
const fn group_size(n: usize) -> usize {
    if n >= 64 {
        8
    } else {
        4
    }
}
/// The most groups an array has.
const GROUPS: usize = LONG_PIECE / 8;

/// The lowest of group `g`'s keys (`keys[g * size..][..size]`, `size` at most 8).
#[inline(always)]
fn group_lowest<const N: usize>(keys: &[u64; N], g: usize, size: usize) -> u64 {
    let base = (g * size) % N;
    let mut v = [0u64; 8];
    v[..size].copy_from_slice(&keys[base..base + size]);
    lowest_of(v, size)
}

/// The lowest of the first `width` of `v` (`width` a power of two, known where this is
/// inlined), in halving steps: each step's comparisons are independent of one another.
/// Takes a copy, which it overwrites.
#[inline(always)]
fn lowest_of<const M: usize>(mut v: [u64; M], mut width: usize) -> u64 {
    while width > 1 {
        width /= 2;
        for k in 0..width {
            v[k] = v[k].min(v[k + width]);
        }
    }
    v[0]
}

/// A memo of pair merges: `(left id, right id)` → the rank of their concatenation, or
/// "no token". One per encoder, shared by all its threads without a lock: an entry is a
/// single 64-bit word (a valid bit, the rank in 18 bits with all ones for "no token", the
/// two ids in 18 bits each), so a reader sees a whole entry or none, never a torn one, and
/// any entry it sees is true (ranks never change). Direct-mapped and bounded (512 KiB). Ids
/// of 2^18 - 1 or more (no standard vocabulary has them) are not memoized.
pub struct PairMemo {
    slots: Box<[AtomicU64]>,
}

const MEMO_BITS: u32 = 16;
const MEMO_ID_BITS: u32 = 18;
const MEMO_ID_MASK: u64 = (1 << MEMO_ID_BITS) - 1;
const MEMO_VALID: u64 = 1 << 63;

impl Default for PairMemo {
    fn default() -> Self {
        Self { slots: (0..1 << MEMO_BITS).map(|_| AtomicU64::new(0)).collect() }
    }
}

impl PairMemo {
    /// The rank of merging tokens `l` and `r`, from the memo or else from `lookup`.
    #[inline(always)]
    pub(crate) fn rank(&self, l: Rank, r: Rank, lookup: impl FnOnce() -> Rank) -> Rank {
        let (l, r) = (l as u64, r as u64);
        if l >= MEMO_ID_MASK || r >= MEMO_ID_MASK {
            return lookup();
        }
        let key = l | r << MEMO_ID_BITS;
        let slot = &self.slots[(key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - MEMO_BITS)) as usize];
        let e = slot.load(Ordering::Relaxed);
        if e & MEMO_VALID != 0 && e & (MEMO_ID_MASK << MEMO_ID_BITS | MEMO_ID_MASK) == key {
            let rank = e >> (2 * MEMO_ID_BITS) & MEMO_ID_MASK;
            return if rank == MEMO_ID_MASK { Rank::MAX } else { rank as Rank };
        }
        let v = lookup();
        if v == Rank::MAX || (v as u64) < MEMO_ID_MASK {
            let rank = if v == Rank::MAX { MEMO_ID_MASK } else { v as u64 };
            slot.store(MEMO_VALID | rank << (2 * MEMO_ID_BITS) | key, Ordering::Relaxed);
        }
        v
    }
}

const NONE: u32 = u32::MAX;

/// The buffers behind [`Parts`], borrowed from [`Scratch`].
struct PartsScratch<'a> {
    next: &'a mut Vec<u32>,
    prev: &'a mut Vec<u32>,
    rank: &'a mut Vec<Rank>,
    ids: &'a mut Vec<Rank>,
}

/// A long piece as a linked list of parts: node `i` is the part starting at byte `i`, and
/// `rank[i]` is the rank of merging it with the next part (`Rank::MAX` if none).
struct Parts<'a, 'm> {
    vocab: &'a Vocab,
    piece: &'a [u8],
    next: &'a mut Vec<u32>,
    prev: &'a mut Vec<u32>,
    rank: &'a mut Vec<Rank>,
    /// `ids[i]`: the token id of the part starting at node `i` (`Rank::MAX` for a byte the
    /// vocabulary lacks).
    ids: &'a mut Vec<Rank>,
    memo: Option<&'m PairMemo>,
}

impl<'a, 'm> Parts<'a, 'm> {
    /// One part per byte.
    fn new(vocab: &'a Vocab, piece: &'a [u8], s: PartsScratch<'a>, memo: Option<&'m PairMemo>) -> Self {
        let PartsScratch { next, prev, rank, ids } = s;
        let n = piece.len();
        next.clear();
        prev.clear();
        rank.clear();
        ids.clear();
        ids.extend(piece.iter().map(|&b| vocab.byte_rank(b)));
        for i in 0..n {
            next.push(if i + 1 < n { (i + 1) as u32 } else { NONE });
            prev.push(if i > 0 { (i - 1) as u32 } else { NONE });
            rank.push(if i + 1 < n { vocab.pair_rank(piece[i], piece[i + 1]) } else { Rank::MAX });
        }
        Self { vocab, piece, next, prev, rank, ids, memo }
    }

    /// End (exclusive) of the part that starts at node `i`.
    #[inline]
    fn end(&self, i: u32) -> usize {
        let j = self.next[i as usize];
        if j == NONE { self.piece.len() } else { j as usize }
    }

    /// Rank of merging node `i` with its successor, in the current list.
    #[inline]
    fn pair(&self, i: u32) -> Rank {
        let j = self.next[i as usize];
        if j == NONE {
            return Rank::MAX;
        }
        let (l, r) = (self.ids[i as usize], self.ids[j as usize]);
        let bytes = &self.piece[i as usize..self.end(j)];
        match self.memo {
            Some(memo) if l != Rank::MAX && r != Rank::MAX => memo.rank(l, r, || rank_of(self.vocab, bytes)),
            _ => rank_of(self.vocab, bytes),
        }
    }

    /// Merges node `i` with its successor and recomputes the two pairs that changed; returns
    /// their nodes (the predecessor, `NONE` if there is none, then `i`).
    #[inline]
    fn merge(&mut self, i: u32) -> [u32; 2] {
        let j = self.next[i as usize];
        let k = self.next[j as usize];
        self.ids[i as usize] = self.rank[i as usize];
        self.next[i as usize] = k;
        if k != NONE {
            self.prev[k as usize] = i;
        }
        self.rank[j as usize] = Rank::MAX;
        self.next[j as usize] = NONE;
        let p = self.prev[i as usize];
        for node in [p, i] {
            if node != NONE {
                self.rank[node as usize] = self.pair(node);
            }
        }
        [p, i]
    }

    /// Appends the tokens of the parts to `out`.
    fn emit(&self, out: &mut Vec<Rank>) -> Result<()> {
        let mut i = 0u32;
        while i != NONE {
            let id = self.ids[i as usize];
            if id == Rank::MAX {
                return Err(Error::UnencodableBytes(self.piece[i as usize..self.end(i)].to_vec()));
            }
            out.push(id);
            i = self.next[i as usize];
        }
        Ok(())
    }
}

/// Positions of the pairs of one rank, in the order they were found.
#[derive(Default)]
struct Bucket {
    positions: Vec<u32>,
    sorted: bool,
}

/// Buckets of pair positions by rank, lowest rank first. Buckets live in a pool reused
/// across pieces (no allocation in steady state), and the bucket last added to is
/// remembered: merges in a long piece mostly create pairs of one or two ranks.
#[derive(Default)]
pub struct Buckets {
    index: FxHashMap<Rank, u32>,
    pool: Vec<Bucket>,
    free: Vec<u32>,
    pending: BinaryHeap<Reverse<Rank>>,
    /// (rank, pool slot) of the last addition; `Rank::MAX` when none.
    last: (Rank, u32),
}

impl Buckets {
    fn clear(&mut self) {
        for (_, slot) in self.index.drain() {
            self.pool[slot as usize].positions.clear();
            self.free.push(slot);
        }
        self.pending.clear();
        self.last = (Rank::MAX, 0);
    }

    #[inline]
    fn add(&mut self, r: Rank, pos: u32) {
        let slot = if self.last.0 == r {
            self.last.1
        } else {
            let slot = match self.index.get(&r) {
                Some(&slot) => slot,
                None => {
                    let slot = self.free.pop().unwrap_or_else(|| {
                        self.pool.push(Bucket::default());
                        (self.pool.len() - 1) as u32
                    });
                    self.pool[slot as usize].sorted = true;
                    self.index.insert(r, slot);
                    self.pending.push(Reverse(r));
                    slot
                }
            };
            self.last = (r, slot);
            slot
        };
        let b = &mut self.pool[slot as usize];
        if b.positions.last().is_some_and(|&last| last > pos) {
            b.sorted = false;
        }
        b.positions.push(pos);
    }

    /// Moves the positions of the lowest rank into `into` (sorted); returns the rank.
    fn pop_lowest(&mut self, into: &mut Vec<u32>) -> Option<Rank> {
        let Reverse(r) = self.pending.pop()?;
        let slot = self.index.remove(&r).expect("a pending rank has a bucket");
        if self.last.0 == r {
            self.last = (Rank::MAX, 0);
        }
        let b = &mut self.pool[slot as usize];
        if !b.sorted {
            b.positions.sort_unstable();
        }
        into.clear();
        std::mem::swap(into, &mut b.positions);
        self.free.push(slot);
        Some(r)
    }
}

/// Parts are numbered with `u32`s ([`NONE`] marks none): a piece of 4 GiB or more (a
/// single match of the pattern, such as that many letters with no space) would wrap them.
fn check_length(piece: &[u8]) -> Result<()> {
    if piece.len() >= NONE as usize {
        return Err(Error::PieceTooLong(piece.len()));
    }
    Ok(())
}

/// Long pieces: the pairs are bucketed by rank. Ranks are taken lowest first and each
/// bucket is swept left to right, merging the pairs still current. This is tiktoken's order
/// (lowest rank first, leftmost first) because a merge never creates another pair of the
/// rank being swept (its bytes are longer than the merged token's), so a bucket does not
/// change while it is swept, and new pairs of higher ranks wait in their buckets. If a merge
/// creates a pair ranked *below* the bucket being swept, the order would need to go back:
/// the function gives up and returns `Ok(false)` with `out` untouched, and the caller uses
/// the heap.
pub(crate) fn merge_by_rank_buckets(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>, s: &mut Scratch, memo: Option<&PairMemo>) -> Result<bool> {
    check_length(piece)?;
    let Scratch { next, prev, pair_rank, ids, buckets, sweep, .. } = s;
    buckets.clear();
    let mut parts = Parts::new(vocab, piece, PartsScratch { next, prev, rank: pair_rank, ids }, memo);
    for (i, &r) in parts.rank.iter().enumerate() {
        if r != Rank::MAX {
            buckets.add(r, i as u32);
        }
    }
    while let Some(r) = buckets.pop_lowest(sweep) {
        for &i in sweep.iter() {
            if parts.rank[i as usize] != r {
                continue; // merged away, or its pair changed
            }
            for node in parts.merge(i) {
                if node == NONE {
                    continue;
                }
                let nr = parts.rank[node as usize];
                if nr == Rank::MAX {
                    continue;
                }
                if nr <= r {
                    return Ok(false); // (equal is impossible with distinct ranks; be safe)
                }
                buckets.add(nr, node);
            }
        }
    }
    parts.emit(out)?;
    Ok(true)
}

/// O(n log n) always: a min-heap holds (rank, position) candidates and stale entries are
/// skipped when popped.
pub(crate) fn merge_long(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>, s: &mut Scratch, memo: Option<&PairMemo>) -> Result<()> {
    check_length(piece)?;
    let Scratch { next, prev, pair_rank, ids, heap, .. } = s;
    heap.clear();
    let mut parts = Parts::new(vocab, piece, PartsScratch { next, prev, rank: pair_rank, ids }, memo);
    heap.extend(parts.rank.iter().enumerate().filter(|(_, &r)| r != Rank::MAX).map(|(i, &r)| Reverse((r, i as u32))));
    while let Some(Reverse((r, i))) = heap.pop() {
        if parts.rank[i as usize] != r {
            continue; // stale: node merged away or its pair changed
        }
        for node in parts.merge(i) {
            if node != NONE && parts.rank[node as usize] != Rank::MAX {
                heap.push(Reverse((parts.rank[node as usize], node)));
            }
        }
    }
    parts.emit(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustc_hash::FxHashMap;

    /// Textbook definition: parts as byte strings, merge the leftmost lowest-ranked pair.
    fn reference(vocab: &Vocab, piece: &[u8]) -> Vec<Rank> {
        let mut parts: Vec<Vec<u8>> = piece.iter().map(|&b| vec![b]).collect();
        loop {
            let mut best: Option<(Rank, usize)> = None;
            for i in 0..parts.len().saturating_sub(1) {
                let cat = [parts[i].as_slice(), parts[i + 1].as_slice()].concat();
                if let Some(r) = vocab.rank(&cat) {
                    if best.is_none_or(|(br, _)| r < br) {
                        best = Some((r, i));
                    }
                }
            }
            let Some((_, i)) = best else { break };
            let right = parts.remove(i + 1);
            parts[i].extend(right);
        }
        parts.iter().map(|p| vocab.rank(p).unwrap()).collect()
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A vocabulary over a small alphabet with merges learned greedily from random text,
    /// plus random extra tokens, so that ties and overlapping candidates are common.
    fn toy_vocab(rng: &mut Rng) -> Vocab {
        let mut ranks: FxHashMap<Vec<u8>, Rank> = FxHashMap::default();
        for b in 0..=255u8 {
            ranks.insert(vec![b], b as Rank);
        }
        let alphabet = b"aab c";
        let mut next = 256;
        for _ in 0..300 {
            let len = 2 + rng.below(5) as usize;
            let tok: Vec<u8> = (0..len).map(|_| alphabet[rng.below(alphabet.len() as u64) as usize]).collect();
            // Only add tokens reachable by merging two existing tokens.
            let reachable = (1..tok.len()).any(|k| ranks.contains_key(&tok[..k]) && ranks.contains_key(&tok[k..]));
            if reachable && !ranks.contains_key(&tok) {
                ranks.insert(tok, next);
                next += 1;
            }
        }
        Vocab::new(ranks, vec![]).unwrap()
    }

    #[test]
    fn short_and_long_paths_match_the_reference() {
        let mut rng = Rng(0x9E3779B97F4A7C15);
        for round in 0..20 {
            let vocab = toy_vocab(&mut rng);
            let memo = PairMemo::default();
            let alphabet = b"aab cx";
            for _ in 0..200 {
                let len = 1 + rng.below(if round % 2 == 0 { 40 } else { 400 }) as usize;
                let piece: Vec<u8> = (0..len).map(|_| alphabet[rng.below(alphabet.len() as u64) as usize]).collect();
                let want = reference(&vocab, &piece);
                let mut s = Scratch::default();
                let is_token = vocab.rank(&piece).is_some();
                if (2..LONG_PIECE).contains(&piece.len()) {
                    let mut a = Vec::new();
                    merge_short(&vocab, &piece, &mut a, false).unwrap();
                    assert_eq!(a, want, "short path on {:?}", String::from_utf8_lossy(&piece));
                    if !is_token {
                        let mut a2 = Vec::new();
                        merge_short(&vocab, &piece, &mut a2, true).unwrap();
                        assert_eq!(a2, want, "short path, known no token, on {:?}", String::from_utf8_lossy(&piece));
                    }
                }
                let mut b = Vec::new();
                merge_long(&vocab, &piece, &mut b, &mut s, None).unwrap();
                assert_eq!(b, want, "long path on {:?}", String::from_utf8_lossy(&piece));
                let mut b2 = Vec::new();
                merge_long(&vocab, &piece, &mut b2, &mut s, Some(&memo)).unwrap();
                assert_eq!(b2, want, "long path with memo on {:?}", String::from_utf8_lossy(&piece));
                for with_memo in [false, true] {
                    let mut d = Vec::new();
                    let m = if with_memo { Some(&memo) } else { None };
                    if merge_by_rank_buckets(&vocab, &piece, &mut d, &mut s, m).unwrap() {
                        assert_eq!(d, want, "bucket path on {:?}", String::from_utf8_lossy(&piece));
                    } else {
                        assert!(d.is_empty());
                    }
                }
                let mut c = Vec::new();
                merge_piece(&vocab, &piece, &mut c, &mut s, None).unwrap();
                assert_eq!(c, want);
                if !is_token {
                    let mut c2 = Vec::new();
                    encode_piece(&vocab, &piece, &mut c2, &mut s, None).unwrap();
                    assert_eq!(c2, want);
                }
            }
        }
    }

    #[test]
    fn repeated_byte_runs_use_leftmost_ties() {
        let mut ranks: FxHashMap<Vec<u8>, Rank> = FxHashMap::default();
        for b in 0..=255u8 {
            ranks.insert(vec![b], b as Rank);
        }
        ranks.insert(b"aa".to_vec(), 256);
        ranks.insert(b"aaaa".to_vec(), 257);
        let vocab = Vocab::new(ranks, vec![]).unwrap();
        for n in [2usize, 3, 5, 7, 200, 1001] {
            let piece = vec![b'a'; n];
            let mut s = Scratch::default();
            let mut out = Vec::new();
            merge_piece(&vocab, &piece, &mut out, &mut s, None).unwrap();
            assert_eq!(out, reference(&vocab, &piece), "n = {n}");
        }
    }

    /// A piece of 2^32 - 1 bytes or more would wrap the parts' `u32` numbers: both merges
    /// of long pieces refuse it before reading a byte. The piece is a mapping of that many
    /// bytes that is never touched (no memory behind it).
    #[cfg(all(unix, target_pointer_width = "64"))]
    #[test]
    fn pieces_too_long_for_part_numbers_are_refused() {
        let mut ranks: FxHashMap<Vec<u8>, Rank> = FxHashMap::default();
        for b in 0..=255u8 {
            ranks.insert(vec![b], b as Rank);
        }
        let vocab = Vocab::new(ranks, vec![]).unwrap();
        let len = NONE as usize;
        // SAFETY: a fresh private anonymous mapping, read-only, with no swap reserved; it is
        // only ever passed as a slice whose length is checked, and unmapped at the end.
        let map = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0) };
        assert_ne!(map, libc::MAP_FAILED, "mapping {len} bytes");
        // SAFETY: the mapping is `len` readable bytes (zeros), alive until the unmap below.
        let piece = unsafe { std::slice::from_raw_parts(map as *const u8, len) };
        let (mut s, mut out) = (Scratch::default(), Vec::new());
        assert!(matches!(merge_by_rank_buckets(&vocab, piece, &mut out, &mut s, None), Err(Error::PieceTooLong(n)) if n == len));
        assert!(matches!(merge_long(&vocab, piece, &mut out, &mut s, None), Err(Error::PieceTooLong(n)) if n == len));
        assert!(out.is_empty());
        // One byte shorter passes the check.
        assert!(check_length(&piece[..len - 1]).is_ok());
        // SAFETY: the mapping made above, no longer borrowed.
        unsafe { libc::munmap(map, len) };
    }

    #[test]
    fn pair_memo_remembers_ranks_and_misses_and_passes_large_ids_through() {
        let memo = PairMemo::default();
        let calls = std::cell::Cell::new(0);
        let look = |v: Rank| {
            calls.set(calls.get() + 1);
            v
        };
        assert_eq!(memo.rank(1, 2, || look(300)), 300);
        assert_eq!(memo.rank(1, 2, || look(999)), 300); // remembered
        assert_eq!(memo.rank(2, 1, || look(Rank::MAX)), Rank::MAX);
        assert_eq!(memo.rank(2, 1, || look(5)), Rank::MAX); // "no token" remembered too
        assert_eq!(calls.get(), 2);
        let big = (1 << 18) - 1;
        assert_eq!(memo.rank(big, 2, || look(7)), 7);
        assert_eq!(memo.rank(big, 2, || look(8)), 8); // not memoized
        assert_eq!(memo.rank(3, 4, || look(big)), big);
        assert_eq!(memo.rank(3, 4, || look(9)), 9); // a rank too large is not memoized either
        assert_eq!(calls.get(), 6);
    }

    #[test]
    fn missing_single_byte_is_an_error_not_a_panic() {
        let mut ranks: FxHashMap<Vec<u8>, Rank> = FxHashMap::default();
        ranks.insert(b"a".to_vec(), 0);
        let vocab = Vocab::new(ranks, vec![]).unwrap();
        let mut s = Scratch::default();
        let mut out = Vec::new();
        assert!(matches!(encode_piece(&vocab, b"ab", &mut out, &mut s, None), Err(Error::UnencodableBytes(_))));
        assert!(matches!(encode_piece(&vocab, &[b'z'; 300], &mut out, &mut s, None), Err(Error::UnencodableBytes(_))));
        // Two, three and four bytes (their own fast paths) with one byte the vocabulary
        // lacks, at each place.
        for piece in [&b"za"[..], b"az", b"zaa", b"aza", b"aaz", b"zaaa", b"azaa", b"aaza", b"aaaz"] {
            assert!(matches!(encode_piece(&vocab, piece, &mut out, &mut s, None), Err(Error::UnencodableBytes(_))), "{piece:?}");
        }
    }

    #[test]
    fn every_piece_of_two_to_five_bytes_matches_the_reference() {
        // Pieces of two to five bytes known not to be tokens take closed-form paths (none,
        // none, at most two and at most four lookups): every such piece over the toy
        // alphabet, in many vocabularies (ties and chains included).
        let mut rng = Rng(0x2545F4914F6CDD1D);
        let alphabet = b"ab cx";
        let mut checked = [0usize; 6];
        for _ in 0..40 {
            let vocab = toy_vocab(&mut rng);
            let mut pieces: Vec<Vec<u8>> = alphabet.iter().map(|&x| vec![x]).collect();
            for _ in 2..=5 {
                pieces = pieces.iter().flat_map(|p| alphabet.iter().map(move |&x| [p.as_slice(), &[x]].concat())).collect();
                for piece in &pieces {
                    if vocab.rank(piece).is_some() {
                        continue;
                    }
                    // (ids already there must stay, the piece's come after them)
                    let before = [7, 8, 9];
                    let mut out = before.to_vec();
                    if piece.len() == 5 {
                        encode_unrepeated_piece(&vocab, piece, &mut out, &mut Scratch::default(), None).unwrap();
                    } else {
                        merge_short(&vocab, piece, &mut out, true).unwrap();
                    }
                    assert_eq!(out[..3], before);
                    assert_eq!(out[3..], reference(&vocab, piece), "{:?}", String::from_utf8_lossy(piece));
                    checked[piece.len()] += 1;
                }
            }
        }
        assert!(checked[2] > 200 && checked[3] > 1000 && checked[4] > 10_000 && checked[5] > 50_000, "{checked:?}");
    }
}
