//! Special tokens: finding them in text and deciding, per call, which ones split the text
//! (allowed), which ones are an error (disallowed) and which are plain text.

use aho_corasick::{AhoCorasick, MatchKind};
use rustc_hash::FxHashSet;

use crate::error::{Error, Rank, Result};

/// A set of special tokens chosen by the caller.
#[derive(Debug, Clone, Default)]
pub enum SpecialSet {
    #[default]
    Nothing,
    All,
    /// All special tokens except those the caller allowed (tiktoken's `disallowed_special="all"`).
    AllButAllowed,
    Ids(FxHashSet<Rank>),
}

/// Per-call rules for special tokens. `extra_disallowed` holds strings that the caller
/// disallowed although they are not special tokens; like tiktoken, finding one is an error.
#[derive(Debug, Clone, Default)]
pub struct SpecialPolicy {
    pub allowed: SpecialSet,
    pub disallowed: SpecialSet,
    pub extra_disallowed: Vec<String>,
}

impl SpecialPolicy {
    /// No special token is recognised and none is an error (`encode_ordinary`).
    pub fn ordinary() -> Self {
        Self::default()
    }

    /// tiktoken's default for `encode`: nothing allowed, everything disallowed.
    pub fn strict() -> Self {
        Self { allowed: SpecialSet::Nothing, disallowed: SpecialSet::AllButAllowed, extra_disallowed: vec![] }
    }

    pub fn allow_all() -> Self {
        Self { allowed: SpecialSet::All, disallowed: SpecialSet::Nothing, extra_disallowed: vec![] }
    }

    #[inline]
    pub fn is_allowed(&self, id: Rank) -> bool {
        match &self.allowed {
            SpecialSet::Nothing => false,
            SpecialSet::All => true,
            SpecialSet::AllButAllowed => false,
            SpecialSet::Ids(s) => s.contains(&id),
        }
    }

    #[inline]
    pub fn is_disallowed(&self, id: Rank) -> bool {
        match &self.disallowed {
            SpecialSet::Nothing => false,
            SpecialSet::All => true,
            SpecialSet::AllButAllowed => !self.is_allowed(id),
            SpecialSet::Ids(s) => s.contains(&id),
        }
    }

    fn needs_scan(&self) -> bool {
        !matches!(self.allowed, SpecialSet::Nothing) || !matches!(self.disallowed, SpecialSet::Nothing)
    }
}

/// One occurrence of a special token in a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialMatch {
    pub start: usize,
    pub end: usize,
    pub id: Rank,
}

/// Finds every occurrence of every special token (overlapping ones included).
///
/// A special token that is the empty string occurs nowhere as far as splitting goes: an
/// allowed one never becomes a token (tiktoken loops forever there). But tiktoken's check
/// for disallowed tokens, a regex search, finds an empty one at the start of every text,
/// so a call that disallows it fails whatever the text, and so does one here
/// ([`SpecialMatcher::check_disallowed`]).
pub struct SpecialMatcher {
    automaton: Option<AhoCorasick>,
    ids: Vec<Rank>,
    /// The ids of the special tokens that are the empty string.
    empty: Vec<Rank>,
}

