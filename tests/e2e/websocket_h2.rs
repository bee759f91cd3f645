//! WebSockets over HTTP/2 (RFC 8441 extended CONNECT; docs/conversation.md,
//! "WebSockets over HTTP/2") on the real binary: a client that opens them
//! on one h2c connection (`support::websocket_h2`), the server's side
//! opened as an HTTP/1.1 upgrade (`support::websocket`'s upstream, with a
//! key of sluice's whose accept sluice checks) or as an extended CONNECT
//! on an h2c upstream that advertised it. Each WebSocket on the connection
//! is counted, limited, idled out and closed on its own while the
//! connection serves its other streams. Real time, with generous
//! tolerances.

use std::time::Duration;

use http::StatusCode;

use crate::support::certs::TestCa;
use crate::support::tls_client::{self, H2_AND_H1};
use crate::support::websocket::{
    masked, reaches, series, sluice, WsClient, WsUpstream, BINARY, CLOSE, TEXT,
};
use crate::support::websocket_h2::{H2Client, H2WsUpstream};
use crate::support::{eventually, get, write_config, SluiceProcess};

/// How long anything the tests wait for may take.
const WITHIN: Duration = Duration::from_secs(10);

const GAUGE: &str = "sluice_websocket_connections";

fn limited(rule: &str) -> String {
    format!("sluice_requests_total{{rule=\"{rule}\",outcome=\"limited\"}}")
}

#[tokio::test]
async fn a_websocket_over_h2_reaches_an_http1_upstream_byte_for_byte() {
    let upstream = WsUpstream::start().await;
    let rest = "\n[[rule]]\nname = \"opens\"\nrate = \"100/m\"\n";
    let (sluice, _dir) = sluice(&upstream, rest);
    let client = H2Client::connect(sluice.addr).await;
    assert!(
        client.advertised().await,
        "no SETTINGS_ENABLE_CONNECT_PROTOCOL"
    );

    let asked = [("sec-websocket-protocol", "chat, superchat")];
    let (answer, ws) = client.open("/chat?room=7", &asked).await;
    let mut ws = ws.unwrap_or_else(|| panic!("not opened: {answer:?}"));
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.headers["sec-websocket-protocol"], "chat");
    for gone in ["upgrade", "connection", "sec-websocket-accept"] {
        assert!(!answer.headers.contains_key(gone), "{gone}: {answer:?}");
    }
    assert_eq!(answer.headers["ratelimit-policy"], "\"opens\";q=100;w=60");

    let sent = [
        masked(TEXT, b"hello"),
        masked(BINARY, &[0, 1, 2, 255]),
        masked(TEXT, &[b'x'; 70_000]),
    ]
    .concat();
    for piece in sent.chunks(1000) {
        ws.send(piece).await;
    }
    assert_eq!(ws.next(WITHIN).await.unwrap().payload, b"hello");
    assert_eq!(ws.next(WITHIN).await.unwrap().payload, [0, 1, 2, 255]);
    assert_eq!(ws.next(WITHIN).await.unwrap().payload.len(), 70_000);

    // The server's side was opened as the HTTP/1.1 handshake the CONNECT
    // stands for, with a key of sluice's (its accept checked: the
    // upstream answers the key it got).
    let seen = upstream.conn(0).await;
    let head = seen.head.lock().unwrap().to_lowercase();
    assert!(head.starts_with("get /chat?room=7 http/1.1\r\n"), "{head}");
    for field in [
        "upgrade: websocket",
        "connection: upgrade",
        "sec-websocket-version: 13",
        "sec-websocket-protocol: chat, superchat",
    ] {
        assert!(head.contains(field), "{field} in {head}");
    }
    let key = crate::support::websocket::field(&head, "sec-websocket-key").unwrap();
    assert_eq!(key.len(), 24, "16 bytes in base64: {key}");
    assert!(seen.bytes.lock().unwrap().starts_with(&sent));

    // The close handshake ends the stream.
    ws.send(&masked(CLOSE, &[0x03, 0xe8])).await;
    let (_, close) = ws.until_close(WITHIN).await;
    assert_eq!(close, Some((1000, String::new())));
    assert!(ws.ends(WITHIN).await);
    reaches(&sluice, GAUGE, 0.0).await;
    assert!(client.is_up());
}

