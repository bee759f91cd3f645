//! The header fields and query parameters a rule reads to decide, and
//! whether a request carries one of them more than once.
//!
//! A field a rule reads (its `header:` and `query:` key sources,
//! `tiers.by`, `match.header`, the token header of a `jwt:` source) must
//! have one value: with two, an upstream may read either, so a client could
//! be limited as one caller and served as another (docs/configuration.md,
//! "A field read for a decision is read once"). Such a request is ambiguous.
//! One field line whose value holds a comma is one value; the client-IP
//! header is a list by its own syntax and is never read here.
//!
//! The test costs next to nothing when nothing repeats: a header map in
//! which no name repeats holds no second line of any field (one comparison
//! for all of them), and the query is scanned only by rules that read it.

use http::{HeaderMap, HeaderName};

use super::KeySource;

/// The fields one rule reads to decide, each once, in the order first met.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldsRead {
    headers: Vec<HeaderName>,
    query: Vec<String>,
}

/// Which of a rule's [`FieldsRead`] a request carries twice: an index, so
/// that refusals stay plain data ([`FieldsRead::field`] names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldAt(usize);

/// A field a rule reads, named as the request spells it (the name, never a
/// value: values can be credentials).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field<'a> {
    /// A header field, by its lower-case name.
    Header(&'a HeaderName),
    /// A query parameter, by its name.
    Query(&'a str),
}

impl FieldsRead {
    /// What a rule with these parts reads: the names of its `match.header`
    /// entries, its key sources and `tiers.by`, and `jwt_header` (the
    /// `[identity.jwt] header`) when a `jwt:` source reads a token.
    pub fn of<'s>(
        match_headers: impl IntoIterator<Item = &'s HeaderName>,
        sources: impl IntoIterator<Item = &'s KeySource>,
        jwt_header: Option<&HeaderName>,
    ) -> FieldsRead {
        let mut read = FieldsRead::default();
        for name in match_headers {
            read.add_header(name);
        }
        for source in sources {
            match source {
                KeySource::Header(name) => read.add_header(name),
                KeySource::Query(name) if !read.query.contains(name) => {
                    read.query.push(name.clone())
                }
                KeySource::Jwt(_) => {
                    if let Some(name) = jwt_header {
                        read.add_header(name);
                    }
                }
                _ => {}
            }
        }
        read
    }

    fn add_header(&mut self, name: &HeaderName) {
        if !self.headers.contains(name) {
            self.headers.push(name.clone());
        }
    }

    /// Whether the rule reads no header field and no query parameter (the
    /// request path's test then is this one comparison).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty() && self.query.is_empty()
    }

    /// The first field the request (its `headers` and raw `query`) carries
    /// more than once; `None` when each is there at most once.
    #[inline]
    pub fn ambiguous(&self, headers: &HeaderMap, query: Option<&str>) -> Option<FieldAt> {
        // A map in which no name repeats holds no second line of any field.
        if headers.len() != headers.keys_len() {
            let twice = self
                .headers
                .iter()
                .position(|name| headers.get_all(name).iter().nth(1).is_some());
            if let Some(index) = twice {
                return Some(FieldAt(index));
            }
        }
        let query = query?;
        self.query
            .iter()
            .position(|name| occurs_twice(query, name))
            .map(|index| FieldAt(self.headers.len() + index))
    }

    /// The field `at` names.
    pub fn field(&self, at: FieldAt) -> Field<'_> {
        match self.headers.get(at.0) {
            Some(name) => Field::Header(name),
            None => Field::Query(&self.query[at.0 - self.headers.len()]),
        }
    }
}

impl Field<'_> {
    /// The field's name alone (`x-api-key`, `key`).
    pub fn name(&self) -> &str {
        match self {
            Field::Header(name) => name.as_str(),
            Field::Query(name) => name,
        }
    }

    /// Where the field is: `header` or `query` (as OpenAPI's `in` says).
    pub fn location(&self) -> &'static str {
        match self {
            Field::Header(_) => "header",
            Field::Query(_) => "query",
        }
    }

    /// The field as a key source writes it: `header:x-api-key`, `query:key`.
    pub fn to_source(&self) -> String {
        format!("{}:{}", self.location(), self.name())
    }
}

