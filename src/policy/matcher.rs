//! A rule's `match`, precompiled: path globs parsed once, so matching a
//! request compares bytes only. [`Matcher::mismatch`] says which field did
//! not fit, so that `POST /admin/explain` reports the very test the request
//! path makes ([`Matcher::matches`] is that test).
//!
//! Requests are matched on their folded path ([`RequestFacts::path`]), so
//! the patterns are folded the same way once, here: `match.path` and
//! `path_glob` as the path is, a `path_prefix` keeping its trailing slash
//! (docs/configuration.md, "Paths an upstream treats alike"). A `[[route]]`'s
//! match is a rule's, folded alike.

use http::{HeaderName, HeaderValue};
use ipnet::IpNet;

use crate::config::MatchConfig;
use crate::key::client_ip::canonical;
use crate::key::fold::{fold_pattern, PathsAlike};
use crate::key::glob::PathGlob;
use crate::key::RequestFacts;

/// A rule's `match`: every given field must fit; within a field any entry may.
#[derive(Debug, Default)]
pub struct Matcher {
    /// Folded as request paths are.
    path: Vec<String>,
    /// Folded as request paths are, but each keeps its trailing slash.
    path_prefix: Vec<String>,
    /// Whether a prefix ending in `/` also fits the path without it
    /// (`server.paths_alike` has "trailing_slash": `/api/` fits `/api`).
    prefix_fits_bare: bool,
    path_glob: Vec<PathGlob>,
    /// The globs folded, for [`Mismatch::explain`].
    path_glob_text: Vec<String>,
    method: Vec<http::Method>,
    host: Vec<String>,
    header: Vec<(HeaderName, Vec<HeaderValue>)>,
    client: Vec<IpNet>,
    /// Set when no request fits, whatever it holds: `match.domain` (the
    /// rule decides rate limit service calls) or `unit = "message"` (the
    /// rule counts the messages of the tunnels handshakes open,
    /// [`Matcher::fits_handshake`]). One test per rule on the request path.
    elsewhere: Option<Mismatch>,
}

/// The first field of a `match` that a request does not fit, in the order
/// they are tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// The rule decides rate limit service calls (`match.domain`).
    Domain,
    /// The rule counts WebSocket messages (`unit = "message"`), never a
    /// request.
    Unit,
    Method,
    Path,
    PathPrefix,
    PathGlob,
    Host,
    Header,
    Client,
}

impl Matcher {
    /// The matcher of `config`, its paths folded as `alike` says.
    pub fn new(config: &MatchConfig, alike: PathsAlike) -> Matcher {
        let folded = |patterns: &[String], alike| -> Vec<String> {
            (patterns.iter())
                .map(|pattern| fold_pattern(pattern, alike))
                .collect()
        };
        let path_glob_text = folded(&config.path_glob, alike);
        Matcher {
            path: folded(&config.path, alike),
            path_prefix: folded(&config.path_prefix, alike.keeping_trailing_slash()),
            prefix_fits_bare: alike.trailing_slash,
            path_glob: path_glob_text.iter().map(|g| PathGlob::new(g)).collect(),
            path_glob_text,
            method: config.method.clone(),
            host: config.host.clone(),
            header: config.header.clone(),
            client: config.client.clone(),
            elsewhere: config.is_service().then_some(Mismatch::Domain),
        }
    }

    /// The matcher of a rule that counts WebSocket messages: no request
    /// fits it, and a handshake is asked [`Matcher::fits_handshake`].
    pub fn counting_messages(mut self, messages: bool) -> Matcher {
        if messages && self.elsewhere.is_none() {
            self.elsewhere = Some(Mismatch::Unit);
        }
        self
    }

    /// Whether a WebSocket handshake fits a rule that counts its tunnel's
    /// messages: every field of its `match`, as for a request.
    #[inline]
    pub fn fits_handshake(&self, facts: &RequestFacts<'_>) -> bool {
        self.elsewhere != Some(Mismatch::Domain) && self.mismatched_field(facts).is_none()
    }

    /// Whether every request from the client `ip` fits, whatever it asks:
    /// the `match` has no field but `client`, and `ip` is within it.
    pub fn fits_every_request_from(&self, ip: std::net::IpAddr) -> bool {
        self.elsewhere.is_none()
            && self.method.is_empty()
            && self.path.is_empty()
            && self.path_prefix.is_empty()
            && self.path_glob.is_empty()
            && self.host.is_empty()
            && self.header.is_empty()
            && (self.client.is_empty() || {
                let ip = canonical(ip);
                self.client.iter().any(|net| net.contains(&ip))
            })
    }

