//! Hybrid mode (docs/multi-instance.md, "Hybrid mode"): three real sluice
//! instances deciding in memory and syncing through a real `redis-server`
//! (or a real three-primary Redis Cluster) the test starts: the overshoot
//! bound, a new key across instances, a late instance, Redis killed,
//! frozen and restarted, charges and refunds, and Redis calls that do not
//! follow the request rate.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use http::{Method, StatusCode};

use crate::support::{
    after_syncs, eventually, post_json, send, sync_rounds_later, Got, RedisCluster, RedisServer,
    Sluice, Upstream,
};

/// `[store.redis]` of a hybrid fleet of three syncing every 50 ms.
const HYBRID: &str = "mode = \"hybrid\"\nsync_interval = \"50ms\"\ninstances = 3\n";

/// `n` hybrid instances on the Redis `redis` names (`url = ...` or
/// `cluster = true` and `urls`), with `store` added to `[store.redis]`,
/// each once its first sync has completed.
async fn fleet(n: usize, redis: &str, store: &str, rules: &str) -> (Upstream, Vec<Sluice>) {
    let upstream = Upstream::start().await;
    let config = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n\
         [store]\nbackend = \"redis\"\n[store.redis]\n{redis}\n{HYBRID}{store}\n{rules}"
    );
    let mut started = Vec::new();
    for _ in 0..n {
        started.push(Sluice::start(&config, upstream.addr).await);
    }
    for sluice in &started {
        until_synced(sluice).await;
    }
    (upstream, started)
}

/// Waits until `sluice` has completed a sync with Redis (and so read the
/// key seed the instances share) and is not failing.
async fn until_synced(sluice: &Sluice) {
    eventually(
        Duration::from_secs(15),
        "never synced with Redis",
        || async {
            let metrics = sluice.exposition().await;
            metrics.value("sluice_store_sync_calls_total", &[]) >= 2.0
                && metrics.value("sluice_store_fallback_active", &[]) == 0.0
                && metrics.value("sluice_store_sync_age_seconds", &[]) < 0.5
        },
    )
    .await;
}

async fn call(sluice: &Sluice, caller: &str) -> Got {
    send(Method::GET, &sluice.url("/api"), &[("x-caller", caller)]).await
}

fn remaining(got: &Got) -> i64 {
    got.header("x-ratelimit-remaining")
        .and_then(|value| value.parse().ok())
        .expect("X-RateLimit-Remaining")
}

/// `per-caller` at `rate` (a token bucket whose burst is the whole rate).
fn per_caller(rate: &str) -> String {
    format!(
        "[[rule]]\nname = \"per-caller\"\nmatch = {{ path_prefix = \"/api\" }}\n\
         key = [\"header:x-caller\"]\nrate = \"{rate}\"\n"
    )
}

/// `count` requests from `caller` sent to every instance at once: how
/// many were admitted.
async fn burst(sluices: &[Sluice], caller: &str, count: usize) -> usize {
    let sent = sluices
        .iter()
        .flat_map(|sluice| (0..count).map(move |_| call(sluice, caller)));
    join_all(sent)
        .await
        .iter()
        .filter(|got| got.status == StatusCode::OK)
        .count()
}

#[tokio::test]
async fn a_burst_on_a_new_key_across_three_instances_admits_about_the_limit_not_three_times_it() {
    let redis = RedisServer::start();
    let url = format!("url = \"{}\"", redis.url());
    let (_upstream, sluices) = fleet(3, &url, "", &per_caller("90/h")).await;
    // 90 requests per instance at once on a key none has seen: alone, each
    // would admit all 90. Each may spend its share, 30, before its first
    // sync; after it, what the others spent.
    let admitted = burst(&sluices, "newcomer", 90).await;
    println!("a burst of 3 × 90 on a new key with a limit of 90: {admitted} admitted");
    // The promise: at most the limit plus (instances − 1) shares.
    assert!(admitted <= 90 + 2 * 30, "{admitted} admitted");
    assert!(admitted >= 80, "only {admitted} of the 90 admitted");
    // Later, the caller comes back to every instance. The instance that
    // synced the burst's last units knows the key is spent; one whose view
    // may have missed units sent after it stopped following the key holds
    // it to its share until its next sync: at most the other two shares
    // more in all (and none when every instance followed the whole burst,
    // as on an idle machine).
    after_syncs(sluices.iter().map(|s| s.admin)).await;
    let again = burst(&sluices, "newcomer", 40).await;
    println!("then 3 × 40 more: {again} admitted");
    assert!(
        admitted + again <= 90 + 2 * 30,
        "{admitted} then {again} admitted"
    );
    assert!(again <= 2 * 30, "{again} admitted after the burst");
}

