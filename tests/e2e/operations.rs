//! Operations rows (section H of docs/edge-behaviour.md's "Hostile inputs" table) against the real
//! binary, one test per row, named after it: H1 (SIGTERM with requests in
//! flight and held), H2 (readiness turns at once) and H9 (HTTP/2 stream
//! abuse over h2c).

use crate::support;

use std::time::{Duration, Instant};

use support::{write_config, SluiceProcess, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn spawn(server: &str, rest: &str) -> (Upstream, SluiceProcess, tempfile::TempDir) {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{}\"\nworkers = 2\n{server}\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n{rest}",
        upstream.addr
    );
    let sluice = SluiceProcess::spawn(&write_config(dir.path(), &toml));
    (upstream, sluice, dir)
}

/// Sends `request` on a fresh connection and returns everything until the
/// server closes it (or `limit` passes).
async fn exchange_until_close(addr: std::net::SocketAddr, path: &str, limit: Duration) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: a.example\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
        if n == 0 {
            break;
        }
        received.extend_from_slice(&buffer[..n]);
    }
    String::from_utf8_lossy(&received).into_owned()
}

/// Waits until `n` requests have reached `upstream`.
async fn at_upstream(upstream: &Upstream, n: usize) {
    support::eventually(
        Duration::from_secs(5),
        "the requests at the upstream",
        || {
            let count = upstream.count();
            async move { count == n }
        },
    )
    .await;
}

