//! Clients that hold what they open, from docs/edge-behaviour.md's "Hostile
//! inputs" table, rows B9–B12: HTTP/2 streams whose flow-control window
//! stays shut (B9), connections that never finish a request head (B10),
//! HTTP/2 requests with more fields than `max_headers` (B11), and
//! connections used as an endless source of requests (B12). HTTP/2 is
//! spoken by the `h2` crate where it can, by raw frames where a client
//! library would not (a header block left open, GOAWAY ignored). sluice
//! runs as the real binary, so its descriptors are its own.

use crate::hostile_slow::{closed_within, fds, fds_settle, read_response, spawn, warm_up, GET};

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types and flags (RFC 9113 §6).
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// One HTTP/2 frame.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The header block of `GET http://a.example{path}`, HPACK without
/// indexing, so that blocks can be sent in any order.
fn get_block(path: &str) -> Vec<u8> {
    // :method GET, :scheme http (static table 2 and 6).
    let mut block = vec![0x82, 0x86];
    // :path, then :authority, literal values of indexed names.
    block.extend([0x04, path.len() as u8]);
    block.extend_from_slice(path.as_bytes());
    block.extend([0x01, 9]);
    block.extend_from_slice(b"a.example");
    block
}

/// A raw HTTP/2 connection: the preface and empty settings sent.
async fn raw_h2(addr: std::net::SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    stream.write_all(&hello).await.unwrap();
    stream
}

/// A frame sluice sent: its type, flags, stream and payload.
#[derive(Debug)]
struct Received {
    kind: u8,
    stream: u32,
    payload: Vec<u8>,
}

/// Reads `stream` to its end (or `limit`), splitting what came into
/// frames; the instant it ended, `None` if it did not within `limit`.
async fn frames_until_closed(
    stream: &mut TcpStream,
    limit: Duration,
) -> (Vec<Received>, Option<Instant>) {
    let deadline = tokio::time::Instant::now() + limit;
    let mut bytes = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let ended = loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break Some(Instant::now()),
            Ok(Ok(n)) => bytes.extend_from_slice(&buffer[..n]),
            Err(_) => break None,
        }
    };
    (parse_frames(&bytes), ended)
}

/// The whole frames in `bytes`.
fn parse_frames(bytes: &[u8]) -> Vec<Received> {
    let mut frames = Vec::new();
    let mut at = 0;
    while bytes.len() >= at + 9 {
        let len =
            (bytes[at] as usize) << 16 | (bytes[at + 1] as usize) << 8 | bytes[at + 2] as usize;
        if bytes.len() < at + 9 + len {
            break;
        }
        let stream = u32::from_be_bytes(bytes[at + 5..at + 9].try_into().unwrap()) & 0x7fff_ffff;
        frames.push(Received {
            kind: bytes[at + 3],
            stream,
            payload: bytes[at + 9..at + 9 + len].to_vec(),
        });
        at += 9 + len;
    }
    frames
}

/// Upstream connections open now.
fn upstream_open(upstream: &crate::support::Upstream) -> u64 {
    use std::sync::atomic::Ordering;
    upstream.connections.load(Ordering::SeqCst) - upstream.closed.load(Ordering::SeqCst)
}

