//! Reading `.tiktoken` vocabulary files, one `<base64 token> <rank>` line per token, in
//! their canonical form: single spaces, `\n` line ends, strict base64, decimal ranks.
//!
//! Loading o200k_base's 200k lines with Python's own tools takes about a third of a
//! second, most of a `get_encoding` call; this pass takes a few milliseconds. It accepts
//! only what the Python parser (`tokenmill.load`) accepts, with the same result, and says
//! `None` to everything else: a file in another form, or a malformed one, goes to that
//! parser, which reads it line by line and names the line at fault.

use crate::Rank;

/// The tokens and ranks of a file, in its order: token `i` is
/// `bytes[ends[i - 1]..ends[i]]` (from 0 for the first).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TokenRanks {
    pub bytes: Vec<u8>,
    pub ends: Vec<usize>,
    pub ranks: Vec<Rank>,
}

impl TokenRanks {
    /// The tokens with their ranks, in the file's order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Rank)> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).zip(&self.ranks).map(|((s, &e), &r)| (&self.bytes[s..e], r))
    }

    pub fn len(&self) -> usize {
        self.ranks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }
}

/// Each byte's value as a base64 digit; 64 for `=`, 255 for any other byte.
const DIGITS: [u8; 256] = {
    let mut t = [255u8; 256];
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut i = 0;
    while i < 64 {
        t[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    t[b'=' as usize] = 64;
    t
};

/// The bytes of a strict base64 field appended to `out`, or `None`: its length a multiple
/// of four, `=` only as the last one or two characters. Bits past the last byte are
/// ignored, as Python's decoders ignore them. An empty field is refused (no token is empty).
fn decode_base64(field: &[u8], out: &mut Vec<u8>) -> Option<()> {
    if field.is_empty() || !field.len().is_multiple_of(4) {
        return None;
    }
    let padding = field.iter().rev().take(2).take_while(|&&c| c == b'=').count();
    let (body, tail) = field.split_at(field.len() - 4);
    for quad in body.chunks_exact(4) {
        let [a, b, c, d] = [0, 1, 2, 3].map(|i| DIGITS[quad[i] as usize]);
        if (a | b | c | d) >= 64 {
            return None;
        }
        let v = (a as u32) << 18 | (b as u32) << 12 | (c as u32) << 6 | d as u32;
        out.extend_from_slice(&v.to_be_bytes()[1..]);
    }
    let digits = [0, 1, 2, 3].map(|i| DIGITS[tail[i] as usize]);
    if digits[..4 - padding].iter().any(|&x| x >= 64) {
        return None;
    }
    let v = digits.iter().fold(0u32, |v, &x| v << 6 | (x & 63) as u32);
    out.extend_from_slice(&v.to_be_bytes()[1..4 - padding]);
    Some(())
}

/// A rank field: decimal digits (leading zeros allowed) of a value that fits a [`Rank`].
fn parse_rank(field: &[u8]) -> Option<Rank> {
    if field.is_empty() || field.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in field {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Rank::try_from(v).ok()
}

/// Parses a file in the canonical form: every line that is not empty is exactly a base64
/// token, one space and a rank, and lines end in `\n` (the last one may not). `None` for
/// anything else: other whitespace, a malformed line, a repeated rank. Repeated tokens are
/// not checked here (a caller that builds a map sees them as a shorter map).
pub fn parse_canonical(contents: &[u8]) -> Option<TokenRanks> {
    let lines = contents.split(|&c| c == b'\n').filter(|line| !line.is_empty());
    let mut parsed = TokenRanks {
        bytes: Vec::with_capacity(contents.len() / 2),
        ends: Vec::with_capacity(contents.len() / 12),
        ranks: Vec::with_capacity(contents.len() / 12),
    };
    for line in lines {
        let space = line.iter().position(|&c| c == b' ')?;
        let (token, rank) = (&line[..space], &line[space + 1..]);
        decode_base64(token, &mut parsed.bytes)?;
        parsed.ranks.push(parse_rank(rank)?);
        parsed.ends.push(parsed.bytes.len());
    }
    let in_order = parsed.ranks.iter().enumerate().all(|(i, &r)| r as usize == i);
    if !in_order {
        let mut sorted = parsed.ranks.clone();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return None;
        }
    }
    Some(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Standard base64 with padding, written out here so that the test does not lean on
    /// the decoder under test.
    fn encode(bytes: &[u8]) -> String {
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = String::new();
        for chunk in bytes.chunks(3) {
            let v = chunk.iter().enumerate().fold(0u32, |v, (i, &b)| v | (b as u32) << (16 - 8 * i));
            for i in 0..4 {
                s.push(if i <= chunk.len() { alphabet[(v >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
            }
        }
        s
    }

    fn tokens(parsed: &TokenRanks) -> Vec<(Vec<u8>, Rank)> {
        parsed.iter().map(|(t, r)| (t.to_vec(), r)).collect()
    }

    #[test]
    fn every_token_length_and_byte_comes_back() {
        let mut state = 7u64;
        let mut want = Vec::new();
        let mut file = String::new();
        for rank in 0..3000u32 {
            let len = 1 + rank as usize % 23;
            let token: Vec<u8> = (0..len)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    (state >> 56) as u8
                })
                .collect();
            file += &format!("{} {}\n", encode(&token), rank);
            want.push((token, rank));
        }
        let parsed = parse_canonical(file.as_bytes()).expect("a canonical file");
        assert_eq!(tokens(&parsed), want);
        assert_eq!(parsed.len(), 3000);
    }

    #[test]
    fn blank_lines_a_missing_last_newline_and_ranks_out_of_order_are_fine() {
        let parsed = parse_canonical(b"\nYQ== 7\n\nYg== 3\nYWI= 0010").unwrap();
        assert_eq!(tokens(&parsed), vec![(b"a".to_vec(), 7), (b"b".to_vec(), 3), (b"ab".to_vec(), 10)]);
        assert!(parse_canonical(b"").unwrap().is_empty());
        assert!(parse_canonical(b"\n\n").unwrap().is_empty());
    }

    #[test]
    fn bits_past_the_last_byte_are_ignored_as_python_does() {
        assert_eq!(tokens(&parse_canonical(b"QR== 0\n").unwrap()), vec![(b"A".to_vec(), 0)]);
    }

    #[test]
    fn anything_else_is_left_to_the_line_by_line_parser() {
        for bad in [
            &b"YQ== 0\r\n"[..],
            b"YQ==  0\n",
            b"YQ==\t0\n",
            b" YQ== 0\n",
            b"YQ== 0 \n",
            b"YQ==\n",
            b"YQ== \n",
            b"YQ== x\n",
            b"YQ== -1\n",
            b"YQ== +1\n",
            b"YQ== 4294967296\n",
            b"YQ= 0\n",
            b"YQ 0\n",
            b"Q=== 0\n",
            b"=QQ= 0\n",
            b"QQ=Q 0\n",
            b"QQ==QQ== 0\n",
            b"==== 0\n",
            b"Y!== 0\n",
            b" 0\n",
            b"YQ== 0\nYg== 0\n",
        ] {
            assert_eq!(parse_canonical(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(tokens(&parse_canonical(b"YQ== 4294967295\n").unwrap()), vec![(b"a".to_vec(), u32::MAX)]);
    }
}
