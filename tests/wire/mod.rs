//! Raw HTTP/1 on both sides of sluice, for the hostile-input rows of
//! docs/edge-behaviour.md's "Hostile inputs" table: a client that sends exact bytes (never a
//! normalising HTTP library) and a recording upstream (`U`) that logs the
//! exact bytes it receives per connection, reads them as a strict HTTP/1.1
//! server would, and answers as scripted (hang, close early, bad bytes,
//! switch protocols).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the upstream read it.
#[derive(Debug, Clone)]
pub struct RawRequest {
    pub method: String,
    pub target: String,
    /// Names lower-cased, values as sent, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn has(&self, name: &str) -> bool {
        self.header(name).is_some()
    }
}

/// What the upstream saw on one connection.
#[derive(Debug, Clone, Default)]
pub struct ConnLog {
    /// Every byte received, in order.
    pub bytes: Vec<u8>,
    /// The complete requests those bytes held.
    pub requests: Vec<RawRequest>,
    /// Each request's place in the order the upstream read requests on all
    /// its connections together (same index as `requests`).
    pub arrivals: Vec<u64>,
    /// Bytes that were not a well-framed request (a bad head or chunk).
    pub garbage: bool,
    /// When sluice closed (or reset) the connection.
    pub closed_at: Option<Instant>,
}

/// How the upstream answers one request.
pub enum Action {
    /// Writes these bytes and keeps the connection.
    Reply(Vec<u8>),
    /// Writes these bytes, then closes.
    ReplyAndClose(Vec<u8>),
    /// Never answers (keeps reading, to notice the close).
    Hang,
    /// Closes without answering.
    Close,
    /// Writes these bytes (a `101`), then echoes every byte it receives.
    SwitchAndEcho(Vec<u8>),
    /// Writes these bytes one at a time, 1 ms apart (so the reader gets
    /// them split at every boundary), and keeps the connection.
    Dribble(Vec<u8>),
}

type Script = dyn Fn(&RawRequest) -> Action + Send + Sync;

/// The recording upstream.
pub struct RawUpstream {
    pub addr: SocketAddr,
    conns: Arc<Mutex<Vec<ConnLog>>>,
}

/// `200 OK` with a two-byte body, kept alive.
pub fn ok() -> Action {
    Action::Reply(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec())
}

impl RawUpstream {
    /// Answers every request with `script`.
    pub async fn start(script: impl Fn(&RawRequest) -> Action + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let conns = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let task_conns = conns.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let index = {
                    let mut conns = task_conns.lock().unwrap();
                    conns.push(ConnLog::default());
                    conns.len() - 1
                };
                tokio::spawn(serve(stream, index, task_conns.clone(), script.clone()));
            }
        });
        RawUpstream { addr, conns }
    }

    /// Every connection so far.
    pub fn conns(&self) -> Vec<ConnLog> {
        self.conns.lock().unwrap().clone()
    }

    /// Every complete request so far, in the order they were read (sluice
    /// may send them on different connections).
    pub fn requests(&self) -> Vec<RawRequest> {
        let mut all: Vec<(u64, RawRequest)> = self
            .conns()
            .into_iter()
            .flat_map(|conn| conn.arrivals.into_iter().zip(conn.requests))
            .collect();
        all.sort_by_key(|(arrival, _)| *arrival);
        all.into_iter().map(|(_, request)| request).collect()
    }

    /// Everything received, all connections concatenated.
    pub fn all_bytes(&self) -> String {
        let bytes: Vec<u8> = self.conns().into_iter().flat_map(|c| c.bytes).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

async fn serve(
    mut stream: TcpStream,
    index: usize,
    conns: Arc<Mutex<Vec<ConnLog>>>,
    script: Arc<Script>,
) {
    let mut pending: Vec<u8> = Vec::new();
    let mut buffer = vec![0u8; 16 * 1024];
    let mut answering = true;
    loop {
        // Answer every complete request already buffered.
        while answering {
            match parse_request(&pending) {
                Parsed::Complete(request, used) => {
                    pending.drain(..used);
                    let action = script(&request);
                    {
                        // The arrival is numbered under the lock that
                        // records it, so the order is the order recorded.
                        static ARRIVALS: std::sync::atomic::AtomicU64 =
                            std::sync::atomic::AtomicU64::new(0);
                        let mut conns = conns.lock().unwrap();
                        let log = &mut conns[index];
                        log.requests.push(request);
                        log.arrivals
                            .push(ARRIVALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
                    }
                    match action {
                        Action::Reply(bytes) => {
                            let _ = stream.write_all(&bytes).await;
                        }
                        Action::ReplyAndClose(bytes) => {
                            let _ = stream.write_all(&bytes).await;
                            let _ = stream.shutdown().await;
                            return drain_until_closed(stream, index, conns).await;
                        }
                        Action::Dribble(bytes) => {
                            let _ = stream.set_nodelay(true);
                            for byte in bytes {
                                let _ = stream.write_all(&[byte]).await;
                                tokio::time::sleep(Duration::from_millis(1)).await;
                            }
                        }
                        Action::Hang => answering = false,
                        Action::Close => return,
                        Action::SwitchAndEcho(bytes) => {
                            let _ = stream.write_all(&bytes).await;
                            let _ = stream.write_all(&pending).await;
                            return echo(stream, index, conns).await;
                        }
                    }
                }
                Parsed::Partial => break,
                Parsed::Bad => {
                    conns.lock().unwrap()[index].garbage = true;
                    answering = false;
                }
            }
        }
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => {
                conns.lock().unwrap()[index].closed_at = Some(Instant::now());
                return;
            }
            Ok(n) => {
                conns.lock().unwrap()[index]
                    .bytes
                    .extend_from_slice(&buffer[..n]);
                pending.extend_from_slice(&buffer[..n]);
            }
        }
    }
}

async fn drain_until_closed(mut stream: TcpStream, index: usize, conns: Arc<Mutex<Vec<ConnLog>>>) {
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => conns.lock().unwrap()[index]
                .bytes
                .extend_from_slice(&buffer[..n]),
        }
    }
    conns.lock().unwrap()[index].closed_at = Some(Instant::now());
}

