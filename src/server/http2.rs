//! What sluice adds to hyper's HTTP/2 server for each connection it serves
//! (`server/connection.rs` runs it): the `[server]` limits that hold for
//! every protocol (docs/edge-behaviour.md, "Slow clients and deadlines").
//!
//! - A stream whose client takes nothing of its answer for `send_timeout`
//!   is reset ([`stalled`]; [`TrackedBody`] tells it what hyper takes).
//! - A request's fields count as the lines they would be over HTTP/1.1
//!   ([`field_lines`]), and more than `max_headers` is a 431 problem
//!   document ([`too_many_fields`]), as sluice's HTTP/1.1 server answers.
//! - A connection carries at most `max_requests_per_connection` requests
//!   ([`RequestCap`]): counted as hyper accepts their streams, so a stream
//!   the client resets at once counts too. The last one sends GOAWAY;
//!   streams the client opens after it are refused (`REFUSED_STREAM`, safe
//!   to retry elsewhere) without reaching the upstream, and a client that
//!   goes on opening them is disconnected.
//! - An extended `CONNECT` for a WebSocket (RFC 8441) opens one on its
//!   stream ([`websocket`], [`tunnel`]).

mod stalled;
mod tunnel;
pub mod websocket;

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::{Body, Frame, SizeHint};

pub use stalled::StreamExecutor;
use stalled::{took, Took, PIECE};

use super::deadline_io::InFlight;
use crate::problem::{self, Layout, Problem};
use crate::proxy::respond::ProxyBody;
use crate::request_id::{self, MadeId, RequestId};

/// Streams a client may still open after the GOAWAY that
/// `max_requests_per_connection` sent, each refused, before it is
/// disconnected: a compliant client opens none once it has read the GOAWAY,
/// and those it opened before are in flight at most as many as the
/// connection's stream cap allows.
const REFUSED_AT_MOST: u64 = 2 * super::H2_MAX_CONCURRENT_STREAMS as u64;

/// The requests an HTTP/2 connection has accepted, against
/// `server.max_requests_per_connection`. Shared by the connection's service
/// (which counts) and its task (which sends GOAWAY, or disconnects).
#[derive(Debug)]
pub struct RequestCap {
    max: u64,
    accepted: AtomicU64,
}

/// What becomes of a request [`RequestCap::admit`] counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Served.
    Served,
    /// Beyond the cap: its stream is refused.
    Refused,
}

impl RequestCap {
    pub fn new(max: u32) -> RequestCap {
        RequestCap {
            max: u64::from(max),
            accepted: AtomicU64::new(0),
        }
    }

    /// Counts a request hyper accepted.
    pub fn admit(&self) -> Admission {
        // Only the connection's task calls the service: no race to order.
        let accepted = self.accepted.fetch_add(1, Ordering::Relaxed) + 1;
        if accepted <= self.max {
            Admission::Served
        } else {
            Admission::Refused
        }
    }

    /// Whether the connection has accepted its last request: time for
    /// GOAWAY.
    pub fn reached(&self) -> bool {
        self.accepted.load(Ordering::Relaxed) >= self.max
    }

    /// Whether the client went on opening streams long after the GOAWAY:
    /// time to disconnect it.
    pub fn overrun(&self) -> bool {
        self.accepted.load(Ordering::Relaxed) > self.max.saturating_add(REFUSED_AT_MOST)
    }
}

/// The error that makes hyper refuse a stream (`RST_STREAM` /
/// `REFUSED_STREAM`: not processed, so the client may send it again on
/// another connection, RFC 9113 §8.7).
pub fn refused() -> h2::Error {
    h2::Error::from(h2::Reason::REFUSED_STREAM)
}

/// The lines `request`'s fields would take in an HTTP/1.1 head: each
/// field line one, but the cookie, which HTTP/2 may send in crumbs that
/// HTTP/1.1 sends as one line (RFC 9113 §8.2.3), and `Host`, which
/// `:authority` stands for.
pub fn field_lines<B>(request: &Request<B>) -> usize {
    let headers = request.headers();
    let crumbs = headers.get_all(header::COOKIE).iter().count();
    let host =
        usize::from(request.uri().authority().is_some() && !headers.contains_key(header::HOST));
    headers.len() - crumbs.saturating_sub(1) + host
}

/// Writes the 431 of a request with more than `max_headers` field lines
/// into the vacant `response`, as sluice's HTTP/1.1 server answers one
/// (the stream ends with it; the connection goes on).
pub fn too_many_fields(response: &mut Response<ProxyBody>, max_headers: usize) {
    let status = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
    let detail = format!("the request has more than {max_headers} header fields");
    let id = MadeId::next();
    let document = Problem::new(status, &detail).to_json(Layout::ByName);
    let body = problem::with_request_id(&document, &RequestId::Made(id));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, problem::CONTENT_TYPE.clone());
    if let Ok(id) = HeaderValue::from_bytes(id.as_bytes()) {
        headers.insert(request_id::HEADER, id);
    }
    *response.body_mut() = ProxyBody::written(Bytes::from(body));
}

