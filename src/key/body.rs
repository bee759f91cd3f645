//! `body:<pointer>` keys: the value at an RFC 6901 pointer in a JSON request
//! body that sluice read before deciding (at most
//! `server.max_key_body_bytes`: docs/conversation.md).
//!
//! The body is read once (`lookup`), checked to be one JSON value (a body
//! with anything after it is not JSON, so the key is missing), nested at
//! most 127 levels, and nothing is built but the value asked for: a string
//! without escapes is borrowed from the body.
//!
//! A string is the key as it is (so `"42"` and `42` share a bucket); a
//! number or boolean is its JSON text as written (`1.50` stays `1.50`); an
//! object, an array, `null` or no value there is a missing key.

mod lookup;
#[cfg(test)]
mod reference;

use std::borrow::Cow;
use std::sync::OnceLock;

use http::{HeaderMap, Method};

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
    let tokens: smallvec::SmallVec<[lookup::Token<'_>; 4]> = pointer.tokens().collect();
    lookup::value_at(body, &tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use reference::reference_value_at;

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

    /// JSON text built to reach the pointers below: scalars of every kind
    /// (escapes, surrogate pairs, a lone surrogate), objects with repeated
    /// and escaped member names, arrays, odd whitespace.
    fn json_text() -> impl Strategy<Value = String> {
        let space = prop_oneof![Just(""), Just(" "), Just("\n\t")];
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("false".to_owned()),
            "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?",
            r#""([a-c/~ é]|\\["\\/bfnrt]|\\u00e9|\\ud83d\\ude00|\\ud800)*""#,
        ];
        let key = prop_oneof![
            Just("a"),
            Just("b"),
            Just("0"),
            Just("1"),
            Just("~"),
            Just("a/b"),
            Just("\\u0061"),
            Just("\\ud800"),
        ];
        leaf.prop_recursive(4, 24, 4, move |inner| {
            prop_oneof![
                (
                    proptest::collection::vec(inner.clone(), 0..4),
                    space.clone()
                )
                    .prop_map(|(items, space)| format!("[{space}{}]", items.join(","))),
                (
                    proptest::collection::vec((key.clone(), inner), 0..4),
                    space.clone()
                )
                    .prop_map(|(members, space)| {
                        let members: Vec<String> = members
                            .into_iter()
                            .map(|(key, value)| format!("\"{key}\"{space}:{value}"))
                            .collect();
                        format!("{{{}}}", members.join(&format!(",{space}")))
                    }),
            ]
        })
    }

    proptest! {
        /// The one-pass reader gives serde_json's answer, for texts that are
        /// JSON and for ones cut short or with a byte changed.
        #[test]
        fn the_lookup_reads_every_text_as_serde_json_does(
            text in json_text(),
            cut in any::<prop::sample::Index>(),
            change in prop::option::of((any::<prop::sample::Index>(), prop_oneof![
                Just(b'}'), Just(b']'), Just(b','), Just(b'"'), Just(b'\\'), Just(b'0'),
                Just(b' '), Just(b'\x01'), Just(b':'),
            ])),
            truncate in any::<bool>(),
            pointer in prop_oneof![
                Just("/a"), Just("/a/b"), Just("/0"), Just("/a/0"), Just("/b/1/a"),
                Just("/~0"), Just("/a~1b"), Just("/"), Just("/1"),
            ],
        ) {
            let pointer = Pointer::parse(pointer).unwrap();
            let mut bytes = text.into_bytes();
            if truncate {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            if let Some((at, byte)) = change {
                if !bytes.is_empty() {
                    let at = at.index(bytes.len());
                    bytes[at] = byte;
                }
            }
            // The reference does not check the UTF-8 of strings it skips;
            // JSON is UTF-8, and the lookup refuses a text that is not.
            prop_assume!(std::str::from_utf8(&bytes).is_ok());
            prop_assert_eq!(value_at(&bytes, &pointer), reference_value_at(&bytes, &pointer));
        }
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