#[tokio::test]
async fn three_instances_hammering_one_key_overshoot_by_at_most_one_intervals_traffic() {
    let redis = RedisServer::start();
    let url = format!("url = \"{}\"", redis.url());
    let (_upstream, sluices) = fleet(3, &url, "", &per_caller("600/h")).await;
    // Known to every instance first (one request each, then a sync).
    for sluice in &sluices {
        assert_eq!(call(sluice, "hammer").await.status, StatusCode::OK);
    }
    after_syncs(sluices.iter().map(|s| s.admin)).await;
    let rounds = || join_all(sluices.iter().map(|s| s.metric("sluice_store_syncs_total")));
    let rounds_before = rounds().await;
    let started = Instant::now();
    // 1.5 s of hammering, longer on a machine busy with other tests until
    // each instance has been asked 404 times (1,212 requests in all), but
    // under 6 s, so that the bucket refills by one unit at most.
    let hammering = sluices.iter().map(|sluice| async move {
        let mut answers = Vec::new();
        while (started.elapsed() < Duration::from_millis(1500) || answers.len() < 404)
            && started.elapsed() < Duration::from_millis(5500)
        {
            let round = join_all((0..4).map(|_| call(sluice, "hammer"))).await;
            answers.extend(round.into_iter().map(|got| got.status));
        }
        answers
    });
    let hammered = AtomicBool::new(false);
    let hammering = async {
        let answers = join_all(hammering).await;
        hammered.store(true, Ordering::SeqCst);
        answers
    };
    // Meanwhile, the longest any instance went without a completed sync,
    // as its `sluice_store_sync_age_seconds` showed it, plus the longest
    // time between two readings (what a reading may have missed).
    let longest_gap = async {
        let (mut longest, mut spacing) = (0.0f64, 0.0f64);
        let mut read_at = Instant::now();
        while !hammered.load(Ordering::SeqCst) {
            for sluice in &sluices {
                longest = longest.max(sluice.metric("sluice_store_sync_age_seconds").await);
            }
            spacing = spacing.max(read_at.elapsed().as_secs_f64());
            read_at = Instant::now();
        }
        longest + spacing
    };
    let (answers, longest_gap) = tokio::join!(hammering, longest_gap);
    let answers: Vec<StatusCode> = answers.into_iter().flatten().collect();
    let elapsed = started.elapsed().as_secs_f64();
    // The interval as the instances kept it: on a machine busy with other
    // tests a round may start late, and the promise is about the traffic
    // between two syncs: the mean of the slowest instance's, or the
    // longest gap seen.
    let slowest = rounds()
        .await
        .iter()
        .zip(&rounds_before)
        .map(|(after, before)| after - before)
        .fold(f64::MAX, f64::min);
    let interval = (elapsed / slowest).max(longest_gap);
    let admitted = answers.iter().filter(|s| **s == StatusCode::OK).count() + 3;
    let per_interval = answers.len() as f64 / elapsed * interval;
    println!(
        "3 instances, 600/h, 50 ms: {admitted} admitted of {} in {elapsed:.2} s, one sync \
         every {:.1} ms at worst ({per_interval:.0} requests per interval; longest gap seen \
         {:.1} ms)",
        answers.len() + 3,
        interval * 1000.0,
        longest_gap * 1000.0
    );
    // Refill over the test is a unit at most (600/h: one per 6 s).
    assert!(admitted >= 600, "under-admitted: {admitted}");
    // The promise: at most one interval's traffic over the limit (the sync's
    // round trip, under a millisecond here, is within the margin: three
    // instances hammering evenly overshoot by about 2/3 of it).
    let bound = 601.0 + per_interval;
    assert!(
        admitted as f64 <= bound,
        "{admitted} admitted, bound {bound:.0}"
    );
    assert!(
        answers.len() > 1200,
        "too few requests to test: {}",
        answers.len()
    );
}

