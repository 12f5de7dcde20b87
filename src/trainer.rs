//! The BPE merge loop: learns merges from distinct spans and their counts.
//!
//! Every distinct span becomes a sequence of byte ids. We count each adjacent pair
//! (weighted by its span's count) and index, per pair, the spans it occurs in; an octonary
//! heap orders pairs by count. Each step pops the best pair, refreshing it lazily if its
//! count went stale, merges it in every span that holds it, and applies the pair-count
//! changes that merge causes (the pairs with the left and right neighbours are replaced by
//! pairs with the new id), indexing the spans where new pairs appear. A merge found in
//! thousands of spans is split over threads: each merges a share of the spans and sums its
//! pair-count changes, and the sums are applied once all are done.
//!
//! The order is fully determined by the counts: highest count first, and on equal counts
//! the smaller `(left, right)` pair first (as rustbpe breaks ties), so the same spans give
//! the same merges whatever the thread count or the order the spans arrived in.

use std::cmp::Ordering;
use std::sync::Mutex;

use dary_heap::OctonaryHeap;
use rustc_hash::FxHashMap;

use crate::batch::{self, Claims};
use crate::error::{Error, Result};
use crate::huge_pages::{self, HugePageTables};
use crate::prefetch::prefetch;

/// How many spans ahead the merge loop asks for a span's record. (8 and 32 measured the
/// same as 16 within the noise; 8 with one line asked for, about 1.07x slower.)
const PREFETCH_SPANS: usize = 16;

/// How many runs of spans a split merge gives each thread to claim (so that a thread slowed
/// by others on its core does not hold up the rest).
const RUNS_PER_THREAD: usize = 4;

/// A pair of adjacent token ids.
pub type Pair = (u32, u32);

#[inline]
fn key(a: u32, b: u32) -> u64 {
    ((a as u64) << 32) | b as u64
}

#[inline]
fn unkey(k: u64) -> Pair {
    ((k >> 32) as u32, k as u32)
}

/// A heap entry: a pair with the count it had when pushed.
#[derive(PartialEq, Eq)]
struct Candidate {
    count: i64,
    pair: u64,
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        // Max-heap on count; on equal counts the smaller pair is "greater" (pops first).
        self.count.cmp(&other.count).then_with(|| other.pair.cmp(&self.pair))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Per pair: its weighted count, and where the list of the spans it occurs in lies in the
/// shared pool of such lists (`pool[start..start + len]`; a span may be listed that no
/// longer holds the pair, never one twice).
#[derive(Default)]
struct PairStats {
    count: i64,
    start: usize,
    len: u32,
    /// While the first lists are built: one more than the place of the last span counted.
    last: u32,
}

/// Every pair's statistics. It grows to hundreds of thousands of pairs (at 100 MB and
/// vocab 32768, 429k: about 16 MiB), probed at random, so it asks for huge pages.
type PairTable = hashbrown::HashMap<u64, PairStats, rustc_hash::FxBuildHasher, HugePageTables>;

/// Where the merge loop stands, for progress reports.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub done: u32,
    pub total: u32,
    pub pair: Pair,
    pub new_id: u32,
    pub count: i64,
}

/// Words in a span's record before its ids: its length, then its weight's low and high
/// halves.
const HEADER: usize = 3;
/// Records start at a multiple of this many words, and a span's *place* (the number the
/// pair lists hold) is its record's start divided by it: 32-bit places then reach a store
/// of 2^33 words (32 GiB).
const ALIGN: usize = 2;

/// The spans that can hold a pair (two bytes or more, a weight above zero), each stored as
/// one record in one buffer: `[len, weight low, weight high, ids...]`, padded to a multiple
/// of [`ALIGN`] words. Ids shrink in place as merges apply, and `len` with them.
///
/// A span is known by its place, not by an index into tables of starts, lengths and
/// weights: a visit then reads one or two lines instead of four, and the address of a
/// span further down a pair's list is known without a load, so its line can be asked for
/// ahead with nothing to wait for.
struct Spans {
    store: Vec<u32>,
}

