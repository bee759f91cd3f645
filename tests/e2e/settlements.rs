//! Each charge is settled exactly once, whatever Redis does meanwhile
//! (docs/multi-instance.md, "When Redis is slow or away"): the sluice
//! binary in front of an upstream that answers as an LLM API does, on a
//! real `redis-server` that the test freezes (SIGSTOP) after a call was
//! admitted and thaws (SIGCONT) once the call's answer has ended. What the
//! answer settled (an overrun to charge, unused units to give back) waits
//! meanwhile, shows in the metrics, and reaches Redis once, when it is
//! back.

use std::net::SocketAddr;
use std::time::Duration;

use http::StatusCode;
use serde_json::json;

use crate::ai_budgets::Llm;
use crate::support::{
    after_syncs, eventually, get, metric, post_json, write_config, RedisServer, SluiceProcess,
};

/// A budget of 10,000 tokens per key for 30 days (nothing refills during
/// a test), each call reserving its `max_tokens` and paying its completion
/// tokens.
const TOKENS: &str = r#"
[[rule]]
name = "tokens"
key = ["header:authorization"]
algorithm = "fixed_window"
rate = "10000/30d"
charge = "json:/usage/completion_tokens"
reserve = { "body:/max_tokens" = 1 }
"#;

/// The sluice binary in front of `llm`, on `redis` in `mode`, with a short
/// timeout (so a frozen Redis fails calls fast) and a short sync interval.
fn sluice(llm: &Llm, redis: &RedisServer, mode: &str) -> (SluiceProcess, tempfile::TempDir) {
    sluice_with(llm, redis, mode, "")
}

/// [`sluice`] with `server` added to `[server]`.
fn sluice_with(
    llm: &Llm,
    redis: &RedisServer,
    mode: &str,
    server: &str,
) -> (SluiceProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n{server}\n[admin]\nlisten = \
         \"127.0.0.1:0\"\n\n[store]\nbackend = \"redis\"\n\n[store.redis]\nurl = \"{}\"\n\
         mode = \"{mode}\"\ntimeout = \"150ms\"\nsync_interval = \"50ms\"\n{TOKENS}",
        llm.addr,
        redis.url()
    );
    let path = write_config(dir.path(), &config);
    (SluiceProcess::spawn(&path), dir)
}

async fn metrics(admin: SocketAddr) -> String {
    get(&format!("http://{admin}/metrics"), &[]).await.body
}

/// One series of `admin`'s metrics (0 when absent).
async fn series(admin: SocketAddr, name: &str) -> f64 {
    metric(&metrics(admin).await, name).unwrap_or(0.0)
}

const PENDING: &str = "sluice_store_settlements_pending";
const DROPPED: &str = "sluice_store_settlements_dropped_total";
const UNAVAILABLE: &str = "sluice_store_errors_total{backend=\"redis\",kind=\"unavailable\"}";
const CHARGED: &str = "sluice_budget_charged_total{rule=\"tokens\"}";
const RESERVED: &str = "sluice_budget_reserved_units{rule=\"tokens\"}";

/// What `sluice`'s admin view says is left of `key`'s budget (in strict
/// mode, Redis' count; in hybrid mode, this instance's view, which each
/// sync makes Redis' count plus what it took since).
async fn remaining(sluice: &SluiceProcess, key: &str) -> u64 {
    let url = sluice.admin_url(&format!(
        "/admin/buckets?rule=tokens&key={}",
        key.replace(' ', "%20")
    ));
    let view = get(&url, &[]).await;
    assert_eq!(view.status, StatusCode::OK, "{}", view.body);
    view.json()["buckets"][0]["remaining"].as_u64().unwrap()
}

/// What Redis itself counts in the `tokens` window of the one caller who
/// spent from it: its bucket's key holds `window:count:previous`.
fn counted_in_redis(redis: &RedisServer) -> u64 {
    let keys = redis
        .cli(&["--scan", "--pattern", "sluice:{tokens:*"])
        .unwrap();
    let keys: Vec<&str> = keys.lines().filter(|key| !key.ends_with(":ban")).collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let state = redis.cli(&["GET", keys[0]]).unwrap();
    state.split(':').nth(1).unwrap().parse().unwrap()
}

