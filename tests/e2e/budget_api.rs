//! The budget calls over real HTTP: `POST /admin/spend` (a backend spends a
//! caller's budget) and `POST /v1/check` (decision as a service, one check
//! or a batch), on the very buckets proxied traffic takes from, both ways.
//! Token buckets with slow refills make the numbers exact where a window's
//! would depend on the wall clock.

use crate::support;

use std::time::Duration;

use http::StatusCode;
use serde_json::{json, Value};
use support::{
    assert_problem, get, post_json, start, write_config, Got, Sluice, SluiceProcess, Upstream,
};

/// A seller rule of 10 per hour (one unit back every 6 minutes: nothing
/// refills while a test runs), with a premium tier and a ban.
const SELLERS: &str = r#"
[admin]
# The keys here are test names, not secrets (docs/operations.md, "Keys in logs and admin views").
reveal_keys = true

[[rule]]
name = "per-seller"
key = ["header:x-seller"]
rate = "10/h"
tiers = { by = "header:x-plan", premium = { rate = "100/h" } }
ban = { after = 2, within = "1m", for = "10m" }
"#;

async fn spend(sluice: &Sluice, body: &str) -> Got {
    post_json(&format!("http://{}/admin/spend", sluice.admin), body, &[]).await
}

async fn check(sluice: &Sluice, body: &str) -> Got {
    post_json(&format!("http://{}/v1/check", sluice.admin), body, &[]).await
}

/// A check answered 200, as JSON.
async fn checked(sluice: &Sluice, body: Value) -> Value {
    let got = check(sluice, &body.to_string()).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    assert_eq!(got.header("content-type"), Some("application/json"));
    got.json()
}

async fn proxied(sluice: &Sluice, seller: &str) -> Got {
    get(&sluice.url("/api"), &[("x-seller", seller)]).await
}

/// `value` is `expected` milliseconds give or take `slack` (real time
/// passes between the calls of a test).
fn about(value: &Value, expected: u64, slack: u64) -> bool {
    value
        .as_u64()
        .is_some_and(|ms| ms <= expected && ms + slack >= expected)
}

