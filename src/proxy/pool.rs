//! The keep-alive connections to one server of a pool (one address: see
//! `super::upstream`): the connections sluice speaks HTTP/1.1 on itself
//! (`exchange`: every request, with or without a body, a WebSocket
//! handshake too), the one HTTP/2 connection of a server spoken to in
//! HTTP/2 (hyper's `client::conn::http2`), the response body that hands
//! its connection back when it ends, and why an exchange failed
//! ([`ForwardError`]). New connections are made by `dial` and, for an
//! https:// server, secured by `tls`; both run over TCP or TLS alike
//! (`stream`).
//!
//! Why not hyper-util's pooled client: each `Pool` talks to exactly one
//! server, so the general client's per-request work (hashing a pool key, a checkout
//! future, a spawned task to return each connection) is pure overhead;
//! measured in docs/benchmarks-history.md.
//!
//! A connection is taken from the pool for one exchange and returned only
//! once the response body has been read to its end (and the request's body
//! sent whole), so a new request never queues behind a download still
//! streaming on the same connection. A connection whose exchange did not
//! finish (client went away mid-body, upstream error) is dropped, which
//! closes it. Idle connections that the upstream closed are noticed (their
//! socket found closed) and discarded at checkout, and by a sweep every
//! 10 s; an idempotent request that failed because its pooled connection
//! died before any byte of an answer came back is retried once on a fresh
//! connection when sluice still holds all of it (no body, a body held
//! whole, or one nothing of which was taken yet).

mod answer;
pub mod dial;
mod exchange;
mod extended_connect;
mod h2_settings;
mod idle;
pub mod spare_map;
mod stream;
pub mod tls;
mod upload;

/// The parts of sluice's own HTTP/1.1 client, for the tests that run it
/// against sluice's server over a completion-based transport
/// (`server/over_completion.rs`).
#[cfg(test)]
pub(crate) mod engine {
    pub use super::answer::AnswerBody;
    pub use super::exchange::{exchange, Conn, Sent};
    pub use super::idle::IdleConns;
    pub use super::stream::UpstreamStream;
    pub use super::upload::RequestBody;
}

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::RootCertStore;
use smallvec::SmallVec;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;

use super::deadline::{BodyError, GuardedBody};
use super::settle::Settlement;
use crate::clock::{Nanos, ProxyClock};
use crate::request_id::{self, MadeId};
use answer::AnswerBody;
pub use answer::Tunnel;
use dial::Destination;
#[cfg(any(test, feature = "differential"))]
pub(crate) use exchange::one_content_length as merge_content_lengths;
use exchange::{one_content_length, Conn};
pub use exchange::{Framing, Sent};
use h2_settings::PeerSettings;
use idle::IdleConns;
use stream::UpstreamStream;
use tls::UpstreamTls;
pub use upload::RequestBody;

/// Idle connections kept at most; more are closed when returned.
const MAX_IDLE: usize = 1024;

/// An idle connection older than this is closed rather than reused
/// (upstreams commonly close idle keep-alive connections after 60–75 s).
const IDLE_TIMEOUT: Duration = Duration::from_secs(50);

/// What an exchange ends with: the response head, its body to come, or why
/// there is none.
pub type Exchanged = Result<Response<PooledBody>, ForwardError>;

/// What a caller does with an exchange's outcome inside the exchange's own
/// future, before it is returned ([`Pool::send_plain_then`]).
pub trait Then {
    fn then(self, outcome: &mut Exchanged);
}

/// Nothing.
impl Then for () {
    #[inline]
    fn then(self, _: &mut Exchanged) {}
}

/// Why an upstream exchange failed, by the status it maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    /// Could not connect (refused, unreachable, a name that does not
    /// resolve): 502.
    #[error("could not connect to the upstream")]
    Connect,
    /// The TLS handshake with an https upstream failed (its certificate
    /// did not verify, it does not speak TLS): 502, as a connect error.
    #[error("could not make a TLS connection to the upstream")]
    Tls,
    /// No response head within `upstream_timeout`, or no connection within
    /// `connect_timeout`: 504.
    #[error("the upstream timed out")]
    Timeout,
    /// The connection failed after it was made: 502.
    #[error("the upstream exchange failed")]
    Other,
    /// The pool has no server to send to (its names never resolved): 502,
    /// naming the pool.
    #[error("the upstream pool has no server")]
    NoServer,
    /// The client's request body broke off or was badly framed while it was
    /// being forwarded (e.g. an invalid chunk size): 400, and the client
    /// connection closes. The upstream saw a body without its end.
    #[error("the client's request body was malformed")]
    ClientBody,
    /// A WebSocket for an HTTP/2 server whose connection does not
    /// advertise extended `CONNECT` (RFC 8441): 502, saying so.
    #[error("the upstream's HTTP/2 connection does not advertise extended CONNECT")]
    NoExtendedConnect,
}

