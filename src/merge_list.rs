//! The merge list that makes a merge-list BPE (HuggingFace's) take the same steps as
//! rank-based BPE (tiktoken's, tokenmill's): each token's *tiktoken merge*, the pair that
//! rank-based BPE joins last when it runs on the token's bytes alone, without looking the
//! whole piece up. `tokenmill.huggingface` explains why this list is exact; this module
//! only computes it (in Python it took seconds for o200k_base).

use crate::vocab::Vocab;
use crate::Rank;

/// Where `token` splits into its tiktoken merge, as the length of the left part; `None`
/// when the run stops at three or more parts (the token is *unreachable*: only a lookup of
/// the whole piece ever produces it), and for a token of fewer than two bytes.
///
/// The merge is tiktoken's: the adjacent pair whose joined bytes have the lowest rank,
/// leftmost on ties, until two parts are left (their join is the token itself).
pub fn last_merge(vocab: &Vocab, token: &[u8]) -> Option<usize> {
    let n = token.len();
    if n < 2 {
        return None;
    }
    let rank = |a: usize, b: usize| vocab.rank(&token[a..b]).unwrap_or(Rank::MAX);
    // Parts by their starts (a part runs to the next start, the last one to `n`), and the
    // rank of each part joined with the next.
    let mut starts: Vec<usize> = (0..n).collect();
    let mut pairs: Vec<Rank> = (0..n - 1).map(|i| rank(i, i + 2)).collect();
    while starts.len() > 2 {
        let (i, &best) = pairs.iter().enumerate().min_by_key(|&(i, &r)| (r, i))?;
        if best == Rank::MAX {
            return None;
        }
        starts.remove(i + 1);
        pairs.remove(i);
        let end = |j: usize| starts.get(j + 1).copied().unwrap_or(n);
        if i > 0 {
            pairs[i - 1] = rank(starts[i - 1], end(i));
        }
        if i < pairs.len() {
            pairs[i] = rank(starts[i], end(i + 1));
        }
    }
    Some(starts[1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustc_hash::FxHashMap;

    /// The textbook run on `token`'s bytes: every step recomputes every pair's rank.
    fn reference(ranks: &FxHashMap<Vec<u8>, Rank>, token: &[u8]) -> Option<usize> {
        let mut parts: Vec<Vec<u8>> = token.iter().map(|&b| vec![b]).collect();
        if parts.len() < 2 {
            return None;
        }
        while parts.len() > 2 {
            let joined = |i: usize| [parts[i].as_slice(), parts[i + 1].as_slice()].concat();
            let best = (0..parts.len() - 1).filter_map(|i| Some((*ranks.get(&joined(i))?, i))).min()?;
            let right = parts.remove(best.1 + 1);
            parts[best.1].extend(right);
        }
        Some(parts[0].len())
    }

    #[test]
    fn agrees_with_the_textbook_run_on_random_vocabularies() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut found, mut unreachable) = (0, 0);
        for _ in 0..20 {
            // Strings over a four-letter alphabet, ranked at random, so that many tokens
            // are built through higher-ranked intermediates and some not at all.
            let mut ranks: FxHashMap<Vec<u8>, Rank> = (0..=255u8).map(|b| (vec![b], b as Rank)).collect();
            let mut order: Vec<Vec<u8>> = Vec::new();
            for _ in 0..600 {
                let r = next();
                let len = 2 + (r % 9) as usize;
                let t: Vec<u8> = (0..len).map(|j| b"abcd"[((r >> (8 + 2 * j)) & 3) as usize]).collect();
                if !ranks.contains_key(&t) {
                    ranks.insert(t.clone(), 0);
                    order.push(t);
                }
            }
            for i in (1..order.len()).rev() {
                order.swap(i, (next() % (i as u64 + 1)) as usize);
            }
            for (k, t) in order.iter().enumerate() {
                ranks.insert(t.clone(), 256 + k as Rank);
            }
            let vocab = Vocab::new(ranks.clone(), vec![]).unwrap();
            for t in &order {
                let want = reference(&ranks, t);
                assert_eq!(last_merge(&vocab, t), want, "{:?}", String::from_utf8_lossy(t));
                if want.is_some() { found += 1 } else { unreachable += 1 }
            }
        }
        assert!(found > 1000 && unreachable > 1000, "{found} found, {unreachable} unreachable");
    }

    #[test]
    fn a_token_built_through_a_higher_ranked_one() {
        // abc (256) comes from a + bc (257), though bc ranks above it.
        let mut ranks: FxHashMap<Vec<u8>, Rank> = (0..=255u8).map(|b| (vec![b], b as Rank)).collect();
        ranks.insert(b"abc".to_vec(), 256);
        ranks.insert(b"bc".to_vec(), 257);
        ranks.insert(b"abcd".to_vec(), 258);
        let vocab = Vocab::new(ranks, vec![]).unwrap();
        assert_eq!(last_merge(&vocab, b"abc"), Some(1));
        assert_eq!(last_merge(&vocab, b"bc"), Some(1));
        assert_eq!(last_merge(&vocab, b"abcd"), Some(3));
        assert_eq!(last_merge(&vocab, b"a"), None);
        assert_eq!(last_merge(&vocab, b"xyzw"), None);
    }
}
