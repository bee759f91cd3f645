//! Bans over real HTTP: earned by being limited too often, set and lifted
//! by hand through the admin API, listed, counted, and answered 429 with
//! the ban's remaining time without touching the caller's bucket.

use crate::support;

use std::time::Duration;

use http::{Method, StatusCode};
use support::{assert_problem, get, send, start, Sluice};

async fn post_json(url: &str, body: &str) -> support::Got {
    support::post_json(url, body, &[]).await
}

async fn statuses(sluice: &Sluice, id: &str, n: usize) -> Vec<u16> {
    let mut got = Vec::new();
    for _ in 0..n {
        got.push(
            get(&sluice.url("/api"), &[("x-seller", id)])
                .await
                .status
                .as_u16(),
        );
    }
    got
}

#[tokio::test]
async fn a_ban_set_by_hand_refuses_the_key_until_lifted_and_spares_its_bucket() {
    let (upstream, sluice) = start(
        r#"
[admin]
# The keys here are test names, not secrets (docs/operations.md, "Keys in logs and admin views").
reveal_keys = true

[[rule]]
name = "per-seller"
key = ["header:x-seller"]
rate = "3/m"
"#,
    )
    .await;
    let admin = |path: &str| format!("http://{}{path}", sluice.admin);
    assert_eq!(statuses(&sluice, "s1", 1).await, [200]);

    let created = post_json(
        &admin("/admin/bans"),
        r#"{"rule":"per-seller","key":"s1","for":"10m"}"#,
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.json()["remaining_secs"], 600);

    // Banned: 429 with the ban's remaining seconds, nothing forwarded.
    let seen_before = upstream.seen().len();
    let refused = get(&sluice.url("/api"), &[("x-seller", "s1")]).await;
    let body = assert_problem(&refused, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["banned"], true);
    assert_eq!(body["rule"], "per-seller");
    // A complete quota-exceeded document, like every 429.
    assert_eq!(body["limit"], 3, "{body}");
    assert_eq!(body["remaining"], 0, "{body}");
    assert_eq!(body["violated-policies"][0], "per-seller");
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((599..=600).contains(&retry), "Retry-After {retry}");
    assert_eq!(body["retry_after_secs"], retry);
    assert_eq!(upstream.seen().len(), seen_before);
    // Another seller is untouched.
    assert_eq!(statuses(&sluice, "s2", 1).await, [200]);

    let listed = get(&admin("/admin/bans"), &[]).await.json();
    assert_eq!(listed["bans"][0]["rule"], "per-seller");
    assert_eq!(listed["bans"][0]["key"], "s1");
    assert_eq!(listed["bans"][0]["manual"], true);
    assert_eq!(
        sluice
            .metric(r#"sluice_banned_requests_total{rule="per-seller"}"#)
            .await,
        1.0
    );
    assert_eq!(
        sluice
            .metric(r#"sluice_bans_active{rule="per-seller"}"#)
            .await,
        1.0
    );

    let lifted = send(
        Method::DELETE,
        &admin("/admin/bans?rule=per-seller&key=s1"),
        &[],
    )
    .await;
    assert_eq!(lifted.status, StatusCode::OK, "{}", lifted.body);
    // The ban never touched the bucket: 2 of 3 left.
    assert_eq!(statuses(&sluice, "s1", 3).await, [200, 200, 429]);
    let again = send(
        Method::DELETE,
        &admin("/admin/bans?rule=per-seller&key=s1"),
        &[],
    )
    .await;
    assert_problem(&again, StatusCode::NOT_FOUND);
}

// Paused time: the ban's 2 s pass by `advance`, exactly, on any machine.
#[tokio::test(start_paused = true)]
async fn bad_ban_requests_get_problem_documents() {
    let (_upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "per-ip"
rate = "3/m"
"#,
    )
    .await;
    let url = format!("http://{}/admin/bans", sluice.admin);
    for (body, status) in [
        (
            r#"{"rule":"nope","key":"1.2.3.4","for":"1m"}"#,
            StatusCode::NOT_FOUND,
        ),
        (
            r#"{"rule":"per-ip","key":"not-an-ip","for":"1m"}"#,
            StatusCode::BAD_REQUEST,
        ),
        (
            r#"{"rule":"per-ip","key":"1.2.3.4","for":"soon"}"#,
            StatusCode::BAD_REQUEST,
        ),
        (r#"{"rule":"per-ip"}"#, StatusCode::BAD_REQUEST),
        ("not json", StatusCode::BAD_REQUEST),
    ] {
        let got = post_json(&url, body).await;
        assert_problem(&got, status);
    }
    // An IP key bans that client: the test client is 127.0.0.1.
    let got = post_json(&url, r#"{"rule":"per-ip","key":"127.0.0.1","for":"2s"}"#).await;
    assert_eq!(got.status, StatusCode::CREATED, "{}", got.body);
    assert_eq!(
        get(&sluice.url("/"), &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    tokio::time::advance(Duration::from_nanos(2_000_000_000 - 1)).await;
    assert_eq!(
        get(&sluice.url("/"), &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS,
        "the ban ended early"
    );
    tokio::time::advance(Duration::from_nanos(1)).await;
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
}
