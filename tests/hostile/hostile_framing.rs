//! Rows A1–A8 (HTTP/1 framing and smuggling) and C1–C2 (hop-by-hop fields)
//! of docs/edge-behaviour.md's "Hostile inputs" table, one test per row, named after it. The client
//! sends exact bytes; the upstream records the exact bytes sluice wrote
//! (`tests/wire`), so each test asserts what sluice answered *and* what
//! reached the upstream.

use crate::support;
use crate::wire;

use std::time::Duration;

use support::Sluice;
use tokio::io::AsyncWriteExt;
use wire::{exchange, ok, Action, RawUpstream};

/// A recording upstream that answers 200 to everything, and sluice in front.
async fn start(rest: &str) -> (RawUpstream, Sluice) {
    start_with(rest, |_| ok()).await
}

async fn start_with(
    rest: &str,
    script: impl Fn(&wire::RawRequest) -> Action + Send + Sync + 'static,
) -> (RawUpstream, Sluice) {
    crate::behind_over(super::TRANSPORT, rest, script).await
}

/// The request hidden in bodies: it must never be parsed as a request.
const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";

fn assert_never_smuggled(upstream: &RawUpstream, what: &str) {
    let requests = upstream.requests();
    assert!(
        requests.iter().all(|r| !r.target.contains("smuggled")),
        "{what}: a hidden request reached the upstream: {requests:?}"
    );
    assert!(
        !upstream.all_bytes().contains("/smuggled"),
        "{what}: the hidden request's bytes reached the upstream"
    );
    for conn in upstream.conns() {
        assert!(
            !conn.garbage,
            "{what}: the upstream got framing it could not read: {:?}",
            String::from_utf8_lossy(&conn.bytes)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a1_content_length_with_transfer_encoding_is_framed_by_te_and_the_connection_closed() {
    let (upstream, sluice) = start("").await;
    // Both orders: hyper drops whichever CL it sees once TE is there.
    for (what, framing) in [
        (
            "CL then TE",
            "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
        ),
        (
            "TE then CL",
            "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
        ),
    ] {
        let before = upstream.requests().len();
        let payload =
            format!("POST /a HTTP/1.1\r\nHost: a\r\n{framing}\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: x\r\n\r\n");

        let got = exchange(sluice.addr, payload.as_bytes()).await;

        // One response, then sluice closes the socket (RFC 9112 §6.1).
        let responses = got.responses();
        assert_eq!(responses.len(), 1, "{what}: {}", got.text());
        assert_eq!(responses[0].status, 200, "{what}");
        assert_eq!(responses[0].header("connection"), Some("close"), "{what}");
        assert!(got.closed, "{what}: the connection stayed open");
        // The upstream got one request, framed by sluice, without CL.
        let requests = upstream.requests();
        assert_eq!(requests.len(), before + 1, "{what}: {requests:?}");
        let forwarded = &requests[before];
        assert_eq!(forwarded.target, "/a");
        assert!(!forwarded.has("content-length"), "{what}: {forwarded:?}");
        assert!(forwarded.body.is_empty());
    }
    assert!(upstream.requests().iter().all(|r| r.target != "/admin"));
    assert!(!upstream.all_bytes().contains("/admin"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2_bad_or_duplicate_content_length_is_400_and_close() {
    let (upstream, sluice) = start("").await;
    for value in [
        "5\r\nContent-Length: 6",
        "5, 6",
        "+5",
        "0x5",
        "-1",
        "99999999999999999999",
        "5 5",
        "",
    ] {
        let payload =
            format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {value}\r\n\r\nhello{SMUGGLED}");

        let got = exchange(sluice.addr, payload.as_bytes()).await;

        assert_eq!(
            got.statuses(),
            [400],
            "Content-Length: {value:?}: {}",
            got.text()
        );
        assert!(got.closed, "Content-Length: {value:?}: not closed");
    }
    assert_eq!(upstream.conns().len(), 0, "nothing reaches the upstream");
}

/// Who wrote an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Hyper,
    Proxy,
    Upstream,
}
use By::{Hyper, Proxy, Upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a3_disguised_transfer_encoding_is_never_forwarded_as_is() {
    let (upstream, sluice) = start("").await;
    let body = format!("5\r\nhello\r\n0\r\n\r\n{SMUGGLED}");
    // (version, head fields, status, answered by): hyper answers 400 with
    // an empty body to what it cannot parse; sluice answers 400 with a
    // problem document to what hyper lets through but a proxy must not
    // guess at (chunked twice, or with another coding).
    let cases = [
        (
            "HTTP/1.1",
            "Transfer-Encoding: chunked, chunked\r\n",
            400,
            Proxy,
        ),
        (
            "HTTP/1.1",
            "Transfer-Encoding: gzip, chunked\r\n",
            400,
            Proxy,
        ),
        (
            "HTTP/1.1",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            400,
            Proxy,
        ),
        (
            "HTTP/1.1",
            "Transfer-Encoding: chunked, gzip\r\n",
            400,
            Hyper,
        ),
        ("HTTP/1.1", "Transfer-Encoding: gzip\r\n", 400, Hyper),
        ("HTTP/1.1", "Transfer-Encoding: xchunked\r\n", 400, Hyper),
        ("HTTP/1.1", "Transfer-Encoding : chunked\r\n", 400, Hyper),
        ("HTTP/1.0", "Transfer-Encoding: chunked\r\n", 400, Hyper),
        // TE with CL, a tab as whitespace: framed by TE, then closed (A1).
        (
            "HTTP/1.1",
            "Transfer-Encoding:\tchunked\r\nContent-Length: 3\r\n",
            200,
            Upstream,
        ),
    ];
    for (version, fields, status, answered_by) in cases {
        let payload = format!("POST /te {version}\r\nHost: a\r\n{fields}\r\n{body}");

        let got = exchange(sluice.addr, payload.as_bytes()).await;

        assert_eq!(got.statuses(), [status], "{fields:?}: {}", got.text());
        assert!(got.closed, "{fields:?}: not closed");
        let response = &got.responses()[0];
        if answered_by == Proxy {
            assert_eq!(
                response.header("content-type"),
                Some("application/problem+json"),
                "{fields:?}"
            );
            assert_eq!(response.header("connection"), Some("close"), "{fields:?}");
        }
    }
    assert_never_smuggled(&upstream, "A3");
    // Only the TE + CL request was forwarded, in sluice's own framing.
    let requests = upstream.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].body, b"hello");
    assert!(!requests[0].has("content-length"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a4_broken_chunk_framing_never_smuggles_and_closes() {
    let (upstream, sluice) = start("").await;
    let endless_extension = format!("5;{}\r\nhello\r\n0\r\n\r\n", "a".repeat(40 * 1024));
    let bodies: Vec<(&str, String)> = vec![
        ("size Z", "Z\r\nhello\r\n0\r\n\r\n".into()),
        ("size 0x10", "0x10\r\nhello\r\n0\r\n\r\n".into()),
        ("size 5_0", "5_0\r\nhello\r\n0\r\n\r\n".into()),
        ("bare LF", "5\nhello\n0\n\n".into()),
        (
            "CR in a chunk extension",
            "5;a\rb\r\nhello\r\n0\r\n\r\n".into(),
        ),
        (
            "17 hex digits",
            "FFFFFFFFFFFFFFFFF\r\nhello\r\n0\r\n\r\n".into(),
        ),
        ("endless chunk extension", endless_extension),
        (
            "data longer than its size",
            "3\r\nhello\r\n0\r\n\r\n".into(),
        ),
        ("missing CRLF after data", "5\r\nhello0\r\n\r\n".into()),
    ];
    for (what, body) in bodies {
        let payload = format!(
            "POST /chunks HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n{body}{SMUGGLED}"
        );

        let got = exchange(sluice.addr, payload.as_bytes()).await;

        // The head was forwarded before the bad chunk arrived (bodies
        // stream); the bad chunk aborts the upstream request mid-body, and
        // the client gets a 400 and the close.
        assert_eq!(got.statuses(), [400], "{what}: {}", got.text());
        assert!(got.closed, "{what}: not closed");
    }
    assert_never_smuggled(&upstream, "A4");
    // No upstream request ever completed: each was cut off mid-body.
    assert_eq!(upstream.requests().len(), 0, "{:?}", upstream.requests());
}

const ONE_PER_MINUTE: &str = r#"
[[rule]]
name = "tight"
key = ["global"]
rate = "1/m"
"#;

/// Sends `payload` on a kept-alive connection, then a plain GET on the same
/// connection if it is still open; returns the statuses in order and
/// whether sluice closed the connection.
async fn send_then_follow_up(addr: std::net::SocketAddr, payload: &[u8]) -> (Vec<u16>, bool) {
    let mut stream = wire::connect(addr).await;
    stream.write_all(payload).await.unwrap();
    let first = wire::read_until_answered(&mut stream).await;
    let mut statuses = first.statuses();
    if first.closed {
        return (statuses, true);
    }
    // Complete answers: sluice closes after them, or reads the follow-up.
    let follow_up = b"GET /follow-up HTTP/1.1\r\nHost: a\r\n\r\n";
    let closed = stream.write_all(follow_up).await.is_err();
    let second = wire::read_answers(&mut stream, follow_up).await;
    statuses.extend(second.statuses());
    (statuses, closed || second.closed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a5_a_body_sluice_refuses_unread_is_drained_or_the_connection_closed() {
    let (upstream, sluice) = start(ONE_PER_MINUTE).await;
    assert_eq!(
        exchange(sluice.addr, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .statuses(),
        [200]
    );
    let limited = r#"sluice_requests_total{rule="tight",outcome="limited"}"#;
    let hidden = "GET /admin HTTP/1.1\r\nHost: a\r\n\r\n";
    let cases = [
        ("body sent at once", "", hidden.to_owned()),
        (
            "Expect: 100-continue",
            "Expect: 100-continue\r\n",
            hidden.to_owned(),
        ),
        // Declared larger than what follows: cannot be drained, so closed.
        (
            "body still coming",
            "",
            format!("{hidden}{}", "x".repeat(100)),
        ),
    ];
    for (what, expect, body) in cases {
        let declared = if what == "body still coming" {
            100_000
        } else {
            body.len()
        };
        let before = sluice.metric(limited).await;
        let payload = format!(
            "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: {declared}\r\n{expect}\r\n{body}"
        );

        let (statuses, closed) = send_then_follow_up(sluice.addr, payload.as_bytes()).await;

        // Either drained (the follow-up gets its own single answer) or closed
        // after the one 429; never an answer for the hidden /admin.
        let expected: &[u16] = if closed && statuses.len() == 1 {
            &[429]
        } else {
            &[429, 429]
        };
        assert_eq!(statuses, expected, "{what}");
        // The router saw exactly the requests that were answered.
        assert_eq!(
            sluice.metric(limited).await - before,
            statuses.len() as f64,
            "{what}: the router saw the hidden request"
        );
        if what == "body still coming" {
            assert!(closed, "{what}: an undrainable body must close");
        }
    }
    // The same for a 403 (deny list) and a 400 (bad Host).
    let (denied_upstream, denied) = start("[access]\ndeny = [\"127.0.0.0/8\"]\n").await;
    for head in [
        "POST / HTTP/1.1\r\nHost: a\r\n",
        "POST / HTTP/1.1\r\nHost: a, b\r\n",
    ] {
        let payload = format!("{head}Content-Length: {}\r\n\r\n{hidden}", hidden.len());
        let (statuses, _) = send_then_follow_up(denied.addr, payload.as_bytes()).await;
        assert!(
            statuses == [403]
                || statuses == [400]
                || statuses == [400, 403]
                || statuses == [403, 403],
            "{head:?}: {statuses:?}"
        );
    }
    assert_eq!(denied_upstream.conns().len(), 0);
    assert!(upstream.requests().iter().all(|r| r.target != "/admin"));
}

const PER_PATH: &str = r#"
[[rule]]
name = "per-path"
key = ["path"]
rate = "100/m"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a6_an_upgrade_the_upstream_refuses_is_never_tunnelled() {
    // The upstream answers 200 to everything, handshakes included.
    let (upstream, sluice) = start(PER_PATH).await;
    let counted = r#"sluice_requests_total{rule="per-path",outcome="allowed"}"#;
    for upgrade in ["websocket", "foo"] {
        let before = upstream.requests().len();
        let allowed_before = sluice.metric(counted).await;
        let payload = format!(
            "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: {upgrade}\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n\
             GET /admin HTTP/1.1\r\nHost: a\r\n\r\n"
        );

        let got = exchange(sluice.addr, payload.as_bytes()).await;

        // Two requests, two answers, in order: /admin was parsed by sluice.
        assert_eq!(got.statuses(), [200, 200], "{upgrade}: {}", got.text());
        assert_eq!(
            sluice.metric(counted).await - allowed_before,
            2.0,
            "{upgrade}"
        );
        let requests = &upstream.requests()[before..];
        assert_eq!(requests.len(), 2, "{upgrade}: {requests:?}");
        assert_eq!(requests[0].target, "/ws");
        assert_eq!(requests[1].target, "/admin");
        // Forwarded by sluice (its header), not tunnelled as raw bytes.
        assert!(requests[1].has("x-forwarded-for"), "{upgrade}");
        assert!(!requests[1].has("upgrade"));
        // Only a WebSocket handshake keeps its Upgrade.
        assert_eq!(
            requests[0].header("upgrade"),
            (upgrade == "websocket").then_some("websocket"),
            "{upgrade}"
        );
    }
    assert_never_smuggled(&upstream, "A6");
}

const SWITCHED: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";

const HANDSHAKE: &[u8] = b"GET /chat HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\n\
Upgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// Opens a WebSocket through sluice: the handshake's answer, and the
/// connection (a tunnel when the answer is 101).
async fn open_websocket(addr: std::net::SocketAddr) -> (wire::Received, wire::Stream) {
    let mut stream = wire::connect(addr).await;
    stream.write_all(HANDSHAKE).await.unwrap();
    let answer = wire::read_until_answered(&mut stream).await;
    (answer, stream)
}

async fn echoes(stream: &mut wire::Stream, message: &[u8]) -> bool {
    if stream.write_all(message).await.is_err() {
        return false;
    }
    let got = wire::read_until(stream, |bytes| bytes.len() >= message.len()).await;
    got.bytes == message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_is_tunnelled_after_101_and_limited_at_the_handshake() {
    let rule = r#"
[[rule]]
name = "ws"
key = ["global"]
rate = "2/m"
"#;
    let (upstream, sluice) = start_with(rule, |_| Action::SwitchAndEcho(SWITCHED.to_vec())).await;

    let (answer, mut tunnel) = open_websocket(sluice.addr).await;

    let responses = answer.responses();
    assert_eq!(responses.len(), 1, "{}", answer.text());
    assert_eq!(responses[0].status, 101);
    assert_eq!(responses[0].header("upgrade"), Some("websocket"));
    assert_eq!(responses[0].header("connection"), Some("upgrade"));
    assert_eq!(
        responses[0].header("sec-websocket-accept"),
        Some("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    );
    // Bytes go both ways, several times (a masked text frame, then more).
    let frame = b"\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58";
    assert!(echoes(&mut tunnel, frame).await);
    assert!(echoes(&mut tunnel, &[0u8, 1, 2, 255, b'\r', b'\n']).await);
    // The upstream got the handshake with its upgrade fields and sluice's.
    let handshake = &upstream.requests()[0];
    assert_eq!(handshake.header("upgrade"), Some("websocket"));
    assert_eq!(handshake.header("connection"), Some("upgrade"));
    assert_eq!(
        handshake.header("sec-websocket-key"),
        Some("dGhlIHNhbXBsZSBub25jZQ==")
    );
    assert!(handshake.has("x-forwarded-for"));

    // The handshake counts like any request: the third in a minute is 429.
    let (second, _second_tunnel) = open_websocket(sluice.addr).await;
    assert_eq!(second.statuses(), [101]);
    let (third, _) = open_websocket(sluice.addr).await;
    assert_eq!(third.statuses(), [429], "{}", third.text());
    assert_eq!(upstream.requests().len(), 2);

    // Closing the client side closes the upstream side.
    drop(tunnel);
    support::eventually(
        Duration::from_secs(5),
        "the upstream side closed",
        || async { upstream.conns()[0].closed_at.is_some() },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_tunnel_holds_its_concurrency_permit_until_it_closes() {
    let rule = r#"
[[rule]]
name = "one-socket"
algorithm = "concurrency"
key = ["global"]
max_in_flight = 1
"#;
    let (_upstream, sluice) = start_with(rule, |_| Action::SwitchAndEcho(SWITCHED.to_vec())).await;

    let (first, mut tunnel) = open_websocket(sluice.addr).await;
    assert_eq!(first.statuses(), [101]);
    assert!(echoes(&mut tunnel, b"ping").await);

    let (second, _) = open_websocket(sluice.addr).await;
    assert_eq!(second.statuses(), [429], "{}", second.text());

    // Closed, the tunnel gives its permit back.
    drop(tunnel);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut again = loop {
        let (third, tunnel) = open_websocket(sluice.addr).await;
        if third.statuses() == [101] {
            break tunnel;
        }
        assert_eq!(third.statuses(), [429], "{}", third.text());
        assert!(
            std::time::Instant::now() < deadline,
            "the permit never came back"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(echoes(&mut again, b"pong").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrequested_101_from_the_upstream_is_502() {
    let (upstream, sluice) = start_with("", |_| Action::SwitchAndEcho(SWITCHED.to_vec())).await;

    let got = exchange(sluice.addr, b"GET /plain HTTP/1.1\r\nHost: a\r\n\r\nhello").await;

    assert_eq!(got.statuses()[0], 502, "{}", got.text());
    assert!(!got.text().contains("hello"), "{}", got.text());
    assert_eq!(upstream.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a7_pipelined_requests_across_the_limit_get_one_response_each_in_order() {
    let rule = r#"
[[rule]]
name = "ten"
key = ["global"]
rate = "10/m"
"#;
    let (upstream, sluice) = start(rule).await;
    let payload: String = (0..100)
        .map(|i| format!("GET /p{i} HTTP/1.1\r\nHost: a\r\n\r\n"))
        .collect();

    let got = exchange(sluice.addr, payload.as_bytes()).await;

    let responses = got.responses();
    assert!(responses.iter().all(|r| r.complete));
    let statuses: Vec<u16> = responses.iter().map(|r| r.status).collect();
    let mut expected = vec![200u16; 10];
    expected.extend([429u16; 90]);
    assert_eq!(statuses, expected);
    // In order: the upstream got /p0 … /p9.
    let targets: Vec<String> = upstream.requests().into_iter().map(|r| r.target).collect();
    let first_ten: Vec<String> = (0..10).map(|i| format!("/p{i}")).collect();
    assert_eq!(targets, first_ten);
    assert!(!got.closed, "a kept-alive connection stays open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a8_differential_sweep_the_upstream_never_reads_a_request_differently() {
    let (upstream, sluice) = start("").await;
    // (Http11Probe-style id, payload, the body the upstream must get when
    // sluice forwards; None when sluice must not forward at all.)
    let chunked = "Transfer-Encoding: chunked";
    let payloads: Vec<(&str, String, Option<&str>)> = vec![
        ("BASELINE-CL", "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello".into(), Some("hello")),
        ("BASELINE-CHUNKED", format!("POST /x HTTP/1.1\r\nHost: a\r\n{chunked}\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), Some("hello")),
        ("CHUNKED-EXTENSION", format!("POST /x HTTP/1.1\r\nHost: a\r\n{chunked}\r\n\r\n5;name=v\r\nhello\r\n0\r\n\r\n"), Some("hello")),
        ("CHUNKED-TRAILER", format!("POST /x HTTP/1.1\r\nHost: a\r\n{chunked}\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"), Some("hello")),
        ("CL-LEADING-ZEROS", "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 005\r\n\r\nhello".into(), Some("hello")),
        ("CL-SAME-TWICE", "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello".into(), Some("hello")),
        ("SMUG-CL-TE-BOTH", format!("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n{chunked}\r\n\r\n0\r\n\r\nX"), Some("")),
        ("SMUG-TE-CL-BOTH", format!("POST /x HTTP/1.1\r\nHost: a\r\n{chunked}\r\nContent-Length: 6\r\n\r\n0\r\n\r\nX"), Some("")),
        ("SMUG-DUPLICATE-CL", "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 50\r\n\r\nhello".into(), None),
        ("SMUG-CL-COMMA", "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 50\r\n\r\nhello".into(), None),
        ("SMUG-CL-NEGATIVE", "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: -5\r\n\r\nhello".into(), None),
        ("SMUG-CL-HEX", "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\nhello".into(), None),
        ("SMUG-CL-PLUS", "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello".into(), None),
        ("SMUG-TE-DOUBLE-CHUNKED", "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".into(), None),
        ("SMUG-TE-TWO-LINES", format!("POST /x HTTP/1.1\r\nHost: a\r\n{chunked}\r\n{chunked}\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), None),
        ("SMUG-TE-GZIP-CHUNKED", "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".into(), None),
        ("SMUG-TE-NOT-LAST", "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n5\r\nhello\r\n0\r\n\r\n".into(), None),
        ("SMUG-TE-SPACE-BEFORE-COLON", "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".into(), None),
        ("SMUG-TE-OBS-FOLD", "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".into(), None),
        ("SMUG-TE-HTTP10", "POST /x HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".into(), None),
        ("SMUG-TE-XCHUNKED", "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".into(), None),
        ("SMUG-CHUNK-SIZE-HEX-PREFIX", format!("POST /x HTTP/1.1\r\nHost: a\r\n{chunked}\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n"), None),
        ("SMUG-CHUNK-BARE-LF", format!("POST /x HTTP/1.1\r\nHost: a\r\n{chunked}\r\n\r\n5\nhello\n0\n\n"), None),
        ("SMUG-CHUNK-NO-TERMINATOR-CRLF", format!("POST /x HTTP/1.1\r\nHost: a\r\n{chunked}\r\n\r\n5\r\nhelloXX0\r\n\r\n"), None),
        ("SMUG-NUL-IN-HEADER", "POST /x HTTP/1.1\r\nHost: a\r\nX: a\0b\r\nContent-Length: 5\r\n\r\nhello".into(), None),
        ("SMUG-SPACE-IN-NAME", "POST /x HTTP/1.1\r\nHost: a\r\nContent Length: 5\r\n\r\nhello".into(), None),
        ("SMUG-CR-ONLY", "POST /x HTTP/1.1\rHost: a\rContent-Length: 5\r\r\nhello".into(), None),
    ];
    for (id, payload, forwarded_body) in payloads {
        let before = upstream.requests().len();
        // A well-formed request pipelined after each payload.
        let payload = format!("{payload}GET /next HTTP/1.1\r\nHost: a\r\n\r\n");

        let got = exchange(sluice.addr, payload.as_bytes()).await;

        let statuses = got.statuses();
        let seen = &upstream.requests()[before..];
        // sluice's reading (the requests it forwarded and answered 200) is
        // the upstream's reading (the requests it received), one for one.
        let forwarded = statuses.iter().filter(|&&s| s == 200).count();
        assert_eq!(seen.len(), forwarded, "{id}: {seen:?} vs {}", got.text());
        match forwarded_body {
            Some(body) => {
                assert_eq!(statuses.first(), Some(&200), "{id}: {}", got.text());
                assert_eq!(seen[0].target, "/x", "{id}");
                assert_eq!(String::from_utf8_lossy(&seen[0].body), body, "{id}");
                // The follow-up is its own request, or the connection closed.
                if let Some(next) = seen.get(1) {
                    assert_eq!(next.target, "/next", "{id}");
                    assert!(next.body.is_empty(), "{id}");
                } else {
                    assert!(got.closed, "{id}: follow-up neither answered nor closed");
                }
            }
            None => {
                assert_eq!(statuses.len(), 1, "{id}: {}", got.text());
                assert!((400..500).contains(&statuses[0]), "{id}: {}", got.text());
                assert!(got.closed, "{id}: not closed");
            }
        }
        assert_never_smuggled(&upstream, id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c1_hop_by_hop_fields_are_removed_in_both_directions() {
    let (upstream, sluice) = start_with("", |request| match request.target.as_str() {
        // `Connection: close` names a field called `Close` too.
        "/close-named" => Action::Reply(
            b"HTTP/1.1 200 OK\r\nClose: 1\r\nConnection: keep-alive, close\r\n\
              X-Public: yes\r\ncontent-length: 2\r\n\r\nok"
                .to_vec(),
        ),
        _ => Action::Reply(
            b"HTTP/1.1 200 OK\r\nConnection: x-srv\r\nX-Srv: 1\r\nKeep-Alive: timeout=500\r\n\
              Proxy-Connection: keep-alive\r\nX-Public: yes\r\ncontent-length: 2\r\n\r\nok"
                .to_vec(),
        ),
    })
    .await;
    let payload = b"GET /hop HTTP/1.1\r\nHost: a\r\nConnection: close, X-Internal-Auth\r\n\
X-Internal-Auth: 1\r\nKeep-Alive: 300\r\nProxy-Connection: a\r\nTE: gzip\r\nUpgrade: h2c\r\n\
Trailer: X\r\nX-Kept: 1\r\n\r\n";

    let got = exchange(sluice.addr, payload).await;

    let response = &got.responses()[0];
    assert_eq!(response.status, 200);
    // The client sees none of the upstream's hop fields…
    for name in ["x-srv", "keep-alive", "proxy-connection"] {
        assert!(response.header(name).is_none(), "{name}: {}", got.text());
    }
    assert_eq!(response.header("x-public"), Some("yes"));
    let got = exchange(
        sluice.addr,
        b"GET /close-named HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    let named = &got.responses()[0];
    assert_eq!(named.status, 200);
    assert!(named.header("close").is_none(), "{}", got.text());
    assert_eq!(named.header("x-public"), Some("yes"));
    // … and the upstream none of the client's.
    let raw = upstream.all_bytes().to_ascii_lowercase();
    for field in [
        "connection:",
        "x-internal-auth",
        "keep-alive",
        "proxy-connection",
        "te:",
        "upgrade",
        "trailer",
    ] {
        assert!(!raw.contains(field), "{field} reached the upstream: {raw}");
    }
    assert!(raw.contains("x-kept: 1"));

    // TE: trailers is the one TE that passes (gRPC needs it).
    let got = exchange(
        sluice.addr,
        b"GET /te HTTP/1.1\r\nHost: a\r\nTE: trailers, gzip\r\n\r\n",
    )
    .await;
    assert_eq!(got.statuses(), [200]);
    let forwarded = upstream.requests().pop().unwrap();
    assert_eq!(forwarded.header("te"), Some("trailers"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c2_connection_cannot_delete_forwarding_headers_and_named_keys_are_used_then_stripped() {
    let rule = r#"
[[rule]]
name = "per-key"
key = ["header:x-api-key"]
missing = "skip"
rate = "1/m"
"#;
    let (upstream, sluice) = start(rule).await;
    let payload =
        b"GET /c2 HTTP/1.1\r\nHost: a\r\nConnection: X-Forwarded-For, X-Real-IP, Authorization\r\n\
X-Forwarded-For: 6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nAuthorization: Bearer t\r\n\r\n";

    let got = exchange(sluice.addr, payload).await;

    assert_eq!(got.statuses(), [200]);
    let forwarded = upstream.requests().pop().unwrap();
    // sluice's own X-Forwarded-For survives: stripping ran before it was set.
    assert_eq!(forwarded.header("x-forwarded-for"), Some("127.0.0.1"));
    let proto = match super::TRANSPORT {
        crate::Transport::Plain => "http",
        crate::Transport::Tls => "https",
    };
    assert_eq!(forwarded.header("x-forwarded-proto"), Some(proto));
    assert!(!forwarded.has("x-real-ip"));
    assert!(!forwarded.has("authorization"));

    // Nor `Host` and the other forwarding fields: the upstream still gets
    // the host the client asked for, and sluice's own values.
    // The forged scheme is the one the client did not speak.
    let forged = if proto == "http" { "https" } else { "http" };
    let payload = format!(
        "GET /c2-host HTTP/1.1\r\nHost: asked.example\r\n\
Connection: Host, X-Forwarded-Host, X-Forwarded-Proto\r\nX-Forwarded-Host: forged\r\n\
X-Forwarded-Proto: {forged}\r\n\r\n"
    );
    assert_eq!(
        exchange(sluice.addr, payload.as_bytes()).await.statuses(),
        [200]
    );
    let forwarded = upstream.requests().pop().unwrap();
    assert_eq!(forwarded.target, "/c2-host");
    assert_eq!(forwarded.header("host"), Some("asked.example"));
    assert_eq!(forwarded.header("x-forwarded-host"), Some("asked.example"));
    assert_eq!(forwarded.header("x-forwarded-proto"), Some(proto));

    // A key header named in Connection: sluice keys on it, then strips it.
    let with_key = |key: &str| {
        format!("GET /k HTTP/1.1\r\nHost: a\r\nConnection: X-Api-Key\r\nX-Api-Key: {key}\r\n\r\n")
    };
    assert_eq!(
        exchange(sluice.addr, with_key("k1").as_bytes())
            .await
            .statuses(),
        [200]
    );
    assert_eq!(
        exchange(sluice.addr, with_key("k1").as_bytes())
            .await
            .statuses(),
        [429]
    );
    assert_eq!(
        exchange(sluice.addr, with_key("k2").as_bytes())
            .await
            .statuses(),
        [200]
    );
    let requests = upstream.requests();
    // `/c2`, `/c2-host`, then the two `/k` the limit let through.
    assert_eq!(requests.len(), 4);
    assert!(requests.iter().all(|r| !r.has("x-api-key")));
}
