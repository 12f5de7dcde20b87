//! The encoder: pre-tokenization, whole-piece lookup, byte-pair merging and special-token
//! handling, with tiktoken's exact results.

use std::mem::MaybeUninit;

use rustc_hash::FxHashSet;

use crate::batch;
use crate::bpe::{self, PairMemo, Scratch};
use crate::piece_cache::{self, PieceCache, SharedPieces, SharedSlot, WidePieces, MAX_TOKENS, WIDE_OVERFLOW, WIDE_TOKENS};
use crate::prefetch::prefetch;
use crate::error::{Error, Rank, Result};
use crate::pretokenize::Splitter;
use crate::scanner::Spans;
use crate::special::{SpecialMatcher, SpecialPolicy};
use crate::vocab::{inline_key, window_key, Vocab, INLINE_MAX};

pub struct Encoder {
    /// Tags this encoder's entries in the per-thread piece cache.
    owner: u64,
    vocab: Vocab,
    /// Encoded short pieces, shared by every thread encoding with this encoder.
    pieces: SharedPieces,
    /// Encoded short pieces of more than MAX_TOKENS tokens, shared likewise.
    wide: WidePieces,
    /// Pair merges of long pieces (128 bytes or more), shared likewise.
    pairs: PairMemo,
    splitter: Splitter,
    specials: SpecialMatcher,
    pattern: String,
}

/// How many pieces the scanner finds, keys and prefetches before any of them is probed
/// (see [`Encoder::encode_pieces`]).
const SCAN_CHUNK: usize = 128;

/// A piece found by the scanner: its first-level key (0 for none) and that key's slot.
#[derive(Clone, Copy)]
struct Scanned<'a> {
    key: u128,
    start: usize,
    end: usize,
    slot: &'a SharedSlot,
}

/// The first-level key of the piece `text[start..end]` where the piece is short and the
/// text goes on for 16 bytes from its start: one load and a mask, with no branch on the
/// piece's length. 0 (no key) otherwise; such a piece gets its key, if any, later.
#[inline(always)]
fn piece_key(text: &[u8], start: usize, end: usize) -> u128 {
    match text.get(start..start + 16) {
        Some(window) if end - start <= INLINE_MAX => window_key(window.try_into().unwrap(), end - start),
        _ => 0,
    }
}

impl Encoder {
    /// An encoder for the mergeable `tokens` (byte strings with their ids, each string
    /// and each id once), the special tokens and the splitting pattern.
    pub fn new<B: AsRef<[u8]>>(
        tokens: impl IntoIterator<Item = (B, Rank)>,
        special_tokens: Vec<(String, Rank)>,
        pattern: &str,
    ) -> Result<Self> {
        let splitter = Splitter::new(pattern)?;
        let specials = SpecialMatcher::new(special_tokens.iter().map(|(k, v)| (k.as_str(), *v)))?;
        let vocab = Vocab::new(tokens, special_tokens)?;
        Ok(Self { owner: piece_cache::new_owner(), vocab, pieces: SharedPieces::default(), wide: WidePieces::default(), pairs: PairMemo::default(), splitter, specials, pattern: pattern.to_string() })
    }

    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    pub fn splitter(&self) -> &Splitter {
        &self.splitter
    }

    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Encodes text with no special-token handling, appending to `out`. Returns how many
    /// tokens the last piece produced (needed by the unstable-token logic).
    pub fn encode_ordinary_into(&self, text: &str, out: &mut Vec<Rank>, scratch: &mut Scratch) -> Result<usize> {
        self.encode_ordinary_spilling(text, out, scratch, &mut Keep)
    }

    fn encode_ordinary_spilling<S: Spill>(&self, text: &str, out: &mut Vec<Rank>, scratch: &mut Scratch, spill: &mut S) -> Result<usize> {
        PieceCache::with(|cache| self.encode_pieces(text, out, scratch, cache, spill))
    }

