//! Cheap refusals come first (docs/operations.md): a client on the `deny`
//! list, or whose key is banned, is answered as soon as its head arrives,
//! over a raw socket, even though a rule would read its body: no
//! `100 Continue`, no body read, nothing forwarded.

use std::time::Duration;

use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{post_json, Sluice, Upstream};

/// A rule keyed on an API key (no body) and one keyed on the body, both on
/// `/api`, with a 16 MiB bound on the body read for keys; `more` after.
fn config(more: &str) -> String {
    format!(
        "[server]\nupstream = \"http://{{upstream}}\"\nmax_key_body_bytes = 16777216\n{more}\n\
         [[rule]]\nname = \"per-key\"\nmatch = {{ path_prefix = \"/api\" }}\n\
         key = [\"header:x-api-key\"]\nrate = \"1000/s\"\n\
         [[rule]]\nname = \"per-tenant\"\nmatch = {{ path_prefix = \"/api\" }}\n\
         key = [\"body:/tenant\"]\nrate = \"1000/s\"\n"
    )
}

/// The head of a JSON POST with `key` announcing `length` bytes of body,
/// and `more` fields.
fn post_head(key: &str, length: usize, more: &str) -> String {
    format!(
        "POST /api/jobs HTTP/1.1\r\nhost: example.test\r\nx-api-key: {key}\r\n\
         content-type: application/json\r\ncontent-length: {length}\r\n{more}\r\n"
    )
}

/// Sends the head of a 10 MB JSON POST that waits for `100 Continue`, and
/// no body; what sluice answered first, within three seconds.
async fn head_only(sluice: &Sluice, key: &str) -> String {
    let mut socket = TcpStream::connect(sluice.addr).await.unwrap();
    let head = post_head(key, 10_000_000, "expect: 100-continue\r\n");
    socket.write_all(head.as_bytes()).await.unwrap();
    answer(&mut socket).await
}

/// sluice before `upstream`, with the key `k-banned` banned for an hour on
/// the `per-key` rule through the admin API.
async fn with_k_banned(upstream: &Upstream) -> Sluice {
    let sluice = Sluice::start(&config(""), upstream.addr).await;
    let ban = r#"{"rule":"per-key","key":"k-banned","for":"1h"}"#;
    let url = format!("http://{}/admin/bans", sluice.admin);
    assert_eq!(post_json(&url, ban, &[]).await.status, StatusCode::CREATED);
    sluice
}

/// The client takes `pause` to send its body after its head: the behaviour
/// under test (a refused head is answered before the body comes).
async fn client_pauses(pause: Duration) {
    tokio::time::sleep(pause).await;
}

#[tokio::test]
async fn a_banned_key_is_refused_on_its_head_before_any_body_is_read() {
    let upstream = Upstream::start().await;
    let sluice = with_k_banned(&upstream).await;

    let answer = head_only(&sluice, "k-banned").await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    // The body was never asked for: the connection cannot be reused.
    assert!(
        answer.to_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert_eq!(upstream.count(), 0);
    let banned = r#"sluice_banned_requests_total{rule="per-key"}"#;
    assert_eq!(sluice.metric(banned).await, 1.0);
    let limited = r#"sluice_requests_total{rule="per-key",outcome="limited"}"#;
    assert_eq!(sluice.metric(limited).await, 1.0);

    // A key that is not banned is told to send its body, which is read.
    let answer = head_only(&sluice, "k-fine").await;
    assert!(answer.starts_with("HTTP/1.1 100 Continue"), "{answer}");
}

#[tokio::test]
async fn a_denied_client_is_refused_on_its_head_before_any_body_is_read() {
    let upstream = Upstream::start().await;
    let sluice = Sluice::start(&config("[access]\ndeny = [\"127.0.0.0/8\"]"), upstream.addr).await;
    let answer = head_only(&sluice, "k-any").await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    assert_eq!(upstream.count(), 0);
    let denied = r#"sluice_requests_total{rule="per-tenant",outcome="denied"}"#;
    assert_eq!(sluice.metric(denied).await, 1.0);
}

/// Reads one answer's head and its `content-length` body from `socket`.
async fn answer(socket: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buffer = [0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            let text = String::from_utf8_lossy(&got).to_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length: "))
                    .map_or(0, |n| n.trim().parse::<usize>().unwrap());
                if got.len() >= end + 4 + length {
                    return;
                }
            }
            let n = socket.read(&mut buffer).await.unwrap();
            assert_ne!(
                n,
                0,
                "closed before a whole answer: {}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buffer[..n]);
        }
    });
    read.await.expect("an answer within 3 s");
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn a_refused_clients_small_body_is_discarded_and_its_connection_kept() {
    let upstream = Upstream::start().await;
    let sluice = with_k_banned(&upstream).await;
    let body = format!("{{\"tenant\":\"{}\"}}", "t".repeat(2000));
    let head = |key: &str| post_head(key, body.len(), "");

    // The head alone is answered; the body that follows is dropped, and
    // the same connection serves the next request.
    let mut socket = TcpStream::connect(sluice.addr).await.unwrap();
    socket.write_all(head("k-banned").as_bytes()).await.unwrap();
    let refused = answer(&mut socket).await;
    assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
    assert!(
        !refused.to_lowercase().contains("connection: close"),
        "{refused}"
    );
    client_pauses(Duration::from_millis(200)).await;
    socket.write_all(body.as_bytes()).await.unwrap();
    socket.write_all(head("k-fine").as_bytes()).await.unwrap();
    socket.write_all(body.as_bytes()).await.unwrap();
    let served = answer(&mut socket).await;
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    assert_eq!(upstream.count(), 1, "only the second request went up");

    // A body that does not come within a second: the connection closes.
    let mut socket = TcpStream::connect(sluice.addr).await.unwrap();
    socket.write_all(head("k-banned").as_bytes()).await.unwrap();
    assert!(answer(&mut socket).await.starts_with("HTTP/1.1 429"));
    let mut rest = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(3), socket.read(&mut rest)).await;
    assert_eq!(closed.expect("closed within 3 s").unwrap_or(0), 0);
}
