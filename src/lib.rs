//! tokenmill: byte-level BPE with tiktoken-exact encoding.
//!
//! The engine is plain Rust: [`encoder::Encoder`] pre-tokenizes text
//! ([`pretokenize`]), looks whole pieces up in the [`vocab::Vocab`], merges the rest by
//! rank ([`bpe`]) and handles special tokens ([`special`]); [`batch`] runs many texts on
//! a fork-safe rayon pool. The PyO3 bindings live in `python.rs` (with `shared_ints.rs`,
//! the int objects their lists of ids are made of; `ids_from_python.rs` and
//! `texts_from_python.rs`, which read the ids given to decoding and the strs given to
//! encoding; and `ready_arenas.rs`, memory for a batch's lists mapped ahead by its pool
//! threads), compiled only with the `python` feature, so `cargo test` needs no libpython.

pub mod ascii_classes;
pub mod batch;
pub mod bitwise_split;
pub mod bpe;
pub mod bpe_runs;
pub mod char_classes;
pub mod encoder;
pub mod error;
pub mod huge_pages;
pub mod merge_list;
pub mod piece_cache;
pub mod prefetch;
pub mod pretokenize;
pub mod scanner;
pub mod span_counts;
pub mod special;
pub mod str_storage;
pub mod three_byte_tokens;
pub mod tiktoken_file;
pub mod token_table;
pub mod trainer;
pub mod vocab;

#[cfg(feature = "python")]
mod ids_from_python;
#[cfg(feature = "python")]
mod python;
#[cfg(all(feature = "python", unix, not(Py_GIL_DISABLED), not(PyPy)))]
mod ready_arenas;
#[cfg(feature = "python")]
mod shared_ints;
#[cfg(feature = "python")]
mod texts_from_python;

pub use encoder::Encoder;
pub use error::{Error, Rank, Result};
