//! The client's request while the proxy works on it: read into the
//! connection's slot, lent to each phase by reference and rewritten for
//! the upstream in place; only its body is taken out, to be sent.
//!
//! A `Request` is over 200 bytes. Passed by value, it was copied each time
//! it crossed a function or future boundary on its way to the upstream: ten
//! copies per request, paid by refused requests too. Lent, it is not copied
//! at all: the upstream exchange writes its head from here.
//!
//! The request comes from sluice's own HTTP/1.1 server (`server/http1.rs`),
//! its body already here whole or arriving through a pipe from the
//! connection, or from hyper's HTTP/2 server, with hyper's body:
//! [`ClientBody`] is any of them.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Uri, Version};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use sync_wrapper::SyncWrapper;

use crate::http1::pipe::Receiver;

/// A client request that stays where the server put it.
#[derive(Debug)]
pub struct ClientRequest(Option<Request<ClientBody>>);

impl ClientRequest {
    pub fn new(request: Request<ClientBody>) -> ClientRequest {
        ClientRequest(Some(request))
    }

    /// No request yet: sluice's own server reads one into it
    /// ([`ClientRequest::refill`]).
    pub fn vacant() -> ClientRequest {
        ClientRequest(None)
    }

    /// The request.
    ///
    /// # Panics
    /// In a vacant slot: a request is read into it before anything looks.
    #[inline]
    pub fn get(&self) -> &Request<ClientBody> {
        self.0.as_ref().expect("a request was read into the slot")
    }

    /// See [`ClientRequest::get`].
    #[inline]
    pub fn get_mut(&mut self) -> &mut Request<ClientBody> {
        self.0.as_mut().expect("a request was read into the slot")
    }

    /// Drops the request, if it is still here: the slot is vacant again.
    #[inline]
    pub fn clear(&mut self) {
        self.0 = None;
    }
    /// A request of `method` and `version` with no body in the slot, for
    /// sluice's own server to fill in: the one left there by
    /// [`ClientRequest::release`], reset, or a new one. Reusing it keeps its
    /// header map's room, so that reading a request allocates nothing and
    /// drops no empty map.
    pub fn refill(&mut self, method: Method, version: Version) -> &mut Request<ClientBody> {
        let request = self
            .0
            .get_or_insert_with(|| Request::new(ClientBody::Empty));
        *request.method_mut() = method;
        *request.version_mut() = version;
        // The body went with `release`.
        request.extensions_mut().clear();
        if !request.headers().is_empty() {
            request.headers_mut().clear();
        }
        request
    }

    /// Drops what the answered request holds of the bytes it was read from
    /// (its target, its field values: the read buffer's space is only
    /// reused once nothing shares it) and any body, keeping the request for
    /// [`ClientRequest::refill`].
    pub fn release(&mut self) {
        if let Some(request) = &mut self.0 {
            request.headers_mut().clear();
            *request.uri_mut() = Uri::default();
            *request.body_mut() = ClientBody::Empty;
        }
    }
}

/// The client's request body: none at all, one here whole (it arrived with
/// its head, or was read whole so that it can be sent to another server:
/// docs/upstreams.md, "Retries"), one arriving through the connection's
/// pipe (`http1/pipe.rs`), hyper's, of an HTTP/2 stream, or another
/// server's (HTTP/3).
#[derive(Debug)]
pub enum ClientBody {
    Empty,
    Read(Bytes),
    Piped(Receiver),
    Hyper(Incoming),
    /// One whose start was read for a rule's key and found longer than
    /// the bound (`proxy/key_body.rs`): that start, then the rest.
    Prefixed(Box<Prefixed>),
    /// A gRPC call's, its messages each admitted by the call's message
    /// rules before they pass (`proxy/messages/grpc.rs`).
    Metered(MeteredBody),
    /// One another server reads for the proxy: an HTTP/3 request's
    /// (`server/http3/body.rs`).
    Streamed(StreamedBody),
}

/// A body a server reads its own way ([`ClientBody::Streamed`]).
pub struct StreamedBody(pub Pin<Box<dyn Body<Data = Bytes, Error = BodyFailure> + Send + Sync>>);

impl std::fmt::Debug for StreamedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamedBody").finish_non_exhaustive()
    }
}

/// A body whose frames a gate lets through ([`ClientBody::Metered`]);
/// only ever polled, so made `Sync` by [`SyncWrapper`] (its admissions'
/// futures are `Send` alone).
pub type MeteredBody = SyncWrapper<Pin<Box<dyn Body<Data = Bytes, Error = BodyFailure> + Send>>>;

/// A body read in part: what was read, sent first, then what follows.
#[derive(Debug)]
pub struct Prefixed {
    /// Not yet sent (empty once it was).
    pub read: Bytes,
    /// The body's trailer fields, when they came before the bound.
    pub trailers: Option<http::HeaderMap>,
    /// The rest of the body, as it arrives.
    pub rest: ClientBody,
}

impl Prefixed {
    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFailure>>> {
        if !self.read.is_empty() {
            return Poll::Ready(Some(Ok(Frame::data(std::mem::take(&mut self.read)))));
        }
        if let Some(trailers) = self.trailers.take() {
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }
}

/// A body error, whichever body it came from.
pub type BodyFailure = Box<dyn std::error::Error + Send + Sync>;

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BodyFailure;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFailure>>> {
        let this = self.get_mut();
        match this {
            ClientBody::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            ClientBody::Piped(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            ClientBody::Empty => Poll::Ready(None),
            ClientBody::Read(bytes) => {
                let bytes = std::mem::take(bytes);
                *this = ClientBody::Empty;
                Poll::Ready((!bytes.is_empty()).then(|| Ok(Frame::data(bytes))))
            }
            ClientBody::Prefixed(prefixed) => prefixed.poll_frame(cx),
            ClientBody::Metered(body) => body.get_mut().as_mut().poll_frame(cx),
            ClientBody::Streamed(body) => body.0.as_mut().poll_frame(cx),
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Hyper(body) => body.is_end_stream(),
            ClientBody::Piped(body) => body.is_end_stream(),
            ClientBody::Empty => true,
            ClientBody::Read(bytes) => bytes.is_empty(),
            ClientBody::Prefixed(prefixed) => {
                prefixed.read.is_empty()
                    && prefixed.trailers.is_none()
                    && prefixed.rest.is_end_stream()
            }
            // Unknown until polled: its end is a frame like another.
            ClientBody::Metered(_) => false,
            ClientBody::Streamed(body) => body.0.is_end_stream(),
        }
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Hyper(body) => body.size_hint(),
            ClientBody::Piped(body) => body.size_hint(),
            ClientBody::Empty => SizeHint::with_exact(0),
            ClientBody::Read(bytes) => SizeHint::with_exact(bytes.len() as u64),
            ClientBody::Prefixed(prefixed) => {
                let rest = prefixed.rest.size_hint();
                let read = prefixed.read.len() as u64;
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(read));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper.saturating_add(read));
                }
                hint
            }
            ClientBody::Metered(_) => SizeHint::default(),
            ClientBody::Streamed(body) => body.0.size_hint(),
        }
    }
}
