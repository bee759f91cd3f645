//! Limits that read the request body (docs/conversation.md): `body:<pointer>`
//! keys, `graphql:operation` and `graphql:type` keys, and `cost = "graphql"`,
//! against the real server and a real upstream on loopback. The body is read
//! only for the requests such a rule matches, and arrives upstream byte for
//! byte either way.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;

use crate::support::{self, post_json, Got, Sluice};

const TENANTS: &str = r#"
[[rule]]
name = "per-tenant"
match.path_prefix = "/rpc"
key = ["body:/tenant/id"]
rate = "2/m"

[[rule]]
name = "per-method-strict"
match.path_prefix = "/strict"
key = ["body:/method"]
missing = "reject"
rate = "100/m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_named_in_the_body_has_its_own_budget() {
    let (upstream, sluice) = support::start(TENANTS).await;
    let call = |tenant: &str| json!({"tenant": {"id": tenant}, "method": "eth_call"}).to_string();
    for _ in 0..2 {
        let got = post_json(&sluice.url("/rpc"), &call("acme"), &[]).await;
        assert_eq!(got.status, StatusCode::OK, "{got:?}");
    }
    let third = post_json(&sluice.url("/rpc"), &call("acme"), &[]).await;
    assert_eq!(third.status, StatusCode::TOO_MANY_REQUESTS, "{third:?}");
    // Another tenant, and the same tenant written as a number's text, differ
    // only by value: "42" and 42 share a bucket.
    assert_eq!(
        post_json(&sluice.url("/rpc"), &call("globex"), &[])
            .await
            .status,
        StatusCode::OK
    );
    let as_number = r#"{"tenant":{"id":42}}"#;
    let as_string = r#"{"tenant":{"id":"42"}}"#;
    assert_eq!(
        post_json(&sluice.url("/rpc"), as_number, &[]).await.status,
        StatusCode::OK
    );
    assert_eq!(
        post_json(&sluice.url("/rpc"), as_string, &[]).await.status,
        StatusCode::OK
    );
    let got = post_json(&sluice.url("/rpc"), as_number, &[]).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS, "{got:?}");
    assert_eq!(upstream.count(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_the_body_does_not_hold_is_a_missing_key() {
    let (upstream, sluice) = support::start(TENANTS).await;
    // Under `missing = "shared"` (the default) every such request shares one
    // bucket: an object, null, an absent member, a body that is not JSON.
    let missing = [
        (r#"{"tenant":{"id":{"x":1}}}"#, "application/json"),
        (r#"{"tenant":{"id":null}}"#, "application/json"),
        (r#"{"tenant":{}}"#, "application/json"),
        (r#"{"tenant":{"id":"acme"}"#, "application/json"),
    ];
    for (body, content_type) in &missing[..2] {
        let got = post(&sluice.url("/rpc"), body, content_type).await;
        assert_eq!(got.status, StatusCode::OK, "{body}: {got:?}");
    }
    for (body, content_type) in &missing[2..] {
        let got = post(&sluice.url("/rpc"), body, content_type).await;
        assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS, "{body}: {got:?}");
    }
    // JSON sent as another content type is not read as JSON.
    let got = post(
        &sluice.url("/rpc"),
        r#"{"tenant":{"id":"acme"}}"#,
        "text/plain",
    )
    .await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS, "{got:?}");
    // `missing = "reject"` answers 400 and names the rule.
    let got = post(
        &sluice.url("/strict"),
        r#"{"params":[]}"#,
        "application/json",
    )
    .await;
    let problem = support::assert_problem(&got, StatusCode::BAD_REQUEST);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("per-method-strict"),
        "{problem}"
    );
    let got = post(
        &sluice.url("/strict"),
        r#"{"method":"x"}"#,
        "application/json",
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
    assert_eq!(upstream.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_read_for_a_key_arrives_byte_for_byte() {
    let (_upstream, sluice) = support::start(&format!(
        "max_key_body_bytes = 1024\n{}",
        TENANTS.replace("/rpc", "/echo")
    ))
    .await;
    // Escapes, non-ASCII text, odd spacing: nothing is re-encoded.
    let body = "{ \"tenant\" : {\"id\":\"a\\u0063me\"},\n\t\"note\":\"caf\u{e9} \\\"q\\\"\" }";
    let got = post(&sluice.url("/echo"), body, "application/json").await;
    assert_eq!((got.status, got.body.as_str()), (StatusCode::OK, body));
    // Sent chunked in pieces: gathered, then sent on as the same bytes.
    let pieces = ["{\"tenant\":", "{\"id\":\"acme\"}", ",\"n\":1}"];
    let got = post_pieces(&sluice.url("/echo"), &pieces).await;
    assert_eq!(
        (got.status, got.body.as_str()),
        (StatusCode::OK, pieces.concat().as_str())
    );
    // Longer than the bound, declared or chunked: the key is missing, and the
    // body still arrives whole (the part read, then the rest).
    let long = format!(
        "{{\"tenant\":{{\"id\":\"acme\"}},\"pad\":\"{}\"}}",
        "p".repeat(3000)
    );
    let got = post(&sluice.url("/echo"), &long, "application/json").await;
    assert_eq!((got.status, got.body.len()), (StatusCode::OK, long.len()));
    assert_eq!(got.body, long);
    let chunks: Vec<String> = long
        .as_bytes()
        .chunks(700)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect();
    let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
    let got = post_pieces(&sluice.url("/echo"), &chunks).await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
    assert_eq!(got.body, long);
}

/// The behaviour under test: how long a request whose body is still open
/// is seen not to reach the upstream (nothing to wait for: its absence).
const BODY_STILL_OPEN: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_no_body_rule_matches_streams_unbuffered_and_one_it_matches_waits_for_its_body() {
    let (upstream, sluice) = support::start(TENANTS).await;
    // No rule reads the body of /upload: the upstream gets the request while
    // the client is still sending it.
    let (sender, body) = channel_body();
    let url = sluice.url("/upload");
    let upload = tokio::spawn(async move { send_body(&url, body).await });
    sender
        .send(Bytes::from_static(b"first part "))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), upstream.wait_for(1))
        .await
        .expect("the upstream saw the request before its body ended");
    sender
        .send(Bytes::from_static(b"and the rest"))
        .await
        .unwrap();
    drop(sender);
    let got = upload.await.unwrap();
    assert_eq!((got.status, got.body.as_str()), (StatusCode::OK, "23"));

    // /rpc's rule keys on the body: the request waits at sluice until its
    // body (within the bound) is all there, then is decided and forwarded.
    let (sender, body) = channel_body();
    let url = sluice.url("/rpc");
    let call = tokio::spawn(async move { send_body(&url, body).await });
    sender
        .send(Bytes::from_static(b"{\"tenant\":"))
        .await
        .unwrap();
    tokio::time::sleep(BODY_STILL_OPEN).await;
    assert_eq!(upstream.count(), 1, "forwarded before its key was read");
    sender
        .send(Bytes::from_static(b"{\"id\":\"acme\"}}"))
        .await
        .unwrap();
    drop(sender);
    assert_eq!(call.await.unwrap().status, StatusCode::OK);
    assert_eq!(upstream.count(), 2);
}

const GRAPHQL: &str = r#"
[[rule]]
name = "graphql-points"
match.path = "/graphql"
key = ["header:authorization"]
rate = "100/h"
cost = "graphql"

[[rule]]
name = "per-operation"
match.path = "/graphql"
key = ["graphql:operation"]
rate = "3/m"

[[rule]]
name = "mutations"
match.path = "/graphql"
match.method = "POST"
key = ["graphql:type"]
missing = "skip"
tiers = { by = "graphql:type", query = { rate = "1000/m" } }
rate = "2/m"
"#;

/// GitHub's worked example: 1 + 100 + 5,000 requests, a cost of 51.
const GITHUB_EXAMPLE: &str = "query Labels { viewer { login repositories(first: 100) { \
     edges { node { name issues(first: 50) { edges { node { title labels(first: 60) { \
     edges { node { name } } } } } } } } } } }";

async fn graphql(sluice: &Sluice, token: &str, body: serde_json::Value) -> Got {
    post_json(
        &sluice.url("/graphql"),
        &body.to_string(),
        &[("authorization", token)],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graphql_query_takes_its_cost_as_github_computes_it() {
    let (upstream, sluice) = support::start(GRAPHQL).await;
    // Explained first, the query would leave 100 - 51 of the points bucket.
    let explained = explain(&sluice, "t1", json!({ "query": GITHUB_EXAMPLE })).await;
    let next = &explained["rules"][0]["buckets"][0]["next_request"];
    assert_eq!(next["decision"], "allow", "{explained}");
    assert_eq!(next["remaining"], 49, "{explained}");
    let got = graphql(&sluice, "t1", json!({ "query": GITHUB_EXAMPLE })).await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
    assert_eq!(got.header("x-ratelimit-cost"), Some("51"));
    // 100 - 51 left of the points bucket (the response names the tightest
    // limit, which the per-operation rule may be: read the points one).
    let explained = explain(&sluice, "t1", json!({ "query": GITHUB_EXAMPLE })).await;
    let points = &explained["rules"][0];
    assert_eq!(points["cost"], 51, "{explained}");
    assert_eq!(points["buckets"][0]["remaining"], 49, "{explained}");
    assert_eq!(points["buckets"][0]["next_request"]["decision"], "deny");
    // A second one would need 51 of the 49 left: refused, with Retry-After.
    let got = graphql(&sluice, "t1", json!({ "query": GITHUB_EXAMPLE })).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS, "{got:?}");
    assert!(got.header("retry-after").is_some(), "{got:?}");
    // Variables count as the request gives them: first: 10 → 1 + 10 + 500
    // = 511 requests, a cost of 5.
    let with_variables = json!({
        "query": GITHUB_EXAMPLE.replace("query Labels {", "query Small($n: Int = 100) {")
            .replace("repositories(first: 100)", "repositories(first: $n)"),
        "variables": { "n": 10 },
    });
    let got = graphql(&sluice, "t1", with_variables).await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
    assert_eq!(got.header("x-ratelimit-cost"), Some("5"));
    // A fragment counts where it is spread: twice here, 2 × (1 + 100) = 202.
    let fragments = json!({
        "query": "query Twice { a: viewer { ...Repos } b: viewer { ...Repos } } \
                  fragment Repos on User { repositories(first: 100) { edges { node { \
                  issues(first: 1) { totalCount } } } } }",
    });
    let got = graphql(&sluice, "t2", fragments).await;
    assert_eq!(got.header("x-ratelimit-cost"), Some("2"), "{got:?}");
    // A query that does not parse has no cost to read: refused (the
    // rule's `unreadable` is "refuse" by default), never sent on.
    let broken = graphql(&sluice, "t2", json!({ "query": "query { viewer { " })).await;
    let problem = support::assert_problem(&broken, StatusCode::BAD_REQUEST);
    assert_eq!(problem["type"], "tag:sluice,2026:problems/unreadable-query");
    assert_eq!(upstream.count(), 3);
    // The status page says what the points rule counts.
    let status = support::get(&format!("http://{}/admin/status", sluice.admin), &[]).await;
    let rules = status.json()["rules"].clone();
    assert_eq!(
        rules[0]["limits"], "100/h, a request taking its GraphQL query's cost",
        "{rules}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refunded_query_gives_back_and_counts_what_it_cost() {
    let config = r#"
[[rule]]
name = "points"
match.path_prefix = "/status"
key = ["header:authorization"]
rate = "100/h"
cost = "graphql"
refund_on = ["5xx"]
"#;
    let (_upstream, sluice) = support::start(config).await;
    let query = json!({ "query": GITHUB_EXAMPLE }).to_string();
    let failing = sluice.url("/status/503");
    // Each 503 gives its 51 back: three of them fit in a bucket of 100.
    for _ in 0..3 {
        let got = post_json(&failing, &query, &[("authorization", "t")]).await;
        assert_eq!(got.status, StatusCode::SERVICE_UNAVAILABLE, "{got:?}");
        assert_eq!(got.header("x-ratelimit-cost"), Some("51"));
    }
    let refunded = sluice
        .metric(r#"sluice_budget_refunded_total{rule="points"}"#)
        .await;
    assert_eq!(refunded, 153.0, "three refunds of 51 units");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_costing_more_than_the_bucket_holds_is_refused_without_touching_it() {
    let (upstream, sluice) = support::start(GRAPHQL).await;
    // Twelve nested connections of 100: 100^12 overflows 64 bits; the sum
    // saturates, and is refused, never wrapped into a small cost.
    let mut query = String::from("query Huge { ");
    for depth in 0..12 {
        query.push_str(&format!("c{depth}(first: 100) {{ "));
    }
    query.push_str("id");
    query.push_str(&" }".repeat(12));
    query.push_str(" }");
    let got = graphql(&sluice, "t1", json!({ "query": query })).await;
    let problem = support::assert_problem(&got, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        got.header("retry-after"),
        None,
        "waiting does not help: {got:?}"
    );
    // The usual quota-exceeded answer, naming the rule, its limit and what
    // is left (all of it), with the rate-limit fields of every 429.
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(problem["rule"], "graphql-points");
    assert_eq!(
        (problem["limit"].as_u64(), problem["remaining"].as_u64()),
        (Some(100), Some(100))
    );
    assert!(problem["retry_after_secs"].is_null(), "{problem}");
    assert_eq!(problem["violated-policies"], json!(["graphql-points"]));
    let policies = got.header("ratelimit-policy").unwrap_or_default();
    assert!(policies.contains("\"graphql-points\";q=100"), "{got:?}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains(&u64::MAX.to_string()) && detail.contains("graphql-points"),
        "{detail}"
    );
    // GitHub's example (51 of the 100) still fits: the refusal took nothing.
    let got = graphql(&sluice, "t1", json!({ "query": GITHUB_EXAMPLE })).await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
    assert_eq!(upstream.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_and_mutations_have_budgets_of_their_own() {
    let (_upstream, sluice) = support::start(GRAPHQL).await;
    let named = |name: &str| json!({ "query": format!("query {name} {{ viewer {{ login }} }}") });
    for _ in 0..3 {
        assert_eq!(
            graphql(&sluice, "t", named("Viewer")).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(
        graphql(&sluice, "t", named("Viewer")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        graphql(&sluice, "t", named("Other")).await.status,
        StatusCode::OK
    );
    // operationName picks one of several operations; without it, several
    // operations are a missing key (shared with every other such request).
    let two = "query A { viewer { login } } query B { viewer { id } }";
    let got = graphql(&sluice, "t", json!({ "query": two, "operationName": "B" })).await;
    assert_eq!(got.status, StatusCode::OK);
    // Mutations: 2 a minute whatever their name; queries have 1000.
    for name in ["AddStar", "RemoveStar"] {
        let body = json!({ "query": format!("mutation {name} {{ addStar {{ id }} }}") });
        assert_eq!(graphql(&sluice, "t", body).await.status, StatusCode::OK);
    }
    let body = json!({ "query": "mutation Third { addStar { id } }" });
    let got = graphql(&sluice, "t", body).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS, "{got:?}");
    assert!(got.body.contains("mutations"), "{got:?}");
    // The same operation as a GET and as `application/graphql`.
    let query = "query%20Viewer%20%7B%20viewer%20%7B%20login%20%7D%20%7D";
    let got = support::get(
        &sluice.url(&format!("/graphql?query={query}")),
        &[("authorization", "t")],
    )
    .await;
    assert_eq!(
        got.status,
        StatusCode::TOO_MANY_REQUESTS,
        "the GET is the same Viewer: {got:?}"
    );
    let got = post_with(
        &sluice.url("/graphql"),
        "query Fresh { viewer { login } }",
        &[
            ("content-type", "application/graphql"),
            ("authorization", "t"),
        ],
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_body_keys_as_labels_and_the_cost() {
    let config = format!("{TENANTS}{GRAPHQL}");
    let (_upstream, sluice) = support::start(&config).await;
    let answer = explain_request(
        &sluice,
        json!({
            "method": "POST", "path": "/rpc", "ip": "203.0.113.7",
            "headers": {"content-type": "application/json"},
            "body": r#"{"tenant":{"id":"secret-tenant"}}"#,
        }),
    )
    .await;
    let rule = &answer["rules"][0];
    assert_eq!(rule["applies"], true, "{answer}");
    let key = rule["key"].as_str().unwrap();
    assert!(!answer.to_string().contains("secret-tenant"), "{answer}");
    // A quarter of its first characters, elided, and a keyed hash.
    assert!(
        key.starts_with("sec…#") && key.len() == "sec…#".len() + 12,
        "{key}"
    );
    let answer = explain(&sluice, "t", json!({ "query": GITHUB_EXAMPLE })).await;
    let per_operation = answer["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|rule| rule["rule"] == "per-operation")
        .unwrap();
    assert_eq!(per_operation["key"], "Labels", "{answer}");
}

async fn explain(sluice: &Sluice, token: &str, body: serde_json::Value) -> serde_json::Value {
    explain_request(
        sluice,
        json!({
            "method": "POST", "path": "/graphql", "ip": "203.0.113.7",
            "headers": {"content-type": "application/json", "authorization": token},
            "body": body.to_string(),
        }),
    )
    .await
}

async fn explain_request(sluice: &Sluice, question: serde_json::Value) -> serde_json::Value {
    let got = post_json(
        &format!("http://{}/admin/explain", sluice.admin),
        &question.to_string(),
        &[],
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
    got.json()
}

async fn post(url: &str, body: &str, content_type: &str) -> Got {
    post_with(url, body, &[("content-type", content_type)]).await
}

async fn post_with(url: &str, body: &str, headers: &[(&str, &str)]) -> Got {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = Request::builder().method(Method::POST).uri(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    support::collect(client.request(request).await.expect("POST")).await
}

/// `POST url` with a JSON body sent chunked, one piece at a time.
async fn post_pieces(url: &str, pieces: &[&str]) -> Got {
    let (sender, body) = channel_body();
    let url = url.to_owned();
    let call = tokio::spawn(async move { send_body(&url, body).await });
    for piece in pieces {
        sender.send(Bytes::from(piece.to_string())).await.unwrap();
    }
    drop(sender);
    call.await.unwrap()
}

type ChannelBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// A chunked body whose pieces the test sends, and which ends when the
/// sender is dropped.
fn channel_body() -> (tokio::sync::mpsc::Sender<Bytes>, ChannelBody) {
    let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(4);
    let frames = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let piece = receiver.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(piece)), receiver))
    });
    (sender, StreamBody::new(frames).boxed())
}

async fn send_body(url: &str, body: ChannelBody) -> Got {
    let client = Client::builder(TokioExecutor::new()).build_http::<ChannelBody>();
    let request = Request::post(url)
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    support::collect(client.request(request).await.expect("POST")).await
}
