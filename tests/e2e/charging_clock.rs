//! Deferred charges over real HTTP on paused time: the proxy charges,
//! decides and answers on the runtime's time, which the test moves, so
//! debts and Retry-After are exact to the nanosecond however busy the
//! machine is.

use crate::support;

use std::time::Duration;

use http::StatusCode;
use support::paused::{start, until, until_metric};
use support::{get, Got, Sluice, Upstream};
use tokio::time::Instant;

/// One rule, `compute`: 1000 units a second, 1000 at once, charged as
/// `charge` says.
fn compute(charge: &str) -> String {
    format!(
        "[[rule]]\nname = \"compute\"\nkey = [\"global\"]\nrate = \"1000/s\"\n\
         burst = 1000\ncharge = \"{charge}\"\n"
    )
}

const CHARGED: &str = r#"sluice_budget_charged_total{rule="compute"}"#;

/// A refused request: its Retry-After (which the body's `retry_after_secs`
/// must repeat) and `RateLimit`'s `t` (seconds until the bucket is full
/// again, debt included).
fn retry_after(got: &Got) -> (u64, u64) {
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS, "{got:?}");
    assert_eq!(got.header("x-ratelimit-remaining"), Some("0"));
    let header: u64 = got.header("retry-after").unwrap().parse().unwrap();
    assert_eq!(got.json()["retry_after_secs"], header, "{got:?}");
    let ratelimit = got.header("ratelimit").unwrap_or_default();
    let reset = ratelimit
        .rsplit_once(";t=")
        .and_then(|(_, t)| t.parse().ok())
        .unwrap_or_else(|| panic!("no t in RateLimit: {ratelimit}"));
    (header, reset)
}

/// A request after time moved by `by`.
async fn admitted_after(sluice: &Sluice, by: Duration) -> Got {
    tokio::time::advance(by).await;
    get(&sluice.url("/"), &[]).await
}

/// A `/slow/<ms>` request, once it reached the upstream.
async fn slow(upstream: &Upstream, sluice: &Sluice, ms: u64) -> tokio::task::JoinHandle<Got> {
    let url = sluice.url(&format!("/slow/{ms}"));
    let slow = tokio::spawn(async move { get(&url, &[]).await });
    until("the slow request reached the upstream", || {
        upstream.count() == 1
    })
    .await;
    slow
}

#[tokio::test(start_paused = true)]
async fn a_reported_cost_beyond_the_burst_is_a_debt_repaid_at_the_rate() {
    let (_upstream, sluice) = start("", &compute("header:x-cost")).await;
    let t0 = Instant::now();
    // 1 at admission + 2,500 reported on a full bucket of 1,000: 1,501
    // units of debt. The next request (1 more) waits exactly 1.502 s.
    assert_eq!(
        get(&sluice.url("/cost/2500"), &[]).await.status,
        StatusCode::OK
    );
    // Full again 2.501 s from now (the 1,501 owed and 1,000 of burst).
    assert_eq!(retry_after(&get(&sluice.url("/cost/0"), &[]).await), (2, 3));
    let early = admitted_after(&sluice, Duration::from_nanos(1_502_000_000 - 1)).await;
    assert_eq!(retry_after(&early).0, 1, "1 ns before the debt is repaid");
    let repaid = admitted_after(&sluice, Duration::from_nanos(1)).await;
    assert_eq!(repaid.status, StatusCode::OK, "{repaid:?}");
    assert_eq!(repaid.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(
        t0.elapsed(),
        Duration::from_nanos(1_502_000_000),
        "time moved only by the test"
    );
}

#[tokio::test(start_paused = true)]
async fn upstream_time_is_charged_in_milliseconds_from_forwarding() {
    let (upstream, sluice) = start("", &compute("elapsed_ms")).await;
    let t0 = Instant::now();
    // The upstream answers after 1.5 s, and time jumps there at once: the
    // charge of the exchange's 1,500 ms lands at one instant.
    let slow = slow(&upstream, &sluice, 1_500).await;
    tokio::time::advance(Duration::from_millis(1_500)).await;
    assert_eq!(slow.await.unwrap().status, StatusCode::OK);
    assert_eq!(t0.elapsed(), Duration::from_millis(1_500));
    assert_eq!(sluice.metric(CHARGED).await, 1_500.0);
    // Charged at one instant on a bucket full again (the admission's unit
    // came back during the 1.5 s): 1,500 − 1,000 = 500 units owed; the next
    // request waits 501 ms (its own unit included).
    let refused = get(&sluice.url("/"), &[]).await;
    assert_eq!(retry_after(&refused), (1, 2));
    let early = admitted_after(&sluice, Duration::from_nanos(501_000_000 - 1)).await;
    assert_eq!(early.status, StatusCode::TOO_MANY_REQUESTS);
    let repaid = admitted_after(&sluice, Duration::from_nanos(1)).await;
    assert_eq!(repaid.status, StatusCode::OK, "{repaid:?}");
}

#[tokio::test(start_paused = true)]
async fn a_long_exchange_is_charged_at_each_second_as_it_passes() {
    let (upstream, sluice) = start("", &compute("elapsed_ms")).await;
    let t0 = Instant::now();
    let slow = slow(&upstream, &sluice, 3_250).await;
    // Each second of waiting for the answer is charged as it passes (the
    // exchange is woken at the tick, and charges before the runtime idles).
    for second in 1..=3u32 {
        tokio::time::advance(Duration::from_secs(1)).await;
        until_metric(&sluice, CHARGED, f64::from(second) * 1000.0).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(second.into()));
    }
    tokio::time::advance(Duration::from_millis(250)).await;
    assert_eq!(slow.await.unwrap().status, StatusCode::OK);
    assert_eq!(sluice.metric(CHARGED).await, 3_250.0);
    assert_eq!(t0.elapsed(), Duration::from_millis(3_250));
}