    fn encode_pieces<S: Spill>(&self, text: &str, out: &mut Vec<Rank>, scratch: &mut Scratch, cache: &mut PieceCache, spill: &mut S) -> Result<usize> {
        let mut last = 0;
        // The scanner's spans come as an iterator looped over here, so that the per-piece
        // work is inlined into this loop (through a closure it stayed a call per piece once
        // the bit-parallel windows joined the scanner's loop).
        //
        // The pieces go in chunks of SCAN_CHUNK, in two tight loops. The first runs the
        // scanner over a chunk: each span it finds is stored with its first-level key (0
        // for a piece that gets no key here: one longer than INLINE_MAX, or within 16
        // bytes of the text's end) and that key's slot, and the processor is asked to
        // bring the slot into its caches. The second probes the slots in turn: most pieces
        // are answered by that one probe, and the first level (8 MiB) is larger than a
        // core's L2 cache, so without the prefetch each probe waited for memory in turn
        // (the prefetch made the warm pass 1.09-1.14x from Python). Hashing the key again
        // for the probe cost 4% more instructions (cachegrind) and 0.97x on the warm pass.
        //
        // The two were once one loop, the scanner running 16 pieces ahead of the
        // probes through a ring. Split, each loop keeps its own state in registers: on the
        // warm pass 9% fewer instructions and 8% fewer mispredicted branches (cachegrind,
        // o200k), and 1.02-1.08x from Python in every column of the encoding benchmark
        // (`ab_builds.py`, pinned to one CPU, 12 rounds each; 1 MB without whitespace,
        // where the caches are soon skipped, 0.99x and 1.01x). Chunks of 64 and 128
        // pieces measured alike, 32 a little slower.
        //
        // A hit touches nothing in memory but the chunk, the slot and the ids: its ids are
        // copied from the slot straight into room reserved for the chunk, at a length
        // kept in a register (`SharedSlot::copy_to`; the length advances only if the
        // slot was whole), and it is counted in a local tally, its length read from its
        // key; `out` and `cache.usage` are brought up to date at the end of the chunk and
        // before a miss, which goes out of line (`encode_chunk_miss`). Copying in place
        // of returning the ids, and the piece's length from its key rather than its span,
        // took 3% of the warm pass's instructions away (cachegrind, o200k).
        if let Splitter::Scan(scanner) = &self.splitter {
            let b = text.as_bytes();
            let mut spans = scanner.spans(text);
            // Left uninitialised: filling 128 entries on every call would cost a call that
            // encodes a few words more than its pieces do. Only the `taken` entries the
            // first loop wrote are read.
            let mut chunk = [const { MaybeUninit::<Scanned>::uninit() }; SCAN_CHUNK];
            if cache.usage.probing() {
                loop {
                    // Scan, key and prefetch a chunk of pieces.
                    let mut taken = 0;
                    while taken < SCAN_CHUNK {
                        let Some((start, end)) = spans.next() else { break };
                        let key = piece_key(b, start, end);
                        let slot = self.pieces.slot_at(SharedPieces::index(key));
                        prefetch(slot);
                        chunk[taken].write(Scanned { key, start, end, slot });
                        taken += 1;
                    }
                    // Probe and encode them.
                    out.reserve(MAX_TOKENS * taken);
                    let (mut ids, mut len) = (out.as_mut_ptr(), out.len());
                    // First-level hits of pieces of more than three bytes, for `cache.usage`.
                    let mut hits = 0u32;
                    let mut encoded = 0;
                    while encoded < taken {
                        // SAFETY: the first loop wrote the entries below `taken`.
                        let p = unsafe { chunk[encoded].assume_init_ref() };
                        encoded += 1;
                        // SAFETY: `ids` is `out`'s buffer, with room for MAX_TOKENS ids per
                        // piece of the chunk not encoded before the last reserve, and `len`
                        // advanced by at most MAX_TOKENS a piece since.
                        match (p.key != 0).then(|| unsafe { p.slot.copy_to(p.key, ids.add(len)) }).flatten() {
                            Some(count) => {
                                len += count;
                                // (the piece's length is the key's top byte)
                                hits += ((p.key >> 120) > 3) as u32;
                                last = count;
                            }
                            None => {
                                // SAFETY: the ids below `len` are written.
                                unsafe { out.set_len(len) };
                                cache.usage.count_hits(std::mem::take(&mut hits));
                                last = self.encode_chunk_miss(&b[p.start..p.end], p.key, out, scratch, cache)?;
                                if spill.after_piece(out) {
                                    return Err(Error::Cancelled);
                                }
                                out.reserve(MAX_TOKENS * (taken - encoded));
                                (ids, len) = (out.as_mut_ptr(), out.len());
                            }
                        }
                    }
                    // SAFETY: the ids below `len` are written.
                    unsafe { out.set_len(len) };
                    if spill.after_piece(out) {
                        return Err(Error::Cancelled);
                    }
                    cache.usage.count_hits(hits);
                    if taken < SCAN_CHUNK || !cache.usage.probing() {
                        break;
                    }
                }
            }
            if !spans.is_done() {
                // The caches are skipped (text whose pieces do not repeat), from the start
                // or from some chunk on: the rest goes without prefetching.
                last = self.encode_unprefetched(b, spans, out, scratch, cache, spill)?.unwrap_or(last);
            }
        } else {
            self.splitter.for_each_piece(text, |piece| {
                last = self.encode_piece(piece.as_bytes(), out, scratch, cache)?;
                if spill.after_piece(out) {
                    return Err(Error::Cancelled);
                }
                Ok(())
            })?;
        }
        Ok(last)
    }

    /// The rest of [`Encoder::encode_pieces`]' work once the caches are skipped: the pieces
    /// the scanner has not yet found, one at a time. Prefetching slots that are not probed
    /// only costs (text without whitespace, 1 MB in one call: 0.93x with the prefetching
    /// kept). Out of line, so that the loops of the common case stay small. Returns the
    /// last piece's token count, `None` if there was no piece left.
    #[inline(never)]
    fn encode_unprefetched<S: Spill>(&self, b: &[u8], spans: Spans<'_, '_>, out: &mut Vec<Rank>, scratch: &mut Scratch, cache: &mut PieceCache, spill: &mut S) -> Result<Option<usize>> {
        let mut last = None;
        for (start, end) in spans {
            let bytes = &b[start..end];
            // A piece of one to three bytes needs no key while the caches are skipped: the
            // dense tables answer it, and `encode_short_missed` reads its key only to cache it.
            last = Some(if bytes.len() <= 3 && !cache.usage.probing() {
                self.encode_short_missed(bytes, 0, out, scratch, cache)?
            } else {
                self.encode_keyed(bytes, piece_key(b, start, end), out, scratch, cache)?
            });
            if spill.after_piece(out) {
                return Err(Error::Cancelled);
            }
        }
        Ok(last)
    }

    /// A piece of a chunk that the first level did not answer (or that has no key there):
    /// out of line, so that the loop over the hits stays small. Returns its token count.
    /// A keyed piece's slot was probed by the chunk's loop just now, so it is not probed
    /// again.
    #[inline(never)]
    fn encode_chunk_miss(&self, bytes: &[u8], key: u128, out: &mut Vec<Rank>, scratch: &mut Scratch, cache: &mut PieceCache) -> Result<usize> {
        if key != 0 {
            self.encode_short_missed(bytes, key, out, scratch, cache)
        } else {
            self.encode_piece(bytes, out, scratch, cache)
        }
    }

    /// Appends the tokens of one piece given with its [`piece_key`]; returns how many
    /// there are.
    #[inline(always)]
    fn encode_keyed(&self, bytes: &[u8], key: u128, out: &mut Vec<Rank>, scratch: &mut Scratch, cache: &mut PieceCache) -> Result<usize> {
        if key != 0 {
            self.encode_short(bytes, key, out, scratch, cache)
        } else {
            self.encode_piece(bytes, out, scratch, cache)
        }
    }

