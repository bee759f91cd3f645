//! Every algorithm, several limits per rule and request costs as a client
//! sees them over real HTTP: what is admitted, when it comes back, and the
//! headers and body of the 429. On paused time (`support::paused`): the
//! proxy's clock starts at a minute's start and moves only by `advance`,
//! so every window boundary and refill falls exactly where a test puts it,
//! however busy the machine.

use crate::support;

use std::time::Duration;

use http::StatusCode;
use support::{assert_problem, get, Got, Sluice};

/// Sends `n` requests one after another; their status codes.
async fn burst(sluice: &Sluice, n: usize) -> Vec<u16> {
    let mut codes = Vec::with_capacity(n);
    for _ in 0..n {
        codes.push(get(&sluice.url("/"), &[]).await.status.as_u16());
    }
    codes
}

fn codes(admitted: usize, limited: usize) -> Vec<u16> {
    [vec![200; admitted], vec![429; limited]].concat()
}

/// The paused clock's start in Unix seconds (a minute's start, so every
/// window of these rules begins with the test).
const START_S: u64 = support::paused::START / 1_000_000_000;

fn header_u64(got: &Got, name: &str) -> u64 {
    got.header(name)
        .unwrap_or_else(|| panic!("{name} missing: {:?}", got.headers))
        .parse()
        .unwrap_or_else(|e| panic!("{name} is not an integer ({e})"))
}

const MARGIN: Duration = Duration::from_millis(50);