#[tokio::test(start_paused = true)]
async fn a_spend_puts_the_caller_in_debt_and_its_requests_wait_it_out() {
    // 10/s: one unit per 100 ms, 10 at most; on paused time.
    let (upstream, sluice) = support::paused::start(
        "",
        r#"
[admin]
# The keys here are test names, not secrets (docs/operations.md, "Keys in logs and admin views").
reveal_keys = true

[[rule]]
name = "per-seller"
key = ["header:x-seller"]
rate = "10/s"
"#,
    )
    .await;
    let got = spend(&sluice, r#"{"rule":"per-seller","key":"s1","amount":25}"#).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    // 15 units of debt: a unit fits again after 1.6 s, full after 2.5 s.
    assert_eq!(
        got.json(),
        json!({"rule": "per-seller", "key": "s1", "spent": 25, "remaining": 0,
               "retry_after_ms": 1600, "reset_after_ms": 2500})
    );

    // The caller's requests are refused for as long as the debt says.
    let refused = proxied(&sluice, "s1").await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry), "Retry-After {retry}");
    assert_eq!(upstream.count(), 0);
    // Another seller is untouched.
    assert_eq!(proxied(&sluice, "s2").await.status, StatusCode::OK);
    // Exactly as long.
    tokio::time::advance(Duration::from_millis(1599)).await;
    assert_eq!(
        proxied(&sluice, "s1").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(proxied(&sluice, "s1").await.status, StatusCode::OK);

    assert_eq!(
        sluice
            .metric(r#"sluice_budget_charged_total{rule="per-seller"}"#)
            .await,
        25.0
    );
    // Spending nothing only reports: the one request since took a unit
    // and the debt is gone.
    let nothing = spend(&sluice, r#"{"rule":"per-seller","key":"s2","amount":0}"#).await;
    assert_eq!(nothing.status, StatusCode::OK, "{}", nothing.body);
    let nothing = nothing.json();
    assert_eq!(nothing["spent"], 0);
    assert_eq!(nothing["retry_after_ms"], 0);
    assert!(
        nothing["remaining"].as_u64().is_some_and(|r| r >= 9),
        "{nothing}"
    );
}

#[tokio::test]
async fn a_spend_reports_when_a_request_of_the_rules_cost_would_pass() {
    // Requests cost 4 of 10/s: after spending 10, a request needs 400 ms.
    let (_upstream, sluice) = start(
        r#"
[[rule]]
name = "heavy"
key = ["header:x-seller"]
rate = "10/s"
cost = 4
"#,
    )
    .await;
    let got = spend(&sluice, r#"{"rule":"heavy","key":"s1","amount":10}"#).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    let got = got.json();
    assert_eq!(got["remaining"], 0);
    assert_eq!(got["retry_after_ms"], 400, "{got}");
    assert_eq!(got["reset_after_ms"], 1000, "{got}");
}

#[tokio::test]
async fn bad_spends_get_problem_documents_saying_why() {
    let (_upstream, sluice) = start(
        r#"
[[rule]]
name = "per-ip"
rate = "10/m"

[[rule]]
name = "render"
match = { path_prefix = "/render" }
algorithm = "concurrency"
max_in_flight = 2

[[rule]]
name = "paced"
match = { path_prefix = "/paced" }
algorithm = "leaky_bucket"
rate = "10/s"

[[rule]]
name = "exact"
match = { path_prefix = "/exact" }
algorithm = "sliding_log"
rate = "10/s"
"#,
    )
    .await;
    for (body, status, says) in [
        (
            r#"{"rule":"nope","key":"1.2.3.4","amount":1}"#,
            StatusCode::NOT_FOUND,
            "no rule is named \"nope\"",
        ),
        ("not json", StatusCode::BAD_REQUEST, "not valid JSON"),
        (
            r#"{"rule":"per-ip","key":"1.2.3.4","amount":-1}"#,
            StatusCode::BAD_REQUEST,
            "must not be negative",
        ),
        (
            r#"{"rule":"per-ip","key":"1.2.3.4","amount":2.5}"#,
            StatusCode::BAD_REQUEST,
            "whole number",
        ),
        (
            r#"{"rule":"per-ip","key":"1.2.3.4","amount":"3"}"#,
            StatusCode::BAD_REQUEST,
            "must be a JSON number",
        ),
        (
            r#"{"rule":"per-ip","key":"1.2.3.4"}"#,
            StatusCode::BAD_REQUEST,
            "\"amount\" is missing",
        ),
        (
            r#"{"rule":"per-ip","key":"not-an-ip","amount":1}"#,
            StatusCode::BAD_REQUEST,
            "not an IP address",
        ),
        (
            r#"[{"rule":"per-ip","key":"1.2.3.4","amount":1}]"#,
            StatusCode::BAD_REQUEST,
            "not an array",
        ),
        (
            r#"{"rule":"render","key":"1.2.3.4","amount":1}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "requests in flight",
        ),
        (
            r#"{"rule":"paced","key":"1.2.3.4","amount":1}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "token_bucket, fixed_window or sliding_window",
        ),
        (
            r#"{"rule":"exact","key":"1.2.3.4","amount":1}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "sliding_log, which cannot carry a debt",
        ),
    ] {
        let got = spend(&sluice, body).await;
        let problem = assert_problem(&got, status);
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{body}: {detail}");
    }
    // Nothing was spent by any of them.
    assert_eq!(
        sluice
            .metric(r#"sluice_budget_charged_total{rule="per-ip"}"#)
            .await,
        0.0
    );
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_check_takes_units_and_tells_what_is_left_exactly() {
    let (_upstream, sluice) = start(SELLERS).await;
    let s1 = json!({"rule": "per-seller", "key": "s1"});
    // 10/h: one unit every 360 s.
    assert_eq!(
        checked(&sluice, s1.clone()).await,
        json!({"allowed": true, "remaining": 9, "retry_after_ms": 0, "reset_after_ms": 360_000})
    );
    let eight = checked(
        &sluice,
        json!({"rule": "per-seller", "key": "s1", "cost": 8}),
    )
    .await;
    assert_eq!(eight["allowed"], true);
    assert_eq!(eight["remaining"], 1);
    assert!(about(&eight["reset_after_ms"], 3_240_000, 5_000), "{eight}");
    // Two units do not fit in the one left: the second arrives in 360 s.
    let two = checked(
        &sluice,
        json!({"rule": "per-seller", "key": "s1", "cost": 2}),
    )
    .await;
    assert_eq!(two["allowed"], false, "{two}");
    assert_eq!(two["remaining"], 1);
    assert!(about(&two["retry_after_ms"], 360_000, 5_000), "{two}");
    // More than the bucket holds can never pass.
    let never = checked(
        &sluice,
        json!({"rule": "per-seller", "key": "s2", "cost": 11}),
    )
    .await;
    assert_eq!(
        never,
        json!({"allowed": false, "remaining": 10, "retry_after_ms": null, "reset_after_ms": 0})
    );
    // A tier named by its value: premium sellers have 100/h.
    let premium = checked(
        &sluice,
        json!({"rule": "per-seller", "key": "s3", "tier": "premium"}),
    )
    .await;
    assert_eq!(premium["remaining"], 99, "{premium}");
    assert_eq!(premium["reset_after_ms"], 36_000);

    // Checks are decided as requests are: counted in the rule's outcomes
    // (three allowed, two limited) and heavy hitters.
    for (outcome, count) in [("allowed", 3.0), ("limited", 2.0)] {
        let series = format!(r#"sluice_requests_total{{rule="per-seller",outcome="{outcome}"}}"#);
        assert_eq!(sluice.metric(&series).await, count, "{series}");
    }
    let top = get(
        &format!("http://{}/admin/top?rule=per-seller", sluice.admin),
        &[],
    )
    .await;
    let top = top.json();
    let keys = top["keys"].as_array().expect("a list");
    let mut refused: Vec<_> = keys.iter().map(|k| (&k["key"], &k["count"])).collect();
    refused.sort_by_key(|(key, _)| key.to_string());
    assert_eq!(
        refused,
        [(&json!("s1"), &json!(1)), (&json!("s2"), &json!(1))],
        "{top}"
    );
}

#[tokio::test]
async fn checks_and_proxied_requests_share_one_bucket_both_ways() {
    let (upstream, sluice) = start(SELLERS).await;
    // Proxied requests lower what a check reports.
    for _ in 0..3 {
        assert_eq!(proxied(&sluice, "s1").await.status, StatusCode::OK);
    }
    let look = json!({"rule": "per-seller", "key": "s1", "cost": 0});
    assert_eq!(checked(&sluice, look.clone()).await["remaining"], 7);
    // A premium caller's requests and checks share the premium bucket.
    let premium = get(
        &sluice.url("/api"),
        &[("x-seller", "s9"), ("x-plan", "premium")],
    )
    .await;
    assert_eq!(premium.status, StatusCode::OK);
    let premium = json!({"rule": "per-seller", "key": "s9", "tier": "premium", "cost": 0});
    assert_eq!(checked(&sluice, premium).await["remaining"], 99);

    // Checks take what proxied requests would have had.
    let took = checked(
        &sluice,
        json!({"rule": "per-seller", "key": "s1", "cost": 7}),
    )
    .await;
    assert_eq!(took["allowed"], true);
    assert_eq!(took["remaining"], 0);
    let refused = proxied(&sluice, "s1").await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(upstream.count(), 4);

    // A spend does too: s2 spends its whole budget, then is refused.
    let spent = spend(&sluice, r#"{"rule":"per-seller","key":"s2","amount":10}"#).await;
    assert_eq!(spent.status, StatusCode::OK, "{}", spent.body);
    assert_eq!(spent.json()["remaining"], 0);
    assert_eq!(
        proxied(&sluice, "s2").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn a_look_of_cost_zero_takes_nothing_and_strikes_nothing() {
    let (_upstream, sluice) = start(SELLERS).await;
    let look = json!({"rule": "per-seller", "key": "s1", "cost": 0});
    for _ in 0..3 {
        assert_eq!(
            checked(&sluice, look.clone()).await,
            json!({"allowed": true, "remaining": 10, "retry_after_ms": 0, "reset_after_ms": 0})
        );
    }
    // Empty but not in debt: a look still passes; in debt, it waits too.
    let spent = spend(&sluice, r#"{"rule":"per-seller","key":"s1","amount":10}"#).await;
    assert_eq!(spent.status, StatusCode::OK);
    assert_eq!(checked(&sluice, look.clone()).await["allowed"], true);
    let spent = spend(&sluice, r#"{"rule":"per-seller","key":"s1","amount":1}"#).await;
    assert_eq!(spent.status, StatusCode::OK);
    for _ in 0..3 {
        let in_debt = checked(&sluice, look.clone()).await;
        assert_eq!(in_debt["allowed"], false, "{in_debt}");
        assert!(
            about(&in_debt["retry_after_ms"], 360_000, 5_000),
            "{in_debt}"
        );
    }
    // Three refused looks, and the ban (after 2) never started.
    assert_eq!(
        sluice
            .metric(r#"sluice_bans_total{rule="per-seller"}"#)
            .await,
        0.0
    );
}

#[tokio::test]
async fn refused_checks_strike_the_rules_ban_like_refused_requests() {
    let (upstream, sluice) = start(SELLERS).await;
    let all = json!({"rule": "per-seller", "key": "s1", "cost": 10});
    assert_eq!(checked(&sluice, all.clone()).await["allowed"], true);
    let one = json!({"rule": "per-seller", "key": "s1"});
    // Two refusals within a minute: banned for 10 minutes.
    for _ in 0..2 {
        let refused = checked(&sluice, one.clone()).await;
        assert_eq!(refused["allowed"], false);
        assert!(refused.get("banned").is_none(), "{refused}");
    }
    let banned = checked(&sluice, one.clone()).await;
    assert_eq!(banned["allowed"], false);
    assert_eq!(banned["banned"], true);
    assert_eq!(banned["remaining"], 0);
    assert!(about(&banned["retry_after_ms"], 600_000, 5_000), "{banned}");
    // The ban is the rule's: proxied requests are refused by it, and it is
    // listed under the key's text.
    let refused = proxied(&sluice, "s1").await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.json()["banned"], true);
    assert_eq!(upstream.count(), 0);
    let bans = get(&format!("http://{}/admin/bans", sluice.admin), &[])
        .await
        .json();
    assert_eq!(bans["bans"][0]["key"], "s1", "{bans}");
    assert_eq!(bans["bans"][0]["manual"], false);
    assert_eq!(
        sluice
            .metric(r#"sluice_bans_total{rule="per-seller"}"#)
            .await,
        1.0
    );
    // A look at a banned key says so too, without a strike.
    let look = checked(
        &sluice,
        json!({"rule": "per-seller", "key": "s1", "cost": 0}),
    )
    .await;
    assert_eq!(look["banned"], true);
}

#[tokio::test]
async fn a_batch_is_answered_in_order_each_check_on_its_own() {
    let (_upstream, sluice) = start(SELLERS).await;
    let batch = json!([
        {"rule": "per-seller", "key": "s1", "cost": 4},
        {"rule": "nope", "key": "s1"},
        {"rule": "per-seller", "key": "s1", "cost": 4},
        {"rule": "per-seller", "key": "s1", "cost": -1},
        {"rule": "per-seller", "key": "s1", "cost": 4},
        "not a check",
    ]);
    let got = check(&sluice, &batch.to_string()).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    let answers = got.json();
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), 6);
    assert_eq!(answers[0]["allowed"], true);
    assert_eq!(answers[0]["remaining"], 6);
    assert_eq!(answers[1]["status"], 404);
    assert_eq!(answers[1]["title"], "Not Found");
    assert_eq!(answers[1]["detail"], "no rule is named \"nope\"");
    // Each later check sees what the earlier ones took.
    assert_eq!(answers[2]["remaining"], 2);
    assert_eq!(answers[3]["status"], 400);
    assert!(
        answers[3]["detail"]
            .as_str()
            .unwrap()
            .contains("must not be negative"),
        "{}",
        answers[3]
    );
    assert_eq!(answers[4]["allowed"], false);
    assert_eq!(answers[4]["remaining"], 2);
    assert_eq!(answers[5]["status"], 400);

    // An empty batch has an empty answer.
    assert_eq!(check(&sluice, "[]").await.body, "[]");
    // 1000 checks are a batch; 1001 are too many.
    let look = json!({"rule": "per-seller", "key": "s2", "cost": 0});
    let most = Value::Array(vec![look.clone(); 1000]);
    let got = check(&sluice, &most.to_string()).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.json().as_array().unwrap().len(), 1000);
    let too_many = Value::Array(vec![look; 1001]);
    let got = check(&sluice, &too_many.to_string()).await;
    let problem = assert_problem(&got, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(problem["detail"].as_str().unwrap().contains("1000"));
    // A body over 256 KiB is refused before it is read in full.
    let huge = format!(
        r#"[{{"rule":"per-seller","key":"{}"}}]"#,
        "x".repeat(300_000)
    );
    assert_problem(&check(&sluice, &huge).await, StatusCode::PAYLOAD_TOO_LARGE);
    // Syntax errors fail the whole batch.
    assert_problem(&check(&sluice, "[{},").await, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_body_sent_in_chunks_is_read_whole_and_capped_as_it_streams() {
    use bytes::Bytes;
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::Frame;
    let (_upstream, sluice) = start(SELLERS).await;
    let url = format!("http://{}/v1/check", sluice.admin);
    let pieces = [
        r#"[{"rule":"per-seller","#,
        r#""key":"s1","cost":0},"#,
        r#"{"rule":"per-seller","key":"s1"}]"#,
    ];
    let frames =
        pieces.map(|piece| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(piece))));
    let body = BodyExt::boxed(StreamBody::new(futures_util::stream::iter(frames)));
    let got = support::post_streaming(&url, body).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    let answers = got.json();
    assert_eq!(answers[0]["remaining"], 10, "{answers}");
    assert_eq!(answers[1]["remaining"], 9, "{answers}");
    // No declared length: refused once 256 KiB have arrived.
    let got = support::post_streaming(&url, support::generated_body(300_000)).await;
    assert_problem(&got, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn a_single_check_that_cannot_be_decided_is_a_problem_document() {
    let (_upstream, sluice) = start(
        r#"
[[rule]]
name = "per-ip"
rate = "10/m"
on_limit = "delay"
max_delay = "30s"

[[rule]]
name = "render"
match = { path_prefix = "/render" }
algorithm = "concurrency"
max_in_flight = 2

[[rule]]
name = "trial"
match = { path_prefix = "/trial" }
rate = "1/h"
shadow = true
"#,
    )
    .await;
    for (body, status) in [
        (r#"{"rule":"nope","key":"1.2.3.4"}"#, StatusCode::NOT_FOUND),
        (r#"{"rule":"per-ip","key":"x"}"#, StatusCode::BAD_REQUEST),
        (
            r#"{"rule":"per-ip","key":"1.2.3.4","cost":0.5}"#,
            StatusCode::BAD_REQUEST,
        ),
        (
            r#"{"rule":"per-ip","key":"1.2.3.4","cots":1}"#,
            StatusCode::BAD_REQUEST,
        ),
        ("{", StatusCode::BAD_REQUEST),
        (
            r#"{"rule":"render","key":"1.2.3.4"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        assert_problem(&check(&sluice, body).await, status);
    }
    // A delay-mode rule is checked without holding: the check is answered
    // at once with the wait.
    let all = checked(
        &sluice,
        json!({"rule": "per-ip", "key": "1.2.3.4", "cost": 10}),
    )
    .await;
    assert_eq!(all["allowed"], true);
    let started = std::time::Instant::now();
    let wait = checked(&sluice, json!({"rule": "per-ip", "key": "1.2.3.4"})).await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(wait["allowed"], false, "{wait}");
    assert!(wait["retry_after_ms"].as_u64().unwrap() > 0, "{wait}");

    // A shadow rule is checked for what it would decide.
    let trial = json!({"rule": "trial", "key": "1.2.3.4"});
    assert_eq!(checked(&sluice, trial.clone()).await["allowed"], true);
    assert_eq!(checked(&sluice, trial).await["allowed"], false);

    // Checks are POSTs.
    let url = format!("http://{}/v1/check", sluice.admin);
    assert_problem(&get(&url, &[]).await, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spends_and_checks_need_the_admin_token_when_one_is_set() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\
         {}",
        upstream.addr,
        SELLERS.replacen("[admin]\n", "[admin]\nlisten = \"127.0.0.1:0\"\n", 1)
    );
    let path = write_config(dir.path(), &config);
    let sluice = SluiceProcess::spawn_with_env(&path, &[("SLUICE_ADMIN_TOKEN", "s3cret")]);
    let calls = [
        (
            "/admin/spend",
            r#"{"rule":"per-seller","key":"s1","amount":1}"#,
        ),
        ("/v1/check", r#"{"rule":"per-seller","key":"s1"}"#),
        ("/v1/check", r#"[{"rule":"per-seller","key":"s1"}]"#),
    ];
    for (path, body) in calls {
        let url = sluice.admin_url(path);
        let none = post_json(&url, body, &[]).await;
        assert_problem(&none, StatusCode::UNAUTHORIZED);
        assert!(none
            .header("www-authenticate")
            .unwrap()
            .starts_with("Bearer"));
        let wrong = post_json(&url, body, &[("authorization", "Bearer nope")]).await;
        assert_problem(&wrong, StatusCode::UNAUTHORIZED);
        let right = post_json(&url, body, &[("authorization", "Bearer s3cret")]).await;
        assert_eq!(right.status, StatusCode::OK, "{path}: {}", right.body);
    }
    // Only the three authorised calls took units: 7 of 10 left.
    let look = post_json(
        &sluice.admin_url("/v1/check"),
        r#"{"rule":"per-seller","key":"s1","cost":0}"#,
        &[("authorization", "Bearer s3cret")],
    )
    .await;
    assert_eq!(look.json()["remaining"], 7, "{}", look.body);
}
