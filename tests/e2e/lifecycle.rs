//! The real binary's life: health endpoints and metrics from the start,
//! and a graceful shutdown on SIGTERM.

use crate::support;

use std::time::{Duration, Instant};

use http::StatusCode;
use support::{get, metric, write_config, SluiceProcess, Upstream};

/// The real binary in front of `upstream` with two rules.
fn spawn(dir: &std::path::Path, upstream: &Upstream, grace: &str) -> SluiceProcess {
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
upstream = "http://{}"
workers = 2
shutdown_grace = "{grace}"

[admin]
listen = "127.0.0.1:0"

[[rule]]
name = "per-ip"
rate = "100/m"

[[rule]]
name = "search"
match = {{ path_prefix = "/search" }}
key = ["header:x-api-key"]
rate = "5/m"
"#,
        upstream.addr
    );
    SluiceProcess::spawn(&write_config(dir, &toml))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_readiness_answer_200_while_serving() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let sluice = spawn(dir.path(), &upstream, "5s");

    let healthz = get(&sluice.admin_url("/healthz"), &[]).await;
    let readyz = get(&sluice.admin_url("/readyz"), &[]).await;

    assert_eq!(healthz.status, StatusCode::OK);
    assert_eq!(readyz.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_expose_the_minimum_series_and_every_rules_counters_from_the_start() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let sluice = spawn(dir.path(), &upstream, "5s");

    let got = get(&sluice.admin_url("/metrics"), &[]).await;

    assert_eq!(got.status, StatusCode::OK);
    let text = &got.body;
    for (name, kind) in [
        ("sluice_requests_total", "counter"),
        ("sluice_responses_total", "counter"),
        ("sluice_decision_seconds", "histogram"),
        ("sluice_overhead_seconds", "histogram"),
        ("sluice_upstream_seconds", "histogram"),
        ("sluice_upstream_errors_total", "counter"),
        ("sluice_tracked_keys", "gauge"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "no {kind} {name} in:\n{text}"
        );
    }
    for rule in ["per-ip", "search"] {
        for outcome in ["allowed", "limited"] {
            let series = format!("sluice_requests_total{{rule=\"{rule}\",outcome=\"{outcome}\"}}");
            assert_eq!(metric(text, &series), Some(0.0), "{series} in:\n{text}");
        }
        let tracked = format!("sluice_tracked_keys{{rule=\"{rule}\"}}");
        assert_eq!(metric(text, &tracked), Some(0.0), "{tracked} in:\n{text}");
    }
    for kind in ["connect", "timeout", "other", "tls"] {
        let series =
            format!("sluice_upstream_errors_total{{upstream=\"default\",kind=\"{kind}\"}}");
        assert_eq!(metric(text, &series), Some(0.0), "{series} in:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_idle_kept_alive_connections_at_once() {
    use tokio::io::AsyncReadExt;
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    // A long grace: only closing the idle connections lets sluice exit soon.
    let grace = Duration::from_secs(30);
    let mut sluice = spawn(dir.path(), &upstream, "30s");
    // Several kept-alive connections, each answered twice and then idle (a
    // connection waits for the drain between requests).
    let mut idle = Vec::new();
    for _ in 0..4 {
        let mut conn = tokio::net::TcpStream::connect(sluice.addr).await.unwrap();
        for _ in 0..2 {
            let head = support::exchange(&mut conn).await;
            assert!(head.starts_with("http/1.1 200"), "{head}");
        }
        idle.push(conn);
    }

    sluice.terminate();
    let signalled = Instant::now();
    for mut conn in idle {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut rest)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "an idle connection stayed open after SIGTERM: {read:?} {rest:?}"
        );
    }
    let status = tokio::task::block_in_place(|| sluice.wait_exit(Duration::from_secs(10)));
    let status = status.unwrap_or_else(|| panic!("still running 10 s after SIGTERM"));
    assert!(status.success(), "exit status {status}");
    assert!(signalled.elapsed() < grace);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_in_flight_requests_refuses_new_ones_and_exits_zero() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let grace = Duration::from_secs(5);
    let mut sluice = spawn(dir.path(), &upstream, "5s");
    assert_eq!(
        get(&sluice.admin_url("/readyz"), &[]).await.status,
        StatusCode::OK
    );
    let slow = sluice.url("/slow/1500");
    let in_flight = tokio::spawn(async move { get(&slow, &[]).await });
    upstream.wait_for(1).await;

    sluice.terminate();
    let signalled = Instant::now();

    // The listener closes promptly; a connect racing the close may still land.
    let mut refused = false;
    while signalled.elapsed() < Duration::from_secs(1) {
        if tokio::net::TcpStream::connect(sluice.addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "new connections are still accepted after SIGTERM");
    let readyz = get(&sluice.admin_url("/readyz"), &[]).await;
    assert_eq!(
        readyz.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "draining is not ready"
    );
    assert_eq!(
        readyz.header("content-type"),
        Some("application/problem+json")
    );

    let finished = in_flight.await.unwrap();
    assert_eq!(finished.status, StatusCode::OK);
    assert_eq!(finished.body, "slow ok");

    let status = tokio::task::block_in_place(|| sluice.wait_exit(grace));
    let status = status.unwrap_or_else(|| panic!("still running {grace:?} after SIGTERM"));
    assert!(status.success(), "exit status {status}");
    assert!(signalled.elapsed() < grace);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_a_thousand_connections_is_accepted_without_syn_retries() {
    let upstream = Upstream::start().await;
    let sluice = support::Sluice::start(
        "[server]\nupstream = \"http://{upstream}\"\n",
        upstream.addr,
    )
    .await;

    // All at once: with the common listen backlog of 128 the kernel drops
    // the overflow and those clients retry after a second.
    let started = Instant::now();
    let connects: Vec<_> = (0..1000)
        .map(|_| tokio::spawn(tokio::net::TcpStream::connect(sluice.addr)))
        .collect();
    let mut streams = Vec::new();
    for connect in connects {
        streams.push(connect.await.unwrap().expect("connect"));
    }
    let took = started.elapsed();

    assert!(
        took < Duration::from_millis(900),
        "1000 connections took {took:?}: SYNs were dropped"
    );
    let got = get(&sluice.url("/"), &[]).await;
    assert_eq!(got.status, StatusCode::OK);
}
