//! Several sluice instances sharing budgets through a real `redis-server`
//! the test starts on an ephemeral port: exact accuracy across instances,
//! and what happens when Redis dies, freezes or comes back (docs/multi-instance.md,
//! "Running several instances").

use std::time::{Duration, Instant};

use http::{Method, StatusCode};

use crate::support::{eventually, send, RedisCluster, RedisServer, Sluice, Upstream};

/// `n` sluice instances on one Redis with `rules` (and `store` settings
/// added to `[store.redis]`).
async fn instances(n: usize, redis: &str, store: &str, rules: &str) -> (Upstream, Vec<Sluice>) {
    on_redis(n, &format!("url = \"{redis}\"\n{store}"), rules).await
}

/// `n` sluice instances with `rules` on the Redis that `store` (the body
/// of `[store.redis]`) names, each once the store answers. The timeout is
/// generous (a loaded test machine must not turn an accuracy test into a
/// fallback test) unless `store` sets one.
async fn on_redis(n: usize, store: &str, rules: &str) -> (Upstream, Vec<Sluice>) {
    let upstream = Upstream::start().await;
    let timeout = if store.contains("timeout") {
        ""
    } else {
        "timeout = \"5s\""
    };
    let config = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n\
         [store]\nbackend = \"redis\"\n[store.redis]\n{timeout}\n{store}\n{rules}"
    );
    let mut started = Vec::new();
    for _ in 0..n {
        started.push(Sluice::start(&config, upstream.addr).await);
    }
    for sluice in &started {
        wait_for(sluice, "sluice_store_fallback_active", 0.0).await;
    }
    (upstream, started)
}

/// Sends requests until the store answers (the link connects in the
/// background) and the fallback gauge reads `value`.
async fn wait_for(sluice: &Sluice, series: &str, value: f64) {
    let what = format!("{series} never read {value}");
    eventually(Duration::from_secs(15), &what, || async {
        // A request a rule applies to asks the store.
        let _ = send(Method::GET, &sluice.url("/api"), &[("x-caller", "warm-up")]).await;
        sluice.metric(series).await == value
    })
    .await;
}

async fn get(sluice: &Sluice, caller: &str) -> StatusCode {
    send(Method::GET, &sluice.url("/api"), &[("x-caller", caller)])
        .await
        .status
}

const PER_CALLER: &str = r#"
[[rule]]
name = "per-caller"
match = { path_prefix = "/api" }
key = ["header:x-caller"]
"#;

#[tokio::test]
async fn three_instances_admit_exactly_what_one_would_for_every_algorithm() {
    let redis = RedisServer::start();
    for algorithm in [
        "token_bucket",
        "fixed_window",
        "sliding_window",
        "sliding_log",
    ] {
        let rules = format!("{PER_CALLER}algorithm = \"{algorithm}\"\nrate = \"10/h\"\n");
        let (_upstream, sluices) = instances(3, &redis.url(), "", &rules).await;
        let mut allowed = 0;
        for round in 0..30 {
            if get(&sluices[round % 3], "alice").await == StatusCode::OK {
                allowed += 1;
            }
        }
        assert_eq!(allowed, 10, "{algorithm}: 10/h across three instances");
        // Another caller has a budget of its own.
        assert_eq!(get(&sluices[1], "bob").await, StatusCode::OK, "{algorithm}");
        // Every decision was one timed round trip to Redis.
        let calls = sluices[0]
            .metric("sluice_store_seconds_count{backend=\"redis\"}")
            .await;
        assert!(calls >= 10.0, "{algorithm}: {calls} store calls timed");
        for sluice in sluices {
            sluice.shutdown().await;
        }
    }
}

#[tokio::test]
async fn concurrent_clients_on_three_instances_never_over_admit() {
    let redis = RedisServer::start();
    let rules = format!("{PER_CALLER}limits = [\"25/h\", \"40/d\"]\n");
    let (_upstream, sluices) = instances(3, &redis.url(), "", &rules).await;
    let urls: Vec<String> = sluices.iter().map(|s| s.url("/api")).collect();
    let mut tasks = Vec::new();
    for i in 0..120 {
        let url = urls[i % 3].clone();
        tasks.push(tokio::spawn(async move {
            send(Method::GET, &url, &[("x-caller", "carol")])
                .await
                .status
        }));
    }
    let mut allowed = 0;
    for task in tasks {
        if task.await.unwrap() == StatusCode::OK {
            allowed += 1;
        }
    }
    // The hourly limit binds; the daily one was charged for each of them.
    assert_eq!(allowed, 25);
    let remaining_daily = send(Method::GET, &urls[0], &[("x-caller", "carol")]).await;
    assert_eq!(remaining_daily.status, StatusCode::TOO_MANY_REQUESTS);
    // All or nothing: refused requests took nothing from the daily limit,
    // so a second caller sharing nothing still has the whole hour.
    let mut dave = 0;
    for i in 0..30 {
        if get(&sluices[i % 3], "dave").await == StatusCode::OK {
            dave += 1;
        }
    }
    assert_eq!(dave, 25);
}

