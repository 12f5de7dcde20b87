//! Byte-pair merging of long pieces made of a few runs of repeated bytes (a megabyte of
//! spaces, of `=`, of one letter), in time that grows with the number of runs and merge
//! rounds, not with the length of the piece.
//!
//! The piece is kept as runs `(token, count)`. In tiktoken's order (lowest rank first,
//! leftmost first) the merges of one rank `r` are all made before any higher rank, and two
//! merges of rank `r` never overlap except inside a run of `t t t ...` when `r` is the rank
//! of `t t`, where they pair the tokens from the left. So one round takes the lowest rank
//! among the pairs inside runs and across run boundaries and makes all its merges at once:
//! a run `t^c` becomes `T^(c/2) t^(c%2)`, or at each boundary `x | y` the last `x` and the
//! first `y` become one token. This is the sweep of `bpe::merge_by_rank_buckets` with runs
//! instead of single tokens, under the same condition: a merge must never create a pair
//! ranked below the rank being merged (a vocabulary made by BPE training never does). If
//! it does, or the runs become too many, the function gives up and the caller merges the
//! piece the general way.

use crate::bpe::PairMemo;
use crate::error::{Rank, Result};
use crate::vocab::Vocab;

/// Give up beyond this many runs (the rounds cost a pass over the runs each).
const MAX_RUNS: usize = 32;

