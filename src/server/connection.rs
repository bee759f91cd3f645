//! One client connection from accept to close: sluice's own HTTP/1.1 server
//! while the requests are ones it takes (`server/http1.rs`), then hyper's
//! for the rest of the connection, with a [`Handler`] answering each
//! request (the proxy; a recorder in the differential check,
//! `server/differential.rs`).
//!
//! Which of hyper's servers takes over depends on where the connection is.
//! At its first byte it may be HTTP/2 with prior knowledge (RFC 9113 §3.3):
//! hyper-util's auto server looks at the preface and picks. After a request
//! of sluice's own, it is an HTTP/1.1 connection for good, and hyper's
//! HTTP/1 server takes it: a preface there is a request line with an HTTP
//! version sluice does not speak, which hyper's HTTP/1 server refuses (it
//! closes the connection, or answers 400), as on a connection it served
//! from the start (docs/edge-behaviour.md, "Which server reads a request").

use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use hyper::body::{Body, Frame, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};

use super::deadline_io::{DeadlineIo, Exchanges, InFlight};
use super::drain::DrainHandle;
use super::http1::{first_bytes, HeadLimits, Http1, Next, Prefixed};
use crate::proxy::respond::{self, ProxyBody};
use crate::proxy::{ClientBody, ClientRequest};

/// What answers a connection's requests.
pub trait Handler: Clone + Send + Sync + 'static {
    /// Answers `request` into the [`respond::vacant`] `response`;
    /// `exchanges` is the connection's, to mark an upgrade.
    fn handle<'a>(
        &'a self,
        request: &'a mut ClientRequest,
        exchanges: &'a Exchanges,
        response: &'a mut Response<ProxyBody>,
    ) -> impl Future<Output = ()> + Send + 'a;
}

/// hyper's two servers a connection may be handed to (see the module
/// docs), with the same `[server]` settings.
#[derive(Debug)]
pub struct HyperServers {
    /// For a connection at its first byte: HTTP/1.1 or h2c.
    pub auto: auto::Builder<TokioExecutor>,
    /// For a connection that already carried a request: HTTP/1.1 only.
    pub http1: hyper::server::conn::http1::Builder,
}

/// A client connection and what its requests need.
pub struct Connection<H> {
    pub handler: H,
    pub peer: SocketAddr,
    pub head_limits: HeadLimits,
    pub exchanges: Arc<Exchanges>,
    pub servers: Arc<HyperServers>,
}

