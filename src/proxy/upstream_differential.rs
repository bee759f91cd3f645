//! The upstream side of HTTP/1, checked differentially: the same answer
//! bytes from an upstream, read once by the plain exchange (`plain.rs`,
//! `plain_body.rs`) and once by hyper's client (`Pool::send`), must come out
//! of [`forward::prepare_response`] alike — the same head, the same body
//! bytes (or both fail), the same decision about the upstream connection.
//! The fuzz target `upstream_http1` and the proptest below feed it.
//!
//! Each run is real: a [`Pool`] connects over loopback TCP to an upstream
//! task that reads the request head and writes the answer. It runs on
//! tokio's paused time in a single-threaded runtime, so "nothing more will
//! happen" is observable without a wall-clock wait: the clock only jumps
//! when every task waits, and by then the answer's bytes (written on
//! loopback before that) have been read as far as each side reads them.
//! Then the upstream closes the connection, as a real upstream would at
//! its idle timeout, and the exchange goes on to its end.
//!
//! Intended differences, not compared:
//! - the order of differently named fields: hyper's client keeps a
//!   `Connection: keep-alive` in the map for the proxy to strip (removing
//!   it moves the last field into its place), the plain exchange never adds
//!   it; RFC 9110 §5.3 gives that order no meaning. The order of one name's
//!   values is compared.
//! - trailer fields: dropped by the plain exchange (as nginx does), passed
//!   on as a frame by hyper; only the data is compared (docs/edge-behaviour.md,
//!   "Reading the upstream's answer").
//! - the bytes passed on before a body fails: each side cuts the client's
//!   connection, which is what the client sees.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Version};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::pool::{AddedFields, ForwardError, Pool};
use crate::clock::ProxyClock;
use crate::proxy::client_request::{ClientBody, ClientRequest};
use crate::proxy::{deadline, forward};

/// Which of sluice's two HTTP/1 clients reads the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// The plain exchange (what a `GET` or `HEAD` without a body takes).
    Plain,
    /// hyper's client (what every other request takes).
    Hyper,
}

/// What the proxy made of one answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relayed {
    /// The head as it is relayed, or why the exchange failed.
    pub head: Result<RelayedHead, ForwardError>,
    /// The body's data, or `Err` when it failed; `None` without a head.
    pub body: Option<Result<Vec<u8>, ()>>,
    /// The exchange only ended once the upstream closed the connection.
    pub needed_close: bool,
    /// The connection was handed out again for the next exchange.
    pub reused: bool,
}

/// A response head as it is relayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayedHead {
    pub status: u16,
    pub version: Version,
    /// Each name's values, in order.
    pub fields: BTreeMap<String, Vec<Vec<u8>>>,
}

/// How long the paused clock jumps when every task waits: less than any
/// timer in the pool (idle sweep 10 s, deadline below).
const QUIET: Duration = Duration::from_secs(1);

/// The exchange's `upstream_timeout`.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Reads `answer` as the upstream's reply to a bodiless `method` (`GET` or
/// `HEAD`) through `client`, on a runtime of its own.
pub fn relay(client: Client, method: Method, answer: &[u8]) -> Relayed {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(relay_on(client, method, Bytes::copy_from_slice(answer)))
}

