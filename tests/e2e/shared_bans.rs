//! Bans across instances (docs/multi-instance.md, "Bans across
//! instances"), as an operator behind a load balancer meets them: two
//! sluice instances on one real `redis-server`, in strict and in hybrid
//! mode. A ban set through one is refused by both and listed by both, and
//! lifted through the other it ends on both; earned bans add up the
//! strikes every instance counted. Keys are credentials here (a header),
//! so no answer, and nothing in Redis, shows them in clear.

use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use serde_json::Value;

use crate::support::{
    after_syncs, eventually, get, post_json, send, RedisServer, Sluice, Upstream,
};

/// A caller's API key: it must never be shown in clear.
const SECRET: &str = "sk_live_kim_7Hq2";

/// Two instances on `redis` in `mode` ("strict" or "hybrid", syncing every
/// 50 ms), with `rules`, each once Redis answers it.
async fn pair(redis: &RedisServer, mode: &str, rules: &str) -> (Upstream, [Sluice; 2]) {
    let upstream = Upstream::start().await;
    let config = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n[store]\nbackend = \"redis\"\n\
         [store.redis]\nurl = \"{}\"\nmode = \"{mode}\"\nsync_interval = \"50ms\"\n\
         timeout = \"5s\"\ninstances = 2\n{rules}",
        redis.url()
    );
    let a = Sluice::start(&config, upstream.addr).await;
    let b = Sluice::start(&config, upstream.addr).await;
    for sluice in [&a, &b] {
        eventually(Duration::from_secs(15), "Redis never answered", || async {
            let _ = call(sluice, "warm-up").await;
            sluice.metric("sluice_store_fallback_active").await == 0.0
        })
        .await;
    }
    (upstream, [a, b])
}

async fn call(sluice: &Sluice, key: &str) -> crate::support::Got {
    send(Method::GET, &sluice.url("/api"), &[("x-api-key", key)]).await
}

fn admin(sluice: &Sluice, path: &str) -> String {
    format!("http://{}{path}", sluice.admin)
}

async fn listed(sluice: &Sluice) -> Value {
    get(&admin(sluice, "/admin/bans"), &[]).await.json()
}

/// A rule keyed on an API key, with `more` added.
fn per_key(more: &str) -> String {
    format!(
        "[[rule]]\nname = \"per-key\"\nmatch = {{ path_prefix = \"/api\" }}\n\
         key = [\"header:x-api-key\"]\n{more}\n"
    )
}

/// How long `sluice` takes to answer `key` with `status` (and, for a 429,
/// as banned), polling.
async fn until_answered(sluice: &Sluice, key: &str, status: StatusCode, what: &str) -> Duration {
    let started = Instant::now();
    eventually(Duration::from_secs(2), what, || async {
        let got = call(sluice, key).await;
        got.status == status
            && (status != StatusCode::TOO_MANY_REQUESTS || got.json()["banned"] == true)
    })
    .await;
    started.elapsed()
}