#[tokio::test]
async fn a_dead_redis_is_answered_locally_with_each_instances_share_and_left_behind() {
    outage_with_fair_shares("instances = 3").await;
}

#[tokio::test]
async fn instances_count_each_other_by_heartbeats_for_their_shares() {
    // No `instances`: the shares come from the heartbeats, which every
    // instance has read at least once after a beat (2 s) has passed.
    outage_with_fair_shares("").await;
}

async fn outage_with_fair_shares(store: &str) {
    let mut redis = RedisServer::start();
    let rules = format!("{PER_CALLER}rate = \"31/h\"\n");
    let (_upstream, sluices) = instances(3, &redis.url(), store, &rules).await;
    if store.is_empty() {
        eventually(Duration::from_secs(5), "three heartbeats", || async {
            redis.cli(&["ZCARD", "sluice:instances"]).as_deref() == Some("3")
        })
        .await;
        // Each beat reads the count: once every instance has beaten again,
        // each has read all three.
        let first = heartbeats(&redis);
        eventually(Duration::from_secs(5), "a second beat of each", || async {
            let now = heartbeats(&redis);
            now.len() == 3 && now.iter().all(|(id, at)| first[id] < *at)
        })
        .await;
    }
    redis.kill();
    let started = Instant::now();
    let mut statuses = Vec::new();
    for round in 0..60 {
        statuses.push(get(&sluices[round % 3], "erin").await);
    }
    // Every request answered, none with a 5xx, well within a second each.
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        statuses.iter().all(|s| !s.is_server_error()),
        "{statuses:?}"
    );
    let allowed = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    // Each instance enforces a third of 31, rounded up: 11 of its 20, so
    // 33 in all (the limit and at most one unit per instance), never 3 × 31.
    assert_eq!(allowed, 33, "admitted while Redis was down");
    for sluice in &sluices {
        assert_eq!(sluice.metric("sluice_store_fallback_active").await, 1.0);
        assert!(
            sluice
                .metric("sluice_store_errors_total{backend=\"redis\",kind=\"unavailable\"}")
                .await
                >= 1.0
        );
    }
    // Back (empty): strict again within a few seconds, with fresh counts.
    redis.restart();
    for sluice in &sluices {
        wait_for(sluice, "sluice_store_fallback_active", 0.0).await;
    }
    assert_eq!(get(&sluices[0], "erin").await, StatusCode::OK);
}

#[tokio::test]
async fn a_frozen_redis_costs_each_request_at_most_its_timeout() {
    let redis = RedisServer::start();
    let rules = format!("{PER_CALLER}rate = \"1000/h\"\n");
    let (_upstream, sluices) = instances(1, &redis.url(), "timeout = \"200ms\"", &rules).await;
    let sluice = &sluices[0];
    redis.freeze(true);
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let started = Instant::now();
        assert_eq!(get(sluice, "frank").await, StatusCode::OK);
        slowest = slowest.max(started.elapsed());
    }
    // `timeout = "200ms"`, and the breaker stops waiting after a few.
    assert!(slowest < Duration::from_secs(2), "slowest {slowest:?}");
    assert_eq!(sluice.metric("sluice_store_fallback_active").await, 1.0);
    redis.freeze(false);
    wait_for(sluice, "sluice_store_fallback_active", 0.0).await;
}

