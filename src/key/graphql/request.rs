//! The three shapes of a GraphQL request (GraphQL over HTTP), each read into
//! the same [`Parts`]: the document, the `operationName`, the text of the
//! `variables` object and the hash of a persisted query; and a batch (a JSON
//! array of such requests), read element by element ([`Shape`]).
//!
//! Borrowed from the request wherever the request spells a value as it is:
//! a JSON string without escapes, a query parameter without `%` or `+`.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::persisted::{parse_hash, Hash};
use super::GraphqlRequest;
use crate::key::{decode_query, query_value};

/// What a GraphQL request carries, before the document is parsed.
#[derive(Debug)]
pub(super) struct Parts<'a> {
    /// The GraphQL document (`query`); `None` when the request names a
    /// persisted query by its hash alone, or carries no query at all.
    pub source: Option<Cow<'a, str>>,
    /// `operationName`; an empty one is taken as none.
    pub operation_name: Option<Cow<'a, str>>,
    /// The text of the `variables` JSON object, read only when a cost needs
    /// a variable (`variables::Values`).
    pub variables: Option<Cow<'a, str>>,
    /// `extensions.persistedQuery.sha256Hash`, when the request has one.
    pub hash: Option<PersistedHash>,
}

/// The hash a persisted query is named by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PersistedHash {
    /// 64 hexadecimal digits.
    Sha256(Hash),
    /// Anything else: it names no document and matches no query.
    Malformed,
}

/// How a request carries its operations.
#[derive(Debug)]
pub(super) enum Shape<'a> {
    /// One operation; `None` when it cannot be read (see [`Parts::read`]).
    One(Option<Parts<'a>>),
    /// A JSON array of operations, each read as one (`None`: that element
    /// cannot be).
    Batch(Vec<Option<Parts<'a>>>),
}

impl<'a> Shape<'a> {
    /// The operations of `request`: a JSON body that is an array is a
    /// batch, anything else one operation.
    pub fn read(request: GraphqlRequest<'a>) -> Shape<'a> {
        match request {
            GraphqlRequest::Json(body) if body.trim_ascii_start().starts_with(b"[") => {
                match serde_json::from_slice::<Vec<&RawValue>>(body) {
                    Ok(elements) => Shape::Batch(
                        elements
                            .into_iter()
                            .map(|element| json(element.get().as_bytes()))
                            .collect(),
                    ),
                    Err(_) => Shape::One(None),
                }
            }
            request => Shape::One(Parts::read(request)),
        }
    }
}

impl<'a> Parts<'a> {
    /// `None` for a request a GraphQL server refuses before reading the
    /// document: a body that is not a JSON object, a `query` that is not a
    /// string, `variables` that are not an object, `extensions` that are
    /// not an object, a document that is not UTF-8.
    pub fn read(request: GraphqlRequest<'a>) -> Option<Parts<'a>> {
        match request {
            GraphqlRequest::Json(body) => json(body),
            GraphqlRequest::Document(body) => Some(Parts {
                source: Some(Cow::Borrowed(std::str::from_utf8(body).ok()?)),
                operation_name: None,
                variables: None,
                hash: None,
            }),
            GraphqlRequest::Get(query) => get(query),
        }
    }
}

/// `{"query": "...", "operationName": "...", "variables": {...},
/// "extensions": {"persistedQuery": {"sha256Hash": "..."}}}`. Other members
/// are ignored; a member given twice makes the body unreadable, as it would
/// be ambiguous.
#[derive(Deserialize)]
struct JsonBody<'a> {
    #[serde(borrow, default)]
    query: Option<Text<'a>>,
    #[serde(borrow, default, rename = "operationName")]
    operation_name: Option<Text<'a>>,
    #[serde(borrow, default)]
    variables: Option<&'a RawValue>,
    #[serde(borrow, default)]
    extensions: Option<&'a RawValue>,
}

/// A request's `extensions`: only Apollo's persisted query is read.
#[derive(Deserialize)]
struct Extensions<'a> {
    #[serde(borrow, default, rename = "persistedQuery")]
    persisted_query: Option<PersistedQuery<'a>>,
}

#[derive(Deserialize)]
struct PersistedQuery<'a> {
    #[serde(borrow, default, rename = "sha256Hash")]
    sha256_hash: Option<Text<'a>>,
}