const MESSAGES: &str = r#"
[[rule]]
name = "msgs"
unit = "message"
match = { path_prefix = "/chat" }
rate = "2/m"
"#;

#[tokio::test]
async fn a_message_rule_closes_one_stream_with_1008_while_the_connection_goes_on() {
    let upstream = WsUpstream::start().await;
    let (sluice, _dir) = sluice(&upstream, MESSAGES);
    let client = H2Client::connect(sluice.addr).await;
    let (_, chat) = client.open("/chat", &[]).await;
    let (_, other) = client.open("/other", &[]).await;
    let (mut chat, mut other) = (chat.expect("chat opened"), other.expect("other opened"));
    reaches(&sluice, GAUGE, 2.0).await;

    for n in 0..2 {
        chat.text(&format!("message {n}")).await;
        assert_eq!(
            chat.next(WITHIN).await.unwrap().payload,
            format!("message {n}").as_bytes()
        );
    }
    chat.text("one too many").await;
    let (_, close) = chat.until_close(WITHIN).await;
    assert_eq!(close, Some((1008, "rate limited: msgs".to_owned())));
    assert!(chat.ends(WITHIN).await);
    reaches(&sluice, GAUGE, 1.0).await;
    assert_eq!(series(&sluice, &limited("msgs")).await, 1.0);

    // The other WebSocket and the connection go on.
    for n in 0..5 {
        other.text(&format!("still here {n}")).await;
        let echoed = other.next(WITHIN).await.unwrap();
        assert_eq!(echoed.payload, format!("still here {n}").as_bytes());
    }
    let plain = client.get("/plain").await;
    assert_eq!(plain.status, StatusCode::OK, "{plain:?}");
    assert_eq!(plain.body, "plain");
    assert!(client.is_up());
}

const GET_RULE: &str = r#"
[[rule]]
name = "opens"
match = { method = "GET", path_prefix = "/ws" }
rate = "1/m"
"#;