impl ForwardError {
    /// The status sluice answers the client with.
    pub fn status(&self) -> StatusCode {
        match self {
            ForwardError::Timeout => StatusCode::GATEWAY_TIMEOUT,
            ForwardError::ClientBody => StatusCode::BAD_REQUEST,
            ForwardError::Connect
            | ForwardError::Tls
            | ForwardError::Other
            | ForwardError::NoServer
            | ForwardError::NoExtendedConnect => StatusCode::BAD_GATEWAY,
        }
    }
}

/// The pool of connections to one upstream.
#[derive(Debug)]
pub struct Pool {
    /// Where new connections go.
    destination: Destination,
    connect_timeout: Duration,
    /// Over TCP or TLS, with the idle HTTP/1.1 connections over that stream.
    scheme: Scheme,
    /// Exchanges on this server now ([`Load`]): what `least_request`
    /// compares.
    in_flight: AtomicU32,
    /// Which HTTP it speaks.
    speaks: Speaks,
    /// `auto` over TLS: the server chose HTTP/1.1 by ALPN, so exchanges
    /// go over HTTP/1.1 connections from now on.
    fell_back: AtomicBool,
    /// HTTP/2: the latest dial of the connection every exchange shares
    /// while it lives (one short lock to clone its sender). Its outcome is
    /// `None` while the dial is under way: the exchanges that want the
    /// connection meanwhile wait for it rather than dial one each.
    h2: Mutex<Option<watch::Receiver<Dialed>>>,
}

/// A server's HTTP/2 connection: hyper's handle for its requests, and
/// what the server's first `SETTINGS` said (`h2_settings.rs`).
#[derive(Debug, Clone)]
struct H2Sender {
    send: http2::SendRequest<GuardedBody>,
    settings: PeerSettings,
}

/// How a dial of a server's HTTP/2 connection ended, for every exchange
/// that waited for it: `None` while it is under way.
type Dialed = Option<Result<H2Sender, ForwardError>>;

/// What an exchange does for the HTTP/2 connection ([`Pool::h2_turn`]).
enum H2Turn {
    /// Sends on the shared one, dialed by `.1`.
    Up(H2Sender, watch::Receiver<Dialed>),
    /// Waits for the dial under way.
    Wait(watch::Receiver<Dialed>),
    /// Dials it, and tells those waiting how that went.
    Dial(watch::Sender<Dialed>),
}

/// Which HTTP a server is spoken to in (its pool's `protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaks {
    /// HTTP/1.1: sluice's own exchange (`exchange.rs`).
    Http1,
    /// HTTP/2 (`h2c` over TCP, `h2` over TLS): hyper's `client::conn::http2`,
    /// many streams on one connection.
    H2,
    /// `auto` over TLS: HTTP/2 when the server's ALPN chooses it, else
    /// HTTP/1.1.
    Auto,
}

/// How the upstream is spoken to, with the idle HTTP/1.1 connections over
/// that stream.
#[derive(Debug)]
enum Scheme {
    /// http://: TCP.
    Http { idle: Arc<IdleConns<TcpStream>> },
    /// https://: TLS over TCP.
    Https {
        idle: Arc<IdleConns<TlsStream<TcpStream>>>,
        tls: UpstreamTls,
    },
}

/// Fields a request gets as it is written to the upstream rather than
/// through its header map: written straight into the exchange's head,
/// inserted into the map for hyper's HTTP/2 client. (The forwarding fields
/// of an untrusted peer's request, and the request id sluice made: each
/// insert into the map hashes the name, and a header value made from the id
/// would be copied and checked byte by byte.)
#[derive(Debug, Default)]
pub struct AddedFields {
    pub fields: SmallVec<[(HeaderName, HeaderValue); 3]>,
    /// `X-Request-Id`, when sluice made it (a kept one is already in the
    /// request's map).
    pub request_id: Option<MadeId>,
    /// A sampled request's trace, written as each attempt's fields.
    pub trace: Option<Box<crate::trace::propagate::Outgoing>>,
}