async fn echo(mut stream: TcpStream, index: usize, conns: Arc<Mutex<Vec<ConnLog>>>) {
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                conns.lock().unwrap()[index]
                    .bytes
                    .extend_from_slice(&buffer[..n]);
                if stream.write_all(&buffer[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    conns.lock().unwrap()[index].closed_at = Some(Instant::now());
}

enum Parsed {
    Complete(RawRequest, usize),
    Partial,
    Bad,
}

/// A strict HTTP/1.1 reading: one `Content-Length` or `Transfer-Encoding:
/// chunked` (never both), well-formed chunks.
fn parse_request(buf: &[u8]) -> Parsed {
    let Some(head_end) = find(buf, b"\r\n\r\n") else {
        return Parsed::Partial;
    };
    let Ok(head) = std::str::from_utf8(&buf[..head_end]) else {
        return Parsed::Bad;
    };
    let mut lines = head.split("\r\n");
    let mut parts = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(_version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Parsed::Bad;
    };
    let mut headers = Vec::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Parsed::Bad;
        };
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    let mut request = RawRequest {
        method: method.to_owned(),
        target: target.to_owned(),
        headers,
        body: Vec::new(),
    };
    let body_start = head_end + 4;
    let chunked = request.header("transfer-encoding");
    let length = request.header("content-length");
    match (chunked, length) {
        (Some(_), Some(_)) => Parsed::Bad,
        (Some(te), None) if te.eq_ignore_ascii_case("chunked") => {
            let mut at = body_start;
            loop {
                let Some(line_end) = find(&buf[at..], b"\r\n") else {
                    return Parsed::Partial;
                };
                let size_text = std::str::from_utf8(&buf[at..at + line_end]).unwrap_or("");
                let Ok(size) = usize::from_str_radix(size_text, 16) else {
                    return Parsed::Bad;
                };
                at += line_end + 2;
                if buf.len() < at + size + 2 {
                    return Parsed::Partial;
                }
                if size == 0 {
                    // No trailers from sluice: the terminating CRLF follows.
                    if &buf[at..at + 2] != b"\r\n" {
                        return Parsed::Bad;
                    }
                    return Parsed::Complete(request, at + 2);
                }
                request.body.extend_from_slice(&buf[at..at + size]);
                if &buf[at + size..at + size + 2] != b"\r\n" {
                    return Parsed::Bad;
                }
                at += size + 2;
            }
        }
        (Some(_), None) => Parsed::Bad,
        (None, Some(length)) => {
            let Ok(length) = length.parse::<usize>() else {
                return Parsed::Bad;
            };
            if buf.len() < body_start + length {
                return Parsed::Partial;
            }
            request.body = buf[body_start..body_start + length].to_vec();
            Parsed::Complete(request, body_start + length)
        }
        (None, None) => Parsed::Complete(request, body_start),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// What the client got back on one connection.
#[derive(Debug)]
pub struct Received {
    pub bytes: Vec<u8>,
    /// The server closed the connection (EOF or reset) within the wait.
    pub closed: bool,
}

impl Received {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    pub fn responses(&self) -> Vec<RawResponse> {
        parse_responses(&self.bytes)
    }

    pub fn statuses(&self) -> Vec<u16> {
        self.responses().iter().map(|r| r.status).collect()
    }
}

/// A client connection to sluice: plain TCP, or TLS when the address is
/// one [`serve_tls_at`] registered (the raw-wire tests run over both).
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// The TLS listeners the tests started, and how to reach each.
static TLS_LISTENERS: Mutex<Vec<(SocketAddr, tokio_rustls::TlsConnector)>> = Mutex::new(Vec::new());

/// Connections to `addr` speak TLS through `connector` from now on.
pub fn serve_tls_at(addr: SocketAddr, connector: tokio_rustls::TlsConnector) {
    serve_plain_at(addr);
    TLS_LISTENERS.lock().unwrap().push((addr, connector));
}

/// Connections to `addr` speak plain TCP from now on: a listener of an
/// earlier test (over TLS) may have had its port.
pub fn serve_plain_at(addr: SocketAddr) {
    TLS_LISTENERS
        .lock()
        .unwrap()
        .retain(|(listener, _)| *listener != addr);
}

/// A fresh connection to `addr`, over TLS when `addr` serves it.
pub async fn connect(addr: SocketAddr) -> Stream {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let connector = TLS_LISTENERS
        .lock()
        .unwrap()
        .iter()
        .find(|(listener, _)| *listener == addr)
        .map(|(_, connector)| connector.clone());
    match connector {
        None => Stream::Plain(tcp),
        Some(connector) => {
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            Stream::Tls(Box::new(connector.connect(name, tcp).await.unwrap()))
        }
    }
}

impl tokio::io::AsyncRead for Stream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => std::pin::Pin::new(stream).poll_read(cx, buf),
            Stream::Tls(stream) => std::pin::Pin::new(stream).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Stream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(stream) => std::pin::Pin::new(stream).poll_write(cx, buf),
            Stream::Tls(stream) => std::pin::Pin::new(stream).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => std::pin::Pin::new(stream).poll_flush(cx),
            Stream::Tls(stream) => std::pin::Pin::new(stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => std::pin::Pin::new(stream).poll_shutdown(cx),
            Stream::Tls(stream) => std::pin::Pin::new(stream).poll_shutdown(cx),
        }
    }
}

/// How long an exchange may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(10);

/// The default `max_headers` of sluice's server (docs/configuration.md).
const MAX_HEADERS: usize = 100;

/// Sends `request` as is on a fresh connection to sluice and reads every
/// answer it draws ([`read_answers`]).
pub async fn exchange(addr: SocketAddr, request: &[u8]) -> Received {
    let mut stream = connect(addr).await;
    stream.write_all(request).await.unwrap();
    read_answers(&mut stream, request).await
}

/// Reads every answer to `sent` (what was written since the last answer
/// read) without waiting on a clock: until sluice closes the connection,
/// or until it answers [`probe`], sent once the answers so far are
/// complete and none said `connection: close`. HTTP/1.1 answers in order,
/// so the probe's answer proves that nothing more was coming and that the
/// connection was still open; it is not part of what is returned, and the
/// connection is closed after it.
pub async fn read_answers(
    stream: &mut (impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin),
    sent: &[u8],
) -> Received {
    let head_first = sent.starts_with(b"HEAD ");
    let mut bytes = Vec::new();
    let mut probed = false;
    while read_more(stream, &mut bytes).await {
        if !probed && open_after(&bytes, head_first) {
            assert!(
                !could_draw_431(sent),
                "this request could draw the probe's answer itself: use read_until"
            );
            probed = true;
            // Refused at once if sluice has closed meanwhile: its close is
            // what the reads below see.
            let _ = stream.write_all(&probe()).await;
        }
    }
    let answered = probed
        && answers(&bytes, head_first)
            .last()
            .is_some_and(|last| last.status == 431);
    if answered {
        let at = bytes
            .windows(13)
            .rposition(|window| window == b"HTTP/1.1 431 ")
            .unwrap();
        bytes.truncate(at);
    }
    Received {
        bytes,
        closed: !answered,
    }
}

/// Reads until the answers so far are complete (an interim `100 Continue`
/// is one) or sluice closes the connection, which stays usable: for a test
/// that sends more on it next. What comes after those answers is read with
/// the next request's.
pub async fn read_until_answered(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> Received {
    read_until(stream, |bytes| {
        let responses = parse_responses(bytes);
        !responses.is_empty() && responses.iter().all(|response| response.complete)
    })
    .await
}

/// Reads until what was read is `enough`, or the connection ends.
pub async fn read_until(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    enough: impl Fn(&[u8]) -> bool,
) -> Received {
    let mut bytes = Vec::new();
    loop {
        if !read_more(stream, &mut bytes).await {
            return Received {
                bytes,
                closed: true,
            };
        }
        if enough(&bytes) {
            return Received {
                bytes,
                closed: false,
            };
        }
    }
}

/// Appends what the next read brings to `bytes`: false at the end of the
/// connection. A connection that brings nothing for [`PATIENCE`] fails the
/// test.
async fn read_more(stream: &mut (impl tokio::io::AsyncRead + Unpin), bytes: &mut Vec<u8>) -> bool {
    let mut buffer = [0u8; 8192];
    let read = tokio::time::timeout(PATIENCE, stream.read(&mut buffer)).await;
    match read.unwrap_or_else(|_| {
        panic!(
            "nothing more from sluice in {PATIENCE:?}, after {:?}",
            String::from_utf8_lossy(bytes)
        )
    }) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            bytes.extend_from_slice(&buffer[..n]);
            true
        }
    }
}

