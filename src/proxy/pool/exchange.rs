//! An exchange with an upstream over HTTP/1.1, written and read by sluice
//! itself on a connection of its own: the request's head (and a body held
//! whole, in the same write) goes out, then the answer's head is read,
//! while a streamed body goes on up (`upload.rs`). The answer's body is
//! read by `answer.rs`, from the same connection.
//!
//! The request's own task does all of it — no task per connection, no
//! channel to one: hyper's client ran each connection as a task and handed
//! every exchange to it through a channel and a oneshot, about a third of
//! the instructions of a forwarded request (docs/benchmarks-history.md).
//!
//! The answer is read as RFC 9112 §6.3 says, and as hyper's client reads
//! it (hyper is the oracle of `proxy/upstream_differential.rs`):
//! informational answers are skipped (a `100 Continue` included), `101` is
//! a tunnel when the request was a WebSocket handshake and a failure
//! otherwise, `HEAD` answers and `204`/`304` have no body,
//! `Transfer-Encoding: chunked` frames the body (not allowed on HTTP/1.0),
//! otherwise a valid `Content-Length` does (several values must agree),
//! otherwise the body runs until the connection closes. At most
//! [`MAX_HEADERS`] fields and [`MAX_HEAD_BYTES`] of head, as hyper's
//! defaults.
//!
//! Where a proxy must do more than hyper's client, it does it here while
//! the head is read (docs/edge-behaviour.md, "Reading the upstream's
//! answer"): a `Transfer-Encoding` other than exactly `chunked` is refused
//! (sluice never offers another coding, and cannot pass one on), several
//! agreeing `Content-Length` values are relayed as one, and the answer is
//! relayed as HTTP/1.1 whatever version the upstream spoke (RFC 9110 §6.2).

use std::future::{poll_fn, Future};
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use smallvec::SmallVec;
use tokio::time::Instant;

use super::stream::UpstreamStream;
use super::upload::{RequestBody, Upload, UploadError};
use super::AddedFields;
use crate::http1::chunked::Chunked;
pub use crate::http1::framing::Framing;
use crate::http1::framing::{connection_options, only_persistence_options, parse_length};
use crate::http1::names::Names;
use crate::http1::outflow::{Outflow, COPY_BELOW};
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
    /// What is written: the request's head and body; kept for the
    /// connection's next exchange.
    pub(super) out: Outflow,
    /// `upstream_timeout`'s clock, kept armed between exchanges rather than
    /// registered and removed per exchange (see `timer.rs`).
    answer_timer: LazyTimer,
    /// A streamed request body still going up once the answer's head came:
    /// the answer's body sends the rest.
    pub(super) upload: Option<Upload>,
    /// The names the upstream's last head had.
    names: Names,
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
            out: Outflow::default(),
            answer_timer: LazyTimer::new(),
            upload: None,
            names: Names::default(),
        })
    }
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
    /// A `101` to a WebSocket handshake: the connection is a tunnel now.
    pub switched: bool,
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
    /// The client's body failed on its way up (cut off, malformed, over
    /// its limits): the upstream saw a request without its end.
    ClientBody,
}

/// What an exchange sends besides the request's head.
#[derive(Debug)]
pub struct Sent<'r> {
    /// The request's body.
    pub body: &'r mut RequestBody,
    /// The request is a WebSocket handshake: a `101` is its answer.
    pub handshake: bool,
}

/// Writes `request`'s head (with the `added` fields) and what `sent`
/// holds of its body on `conn`, and reads the response head, by
/// `deadline`. A streamed body is moved into the connection (and back
/// into `sent` when the exchange failed before any of it was taken).
pub fn exchange<'c, S: UpstreamStream, B>(
    conn: &'c mut Conn<S>,
    request: &'c Request<B>,
    added: &'c AddedFields,
    sent: Sent<'c>,
    deadline: Instant,
) -> Exchange<'c, impl Future<Output = Result<Head, Failed>> + 'c> {
    let Conn {
        stream,
        read,
        out,
        answer_timer,
        upload,
        names,
        ..
    } = conn;
    let wire = Wire {
        stream,
        read,
        out,
        upload,
        names,
    };
    Exchange {
        exchange: write_and_read(wire, request, added, sent),
        timer: answer_timer,
        deadline,
    }
}

