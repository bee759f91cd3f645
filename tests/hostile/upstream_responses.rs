//! How sluice reads the upstream's answer to a `GET` or `HEAD` without a
//! body (`src/proxy/pool/exchange.rs`): every framing an upstream may use, sent in
//! one write and dribbled a byte at a time, reaches the client whole, and
//! the upstream connection is reused exactly when it may be; malformed
//! answers are 502; bytes beyond an answer never become the next answer.
//! Rows F6–F8 of docs/edge-behaviour.md's "Hostile inputs" table.

use crate::support;
use crate::wire;

use support::Sluice;
use wire::{exchange, Action, RawRequest, RawUpstream};

const RULE: &str = r#"
[[rule]]
name = "per-ip"
rate = "100000/m"
"#;

async fn behind(
    script: impl Fn(&RawRequest) -> Action + Send + Sync + 'static,
) -> (RawUpstream, Sluice) {
    crate::behind(RULE, script).await
}

/// One request on its own client connection, which sluice closes after the
/// answer (`Connection: close`), so the read ends at the close.
async fn ask(sluice: &Sluice, method: &str, target: &str) -> wire::Received {
    let request = format!("{method} {target} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    exchange(sluice.addr, request.as_bytes()).await
}

/// Whether the connection that carried the last request for `target`
/// carried nothing after it (sluice did not reuse it).
fn last_on_its_connection(upstream: &RawUpstream, target: &str) -> bool {
    upstream
        .conns()
        .iter()
        .rev()
        .find(|conn| conn.requests.iter().any(|r| r.target == target))
        .and_then(|conn| conn.requests.last())
        .is_some_and(|last| last.target == target)
}

/// The answers, by target; `?dribble` sends them a byte at a time.
fn answer(target: &str) -> Vec<u8> {
    let path = target.split('?').next().unwrap_or_default();
    let text: &str = match path {
        "/length" => "HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-up: 1\r\n\r\nhello",
        "/chunked" => concat!(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: t\r\n\r\n"
        ),
        // No body follows a 204 or a 304, whatever Content-Length says.
        "/no-content" => "HTTP/1.1 204 No Content\r\ncontent-length: 7\r\n\r\n",
        "/not-modified" => "HTTP/1.1 304 Not Modified\r\ncontent-length: 7\r\netag: \"e\"\r\n\r\n",
        // Informational answers come before the final one.
        "/informational" => concat!(
            "HTTP/1.1 100 Continue\r\n\r\n",
            "HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
        ),
        // A HEAD answer declares the GET's length and sends no body.
        "/head" => "HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n",
        "/empty" => "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
        "/http10-keep-alive" => {
            "HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\nok"
        }
        other => panic!("no answer scripted for {other}"),
    };
    text.as_bytes().to_vec()
}

fn scripted(request: &RawRequest) -> Action {
    let bytes = answer(&request.target);
    if request.target.ends_with("?dribble") {
        Action::Dribble(bytes)
    } else {
        Action::Reply(bytes)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_every_framing_of_an_answer_reaches_the_client_whole_on_one_kept_connection() {
    let (upstream, sluice) = behind(scripted).await;
    // (method, path, status, body the client must get)
    let cases: [(&str, &str, u16, &str); 8] = [
        ("GET", "/length", 200, "hello"),
        ("GET", "/chunked", 200, "hello world"),
        ("GET", "/no-content", 204, ""),
        ("GET", "/not-modified", 304, ""),
        ("GET", "/informational", 200, "ok"),
        ("HEAD", "/head", 200, ""),
        ("GET", "/empty", 200, ""),
        ("GET", "/http10-keep-alive", 200, "ok"),
    ];
    for dribble in ["", "?dribble"] {
        for (method, path, status, body) in cases {
            let target = format!("{path}{dribble}");
            let got = ask(&sluice, method, &target).await;
            let responses = got.responses();
            let what = format!("{method} {target}: {}", got.text());
            assert_eq!(responses.len(), 1, "{what}");
            let response = &responses[0];
            assert_eq!(response.status, status, "{what}");
            assert_eq!(String::from_utf8_lossy(&response.body), body, "{what}");
            if method == "HEAD" {
                // The GET's length, and no body after the head.
                assert_eq!(response.header("content-length"), Some("1000"), "{what}");
                assert!(got.text().ends_with("\r\n\r\n"), "{what}");
            } else {
                assert!(response.complete, "{what}");
            }
            if path == "/length" {
                assert_eq!(response.header("x-up"), Some("1"), "{what}");
            }
            // Trailer fields and chunk extensions are dropped.
            assert!(!got.text().contains("x-trailer"), "{what}");
            assert!(!got.text().contains("ext=1"), "{what}");
        }
    }
    // Every answer left the connection reusable: all 16 exchanges on one.
    let conns = upstream.conns();
    assert_eq!(conns.len(), 1, "{} connections", conns.len());
    assert_eq!(conns[0].requests.len(), 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_an_answer_that_ends_with_the_connection_is_passed_on_whole_and_the_connection_not_reused(
) {
    let (upstream, sluice) = behind(|request| match request.target.as_str() {
        // Neither length nor chunks: the body runs to the close.
        "/until-close" => Action::ReplyAndClose(b"HTTP/1.1 200 OK\r\n\r\nall of it".to_vec()),
        // HTTP/1.0 without keep-alive: the upstream may close after it.
        "/http10" => Action::Reply(b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec()),
        // `Connection: close` on HTTP/1.1.
        "/close" => Action::Reply(
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok".to_vec(),
        ),
        _ => wire::ok(),
    })
    .await;
    for (target, body) in [
        ("/until-close", "all of it"),
        ("/http10", "ok"),
        ("/close", "ok"),
    ] {
        let got = ask(&sluice, "GET", target).await;
        let responses = got.responses();
        assert_eq!(responses.len(), 1, "{target}: {}", got.text());
        assert_eq!(responses[0].status, 200, "{target}");
        assert_eq!(
            String::from_utf8_lossy(&responses[0].body),
            body,
            "{target}"
        );
        assert!(responses[0].complete, "{target}: {}", got.text());
        // The next request goes out on another connection.
        let next = ask(&sluice, "GET", "/next").await;
        assert_eq!(next.statuses(), [200], "{target}: {}", next.text());
        assert!(
            last_on_its_connection(&upstream, target),
            "{target}: reused"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f7_a_malformed_answer_is_502_and_its_connection_dropped() {
    let malformed: Vec<(&str, Vec<u8>)> = vec![
        (
            "/lengths-disagree",
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello".to_vec(),
        ),
        (
            "/length-negative",
            b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n".to_vec(),
        ),
        (
            "/length-hex",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0x5\r\n\r\nhello".to_vec(),
        ),
        (
            "/te-on-http10",
            b"HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
        ),
        (
            "/switching-unasked",
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n"
                .to_vec(),
        ),
        ("/status-four-digits", b"HTTP/1.1 2000 OK\r\n\r\n".to_vec()),
        ("/not-http", b"SSH-2.0-OpenSSH_9.2\r\n\r\n".to_vec()),
        (
            "/field-without-colon",
            b"HTTP/1.1 200 OK\r\nbad field\r\ncontent-length: 0\r\n\r\n".to_vec(),
        ),
        (
            "/obs-fold",
            b"HTTP/1.1 200 OK\r\nx-a: 1\r\n 2\r\ncontent-length: 0\r\n\r\n".to_vec(),
        ),
        ("/too-many-fields", {
            let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
            for i in 0..101 {
                head.extend_from_slice(format!("x-f{i}: v\r\n").as_bytes());
            }
            head.extend_from_slice(b"content-length: 0\r\n\r\n");
            head
        }),
    ];
    let answers = malformed.clone();
    let (upstream, sluice) = behind(move |request| {
        answers
            .iter()
            .find(|(target, _)| *target == request.target)
            .map_or_else(wire::ok, |(_, bytes)| Action::Reply(bytes.clone()))
    })
    .await;
    for (target, _) in &malformed {
        let got = ask(&sluice, "GET", target).await;
        assert_eq!(got.statuses(), [502], "{target}: {}", got.text());
        assert!(
            got.text().contains("application/problem+json"),
            "{target}: {}",
            got.text()
        );
        // The connection that carried it is not used again.
        let next = ask(&sluice, "GET", "/fine").await;
        assert_eq!(next.statuses(), [200], "{target}: {}", next.text());
        assert!(
            last_on_its_connection(&upstream, target),
            "{target}: reused"
        );
    }
    let other = r#"sluice_upstream_errors_total{upstream="default",kind="other"}"#;
    assert_eq!(sluice.metric(other).await, malformed.len() as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f8_bytes_beyond_an_answer_never_become_the_next_answer() {
    // The first answer carries a second, forged one behind it.
    let (upstream, sluice) = behind(|request| match request.target.as_str() {
        "/first" => Action::Reply(
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirstHTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nforged"
                .to_vec(),
        ),
        "/chunked-first" => Action::Reply(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n0\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nforged"
                .to_vec(),
        ),
        _ => Action::Reply(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecond".to_vec()),
    })
    .await;
    for first in ["/first", "/chunked-first"] {
        let got = ask(&sluice, "GET", first).await;
        let responses = got.responses();
        assert_eq!(responses.len(), 1, "{first}: {}", got.text());
        assert_eq!(String::from_utf8_lossy(&responses[0].body), "first");
        let next = ask(&sluice, "GET", "/second").await;
        let responses = next.responses();
        assert_eq!(responses.len(), 1, "{first}: {}", next.text());
        assert_eq!(
            String::from_utf8_lossy(&responses[0].body),
            "second",
            "{first}: the forged answer was delivered"
        );
        assert!(last_on_its_connection(&upstream, first), "{first}: reused");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f8_bad_chunk_framing_mid_body_is_a_truncated_answer() {
    let (_upstream, sluice) = behind(|request| match request.target.as_str() {
        "/no-crlf-after-data" => Action::Reply(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n".to_vec(),
        ),
        "/bad-size" => Action::Reply(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n".to_vec(),
        ),
        _ => wire::ok(),
    })
    .await;
    for target in ["/no-crlf-after-data", "/bad-size"] {
        let got = ask(&sluice, "GET", target).await;
        let responses = got.responses();
        assert_eq!(responses.len(), 1, "{target}: {}", got.text());
        assert_eq!(responses[0].status, 200, "{target}");
        assert!(
            !responses[0].complete,
            "{target}: a clean answer: {}",
            got.text()
        );
        assert!(got.closed, "{target}: the client connection stayed open");
    }
}