impl std::fmt::Display for Field<'_> {
    /// `header x-api-key`, `query parameter key`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Field::Header(name) => write!(f, "header {name}"),
            Field::Query(name) => write!(f, "query parameter {name}"),
        }
    }
}

/// Whether the raw `query` holds two `name` pairs (`name=…` or a bare
/// `name`), names compared as [`super::query_value`] compares them.
fn occurs_twice(query: &str, name: &str) -> bool {
    query
        .split('&')
        .filter(|pair| super::query_name_is(pair.split_once('=').map_or(*pair, |(k, _)| k), name))
        .nth(1)
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, http::HeaderValue::from_static(value));
        }
        map
    }

    fn read() -> FieldsRead {
        let api_key = HeaderName::from_static("x-api-key");
        let plan = HeaderName::from_static("x-plan");
        FieldsRead::of(
            [&plan],
            &[
                KeySource::Ip,
                KeySource::Header(api_key),
                KeySource::Query("key".into()),
                KeySource::Jwt(crate::key::jwt::ClaimPath(vec!["sub".into()])),
            ],
            Some(&http::header::AUTHORIZATION),
        )
    }

    #[test]
    fn a_field_read_twice_is_ambiguous_and_named_without_its_value() {
        let read = read();
        for (sent, query, named) in [
            (
                headers(&[("x-api-key", "fresh"), ("x-api-key", "a")]),
                None,
                "header x-api-key",
            ),
            (
                headers(&[("x-plan", "free"), ("x-plan", "paid")]),
                None,
                "header x-plan",
            ),
            (
                headers(&[("authorization", "Bearer a"), ("authorization", "Bearer b")]),
                None,
                "header authorization",
            ),
            (
                HeaderMap::new(),
                Some("key=fresh&key=a"),
                "query parameter key",
            ),
            (
                HeaderMap::new(),
                Some("key=fresh&x=1&key"),
                "query parameter key",
            ),
            (
                HeaderMap::new(),
                Some("key=fresh&k%65y=a"),
                "query parameter key",
            ),
        ] {
            let at = read.ambiguous(&sent, query);
            let at = at.unwrap_or_else(|| panic!("{sent:?} {query:?}"));
            assert_eq!(read.field(at).to_string(), named);
        }
    }

    #[test]
    fn one_line_with_a_comma_and_fields_no_rule_reads_are_not_ambiguous() {
        let read = read();
        for (sent, query) in [
            (headers(&[("x-api-key", "fresh, a")]), Some("key=a,b")),
            (
                headers(&[("x-other", "1"), ("x-other", "2"), ("x-api-key", "k")]),
                Some("other=1&other=2&key=k&keys=1&akey=2"),
            ),
            (
                headers(&[
                    ("x-forwarded-for", "192.0.2.1"),
                    ("x-forwarded-for", "192.0.2.2"),
                ]),
                None,
            ),
        ] {
            assert_eq!(read.ambiguous(&sent, query), None, "{sent:?} {query:?}");
        }
        // A rule reading nothing is never ambiguous.
        let nothing = FieldsRead::of(
            std::iter::empty::<&HeaderName>(),
            &[KeySource::Ip, KeySource::Host],
            None,
        );
        assert!(nothing.is_empty());
        let twice = headers(&[("x-api-key", "a"), ("x-api-key", "b")]);
        assert_eq!(nothing.ambiguous(&twice, Some("key=1&key=2")), None);
        // The token header counts only for a rule with a jwt: source.
        let no_jwt = FieldsRead::of(
            std::iter::empty::<&HeaderName>(),
            &[KeySource::Ip],
            Some(&http::header::AUTHORIZATION),
        );
        let tokens = headers(&[("authorization", "Bearer a"), ("authorization", "Bearer b")]);
        assert_eq!(no_jwt.ambiguous(&tokens, None), None);
    }
}
