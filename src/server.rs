//! Listeners and the connection lifecycle: the accept loop (HTTP/1.1 and h2c
//! through hyper-util's auto builder), the connection cap, hyper's limits and
//! timeouts, and graceful shutdown.
//!
//! The cap: a connection beyond `max_connections` is accepted and answered
//! at once with a 503 problem document and closed, rather than left waiting
//! in the kernel's queue where the client cannot tell a busy proxy from a
//! dead one (Envoy's overload manager answers 503 the same way).
//!
//! Deadlines: each connection's socket is a `DeadlineIo`
//! (`server/deadline_io.rs`), which keeps the head (`header_read_timeout`),
//! idle (`idle_timeout`) and send (`send_timeout`) clocks hyper lacks or
//! gets wrong; the request body's
//! deadline and size cap travel with the request as [`BodyLimits`] and are
//! enforced where the body streams upstream ([`crate::proxy::deadline`]).
//!
//! Shutdown: when the `shutdown` future passed to [`Server::serve`] resolves,
//! the proxy is marked draining (`/readyz` answers 503), the listener is
//! closed, every open connection is told to finish its in-flight request and
//! close (HTTP/1 responses from then on carry `Connection: close`; HTTP/2
//! connections get GOAWAY), and `serve` returns once they have, or after
//! `shutdown_grace` at the latest: what is still running then is cut off.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, Version};
use hyper::body::{Body, Frame, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::admin::{self, Admin};
use crate::clock::ProxyClock;
use crate::config::Config;
use crate::problem::{self, Layout, Problem};
use crate::proxy::deadline::BodyLimits;
use crate::proxy::respond::{self, ProxyBody};
use crate::proxy::{ClientBody, ClientRequest, Proxy};
use crate::reload::{Reloader, Trigger};

mod deadline_io;
mod drain;
pub mod http1;

use deadline_io::{ConnectionLimits, DeadlineIo, Exchanges, InFlight};
use drain::{Drain, DrainHandle};
use http1::{HeadLimits, Http1, Next};

/// Pause after a failed `accept` (e.g. out of file descriptors), so the loop
/// does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A bound but not yet serving sluice: both listeners and the proxy.
#[derive(Debug)]
pub struct Server {
    proxy: Proxy,
    listener: TcpListener,
    admin_listener: TcpListener,
    config: Arc<Config>,
    reloader: Option<Arc<Reloader>>,
}

impl Server {
    /// Binds `server.listen` and `admin.listen`.
    pub async fn bind(config: Config) -> io::Result<Server> {
        Server::bind_with_clock(config, ProxyClock::default()).await
    }

    /// Binds with the proxy's decisions, holds and settling on `clock`
    /// (tests drive a [`crate::clock::ManualClock`]; deadlines of the
    /// connections stay on the runtime's timers).
    pub async fn bind_with_clock(config: Config, clock: ProxyClock) -> io::Result<Server> {
        let listener = listen(config.server.listen)?;
        let admin_listener = TcpListener::bind(config.admin.listen).await?;
        let config = Arc::new(config);
        let proxy = Proxy::with_clock((*config).clone(), clock);
        if let Some(seeds) = proxy.store_seeds() {
            follow_shared_seed(&proxy, seeds).await;
        }
        Ok(Server {
            proxy,
            listener,
            admin_listener,
            config,
            reloader: None,
        })
    }

    /// Reloads the config from `path` on SIGHUP, on `POST /admin/reload`
    /// and when the file changes (see [`crate::reload`]).
    pub fn reload_from(&mut self, path: std::path::PathBuf) {
        self.reloader = Some(Reloader::new(path, self.proxy.clone()));
    }

    /// The proxy listener's address (useful when bound to port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> io::Result<SocketAddr> {
        self.admin_listener.local_addr()
    }

    /// The proxy this server runs.
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// Serves until `shutdown` resolves, then drains (see the module docs).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let Server {
            proxy,
            listener,
            admin_listener,
            config,
            reloader,
        } = self;
        let admin = tokio::spawn(admin::serve(
            admin_listener,
            Admin::new(proxy.clone(), reloader.clone()),
        ));
        let reloading = reloader.map(|reloader| {
            (
                tokio::spawn(reloader.clone().watch()),
                tokio::spawn(reload_on_sighup(reloader)),
            )
        });
        let builder = Arc::new(connection_builder(&config));
        let server = &config.server;
        let limits = ConnectionLimits {
            header_read_timeout: server.header_read_timeout,
            idle_timeout: server.idle_timeout,
            send_timeout: server.send_timeout,
            max_uri_bytes: server.max_uri_bytes,
            max_headers: server.max_headers,
            max_header_bytes: server.max_header_bytes,
        };
        let body_limits = BodyLimits {
            timeout: server.body_timeout,
            max_bytes: server.max_body_bytes,
        };
        let head_limits = HeadLimits {
            max_headers: server.max_headers,
            max_header_bytes: server.max_header_bytes,
        };
        let connections = Arc::new(Semaphore::new(config.server.max_connections));
        let drain = Drain::new();

        tokio::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                        continue;
                    }
                },
            };
            // Small request/response exchanges must not wait for Nagle.
            let _ = stream.set_nodelay(true);
            let Ok(permit) = connections.clone().try_acquire_owned() else {
                tokio::spawn(refuse(stream));
                continue;
            };
            let exchanges = Arc::new(Exchanges::default());
            let io = DeadlineIo::new(stream, limits, Arc::clone(&exchanges));
            let connection = Connection {
                proxy: proxy.clone(),
                peer,
                body_limits,
                head_limits,
                exchanges,
                builder: Arc::clone(&builder),
            };
            let draining = drain.handle();
            tokio::spawn(async move {
                connection.serve(io, draining).await;
                drop(permit);
            });
        }

        proxy.start_draining();
        drop(listener);
        tracing::info!("shutting down: draining in-flight requests");
        let grace = config.server.shutdown_grace;
        drain.start();
        if tokio::time::timeout(grace, drain.ended()).await.is_err() {
            tracing::warn!(
                ?grace,
                "shutdown grace elapsed with requests still in flight"
            );
        }
        admin.abort();
        if let Some((watch, sighup)) = reloading {
            watch.abort();
            sighup.abort();
        }
    }
}

