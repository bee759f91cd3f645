//! Arbitrary bytes as each of a GraphQL request's three shapes, read by
//! `key::graphql::read`: it never panics, and gives either no operation (a
//! missing key, a cost of 1) or one whose cost is its requests' score, at
//! least 1, with a non-empty name or none. A document read as an
//! `application/graphql` body reads the same when sent as the `query` of a
//! JSON POST and of a GET (percent-encoded). And it reads what
//! `reference` reads with `apollo-parser`: a document reads as the same
//! operation, type and requests, or as none by both; a JSON POST sluice
//! reads reads the same through the reference.
//!
//! The whole request as a cost rule reads it (`read_all`: batches and
//! persisted queries) never panics, says why whenever it could not read an
//! operation, and reads one operation as `read` does unless sluice answers
//! the request itself (a persisted query's hash that is not its query's).
//!
//! Input layout (so seeds are plain requests behind one byte): byte 0 picks
//! the shape (0 JSON body, 1 document, 2 GET query string, modulo 3); the
//! rest is the body or query string.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

use sluice::key::graphql::persisted::{Learned, Manifest, Persisted};
use sluice::key::graphql::{read, read_all, score, GraphqlRequest, Operation};

#[path = "graphql/reference.rs"]
mod reference;

/// An operation as the reference reads it.
fn reading(operation: &Option<Operation<'_>>) -> Option<reference::Reading> {
    operation.as_ref().map(|operation| {
        (
            operation.name.as_deref().map(str::to_owned),
            operation.kind,
            operation.requests,
        )
    })
}

/// What must hold of any reading.
fn check(operation: &Option<Operation<'_>>) {
    if let Some(operation) = operation {
        assert!(operation.cost >= 1, "{operation:?}");
        assert_eq!(operation.cost, score(operation.requests), "{operation:?}");
        assert!(operation.name.as_deref() != Some(""), "{operation:?}");
    }
}

/// `request` read whole, as a `cost = "graphql"` rule reads it, against a
/// small table that learns what the fuzzer's checked pairs teach it.
fn check_whole(request: GraphqlRequest<'_>, single: &Option<Operation<'_>>) {
    static LEARNED: OnceLock<Learned> = OnceLock::new();
    static MANIFEST: OnceLock<Manifest> = OnceLock::new();
    let persisted = Persisted {
        manifest: MANIFEST.get_or_init(Manifest::default),
        learned: LEARNED.get_or_init(|| Learned::new(64)),
        learns: true,
    };
    let whole = read_all(request, persisted);
    if whole.answer.is_some() {
        return;
    }
    assert_eq!(whole.unread > 0, whole.why.is_some(), "{whole:?}");
    if let Some(operation) = single {
        assert_eq!(whole.unread, 0, "{whole:?}");
        assert_eq!(whole.cost, operation.cost, "{whole:?}");
        assert_eq!(whole.operation.as_deref(), Some(operation.name_text()));
        assert_eq!(whole.kind, Some(operation.kind));
    }
}

/// Every byte but ASCII letters and digits as `%XX`.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() {
                (byte as char).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    match shape % 3 {
        0 => {
            let operation = read(GraphqlRequest::Json(rest));
            check(&operation);
            check_whole(GraphqlRequest::Json(rest), &operation);
            if operation.is_some() {
                // The members sluice read, read again. A member sluice
                // skips is not checked for UTF-8 (serde_json skips its
                // bytes), so a body the reference cannot read as a value
                // may still have a readable query: nothing to compare.
                let Ok(body) = serde_json::from_slice::<serde_json::Value>(rest) else {
                    return;
                };
                let variables = body.get("variables").map(|v| v.to_string());
                let expected = reference::read(
                    body["query"].as_str().unwrap(),
                    body.get("operationName")
                        .and_then(|name| name.as_str())
                        .filter(|name| !name.is_empty()),
                    variables.as_deref(),
                );
                assert_eq!(reading(&operation), expected, "as the reference reads it");
            }
        }
        1 => {
            let operation = read(GraphqlRequest::Document(rest));
            check(&operation);
            check_whole(GraphqlRequest::Document(rest), &operation);
            let Ok(document) = std::str::from_utf8(rest) else {
                assert!(operation.is_none());
                return;
            };
            assert_eq!(
                reading(&operation),
                reference::read(document, None, None),
                "as the reference reads it"
            );
            let json = serde_json::json!({ "query": document }).to_string();
            assert_eq!(
                read(GraphqlRequest::Json(json.as_bytes())),
                operation,
                "as JSON"
            );
            let get = format!("query={}", percent_encode(document));
            assert_eq!(read(GraphqlRequest::Get(&get)), operation, "as a GET");
        }
        _ => {
            let query = String::from_utf8_lossy(rest);
            let operation = read(GraphqlRequest::Get(&query));
            check(&operation);
            check_whole(GraphqlRequest::Get(&query), &operation);
        }
    }
});