impl Spans {
    fn new(spans: &[&[u8]], counts: &[u64]) -> Result<Self> {
        let kept = || spans.iter().zip(counts).filter(|(s, &c)| s.len() >= 2 && c > 0);
        let (words, longest) = kept().fold((0, 0), |(w, l), (s, _)| (w + (HEADER + s.len()).next_multiple_of(ALIGN), l.max(s.len())));
        if longest > u32::MAX as usize {
            return Err(Error::CorpusTooLarge(format!("a span of {longest} bytes, more than the merge loop's 2^32 - 1")));
        }
        if words / ALIGN > u32::MAX as usize {
            return Err(Error::CorpusTooLarge(format!(
                "its distinct spans hold {words} ids and headers, more than the merge loop can index ({})",
                u32::MAX as u64 * ALIGN as u64
            )));
        }
        let mut store = Vec::with_capacity(words);
        huge_pages::advise(&mut store);
        for (s, &c) in kept() {
            let w = c.min(i64::MAX as u64);
            store.extend([s.len() as u32, w as u32, (w >> 32) as u32]);
            store.extend(s.iter().map(|&b| b as u32));
            store.resize(store.len().next_multiple_of(ALIGN), 0);
        }
        Ok(Self { store })
    }

    /// Every span with its place, its weight and its ids, in the order of their places.
    /// Only while no merge has shortened a span (a record's length is then its room).
    fn unmerged(&self) -> impl Iterator<Item = (u32, i64, &[u32])> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            let record = self.store.get(at..)?;
            let len = *record.first()? as usize;
            let place = (at / ALIGN) as u32;
            at += (HEADER + len).next_multiple_of(ALIGN);
            Some((place, weight_of(record), &record[HEADER..HEADER + len]))
        })
    }

    /// Cuts the spans at `places` (increasing) into `parts` runs of about as many spans
    /// each. Records lie in the order of their places, so each run's records lie in a
    /// stretch of the store of their own: each run gets it as a slice that it alone may
    /// change, and the runs can be merged on different threads.
    fn split<'a>(&'a mut self, places: &'a [u32], parts: usize) -> Vec<SpanRun<'a>> {
        debug_assert!(places.windows(2).all(|w| w[0] < w[1]), "a pair's spans are listed in increasing order");
        let mut store: &mut [u32] = &mut self.store;
        let mut base = 0usize;
        let per = places.len().div_ceil(parts.max(1));
        let mut runs = Vec::with_capacity(parts);
        for (k, run) in places.chunks(per).enumerate() {
            // A run owns everything up to the next run's first record.
            let next = places.get((k + 1) * per).map(|&p| p as usize * ALIGN);
            let owned = match next {
                Some(next) => {
                    let (owned, rest) = std::mem::take(&mut store).split_at_mut(next - base);
                    store = rest;
                    owned
                }
                None => std::mem::take(&mut store),
            };
            runs.push(SpanRun { places: run, store: owned, base });
            base = next.unwrap_or(base);
        }
        runs
    }
}

/// The weight in a span's record (which starts at `record[0]`).
#[inline(always)]
fn weight_of(record: &[u32]) -> i64 {
    (record[1] as u64 | (record[2] as u64) << 32) as i64
}

/// Merges every non-overlapping occurrence (left to right) of `(a, b)` in a span's `ids`
/// into `new_id`, reporting each pair-count change as `(pair key, +1 or -1)`, and sets
/// `len` to the span's new length (the ids shrink in place).
#[inline]
fn merge_span(ids: &mut [u32], len: &mut u32, a: u32, b: u32, new_id: u32, mut delta: impl FnMut(u64, i64)) {
    let n = ids.len();
    let (mut r, mut w) = (0usize, 0usize);
    while r < n {
        if r + 1 < n && ids[r] == a && ids[r + 1] == b {
            if w > 0 {
                let x = ids[w - 1];
                delta(key(x, a), -1);
                delta(key(x, new_id), 1);
            }
            delta(key(a, b), -1);
            if r + 2 < n {
                let y = ids[r + 2];
                delta(key(b, y), -1);
                delta(key(new_id, y), 1);
            }
            ids[w] = new_id;
            r += 2;
        } else {
            ids[w] = ids[r];
            r += 1;
        }
        w += 1;
    }
    *len = w as u32;
}

/// Some of a merge's spans, with the stretch of the span store that only their records
/// occupy (see [`Spans::split`]): the record at place `p` starts at `p * ALIGN - base` in
/// `store`.
struct SpanRun<'a> {
    places: &'a [u32],
    store: &'a mut [u32],
    base: usize,
}

/// What one thread gathered while merging its runs of a merge's spans: the pair-count
/// changes summed by pair, and the new pairs with the spans they appeared in.
#[derive(Default)]
struct Share {
    deltas: FxHashMap<u64, i64>,
    created: Vec<(u64, u32)>,
}

