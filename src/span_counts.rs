//! Span counting for training: split documents with the pre-tokenizer and count how often
//! each distinct span occurs. Documents are processed in parallel, a batch at a time; memory
//! grows with the number of distinct spans, not with the number of documents.

use std::sync::Mutex;

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::batch;
use crate::error::Result;
use crate::prefetch::prefetch;
use crate::pretokenize::Splitter;
use crate::vocab::{inline_key, window_key, INLINE_MAX};

/// Counts of spans of at most [`INLINE_MAX`] bytes (most of them), each held in its key:
/// its bytes first, its length in the last byte (the layout of [`inline_key`]). Hashing a
/// key is a multiply and comparing it two integer compares, where a string key costs a
/// call to `memcmp` per comparison and an allocation per distinct span.
///
/// Open addressing with linear probing, at most three quarters full: a key's first slot
/// follows from its hash alone, so the counting loop asks for it some spans before it
/// counts them ([`ShortCounts::prefetch`]), and the misses of a table larger than the
/// processor's caches overlap instead of following one another.
#[derive(Default)]
struct ShortCounts {
    /// A power of two of them (or none); a key of zeros marks an empty slot.
    slots: Vec<Slot>,
    len: usize,
    /// The empty span's count (its key is all zeros).
    empty: u64,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    key: [u8; 16],
    count: u64,
}

impl ShortCounts {
    const MIN_SLOTS: usize = 1 << 10;

    /// The first slot to probe for `key` (Fibonacci hashing of the key's two halves).
    #[inline(always)]
    fn home(&self, key: u128) -> usize {
        let h = ((key as u64) ^ ((key >> 64) as u64).rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> (64 - self.slots.len().trailing_zeros())) as usize
    }

    /// Asks for the line of `key`'s first slot.
    #[inline(always)]
    fn prefetch(&self, key: u128) {
        if !self.slots.is_empty() {
            prefetch(&self.slots[self.home(key)]);
        }
    }

    #[inline(always)]
    fn add(&mut self, key: u128, count: u64) {
        if key == 0 {
            self.empty += count;
            return;
        }
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let slot = &mut self.slots[i];
            let k = u128::from_le_bytes(slot.key);
            if k == key {
                slot.count += count;
                return;
            }
            if k == 0 {
                *slot = Slot { key: key.to_le_bytes(), count };
                self.len += 1;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    #[cold]
    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(Self::MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); size]);
        self.len = 0;
        for slot in filled(&old) {
            self.add(u128::from_le_bytes(slot.key), slot.count);
        }
    }

    /// Adds every count of `other`: the smaller table's entries go into the larger one.
    fn absorb(&mut self, mut other: ShortCounts) {
        if other.len > self.len {
            std::mem::swap(self, &mut other);
        }
        self.empty += other.empty;
        for slot in filled(&other.slots) {
            self.add(u128::from_le_bytes(slot.key), slot.count);
        }
    }

    fn len(&self) -> usize {
        self.len + (self.empty > 0) as usize
    }

    /// Every span's bytes and count, in no particular order.
    fn iter(&self) -> impl Iterator<Item = (&[u8], u64)> + '_ {
        let empty = (self.empty > 0).then_some((&[][..], self.empty));
        let full = filled(&self.slots).map(|s| (&s.key[..s.key[15] as usize], s.count));
        empty.into_iter().chain(full)
    }
}

/// The slots that hold a span.
fn filled(slots: &[Slot]) -> impl Iterator<Item = &Slot> {
    slots.iter().filter(|s| s.key != [0; 16])
}

fn add_long(long: &mut FxHashMap<Box<str>, u64>, span: &str, count: u64) {
    match long.get_mut(span) {
        Some(v) => *v += count,
        None => {
            long.insert(span.into(), count);
        }
    }
}

/// How many spans ahead the counting loop asks for a short span's slot.
const COUNT_AHEAD: usize = 16;

/// Counts of distinct spans over every document added so far.
pub struct SpanCounts {
    splitter: Splitter,
    /// Spans of at most [`INLINE_MAX`] bytes.
    short: ShortCounts,
    /// The longer ones.
    long: FxHashMap<Box<str>, u64>,
    documents: u64,
    bytes: u64,
    spans: u64,
}

/// One worker's counts of a slice of documents, the long spans borrowed from them.
#[derive(Default)]
struct LocalCounts<'a> {
    short: ShortCounts,
    long: FxHashMap<&'a str, u64>,
    spans: u64,
}

