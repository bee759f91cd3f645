//! One client connection from accept to close: sluice's HTTP/1.1 server
//! (`server/http1.rs`) answers every request, with a [`Handler`] answering
//! each one (the proxy; a recorder in the differential check,
//! `server/differential.rs`), unless the connection opens with HTTP/2's
//! preface (prior knowledge, RFC 9113 §3.3): then hyper's HTTP/2 server
//! serves it whole. Only the first bytes of a connection are prior
//! knowledge; later, the preface is a request line with a version sluice
//! does not speak, and the connection closes (docs/edge-behaviour.md,
//! "Which server reads a request").

use std::future::{poll_fn, Future};
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, Response};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::deadline_io::{DeadlineIo, Exchanges};
use super::drain::DrainHandle;
use super::http1::{first_bytes, tunnel, Answered, HeadLimits, Http1, Next};
use super::http2::websocket::{self, TunnelSettings};
use super::http2::{self, Admission, RequestCap, StreamExecutor, TrackedBody};
use crate::http1::transport::{self, Transport};
use crate::metrics::{ConnectionGauges, Protocol};
use crate::proxy::respond::{self, ProxyBody};
use crate::proxy::upgrade::Upgraded;
use crate::proxy::{ClientBody, ClientRequest};

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What answers a connection's requests.
pub trait Handler: Clone + Send + Sync + 'static {
    /// Answers `request` into the [`respond::vacant`] `response`.
    fn handle<'a>(
        &'a self,
        request: &'a mut ClientRequest,
        response: &'a mut Response<ProxyBody>,
    ) -> impl Future<Output = ()> + Send + 'a;
}

/// A client connection and what its requests need.
pub struct Connection<H> {
    pub handler: H,
    pub peer: SocketAddr,
    pub head_limits: HeadLimits,
    /// `server.max_requests_per_connection`.
    pub max_requests: u32,
    pub exchanges: Arc<Exchanges>,
    /// hyper's HTTP/2 server, with the `[server]` settings.
    pub http2: Arc<hyper::server::conn::http2::Builder<StreamExecutor>>,
    /// `sluice_connections`: the connection is counted as HTTP/1 from its
    /// accept, as HTTP/2 once it opens with HTTP/2's preface.
    pub gauges: ConnectionGauges,
}

