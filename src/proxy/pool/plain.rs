//! The plain exchange: a `GET` or `HEAD` without a body and without an
//! upgrade, which is nearly every request an API proxy forwards, written and
//! read by sluice itself on a connection of its own.
//!
//! hyper's client runs each connection as a task of its own and hands every
//! exchange to it through a channel and a oneshot; that hop and hyper's
//! generic dispatch were about a third of the instructions of a forwarded
//! request when this was written (docs/benchmarks-history.md). Here the request's own task writes the head and
//! reads the response head, and the body ([`super::plain_body::PlainBody`])
//! reads the rest from the same socket. Requests with a body and WebSocket
//! handshakes still go through hyper.
//!
//! The response is read as hyper's client reads it (RFC 9112 §6.3):
//! informational answers are skipped, `101` is a failure (nothing asked to
//! switch), `HEAD` answers and `204`/`304` have no body, `Transfer-Encoding:
//! chunked` frames the body (not allowed on HTTP/1.0), otherwise a valid
//! `Content-Length` does (several values must agree), otherwise the body
//! runs until the connection closes. At most [`MAX_HEADERS`] fields and
//! [`MAX_HEAD_BYTES`] of head, as hyper's defaults.
//!
//! Where a proxy must do more than hyper's client, it does it here for
//! free while the head is read, and `Pool::send` and
//! `forward::prepare_response` do the same for hyper's answers (docs/edge-behaviour.md, "Reading the upstream's answer"): a
//! `Transfer-Encoding` other than exactly `chunked` is refused (sluice never
//! offers another coding, and cannot pass one on), several agreeing
//! `Content-Length` values are relayed as one, and the answer is relayed as
//! HTTP/1.1 whatever version the upstream spoke (RFC 9110 §6.2).

use std::future::Future;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use hyper::body::Body;
use smallvec::SmallVec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::chunked::Chunked;
use super::stream::UpstreamStream;
// The same limits as the pool's hyper connections.
use super::{too_old, AddedFields, MAX_IDLE};
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::proxy::fields;
use crate::timer::LazyTimer;

/// Fields in a response head, at most (hyper's default).
pub const MAX_HEADERS: usize = 100;

/// Bytes of response head, at most: hyper's default read buffer limit.
pub const MAX_HEAD_BYTES: usize = 8192 + 4096 * 100;

/// Read buffer of a new connection; a response head nearly always fits.
const INITIAL_BUFFER: usize = 8192;

/// A connection of sluice's own to the upstream (over TCP or TLS), with
/// what was read from it and not yet used.
#[derive(Debug)]
pub struct Conn<S> {
    pub(super) stream: S,
    pub(super) read: BytesMut,
    /// The decoder of the chunked body being read, if it is one: kept here
    /// rather than in the body, so that the body (moved with every
    /// response) stays as small as its connection's box.
    pub(super) chunked: Chunked,
    /// The request head is written here; kept for the connection's next
    /// exchange.
    write: Vec<u8>,
    /// `upstream_timeout`'s clock, kept armed between exchanges rather than
    /// registered and removed per exchange (see `timer.rs`).
    answer_timer: LazyTimer,
}

impl<S: UpstreamStream> Conn<S> {
    /// Boxed for its whole life (one allocation per connection), so that
    /// the response body that carries it, and every response moved
    /// through the proxy, stays small.
    pub fn new(stream: S) -> Box<Conn<S>> {
        Box::new(Conn {
            stream,
            read: BytesMut::with_capacity(INITIAL_BUFFER),
            chunked: Chunked::new(),
            write: Vec::with_capacity(512),
            answer_timer: LazyTimer::new(),
        })
    }
}

/// How a response body is delimited: the upstream's, as read here, and
/// the client's, as sluice's own server writes it (`server/http1.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// Exactly this many bytes (more than zero).
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the sender closes the connection.
    UntilClose,
}

