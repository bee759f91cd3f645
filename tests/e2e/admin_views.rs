//! The read-only admin views over real HTTP: `GET /admin/buckets` (one
//! caller's buckets on one rule) and `POST /admin/explain` (what sluice
//! would do with a request, and why). Both only look: the next real
//! request's headers are the proof, on the memory store and on a real
//! `redis-server`. Token buckets of 10 per hour (or slower) refill nothing
//! while a test runs, so the numbers are exact.

use crate::support;

use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use serde_json::{json, Value};
use support::{assert_problem, get, post_json, send, start, Got, RedisServer, Sluice, Upstream};

/// A seller rule with a tier and an override, and a rule for writes only.
const SELLERS: &str = r#"
[admin]
# The keys here are test names, not secrets (docs/operations.md, "Keys in logs and admin views").
reveal_keys = true

[[rule]]
name = "writes"
match = { method = ["POST"] }
key = ["ip"]
rate = "1/h"

[[rule]]
name = "per-seller"
match = { path_prefix = "/api" }
key = ["header:x-seller"]
missing = "reject"
rate = "2/h"
tiers = { by = "header:x-plan", premium = { rate = "5/h" } }
overrides = { "s42" = { rate = "9/h" } }
"#;

async fn buckets(sluice: &Sluice, query: &str) -> Got {
    get(
        &format!("http://{}/admin/buckets?{query}", sluice.admin),
        &[],
    )
    .await
}

/// `/admin/buckets` answered 200, as JSON.
async fn bucket_view(sluice: &Sluice, rule: &str, key: &str) -> Value {
    let got = buckets(sluice, &format!("rule={rule}&key={key}")).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    assert_eq!(got.header("content-type"), Some("application/json"));
    got.json()
}

async fn explain(sluice: &Sluice, body: Value) -> Got {
    post_json(
        &format!("http://{}/admin/explain", sluice.admin),
        &body.to_string(),
        &[],
    )
    .await
}

/// `/admin/explain` of a GET of `path` with `headers` from 203.0.113.7,
/// answered 200, as JSON.
async fn explained(sluice: &Sluice, path: &str, headers: Value) -> Value {
    let got = explain(
        sluice,
        json!({"method": "GET", "path": path, "headers": headers, "ip": "203.0.113.7"}),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    got.json()
}

async fn proxied(sluice: &Sluice, headers: &[(&str, &str)]) -> Got {
    get(&sluice.url("/api/items"), headers).await
}

fn remaining_header(got: &Got) -> u64 {
    got.header("x-ratelimit-remaining")
        .unwrap_or_else(|| panic!("no X-RateLimit-Remaining: {got:?}"))
        .parse()
        .unwrap()
}

/// The entry of rule `name` in an explain answer.
fn rule_entry<'a>(answer: &'a Value, name: &str) -> &'a Value {
    answer["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|rule| rule["rule"] == name)
        .unwrap_or_else(|| panic!("no rule {name} in {answer}"))
}