/// Appends the tokens of `piece` and returns `Ok(true)`, or returns `Ok(false)` with `out`
/// untouched when the piece is not made of few runs or the condition above fails.
pub(crate) fn merge_runs(vocab: &Vocab, piece: &[u8], out: &mut Vec<Rank>, memo: Option<&PairMemo>) -> Result<bool> {
    let mut runs: Vec<(Rank, u64)> = Vec::new();
    for &b in piece {
        match runs.last_mut() {
            Some((t, c)) if *t == vocab.byte_rank(b) => *c += 1,
            _ => {
                let t = vocab.byte_rank(b);
                if t == Rank::MAX || runs.len() == MAX_RUNS {
                    return Ok(false); // an unknown byte (the general path reports it), or too many runs
                }
                runs.push((t, 1));
            }
        }
    }
    let mut bytes = Vec::new();
    let mut rank = |l: Rank, r: Rank| -> Rank {
        let mut lookup = || {
            bytes.clear();
            bytes.extend_from_slice(vocab.token_bytes(l).unwrap_or_default());
            bytes.extend_from_slice(vocab.token_bytes(r).unwrap_or_default());
            vocab.rank(&bytes).unwrap_or(Rank::MAX)
        };
        match memo {
            Some(m) => m.rank(l, r, lookup),
            None => lookup(),
        }
    };
    let mut floor: Option<Rank> = None; // the rank of the previous round
    let mut next: Vec<(Rank, u64)> = Vec::new();
    loop {
        // The lowest-ranked pair: inside a run (`inner`) or across boundary `k | k + 1`.
        let (mut best, mut inner, mut at) = (Rank::MAX, false, 0);
        for k in 0..runs.len() {
            let (t, c) = runs[k];
            if c >= 2 {
                let r = rank(t, t);
                if r < best {
                    (best, inner, at) = (r, true, k);
                }
            }
            if k + 1 < runs.len() {
                let r = rank(t, runs[k + 1].0);
                if r < best {
                    (best, inner, at) = (r, false, k);
                }
            }
        }
        if best == Rank::MAX {
            break;
        }
        if floor.is_some_and(|f| best <= f) {
            return Ok(false); // a merge created a pair ranked below its own: not this way
        }
        floor = Some(best);
        next.clear();
        if inner {
            let t = runs[at].0;
            // tiktoken pairs a run's tokens from the left one merge at a time, so after its
            // first merge the new token `T` stands before a `t` (`T t t ...`). Should `T t`
            // rank below `T`, tiktoken merges it next, which this round would not. (When
            // the run is odd, `T t` is left at its end and the next round sees it; when it
            // is even, only this check does.)
            if runs.iter().any(|&(u, c)| u == t && c >= 3) && rank(best, t) <= best {
                return Ok(false);
            }
            for &(u, c) in &runs {
                if u == t && c >= 2 {
                    next.push((best, c / 2));
                    next.push((t, c % 2));
                } else {
                    next.push((u, c));
                }
            }
        } else {
            let (x, y) = (runs[at].0, runs[at + 1].0);
            for k in 0..runs.len() {
                let (u, mut c) = runs[k];
                if k > 0 && runs[k - 1].0 == x && u == y {
                    c -= 1; // its first token went into the merge on its left
                }
                if k + 1 < runs.len() && u == x && runs[k + 1].0 == y {
                    next.push((u, c - 1));
                    next.push((best, 1));
                } else {
                    next.push((u, c));
                }
            }
        }
        // Drop empty runs and join neighbours with the same token.
        runs.clear();
        for &(u, c) in &next {
            match runs.last_mut() {
                _ if c == 0 => {}
                Some((t, n)) if *t == u => *n += c,
                _ => runs.push((u, c)),
            }
        }
        if runs.len() > MAX_RUNS {
            return Ok(false);
        }
    }
    for &(t, c) in &runs {
        out.extend(std::iter::repeat_n(t, c as usize));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpe::{merge_long, Scratch};
    use rustc_hash::FxHashMap;

    /// A vocabulary trained the BPE way on a small alphabet (ranks in merge order), so
    /// that long runs have many merge levels.
    fn vocab() -> Vocab {
        with_bytes(&[b"  ", b"aa", b"    ", b"aaaa", b"a ", b"  a", b"ab", b"aaa", b"        ", b"aaaaaaaa", b"ba", b"abab", b"   "])
    }

    /// The 256 bytes, then `tokens` ranked in the order given.
    fn with_bytes(tokens: &[&[u8]]) -> Vocab {
        let mut ranks: FxHashMap<Vec<u8>, Rank> = (0..=255u8).map(|b| (vec![b], b as Rank)).collect();
        for t in tokens {
            let next = ranks.len() as Rank;
            ranks.entry(t.to_vec()).or_insert(next);
        }
        Vocab::new(ranks, vec![]).unwrap()
    }

    #[test]
    fn runs_give_the_same_tokens_as_the_general_merge() {
        let v = vocab();
        let mut s = Scratch::default();
        let memo = PairMemo::default();
        let mut seed = 12345u64;
        let mut below = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut taken = 0;
        for case in 0..3000 {
            // A few runs of a few bytes, of random lengths (some long).
            let mut piece = Vec::new();
            for _ in 0..1 + below(6) {
                let byte = b" abx"[below(4) as usize];
                let len = if below(3) == 0 { 1 + below(3000) } else { 1 + below(9) };
                piece.extend(std::iter::repeat_n(byte, len as usize));
            }
            let mut want = Vec::new();
            merge_long(&v, &piece, &mut want, &mut s, None).unwrap();
            let mut got = Vec::new();
            let m = if case % 2 == 0 { Some(&memo) } else { None };
            if merge_runs(&v, &piece, &mut got, m).unwrap() {
                taken += 1;
                assert_eq!(got, want, "piece {:?}", String::from_utf8_lossy(&piece));
            } else {
                assert!(got.is_empty());
            }
        }
        assert!(taken > 2000, "only {taken} cases took the run path");
    }

    /// A vocabulary that BPE training would not make: `ccc` ranks before `cc`, so in a run
    /// of `c` tiktoken merges `cc c` as soon as the first `cc` is made. The run path must
    /// then decline (or agree) for every length, even and odd.
    #[test]
    fn a_pair_made_inside_a_run_that_ranks_lower_is_not_missed() {
        let v = with_bytes(&[b"ccc", b"cc", b"cccccc"]);
        let mut s = Scratch::default();
        for len in 2..300 {
            for piece in [vec![b'c'; len], [b"ab".to_vec(), vec![b'c'; len], b"ba".to_vec()].concat()] {
                let mut want = Vec::new();
                merge_long(&v, &piece, &mut want, &mut s, None).unwrap();
                let mut got = Vec::new();
                if merge_runs(&v, &piece, &mut got, None).unwrap() {
                    assert_eq!(got, want, "{len}");
                }
            }
        }
    }

    #[test]
    fn too_many_runs_or_unknown_bytes_decline() {
        let v = vocab();
        let piece: Vec<u8> = (0..100).map(|i| if i % 2 == 0 { b'a' } else { b'b' }).collect();
        let mut out = Vec::new();
        assert!(!merge_runs(&v, &piece, &mut out, None).unwrap());
        assert!(out.is_empty());
        let mut ranks: FxHashMap<Vec<u8>, Rank> = FxHashMap::default();
        ranks.insert(b"a".to_vec(), 0);
        let v = Vocab::new(ranks, vec![]).unwrap();
        assert!(!merge_runs(&v, b"aaab", &mut out, None).unwrap());
    }
}
