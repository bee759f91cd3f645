//! Delay mode over real HTTP on a manual clock: the proxy's decisions and
//! holds read and wait on the clock the test moves, so held requests pass
//! at exact instants, however busy the machine is.

use crate::support;

use std::time::Duration;

use http::StatusCode;
use sluice::clock::{ManualClock, ProxyClock};
use support::{get, Got, Sluice, Upstream};
use tokio::task::JoinHandle;

/// One request every 2 s, the rest held up to 10 s.
const PACED: &str = r#"
[[rule]]
name = "paced"
rate = "1/2s"
burst = 1
on_limit = "delay"
max_delay = "10s"
"#;

/// The start of a minute, so windows begin with the test.
const START: u64 = 1_800_000_000 * 1_000_000_000;

async fn start(rules: &str) -> (Upstream, Sluice, ManualClock) {
    let upstream = Upstream::start().await;
    let clock = ManualClock::new(START);
    let config = format!("[server]\nupstream = \"http://{{upstream}}\"\n{rules}");
    let sluice =
        Sluice::start_with_clock(&config, upstream.addr, ProxyClock::Manual(clock.clone())).await;
    (upstream, sluice, clock)
}

fn spawn_get(url: String) -> JoinHandle<Got> {
    tokio::spawn(async move { get(&url, &[]).await })
}

/// Lets the server run for a moment of real time: a request that can
/// finish without the clock moving does so well within it.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(150)).await;
}

#[tokio::test]
async fn a_held_request_passes_exactly_when_its_slot_comes() {
    let (upstream, sluice, clock) = start(PACED).await;
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    let held = spawn_get(sluice.url("/"));
    settle().await;
    assert!(!held.is_finished(), "held until its slot");
    let depth = r#"sluice_queue_depth{rule="paced"}"#;
    assert_eq!(sluice.metric(depth).await, 1.0);

    // One nanosecond before the slot: still held.
    clock.advance(Duration::from_nanos(2_000_000_000 - 1));
    settle().await;
    assert!(!held.is_finished(), "released before its slot");
    clock.advance(Duration::from_nanos(1));
    let got = held.await.unwrap();
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("x-sluice-delay-ms"), Some("2000"));
    assert_eq!(upstream.count(), 2);
    assert_eq!(sluice.metric(depth).await, 0.0);
    let outcome = |o: &str| format!(r#"sluice_requests_total{{rule="paced",outcome="{o}"}}"#);
    assert_eq!(sluice.metric(&outcome("allowed")).await, 1.0);
    assert_eq!(sluice.metric(&outcome("delayed")).await, 1.0);
}

#[tokio::test]
async fn a_request_that_would_wait_beyond_max_delay_is_refused_at_once() {
    let (_upstream, sluice, _clock) = start(
        r#"
[[rule]]
name = "paced"
rate = "1/10s"
burst = 1
on_limit = "delay"
max_delay = "15s"
"#,
    )
    .await;
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    let second = spawn_get(sluice.url("/"));
    settle().await;
    assert!(!second.is_finished(), "10 s fits in max_delay");
    // The third would pass at 20 s, beyond 15 s: 429 with no clock move.
    let third = get(&sluice.url("/"), &[]).await;
    assert_eq!(third.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(third.header("retry-after"), Some("20"));
    second.abort();
}

#[tokio::test]
async fn a_client_leaving_while_held_hands_its_slot_to_the_next() {
    let (upstream, sluice, clock) = start(PACED).await;
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    let leaver = spawn_get(sluice.url("/leaver"));
    settle().await;
    leaver.abort();
    let _ = leaver.await;
    settle().await;
    let depth = r#"sluice_queue_depth{rule="paced"}"#;
    assert_eq!(sluice.metric(depth).await, 0.0, "the leaver left the queue");
    // The next request takes the leaver's slot at 2 s, not 4 s.
    let next = spawn_get(sluice.url("/next"));
    settle().await;
    clock.advance(Duration::from_secs(2));
    let got = next.await.unwrap();
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("x-sluice-delay-ms"), Some("2000"));
    let targets: Vec<_> = upstream.seen().into_iter().map(|s| s.target).collect();
    assert_eq!(targets, ["/", "/next"]);
}

#[tokio::test]
async fn a_queued_permit_gives_up_at_max_delay_by_the_clock() {
    let (_upstream, sluice, clock) = start(
        r#"
[[rule]]
name = "one-at-a-time"
algorithm = "concurrency"
max_in_flight = 1
on_limit = "delay"
max_delay = "5s"
"#,
    )
    .await;
    // The permit is held by a slow exchange (real time, unaffected by the
    // manual clock).
    let slow = spawn_get(sluice.url("/slow/3000"));
    settle().await;
    let queued = spawn_get(sluice.url("/"));
    settle().await;
    assert!(!queued.is_finished(), "queued for the permit");
    clock.advance(Duration::from_nanos(5_000_000_000 - 1));
    settle().await;
    assert!(!queued.is_finished(), "gave up before max_delay");
    clock.advance(Duration::from_nanos(1));
    let got = queued.await.unwrap();
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(got.header("retry-after"), Some("1"));
    assert_eq!(slow.await.unwrap().status, StatusCode::OK);
    // The permit came back with the slow response: the next passes at once.
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
}
