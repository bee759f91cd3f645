//! Calendar quotas over HTTP (docs/charging.md, "Calendar quotas"), the
//! proxy's clock started 4 s before a boundary of Europe/Berlin's calendar
//! on paused time (`support::paused::from`): a request is refused until the
//! boundary's very nanosecond and admitted at it, and the headers count to
//! that local boundary. And, on the real binary beside a real
//! `redis-server`, an instance whose clock `faketime` runs two hours ahead
//! counts into the window Redis' clock is in.

use crate::support;

use std::time::Duration;

use http::{Method, StatusCode};
use support::{send, Got, RedisServer, SluiceProcess, Upstream};

/// `sluice run` with `config`, under `faketime` with the clock `faked`
/// (faketime's `-f` spec), or `None` (with the SKIPPED line) without it.
fn faked(test: &str, faked: &str, config: &str, dir: &std::path::Path) -> Option<SluiceProcess> {
    let faketime = support::optional_tool(test, &["faketime"], "faketime")?;
    let path = support::write_config(dir, config);
    let mut command = std::process::Command::new(faketime);
    command
        .args(["-f", faked])
        .arg(support::binary())
        .args(["run", "--config"])
        .arg(&path)
        // An absolute `@` time is read as UTC; the monotonic clock stays
        // real, so sluice's clock (read once, then monotonic) runs in real
        // time from the faked start.
        .env("TZ", "UTC")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    Some(SluiceProcess::spawn_command(command))
}

fn header(got: &Got, name: &str) -> u64 {
    got.header(name)
        .unwrap_or_else(|| panic!("no {name}: {got:?}"))
        .parse()
        .unwrap()
}