impl<'a> LocalCounts<'a> {
    /// Splits one document and counts its spans. With a hand-written scanner, each short
    /// span's slot is asked for [`COUNT_AHEAD`] spans before the span is counted.
    fn count(&mut self, splitter: &Splitter, text: &'a str) -> Result<()> {
        let Splitter::Scan(scanner) = splitter else {
            return splitter.for_each_piece(text, |piece| {
                self.add(piece);
                Ok(())
            });
        };
        let b = text.as_bytes();
        let mut ring = [0u128; COUNT_AHEAD];
        let mut queued = 0usize;
        for (start, end) in scanner.spans(text) {
            let n = end - start;
            if n > INLINE_MAX {
                *self.long.entry(&text[start..end]).or_insert(0) += 1;
                self.spans += 1;
                continue;
            }
            // (One load and a mask where the text goes on for 16 bytes.)
            let key = match b.get(start..start + 16) {
                Some(window) => window_key(window.try_into().unwrap(), n),
                None => inline_key(&b[start..end]),
            };
            self.short.prefetch(key);
            let place = &mut ring[queued % COUNT_AHEAD];
            if queued >= COUNT_AHEAD {
                self.short.add(*place, 1);
            }
            *place = key;
            queued += 1;
        }
        for k in queued.saturating_sub(COUNT_AHEAD)..queued {
            self.short.add(ring[k % COUNT_AHEAD], 1);
        }
        self.spans += queued as u64;
        Ok(())
    }

    fn add(&mut self, piece: &'a str) {
        if piece.len() <= INLINE_MAX {
            self.short.add(inline_key(piece.as_bytes()), 1);
        } else {
            *self.long.entry(piece).or_insert(0) += 1;
        }
        self.spans += 1;
    }
}

impl SpanCounts {
    pub fn new(pattern: &str) -> Result<Self> {
        Ok(Self {
            splitter: Splitter::new(pattern)?,
            short: ShortCounts::default(),
            long: FxHashMap::default(),
            documents: 0,
            bytes: 0,
            spans: 0,
        })
    }

    pub fn splitter(&self) -> &Splitter {
        &self.splitter
    }

    /// Splits and counts a batch of documents on up to `threads` cores. Each worker counts
    /// a slice of the batch into local tables (short spans by their key, long ones
    /// borrowed) and folds them into the global ones (under a lock) as soon as it is done
    /// (the smaller short-span table into the larger), so that at most one local table per
    /// worker is alive beside the global one; the global table allocates only for spans it
    /// has not seen. (Keeping every slice's table until all were counted, as before, took
    /// 151 MiB at the peak of training on 100 MB of code and docs, vocabulary 32768; this
    /// takes 141-144, and counting is 1.1x faster since folding overlaps counting.)
    pub fn add<S: AsRef<str> + Sync>(&mut self, docs: &[S], threads: usize) -> Result<()> {
        if docs.is_empty() {
            return Ok(());
        }
        let workers = threads.clamp(1, batch::available_cores());
        // Several slices per worker, cut by bytes (documents kept whole), and the largest
        // counted first, so that uneven documents still balance: cut by document count,
        // the training benchmark's 100 MB made slices of 6 to 32 MB, and the largest came
        // last, with the other workers idle while it was counted.
        let total: usize = docs.iter().map(|d| d.as_ref().len()).sum();
        let target = total.div_ceil(workers * 4).max(1);
        let mut slices: Vec<(usize, &[S])> = Vec::new();
        let (mut start, mut size) = (0, 0);
        for (k, d) in docs.iter().enumerate() {
            size += d.as_ref().len();
            if size >= target || k + 1 == docs.len() {
                slices.push((size, &docs[start..=k]));
                (start, size) = (k + 1, 0);
            }
        }
        slices.sort_by_key(|&(size, _)| std::cmp::Reverse(size));
        let splitter = &self.splitter;
        let global = Mutex::new((&mut self.short, &mut self.long, &mut self.spans));
        let count_slice = |slice: &[S]| -> Result<()> {
            let mut local = LocalCounts::default();
            for d in slice {
                local.count(splitter, d.as_ref())?;
            }
            let mut guard = global.lock().unwrap_or_else(|e| e.into_inner());
            let (short, long, spans) = &mut *guard;
            **spans += local.spans;
            short.absorb(local.short);
            long.reserve(local.long.len() / 4);
            for (span, c) in local.long {
                add_long(long, span, c);
            }
            Ok(())
        };
        batch::map(&slices, workers, |&(_, s)| count_slice(s))?;
        self.documents += docs.len() as u64;
        self.bytes += total as u64;
        Ok(())
    }