pin_project_lite::pin_project! {
    /// [`exchange`]'s future: the exchange, while its deadline has not
    /// come. A future of its own rather than an `async fn`'s: one layer of
    /// futures less between a request and its exchange, paid on every
    /// forwarded request (docs/benchmarks-history.md, "A second pass").
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

/// The parts of a connection an exchange uses (its timer is the
/// [`Exchange`]'s).
struct Wire<'c, S> {
    stream: &'c mut S,
    read: &'c mut BytesMut,
    out: &'c mut Outflow,
    upload: &'c mut Option<Upload>,
    names: &'c mut Names,
}

async fn write_and_read<S: UpstreamStream, B>(
    wire: Wire<'_, S>,
    request: &Request<B>,
    added: &AddedFields,
    sent: Sent<'_>,
) -> Result<Head, Failed> {
    let Wire {
        stream,
        read,
        out,
        upload,
        names,
    } = wire;
    let framing = sent.body.framing();
    write_head(out.head(), request, added, framing);
    queue_body(out, upload, sent.body, framing)?;
    // What the answer's head is read as: one to a `HEAD`, to a handshake.
    let asked = (request.method() == Method::HEAD, sent.handshake);
    if upload.is_none() {
        if poll_fn(|cx| out.poll_write(stream, cx)).await.is_err() {
            return Err(Failed::NothingBack);
        }
        let mut received = false;
        return poll_fn(|cx| poll_head(stream, read, names, &mut received, asked, cx)).await;
    }
    // A streamed body: it goes up while the answer is awaited.
    let mut received = false;
    let mut abandoned = false;
    let answered = poll_fn(|cx| {
        if let Some(going) = upload.as_mut() {
            match going.poll(out, stream, cx) {
                Poll::Ready(Ok(())) => *upload = None,
                Poll::Ready(Err(UploadError::Upstream)) => {
                    // It takes no more: its answer (if any) is still read,
                    // and the connection is not reused.
                    *upload = None;
                    abandoned = true;
                }
                Poll::Ready(Err(UploadError::Client)) => {
                    return Poll::Ready(Err(Failed::ClientBody))
                }
                Poll::Pending => {}
            }
        }
        poll_head(stream, read, names, &mut received, asked, cx)
    })
    .await;
    match answered {
        Ok(mut head) => {
            // An upstream that answers before it read the whole body and
            // closes the connection after its answer reads no more of it.
            if upload.is_some() && !head.keep_alive {
                *upload = None;
            }
            head.keep_alive &= !abandoned;
            Ok(head)
        }
        // Nothing of the body was taken: another attempt may send it.
        Err(Failed::NothingBack | Failed::Broken) => {
            if let Some(unsent) = upload.take().filter(Upload::untouched) {
                *sent.body = RequestBody::Streamed(unsent.into_body());
            }
            answered
        }
        failed => failed,
    }
}

/// Queues the request's `body` behind its head: a held one in the same
/// write (copied when short), a streamed one as the `upload` that goes up
/// while the answer is awaited.
#[inline(always)]
fn queue_body(
    out: &mut Outflow,
    upload: &mut Option<Upload>,
    body: &mut RequestBody,
    framing: Framing,
) -> Result<(), Failed> {
    match body {
        RequestBody::None => {}
        RequestBody::Whole(bytes) => {
            if bytes.len() < COPY_BELOW {
                out.extend(bytes);
            } else {
                let mut length = crate::http1::outflow::BodyOut::Length(bytes.len() as u64);
                let _ = out.push(&mut length, bytes.clone());
            }
        }
        RequestBody::Streamed(_) => {
            if let Some(streamed) = body.take_streamed() {
                *upload = Some(Upload::new(streamed, framing));
            }
        }
        // Never sent by an exchange: `send_on` retries only what is held.
        RequestBody::Taken => return Err(Failed::Broken),
    }
    Ok(())
}