    /// Appends the tokens of one piece; returns how many there are.
    #[inline(always)]
    fn encode_piece(&self, bytes: &[u8], out: &mut Vec<Rank>, scratch: &mut Scratch, cache: &mut PieceCache) -> Result<usize> {
        if bytes.len() <= INLINE_MAX {
            self.encode_short(bytes, inline_key(bytes), out, scratch, cache)
        } else {
            self.encode_long(bytes, out, scratch, cache)
        }
    }

    /// A piece of at most [`INLINE_MAX`] bytes, given with its [`inline_key`]. Every such
    /// piece goes to the shared first level of the piece cache first, whatever its length:
    /// on real text most are there, and one path for all of them means no branch on the
    /// length (which real text makes hard to predict) before the answer.
    #[inline(always)]
    fn encode_short(&self, bytes: &[u8], key: u128, out: &mut Vec<Rank>, scratch: &mut Scratch, cache: &mut PieceCache) -> Result<usize> {
        if cache.usage.probing() {
            if let Some(count) = self.first_level_hit(key, SharedPieces::index(key), out) {
                cache.usage.count_hit(bytes.len() > 3);
                return Ok(count);
            }
        }
        self.encode_short_missed(bytes, key, out, scratch, cache)
    }

    /// The tokens of a short piece from the first level (`i` its key's slot), appended;
    /// how many there are. Counts nothing: the caller counts the hit.
    #[inline(always)]
    fn first_level_hit(&self, key: u128, i: usize, out: &mut Vec<Rank>) -> Option<usize> {
        let (tokens, count) = self.pieces.get_at(i, key)?;
        // All the slot's places are copied and the extra ones dropped: no branch on the
        // count.
        let before = out.len();
        out.extend_from_slice(&tokens);
        out.truncate(before + count);
        Some(count)
    }

    /// A short piece the first level did not answer (or the caches are skipped just now).
    #[inline(always)]
    fn encode_short_missed(&self, bytes: &[u8], key: u128, out: &mut Vec<Rank>, scratch: &mut Scratch, cache: &mut PieceCache) -> Result<usize> {
        let before = out.len();
        if bytes.len() <= 3 {
            // The dense tables answer these exactly; a piece that is no token merges in
            // closed form. Cached so that the next one takes the common path.
            let whole = match *bytes {
                [a] => self.vocab.byte_rank(a),
                [a, b] => self.vocab.pair_rank(a, b),
                [a, b, c] => self.vocab.three_rank(a, b, c),
                _ => Rank::MAX,
            };
            if whole != Rank::MAX {
                out.push(whole);
            } else {
                bpe::encode_piece(&self.vocab, bytes, out, scratch, None)?;
            }
            if cache.usage.probing() {
                self.pieces.put(key, &out[before..]);
            }
        } else if !cache.usage.caching() {
            if let Some(id) = self.vocab.rank_inline(key) {
                out.push(id);
            } else {
                bpe::encode_unrepeated_piece(&self.vocab, bytes, out, scratch, Some(&self.pairs))?;
            }
        } else if let Some(id) = self.vocab.rank_inline(key) {
            cache.usage.record(false);
            out.push(id);
            self.pieces.put(key, &out[before..]);
        } else if bytes.len() > MAX_TOKENS && self.wide_hit(bytes, key, out, cache) {
            // (a piece of at most MAX_TOKENS bytes has no more tokens: never there)
            cache.usage.record(true);
        } else {
            cache.usage.record(false);
            bpe::encode_piece(&self.vocab, bytes, out, scratch, Some(&self.pairs))?;
            let n = out.len() - before;
            if n <= MAX_TOKENS {
                self.pieces.put(key, &out[before..]);
            } else {
                self.wide.put(key, &out[before..]);
                if n > WIDE_TOKENS {
                    cache.put_long(self.owner, bytes, &out[before..]);
                }
            }
        }
        Ok(out.len() - before)
    }

    /// Appends the tokens of a short piece of more than [`MAX_TOKENS`] tokens from the wide
    /// table, or from the second level when the wide table marks it as longer than its
    /// slots; whether either had it.
    #[inline(always)]
    fn wide_hit(&self, bytes: &[u8], key: u128, out: &mut Vec<Rank>, cache: &mut PieceCache) -> bool {
        match self.wide.get(key, out) {
            None => false,
            Some(WIDE_OVERFLOW) => match cache.get_long(self.owner, bytes) {
                Some(tokens) => {
                    out.extend_from_slice(tokens);
                    true
                }
                None => false,
            },
            Some(_) => true,
        }
    }

    /// A piece of more than [`INLINE_MAX`] bytes.
    fn encode_long(&self, bytes: &[u8], out: &mut Vec<Rank>, scratch: &mut Scratch, cache: &mut PieceCache) -> Result<usize> {
        let before = out.len();
        if let Some(id) = self.vocab.rank(bytes) {
            out.push(id);
        } else if !cache.usage.caching() {
            bpe::encode_piece(&self.vocab, bytes, out, scratch, Some(&self.pairs))?;
        } else if let Some(tokens) = cache.get_long(self.owner, bytes) {
            out.extend_from_slice(tokens);
            cache.usage.record(true);
        } else {
            cache.usage.record(false);
            bpe::encode_piece(&self.vocab, bytes, out, scratch, Some(&self.pairs))?;
            if bytes.len() < bpe::LONG_PIECE {
                cache.put_long(self.owner, bytes, &out[before..]);
            }
        }
        Ok(out.len() - before)
    }