impl Pool {
    /// A pool for `destination`, over TLS with `tls`, dating idle
    /// connections on `clock`.
    pub fn new(
        destination: Destination,
        tls: Option<UpstreamTls>,
        connect_timeout: Duration,
        clock: ProxyClock,
    ) -> Arc<Pool> {
        Pool::speaking(Speaks::Http1, destination, tls, connect_timeout, clock)
    }

    /// A pool for `destination` that speaks `speaks`; as [`Pool::new`]
    /// otherwise.
    pub fn speaking(
        speaks: Speaks,
        destination: Destination,
        tls: Option<UpstreamTls>,
        connect_timeout: Duration,
        clock: ProxyClock,
    ) -> Arc<Pool> {
        let scheme = match tls {
            None => Scheme::Http {
                idle: IdleConns::new(clock),
            },
            Some(tls) => Scheme::Https {
                idle: IdleConns::new(clock),
                tls,
            },
        };
        Arc::new(Pool {
            destination,
            connect_timeout,
            scheme,
            in_flight: AtomicU32::new(0),
            speaks,
            fell_back: AtomicBool::new(false),
            h2: Mutex::new(None),
        })
    }

    /// Whether exchanges go over HTTP/2 now.
    #[inline]
    fn uses_h2(&self) -> bool {
        match self.speaks {
            Speaks::Http1 => false,
            Speaks::H2 => true,
            Speaks::Auto => !self.fell_back.load(Ordering::Relaxed),
        }
    }

    /// Exchanges on this server now, from before each was sent until its
    /// response body ended.
    #[inline]
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// An https upstream's new connections are verified against `roots`
    /// from now on (a reload). When they differ from the authorities in
    /// use, the idle connections are closed too (one in the middle of an
    /// exchange is kept once it ends); nothing happens otherwise (the
    /// session cache is kept), nor for an http:// upstream.
    pub fn trust(&self, roots: Arc<RootCertStore>) {
        let Scheme::Https { idle, tls } = &self.scheme else {
            return;
        };
        if tls.trust(roots) {
            idle.clear();
            // A dial under way still answers those waiting for it.
            *self.lock_h2() = None;
            tracing::info!(
                upstream = %self.destination,
                "the upstream's certificate authorities changed: new connections are verified against them"
            );
        }
    }