const HELD: &str = r#"
[[rule]]
name = "held"
match = { path_prefix = "/held" }
key = ["global"]
rate = "5/s"
burst = 1
on_limit = "delay"
max_delay = "2s"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_sigterm_serves_in_flight_and_held_requests_with_connection_close_then_exits() {
    let (upstream, mut sluice, _dir) = spawn("shutdown_grace = \"3s\"\n", HELD).await;

    // 20 slow responses in flight, and 8 requests held by a delay rule
    // (released one every 200 ms once a first request spent the burst), all
    // on keep-alive connections.
    let mut first = TcpStream::connect(sluice.addr).await.unwrap();
    first
        .write_all(b"GET /held/first HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut spent = String::new();
    first.read_to_string(&mut spent).await.unwrap();
    assert!(spent.starts_with("HTTP/1.1 200 "), "{spent}");
    let mut requests = Vec::new();
    for _ in 0..20 {
        let addr = sluice.addr;
        requests.push(tokio::spawn(async move {
            exchange_until_close(addr, "/slow/800", Duration::from_secs(5)).await
        }));
    }
    for i in 0..8 {
        let addr = sluice.addr;
        requests.push(tokio::spawn(async move {
            exchange_until_close(addr, &format!("/held/{i}"), Duration::from_secs(5)).await
        }));
    }
    // Every request is in sluice before the signal: the 20 slow ones at the
    // upstream, the 8 held ones held or already released to it.
    support::eventually(Duration::from_secs(5), "the 28 requests in flight", || {
        let seen = upstream.seen();
        let sluice = &sluice;
        async move {
            let at = |prefix: &str| seen.iter().filter(|s| s.target.starts_with(prefix)).count();
            let text = support::get(&sluice.admin_url("/metrics"), &[]).await.body;
            let held = support::metric(&text, r#"sluice_queue_depth{rule="held"}"#).unwrap_or(0.0)
                as usize;
            at("/slow/") == 20 && at("/held/") - 1 + held == 8
        }
    })
    .await;
    sluice.terminate();
    let signalled = Instant::now();

    // Every request started before SIGTERM is served, and told that the
    // connection closes (nginx's http_keepalive_shutdown.t).
    for request in requests {
        let raw = request.await.unwrap();
        assert!(raw.starts_with("HTTP/1.1 200 "), "{raw}");
        assert!(
            raw.to_ascii_lowercase()
                .contains("\r\nconnection: close\r\n"),
            "{raw}"
        );
    }
    assert_eq!(upstream.count(), 29);
    let status = tokio::task::block_in_place(|| sluice.wait_exit(Duration::from_secs(3)))
        .expect("still running after shutdown_grace");
    assert!(status.success(), "{status}");
    assert!(signalled.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_the_drain_has_a_deadline_shutdown_grace() {
    let (upstream, mut sluice, _dir) = spawn("shutdown_grace = \"1s\"\n", "").await;
    let addr = sluice.addr;
    let stuck = tokio::spawn(async move {
        exchange_until_close(addr, "/slow/30000", Duration::from_secs(10)).await
    });
    at_upstream(&upstream, 1).await;

    sluice.terminate();
    let signalled = Instant::now();
    let status = tokio::task::block_in_place(|| sluice.wait_exit(Duration::from_secs(3)))
        .expect("the drain did not stop at shutdown_grace");
    let took = signalled.elapsed();

    // Exit at the deadline (1 s), with generous room for a busy machine.
    assert!(took >= Duration::from_millis(900), "{took:?}");
    assert!(took < Duration::from_millis(2500), "{took:?}");
    assert!(status.success(), "{status}");
    // The request that could not finish is cut off, not answered 200.
    let raw = stuck.await.unwrap();
    assert!(!raw.contains(" 200 "), "{raw}");
}

/// `GET /readyz` on a fresh connection; the status, or `None` when the
/// admin listener is gone.
async fn readyz(admin: std::net::SocketAddr) -> Option<u16> {
    let mut stream = TcpStream::connect(admin).await.ok()?;
    stream
        .write_all(b"GET /readyz HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut received = Vec::new();
    stream.read_to_end(&mut received).await.ok()?;
    String::from_utf8_lossy(&received)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_readyz_turns_503_within_100_ms_of_sigterm() {
    let (upstream, mut sluice, _dir) = spawn("shutdown_grace = \"3s\"\n", "").await;
    assert_eq!(readyz(sluice.admin).await, Some(200));
    // A request in flight keeps the drain (and the admin port) open.
    let addr = sluice.addr;
    let in_flight = tokio::spawn(async move {
        exchange_until_close(addr, "/slow/1000", Duration::from_secs(5)).await
    });
    at_upstream(&upstream, 1).await;

    sluice.terminate();
    let signalled = Instant::now();
    let turned = loop {
        if readyz(sluice.admin).await == Some(503) {
            break signalled.elapsed();
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(1),
            "/readyz still not 503"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };

    assert!(turned <= Duration::from_millis(100), "{turned:?}");
    assert!(in_flight.await.unwrap().starts_with("HTTP/1.1 200 "));
    tokio::task::block_in_place(|| sluice.wait_exit(Duration::from_secs(3))).unwrap();
}

/// An h2c connection (prior knowledge) with the `h2` crate, so the test can
/// do what a client library would not: reset streams as fast as it opens them.
async fn h2c(
    addr: std::net::SocketAddr,
) -> (
    h2::client::SendRequest<bytes::Bytes>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (send, connection) = h2::client::handshake(stream).await.unwrap();
    (send, tokio::spawn(connection))
}

fn h2_get(path: &str) -> http::Request<()> {
    http::Request::get(format!("http://a.example{path}"))
        .body(())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h9_h2c_concurrent_streams_are_capped_at_250() {
    let (upstream, sluice, _dir) = spawn("", "").await;
    let (send, _connection) = h2c(sluice.addr).await;
    // Settings arrive with the first exchange.
    let mut ready = send.clone().ready().await.unwrap();
    let (response, _) = ready.send_request(h2_get("/"), true).unwrap();
    assert_eq!(response.await.unwrap().status(), 200);
    assert_eq!(send.current_max_send_streams(), 250);

    // 600 slow requests on the one connection: the client queues beyond
    // the cap, and every request is served.
    let mut responses = Vec::new();
    for _ in 0..600 {
        let mut ready = send.clone().ready().await.unwrap();
        let (response, _) = ready.send_request(h2_get("/slow/100"), true).unwrap();
        responses.push(tokio::spawn(response));
    }
    for response in responses {
        assert_eq!(response.await.unwrap().unwrap().status(), 200);
    }
    assert_eq!(upstream.count(), 601);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h9_rapid_reset_gets_goaway_with_bounded_memory() {
    let (upstream, sluice, _dir) = spawn("", "").await;
    let rss_before = sluice.memory_kib("VmRSS");
    let (send, connection) = h2c(sluice.addr).await;

    // Open streams and reset each at once, as fast as possible
    // (CVE-2023-44487).
    let mut opened = 0;
    for _ in 0..20_000 {
        let Ok(mut ready) = send.clone().ready().await else {
            break;
        };
        let Ok((_response, mut stream)) = ready.send_request(h2_get("/slow/50"), false) else {
            break;
        };
        stream.send_reset(h2::Reason::CANCEL);
        opened += 1;
    }
    let ended = tokio::time::timeout(Duration::from_secs(5), connection)
        .await
        .expect("sluice kept the resetting connection open")
        .unwrap();

    let error = ended.expect_err("the connection should end in GOAWAY");
    // sluice sends GOAWAY and closes; a client still writing resets may hit
    // the closed socket (broken pipe) before it reads the GOAWAY frame.
    if error.is_go_away() {
        assert_eq!(error.reason(), Some(h2::Reason::ENHANCE_YOUR_CALM));
    } else {
        assert!(
            error.is_io(),
            "neither GOAWAY nor a closed socket: {error:?}"
        );
    }
    assert!(opened < 20_000, "all {opened} streams were accepted");
    assert!(
        upstream.count() < opened,
        "{} of {opened}",
        upstream.count()
    );
    let rss_after = sluice.memory_kib("VmRSS");
    assert!(
        rss_after <= rss_before + 16 * 1024,
        "RSS {rss_before} → {rss_after} KiB"
    );
    // Other clients are unaffected.
    let got = support::get_h2(&sluice.url("/"), &[]).await;
    assert_eq!(got.status, 200);
}