impl SpecialMatcher {
    pub fn new<'a>(tokens: impl IntoIterator<Item = (&'a str, Rank)>) -> Result<Self> {
        let (empty, tokens): (Vec<_>, Vec<_>) = tokens.into_iter().partition(|(t, _): &(&str, Rank)| t.is_empty());
        let empty = empty.into_iter().map(|(_, id)| id).collect();
        let (texts, ids): (Vec<&str>, Vec<Rank>) = tokens.into_iter().unzip();
        let automaton = if texts.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::Standard)
                    .build(&texts)
                    .map_err(|e| Error::InvalidVocabulary(format!("special tokens: {e}")))?,
            )
        };
        Ok(Self { automaton, ids, empty })
    }

    /// Occurrences sorted by start, longest first at the same start.
    /// Empty unless the policy needs special tokens to be found at all.
    pub fn find(&self, text: &str, policy: &SpecialPolicy) -> Vec<SpecialMatch> {
        let Some(ac) = &self.automaton else { return Vec::new() };
        if !policy.needs_scan() {
            return Vec::new();
        }
        let mut v: Vec<SpecialMatch> = ac
            .find_overlapping_iter(text)
            .map(|m| SpecialMatch { start: m.start(), end: m.end(), id: self.ids[m.pattern().as_usize()] })
            .collect();
        v.sort_unstable_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
        v
    }

    /// Whether `policy` disallows the empty string, as a special token or as an extra
    /// string: then every text holds a disallowed token, at its start.
    #[inline]
    pub fn disallows_empty(&self, policy: &SpecialPolicy) -> bool {
        self.empty.iter().any(|&id| policy.is_disallowed(id)) || policy.extra_disallowed.iter().any(String::is_empty)
    }

    /// Fails with the leftmost disallowed special token (or disallowed extra string) in
    /// `text` (`matches`: what [`SpecialMatcher::find`] found there under `policy`). A
    /// disallowed empty string is found at the start of every text, as tiktoken finds it.
    pub fn check_disallowed(&self, text: &str, matches: &[SpecialMatch], policy: &SpecialPolicy) -> Result<()> {
        if self.disallows_empty(policy) {
            return Err(Error::DisallowedSpecial(String::new()));
        }
        let mut first: Option<(usize, usize)> =
            matches.iter().find(|m| policy.is_disallowed(m.id)).map(|m| (m.start, m.end));
        for extra in &policy.extra_disallowed {
            if extra.is_empty() {
                continue;
            }
            if let Some(pos) = text.find(extra.as_str()) {
                if first.is_none_or(|(s, _)| pos < s) {
                    first = Some((pos, pos + extra.len()));
                }
            }
        }
        match first {
            Some((s, e)) => Err(Error::DisallowedSpecial(text[s..e].to_string())),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_overlapping_and_orders_longest_first() {
        let m = SpecialMatcher::new([("<|a|>", 1), ("<|a|>b", 2), ("|>", 3)]).unwrap();
        let got = m.find("x<|a|>b", &SpecialPolicy::allow_all());
        assert_eq!(got[0], SpecialMatch { start: 1, end: 7, id: 2 });
        assert_eq!(got[1], SpecialMatch { start: 1, end: 6, id: 1 });
        assert_eq!(got[2], SpecialMatch { start: 4, end: 6, id: 3 });
        assert!(m.find("x<|a|>b", &SpecialPolicy::ordinary()).is_empty());
    }

    #[test]
    fn disallowed_detection() {
        let m = SpecialMatcher::new([("<|a|>", 1), ("<|b|>", 2)]).unwrap();
        let text = "hi <|b|> and <|a|>";
        let mut p = SpecialPolicy::strict();
        let found = m.find(text, &p);
        assert_eq!(m.check_disallowed(text, &found, &p), Err(Error::DisallowedSpecial("<|b|>".into())));
        p.allowed = SpecialSet::Ids([2].into_iter().collect());
        assert_eq!(m.check_disallowed(text, &found, &p), Err(Error::DisallowedSpecial("<|a|>".into())));
        p.allowed = SpecialSet::All;
        assert!(m.check_disallowed(text, &found, &p).is_ok());
        let p = SpecialPolicy { extra_disallowed: vec!["and".into()], ..SpecialPolicy::ordinary() };
        assert_eq!(m.check_disallowed(text, &[], &p), Err(Error::DisallowedSpecial("and".into())));
    }

    #[test]
    fn an_empty_special_token_is_never_found_but_fails_every_text_that_disallows_it() {
        let m = SpecialMatcher::new([("", 7), ("<|a|>", 1)]).unwrap();
        assert_eq!(m.find("x<|a|>", &SpecialPolicy::allow_all()), vec![SpecialMatch { start: 1, end: 6, id: 1 }]);
        let empty = Err(Error::DisallowedSpecial(String::new()));
        for text in ["", "x", "x<|a|>"] {
            let p = SpecialPolicy::strict();
            assert_eq!(m.check_disallowed(text, &m.find(text, &p), &p), empty, "{text:?}");
        }
        // Allowed, or left out of the disallowed set: no error, and nothing found.
        for p in [SpecialPolicy::allow_all(), SpecialPolicy::ordinary(), SpecialPolicy { disallowed: SpecialSet::Ids([1].into_iter().collect()), ..SpecialPolicy::ordinary() }] {
            assert!(!m.disallows_empty(&p));
            assert!(m.check_disallowed("x", &m.find("x", &p), &p).is_ok());
        }
        // Only the empty token disallowed: every text fails, even one holding another.
        let p = SpecialPolicy { disallowed: SpecialSet::Ids([7].into_iter().collect()), ..SpecialPolicy::ordinary() };
        assert_eq!(m.check_disallowed("<|a|>", &m.find("<|a|>", &p), &p), empty);
        // An empty string disallowed as an extra (not a special token of the matcher).
        let plain = SpecialMatcher::new([("<|a|>", 1)]).unwrap();
        let p = SpecialPolicy { extra_disallowed: vec![String::new()], ..SpecialPolicy::ordinary() };
        assert!(plain.disallows_empty(&p));
        assert_eq!(plain.check_disallowed("x", &[], &p), empty);
    }
}