/// The operator's story, on a rule with no `ban` of its own: banned by
/// hand through A, refused and listed by B; lifted through B by the label
/// B lists, admitted and no longer listed by A.
async fn a_ban_set_through_one_instance_holds_on_both_until_lifted_through_the_other(mode: &str) {
    let redis = RedisServer::start();
    let (_upstream, [a, b]) = pair(&redis, mode, &per_key("rate = \"1000/s\"")).await;
    assert_eq!(call(&b, SECRET).await.status, StatusCode::OK);
    let body = format!(r#"{{"rule":"per-key","key":"{SECRET}","for":"1h"}}"#);
    let set = post_json(&admin(&a, "/admin/bans"), &body, &[]).await;
    assert_eq!(set.status, StatusCode::CREATED, "{}", set.body);
    assert_eq!(set.json()["shared"], true, "{}", set.body);
    let label = set.json()["key"].as_str().expect("a label").to_owned();
    assert!(
        !label.contains(SECRET) && label.starts_with("sk_l"),
        "{label}"
    );
    // Strict decides in Redis: refused from the next decision on. Hybrid
    // learns it from the board within an interval (50 ms, plus the test's
    // polling on a loaded machine).
    let took = until_answered(&b, SECRET, StatusCode::TOO_MANY_REQUESTS, "B never refused").await;
    println!("{mode}: B refused the banned key {took:?} after A's answer");
    if mode == "strict" {
        let first = call(&b, SECRET).await;
        assert_eq!(first.status, StatusCode::TOO_MANY_REQUESTS);
    }
    let list = listed(&b).await;
    assert_eq!(list["shared"], true, "{list}");
    let bans = list["bans"].as_array().expect("bans");
    assert_eq!(bans.len(), 1, "{list}");
    assert_eq!(bans[0]["rule"], "per-key");
    assert_eq!(
        bans[0]["key"],
        label.as_str(),
        "the same label on every instance"
    );
    assert_eq!(bans[0]["manual"], true);
    assert!((3590..=3600).contains(&bans[0]["remaining_secs"].as_u64().unwrap()));
    // Nothing in Redis holds the key in clear.
    let everything = redis.cli(&["--scan"]).expect("scan");
    let board = redis.cli(&["HGETALL", "sluice:{bans}"]).expect("the board");
    assert!(board.contains(&label), "{board}");
    for text in [&everything, &board] {
        assert!(!text.contains(SECRET), "the key in clear in Redis: {text}");
    }
    // The board and its version expire with their last ban (an hour).
    for key in ["sluice:{bans}", "sluice:{bans}:version"] {
        let ttl: i64 = redis
            .cli(&["PTTL", key])
            .expect("PTTL")
            .trim()
            .parse()
            .unwrap();
        assert!((3_500_000..=3_601_000).contains(&ttl), "{key}: PTTL {ttl}");
    }

    let lift = format!("/admin/bans?rule=per-key&key={}", urlencode(&label));
    let lifted = send(Method::DELETE, &admin(&b, &lift), &[]).await;
    assert_eq!(lifted.status, StatusCode::OK, "{}", lifted.body);
    let took = until_answered(&a, SECRET, StatusCode::OK, "A still refuses the lifted key").await;
    println!("{mode}: A admitted the key {took:?} after the lift");
    let list = listed(&a).await;
    assert_eq!(list["bans"], serde_json::json!([]), "{list}");
    // Lifting it again finds nothing.
    let again = send(Method::DELETE, &admin(&a, &lift), &[]).await;
    assert_eq!(again.status, StatusCode::NOT_FOUND, "{}", again.body);
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn strict_a_ban_set_through_one_instance_holds_on_both_until_lifted_through_the_other() {
    a_ban_set_through_one_instance_holds_on_both_until_lifted_through_the_other("strict").await;
}

#[tokio::test]
async fn hybrid_a_ban_set_through_one_instance_holds_on_both_until_lifted_through_the_other() {
    a_ban_set_through_one_instance_holds_on_both_until_lifted_through_the_other("hybrid").await;
}

/// Hybrid mode: the strikes each instance answers add up in Redis, so a
/// caller spread over the instances is banned after `after` refusals in
/// all, not `after` on each; then both refuse it, and both list it.
#[tokio::test]
async fn hybrid_strikes_counted_on_each_instance_add_up_to_one_ban() {
    let redis = RedisServer::start();
    let rule = per_key("rate = \"1/h\"\nban = { after = 4, within = \"1m\", for = \"10m\" }");
    let (_upstream, [a, b]) = pair(&redis, "hybrid", &rule).await;
    // Known to both: a key new to an instance may take its share there (1
    // of 1) before its first sync tells it the truth.
    assert_eq!(call(&a, SECRET).await.status, StatusCode::OK);
    after_syncs([a.admin, b.admin]).await;
    let _ = call(&b, SECRET).await;
    after_syncs([a.admin, b.admin]).await;
    // Two refusals on each: two strikes each, four in all.
    for sluice in [&a, &b, &a, &b] {
        let got = call(sluice, SECRET).await;
        assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS, "{}", got.body);
        assert_ne!(got.json()["banned"], true, "banned too early: {}", got.body);
    }
    for sluice in [&a, &b] {
        let took = until_answered(
            sluice,
            SECRET,
            StatusCode::TOO_MANY_REQUESTS,
            "never banned",
        )
        .await;
        println!("hybrid: banned on an instance {took:?} after the fourth strike");
    }
    let retry: u64 = call(&b, SECRET)
        .await
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((590..=600).contains(&retry), "Retry-After: {retry}");
    // Listed by both, named by its label once an instance refused it.
    for sluice in [&a, &b] {
        let list = listed(sluice).await;
        // (The warm-up's key, refused while the pair started, is banned too.)
        let bans: Vec<&Value> = list["bans"]
            .as_array()
            .expect("bans")
            .iter()
            .filter(|ban| {
                ban["key"]
                    .as_str()
                    .is_some_and(|key| key.starts_with("sk_l"))
            })
            .collect();
        assert_eq!(bans.len(), 1, "{list}");
        assert_eq!(bans[0]["manual"], false);
        let key = bans[0]["key"].as_str().expect("named");
        assert!(key.starts_with("sk_l") && !key.contains(SECRET), "{key}");
    }
}
