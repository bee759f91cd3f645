//! sluice keeps its connections to the upstream alive and reuses them, but
//! only ever for one exchange at a time and only after the previous response
//! ended: closed, aborted or busy connections are never handed a request.
//! An HTTP/2 server's one connection is dialed once, however many requests
//! want it first (docs/upstreams.md, "HTTP/2 and gRPC").

use crate::support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::join_all;
use http::{Request, StatusCode};
use http_body_util::Empty;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
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

/// An `h2c` pool whose connections wait `connect_timeout` at most.
const H2C: &str = r#"
[server]
upstream = "h2"
connect_timeout = "5s"

[[upstream]]
name = "h2"
protocol = "h2c"
servers = ["http://{upstream}"]
"#;

/// The statuses of `n` requests sent at once to `sluice` as streams of one
/// HTTP/2 connection: they leave in one write, so they reach sluice
/// together.
async fn at_once(sluice: &Sluice, n: usize) -> Vec<StatusCode> {
    let stream = TcpStream::connect(sluice.addr).await.unwrap();
    let (mut sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .unwrap();
    let request = || Request::get(sluice.url("/")).body(Empty::<Bytes>::new());
    let sent: Vec<_> = (0..n)
        .map(|_| sender.send_request(request().unwrap()))
        .collect();
    // Queued before the connection runs, so none leaves ahead of the rest.
    tokio::spawn(connection);
    let answers = join_all(sent).await;
    let statuses = answers.into_iter().map(|answer| answer.unwrap().status());
    statuses.collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_requests_to_an_h2c_server_share_one_dial() {
    // Several rounds, each a new sluice: in any one of them the first
    // request's dial may happen to end before the others ask for it.
    for round in 0..5 {
        let (addr, accepted) = support::h2c_upstream_counting(|_| "ok".to_owned()).await;
        let sluice = Sluice::start(H2C, addr).await;
        let statuses = at_once(&sluice, 20).await;
        assert_eq!(statuses, vec![StatusCode::OK; 20], "round {round}");
        let accepted = accepted.load(Ordering::SeqCst);
        assert_eq!(accepted, 1, "connections accepted in round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_h2c_dial_answers_every_waiting_request_at_once() {
    let refusing = support::Refusing::new();
    let sluice = Sluice::start(H2C, refusing.addr).await;
    let started = Instant::now();
    let statuses = at_once(&sluice, 20).await;
    assert_eq!(statuses, vec![StatusCode::BAD_GATEWAY; 20]);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "answered after {:?}",
        started.elapsed()
    );
}