/// A client connection and what its requests need.
struct Connection {
    proxy: Proxy,
    peer: SocketAddr,
    body_limits: BodyLimits,
    head_limits: HeadLimits,
    exchanges: Arc<Exchanges>,
    builder: Arc<auto::Builder<TokioExecutor>>,
}

impl Connection {
    /// Serves the connection until it ends: sluice's own HTTP/1.1 server
    /// answers while the requests are ones it takes (`server/http1.rs`),
    /// then hyper's takes over for the rest of the connection. `draining`
    /// changes when the server shuts down: an idle connection closes at
    /// once, a busy one after its response (which says `Connection: close`).
    async fn serve(self, io: DeadlineIo<TcpStream>, draining: DrainHandle) {
        let mut drained = std::pin::pin!(draining.wait());
        let mut http1 = Http1::new(io);
        // Each request is read into this slot and stays there (see
        // `proxy/client_request.rs`); each answer is written into the other.
        let mut request = ClientRequest::vacant();
        let mut response = respond::vacant();
        loop {
            let next = if http1.is_idle() {
                tokio::select! {
                    biased;
                    next = http1.next(self.head_limits, &mut request) => next,
                    _ = &mut drained => return,
                }
            } else {
                http1.next(self.head_limits, &mut request).await
            };
            match next {
                Next::Request => {}
                Next::Closed => return,
                Next::Hyper => return self.hand_over(http1, drained).await,
            }
            // In flight, for the read clocks, until the answer's body is
            // sent or dropped.
            http1.io_mut().exchange_began();
            let answered = {
                let exchange = std::pin::pin!(exchange(
                    &self.proxy,
                    &mut request,
                    self.peer,
                    self.body_limits,
                    &self.exchanges,
                    &mut response,
                ));
                http1.answer(exchange).await
            };
            // None: the client left before its answer.
            if answered.is_none() {
                return;
            }
            let own_fields = response.body_mut().take_own_fields();
            let written = http1.respond(&mut response, &own_fields).await;
            respond::vacate(&mut response);
            http1.io_mut().exchange_ended();
            // The request stays, with its map, for the next one read.
            request.release();
            match written {
                Ok(true) => {}
                Ok(false) => return http1.close().await,
                Err(error) => {
                    tracing::debug!(peer = %self.peer, %error, "connection ended with an error");
                    return;
                }
            }
        }
    }