/// The pairs one merge made, each with the places of the spans it appeared in, once each
/// and in increasing order, given in that order (as the one-thread merge visits them);
/// kept in order of first appearance, so that no sort is needed. Its lists keep their
/// room from one merge to the next.
#[derive(Default)]
struct NewPairs {
    index: FxHashMap<u64, usize>,
    lists: Vec<(u64, Vec<u32>)>,
    used: usize,
}

impl NewPairs {
    fn clear(&mut self) {
        self.index.clear();
        self.used = 0;
    }

    #[inline]
    fn add(&mut self, pair: u64, place: u32) {
        let NewPairs { index, lists, used } = self;
        let g = *index.entry(pair).or_insert_with(|| {
            if *used == lists.len() {
                lists.push((0, Vec::new()));
            }
            lists[*used].0 = pair;
            lists[*used].1.clear();
            *used += 1;
            *used - 1
        });
        let list = &mut lists[g].1;
        if list.last() != Some(&place) {
            list.push(place);
        }
    }

    fn iter(&self) -> impl Iterator<Item = (u64, &[u32])> {
        self.lists[..self.used].iter().map(|(k, list)| (*k, &list[..]))
    }
}

impl SpanRun<'_> {
    /// Merges `(a, b)` into `new_id` in this run's spans, reporting each pair-count change
    /// other than the merged pair's own as `(pair key, change times the span's weight,
    /// span's place)`.
    ///
    /// The spans are spread over megabytes, in no order: each record's lines are asked for
    /// [`PREFETCH_SPANS`] spans ahead, so that the misses overlap. Its length is not known
    /// before its first line arrives, so the lines asked for are those of its first word
    /// and of the word 60 bytes on: the line after the first wherever a record of up to 64
    /// bytes (most are) runs into it. The first spans are asked for before the loop: most
    /// merges are found in a few dozen spans.
    #[inline]
    fn merge(&mut self, a: u32, b: u32, new_id: u32, mut change: impl FnMut(u64, i64, u32)) {
        let merged = key(a, b);
        let places = self.places;
        let ask = |run: &Self, p: u32| {
            let at = run.store.as_ptr().wrapping_add(p as usize * ALIGN - run.base);
            prefetch(at);
            prefetch(at.wrapping_add(15));
        };
        places.iter().take(PREFETCH_SPANS).for_each(|&p| ask(self, p));
        for (j, &p) in places.iter().enumerate() {
            if let Some(&ahead) = places.get(j + PREFETCH_SPANS) {
                ask(self, ahead);
            }
            let (head, rest) = self.store[p as usize * ALIGN - self.base..].split_at_mut(HEADER);
            let w = weight_of(head);
            let ids = &mut rest[..head[0] as usize];
            merge_span(ids, &mut head[0], a, b, new_id, |k, d| {
                if k != merged {
                    change(k, d * w, p);
                }
            });
        }
    }
}

/// Learns up to `num_merges` merges from distinct `spans` with their `counts`; merge `k`
/// creates id `256 + k`. Stops early when no pair occurs any more. Merges found in many
/// spans are split over up to `threads` threads; the merges learned are the same for any
/// number. `on_progress` is called about every 1% of the merges (and after the last); an
/// error from it stops training.
pub fn learn_merges(
    spans: &[&[u8]],
    counts: &[u64],
    num_merges: u32,
    threads: usize,
    on_progress: impl FnMut(&Progress) -> Result<()>,
) -> Result<Vec<Pair>> {
    learn_merges_split(spans, counts, num_merges, threads, Split::DEFAULT, on_progress)
}

/// When a merge is split over threads (see [`learn_merges`]).
#[derive(Clone, Copy)]
struct Split {
    /// Merges found in at least this many spans are split...
    min_spans: usize,
    /// ...into runs of at least this many spans, and at most [`RUNS_PER_THREAD`] a thread.
    min_run: usize,
}

impl Split {
    /// Merges in 2,048 spans or more: at 100 MB and vocab 32768, 274 of the 32,512 merges,
    /// which take about a fifth of the loop (their spans are visited at a quarter of the cost
    /// of a small merge's, being prefetched well ahead). Two threads ran the loop 1.06x
    /// (512: 1.05x).
    const DEFAULT: Split = Split { min_spans: 2048, min_run: 256 };
}

