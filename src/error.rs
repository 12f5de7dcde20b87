//! The one error type of the engine. The Python bindings map each variant to a Python
//! exception in exactly one place (`python.rs`), so the core never depends on pyo3.

use thiserror::Error;

/// Token id type, as in tiktoken (`Rank`).
pub type Rank = u32;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// The split pattern does not compile.
    #[error("invalid split pattern {pattern:?}: {message}")]
    InvalidPattern { pattern: String, message: String },

    /// The vocabulary itself is inconsistent (duplicate ids, ...).
    #[error("invalid vocabulary: {0}")]
    InvalidVocabulary(String),

    /// The regex engine gave up (e.g. its backtrack limit) while splitting text.
    /// Text is never skipped silently: the whole call fails.
    #[error("the split pattern failed on the input text: {0}")]
    RegexRuntime(String),

    /// A piece of text contains bytes the vocabulary cannot represent
    /// (only possible with custom vocabularies that lack some single bytes).
    #[error("the byte sequence {0:?} cannot be encoded: the vocabulary has no token for it")]
    UnencodableBytes(Vec<u8>),

    /// Text contains a special token that the caller did not allow.
    #[error("disallowed special token {0:?}")]
    DisallowedSpecial(String),

    /// A token id that is not in the vocabulary was given for decoding.
    #[error("token id {0} is not in the vocabulary")]
    UnknownTokenId(Rank),

    /// A byte string that is not a single token was given to `encode_single_token`.
    #[error("not a single token: {0:?}")]
    UnknownToken(Vec<u8>),

    /// The work was stopped before its end: training by its progress callback, encoding
    /// by its caller (e.g. Ctrl-C in Python).
    #[error("stopped before the end")]
    Cancelled,

    /// Training's input is beyond what the merge loop can index.
    #[error("the training corpus is too large: {0}")]
    CorpusTooLarge(String),

    /// A piece (one match of the split pattern) longer than merging can index (4 GiB).
    #[error("a piece of {0} bytes is longer than tokenmill can merge (under 4 GiB): split the text")]
    PieceTooLong(usize),

    /// A thread pool could not be created.
    #[error("could not start worker threads: {0}")]
    ThreadPool(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