async fn relay_on(client: Client, method: Method, answer: Bytes) -> Relayed {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let address = listener.local_addr().expect("its address");
    let (close, closed) = oneshot::channel::<()>();
    let upstream = tokio::spawn(upstream(listener, answer, closed));
    let destination = super::pool::dial::Destination(address);
    let pool = Pool::new(
        destination,
        None,
        TIMEOUT,
        crate::clock::ProxyClock::default(),
    );
    let mut close = Some(close);

    let request = Request::builder()
        .method(method)
        .uri("/")
        .header(http::header::HOST, "upstream")
        .body(ClientBody::Empty)
        .expect("a valid request");
    let deadline = Instant::now() + TIMEOUT;
    let sent = async {
        match client {
            Client::Plain => {
                pool.send_plain(&request, &AddedFields::default(), deadline)
                    .await
            }
            Client::Hyper => {
                let (guarded, _watch) = deadline::guard(request, &ProxyClock::default());
                let mut request = ClientRequest::new(guarded);
                pool.send(&mut request, &AddedFields::default(), deadline)
                    .await
            }
        }
    };
    let head = until_done(sent, &mut close).await;
    let mut relayed = Relayed {
        head: Err(ForwardError::Other),
        body: None,
        needed_close: false,
        reused: false,
    };
    match head.and_then(|response| forward::prepare_response(response, None, None)) {
        Err(error) => relayed.head = Err(error),
        Ok(response) => {
            relayed.head = Ok(RelayedHead {
                status: response.status().as_u16(),
                version: response.version(),
                fields: fields(response.headers()),
            });
            let mut body = response.into_body();
            let mut data = Vec::new();
            let read = async {
                while let Some(frame) = body.frame().await {
                    match frame {
                        Ok(frame) => {
                            if let Some(chunk) = frame.data_ref() {
                                data.extend_from_slice(chunk);
                            }
                        }
                        Err(_) => return Err(()),
                    }
                }
                Ok(())
            };
            let ended = until_done(read, &mut close).await;
            drop(body);
            relayed.body = Some(ended.map(|()| data));
        }
    }
    relayed.needed_close = close.is_none();
    // Whatever the connection's task still had to do is done before the
    // pool is asked for the connection again.
    tokio::time::sleep(QUIET).await;
    relayed.reused = match client {
        Client::Plain => pool.reuses_plain(),
        Client::Hyper => tokio::time::timeout(QUIET, pool.reuses_hyper())
            .await
            .unwrap_or(false),
    };
    drop(close);
    let _ = upstream.await;
    relayed
}

/// Runs `work` to its end; the first time every task waits, the upstream
/// is told to close.
async fn until_done<T>(
    work: impl std::future::Future<Output = T>,
    close: &mut Option<oneshot::Sender<()>>,
) -> T {
    let mut work = std::pin::pin!(work);
    loop {
        tokio::select! {
            biased;
            done = &mut work => return done,
            () = tokio::time::sleep(QUIET), if close.is_some() => {
                if let Some(close) = close.take() {
                    let _ = close.send(());
                }
            }
        }
    }
}

/// The upstream: takes one connection, reads the request head, writes
/// `answer`, and when told (or the proxy is done), closes its side; then
/// reads on until the proxy closes too, so nothing it sent is lost to a
/// reset.
async fn upstream(listener: TcpListener, answer: Bytes, closed: oneshot::Receiver<()>) {
    let Ok((mut stream, _)) = listener.accept().await else {
        return;
    };
    let mut head = Vec::new();
    let mut buffer = [0u8; 4096];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => head.extend_from_slice(&buffer[..read]),
        }
    }
    let (mut reader, mut writer) = stream.into_split();
    let draining = tokio::spawn(async move {
        let mut buffer = [0u8; 4096];
        while matches!(reader.read(&mut buffer).await, Ok(read) if read > 0) {}
    });
    let _ = writer.write_all(&answer).await;
    let _ = closed.await;
    let _ = writer.shutdown().await;
    let _ = draining.await;
}

fn fields(headers: &http::HeaderMap) -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut fields: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for (name, value) in headers {
        fields
            .entry(name.as_str().to_owned())
            .or_default()
            .push(value.as_bytes().to_vec());
    }
    fields
}

/// Both clients' readings of `answer`, for a `GET` or `HEAD`.
pub fn both(method: &Method, answer: &[u8]) -> (Relayed, Relayed) {
    (
        relay(Client::Plain, method.clone(), answer),
        relay(Client::Hyper, method.clone(), answer),
    )
}