#[tokio::test(start_paused = true)]
async fn a_table_charges_each_source_weighted_and_rounded_up() {
    // Upstream time at a third of a unit a millisecond, ticked each
    // second; a reported cost at 2.5 units each.
    let rule = "[[rule]]\nname = \"compute\"\nkey = [\"global\"]\nrate = \"1000/s\"\n\
                burst = 1000\ncharge = { \"elapsed_ms\" = 0.333333333333, \"header:x-cost\" = 2.5 }\n";
    let (upstream, sluice) = start("", rule).await;
    let slow = slow(&upstream, &sluice, 2_500).await;
    // Each tick charges what the whole time so far comes to, less what was
    // charged: 1,000 ms → 334 (333.33 rounded up), 2,000 ms → 667.
    tokio::time::advance(Duration::from_secs(1)).await;
    until_metric(&sluice, CHARGED, 334.0).await;
    tokio::time::advance(Duration::from_secs(1)).await;
    until_metric(&sluice, CHARGED, 667.0).await;
    // 2,500 ms in all: 834 (833.33 rounded up), never more from the ticks.
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(slow.await.unwrap().status, StatusCode::OK);
    assert_eq!(sluice.metric(CHARGED).await, 834.0);
    // 3 reported units × 2.5 = 7.5: 8 units, and no time (answered at once).
    assert_eq!(
        get(&sluice.url("/cost/3"), &[]).await.status,
        StatusCode::OK
    );
    assert_eq!(sluice.metric(CHARGED).await, 842.0);
}

#[tokio::test(start_paused = true)]
async fn every_limit_of_a_rule_is_charged() {
    let (_upstream, sluice) = start(
        "",
        r#"
[[rule]]
name = "two-limits"
key = ["global"]
limits = ["1000/s", "2500/m"]
burst = 1000
charge = "header:x-cost"
"#,
    )
    .await;
    assert_eq!(
        get(&sluice.url("/cost/2000"), &[]).await.status,
        StatusCode::OK
    );
    // The per-second limit is 1,001 in debt: repaid 1.002 s later.
    tokio::time::advance(Duration::from_millis(1_002)).await;
    let got = get(&sluice.url("/cost/0"), &[]).await;
    assert_eq!(got.status, StatusCode::OK, "{got:?}");
    // The per-minute limit was charged too: of its 2,500, 2,001 went then,
    // 41.75 came back in exactly 1.002 s (2500/m) and this request took 1:
    // 539.75 left. The per-second one is at 0.
    let ratelimit = got.header("ratelimit").unwrap();
    let left = |policy: &str| -> u64 {
        let (_, rest) = ratelimit.split_once(&format!("\"{policy}\";r=")).unwrap();
        rest.split(';').next().unwrap().parse().unwrap()
    };
    assert_eq!(left("two-limits-1s"), 0, "{ratelimit}");
    assert_eq!(left("two-limits-1m"), 539, "{ratelimit}");
}