/// One `quota` rule of 1 per `unit` on Europe/Berlin's calendar, its clock
/// started 4 s before `boundary` (Unix seconds): the first request passes,
/// the next is refused until the boundary (Retry-After and the reset count
/// to it), and the first at it passes, with the new window's length as `w`
/// and its end as the reset.
async fn crossing(boundary: u64, unit: &str, next_boundary: u64) {
    let upstream = Upstream::start().await;
    let config = format!(
        "[server]\nupstream = \"http://{{upstream}}\"\n\
         [response]\non_success = true\n\
         [[rule]]\nname = \"quota\"\nkey = [\"global\"]\nalgorithm = \"fixed_window\"\n\
         calendar = \"Europe/Berlin\"\nrate = \"1/{unit}\"\n"
    );
    let start = (boundary - 4) * 1_000_000_000;
    let sluice = support::paused::from(&config, upstream.addr, start).await;
    let url = sluice.url("/x");
    let first = send(Method::GET, &url, &[]).await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    assert_eq!(header(&first, "x-ratelimit-reset"), boundary);
    let refused = send(Method::GET, &url, &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{refused:?}");
    assert_eq!(header(&refused, "retry-after"), 4);
    assert_eq!(header(&refused, "x-ratelimit-reset"), boundary);
    // Refused until the boundary's nanosecond, admitted at it.
    tokio::time::advance(Duration::from_nanos(4_000_000_000 - 1)).await;
    let before = send(Method::GET, &url, &[]).await;
    assert_eq!(before.status, StatusCode::TOO_MANY_REQUESTS, "{before:?}");
    tokio::time::advance(Duration::from_nanos(1)).await;
    let after = send(Method::GET, &url, &[]).await;
    assert_eq!(after.status, StatusCode::OK, "{after:?}");
    assert_eq!(header(&after, "x-ratelimit-reset"), next_boundary);
    assert_eq!(
        after.header("ratelimit-policy"),
        Some(format!("\"quota\";q=1;w={}", next_boundary - boundary).as_str())
    );
    let again = send(Method::GET, &url, &[]).await;
    assert_eq!(again.status, StatusCode::TOO_MANY_REQUESTS);
    // The whole new window is left.
    assert_eq!(header(&again, "retry-after"), next_boundary - boundary);
}

#[tokio::test(start_paused = true)]
async fn a_monthly_quota_starts_again_at_berlin_midnight_on_the_first() {
    // 2026-11-01 00:00 CET, then 2026-12-01 00:00 CET.
    crossing(1_793_487_600, "mo", 1_796_079_600).await;
}

#[tokio::test(start_paused = true)]
async fn a_daily_quota_follows_berlin_s_23_hour_day() {
    // 2026-03-29 00:00 CET, then 2026-03-30 00:00 CEST: 23 hours.
    crossing(1_774_738_800, "d", 1_774_821_600).await;
}

#[tokio::test(start_paused = true)]
async fn a_daily_quota_follows_berlin_s_25_hour_day() {
    // 2026-10-25 00:00 CEST, then 2026-10-26 00:00 CET: 25 hours.
    crossing(1_792_879_200, "d", 1_792_969_200).await;
}

#[tokio::test(start_paused = true)]
async fn a_weekly_quota_starts_again_on_monday() {
    // Monday 2026-11-30 00:00 CET, then Monday 2026-12-07.
    crossing(1_795_993_200, "w", 1_796_598_000).await;
}

/// A fixed-offset zone whose next midnight is 30 to 90 minutes away, and
/// that midnight (Unix seconds): `Etc/GMT-3` is UTC+3.
fn zone_with_midnight_soon(now: u64) -> (String, u64) {
    for hours in -12i64..=14 {
        let local = now as i64 + hours * 3_600;
        let until = 86_400 - local.rem_euclid(86_400);
        if (1_800..5_400).contains(&until) {
            let zone = match hours {
                0 => "Etc/UTC".to_owned(),
                h if h > 0 => format!("Etc/GMT-{h}"),
                h => format!("Etc/GMT+{}", -h),
            };
            return (zone, now + until as u64);
        }
    }
    unreachable!("every hour of the day is some zone's")
}

#[tokio::test]
async fn an_instance_two_hours_ahead_counts_in_the_day_redis_is_in() {
    // Strict mode places calendar windows by Redis' clock: an instance two
    // hours ahead has passed the zone's midnight by its own clock, Redis
    // has not, and both instances count into Redis' day.
    let test = "calendar::an_instance_two_hours_ahead_counts_in_the_day_redis_is_in";
    if support::optional_tool(test, &["faketime"], "faketime").is_none() {
        return;
    }
    let redis = RedisServer::start();
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (zone, midnight) = zone_with_midnight_soon(support::unix_now());
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [store]\nbackend = \"redis\"\n[store.redis]\nurl = \"{}\"\ntimeout = \"5s\"\n\
         [[rule]]\nname = \"daily\"\nkey = [\"header:x-caller\"]\nalgorithm = \"fixed_window\"\n\
         calendar = \"{zone}\"\nrate = \"1/d\"\n",
        upstream.addr,
        redis.url()
    );
    let plain = SluiceProcess::spawn(&support::write_config(dir.path(), &config));
    let ahead_dir = tempfile::tempdir().unwrap();
    let Some(ahead) = faked(test, "+2h", &config, ahead_dir.path()) else {
        return;
    };
    let ask = |sluice: &SluiceProcess, caller: &str| {
        let url = sluice.url("/api");
        let caller = caller.to_owned();
        async move { send(Method::GET, &url, &[("x-caller", &caller)]).await }
    };
    // Spent on the instance on time: refused on the one ahead, whose own
    // clock is in the next day already.
    assert_eq!(ask(&plain, "ana").await.status, StatusCode::OK);
    let refused = ask(&ahead, "ana").await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{refused:?}");
    // It retries at Redis' midnight, not a day later.
    let retry = header(&refused, "retry-after");
    let until = midnight - support::unix_now();
    assert!(
        retry <= until + 1 && retry + 5 >= until,
        "Retry-After {retry}, midnight in {until} s"
    );
    // Spent on the instance ahead: counted in Redis' day, so refused on the
    // one on time.
    assert_eq!(ask(&ahead, "ben").await.status, StatusCode::OK);
    assert_eq!(
        ask(&plain, "ben").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The window's key expires at Redis' midnight.
    let keys = redis
        .cli(&["--scan", "--pattern", "sluice:{daily*"])
        .unwrap();
    for key in keys.lines() {
        let ttl: u64 = redis.cli(&["PTTL", key]).unwrap().parse().unwrap();
        let until_ms = (midnight - support::unix_now()) * 1000;
        assert!(
            ttl <= until_ms + 1_000 && ttl + 5_000 >= until_ms,
            "{key} expires in {ttl} ms, midnight in {until_ms} ms"
        );
    }
}