/// Reads until `read` holds the answer's head; `received`: some of it
/// arrived already.
fn poll_head<S: UpstreamStream>(
    stream: &mut S,
    read: &mut BytesMut,
    names: &mut Names,
    received: &mut bool,
    (head_request, handshake): (bool, bool),
    cx: &mut Context<'_>,
) -> Poll<Result<Head, Failed>> {
    loop {
        // Nothing to parse before the first read (a poll after a wake-up
        // starts here again).
        if !read.is_empty() {
            if let Some(head) = parse_head(read, names, head_request, handshake)? {
                if body_to_wait_for(&head.framing, read) {
                    // Most answers come whole in one read; one whose body
                    // did not may be held back by Nagle until the head is
                    // acked.
                    stream.ack_now();
                }
                return Poll::Ready(Ok(head));
            }
        }
        if read.len() >= MAX_HEAD_BYTES {
            return Poll::Ready(Err(Failed::Broken));
        }
        if read.capacity() - read.len() < INITIAL_BUFFER {
            read.reserve(INITIAL_BUFFER);
        }
        match ready!(stream.poll_fill(cx, read)) {
            Ok(0) | Err(_) if !*received => return Poll::Ready(Err(Failed::NothingBack)),
            Ok(0) | Err(_) => return Poll::Ready(Err(Failed::Broken)),
            Ok(_) => *received = true,
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

/// The request line and fields as hyper's client writes them (lower-case
/// names, in the map's order), then the `added` fields, then the body's
/// framing as sluice frames it: the client's `Content-Length` and
/// `Transfer-Encoding` never go on, nor its `Expect` (sluice answered it:
/// docs/edge-behaviour.md, "Request framing").
fn write_head<B>(out: &mut Vec<u8>, request: &Request<B>, added: &AddedFields, framing: Framing) {
    out.extend_from_slice(request.method().as_str().as_bytes());
    out.push(b' ');
    let target = request.uri().path_and_query().map_or("/", |p| p.as_str());
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut declared = false;
    for (name, value) in request.headers() {
        if *name == header::CONTENT_LENGTH {
            declared = true;
            continue;
        }
        if *name == header::TRANSFER_ENCODING || *name == header::EXPECT {
            continue;
        }
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    for (name, value) in &added.fields {
        field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    if let Some(id) = &added.request_id {
        field(out, b"x-request-id", id.as_bytes());
    }
    if let Some(trace) = &added.trace {
        trace.write_lines(out);
    }
    match framing {
        // A declared zero (what a client sends with an empty POST) is kept.
        Framing::Empty if declared => out.extend_from_slice(b"content-length: 0\r\n"),
        Framing::Empty | Framing::UntilClose => {}
        Framing::Length(length) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.extend_from_slice(b"\r\n");
}

#[inline(always)]
fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Room a response's field map keeps for the fields sluice adds to it (the
/// rate-limit fields), so adding them does not grow it.
const ADDED_FIELDS: usize = 6;

/// Parses a final response head from the front of `read`, consuming it
/// (and any informational heads before it). `None`: not complete yet.
/// `handshake`: a `101` is the answer (the request was a WebSocket
/// handshake), not a failure.
fn parse_head(
    read: &mut BytesMut,
    names: &mut Names,
    head_request: bool,
    handshake: bool,
) -> Result<Option<Head>, Failed> {
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
            101 if handshake => {}
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
        let mut headers = head_fields(&head, &fields, names, &mut framing_fields)?;
        let switched = code == 101;
        let no_body = head_request || switched || matches!(code, 204 | 304);
        let framing = framing_fields.framing(version, no_body)?;
        let keep_alive =
            !switched && framing != Framing::UntilClose && framing_fields.keeps_alive(version);
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
            switched,
        }));
    }
}

/// The head's fields, as offsets into `head` (see [`parse_head`]), in a
/// header map that shares `head`'s buffer, each noted in `framing_fields`.
#[inline]
fn head_fields(
    head: &bytes::Bytes,
    fields: &[[u32; 4]],
    names: &mut Names,
    framing_fields: &mut FramingFields,
) -> Result<HeaderMap, Failed> {
    let mut headers = super::spare_map::take(fields.len() + ADDED_FIELDS);
    // A `Connection` field that only says `keep-alive` or `close` (what
    // upstreams send) is not kept: it is hop-by-hop and names no field
    // to strip, so the proxy's stripping would only find and remove it
    // again. Put back if a field it could name turns up.
    let mut set_aside: SmallVec<[HeaderValue; 1]> = SmallVec::new();
    let mut named_option = false;
    for (index, &[name_start, name_end, value_start, value_end]) in fields.iter().enumerate() {
        let name = names
            .find(index, &head[name_start as usize..name_end as usize])
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

/// Makes several `Content-Length` values that agree (a list, or several
/// fields) one field with one value, as the HTTP/1.1 exchange relays them
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

#[cfg(test)]
mod tests {
    use super::*;

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
        parse_head(&mut read, &mut Names::default(), false, false)
            .unwrap()
            .unwrap()
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
}