/// A request head sluice refuses with 431 and a close: more header lines
/// than its default `max_headers`.
fn probe() -> Vec<u8> {
    let mut head = b"GET /probe HTTP/1.1\r\nHost: probe\r\n".to_vec();
    for _ in 0..MAX_HEADERS {
        head.extend_from_slice(b"x-probe: 1\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// Some stretch of `request` between blank lines is as long as a head that
/// sluice refuses with 431 by default (over `max_headers` lines or 32 KiB).
fn could_draw_431(request: &[u8]) -> bool {
    let mut rest = request;
    loop {
        let end = find(rest, b"\r\n\r\n").unwrap_or(rest.len());
        let stretch = &rest[..end];
        let lines = stretch.windows(2).filter(|pair| pair == b"\r\n").count();
        if lines + 1 >= MAX_HEADERS || stretch.len() >= 32 * 1024 {
            return true;
        }
        if end == rest.len() {
            return false;
        }
        rest = &rest[end + 4..];
    }
}

/// The answers in `bytes`. With `head_first`, the first answers a `HEAD`:
/// it has no body, whatever its fields say.
fn answers(bytes: &[u8], head_first: bool) -> Vec<RawResponse> {
    if !head_first {
        return parse_responses(bytes);
    }
    let Some(end) = find(bytes, b"\r\n\r\n") else {
        return Vec::new();
    };
    let mut answers = parse_responses(&bytes[..end + 4]);
    for answer in &mut answers {
        answer.complete = true;
    }
    answers.extend(parse_responses(&bytes[end + 4..]));
    answers
}

/// The answers in `bytes` are complete, and the last neither closes the
/// connection nor switches protocols: the connection is open for the next
/// request.
fn open_after(bytes: &[u8], head_first: bool) -> bool {
    let responses = answers(bytes, head_first);
    responses.last().is_some_and(|last| {
        responses.iter().all(|response| response.complete)
            && last.status != 101
            && !last
                .header("connection")
                .is_some_and(|value| value.eq_ignore_ascii_case("close"))
    })
}

/// One response as the client read it.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The body reached its declared end (length, or the last chunk).
    pub complete: bool,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The responses in `bytes`, in order; the last may be incomplete.
pub fn parse_responses(mut bytes: &[u8]) -> Vec<RawResponse> {
    let mut responses = Vec::new();
    while let Some(head_end) = find(bytes, b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&bytes[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let status: u16 = lines
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("not a status line in {head:?}"));
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let mut response = RawResponse {
            status,
            headers,
            body: Vec::new(),
            complete: false,
        };
        let rest = &bytes[head_end + 4..];
        let chunked = response
            .header("transfer-encoding")
            .is_some_and(|te| te.eq_ignore_ascii_case("chunked"));
        if status == 101 || status == 204 || status == 304 {
            response.complete = true;
            responses.push(response);
            // After a 101 the bytes are the tunnel's.
            if status == 101 {
                return responses;
            }
            bytes = rest;
        } else if chunked {
            let mut at = 0;
            while let Some(line_end) = find(&rest[at..], b"\r\n") {
                let size_text = String::from_utf8_lossy(&rest[at..at + line_end]).into_owned();
                let size = usize::from_str_radix(size_text.trim(), 16).unwrap_or(0);
                at += line_end + 2;
                if size == 0 {
                    if rest.len() >= at + 2 {
                        at += 2;
                        response.complete = true;
                    }
                    break;
                }
                let end = (at + size).min(rest.len());
                response.body.extend_from_slice(&rest[at..end]);
                if rest.len() < at + size + 2 {
                    at = rest.len();
                    break;
                }
                at += size + 2;
            }
            let done = response.complete;
            responses.push(response);
            if !done {
                return responses;
            }
            bytes = &rest[at..];
        } else {
            let length: usize = response
                .header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let end = length.min(rest.len());
            response.body = rest[..end].to_vec();
            response.complete = rest.len() >= length;
            responses.push(response);
            bytes = &rest[end..];
        }
    }
    responses
}