impl<'a> Extensions<'a> {
    /// `extensions` as a JSON object (serde would read a struct from an
    /// array too); `None` for anything else.
    fn read(text: &'a str) -> Option<Extensions<'a>> {
        if !text.trim_start().starts_with('{') {
            return None;
        }
        serde_json::from_str(text).ok()
    }

    fn hash(&self) -> Option<PersistedHash> {
        let text = &self.persisted_query.as_ref()?.sha256_hash.as_ref()?.0;
        Some(parse_hash(text).map_or(PersistedHash::Malformed, PersistedHash::Sha256))
    }
}

fn json(body: &[u8]) -> Option<Parts<'_>> {
    // An object only: serde would read a struct from an array too.
    if !body.trim_ascii_start().starts_with(b"{") {
        return None;
    }
    let body: JsonBody<'_> = serde_json::from_slice(body).ok()?;
    let variables = match body.variables {
        // `null` is read as `None` by serde; anything but an object is refused.
        Some(raw) if !raw.get().starts_with('{') => return None,
        raw => raw.map(|raw| Cow::Borrowed(raw.get())),
    };
    Some(Parts {
        source: body.query.map(|query| query.0),
        operation_name: body
            .operation_name
            .map(|name| name.0)
            .filter(|n| !n.is_empty()),
        variables,
        hash: match body.extensions {
            Some(raw) => Extensions::read(raw.get())?.hash(),
            None => None,
        },
    })
}

/// `?query=...&operationName=...&variables=...&extensions=...`,
/// percent-decoded (`+` as a space), the first of each parameter counting.
fn get(raw: &str) -> Option<Parts<'_>> {
    let source = query_value(Some(raw), "query").map(decode);
    let hash = match query_value(Some(raw), "extensions").map(decode) {
        Some(text) if !text.is_empty() => Extensions::read(&text)?.hash(),
        _ => None,
    };
    let operation_name = query_value(Some(raw), "operationName")
        .map(decode)
        .filter(|name| !name.is_empty());
    let variables = match query_value(Some(raw), "variables").map(decode) {
        Some(text) if text.is_empty() => None,
        Some(text) => {
            // Checked now, as a POST's body is, so that a request with
            // unreadable variables is unreadable whether a cost needs them
            // or not.
            let value: &RawValue = serde_json::from_str(&text).ok()?;
            match value.get() {
                "null" => None,
                object if object.starts_with('{') => Some(text),
                _ => return None,
            }
        }
        None => None,
    };
    Some(Parts {
        source,
        operation_name,
        variables,
        hash,
    })
}

/// A query parameter decoded, borrowed when it holds nothing to decode.
fn decode(raw: &str) -> Cow<'_, str> {
    if raw.contains(['%', '+']) {
        Cow::Owned(decode_query(raw))
    } else {
        Cow::Borrowed(raw)
    }
}

