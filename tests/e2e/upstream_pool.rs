//! sluice keeps its connections to the upstream alive and reuses them, but
//! only ever for one exchange at a time and only after the previous response
//! ended: closed, aborted or busy connections are never handed a request.

use crate::support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use http::StatusCode;
use support::{get, Sluice, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONFIG: &str = r#"
[server]
upstream = "http://{upstream}"

[[rule]]
name = "per-ip"
rate = "1000/s"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_requests_reuse_one_upstream_connection() {
    let upstream = Upstream::start().await;
    let sluice = Sluice::start(CONFIG, upstream.addr).await;
    for _ in 0..20 {
        let got = get(&sluice.url("/"), &[]).await;
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(got.body, "ok");
    }
    assert_eq!(upstream.count(), 20);
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_closes_each_connection_is_served_on_fresh_ones() {
    let upstream = Upstream::start().await;
    let sluice = Sluice::start(CONFIG, upstream.addr).await;
    for _ in 0..10 {
        let got = get(&sluice.url("/close"), &[]).await;
        assert_eq!(got.status, StatusCode::OK, "{got:?}");
        assert_eq!(got.body, "closing");
    }
    assert_eq!(upstream.count(), 10);
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_download_does_not_leave_a_broken_connection_in_the_pool() {
    let upstream = Upstream::start().await;
    let sluice = Sluice::start(CONFIG, upstream.addr).await;
    let mut client = TcpStream::connect(sluice.addr).await.unwrap();
    client
        .write_all(b"GET /download/52428800 HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut read = 0;
    while read < 200_000 {
        let n = client.read(&mut buffer).await.unwrap();
        assert!(n > 0, "sluice closed the download early");
        read += n;
    }
    drop(client);
    // Every later request gets a clean, complete answer of its own.
    for _ in 0..5 {
        let got = get(&sluice.url("/"), &[]).await;
        assert_eq!(got.status, StatusCode::OK);
        assert_eq!(got.body, "ok");
    }
    // The aborted exchange's connection was not reused.
    assert!(upstream.connections.load(Ordering::SeqCst) >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_exchange_does_not_hold_up_other_requests() {
    let upstream = Upstream::start().await;
    let sluice = Sluice::start(CONFIG, upstream.addr).await;
    // Warm the pool with one connection, then occupy it with a slow request.
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    let slow_url = sluice.url("/slow/1500");
    let slow = tokio::spawn(async move { get(&slow_url, &[]).await });
    upstream.wait_for(2).await;
    let started = Instant::now();
    let fast = get(&sluice.url("/"), &[]).await;
    assert_eq!(fast.status, StatusCode::OK);
    assert!(
        started.elapsed() < Duration::from_millis(800),
        "a quick request waited {:?} behind a slow one",
        started.elapsed()
    );
    assert_eq!(slow.await.unwrap().status, StatusCode::OK);
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 2);
}