    /// The headers its `match.header` reads.
    pub fn header_names(&self) -> impl Iterator<Item = &HeaderName> {
        self.header.iter().map(|(name, _)| name)
    }

    /// Whether the request fits.
    #[inline]
    pub fn matches(&self, facts: &RequestFacts<'_>) -> bool {
        self.mismatch(facts).is_none()
    }

    /// The first field the request does not fit; `None` when it fits.
    #[inline]
    pub fn mismatch(&self, facts: &RequestFacts<'_>) -> Option<Mismatch> {
        if let Some(elsewhere) = self.elsewhere {
            return Some(elsewhere);
        }
        self.mismatched_field(facts)
    }

    /// The first field of the `match` the request does not fit.
    #[inline]
    fn mismatched_field(&self, facts: &RequestFacts<'_>) -> Option<Mismatch> {
        if !(self.method.is_empty() || self.method.iter().any(|m| m == facts.method)) {
            return Some(Mismatch::Method);
        }
        if !(self.path.is_empty() || self.path.iter().any(|p| p == facts.path)) {
            return Some(Mismatch::Path);
        }
        if !(self.path_prefix.is_empty() || self.fits_a_prefix(facts.path)) {
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
        if self.first_unmet_header(facts).is_some() {
            return Some(Mismatch::Header);
        }
        if !(self.client.is_empty() || {
            let ip = canonical(facts.client_ip);
            self.client.iter().any(|net| net.contains(&ip))
        }) {
            return Some(Mismatch::Client);
        }
        None
    }

    /// Whether `path` starts with one of the prefixes, or is one ending in
    /// `/` without that slash, when the upstream serves a trailing slash
    /// alike.
    #[inline]
    fn fits_a_prefix(&self, path: &str) -> bool {
        self.path_prefix.iter().any(|prefix| {
            path.starts_with(prefix.as_str())
                || (self.prefix_fits_bare
                    && prefix.len() == path.len() + 1
                    && prefix.len() > 1
                    && prefix.ends_with('/')
                    && prefix.starts_with(path))
        })
    }

    /// The first `match.header` entry the request does not meet: a value
    /// of that header (any of its lines) must equal one of the entry's.
    #[inline]
    fn first_unmet_header(
        &self,
        facts: &RequestFacts<'_>,
    ) -> Option<&(HeaderName, Vec<HeaderValue>)> {
        self.header.iter().find(|(name, wanted)| {
            !facts
                .headers
                .get_all(name)
                .iter()
                .any(|value| wanted.contains(value))
        })
    }
}

impl Mismatch {
    /// The field's name as the config writes it (`method`, `path_prefix`…).
    pub fn field(self) -> &'static str {
        match self {
            Mismatch::Domain => "domain",
            Mismatch::Unit => "unit",
            Mismatch::Method => "method",
            Mismatch::Path => "path",
            Mismatch::PathPrefix => "path_prefix",
            Mismatch::PathGlob => "path_glob",
            Mismatch::Host => "host",
            Mismatch::Header => "header",
            Mismatch::Client => "client",
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
            Mismatch::Unit => "the rule counts messages (unit = \"message\"): those of the \
                               WebSocket tunnels and gRPC calls it matches, never a request"
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
            // The request's value is not shown: a header may carry a
            // credential (docs/operations.md, "Keys in logs and admin views").
            Mismatch::Header => match matcher.first_unmet_header(facts) {
                Some((name, wanted)) => {
                    let wanted = list(
                        &mut wanted
                            .iter()
                            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned()),
                    );
                    if facts.headers.contains_key(name) {
                        format!("header {name} has a value other than {wanted}")
                    } else {
                        format!("the request has no {name} header; the rule wants one of {wanted}")
                    }
                }
                None => "every header the rule names has a value it wants".to_owned(),
            },
            Mismatch::Client => format!(
                "client {} is in none of {}",
                canonical(facts.client_ip),
                list(&mut matcher.client.iter().map(ToString::to_string))
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use proptest::prelude::*;

    use super::*;
    use crate::key::path::normalize;
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
            normalized_path: path,
            query: None,
            host,
            headers: &headers,
            client_ip: std::net::Ipv4Addr::LOCALHOST.into(),
            claims: None,
            body: None,
            call: None,
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

    fn request<'a>(headers: &'a HeaderMap, client_ip: &str) -> RequestFacts<'a> {
        RequestFacts {
            method: &Method::GET,
            path: "/",
            normalized_path: "/",
            query: None,
            host: None,
            headers,
            client_ip: client_ip.parse().unwrap(),
            claims: None,
            body: None,
            call: None,
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, http::HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn a_header_fits_when_any_of_its_lines_equals_a_wanted_value_exactly() {
        let policy = compile(
            r#"
[[rule]]
name = "free"
match = { header = { "X-Plan" = ["free", "trial"], "x-app" = "web" } }
rate = "1/m"
"#,
        );
        let matcher = &policy.rules[0].matcher;
        let fits = headers(&[("x-plan", "trial"), ("x-app", "web")]);
        assert_eq!(matcher.mismatch(&request(&fits, "192.0.2.1")), None);
        let second_line = headers(&[("x-plan", "paid"), ("x-plan", "free"), ("x-app", "web")]);
        assert_eq!(matcher.mismatch(&request(&second_line, "192.0.2.1")), None);
        for (sent, why) in [
            (
                headers(&[("x-plan", "Free"), ("x-app", "web")]),
                "header x-plan has a value other than \"free\", \"trial\"",
            ),
            (
                headers(&[("x-plan", "free, trial"), ("x-app", "web")]),
                "header x-plan has a value other than",
            ),
            (
                headers(&[("x-plan", "free")]),
                "the request has no x-app header; the rule wants one of \"web\"",
            ),
        ] {
            let facts = request(&sent, "192.0.2.1");
            assert_eq!(matcher.mismatch(&facts), Some(Mismatch::Header), "{sent:?}");
            let explained = Mismatch::Header.explain(matcher, &facts);
            assert!(explained.starts_with(why), "{explained}");
        }
        // What the request sent is not repeated: it may be a credential.
        let secret = headers(&[("x-plan", "sk_live_secret"), ("x-app", "web")]);
        let explained = Mismatch::Header.explain(matcher, &request(&secret, "192.0.2.1"));
        assert!(!explained.contains("sk_live"), "{explained}");
    }

    #[test]
    fn a_client_fits_when_its_address_is_in_one_of_the_networks() {
        let policy = compile(
            r#"
[[rule]]
name = "office"
match = { client = ["10.0.0.0/8", "2001:db8::/32"] }
rate = "1/m"
"#,
        );
        let matcher = &policy.rules[0].matcher;
        let none = HeaderMap::new();
        for inside in ["10.1.2.3", "::ffff:10.9.9.9", "2001:db8::7"] {
            assert_eq!(matcher.mismatch(&request(&none, inside)), None, "{inside}");
        }
        for outside in ["11.0.0.1", "2001:db9::1", "::1"] {
            let facts = request(&none, outside);
            assert_eq!(
                matcher.mismatch(&facts),
                Some(Mismatch::Client),
                "{outside}"
            );
        }
        assert_eq!(
            Mismatch::Client.explain(matcher, &request(&none, "::ffff:11.0.0.1")),
            "client 11.0.0.1 is in none of \"10.0.0.0/8\", \"2001:db8::/32\""
        );
    }

    /// A matcher of one path field: `path`, `path_prefix` or `path_glob`.
    fn one_field(field: &str, pattern: &str, alike: PathsAlike) -> Matcher {
        let patterns = vec![pattern.to_owned()];
        let config = match field {
            "path" => MatchConfig {
                path: patterns,
                ..MatchConfig::default()
            },
            "path_prefix" => MatchConfig {
                path_prefix: patterns,
                ..MatchConfig::default()
            },
            _ => MatchConfig {
                path_glob: patterns,
                ..MatchConfig::default()
            },
        };
        Matcher::new(&config, alike)
    }

    /// Whether `matcher` fits a GET of `path` (a normalised path), folded
    /// as `alike` says, as the request path folds it.
    fn fits(matcher: &Matcher, path: &str, alike: PathsAlike) -> Option<bool> {
        let folded = crate::key::fold::fold(path, alike).ok()?;
        let headers = HeaderMap::new();
        let facts = RequestFacts {
            path: &folded,
            normalized_path: path,
            ..request(&headers, "192.0.2.1")
        };
        Some(matcher.matches(&facts))
    }

    #[test]
    fn patterns_are_folded_as_request_paths_are() {
        let all = PathsAlike::ALL;
        let login = one_field("path", "/Login/", all);
        for spelling in ["/login", "/LOGIN/", "/login;x=1", "/login/..;/login"] {
            assert_eq!(fits(&login, spelling, all), Some(true), "{spelling}");
        }
        assert_eq!(fits(&login, "/logins", all), Some(false));
        let glob = one_field("path_glob", "/API/*/Report/", all);
        assert_eq!(fits(&glob, "/api/v1;x/report", all), Some(true));
        assert_eq!(fits(&glob, "/api/v1/report/x", all), Some(false));
        let exact = one_field("path", "/login", PathsAlike::NONE);
        assert_eq!(fits(&exact, "/Login", PathsAlike::NONE), Some(false));
    }

    #[test]
    fn a_prefix_keeps_its_slash_and_fits_the_path_without_it() {
        let all = PathsAlike::ALL;
        let api = one_field("path_prefix", "/API/", all);
        for (path, fits_it) in [
            ("/api/", true),
            ("/api", true),
            ("/Api/users", true),
            ("/api;v=2/users", true),
            ("/apix", false),
            ("/ap", false),
            ("/", false),
        ] {
            assert_eq!(fits(&api, path, all), Some(fits_it), "{path}");
        }
        let no_slash = PathsAlike {
            trailing_slash: false,
            ..all
        };
        let api = one_field("path_prefix", "/api/", no_slash);
        assert_eq!(fits(&api, "/api", no_slash), Some(false));
        assert_eq!(fits(&api, "/API/", no_slash), Some(true));
        // The root prefix fits every path.
        let root = one_field("path_prefix", "/", all);
        assert_eq!(fits(&root, "/", all), Some(true));
        assert_eq!(fits(&root, "/x/", all), Some(true));
    }

    /// Paths of a few segments, some with parameters and upper case, none
    /// a dot segment once its parameters are removed (such a path is one
    /// the upstream serves as another: `/a/..;/b` is `/b`).
    fn paths() -> impl Strategy<Value = String> {
        let segment = prop::sample::select(vec![
            "a", "A", "b", "api", "Api", "x;v=1", "A;", ";", "%2F", "%C3%89", "~",
        ]);
        (prop::collection::vec(segment, 0..5), any::<bool>()).prop_map(|(segments, slash)| {
            let mut path = format!("/{}", segments.join("/"));
            if slash && path.len() > 1 {
                path.push('/');
            }
            path
        })
    }

    proptest! {
        /// With every kind alike, a rule fits every path it fits as
        /// written: folding only ever makes a rule match more.
        #[test]
        fn folding_never_makes_a_rule_fit_fewer_paths(
            path in paths(),
            cut in 0usize..40,
            star in 0usize..6,
            field in prop::sample::select(vec!["path", "path_prefix", "path_glob"]),
        ) {
            let Ok(path) = normalize(&path).map(Cow::into_owned) else { return Ok(()) };
            // A pattern the path fits as written: the path, a prefix of
            // it, or a glob with one segment a `*`.
            let pattern = match field {
                "path" => path.clone(),
                "path_prefix" => path[..cut.min(path.len()).max(1)].to_owned(),
                _ => {
                    let mut segments: Vec<&str> = path.split('/').collect();
                    let at = 1 + star % segments.len().max(1);
                    // Not a segment of parameters only, which the
                    // upstream does not see as a segment (`/;x/b` is `/b`).
                    if at < segments.len() && !segments[at].is_empty()
                        && !segments[at].starts_with(';')
                    {
                        segments[at] = "*";
                    }
                    segments.join("/")
                }
            };
            if check_written(&pattern) {
                let written = one_field(field, &pattern, PathsAlike::NONE);
                prop_assume!(fits(&written, &path, PathsAlike::NONE) == Some(true));
                let folded = one_field(field, &pattern, PathsAlike::ALL);
                prop_assert_eq!(
                    fits(&folded, &path, PathsAlike::ALL), Some(true),
                    "{} {:?} fits {:?} as written, not folded", field, pattern, path
                );
            }
        }
    }

    /// Whether config validation would take `pattern` (normal, no `;` on a
    /// dot segment: see `config::matching`).
    fn check_written(pattern: &str) -> bool {
        matches!(normalize(pattern), Ok(Cow::Borrowed(_)))
            && !pattern
                .split('/')
                .any(|segment| matches!(segment.split(';').next(), Some("." | "..")))
    }
}