/// A JSON string, borrowed from the body unless it holds escapes. (serde
/// borrows a bare `Cow<str>` field, never one inside an `Option`.)
pub(super) struct Text<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor<'a>(std::marker::PhantomData<&'a ()>);

        impl<'de: 'a, 'a> Visitor<'de> for TextVisitor<'a> {
            type Value = Text<'a>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(text)))
            }

            fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(text.to_owned())))
            }

            fn visit_string<E>(self, text: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(text)))
            }
        }

        deserializer.deserialize_str(TextVisitor(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_parts(body: &str) -> Option<Parts<'_>> {
        Parts::read(GraphqlRequest::Json(body.as_bytes()))
    }

    #[test]
    fn a_json_body_is_borrowed_where_it_holds_no_escapes() {
        let parts =
            json_parts(r#"{"query":"query A { a }","operationName":"A","variables":{"n":1}}"#)
                .unwrap();
        assert!(matches!(parts.source, Some(Cow::Borrowed("query A { a }"))));
        assert!(matches!(parts.operation_name, Some(Cow::Borrowed("A"))));
        assert_eq!(parts.variables.as_deref(), Some(r#"{"n":1}"#));

        let parts = json_parts(r#"{"query":"query A {\n a }"}"#).unwrap();
        assert!(matches!(parts.source, Some(Cow::Owned(ref s)) if s == "query A {\n a }"));
    }

    #[test]
    fn null_and_empty_members_are_absent() {
        let parts =
            json_parts(r#"{"query":"{ a }","operationName":null,"variables":null}"#).unwrap();
        assert!(parts.operation_name.is_none() && parts.variables.is_none());
        let parts = json_parts(r#"{"query":"{ a }","operationName":""}"#).unwrap();
        assert!(parts.operation_name.is_none());
    }

    #[test]
    fn a_body_a_graphql_server_refuses_is_unreadable() {
        for body in [
            "",
            "not json",
            "[]",
            r#"[{"query":"{ a }"}]"#,
            r#"{"query":1}"#,
            r#"{"query":"{ a }","operationName":1}"#,
            r#"{"query":"{ a }","variables":[1]}"#,
            r#"{"query":"{ a }","variables":"{}"}"#,
            r#"{"query":"{ a }","query":"{ b }"}"#,
            r#"{"query":"{ a }""#,
            r#"{"query":"{ a }","extensions":[]}"#,
            r#"{"query":"{ a }","extensions":{"persistedQuery":{"sha256Hash":1}}}"#,
        ] {
            assert!(json_parts(body).is_none(), "{body}");
        }
        // No query: read, with none (a persisted query may name one).
        for body in [r#"{"operationName":"A"}"#, r#"{"query":null}"#] {
            assert!(json_parts(body).unwrap().source.is_none(), "{body}");
        }
    }

    #[test]
    fn a_persisted_query_s_hash_is_read_from_a_body_or_a_get() {
        let hash = "1c7e1e347f726166b5b1c55afd61f278cc9b45e00c108ec33d540a566379811b";
        let body = format!(
            r#"{{"extensions":{{"persistedQuery":{{"version":1,"sha256Hash":"{hash}"}}}}}}"#
        );
        let parts = json_parts(&body).unwrap();
        assert!(parts.source.is_none());
        assert_eq!(
            parts.hash,
            Some(PersistedHash::Sha256(parse_hash(hash).unwrap()))
        );
        let body = r#"{"query":"{ a }","extensions":{"persistedQuery":{"sha256Hash":"abc"}}}"#;
        assert_eq!(
            json_parts(body).unwrap().hash,
            Some(PersistedHash::Malformed)
        );
        let body = r#"{"query":"{ a }","extensions":{"tracing":true}}"#;
        assert_eq!(json_parts(body).unwrap().hash, None);

        let get = format!(
            "operationName=A&extensions=%7B%22persistedQuery%22%3A%7B%22version%22%3A1%2C\
             %22sha256Hash%22%3A%22{hash}%22%7D%7D"
        );
        let parts = Parts::read(GraphqlRequest::Get(&get)).unwrap();
        assert!(parts.source.is_none());
        assert_eq!(parts.operation_name.as_deref(), Some("A"));
        assert!(matches!(parts.hash, Some(PersistedHash::Sha256(_))));
        assert!(Parts::read(GraphqlRequest::Get("query={a}&extensions=%7B")).is_none());
    }

    #[test]
    fn a_json_array_is_a_batch_read_element_by_element() {
        let body = br#" [{"query":"{ a }"}, 7, {"query":"{ b }","operationName":"B"}]"#;
        let Shape::Batch(elements) = Shape::read(GraphqlRequest::Json(body)) else {
            panic!("a batch");
        };
        assert_eq!(elements.len(), 3);
        assert!(elements[0].is_some() && elements[1].is_none());
        assert_eq!(
            elements[2].as_ref().unwrap().operation_name.as_deref(),
            Some("B")
        );
        assert!(matches!(
            Shape::read(GraphqlRequest::Json(b"[{}")),
            Shape::One(None)
        ));
        assert!(matches!(
            Shape::read(GraphqlRequest::Json(br#"{"query":"{ a }"}"#)),
            Shape::One(Some(_))
        ));
    }

    #[test]
    fn a_get_is_percent_decoded() {
        let parts = Parts::read(GraphqlRequest::Get(
            "query=query%20A(%24n%3AInt)%7Ba%7D&operationName=A&variables=%7B%22n%22%3A3%7D",
        ))
        .unwrap();
        assert_eq!(parts.source.as_deref(), Some("query A($n:Int){a}"));
        assert!(matches!(parts.operation_name, Some(Cow::Borrowed("A"))));
        assert_eq!(parts.variables.as_deref(), Some(r#"{"n":3}"#));

        let parts = Parts::read(GraphqlRequest::Get("operationName=A+B&query=%7Ba%7D")).unwrap();
        assert_eq!(parts.operation_name.as_deref(), Some("A B"));
        assert!(Parts::read(GraphqlRequest::Get("operationName=A"))
            .unwrap()
            .source
            .is_none());
        assert!(Parts::read(GraphqlRequest::Get("query={a}&variables=[1]")).is_none());
        assert!(Parts::read(GraphqlRequest::Get("query={a}&variables=%7B")).is_none());
        let parts = Parts::read(GraphqlRequest::Get("query={a}&variables=null")).unwrap();
        assert!(parts.variables.is_none());
    }

    #[test]
    fn a_document_body_must_be_utf8() {
        assert!(Parts::read(GraphqlRequest::Document(b"{ a }")).is_some());
        assert!(Parts::read(GraphqlRequest::Document(b"{ \xff }")).is_none());
    }
}
