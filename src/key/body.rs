//! `body:<pointer>` keys: the value at an RFC 6901 pointer in a JSON request
//! body that sluice read before deciding (at most
//! `server.max_key_body_bytes`: docs/conversation.md).
//!
//! The body is walked once with serde_json, member by member, and nothing is
//! built but the value asked for: every other value is skipped
//! ([`IgnoredAny`]), and a string without escapes is borrowed from the body.
//! The whole body must be one JSON value (a body with anything after it is
//! not JSON, so the key is missing), nested at most serde_json's 128 levels.
//! (A hand-written single pass was tried and measured no faster: its
//! string checks cost what serde_json's do. docs/conversation.md, "What it
//! costs".)
//!
//! A string is the key as it is (so `"42"` and `42` share a bucket); a
//! number or boolean is its JSON text as written (`1.50` stays `1.50`); an
//! object, an array, `null` or no value there is a missing key.

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

use http::{HeaderMap, Method, Request};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::graphql::{self, GraphqlRequest, Operation};
use crate::body_scan::{BodyKind, Pointer};

/// What `body:` and `graphql:` key sources (and `cost = "graphql"`) read of
/// one request: built once a rule that needs them matched it, with the body
/// when sluice read it whole; the GraphQL operation is read from it at most
/// once, when first asked for (a `OnceLock`: the facts are held across
/// the admission's await, so they must be `Sync`).
#[derive(Debug)]
pub struct BodyFacts<'a> {
    /// The body, when it was read whole and says it is JSON.
    json: Option<&'a [u8]>,
    /// How the request carries a GraphQL operation, if it can.
    graphql: Option<GraphqlRequest<'a>>,
    operation: OnceLock<Option<Operation<'a>>>,
}

impl<'a> BodyFacts<'a> {
    /// The facts of `request`, whose body is `body` when it was read whole
    /// within the bound: [`BodyFacts::new`], out of the request path's line
    /// (only requests a rule reads the body of get here).
    #[inline(never)]
    pub fn of<B>(request: &'a Request<B>, body: Option<&'a [u8]>) -> BodyFacts<'a> {
        let query = request.uri().query();
        BodyFacts::new(request.method(), request.headers(), query, body)
    }

    /// The facts of a request of `method` with `headers` and the raw
    /// `query` string, whose body is `body` when it was read whole within
    /// the bound (`None`: there is none, or it was not read).
    pub fn new(
        method: &Method,
        headers: &HeaderMap,
        query: Option<&'a str>,
        body: Option<&'a [u8]>,
    ) -> BodyFacts<'a> {
        let json = body.filter(|_| BodyKind::of(headers) == Some(BodyKind::Json));
        let graphql = if *method == Method::GET {
            query.map(GraphqlRequest::Get)
        } else if let Some(json) = json {
            Some(GraphqlRequest::Json(json))
        } else if is_graphql_document(headers) {
            body.map(GraphqlRequest::Document)
        } else {
            None
        };
        BodyFacts {
            json,
            graphql,
            operation: OnceLock::new(),
        }
    }

    /// The key text at `pointer` in the JSON body ([`value_at`]).
    pub fn value_at(&self, pointer: &Pointer) -> Option<Cow<'a, str>> {
        value_at(self.json?, pointer)
    }

    /// The GraphQL operation the request runs, when it can be read.
    pub fn operation(&self) -> Option<&Operation<'a>> {
        self.operation
            .get_or_init(|| self.graphql.and_then(graphql::read))
            .as_ref()
    }

    /// What `cost = "graphql"` takes: the operation's cost, or 1 when it
    /// cannot be read.
    pub fn graphql_cost(&self) -> u64 {
        self.operation().map_or(1, |operation| operation.cost)
    }
}

/// Whether the body is a GraphQL document (`Content-Type:
/// application/graphql`, parameters aside).
fn is_graphql_document(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/graphql"))
}

/// The key text at `pointer` in `body`, or `None` when it is missing (see
/// the module docs).
pub fn value_at<'b>(body: &'b [u8], pointer: &Pointer) -> Option<Cow<'b, str>> {
    let tokens: smallvec::SmallVec<[(&[u8], Option<usize>); 4]> = pointer.tokens().collect();
    let mut reader = serde_json::Deserializer::from_slice(body);
    let found = Seek { tokens: &tokens }.deserialize(&mut reader).ok()?;
    reader.end().ok()?;
    found
}