impl<H: Handler> Connection<H> {
    /// Serves the connection until it ends: sluice's own HTTP/1.1 server
    /// answers while the requests are ones it takes (`server/http1.rs`),
    /// then hyper's takes over for the rest of the connection. `draining`
    /// changes when the server shuts down: an idle connection closes at
    /// once, a busy one after its response (which says `Connection: close`).
    ///
    /// A connection waiting for the first byte of a request holds only its
    /// socket, its clocks and these settings: what requests need (the
    /// buffers, the request and response slots, the future of the
    /// exchange in flight) is [`Connection::busy`]'s, boxed, and given back
    /// once the connection has been quiet for a while (`DeadlineIo`'s quiet
    /// clock), so a busy connection allocates it once, not per request.
    // Not an `async fn`: see the `async` block below.
    #[allow(clippy::manual_async_fn)]
    pub fn serve<'a, S>(
        &'a self,
        mut io: DeadlineIo<S>,
        draining: &'a DrainHandle,
    ) -> impl Future<Output = ()> + Send + 'a
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        // An `async` block rather than an `async fn`: `io` is kept once,
        // where an `async fn` keeps a second copy of its arguments.
        async move {
            let mut drained = std::pin::pin!(draining.wait());
            let mut first = true;
            let handed_over = loop {
                let read = tokio::select! {
                    biased;
                    read = first_bytes(&mut io) => read,
                    _ = &mut drained => return,
                };
                let Some(read) = read else { return };
                io.report_quiet(true);
                let http1 = Http1::new(io, read);
                match Box::pin(self.busy(http1, &mut first, drained.as_mut())).await {
                    Busy::Quiet(quiet) => io = quiet,
                    Busy::Ended => return,
                    Busy::Hyper(prefixed) => break prefixed,
                }
            };
            Box::pin(self.hand_over(handed_over, first, drained)).await
        }
    }

    /// The connection while requests come: each is read into one slot and
    /// stays there (see `proxy/client_request.rs`); each answer is written
    /// into the other. `first`: nothing was served on the connection yet.
    async fn busy<S>(
        &self,
        mut http1: Http1<DeadlineIo<S>>,
        first: &mut bool,
        mut drained: Pin<&mut impl Future>,
    ) -> Busy<S>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let mut request = ClientRequest::vacant();
        let mut response = respond::vacant();
        loop {
            let next = if http1.is_idle() {
                tokio::select! {
                    biased;
                    next = http1.next(self.head_limits, &mut request) => next,
                    _ = &mut drained => return Busy::Ended,
                }
            } else {
                http1.next(self.head_limits, &mut request).await
            };
            match next {
                Next::Request => *first = false,
                Next::Closed => return Busy::Ended,
                Next::Quiet => return Busy::Quiet(http1.into_io()),
                Next::Hyper => {
                    // hyper's reads know nothing of the quiet clock.
                    http1.io_mut().report_quiet(false);
                    return Busy::Hyper(http1.into_hyper());
                }
            }
            // In flight, for the read clocks, until the answer's body is
            // sent or dropped.
            http1.io_mut().exchange_began();
            let answered = {
                let exchange = std::pin::pin!(self.handler.handle(
                    &mut request,
                    &self.exchanges,
                    &mut response
                ));
                http1.answer(exchange).await
            };
            // None: the client left before its answer.
            if answered.is_none() {
                return Busy::Ended;
            }
            let own_fields = response.body_mut().take_own_fields();
            let written = http1.respond(&mut response, &own_fields).await;
            respond::vacate(&mut response);
            http1.io_mut().exchange_ended();
            // The request stays, with its map, for the next one read.
            request.release();
            match written {
                Ok(true) => {}
                Ok(false) => {
                    http1.close().await;
                    return Busy::Ended;
                }
                Err(error) => {
                    tracing::debug!(peer = %self.peer, %error, "connection ended with an error");
                    return Busy::Ended;
                }
            }
        }
    }

    /// Serves the whole connection with hyper's servers alone, as sluice
    /// did before it had its own: the other side of the differential check.
    #[cfg(any(test, feature = "differential"))]
    pub async fn serve_with_hyper_alone<S>(&self, io: DeadlineIo<S>, draining: DrainHandle)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let drained = std::pin::pin!(draining.wait());
        self.hand_over(
            Http1::new(io, bytes::BytesMut::new()).into_hyper(),
            true,
            drained,
        )
        .await;
    }

    /// The rest of the connection, with hyper's server: the auto one (h2c
    /// or HTTP/1.1) when nothing was served yet (`first`), else HTTP/1.1.
    async fn hand_over<S>(
        &self,
        io: Prefixed<DeadlineIo<S>>,
        first: bool,
        drained: Pin<&mut impl Future>,
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let handler = self.handler.clone();
        let exchanges = Arc::clone(&self.exchanges);
        let peer = self.peer;
        let servers = &self.servers;
        let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
            // Counted from the call, so the socket's read clocks stop
            // while the request is in the service.
            let in_flight = exchanges.start();
            let exchanges = Arc::clone(&exchanges);
            let handler = handler.clone();
            async move {
                let mut request = ClientRequest::new(request.map(ClientBody::Hyper));
                let mut response = respond::vacant();
                handler
                    .handle(&mut request, &exchanges, &mut response)
                    .await;
                // hyper writes only what is in the map.
                let own_fields = response.body_mut().take_own_fields();
                own_fields.into_map(response.headers_mut());
                Ok::<_, Infallible>(response.map(|body| TrackedBody {
                    body,
                    _in_flight: in_flight,
                }))
            }
        });
        let io = TokioIo::new(io);
        if first {
            let connection = servers.auto.serve_connection_with_upgrades(io, service);
            run(connection, drained, peer, |connection| {
                connection.graceful_shutdown()
            })
            .await
        } else {
            let connection = servers.http1.serve_connection(io, service).with_upgrades();
            run(connection, drained, peer, |connection| {
                connection.graceful_shutdown()
            })
            .await
        }
    }
}

/// How a busy connection's requests ended.
enum Busy<S> {
    /// Quiet: the connection goes on, holding nothing for requests.
    Quiet(DeadlineIo<S>),
    /// Closed, failed, or drained.
    Ended,
    /// The connection is hyper's, with what was read in front.
    Hyper(Prefixed<DeadlineIo<S>>),
}

/// Drives one of hyper's connections to its end, shutting it down
/// gracefully once `drained` resolves.
async fn run<C, E>(
    connection: C,
    drained: Pin<&mut impl Future>,
    peer: SocketAddr,
    shutdown: impl FnOnce(Pin<&mut C>),
) where
    C: Future<Output = Result<(), E>>,
    E: Display,
{
    let mut connection = std::pin::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        _ = drained => {
            shutdown(connection.as_mut());
            connection.await
        }
    };
    if let Err(error) = ended {
        tracing::debug!(%peer, %error, "connection ended with an error");
    }
}

/// A response body that keeps its request counted as in flight until hyper
/// has sent it or dropped it (sluice's own server holds the count itself).
#[derive(Debug)]
struct TrackedBody {
    body: ProxyBody,
    _in_flight: InFlight,
}

impl Body for TrackedBody {
    type Data = Bytes;
    type Error = <ProxyBody as Body>::Error;

    #[inline]
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
