//! The upstream side of HTTP/1, checked differentially against hyper's
//! client, the oracle: a request (with or without a body) goes to an
//! upstream that answers with given bytes, once through sluice's own
//! exchange (`pool/exchange.rs`, `pool/answer.rs`, then
//! [`forward::prepare_response`]) and once through hyper's
//! `client::conn::http1` (with what a proxy must do on top of it, as sluice
//! did when hyper's client carried its requests with a body). Both must
//! relay the same head, the same body bytes (or both fail), make the same
//! decision about the upstream connection, and deliver the same request to
//! the upstream. The fuzz target `upstream_http1` and the proptest below
//! feed it.
//!
//! Each run is real: a connection over loopback TCP to an upstream task
//! that reads the request head, writes the answer, and reads on. It runs on
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
//!   it moves the last field into its place), sluice's never adds it;
//!   RFC 9110 §5.3 gives that order no meaning. The order of one name's
//!   values is compared.
//! - the bytes passed on before a body fails: each side cuts the client's
//!   connection, which is what the client sees.
//! - how the request's body was framed: sluice writes `Content-Length` for
//!   a body whose length it knows, as hyper does; the upstream's reading of
//!   the body is compared, not its framing.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::pool::{merge_content_lengths, AddedFields, ForwardError, Pool, RequestBody, Sent};
use crate::http1::framing::parse_length;
use crate::proxy::client_request::ClientBody;
use crate::proxy::{fields, forward};

/// Which HTTP/1 client reads the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// sluice's own exchange.
    Sluice,
    /// hyper's client, the oracle.
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
    /// The request's body as the upstream read it, when it read one whole.
    pub received: Option<Vec<u8>>,
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

/// Reads `answer` as the upstream's reply to `method` with `body` (none
/// when empty) through `client`, on a runtime of its own.
pub fn relay(client: Client, method: Method, body: &[u8], answer: &[u8]) -> Relayed {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let body = Bytes::copy_from_slice(body);
    runtime.block_on(relay_on(
        client,
        method,
        body,
        Bytes::copy_from_slice(answer),
    ))
}

async fn relay_on(client: Client, method: Method, body: Bytes, answer: Bytes) -> Relayed {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let address = listener.local_addr().expect("its address");
    let (close, closed) = oneshot::channel::<()>();
    let received = Arc::new(Mutex::new(Vec::new()));
    let upstream = tokio::spawn(upstream(listener, answer, closed, Arc::clone(&received)));
    let mut close = Some(close);
    let request = Request::builder()
        .method(method)
        .uri("/")
        .header(header::HOST, "upstream")
        .body(())
        .expect("a valid request");
    let mut relayed = match client {
        Client::Sluice => through_sluice(address, request, body, &mut close).await,
        Client::Hyper => through_hyper(address, request, body, &mut close).await,
    };
    drop(close);
    let _ = upstream.await;
    let received = received
        .lock()
        .map(|bytes| bytes.clone())
        .unwrap_or_default();
    relayed.received = request_body(&received);
    relayed
}

/// The exchange through sluice's pool, then `prepare_response`.
async fn through_sluice(
    address: std::net::SocketAddr,
    request: Request<()>,
    body: Bytes,
    close: &mut Option<oneshot::Sender<()>>,
) -> Relayed {
    let pool = Pool::new(
        super::pool::dial::Destination(address),
        None,
        TIMEOUT,
        crate::clock::ProxyClock::default(),
    );
    let request = request.map(|()| ClientBody::Empty);
    let mut body = if body.is_empty() {
        RequestBody::None
    } else {
        RequestBody::Whole(body)
    };
    let sent = Sent {
        body: &mut body,
        handshake: false,
    };
    let deadline = Instant::now() + TIMEOUT;
    let head = until_done(
        pool.send(&request, &AddedFields::default(), sent, deadline),
        close,
    )
    .await;
    let mut relayed = nothing_yet();
    let prepared = head.and_then(|mut response| {
        forward::prepare_response(&mut response, false, None).map(|()| response)
    });
    match prepared {
        Err(error) => relayed.head = Err(error),
        Ok(response) => {
            relayed.head = Ok(relayed_head(&response));
            relayed.body = Some(read_body(response.into_body(), close).await);
        }
    }
    relayed.needed_close = close.is_none();
    // Whatever the connection still had to do is done before the pool is
    // asked for it again.
    tokio::time::sleep(QUIET).await;
    relayed.reused = pool.reuses();
    relayed
}