/// A failed check: what each client made of the answer.
pub fn compare(method: &Method, answer: &[u8]) -> Result<(), String> {
    let (plain, hyper) = both(method, answer);
    if plain == hyper {
        Ok(())
    } else {
        Err(format!(
            "{method} {:?}\n  plain: {plain:?}\n  hyper: {hyper:?}",
            String::from_utf8_lossy(answer)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Answers built from the pieces framing is made of, each piece
    /// sometimes right and sometimes subtly wrong.
    fn answers() -> impl Strategy<Value = Vec<u8>> {
        let version = prop_oneof![Just("HTTP/1.1"), Just("HTTP/1.0")];
        let informational = prop_oneof![
            4 => Just(""),
            1 => Just("HTTP/1.1 100 Continue\r\n\r\n"),
            1 => Just("HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"),
        ];
        let status = prop_oneof![
            6 => Just("200 OK"),
            1 => Just("204 No Content"),
            1 => Just("304 Not Modified"),
            1 => Just("404 Not Found"),
            1 => Just("101 Switching Protocols"),
        ];
        let field = prop_oneof![
            3 => prop_oneof![
                Just("5"), Just("5, 5"), Just("5,5,5"), Just("5, 6"), Just("0"),
                Just("abc"), Just(""), Just("+5"), Just("05"), Just("3"), Just("12"),
            ].prop_map(|v| format!("content-length: {v}")),
            3 => prop_oneof![
                Just("chunked"), Just("Chunked"), Just("gzip"), Just("gzip, chunked"),
                Just("chunked, chunked"), Just("chunked,"), Just("identity"),
            ].prop_map(|v| format!("transfer-encoding: {v}")),
            2 => prop_oneof![
                Just("close"), Just("keep-alive"), Just("Keep-Alive, close"), Just("x-a"),
                Just("upgrade"), Just("close, x-a"), Just("close, x\u{e9}"), Just("keep-alive, \u{e9}"),
            ].prop_map(|v| format!("connection: {v}")),
            1 => Just("keep-alive: timeout=5".to_owned()),
            1 => Just("x-a: 1".to_owned()),
            1 => Just("trailer: x-t".to_owned()),
            1 => "[a-zA-Z-]{1,6}: [ -~]{0,6}",
        ];
        let chunk = (
            prop_oneof![
                4 => Just(None),
                1 => Just(Some("")),
                1 => Just(Some(";ext=1")),
                1 => Just(Some(" ")),
                1 => Just(Some("0")),
                1 => Just(Some("x")),
            ],
            prop_oneof![Just(""), Just(";a=b"), Just(" ;a"), Just("\t"), Just(";\n")],
            "[a-z]{1,12}",
            prop_oneof![6 => Just("\r\n"), 1 => Just("\n"), 1 => Just(""), 1 => Just("XX")],
        )
            .prop_map(|(size, extension, data, end)| {
                let size = size.map_or_else(|| format!("{:x}", data.len()), str::to_owned);
                format!("{size}{extension}\r\n{data}{end}")
            });
        let last = prop_oneof![
            4 => Just("0\r\n\r\n"),
            1 => Just("0\r\nx-t: 1\r\n\r\n"),
            1 => Just("0;e\r\n\r\n"),
            1 => Just("0\r\nbad trailer\r\n\r\n"),
            1 => Just("0\r\n"),
            1 => Just(""),
        ];
        let chunked = (prop::collection::vec(chunk, 0..4), last)
            .prop_map(|(chunks, last)| format!("{}{last}", chunks.concat()));
        let body = prop_oneof![
            3 => chunked,
            2 => "[a-z]{0,12}",
            1 => "[a-z0-9;\r\n ]{0,16}",
        ];
        let after = prop_oneof![
            6 => Just(""),
            1 => Just("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
            1 => Just("x"),
        ];
        (
            informational,
            version,
            status,
            prop::collection::vec(field, 0..5),
            body,
            after,
            any::<Option<prop::sample::Index>>(),
        )
            .prop_map(
                |(informational, version, status, fields, body, after, cut)| {
                    let mut answer = format!("{informational}{version} {status}\r\n");
                    for field in fields {
                        answer.push_str(&field);
                        answer.push_str("\r\n");
                    }
                    answer.push_str("\r\n");
                    answer.push_str(&body);
                    answer.push_str(after);
                    let mut answer = answer.into_bytes();
                    if let Some(cut) = cut {
                        answer.truncate(cut.index(answer.len() + 1));
                    }
                    answer
                },
            )
    }

    proptest! {
        // Two loopback exchanges per case, a few milliseconds; more with
        // PROPTEST_CASES.
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn both_clients_relay_an_answer_alike(
            head in any::<bool>(),
            answer in answers(),
        ) {
            let method = if head { Method::HEAD } else { Method::GET };
            if let Err(divergence) = compare(&method, &answer) {
                prop_assert!(false, "{}", divergence);
            }
        }
    }

    /// Found by the fuzz target: hyper's client reads no option from a
    /// `Connection` value with obs-text in it, the plain exchange read them
    /// from the bytes; neither reuses such a connection now.
    #[test]
    fn a_connection_field_that_is_not_text_closes_on_both_clients() {
        for answer in [
            &b"HTTP/1.1 200 OK\r\nconnection: close, x\xc3\xa9-a\r\ncontent-length: 2\r\n\r\nok"[..],
            b"HTTP/1.1 200 OK\r\nconnection: x\xc3\xa9\r\ncontent-length: 2\r\n\r\nok",
            b"HTTP/1.0 200 OK\r\nconnection: keep-alive, x\xc3\xa9\r\ncontent-length: 2\r\n\r\nok",
        ] {
            let (plain, hyper) = both(&Method::GET, answer);
            assert_eq!(plain, hyper, "{:?}", String::from_utf8_lossy(answer));
            assert_eq!(plain.body, Some(Ok(b"ok".to_vec())));
            assert!(!plain.reused, "{:?}", String::from_utf8_lossy(answer));
        }
    }

    /// The wire defects of docs/edge-behaviour.md's "Reading the upstream's
    /// answer", read alike by both clients, each as it is relayed.
    #[test]
    fn the_framing_defects_are_read_alike_and_relayed_as_a_proxy_should() {
        let cases: [(&str, Option<&str>); 6] = [
            // A chunk-size line without a digit: the body fails.
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n\r\n\r\n",
                None,
            ),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n;ext=1\r\n\r\n",
                None,
            ),
            // One length, whole.
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 5, 5\r\n\r\nhello",
                Some("hello"),
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\nhello",
                Some("hello"),
            ),
            // HTTP/1.0, relayed as HTTP/1.1, to the close.
            ("HTTP/1.0 200 OK\r\n\r\nall of it", Some("all of it")),
            ("HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok", Some("ok")),
        ];
        for (answer, body) in cases {
            let (plain, hyper) = both(&Method::GET, answer.as_bytes());
            assert_eq!(plain, hyper, "{answer:?}");
            let head = plain.head.as_ref().expect("a head");
            assert_eq!(head.version, Version::HTTP_11, "{answer:?}");
            // Kept only for HTTP/1.1 lengths.
            assert_eq!(
                plain.reused,
                answer.contains("1.1 200 OK\r\ncontent-length"),
                "{answer:?}"
            );
            match body {
                None => assert_eq!(plain.body, Some(Err(())), "{answer:?}"),
                Some(body) => {
                    assert_eq!(plain.body, Some(Ok(body.as_bytes().to_vec())), "{answer:?}");
                    let lengths = head.fields.get("content-length");
                    assert!(
                        lengths
                            .is_none_or(|values| values.len() == 1 && !values[0].contains(&b',')),
                        "{answer:?}"
                    );
                }
            }
        }
        // A coding other than one `chunked`: 502, on either client.
        for coding in ["gzip", "gzip, chunked", "chunked, chunked"] {
            let answer = format!(
                "HTTP/1.1 200 OK\r\ntransfer-encoding: {coding}\r\n\r\n6\r\nzipped\r\n0\r\n\r\n"
            );
            for method in [Method::GET, Method::HEAD] {
                let (plain, hyper) = both(&method, answer.as_bytes());
                assert_eq!(plain, hyper, "{answer:?}");
                assert_eq!(plain.head, Err(ForwardError::Other), "{answer:?}");
            }
        }
    }
}
