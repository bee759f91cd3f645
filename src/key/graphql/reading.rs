//! A GraphQL request read whole for the rules that key on it or take its
//! cost (docs/conversation.md, "No query is free"): one operation or a
//! batch's, each named by its document or by a persisted query's hash.
//!
//! Nothing is taken on trust: an operation whose document sluice does not
//! have, or cannot read, is counted as unread with the reason, so that a
//! cost rule decides it by its `unreadable` rather than at a cost of 1.

use std::borrow::Cow;

use super::persisted::{hash_of, Persisted};
use super::request::{Parts, PersistedHash, Shape};
use super::{operation_of, GraphqlRequest, Operation, OperationType};

/// Why an operation's cost could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unread {
    /// The request is not one GraphQL over HTTP reads: no JSON object, no
    /// `application/graphql` document, no GET query; or a member of the
    /// wrong type.
    NotGraphql,
    /// Neither a `query` nor a persisted query's hash.
    NoQuery,
    /// The document does not parse, or names no single operation to run.
    Invalid,
    /// A persisted query's hash that sluice does not know.
    UnknownHash,
    /// A batch of no operations.
    EmptyBatch,
    /// The body is past `server.max_key_body_bytes` (read or decoded), or
    /// sent chunked past it.
    TooLarge,
    /// The body's `Content-Encoding` is not one sluice decodes, or the
    /// body does not decode.
    Undecodable,
}

impl Unread {
    /// The reason, as a problem document's detail ends.
    pub fn reason(self) -> &'static str {
        match self {
            Unread::NotGraphql => {
                "the request is not a GraphQL request (a JSON body with a query, an \
                 application/graphql body, or a GET with a query parameter)"
            }
            Unread::NoQuery => "the request carries no query",
            Unread::Invalid => "the query does not parse, or does not name one operation to run",
            Unread::UnknownHash => "a persisted query in the batch is not known by its hash",
            Unread::EmptyBatch => "the batch holds no operation",
            Unread::TooLarge => "the body is larger than this server reads to find its cost",
            Unread::Undecodable => "the body's Content-Encoding cannot be decoded",
        }
    }
}

/// What sluice answers itself, whatever the rules: the request cannot go
/// on as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A persisted query's hash alone, unknown (not in a batch): answered
    /// as Apollo Server answers it, so the client sends the query.
    PersistedQueryNotFound,
    /// A query sent with a hash that is not its SHA-256: answered 400.
    HashMismatch,
}

/// A GraphQL request as the rules read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading<'a> {
    /// The `graphql:operation` key text: the name every operation has
    /// ([`super::ANONYMOUS`] for none), when all were read and share it.
    pub operation: Option<Cow<'a, str>>,
    /// The `graphql:type` key: the type every operation has, when all were
    /// read and share it.
    pub kind: Option<OperationType>,
    /// The sum of the costs of the operations read (saturating).
    pub cost: u64,
    /// How many operations could not be read.
    pub unread: u64,
    /// Why the first of them could not.
    pub why: Option<Unread>,
    /// What sluice answers itself, if anything.
    pub answer: Option<Answer>,
}

impl Reading<'_> {
    /// A request nothing could be read of, for `why`.
    pub fn unreadable(why: Unread) -> Reading<'static> {
        Reading {
            unread: 1,
            why: Some(why),
            ..Reading::default()
        }
    }
}

/// One operation of a request, read.
enum Element<'a> {
    Read(Operation<'a>),
    Unread(Unread),
    Mismatch,
}

/// Reads every operation of `request`, looking persisted queries up in
/// `persisted` and teaching it each query sent with its hash (the hash
/// checked first).
pub fn read_all<'a>(request: GraphqlRequest<'a>, persisted: Persisted<'_>) -> Reading<'a> {
    match Shape::read(request) {
        Shape::One(parts) => {
            let mut reading = Reading::default();
            match element(parts, persisted) {
                Element::Read(operation) => {
                    reading.cost = operation.cost;
                    reading.kind = Some(operation.kind);
                    reading.operation = Some(key_text(operation.name));
                }
                Element::Unread(why) => {
                    reading.unread = 1;
                    reading.why = Some(why);
                    if why == Unread::UnknownHash {
                        reading.answer = Some(Answer::PersistedQueryNotFound);
                    }
                }
                Element::Mismatch => reading.answer = Some(Answer::HashMismatch),
            }
            reading
        }
        Shape::Batch(elements) => batch(elements, persisted),
    }
}

