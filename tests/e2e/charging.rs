//! Deferred charges and refunds over real HTTP: upstream time charged while
//! it runs and after, costs the upstream reports, refunds of failed
//! exchanges. The tests of upstream time run on paused time
//! (`support::paused`): the upstream's pauses and the proxy's clock move
//! together, by `advance`, so nothing depends on how busy the machine is.
//! (Exact debts on a manual clock: `charging_clock.rs`.)

use crate::support;

use std::time::Duration;

use http::StatusCode;
use support::{get, start, Got, Sluice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn remaining(got: &Got) -> u64 {
    got.header("x-ratelimit-remaining")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no X-RateLimit-Remaining: {got:?}"))
}

fn series(name: &str, rule: &str) -> String {
    format!(r#"{name}{{rule="{rule}"}}"#)
}

/// The compute rule's charge once it is more than `before`, read (each a
/// whole admin exchange) while the paused clock stands still.
async fn charged_beyond(sluice: &Sluice, before: f64) -> f64 {
    let series = series("sluice_budget_charged_total", "compute");
    for _ in 0..1_000 {
        let charged = sluice.metric(&series).await;
        if charged > before {
            return charged;
        }
        tokio::task::yield_now().await;
    }
    panic!("{series} stayed {before}");
}

/// Sends `GET path` on a raw connection and keeps it open: the request is
/// in flight until the returned stream is dropped (the client leaves).
async fn open_request(sluice: &Sluice, path: &str) -> TcpStream {
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

const ELAPSED: &str = r#"
[[rule]]
name = "compute"
key = ["global"]
rate = "1000/s"
burst = 1000
charge = "elapsed_ms"
"#;

#[tokio::test(start_paused = true)]
async fn upstream_time_beyond_the_rate_is_a_debt_that_refuses_until_repaid() {
    // Two 1.5 s requests at once use 3,000 ms of upstream time in 1.5 s on
    // a 1000 ms/s budget: 1,500 units of debt (a single request at a time
    // would be exactly at the rate, since the bucket refills meanwhile).
    let (_upstream, sluice) = support::paused::start("", ELAPSED).await;
    let slow = sluice.url("/slow/1500");
    let (a, b) = tokio::join!(get_owned(slow.clone()), get_owned(slow));
    assert_eq!((a, b), (StatusCode::OK, StatusCode::OK));
    let refused = get(&sluice.url("/"), &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{refused:?}");
    assert_eq!(remaining(&refused), 0);
    // 1,500 units owed at 1000/s, plus the admission cost: 1.501 s.
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert_eq!(retry, 2, "{refused:?}");
    let body = refused.json();
    let retry_secs = body["retry_after_secs"].as_f64().unwrap_or(retry as f64);
    assert!((1.0..=2.0).contains(&retry_secs), "{body}");
    let charged = sluice
        .metric(&series("sluice_budget_charged_total", "compute"))
        .await;
    assert!((3000.0..3300.0).contains(&charged), "charged {charged}");

    // Admitted once the debt is repaid (1.5 s after the requests ended).
    tokio::time::advance(Duration::from_millis(1_200)).await;
    assert_eq!(
        get(&sluice.url("/"), &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS,
        "still in debt 1.2 s later"
    );
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_long_response_is_charged_every_second_while_it_streams() {
    // 30 chunks 100 ms apart: 3 s of streaming. Another request on the same
    // bucket sees the charge grow while the first still streams.
    let (upstream, sluice) = support::paused::start("", ELAPSED).await;
    let streaming = tokio::spawn({
        let url = sluice.url("/drip/30/100");
        async move { get(&url, &[]).await }
    });
    support::paused::until("the stream began", || upstream.count() == 1).await;
    let started = tokio::time::Instant::now();
    support::paused::pass(Duration::from_millis(1_500)).await;
    let mid = get(&sluice.url("/"), &[]).await;
    let at = started.elapsed();
    assert!(!streaming.is_finished(), "the stream ran shorter than 3 s");
    // At least the first second is charged already: at most ~1000 − 1000
    // + the refill since (≤ 0.9 s of it) remain.
    assert_eq!(mid.status, StatusCode::OK, "{mid:?}");
    assert!(
        remaining(&mid) < 900,
        "nothing charged {at:?} into the stream: {mid:?}"
    );
    let got = streaming.await.unwrap();
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body.len(), 30 * 5);
    let charged = sluice
        .metric(&series("sluice_budget_charged_total", "compute"))
        .await;
    assert!((2_900.0..3_600.0).contains(&charged), "charged {charged}");
}

#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_mid_stream_is_charged_for_the_time_it_used() {
    let (_upstream, sluice) = support::paused::start("", ELAPSED).await;
    let mut stream = open_request(&sluice, "/drip/100/100").await;
    // Read the head and the first chunks, then leave after ~1.5 s.
    let mut buf = [0u8; 1024];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    support::paused::pass(Duration::from_millis(1_500)).await;
    let ticked = sluice
        .metric(&series("sluice_budget_charged_total", "compute"))
        .await;
    drop(stream);
    // sluice sees the client go without time passing: the charge for the
    // time since the last tick lands then.
    let charged = charged_beyond(&sluice, ticked).await;
    // ~1.5 s of upstream time, not the 10 s the stream would have lasted,
    // and not only the whole seconds ticked before the client left.
    assert!((1_500.0..2_500.0).contains(&charged), "charged {charged}");
    assert!(
        charged % 1000.0 != 0.0,
        "only ticks were charged: {charged}"
    );
}

#[tokio::test]
async fn reported_costs_are_charged_and_stripped_and_bad_ones_counted() {
    let (_upstream, sluice) = start(
        r#"
[[rule]]
name = "reported"
key = ["global"]
rate = "1000/h"
charge = "header:x-cost"

[[rule]]
name = "reported-dry-run"
key = ["global"]
rate = "1000/h"
charge = "header:x-cost"
shadow = true
"#,
    )
    .await;
    let got = get(&sluice.url("/cost/250"), &[]).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(
        got.header("x-cost"),
        None,
        "the cost header reached the client"
    );
    // Admission (1) is in the headers; the 250 charged after them.
    assert_eq!(remaining(&got), 999);
    // Reading the balance with `/cost/0`: a missing field would count as an error.
    assert_eq!(remaining(&get(&sluice.url("/cost/0"), &[]).await), 748);
    // A fraction rounds up.
    get(&sluice.url("/cost/12.5"), &[]).await;
    assert_eq!(remaining(&get(&sluice.url("/cost/0"), &[]).await), 733);
    // Malformed or missing: nothing extra charged, counted, never the client's problem.
    for path in [
        "/cost/lots",
        "/cost/-3",
        "/cost/1.2.3",
        "/cost/none",
        "/cost/twice",
    ] {
        let got = get(&sluice.url(path), &[]).await;
        assert_eq!(got.status, StatusCode::OK, "{path}");
        assert_eq!(got.header("x-cost"), None, "{path}");
    }
    assert_eq!(remaining(&get(&sluice.url("/cost/0"), &[]).await), 727);
    assert_eq!(
        sluice
            .metric(&series("sluice_charge_errors_total", "reported"))
            .await,
        5.0
    );
    // A shadow twin is charged like its enforced rule: a faithful dry run.
    for rule in ["reported", "reported-dry-run"] {
        assert_eq!(
            sluice
                .metric(&series("sluice_budget_charged_total", rule))
                .await,
            263.0,
            "{rule}"
        );
    }
}

/// Two requests a minute, refunded on `refund_on`.
fn refunding(refund_on: &str) -> String {
    format!(
        r#"
[[rule]]
name = "refunding"
key = ["global"]
rate = "2/m"
refund_on = {refund_on}
"#
    )
}

#[tokio::test]
async fn a_5xx_gives_the_admission_cost_back_when_listed() {
    let (_upstream, sluice) = start(&refunding(r#"["5xx"]"#)).await;
    for _ in 0..4 {
        let got = get(&sluice.url("/status/503"), &[]).await;
        assert_eq!(got.status, StatusCode::SERVICE_UNAVAILABLE, "{got:?}");
    }
    // 4xx is not a failure of the upstream: kept.
    assert_eq!(
        get(&sluice.url("/status/404"), &[]).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    assert_eq!(
        get(&sluice.url("/status/503"), &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        sluice
            .metric(&series("sluice_budget_refunded_total", "refunding"))
            .await,
        4.0
    );

    // Not listed: a 5xx keeps its cost.
    let (_upstream, sluice) = start(&refunding(r#"["upstream_error"]"#)).await;
    for _ in 0..2 {
        get(&sluice.url("/status/500"), &[]).await;
    }
    assert_eq!(
        get(&sluice.url("/status/500"), &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn an_unreachable_upstream_gives_the_cost_back_when_listed() {
    let refusing = support::Refusing::new();
    let closed = refusing.addr;
    // Statuses are judged by what the client got: sluice's own 502 too.
    for (refund_on, refunded) in [
        (r#"["upstream_error"]"#, true),
        (r#"["5xx"]"#, true),
        (r#"["502"]"#, true),
        (r#"["4xx", "504"]"#, false),
    ] {
        let config = format!(
            "[server]\nupstream = \"http://{closed}\"\n{}",
            refunding(refund_on)
        );
        let sluice = Sluice::start(&config, closed).await;
        let mut statuses = Vec::new();
        for _ in 0..4 {
            statuses.push(get(&sluice.url("/"), &[]).await.status);
        }
        let failed = statuses
            .iter()
            .filter(|s| **s == StatusCode::BAD_GATEWAY)
            .count();
        let given_back = sluice
            .metric(&series("sluice_budget_refunded_total", "refunding"))
            .await;
        if refunded {
            assert_eq!(failed, 4, "{refund_on}: {statuses:?}");
            assert_eq!(given_back, 4.0);
        } else {
            assert_eq!(failed, 2, "{refund_on}: {statuses:?}");
            assert_eq!(given_back, 0.0);
        }
    }
}

async fn get_owned(url: String) -> StatusCode {
    get(&url, &[]).await.status
}

#[tokio::test]
async fn a_client_that_leaves_before_the_response_gets_its_cost_back_when_listed() {
    for (refund_on, refunded) in [(r#"["client_abort"]"#, 1.0), (r#"["5xx"]"#, 0.0)] {
        let (upstream, sluice) = start(&refunding(refund_on)).await;
        let stream = open_request(&sluice, "/slow/1000").await;
        upstream.wait_for(1).await;
        drop(stream);
        // sluice let go of the request (settling it) when it closed the
        // upstream connection the request was on.
        support::eventually(
            Duration::from_secs(5),
            "the upstream exchange was kept",
            || async { upstream.closed.load(std::sync::atomic::Ordering::SeqCst) == 1 },
        )
        .await;
        assert_eq!(
            sluice
                .metric(&series("sluice_budget_refunded_total", "refunding"))
                .await,
            refunded,
            "{refund_on}"
        );
        let left = remaining(&get(&sluice.url("/"), &[]).await);
        assert_eq!(left, if refunded > 0.0 { 1 } else { 0 }, "{refund_on}");
    }
}
