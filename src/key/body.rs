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
//! A string is the key as it is after unescaping (so `"42"` and `42` share
//! a bucket); a number is keyed by its value, however it is written
//! (`key/number.rs`: `42`, `42.0` and `4.2e1` are one key); a boolean is
//! `true` or `false`; an object, an array, `null` or no value there is a
//! missing key.

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

use http::{HeaderMap, Method, Request};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::graphql::persisted::Persisted;
use super::graphql::{self, GraphqlRequest, Reading, Unread};
use super::jsonrpc::{self, Calls};
use super::number;
use super::unreadable_body::{judge, JsonText, UnreadableBody};
use crate::body_scan::{BodyKind, Pointer};

/// A request's body as the rules read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyBody<'a> {
    /// The body, whole within `server.max_key_body_bytes` and decoded from
    /// its `Content-Encoding`, if it had one.
    Whole(&'a [u8]),
    /// No body, or an empty one.
    Empty,
    /// Longer than the bound, as sent or once decoded.
    TooLarge,
    /// In a coding sluice does not decode, or broken.
    Undecodable,
}

/// What a rule reads of a request's body: which readings must refuse a
/// body sluice cannot read (docs/conversation.md, "A body sluice cannot
/// read"). `cost = "graphql"` alone is not among them: its `unreadable`
/// decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BodyReading {
    /// `body:` pointers (in the key, `tiers.by` or `reserve`): a JSON
    /// body's values.
    pub pointers: bool,
    /// `graphql:operation`, `graphql:type`: a POSTed GraphQL request.
    pub graphql: bool,
    /// `jsonrpc:method`, `mcp:tool`: a POSTed body's calls, whatever its
    /// type says.
    pub calls: bool,
}

impl BodyReading {
    /// Whether it reads the body at all.
    pub fn any(self) -> bool {
        self.pointers || self.graphql || self.calls
    }
}

/// What `body:` and `graphql:` key sources (and `cost = "graphql"`) read of
/// one request: built once a rule that needs them matched it, with the body
/// when sluice read it whole; the GraphQL request is read from it at most
/// once, when first asked for (a `OnceLock`: the facts are held across
/// the admission's await, so they must be `Sync`).
#[derive(Debug)]
pub struct BodyFacts<'a> {
    /// The body, when it was read whole and says it is JSON.
    json: Option<&'a [u8]>,
    /// How the request carries a GraphQL operation, if it can.
    graphql: Option<GraphqlRequest<'a>>,
    /// Why a body that is there could not be read.
    unread: Option<Unread>,
    /// Where persisted queries are looked up.
    persisted: Persisted<'a>,
    reading: OnceLock<Reading<'a>>,
    /// The body a `POST` sent whole, whatever its type, for its JSON-RPC
    /// calls: a server may read a call sent as `text/plain`, so the calls
    /// are read whatever the body claims to be.
    posted: Option<&'a [u8]>,
    /// Its JSON-RPC calls, read once, when first asked for.
    calls: OnceLock<Calls<'a>>,
    /// The body's length as sent: its `Content-Length`, else the bytes
    /// read when it came whole; `None` when neither is known.
    length: Option<u64>,
    /// The body read whole, whatever its type, for telling whether it can
    /// be read ([`BodyFacts::unreadable`]).
    whole: Option<&'a [u8]>,
    /// Its `Content-Encoding` is one sluice does not decode, or it broke.
    undecodable: bool,
    /// What the request's head says of the body, for which readings apply.
    said: Said,
    /// What [`judge`] made of the whole body, once asked.
    judged: OnceLock<JsonText>,
}

/// What a request's head says its body is.
#[derive(Debug, Clone, Copy)]
struct Said {
    /// `Content-Type` is JSON (`application/json`, `…+json`).
    json: bool,
    /// `Content-Type: application/graphql`.
    graphql_document: bool,
    post: bool,
    get: bool,
}