#[tokio::test]
async fn on_error_allow_forwards_unlimited_and_deny_answers_503() {
    let refusing = crate::support::Refusing::new();
    let unreachable = format!("redis://{}", refusing.addr);
    let rules = format!("{PER_CALLER}rate = \"1/h\"\n");
    let upstream = Upstream::start().await;
    for (on_error, expected) in [
        ("allow", StatusCode::OK),
        ("deny", StatusCode::SERVICE_UNAVAILABLE),
    ] {
        let config = format!(
            "[server]\nupstream = \"http://{{upstream}}\"\n[store]\nbackend = \"redis\"\n\
             [store.redis]\nurl = \"{unreachable}\"\non_error = \"{on_error}\"\n{rules}"
        );
        // sluice starts and serves although Redis is unreachable.
        let sluice = Sluice::start(&config, upstream.addr).await;
        for _ in 0..3 {
            let got = send(Method::GET, &sluice.url("/api"), &[("x-caller", "gina")]).await;
            assert_eq!(got.status, expected, "on_error = {on_error}");
            if on_error == "allow" {
                assert!(got.header("x-ratelimit-limit").is_none());
            } else {
                crate::support::assert_problem(&got, StatusCode::SERVICE_UNAVAILABLE);
            }
        }
        assert_eq!(sluice.metric("sluice_store_fallback_active").await, 1.0);
        sluice.shutdown().await;
    }
}

