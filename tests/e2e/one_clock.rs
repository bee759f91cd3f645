//! One time source: on paused time the proxy's decisions and holds and
//! the connections' I/O deadlines read the same clock, so one test drives
//! a hold and a body timeout and sees each end at its exact instant
//! (docs/development.md, "How tests drive time").

use crate::support;

use std::time::Duration;

use http::StatusCode;
use support::paused::{start, until, until_metric};
use support::{get, Sluice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// `GET`s paced one per 3 s, the rest held; other methods unlimited.
const PACED_GETS: &str = r#"
[[rule]]
name = "paced"
match = { method = ["GET"] }
rate = "1/3s"
burst = 1
on_limit = "delay"
max_delay = "10s"
"#;

const DEPTH: &str = r#"sluice_queue_depth{rule="paced"}"#;

/// A `POST /upload` that declares 100 bytes of body and sends 10: what
/// sluice answered until it closed, and when it closed.
fn stalled_upload(sluice: &Sluice) -> JoinHandle<(String, Instant)> {
    let addr = sluice.addr;
    tokio::spawn(async move {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789")
            .await
            .unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        (
            String::from_utf8_lossy(&answer).into_owned(),
            Instant::now(),
        )
    })
}

#[tokio::test(start_paused = true)]
async fn a_hold_and_a_body_timeout_end_at_their_instants_on_one_clock() {
    let (upstream, sluice) = start("body_timeout = \"5s\"\n", PACED_GETS).await;
    let t0 = Instant::now();
    // The slot: the first GET passes, the second is held until 3 s.
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    let held = tokio::spawn({
        let url = sluice.url("/held");
        async move { (get(&url, &[]).await, Instant::now()) }
    });
    until_metric(&sluice, DEPTH, 1.0).await;
    // The stall: its body streams to the upstream, and stops.
    let upload = stalled_upload(&sluice);
    until("the upload reached the upstream", || upstream.count() == 2).await;
    assert_eq!(t0.elapsed(), Duration::ZERO, "no timer fired meanwhile");

    // Nothing left to do but wait: the runtime's time jumps from timer to
    // timer, the hold's and the body deadline's among them.
    let (got, released) = held.await.unwrap();
    assert_eq!(
        released - t0,
        Duration::from_secs(3),
        "released at its slot"
    );
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.header("x-sluice-delay-ms"), Some("3000"));
    let (answer, cut) = upload.await.unwrap();
    assert_eq!(cut - t0, Duration::from_secs(5), "cut at body_timeout");
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    // The upstream saw the held GET, and the upload end after the 10 bytes
    // the client sent, cut off with it.
    let targets: Vec<_> = upstream.seen().into_iter().map(|s| s.target).collect();
    assert_eq!(targets, ["/", "/upload", "/held"]);
    let uploaded = || upstream.uploaded.load(std::sync::atomic::Ordering::SeqCst);
    until("the upstream saw the upload end", || uploaded() == 10).await;
}

/// A held request's body deadline starts when the hold ends: the two
/// waits add up, to the nanosecond, only if they read one clock.
#[tokio::test(start_paused = true)]
async fn a_held_uploads_body_timeout_counts_from_its_release() {
    let (upstream, sluice) = start(
        "body_timeout = \"5s\"\n",
        &PACED_GETS.replace(r#"["GET"]"#, r#"["GET", "POST"]"#),
    )
    .await;
    let t0 = Instant::now();
    assert_eq!(get(&sluice.url("/"), &[]).await.status, StatusCode::OK);
    let upload = stalled_upload(&sluice);
    until_metric(&sluice, DEPTH, 1.0).await;
    assert_eq!(
        upstream.count(),
        1,
        "the upload is held before its body is read"
    );
    let (answer, cut) = upload.await.unwrap();
    assert_eq!(
        cut - t0,
        Duration::from_secs(3 + 5),
        "held 3 s, then 5 s of body"
    );
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert_eq!(
        upstream.count(),
        2,
        "the upload reached the upstream once released"
    );
}

/// One answer from `stream`: its head and `content-length` body, as text.
async fn answer(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|line| {
                    line.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_owned())
                })
                .and_then(|value| value.parse().ok())
                .unwrap_or(0);
            if body.len() >= length {
                return text;
            }
        }
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(read > 0, "closed before a whole answer: {text}");
        received.extend_from_slice(&buffer[..read]);
    }
}

/// Sends `GET /` on `stream`, takes its 200, and says how long after that
/// answer the server closed the connection (sending nothing more).
async fn closed_after_a_last_answer(stream: &mut TcpStream) -> Duration {
    stream.write_all(GET_ROOT).await.unwrap();
    let got = answer(stream).await;
    assert!(got.starts_with("HTTP/1.1 200 "), "{got}");
    let answered = Instant::now();
    let mut rest = Vec::new();
    stream.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    answered.elapsed()
}

const GET_ROOT: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";

/// A connection quiet for longer than its quiet clock (10 s: it gives back
/// what its requests held, docs/edge-behaviour.md, "Slow clients and
/// deadlines") takes its next request as before, and its idle clock counts
/// from its last answer all the same.
#[tokio::test(start_paused = true)]
async fn a_quiet_connection_serves_on_and_closes_one_idle_timeout_after_its_last_answer() {
    let (upstream, sluice) = start("idle_timeout = \"30s\"\n", "").await;
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
    for _ in 0..2 {
        stream.write_all(GET_ROOT).await.unwrap();
        let got = answer(&mut stream).await;
        assert!(got.starts_with("HTTP/1.1 200 "), "{got}");
        tokio::time::sleep(Duration::from_secs(15)).await;
    }
    assert_eq!(
        closed_after_a_last_answer(&mut stream).await,
        Duration::from_secs(30)
    );
    assert_eq!(upstream.count(), 3);
}

/// hyper's server reads through the same socket: it never hears of the
/// quiet clock, and its connection is kept until idle_timeout.
#[tokio::test(start_paused = true)]
async fn a_connection_served_by_hyper_is_kept_past_the_quiet_clock() {
    let (upstream, sluice) = start("idle_timeout = \"30s\"\n", "").await;
    let mut stream = TcpStream::connect(sluice.addr).await.unwrap();
    stream
        .write_all(b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi")
        .await
        .unwrap();
    assert!(answer(&mut stream).await.starts_with("HTTP/1.1 200 "));
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(
        closed_after_a_last_answer(&mut stream).await,
        Duration::from_secs(30)
    );
    assert_eq!(upstream.count(), 2);
}
