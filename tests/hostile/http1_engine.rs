//! sluice's one HTTP/1.1 engine, on both sides, through the real binary:
//! each kind of request and answer the issue lists (bodies framed by length
//! and chunked, with extensions and trailers; `Expect: 100-continue`, its
//! refusal included; early answers; pipelining after a body; HTTP/1.0,
//! close-delimited answers, `HEAD`, `204` and `304`; a WebSocket tunnel's
//! first bytes), with the exact bytes each side got where framing matters,
//! and a following request on the same connection read as it should be
//! (docs/edge-behaviour.md, "Request framing" and "Answers").

use crate::support;
use crate::wire;

use std::net::SocketAddr;
use std::time::Duration;

use support::{write_config, SluiceProcess};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use wire::{Action, RawRequest, RawUpstream, Received};

/// The real binary in front of `upstream`; `rest` follows `[server]`'s
/// upstream line.
struct Proxied {
    sluice: SluiceProcess,
    _dir: tempfile::TempDir,
}

fn proxied_to(upstream: SocketAddr, rest: &str) -> Proxied {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{upstream}\"\n{rest}\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n"
    );
    let sluice = SluiceProcess::spawn(&write_config(dir.path(), &toml));
    wire::serve_plain_at(sluice.addr);
    Proxied { sluice, _dir: dir }
}