impl<'a> BodyFacts<'a> {
    /// The facts of `request`, whose body is `body`, with persisted queries
    /// from `persisted`: [`BodyFacts::new`], out of the request path's line
    /// (only requests a rule reads the body of get here).
    #[inline(never)]
    pub fn of<B>(
        request: &'a Request<B>,
        body: KeyBody<'a>,
        persisted: Persisted<'a>,
    ) -> BodyFacts<'a> {
        let query = request.uri().query();
        BodyFacts::new(request.method(), request.headers(), query, body, persisted)
    }

    /// The facts of a request of `method` with `headers` and the raw
    /// `query` string, whose body is `body`.
    pub fn new(
        method: &Method,
        headers: &HeaderMap,
        query: Option<&'a str>,
        body: KeyBody<'a>,
        persisted: Persisted<'a>,
    ) -> BodyFacts<'a> {
        let (whole, unread) = match body {
            KeyBody::Whole(bytes) => (Some(bytes), None),
            KeyBody::Empty => (None, None),
            KeyBody::TooLarge => (None, Some(Unread::TooLarge)),
            KeyBody::Undecodable => (None, Some(Unread::Undecodable)),
        };
        let said = Said {
            json: BodyKind::of_type(headers) == Some(BodyKind::Json),
            graphql_document: is_graphql_document(headers),
            post: *method == Method::POST,
            get: *method == Method::GET,
        };
        let json = whole.filter(|_| said.json);
        let graphql = if said.get {
            query.map(GraphqlRequest::Get)
        } else if let Some(json) = json {
            Some(GraphqlRequest::Json(json))
        } else if said.graphql_document {
            whole.map(GraphqlRequest::Document)
        } else {
            None
        };
        BodyFacts {
            json,
            graphql,
            unread,
            persisted,
            reading: OnceLock::new(),
            posted: whole.filter(|_| said.post),
            calls: OnceLock::new(),
            length: None,
            whole,
            undecodable: unread == Some(Unread::Undecodable),
            said,
            judged: OnceLock::new(),
        }
    }

    /// Why a rule that reads the body as `reading` cannot read it, when a
    /// lenient server still would (a `Content-Encoding` sluice does not
    /// decode, a byte-order mark, UTF-16, bytes after the value, …): the
    /// request is then refused, whatever the rule's `missing`. `None` when
    /// the reading does not apply to this body (a `body:` pointer in a body
    /// that is not JSON), or sluice read it, or no reader would (then
    /// `missing` decides).
    pub fn unreadable(&self, reading: BodyReading) -> Option<UnreadableBody> {
        let said = self.said;
        let as_json = (reading.pointers && said.json)
            || (reading.graphql && said.json && !said.get)
            || (reading.calls && said.post);
        let as_document = reading.graphql && said.graphql_document && !said.get;
        if !as_json && !as_document {
            return None;
        }
        if self.undecodable {
            return Some(UnreadableBody::Coding);
        }
        let whole = self.whole.filter(|_| as_json)?;
        match self.judged.get_or_init(|| judge(whole)) {
            JsonText::Lenient(why) => Some(*why),
            JsonText::Strict | JsonText::NotJson => None,
        }
    }

    /// The same facts, with the body's `length` as sent (see
    /// [`BodyFacts::length`]).
    pub fn with_length(self, length: Option<u64>) -> BodyFacts<'a> {
        BodyFacts { length, ..self }
    }

    /// The key text at `pointer` in the JSON body ([`value_at`]).
    pub fn value_at(&self, pointer: &Pointer) -> Option<Cow<'a, str>> {
        value_at(self.json?, pointer)
    }

    /// The non-negative number at `pointer` in the JSON body
    /// ([`number_at`]).
    pub fn number_at(&self, pointer: &Pointer) -> Option<f64> {
        number_at(self.json?, pointer)
    }

    /// The JSON-RPC calls of a `POST`ed body, read once
    /// (`key/jsonrpc.rs`).
    pub fn calls(&self) -> &Calls<'a> {
        self.calls
            .get_or_init(|| self.posted.map(jsonrpc::read).unwrap_or_default())
    }

    /// The body's length as the client sent it: its `Content-Length`, else
    /// the bytes read when it came whole (chunked) within the bound.
    pub fn length(&self) -> Option<u64> {
        self.length
    }

    /// The GraphQL request, read once: its operations, keys and cost, or
    /// why they cannot be read.
    pub fn graphql(&self) -> &Reading<'a> {
        self.reading.get_or_init(|| match self.graphql {
            Some(request) => graphql::read_all(request, self.persisted),
            None => Reading::unreadable(self.unread.unwrap_or(Unread::NotGraphql)),
        })
    }
}

/// The body length a request's `Content-Length` declares, if it has one
/// that reads as a number.
pub fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
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
    leaf(raw_at(body, pointer)?)
}

/// The number at `pointer` in `body` when it is a JSON number of at least
/// 0 (a string, even of digits, is not one), as a reservation reads it
/// (docs/ai-budgets.md).
pub fn number_at(body: &[u8], pointer: &Pointer) -> Option<f64> {
    let raw = raw_at(body, pointer)?;
    if !raw.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    serde_json::from_str::<f64>(raw)
        .ok()
        .filter(|value| value.is_finite())
}

/// The JSON text of the value at `pointer` in `body`, which must be one
/// JSON value.
fn raw_at<'b>(body: &'b [u8], pointer: &Pointer) -> Option<&'b str> {
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
    type Value = Option<&'de str>;

    fn deserialize<D: Deserializer<'de>>(self, value: D) -> Result<Self::Value, D::Error> {
        if self.tokens.is_empty() {
            let raw = <&'de RawValue as serde::Deserialize>::deserialize(value)?;
            return Ok(Some(raw.get()));
        }
        value.deserialize_any(self)
    }
}