/// Looks for the rest of a pointer (`tokens`) in one JSON value.
struct Seek<'t> {
    tokens: &'t [(&'t [u8], Option<usize>)],
}

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = Option<Cow<'de, str>>;

    fn deserialize<D: Deserializer<'de>>(self, value: D) -> Result<Self::Value, D::Error> {
        if self.tokens.is_empty() {
            let raw = <&'de RawValue as serde::Deserialize>::deserialize(value)?;
            return Ok(leaf(raw.get()));
        }
        value.deserialize_any(self)
    }
}

/// The key text of the JSON value `raw` (its text as written), if it is a
/// string, a number or a boolean.
fn leaf(raw: &str) -> Option<Cow<'_, str>> {
    match raw.as_bytes().first()? {
        // Borrowed unless it has escapes (then `&str` fails, and it is
        // unescaped into a copy).
        b'"' => match serde_json::from_str::<&str>(raw) {
            Ok(text) => Some(Cow::Borrowed(text)),
            Err(_) => serde_json::from_str::<String>(raw).ok().map(Cow::Owned),
        },
        b't' | b'f' | b'-' | b'0'..=b'9' => Some(Cow::Borrowed(raw)),
        _ => None,
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = Option<Cow<'de, str>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut members: M) -> Result<Self::Value, M::Error> {
        let (name, rest) = (self.tokens[0].0, &self.tokens[1..]);
        let mut found = None;
        while let Some(matches) = members.next_key_seed(NameIs(name))? {
            if matches {
                // A repeated member: the last one counts, as in serde_json's
                // own `Value::pointer`.
                found = members.next_value_seed(Seek { tokens: rest })?;
            } else {
                members.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut elements: S) -> Result<Self::Value, S::Error> {
        let (index, rest) = (self.tokens[0].1, &self.tokens[1..]);
        let mut found = None;
        let mut at = 0;
        loop {
            if Some(at) == index {
                match elements.next_element_seed(Seek { tokens: rest })? {
                    Some(value) => found = value,
                    None => break,
                }
            } else if elements.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            at += 1;
        }
        Ok(found)
    }

    // Any other value cannot hold the pointer's next token.
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// Whether an object member's name is `.0` (compared unescaped, without
/// copying it when it has no escapes).
struct NameIs<'n>(&'n [u8]);

impl<'de> DeserializeSeed<'de> for NameIs<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, name: D) -> Result<bool, D::Error> {
        name.deserialize_str(self)
    }
}