    pub fn encode_ordinary(&self, text: &str) -> Result<Vec<Rank>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        self.encode_ordinary_into(text, &mut out, &mut Scratch::default())?;
        Ok(out)
    }

    /// Encodes text under a special-token policy, appending to `out`. Returns the number of
    /// tokens from the last regex piece (0 when the text ends with a special token).
    pub fn encode_into(&self, text: &str, policy: &SpecialPolicy, out: &mut Vec<Rank>, scratch: &mut Scratch) -> Result<usize> {
        self.encode_spilling(text, policy, out, scratch, &mut Keep)
    }

    fn encode_spilling<S: Spill>(&self, text: &str, policy: &SpecialPolicy, out: &mut Vec<Rank>, scratch: &mut Scratch, spill: &mut S) -> Result<usize> {
        let matches = self.specials.find(text, policy);
        if matches.is_empty() && policy.extra_disallowed.is_empty() && !self.specials.disallows_empty(policy) {
            return self.encode_ordinary_spilling(text, out, scratch, spill);
        }
        self.specials.check_disallowed(text, &matches, policy)?;
        let mut start = 0;
        let mut last = 0;
        for m in matches.iter().filter(|m| policy.is_allowed(m.id)) {
            if m.start < start {
                continue; // overlaps a special token already taken
            }
            if m.start > start {
                self.encode_ordinary_spilling(&text[start..m.start], out, scratch, spill)?;
            }
            out.push(m.id);
            if spill.after_piece(out) {
                return Err(Error::Cancelled);
            }
            start = m.end;
            last = 0;
        }
        if start < text.len() {
            last = self.encode_ordinary_spilling(&text[start..], out, scratch, spill)?;
        }
        Ok(last)
    }

    /// Encodes `text` (under `policy`, or as ordinary text when it is `None`), handing the
    /// ids to `drain` a batch at a time as they are made, in order, instead of collecting
    /// them all: `drain` is called whenever at least `every` ids are waiting, and once at
    /// the end with the rest (possibly none). The ids waiting stay in a small buffer that
    /// the caches keep close, so a caller that writes them straight to their destination
    /// (a Python list's item array) saves a whole intermediate array of ids and the page
    /// faults of its fresh memory. On an error, `drain` may have been given some ids.
    /// `drain` returns whether to stop: if it says so, the encoding ends there with
    /// [`Error::Cancelled`] (a caller that looks for Ctrl-C between batches of ids stops a
    /// long text partway).
    pub fn encode_draining(&self, text: &str, policy: Option<&SpecialPolicy>, every: usize, drain: impl FnMut(&[Rank]) -> bool) -> Result<()> {
        let every = every.max(1);
        let mut spill = Drain { every, drain };
        let mut out = Vec::with_capacity(every + 64);
        let scratch = &mut Scratch::default();
        match policy {
            Some(p) => self.encode_spilling(text, p, &mut out, scratch, &mut spill)?,
            None => self.encode_ordinary_spilling(text, &mut out, scratch, &mut spill)?,
        };
        if (spill.drain)(&out) {
            return Err(Error::Cancelled);
        }
        Ok(())
    }

    pub fn encode(&self, text: &str, policy: &SpecialPolicy) -> Result<Vec<Rank>> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        self.encode_into(text, policy, &mut out, &mut Scratch::default())?;
        Ok(out)
    }

    /// Encodes many texts on up to `threads` cores, keeping their order. With `policy`
    /// `None` special tokens are ordinary text (`encode_ordinary`). A text much longer than
    /// the others would leave every core but one idle, so texts above [`SPLIT_ABOVE`] bytes
    /// are cut into chunks at points where the pre-tokenizer is certain to start a new
    /// piece, the chunks encoded in parallel and their tokens joined, which gives exactly
    /// the tokens of the whole text.
    pub fn encode_batch<S: AsRef<str> + Sync>(&self, texts: &[S], policy: Option<&SpecialPolicy>, threads: usize) -> Result<Vec<Vec<Rank>>> {
        batch::map(texts, threads, |t| {
            let mut out = Vec::with_capacity(t.as_ref().len() / 3 + 1);
            self.encode_in_batch(t.as_ref(), policy, threads, &mut out, &|| Ok(()))?;
            Ok(out)
        })
    }

    /// One text of a batch encoded on `threads` cores (see [`Encoder::encode_batch`]): its
    /// special tokens looked for here (on the worker, not before the batch starts), and a
    /// long text cut into chunks encoded in parallel on more than one thread. Its tokens
    /// are appended to `out`; on an error, `out` may hold some of them. For callers that
    /// hand out a batch's texts themselves.
    ///
    /// `stop` is called now and then while a long text (over [`SPLIT_ABOVE`] bytes) is
    /// encoded, on the thread that encodes it: before each chunk, or, where the text is not
    /// cut (one thread, no place to cut at, special tokens in it, a pattern without a
    /// scanner), each time about [`STOP_EVERY`] ids have been made. An error it returns ends
    /// the encoding there (the Python bindings look for Ctrl-C in it).
    pub fn encode_in_batch(&self, text: &str, policy: Option<&SpecialPolicy>, threads: usize, out: &mut Vec<Rank>, stop: &(dyn Fn() -> Result<()> + Sync)) -> Result<()> {
        if text.len() <= SPLIT_ABOVE {
            return match policy {
                Some(p) => self.encode_into(text, p, out, &mut Scratch::default()).map(|_| ()),
                None => self.encode_ordinary_into(text, out, &mut Scratch::default()).map(|_| ()),
            };
        }
        // (special tokens that cannot occur, or none found: the text is ordinary text)
        let ordinary = policy.is_none_or(|p| p.extra_disallowed.is_empty() && !self.specials.disallows_empty(p) && self.specials.find(text, p).is_empty());
        if threads > 1 && ordinary && matches!(self.splitter, Splitter::Scan(_)) {
            let cuts = cut_points(text, CHUNK);
            if !cuts.is_empty() {
                let mut chunks = Vec::with_capacity(cuts.len() + 1);
                let mut start = 0;
                for cut in cuts {
                    chunks.push(&text[start..cut]);
                    start = cut;
                }
                chunks.push(&text[start..]);
                let parts = batch::map(&chunks, threads, |c| {
                    stop()?;
                    self.encode_ordinary(c)
                })?;
                for part in parts {
                    out.extend_from_slice(&part);
                }
                return Ok(());
            }
        }
        // On this thread, `stop` asked each time STOP_EVERY more ids are in `out`.
        let mut spill = Checkpoints { every: STOP_EVERY, next: out.len() + STOP_EVERY, stop, stopped: None };
        let scratch = &mut Scratch::default();
        let encoded = match policy.filter(|_| !ordinary) {
            Some(p) => self.encode_spilling(text, p, out, scratch, &mut spill),
            None => self.encode_ordinary_spilling(text, out, scratch, &mut spill),
        };
        match (encoded, spill.stopped) {
            (Err(Error::Cancelled), Some(e)) => Err(e),
            (encoded, _) => encoded.map(|_| ()),
        }
    }

    /// Tokens of one piece without regex splitting (tiktoken's `encode_single_piece`).
    pub fn encode_single_piece(&self, piece: &[u8]) -> Result<Vec<Rank>> {
        if let Some(id) = self.vocab.rank(piece) {
            return Ok(vec![id]);
        }
        self.merge(piece)
    }

    /// Byte-pair merge of a piece, without the whole-piece lookup.
    fn merge(&self, piece: &[u8]) -> Result<Vec<Rank>> {
        let mut out = Vec::new();
        bpe::merge_piece(&self.vocab, piece, &mut out, &mut Scratch::default(), None)?;
        Ok(out)
    }

    /// How many trailing tokens may change if more text were appended: the last piece's
    /// tokens, extended backwards over whitespace-only tokens, since a regex split between
    /// whitespace runs can disappear when text is added. Only mergeable tokens count as
    /// whitespace: a special token (even one whose text is spaces) stays, as in tiktoken.
    fn unstable_len(&self, tokens: &[Rank], mut last: usize) -> usize {
        let all_space = |t: Rank| {
            self.vocab
                .mergeable_bytes(t)
                .is_some_and(|b| b.iter().all(|c| matches!(c, b' ' | b'\n' | b'\t')))
        };
        if last > 0 && all_space(tokens[tokens.len() - last]) {
            while last < tokens.len() && all_space(tokens[tokens.len() - last - 1]) {
                last += 1;
            }
        }
        last
    }

    /// Stable tokens plus every token sequence the unstable tail could become once more
    /// text is appended (tiktoken's `encode_with_unstable`). Completions are sorted.
    pub fn encode_with_unstable(&self, text: &str, policy: &SpecialPolicy) -> Result<(Vec<Rank>, Vec<Vec<Rank>>)> {
        let mut tokens = Vec::new();
        let last = self.encode_into(text, policy, &mut tokens, &mut Scratch::default())?;
        if last == 0 {
            return Ok((tokens, Vec::new()));
        }
        let last = self.unstable_len(&tokens, last);
        let unstable = self.vocab.decode(&tokens[tokens.len() - last..])?;
        tokens.truncate(tokens.len() - last);
        let mut completions: FxHashSet<Vec<Rank>> = FxHashSet::default();
        if unstable.is_empty() {
            return Ok((tokens, Vec::new()));
        }
        let sorted = self.vocab.sorted_tokens();

        // Single tokens that extend the unstable bytes.
        let mut i = sorted.partition_point(|t| t.as_slice() < unstable.as_slice());
        while i < sorted.len() && sorted[i].starts_with(&unstable) {
            completions.insert(vec![self.vocab.rank(&sorted[i]).expect("a sorted token has a rank")]);
            i += 1;
        }
        // A token straddling each inner split point: re-encode prefix + token.
        for split in 1..unstable.len() {
            let (prefix, suffix) = unstable.split_at(split);
            let mut i = sorted.partition_point(|t| t.as_slice() < suffix);
            while i < sorted.len() && sorted[i].starts_with(suffix) {
                let candidate = [prefix, sorted[i].as_slice()].concat();
                let encoded = match std::str::from_utf8(&candidate) {
                    Ok(s) => self.encode_ordinary(s)?,
                    Err(_) => self.merge(&candidate)?,
                };
                let mut seq = Vec::new();
                let mut covered = 0;
                for t in encoded {
                    seq.push(t);
                    covered += self.vocab.token_bytes(t).map_or(0, <[u8]>::len);
                    if covered >= unstable.len() {
                        break;
                    }
                }
                completions.insert(seq);
                i += 1;
            }
        }
        // A trailing whitespace character may split off once text follows it.
        if unstable.len() > 1 {
            if let Some((ch, width)) = last_char(&unstable) {
                if width < unstable.len() && ch.is_whitespace() {
                    let cut = unstable.len() - width;
                    let mut seq = self.merge(&unstable[..cut])?;
                    seq.extend(self.merge(&unstable[cut..])?);
                    completions.insert(seq);
                }
            }
        }
        let mut completions: Vec<Vec<Rank>> = completions.into_iter().collect();
        completions.sort_unstable();
        Ok((tokens, completions))
    }

    /// Encodes raw bytes (tiktoken's `_encode_bytes`): valid UTF-8 is encoded normally; an
    /// invalid tail is merged together with the unstable end of the valid part.
    pub fn encode_bytes(&self, bytes: &[u8]) -> Result<Vec<Rank>> {
        let valid = match std::str::from_utf8(bytes) {
            Ok(text) => return self.encode_ordinary(text),
            Err(e) => e.valid_up_to(),
        };
        // SAFETY-free: `valid` is a UTF-8 boundary reported by from_utf8.
        let text = std::str::from_utf8(&bytes[..valid]).expect("valid prefix");
        let mut tokens = Vec::new();
        let last = self.encode_ordinary_into(text, &mut tokens, &mut Scratch::default())?;
        let last = self.unstable_len(&tokens, last);
        let mut tail = Vec::new();
        if !tokens.is_empty() && last > 0 {
            tail = self.vocab.decode(&tokens[tokens.len() - last..])?;
            tokens.truncate(tokens.len() - last);
        }
        tail.extend_from_slice(&bytes[valid..]);
        if !tail.is_empty() {
            match self.vocab.rank(&tail) {
                Some(id) => tokens.push(id),
                None => tokens.extend(self.merge(&tail)?),
            }
        }
        Ok(tokens)
    }

    pub fn decode_bytes(&self, tokens: &[Rank]) -> Result<Vec<u8>> {
        self.vocab.decode(tokens)
    }

    pub fn single_token_bytes(&self, id: Rank) -> Result<&[u8]> {
        self.vocab.token_bytes(id).ok_or(Error::UnknownTokenId(id))
    }
}

