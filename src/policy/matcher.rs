//! A rule's `match`, precompiled: path globs parsed once, so matching a
//! request compares bytes only.

use crate::config::MatchConfig;
use crate::key::glob::PathGlob;
use crate::key::RequestFacts;

/// A rule's `match`: every given field must fit; within a field any entry may.
#[derive(Debug, Default)]
pub struct Matcher {
    path: Vec<String>,
    path_prefix: Vec<String>,
    path_glob: Vec<PathGlob>,
    method: Vec<http::Method>,
    host: Vec<String>,
}

impl Matcher {
    pub(super) fn new(config: &MatchConfig) -> Matcher {
        Matcher {
            path: config.path.clone(),
            path_prefix: config.path_prefix.clone(),
            path_glob: config.path_glob.iter().map(|g| PathGlob::new(g)).collect(),
            method: config.method.clone(),
            host: config.host.clone(),
        }
    }

    /// Whether the request fits.
    #[inline]
    pub fn matches(&self, facts: &RequestFacts<'_>) -> bool {
        (self.method.is_empty() || self.method.iter().any(|m| m == facts.method))
            && (self.path.is_empty() || self.path.iter().any(|p| p == facts.path))
            && (self.path_prefix.is_empty()
                || self
                    .path_prefix
                    .iter()
                    .any(|p| facts.path.starts_with(p.as_str())))
            && (self.path_glob.is_empty() || self.path_glob.iter().any(|g| g.matches(facts.path)))
            && (self.host.is_empty()
                || facts
                    .host
                    .is_some_and(|h| self.host.iter().any(|c| c.eq_ignore_ascii_case(h))))
    }
}