#[tokio::test(start_paused = true)]
async fn fixed_window_admits_count_per_clock_aligned_window_and_resets_at_its_end() {
    let (upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "fixed"
algorithm = "fixed_window"
rate = "5/2s"
"#,
    )
    .await;
    // 50 ms into a window (the clock starts at a minute's start).
    tokio::time::advance(MARGIN).await;
    let window = START_S / 2;
    let first = burst(&sluice, 7).await;
    let limited = get(&sluice.url("/"), &[]).await;

    assert_eq!(first, codes(5, 2));
    assert_eq!(upstream.count(), 5);
    assert_problem(&limited, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.header("x-ratelimit-limit"), Some("5"));
    assert_eq!(limited.header("x-ratelimit-remaining"), Some("0"));
    // The window's end, in Unix seconds: a multiple of the period.
    let window_end = (window + 1) * 2;
    assert_eq!(header_u64(&limited, "x-ratelimit-reset"), window_end);
    // Entered 50 ms into a 2 s window: the end is 1–2 s away.
    assert_eq!(header_u64(&limited, "retry-after"), 2);
    assert_eq!(
        limited.header("ratelimit-policy"),
        Some(r#""fixed";q=5;w=2"#)
    );
    assert_eq!(limited.header("ratelimit"), Some(r#""fixed";r=0;t=2"#));

    // The next window starts empty: the boundary burst of fixed windows.
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(burst(&sluice, 6).await, codes(5, 1));
}

#[tokio::test(start_paused = true)]
async fn sliding_window_weights_the_previous_window_into_the_current_one() {
    let (_upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "sliding"
algorithm = "sliding_window"
rate = "4/2s"
"#,
    )
    .await;
    // 50 ms into a window (the clock starts at a minute's start).
    tokio::time::advance(MARGIN).await;
    assert_eq!(burst(&sluice, 5).await, codes(4, 1));
    let limited = get(&sluice.url("/"), &[]).await;
    // One unit fits once 4 × (P − e) / P + 1 ≤ 4, i.e. 0.5 s into the next
    // window: about 2.45 s from now, rounded up.
    assert_eq!(header_u64(&limited, "retry-after"), 3);
    assert_eq!(limited.header("x-ratelimit-remaining"), Some("0"));

    // 0.6 s into the next window the previous four weigh 4 × 0.7 = 2.8:
    // exactly one more fits (3.8), a second would make 4.8.
    tokio::time::advance(Duration::from_millis(2_550)).await;
    let admitted = get(&sluice.url("/"), &[]).await;
    assert_eq!(admitted.status, StatusCode::OK);
    assert_eq!(admitted.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(burst(&sluice, 1).await, codes(0, 1));
}

#[tokio::test(start_paused = true)]
async fn sliding_log_frees_exactly_the_units_whose_stamps_expired() {
    let (_upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "log"
algorithm = "sliding_log"
rate = "3/2s"
"#,
    )
    .await;

    assert_eq!(burst(&sluice, 1).await, codes(1, 0));
    tokio::time::advance(Duration::from_millis(1000)).await;
    assert_eq!(burst(&sluice, 3).await, codes(2, 1));
    let limited = get(&sluice.url("/"), &[]).await;
    // The oldest stamp (t = 0) expires at t = 2 s: about 1 s from now.
    assert_eq!(header_u64(&limited, "retry-after"), 1);
    let body = assert_problem(&limited, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["limit"], 3);
    assert_eq!(body["remaining"], 0);

    // After t = 2 s only the first stamp has expired: one unit, not three.
    tokio::time::advance(Duration::from_millis(1200)).await;
    assert_eq!(burst(&sluice, 2).await, codes(1, 1));
}

// Paused time: the second between the bursts passes by `advance`.
#[tokio::test(start_paused = true)]
async fn every_limit_of_a_rule_holds_and_a_rejected_request_takes_from_none() {
    let (upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "api"
limits = ["3/s", "5/10s"]
"#,
    )
    .await;

    // The per-second limit stops the burst at 3; the three rejected requests
    // take nothing from the 10-second limit.
    assert_eq!(burst(&sluice, 6).await, codes(3, 3));
    let limited = get(&sluice.url("/"), &[]).await;
    let body = assert_problem(&limited, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["rule"], "api");
    assert_eq!(body["violated-policies"], serde_json::json!(["api-1s"]));
    assert_eq!(
        limited.header("ratelimit-policy"),
        Some(r#""api-1s";q=3;w=1, "api-10s";q=5;w=10"#)
    );
    // The most constraining limit: the per-second one, with nothing left.
    assert_eq!(limited.header("x-ratelimit-limit"), Some("3"));
    assert_eq!(limited.header("x-ratelimit-remaining"), Some("0"));

    // A second later the per-second limit has refilled, but only 2 units
    // remain of the 10-second limit.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(burst(&sluice, 3).await, codes(2, 1));
    assert_eq!(upstream.count(), 5);
    let limited = get(&sluice.url("/"), &[]).await;
    let body = assert_problem(&limited, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["violated-policies"], serde_json::json!(["api-10s"]));
    assert_eq!(body["limit"], 5);
    assert_eq!(limited.header("x-ratelimit-limit"), Some("5"));
    let ratelimit = limited.header("ratelimit").expect("RateLimit");
    assert!(
        ratelimit.starts_with(r#""api-1s";r="#) && ratelimit.contains(r#", "api-10s";r=0;t="#),
        "{ratelimit}"
    );
    let allowed = r#"sluice_requests_total{rule="api",outcome="allowed"}"#;
    let limited = r#"sluice_requests_total{rule="api",outcome="limited"}"#;
    assert_eq!(sluice.metric(allowed).await, 5.0);
    assert_eq!(sluice.metric(limited).await, 6.0);
}

// Paused time: the second between the bursts passes by `advance`.
#[tokio::test(start_paused = true)]
async fn several_limits_work_with_window_algorithms_too() {
    let (_upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "windows"
algorithm = "sliding_log"
limits = ["2/s", "3/10s"]
"#,
    )
    .await;

    assert_eq!(burst(&sluice, 3).await, codes(2, 1));
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(burst(&sluice, 2).await, codes(1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_request_costing_two_units_takes_two() {
    let (_upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "export"
rate = "5/10s"
cost = 2
"#,
    )
    .await;

    let first = get(&sluice.url("/"), &[]).await;
    assert_eq!(first.header("x-ratelimit-remaining"), Some("3"));
    assert_eq!(burst(&sluice, 2).await, codes(1, 1));
    let limited = get(&sluice.url("/"), &[]).await;
    let body = assert_problem(&limited, StatusCode::TOO_MANY_REQUESTS);
    // One unit is left, which is not enough for a request costing two.
    assert_eq!(body["remaining"], 1);
    assert_eq!(limited.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(
        body["detail"],
        "rule 'export' allows 5 units per 10s; each request costs 2"
    );
    // 5 per 10 s refills a unit every 2 s, and no time has passed: the
    // second unit is 2 s away.
    assert_eq!(header_u64(&limited, "retry-after"), 2);
}