    /// Sends `request` (origin-form URI, Host set; its body in `sent`, taken
    /// out of it) with the `added` fields, on a pooled or new connection.
    /// Resolves when the response head arrived, or fails with
    /// [`ForwardError::Timeout`] at `deadline` (connecting included). A
    /// streamed body stays in `sent` until the exchange takes a frame of it
    /// (after a failure before that, another server may be sent it).
    pub fn send<'a, B>(
        self: &'a Arc<Pool>,
        request: &'a Request<B>,
        added: &'a AddedFields,
        sent: Sent<'a>,
        deadline: Instant,
    ) -> impl Future<Output = Exchanged> + 'a {
        self.send_then(request, added, sent, deadline, ())
    }

    /// [`send`](Pool::send), and `then` with the outcome before it is
    /// returned: what the caller learns from an exchange is done in the
    /// exchange's own future, with no future of the caller's around it
    /// (each layer of futures costs every request its state and a copy of
    /// the response).
    pub async fn send_then<B>(
        self: &Arc<Pool>,
        request: &Request<B>,
        added: &AddedFields,
        sent: Sent<'_>,
        deadline: Instant,
        then: impl Then,
    ) -> Exchanged {
        // One future per kind of exchange, awaited right here: each layer
        // of futures between a request and its exchange moves the response
        // once more (a copy of it per request).
        let mut result = match &self.scheme {
            // Boxed: the HTTP/1.1 exchange's future, which every request
            // is moved in, stays as small as it was.
            _ if self.uses_h2() => {
                Box::pin(self.send_h2_or_fall_back(request, added, sent, deadline)).await
            }
            Scheme::Http { idle } => {
                let connect = || self.connect_stream();
                send_on(idle, connect, request, added, sent, deadline).await
            }
            Scheme::Https { idle, tls } => {
                let connect = || self.connect_tls(tls, None);
                send_on(idle, connect, request, added, sent, deadline).await
            }
        };
        then.then(&mut result);
        result
    }

    /// A new TLS connection, within `connect_timeout` and the handshake's
    /// own, or `made`, a connection `auto` made for HTTP/2 whose server
    /// chose HTTP/1.1. Boxed: a TLS handshake's state is kilobytes, which
    /// would otherwise be room in every exchange's future, the TCP path's
    /// included.
    fn connect_tls<'a>(
        &'a self,
        tls: &'a UpstreamTls,
        made: Option<TlsStream<TcpStream>>,
    ) -> Pin<Box<dyn Future<Output = Result<TlsStream<TcpStream>, ForwardError>> + Send + 'a>> {
        Box::pin(async move {
            if let Some(made) = made {
                return Ok(made);
            }
            let stream = self.connect_stream().await?;
            tls.handshake(stream, &self.destination).await
        })
    }

    /// Whether an idle HTTP/1.1 connection would be handed out again (it
    /// is taken out of the idle list): for the differential check against
    /// hyper's client.
    #[cfg(any(test, feature = "differential"))]
    pub(crate) fn reuses(&self) -> bool {
        match &self.scheme {
            Scheme::Http { idle } => idle.checkout().is_some(),
            Scheme::Https { idle, .. } => idle.checkout().is_some(),
        }
    }

    /// An exchange over HTTP/2, timed out at `deadline`; or, `auto` over
    /// TLS with a server that chose HTTP/1.1, over HTTP/1.1 on the
    /// connection made for it.
    async fn send_h2_or_fall_back<B>(
        self: &Arc<Pool>,
        request: &Request<B>,
        added: &AddedFields,
        sent: Sent<'_>,
        deadline: Instant,
    ) -> Exchanged {
        let mut copy = copy_head(request, GuardedBody::empty());
        for (name, value) in &added.fields {
            copy.headers_mut().insert(name.clone(), value.clone());
        }
        if let Some(id) = &added.request_id {
            copy.headers_mut()
                .insert(request_id::HEADER, id.header_value());
        }
        if let Some(trace) = &added.trace {
            trace.write_map(copy.headers_mut());
        }
        let mut slot = Some(copy);
        let sending = self.send_h2(&mut slot, sent.body, sent.handshake);
        let exchanged = tokio::time::timeout_at(deadline, sending).await;
        match exchanged {
            Err(_elapsed) => Err(ForwardError::Timeout),
            Ok(Err(Exchange::Failed(error))) => Err(error),
            Ok(Ok(response)) => Ok(response),
            Ok(Err(Exchange::Http1(stream))) => {
                let Scheme::Https { idle, tls } = &self.scheme else {
                    return Err(ForwardError::Other);
                };
                let mut made = stream.map(|stream| *stream);
                let connect = || self.connect_tls(tls, made.take());
                send_on(idle, connect, request, added, sent, deadline).await
            }
        }
    }

    /// An exchange over HTTP/2 on the shared connection, or a new one (and
    /// once more on a new one when the shared connection turned out to be
    /// going away before the request was sent). `slot` holds the request's
    /// head, `body` its body, until hyper takes them. `auto` over TLS: when
    /// a new connection's ALPN chose HTTP/1.1, that connection comes back as
    /// [`Exchange::Http1`]. A WebSocket `handshake` opens the server's side
    /// with an extended `CONNECT` (`extended_connect.rs`).
    async fn send_h2(
        self: &Arc<Pool>,
        slot: &mut Option<Request<GuardedBody>>,
        body: &mut RequestBody,
        handshake: bool,
    ) -> Result<Response<PooledBody>, Exchange> {
        for _attempt in 0..2 {
            let (mut sender, dial, reused) = self.h2_sender().await?;
            let Some(mut request) = slot.take() else {
                return Err(Exchange::Failed(ForwardError::Other));
            };
            if handshake {
                let request = for_h2(request, self.scheme_is_https());
                let opened = extended_connect::open(&mut sender, request).await;
                return opened.map_err(Exchange::Failed);
            }
            *request.body_mut() = match body {
                RequestBody::None => GuardedBody::empty(),
                RequestBody::Whole(bytes) => GuardedBody::read(bytes.clone()),
                RequestBody::Streamed(_) => body.take_streamed().unwrap_or_else(GuardedBody::empty),
                RequestBody::Taken => return Err(Exchange::Failed(ForwardError::Other)),
            };
            let request = for_h2(request, self.scheme_is_https());
            match sender.send.try_send_request(request).await {
                Ok(mut response) => {
                    one_content_length(response.headers_mut());
                    return Ok(response.map(|body| PooledBody::new(Inner::H2(body))));
                }
                Err(mut failed) => {
                    let error = blame(failed.error());
                    match failed.take_message() {
                        Some(unsent) => {
                            let mut unsent = from_h2(unsent);
                            let returned =
                                std::mem::replace(unsent.body_mut(), GuardedBody::empty());
                            if matches!(body, RequestBody::Taken) {
                                *body = RequestBody::Streamed(returned);
                            }
                            *slot = Some(unsent);
                            self.forget_h2(&dial);
                            if !reused {
                                return Err(Exchange::Failed(error));
                            }
                        }
                        None => return Err(Exchange::Failed(error)),
                    }
                }
            }
        }
        Err(Exchange::Failed(ForwardError::Other))
    }

    /// The HTTP/2 connection for an exchange, the dial that made it, and
    /// whether it was shared already (not dialed for or during this
    /// exchange).
    async fn h2_sender(&self) -> Result<(H2Sender, watch::Receiver<Dialed>, bool), Exchange> {
        loop {
            match self.h2_turn() {
                H2Turn::Up(sender, dial) => return Ok((sender, dial, true)),
                H2Turn::Dial(done) => {
                    let sender = self.dial_h2(&done).await?;
                    return Ok((sender, done.subscribe(), false));
                }
                H2Turn::Wait(dial) => {
                    if let Some(sender) = self.wait_h2(&dial).await? {
                        return Ok((sender, dial, false));
                    }
                }
            }
        }
    }

    /// The shared HTTP/2 connection while it lives; else the dial under
    /// way; else (none, or it failed, or its exchange was dropped
    /// mid-dial) a new dial, which this exchange makes.
    fn h2_turn(&self) -> H2Turn {
        let mut latest = self.lock_h2();
        if let Some(dial) = &*latest {
            match &*dial.borrow() {
                Some(Ok(sender)) if !sender.send.is_closed() => {
                    return H2Turn::Up(sender.clone(), dial.clone())
                }
                None if dial.has_changed().is_ok() => return H2Turn::Wait(dial.clone()),
                _ => {}
            }
        }
        let (done, dial) = watch::channel(None);
        *latest = Some(dial);
        H2Turn::Dial(done)
    }

    /// A new HTTP/2 connection ([`Pool::connect_h2`]), its outcome told to
    /// the exchanges waiting on `done`.
    async fn dial_h2(&self, done: &watch::Sender<Dialed>) -> Result<H2Sender, Exchange> {
        let dialed = self.connect_h2().await;
        done.send_replace(match &dialed {
            Ok(sender) => Some(Ok(sender.clone())),
            Err(Exchange::Failed(error)) => Some(Err(*error)),
            // Told by the dial ending with nothing, and `fell_back`.
            Err(Exchange::Http1(_)) => None,
        });
        dialed
    }

    /// The connection `dial` makes, or its failure, waited for as long as
    /// a dial of this exchange's own could take; `None` when the exchange
    /// that dialed was dropped mid-dial (another dial is due).
    async fn wait_h2(&self, dial: &watch::Receiver<Dialed>) -> Result<Option<H2Sender>, Exchange> {
        let mut dial = dial.clone();
        let waited = tokio::time::timeout(self.dial_timeout(), dial.wait_for(Option::is_some));
        let waited = waited.await;
        match waited {
            Err(_elapsed) => Err(Exchange::Failed(ForwardError::Timeout)),
            Ok(Ok(dialed)) => match &*dialed {
                Some(Ok(sender)) => Ok(Some(sender.clone())),
                Some(Err(error)) => Err(Exchange::Failed(*error)),
                None => Ok(None),
            },
            // `auto` over TLS: the server chose HTTP/1.1.
            Ok(Err(_ended)) if self.fell_back.load(Ordering::Relaxed) => Err(Exchange::Http1(None)),
            Ok(Err(_ended)) => Ok(None),
        }
    }

    /// The longest a new connection may take: `connect_timeout`, then an
    /// https server's TLS handshake's own (docs/edge.md, "HTTPS
    /// upstreams").
    fn dial_timeout(&self) -> Duration {
        match &self.scheme {
            Scheme::Http { .. } => self.connect_timeout,
            Scheme::Https { tls, .. } => self.connect_timeout + tls.handshake_timeout(),
        }
    }

    /// No new exchange goes on the connection `dial` made, which handed a
    /// request back unsent (it is going away): the next one dials anew.
    fn forget_h2(&self, dial: &watch::Receiver<Dialed>) {
        let mut latest = self.lock_h2();
        if latest.as_ref().is_some_and(|l| l.same_channel(dial)) {
            *latest = None;
        }
    }

    /// Which HTTP it speaks.
    pub fn speaks(&self) -> Speaks {
        self.speaks
    }

    /// How long a new connection may take.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// A new HTTP/2 connection; `auto` over TLS with a server that chose
    /// HTTP/1.1: that connection, for HTTP/1.1.
    async fn connect_h2(&self) -> Result<H2Sender, Exchange> {
        let stream = self.connect_stream().await.map_err(Exchange::Failed)?;
        let sender = match &self.scheme {
            Scheme::Http { .. } => h2_connection(stream).await?,
            Scheme::Https { tls, .. } => {
                Box::pin(async {
                    let stream = tls.handshake(stream, &self.destination).await?;
                    if self.speaks == Speaks::Auto && !tls::negotiated_h2(&stream) {
                        self.fell_back.store(true, Ordering::Relaxed);
                        return Err(Exchange::Http1(Some(Box::new(stream))));
                    }
                    Ok(h2_connection(stream).await?)
                })
                .await?
            }
        };
        Ok(sender)
    }

    fn scheme_is_https(&self) -> bool {
        matches!(self.scheme, Scheme::Https { .. })
    }

    fn lock_h2(&self) -> std::sync::MutexGuard<'_, Option<watch::Receiver<Dialed>>> {
        // An `Option` is consistent after any panic.
        self.h2
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new TCP connection to the upstream, within `connect_timeout`.
    async fn connect_stream(&self) -> Result<TcpStream, ForwardError> {
        self.destination.connect(self.connect_timeout).await
    }
}