/// Waits until the store answers admissions (its link is up).
async fn until_up(sluice: &SluiceProcess) {
    eventually(Duration::from_secs(15), "Redis never answered", || async {
        series(sluice.admin, "sluice_store_fallback_active").await == 0.0
            && remaining(sluice, "Bearer warm-up").await == 10_000
    })
    .await;
}

/// What happens between the freeze and the end of the answer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Meanwhile {
    /// Nothing: the settlement's first attempts reach the frozen Redis,
    /// which runs them once thawed, their answers long lost.
    Nothing,
    /// Other calls fail until sluice stops sending to Redis: the
    /// settlement's attempts never reach it, and must be sent again.
    LinkDown,
}

/// A streamed call of `key` reserving `max_tokens` and using `used`: once
/// it is admitted (its reservation held), `redis` is frozen; its answer
/// then ends while Redis answers nothing, after what `meanwhile` says.
/// Returns once the answer ended, with the failed calls counted before
/// the freeze.
async fn answered_while_frozen(
    sluice: &SluiceProcess,
    redis: &RedisServer,
    key: &'static str,
    (max_tokens, used): (u64, u64),
    meanwhile: Meanwhile,
) -> f64 {
    let url = sluice.url("/v1/chat/completions");
    let ms = if meanwhile == Meanwhile::Nothing {
        600
    } else {
        2_500
    };
    let body =
        json!({"model": "m", "max_tokens": max_tokens, "stream": true, "use": used, "ms": ms});
    let call =
        tokio::spawn(
            async move { post_json(&url, &body.to_string(), &[("authorization", key)]).await },
        );
    let admin = sluice.admin;
    eventually(
        Duration::from_secs(5),
        "the call never held its reservation",
        || async { series(admin, RESERVED).await == max_tokens as f64 },
    )
    .await;
    let errors = series(admin, UNAVAILABLE).await;
    redis.freeze(true);
    if meanwhile == Meanwhile::LinkDown {
        // Three calls that fail in a row take the link down: each of
        // these waits its timeout, then is decided locally.
        let other = sluice.url("/v1/other");
        for _ in 0..4 {
            let got = post_json(&other, "{}", &[("authorization", "Bearer other")]).await;
            assert_eq!(got.status, StatusCode::OK);
        }
        assert!(
            !call.is_finished(),
            "the answer ended before the link went down"
        );
        assert_eq!(series(admin, "sluice_store_fallback_active").await, 1.0);
    }
    let got = call.await.unwrap();
    assert_eq!(got.status, StatusCode::OK);
    assert!(got.body.ends_with("data: [DONE]\n\n"), "{}", got.body);
    errors
}

/// While Redis is frozen: the settlement waits, and each attempt that
/// failed is counted (beyond the `errors` before). Then Redis thaws, after
/// a stall of a second or so, and the settlement is taken.
async fn stalled_then_taken(sluice: &SluiceProcess, redis: &RedisServer, errors: f64) {
    let admin = sluice.admin;
    eventually(Duration::from_secs(5), "no settlement waiting", || async {
        let text = metrics(admin).await;
        metric(&text, PENDING) == Some(1.0)
            && metric(&text, UNAVAILABLE).is_some_and(|now| now >= errors + 2.0)
    })
    .await;
    redis_stays_frozen_for(Duration::from_millis(800)).await;
    assert_eq!(series(admin, PENDING).await, 1.0, "still waiting");
    redis.freeze(false);
    eventually(
        Duration::from_secs(10),
        "the settlement was never taken",
        || async { series(admin, PENDING).await == 0.0 },
    )
    .await;
    assert_eq!(series(admin, DROPPED).await, 0.0);
}

