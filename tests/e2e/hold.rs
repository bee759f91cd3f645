//! Holding instead of rejecting, over real HTTP: delay mode (rate, FIFO,
//! `max_delay`, `max_queue`, clients leaving while held), the leaky bucket,
//! concurrency permits (returned after completion, client aborts and
//! upstream failures), and shadow rules that never hold. Real time with
//! generous tolerances.

use crate::support;

use std::time::Duration;

use http::StatusCode;
use support::{assert_problem, get, Got, Sluice, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Sends `n` requests to `path`, started `gap` apart, each carrying
/// `x-seq: <index>`; their answers and how long each took, in send order.
async fn fire(sluice: &Sluice, path: &str, n: usize, gap: Duration) -> Vec<(Got, Duration)> {
    let mut tasks = Vec::new();
    for index in 0..n {
        let url = sluice.url(path);
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            let got = get(&url, &[("x-seq", &index.to_string())]).await;
            (got, sent.elapsed())
        }));
        tokio::time::sleep(gap).await;
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

fn statuses(answers: &[(Got, Duration)]) -> Vec<u16> {
    answers.iter().map(|(got, _)| got.status.as_u16()).collect()
}

fn delay_ms(got: &Got) -> Option<u64> {
    got.header("x-sluice-delay-ms").map(|v| v.parse().unwrap())
}

/// The `x-seq` of each request the upstream received, in arrival order, and
/// the gaps between consecutive arrivals.
fn arrivals(upstream: &Upstream) -> (Vec<usize>, Vec<Duration>) {
    let seen = upstream.seen();
    let order = seen
        .iter()
        .map(|s| s.headers["x-seq"].to_str().unwrap().parse().unwrap())
        .collect();
    let gaps = seen.windows(2).map(|w| w[1].at - w[0].at).collect();
    (order, gaps)
}

