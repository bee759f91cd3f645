//! Hostile inputs from docs/edge-behaviour.md's "Hostile inputs" table, sent as raw bytes (never
//! through a normalising HTTP library), one test per catalogue row, named
//! after it. This file grows with the edge-hardening work; today it holds
//! B1 (slowloris on headers), B5 (header bombs), B6 (Expect: 100-continue over the limit), B7 (connections beyond
//! `max_connections`), C3 (Host abuse), and a body left unread by a 429
//! never being parsed as a next request.

use crate::support;
use crate::wire;

use std::time::Duration;

use support::start;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `request` as is on a fresh connection and returns everything
/// sluice answered ([`wire::exchange`]).
async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
    wire::exchange(addr, request).await.text()
}

/// The status code of the first response in `raw`.
fn status(raw: &str) -> u16 {
    raw.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {raw:?}"))
}

const PER_HOST: &str = r#"
[[rule]]
name = "b-only"
match = { host = "b.example" }
key = ["global"]
rate = "1/m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c3_missing_repeated_or_invalid_host_is_400_and_never_forwarded() {
    let (upstream, sluice) = start(PER_HOST).await;
    let cases: [(&str, &[u8]); 5] = [
        ("no Host", b"GET / HTTP/1.1\r\n\r\n"),
        (
            "two Host lines",
            b"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n",
        ),
        (
            "a list of hosts",
            b"GET / HTTP/1.1\r\nHost: a.example, b.example\r\n\r\n",
        ),
        (
            "user info",
            b"GET / HTTP/1.1\r\nHost: user@a.example\r\n\r\n",
        ),
        (
            "a port that is not a number",
            b"GET / HTTP/1.1\r\nHost: a.example:http\r\n\r\n",
        ),
    ];
    for (what, request) in cases {
        let raw = exchange(sluice.addr, request).await;
        assert_eq!(status(&raw), 400, "{what}: {raw}");
        assert!(
            raw.to_ascii_lowercase()
                .contains("content-type: application/problem+json"),
            "{what}: {raw}"
        );
    }
    assert_eq!(
        upstream.count(),
        0,
        "a bad Host must never reach the upstream"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c3_http_1_0_may_omit_host() {
    let (upstream, sluice) = start(PER_HOST).await;

    let raw = exchange(sluice.addr, b"GET / HTTP/1.0\r\n\r\n").await;

    assert_eq!(status(&raw), 200, "{raw}");
    assert_eq!(upstream.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c3_absolute_form_authority_wins_over_host_for_limits_and_forwarding() {
    let (upstream, sluice) = start(PER_HOST).await;
    let to_b = b"GET http://b.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n";

    // The target says b.example: the b-only rule applies (1 per minute),
    // whatever Host claims.
    assert_eq!(status(&exchange(sluice.addr, to_b).await), 200);
    assert_eq!(status(&exchange(sluice.addr, to_b).await), 429);
    // A plain request for a.example is not limited by it.
    let to_a = b"GET /x HTTP/1.1\r\nHost: a.example\r\n\r\n";
    assert_eq!(status(&exchange(sluice.addr, to_a).await), 200);

    // The upstream is told the host that was limited.
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].headers["host"], "b.example");
    assert_eq!(seen[0].target, "/x");
    assert_eq!(seen[1].headers["host"], "a.example");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c3_a_valid_host_with_a_port_is_accepted() {
    let (_upstream, sluice) = start("").await;

    let raw = exchange(
        sluice.addr,
        b"GET / HTTP/1.1\r\nHost: a.example:8080\r\n\r\n",
    )
    .await;

    assert_eq!(status(&raw), 200, "{raw}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b7_a_connection_beyond_max_connections_gets_503_and_is_closed() {
    let (_upstream, sluice) = start("max_connections = 2\n").await;
    let request = b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n";

    // Two kept-alive connections take both places.
    let mut kept = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut buffer = [0u8; 1024];
        let n = stream.read(&mut buffer).await.unwrap();
        assert_eq!(status(&String::from_utf8_lossy(&buffer[..n])), 200);
        kept.push(stream);
    }

    // A third is answered at once and closed, not left waiting.
    let started = std::time::Instant::now();
    let raw = exchange(sluice.addr, request).await;
    assert_eq!(status(&raw), 503, "{raw}");
    assert!(raw.contains("application/problem+json"), "{raw}");
    assert!(
        raw.to_ascii_lowercase().contains("connection: close"),
        "{raw}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "the refused connection was not closed at once"
    );

    // When one of the two leaves, a newcomer is served again.
    drop(kept.pop());
    support::eventually(Duration::from_secs(5), "no newcomer served", || async {
        status(&exchange(sluice.addr, request).await) == 200
    })
    .await;
}

const ONE_PER_MINUTE: &str = r#"
[[rule]]
name = "tight"
key = ["global"]
rate = "1/m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b6_expect_continue_over_the_limit_gets_429_without_100_continue() {
    let (upstream, sluice) = start(ONE_PER_MINUTE).await;
    assert_eq!(
        status(&exchange(sluice.addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await),
        200
    );

    let started = std::time::Instant::now();
    let raw = exchange(
        sluice.addr,
        b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000000\r\nExpect: 100-continue\r\n\r\n",
    )
    .await;

    assert_eq!(status(&raw), 429, "{raw}");
    assert!(!raw.contains("100 Continue"), "{raw}");
    assert!(
        started.elapsed() < Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(upstream.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_left_unread_by_a_429_is_never_parsed_as_a_next_request() {
    let (upstream, sluice) = start(ONE_PER_MINUTE).await;
    assert_eq!(
        status(&exchange(sluice.addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await),
        200
    );

    // The body of a request sluice refuses without reading it looks like a
    // request of its own.
    let hidden = b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    let mut request = format!(
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
        hidden.len()
    )
    .into_bytes();
    request.extend_from_slice(hidden);
    let raw = exchange(sluice.addr, &request).await;

    assert_eq!(status(&raw), 429, "{raw}");
    assert_eq!(
        raw.matches("HTTP/1.1 ").count(),
        1,
        "exactly one response: {raw}"
    );
    assert!(
        upstream
            .seen()
            .iter()
            .all(|seen| seen.target != "/smuggled"),
        "the body reached the upstream as a request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b1_slowloris_connections_are_closed_at_the_header_timeout() {
    let (_upstream, sluice) = start("header_read_timeout = \"1s\"\n").await;
    let request = b"GET / HTTP/1.1\r\nHost: a.example\r\nX-Slow: ";

    // 50 clients that send one byte of their head every 100 ms, forever.
    let started = std::time::Instant::now();
    let mut clients = Vec::new();
    for _ in 0..50 {
        let addr = sluice.addr;
        clients.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let mut sent = 0;
            loop {
                let byte = request.get(sent).copied().unwrap_or(b'x');
                if stream.write_all(&[byte]).await.is_err() {
                    break;
                }
                sent += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
                // A closed connection shows as EOF on read.
                let mut buffer = [0u8; 256];
                if let Ok(Ok(0)) =
                    tokio::time::timeout(Duration::from_millis(1), stream.read(&mut buffer)).await
                {
                    break;
                }
            }
            started.elapsed()
        }));
    }
    let mut longest = Duration::ZERO;
    for client in clients {
        let lived = tokio::time::timeout(Duration::from_secs(5), client)
            .await
            .expect("a slowloris connection outlived the header timeout by far")
            .unwrap();
        longest = longest.max(lived);
    }

    // Row B1: no connection lives longer than the timeout + 1 s.
    assert!(
        longest <= Duration::from_secs(2),
        "longest connection {longest:?}"
    );
    let raw = exchange(sluice.addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(status(&raw), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b5_header_bombs_get_431_and_never_reach_the_upstream() {
    let (upstream, sluice) = start("").await;
    // Defaults: at most 100 header lines, a 32 KiB head.
    let many: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let huge = format!("X-Big: {}\r\n", "a".repeat(100 * 1024));
    for (what, headers) in [("200 headers", many), ("one 100 KiB header", huge)] {
        let request = format!("GET / HTTP/1.1\r\nHost: a\r\n{headers}\r\n");
        let raw = exchange(sluice.addr, request.as_bytes()).await;
        assert_eq!(status(&raw), 431, "{what}: {raw}");
    }
    assert_eq!(upstream.count(), 0);
    let raw = exchange(sluice.addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(status(&raw), 200);
}