    /// Adds an already-counted span (e.g. from a word-frequency table).
    pub fn add_span(&mut self, span: &str, count: u64) {
        if count == 0 {
            return;
        }
        if span.len() <= INLINE_MAX {
            self.short.add(inline_key(span.as_bytes()), count);
        } else {
            add_long(&mut self.long, span, count);
        }
        self.spans += count;
    }

    pub fn distinct(&self) -> usize {
        self.short.len() + self.long.len()
    }

    pub fn documents(&self) -> u64 {
        self.documents
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn total_spans(&self) -> u64 {
        self.spans
    }

    /// The distinct spans as byte strings with their counts, sorted by bytes so that what
    /// follows does not depend on hash order. Sorted on this crate's pools, never rayon's
    /// global one, whose threads a forked child does not have (a sort there never ended).
    ///
    /// Each span is sorted by its first 16 bytes as one integer (big-endian, zero-padded),
    /// and only spans whose integers are equal are compared byte by byte: the same order,
    /// without a call to `memcmp` for most comparisons.
    pub fn sorted(&self) -> Result<(Vec<&[u8]>, Vec<u64>)> {
        let short = self.short.iter();
        let mut v: Vec<(u128, &[u8], u64)> =
            short.chain(self.long.iter().map(|(k, &c)| (k.as_bytes(), c))).map(|(s, c)| (sort_prefix(s), s, c)).collect();
        batch::pool(batch::available_cores())?.install(|| v.par_sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1))));
        Ok(v.into_iter().map(|(_, s, c)| (s, c)).unzip())
    }
}