#[tokio::test(start_paused = true)]
async fn a_burst_into_a_delay_rule_is_admitted_at_the_configured_rate_in_arrival_order() {
    let (upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "paced"
rate = "10/s"
burst = 1
on_limit = "delay"
max_delay = "5s"
"#,
    )
    .await;

    // 25 ms apart: far enough that the requests reach sluice in send order
    // even on a busy machine, close enough that all but the first wait.
    let answers = fire(&sluice, "/", 6, Duration::from_millis(25)).await;

    assert_eq!(statuses(&answers), [200; 6]);
    let (order, gaps) = arrivals(&upstream);
    assert_eq!(
        order,
        [0, 1, 2, 3, 4, 5],
        "held requests pass in arrival order"
    );
    // One every 100 ms: never two close together (timers may fire late,
    // never early, so a gap shrinks only by the previous one's lateness),
    // and no long stall.
    for gap in &gaps {
        assert!(*gap >= Duration::from_millis(50), "gaps {gaps:?}");
    }
    let span: Duration = gaps.iter().sum();
    assert!(
        span >= Duration::from_millis(450) && span <= Duration::from_millis(900),
        "five intervals of 100 ms took {span:?}"
    );
    // The first passed at once; the others say how long they were held:
    // sent at 25 ms × i, passing at 100 ms × i.
    assert_eq!(delay_ms(&answers[0].0), None);
    for (index, (got, _)) in answers.iter().enumerate().skip(1) {
        let held = delay_ms(got).expect("held responses carry X-Sluice-Delay-Ms");
        let expected = index as u64 * 75;
        assert!(
            held >= expected.saturating_sub(40) && held <= expected + 300,
            "request {index} held {held} ms"
        );
    }
    // The latency sluice adds to these requests excludes the hold (≈ 1.5 s
    // in all).
    let overhead = sluice.metric("sluice_overhead_seconds_sum").await;
    assert!(overhead < 0.3, "overhead {overhead} s includes the hold");
    let held_sum = sluice
        .metric(r#"sluice_delay_seconds_sum{rule="paced"}"#)
        .await;
    assert!(held_sum > 1.0, "delay histogram sum {held_sum}");
    assert_eq!(
        sluice.metric(r#"sluice_queue_depth{rule="paced"}"#).await,
        0.0
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_that_would_wait_longer_than_max_delay_is_refused_at_once() {
    let (upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "paced"
rate = "1/s"
burst = 1
on_limit = "delay"
max_delay = "1500ms"
"#,
    )
    .await;

    let answers = fire(&sluice, "/", 3, Duration::from_millis(50)).await;

    assert_eq!(statuses(&answers), [200, 200, 429]);
    // The second waits about a second; the third would need two and is told
    // so at once, not after holding it.
    assert!(
        answers[1].1 >= Duration::from_millis(800),
        "{:?}",
        answers[1].1
    );
    assert!(
        answers[2].1 < Duration::from_millis(400),
        "{:?}",
        answers[2].1
    );
    let body = assert_problem(&answers[2].0, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["rule"], "paced");
    assert!(answers[2].0.header("retry-after").is_some());
    assert_eq!(upstream.count(), 2);
}

#[tokio::test(start_paused = true)]
async fn beyond_max_queue_held_requests_the_next_is_refused_at_once() {
    let (_upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "paced"
rate = "5/s"
burst = 1
on_limit = "delay"
max_queue = 2
"#,
    )
    .await;

    let answers = fire(&sluice, "/", 4, Duration::from_millis(40)).await;

    // One passes, two wait (until 200 and 400 ms), the fourth (at 120 ms)
    // finds the queue full.
    assert_eq!(statuses(&answers), [200, 200, 200, 429]);
    assert!(
        answers[3].1 < Duration::from_millis(150),
        "{:?}",
        answers[3].1
    );
    assert!(
        answers[2].1 >= Duration::from_millis(300),
        "{:?}",
        answers[2].1
    );
}

// Paused time: the leaver is held, then leaves, at instants the test
// picks, and the next request's wait is exact.
#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_while_held_gives_its_reservation_back() {
    let (upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "paced"
rate = "1/2s"
burst = 1
on_limit = "delay"
max_delay = "10s"
"#,
    )
    .await;
    let depth = r#"sluice_queue_depth{rule="paced"}"#;

    let first = get(&sluice.url("/"), &[("x-seq", "0")]).await;
    assert_eq!(first.status, StatusCode::OK);
    let started = tokio::time::Instant::now();
    let mut leaver = TcpStream::connect(sluice.addr).await.unwrap();
    leaver
        .write_all(b"GET /abandoned HTTP/1.1\r\nhost: test\r\nx-seq: 99\r\n\r\n")
        .await
        .unwrap();
    support::paused::until_metric(&sluice, depth, 1.0).await;
    // Held for its slot at 2 s; it leaves 300 ms in.
    tokio::time::advance(Duration::from_millis(300)).await;
    drop(leaver);
    support::paused::until_metric(&sluice, depth, 0.0).await;

    // The leaver's slot (2 s after the first request) is free again: the
    // next request takes it, instead of queueing behind it until 4 s.
    let next = get(&sluice.url("/"), &[("x-seq", "1")]).await;
    assert_eq!(next.status, StatusCode::OK);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(2),
        "the leaver's budget was not given back"
    );
    let (order, _) = arrivals(&upstream);
    assert_eq!(order, [0, 1], "the leaver never reached the upstream");
    // The first passed at once; the next was held for the leaver's slot.
    let allowed = r#"sluice_requests_total{rule="paced",outcome="allowed"}"#;
    assert_eq!(sluice.metric(allowed).await, 1.0);
    let delayed = r#"sluice_requests_total{rule="paced",outcome="delayed"}"#;
    assert_eq!(sluice.metric(delayed).await, 1.0);
}

#[tokio::test(start_paused = true)]
async fn a_leaky_bucket_lets_requests_leave_at_its_rate_and_up_to_burst_wait() {
    let (upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "leaky"
algorithm = "leaky_bucket"
rate = "10/s"
burst = 3
"#,
    )
    .await;

    let answers = fire(&sluice, "/", 6, Duration::from_millis(5)).await;

    // One leaves at once, three wait their turn, the rest find it full.
    assert_eq!(statuses(&answers), [200, 200, 200, 200, 429, 429]);
    assert!(
        answers[5].1 < Duration::from_millis(150),
        "{:?}",
        answers[5].1
    );
    let (order, gaps) = arrivals(&upstream);
    assert_eq!(order, [0, 1, 2, 3]);
    for gap in &gaps {
        assert!(*gap >= Duration::from_millis(70), "gaps {gaps:?}");
    }
    assert_eq!(answers[4].0.header("x-ratelimit-limit"), Some("3"));
}

#[tokio::test(start_paused = true)]
async fn concurrency_admits_max_in_flight_and_refuses_the_rest_with_retry_after_one() {
    let (_upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "render"
algorithm = "concurrency"
max_in_flight = 2
"#,
    )
    .await;

    let answers = fire(&sluice, "/slow/400", 3, Duration::from_millis(50)).await;

    assert_eq!(statuses(&answers), [200, 200, 429]);
    let refused = &answers[2].0;
    let body = assert_problem(refused, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["limit"], 2);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some(r#""render";q=2;qu="concurrent-requests""#)
    );
    // Every permit came back: two more fit at once.
    assert_eq!(
        sluice.metric(r#"sluice_tracked_keys{rule="render"}"#).await,
        0.0
    );
    let again = fire(&sluice, "/slow/100", 2, Duration::from_millis(5)).await;
    assert_eq!(statuses(&again), [200, 200]);
}

#[tokio::test(start_paused = true)]
async fn concurrency_in_delay_mode_serves_one_at_a_time_in_arrival_order() {
    let (upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "serial"
algorithm = "concurrency"
max_in_flight = 1
on_limit = "delay"
max_delay = "5s"
"#,
    )
    .await;

    let answers = fire(&sluice, "/slow/300", 3, Duration::from_millis(40)).await;

    assert_eq!(statuses(&answers), [200, 200, 200]);
    let (order, gaps) = arrivals(&upstream);
    assert_eq!(order, [0, 1, 2]);
    for gap in &gaps {
        assert!(*gap >= Duration::from_millis(250), "gaps {gaps:?}");
    }
    assert!(delay_ms(&answers[2].0).unwrap() >= 400);
    assert_eq!(
        sluice.metric(r#"sluice_queue_depth{rule="serial"}"#).await,
        0.0
    );
}

/// Reads a few bytes of a large download as caller `id`, then hangs up.
async fn abort_mid_body(addr: std::net::SocketAddr, id: usize) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET /download/50000000 HTTP/1.1\r\nhost: test\r\nx-id: {id}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buffer = [0u8; 4096];
    let _ = stream.read(&mut buffer).await;
}

#[tokio::test(start_paused = true)]
async fn permits_never_leak_through_aborts_and_upstream_failures() {
    let upstream = Upstream::start().await;
    let config = r#"
[server]
upstream = "http://{upstream}"
upstream_timeout = "150ms"

[[rule]]
name = "capped"
algorithm = "concurrency"
max_in_flight = 4
key = ["header:x-id"]
"#;
    let sluice = support::paused::on_clock(config, upstream.addr).await;
    let tracked = r#"sluice_tracked_keys{rule="capped"}"#;

    // 1000 exchanges that end badly, 50 at a time, each caller its own key:
    // clients leaving mid-body, and an upstream too slow to answer within
    // upstream_timeout (504).
    for batch in 0..10 {
        let mut tasks = Vec::new();
        for i in 0..50 {
            let id = batch * 100 + i;
            let addr = sluice.addr;
            tasks.push(tokio::spawn(abort_mid_body(addr, id)));
            // Far beyond upstream_timeout, so a timer that fires late on a busy
            // machine still sees the timeout first.
            let url = sluice.url("/slow/2000");
            tasks.push(tokio::spawn(async move {
                let got = get(&url, &[("x-id", &(id + 50).to_string())]).await;
                assert_eq!(got.status, StatusCode::GATEWAY_TIMEOUT);
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    }
    // Aborted downloads release their permits as their tasks wind down.
    support::paused::until_metric(&sluice, tracked, 0.0).await;
    // And one caller's four permits are all there.
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let url = sluice.url("/slow/100");
        tasks.push(tokio::spawn(async move {
            get(&url, &[("x-id", "7")]).await.status.as_u16()
        }));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut codes = Vec::new();
    for task in tasks {
        codes.push(task.await.unwrap());
    }
    assert_eq!(codes, [200, 200, 200, 200, 429]);
}

#[tokio::test(start_paused = true)]
async fn shadow_rules_never_hold_and_report_what_they_would_have_done() {
    let (upstream, sluice) = support::paused::start(
        "",
        r#"
[[rule]]
name = "trial"
rate = "1/s"
burst = 1
on_limit = "delay"
shadow = true
"#,
    )
    .await;

    let answers = fire(&sluice, "/", 3, Duration::from_millis(50)).await;

    assert_eq!(statuses(&answers), [200, 200, 200]);
    assert_eq!(upstream.count(), 3);
    for (got, took) in &answers {
        assert_eq!(delay_ms(got), None);
        assert!(*took < Duration::from_millis(500), "{took:?}");
    }
    assert_eq!(answers[1].0.header("x-sluice-would-limit"), Some("trial"));
    let shadow_limited = r#"sluice_requests_total{rule="trial",outcome="shadow_limited"}"#;
    assert_eq!(sluice.metric(shadow_limited).await, 2.0);
}

#[tokio::test(start_paused = true)]
async fn requests_held_together_by_one_rule_still_pass_another_at_its_rate() {
    let (upstream, sluice) = support::paused::start(
        "",
        r#"
# One outlet for /a: ten a second, one at a time.
[[rule]]
name = "outlet"
match = { path_prefix = "/a" }
rate = "10/s"
burst = 1
on_limit = "delay"

# Each caller: one a second.
[[rule]]
name = "per-caller"
key = ["header:x-b"]
rate = "1/s"
burst = 1
on_limit = "delay"
"#,
    )
    .await;

    // Five callers each spend their unit elsewhere, all within a few ms, so
    // the per-caller rule will hold their next requests until about the
    // same instant, one second from now.
    for caller in 0..5 {
        let got = get(&sluice.url("/b"), &[("x-b", &caller.to_string())]).await;
        assert_eq!(got.status, StatusCode::OK);
    }
    let mut tasks = Vec::new();
    for caller in 0..5 {
        let url = sluice.url("/a");
        tasks.push(tokio::spawn(async move {
            get(&url, &[("x-b", &caller.to_string())]).await
        }));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for task in tasks {
        assert_eq!(task.await.unwrap().status, StatusCode::OK);
    }

    // The outlet counted each request when it actually passed: they leave
    // it 100 ms apart, not in a bunch when the per-caller holds end.
    let passed: Vec<Instant> = upstream
        .seen()
        .iter()
        .filter(|seen| seen.target == "/a")
        .map(|seen| seen.at)
        .collect();
    assert_eq!(passed.len(), 5);
    let gaps: Vec<Duration> = passed.windows(2).map(|w| w[1] - w[0]).collect();
    for gap in &gaps {
        assert!(*gap >= Duration::from_millis(50), "gaps {gaps:?}");
    }
}