/// An exchange ([`exchange::exchange`]) on an idle connection from `idle`,
/// or a new one from `connect`; see [`Pool::send`].
async fn send_on<S, C, F, B>(
    idle: &Arc<IdleConns<S>>,
    connect: C,
    request: &Request<B>,
    added: &AddedFields,
    sent: Sent<'_>,
    deadline: Instant,
) -> Exchanged
where
    S: UpstreamStream,
    C: FnMut() -> F,
    F: Future<Output = Result<S, ForwardError>>,
    Inner: From<AnswerBody<S>>,
{
    let mut connect = connect;
    let Sent { body, handshake } = sent;
    let idempotent = is_idempotent(request.method());
    // One retry, on a fresh connection, when a reused one gave nothing
    // back (most likely the upstream closed it while it was idle), for an
    // idempotent request sluice still holds whole.
    for attempt in 0..2 {
        let pooled = if attempt == 0 { idle.checkout() } else { None };
        let (mut conn, reused) = match pooled {
            Some(conn) => (conn, true),
            None => {
                let connecting = tokio::time::timeout_at(deadline, connect());
                let stream = connecting.await.map_err(|_| ForwardError::Timeout)??;
                (Conn::new(stream), false)
            }
        };
        let sent = Sent {
            body: &mut *body,
            handshake,
        };
        match exchange::exchange(&mut conn, request, added, sent, deadline).await {
            Ok(head) => {
                let answer = AnswerBody::new(
                    conn,
                    head.framing,
                    head.keep_alive,
                    head.switched,
                    Arc::clone(idle),
                );
                return Ok(head.response.map(|()| PooledBody::new(Inner::from(answer))));
            }
            // A request the upstream may have acted on (a `POST`) is not
            // sent again: the answer is a 502 (hostile-input row F2).
            Err(exchange::Failed::NothingBack) if reused && idempotent && body.is_held() => {
                continue
            }
            Err(exchange::Failed::TimedOut) => return Err(ForwardError::Timeout),
            Err(exchange::Failed::ClientBody) => return Err(ForwardError::ClientBody),
            Err(_) => return Err(ForwardError::Other),
        }
    }
    Err(ForwardError::Other)
}

