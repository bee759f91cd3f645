//! The client's request while the proxy works on it: lent to each phase by
//! reference, rewritten for the upstream in place, and taken only when it is
//! handed to hyper's client (a body, an upgrade).
//!
//! A `Request<Incoming>` is 264 bytes. Passed by value, it was copied each
//! time it crossed a function or future boundary on its way from hyper to
//! the upstream: ten copies per request, about 500 instructions, paid by
//! refused requests too. Lent, it is not copied at all on its way to a plain
//! exchange (a `GET` or `HEAD` without a body), which writes it from here.

use http::Request;
use hyper::body::Incoming;

/// A client request that stays where hyper's service put it unless it is
/// handed to hyper's client.
#[derive(Debug)]
pub struct ClientRequest<B = Incoming>(Option<Request<B>>);

impl<B> ClientRequest<B> {
    pub fn new(request: Request<B>) -> ClientRequest<B> {
        ClientRequest(Some(request))
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

    /// The request itself, to forward it.
    ///
    /// # Panics
    /// When taken before (see [`ClientRequest::get`]).
    #[inline]
    pub fn take(&mut self) -> Request<B> {
        self.0.take().expect("a request is forwarded once")
    }
}
