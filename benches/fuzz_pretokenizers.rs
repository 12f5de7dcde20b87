//! A long differential run of the pre-tokenizers: for every standard pattern, the
//! hand-written scanner and the DFA path must split exactly as fancy-regex (the engine
//! tiktoken uses) on millions of generated strings, and on slices of any files given.
//! The unit tests run a small sample of the same on every `cargo test`; this is the long
//! run, to go before a release or after touching `scanner.rs`.
//!
//!     cargo bench --bench fuzz_pretokenizers -- [--cases N] [--seed S] [FILE ...]
//!
//! Prints progress and, on the first disagreement, the pattern, the engine, the input and
//! both splits, then exits with status 1.

use std::time::Instant;

use _core::pretokenize::Splitter;
use _core::scanner::Scanner;

/// Code points from every class the patterns distinguish, ASCII, apostrophes, the
/// contraction letters (with their case-folding oddities) and whitespace over-represented.
const POOLS: &[&[u32]] = &[
    &[0x20, 0x20, 0x20, 0x20, 0x9, 0xA, 0xA, 0xD, 0xB, 0xC, 0x85, 0xA0, 0x1680, 0x2000, 0x2028, 0x2029, 0x202F, 0x3000],
    &[0x27, 0x27, 0x73, 0x53, 0x17F, 0x74, 0x54, 0x64, 0x44, 0x6D, 0x4D, 0x6C, 0x4C, 0x76, 0x56, 0x65, 0x45, 0x72, 0x52, 0x212A],
    &[0x41, 0x5A, 0x61, 0x7A, 0x6B, 0x4B, 0xC9, 0xE9, 0xDF, 0x1C5, 0x1C6, 0x2B0, 0x4E2D, 0x3042, 0x5D0, 0x627, 0x3B1, 0x391, 0x10400, 0x10428, 0xAA, 0x1E9E],
    &[0x300, 0x301, 0x36F, 0x94D, 0x20DD, 0xFE0F, 0x200D, 0x1F3FD, 0x903, 0x488],
    &[0x30, 0x31, 0x39, 0x661, 0x966, 0x2167, 0xBD, 0x2460, 0x1D7CE, 0xFF10],
    &[0x21, 0x22, 0x2F, 0x2C, 0x2E, 0x3F, 0x2D, 0x5F, 0x7E, 0x3C, 0x7C, 0x3E, 0xB6, 0x2014, 0x1F600, 0x1F44D, 0x3002, 0xFF01, 0x0, 0x7F, 0xAD],
];

/// SplitMix64: small, fast, and plenty for generating test strings.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// ASCII only, for the long mostly-ASCII strings that exercise the bit-parallel windows
/// of the cl100k family and o200k (`bitwise_split.rs`): whitespace, apostrophes and the contraction
/// letters, letters, digits, punctuation and control bytes.
const ASCII_POOLS: &[&[u32]] = &[
    &[0x20, 0x20, 0x20, 0x9, 0xA, 0xA, 0xD, 0xB, 0xC],
    &[0x27, 0x27, 0x73, 0x53, 0x74, 0x54, 0x64, 0x44, 0x6D, 0x4D, 0x6C, 0x4C, 0x76, 0x56, 0x65, 0x45, 0x72, 0x52],
    &[0x41, 0x5A, 0x61, 0x7A, 0x6B, 0x4B, 0x71, 0x78],
    &[0x30, 0x31, 0x35, 0x39],
    &[0x21, 0x22, 0x2F, 0x2C, 0x2E, 0x3F, 0x2D, 0x5F, 0x7E, 0x3C, 0x7C, 0x28, 0x29, 0x7B, 0x3B, 0x0, 0x1F, 0x7F],
];

/// A random string: code points from the pools, sometimes in runs (long whitespace,
/// letters, digits). Half are up to a few dozen characters from every pool; the other
/// half are a few hundred bytes, mostly ASCII, with a character from the other pools now
/// and then.
fn generate(rng: &mut Rng) -> String {
    let mut s = String::new();
    let mostly_ascii = rng.below(2) == 0;
    let parts = if mostly_ascii { 40 + rng.below(200) } else { rng.below(24) };
    for _ in 0..parts {
        let pool = if mostly_ascii && rng.below(16) != 0 { ASCII_POOLS[rng.below(ASCII_POOLS.len())] } else { POOLS[rng.below(POOLS.len())] };
        let c = char::from_u32(pool[rng.below(pool.len())]).expect("valid code point");
        let repeat = if rng.below(8) == 0 { 1 + rng.below(40) } else { 1 };
        for _ in 0..repeat {
            s.push(c);
        }
    }
    s
}

fn main() {
    let mut cases: u64 = 1_000_000;
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--cases" => cases = args.next().and_then(|v| v.parse().ok()).expect("--cases N"),
            "--seed" => seed = args.next().and_then(|v| v.parse().ok()).expect("--seed S"),
            "--bench" => {} // passed by `cargo bench`
            _ => files.push(a),
        }
    }
    let engines: Vec<(&str, Splitter, Option<Splitter>, Splitter)> = Scanner::known_patterns()
        .map(|p| {
            let scan = Splitter::new(p).expect("standard pattern compiles");
            assert_eq!(scan.engine(), "scanner");
            (p, scan, Splitter::new_dfa(p), Splitter::new_reference(p).expect("reference compiles"))
        })
        .collect();
    let check = |text: &str| {
        for (p, scan, dfa, reference) in &engines {
            let want = reference.pieces(text).expect("reference splits");
            for (name, engine) in [("scanner", Some(scan)), ("dfa", dfa.as_ref())] {
                let Some(engine) = engine else { continue };
                let got = engine.pieces(text).expect("engine splits");
                if got != want {
                    eprintln!("MISMATCH: {name} on pattern {p}\ninput: {text:?}\nwant: {want:?}\ngot:  {got:?}");
                    std::process::exit(1);
                }
            }
        }
    };

    let started = Instant::now();
    let mut rng = Rng(seed);
    let mut chars = 0u64;
    for i in 0..cases {
        let s = generate(&mut rng);
        chars += s.chars().count() as u64;
        check(&s);
        if (i + 1) % (cases / 10).max(1) == 0 {
            println!("{} / {} generated strings agree ({:.0} s)", i + 1, cases, started.elapsed().as_secs_f64());
        }
    }
    let mut slices = 0u64;
    for f in &files {
        let text = match std::fs::read(f) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => {
                eprintln!("skipped {f}: {e}");
                continue;
            }
        };
        // Whole lines and random slices (cut at character boundaries).
        for line in text.lines() {
            check(line);
            slices += 1;
        }
        let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
        for _ in 0..(bounds.len() / 16).min(200_000) {
            let a = rng.below(bounds.len());
            let b = (a + 1 + rng.below(400)).min(bounds.len() - 1);
            check(&text[bounds[a]..bounds[b]]);
            slices += 1;
        }
    }
    println!(
        "all agree: {} patterns, {} generated strings ({} characters), {} slices of {} files, {:.0} s",
        engines.len(),
        cases,
        chars,
        slices,
        files.len(),
        started.elapsed().as_secs_f64()
    );
}