/// The first 16 bytes of `span` as a big-endian integer, zero-padded: spans that differ
/// within their first 16 bytes compare as their integers do (a shorter span's padding
/// sorts before any byte but 0, and equal integers are compared in full).
fn sort_prefix(span: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = span.len().min(16);
    b[..n].copy_from_slice(&span[..n]);
    u128::from_be_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scanner::Scanner;

    #[test]
    fn counts_do_not_depend_on_threads_or_batches() {
        let docs: Vec<String> = (0..500).map(|i| format!("doc {i} says hello  world {}\n", i % 7)).collect();
        let mut a = SpanCounts::new(r"\S+|\s+").unwrap();
        a.add(&docs, 1).unwrap();
        let mut b = SpanCounts::new(r"\S+|\s+").unwrap();
        for chunk in docs.chunks(33) {
            b.add(chunk, 8).unwrap();
        }
        assert_eq!(a.sorted().unwrap(), b.sorted().unwrap());
        assert_eq!(a.documents(), 500);
        assert_eq!(a.total_spans(), b.total_spans());
        let (spans, counts) = a.sorted().unwrap();
        let i = spans.iter().position(|s| *s == b"hello").unwrap();
        assert_eq!(counts[i], 500);
    }

    #[test]
    fn every_standard_pattern_counts_what_its_splitter_finds() {
        // Enough distinct spans that the tables grow while spans are queued for them; spans
        // near a document's end (no 16-byte window), longer than 15 bytes, and empty
        // documents; counted on one and on three threads, in one batch and in several.
        let mut s = 0x2545f4914f6cdd1du64;
        let mut next = |n: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s % n
        };
        let words = ["the", " The", "don't", " 42", "12345", "  ", "\n\n", " é", "日本", "ünï", "!?", "x"];
        let docs: Vec<String> = (0..400)
            .map(|_| {
                let mut d = String::new();
                for _ in 0..next(60) {
                    match next(4) {
                        0 => d.push_str(&format!(" w{}", next(5000))),
                        1 => d.push_str(&"long".repeat(1 + next(8) as usize)),
                        _ => d.push_str(words[next(words.len() as u64) as usize]),
                    }
                }
                d
            })
            .collect();
        for pattern in Scanner::known_patterns() {
            let splitter = Splitter::new(pattern).unwrap();
            assert!(matches!(splitter, Splitter::Scan(_)), "{pattern}");
            let mut expected: FxHashMap<&str, u64> = FxHashMap::default();
            for d in &docs {
                splitter.for_each_piece(d, |piece| {
                    *expected.entry(piece).or_default() += 1;
                    Ok(())
                }).unwrap();
            }
            let mut expected: Vec<(&[u8], u64)> = expected.into_iter().map(|(k, c)| (k.as_bytes(), c)).collect();
            expected.sort();
            let total: u64 = expected.iter().map(|e| e.1).sum();
            for (threads, batch) in [(1, 400), (3, 400), (2, 37)] {
                let mut counts = SpanCounts::new(pattern).unwrap();
                for chunk in docs.chunks(batch) {
                    counts.add(chunk, threads).unwrap();
                }
                let (spans, n) = counts.sorted().unwrap();
                assert_eq!(spans.into_iter().zip(n).collect::<Vec<_>>(), expected, "{pattern} threads={threads} batch={batch}");
                assert_eq!(counts.total_spans(), total);
                assert_eq!(counts.distinct(), expected.len());
            }
        }
    }

    #[test]
    fn spans_come_sorted_by_their_bytes() {
        // Spans that tie on their first 16 bytes once padded with zeros, or differ only
        // past them, and NUL bytes where the padding goes.
        let mut spans: Vec<String> = ["ab", "ab\0", "ab\0x", "a", "", "b", "\0", "\0\0", "é", "ab\u{1}"].iter().map(|s| s.to_string()).collect();
        for stem in ["0123456789abcdef", "0123456789abcde", "0123456789abcd\0"] {
            for tail in ["", "\0", "a", "\0a", "zz", "é"] {
                spans.push(format!("{stem}{tail}"));
            }
        }
        let mut counts = SpanCounts::new(r"\S+|\s+").unwrap();
        for (i, span) in spans.iter().enumerate() {
            counts.add_span(span, 1 + i as u64);
        }
        let (sorted, n) = counts.sorted().unwrap();
        let mut expected: Vec<(&[u8], u64)> = spans.iter().enumerate().map(|(i, s)| (s.as_bytes(), 1 + i as u64)).collect();
        expected.sort();
        assert_eq!(sorted.into_iter().zip(n).collect::<Vec<_>>(), expected);
    }

    #[test]
    fn spans_of_every_length_count_as_the_splitter_finds_them() {
        // Words around the 15-byte line between the two tables, ASCII and not, and
        // whitespace runs of every length.
        let words = ["a", "fourteen_bytes", "fifteen_bytes__", "sixteen_bytes___", "seventeen_bytes__", "é", "ünïcödé", "日本語のテキストです", "x".repeat(40).leak()];
        let mut docs = Vec::new();
        for i in 0..200usize {
            let mut d = String::new();
            for j in 0..(i % 13) {
                d.push_str(words[(i * 7 + j * 3) % words.len()]);
                d.push_str(&" ".repeat(1 + (i + j) % 18));
            }
            docs.push(d);
        }
        let mut counts = SpanCounts::new(r"\S+|\s+").unwrap();
        counts.add(&docs[..120], 2).unwrap();
        counts.add(&docs[120..], 1).unwrap();
        counts.add_span("fifteen_bytes__", 5);
        counts.add_span("sixteen_bytes___", 7);
        counts.add_span("never_in_a_document_at_all", 2);
        let mut want: std::collections::BTreeMap<Vec<u8>, u64> = std::collections::BTreeMap::new();
        for d in &docs {
            for piece in counts.splitter().pieces(d).unwrap() {
                *want.entry(piece.as_bytes().to_vec()).or_insert(0) += 1;
            }
        }
        *want.entry(b"fifteen_bytes__".to_vec()).or_insert(0) += 5;
        *want.entry(b"sixteen_bytes___".to_vec()).or_insert(0) += 7;
        *want.entry(b"never_in_a_document_at_all".to_vec()).or_insert(0) += 2;
        let (spans, n) = counts.sorted().unwrap();
        let got: Vec<(Vec<u8>, u64)> = spans.iter().map(|s| s.to_vec()).zip(n).collect();
        assert_eq!(got, want.into_iter().collect::<Vec<_>>());
        assert_eq!(counts.distinct(), got.len());
        assert!(got.iter().any(|(s, _)| s.len() == 15) && got.iter().any(|(s, _)| s.len() == 16));
    }
}