/// A batch: the sum of its operations' costs, and the keys they share.
fn batch<'a>(elements: Vec<Option<Parts<'a>>>, persisted: Persisted<'_>) -> Reading<'a> {
    if elements.is_empty() {
        return Reading::unreadable(Unread::EmptyBatch);
    }
    let mut reading = Reading::default();
    // Each key: unset until the first operation read, then kept while the
    // others agree (`None` once two differ).
    let mut names: Option<Option<Cow<'a, str>>> = None;
    let mut kinds: Option<Option<OperationType>> = None;
    for parts in elements {
        match element(parts, persisted) {
            Element::Read(operation) => {
                reading.cost = reading.cost.saturating_add(operation.cost);
                let name = key_text(operation.name);
                match &mut names {
                    None => names = Some(Some(name)),
                    Some(shared) => {
                        if shared.as_ref() != Some(&name) {
                            *shared = None;
                        }
                    }
                }
                match &mut kinds {
                    None => kinds = Some(Some(operation.kind)),
                    Some(shared) => {
                        if *shared != Some(operation.kind) {
                            *shared = None;
                        }
                    }
                }
            }
            Element::Unread(why) => {
                reading.unread += 1;
                reading.why.get_or_insert(why);
            }
            Element::Mismatch => reading.answer = Some(Answer::HashMismatch),
        }
    }
    if reading.unread == 0 {
        reading.operation = names.flatten();
        reading.kind = kinds.flatten();
    }
    reading
}