/// The key text of the JSON value `raw`, if it is a string (unescaped), a
/// number (by its value: `key/number.rs`) or a boolean.
fn leaf(raw: &str) -> Option<Cow<'_, str>> {
    match raw.as_bytes().first()? {
        // Borrowed unless it has escapes (then `&str` fails, and it is
        // unescaped into a copy).
        b'"' => match serde_json::from_str::<&str>(raw) {
            Ok(text) => Some(Cow::Borrowed(text)),
            Err(_) => serde_json::from_str::<String>(raw).ok().map(Cow::Owned),
        },
        b'-' | b'0'..=b'9' => number::canonical(raw),
        b't' | b'f' => Some(Cow::Borrowed(raw)),
        _ => None,
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = Option<&'de str>;

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
    fn strings_are_keys_as_unescaped_and_numbers_by_value() {
        let body = r#"{"tenant":"acme","n":42,"price":1.50,"ok":true,"neg":-3e2,"f":false}"#;
        assert_eq!(at(body, "/tenant").as_deref(), Some("acme"));
        assert_eq!(at(body, "/n").as_deref(), Some("42"));
        assert_eq!(at(body, "/price").as_deref(), Some("1.5"));
        assert_eq!(at(body, "/ok").as_deref(), Some("true"));
        assert_eq!(at(body, "/f").as_deref(), Some("false"));
        assert_eq!(at(body, "/neg").as_deref(), Some("-300"));
        // A string and a number of the same value share a bucket, and so
        // do a number's spellings.
        assert_eq!(at(r#"{"n":"42"}"#, "/n"), at(body, "/n"));
        for spelling in ["42.0", "4.2e1", "420e-1", "4.20E+1"] {
            assert_eq!(
                at(&format!(r#"{{"n":{spelling}}}"#), "/n").as_deref(),
                Some("42")
            );
        }
        // A string is not read as a number.
        assert_eq!(at(r#"{"n":"42.0"}"#, "/n").as_deref(), Some("42.0"));
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
        let (manifest, learned) = persisted_tables();
        let persisted = persisted(&manifest, &learned);
        let facts = BodyFacts::new(&Method::POST, &json, None, KeyBody::Whole(body), persisted);
        let tenant = Pointer::parse("/tenant").unwrap();
        assert_eq!(facts.value_at(&tenant).as_deref(), Some("acme"));
        let reading = facts.graphql();
        assert_eq!(
            (reading.operation.as_deref(), reading.kind),
            (Some("Viewer"), Some(graphql::OperationType::Query))
        );
        assert_eq!((reading.cost, reading.unread), (1, 0));
        // `…+json` is JSON too; another type is not read.
        let plus = headers("application/vnd.api+json");
        let facts = BodyFacts::new(&Method::POST, &plus, None, KeyBody::Whole(body), persisted);
        assert_eq!(facts.value_at(&tenant).as_deref(), Some("acme"));
        for other in ["text/plain", "application/x-www-form-urlencoded"] {
            let facts = BodyFacts::new(
                &Method::POST,
                &headers(other),
                None,
                KeyBody::Whole(body),
                persisted,
            );
            assert_eq!(facts.value_at(&tenant), None, "{other}");
            assert_eq!(facts.graphql().why, Some(Unread::NotGraphql), "{other}");
        }
        // A body that was not read (too long, undecodable) has no values,
        // and says why.
        for (body, why) in [
            (KeyBody::TooLarge, Unread::TooLarge),
            (KeyBody::Undecodable, Unread::Undecodable),
            (KeyBody::Empty, Unread::NotGraphql),
        ] {
            let facts = BodyFacts::new(&Method::POST, &json, None, body, persisted);
            assert_eq!(facts.value_at(&tenant), None);
            assert_eq!(
                (facts.graphql().unread, facts.graphql().why),
                (1, Some(why))
            );
        }
    }

    fn persisted_tables() -> (graphql::persisted::Manifest, graphql::persisted::Learned) {
        (Default::default(), graphql::persisted::Learned::new(10))
    }

    fn persisted<'t>(
        manifest: &'t graphql::persisted::Manifest,
        learned: &'t graphql::persisted::Learned,
    ) -> Persisted<'t> {
        Persisted {
            manifest,
            learned,
            learns: true,
        }
    }

    #[test]
    fn a_graphql_document_or_a_get_gives_the_operation() {
        let (manifest, learned) = persisted_tables();
        let persisted = persisted(&manifest, &learned);
        let document = b"mutation AddStar { addStar(input: {}) { clientMutationId } }";
        let facts = BodyFacts::new(
            &Method::POST,
            &headers("application/graphql"),
            None,
            KeyBody::Whole(document),
            persisted,
        );
        let reading = facts.graphql();
        assert_eq!(
            (reading.operation.as_deref(), reading.kind),
            (Some("AddStar"), Some(graphql::OperationType::Mutation))
        );
        let query =
            "query=%7B%20a(first%3A%20100)%20%7B%20b(first%3A%2050)%20%7B%20c%20%7D%20%7D%20%7D";
        let facts = BodyFacts::new(
            &Method::GET,
            &HeaderMap::new(),
            Some(query),
            KeyBody::Empty,
            persisted,
        );
        assert_eq!(facts.graphql().operation.as_deref(), Some("anonymous"));
        // 1 + 100 requests: a score of 1.01, so 1.
        assert_eq!(facts.graphql().cost, 1);
        // A GET without a query has none.
        let facts = BodyFacts::new(
            &Method::GET,
            &HeaderMap::new(),
            None,
            KeyBody::Empty,
            persisted,
        );
        assert_eq!(facts.graphql().why, Some(Unread::NotGraphql));
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
