//! No query is free (docs/conversation.md): a `cost = "graphql"` rule never
//! lets a request through at a cost it could not read. Persisted queries
//! (learned from a checked pair, or from a manifest), batches, bodies past
//! the bound or in a coding, and documents that do not parse, each against
//! the real server and a real upstream on loopback whose received requests
//! are counted: a refusal, a mismatch and an unknown hash reach it never.

use http::StatusCode;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::support::{self, post_json, Got, Sluice};

/// GitHub's worked example: 1 + 100 + 5,000 requests, a cost of 51.
const COSTLY: &str = "query Labels { viewer { login repositories(first: 100) { \
     edges { node { name issues(first: 50) { edges { node { title labels(first: 60) { \
     edges { node { name } } } } } } } } } } }";

const CHEAP: &str = "query Viewer { viewer { login } }";

const POINTS: &str = r#"
[[rule]]
name = "points"
match.path = "/graphql"
key = ["header:authorization"]
rate = "100/h"
cost = "graphql"
"#;

fn sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn persisted(hash: &str) -> serde_json::Value {
    json!({ "persistedQuery": { "version": 1, "sha256Hash": hash } })
}

async fn graphql(sluice: &Sluice, token: &str, body: &serde_json::Value) -> Got {
    post_json(
        &sluice.url("/graphql"),
        &body.to_string(),
        &[("authorization", token)],
    )
    .await
}

/// What is left of `token`'s points, as `POST /admin/explain` reads it.
async fn points_left(sluice: &Sluice, token: &str) -> u64 {
    let question = json!({
        "method": "POST", "path": "/graphql", "ip": "203.0.113.7",
        "headers": {"content-type": "application/json", "authorization": token},
        "body": json!({ "query": CHEAP }).to_string(),
    });
    let got = post_json(
        &format!("http://{}/admin/explain", sluice.admin),
        &question.to_string(),
        &[],
    )
    .await;
    let explained = got.json();
    explained["rules"][0]["buckets"][0]["remaining"]
        .as_u64()
        .unwrap_or_else(|| panic!("{explained}"))
}

