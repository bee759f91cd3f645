//! sluice's HTTP/1.1 engine on both sides of one connection, over a
//! completion-based transport (`testing/completion.rs`): the client side
//! is the pool's exchange and answer body, the server side sluice's server
//! with a recorder for a service (`server/differential.rs`). Every read and
//! write completes on a later poll, and a read holds the engine's buffer
//! meanwhile; the exchanges must come out as they do over TCP.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::BodyExt;
use tokio::time::Instant;

use super::differential::{spawn_served, Served, Side};
use crate::clock::ProxyClock;
use crate::proxy::pool::engine::{
    exchange, AnswerBody, Conn, IdleConns, RequestBody, Sent, UpstreamStream,
};
use crate::proxy::pool::AddedFields;
use crate::testing::completion::{self, End};

impl UpstreamStream for End {
    fn idle_and_open(&mut self) -> bool {
        true
    }

    fn ack_now(&self) {}
}

/// One request through the client engine on `conn`, its answer's status,
/// `x-seen` (which request the server counted it as) and body, and the
/// connection back once the body ended, if it may carry another.
async fn send(
    conn: Box<Conn<End>>,
    idle: &Arc<IdleConns<End>>,
    method: Method,
    body: Option<&'static [u8]>,
) -> (StatusCode, String, Bytes, Option<Box<Conn<End>>>) {
    let mut conn = conn;
    let request = Request::builder()
        .method(method)
        .uri("/echo?x=1")
        .header(header::HOST, "upstream")
        .body(())
        .unwrap();
    let mut body = match body {
        Some(bytes) => RequestBody::Whole(Bytes::from_static(bytes)),
        None => RequestBody::None,
    };
    let sent = Sent {
        body: &mut body,
        handshake: false,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let head = exchange(&mut conn, &request, &AddedFields::default(), sent, deadline)
        .await
        .expect("an answer's head");
    let status = head.response.status();
    let seen = head.response.headers()["x-seen"]
        .to_str()
        .unwrap()
        .to_owned();
    let answer = AnswerBody::new(
        conn,
        head.framing,
        head.keep_alive,
        head.switched,
        Arc::clone(idle),
    );
    let bytes = answer
        .collect()
        .await
        .expect("the answer's body")
        .to_bytes();
    (status, seen, bytes, idle.checkout())
}

/// A request's method and body, and the answer's body.
type Sends = (Method, Option<&'static [u8]>, &'static [u8]);

#[tokio::test]
async fn a_connection_carries_requests_with_and_without_bodies_both_ways() {
    let (client, server) = completion::pair();
    let completions = client.completions();
    let Served {
        task: served,
        drain,
        recorder,
    } = spawn_served(Side::Sluice, server);
    let idle = IdleConns::new(ProxyClock::default());
    let mut conn = Some(Conn::new(client));
    let sends: [Sends; 4] = [
        (Method::GET, None, b"ok"),
        (Method::POST, Some(b"a body of some bytes"), b"ok"),
        (Method::HEAD, None, b""),
        (Method::PUT, Some(&[7; 100_000]), b"ok"),
    ];
    for (count, (method, body, answer)) in sends.iter().enumerate() {
        let (status, seen, got, back) = send(
            conn.take().expect("kept alive"),
            &idle,
            method.clone(),
            *body,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{method}");
        assert_eq!(seen, (count + 1).to_string(), "answers its own request");
        assert_eq!(&got[..], *answer, "{method}");
        conn = back;
    }
    let received = recorder.taken();
    assert_eq!(received.len(), sends.len());
    for (seen, (method, body, _)) in received.iter().zip(&sends) {
        assert_eq!(seen.method, method.as_str());
        assert_eq!(seen.target, "/echo?x=1");
        assert_eq!(seen.body.as_deref(), Some(body.unwrap_or_default()));
    }
    let conn = conn.expect("the connection kept alive");
    assert!(
        completions.load(Ordering::Relaxed) > 0,
        "the transport carried the bytes"
    );
    // The client leaves: the server's connection ends.
    drop(conn);
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the server ended with its client")
        .unwrap();
    drop(drain);
}
