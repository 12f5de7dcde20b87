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
use crate::error::Result;
use crate::prefetch::prefetch;

/// How many occurrences ahead the merge loop asks for a span's ids (and twice as many for
/// its place and weight).
const PREFETCH_SPANS: usize = 8;

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
    /// While the first lists are built: one more than the last span counted.
    last: u32,
}

/// Where the merge loop stands, for progress reports.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub done: u32,
    pub total: u32,
    pub pair: Pair,
    pub new_id: u32,
    pub count: i64,
}

/// Spans stored back to back in one buffer; span `i` is `ids[start[i]..start[i] + len[i]]`
/// and shrinks in place as merges apply.
struct Spans {
    ids: Vec<u32>,
    start: Vec<u64>,
    len: Vec<u32>,
}

impl Spans {
    fn new(spans: &[&[u8]]) -> Self {
        let total: usize = spans.iter().map(|s| s.len()).sum();
        let mut ids = Vec::with_capacity(total);
        let mut start = Vec::with_capacity(spans.len());
        let mut len = Vec::with_capacity(spans.len());
        for s in spans {
            start.push(ids.len() as u64);
            len.push(s.len() as u32);
            ids.extend(s.iter().map(|&b| b as u32));
        }
        Self { ids, start, len }
    }

    #[inline]
    fn get(&self, i: usize) -> &[u32] {
        let s = self.start[i] as usize;
        &self.ids[s..s + self.len[i] as usize]
    }

    /// Cuts the spans listed in `occurrences` (in increasing order) into `parts` runs of
    /// about as many occurrences each. Spans are stored in index order, so each run's
    /// spans, ids and lengths lie in a stretch of their own: each run gets those stretches
    /// as slices it alone may change, and the runs can be merged on different threads.
    fn split<'a>(&'a mut self, occurrences: &'a [u32], parts: usize) -> Vec<SpanRun<'a>> {
        debug_assert!(occurrences.windows(2).all(|w| w[0] < w[1]), "a pair's spans are listed in increasing order");
        let Spans { ids, start, len } = self;
        let (mut ids, mut len): (&mut [u32], &mut [u32]) = (ids, len);
        let (mut ids_base, mut len_base) = (0usize, 0usize);
        let per = occurrences.len().div_ceil(parts.max(1));
        let mut runs = Vec::with_capacity(parts);
        for (k, occ) in occurrences.chunks(per).enumerate() {
            // A run owns everything up to the next run's first span.
            let next = occurrences.get((k + 1) * per).map(|&i| i as usize);
            let (run_ids, run_len) = match next {
                Some(next) => {
                    let (x, rest_ids) = std::mem::take(&mut ids).split_at_mut(start[next] as usize - ids_base);
                    let (y, rest_len) = std::mem::take(&mut len).split_at_mut(next - len_base);
                    (ids, len) = (rest_ids, rest_len);
                    (x, y)
                }
                None => (std::mem::take(&mut ids), std::mem::take(&mut len)),
            };
            runs.push(SpanRun { occurrences: occ, start, ids: run_ids, ids_base, len: run_len, len_base });
            if let Some(next) = next {
                (ids_base, len_base) = (start[next] as usize, next);
            }
        }
        runs
    }
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

/// Some of a merge's spans, with the stretches of the span store that only they occupy
/// (see [`Spans::split`]): span `i`'s ids start at `start[i] - ids_base` in `ids`, and its
/// length is `len[i - len_base]`.
struct SpanRun<'a> {
    occurrences: &'a [u32],
    start: &'a [u64],
    ids: &'a mut [u32],
    ids_base: usize,
    len: &'a mut [u32],
    len_base: usize,
}

/// What one thread gathered while merging its runs of a merge's spans: the pair-count
/// changes summed by pair, and the new pairs with the spans they appeared in.
#[derive(Default)]
struct Share {
    deltas: FxHashMap<u64, i64>,
    created: Vec<(u64, u32)>,
}