/// hyper's HTTP/2 client connection over `stream`, its task spawned, with
/// what the server's first `SETTINGS` will say.
async fn h2_connection<S>(stream: S) -> Result<H2Sender, ForwardError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (stream, settings) = h2_settings::watch(stream);
    let (send, connection) = http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|_| ForwardError::Connect)?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "upstream HTTP/2 connection ended with an error");
        }
    });
    Ok(H2Sender { send, settings })
}

/// Why an HTTP/2 exchange did not happen: it failed, or `auto`'s server
/// chose HTTP/1.1, for the connection this exchange made (`Some`) or
/// another's.
enum Exchange {
    Failed(ForwardError),
    Http1(Option<Box<TlsStream<TcpStream>>>),
}

impl From<ForwardError> for Exchange {
    fn from(error: ForwardError) -> Exchange {
        Exchange::Failed(error)
    }
}

/// `request` as hyper's HTTP/2 client sends it: an absolute URI, whose
/// authority becomes `:authority`, in place of the `Host` field (RFC 9113
/// §8.3.1; nginx refuses a request with both as a duplicate host).
fn for_h2(mut request: Request<GuardedBody>, https: bool) -> Request<GuardedBody> {
    let authority = request
        .headers()
        .get(http::header::HOST)
        .and_then(|host| host.to_str().ok())
        .and_then(|host| host.parse::<http::uri::Authority>().ok());
    if let Some(authority) = authority {
        request.headers_mut().remove(http::header::HOST);
        let mut parts = std::mem::take(request.uri_mut()).into_parts();
        parts.scheme = Some(if https {
            http::uri::Scheme::HTTPS
        } else {
            http::uri::Scheme::HTTP
        });
        parts.authority = Some(authority);
        if parts.path_and_query.is_none() {
            parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
        }
        if let Ok(uri) = http::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
    *request.version_mut() = http::Version::HTTP_2;
    request
}

/// A request HTTP/2 handed back unsent, as it was before [`for_h2`].
fn from_h2(mut request: Request<GuardedBody>) -> Request<GuardedBody> {
    let host = request
        .uri()
        .authority()
        .and_then(|authority| http::HeaderValue::from_str(authority.as_str()).ok());
    if let Some(host) = host {
        request.headers_mut().insert(http::header::HOST, host);
    }
    let origin = request
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    *request.uri_mut() = http::Uri::from(origin);
    *request.version_mut() = http::Version::HTTP_11;
    request
}

/// A copy of a request's head with `body`, for a client that takes
/// requests (the request itself stays where it is).
pub fn copy_head<B>(request: &Request<B>, body: GuardedBody) -> Request<GuardedBody> {
    let mut copy = Request::new(body);
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    copy
}

/// `GET`, `HEAD`, `OPTIONS`, `PUT` and `DELETE`: sending one twice does
/// what sending it once does (RFC 9110 §9.2.2; `TRACE` is never forwarded
/// twice).
pub fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE
    )
}