/// An answer that cost more than its reservation, ending while Redis is
/// frozen: the overrun is charged once Redis is back (main lost it in 7
/// runs of 8), and counted as charged only then.
#[tokio::test]
async fn a_strict_overrun_decided_while_redis_is_frozen_is_charged_once_it_is_back() {
    let (llm, redis) = (Llm::start().await, RedisServer::start());
    let (sluice, _dir) = sluice(&llm, &redis, "strict");
    until_up(&sluice).await;
    let spent = (10, 3_000);
    let errors =
        answered_while_frozen(&sluice, &redis, "Bearer over", spent, Meanwhile::Nothing).await;
    // The 10 reserved are charged (Redis took them at admission); the
    // 2,990 beyond them wait.
    eventually(
        Duration::from_secs(5),
        "the reservation not drawn",
        || async { series(sluice.admin, CHARGED).await == 10.0 },
    )
    .await;
    stalled_then_taken(&sluice, &redis, errors).await;
    assert_eq!(series(sluice.admin, CHARGED).await, 3_000.0);
    assert_eq!(remaining(&sluice, "Bearer over").await, 7_000);
    assert_eq!(
        series(sluice.admin, "sluice_budget_overrun_total{rule=\"tokens\"}").await,
        2_990.0
    );
}

/// An answer that cost less than its reservation, ending while Redis is
/// frozen: what it did not use is given back once Redis is back (main lost
/// it in 3 runs of 10), once: the attempts Redis received while frozen and
/// ran when thawed (their answers lost) apply nothing twice.
#[tokio::test]
async fn a_strict_give_back_decided_while_redis_is_frozen_is_not_lost() {
    let (llm, redis) = (Llm::start().await, RedisServer::start());
    let (sluice, _dir) = sluice(&llm, &redis, "strict");
    until_up(&sluice).await;
    let spent = (1_000, 200);
    let errors =
        answered_while_frozen(&sluice, &redis, "Bearer back", spent, Meanwhile::Nothing).await;
    stalled_then_taken(&sluice, &redis, errors).await;
    assert_eq!(remaining(&sluice, "Bearer back").await, 9_800);
    assert_eq!(series(sluice.admin, CHARGED).await, 200.0);
    // Again, the answer ending once sluice has stopped sending to Redis:
    // the give-back is kept until Redis is back, then sent, numbered on
    // from the first (so it is not taken for a retry of it).
    let spent = (500, 100);
    let errors =
        answered_while_frozen(&sluice, &redis, "Bearer back", spent, Meanwhile::LinkDown).await;
    stalled_then_taken(&sluice, &redis, errors).await;
    assert_eq!(remaining(&sluice, "Bearer back").await, 9_700);
}

/// Hybrid mode: the reservation reached Redis with a sync, then Redis
/// froze, the syncs failed until sluice stopped sending to Redis, and the
/// answer gave most of the reservation back. The give-back travels with
/// the next sync, which cannot reach Redis, and is sent again, as it was,
/// once Redis is back (main lost it every time): the instance's view,
/// which every sync makes Redis' count, keeps it.
#[tokio::test]
async fn a_hybrid_give_back_decided_while_redis_is_frozen_is_not_lost_through_the_sync() {
    let (llm, redis) = (Llm::start().await, RedisServer::start());
    let (sluice, _dir) = sluice(&llm, &redis, "hybrid");
    until_up(&sluice).await;
    let url = sluice.url("/v1/chat/completions");
    let body = json!({"model": "m", "max_tokens": 1_000, "stream": true, "use": 200, "ms": 2_500});
    let call = tokio::spawn(async move {
        post_json(
            &url,
            &body.to_string(),
            &[("authorization", "Bearer hybrid")],
        )
        .await
    });
    eventually(Duration::from_secs(5), "never reserved", || async {
        series(sluice.admin, RESERVED).await == 1_000.0
    })
    .await;
    // The reservation is in Redis.
    after_syncs([sluice.admin]).await;
    let errors = "sluice_store_sync_errors_total";
    let before = series(sluice.admin, errors).await;
    redis.freeze(true);
    // Three syncs that fail in a row take the link down.
    eventually(Duration::from_secs(5), "the syncs did not fail", || async {
        series(sluice.admin, errors).await >= before + 4.0
    })
    .await;
    assert!(
        !call.is_finished(),
        "the answer ended before the link went down"
    );
    assert_eq!(call.await.unwrap().status, StatusCode::OK);
    let after_answer = series(sluice.admin, errors).await;
    eventually(
        Duration::from_secs(5),
        "no sync failed after the answer",
        || async { series(sluice.admin, errors).await >= after_answer + 2.0 },
    )
    .await;
    redis.freeze(false);
    eventually(
        Duration::from_secs(10),
        "the fleet's view never came back",
        || async { series(sluice.admin, "sluice_store_fallback_active").await == 0.0 },
    )
    .await;
    // In Redis: the 200 used, the 800 given back.
    eventually(
        Duration::from_secs(5),
        "the give-back never reached Redis",
        || async { counted_in_redis(&redis) == 200 },
    )
    .await;
    after_syncs([sluice.admin]).await;
    assert_eq!(counted_in_redis(&redis), 200, "counted once");
    assert_eq!(remaining(&sluice, "Bearer hybrid").await, 9_800);
    assert_eq!(series(sluice.admin, CHARGED).await, 200.0);
    assert_eq!(
        series(sluice.admin, "sluice_store_sync_dropped_total").await,
        0.0
    );
}