#[tokio::test]
async fn a_get_rule_limits_the_connect_and_refuses_it_as_over_http1() {
    let upstream = WsUpstream::start().await;
    let (sluice, _dir) = sluice(&upstream, GET_RULE);
    let client = H2Client::connect(sluice.addr).await;
    let (first, ws) = client.open("/ws", &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(ws.is_some());

    let (refused, ws) = client.open("/ws", &[]).await;
    assert!(ws.is_none());
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(series(&sluice, &limited("opens")).await, 1.0);

    // The same refusal as an HTTP/1.1 handshake's.
    let handshake = [
        ("connection", "upgrade"),
        ("upgrade", "websocket"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("sec-websocket-version", "13"),
    ];
    let http1 = get(&sluice.url("/ws"), &handshake).await;
    assert_eq!(http1.status, StatusCode::TOO_MANY_REQUESTS);
    for name in [
        "content-type",
        "ratelimit-policy",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
    ] {
        assert_eq!(
            refused.headers.get(name),
            http1.headers.get(name),
            "{name}: {refused:?} / {http1:?}"
        );
    }
    for name in ["retry-after", "ratelimit", "x-ratelimit-reset"] {
        assert!(refused.headers.contains_key(name), "{name}: {refused:?}");
    }
    let problem: serde_json::Value = serde_json::from_str(&refused.body).unwrap();
    assert_eq!(problem["rule"], "opens");
    assert_eq!(problem["status"], 429);
    // The upstream saw only the one admitted.
    assert_eq!(upstream.conns.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn an_idle_websocket_stream_is_closed_with_1001_and_the_connection_goes_on() {
    let upstream = WsUpstream::start().await;
    let (sluice, _dir) = sluice(&upstream, "tunnel_idle_timeout = \"1s\"\n");
    let client = H2Client::connect(sluice.addr).await;
    let (_, idle) = client.open("/idle", &[]).await;
    let mut idle = idle.expect("opened");
    let (_, close) = idle.until_close(WITHIN).await;
    assert_eq!(close, Some((1001, "idle timeout".to_owned())));
    assert!(idle.ends(WITHIN).await);
    let seen = upstream.conn(0).await;
    eventually(WITHIN, "the upstream got its Close", || async {
        seen.close.lock().unwrap().is_some()
    })
    .await;
    assert_eq!(seen.close.lock().unwrap().clone().unwrap().0, 1001);
    reaches(&sluice, GAUGE, 0.0).await;

    // The connection serves on: a request, and a new WebSocket.
    assert_eq!(client.get("/plain").await.status, StatusCode::OK);
    let (_, again) = client.open("/again", &[]).await;
    let mut again = again.expect("opened again");
    again.text("after").await;
    assert_eq!(again.next(WITHIN).await.unwrap().payload, b"after");
    assert!(client.is_up());
}

#[tokio::test]
async fn each_websocket_on_one_connection_is_counted_until_its_stream_or_its_server_ends() {
    use std::sync::atomic::Ordering;
    use tokio::io::AsyncWriteExt;

    let upstream = WsUpstream::start().await;
    let (sluice, _dir) = sluice(&upstream, "");
    let client = H2Client::connect(sluice.addr).await;
    let mut opened = Vec::new();
    for path in ["/closes", "/ends-its-stream", "/is-reset", "/hangup/300"] {
        let (answer, ws) = client.open(path, &[]).await;
        opened.push(ws.unwrap_or_else(|| panic!("{path} not opened: {answer:?}")));
    }
    let [mut closes, mut ends, reset, mut hung_up] = <[_; 4]>::try_from(opened).ok().unwrap();
    // The upstream hangs up on the last after 300 ms: its stream ends.
    assert!(hung_up.ends(WITHIN).await);
    reaches(&sluice, GAUGE, 3.0).await;

    // A close handshake.
    closes.send(&masked(CLOSE, &[0x03, 0xe8])).await;
    assert!(closes.until_close(WITHIN).await.1.is_some());
    reaches(&sluice, GAUGE, 2.0).await;
    // The client ends its stream (END_STREAM): the server's side closes.
    ends.stream.shutdown().await.unwrap();
    let ended = upstream.conn(1).await;
    eventually(
        WITHIN,
        "the ended stream's upstream side closed",
        || async { ended.ended.load(Ordering::SeqCst) },
    )
    .await;
    reaches(&sluice, GAUGE, 1.0).await;
    // The client resets its stream (RST_STREAM).
    drop(reset);
    let reset = upstream.conn(2).await;
    eventually(
        WITHIN,
        "the reset stream's upstream side closed",
        || async { reset.ended.load(Ordering::SeqCst) },
    )
    .await;
    reaches(&sluice, GAUGE, 0.0).await;
    assert_eq!(client.get("/plain").await.status, StatusCode::OK);
}

const ONE_AT_A_TIME: &str = r#"
[[rule]]
name = "one-socket"
algorithm = "concurrency"
key = ["global"]
max_in_flight = 1
"#;

#[tokio::test]
async fn a_websocket_over_h2_holds_its_concurrency_permit_until_it_ends() {
    let upstream = WsUpstream::start().await;
    let (sluice, _dir) = sluice(&upstream, ONE_AT_A_TIME);
    let client = H2Client::connect(sluice.addr).await;
    let (_, first) = client.open("/first", &[]).await;
    let mut first = first.expect("first opened");
    first.text("hold").await;
    assert_eq!(first.next(WITHIN).await.unwrap().payload, b"hold");
    let (second, ws) = client.open("/second", &[]).await;
    assert!(ws.is_none());
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS, "{second:?}");

    first.send(&masked(CLOSE, &[0x03, 0xe8])).await;
    assert!(first.until_close(WITHIN).await.1.is_some());
    // The tunnel's task gives its permit back as it counts the tunnel
    // closed (the two are dropped together).
    reaches(&sluice, GAUGE, 0.0).await;
    let (answer, third) = client.open("/third", &[]).await;
    let mut third = third.unwrap_or_else(|| panic!("the permit never came back: {answer:?}"));
    third.text("again").await;
    assert_eq!(third.next(WITHIN).await.unwrap().payload, b"again");
}

#[tokio::test]
async fn an_upstream_whose_101_answers_another_key_is_a_502() {
    let upstream = WsUpstream::start().await;
    let (sluice, _dir) = sluice(&upstream, "");
    let client = H2Client::connect(sluice.addr).await;
    let (answer, ws) = client.open("/wrong-accept", &[]).await;
    assert!(ws.is_none());
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY, "{answer:?}");
    assert!(
        answer.body.contains("Sec-WebSocket-Accept"),
        "{}",
        answer.body
    );
    let seen = upstream.conn(0).await;
    eventually(WITHIN, "the upstream's connection was closed", || async {
        seen.ended.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    assert_eq!(series(&sluice, GAUGE).await, 0.0);
    // A right one on the same connection opens.
    assert!(client.open("/right", &[]).await.1.is_some());
}

#[tokio::test]
async fn another_protocol_is_refused_501() {
    let upstream = WsUpstream::start().await;
    let (sluice, _dir) = sluice(&upstream, "");
    let client = H2Client::connect(sluice.addr).await;
    let (answer, opened) = client.connect_for("/udp", Some("connect-udp"), &[]).await;
    assert!(opened.is_none());
    assert_eq!(answer.status, StatusCode::NOT_IMPLEMENTED, "{answer:?}");
    assert_eq!(answer.headers["content-type"], "application/problem+json");
    assert!(answer.body.contains("websocket"), "{}", answer.body);
    assert!(upstream.conns.lock().unwrap().is_empty());
}

/// sluice in front of the h2c `upstream`.
fn sluice_h2c(upstream: &H2WsUpstream, rest: &str) -> (SluiceProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n\n[server]\nlisten = \"127.0.0.1:0\"\n\
         upstream = \"ws\"\n\n[[upstream]]\nname = \"ws\"\nprotocol = \"h2c\"\n\
         servers = [\"http://{}\"]\n{rest}",
        upstream.addr
    );
    (
        SluiceProcess::spawn(&write_config(dir.path(), &config)),
        dir,
    )
}

#[tokio::test]
async fn an_h2c_upstream_that_advertises_extended_connect_carries_websockets() {
    let upstream = H2WsUpstream::start(true).await;
    let (sluice, _dir) = sluice_h2c(&upstream, MESSAGES);
    let client = H2Client::connect(sluice.addr).await;
    let asked = [("sec-websocket-protocol", "chat, superchat")];
    let (answer, ws) = client.open("/chat", &asked).await;
    let mut ws = ws.unwrap_or_else(|| panic!("not opened: {answer:?}"));
    assert_eq!(answer.headers["sec-websocket-protocol"], "chat");
    // The upstream echoes bytes: the client's own masked frames.
    let sent = [masked(TEXT, b"over h2"), masked(BINARY, &[9; 3000])].concat();
    ws.send(&sent).await;
    assert_eq!(ws.next(WITHIN).await.unwrap().payload, b"over h2");
    assert_eq!(ws.next(WITHIN).await.unwrap().payload, [9; 3000]);
    // Message rules count it as any other.
    ws.text("third").await;
    let (_, close) = ws.until_close(WITHIN).await;
    assert_eq!(close, Some((1008, "rate limited: msgs".to_owned())));

    let received = upstream.received();
    assert_eq!(received.len(), 1, "{received:?}");
    let connect = &received[0];
    assert_eq!(connect.method, http::Method::CONNECT);
    assert_eq!(connect.protocol.as_deref(), Some("websocket"));
    assert_eq!(connect.path, "/chat");
    assert_eq!(connect.headers["sec-websocket-version"], "13");
    assert_eq!(connect.headers["sec-websocket-protocol"], "chat, superchat");
    assert!(!connect.headers.contains_key("sec-websocket-key"));

    // An HTTP/1.1 client's WebSocket goes the same way, its own key
    // answered as an HTTP/1.1 server would.
    let (status, mut http1) = WsClient::connect(sluice.addr, "/other", &[]).await;
    assert_eq!(status, 101);
    http1.text("from http/1.1").await;
    assert_eq!(http1.next(WITHIN).await.unwrap().payload, b"from http/1.1");
    reaches(&sluice, GAUGE, 1.0).await;
}

#[tokio::test]
async fn an_h2c_upstream_that_does_not_advertise_it_is_a_502_that_says_why() {
    let upstream = H2WsUpstream::start(false).await;
    let (sluice, _dir) = sluice_h2c(&upstream, "");
    let client = H2Client::connect(sluice.addr).await;
    let (answer, ws) = client.open("/chat", &[]).await;
    assert!(ws.is_none());
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY, "{answer:?}");
    assert!(
        answer.body.contains("does not advertise extended CONNECT"),
        "{}",
        answer.body
    );
    // Nothing was sent for it, and the upstream serves plain requests.
    assert!(upstream.received().is_empty());
    assert_eq!(client.get("/plain").await.body, "plain");
    assert_eq!(upstream.received().len(), 1);
    assert_eq!(series(&sluice, GAUGE).await, 0.0);
}

#[tokio::test]
async fn a_tls_listener_that_chose_h2_advertises_and_carries_websockets_too() {
    let upstream = WsUpstream::start().await;
    let ca = TestCa::new("sluice test CA");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.write_leaf(dir.path(), "localhost", &["localhost", "127.0.0.1"]);
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:0\"\n\n[server]\nlisten = \"127.0.0.1:0\"\n\
         upstream = \"http://{}\"\n\n[server.tls]\n\
         certs = [{{ cert = \"{}\", key = \"{}\" }}]\n",
        upstream.addr,
        cert.display(),
        key.display()
    );
    let sluice = SluiceProcess::spawn(&write_config(dir.path(), &config));
    let connector = tls_client::verifying(ca.pem(), H2_AND_H1);
    let stream = tls_client::connect(&connector, sluice.addr, "localhost").await;
    assert_eq!(tls_client::alpn(&stream).as_deref(), Some(&b"h2"[..]));
    let client = H2Client::over(stream).await;
    assert!(
        client.advertised().await,
        "no SETTINGS_ENABLE_CONNECT_PROTOCOL"
    );
    let (answer, ws) = client.open("/secure", &[]).await;
    let mut ws = ws.unwrap_or_else(|| panic!("not opened: {answer:?}"));
    ws.text("over tls").await;
    assert_eq!(ws.next(WITHIN).await.unwrap().payload, b"over tls");
    reaches(&sluice, GAUGE, 1.0).await;
}

/// Longer than the connection's `idle_timeout` below: silence on purpose.
const PAST_CONNECTION_IDLE: Duration = Duration::from_millis(2500);

#[tokio::test]
async fn a_quiet_websocket_keeps_its_connection_past_the_connections_idle_timeout() {
    let upstream = WsUpstream::start().await;
    let (sluice, _dir) = sluice(&upstream, "idle_timeout = \"1s\"\n");
    let client = H2Client::connect(sluice.addr).await;
    let (_, ws) = client.open("/quiet", &[]).await;
    let mut ws = ws.expect("opened");
    // Neither side sends; the tunnel's own clock is 5 minutes.
    tokio::time::sleep(PAST_CONNECTION_IDLE).await;
    assert!(
        client.is_up(),
        "the connection was closed under its WebSocket"
    );
    ws.text("still open").await;
    assert_eq!(ws.next(WITHIN).await.unwrap().payload, b"still open");
    // Once it ends, the connection is idle again, and closes.
    ws.send(&masked(CLOSE, &[0x03, 0xe8])).await;
    assert!(ws.until_close(WITHIN).await.1.is_some());
    eventually(WITHIN, "the idle connection closed", || async {
        !client.is_up()
    })
    .await;
}