/// What the encoding loop does with its output between pieces (after each piece, or in
/// the chunked loop after each chunk of pieces and each miss): [`Keep`] leaves it all
/// in `out` (and compiles to nothing); [`Drain`] hands it on once enough has gathered;
/// [`Checkpoints`] leaves it in `out` and asks whether to stop now and then.
trait Spill {
    /// Whether the encoding is to stop here (with [`Error::Cancelled`]).
    fn after_piece(&mut self, out: &mut Vec<Rank>) -> bool;
}

/// Keeps every id in `out`.
struct Keep;

impl Spill for Keep {
    #[inline(always)]
    fn after_piece(&mut self, _out: &mut Vec<Rank>) -> bool {
        false
    }
}

/// Hands `out`'s ids to `drain` and empties it once it holds `every` or more; `drain`
/// returns whether the encoding is to stop there.
struct Drain<F> {
    every: usize,
    drain: F,
}

impl<F: FnMut(&[Rank]) -> bool> Spill for Drain<F> {
    #[inline(always)]
    fn after_piece(&mut self, out: &mut Vec<Rank>) -> bool {
        if out.len() >= self.every {
            let stop = (self.drain)(out);
            out.clear();
            return stop;
        }
        false
    }
}

/// Keeps every id in `out`, and asks `stop` each time `every` more have been added: an
/// error it returns (kept in `stopped`) ends the encoding.
struct Checkpoints<'a> {
    every: usize,
    next: usize,
    stop: &'a (dyn Fn() -> Result<()> + Sync),
    stopped: Option<Error>,
}

