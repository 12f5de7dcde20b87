//! Criterion benches of the Rust core, in bytes per second: pre-tokenization on each engine
//! (hand-written scanner, DFA, fancy-regex), whole encoding, byte-pair merging of the pieces
//! no cache can answer, and training's span counting and merge loop.
//!
//! Text: the running Python's standard-library sources (`python3` is asked where they
//! are), or the files under `TOKENMILL_BENCH_TEXT` if set. Encoding needs cl100k_base's
//! vocabulary in tiktoken's cache (`TIKTOKEN_CACHE_DIR`); without it those benches are
//! skipped with a note.
//!
//! Run: `cargo bench --bench core` (add `-- scanner` etc. to filter).

use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rustc_hash::FxHashMap;

use _core::pretokenize::Splitter;
use _core::span_counts::SpanCounts;
use _core::trainer::learn_merges;
use _core::Encoder;

const CL100K: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s";
const NANOCHAT: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
/// sha1 of cl100k_base's public URL: its file name in tiktoken's cache.
const CL100K_CACHE_NAME: &str = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4";
const TEXT_BYTES: usize = 4_000_000;

fn text_root() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("TOKENMILL_BENCH_TEXT") {
        return Some(PathBuf::from(p));
    }
    let out = std::process::Command::new("python3")
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"])
        .output()
        .ok()?;
    Some(PathBuf::from(String::from_utf8(out.stdout).ok()?.trim()))
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.file_name().is_some_and(|n| n == "site-packages") {
            continue;
        }
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|e| e == "py") {
            out.push(p);
        }
    }
}

fn documents() -> Vec<String> {
    let mut files = Vec::new();
    if let Some(root) = text_root() {
        collect(&root, &mut files);
    }
    let mut docs = Vec::new();
    let mut total = 0;
    for f in files {
        if let Ok(s) = std::fs::read_to_string(&f) {
            total += s.len();
            docs.push(s);
            if total >= TEXT_BYTES {
                break;
            }
        }
    }
    docs
}

fn cl100k_ranks() -> Option<FxHashMap<Vec<u8>, u32>> {
    let dir = std::env::var("TIKTOKEN_CACHE_DIR").ok()?;
    let data = std::fs::read_to_string(Path::new(&dir).join(CL100K_CACHE_NAME)).ok()?;
    let mut ranks = FxHashMap::default();
    for line in data.lines().filter(|l| !l.is_empty()) {
        let (tok, rank) = line.split_once(' ')?;
        ranks.insert(base64_decode(tok)?, rank.parse().ok()?);
    }
    Some(ranks)
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|&c| c != b'=') {
        acc = (acc << 6) | ALPHABET.iter().position(|&a| a == c)? as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

fn bench_pretokenize(c: &mut Criterion, docs: &[String]) {
    let bytes: usize = docs.iter().map(String::len).sum();
    let mut g = c.benchmark_group("pretokenize-cl100k");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(10);
    let engines = [
        ("scanner", Splitter::new(CL100K).unwrap()),
        ("dfa", Splitter::new_dfa(CL100K).unwrap()),
        ("fancy-regex", Splitter::new_reference(CL100K).unwrap()),
    ];
    for (name, splitter) in &engines {
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let mut n = 0usize;
                for d in docs {
                    splitter.for_each_piece(d, |_| {
                        n += 1;
                        Ok(())
                    }).unwrap();
                }
                n
            })
        });
    }
    g.finish();
}

fn bench_encode(c: &mut Criterion, docs: &[String]) {
    let Some(ranks) = cl100k_ranks() else {
        eprintln!("note: cl100k_base not found in TIKTOKEN_CACHE_DIR; encoding benches skipped");
        return;
    };
    let bytes: usize = docs.iter().map(String::len).sum();
    let mut g = c.benchmark_group("encode-cl100k");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(10);
    // A fresh encoder per iteration so that its piece cache starts cold, as on unseen text.
    g.bench_function("encode_ordinary, fresh encoder", |b| {
        b.iter_batched(
            || Encoder::new(ranks.clone(), vec![], CL100K).unwrap(),
            |enc| docs.iter().map(|d| enc.encode_ordinary(d).unwrap().len()).sum::<usize>(),
            criterion::BatchSize::PerIteration,
        )
    });
    g.finish();
    bench_merge(c, docs, &Encoder::new(ranks, vec![], CL100K).unwrap());
}

/// Byte-pair merging alone, on every distinct piece of the text that is no token: the
/// merges a single pass over unseen text cannot avoid (no cache helps the first time a
/// piece is seen), and the largest single part of encoding a long stream.
fn bench_merge(c: &mut Criterion, docs: &[String], enc: &Encoder) {
    let mut seen = rustc_hash::FxHashSet::default();
    let mut pieces: Vec<&[u8]> = Vec::new();
    for d in docs {
        enc.splitter()
            .for_each_piece(d, |p| {
                let b = p.as_bytes();
                if b.len() > 2 && enc.vocab().rank(b).is_none() && seen.insert(b) {
                    pieces.push(b);
                }
                Ok(())
            })
            .unwrap();
    }
    let bytes: usize = pieces.iter().map(|p| p.len()).sum();
    let mut g = c.benchmark_group("merge-cl100k");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(10);
    let name = format!("{} distinct pieces that are no token", pieces.len());
    g.bench_function(name.as_str(), |b| b.iter(|| pieces.iter().map(|p| enc.encode_single_piece(p).unwrap().len()).sum::<usize>()));
    g.finish();
}

fn bench_train(c: &mut Criterion, docs: &[String]) {
    let bytes: usize = docs.iter().map(String::len).sum();
    let mut g = c.benchmark_group("train-nanochat");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(10);
    g.bench_function("count spans, 1 thread", |b| {
        b.iter(|| {
            let mut counts = SpanCounts::new(NANOCHAT).unwrap();
            counts.add(docs, 1).unwrap();
            counts.distinct()
        })
    });
    let mut counts = SpanCounts::new(NANOCHAT).unwrap();
    counts.add(docs, 1).unwrap();
    let (spans, freq) = counts.sorted().unwrap();
    g.bench_function("learn 4096 merges", |b| b.iter(|| learn_merges(&spans, &freq, 4096 - 256, 1, |_| Ok(())).unwrap().len()));
    g.finish();
}

fn benches(c: &mut Criterion) {
    let docs = documents();
    if docs.is_empty() {
        eprintln!("note: no text found (set TOKENMILL_BENCH_TEXT to a folder of .py files)");
        return;
    }
    bench_pretokenize(c, &docs);
    bench_encode(c, &docs);
    bench_train(c, &docs);
}

criterion_group!(core, benches);
criterion_main!(core);