/// Looks at a caller's bucket around real requests and many explains: the
/// view always says what the next request then gets, and looking never
/// spends.
async fn looking_spends_nothing(sluice: &Sluice, redis: bool) {
    // A key no request has used: full, and untouched by looking at it.
    let fresh = bucket_view(sluice, "per-seller", "s1").await;
    assert_eq!(fresh["rule"], "per-seller");
    assert_eq!(fresh["key"], "s1");
    assert_eq!(fresh["limits_from"], "rule");
    assert_eq!(fresh["key_hash"].as_str().unwrap().len(), 16, "{fresh}");
    let bucket = &fresh["buckets"][0];
    assert_eq!(bucket["remaining"], 2, "{fresh}");
    assert_eq!(bucket["capacity"], 2);
    assert_eq!(bucket["full"], true);
    assert_eq!(bucket["reset_after_ms"], 0);
    // The memory store can tell it keeps no bucket for the key; Redis
    // cannot without a round trip of its own.
    let untracked = if redis { Value::Null } else { json!(false) };
    assert_eq!(bucket["tracked"], untracked, "{fresh}");
    assert_eq!(bucket["in_debt"], false);
    assert_eq!(fresh["next_request"]["allowed"], true);
    assert_eq!(fresh["next_request"]["remaining"], 1);

    for _ in 0..5 {
        let answer = explained(sluice, "/api/items", json!({"x-seller": "s1"})).await;
        assert_eq!(answer["decision"]["outcome"], "allowed", "{answer}");
        assert_eq!(answer["decision"]["remaining"], 1, "{answer}");
    }
    assert_eq!(bucket_view(sluice, "per-seller", "s1").await, fresh);

    // The next request gets what the view said.
    let first = proxied(sluice, &[("x-seller", "s1")]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(remaining_header(&first), 1);

    // After some traffic: the view moved with it, and only with it.
    let after = bucket_view(sluice, "per-seller", "s1").await;
    assert_eq!(after["buckets"][0]["remaining"], 1, "{after}");
    assert_eq!(after["buckets"][0]["full"], false);
    let tracked = if redis { Value::Null } else { json!(true) };
    assert_eq!(after["buckets"][0]["tracked"], tracked);
    assert!(after["buckets"][0]["reset_after_ms"].as_u64().unwrap() > 0);
    assert_eq!(after["next_request"]["remaining"], 0);
    for _ in 0..5 {
        let answer = explained(sluice, "/api/items", json!({"x-seller": "s1"})).await;
        assert_eq!(answer["decision"]["outcome"], "allowed", "{answer}");
        assert_eq!(answer["decision"]["remaining"], 0, "{answer}");
    }
    assert_eq!(
        bucket_view(sluice, "per-seller", "s1").await["buckets"][0]["remaining"],
        1
    );
    let second = proxied(sluice, &[("x-seller", "s1")]).await;
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(remaining_header(&second), 0);

    // Empty: explain says limited, and so is the request.
    let answer = explained(sluice, "/api/items", json!({"x-seller": "s1"})).await;
    assert_eq!(answer["decision"]["outcome"], "limited", "{answer}");
    assert_eq!(answer["decision"]["status"], 429);
    assert_eq!(answer["decision"]["rules"], json!(["per-seller"]));
    let retry_ms = answer["decision"]["retry_after_ms"].as_u64().unwrap();
    let refused = proxied(sluice, &[("x-seller", "s1")]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let retry_secs: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    // Half an hour per unit; the two were read a moment apart.
    assert!(
        retry_secs.abs_diff(retry_ms.div_ceil(1000)) <= 1,
        "{retry_secs} vs {retry_ms}"
    );
    let empty = bucket_view(sluice, "per-seller", "s1").await;
    assert_eq!(empty["buckets"][0]["remaining"], 0);
    assert_eq!(empty["next_request"]["allowed"], false);
}

#[tokio::test]
async fn looking_at_buckets_and_explaining_spend_nothing() {
    let (_upstream, sluice) = start(SELLERS).await;
    looking_spends_nothing(&sluice, false).await;
}

#[tokio::test]
async fn explain_decides_as_the_request_path_then_does() {
    let (_upstream, sluice) = start(SELLERS).await;

    // A matched rule and one that does not match, with the reason.
    let answer = explained(&sluice, "/api//./items", json!({"x-seller": "s1"})).await;
    assert_eq!(
        answer["request"]["normalized_path"], "/api/items",
        "{answer}"
    );
    assert_eq!(answer["request"]["client_ip"], "203.0.113.7");
    let writes = rule_entry(&answer, "writes");
    assert_eq!(writes["matched"], false, "{answer}");
    assert_eq!(writes["failed"], "method");
    assert!(
        writes["reason"].as_str().unwrap().contains("POST"),
        "{writes}"
    );
    let sellers = rule_entry(&answer, "per-seller");
    assert_eq!(sellers["matched"], true);
    assert_eq!(sellers["applies"], true);
    assert_eq!(sellers["key"], "s1");
    assert_eq!(sellers["limits_from"], "rule");
    assert_eq!(sellers["banned"], Value::Null);
    assert_eq!(sellers["buckets"][0]["remaining"], 2);
    assert_eq!(answer["decision"]["outcome"], "allowed");
    assert_eq!(answer["decision"]["remaining"], 1);
    // The key hash is the one /admin/buckets derives from the key's text.
    let view = bucket_view(&sluice, "per-seller", "s1").await;
    assert_eq!(sellers["key_hash"], view["key_hash"]);
    let got = proxied(&sluice, &[("x-seller", "s1")]).await;
    assert_eq!((got.status, remaining_header(&got)), (StatusCode::OK, 1));

    // A path outside the rule's prefix: no rule applies, and the request
    // passes without rate-limit headers.
    let outside = explained(&sluice, "/other", json!({})).await;
    let sellers = rule_entry(&outside, "per-seller");
    assert_eq!(sellers["matched"], false);
    assert_eq!(sellers["failed"], "path_prefix");
    assert_eq!(outside["decision"]["outcome"], "allowed");
    assert_eq!(outside["decision"]["unlimited"], true);
    let got = get(&sluice.url("/other"), &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("x-ratelimit-remaining"), None);

    // A path the proxy refuses before any rule: the same status and detail.
    let climbing = explained(&sluice, "/../etc", json!({"x-seller": "s1"})).await;
    assert_eq!(climbing["decision"]["outcome"], "refused", "{climbing}");
    assert_eq!(climbing["decision"]["status"], 400);
    let got = get(&sluice.url("/../etc"), &[("x-seller", "s1")]).await;
    let problem = assert_problem(&got, StatusCode::BAD_REQUEST);
    assert_eq!(climbing["decision"]["detail"], problem["detail"]);

    // A missing key under missing = "reject": 400, as explain says.
    let missing = explained(&sluice, "/api/items", json!({})).await;
    assert_eq!(missing["decision"]["outcome"], "missing_key", "{missing}");
    assert_eq!(missing["decision"]["status"], 400);
    let sellers = rule_entry(&missing, "per-seller");
    assert_eq!(sellers["missing_source"], "header:x-seller");
    assert_eq!(sellers["missing"], "reject");
    assert_eq!(proxied(&sluice, &[]).await.status, StatusCode::BAD_REQUEST);

    // A tier and an override pick their own limits and buckets.
    let premium = explained(
        &sluice,
        "/api/items",
        json!({"x-seller": "s2", "x-plan": "premium"}),
    )
    .await;
    assert_eq!(
        rule_entry(&premium, "per-seller")["limits_from"],
        "tier:premium"
    );
    assert_eq!(premium["decision"]["remaining"], 4, "{premium}");
    let got = proxied(&sluice, &[("x-seller", "s2"), ("x-plan", "premium")]).await;
    assert_eq!(remaining_header(&got), 4);
    let favoured = explained(&sluice, "/api/items", json!({"x-seller": "s42"})).await;
    assert_eq!(
        rule_entry(&favoured, "per-seller")["limits_from"],
        "override:s42"
    );
    assert_eq!(favoured["decision"]["remaining"], 8);
    let got = proxied(&sluice, &[("x-seller", "s42")]).await;
    assert_eq!(remaining_header(&got), 8);

    // A ban by hand: explain says banned with its time left; so is the
    // request.
    let banned = post_json(
        &format!("http://{}/admin/bans", sluice.admin),
        r#"{"rule":"per-seller","key":"s3","for":"10m"}"#,
        &[],
    )
    .await;
    assert_eq!(banned.status, StatusCode::CREATED, "{}", banned.body);
    let answer = explained(&sluice, "/api/items", json!({"x-seller": "s3"})).await;
    assert_eq!(answer["decision"]["outcome"], "banned", "{answer}");
    assert_eq!(answer["decision"]["rule"], "per-seller");
    let left = answer["decision"]["retry_after_ms"].as_u64().unwrap();
    assert!((590_000..=600_000).contains(&left), "{left}");
    assert_eq!(
        rule_entry(&answer, "per-seller")["banned"]["remaining_secs"],
        600
    );
    let refused = proxied(&sluice, &[("x-seller", "s3")]).await;
    let body = assert_problem(&refused, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["banned"], true);
    let view = bucket_view(&sluice, "per-seller", "s3").await;
    assert_eq!(view["banned"]["remaining_secs"], 600, "{view}");
    assert_eq!(view["next_request"]["allowed"], false);
}

#[tokio::test]
async fn explain_refuses_a_malformed_question_saying_why() {
    let (_upstream, sluice) = start(SELLERS).await;
    let url = format!("http://{}/admin/explain", sluice.admin);
    for (body, says) in [
        ("not json", "not"),
        (r#"{"method":"GET","path":"/api"}"#, "ip"),
        (
            r#"{"method":"GET","path":"/api","ip":"nope"}"#,
            "\"nope\" is not an IP",
        ),
        (
            r#"{"method":"GET","path":"api","ip":"10.0.0.1"}"#,
            "must start with '/'",
        ),
        (
            r#"{"method":"GET","path":"/api","ip":"10.0.0.1","headers":{"bad name":"x"}}"#,
            "header name",
        ),
        (
            r#"{"method":"GET","path":"/api","ip":"10.0.0.1","extra":1}"#,
            "extra",
        ),
    ] {
        let got = post_json(&url, body, &[]).await;
        let problem = assert_problem(&got, StatusCode::BAD_REQUEST);
        assert!(
            problem["detail"].as_str().unwrap().contains(says),
            "{body}: {problem}"
        );
    }
    let got = get(&url, &[]).await;
    assert_problem(&got, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn buckets_refuses_an_unknown_rule_and_a_missing_parameter() {
    let (_upstream, sluice) = start(SELLERS).await;
    let unknown = buckets(&sluice, "rule=nope&key=s1").await;
    let body = assert_problem(&unknown, StatusCode::NOT_FOUND);
    assert!(body["detail"].as_str().unwrap().contains("nope"));
    for query in ["rule=per-seller", "key=s1", ""] {
        assert_problem(&buckets(&sluice, query).await, StatusCode::BAD_REQUEST);
    }
    // A key that does not fit the rule's key sources.
    assert_problem(
        &buckets(&sluice, "rule=writes&key=not-an-ip").await,
        StatusCode::BAD_REQUEST,
    );
    let got = send(
        Method::POST,
        &format!(
            "http://{}/admin/buckets?rule=writes&key=10.0.0.1",
            sluice.admin
        ),
        &[],
    )
    .await;
    assert_problem(&got, StatusCode::METHOD_NOT_ALLOWED);
    // A tier named in the query: that tier's bucket.
    let premium = bucket_view(&sluice, "per-seller", "s1&tier=premium").await;
    assert_eq!(premium["limits_from"], "tier:premium");
    assert_eq!(premium["buckets"][0]["remaining"], 5);
}

#[tokio::test]
async fn explain_and_buckets_read_the_redis_store_without_spending() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let config = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n\
         [store]\nbackend = \"redis\"\n[store.redis]\nurl = \"{}\"\ntimeout = \"5s\"\n{SELLERS}",
        redis.url()
    );
    let sluice = Sluice::start(&config, upstream.addr).await;
    // The link connects in the background: wait until Redis decides.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let _ = proxied(&sluice, &[("x-seller", "warm-up")]).await;
        if sluice.metric("sluice_store_fallback_active").await == 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "Redis never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    looking_spends_nothing(&sluice, true).await;
    // The buckets live in Redis: another instance on it sees the same.
    let other = Sluice::start(&config, upstream.addr).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let view = buckets(&other, "rule=per-seller&key=s1").await;
        if view.status == StatusCode::OK && view.json()["buckets"][0]["remaining"] == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the other instance never saw the bucket: {view:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sluice.shutdown().await;
    other.shutdown().await;
}

// Paused time: explain's wait and the hold it predicts are the same
// instant, to the millisecond.
#[tokio::test(start_paused = true)]
async fn explain_says_a_delay_mode_rule_holds_and_buckets_counts_the_held() {
    let (_upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "paced"
rate = "1/s"
burst = 1
on_limit = "delay"
max_delay = "3s"
"#,
    )
    .await;
    let ask = json!({"method": "GET", "path": "/api", "ip": "127.0.0.1"});
    let first = get(&sluice.url("/api"), &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    let answer = explain(&sluice, ask.clone()).await.json();
    assert_eq!(answer["decision"]["outcome"], "delayed", "{answer}");
    // No time has passed since the first: a whole interval to wait.
    assert_eq!(answer["decision"]["wait_ms"], 1000, "{answer}");
    // Held, as explain said: and while it is, the bucket counts it.
    let started = tokio::time::Instant::now();
    let url = sluice.url("/api");
    let held = tokio::spawn(async move { get(&url, &[]).await });
    support::paused::until_metric(&sluice, r#"sluice_queue_depth{rule="paced"}"#, 1.0).await;
    let view = bucket_view(&sluice, "paced", "127.0.0.1").await;
    assert_eq!(view["buckets"][0]["held"], 1, "{view}");
    assert_eq!(view["buckets"][0]["next_request"]["decision"], "hold");
    // The next one would be held too, behind it: 2 s, within max_delay.
    assert_eq!(view["next_request"]["held"], true, "{view}");
    assert_eq!(view["next_request"]["wait_ms"], 2000, "{view}");
    let held = held.await.unwrap();
    assert_eq!(held.status, StatusCode::OK);
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(1000),
        "held as long as explain said"
    );
}

#[tokio::test]
async fn a_concurrency_rule_shows_its_permits_in_use() {
    let (_upstream, sluice) = start(
        r#"
[[rule]]
name = "one-at-a-time"
algorithm = "concurrency"
max_in_flight = 1
"#,
    )
    .await;
    let idle = bucket_view(&sluice, "one-at-a-time", "127.0.0.1").await;
    assert_eq!(idle["buckets"][0]["permits_in_use"], 0, "{idle}");
    assert_eq!(idle["next_request"]["allowed"], true);
    let url = sluice.url("/slow/800");
    let slow = tokio::spawn(async move { get(&url, &[]).await });
    // Once the slow request holds the permit, both views say so.
    let deadline = Instant::now() + Duration::from_secs(5);
    let busy = loop {
        let view = bucket_view(&sluice, "one-at-a-time", "127.0.0.1").await;
        if view["buckets"][0]["permits_in_use"] == 1 {
            break view;
        }
        assert!(
            Instant::now() < deadline,
            "the permit was never taken: {view}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(busy["next_request"]["allowed"], false, "{busy}");
    let answer = explain(
        &sluice,
        json!({"method": "GET", "path": "/api", "ip": "127.0.0.1"}),
    )
    .await
    .json();
    assert_eq!(answer["decision"]["outcome"], "limited", "{answer}");
    let refused = get(&sluice.url("/api"), &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(slow.await.unwrap().status, StatusCode::OK);
    let after = bucket_view(&sluice, "one-at-a-time", "127.0.0.1").await;
    assert_eq!(after["buckets"][0]["permits_in_use"], 0, "{after}");
}

/// A calendar window (docs/charging.md, "Calendar quotas"): the view shows
/// the window the clock is in, as local RFC 3339 and Unix seconds, and the
/// units spent in it; the 429's headers count to its end, and its policy's
/// `w` is its length.
#[tokio::test]
async fn buckets_shows_a_calendar_window_and_what_it_spent() {
    let (_upstream, sluice) = start(
        r#"
[admin]
# The keys here are test names, not secrets.
reveal_keys = true

[[rule]]
name = "yearly"
key = ["header:x-seller"]
algorithm = "fixed_window"
calendar = "Europe/Berlin"
rate = "2/y"
"#,
    )
    .await;
    for _ in 0..2 {
        assert_eq!(
            proxied(&sluice, &[("x-seller", "s1")]).await.status,
            StatusCode::OK
        );
    }
    let refused = proxied(&sluice, &[("x-seller", "s1")]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    // This year in Berlin, from 1 January 00:00 local to the next.
    let tz = jiff::tz::TimeZone::get("Europe/Berlin").unwrap();
    let year = jiff::Timestamp::now().to_zoned_datetime(tz.clone()).year();
    let start_of = |year: i16| {
        jiff::civil::date(year, 1, 1)
            .to_zoned_datetime(tz.clone())
            .unwrap()
            .timestamp()
            .as_second()
    };
    let (start, end) = (start_of(year), start_of(year + 1));
    assert_eq!(
        refused.header("x-ratelimit-reset"),
        Some(end.to_string().as_str())
    );
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some(format!("\"yearly\";q=2;w={}", end - start).as_str())
    );
    let view = bucket_view(&sluice, "yearly", "s1").await;
    let bucket = &view["buckets"][0];
    assert_eq!(bucket["spent"], 2, "{view}");
    assert_eq!(bucket["window"]["calendar"], "Europe/Berlin");
    assert_eq!(bucket["window"]["unit"], "y");
    assert_eq!(
        bucket["window"]["start"],
        format!("{year}-01-01T00:00:00+01:00")
    );
    assert_eq!(
        bucket["window"]["end"],
        format!("{}-01-01T00:00:00+01:00", year + 1)
    );
    assert_eq!(bucket["window"]["start_unix"], start);
    assert_eq!(bucket["window"]["end_unix"], end);
}
