//! Every decision goes one way (docs/operations.md): `POST /v1/check`, the
//! rate limit service and proxied requests are decided alike, on the real
//! binary and a real `redis-server`: the same `on_error` while Redis is
//! down, the same store metrics (`/admin/spend` too), and the same bans,
//! earned through any way in and listed and lifted on every instance.

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{
    eventually, metric, post_json, send, write_config, RedisServer, SluiceProcess, Upstream,
};

/// The binary on `redis` (strict), with `rest` after `[store.redis]`'s
/// URL, serving `upstream` and the rate limit service.
fn sluice(
    dir: &std::path::Path,
    redis: &RedisServer,
    upstream: &Upstream,
    rest: &str,
) -> SluiceProcess {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n[rls]\nlisten = \"127.0.0.1:0\"\n\
         [store]\nbackend = \"redis\"\n[store.redis]\nurl = \"{}\"\n{rest}",
        upstream.addr,
        redis.url()
    );
    SluiceProcess::spawn(&write_config(dir, &config))
}

async fn check(sluice: &SluiceProcess, rule: &str, key: &str) -> (StatusCode, Value) {
    let body = json!({"rule": rule, "key": key}).to_string();
    let got = post_json(&sluice.admin_url("/v1/check"), &body, &[]).await;
    (
        got.status,
        serde_json::from_str(&got.body).unwrap_or(Value::Null),
    )
}

async fn request(sluice: &SluiceProcess, user: &str) -> StatusCode {
    send(Method::GET, &sluice.url("/api"), &[("x-user", user)])
        .await
        .status
}

async fn metrics(sluice: &SluiceProcess) -> String {
    send(Method::GET, &sluice.admin_url("/metrics"), &[])
        .await
        .body
}

/// A series' value, 0 when it is not there yet.
async fn series(sluice: &SluiceProcess, series: &str) -> f64 {
    metric(&metrics(sluice).await, series).unwrap_or(0.0)
}

const STORE_CALLS: &str = r#"sluice_store_seconds_count{backend="redis"}"#;
const STORE_DOWN: &str = r#"sluice_store_errors_total{backend="redis",kind="unavailable"}"#;

/// Until `sluice` decides through Redis.
async fn redis_answers(sluice: &SluiceProcess) {
    eventually(Duration::from_secs(15), "Redis never answered", || async {
        let _ = check(sluice, "per-user", "warm-up").await;
        series(sluice, "sluice_store_fallback_active").await == 0.0
    })
    .await;
}