async fn behind(
    rest: &str,
    script: impl Fn(&RawRequest) -> Action + Send + Sync + 'static,
) -> (RawUpstream, Proxied) {
    let upstream = RawUpstream::start(script).await;
    let proxied = proxied_to(upstream.addr, rest);
    (upstream, proxied)
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// What the upstream got on its connections, each request id sluice made
/// shown as `<id>`.
fn upstream_text(upstream: &RawUpstream) -> String {
    let text = upstream.all_bytes();
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("x-request-id: ") {
        let start = at + "x-request-id: ".len();
        out.push_str(&rest[..start]);
        out.push_str("<id>");
        rest = &rest[start..];
        rest = &rest[rest.find("\r\n").unwrap_or(rest.len())..];
    }
    out.push_str(rest);
    out
}

/// The head sluice writes for a request to `target` from the test client,
/// before its framing field.
fn forwarded_head(method: &str, target: &str) -> String {
    format!(
        "{method} {target} HTTP/1.1\r\nhost: h\r\nx-forwarded-for: 127.0.0.1\r\n\
         x-forwarded-proto: http\r\nx-forwarded-host: h\r\nx-request-id: <id>\r\n"
    )
}

async fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// Writes `bytes` and reads every answer they draw ([`wire::read_answers`]).
async fn send(stream: &mut TcpStream, bytes: &[u8]) -> Received {
    stream.write_all(bytes).await.unwrap();
    wire::read_answers(stream, bytes).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_framed_by_length_goes_up_with_its_length_and_the_next_request_follows() {
    let (upstream, proxied) = behind("", |_| Action::Reply(OK.to_vec())).await;
    let mut client = connect(proxied.sluice.addr).await;
    let got = send(
        &mut client,
        b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello\
          GET /b HTTP/1.1\r\nHost: h\r\n\r\n",
    )
    .await;
    assert_eq!(got.statuses(), [200, 200], "{}", got.text());
    assert!(!got.closed);
    assert_eq!(
        upstream_text(&upstream),
        format!(
            "{}content-length: 5\r\n\r\nhello{}\r\n",
            forwarded_head("POST", "/a"),
            forwarded_head("GET", "/b")
        )
    );
    assert_eq!(
        upstream.conns().len(),
        1,
        "one upstream connection for both"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_that_came_whole_goes_up_as_its_data() {
    // Extensions are the client's framing: dropped, as nginx drops them.
    // Without trailer fields the data goes up with its length; with them
    // it goes up chunked (they would reach an HTTP/2 upstream; an HTTP/1.1
    // one gets none, as from hyper's client).
    let (upstream, proxied) = behind("", |_| Action::Reply(OK.to_vec())).await;
    let mut client = connect(proxied.sluice.addr).await;
    let got = send(
        &mut client,
        b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n\
          5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\n\r\n\
          POST /d HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n\
          5\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n\
          GET /next HTTP/1.1\r\nHost: h\r\n\r\n",
    )
    .await;
    assert_eq!(got.statuses(), [200, 200, 200], "{}", got.text());
    assert!(!got.closed);
    assert_eq!(
        upstream_text(&upstream),
        format!(
            "{}content-length: 11\r\n\r\nhello world\
             {}transfer-encoding: chunked\r\n\r\nB\r\nhello world\r\n0\r\n\r\n\
             {}\r\n",
            forwarded_head("POST", "/c"),
            forwarded_head("POST", "/d"),
            forwarded_head("GET", "/next")
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_that_trickles_in_streams_up_chunked_and_the_next_request_follows() {
    let (upstream, proxied) = behind("", |_| Action::Reply(OK.to_vec())).await;
    let mut client = connect(proxied.sluice.addr).await;
    let pieces: [&[u8]; 4] = [
        b"PUT /t HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe",
        b"llo\r\n",
        b"6;last=no\r\n world\r\n",
        b"0\r\nX-Sum: 11\r\n\r\nGET /after HTTP/1.1\r\nHost: h\r\n\r\n",
    ];
    // The trickle under test: each piece its own read at sluice.
    const TRICKLE: Duration = Duration::from_millis(50);
    let (last, trickled) = pieces.split_last().unwrap();
    for piece in trickled {
        client.write_all(piece).await.unwrap();
        tokio::time::sleep(TRICKLE).await;
    }
    let got = send(&mut client, last).await;
    assert_eq!(got.statuses(), [200, 200], "{}", got.text());
    assert!(!got.closed);
    let text = upstream_text(&upstream);
    // Re-chunked by sluice as the data came: a chunk per piece it read
    // (the first three bytes, then the rest of the first chunk, ...).
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    assert_eq!(
        format!("{head}\r\n"),
        format!(
            "{}transfer-encoding: chunked\r\n",
            forwarded_head("PUT", "/t")
        )
    );
    let requests = upstream.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body, b"hello world");
    assert_eq!(requests[1].target, "/after");
    assert!(rest.contains("0\r\n\r\nGET /after"), "{rest}");
    assert!(!rest.to_lowercase().contains("x-sum") && !rest.contains("last=no"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_is_answered_when_the_body_is_wanted() {
    let (upstream, proxied) = behind("", |_| Action::Reply(OK.to_vec())).await;
    let mut client = connect(proxied.sluice.addr).await;
    client
        .write_all(
            b"POST /e HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
        )
        .await
        .unwrap();
    let interim = wire::read_until_answered(&mut client).await;
    assert_eq!(interim.text(), "HTTP/1.1 100 Continue\r\n\r\n");
    let got = send(&mut client, b"helloGET /f HTTP/1.1\r\nHost: h\r\n\r\n").await;
    assert_eq!(got.statuses(), [200, 200], "{}", got.text());
    // The expectation was sluice's to answer: it does not go up.
    assert_eq!(
        upstream_text(&upstream),
        format!(
            "{}content-length: 5\r\n\r\nhello{}\r\n",
            forwarded_head("POST", "/e"),
            forwarded_head("GET", "/f")
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_expecting_request_is_answered_before_its_body_and_the_connection_closes() {
    let rule = "[[rule]]\nname = \"none\"\nkey = [\"global\"]\nrate = \"0/m\"\n";
    let (upstream, proxied) = behind(rule, |_| Action::Reply(OK.to_vec())).await;
    let mut client = connect(proxied.sluice.addr).await;
    let got = send(
        &mut client,
        b"POST /e HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n",
    )
    .await;
    // The refusal, never a 100: the body is not wanted.
    assert!(!got.text().contains("100 Continue"), "{}", got.text());
    assert_eq!(got.statuses(), [429], "{}", got.text());
    let refusal = &got.responses()[0];
    assert_eq!(refusal.header("connection"), Some("close"));
    // Whether the client sends the body now or not cannot be told from
    // what comes next: the connection is closed.
    assert!(got.closed);
    assert!(upstream.conns().is_empty());
}

/// An upstream that reads a request's head only, then answers at once with
/// `answer` and closes: an early answer to a body it never reads.
async fn early_answering(answer: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buffer = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buffer[..n]),
                    }
                }
                let _ = stream.write_all(answer).await;
                // Read what still comes, so that the close is orderly.
                let _ = stream.shutdown().await;
                while matches!(stream.read(&mut buffer).await, Ok(1..)) {}
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_answer_reaches_the_client_and_the_unread_body_is_never_a_next_request() {
    const TOO_LARGE: &[u8] =
        b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbig!";
    let upstream = early_answering(TOO_LARGE).await;
    let proxied = proxied_to(upstream, "");
    let mut client = connect(proxied.sluice.addr).await;
    client
        .write_all(b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 1000000\r\n\r\n")
        .await
        .unwrap();
    // The body that follows holds what would be a request.
    let hidden = b"GET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n".repeat(100);
    let _ = client.write_all(&hidden).await;
    let got = wire::read_answers(&mut client, &hidden).await;
    assert_eq!(got.statuses(), [413], "{}", got.text());
    assert_eq!(got.responses()[0].body, b"big!");
    assert_eq!(got.responses()[0].header("connection"), Some("close"));
    assert!(got.closed, "a body never read whole closes the connection");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_streamed_while_the_body_goes_up_carries_both_ways() {
    // The upstream answers its head at once, reads the whole body, then
    // ends its answer with the length it read; the client sends its body
    // only once it saw the answer's head.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut read = Vec::new();
        let mut buffer = [0u8; 4096];
        while !read.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buffer).await.unwrap();
            read.extend_from_slice(&buffer[..n]);
        }
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            .await
            .unwrap();
        let head_end = read.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let mut body = read.len() - head_end;
        while body < 20_000 {
            body += stream.read(&mut buffer).await.unwrap();
        }
        let text = body.to_string();
        let chunk = format!("{:x}\r\n{text}\r\n0\r\n\r\n", text.len());
        stream.write_all(chunk.as_bytes()).await.unwrap();
        while matches!(stream.read(&mut buffer).await, Ok(1..)) {}
    });
    let proxied = proxied_to(addr, "");
    let mut client = connect(proxied.sluice.addr).await;
    client
        .write_all(b"POST /duplex HTTP/1.1\r\nHost: h\r\nContent-Length: 20000\r\n\r\n")
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buffer))
            .await
            .expect("the answer's head before the body")
            .unwrap();
        head.extend_from_slice(&buffer[..n]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200 OK\r\n"));
    client.write_all(&[b'd'; 20_000]).await.unwrap();
    // The rest of the answer: up to its last chunk.
    let rest = wire::read_until(&mut client, |bytes| bytes.ends_with(b"0\r\n\r\n")).await;
    let mut whole = head.clone();
    whole.extend_from_slice(&rest.bytes);
    let responses = wire::parse_responses(&whole);
    assert_eq!(responses.len(), 1);
    assert!(responses[0].complete);
    assert_eq!(responses[0].body, b"20000");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_after_bodies_are_each_answered_in_order() {
    let (upstream, proxied) = behind("", |request| {
        let body = format!("{}:{}", request.target, request.body.len());
        Action::Reply(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    })
    .await;
    let payload = concat!(
        "POST /1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc",
        "GET /2 HTTP/1.1\r\nHost: h\r\n\r\n",
        "POST /3 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nde\r\n0\r\n\r\n",
        "PUT /4 HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
        "GET /5 HTTP/1.1\r\nHost: h\r\n\r\n",
    );
    let mut client = connect(proxied.sluice.addr).await;
    let got = send(&mut client, payload.as_bytes()).await;
    let bodies: Vec<String> = got
        .responses()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    assert_eq!(
        bodies,
        ["/1:3", "/2:0", "/3:2", "/4:0", "/5:0"],
        "{}",
        got.text()
    );
    assert!(!got.closed);
    // A declared zero goes up as such; no length was made up for a GET.
    let text = upstream_text(&upstream);
    assert!(
        text.contains(&format!(
            "{}content-length: 0\r\n\r\n",
            forwarded_head("PUT", "/4")
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("{}\r\nPOST /3", forwarded_head("GET", "/2"))),
        "{text}"
    );
    assert_eq!(upstream.conns().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_1_0_client_gets_an_http_1_1_answer_with_a_length_or_a_close() {
    let (_upstream, proxied) = behind("", |request| match request.target.as_str() {
        "/chunked" => Action::Reply(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
                .to_vec(),
        ),
        _ => Action::Reply(OK.to_vec()),
    })
    .await;
    // Kept alive, an answer of unknown length: no length to give, no chunks
    // an HTTP/1.0 client reads, so the close ends it, and the head says so
    // (the defect hyper's server had: `connection: keep-alive` and no length).
    let mut client = connect(proxied.sluice.addr).await;
    let got = send(
        &mut client,
        b"GET /chunked HTTP/1.0\r\nHost: h\r\nConnection: keep-alive\r\n\r\n",
    )
    .await;
    let text = got.text();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
    assert!(
        !text.contains("keep-alive") && !text.contains("chunked"),
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\nhello"), "{text}");
    assert!(got.closed);
    // Kept alive, an answer with a length: kept, and a next request read.
    let mut client = connect(proxied.sluice.addr).await;
    client
        .write_all(b"GET /ok HTTP/1.0\r\nHost: h\r\nConnection: keep-alive\r\n\r\n")
        .await
        .unwrap();
    let got = wire::read_until_answered(&mut client).await;
    assert!(got.text().starts_with("HTTP/1.1 200 OK\r\n"));
    let kept = &got.responses()[0];
    assert_eq!(
        kept.header("connection"),
        Some("keep-alive"),
        "{}",
        got.text()
    );
    assert_eq!(kept.header("content-length"), Some("2"));
    assert!(!got.closed);
    let got = send(&mut client, b"GET /ok HTTP/1.0\r\nHost: h\r\n\r\n").await;
    assert_eq!(got.statuses(), [200]);
    // Not kept alive: the close is said.
    assert_eq!(got.responses()[0].header("connection"), Some("close"));
    assert!(got.closed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_204_304_and_close_delimited_answers_to_bodies_keep_the_client_connection() {
    let (_upstream, proxied) = behind("", |request| match request.target.as_str() {
        "/head" => Action::Reply(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n".to_vec()),
        "/no-content" => Action::Reply(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()),
        "/not-modified" => {
            Action::Reply(b"HTTP/1.1 304 Not Modified\r\netag: \"e\"\r\n\r\n".to_vec())
        }
        "/until-close" => Action::ReplyAndClose(b"HTTP/1.0 200 OK\r\n\r\nto the end".to_vec()),
        _ => Action::Reply(OK.to_vec()),
    })
    .await;
    let payload = concat!(
        "HEAD /head HTTP/1.1\r\nHost: h\r\n\r\n",
        "POST /no-content HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi",
        "PUT /not-modified HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi",
        "POST /until-close HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi",
        "GET /last HTTP/1.1\r\nHost: h\r\n\r\n",
    );
    let mut client = connect(proxied.sluice.addr).await;
    let got = send(&mut client, payload.as_bytes()).await;
    let text = got.text();
    // HEAD's answer: the GET's length and no body, so the next answer
    // follows its head at once.
    assert!(
        text.contains("content-length: 1000\r\n")
            && text.contains("\r\n\r\nHTTP/1.1 204 No Content\r\n"),
        "{text}"
    );
    let statuses: Vec<u16> = got.responses().iter().map(|r| r.status).collect();
    // (The HEAD's answer is read as one of length 1000 by the helper; the
    // raw text above shows it has none.)
    assert_eq!(statuses.first(), Some(&200), "{text}");
    assert!(
        text.contains("HTTP/1.1 304 Not Modified\r\netag: \"e\"\r\n"),
        "{text}"
    );
    assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
    assert!(text.contains("A\r\nto the end\r\n0\r\n\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\nok"), "{text}");
    assert!(!got.closed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_sent_behind_a_websocket_handshake_go_through_the_tunnel() {
    const SWITCHED: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
        Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
    let (upstream, proxied) = behind("", |_| Action::SwitchAndEcho(SWITCHED.to_vec())).await;
    let mut client = connect(proxied.sluice.addr).await;
    // A masked frame right behind the handshake, before its answer.
    client
        .write_all(
            b"GET /chat HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n\
              \x81\x82\x00\x00\x00\x00hi",
        )
        .await
        .unwrap();
    let got = wire::read_until(&mut client, |bytes| bytes.ends_with(b"hi")).await;
    let text = got.text();
    assert!(
        text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{text}"
    );
    assert!(text.contains("connection: upgrade\r\n"), "{text}");
    // The upstream echoes the frame back through the tunnel.
    assert!(got.bytes.ends_with(b"\x81\x82\x00\x00\x00\x00hi"), "{text}");
    assert!(upstream.all_bytes().ends_with("\u{0}\u{0}\u{0}\u{0}hi"));
}
