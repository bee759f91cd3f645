//! A rule's `match`, precompiled: path globs parsed once, so matching a
//! request compares bytes only. [`Matcher::mismatch`] says which field did
//! not fit, so that `POST /admin/explain` reports the very test the request
//! path makes ([`Matcher::matches`] is that test).

use crate::config::MatchConfig;
use crate::key::glob::PathGlob;
use crate::key::RequestFacts;

/// A rule's `match`: every given field must fit; within a field any entry may.
#[derive(Debug, Default)]
pub struct Matcher {
    path: Vec<String>,
    path_prefix: Vec<String>,
    path_glob: Vec<PathGlob>,
    /// The globs as written, for [`Mismatch::explain`].
    path_glob_text: Vec<String>,
    method: Vec<http::Method>,
    host: Vec<String>,
    /// `match.domain`: the rule decides rate limit service calls, and no
    /// request fits it.
    service: bool,
}

/// The first field of a `match` that a request does not fit, in the order
/// they are tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// The rule decides rate limit service calls (`match.domain`).
    Domain,
    Method,
    Path,
    PathPrefix,
    PathGlob,
    Host,
}

impl Matcher {
    pub fn new(config: &MatchConfig) -> Matcher {
        Matcher {
            path: config.path.clone(),
            path_prefix: config.path_prefix.clone(),
            path_glob: config.path_glob.iter().map(|g| PathGlob::new(g)).collect(),
            path_glob_text: config.path_glob.clone(),
            method: config.method.clone(),
            host: config.host.clone(),
            service: config.is_service(),
        }
    }

    /// Whether the request fits.
    #[inline]
    pub fn matches(&self, facts: &RequestFacts<'_>) -> bool {
        self.mismatch(facts).is_none()
    }

    /// The first field the request does not fit; `None` when it fits.
    #[inline]
    pub fn mismatch(&self, facts: &RequestFacts<'_>) -> Option<Mismatch> {
        if self.service {
            return Some(Mismatch::Domain);
        }
        if !(self.method.is_empty() || self.method.iter().any(|m| m == facts.method)) {
            return Some(Mismatch::Method);
        }
        if !(self.path.is_empty() || self.path.iter().any(|p| p == facts.path)) {
            return Some(Mismatch::Path);
        }
        if !(self.path_prefix.is_empty()
            || self
                .path_prefix
                .iter()
                .any(|p| facts.path.starts_with(p.as_str())))
        {
            return Some(Mismatch::PathPrefix);
        }
        if !(self.path_glob.is_empty() || self.path_glob.iter().any(|g| g.matches(facts.path))) {
            return Some(Mismatch::PathGlob);
        }
        if !(self.host.is_empty()
            || facts
                .host
                .is_some_and(|h| self.host.iter().any(|c| c.eq_ignore_ascii_case(h))))
        {
            return Some(Mismatch::Host);
        }
        None
    }
}

impl Mismatch {
    /// The field's name as the config writes it (`method`, `path_prefix`…).
    pub fn field(self) -> &'static str {
        match self {
            Mismatch::Domain => "domain",
            Mismatch::Method => "method",
            Mismatch::Path => "path",
            Mismatch::PathPrefix => "path_prefix",
            Mismatch::PathGlob => "path_glob",
            Mismatch::Host => "host",
        }
    }

    /// A sentence saying what the request had and what the rule wants.
    pub fn explain(self, matcher: &Matcher, facts: &RequestFacts<'_>) -> String {
        let list = |items: &mut dyn Iterator<Item = String>| {
            items
                .map(|item| format!("\"{item}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Mismatch::Domain => "the rule decides rate limit service calls (match.domain), \
                                 never proxied requests"
                .to_owned(),
            Mismatch::Method => format!(
                "method {} is not one of {}",
                facts.method,
                list(&mut matcher.method.iter().map(ToString::to_string))
            ),
            Mismatch::Path => format!(
                "path \"{}\" is not one of {}",
                facts.path,
                list(&mut matcher.path.iter().cloned())
            ),
            Mismatch::PathPrefix => format!(
                "path \"{}\" starts with none of {}",
                facts.path,
                list(&mut matcher.path_prefix.iter().cloned())
            ),
            Mismatch::PathGlob => format!(
                "path \"{}\" fits none of the globs {}",
                facts.path,
                list(&mut matcher.path_glob_text.iter().cloned())
            ),
            Mismatch::Host => match facts.host {
                Some(host) => format!(
                    "host \"{host}\" is not one of {}",
                    list(&mut matcher.host.iter().cloned())
                ),
                None => format!(
                    "the request names no host; the rule wants one of {}",
                    list(&mut matcher.host.iter().cloned())
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::compile;
    use http::{HeaderMap, Method};

    #[test]
    fn the_first_field_that_does_not_fit_is_named_with_what_it_wanted() {
        let policy = compile(
            r#"
[[rule]]
name = "writes"
match = { method = ["POST"], path_prefix = "/api", path_glob = ["/api/*/items"], host = ["api.example.com"] }
rate = "1/m"
"#,
        );
        let matcher = &policy.rules[0].matcher;
        let headers = HeaderMap::new();
        let facts = |method: &'static Method, path: &'static str, host| RequestFacts {
            method,
            path,
            query: None,
            host,
            headers: &headers,
            client_ip: std::net::Ipv4Addr::LOCALHOST.into(),
            claims: None,
        };
        let fits = facts(&Method::POST, "/api/v1/items", Some("API.example.com"));
        assert_eq!(matcher.mismatch(&fits), None);
        assert!(matcher.matches(&fits));
        let get = facts(&Method::GET, "/api/v1/items", Some("api.example.com"));
        assert_eq!(matcher.mismatch(&get), Some(Mismatch::Method));
        assert_eq!(
            Mismatch::Method.explain(matcher, &get),
            "method GET is not one of \"POST\""
        );
        let outside = facts(&Method::POST, "/web", Some("api.example.com"));
        assert_eq!(matcher.mismatch(&outside), Some(Mismatch::PathPrefix));
        let other = facts(&Method::POST, "/api/v1/users", Some("api.example.com"));
        assert_eq!(matcher.mismatch(&other), Some(Mismatch::PathGlob));
        assert!(Mismatch::PathGlob
            .explain(matcher, &other)
            .contains("\"/api/*/items\""));
        let hostless = facts(&Method::POST, "/api/v1/items", None);
        assert_eq!(matcher.mismatch(&hostless), Some(Mismatch::Host));
        assert!(!matcher.matches(&hostless));
    }
}