/// SIGTERM while a give-back waits for a frozen Redis: the process waits
/// for it (what is left of `shutdown_grace`), Redis thaws meanwhile and
/// takes it, and the process exits having lost nothing.
#[tokio::test]
async fn a_settlement_waiting_at_shutdown_reaches_redis_if_it_comes_back_in_time() {
    let (llm, redis) = (Llm::start().await, RedisServer::start());
    let (mut sluice, _dir) = sluice(&llm, &redis, "strict");
    until_up(&sluice).await;
    let spent = (1_000, 200);
    answered_while_frozen(&sluice, &redis, "Bearer leaving", spent, Meanwhile::Nothing).await;
    eventually(Duration::from_secs(5), "no settlement waiting", || async {
        series(sluice.admin, PENDING).await == 1.0
    })
    .await;
    sluice.terminate();
    redis_stays_frozen_for(Duration::from_millis(600)).await;
    assert!(
        sluice.child.try_wait().unwrap().is_none(),
        "it did not wait"
    );
    redis.freeze(false);
    let status = sluice.wait_exit(Duration::from_secs(10)).expect("it exits");
    assert!(status.success(), "{status}");
    assert_eq!(counted_in_redis(&redis), 200);
    assert!(
        sluice.logged("are lost").is_empty(),
        "{:?}",
        sluice.logged("lost")
    );
}

/// SIGTERM while Redis stays frozen: the settlement gets what is left of
/// `shutdown_grace` (two seconds at least), and is then said lost.
#[tokio::test]
async fn a_settlement_redis_does_not_take_before_the_end_of_shutdown_is_said_lost() {
    let (llm, redis) = (Llm::start().await, RedisServer::start());
    let server = "shutdown_grace = \"1s\"\n";
    let (mut sluice, _dir) = sluice_with(&llm, &redis, "strict", server);
    until_up(&sluice).await;
    let spent = (1_000, 200);
    answered_while_frozen(&sluice, &redis, "Bearer leaving", spent, Meanwhile::Nothing).await;
    eventually(Duration::from_secs(5), "no settlement waiting", || async {
        series(sluice.admin, PENDING).await == 1.0
    })
    .await;
    let stopping = std::time::Instant::now();
    sluice.terminate();
    let status = sluice.wait_exit(Duration::from_secs(10)).expect("it exits");
    let took = stopping.elapsed();
    assert!(status.success(), "{status}");
    assert!(
        (Duration::from_millis(1_900)..Duration::from_secs(6)).contains(&took),
        "{took:?}"
    );
    let said = sluice.logged("settlements (charges, give-backs) the store had not taken are lost");
    assert_eq!(said.len(), 1, "{:?}", sluice.logged("settle"));
    assert!(said[0].contains("left=1"), "{said:?}");
    redis.freeze(false);
}

/// Redis stays frozen a while longer: the stall is the behaviour under
/// test (a settlement must outlast it), not a wait for sluice.
async fn redis_stays_frozen_for(stall: Duration) {
    tokio::time::sleep(stall).await;
}