/// What `/v1/check` with cost 0 (a look that takes nothing) reports left
/// for `key` of `rule` on `sluice`.
async fn remaining(sluice: &Sluice, rule: &str, key: &str) -> i64 {
    let body = format!(r#"{{"rule":"{rule}","key":"{key}","cost":0}}"#);
    let got =
        crate::support::post_json(&format!("http://{}/v1/check", sluice.admin), &body, &[]).await;
    got.json()["remaining"].as_i64().expect("a number left")
}

async fn until_remaining(sluice: &Sluice, rule: &str, key: &str, expected: i64) {
    let what = format!("{rule} never had {expected} left");
    eventually(Duration::from_secs(5), &what, || async {
        remaining(sluice, rule, key).await == expected
    })
    .await;
}

#[tokio::test]
async fn charges_and_refunds_made_on_one_instance_are_seen_by_the_others() {
    let redis = RedisServer::start();
    let rules = r#"
[[rule]]
name = "compute"
key = ["global"]
rate = "1000/h"
charge = "header:x-cost"
refund_on = ["5xx"]
"#;
    let (_upstream, sluices) = instances(2, &redis.url(), "", rules).await;
    let warmed = remaining(&sluices[1], "compute", "").await;
    // Charged after the response on the first instance (1 + 250)...
    let got = send(Method::GET, &sluices[0].url("/cost/250"), &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    assert!(got.header("x-cost").is_none());
    // ... and seen by the second.
    until_remaining(&sluices[1], "compute", "", warmed - 251).await;
    // A 5xx on the second gives its admission back: seen by the first.
    let got = send(Method::GET, &sluices[1].url("/status/502"), &[]).await;
    assert_eq!(got.status, StatusCode::BAD_GATEWAY);
    until_remaining(&sluices[0], "compute", "", warmed - 251).await;
    // A spend through one instance's admin API is a debt for every one.
    let spent = crate::support::post_json(
        &format!("http://{}/admin/spend", sluices[0].admin),
        r#"{"rule":"compute","key":"","amount":5000}"#,
        &[],
    )
    .await;
    assert_eq!(spent.status, StatusCode::OK, "{}", spent.body);
    let refused = send(Method::GET, &sluices[1].url("/"), &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    // 4,251 units in debt at 1000/h: hours away.
    assert!(retry > 3600, "Retry-After: {retry}");
}

#[tokio::test]
async fn every_key_sluice_writes_expires_but_the_shared_seed() {
    let redis = RedisServer::start();
    let rules = format!("{PER_CALLER}rate = \"100/m\"\n");
    let (_upstream, sluices) = instances(1, &redis.url(), "", &rules).await;
    for caller in ["a", "b", "c"] {
        assert_eq!(get(&sluices[0], caller).await, StatusCode::OK);
    }
    let keys = redis.cli(&["--scan", "--pattern", "sluice:*"]).unwrap();
    let keys: Vec<&str> = keys.lines().collect();
    assert!(keys.len() >= 4, "three buckets and the seed: {keys:?}");
    for key in keys {
        let ttl: i64 = redis.cli(&["PTTL", key]).unwrap().parse().unwrap();
        if key == "sluice:seed" {
            assert_eq!(ttl, -1, "the seed outlives idle buckets");
        } else {
            assert!(ttl > 0, "{key} has no expiry ({ttl})");
        }
    }
    // A full bucket is no key at all: at 100/m, 600 ms refills one unit,
    // and Redis expires the key then.
    eventually(
        Duration::from_secs(5),
        "idle buckets stay in Redis",
        || async {
            redis
                .cli(&["--scan", "--pattern", "sluice:{per-caller*"])
                .unwrap()
                .is_empty()
        },
    )
    .await;
}

const IN_FLIGHT: &str = r#"
[[rule]]
name = "in-flight"
match = { path_prefix = "/slow" }
key = ["global"]
algorithm = "concurrency"
max_in_flight = 2
"#;

/// The leases in force in Redis for `IN_FLIGHT`'s rule.
fn leases(redis: &RedisServer) -> usize {
    members(redis, "in-flight", false)
}

/// Each instance's heartbeat in Redis: the instant it lapses (microseconds),
/// which every beat moves later.
fn heartbeats(redis: &RedisServer) -> std::collections::HashMap<String, f64> {
    let scored = redis
        .cli(&["ZRANGE", "sluice:instances", "0", "-1", "WITHSCORES"])
        .unwrap_or_default();
    let lines: Vec<&str> = scored.lines().collect();
    lines
        .chunks(2)
        .filter_map(|pair| Some((pair[0].to_owned(), pair.get(1)?.parse().ok()?)))
        .collect()
}

/// The instant the one lease of `in-flight` lapses (its score, in
/// microseconds of Redis' clock).
fn lapse_of_the_lease(redis: &RedisServer) -> u64 {
    let keys = redis
        .cli(&["--scan", "--pattern", "sluice:{in-flight:*"])
        .unwrap_or_default();
    let key = keys.lines().find(|key| !key.ends_with(":queue")).unwrap();
    let scored = redis.cli(&["ZRANGE", key, "0", "0", "WITHSCORES"]).unwrap();
    let score = scored.lines().nth(1).unwrap();
    score.parse::<f64>().unwrap() as u64
}

/// The members of `rule`'s permit sets in Redis: its leases, or the
/// tickets of its permit queues.
fn members(redis: &RedisServer, rule: &str, tickets: bool) -> usize {
    let keys = redis
        .cli(&["--scan", "--pattern", &format!("sluice:{{{rule}:*")])
        .unwrap_or_default();
    keys.lines()
        .filter(|key| key.ends_with(":queue") == tickets)
        .map(|key| {
            redis
                .cli(&["ZCARD", key])
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0)
        })
        .sum()
}

async fn until_leases(redis: &RedisServer, expected: usize, within: Duration) {
    let what = format!("never {expected} leases");
    eventually(within, &what, || async { leases(redis) == expected }).await;
}

#[tokio::test]
async fn permits_are_shared_leases_taken_and_returned_across_instances() {
    let redis = RedisServer::start();
    let (_upstream, sluices) = instances(2, &redis.url(), "", IN_FLIGHT).await;
    let slow: Vec<_> = sluices
        .iter()
        .map(|sluice| {
            let url = sluice.url("/slow/1500");
            tokio::spawn(async move { send(Method::GET, &url, &[]).await.status })
        })
        .collect();
    until_leases(&redis, 2, Duration::from_secs(5)).await;
    // Both permits are held, one on each instance: a third request is
    // refused by either.
    for sluice in &sluices {
        let got = send(Method::GET, &sluice.url("/slow/0"), &[]).await;
        assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(got.header("retry-after"), Some("1"));
    }
    for request in slow {
        assert_eq!(request.await.unwrap(), StatusCode::OK);
    }
    // Returned when the responses ended.
    until_leases(&redis, 0, Duration::from_secs(5)).await;
    assert_eq!(
        send(Method::GET, &sluices[1].url("/slow/0"), &[])
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_crashed_instances_permits_come_back_within_ten_seconds() {
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [store]\nbackend = \"redis\"\n[store.redis]\nurl = \"{}\"\ntimeout = \"5s\"\n{IN_FLIGHT}",
        upstream.addr,
        redis.url()
    );
    let mut doomed =
        crate::support::SluiceProcess::spawn(&crate::support::write_config(dir.path(), &config));
    let held: Vec<_> = (0..2)
        .map(|_| {
            let url = doomed.url("/slow/60000");
            tokio::spawn(async move { send(Method::GET, &url, &[]).await })
        })
        .collect();
    until_leases(&redis, 2, Duration::from_secs(10)).await;
    let _ = doomed.child.kill();
    let _ = doomed.child.wait();
    let crashed = Instant::now();
    for request in held {
        request.abort();
    }
    // Another instance: refused while the dead one's leases count, then
    // admitted once they lapse, within their 10 s.
    let (_upstream, survivors) = instances(1, &redis.url(), "", IN_FLIGHT).await;
    let survivor = &survivors[0];
    assert_eq!(
        send(Method::GET, &survivor.url("/slow/0"), &[])
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    loop {
        let status = send(Method::GET, &survivor.url("/slow/0"), &[])
            .await
            .status;
        if status == StatusCode::OK {
            break;
        }
        assert!(
            crashed.elapsed() < Duration::from_secs(12),
            "the dead instance's permits never came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        crashed.elapsed() > Duration::from_secs(5),
        "leases lapsed too early"
    );
}

#[tokio::test]
async fn a_permit_held_longer_than_its_lease_is_renewed_while_the_request_runs() {
    let redis = RedisServer::start();
    let rules = IN_FLIGHT.replace("max_in_flight = 2", "max_in_flight = 1");
    let (_upstream, sluices) = instances(1, &redis.url(), "", &rules).await;
    let url = sluices[0].url("/slow/5000");
    let long = tokio::spawn(async move { send(Method::GET, &url, &[]).await.status });
    until_leases(&redis, 1, Duration::from_secs(5)).await;
    // The lease is renewed (every 3 s) while its request runs: the instant
    // it lapses moves later, so it never lapses at the first one.
    let taken = lapse_of_the_lease(&redis);
    eventually(
        Duration::from_secs(5),
        "the lease was never renewed",
        || async { lapse_of_the_lease(&redis) > taken },
    )
    .await;
    assert_eq!(leases(&redis), 1, "the lease lapsed while its request ran");
    assert_eq!(
        send(Method::GET, &sluices[0].url("/slow/0"), &[])
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(long.await.unwrap(), StatusCode::OK);
    until_leases(&redis, 0, Duration::from_secs(5)).await;
}

/// `n` sluice instances on a Redis Cluster.
async fn cluster_instances(
    n: usize,
    cluster: &RedisCluster,
    rules: &str,
) -> (Upstream, Vec<Sluice>) {
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let store = format!("cluster = true\nurls = [{}]", urls.join(", "));
    on_redis(n, &store, rules).await
}

#[tokio::test]
async fn a_redis_cluster_spreads_callers_over_its_primaries_and_stays_exact() {
    let cluster = RedisCluster::start();
    // The global rule comes first: a request the caller's rule refuses
    // has taken a unit from it already, in another slot.
    let rules = format!(
        "[[rule]]\nname = \"everyone\"\nmatch = {{ path_prefix = \"/api\" }}\nkey = [\"global\"]\nrate = \"1000/h\"\n\
         {PER_CALLER}limits = [\"4/h\", \"6/d\"]\n"
    );
    let (_upstream, sluices) = cluster_instances(3, &cluster, &rules).await;
    // The warm-up requests took from the global rule already.
    let before = remaining(&sluices[0], "everyone", "").await;
    // 30 callers, 6 requests each, round robin over the instances: exactly
    // 4 each (the hourly limit; the daily one charged alike).
    let mut admitted = 0;
    for caller in 0..30 {
        let mut allowed = 0;
        for round in 0..6 {
            if get(&sluices[round % 3], &format!("caller-{caller}")).await == StatusCode::OK {
                allowed += 1;
            }
        }
        assert_eq!(allowed, 4, "caller-{caller}");
        admitted += allowed;
    }
    // Every primary holds some callers' buckets.
    for node in &cluster.nodes {
        let keys: u64 = node.cli(&["DBSIZE"]).unwrap().parse().unwrap();
        assert!(keys > 0, "node {} holds no bucket", node.port);
    }
    // The global rule lives in another slot than most callers' rule: what
    // the 60 refused requests took there was given back (all or nothing).
    let left = remaining(&sluices[0], "everyone", "").await;
    assert_eq!(
        left,
        before - admitted as i64,
        "refused requests charged the global rule"
    );
}

#[tokio::test]
async fn instances_with_skewed_clocks_agree_on_every_window() {
    // docs/multi-instance.md, fault G9: one instance's clock 30 s ahead and another's 2 s
    // behind (Debian's faketime): strict mode decides on Redis' clock, so
    // together they admit exactly the limit, windows included.
    let Some(faketime) = crate::support::optional_tool(
        "redis_store::instances_with_skewed_clocks_agree_on_every_window",
        &["faketime"],
        "faketime",
    ) else {
        return;
    };
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [store]\nbackend = \"redis\"\n[store.redis]\nurl = \"{}\"\ntimeout = \"5s\"\n\
         {PER_CALLER}algorithm = \"fixed_window\"\nrate = \"10/m\"\n",
        upstream.addr,
        redis.url()
    );
    let path = crate::support::write_config(dir.path(), &config);
    let skewed: Vec<crate::support::SluiceProcess> = ["+30s", "-2s"]
        .into_iter()
        .map(|offset| {
            let mut command = std::process::Command::new(&faketime);
            command
                .args(["-f", offset])
                .arg(crate::support::binary())
                .args(["run", "--config"])
                .arg(&path);
            crate::support::SluiceProcess::spawn_command(command)
        })
        .collect();
    // Not across a minute's end (Redis' windows are Unix minutes): within
    // 3 s of one, the test starts with the next minute.
    let into_minute = crate::support::unix_now() % 60;
    if into_minute >= 57 {
        tokio::time::sleep(Duration::from_secs(60 - into_minute)).await;
    }
    let mut allowed = 0;
    for round in 0..30 {
        let url = skewed[round % 2].url("/api");
        if send(Method::GET, &url, &[("x-caller", "hana")])
            .await
            .status
            == StatusCode::OK
        {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 10, "10/m across instances with skewed clocks");
    // The window's key expires at the end of Redis' minute, not an
    // instance's.
    let keys = redis
        .cli(&["--scan", "--pattern", "sluice:{per-caller*"])
        .unwrap();
    let key = keys.lines().next().expect("the caller's window");
    let ttl: i64 = redis.cli(&["PTTL", key]).unwrap().parse().unwrap();
    let into_minute = crate::support::unix_now() % 60;
    assert!(
        ttl > 0 && ttl <= ((60 - into_minute + 1) * 1000) as i64,
        "expires in {ttl} ms, {into_minute} s into the minute"
    );
}

#[tokio::test]
async fn a_flushed_script_is_loaded_again_on_the_same_request() {
    // docs/multi-instance.md, fault G5: EVALSHA answered NOSCRIPT is no outage.
    let redis = RedisServer::start();
    let rules = format!("{PER_CALLER}rate = \"100/h\"\n");
    let (_upstream, sluices) = instances(1, &redis.url(), "", &rules).await;
    assert_eq!(get(&sluices[0], "ines").await, StatusCode::OK);
    assert_eq!(redis.cli(&["SCRIPT", "FLUSH"]).as_deref(), Some("OK"));
    let got = send(
        Method::GET,
        &sluices[0].url("/api"),
        &[("x-caller", "ines")],
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("x-ratelimit-remaining"), Some("98"));
    let errors = "sluice_store_errors_total{backend=\"redis\",kind=\"unavailable\"}";
    assert_eq!(sluices[0].metric(errors).await, 0.0);
    assert_eq!(sluices[0].metric("sluice_store_fallback_active").await, 0.0);
}

#[tokio::test]
async fn a_script_error_is_counted_apart_from_outages_and_answered_per_on_error() {
    // Redis answers, with an error retrying will not fix (here a bucket key
    // of the wrong type): `on_error` decides all the same, and the error is
    // counted as `kind="script"`, not as an outage.
    let redis = RedisServer::start();
    let rules = format!("{PER_CALLER}rate = \"100/h\"\n");
    let (_upstream, sluices) = instances(1, &redis.url(), "", &rules).await;
    assert_eq!(get(&sluices[0], "ines").await, StatusCode::OK);
    let buckets = redis
        .cli(&["--scan", "--pattern", "sluice:{per-caller*"])
        .unwrap();
    let buckets: Vec<&str> = buckets.lines().collect();
    assert!(!buckets.is_empty());
    for key in &buckets {
        redis.cli(&["DEL", key]).unwrap();
        redis.cli(&["HSET", key, "not", "a bucket"]).unwrap();
    }
    // Decided locally (`on_error = "local"`, the default).
    for _ in 0..3 {
        assert_eq!(get(&sluices[0], "ines").await, StatusCode::OK);
    }
    let errors = |kind| format!("sluice_store_errors_total{{backend=\"redis\",kind=\"{kind}\"}}");
    assert_eq!(sluices[0].metric(&errors("script")).await, 3.0);
    assert_eq!(sluices[0].metric(&errors("unavailable")).await, 0.0);
    assert_eq!(sluices[0].metric("sluice_store_fallback_active").await, 1.0);
    // The key fixed, Redis decides again.
    for key in &buckets {
        redis.cli(&["DEL", key]).unwrap();
    }
    assert_eq!(get(&sluices[0], "ines").await, StatusCode::OK);
    assert_eq!(sluices[0].metric("sluice_store_fallback_active").await, 0.0);
    assert_eq!(sluices[0].metric(&errors("unavailable")).await, 0.0);
}

#[tokio::test]
async fn strikes_and_bans_are_shared_by_every_instance() {
    let redis = RedisServer::start();
    let rules = format!(
        "{PER_CALLER}rate = \"1/h\"\nban = {{ after = 2, within = \"1m\", for = \"10m\" }}\n"
    );
    let (_upstream, sluices) = instances(2, &redis.url(), "", &rules).await;
    assert_eq!(get(&sluices[0], "jo").await, StatusCode::OK);
    // One strike on each instance: the second starts the ban.
    assert_eq!(get(&sluices[1], "jo").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(get(&sluices[0], "jo").await, StatusCode::TOO_MANY_REQUESTS);
    let banned = send(Method::GET, &sluices[1].url("/api"), &[("x-caller", "jo")]).await;
    assert_eq!(banned.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(banned.json()["banned"], true, "{}", banned.body);
    let retry: u64 = banned.header("retry-after").unwrap().parse().unwrap();
    assert!((590..=600).contains(&retry), "Retry-After: {retry}");
    let started = "sluice_bans_total{rule=\"per-caller\"}";
    assert_eq!(sluices[0].metric(started).await, 1.0);

    // A ban set by hand on one instance holds on the other; lifted on one,
    // it is lifted on both.
    let admin = |sluice: &Sluice, path: &str| format!("http://{}{path}", sluice.admin);
    let set = crate::support::post_json(
        &admin(&sluices[0], "/admin/bans"),
        r#"{"rule":"per-caller","key":"kim","for":"1h"}"#,
        &[],
    )
    .await;
    assert_eq!(set.status, StatusCode::CREATED, "{}", set.body);
    let what = "the hand-made ban never reached the other instance";
    eventually(Duration::from_secs(5), what, || async {
        let got = send(Method::GET, &sluices[1].url("/api"), &[("x-caller", "kim")]).await;
        got.status == StatusCode::TOO_MANY_REQUESTS && got.json()["banned"] == true
    })
    .await;
    let lifted = send(
        Method::DELETE,
        &admin(&sluices[0], "/admin/bans?rule=per-caller&key=kim"),
        &[],
    )
    .await;
    assert_eq!(lifted.status, StatusCode::OK, "{}", lifted.body);
    let what = "the lifted ban still refuses on the other instance";
    eventually(Duration::from_secs(5), what, || async {
        get(&sluices[1], "kim").await == StatusCode::OK
    })
    .await;
}

#[tokio::test]
async fn held_requests_on_several_instances_pass_one_slot_apart() {
    // Delay mode across instances: each held request reserves its own
    // future slot in Redis, so requests held on two instances never pass
    // at one instant (no stampede), whatever the algorithm.
    let redis = RedisServer::start();
    for algorithm in [
        "algorithm = \"token_bucket\"\nrate = \"4/s\"\nburst = 1\non_limit = \"delay\"\nmax_delay = \"10s\"",
        "algorithm = \"leaky_bucket\"\nrate = \"4/s\"\nburst = 10",
    ] {
        let rules = format!("{PER_CALLER}{algorithm}\n");
        let (_upstream, sluices) = instances(2, &redis.url(), "", &rules).await;
        let started = Instant::now();
        let requests: Vec<_> = (0..6)
            .map(|i| {
                let url = sluices[i % 2].url("/api");
                tokio::spawn(async move {
                    let got = send(Method::GET, &url, &[("x-caller", "lee")]).await;
                    (got.status, started.elapsed())
                })
            })
            .collect();
        let mut passed = Vec::new();
        for request in requests {
            let (status, at) = request.await.unwrap();
            assert_eq!(status, StatusCode::OK, "{algorithm}");
            passed.push(at);
        }
        passed.sort();
        // 4/s: one every 250 ms; the sixth passes about 1.25 s after the
        // first, and no two pass together (a loaded machine may bring two
        // answers closer than their slots, never to one instant).
        for pair in passed.windows(2) {
            assert!(
                pair[1] - pair[0] > Duration::from_millis(50),
                "{algorithm}: passed together: {passed:?}"
            );
        }
        assert!(passed[5] >= Duration::from_millis(1100), "{algorithm}: {passed:?}");
        for sluice in sluices {
            sluice.shutdown().await;
        }
    }
}

const SERIAL: &str = r#"
[[rule]]
name = "serial"
match = { path_prefix = "/slow" }
key = ["global"]
algorithm = "concurrency"
max_in_flight = 1
on_limit = "delay"
max_delay = "10s"
max_queue = 3
"#;

/// The tickets waiting in Redis for `SERIAL`'s permit.
fn tickets(redis: &RedisServer) -> usize {
    members(redis, "serial", true)
}

async fn until_serial_leases(redis: &RedisServer, expected: usize) {
    let what = format!("never {expected} leases");
    eventually(Duration::from_secs(5), &what, || async {
        members(redis, "serial", false) == expected
    })
    .await;
}

#[tokio::test]
async fn requests_queued_for_a_permit_on_several_instances_pass_one_at_a_time_in_order() {
    let redis = RedisServer::start();
    let (upstream, sluices) = instances(2, &redis.url(), "", SERIAL).await;
    let started = Instant::now();
    // Five requests, alternating instances, each sent once the one before
    // is in Redis: the first takes the permit, the next three queue
    // (max_queue = 3), the fifth finds the queue full.
    let mut requests = Vec::new();
    for seq in 0..5 {
        let url = sluices[seq % 2].url("/slow/600");
        requests.push(tokio::spawn(async move {
            let seq = seq.to_string();
            let got = send(Method::GET, &url, &[("x-seq", &seq)]).await;
            (got, started.elapsed())
        }));
        match seq {
            0 => until_serial_leases(&redis, 1).await,
            1..=3 => {
                let what = format!("request {seq} never queued");
                eventually(Duration::from_secs(5), &what, || async {
                    tickets(&redis) == seq
                })
                .await;
            }
            _ => {}
        }
    }
    let mut answers = Vec::new();
    for request in requests {
        answers.push(request.await.unwrap());
    }
    let statuses: Vec<u16> = answers.iter().map(|(got, _)| got.status.as_u16()).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 429]);
    assert!(
        answers[4].1 < Duration::from_millis(1000),
        "a full queue refuses at once: {:?}",
        answers[4].1
    );
    // One at a time, in arrival order, across both instances.
    let seen = upstream.seen();
    let order: Vec<&str> = seen
        .iter()
        .filter(|s| s.target.starts_with("/slow"))
        .map(|s| s.headers["x-seq"].to_str().unwrap())
        .collect();
    assert_eq!(order, ["0", "1", "2", "3"]);
    let slow: Vec<_> = seen
        .iter()
        .filter(|s| s.target.starts_with("/slow"))
        .collect();
    for pair in slow.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= Duration::from_millis(580),
            "two in flight at once: {gap:?}"
        );
    }
    until_serial_leases(&redis, 0).await;
    assert_eq!(tickets(&redis), 0);
    for sluice in &sluices {
        assert_eq!(
            sluice.metric(r#"sluice_queue_depth{rule="serial"}"#).await,
            0.0
        );
    }
}

#[tokio::test]
async fn a_waiter_that_leaves_or_times_out_gives_its_place_back() {
    let redis = RedisServer::start();
    let rules = SERIAL.replace("max_delay = \"10s\"", "max_delay = \"1s\"");
    let (_upstream, sluices) = instances(2, &redis.url(), "", &rules).await;
    let url = sluices[0].url("/slow/2500");
    let holder = tokio::spawn(async move { send(Method::GET, &url, &[]).await.status });
    until_serial_leases(&redis, 1).await;

    // A client queued on the other instance hangs up: its ticket goes.
    let url = sluices[1].url("/slow/0");
    let leaver = tokio::spawn(async move { send(Method::GET, &url, &[]).await });
    eventually(
        Duration::from_secs(5),
        "the waiter never queued",
        || async { tickets(&redis) == 1 },
    )
    .await;
    leaver.abort();
    eventually(
        Duration::from_secs(5),
        "the leaver's ticket stayed",
        || async { tickets(&redis) == 0 },
    )
    .await;

    // One that waits past max_delay is refused, and its ticket goes too.
    let waited = Instant::now();
    let got = send(Method::GET, &sluices[1].url("/slow/0"), &[]).await;
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(got.header("retry-after"), Some("1"));
    assert!(
        waited.elapsed() >= Duration::from_millis(900),
        "{:?}",
        waited.elapsed()
    );
    eventually(
        Duration::from_secs(5),
        "the timed-out ticket stayed",
        || async { tickets(&redis) == 0 },
    )
    .await;

    assert_eq!(holder.await.unwrap(), StatusCode::OK);
    until_serial_leases(&redis, 0).await;
    // Nobody is left in the way: the next request passes at once.
    let got = send(Method::GET, &sluices[1].url("/slow/0"), &[]).await;
    assert_eq!(got.status, StatusCode::OK);
}