#[tokio::test]
async fn a_late_instance_sees_the_others_spending_within_an_interval() {
    let redis = RedisServer::start();
    let url = format!("url = \"{}\"", redis.url());
    let (upstream, mut sluices) = fleet(2, &url, "", &per_caller("90/h")).await;
    for _ in 0..25 {
        assert_eq!(call(&sluices[0], "early").await.status, StatusCode::OK);
        assert_eq!(call(&sluices[1], "early").await.status, StatusCode::OK);
    }
    let config = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n\
         [store]\nbackend = \"redis\"\n[store.redis]\n{url}\n{HYBRID}\n{}",
        per_caller("90/h")
    );
    let late = Sluice::start(&config, upstream.addr).await;
    until_synced(&late).await;
    // Its first request: decided at its share (30 of 90), not as if the
    // key were unspent.
    let first = call(&late, "early").await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(remaining(&first) <= 29, "{} left", remaining(&first));
    // Within an interval or two it knows the 50 the others took.
    let started = Instant::now();
    eventually(
        Duration::from_secs(1),
        "the late instance never caught up",
        || async {
            let got = call(&late, "early").await;
            // Each probe takes one unit too.
            got.status == StatusCode::OK && remaining(&got) <= 90 - 50 - 2 && remaining(&got) >= 30
        },
    )
    .await;
    println!("the late instance caught up in {:?}", started.elapsed());
    // Its admin views say they show its own view, and how old it is.
    let url = format!(
        "http://{}/admin/buckets?rule=per-caller&key=early",
        late.admin
    );
    let view = crate::support::get(&url, &[]).await.json()["view"].clone();
    assert_eq!(view["local"], true, "{view}");
    assert!(
        view["synced_ms_ago"].as_u64().is_some_and(|ms| ms < 500),
        "{view}"
    );
    assert_eq!(view["redis_failing"], false, "{view}");
    sluices.push(late);
}

/// Waits until `sluice` has noticed that Redis does not answer its syncs.
async fn until_failing(sluice: &Sluice) {
    eventually(
        Duration::from_secs(5),
        "a Redis out went unnoticed",
        || async { sluice.metric("sluice_store_fallback_active").await == 1.0 },
    )
    .await;
}

/// What the fleet answers to `caller`'s requests while Redis is out: no
/// request waits on Redis, and the key is held to the instance's share.
async fn answered_alone(sluices: &[Sluice], caller: &str) {
    let mut admitted = 0;
    for round in 0..60 {
        let started = Instant::now();
        let got = call(&sluices[round % 3], caller).await;
        assert!(
            started.elapsed() < Duration::from_millis(300),
            "a request waited {:?} on Redis",
            started.elapsed()
        );
        assert!(!got.status.is_server_error(), "{}", got.status);
        admitted += usize::from(got.status == StatusCode::OK);
    }
    // A share of 31 is 11: 33 in all, never 3 × 31.
    assert!(admitted <= 33, "{admitted} admitted while Redis was out");
    assert!(
        admitted >= 30,
        "only {admitted} admitted while Redis was out"
    );
}

#[tokio::test]
async fn a_frozen_redis_holds_no_request_and_the_fleet_converges_once_it_thaws() {
    let redis = RedisServer::start();
    // A long timeout: a strict store would hold each request a second.
    let url = format!("url = \"{}\"\ntimeout = \"1s\"", redis.url());
    let (_upstream, sluices) = fleet(3, &url, "", &per_caller("31/h")).await;
    redis.freeze(true);
    for sluice in &sluices {
        eventually(
            Duration::from_secs(5),
            "the frozen Redis went unnoticed",
            || async { sluice.metric("sluice_store_fallback_active").await == 1.0 },
        )
        .await;
    }
    answered_alone(&sluices, "frozen").await;
    let age = sluices[0].metric("sluice_store_sync_age_seconds").await;
    assert!(age >= 0.5, "the sync age did not grow: {age}");
    redis.freeze(false);
    let thawed = Instant::now();
    for sluice in &sluices {
        until_synced(sluice).await;
    }
    println!("synced again {:?} after the thaw", thawed.elapsed());
    assert!(thawed.elapsed() < Duration::from_secs(3));
    // The units taken while frozen reached Redis: every instance now
    // refuses the caller (33 spent of 31).
    after_syncs(sluices.iter().map(|s| s.admin)).await;
    for sluice in &sluices {
        let got = call(sluice, "frozen").await;
        assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    }
}