impl SpanRun<'_> {
    /// Merges `(a, b)` into `new_id` in this run's spans, reporting each pair-count change
    /// other than the merged pair's own as `(pair key, change times the span's weight,
    /// span)`.
    ///
    /// The spans are spread over megabytes, in no order: their lines are asked for ahead,
    /// the span's place and weight first, then (once that place has had time to arrive)
    /// its ids, so that the misses overlap. The first spans are asked for before the loop:
    /// most merges are found in a few dozen spans.
    #[inline]
    fn merge(&mut self, weight: &[i64], a: u32, b: u32, new_id: u32, mut change: impl FnMut(u64, i64, u32)) {
        let merged = key(a, b);
        let occ = self.occurrences;
        let place = |run: &Self, f: u32| {
            prefetch(&run.start[f as usize]);
            prefetch(&run.len[f as usize - run.len_base]);
            prefetch(&weight[f as usize]);
        };
        let ids_of = |run: &Self, g: u32| prefetch(run.ids.as_ptr().wrapping_add(run.start[g as usize] as usize - run.ids_base));
        occ.iter().take(2 * PREFETCH_SPANS).for_each(|&f| place(self, f));
        occ.iter().take(PREFETCH_SPANS).for_each(|&g| ids_of(self, g));
        for (j, &i) in occ.iter().enumerate() {
            if let Some(&f) = occ.get(j + 2 * PREFETCH_SPANS) {
                place(self, f);
            }
            if let Some(&g) = occ.get(j + PREFETCH_SPANS) {
                ids_of(self, g);
            }
            let w = weight[i as usize];
            let s = self.start[i as usize] as usize - self.ids_base;
            let len = &mut self.len[i as usize - self.len_base];
            let ids = &mut self.ids[s..s + *len as usize];
            merge_span(ids, len, a, b, new_id, |k, d| {
                if k != merged {
                    change(k, d * w, i);
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
    let mut words = Spans::new(spans);
    let weight: Vec<i64> = counts.iter().map(|&c| c.min(i64::MAX as u64) as i64).collect();

    // Every pair of adjacent bytes: its count and its spans. The lists go into one pool,
    // not a vector per pair (hundreds of thousands of small allocations, as many to free at
    // the end): a first pass counts each pair's spans, a second writes them in place.
    let mut stats: FxHashMap<u64, PairStats> = FxHashMap::default();
    let live = || (0..spans.len()).filter(|&i| weight[i] > 0);
    for i in live() {
        for p in words.get(i).windows(2) {
            let e = stats.entry(key(p[0], p[1])).or_default();
            e.count += weight[i];
            if e.last != i as u32 + 1 {
                e.last = i as u32 + 1;
                e.len += 1;
            }
        }
    }
    let mut pool: Vec<u32> = vec![0; stats.values().map(|e| e.len as usize).sum()];
    let mut at = 0;
    for e in stats.values_mut() {
        e.start = at;
        at += e.len as usize;
        (e.len, e.last) = (0, 0);
    }
    for i in live() {
        for p in words.get(i).windows(2) {
            let e = stats.get_mut(&key(p[0], p[1])).expect("counted in the first pass");
            if e.last != i as u32 + 1 {
                e.last = i as u32 + 1;
                pool[e.start + e.len as usize] = i as u32;
                e.len += 1;
            }
        }
    }
    let mut heap: OctonaryHeap<Candidate> =
        stats.iter().filter(|(_, s)| s.count > 0).map(|(&pair, s)| Candidate { count: s.count, pair }).collect();

    let mut merges = Vec::with_capacity(num_merges as usize);
    let step = (num_merges / 100).max(1);
    // The pairs a merge made, each with a span it appeared in (repeats included).
    let mut created: Vec<(u64, u32)> = Vec::new();
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
            // Counts are sums and the new pairs are sorted below, so the outcome is the
            // same as merging the spans in order on one thread.
            let parts = (workers * RUNS_PER_THREAD).min(occurrences.len().div_ceil(split.min_run));
            let runs: Vec<Mutex<Option<SpanRun>>> = words.split(occurrences, parts).into_iter().map(|r| Mutex::new(Some(r))).collect();
            let claims = Claims::new(runs.len());
            let work = |t: usize| {
                let mut share = shares[t].lock().unwrap_or_else(|e| e.into_inner());
                while let Some(r) = claims.claim() {
                    let run = runs[r].lock().unwrap_or_else(|e| e.into_inner()).take();
                    let share = &mut *share;
                    run.expect("a run is claimed once").merge(&weight, a, b, new_id, |k, d, i| {
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
                created.append(&mut share.created);
            }
        } else {
            // (The merged pair's own entry is gone; its changes are not reported.)
            words.split(occurrences, 1)[0].merge(&weight, a, b, new_id, |k, d, i| {
                stats.entry(k).or_default().count += d;
                if d > 0 {
                    created.push((k, i));
                }
            });
        }
        // Each new pair's spans, once each, go to the end of the pool, and the pair into the
        // heap with its count after the whole merge. Every new pair holds `new_id`, so it
        // had no list before.
        created.sort_unstable();
        created.dedup();
        for run in created.chunk_by(|x, y| x.0 == y.0) {
            let k = run[0].0;
            let e = stats.entry(k).or_default();
            debug_assert_eq!(e.len, 0, "a pair holding the new id had spans before its merge");
            let at = pool.len();
            pool.extend(run.iter().map(|&(_, i)| i));
            (e.start, e.len) = (at, (pool.len() - at) as u32);
            if e.count > 0 {
                heap.push(Candidate { count: e.count, pair: k });
            }
        }
        let done = merges.len() as u32;
        if done % step == 0 || done == num_merges {
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
        let occurrences: Vec<u32> = vec![0, 3, 4, 9, 10, 11, 20, 33, 38, 39];
        for parts in [1, 2, 3, 4, 10, 25] {
            let mut words = Spans::new(&spans);
            let runs = words.split(&occurrences, parts);
            assert_eq!(runs.len(), parts.min(occurrences.len()), "parts={parts}");
            let mut seen = Vec::new();
            for run in &runs {
                for &i in run.occurrences {
                    let i = i as usize;
                    let s = run.start[i] as usize - run.ids_base;
                    let len = run.len[i - run.len_base] as usize;
                    assert_eq!(&run.ids[s..s + len], &owned[i].iter().map(|&b| b as u32).collect::<Vec<_>>()[..]);
                    seen.push(i as u32);
                }
            }
            assert_eq!(seen, occurrences);
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