/// A response head as read, and what follows it.
#[derive(Debug)]
pub struct Head {
    pub response: Response<()>,
    pub framing: Framing,
    /// Whether the connection may carry another exchange once the body has
    /// been read (the upstream did not ask to close it, and the body's end
    /// does not depend on a close).
    pub keep_alive: bool,
}

/// Why an exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// The connection broke before any byte of a response arrived: on a
    /// reused connection, most likely closed by the upstream while idle.
    NothingBack,
    /// The upstream answered something that is not a valid response, or
    /// the connection broke mid-head.
    Broken,
    /// No response head by the deadline.
    TimedOut,
}

/// Whether `request` (already prepared for the upstream) is a plain
/// exchange: `GET` or `HEAD`, no body, no upgrade. (`Transfer-Encoding`
/// needs no look: preparing the request strips it as hop-by-hop, and a
/// chunked body is never at its end before it is read.)
pub fn is_plain<B: Body>(request: &Request<B>) -> bool {
    (request.method() == Method::GET || request.method() == Method::HEAD)
        && request.body().is_end_stream()
        && !fields::has(request.headers(), &header::UPGRADE)
}

/// Writes `request`'s head, with the `added` fields, on `conn` and reads
/// the response head, by `deadline`.
pub fn exchange<'c, S: UpstreamStream, B>(
    conn: &'c mut Conn<S>,
    request: &'c Request<B>,
    added: &'c AddedFields,
    deadline: Instant,
) -> Exchange<'c, impl Future<Output = Result<Head, Failed>> + 'c> {
    let Conn {
        stream,
        read,
        write,
        answer_timer,
        ..
    } = conn;
    Exchange {
        exchange: write_and_read(stream, read, write, request, added),
        timer: answer_timer,
        deadline,
    }
}

pin_project_lite::pin_project! {
    /// [`exchange`]'s future: the exchange, while its deadline has not
    /// come. A future of its own rather than an `async fn`'s: one layer of
    /// futures less between a request and its exchange (about 30
    /// instructions a request, within callgrind's run-to-run spread;
    /// docs/benchmarks-history.md, "A second pass").
    pub struct Exchange<'c, F> {
        #[pin]
        exchange: F,
        timer: &'c mut LazyTimer,
        deadline: Instant,
    }
}

impl<F: Future<Output = Result<Head, Failed>>> Future for Exchange<'_, F> {
    type Output = Result<Head, Failed>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.exchange.poll(cx) {
            Poll::Pending => this
                .timer
                .poll_until(cx, *this.deadline)
                .map(|()| Err(Failed::TimedOut)),
            done => done,
        }
    }
}

async fn write_and_read<S: UpstreamStream, B>(
    stream: &mut S,
    read: &mut BytesMut,
    write: &mut Vec<u8>,
    request: &Request<B>,
    added: &AddedFields,
) -> Result<Head, Failed> {
    write.clear();
    write_head(write, request, added);
    if stream.write_all(write).await.is_err() {
        return Err(Failed::NothingBack);
    }
    if S::BUFFERS_WRITES && stream.flush().await.is_err() {
        return Err(Failed::NothingBack);
    }
    let head_request = request.method() == Method::HEAD;
    let mut received = false;
    loop {
        if let Some(head) = parse_head(read, head_request)? {
            if body_to_wait_for(&head.framing, read) {
                // Most answers come whole in one read; one whose body did
                // not may be held back by Nagle until the head is acked.
                stream.ack_now();
            }
            return Ok(head);
        }
        if read.len() >= MAX_HEAD_BYTES {
            return Err(Failed::Broken);
        }
        read.reserve(INITIAL_BUFFER);
        match stream.read_buf(read).await {
            Ok(0) | Err(_) if !received => return Err(Failed::NothingBack),
            Ok(0) | Err(_) => return Err(Failed::Broken),
            Ok(_) => received = true,
        }
    }
}

/// Whether a response framed by `framing` has body still to come after
/// what `read` holds of it.
fn body_to_wait_for(framing: &Framing, read: &BytesMut) -> bool {
    match *framing {
        Framing::Empty => false,
        Framing::Length(length) => (read.len() as u64) < length,
        Framing::Chunked | Framing::UntilClose => read.is_empty(),
    }
}