impl<H: Handler> Connection<H> {
    /// Serves the connection until it ends. `draining` changes when the
    /// server shuts down: an idle HTTP/1 connection closes at once, a busy
    /// one after its response (which says `Connection: close`); an HTTP/2
    /// one is sent GOAWAY and closes once its streams are done.
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
        S: Transport + AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        // An `async` block rather than an `async fn`: `io` is kept once,
        // where an `async fn` keeps a second copy of its arguments.
        async move {
            let mut drained = pin!(draining.wait());
            // Requests read so far, against `max_requests`.
            let mut served = 0;
            loop {
                let read = tokio::select! {
                    biased;
                    read = first_bytes(&mut io) => read,
                    _ = &mut drained => return,
                };
                let Some(mut read) = read else { return };
                if served == 0 && prior_knowledge(&mut io, &mut read).await {
                    // GOAWAY as shutdown begins, not only at the drain
                    // (server/drain.rs says which).
                    let moving = pin!(draining.moving());
                    return Box::pin(self.serve_http2(io, read, moving)).await;
                }
                io.report_quiet(true);
                let http1 = Http1::new(io, read);
                match Box::pin(self.busy(http1, &mut served, drained.as_mut())).await {
                    Busy::Quiet(quiet) => io = quiet,
                    Busy::Ended => return,
                    // Run once the requests' slots are freed: a tunnel
                    // holds only its sockets (boxed: every connection's
                    // future would carry the tunnel's state).
                    Busy::Tunnel(mut io, early, upgraded) => {
                        io.mark_upgraded();
                        return Box::pin(tunnel::run(io, early, *upgraded)).await;
                    }
                }
            }
        }
    }

    /// The connection while requests come: each is read into one slot and
    /// stays there (see `proxy/client_request.rs`); each answer is written
    /// into the other. `served`: the requests read on the connection so far;
    /// the answer to the `max_requests`th says `connection: close`.
    async fn busy<S>(
        &self,
        mut http1: Http1<DeadlineIo<S>>,
        served: &mut u32,
        mut drained: Pin<&mut impl Future>,
    ) -> Busy<S>
    where
        S: Transport + AsyncRead + AsyncWrite + Unpin + Send + 'static,
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
                Next::Request => {}
                Next::Closed => return Busy::Ended,
                Next::Quiet => return Busy::Quiet(http1.into_io()),
                Next::Refused(refused) => {
                    if let Some((status, detail)) = refused.answer(self.head_limits) {
                        http1.refuse(status, &detail).await;
                    }
                    return Busy::Ended;
                }
            };
            *served += 1;
            if *served >= self.max_requests {
                http1.close_after();
            }
            // In flight, for the read clocks, until the answer's body is
            // sent or dropped.
            http1.io_mut().exchange_began();
            let answered = {
                let exchange = pin!(self.handler.handle(&mut request, &mut response));
                http1.answer(exchange).await
            };
            // None: the client left before its answer.
            if answered.is_none() {
                return Busy::Ended;
            }
            // The request stays, with its map, for the next one read; what
            // it held goes now (a body nobody took is left, and the answer's
            // head says whether the connection goes on after it).
            request.release();
            let own_fields = response.body_mut().take_own_fields();
            let written = http1.respond(&mut response, &own_fields).await;
            http1.io_mut().exchange_ended();
            match written {
                Answered::Kept => {}
                Answered::Close => {
                    http1.close().await;
                    return Busy::Ended;
                }
                Answered::Failed(error) => {
                    tracing::debug!(peer = %self.peer, %error, "connection ended with an error");
                    return Busy::Ended;
                }
                Answered::Tunnel(upgraded) => {
                    let (io, early) = http1.into_parts();
                    return Busy::Tunnel(io, early, upgraded);
                }
            }
        }
    }

    /// The whole connection, HTTP/2 with prior knowledge, through hyper's
    /// server (with what `server/http2.rs` adds): `read` is what was read
    /// of it so far. It is sent GOAWAY when `moving` resolves, or once it
    /// has carried `max_requests` requests.
    async fn serve_http2<S>(
        &self,
        mut io: DeadlineIo<S>,
        read: BytesMut,
        mut moving: Pin<&mut impl Future>,
    ) where
        S: Transport + AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        io.serve_http2(&read);
        let _counted = self.gauges.moved(Protocol::Http1, Protocol::H2);
        let cap = Arc::new(RequestCap::new(self.max_requests));
        let service = self.http2_service(Arc::clone(&cap), io.tunnel_idle_timeout());
        let io = TokioIo::new(Rewound {
            read: read.freeze(),
            io,
        });
        let mut connection = pin!(self.http2.serve_connection(io, service));
        let mut going_away = false;
        let ended = poll_fn(|cx| loop {
            if !going_away && (cap.reached() || moving.as_mut().poll(cx).is_ready()) {
                going_away = true;
                connection.as_mut().graceful_shutdown();
            }
            let polled = connection.as_mut().poll(cx);
            if polled.is_ready() {
                return polled;
            }
            if cap.overrun() {
                tracing::debug!(peer = %self.peer, "HTTP/2 client ignored GOAWAY: disconnected");
                return Poll::Ready(Ok(()));
            }
            // The service took the last request in that poll.
            if going_away || !cap.reached() {
                return Poll::Pending;
            }
        })
        .await;
        if let Err(error) = ended {
            tracing::debug!(peer = %self.peer, %error, "connection ended with an error");
        }
    }

    /// The service hyper's HTTP/2 server calls for each stream it accepts:
    /// counted against `cap`, refused beyond it, answered 431 beyond
    /// `max_headers`, else handed to the handler (a `CONNECT` through
    /// `server/http2/websocket.rs`, whose tunnels idle out after
    /// `tunnel_idle_timeout`).
    fn http2_service(
        &self,
        cap: Arc<RequestCap>,
        tunnel_idle_timeout: Duration,
    ) -> impl hyper::service::Service<
        http::Request<hyper::body::Incoming>,
        Response = Response<TrackedBody>,
        Error = h2::Error,
        Future = impl Future<Output = Result<Response<TrackedBody>, h2::Error>> + Send,
    > + Send {
        let handler = self.handler.clone();
        let exchanges = Arc::clone(&self.exchanges);
        let max_headers = self.head_limits.max_headers;
        service_fn(move |request: http::Request<hyper::body::Incoming>| {
            let admission = cap.admit();
            // Counted from the call, so the socket's read clocks stop
            // while the request is in the service.
            let in_flight = exchanges.start();
            let handler = handler.clone();
            async move {
                if admission == Admission::Refused {
                    return Err(http2::refused());
                }
                let mut response = respond::vacant();
                if http2::field_lines(&request) > max_headers {
                    http2::too_many_fields(&mut response, max_headers);
                } else {
                    if request.method() == Method::CONNECT {
                        let tunnel = || TunnelSettings {
                            idle_timeout: tunnel_idle_timeout,
                            in_flight: in_flight.another(),
                        };
                        // Boxed: every stream's future would otherwise
                        // have room for a CONNECT's.
                        let serving =
                            websocket::serve_connect(&handler, request, &mut response, tunnel);
                        Box::pin(serving).await;
                    } else {
                        let mut request = ClientRequest::new(request.map(ClientBody::Hyper));
                        handler.handle(&mut request, &mut response).await;
                    }
                    // hyper writes only what is in the map.
                    let own_fields = response.body_mut().take_own_fields();
                    own_fields.into_map(response.headers_mut());
                }
                Ok(response.map(|body| TrackedBody::new(body, in_flight)))
            }
        })
    }
}

/// Whether a connection whose first bytes are `read` opens with HTTP/2's
/// whole preface (as hyper-util's auto server tells); reads on while what
/// came is the preface's beginning.
async fn prior_knowledge<S>(io: &mut DeadlineIo<S>, read: &mut BytesMut) -> bool
where
    S: Transport,
{
    while read.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(read) {
        match transport::fill(io, read, H2_PREFACE.len()).await {
            Ok(n) if n > 0 => {}
            _ => return false,
        }
    }
    read.starts_with(H2_PREFACE)
}

/// How a busy connection's requests ended.
enum Busy<S> {
    /// Quiet: the connection goes on, holding nothing for requests.
    Quiet(DeadlineIo<S>),
    /// Closed, failed or drained.
    Ended,
    /// A `101` was answered: the connection is a tunnel from here.
    Tunnel(DeadlineIo<S>, BytesMut, Box<Upgraded>),
}

/// A socket behind bytes already read from it (HTTP/2's preface, read to
/// tell the protocol): reads return those first.
#[derive(Debug)]
struct Rewound<S> {
    read: Bytes,
    io: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewound<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.read.is_empty() {
            let n = this.read.len().min(buf.remaining());
            buf.put_slice(&this.read[..n]);
            this.read.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewound<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
