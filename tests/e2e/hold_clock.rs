//! Delay mode over real HTTP on paused time: the proxy's decisions and
//! holds read and wait on the runtime's time, which the test moves, so held
//! requests pass at exact instants, however busy the machine is.

use crate::support;

use std::time::Duration;

use http::StatusCode;
use support::paused::{start, until, until_metric};
use support::{get, Got};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One request every 2 s, the rest held up to 10 s.
const PACED: &str = r#"
[[rule]]
name = "paced"
rate = "1/2s"
burst = 1
on_limit = "delay"
max_delay = "10s"
"#;

const DEPTH: &str = r#"sluice_queue_depth{rule="paced"}"#;

fn spawn_get(url: String) -> JoinHandle<Got> {
    tokio::spawn(async move { get(&url, &[]).await })
}

#[tokio::test(start_paused = true)]
async fn a_held_request_passes_exactly_when_its_slot_comes() {
    let (upstream, sluice) = start("", PACED).await;
    let t0 = Instant::now();
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    let held = spawn_get(sluice.url("/"));
    until_metric(&sluice, DEPTH, 1.0).await;
    assert_eq!(t0.elapsed(), Duration::ZERO, "no timer fired meanwhile");

    // One nanosecond before the slot: still held, after a full exchange
    // with the admin listener in which a release due would have happened.
    tokio::time::advance(Duration::from_nanos(2_000_000_000 - 1)).await;
    assert_eq!(sluice.metric(DEPTH).await, 1.0, "released before its slot");
    assert!(!held.is_finished());
    tokio::time::advance(Duration::from_nanos(1)).await;
    let got = held.await.unwrap();
    assert_eq!(t0.elapsed(), Duration::from_secs(2), "released at its slot");
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("x-sluice-delay-ms"), Some("2000"));
    assert_eq!(upstream.count(), 2);
    assert_eq!(sluice.metric(DEPTH).await, 0.0);
    let outcome = |o: &str| format!(r#"sluice_requests_total{{rule="paced",outcome="{o}"}}"#);
    assert_eq!(sluice.metric(&outcome("allowed")).await, 1.0);
    assert_eq!(sluice.metric(&outcome("delayed")).await, 1.0);
}

#[tokio::test(start_paused = true)]
async fn a_request_that_would_wait_beyond_max_delay_is_refused_at_once() {
    let (_upstream, sluice) = start(
        "",
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
    let t0 = Instant::now();
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    let second = spawn_get(sluice.url("/"));
    // 10 s fits in max_delay: held.
    until_metric(&sluice, DEPTH, 1.0).await;
    // The third would pass at 20 s, beyond 15 s: 429 with no time passing.
    let third = get(&sluice.url("/"), &[]).await;
    assert_eq!(t0.elapsed(), Duration::ZERO);
    assert_eq!(third.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(third.header("retry-after"), Some("20"));
    assert!(!second.is_finished());
    second.abort();
}

#[tokio::test(start_paused = true)]
async fn a_client_leaving_while_held_hands_its_slot_to_the_next() {
    let (upstream, sluice) = start("", PACED).await;
    let t0 = Instant::now();
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    let leaver = spawn_get(sluice.url("/leaver"));
    until_metric(&sluice, DEPTH, 1.0).await;
    leaver.abort();
    let _ = leaver.await;
    // sluice sees the connection close and takes the leaver off the queue.
    until_metric(&sluice, DEPTH, 0.0).await;
    // The next request takes the leaver's slot at 2 s, not 4 s.
    let next = spawn_get(sluice.url("/next"));
    until_metric(&sluice, DEPTH, 1.0).await;
    assert_eq!(t0.elapsed(), Duration::ZERO);
    // Nothing left to do but wait: the runtime jumps to the next timers.
    let got = next.await.unwrap();
    assert_eq!(t0.elapsed(), Duration::from_secs(2));
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("x-sluice-delay-ms"), Some("2000"));
    let targets: Vec<_> = upstream.seen().into_iter().map(|s| s.target).collect();
    assert_eq!(targets, ["/", "/next"]);
}

#[tokio::test(start_paused = true)]
async fn a_queued_permit_gives_up_at_max_delay_by_the_clock() {
    let (upstream, sluice) = start(
        "",
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
    let depth = r#"sluice_queue_depth{rule="one-at-a-time"}"#;
    let t0 = Instant::now();
    // The permit is held by an exchange the upstream answers after 10 s.
    let slow = spawn_get(sluice.url("/slow/10000"));
    until("the slow request reached the upstream", || {
        upstream.count() == 1
    })
    .await;
    let queued = spawn_get(sluice.url("/"));
    until_metric(&sluice, depth, 1.0).await;
    assert_eq!(t0.elapsed(), Duration::ZERO);
    tokio::time::advance(Duration::from_nanos(5_000_000_000 - 1)).await;
    assert_eq!(sluice.metric(depth).await, 1.0, "gave up before max_delay");
    assert!(!queued.is_finished());
    tokio::time::advance(Duration::from_nanos(1)).await;
    let got = queued.await.unwrap();
    assert_eq!(t0.elapsed(), Duration::from_secs(5), "gave up at max_delay");
    assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(got.header("retry-after"), Some("1"));
    assert_eq!(slow.await.unwrap().status, StatusCode::OK);
    assert_eq!(t0.elapsed(), Duration::from_secs(10), "the upstream's 10 s");
    // The permit came back with the slow response: the next passes at once.
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    assert_eq!(t0.elapsed(), Duration::from_secs(10));
}
