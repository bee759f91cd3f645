//! `GET /admin/top` over real HTTP: the keys a rule limits (or sees) most,
//! in order, with their text form, from known traffic.

use crate::support;

use http::StatusCode;
use serde_json::Value;
use support::{assert_problem, get, start, Sluice};

async fn send_as(sluice: &Sluice, key: &str, n: usize) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..n {
        let got = get(&sluice.url("/api"), &[("x-key", key)]).await;
        statuses.push(got.status.as_u16());
    }
    statuses
}

/// `(rule, key, count)` of each listed key, in order.
fn listed(answer: &Value) -> Vec<(String, Value, u64)> {
    answer["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|entry| {
            (
                entry["rule"].as_str().unwrap().to_owned(),
                entry["key"].clone(),
                entry["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

const TWO_RULES: &str = r#"
[admin]
# The keys here are test names, not secrets (docs/operations.md, "Keys in logs and admin views").
reveal_keys = true

[[rule]]
name = "per-key"
key = ["header:x-key"]
rate = "2/m"

[[rule]]
name = "everyone"
key = ["global"]
rate = "1000/m"
"#;

#[tokio::test]
async fn the_most_limited_keys_come_first_with_their_text_and_exact_counts() {
    let (_upstream, sluice) = start(TWO_RULES).await;
    assert_eq!(
        send_as(&sluice, "alice", 10).await,
        [200, 200, 429, 429, 429, 429, 429, 429, 429, 429]
    );
    assert_eq!(send_as(&sluice, "bob", 5).await, [200, 200, 429, 429, 429]);
    assert_eq!(send_as(&sluice, "carol", 1).await, [200]);
    let admin = |path: &str| format!("http://{}{path}", sluice.admin);

    let limited = get(&admin("/admin/top"), &[]).await;
    assert_eq!(limited.status, StatusCode::OK, "{}", limited.body);
    let limited = limited.json();
    assert_eq!(limited["by"], "limited");
    assert_eq!(
        listed(&limited),
        [
            ("per-key".to_owned(), Value::from("alice"), 8),
            ("per-key".to_owned(), Value::from("bob"), 3),
        ]
    );
    assert_eq!(limited["keys"][0]["count_error"], 0);
    assert_eq!(limited["keys"][0]["key_hash"].as_str().unwrap().len(), 16);

    // By requests: every rule's view, a key named once it repeats (carol's
    // one request is counted, unnamed); n bounds the list.
    let requests = get(&admin("/admin/top?by=requests&rule=per-key"), &[])
        .await
        .json();
    assert_eq!(
        listed(&requests),
        [
            ("per-key".to_owned(), Value::from("alice"), 10),
            ("per-key".to_owned(), Value::from("bob"), 5),
            ("per-key".to_owned(), Value::Null, 1),
        ]
    );
    let global = get(&admin("/admin/top?by=requests&rule=everyone&n=1"), &[])
        .await
        .json();
    // A rule counts every request it decides, refused by another rule or
    // not: the global rule decided all 16 (its key's text is empty).
    assert_eq!(
        listed(&global),
        [("everyone".to_owned(), Value::from(""), 16)]
    );
    let two = get(&admin("/admin/top?n=1"), &[]).await.json();
    assert_eq!(
        listed(&two),
        [("per-key".to_owned(), Value::from("alice"), 8)]
    );
}

#[tokio::test]
async fn a_banned_key_counts_as_limited() {
    let (_upstream, sluice) = start(
        r#"
[admin]
# The keys here are test names, not secrets (docs/operations.md, "Keys in logs and admin views").
reveal_keys = true

[[rule]]
name = "per-key"
key = ["header:x-key"]
rate = "100/m"
"#,
    )
    .await;
    let admin = |path: &str| format!("http://{}{path}", sluice.admin);
    let banned = support::post_json(
        &admin("/admin/bans"),
        r#"{"rule":"per-key","key":"mallory","for":"1m"}"#,
        &[],
    )
    .await;
    assert_eq!(banned.status, StatusCode::CREATED, "{}", banned.body);
    assert_eq!(send_as(&sluice, "mallory", 3).await, [429, 429, 429]);
    let top = get(&admin("/admin/top"), &[]).await.json();
    assert_eq!(
        listed(&top),
        [("per-key".to_owned(), Value::from("mallory"), 3)]
    );
}

#[tokio::test]
async fn bad_questions_get_problem_documents() {
    let (_upstream, sluice) = start(TWO_RULES).await;
    let admin = |path: &str| format!("http://{}{path}", sluice.admin);
    let unknown = get(&admin("/admin/top?rule=nope"), &[]).await;
    assert_problem(&unknown, StatusCode::NOT_FOUND);
    for query in ["n=0", "n=1001", "n=x", "by=bytes"] {
        let bad = get(&admin(&format!("/admin/top?{query}")), &[]).await;
        let body = assert_problem(&bad, StatusCode::BAD_REQUEST);
        assert!(body["detail"].as_str().is_some(), "{query}: {body}");
    }
    let empty = get(&admin("/admin/top"), &[]).await.json();
    assert_eq!(empty["keys"], Value::Array(vec![]));
}