fn h2_get(path: &str) -> http::Request<()> {
    http::Request::get(format!("http://a.example{path}"))
        .body(())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b9_a_stream_whose_window_stays_shut_is_reset_at_send_timeout_and_its_upstream_released() {
    let (upstream, sluice, _dir) = spawn("send_timeout = \"1s\"\n", "").await;
    let pid = sluice.child.id();
    warm_up(&sluice).await;
    let baseline = fds(pid);
    let pooled = upstream_open(&upstream);

    // Every stream's window at zero: sluice can send each answer's head,
    // and not a byte of its body.
    let tcp = TcpStream::connect(sluice.addr).await.unwrap();
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    const STREAMS: usize = 20;
    let mut stalled = Vec::new();
    for _ in 0..STREAMS {
        let mut ready = send.clone().ready().await.unwrap();
        // The clock starts once sluice has the answer, after the request
        // was sent: the reset comes at least send_timeout after this.
        let sent = Instant::now();
        let (response, _) = ready
            .send_request(h2_get("/download/8388608"), true)
            .unwrap();
        stalled.push(tokio::spawn(async move {
            let response = response.await.unwrap();
            assert_eq!(response.status(), 200);
            let mut body = response.into_body();
            let ended = tokio::time::timeout(Duration::from_secs(5), body.data())
                .await
                .expect("the stalled stream was never reset");
            (
                sent.elapsed(),
                ended.map(|data| data.map(|data| data.len())),
            )
        }));
    }
    // Held meanwhile: one upstream connection per stream.
    let what = "the stalled streams never all reached the upstream";
    crate::support::eventually(Duration::from_secs(5), what, || async {
        upstream_open(&upstream) >= STREAMS as u64
    })
    .await;

    for stream in stalled {
        let (after, ended) = stream.await.unwrap();
        let error = ended
            .expect("a reset, not the end of the body")
            .expect_err("no byte of the body can have come");
        assert_eq!(error.reason(), Some(h2::Reason::CANCEL), "{error:?}");
        assert!(after >= Duration::from_secs(1), "reset after {after:?}");
        assert!(after <= Duration::from_secs(3), "reset after {after:?}");
    }
    // Their upstream connections are closed, and sluice holds no more
    // descriptors than the one of this client connection, which goes on.
    let what = "the stalled streams' upstream connections were kept";
    crate::support::eventually(Duration::from_secs(3), what, || async {
        upstream_open(&upstream) <= pooled
    })
    .await;
    let settled = fds_settle(pid, baseline + 1, Duration::from_secs(3)).await;
    assert!(
        settled <= baseline + 1,
        "fds {settled} > baseline {baseline} + 1"
    );
    assert!(
        !connection.is_finished(),
        "the connection itself was closed"
    );
    let got = crate::support::get_h2(&sluice.url("/"), &[]).await;
    assert_eq!(got.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b9_a_client_that_reads_slowly_but_steadily_gets_the_whole_answer() {
    let (_upstream, sluice, _dir) = spawn("send_timeout = \"1s\"\n", "").await;
    // Each piece read is given back as window at about 40 KB/s: 16 KiB in
    // well under a send_timeout, though the whole answer takes several.
    let tcp = TcpStream::connect(sluice.addr).await.unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut ready = send.ready().await.unwrap();
    let (response, _) = ready
        .send_request(h2_get("/download/196608"), true)
        .unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let started = Instant::now();
    let mut body = response.into_body();
    let mut received = 0;
    while let Some(data) = body.data().await {
        let data = data.expect("the slow reader's stream was reset");
        received += data.len();
        client_pauses(Duration::from_secs_f64(data.len() as f64 / 40_000.0)).await;
        body.flow_control().release_capacity(data.len()).unwrap();
    }
    assert_eq!(received, 196_608);
    // It did take longer than send_timeout, several times over.
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b10_a_connection_that_sends_nothing_is_closed_at_header_read_timeout() {
    let (_upstream, sluice, _dir) = spawn(
        "header_read_timeout = \"500ms\"\nidle_timeout = \"60s\"\n",
        "",
    )
    .await;
    // HTTP/1.1: not a byte. Closed quietly: there is no request to answer.
    let connected = Instant::now();
    let mut silent = TcpStream::connect(sluice.addr).await.unwrap();
    let mut received = Vec::new();
    let read =
        tokio::time::timeout(Duration::from_secs(3), silent.read_to_end(&mut received)).await;
    assert!(read.is_ok(), "the silent connection was kept");
    let lived = connected.elapsed();
    assert!(
        received.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&received)
    );
    assert!(lived >= Duration::from_millis(450), "{lived:?}");
    assert!(lived <= Duration::from_millis(1500), "{lived:?}");

    // HTTP/2: the preface and settings, then no request.
    let connected = Instant::now();
    let mut silent = raw_h2(sluice.addr).await;
    let (_, ended) = frames_until_closed(&mut silent, Duration::from_secs(3)).await;
    let lived = ended.expect("the HTTP/2 connection without a request was kept") - connected;
    assert!(lived >= Duration::from_millis(450), "{lived:?}");
    assert!(lived <= Duration::from_millis(1500), "{lived:?}");

    // A first request in time keeps the connection to idle_timeout.
    let mut kept = TcpStream::connect(sluice.addr).await.unwrap();
    client_pauses(Duration::from_millis(200)).await;
    kept.write_all(GET).await.unwrap();
    let got = read_response(&mut kept, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(got.status, 200);
    assert!(!closed_within(&mut kept, Duration::from_millis(1500)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b10_a_header_block_without_its_last_continuation_closes_the_connection_at_header_read_timeout(
) {
    let (upstream, sluice, _dir) =
        spawn("header_read_timeout = \"1s\"\nidle_timeout = \"60s\"\n", "").await;
    // A slow request in flight (the other read clocks stop for it), then a
    // second request's block begun and never ended.
    let mut stream = raw_h2(sluice.addr).await;
    let mut bytes = frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        1,
        &get_block("/slow/5000"),
    );
    bytes.extend(frame(HEADERS, END_STREAM, 3, &get_block("/")));
    stream.write_all(&bytes).await.unwrap();
    let begun = Instant::now();
    let (frames, ended) = frames_until_closed(&mut stream, Duration::from_secs(4)).await;
    let lived = ended.expect("the connection with an open header block was kept") - begun;
    assert!(lived >= Duration::from_millis(900), "{lived:?}");
    assert!(lived <= Duration::from_millis(2500), "{lived:?}");
    assert!(
        !frames.iter().any(|f| f.kind == HEADERS && f.stream == 3),
        "{frames:?}"
    );
    assert_eq!(upstream.count(), 1);

    // A block whose last CONTINUATION comes in time is a request like any.
    let mut stream = raw_h2(sluice.addr).await;
    let block = get_block("/");
    let (first, last) = block.split_at(3);
    stream
        .write_all(&frame(HEADERS, END_STREAM, 1, first))
        .await
        .unwrap();
    client_pauses(Duration::from_millis(600)).await;
    stream
        .write_all(&frame(CONTINUATION, END_HEADERS, 1, last))
        .await
        .unwrap();
    let (frames, ended) = frames_until_closed(&mut stream, Duration::from_millis(1500)).await;
    assert!(ended.is_none(), "the connection was closed: {frames:?}");
    assert!(
        frames.iter().any(|f| f.kind == HEADERS && f.stream == 1),
        "{frames:?}"
    );
    assert_eq!(upstream.count(), 2);
}

/// An HTTP/2 request with `fields` fields of its own besides its pseudo
/// fields, on a fresh connection; its status and body.
async fn h2_with_fields(addr: std::net::SocketAddr, fields: usize) -> (u16, serde_json::Value) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut request = h2_get("/");
    for i in 0..fields {
        let name = http::HeaderName::from_bytes(format!("x{i}").as_bytes()).unwrap();
        request
            .headers_mut()
            .insert(name, http::HeaderValue::from_static("v"));
    }
    let mut ready = send.ready().await.unwrap();
    let (response, _) = ready.send_request(request, true).unwrap();
    let response = response.await.unwrap();
    let status = response.status().as_u16();
    let problem = response
        .headers()
        .get("content-type")
        .is_some_and(|value| value == "application/problem+json");
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(data) = body.data().await {
        bytes.extend_from_slice(&data.unwrap());
    }
    let json = if problem {
        serde_json::from_slice(&bytes).unwrap()
    } else {
        serde_json::Value::Null
    };
    (status, json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b11_an_http2_request_with_more_fields_than_max_headers_is_431() {
    let (upstream, sluice, _dir) = spawn("", "").await;
    // The probe's 800 fields, small enough for max_header_bytes.
    let (status, problem) = h2_with_fields(sluice.addr, 800).await;
    assert_eq!(status, 431);
    assert_eq!(problem["status"], 431, "{problem}");
    assert!(
        problem["detail"].as_str().unwrap().contains("100"),
        "{problem}"
    );
    assert_eq!(upstream.count(), 0);

    // Counted as HTTP/1.1 lines: with :authority as Host, 49 fields are
    // 50 lines, 50 fields one too many (the test upstream takes 100).
    let (upstream, sluice, _dir) = spawn("max_headers = 50\n", "").await;
    assert_eq!(h2_with_fields(sluice.addr, 50).await.0, 431);
    assert_eq!(upstream.count(), 0);
    assert_eq!(h2_with_fields(sluice.addr, 49).await.0, 200);
    assert_eq!(upstream.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b12_an_http1_connection_carries_max_requests_per_connection_then_closes() {
    let (upstream, sluice, _dir) = spawn("max_requests_per_connection = 3\n", "").await;
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
    for i in 1..=3 {
        stream.write_all(GET).await.unwrap();
        let got = read_response(&mut stream, Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(got.status, 200);
        assert_eq!(got.head.contains("connection: close"), i == 3, "{got:?}");
    }
    assert!(closed_within(&mut stream, Duration::from_secs(3)).await);
    // Pipelined, five at once: three answers, then the close.
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
    stream.write_all(&GET.repeat(5)).await.unwrap();
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut received))
        .await
        .expect("the connection was not closed after its third answer")
        .ok();
    let text = String::from_utf8_lossy(&received);
    assert_eq!(text.matches("HTTP/1.1 200 ").count(), 3, "{text}");
    assert_eq!(upstream.count(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b12_streams_reset_just_after_they_were_sent_cannot_make_more_upstream_requests_than_the_cap(
) {
    let (upstream, sluice, _dir) = spawn("max_requests_per_connection = 50\n", "").await;
    let tcp = TcpStream::connect(sluice.addr).await.unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    let connection = tokio::spawn(connection);
    // The probe's client: each stream reset 3 ms after it was sent, long
    // enough for sluice to accept it; as many as the connection takes.
    let mut sent = 0;
    let started = Instant::now();
    while sent < 5_000 && started.elapsed() < Duration::from_secs(10) {
        let Ok(mut ready) = send.clone().ready().await else {
            break;
        };
        let Ok((_response, mut stream)) = ready.send_request(h2_get("/slow/50"), false) else {
            break;
        };
        sent += 1;
        client_pauses(Duration::from_millis(3)).await;
        stream.send_reset(h2::Reason::CANCEL);
    }
    assert!(sent >= 50, "only {sent} streams were sent");
    // GOAWAY told the client to stop; the connection ends once its streams
    // are done.
    let ended = tokio::time::timeout(Duration::from_secs(5), connection)
        .await
        .expect("the connection outlived its GOAWAY")
        .unwrap();
    if let Err(error) = ended {
        assert!(error.is_go_away() || error.is_io(), "{error:?}");
        if error.is_go_away() {
            assert_eq!(error.reason(), Some(h2::Reason::NO_ERROR), "{error:?}");
        }
    }
    assert!(
        upstream.count() <= 50,
        "{} upstream requests",
        upstream.count()
    );
    assert!(sent < 5_000, "all {sent} streams were sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b12_a_client_that_ignores_goaway_is_refused_then_disconnected() {
    let (upstream, sluice, _dir) = spawn("max_requests_per_connection = 50\n", "").await;
    // Raw frames: the PING that would end the graceful GOAWAY is never
    // answered, and streams go on being opened after it, 50 at a time.
    let stream = raw_h2(sluice.addr).await;
    let (mut reading, mut writing) = stream.into_split();
    let reader = tokio::spawn(async move {
        let mut bytes = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(20), reading.read_to_end(&mut bytes)).await;
        bytes
    });
    let mut id = 1u32;
    let mut opened = 0;
    'sending: for _ in 0..60 {
        let mut batch = Vec::new();
        for _ in 0..50 {
            batch.extend(frame(
                HEADERS,
                END_STREAM | END_HEADERS,
                id,
                &get_block("/"),
            ));
            id += 2;
        }
        if writing.write_all(&batch).await.is_err() {
            break 'sending;
        }
        opened += 50;
        client_pauses(Duration::from_millis(20)).await;
        if reader.is_finished() {
            break;
        }
    }
    let frames = parse_frames(&reader.await.unwrap());
    let goaway = frames
        .iter()
        .find(|frame| frame.kind == GOAWAY)
        .expect("no GOAWAY");
    assert_eq!(&goaway.payload[4..8], &[0, 0, 0, 0], "GOAWAY NO_ERROR");
    let refused = frames
        .iter()
        .filter(|frame| frame.kind == RST_STREAM && frame.payload[..] == [0, 0, 0, 7])
        .count();
    assert!(refused >= 100, "{refused} streams refused");
    assert!(opened < 3_000, "all {opened} streams were sent");
    assert!(
        upstream.count() <= 50,
        "{} upstream requests",
        upstream.count()
    );
}

/// The client waits before its next step: a pause that is the behaviour
/// under test (a slow reader, a late first request, a late CONTINUATION,
/// a reset just after a request), not a wait for sluice.
async fn client_pauses(pause: Duration) {
    tokio::time::sleep(pause).await;
}