/// Whether a connection idle since `since` is past [`IDLE_TIMEOUT`] at `now`.
#[inline]
fn too_old(since: Nanos, now: Nanos) -> bool {
    now.saturating_sub(since) > IDLE_TIMEOUT.as_nanos() as Nanos
}

/// Whose fault a failed exchange was: hyper's client reports an error of
/// the request body it was streaming as a user error caused by that body's
/// error — the client's body as the deadline guard passes it on
/// ([`BodyError`]), i.e. bad chunked framing, a
/// client that went away mid-upload, or a body over its deadline or size.
fn blame(error: &hyper::Error) -> ForwardError {
    let from_client_body = error.is_user()
        && std::error::Error::source(error).is_some_and(|cause| {
            cause.downcast_ref::<BodyError>().is_some()
                || cause.downcast_ref::<hyper::Error>().is_some()
        });
    if from_client_body {
        ForwardError::ClientBody
    } else {
        ForwardError::Other
    }
}

/// An upstream response body that returns its connection to the pool once
/// it has been read to the end.
#[derive(Debug)]
pub struct PooledBody {
    body: Inner,
    /// What the request's admission took: settled (permits returned) when
    /// the body ends or is dropped (client gone, upstream failed mid-body).
    settlement: Option<Box<Settlement>>,
    /// Counts the exchange in its server's requests in flight until the
    /// body ends or is dropped.
    load: Option<Load>,
}

/// One exchange counted in a server's requests in flight
/// ([`Pool::in_flight`]) while it lasts: from before it is sent until its
/// response body ended or was dropped.
#[derive(Debug)]
pub struct Load(Arc<Pool>);