#[tokio::test]
async fn a_killed_redis_is_answered_alone_and_a_restarted_one_is_synced_within_a_second() {
    let mut redis = RedisServer::start();
    let url = format!("url = \"{}\"", redis.url());
    let (_upstream, sluices) = fleet(3, &url, "", &per_caller("31/h")).await;
    redis.kill();
    // (A request decided in the interval before an instance noticed is
    // held to the share of a new key under the whole limit, which errs
    // towards refusing: waited out here, so the count is exact.)
    for sluice in &sluices {
        until_failing(sluice).await;
    }
    answered_alone(&sluices, "killed").await;
    for sluice in &sluices {
        assert_eq!(sluice.metric("sluice_store_fallback_active").await, 1.0);
        assert!(sluice.metric("sluice_store_sync_errors_total").await >= 1.0);
    }
    // Back, empty: the counts were lost (with the key seed the instances
    // share, so buckets are named anew), never the rules. Within a second
    // every instance syncs again, and shares budgets again.
    redis.restart();
    let restarted = Instant::now();
    for sluice in &sluices {
        until_synced(sluice).await;
    }
    println!("synced again {:?} after the restart", restarted.elapsed());
    assert!(restarted.elapsed() < Duration::from_secs(2));
    let admitted = burst(&sluices, "after", 40).await;
    assert!(
        (31..=31 + 2 * 11).contains(&admitted),
        "{admitted} admitted"
    );
    after_syncs(sluices.iter().map(|s| s.admin)).await;
    for sluice in &sluices {
        assert_eq!(
            call(sluice, "after").await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
}

/// The script calls Redis was sent (`EVALSHA`, `EVAL`: `INFO
/// commandstats` also counts the commands a script runs, which are
/// reported apart), and every command it ran.
fn calls(redis: &RedisServer) -> (u64, u64) {
    let stats = redis.cli(&["INFO", "commandstats"]).expect("commandstats");
    let (mut sent, mut all) = (0, 0);
    for line in stats.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let Some(count) = rest
            .strip_prefix("calls=")
            .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
        else {
            continue;
        };
        all += count;
        if matches!(name, "cmdstat_evalsha" | "cmdstat_eval") {
            sent += count;
        }
    }
    (sent, all)
}

/// Requests to `sluice` for `period`, `clients` at a time each waiting
/// `pause` between requests, over ten callers: how many were sent, the
/// calls its syncs made meanwhile (its own count), and the script calls
/// Redis was sent and all the commands it ran.
async fn load(
    sluice: &Sluice,
    redis: &RedisServer,
    clients: usize,
    pause: Duration,
    period: Duration,
) -> (usize, f64, (u64, u64)) {
    let synced = sluice.metric("sluice_store_sync_calls_total").await;
    let before = calls(redis);
    let started = Instant::now();
    let sent = join_all((0..clients).map(|client| async move {
        let mut sent = 0;
        while started.elapsed() < period {
            let caller = format!("caller-{}", (client + sent) % 10);
            call(sluice, &caller).await;
            sent += 1;
            tokio::time::sleep(pause).await;
        }
        sent
    }))
    .await;
    let after = calls(redis);
    let synced = sluice.metric("sluice_store_sync_calls_total").await - synced;
    // `INFO` itself is a command: counted once in each reading.
    (
        sent.iter().sum(),
        synced,
        (after.0 - before.0, after.1 - before.1 - 1),
    )
}

#[tokio::test]
async fn redis_calls_follow_the_interval_not_the_request_rate() {
    let redis = RedisServer::start();
    let url = format!("url = \"{}\"", redis.url());
    let (_upstream, sluices) = fleet(1, &url, "", &per_caller("100000/s")).await;
    let period = Duration::from_secs(2);
    let (slow, slow_synced, slow_commands) =
        load(&sluices[0], &redis, 1, Duration::from_millis(20), period).await;
    let (fast, fast_synced, fast_commands) =
        load(&sluices[0], &redis, 8, Duration::ZERO, period).await;
    println!(
        "{slow} requests: {slow_synced} sync calls, {slow_commands:?} Redis script calls \
         (commands); {fast} requests: {fast_synced}, {fast_commands:?}"
    );
    assert!(
        fast >= 10 * slow,
        "not ten times the rate: {slow} and {fast}"
    );
    // Per interval, one script call (the buckets touched) and the ban
    // board's version: 40 rounds in 2 s, at either rate.
    for (synced, (scripts, _)) in [(slow_synced, slow_commands), (fast_synced, fast_commands)] {
        assert!(
            (60.0..=100.0).contains(&synced),
            "{synced} sync calls in 2 s"
        );
        assert!(
            (30..=50).contains(&scripts),
            "{scripts} script calls in 2 s"
        );
    }
    // The script's work follows the buckets touched per interval (ten
    // callers at most here), not the requests.
    assert!(fast_commands.1 < 3 * slow_commands.1, "{fast_commands:?}");
}

#[tokio::test]
async fn charges_and_refunds_on_one_instance_reach_the_others() {
    let redis = RedisServer::start();
    let url = format!("url = \"{}\"", redis.url());
    let rules = r#"
[[rule]]
name = "compute"
key = ["global"]
rate = "1000/30d"
charge = "header:x-cost"
refund_on = ["5xx"]
"#;
    // (A unit refills in 43 minutes: the counts below are exact however
    // long a loaded machine takes; at 1000/h one came back every 3.6 s.)
    // A generous store timeout: on a loaded machine a sync that times out
    // puts an instance at its share for a moment, which is not what this
    // test is about.
    let (_upstream, sluices) = fleet(2, &url, "timeout = \"2s\"\n", rules).await;
    let probe = |sluice: &Sluice| {
        let url = sluice.url("/");
        async move { send(Method::GET, &url, &[]).await }
    };
    // The second instance's view once synced (a first request on a key
    // it never saw is held to its share).
    probe(&sluices[1]).await;
    after_syncs(sluices.iter().map(|s| s.admin)).await;
    let before = remaining(&probe(&sluices[1]).await);
    // 1 + 250 units on the first instance, charged after its response...
    let got = send(Method::GET, &sluices[0].url("/cost/250"), &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    // ...seen by the second within an interval or two (its own probes
    // take a unit each).
    let mut probes = 0;
    eventually(
        Duration::from_secs(1),
        "the charge never reached the second instance",
        || {
            probes += 1;
            let taken = probes;
            let probe = probe(&sluices[1]);
            // (Above 400: an instance that has not read the bucket yet
            // decides at its share, 333 of 1,000, which is no sign of it.)
            async move {
                let left = remaining(&probe.await);
                left <= before - 251 - taken + 1 && left > 400
            }
        },
    )
    .await;
    let mut settled = remaining(&probe(&sluices[1]).await);
    for _ in 0..100 {
        if settled > 400 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        settled = remaining(&probe(&sluices[1]).await);
    }
    // A 5xx on the first instance gives its unit back everywhere, well
    // after the sync that sent it as taken.
    after_syncs(sluices.iter().map(|s| s.admin)).await;
    let failed = send(Method::GET, &sluices[0].url("/status/502"), &[]).await;
    assert_eq!(failed.status, StatusCode::BAD_GATEWAY);
    // Each probe takes one: once the refused request's unit is back, the
    // second instance has exactly `settled` less its probes.
    let mut probes = 0;
    eventually(
        Duration::from_secs(5),
        "the refund did not reach the second instance",
        || {
            probes += 1;
            let taken = probes;
            let probe = probe(&sluices[1]);
            async move { remaining(&probe.await) == settled - taken }
        },
    )
    .await;
    // A spend through one instance's admin API is a debt on every one.
    let spent = post_json(
        &format!("http://{}/admin/spend", sluices[0].admin),
        r#"{"rule":"compute","key":"","amount":5000}"#,
        &[],
    )
    .await;
    assert_eq!(spent.status, StatusCode::OK, "{}", spent.body);
    eventually(
        Duration::from_secs(1),
        "the spend never reached the second instance",
        || {
            let probe = probe(&sluices[1]);
            async move { probe.await.status == StatusCode::TOO_MANY_REQUESTS }
        },
    )
    .await;
}

#[tokio::test]
async fn a_redis_cluster_shares_hybrid_budgets_across_its_primaries() {
    let cluster = RedisCluster::start();
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|url| format!("\"{url}\""))
        .collect();
    let redis = format!("cluster = true\nurls = [{}]", urls.join(", "));
    // A generous store timeout: on a loaded machine a sync that times out
    // is sent again and its units counted twice (erring towards refusing),
    // which is not what this test is about.
    let (_upstream, sluices) = fleet(3, &redis, "timeout = \"2s\"\n", &per_caller("60/h")).await;
    // Ten callers, whose buckets spread over the primaries: a burst on each
    // across the fleet admits about its limit.
    let mut bursts = Vec::new();
    for caller in 0..10 {
        let caller = format!("caller-{caller}");
        let admitted = burst(&sluices, &caller, 40).await;
        assert!(admitted <= 60 + 2 * 20, "{caller}: {admitted} admitted");
        assert!(admitted >= 55, "{caller}: only {admitted} admitted");
        bursts.push(admitted);
    }
    // Every instance sent its units and read the others' back: three more
    // sync rounds each (a fixed sleep was too short for a busy machine,
    // where a Cluster round of ten buckets took longer).
    sync_rounds_later(sluices.iter().map(|s| s.admin), 3.0).await;
    for (caller, admitted) in bursts.into_iter().enumerate() {
        let caller = format!("caller-{caller}");
        let later = then_admitted(&sluices, &caller).await;
        // Within hybrid's bound: an instance whose follow round ran before
        // another's last delta reached its primary holds the caller to its
        // share, and may admit this one request (docs/multi-instance.md).
        assert!(
            admitted + later <= 60 + sluices.len(),
            "{caller}: {admitted} then {later}"
        );
    }
}

/// Once every instance has synced, one request for `caller` through each:
/// how many were admitted (none once the burst spent the limit).
async fn then_admitted(sluices: &[Sluice], caller: &str) -> usize {
    let mut admitted = 0;
    for sluice in sluices {
        admitted += usize::from(call(sluice, caller).await.status == StatusCode::OK);
    }
    admitted
}

/// The config of a hybrid instance of the real binary on `redis`: one
/// rule, a fixed window of `count` per hour, `on_change = "keep"`.
fn windowed(redis: &RedisServer, upstream: &Upstream, count: u64) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [store]\nbackend = \"redis\"\n[store.redis]\nurl = \"{}\"\n{HYBRID}\n\
         [[rule]]\nname = \"per-caller\"\nmatch = {{ path_prefix = \"/api\" }}\n\
         key = [\"header:x-caller\"]\nalgorithm = \"fixed_window\"\nrate = \"{count}/h\"\n\
         on_change = \"keep\"\n",
        upstream.addr,
        redis.url()
    )
}

