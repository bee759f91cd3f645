//! An HTTP/3 request's body as the proxy reads it, and its answer sent
//! back on the stream.
//!
//! A request whose stream ends with its head (a GET, as clients send it)
//! has no body at all, so it is forwarded without one. Otherwise the body
//! streams as it arrives, its length known from `content-length` when the
//! client gave one.
//!
//! The answer: its head, then its body frame by frame and its trailers.
//! A frame the client does not take within `send_timeout` (its flow
//! control window kept shut) abandons the answer and resets the stream
//! (`H3_REQUEST_CANCELLED`), as over HTTP/2; an upstream body that fails
//! midway resets it too, so the client cannot take a cut answer for a
//! whole one.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures_util::FutureExt;
use h3::error::Code;
use h3::server::RequestStream;
use http::{header, HeaderMap, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

use crate::proxy::forward::strip_hop_by_hop;
use crate::proxy::respond::ProxyBody;
use crate::proxy::{BodyFailure, ClientBody, StreamedBody};

type Receiving = RequestStream<h3_quinn::RecvStream, Bytes>;
type Sending = RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;

/// The request body that `recv` carries, sent with `headers`. Without
/// `content-length`, whether there is a body at all is waited for (at most
/// `within`, the body's own deadline): a GET whose end comes just after its
/// head is forwarded without one, not as a chunked body of nothing.
pub async fn of_request(mut recv: Receiving, headers: &HeaderMap, within: Duration) -> ClientBody {
    let length = (headers.get(header::CONTENT_LENGTH))
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let next = std::future::poll_fn(|cx| recv.poll_recv_data(cx).map_ok(to_bytes));
    let first = match length {
        Some(_) => next.now_or_never(),
        None => tokio::time::timeout(within, next).await.ok(),
    };
    let (first, state) = match first {
        // Ended with its head, or with trailers alone (rare).
        Some(Ok(None)) => {
            let trailers = std::future::poll_fn(|cx| recv.poll_recv_trailers(cx)).now_or_never();
            match trailers {
                Some(Ok(None)) => return ClientBody::Empty,
                Some(Ok(Some(trailers))) => (Some(Frame::trailers(trailers)), State::Done),
                // Still to come, or the error again when the proxy reads.
                Some(Err(_)) | None => (None, State::Trailers),
            }
        }
        Some(Ok(Some(data))) => (Some(Frame::data(data)), State::Data),
        // The error comes again when the proxy reads on.
        Some(Err(_)) | None => (None, State::Data),
    };
    let sent = first
        .as_ref()
        .and_then(Frame::data_ref)
        .map_or(0, |data| data.len() as u64);
    ClientBody::Streamed(StreamedBody(Box::pin(RequestBody {
        recv,
        first,
        left: length.map(|length| length.saturating_sub(sent)),
        state,
    })))
}

fn to_bytes(data: Option<impl Buf>) -> Option<Bytes> {
    data.map(|mut data| data.copy_to_bytes(data.remaining()))
}

/// A request body arriving on its stream.
struct RequestBody {
    recv: Receiving,
    /// What was read before the proxy asked, handed on first.
    first: Option<Frame<Bytes>>,
    /// What `content-length` says is still to come.
    left: Option<u64>,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Data,
    Trailers,
    Done,
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyFailure;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFailure>>> {
        let this = &mut *self;
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        loop {
            match this.state {
                State::Data => match this.recv.poll_recv_data(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(Some(data))) => {
                        let data = to_bytes(Some(data)).unwrap_or_default();
                        if let Some(left) = &mut this.left {
                            *left = left.saturating_sub(data.len() as u64);
                        }
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    Poll::Ready(Ok(None)) => this.state = State::Trailers,
                    Poll::Ready(Err(error)) => {
                        this.state = State::Done;
                        return Poll::Ready(Some(Err(Box::new(error))));
                    }
                },
                State::Trailers => {
                    let polled = this.recv.poll_recv_trailers(cx);
                    let Poll::Ready(trailers) = polled else {
                        return Poll::Pending;
                    };
                    this.state = State::Done;
                    return Poll::Ready(match trailers {
                        Ok(Some(trailers)) => Some(Ok(Frame::trailers(trailers))),
                        Ok(None) => None,
                        Err(error) => Some(Err(Box::new(error))),
                    });
                }
                State::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.state == State::Done
    }

    fn size_hint(&self) -> SizeHint {
        let first = (self.first.as_ref().and_then(Frame::data_ref)).map_or(0, |d| d.len() as u64);
        match self.left {
            Some(left) => SizeHint::with_exact(left + first),
            None => {
                let mut hint = SizeHint::new();
                hint.set_lower(first);
                hint
            }
        }
    }
}

/// Sends `response` on `send` (see the module docs).
pub async fn answer(send: &mut Sending, response: Response<ProxyBody>, send_timeout: Duration) {
    let (mut head, mut body) = response.into_parts();
    // HTTP/3 has no connection-specific fields (RFC 9114 §4.2): an
    // upstream's were stripped as it answered, and this holds sluice's own
    // answers to the same, in one pass over the names.
    strip_hop_by_hop(&mut head.headers, false);
    let sent = tokio::time::timeout(
        send_timeout,
        send.send_response(Response::from_parts(head, ())),
    );
    if !matches!(sent.await, Ok(Ok(()))) {
        return send.stop_stream(Code::H3_REQUEST_CANCELLED);
    }
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(error) => {
                tracing::debug!(%error, "HTTP/3 answer's body failed");
                return send.stop_stream(Code::H3_INTERNAL_ERROR);
            }
        };
        let sending = match frame.into_data() {
            Ok(data) if data.is_empty() => continue,
            Ok(data) => tokio::time::timeout(send_timeout, send.send_data(data)).await,
            Err(frame) => match frame.into_trailers() {
                Ok(trailers) => {
                    tokio::time::timeout(send_timeout, send.send_trailers(trailers)).await
                }
                Err(_) => continue,
            },
        };
        if !matches!(sending, Ok(Ok(()))) {
            return send.stop_stream(Code::H3_REQUEST_CANCELLED);
        }
    }
    let _ = tokio::time::timeout(send_timeout, send.finish()).await;
}