    /// The rest of the connection, with hyper's server: HTTP/1.1 from the
    /// request just read, or h2c.
    async fn hand_over(
        self,
        http1: Http1<DeadlineIo<TcpStream>>,
        drained: std::pin::Pin<&mut impl Future>,
    ) {
        let Connection {
            proxy,
            peer,
            body_limits,
            exchanges,
            builder,
            ..
        } = self;
        let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
            // Counted from the call, so the socket's read clocks stop
            // while the request is in the service.
            let in_flight = exchanges.start();
            let exchanges = Arc::clone(&exchanges);
            let proxy = proxy.clone();
            async move {
                let mut request = ClientRequest::new(request.map(ClientBody::Hyper));
                let mut response = respond::vacant();
                exchange(
                    &proxy,
                    &mut request,
                    peer,
                    body_limits,
                    &exchanges,
                    &mut response,
                )
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
        let connection =
            builder.serve_connection_with_upgrades(TokioIo::new(http1.into_hyper()), service);
        let mut connection = std::pin::pin!(connection);
        let ended = tokio::select! {
            ended = connection.as_mut() => ended,
            _ = drained => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        if let Err(error) = ended {
            tracing::debug!(%peer, error = %error, "connection ended with an error");
        }
    }
}

/// Reloads on every SIGHUP, as nginx and HAProxy do.
async fn reload_on_sighup(reloader: Arc<Reloader>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("could not install the SIGHUP handler; reload with POST /admin/reload");
        return;
    };
    while hangups.recv().await.is_some() {
        let _ = reloader.reload(Trigger::Signal).await;
    }
}

/// One request through the proxy, its answer written into the
/// [`respond::vacant`] `response`, with what the connection needs around it:
/// the body's limits and `Connection: close` while draining.
async fn exchange(
    proxy: &Proxy,
    request: &mut ClientRequest,
    peer: SocketAddr,
    body_limits: BodyLimits,
    exchanges: &Exchanges,
    response: &mut Response<ProxyBody>,
) {
    if !request.get().body().is_end_stream() {
        request.get_mut().extensions_mut().insert(body_limits);
    }
    let version = request.get().version();
    proxy.handle(request, peer, response).await;
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        exchanges.mark_upgraded();
    } else if !proxy.is_ready() && version < Version::HTTP_2 {
        // Draining: this is the connection's last exchange, and the client
        // should know before it sends another (nginx does the same on a
        // graceful stop). HTTP/2 clients are told by GOAWAY.
        response
            .headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
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
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
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

/// Concurrent streams per HTTP/2 connection. Envoy's edge guide suggests
/// 100; sluice allows more because clients multiplex held requests (a
/// delay-mode hold keeps its stream open), and each stream costs little
/// (tests/hold_load.rs holds 200 per connection).
const H2_MAX_CONCURRENT_STREAMS: u32 = 250;
/// See [`connection_builder`].
const H2_MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 20;
/// See [`connection_builder`].
const H2_MAX_LOCAL_ERROR_RESET_STREAMS: usize = 1024;

/// How long a refused connection gets to take its 503.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Answers a connection over the cap with 503 and closes it, without
/// reading its request (whatever it is, the answer is the same).
async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too many connections; try again shortly",
    )
    .to_json(Layout::Standard);
    let mut answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: {}\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        problem::MEDIA_TYPE,
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, async {
        stream.write_all(&answer).await?;
        stream.shutdown().await
    })
    .await;
}

/// hyper's server settings from `[server]`.
fn connection_builder(config: &Config) -> auto::Builder<TokioExecutor> {
    let server = &config.server;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // DeadlineIo keeps the head clock: hyper's restarts whenever a
        // keep-alive connection goes idle, which would make it the idle
        // timeout as well.
        .header_read_timeout(None)
        .max_headers(server.max_headers)
        // hyper's read buffer bounds the request head (its floor is 8 KiB).
        .max_buf_size(server.max_header_bytes.max(8192));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
        // Rapid reset (CVE-2023-44487): streams the client opens and resets
        // before sluice accepts them; more pending at once is a GOAWAY
        // (h2's default, set here so an upgrade cannot loosen it).
        .max_pending_accept_reset_streams(H2_MAX_PENDING_ACCEPT_RESET_STREAMS)
        // Streams sluice had to reset because the client misbehaved; more is
        // a GOAWAY (RUSTSEC-2024-0003; hyper passes it to h2 correctly since
        // 1.5.1, hyper#3782).
        .max_local_error_reset_streams(H2_MAX_LOCAL_ERROR_RESET_STREAMS)
        .max_header_list_size(server.max_header_bytes.min(u32::MAX as usize) as u32);
    builder
}

/// Connections the kernel may queue before sluice accepts them. The usual
/// default (128) overflows when a burst of clients connects at once (each
/// dropped SYN costs the client a 1 s, then 3 s retry); Linux caps the value
/// at `net.core.somaxconn`.
const LISTEN_BACKLOG: u32 = 4096;

/// Binds the traffic listener with [`LISTEN_BACKLOG`].
fn listen(address: std::net::SocketAddr) -> io::Result<TcpListener> {
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As `TcpListener::bind` does, so a restart can rebind at once.
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG)
}

/// How long start waits for a shared store's key seed before serving (with
/// the fallback, should the store not answer).
const SEED_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Derives bucket keys with the seed the instances keep in their shared
/// store: waits briefly for it at start, then follows it (a store that was
/// down at start, or came back empty with a new seed) from a task.
async fn follow_shared_seed(
    proxy: &Proxy,
    mut seeds: tokio::sync::watch::Receiver<Option<crate::store::Seed>>,
) {
    let arrived = tokio::time::timeout(SEED_WAIT, seeds.wait_for(Option::is_some))
        .await
        .ok()
        .and_then(|seed| seed.ok().and_then(|seed| *seed));
    match arrived {
        Some(seed) => proxy.reseed(seed),
        None => tracing::warn!(
            "the shared store did not answer at start; deciding with on_error until it does"
        ),
    }
    let proxy = proxy.clone();
    tokio::spawn(async move {
        while seeds.changed().await.is_ok() {
            let seed = *seeds.borrow_and_update();
            if let Some(seed) = seed {
                let proxy = proxy.clone();
                let _ = tokio::task::spawn_blocking(move || proxy.reseed(seed)).await;
            }
        }
    });
}