/// The request line and fields as hyper's client writes them for a request
/// without a body (lower-case names, nothing of hyper's own added), then
/// the `added` fields.
fn write_head<B>(out: &mut Vec<u8>, request: &Request<B>, added: &AddedFields) {
    out.extend_from_slice(request.method().as_str().as_bytes());
    out.push(b' ');
    let target = request.uri().path_and_query().map_or("/", |p| p.as_str());
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in request
        .headers()
        .iter()
        .chain(added.fields.iter().map(|(n, v)| (n, v)))
    {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(id) = &added.request_id {
        out.extend_from_slice(b"x-request-id: ");
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Room a response's field map keeps for the fields sluice adds to it (the
/// rate-limit fields), so adding them does not grow it.
const ADDED_FIELDS: usize = 6;

/// Parses a final response head from the front of `read`, consuming it
/// (and any informational heads before it). `None`: not complete yet.
fn parse_head(read: &mut BytesMut, head_request: bool) -> Result<Option<Head>, Failed> {
    loop {
        // Each field as offsets into the head (name start and end, value
        // start and end), so that its value can share the head's buffer once
        // the head is split off.
        let mut fields: SmallVec<[[u32; 4]; 16]> = SmallVec::new();
        let (len, code, version) = {
            let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
            let mut parsed = httparse::Response::new(&mut []);
            let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
                &mut parsed,
                read,
                &mut slots,
            ) {
                Ok(httparse::Status::Complete(len)) => len,
                Ok(httparse::Status::Partial) => return Ok(None),
                Err(_) => return Err(Failed::Broken),
            };
            let base = read.as_ptr() as usize;
            let offset = |bytes: &[u8]| (bytes.as_ptr() as usize - base) as u32;
            for field in parsed.headers.iter() {
                let name = offset(field.name.as_bytes());
                let value = offset(field.value);
                fields.push([
                    name,
                    name + field.name.len() as u32,
                    value,
                    value + field.value.len() as u32,
                ]);
            }
            let version = match parsed.version {
                Some(0) => Version::HTTP_10,
                _ => Version::HTTP_11,
            };
            (len, parsed.code.unwrap_or(0), version)
        };
        match code {
            // Nothing asked to switch protocols.
            101 => return Err(Failed::Broken),
            100..=199 => {
                read.advance(len);
                continue;
            }
            _ => {}
        }
        let status = StatusCode::from_u16(code).map_err(|_| Failed::Broken)?;
        let head = read.split_to(len).freeze();
        let mut framing_fields = FramingFields::default();
        let mut headers = head_fields(&head, &fields, &mut framing_fields)?;
        let no_body = head_request || matches!(code, 204 | 304);
        let framing = framing_fields.framing(version, no_body)?;
        let keep_alive = framing != Framing::UntilClose && framing_fields.keeps_alive(version);
        if framing_fields.listed_length && !framing_fields.bad_length {
            if let Some(length) = framing_fields.content_length {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
            }
        }
        // Relayed as HTTP/1.1 (`Response::new`'s version), whatever the
        // upstream spoke: the version only framed what was read here.
        let mut response = Response::new(());
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        return Ok(Some(Head {
            response,
            framing,
            keep_alive,
        }));
    }
}

/// The head's fields, as offsets into `head` (see [`parse_head`]), in a
/// header map that shares `head`'s buffer, each noted in `framing_fields`.
#[inline]
fn head_fields(
    head: &bytes::Bytes,
    fields: &[[u32; 4]],
    framing_fields: &mut FramingFields,
) -> Result<HeaderMap, Failed> {
    let mut headers = super::spare_map::take(fields.len() + ADDED_FIELDS);
    // A `Connection` field that only says `keep-alive` or `close` (what
    // upstreams send) is not kept: it is hop-by-hop and names no field
    // to strip, so the proxy's stripping would only find and remove it
    // again. Put back if a field it could name turns up.
    let mut set_aside: SmallVec<[HeaderValue; 1]> = SmallVec::new();
    let mut named_option = false;
    for &[name_start, name_end, value_start, value_end] in fields {
        let name = HeaderName::from_bytes(&head[name_start as usize..name_end as usize])
            .map_err(|_| Failed::Broken)?;
        let value =
            HeaderValue::from_maybe_shared(head.slice(value_start as usize..value_end as usize))
                .map_err(|_| Failed::Broken)?;
        framing_fields.note(&name, &value);
        if name == header::CONNECTION && only_persistence_options(&value) {
            set_aside.push(value);
            continue;
        }
        named_option |= name.as_str() == "close";
        headers.append(name, value);
    }
    if named_option {
        for value in set_aside {
            headers.append(header::CONNECTION, value);
        }
    }
    Ok(headers)
}

/// What the fields that frame a response say, noted while the head is
/// read (no lookups afterwards).
#[derive(Debug, Default)]
struct FramingFields {
    /// A `Transfer-Encoding` field is present.
    transfer_encoding: bool,
    /// `Transfer-Encoding` is anything but one field of exactly `chunked`.
    other_coding: bool,
    /// The `Content-Length` all its values agree on.
    content_length: Option<u64>,
    /// `Content-Length` has more than one value (a list, or several fields).
    listed_length: bool,
    /// A `Content-Length` value is not a number, or disagrees with another.
    bad_length: bool,
    /// `Connection` lists `close` / `keep-alive`.
    close: bool,
    keep_alive: bool,
}

impl FramingFields {
    fn note(&mut self, name: &HeaderName, value: &HeaderValue) {
        let bytes = value.as_bytes();
        if name == header::TRANSFER_ENCODING {
            self.other_coding |=
                self.transfer_encoding || !bytes.trim_ascii().eq_ignore_ascii_case(b"chunked");
            self.transfer_encoding = true;
        } else if name == header::CONTENT_LENGTH {
            // Several values (in one field or several) must all agree.
            for item in bytes.split(|&b| b == b',') {
                match parse_length(item.trim_ascii()) {
                    Some(n) if self.content_length.is_none_or(|seen| seen == n) => {
                        self.listed_length |= self.content_length.is_some();
                        self.content_length = Some(n);
                    }
                    _ => self.bad_length = true,
                }
            }
        } else if name == header::CONNECTION {
            // The value nearly every upstream sends, whole: splitting it
            // costs more (as in `only_persistence_options`).
            if bytes.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
                return;
            }
            // A value that is not all visible ASCII (obs-text) says nothing
            // to hyper's client, which reads options only from text: the
            // connection is closed after it on either client
            // (`unreadable_connection`), whatever it lists.
            self.close |= value.to_str().is_err();
            for option in connection_options(value) {
                self.close |= option.eq_ignore_ascii_case(b"close");
                self.keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }

    /// RFC 9112 §6.3, as hyper's client applies it.
    fn framing(&self, version: Version, no_body: bool) -> Result<Framing, Failed> {
        // A coding sluice never offered (it sends no `TE` but `trailers`):
        // it could neither decode it nor pass it on (`Transfer-Encoding` is
        // hop-by-hop, and an HTTP/2 client cannot take one), as Envoy
        // refuses it. On every answer, as `forward::prepare_response`
        // refuses hyper's.
        if self.other_coding {
            return Err(Failed::Broken);
        }
        if no_body {
            return Ok(Framing::Empty);
        }
        // Exactly `chunked`, the one coding left.
        if self.transfer_encoding {
            if version == Version::HTTP_10 {
                return Err(Failed::Broken);
            }
            return Ok(Framing::Chunked);
        }
        if self.bad_length {
            return Err(Failed::Broken);
        }
        Ok(match self.content_length {
            Some(0) => Framing::Empty,
            Some(n) => Framing::Length(n),
            None => Framing::UntilClose,
        })
    }

    /// HTTP/1.1 connections persist unless `Connection: close`; HTTP/1.0
    /// ones only with `Connection: keep-alive`.
    fn keeps_alive(&self, version: Version) -> bool {
        if version == Version::HTTP_10 {
            self.keep_alive && !self.close
        } else {
            !self.close
        }
    }
}

/// Whether a `Connection` value lists nothing but `keep-alive` and `close`
/// (`Keep-Alive`, the one field these could name besides a `Close` field, is
/// hop-by-hop anyway).
pub fn only_persistence_options(value: &HeaderValue) -> bool {
    // The value nearly every client and upstream sends, checked whole
    // first: splitting it costs several times more.
    let whole = value.as_bytes();
    if whole.eq_ignore_ascii_case(b"keep-alive") || whole.eq_ignore_ascii_case(b"close") {
        return true;
    }
    connection_options(value).all(|option| {
        option.is_empty()
            || option.eq_ignore_ascii_case(b"keep-alive")
            || option.eq_ignore_ascii_case(b"close")
    })
}

/// The options a `Connection` value lists, trimmed.
pub fn connection_options(value: &HeaderValue) -> impl Iterator<Item = &[u8]> {
    value
        .as_bytes()
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
}

/// Whether a `Connection` field is not all visible ASCII: hyper's client
/// reads no option in it (neither `close` nor `keep-alive`), the plain
/// exchange would read them from the bytes; both close the connection.
pub fn unreadable_connection(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .any(|value| value.to_str().is_err())
}

/// Makes several `Content-Length` values that agree (a list, or several
/// fields) one field with one value, as the plain exchange relays them
/// (RFC 9110 §8.6); anything else is left as it is.
pub fn one_content_length(headers: &mut HeaderMap) {
    let mut values = headers.get_all(header::CONTENT_LENGTH).iter();
    let Some(first) = values.next() else { return };
    let mut agreed = None;
    let mut count = 0;
    for item in std::iter::once(first)
        .chain(values)
        .flat_map(|value| value.as_bytes().split(|&b| b == b','))
    {
        match parse_length(item.trim_ascii()) {
            Some(n) if agreed.is_none_or(|seen| seen == n) => agreed = Some(n),
            _ => return,
        }
        count += 1;
    }
    if let (Some(length), true) = (agreed, count > 1) {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
}

/// A `Content-Length` value: digits only, no sign, no overflow.
pub fn parse_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// How often idle connections are looked over, so that those the upstream
/// closed (or that grew too old) give their descriptors back even while no
/// request comes to take them.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// The idle plain connections of one upstream.
#[derive(Debug)]
pub struct IdleConns<S> {
    /// Most recently returned last: the warmest is reused first. One short
    /// lock at checkout and one at return, never held across an await.
    idle: Mutex<Vec<(Box<Conn<S>>, Nanos)>>,
    /// Dates them.
    clock: ProxyClock,
}

impl<S: UpstreamStream> IdleConns<S> {
    /// An empty idle list, swept every [`SWEEP_EVERY`] while it lives (when
    /// made inside a tokio runtime).
    pub fn new(clock: ProxyClock) -> Arc<IdleConns<S>> {
        let idle = Arc::new(IdleConns {
            idle: Mutex::default(),
            clock,
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&idle);
            runtime.spawn(async move {
                let mut ticks = tokio::time::interval(SWEEP_EVERY);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                ticks.tick().await;
                loop {
                    ticks.tick().await;
                    match weak.upgrade() {
                        Some(idle) => idle.sweep(),
                        None => return,
                    }
                }
            });
        }
        idle
    }

    /// An idle connection still open, if there is one.
    pub fn checkout(&self) -> Option<Box<Conn<S>>> {
        loop {
            let (mut conn, since) = self.lock().pop()?;
            if reusable(&mut conn, since, self.clock.now()) {
                return Some(conn);
            }
        }
    }

    /// Keeps `conn` for a later exchange. Its last response must have been
    /// read to the end with nothing after it.
    pub fn put_back(&self, conn: Box<Conn<S>>) {
        let mut idle = self.lock();
        if idle.len() < MAX_IDLE {
            idle.push((conn, self.clock.now()));
        }
    }

    /// Closes the idle connections the upstream closed, and those too old.
    pub fn sweep(&self) {
        let now = self.clock.now();
        self.lock()
            .retain_mut(|(conn, since)| reusable(conn, *since, now));
    }

    /// Closes every idle connection (new authorities for an https
    /// upstream: the next exchanges go over connections verified by them).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Idle connections kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Box<Conn<S>>, Nanos)>> {
        // The vector is consistent after any panic (push/pop/retain only).
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Whether an idle connection, idle since `since`, may carry an exchange
/// at `now`.
fn reusable<S: UpstreamStream>(conn: &mut Conn<S>, since: Nanos, now: Nanos) -> bool {
    !too_old(since, now) && conn.stream.idle_and_open()
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::net::{TcpListener, TcpStream};

    #[test]
    fn a_body_still_to_come_is_one_the_buffer_does_not_hold_whole() {
        let held = BytesMut::from(&b"hello"[..]);
        let empty = BytesMut::new();
        assert!(!body_to_wait_for(&Framing::Empty, &empty));
        assert!(!body_to_wait_for(&Framing::Length(5), &held));
        assert!(body_to_wait_for(&Framing::Length(6), &held));
        assert!(body_to_wait_for(&Framing::Length(1), &empty));
        assert!(body_to_wait_for(&Framing::Chunked, &empty));
        assert!(!body_to_wait_for(&Framing::Chunked, &held));
        assert!(body_to_wait_for(&Framing::UntilClose, &empty));
    }
    fn parsed(head: &str) -> Head {
        let mut read = BytesMut::from(head);
        parse_head(&mut read, false).unwrap().unwrap()
    }

    #[test]
    fn a_connection_field_is_kept_only_when_it_names_a_field_to_strip() {
        let head = parsed("HTTP/1.1 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n");
        assert!(head.response.headers().get(header::CONNECTION).is_none());
        assert!(head.keep_alive);
        let head = parsed("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
        assert!(head.response.headers().get(header::CONNECTION).is_none());
        assert!(!head.keep_alive);
        // Anything else it lists is a field the proxy must strip by name.
        let head = parsed("HTTP/1.1 200 OK\r\nConnection: keep-alive, x-srv\r\nX-Srv: 1\r\n\r\n");
        assert_eq!(
            head.response.headers()[header::CONNECTION],
            "keep-alive, x-srv"
        );
        // So is a field called `Close`, before or after the option names it.
        for head in [
            "HTTP/1.1 200 OK\r\nClose: 1\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 200 OK\r\nConnection: close\r\nClose: 1\r\n\r\n",
        ] {
            let head = parsed(head);
            assert_eq!(head.response.headers()[header::CONNECTION], "close");
        }
    }

    /// Real loopback connections: the upstream closes one of two idle
    /// connections, and a sweep closes that one and keeps the other.
    #[tokio::test]
    async fn a_sweep_drops_the_idle_connections_the_upstream_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let idle = IdleConns::new(ProxyClock::default());
        let closed = TcpStream::connect(address).await.unwrap();
        let (upstream_side, _) = listener.accept().await.unwrap();
        let open = TcpStream::connect(address).await.unwrap();
        let (_kept, _) = listener.accept().await.unwrap();
        idle.put_back(Conn::new(closed));
        idle.put_back(Conn::new(open));
        assert_eq!(idle.len(), 2);

        drop(upstream_side);
        // The close reaches the runtime's reactor within a few turns.
        let mut swept = false;
        for _ in 0..100 {
            idle.sweep();
            if idle.len() == 1 {
                swept = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(swept, "the closed connection was kept");
        // The one left is the open one, and it is handed out.
        assert!(idle.checkout().is_some());
        assert!(idle.checkout().is_none());
    }
}