fn learn_merges_split(
    spans: &[&[u8]],
    counts: &[u64],
    num_merges: u32,
    threads: usize,
    split: Split,
    mut on_progress: impl FnMut(&Progress) -> Result<()>,
) -> Result<Vec<Pair>> {
    assert_eq!(spans.len(), counts.len());
    // (More threads than cores are not started; the caller then merges every run itself.)
    let workers = threads.clamp(1, batch::available_cores());
    let mut shares: Vec<Mutex<Share>> = (0..workers).map(|_| Mutex::default()).collect();
    let mut words = Spans::new(spans, counts)?;

    // Every pair of adjacent bytes: its count and its spans. The lists go into one pool,
    // not a vector per pair (hundreds of thousands of small allocations, as many to free at
    // the end): a first pass counts each pair's spans, a second writes them in place.
    // Every id is a byte until the first merge, so the first statistics go into a dense
    // table indexed by the pair's two bytes, and only the pairs found move into the hash
    // table.
    let mut dense: Vec<PairStats> = (0..1 << 16).map(|_| PairStats::default()).collect();
    let byte_pair = |p: &[u32]| (p[0] as usize) << 8 | p[1] as usize;
    for (place, w, ids) in words.unmerged() {
        for p in ids.windows(2) {
            let e = &mut dense[byte_pair(p)];
            e.count += w;
            if e.last != place + 1 {
                e.last = place + 1;
                e.len += 1;
            }
        }
    }
    let mut pool: Vec<u32> = vec![0; dense.iter().map(|e| e.len as usize).sum()];
    let mut at = 0;
    for e in &mut dense {
        e.start = at;
        at += e.len as usize;
        (e.len, e.last) = (0, 0);
    }
    for (place, _, ids) in words.unmerged() {
        for p in ids.windows(2) {
            let e = &mut dense[byte_pair(p)];
            if e.last != place + 1 {
                e.last = place + 1;
                pool[e.start + e.len as usize] = place;
                e.len += 1;
            }
        }
    }
    let mut stats: PairTable = PairTable::with_hasher_in(Default::default(), HugePageTables);
    for (k, e) in dense.into_iter().enumerate().filter(|(_, e)| e.len > 0) {
        stats.insert(key((k >> 8) as u32, (k & 255) as u32), e);
    }
    let mut heap: OctonaryHeap<Candidate> =
        stats.iter().filter(|(_, s)| s.count > 0).map(|(&pair, s)| Candidate { count: s.count, pair }).collect();

    let mut merges = Vec::with_capacity(num_merges as usize);
    let step = (num_merges / 100).max(1);
    // The pairs a merge made, with the spans they appeared in.
    let mut created = NewPairs::default();
    // Those of a large merge, as each thread gathered them: (pair, place), repeats included.
    let mut gathered: Vec<(u64, u32)> = Vec::new();
    while (merges.len() as u32) < num_merges {
        let Some(top) = heap.pop() else { break };
        let current = stats.get(&top.pair).map_or(0, |s| s.count);
        if current <= 0 {
            continue;
        }
        if current != top.count {
            heap.push(Candidate { count: current, pair: top.pair });
            continue;
        }
        let (a, b) = unkey(top.pair);
        let new_id = 256 + merges.len() as u32;
        merges.push((a, b));

        let merged = stats.remove(&top.pair).unwrap_or_default();
        let occurrences = &pool[merged.start..merged.start + merged.len as usize];
        created.clear();
        if threads > 1 && occurrences.len() >= split.min_spans {
            // A large merge: its spans are cut into runs, merged on every thread, each
            // thread summing its pair-count changes by pair; the sums are then applied here.
            // Counts are sums and the new pairs are sorted, so the outcome is the same as
            // merging the spans in order on one thread.
            let parts = (workers * RUNS_PER_THREAD).min(occurrences.len().div_ceil(split.min_run));
            let runs: Vec<Mutex<Option<SpanRun>>> = words.split(occurrences, parts).into_iter().map(|r| Mutex::new(Some(r))).collect();
            let claims = Claims::new(runs.len());
            let work = |t: usize| {
                let mut share = shares[t].lock().unwrap_or_else(|e| e.into_inner());
                while let Some(r) = claims.claim() {
                    let run = runs[r].lock().unwrap_or_else(|e| e.into_inner()).take();
                    let share = &mut *share;
                    run.expect("a run is claimed once").merge(a, b, new_id, |k, d, i| {
                        *share.deltas.entry(k).or_default() += d;
                        if d > 0 {
                            share.created.push((k, i));
                        }
                    });
                }
            };
            batch::with_helpers((1..workers).collect(), work, || work(0))?;
            for share in &mut shares {
                let share = share.get_mut().unwrap_or_else(|e| e.into_inner());
                for (k, d) in share.deltas.drain() {
                    stats.entry(k).or_default().count += d;
                }
                gathered.append(&mut share.created);
            }
            gathered.sort_unstable();
            for &(k, i) in &gathered {
                created.add(k, i);
            }
            gathered.clear();
        } else {
            // (The merged pair's own entry is gone; its changes are not reported.)
            words.split(occurrences, 1)[0].merge(a, b, new_id, |k, d, i| {
                stats.entry(k).or_default().count += d;
                if d > 0 {
                    created.add(k, i);
                }
            });
        }
        // Each new pair's spans, once each, go to the end of the pool, and the pair into the
        // heap with its count after the whole merge. Every new pair holds `new_id`, so it
        // had no list before.
        for (k, list) in created.iter() {
            let e = stats.entry(k).or_default();
            debug_assert_eq!(e.len, 0, "a pair holding the new id had spans before its merge");
            (e.start, e.len) = (pool.len(), list.len() as u32);
            pool.extend_from_slice(list);
            if e.count > 0 {
                heap.push(Candidate { count: e.count, pair: k });
            }
        }
        let done = merges.len() as u32;
        if done.is_multiple_of(step) || done == num_merges {
            on_progress(&Progress { done, total: num_merges, pair: (a, b), new_id, count: top.count })?;
        }
    }
    Ok(merges)
}

