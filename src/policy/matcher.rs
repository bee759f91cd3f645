//! A rule's `match`, precompiled: path globs parsed once, so matching a
//! request compares bytes only. [`Matcher::mismatch`] says which field did
//! not fit, so that `POST /admin/explain` reports the very test the request
//! path makes ([`Matcher::matches`] is that test).

use http::{HeaderName, HeaderValue};
use ipnet::IpNet;

use crate::config::MatchConfig;
use crate::key::client_ip::canonical;
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
    pub fn new(config: &MatchConfig) -> Matcher {
        Matcher {
            path: config.path.clone(),
            path_prefix: config.path_prefix.clone(),
            path_glob: config.path_glob.iter().map(|g| PathGlob::new(g)).collect(),
            path_glob_text: config.path_glob.clone(),
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
            Mismatch::Unit => "the rule counts the WebSocket messages (unit = \"message\") of \
                               the tunnels handshakes it matches open, never a request"
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
}
