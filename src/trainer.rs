//! The BPE merge loop: learns merges from distinct spans and their counts.
//!
//! Every distinct span becomes a sequence of byte ids. We count each adjacent pair
//! (weighted by its span's count) and index, per pair, the spans it occurs in; an octonary
//! heap orders pairs by count. Each step pops the best pair, refreshing it lazily if its
//! count went stale, merges it in every span that holds it, and applies the pair-count
//! changes that merge causes (the pairs with the left and right neighbours are replaced by
//! pairs with the new id), indexing the spans where new pairs appear.
//!
//! The order is fully determined by the counts: highest count first, and on equal counts
//! the smaller `(left, right)` pair first (as rustbpe breaks ties), so the same spans give
//! the same merges whatever the thread count or the order the spans arrived in.

use std::cmp::Ordering;

use dary_heap::OctonaryHeap;
use rustc_hash::FxHashMap;

use crate::error::Result;

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

/// Per pair: its weighted count and the spans it occurs in (possibly stale entries).
#[derive(Default)]
struct PairStats {
    count: i64,
    spans: Vec<u32>,
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

    /// Merges every non-overlapping occurrence (left to right) of `(a, b)` in span `i`
    /// into `new_id`, reporting each pair-count change as `(pair key, +1 or -1)`.
    #[inline]
    fn merge(&mut self, i: usize, a: u32, b: u32, new_id: u32, mut delta: impl FnMut(u64, i64)) {
        let s = self.start[i] as usize;
        let n = self.len[i] as usize;
        let ids = &mut self.ids[s..s + n];
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
        self.len[i] = w as u32;
    }
}

/// Learns up to `num_merges` merges from distinct `spans` with their `counts`; merge `k`
/// creates id `256 + k`. Stops early when no pair occurs any more. `on_progress` is called
/// about every 1% of the merges (and after the last); an error from it stops training.
pub fn learn_merges(
    spans: &[&[u8]],
    counts: &[u64],
    num_merges: u32,
    mut on_progress: impl FnMut(&Progress) -> Result<()>,
) -> Result<Vec<Pair>> {
    assert_eq!(spans.len(), counts.len());
    let mut words = Spans::new(spans);
    let weight: Vec<i64> = counts.iter().map(|&c| c.min(i64::MAX as u64) as i64).collect();

    let mut stats: FxHashMap<u64, PairStats> = FxHashMap::default();
    for i in 0..spans.len() {
        let w = weight[i];
        if w == 0 {
            continue;
        }
        for p in words.get(i).windows(2) {
            let e = stats.entry(key(p[0], p[1])).or_default();
            e.count += w;
            if e.spans.last() != Some(&(i as u32)) {
                e.spans.push(i as u32);
            }
        }
    }
    let mut heap: OctonaryHeap<Candidate> =
        stats.iter().filter(|(_, s)| s.count > 0).map(|(&pair, s)| Candidate { count: s.count, pair }).collect();

    let mut merges = Vec::with_capacity(num_merges as usize);
    let step = (num_merges / 100).max(1);
    let mut created: FxHashMap<u64, Vec<u32>> = FxHashMap::default();
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

        let occurrences = stats.remove(&top.pair).map(|s| s.spans).unwrap_or_default();
        created.clear();
        for &i in &occurrences {
            let w = weight[i as usize];
            words.merge(i as usize, a, b, new_id, |k, d| {
                if k == top.pair {
                    return; // the merged pair itself: its entry is gone
                }
                let e = stats.entry(k).or_default();
                e.count += d * w;
                if d > 0 {
                    let list = created.entry(k).or_default();
                    if list.last() != Some(&i) {
                        list.push(i);
                    }
                }
            });
        }
        for (k, list) in created.drain() {
            let e = stats.entry(k).or_default();
            e.spans.extend_from_slice(&list);
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
        learn_merges(spans, counts, n, |_| Ok(())).unwrap()
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
        let mut s = 0x853c49e6748fea9bu64;
        let alphabet = b"abcab  aab\xc3\xa9";
        let mut spans_owned: Vec<Vec<u8>> = Vec::new();
        let mut counts = Vec::new();
        for _ in 0..300 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let len = 1 + (s % 12) as usize;
            let span: Vec<u8> = (0..len).map(|j| alphabet[((s >> (j * 3)) % alphabet.len() as u64) as usize]).collect();
            spans_owned.push(span);
            counts.push(1 + (s >> 40) % 50);
        }
        let spans: Vec<&[u8]> = spans_owned.iter().map(|v| v.as_slice()).collect();
        assert_eq!(run(&spans, &counts, 150), reference(&spans, &counts, 150));
    }

    #[test]
    fn stops_when_nothing_left_to_merge_and_builds_bytes() {
        let merges = run(&[b"abc"], &[1], 100);
        assert_eq!(merges.len(), 2);
        let tokens = token_bytes(&merges);
        assert_eq!(tokens[257], b"abc");
    }
}