/// The `graphql:operation` key text of an operation's name.
fn key_text(name: Option<Cow<'_, str>>) -> Cow<'_, str> {
    name.unwrap_or(Cow::Borrowed(super::ANONYMOUS))
}

/// One operation: its document read as sent, or looked up by its hash.
fn element<'a>(parts: Option<Parts<'a>>, persisted: Persisted<'_>) -> Element<'a> {
    let Some(parts) = parts else {
        return Element::Unread(Unread::NotGraphql);
    };
    match (&parts.source, parts.hash) {
        (Some(source), Some(PersistedHash::Sha256(hash))) => {
            if hash_of(source) != hash {
                return Element::Mismatch;
            }
            persisted.learn(hash, source);
        }
        (Some(_), Some(PersistedHash::Malformed)) => return Element::Mismatch,
        (Some(_), None) => {}
        (None, Some(PersistedHash::Sha256(hash))) => {
            let Some(document) = persisted.document(&hash) else {
                return Element::Unread(Unread::UnknownHash);
            };
            // The document is the table's; the operation is read from it
            // with the request's name and variables, and kept as its own.
            let named = Parts {
                source: Some(Cow::Borrowed(&*document)),
                operation_name: parts.operation_name.as_deref().map(Cow::Borrowed),
                variables: parts.variables.as_deref().map(Cow::Borrowed),
                hash: None,
            };
            return match operation_of(named) {
                Some(operation) => Element::Read(operation.into_owned()),
                None => Element::Unread(Unread::Invalid),
            };
        }
        (None, Some(PersistedHash::Malformed)) => return Element::Unread(Unread::UnknownHash),
        (None, None) => return Element::Unread(Unread::NoQuery),
    }
    match operation_of(parts) {
        Some(operation) => Element::Read(operation),
        None => Element::Unread(Unread::Invalid),
    }
}

#[cfg(test)]
mod tests {
    use super::super::persisted::{Learned, Manifest};
    use super::*;
    use std::sync::Arc;

    /// GitHub's example: 5,101 requests, a cost of 51.
    const COSTLY: &str = "query Repos { viewer { repositories(first: 100) { nodes { \
                          issues(first: 50) { nodes { labels(first: 60) { nodes { name } } } } } } } }";

    fn hex(text: &str) -> String {
        hash_of(text).iter().map(|b| format!("{b:02x}")).collect()
    }

    fn read<'a>(body: &'a str, learned: &Learned, manifest: &Manifest) -> Reading<'a> {
        let persisted = Persisted {
            manifest,
            learned,
            learns: true,
        };
        read_all(GraphqlRequest::Json(body.as_bytes()), persisted)
    }

    fn hash_only(hash: &str) -> String {
        format!(r#"{{"extensions":{{"persistedQuery":{{"version":1,"sha256Hash":"{hash}"}}}}}}"#)
    }

    fn with_hash(query: &str, hash: &str) -> String {
        serde_json::json!({
            "query": query,
            "extensions": {"persistedQuery": {"version": 1, "sha256Hash": hash}},
        })
        .to_string()
    }

    #[test]
    fn one_operation_is_read_with_its_keys_and_cost() {
        let learned = Learned::new(10);
        let body = serde_json::json!({ "query": COSTLY }).to_string();
        let reading = read(&body, &learned, &Manifest::default());
        assert_eq!(reading.operation.as_deref(), Some("Repos"));
        assert_eq!(reading.kind, Some(OperationType::Query));
        assert_eq!(
            (reading.cost, reading.unread, reading.answer),
            (51, 0, None)
        );
    }

    #[test]
    fn a_hash_alone_is_unknown_until_learned_from_a_checked_pair() {
        let learned = Learned::new(10);
        let manifest = Manifest::default();
        let hash = hex(COSTLY);
        let alone = hash_only(&hash);
        let before = read(&alone, &learned, &manifest);
        assert_eq!(before.answer, Some(Answer::PersistedQueryNotFound));
        assert_eq!((before.unread, before.why), (1, Some(Unread::UnknownHash)));

        // A wrong hash teaches nothing and is answered itself.
        let wrong = with_hash(COSTLY, &hex("{ other }"));
        assert_eq!(
            read(&wrong, &learned, &manifest).answer,
            Some(Answer::HashMismatch)
        );
        let malformed = with_hash(COSTLY, "abc");
        assert_eq!(
            read(&malformed, &learned, &manifest).answer,
            Some(Answer::HashMismatch)
        );
        assert_eq!(learned.len(), 0);

        let pair = with_hash(COSTLY, &hash);
        let taught = read(&pair, &learned, &manifest);
        assert_eq!((taught.cost, taught.answer), (51, None));
        assert_eq!(learned.len(), 1);
        let after = read(&alone, &learned, &manifest);
        assert_eq!(after.operation.as_deref(), Some("Repos"));
        assert_eq!((after.cost, after.unread, after.answer), (51, 0, None));
    }

    #[test]
    fn a_persisted_query_is_costed_with_the_request_s_variables() {
        let query =
            "query Page($n: Int) { items(first: $n) { nodes { tags(first: 100) { name } } } }";
        let manifest = Manifest::new([(hash_of(query), Arc::from(query))]);
        let learned = Learned::new(0);
        let body = format!(
            r#"{{"variables":{{"n":50}},"extensions":{{"persistedQuery":{{"sha256Hash":"{}"}}}}}}"#,
            hex(query)
        );
        // 1 + 50 requests: 0.51, so 1; with n = 100: 1 + 100 = 1.01, so 1;
        // with 1000: 1 + 1000 = 10.01, so 10.
        assert_eq!(read(&body, &learned, &manifest).cost, 1);
        let body = body.replace("50", "1000");
        let reading = read(&body, &learned, &manifest);
        assert_eq!(
            (reading.cost, reading.operation.as_deref()),
            (10, Some("Page"))
        );
    }

    #[test]
    fn a_batch_costs_the_sum_and_shares_only_common_keys() {
        let learned = Learned::new(10);
        let manifest = Manifest::default();
        let body = serde_json::json!([
            { "query": COSTLY },
            { "query": COSTLY },
            { "query": "query Repos { viewer { login } }" },
        ])
        .to_string();
        let reading = read(&body, &learned, &manifest);
        assert_eq!((reading.cost, reading.unread), (51 + 51 + 1, 0));
        assert_eq!(reading.operation.as_deref(), Some("Repos"));
        assert_eq!(reading.kind, Some(OperationType::Query));

        let body = serde_json::json!([
            { "query": COSTLY },
            { "query": "mutation Star { addStar { id } }" },
        ])
        .to_string();
        let reading = read(&body, &learned, &manifest);
        assert_eq!(
            (reading.cost, reading.operation, reading.kind),
            (52, None, None)
        );
    }

    #[test]
    fn what_a_batch_cannot_read_is_counted_with_the_first_reason() {
        let learned = Learned::new(10);
        let manifest = Manifest::default();
        let unknown = serde_json::json!({
            "extensions": {"persistedQuery": {"sha256Hash": hex("{ nobody }")}}
        });
        let body = serde_json::json!([
            { "query": COSTLY },
            unknown,
            { "query": "{ a" },
            7,
        ])
        .to_string();
        let reading = read(&body, &learned, &manifest);
        assert_eq!((reading.cost, reading.unread), (51, 3));
        assert_eq!(reading.why, Some(Unread::UnknownHash));
        // In a batch an unknown hash is not answered on its own.
        assert_eq!(reading.answer, None);
        assert_eq!((reading.operation, reading.kind), (None, None));

        assert_eq!(
            read("[]", &learned, &manifest),
            Reading::unreadable(Unread::EmptyBatch)
        );
        let mismatched = format!("[{}]", with_hash(COSTLY, &hex("{ x }")));
        assert_eq!(
            read(&mismatched, &learned, &manifest).answer,
            Some(Answer::HashMismatch)
        );
    }

    #[test]
    fn a_request_without_a_query_or_a_readable_document_is_unread() {
        let learned = Learned::new(10);
        let manifest = Manifest::default();
        for (body, why) in [
            (r#"{"operationName":"A"}"#, Unread::NoQuery),
            (r#"{"query":"{ a"}"#, Unread::Invalid),
            (
                r#"{"query":"query A { a } query B { b }"}"#,
                Unread::Invalid,
            ),
            ("not json", Unread::NotGraphql),
            (r#"{"query":7}"#, Unread::NotGraphql),
        ] {
            let reading = read(body, &learned, &manifest);
            assert_eq!((reading.unread, reading.why), (1, Some(why)), "{body}");
            assert_eq!((reading.cost, reading.answer), (0, None), "{body}");
        }
    }
}