impl Visitor<'_> for NameIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, name: &str) -> Result<bool, E> {
        Ok(name.as_bytes() == self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(body: &str, pointer: &str) -> Option<String> {
        value_at(body.as_bytes(), &Pointer::parse(pointer).unwrap()).map(Cow::into_owned)
    }

    #[test]
    fn strings_numbers_and_booleans_are_keys_as_written() {
        let body = r#"{"tenant":"acme","n":42,"price":1.50,"ok":true,"neg":-3e2}"#;
        assert_eq!(at(body, "/tenant").as_deref(), Some("acme"));
        assert_eq!(at(body, "/n").as_deref(), Some("42"));
        assert_eq!(at(body, "/price").as_deref(), Some("1.50"));
        assert_eq!(at(body, "/ok").as_deref(), Some("true"));
        assert_eq!(at(body, "/neg").as_deref(), Some("-3e2"));
        // A string and a number of the same text share a bucket.
        assert_eq!(at(r#"{"n":"42"}"#, "/n"), at(body, "/n"));
    }

    #[test]
    fn a_string_is_unescaped_and_borrowed_when_it_has_no_escapes() {
        let body = br#"{"a":"plain","b":"tab\there \u00e9"}"#;
        let plain = value_at(body, &Pointer::parse("/a").unwrap()).unwrap();
        assert!(matches!(plain, Cow::Borrowed("plain")), "{plain:?}");
        let escaped = value_at(body, &Pointer::parse("/b").unwrap()).unwrap();
        assert_eq!(escaped, "tab\there é");
    }

    #[test]
    fn nested_members_array_elements_and_escaped_names_are_followed() {
        let body = r#"{"params":[{"x":1},{"user":{"id":"u-7"}}],"a/b":{"m~n":"z"},
                       "rpc":{"method":"eth_call"}}"#;
        assert_eq!(at(body, "/params/1/user/id").as_deref(), Some("u-7"));
        assert_eq!(at(body, "/rpc/method").as_deref(), Some("eth_call"));
        assert_eq!(at(body, "/a~1b/m~0n").as_deref(), Some("z"));
        assert_eq!(at(r#"{"k\u0065y":"v"}"#, "/key").as_deref(), Some("v"));
        assert_eq!(at(body, "/params/2"), None);
        assert_eq!(at(body, "/params/-"), None);
        assert_eq!(at(body, "/params/01"), None);
    }

    #[test]
    fn everything_else_is_missing() {
        for (body, pointer) in [
            (r#"{"a":{"b":1}}"#, "/a"),      // an object
            (r#"{"a":[1]}"#, "/a"),          // an array
            (r#"{"a":null}"#, "/a"),         // null
            (r#"{"a":1}"#, "/b"),            // absent
            (r#"{"a":1}"#, "/a/b"),          // below a scalar
            (r#"{"a":"x"} trailing"#, "/a"), // not one JSON value
            (r#"{"a":"x""#, "/a"),           // cut off
            ("tenant=acme", "/tenant"),      // not JSON
            ("", "/a"),
        ] {
            assert_eq!(at(body, pointer), None, "{body} {pointer}");
        }
        // Deeper than serde_json's recursion limit: an error, not a crash.
        let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(at(&deep, "/0"), None);
    }

    fn headers(content_type: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::CONTENT_TYPE, content_type.parse().unwrap());
        headers
    }

    #[test]
    fn a_json_body_gives_pointer_values_and_its_graphql_operation() {
        let body = br#"{"query":"query Viewer { viewer { login } }","tenant":"acme"}"#;
        let json = headers("application/json; charset=utf-8");
        let facts = BodyFacts::new(&Method::POST, &json, None, Some(body));
        let tenant = Pointer::parse("/tenant").unwrap();
        assert_eq!(facts.value_at(&tenant).as_deref(), Some("acme"));
        let operation = facts.operation().unwrap();
        assert_eq!(
            (operation.name_text(), operation.kind.as_str()),
            ("Viewer", "query")
        );
        assert_eq!(facts.graphql_cost(), 1);
        // `…+json` is JSON too; another type, or a coded body, is not read.
        let plus = headers("application/vnd.api+json");
        let facts = BodyFacts::new(&Method::POST, &plus, None, Some(body));
        assert_eq!(facts.value_at(&tenant).as_deref(), Some("acme"));
        for other in ["text/plain", "application/x-www-form-urlencoded"] {
            let facts = BodyFacts::new(&Method::POST, &headers(other), None, Some(body));
            assert_eq!(facts.value_at(&tenant), None, "{other}");
            assert!(facts.operation().is_none(), "{other}");
        }
        let mut gzipped = json.clone();
        gzipped.insert(http::header::CONTENT_ENCODING, "gzip".parse().unwrap());
        let facts = BodyFacts::new(&Method::POST, &gzipped, None, Some(body));
        assert_eq!(facts.value_at(&tenant), None);
        // A body that was not read (too long) has no values.
        let facts = BodyFacts::new(&Method::POST, &json, None, None);
        assert_eq!(facts.value_at(&tenant), None);
        assert_eq!(facts.graphql_cost(), 1);
    }

    #[test]
    fn a_graphql_document_or_a_get_gives_the_operation() {
        let document = b"mutation AddStar { addStar(input: {}) { clientMutationId } }";
        let facts = BodyFacts::new(
            &Method::POST,
            &headers("application/graphql"),
            None,
            Some(document),
        );
        let operation = facts.operation().unwrap();
        assert_eq!(
            (operation.name_text(), operation.kind.as_str()),
            ("AddStar", "mutation")
        );
        let query =
            "query=%7B%20a(first%3A%20100)%20%7B%20b(first%3A%2050)%20%7B%20c%20%7D%20%7D%20%7D";
        let facts = BodyFacts::new(&Method::GET, &HeaderMap::new(), Some(query), None);
        let operation = facts.operation().unwrap();
        assert_eq!(operation.name_text(), "anonymous");
        // 1 + 100 requests: a score of 1.01, so 1.
        assert_eq!(facts.graphql_cost(), 1);
        // A GET without a query, or a POST of another type, has none.
        let facts = BodyFacts::new(&Method::GET, &HeaderMap::new(), None, None);
        assert!(facts.operation().is_none());
    }

    #[test]
    fn a_repeated_member_counts_as_its_last() {
        assert_eq!(at(r#"{"a":"1","a":"2"}"#, "/a").as_deref(), Some("2"));
        // All the way down: a later member on the path supersedes.
        assert_eq!(at(r#"{"a":{"b":"x"},"a":{"c":1}}"#, "/a/b"), None);
        assert_eq!(at(r#"{"a":{"b":"x"},"a":1}"#, "/a/b"), None);
        assert_eq!(at(r#"{"a":1,"a":{"b":"y"}}"#, "/a/b").as_deref(), Some("y"));
    }
}