/// What `GET /admin/buckets` says is left of the caller's window now.
async fn window_left(sluice: &crate::support::SluiceProcess, caller: &str) -> u64 {
    let url = sluice.admin_url(&format!("/admin/buckets?rule=per-caller&key={caller}"));
    let got = crate::support::get(&url, &[]).await;
    got.json()["buckets"][0]["remaining"]
        .as_u64()
        .unwrap_or_else(|| panic!("{}", got.body))
}

/// A reload that changes a limit keeps the shared buckets, as in strict
/// mode: with `on_change = "keep"` a window keeps its count in Redis, and
/// what one instance spends after the reload reaches the other.
#[tokio::test]
async fn a_reload_keeps_the_shared_buckets_on_every_instance() {
    // Not across the end of an hour, where the window starts again.
    let into_hour = crate::support::unix_now() % 3600;
    if into_hour > 3590 {
        tokio::time::sleep(Duration::from_secs(3601 - into_hour)).await;
    }
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let paths: Vec<_> = dirs
        .iter()
        .map(|dir| crate::support::write_config(dir.path(), &windowed(&redis, &upstream, 30)))
        .collect();
    let fleet: Vec<_> = paths
        .iter()
        .map(|path| crate::support::SluiceProcess::spawn(path))
        .collect();
    let get = |at: usize| {
        let url = fleet[at].url("/api");
        async move { send(Method::GET, &url, &[("x-caller", "kept")]).await }
    };
    // Two units through each (within their shares of a new key).
    for at in [0, 1, 0, 1] {
        assert_eq!(get(at).await.status, StatusCode::OK);
    }
    eventually(Duration::from_secs(5), "the fleet never synced", || async {
        window_left(&fleet[0], "kept").await == 26 && window_left(&fleet[1], "kept").await == 26
    })
    .await;
    // 30/h → 60/h, keep: the 4 spent stay spent on both.
    for (sluice, path) in fleet.iter().zip(&paths) {
        std::fs::write(path, windowed(&redis, &upstream, 60)).unwrap();
        let answer = send(Method::POST, &sluice.admin_url("/admin/reload"), &[]).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    }
    for sluice in &fleet {
        assert_eq!(window_left(sluice, "kept").await, 56);
    }
    // Spent through one after the reload, seen by the other.
    for _ in 0..5 {
        assert_eq!(get(0).await.status, StatusCode::OK);
    }
    let last = get(1).await;
    assert_eq!(last.status, StatusCode::OK);
    eventually(
        Duration::from_secs(5),
        "the second never saw the spending",
        || async { window_left(&fleet[1], "kept").await == 50 },
    )
    .await;
}