/// The exchange through hyper's client, with what the proxy did to its
/// answers: several agreeing lengths made one, a `Connection` that is not
/// text closes, a coding other than one `chunked` is a 502, `Content-Length`
/// beside `Transfer-Encoding` is dropped and closes, hop-by-hop fields go.
async fn through_hyper(
    address: std::net::SocketAddr,
    request: Request<()>,
    body: Bytes,
    close: &mut Option<oneshot::Sender<()>>,
) -> Relayed {
    let mut relayed = nothing_yet();
    let Ok(stream) = TcpStream::connect(address).await else {
        relayed.head = Err(ForwardError::Connect);
        return relayed;
    };
    let Ok((mut sender, connection)) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    else {
        relayed.head = Err(ForwardError::Connect);
        return relayed;
    };
    tokio::spawn(connection.with_upgrades());
    let request = request.map(|()| {
        if body.is_empty() {
            Empty::<Bytes>::new().boxed()
        } else {
            Full::new(body.clone()).boxed()
        }
    });
    let head = until_done(sender.send_request(request), close).await;
    let mut response = match head {
        Ok(response) => response,
        Err(_) => {
            relayed.head = Err(ForwardError::Other);
            relayed.needed_close = close.is_none();
            return relayed;
        }
    };
    let mut reusable = as_a_proxy_relays(&mut response);
    match reusable {
        Err(error) => relayed.head = Err(error),
        Ok(_) => {
            relayed.head = Ok(relayed_head(&response));
            let body = read_body(response.into_body(), close).await;
            reusable = reusable.map(|keep| keep && body.is_ok());
            relayed.body = Some(body);
        }
    }
    relayed.needed_close = close.is_none();
    tokio::time::sleep(QUIET).await;
    relayed.reused = reusable.unwrap_or(false)
        && !sender.is_closed()
        && tokio::time::timeout(QUIET, sender.ready())
            .await
            .is_ok_and(|ready| ready.is_ok());
    relayed
}

/// What sluice did to hyper's client's answers (see [`through_hyper`]):
/// whether the connection may be kept, or the exchange's failure.
fn as_a_proxy_relays(response: &mut Response<hyper::body::Incoming>) -> Result<bool, ForwardError> {
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        return Err(ForwardError::Other);
    }
    let headers = response.headers_mut();
    // As sluice's exchange makes them (`pool/exchange.rs`).
    merge_content_lengths(headers);
    let mut keep = !headers
        .get_all(header::CONNECTION)
        .iter()
        .any(|value| value.to_str().is_err());
    if fields::has(headers, &header::TRANSFER_ENCODING) {
        if !fields::only_chunked(headers) {
            return Err(ForwardError::Other);
        }
        if fields::has(headers, &header::CONTENT_LENGTH) {
            headers.remove(header::CONTENT_LENGTH);
            keep = false;
        }
    }
    forward::strip_hop_by_hop(headers, false);
    *response.version_mut() = Version::HTTP_11;
    Ok(keep)
}

fn nothing_yet() -> Relayed {
    Relayed {
        head: Err(ForwardError::Other),
        body: None,
        needed_close: false,
        reused: false,
        received: None,
    }
}

fn relayed_head<B>(response: &Response<B>) -> RelayedHead {
    RelayedHead {
        status: response.status().as_u16(),
        version: response.version(),
        fields: field_map(response.headers()),
    }
}

/// A body's data to its end, or `Err` when it failed.
async fn read_body<B>(mut body: B, close: &mut Option<oneshot::Sender<()>>) -> Result<Vec<u8>, ()>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
{
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
    let ended = until_done(read, close).await;
    drop(body);
    ended.map(|()| data)
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
/// `answer`, and when told (or the proxy is done), closes its side; it
/// reads on until the proxy closes too, so nothing it sent is lost to a
/// reset, and keeps every byte it received.
async fn upstream(
    listener: TcpListener,
    answer: Bytes,
    closed: oneshot::Receiver<()>,
    received: Arc<Mutex<Vec<u8>>>,
) {
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
    let keeping = Arc::clone(&received);
    let draining = tokio::spawn(async move {
        let mut all = head;
        let mut buffer = [0u8; 4096];
        while let Ok(read @ 1..) = reader.read(&mut buffer).await {
            all.extend_from_slice(&buffer[..read]);
        }
        if let Ok(mut kept) = keeping.lock() {
            *kept = all;
        }
    });
    let _ = writer.write_all(&answer).await;
    let _ = closed.await;
    let _ = writer.shutdown().await;
    let _ = draining.await;
}

/// The body of the first request in `bytes`, as a strict server reads it
/// (`Content-Length` or chunked); `None` when there is none whole.
fn request_body(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut slots = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut slots);
    let httparse::Status::Complete(length) = request.parse(bytes).ok()? else {
        return None;
    };
    let rest = &bytes[length..];
    let field = |name: &str| {
        request
            .headers
            .iter()
            .find(|field| field.name.eq_ignore_ascii_case(name))
            .map(|field| field.value)
    };
    if field("transfer-encoding").is_some() {
        let mut decoder = crate::http1::chunked::Chunked::new();
        let mut read = bytes::BytesMut::from(rest);
        let mut body = Vec::new();
        loop {
            match decoder.decode(&mut read).ok()? {
                crate::http1::chunked::Decoded::Data(data) => body.extend_from_slice(&data),
                crate::http1::chunked::Decoded::Trailers(_) => {}
                crate::http1::chunked::Decoded::End => return Some(body),
                crate::http1::chunked::Decoded::More => return None,
            }
        }
    }
    let length = field("content-length").map_or(Some(0), parse_length)?;
    let length = usize::try_from(length).ok()?;
    rest.get(..length).map(<[u8]>::to_vec)
}