/// A response body as hyper's HTTP/2 server takes it: in pieces of at most
/// [`PIECE`] bytes, each piece taken told to the stream's send clock
/// ([`stalled`]), and its request counted as in flight until hyper has
/// sent it or dropped it (sluice's own server holds the count itself).
#[derive(Debug)]
pub struct TrackedBody {
    body: ProxyBody,
    /// What is left of the last data frame, handed on in pieces.
    rest: Bytes,
    _in_flight: InFlight,
}

impl TrackedBody {
    pub fn new(body: ProxyBody, in_flight: InFlight) -> TrackedBody {
        TrackedBody {
            body,
            rest: Bytes::new(),
            _in_flight: in_flight,
        }
    }

    /// The next piece of `data`, the rest kept.
    fn piece(&mut self, mut data: Bytes) -> Frame<Bytes> {
        if data.len() > PIECE {
            self.rest = data.split_off(PIECE);
        }
        took(Took::Data);
        Frame::data(data)
    }
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = <ProxyBody as Body>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if !this.rest.is_empty() {
            let rest = std::mem::take(&mut this.rest);
            return Poll::Ready(Some(Ok(this.piece(rest))));
        }
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        match polled {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) if data.has_remaining() => Poll::Ready(Some(Ok(this.piece(data)))),
                Ok(data) => {
                    took(Took::Other);
                    Poll::Ready(Some(Ok(Frame::data(data))))
                }
                Err(frame) => {
                    took(Took::Other);
                    Poll::Ready(Some(Ok(frame)))
                }
            },
            other => {
                took(Took::Other);
                other
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self.rest.len() as u64;
        let hint = self.body.size_hint();
        let mut sum = SizeHint::new();
        sum.set_lower(hint.lower() + rest);
        if let Some(upper) = hint.upper() {
            sum.set_upper(upper + rest);
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(lines: &[(&str, &str)]) -> Request<()> {
        let mut request = Request::get("http://a.example/").body(()).unwrap();
        for (name, value) in lines {
            request.headers_mut().append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        request
    }

    #[test]
    fn fields_count_as_the_lines_of_an_http1_head() {
        // `:authority` stands for the Host line.
        assert_eq!(field_lines(&request(&[])), 1);
        assert_eq!(
            field_lines(&request(&[("accept", "*/*"), ("a", "1"), ("a", "2")])),
            4
        );
        // Cookie crumbs are one line.
        let crumbs = [("cookie", "a=1"), ("cookie", "b=2"), ("cookie", "c=3")];
        assert_eq!(field_lines(&request(&crumbs)), 2);
        // A Host field is its own line, with or without an authority.
        assert_eq!(field_lines(&request(&[("host", "a.example")])), 1);
        let mut no_authority = request(&[("x", "1")]);
        *no_authority.uri_mut() = "/".parse().unwrap();
        assert_eq!(field_lines(&no_authority), 1);
    }

    #[test]
    fn the_cap_serves_its_count_then_refuses_then_gives_up() {
        let cap = RequestCap::new(3);
        for _ in 0..2 {
            assert_eq!(cap.admit(), Admission::Served);
            assert!(!cap.reached());
        }
        assert_eq!(cap.admit(), Admission::Served);
        assert!(cap.reached());
        for _ in 0..REFUSED_AT_MOST {
            assert_eq!(cap.admit(), Admission::Refused);
            assert!(!cap.overrun());
        }
        assert_eq!(cap.admit(), Admission::Refused);
        assert!(cap.overrun());
    }

    #[tokio::test]
    async fn a_large_frame_is_handed_on_in_pieces_and_whole() {
        use http_body_util::BodyExt;
        let data: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        let exchanges = std::sync::Arc::new(super::super::deadline_io::Exchanges::default());
        let mut body = TrackedBody::new(
            ProxyBody::written(Bytes::from(data.clone())),
            exchanges.start(),
        );
        assert_eq!(body.size_hint().exact(), Some(40_000));
        let mut sizes = Vec::new();
        let mut got = Vec::new();
        while let Some(frame) = body.frame().await {
            let data = frame.unwrap().into_data().unwrap();
            sizes.push(data.len());
            got.extend_from_slice(&data);
            assert_eq!(body.size_hint().exact(), Some(40_000 - got.len() as u64));
        }
        assert_eq!(sizes, [PIECE, PIECE, 40_000 - 2 * PIECE]);
        assert_eq!(got, data);
        assert!(body.is_end_stream());
    }
}