/// The bytes of every token: ids 0-255 are single bytes, id `256 + k` is the concatenation
/// of merge `k`'s pair.
pub fn token_bytes(merges: &[Pair]) -> Vec<Vec<u8>> {
    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    for &(a, b) in merges {
        let t = [tokens[a as usize].as_slice(), tokens[b as usize].as_slice()].concat();
        tokens.push(t);
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The textbook trainer: recount every pair from scratch after each merge.
    fn reference(spans: &[&[u8]], counts: &[u64], num_merges: u32) -> Vec<Pair> {
        let mut words: Vec<Vec<u32>> = spans.iter().map(|s| s.iter().map(|&b| b as u32).collect()).collect();
        let mut merges = Vec::new();
        for k in 0..num_merges {
            let mut pc: FxHashMap<Pair, u64> = FxHashMap::default();
            for (w, &c) in words.iter().zip(counts) {
                for p in w.windows(2) {
                    *pc.entry((p[0], p[1])).or_default() += c;
                }
            }
            let Some((&pair, _)) = pc.iter().filter(|(_, &c)| c > 0).max_by(|x, y| x.1.cmp(y.1).then(y.0.cmp(x.0))) else {
                break;
            };
            let new_id = 256 + k;
            for w in &mut words {
                let mut out = Vec::with_capacity(w.len());
                let mut i = 0;
                while i < w.len() {
                    if i + 1 < w.len() && (w[i], w[i + 1]) == pair {
                        out.push(new_id);
                        i += 2;
                    } else {
                        out.push(w[i]);
                        i += 1;
                    }
                }
                *w = out;
            }
            merges.push(pair);
        }
        merges
    }

    fn run(spans: &[&[u8]], counts: &[u64], n: u32) -> Vec<Pair> {
        learn_merges(spans, counts, n, 1, |_| Ok(())).unwrap()
    }

    /// Every merge split over `threads` threads, in runs of `min_run` spans.
    fn run_split(spans: &[&[u8]], counts: &[u64], n: u32, threads: usize, min_run: usize) -> Vec<Pair> {
        learn_merges_split(spans, counts, n, threads, Split { min_spans: 1, min_run }, |_| Ok(())).unwrap()
    }

    fn pseudo_random_spans(count: usize, seed: u64) -> (Vec<Vec<u8>>, Vec<u64>) {
        let mut s = seed;
        let alphabet = b"abcab  aab\xc3\xa9";
        let mut spans = Vec::new();
        let mut counts = Vec::new();
        for _ in 0..count {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let len = 1 + (s % 12) as usize;
            spans.push((0..len).map(|j| alphabet[((s >> (j * 3)) % alphabet.len() as u64) as usize]).collect());
            counts.push(1 + (s >> 40) % 50);
        }
        (spans, counts)
    }

    #[test]
    fn matches_reference_on_small_corpora() {
        let cases: Vec<(Vec<&[u8]>, Vec<u64>)> = vec![
            (vec![b"aaaa", b"aaa", b"aa", b"a"], vec![3, 5, 7, 11]),
            (vec![b"abab", b"baba", b"ab ", b" ab"], vec![2, 2, 2, 2]),
            (vec!["héllo wörld".as_bytes(), "日本語".as_bytes(), b"x"], vec![4, 9, 100]),
            (vec![b"the", b" the", b" then", b"then", b"hen", b" he"], vec![10, 30, 5, 5, 7, 8]),
            (vec![b"zzzzzzzzzzzzzzzz", b"zz z zz", b"zyzyzyzy"], vec![1, 3, 2]),
        ];
        for (spans, counts) in &cases {
            for n in [1, 3, 10, 40] {
                assert_eq!(run(spans, counts, n), reference(spans, counts, n), "{spans:?} n={n}");
            }
        }
    }

    #[test]
    fn matches_reference_on_pseudo_random_text() {
        let (spans_owned, counts) = pseudo_random_spans(300, 0x853c49e6748fea9b);
        let spans: Vec<&[u8]> = spans_owned.iter().map(|v| v.as_slice()).collect();
        assert_eq!(run(&spans, &counts, 150), reference(&spans, &counts, 150));
    }

    #[test]
    fn merges_split_over_threads_are_the_same() {
        let (spans_owned, counts) = pseudo_random_spans(2000, 0x9e3779b97f4a7c15);
        let spans: Vec<&[u8]> = spans_owned.iter().map(|v| v.as_slice()).collect();
        let expected = reference(&spans, &counts, 120);
        assert_eq!(run(&spans, &counts, 120), expected);
        for (threads, min_run) in [(2, 1), (2, 7), (3, 1), (4, 50), (64, 1)] {
            assert_eq!(run_split(&spans, &counts, 120, threads, min_run), expected, "threads={threads} min_run={min_run}");
        }
        for (spans, counts) in [(vec![&b"aaaa"[..], b"aaa", b"aa", b"a"], vec![3, 5, 7, 11]), (vec![b"abab", b"baba", b"ab ", b" ab"], vec![2, 2, 2, 2])] {
            assert_eq!(run_split(&spans, &counts, 10, 2, 1), reference(&spans, &counts, 10));
        }
    }

    #[test]
    fn split_runs_own_exactly_their_spans() {
        let owned: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 1 + (i as usize * 7) % 5]).collect();
        let spans: Vec<&[u8]> = owned.iter().map(|v| v.as_slice()).collect();
        let counts: Vec<u64> = (0..40).map(|i| 1 + (i as u64 % 3) * (1 << 33)).collect();
        let mut words = Spans::new(&spans, &counts).unwrap();
        // Spans of one byte are not stored; the others keep their order.
        let stored: Vec<(u32, i64, Vec<u32>)> = words.unmerged().map(|(p, w, ids)| (p, w, ids.to_vec())).collect();
        let expected: Vec<(i64, Vec<u32>)> =
            owned.iter().zip(&counts).filter(|(s, _)| s.len() >= 2).map(|(s, &c)| (c as i64, s.iter().map(|&b| b as u32).collect())).collect();
        assert_eq!(stored.iter().map(|(_, w, ids)| (*w, ids.clone())).collect::<Vec<_>>(), expected);
        let picks = [0, 3, 4, 9, 10, 11, 20, 25, 28, 30];
        let places: Vec<u32> = picks.iter().map(|&k| stored[k].0).collect();
        for parts in [1, 2, 3, 4, 10, 25] {
            let runs = words.split(&places, parts);
            assert_eq!(runs.len(), parts.min(places.len()), "parts={parts}");
            let mut seen = Vec::new();
            for run in &runs {
                for &p in run.places {
                    let record = &run.store[p as usize * ALIGN - run.base..];
                    let k = stored.iter().position(|s| s.0 == p).unwrap();
                    assert_eq!((weight_of(record), &record[HEADER..HEADER + record[0] as usize]), (stored[k].1, &stored[k].2[..]));
                    seen.push(p);
                }
            }
            assert_eq!(seen, places);
        }
    }

    #[test]
    fn stops_when_nothing_left_to_merge_and_builds_bytes() {
        let merges = run(&[b"abc"], &[1], 100);
        assert_eq!(merges.len(), 2);
        let tokens = token_bytes(&merges);
        assert_eq!(tokens[257], b"abc");
    }
}
