//! The client's request while the proxy works on it: lent to each phase by
//! reference, rewritten for the upstream in place, and taken only when it is
//! handed to hyper's client (a body, an upgrade).
//!
//! A `Request<Incoming>` is 264 bytes. Passed by value, it was copied each
//! time it crossed a function or future boundary on its way from hyper to
//! the upstream: ten copies per request, paid by refused requests too. Lent, it is not copied at all on its way to a plain
//! exchange (a `GET` or `HEAD` without a body), which writes it from here.
//!
//! The request comes from hyper's server, with hyper's body, or from
//! sluice's own HTTP/1.1 server (`server/http1.rs`), which takes only
//! requests that have no body: [`ClientBody`] is either.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Uri, Version};
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// A client request that stays where the server put it unless it is
/// handed to hyper's client.
#[derive(Debug)]
pub struct ClientRequest<B = ClientBody>(Option<Request<B>>);

impl<B> ClientRequest<B> {
    pub fn new(request: Request<B>) -> ClientRequest<B> {
        ClientRequest(Some(request))
    }

    /// No request yet: sluice's own server reads one into it
    /// ([`ClientRequest::refill`]).
    pub fn vacant() -> ClientRequest<B> {
        ClientRequest(None)
    }

    /// The request, until it is taken.
    ///
    /// # Panics
    /// After [`ClientRequest::take`]: a request is forwarded once, and
    /// nothing looks at it afterwards.
    #[inline]
    pub fn get(&self) -> &Request<B> {
        self.0.as_ref().expect("the request was already forwarded")
    }

    /// See [`ClientRequest::get`].
    #[inline]
    pub fn get_mut(&mut self) -> &mut Request<B> {
        self.0.as_mut().expect("the request was already forwarded")
    }

    /// Drops the request, if it is still here: the slot is vacant again.
    #[inline]
    pub fn clear(&mut self) {
        self.0 = None;
    }

    /// Whether the request is still here (not yet handed to hyper's client,
    /// or handed back unsent).
    #[inline]
    pub fn is_held(&self) -> bool {
        self.0.is_some()
    }

    /// Puts back a request hyper's client handed back unsent, so that it
    /// may be sent to another server.
    #[inline]
    pub fn put_back(&mut self, request: Request<B>) {
        self.0 = Some(request);
    }

    /// The request itself, to forward it.
    ///
    /// # Panics
    /// When taken before (see [`ClientRequest::get`]).
    #[inline]
    pub fn take(&mut self) -> Request<B> {
        self.0.take().expect("a request is forwarded once")
    }
}

impl ClientRequest<ClientBody> {
    /// A request with no body in the slot, for sluice's own server to fill
    /// in: the one left there by [`ClientRequest::release`], reset, or a new
    /// one. Reusing it keeps its header map's room, so that reading a
    /// request allocates nothing and drops no empty map.
    pub fn refill(&mut self) -> &mut Request<ClientBody> {
        let request = self
            .0
            .get_or_insert_with(|| Request::new(ClientBody::Empty));
        *request.method_mut() = Method::GET;
        *request.version_mut() = Version::HTTP_11;
        *request.body_mut() = ClientBody::Empty;
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

/// The client's request body: hyper's, none at all (a request sluice's
/// own HTTP/1.1 server read, which it only does for requests without one),
/// or one read whole so that it can be sent to another server
/// (docs/upstreams.md, "Retries").
#[derive(Debug)]
pub enum ClientBody {
    Hyper(Incoming),
    Empty,
    Read(Bytes),
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = hyper::Error;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        match this {
            ClientBody::Hyper(body) => Pin::new(body).poll_frame(cx),
            ClientBody::Empty => Poll::Ready(None),
            ClientBody::Read(bytes) => {
                let bytes = std::mem::take(bytes);
                *this = ClientBody::Empty;
                Poll::Ready((!bytes.is_empty()).then(|| Ok(Frame::data(bytes))))
            }
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Hyper(body) => body.is_end_stream(),
            ClientBody::Empty => true,
            ClientBody::Read(bytes) => bytes.is_empty(),
        }
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Hyper(body) => body.size_hint(),
            ClientBody::Empty => SizeHint::with_exact(0),
            ClientBody::Read(bytes) => SizeHint::with_exact(bytes.len() as u64),
        }
    }
}