impl Load {
    /// Counts an exchange on `pool`.
    pub fn begin(pool: &Arc<Pool>) -> Load {
        pool.in_flight.fetch_add(1, Ordering::Relaxed);
        Load(Arc::clone(pool))
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The body as the connection that carries it reads it.
#[derive(Debug)]
enum Inner {
    /// A stream of the HTTP/2 connection.
    H2(Incoming),
    /// An HTTP/2 server's answer to an extended `CONNECT` that opened a
    /// WebSocket, made a `101` (`extended_connect.rs`): no body, the
    /// stream until the tunnel takes it.
    Switched(Option<Tunnel>),
    /// From an HTTP/1.1 connection, which returns itself.
    Http1(AnswerBody<TcpStream>),
    /// The same over TLS.
    Http1Tls(AnswerBody<TlsStream<TcpStream>>),
}

impl From<AnswerBody<TcpStream>> for Inner {
    fn from(body: AnswerBody<TcpStream>) -> Inner {
        Inner::Http1(body)
    }
}

impl From<AnswerBody<TlsStream<TcpStream>>> for Inner {
    fn from(body: AnswerBody<TlsStream<TcpStream>>) -> Inner {
        Inner::Http1Tls(body)
    }
}

/// A body error, whichever connection it came from.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl PooledBody {
    fn new(body: Inner) -> PooledBody {
        PooledBody {
            body,
            settlement: None,
            load: None,
        }
    }

    /// Never returns this body's connection to the pool: it is closed once
    /// the response ended (framing the pool cannot trust).
    pub fn discard_connection(&mut self) {
        match &mut self.body {
            Inner::H2(_) | Inner::Switched(_) => {}
            Inner::Http1(body) => body.discard_connection(),
            Inner::Http1Tls(body) => body.discard_connection(),
        }
    }

    /// The upstream's side of a WebSocket tunnel, once it answered `101`,
    /// and the request's settlement, which the tunnel holds.
    pub fn take_tunnel(&mut self) -> Option<(Tunnel, Option<Box<Settlement>>)> {
        let tunnel = match &mut self.body {
            Inner::H2(_) => None,
            Inner::Switched(tunnel) => tunnel.take(),
            Inner::Http1(body) => body.take_tunnel(),
            Inner::Http1Tls(body) => body.take_tunnel(),
        }?;
        Some((tunnel, self.settlement.take()))
    }

    /// Counts the exchange in its server's requests in flight until this
    /// body has been sent to the end or dropped.
    pub fn hold_load(&mut self, load: Load) {
        self.load = Some(load);
    }

    /// Holds `settlement` until this body has been sent to the end or
    /// dropped.
    pub fn hold_settlement(&mut self, settlement: Option<Box<Settlement>>) {
        self.settlement = settlement;
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut polled: Poll<Option<Result<Frame<Bytes>, BoxError>>> = match &mut self.body {
            Inner::H2(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            Inner::Switched(_) => Poll::Ready(None),
            Inner::Http1(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            Inner::Http1Tls(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
        };
        if let Some(settlement) = &mut self.settlement {
            // Upstream time is charged every second while the body streams
            // (a stalled body is woken for it).
            settlement.poll_charges(cx);
        }
        if let (Some(settlement), Poll::Ready(Some(Ok(frame)))) =
            (&mut self.settlement, &mut polled)
        {
            // Values the answer reports in its body or trailers.
            settlement.read_frame(frame);
        }
        if let Poll::Ready(None) = &polled {
            self.settlement = None;
            self.load = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.body {
            Inner::H2(body) => body.is_end_stream(),
            Inner::Switched(_) => true,
            Inner::Http1(body) => body.is_end_stream(),
            Inner::Http1Tls(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.body {
            Inner::H2(body) => body.size_hint(),
            Inner::Switched(_) => SizeHint::with_exact(0),
            Inner::Http1(body) => body.size_hint(),
            Inner::Http1Tls(body) => body.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::RuntimeClock;
    use tokio::net::TcpListener;

    /// Idle connections age on the proxy's clock: on paused time, exactly
    /// as the test moves it.
    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_reused_up_to_the_idle_timeout_by_the_proxys_clock() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (_upstream_side, _) = listener.accept().await.unwrap();
        let idle = IdleConns::new(ProxyClock::Runtime(RuntimeClock::new(0)));
        idle.put_back(Conn::new(stream));
        tokio::time::advance(IDLE_TIMEOUT).await;
        let conn = idle.checkout().expect("idle for exactly IDLE_TIMEOUT");
        idle.put_back(conn);
        tokio::time::advance(IDLE_TIMEOUT + Duration::from_nanos(1)).await;
        assert!(idle.checkout().is_none(), "idle for longer");
    }
}