fn field_map(headers: &http::HeaderMap) -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut fields: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for (name, value) in headers {
        fields
            .entry(name.as_str().to_owned())
            .or_default()
            .push(value.as_bytes().to_vec());
    }
    fields
}

/// Both clients' readings of `answer` to `method` with `body`.
pub fn both(method: &Method, body: &[u8], answer: &[u8]) -> (Relayed, Relayed) {
    (
        relay(Client::Sluice, method.clone(), body, answer),
        relay(Client::Hyper, method.clone(), body, answer),
    )
}

/// A failed check: what each client made of the answer.
pub fn compare(method: &Method, body: &[u8], answer: &[u8]) -> Result<(), String> {
    let (sluice, hyper) = both(method, body, answer);
    if sluice == hyper {
        Ok(())
    } else {
        Err(format!(
            "{method} with {} body bytes, answered {:?}\n  sluice: {sluice:?}\n  hyper:  {hyper:?}",
            body.len(),
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

    /// A request: `GET`/`HEAD` without a body, or a `POST`/`PUT` with one
    /// of a few sizes (past a write's worth included).
    fn requests() -> impl Strategy<Value = (Method, Vec<u8>)> {
        prop_oneof![
            2 => prop_oneof![Just(Method::GET), Just(Method::HEAD)].prop_map(|m| (m, Vec::new())),
            2 => (
                prop_oneof![Just(Method::POST), Just(Method::PUT)],
                prop_oneof![Just(1usize), Just(1024), Just(9000), Just(70_000)],
            )
                .prop_map(|(method, size)| (method, vec![b'b'; size])),
        ]
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
        fn sluice_and_hyper_relay_an_answer_alike(
            (method, body) in requests(),
            answer in answers(),
        ) {
            if let Err(divergence) = compare(&method, &body, &answer) {
                prop_assert!(false, "{}", divergence);
            }
        }
    }

    /// Found by the fuzz target: hyper's client reads no option from a
    /// `Connection` value with obs-text in it; sluice's read them from the
    /// bytes. Neither reuses such a connection now.
    #[test]
    fn a_connection_field_that_is_not_text_closes_on_both_clients() {
        for answer in [
            &b"HTTP/1.1 200 OK\r\nconnection: close, x\xc3\xa9-a\r\ncontent-length: 2\r\n\r\nok"[..],
            b"HTTP/1.1 200 OK\r\nconnection: x\xc3\xa9\r\ncontent-length: 2\r\n\r\nok",
            b"HTTP/1.0 200 OK\r\nconnection: keep-alive, x\xc3\xa9\r\ncontent-length: 2\r\n\r\nok",
        ] {
            let (sluice, hyper) = both(&Method::GET, b"", answer);
            assert_eq!(sluice, hyper, "{:?}", String::from_utf8_lossy(answer));
            assert_eq!(sluice.body, Some(Ok(b"ok".to_vec())));
            assert!(!sluice.reused, "{:?}", String::from_utf8_lossy(answer));
        }
    }

    /// A body goes up whole and its answer is read alike, the connection
    /// kept; an answer that comes before the upstream read the body still
    /// leaves the body delivered.
    #[test]
    fn a_request_body_reaches_the_upstream_whole_through_both_clients() {
        let answer = b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok";
        for size in [1, 1024, 70_000] {
            let body = vec![b'x'; size];
            let (sluice, hyper) = both(&Method::POST, &body, answer);
            assert_eq!(sluice, hyper, "{size} bytes");
            assert_eq!(sluice.received.as_deref(), Some(&body[..]), "{size} bytes");
            assert_eq!(sluice.body, Some(Ok(b"ok".to_vec())));
            assert!(sluice.reused, "{size} bytes");
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
            let (sluice, hyper) = both(&Method::GET, b"", answer.as_bytes());
            assert_eq!(sluice, hyper, "{answer:?}");
            let head = sluice.head.as_ref().expect("a head");
            assert_eq!(head.version, Version::HTTP_11, "{answer:?}");
            // Kept only for HTTP/1.1 lengths.
            assert_eq!(
                sluice.reused,
                answer.contains("1.1 200 OK\r\ncontent-length"),
                "{answer:?}"
            );
            match body {
                None => assert_eq!(sluice.body, Some(Err(())), "{answer:?}"),
                Some(body) => {
                    assert_eq!(
                        sluice.body,
                        Some(Ok(body.as_bytes().to_vec())),
                        "{answer:?}"
                    );
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
                let (sluice, hyper) = both(&method, b"", answer.as_bytes());
                assert_eq!(sluice, hyper, "{answer:?}");
                assert_eq!(sluice.head, Err(ForwardError::Other), "{answer:?}");
            }
        }
    }
}