#[tokio::test]
async fn with_redis_down_a_check_answers_per_on_error_as_the_proxy_beside_it_does() {
    let mut redis = RedisServer::start();
    let upstream = Upstream::start().await;
    // A 10/m limit shared by two instances: alone, each enforces 5.
    for (on_error, request_status, check_status) in [
        ("local", StatusCode::OK, StatusCode::OK),
        ("allow", StatusCode::OK, StatusCode::OK),
        (
            "deny",
            StatusCode::SERVICE_UNAVAILABLE,
            StatusCode::SERVICE_UNAVAILABLE,
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let rules = format!(
            "timeout = \"200ms\"\non_error = \"{on_error}\"\ninstances = 2\n\
             [[rule]]\nname = \"per-user\"\nkey = [\"header:x-user\"]\nrate = \"10/m\"\n"
        );
        let sluice = sluice(dir.path(), &redis, &upstream, &rules);
        redis_answers(&sluice).await;
        // Up: a check and a spend are store calls like a request's.
        let calls = series(&sluice, STORE_CALLS).await;
        assert_eq!(check(&sluice, "per-user", "ann").await.0, StatusCode::OK);
        let spend = json!({"rule": "per-user", "key": "ann", "amount": 1}).to_string();
        let spent = post_json(&sluice.admin_url("/admin/spend"), &spend, &[]).await;
        assert_eq!(spent.status, StatusCode::OK, "{}", spent.body);
        assert_eq!(
            series(&sluice, STORE_CALLS).await,
            calls + 2.0,
            "{on_error}"
        );

        redis.kill();
        assert_eq!(request(&sluice, "bo").await, request_status, "{on_error}");
        let errors = series(&sluice, STORE_DOWN).await;
        let (status, answer) = check(&sluice, "per-user", "carol").await;
        assert_eq!(status, check_status, "{on_error}: {answer}");
        match on_error {
            // This instance's share of 10, less the one just taken.
            "local" => assert_eq!(
                answer,
                json!({"allowed": true, "remaining": 4, "retry_after_ms": 0,
                       "reset_after_ms": 12_000}),
            ),
            "allow" => assert_eq!(
                answer,
                json!({"allowed": true, "remaining": null, "retry_after_ms": 0,
                       "reset_after_ms": 0}),
            ),
            _ => assert!(answer["detail"].as_str().unwrap().contains("on_error")),
        }
        assert!(
            series(&sluice, STORE_DOWN).await >= errors + 1.0,
            "{on_error}"
        );
        // A spend spends the shared budget or nothing, whatever on_error.
        let spent = post_json(&sluice.admin_url("/admin/spend"), &spend, &[]).await;
        assert_eq!(spent.status, StatusCode::SERVICE_UNAVAILABLE, "{on_error}");
        assert!(
            series(&sluice, STORE_DOWN).await >= errors + 2.0,
            "{on_error}"
        );
        redis.restart();
    }
}

fn descriptor(user: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".to_owned(),
                value: user.to_owned(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

async fn service_call(sluice: &SluiceProcess, user: &str) -> Code {
    let addr = sluice.rls.expect("the rate limit service");
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let answered = client.should_rate_limit(descriptor(user)).await.unwrap();
    Code::try_from(answered.into_inner().overall_code).unwrap()
}

async fn bans(sluice: &SluiceProcess) -> Vec<(String, String)> {
    let listed = send(Method::GET, &sluice.admin_url("/admin/bans"), &[]).await;
    let listed: Value = serde_json::from_str(&listed.body).unwrap();
    assert_eq!(listed["shared"], true, "{listed}");
    let bans = listed["bans"].as_array().expect("bans").iter();
    bans.map(|ban| (ban["rule"].to_string(), ban["key"].to_string()))
        .collect()
}

async fn lift(sluice: &SluiceProcess, rule: &str, key: &str) {
    let url = sluice.admin_url(&format!("/admin/bans?rule={rule}&key={key}"));
    let lifted = send(Method::DELETE, &url, &[]).await;
    assert_eq!(lifted.status, StatusCode::OK, "{}", lifted.body);
}

const BANNING: &str = "timeout = \"5s\"\ninstances = 2\n\
    [[rule]]\nname = \"per-user\"\nmatch = { path_prefix = \"/api\" }\nkey = [\"header:x-user\"]\n\
    rate = \"1/m\"\nban = { after = 2, within = \"1m\", for = \"1h\" }\n\
    [[rule]]\nname = \"per-caller\"\nmatch = { domain = \"edge\" }\nkey = [\"descriptor:user\"]\n\
    rate = \"1/m\"\nban = { after = 2, within = \"1m\", for = \"1h\" }\n";

#[tokio::test]
async fn a_ban_earned_through_any_way_in_holds_for_all_and_is_listed_and_lifted_on_every_instance()
{
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = sluice(dir_a.path(), &redis, &upstream, BANNING);
    let b = sluice(dir_b.path(), &redis, &upstream, BANNING);
    for sluice in [&a, &b] {
        redis_answers(sluice).await;
    }
    // Header values may be credentials: listed by label, the same on both.
    let by = |rule: &str| format!("\"{rule}\"");

    // Through /v1/check on A: one allowed, two strikes, banned.
    let answers = [
        check(&a, "per-user", "dora").await.1["allowed"].clone(),
        check(&a, "per-user", "dora").await.1["allowed"].clone(),
        check(&a, "per-user", "dora").await.1["allowed"].clone(),
    ];
    assert_eq!(answers, [json!(true), json!(false), json!(false)]);
    // Held for every way in, on the other instance too, and listed there.
    assert_eq!(request(&b, "dora").await, StatusCode::TOO_MANY_REQUESTS);
    let (_, banned) = check(&b, "per-user", "dora").await;
    assert_eq!(banned["banned"], true, "{banned}");
    assert!(
        banned["retry_after_ms"].as_u64().unwrap() > 3_500_000,
        "{banned}"
    );
    let listed = bans(&b).await;
    assert_eq!(
        listed.iter().map(|(rule, _)| rule).collect::<Vec<_>>(),
        [&by("per-user")]
    );
    assert!(listed[0].1.starts_with("\"d…#"), "{listed:?}");
    assert_eq!(bans(&a).await, listed);
    // Lifted through B: A admits it again.
    lift(&b, "per-user", "dora").await;
    assert_eq!(bans(&a).await, []);
    let (_, lifted) = check(&a, "per-user", "dora").await;
    assert_eq!(lifted.get("banned"), None, "{lifted}");

    // Through the rate limit service on A, with a strike through a check:
    // refusals of one rule and key through every way in add up.
    assert_eq!(service_call(&a, "eve").await, Code::Ok);
    assert_eq!(service_call(&a, "eve").await, Code::OverLimit);
    assert_eq!(check(&b, "per-caller", "eve").await.1["allowed"], false);
    let listed = bans(&b).await;
    assert_eq!(
        listed.iter().map(|(rule, _)| rule).collect::<Vec<_>>(),
        [&by("per-caller")]
    );
    assert_eq!(bans(&a).await, listed);
    assert_eq!(service_call(&b, "eve").await, Code::OverLimit);
    lift(&a, "per-caller", "eve").await;
    assert_eq!(bans(&b).await, []);
}