impl Spill for Checkpoints<'_> {
    #[inline(always)]
    fn after_piece(&mut self, out: &mut Vec<Rank>) -> bool {
        if out.len() >= self.next {
            self.next = out.len() + self.every;
            if let Err(e) = (self.stop)() {
                self.stopped = Some(e);
                return true;
            }
        }
        false
    }
}

/// Texts longer than this are cut into chunks of about `CHUNK` bytes for batch encoding.
pub const SPLIT_ABOVE: usize = 1 << 19;
const CHUNK: usize = 1 << 18;
/// How many ids a long text of a batch that is not cut makes between two calls of its
/// `stop` (see [`Encoder::encode_in_batch`]).
pub const STOP_EVERY: usize = 1 << 12;

/// Byte offsets, about `chunk` apart, just after a `\n` that has a non-space character on
/// both sides, the one after not a `/`. Every standard pattern ends a piece there and
/// starts a new one whatever comes before or after, so encoding the parts separately gives
/// the tokens of the whole: no piece begins with a newline, a whitespace piece ends where
/// the non-space begins, and the one kind of piece that runs on past a newline is a run of
/// punctuation with what may follow it, newlines in every pattern and also slashes in
/// o200k's (`[^\s\p{L}\p{N}]+[\r\n/]*`: `.\n/` is one piece there, so a cut between `\n`
/// and `/` gave other ids).
fn cut_points(text: &str, chunk: usize) -> Vec<usize> {
    let b = text.as_bytes();
    let mut cuts = Vec::new();
    let mut target = chunk;
    while target < b.len() {
        let mut found = None;
        let mut p = target;
        while let Some(off) = b[p..(target + chunk).min(b.len())].iter().position(|&x| x == b'\n') {
            let nl = p + off;
            let before = text[..nl].chars().next_back();
            let after = text[nl + 1..].chars().next();
            if matches!((before, after), (Some(x), Some(y)) if !x.is_whitespace() && !y.is_whitespace() && y != '/') {
                found = Some(nl + 1);
                break;
            }
            p = nl + 1;
        }
        match found {
            Some(c) => {
                cuts.push(c);
                target = c + chunk;
            }
            None => target += chunk,
        }
    }
    cuts
}