/// Asserts Apollo Server's answer to an unknown hash: 200, the GraphQL
/// error, and no rate-limit fields (nothing was decided).
fn assert_not_found(got: &Got) {
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
    assert_eq!(got.header("content-type"), Some("application/json"));
    let body = got.json();
    assert_eq!(
        body["errors"][0]["message"], "PersistedQueryNotFound",
        "{body}"
    );
    assert_eq!(
        body["errors"][0]["extensions"]["code"],
        "PERSISTED_QUERY_NOT_FOUND"
    );
    assert!(got.header("x-ratelimit-limit").is_none(), "{got:?}");
    assert!(got.header("ratelimit").is_none(), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persisted_query_is_learned_from_its_checked_pair_and_costed_as_its_query() {
    let (upstream, sluice) = support::start(POINTS).await;
    let hash = sha256(COSTLY);
    let alone = json!({ "extensions": persisted(&hash) });

    // Unknown: answered as Apollo Server answers, upstream and bucket untouched.
    assert_not_found(&graphql(&sluice, "t", &alone).await);
    assert_eq!(upstream.count(), 0);
    assert_eq!(points_left(&sluice, "t").await, 100);

    // A hash that is not the query's: 400, nothing learned or sent on.
    let wrong = json!({ "query": COSTLY, "extensions": persisted(&sha256(CHEAP)) });
    let got = graphql(&sluice, "t", &wrong).await;
    let problem = support::assert_problem(&got, StatusCode::BAD_REQUEST);
    assert_eq!(
        problem["type"],
        "tag:sluice,2026:problems/persisted-query-mismatch"
    );
    assert_not_found(&graphql(&sluice, "t", &alone).await);
    assert_eq!(upstream.count(), 0);
    assert_eq!(sluice.metric("sluice_persisted_queries").await, 0.0);

    // The pair: forwarded at the query's cost, and learned.
    let pair = json!({ "query": COSTLY, "extensions": persisted(&hash) });
    let got = graphql(&sluice, "t", &pair).await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
    assert_eq!(got.header("x-ratelimit-cost"), Some("51"));
    assert_eq!(sluice.metric("sluice_persisted_queries").await, 1.0);

    // Now the hash alone costs what its query costs: 51 of the 49 left is
    // refused, as the query itself would be.
    let got = graphql(&sluice, "t", &alone).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS, "{got:?}");
    assert_eq!(got.header("x-ratelimit-cost"), Some("51"));
    assert_eq!(points_left(&sluice, "t").await, 49);
    // Another caller's hash alone goes through at 51.
    let got = graphql(&sluice, "u", &alone).await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
    assert_eq!(got.header("x-ratelimit-cost"), Some("51"));
    assert_eq!(points_left(&sluice, "u").await, 49);
    assert_eq!(upstream.count(), 2);

    // A GET names it in its `extensions` parameter.
    let query = format!(
        "/graphql?operationName=Labels&extensions={}",
        urlencode(&persisted(&hash).to_string())
    );
    let got = support::get(&sluice.url(&query), &[("authorization", "v")]).await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
    assert_eq!(got.header("x-ratelimit-cost"), Some("51"));
    let unknown = format!(
        "/graphql?extensions={}",
        urlencode(&persisted(&sha256("{ nobody }")).to_string())
    );
    assert_not_found(&support::get(&sluice.url(&unknown), &[("authorization", "v")]).await);
    assert_eq!(upstream.count(), 3);
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                char::from(byte).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_preloads_hashes_that_are_never_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("manifest.json");
    let operations = json!({
        "format": "apollo-persisted-query-manifest",
        "version": 1,
        "operations": [
            { "id": sha256(COSTLY), "name": "Labels", "type": "query", "body": COSTLY },
            { "id": sha256(CHEAP), "name": "Viewer", "type": "query", "body": CHEAP },
        ],
    });
    std::fs::write(&manifest, operations.to_string()).unwrap();
    // Room for one learned query: learning two more forgets only learned ones.
    let config = format!(
        "persisted_queries = \"{}\"\nmax_persisted_queries = 1\n{POINTS}",
        manifest.display()
    );
    let (upstream, sluice) = support::start(&config).await;
    assert_eq!(sluice.metric("sluice_persisted_queries").await, 2.0);
    for other in ["query A { a }", "query B { b }"] {
        let pair = json!({ "query": other, "extensions": persisted(&sha256(other)) });
        assert_eq!(graphql(&sluice, "t", &pair).await.status, StatusCode::OK);
    }
    assert_eq!(sluice.metric("sluice_persisted_queries").await, 3.0);
    let got = graphql(
        &sluice,
        "t",
        &json!({ "extensions": persisted(&sha256(COSTLY)) }),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
    assert_eq!(got.header("x-ratelimit-cost"), Some("51"));
    // The first learned one was forgotten for the second.
    let forgotten = json!({ "extensions": persisted(&sha256("query A { a }")) });
    assert_not_found(&graphql(&sluice, "t", &forgotten).await);
    assert_eq!(upstream.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_costs_the_sum_of_its_operations() {
    let (upstream, sluice) = support::start(POINTS).await;
    let two = json!([{ "query": CHEAP }, { "query": COSTLY }]);
    let got = graphql(&sluice, "t", &two).await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
    assert_eq!(got.header("x-ratelimit-cost"), Some("52"));
    // Two of GitHub's example: 102 of the 48 left, and more than the
    // bucket ever holds.
    let big = json!([{ "query": COSTLY }, { "query": COSTLY }]);
    let got = graphql(&sluice, "u", &big).await;
    let problem = support::assert_problem(&got, StatusCode::TOO_MANY_REQUESTS);
    assert!(problem["retry_after_secs"].is_null(), "{problem}");
    assert!(problem["detail"]
        .as_str()
        .unwrap()
        .contains("costs 102 units"));
    // An element sluice cannot read makes the batch unreadable: refused.
    let unknown = json!([{ "query": CHEAP }, { "extensions": persisted(&sha256("{ x }")) }]);
    let problem = support::assert_problem(
        &graphql(&sluice, "t", &unknown).await,
        StatusCode::BAD_REQUEST,
    );
    assert_eq!(problem["type"], "tag:sluice,2026:problems/unreadable-query");
    assert_eq!(upstream.count(), 1);
    assert_eq!(points_left(&sluice, "t").await, 48);
    assert_eq!(points_left(&sluice, "u").await, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_read_is_refused_or_charged_as_unreadable_says() {
    let config = format!(
        "max_key_body_bytes = 4096\n{POINTS}\n\
         [[rule]]\nname = \"charged\"\nmatch.path = \"/charged\"\n\
         key = [\"header:authorization\"]\nrate = \"100/h\"\ncost = \"graphql\"\nunreadable = 40\n"
    );
    let (upstream, sluice) = support::start(&config).await;
    let unreadable = [
        ("{\"operationName\":\"A\"}".to_owned(), "carries no query"),
        (
            json!({ "query": "query { viewer { " }).to_string(),
            "does not parse",
        ),
        (
            json!({ "query": format!("query Big {{ viewer {{ login }} }} #{}", "x".repeat(5000)) })
                .to_string(),
            "larger than this server reads",
        ),
        ("[]".to_owned(), "holds no operation"),
    ];
    for (body, why) in &unreadable {
        let got = post_json(&sluice.url("/graphql"), body, &[("authorization", "t")]).await;
        let problem = support::assert_problem(&got, StatusCode::BAD_REQUEST);
        assert_eq!(problem["type"], "tag:sluice,2026:problems/unreadable-query");
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains("'points'") && detail.contains(why),
            "{detail}"
        );
    }
    // A body in an encoding sluice does not decode.
    let coded = [("authorization", "t"), ("content-encoding", "compress")];
    let got = post_json(&sluice.url("/graphql"), "\u{1f}\u{9d}", &coded).await;
    let problem = support::assert_problem(&got, StatusCode::BAD_REQUEST);
    assert!(problem["detail"]
        .as_str()
        .unwrap()
        .contains("Content-Encoding"));
    assert_eq!(upstream.count(), 0);
    assert_eq!(points_left(&sluice, "t").await, 100);
    assert_eq!(
        sluice
            .metric(r#"sluice_requests_total{rule="points",outcome="missing_key"}"#)
            .await,
        5.0
    );

    // With `unreadable = 40`, each is charged 40 and sent on.
    for (body, _) in &unreadable[..2] {
        let got = post_json(&sluice.url("/charged"), body, &[("authorization", "t")]).await;
        assert_eq!(got.status, StatusCode::OK, "{got:?}");
        assert_eq!(got.header("x-ratelimit-cost"), Some("40"));
    }
    let got = post_json(&sluice.url("/charged"), "{}", &[("authorization", "t")]).await;
    assert_eq!(
        got.status,
        StatusCode::TOO_MANY_REQUESTS,
        "20 left: {got:?}"
    );
    assert_eq!(upstream.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_query_is_costed_decoded_and_sent_as_it_came() {
    let config = POINTS.replace("match.path = \"/graphql\"", "match.path = \"/echo\"");
    let (upstream, sluice) = support::start(&config).await;
    let sent = support::gzip(json!({ "query": COSTLY }).to_string().as_bytes());
    let headers = [
        ("authorization", "t"),
        ("content-type", "application/json"),
        ("content-encoding", "gzip"),
    ];
    let (status, fields, echoed) = support::post_raw(&sluice.url("/echo"), &sent, &headers).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(fields.get("x-ratelimit-cost").unwrap(), "51");
    // The upstream got the bytes the client sent, still coded.
    assert_eq!(&echoed[..], &sent[..]);
    assert_eq!(
        upstream.seen()[0].headers.get("content-encoding").unwrap(),
        "gzip"
    );
}