/// The last UTF-8 character of `bytes` and its width, if the tail is valid UTF-8.
fn last_char(bytes: &[u8]) -> Option<(char, usize)> {
    let start = bytes.len().saturating_sub(4);
    (start..bytes.len()).find_map(|i| {
        std::str::from_utf8(&bytes[i..]).ok().and_then(|s| {
            let mut chars = s.chars();
            let c = chars.next()?;
            chars.next().is_none().then_some((c, bytes.len() - i))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::special::SpecialSet;
    use rustc_hash::FxHashMap;

    fn byte_vocab() -> FxHashMap<Vec<u8>, Rank> {
        let mut ranks = FxHashMap::default();
        for b in 0..=255u8 {
            ranks.insert(vec![b], b as Rank);
        }
        ranks.insert(b"he".to_vec(), 256);
        ranks.insert(b"ll".to_vec(), 257);
        ranks.insert(b"hell".to_vec(), 258);
        ranks.insert(b"hello".to_vec(), 259);
        ranks.insert(b" w".to_vec(), 260);
        ranks
    }

    fn enc() -> Encoder {
        let special = vec![("<|end|>".to_string(), 1000), ("<|pad|>".to_string(), 1001)];
        Encoder::new(byte_vocab(), special, r"\S+|\s+").unwrap()
    }

    #[test]
    fn ordinary_and_special_encoding() {
        let e = enc();
        assert_eq!(e.encode_ordinary("hello").unwrap(), vec![259]);
        let t = "hello<|end|> w";
        let ord = e.encode_ordinary(t).unwrap();
        assert_eq!(e.decode_bytes(&ord).unwrap(), t.as_bytes());
        assert_eq!(e.encode(t, &SpecialPolicy::strict()), Err(Error::DisallowedSpecial("<|end|>".into())));
        let all = e.encode(t, &SpecialPolicy::allow_all()).unwrap();
        assert_eq!(all[0], 259);
        assert_eq!(all[1], 1000);
        let only_pad = SpecialPolicy { allowed: SpecialSet::Ids([1001].into_iter().collect()), disallowed: SpecialSet::Nothing, extra_disallowed: vec![] };
        assert_eq!(e.encode(t, &only_pad).unwrap(), ord);
    }

    #[test]
    fn batch_cutting_long_texts_gives_the_tokens_of_the_whole() {
        let mut ranks = byte_vocab();
        ranks.insert(b"\n\n".to_vec(), 261);
        ranks.insert(b"  ".to_vec(), 262);
        // (a token that only a piece running past a newline can hold)
        ranks.insert(b"\n/".to_vec(), 263);
        let patterns: Vec<&str> = crate::scanner::Scanner::known_patterns().collect();
        let unit = "hello world\nx\n\n  y!!\nz 12345\n \n\u{a0}\nw\r\nq.\n/x\n";
        let long: String = unit.repeat(SPLIT_ABOVE / unit.len() * 3);
        for p in patterns {
            let e = Encoder::new(ranks.clone(), vec![], p).unwrap();
            let whole = e.encode_ordinary(&long).unwrap();
            assert!(cut_points(&long, CHUNK).len() > 2);
            for threads in [1, 4] {
                let cut = e.encode_batch(&[long.as_str(), "hello"], None, threads).unwrap();
                assert_eq!(cut[0], whole, "pattern {p}, {threads} threads");
                assert_eq!(cut[1], e.encode_ordinary("hello").unwrap());
                // `stop` is asked before each chunk; its error ends the text there.
                let asked = std::sync::atomic::AtomicUsize::new(0);
                let stop_third = || {
                    let k = asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if k == 2 { Err(Error::Cancelled) } else { Ok(()) }
                };
                let mut out = Vec::new();
                assert_eq!(e.encode_in_batch(&long, None, threads, &mut out, &stop_third), Err(Error::Cancelled));
                if threads == 1 {
                    // (not cut on one thread: asked after each STOP_EVERY ids)
                    assert_eq!(asked.into_inner(), 3, "pattern {p}");
                    assert!(out.len() >= 2 * STOP_EVERY && out.len() < whole.len() / 2 && whole.starts_with(&out));
                }
            }
        }
    }

    #[test]
    fn long_texts_of_a_batch_that_are_not_cut_still_ask_stop() {
        // No line break to cut at, or a special token in the text: encoded whole on this
        // thread, `stop` asked every STOP_EVERY ids, with the ids of the whole when it
        // never says stop.
        let cl100k_like = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
        let e = Encoder::new(byte_vocab(), vec![("<|end|>".to_string(), 1000)], cl100k_like).unwrap();
        let one_line: String = "hello world 12345 w\u{e9}rld!! ".repeat(SPLIT_ABOVE / 20);
        let with_special = format!("{}<|end|>\n{}", one_line, "x\ny\n".repeat(SPLIT_ABOVE / 4));
        let all = SpecialPolicy::allow_all();
        for (text, policy) in [(&one_line, None), (&with_special, Some(&all))] {
            let whole = match policy {
                Some(p) => e.encode(text, p).unwrap(),
                None => e.encode_ordinary(text).unwrap(),
            };
            for threads in [1, 4] {
                let asked = std::sync::atomic::AtomicUsize::new(0);
                let count = || {
                    asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Ok(())
                };
                let mut out = Vec::new();
                e.encode_in_batch(text, policy, threads, &mut out, &count).unwrap();
                assert_eq!(out, whole, "{threads} threads, specials {}", policy.is_some());
                assert!(asked.into_inner() >= whole.len() / STOP_EVERY);
                let stop_at_once = || Err(Error::Cancelled);
                let mut out = Vec::new();
                assert_eq!(e.encode_in_batch(text, policy, threads, &mut out, &stop_at_once), Err(Error::Cancelled));
                assert!(out.len() < whole.len() / 2);
            }
        }
    }

    /// Every place `cut_points` may cut is a place where each standard pattern, run by
    /// the regex engine tiktoken uses, ends a piece and starts the next as it would at the
    /// start of a text: the pieces of the whole are those of the two parts. Checked on
    /// random short texts over the characters that decide it, every place that qualifies
    /// (chunks of one byte).
    #[test]
    fn cut_points_split_every_standard_pattern_where_it_splits_anyway() {
        let alphabet = ["a", "B", "1", ".", "/", "\n", "\n", "\r", " ", "'", "s", "é", "\u{a0}", "!", "}", "\t"];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let texts: Vec<String> = (0..20_000).map(|_| (0..1 + next(12)).map(|_| alphabet[next(alphabet.len())]).collect()).collect();
        let mut cuts_checked = 0;
        for pattern in crate::scanner::Scanner::known_patterns() {
            let re = fancy_regex::Regex::new(pattern).unwrap();
            let pieces = |t: &str| -> Vec<String> { re.find_iter(t).map(|m| m.unwrap().as_str().to_string()).collect() };
            for text in &texts {
                for c in cut_points(text, 1) {
                    let mut parts = pieces(&text[..c]);
                    parts.extend(pieces(&text[c..]));
                    assert_eq!(parts, pieces(text), "pattern {pattern:?}, text {text:?} cut at {c}");
                    cuts_checked += 1;
                }
            }
        }
        assert!(cuts_checked > 10_000, "{cuts_checked}");
    }

    #[test]
    fn draining_hands_over_the_ids_of_a_whole_encoding_in_order() {
        let cl100k_like = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
        let special = vec![("<|end|>".to_string(), 1000), ("<|pad|>".to_string(), 1001)];
        let scanned = Encoder::new(byte_vocab(), special.clone(), cl100k_like).unwrap();
        assert!(matches!(scanned.splitter(), Splitter::Scan(_)));
        let text = "hello world<|end|> hello<|pad|>\n\n 12345 héllo wörld!! ".repeat(40);
        let allow_all = SpecialPolicy::allow_all();
        for e in [enc(), scanned] {
            for every in [0, 1, 3, 64, 4096] {
                for policy in [None, Some(&allow_all)] {
                    let mut got = Vec::new();
                    let mut sizes = Vec::new();
                    e.encode_draining(&text, policy, every, |ids| {
                        sizes.push(ids.len());
                        got.extend_from_slice(ids);
                        false
                    })
                    .unwrap();
                    let want = match policy {
                        Some(p) => e.encode(&text, p).unwrap(),
                        None => e.encode_ordinary(&text).unwrap(),
                    };
                    assert_eq!(got, want, "every {every}, specials {}", policy.is_some());
                    // Handed over whenever `every` had gathered (the last call takes the rest).
                    let (last, full) = sizes.split_last().unwrap();
                    assert!(full.iter().all(|&n| n >= every.max(1)), "{sizes:?}");
                    assert!(*last < every.max(1) + 8, "{sizes:?}");
                }
            }
            let mut got = Vec::new();
            let err = e.encode_draining("hello<|end|>", Some(&SpecialPolicy::strict()), 1, |ids| {
                got.extend_from_slice(ids);
                false
            });
            assert_eq!(err, Err(Error::DisallowedSpecial("<|end|>".into())));
            // `drain` saying stop ends the encoding there: no more ids are handed over
            // after it, with or without special tokens.
            for policy in [None, Some(&allow_all)] {
                for stop_at in [1, 2, 5] {
                    let mut calls = 0;
                    let mut handed = 0;
                    let err = e.encode_draining(&text, policy, 16, |ids| {
                        calls += 1;
                        handed += ids.len();
                        calls == stop_at
                    });
                    assert_eq!(err, Err(Error::Cancelled), "stop at {stop_at}");
                    assert_eq!(calls, stop_at);
                    assert!(handed < e.encode_ordinary(&text).unwrap().len() / 2, "{handed}");
                }
            }
        }
    }

    #[test]
    fn cached_and_fresh_pieces_in_one_text_give_each_piece_its_own_tokens() {
        // Repeated words (answered by the first level once seen), new words (merged), words
        // of more than three tokens (the wide table), of more than eleven (the second
        // level, after the wide table's mark) and of more than 15 bytes (the second level),
        // in long texts that go through the encoder's chunks of pieces: the ids must be
        // those of each piece encoded on its own, with every drain size.
        let cl100k_like = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
        let mut ranks = byte_vocab();
        for (k, t) in [" hello", " world", "wor", "ld", " he", "llo", " the", "ing", " st"].iter().enumerate() {
            ranks.insert(t.as_bytes().to_vec(), 300 + k as Rank);
        }
        let e = Encoder::new(ranks, vec![], cl100k_like).unwrap();
        assert!(matches!(e.splitter(), Splitter::Scan(_)));
        let mut text = String::new();
        for n in 0..3000u32 {
            let fresh: String = format!("{n:05}").bytes().map(|d| (b'a' + d - b'0') as char).collect();
            text.push_str(match n % 6 {
                0 => " hello world",
                1 => " the string",
                2 => " hellohellohellohello",
                3 => " st",
                4 => " zqxjkvbpygfwm",
                _ => "!! 123",
            });
            text.push(' ');
            text.push_str(&fresh);
            if n % 97 == 0 {
                // A run of pieces of three tokens each: chunks of hits that fill the
                // room reserved for them.
                text.push_str(&"!xy".repeat(3 * SCAN_CHUNK));
                text.push_str(" w\u{e9}rld\n\n");
            }
        }
        let mut want = Vec::new();
        e.splitter()
            .for_each_piece(&text, |p| {
                want.extend(e.encode_single_piece(p.as_bytes())?);
                Ok(())
            })
            .unwrap();
        for round in 0..2 {
            assert_eq!(e.encode_ordinary(&text).unwrap(), want, "round {round}");
            for every in [1, 7, 4096] {
                let mut got = Vec::new();
                e.encode_draining(&text, None, every, |ids| {
                    got.extend_from_slice(ids);
                    false
                })
                .unwrap();
                assert_eq!(got, want, "round {round}, every {every}");
            }
        }
    }

    #[test]
    fn bytes_roundtrip_and_invalid_tail() {
        let e = enc();
        let mut b = "hello wörld".as_bytes().to_vec();
        b.push(0xC3);
        let toks = e.encode_bytes(&b).unwrap();
        assert_eq!(e.decode_bytes(&toks).unwrap(), b);
    }

    #[test]
    fn unstable_completions_extend_the_text() {
        let e = enc();
        let (stable, completions) = e.encode_with_unstable("say hel", &SpecialPolicy::ordinary()).unwrap();
        let prefix = e.decode_bytes(&stable).unwrap();
        assert!(b"say hel".starts_with(&prefix));
        assert!(!completions.is_empty());
        for c in completions {
            let mut all = stable.clone();
            all.extend(c);
            assert!(e.decode_bytes(&all).unwrap().starts_with(b"say hel"));
        }
    }
}
