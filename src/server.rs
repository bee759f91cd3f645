//! Listeners and the connection lifecycle (the rate limit service's
//! listener, with `[rls]`, is served by [`crate::rls`] and drained with
//! the rest): the accept loop (each connection served as
//! `server/connection.rs` tells: sluice's own HTTP/1.1 server, or hyper's
//! HTTP/2 server for a connection that opens with HTTP/2's preface), the
//! connection cap, the limits and timeouts, and graceful shutdown.
//!
//! The cap: a connection beyond `max_connections` is accepted and answered
//! at once with a 503 problem document and closed, rather than left waiting
//! in the kernel's queue where the client cannot tell a busy proxy from a
//! dead one (Envoy's overload manager answers 503 the same way).
//!
//! Deadlines: each connection's socket is a `DeadlineIo`
//! (`server/deadline_io.rs`), which keeps the head (`header_read_timeout`),
//! idle (`idle_timeout`) and send (`send_timeout`) clocks; the request body's
//! deadline and size cap are enforced where the body streams upstream
//! ([`crate::proxy::deadline`]).
//!
//! Shutdown (docs/operations.md, "Shutting down"): when the `shutdown`
//! future passed to [`Server::serve`] resolves, the proxy is marked draining
//! (`/readyz` answers 503, the rate limit service's health `NOT_SERVING`),
//! HTTP/1 responses from then on carry `Connection: close` and the HTTP/2
//! connections open then get GOAWAY, so that clients on kept-alive
//! connections come back through their balancer. For `shutdown_delay` the
//! listeners keep accepting and serving, while the balancers notice and stop
//! sending here (a second signal, [`Server::serve_until`]'s `hurry`, cuts
//! the delay short). Then the listeners close, every open connection is
//! told to finish its in-flight request and close, and `serve` returns
//! once they have, or after `shutdown_grace` at the latest: what is still
//! running then is cut off. With no delay, the listeners close at once.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Response, StatusCode};
use hyper_util::rt::TokioTimer;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::admin::{self, Admin};
use crate::clock::ProxyClock;
use crate::config::{Config, ServerConfig};
use crate::metrics::{Counted, Protocol};
use crate::problem::{self, Layout, Problem};
use crate::proxy::respond::ProxyBody;
use crate::proxy::{ClientRequest, Proxy};
use crate::reload::{Reloader, Trigger};
use crate::request_id::{MadeId, RequestId};

mod connection;
mod deadline_io;
#[cfg(any(test, feature = "differential"))]
#[doc(hidden)]
pub mod differential;
pub(crate) mod drain;
mod h2_frames;
pub mod http1;
mod http2;
mod http3;
#[cfg(test)]
mod over_completion;
pub mod proxy_protocol;
mod tls;

use connection::{Connection, Handler};
use deadline_io::{ConnectionLimits, DeadlineIo, Exchanges};
use drain::Drain;
use http1::HeadLimits;
use http2::StreamExecutor;
use http3::Http3Listener;
use tls::TlsListener;

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
    /// SIGHUP, caught from [`Server::reload_from`] on: a hangup that comes
    /// before serving begins reloads rather than ends the process.
    hangups: Option<tokio::signal::unix::Signal>,
    /// With `[server.tls]`: the listener speaks HTTPS.
    tls: Option<Arc<TlsListener>>,
    /// With `[rls]`: the rate limit service's listener.
    rls_listener: Option<TcpListener>,
    /// With `http3 = true` in `[server.tls]`: the QUIC listener.
    http3: Option<Http3Listener>,
}

impl Server {
    /// Binds `server.listen` and `admin.listen`.
    pub async fn bind(config: Config) -> io::Result<Server> {
        Server::bind_with_clock(config, ProxyClock::default()).await
    }

    /// Binds with the proxy's decisions, holds and settling on `clock`
    /// (tests pass a [`crate::clock::RuntimeClock`] on paused tokio time,
    /// which also runs the connections' deadlines).
    pub async fn bind_with_clock(config: Config, clock: ProxyClock) -> io::Result<Server> {
        let tls = match &config.server.tls {
            Some(tls) => Some(Arc::new(TlsListener::new(tls).map_err(io::Error::other)?)),
            None => None,
        };
        let listener = listen(config.server.listen)?;
        let admin_listener = TcpListener::bind(config.admin.listen).await?;
        let rls_listener = match &config.rls {
            Some(rls) => Some(TcpListener::bind(rls.listen).await?),
            None => None,
        };
        let http3 = match (&tls, &config.server.tls) {
            (Some(tls), Some(settings)) if settings.http3 => {
                // The TLS listener's address and port (the system's choice
                // when `listen` says port 0), over UDP.
                let address = listener.local_addr()?;
                Some(Http3Listener::bind(address, tls, &config.server)?)
            }
            _ => None,
        };
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
            hangups: None,
            tls,
            rls_listener,
            http3,
        })
    }

    /// Reloads the config from `path` on SIGHUP, on `POST /admin/reload`
    /// and when the file changes (see [`crate::reload`]).
    pub fn reload_from(&mut self, path: std::path::PathBuf) {
        self.reloader = Some(Reloader::new(path, self.proxy.clone()));
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::hangup()) {
            Ok(hangups) => self.hangups = Some(hangups),
            Err(_) => {
                tracing::warn!(
                    "could not install the SIGHUP handler; reload with POST /admin/reload"
                )
            }
        }
    }

    /// The proxy listener's address (useful when bound to port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// What the proxy listener speaks: `"https"` with `[server.tls]`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> io::Result<SocketAddr> {
        self.admin_listener.local_addr()
    }

    /// The HTTP/3 listener's UDP address, with `http3 = true`.
    pub fn http3_addr(&self) -> Option<SocketAddr> {
        (self.http3.as_ref()).and_then(|listener| listener.local_addr().ok())
    }

    /// The rate limit service's address, with `[rls]`.
    pub fn rls_addr(&self) -> Option<SocketAddr> {
        self.rls_listener
            .as_ref()
            .and_then(|listener| listener.local_addr().ok())
    }

    /// The proxy this server runs.
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// Serves until `shutdown` resolves, then drains (see the module docs),
    /// after the whole of `shutdown_delay`.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        self.serve_until(shutdown, std::future::pending()).await;
    }

    /// [`Server::serve`], with `shutdown_delay` cut short when `hurry`
    /// resolves (a second SIGTERM: whoever sends it wants the process gone).
    /// `hurry` is polled only once `shutdown` has resolved.
    pub async fn serve_until(
        self,
        shutdown: impl Future<Output = ()>,
        hurry: impl Future<Output = ()>,
    ) {
        let Server {
            proxy,
            listener,
            admin_listener,
            config,
            reloader,
            hangups,
            tls,
            rls_listener,
            http3,
        } = self;
        let beside = Beside::start(
            &proxy,
            admin_listener,
            rls_listener,
            reloader,
            hangups,
            &tls,
        );
        let mut acceptor = Acceptor::new(&proxy, &config, tls);
        if let Some(http3) = http3 {
            if let Ok(address) = http3.local_addr() {
                proxy.announce_http3(address);
            }
            let connections = Arc::clone(&acceptor.connections);
            let draining = acceptor.drain.handle();
            tokio::spawn(http3.serve(proxy.clone(), connections, draining));
        }
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                (stream, peer) = accept(&listener) => acceptor.serve(stream, peer),
            }
        }
        proxy.start_draining();
        acceptor.drain.announce();
        beside.rls_unready.notify_one();
        acceptor
            .keep_serving(&listener, config.server.shutdown_delay, hurry)
            .await;
        drop(listener);
        beside
            .stop(acceptor.drain, config.server.shutdown_grace, &proxy)
            .await;
    }
}

/// What runs beside the proxy's listener: the admin listener, the rate
/// limit service's, the config's reloads and the certificate's renewals.
struct Beside {
    admin: tokio::task::JoinHandle<()>,
    rls: Option<tokio::task::JoinHandle<()>>,
    /// Tells the rate limit service that shutdown began, then to stop.
    rls_unready: Arc<tokio::sync::Notify>,
    rls_stop: Arc<tokio::sync::Notify>,
    reloading: Option<(tokio::task::JoinHandle<()>, tokio::task::JoinHandle<()>)>,
    following: Option<tokio::task::JoinHandle<()>>,
}

impl Beside {
    fn start(
        proxy: &Proxy,
        admin_listener: TcpListener,
        rls_listener: Option<TcpListener>,
        reloader: Option<Arc<Reloader>>,
        hangups: Option<tokio::signal::unix::Signal>,
        tls: &Option<Arc<TlsListener>>,
    ) -> Beside {
        let rls_unready = Arc::new(tokio::sync::Notify::new());
        let rls_stop = Arc::new(tokio::sync::Notify::new());
        let rls = rls_listener.map(|listener| {
            let (unready, stop) = (Arc::clone(&rls_unready), Arc::clone(&rls_stop));
            let unready = async move { unready.notified().await };
            let stopped = async move { stop.notified().await };
            tokio::spawn(crate::rls::serve(listener, proxy.clone(), unready, stopped))
        });
        let admin = tokio::spawn(admin::serve(
            admin_listener,
            Admin::new(proxy.clone(), reloader.clone()),
        ));
        let reloading = reloader.map(|reloader| {
            (
                tokio::spawn(reloader.clone().watch()),
                tokio::spawn(reload_on_sighup(reloader, hangups)),
            )
        });
        let following = tls
            .clone()
            .map(|tls| tokio::spawn(tls.follow(proxy.clone())));
        Beside {
            admin,
            rls,
            rls_unready,
            rls_stop,
            reloading,
            following,
        }
    }

    /// Once the listener closed: the connections and the rate limit
    /// service drain (within `grace`), the last lines and spans are
    /// written, and the rest stops.
    async fn stop(self, drain: Drain, grace: Duration, proxy: &Proxy) {
        let stopping = std::time::Instant::now();
        // `notify_one` keeps the wake-up should the service not wait yet.
        self.rls_stop.notify_one();
        let rls = self.rls;
        let rls_done = async move {
            if let Some(rls) = rls {
                let abort = rls.abort_handle();
                if tokio::time::timeout(grace, rls).await.is_err() {
                    abort.abort();
                }
            }
        };
        tokio::join!(shut_down(drain, grace), rls_done);
        // The settlements Redis has not taken yet: what is left of the
        // grace, and a little at least (docs/operations.md).
        let left = grace.saturating_sub(stopping.elapsed());
        proxy.flush_settlements(left.max(SETTLE_FLUSH_WAIT)).await;
        // The last requests' lines, before the process ends.
        let flushing = proxy.clone();
        let _ = tokio::task::spawn_blocking(move || {
            flushing.flush_access_log(ACCESS_LOG_FLUSH_WAIT);
        })
        .await;
        // And the last requests' spans.
        proxy.flush_traces(TRACE_FLUSH_WAIT).await;
        self.admin.abort();
        if let Some(following) = self.following {
            following.abort();
        }
        if let Some((watch, sighup)) = self.reloading {
            watch.abort();
            sighup.abort();
        }
    }
}

/// What each accepted connection is served with.
struct Acceptor {
    proxy: Proxy,
    tls: Option<Arc<TlsListener>>,
    http2: Arc<hyper::server::conn::http2::Builder<StreamExecutor>>,
    limits: ConnectionLimits,
    head_limits: HeadLimits,
    max_requests: u32,
    proxy_protocol: bool,
    connections: Arc<Semaphore>,
    drain: Drain,
    /// Whether accepted sockets come with the listener's TCP_NODELAY.
    nodelay_inherited: Option<bool>,
}

impl Acceptor {
    fn new(proxy: &Proxy, config: &Config, tls: Option<Arc<TlsListener>>) -> Acceptor {
        let server = &config.server;
        Acceptor {
            proxy: proxy.clone(),
            tls,
            http2: Arc::new(http2::websocket::advertised(http2_server(server))),
            limits: connection_limits(server),
            head_limits: head_limits(server),
            max_requests: server.max_requests_per_connection,
            proxy_protocol: server.proxy_protocol,
            connections: Arc::new(Semaphore::new(server.max_connections)),
            drain: Drain::new(),
            nodelay_inherited: None,
        }
    }

    /// Serves one accepted connection in a task of its own, or refuses it
    /// beyond `max_connections`.
    fn serve(&mut self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        // Small request/response exchanges must not wait for Nagle. The
        // listener has TCP_NODELAY (`listen`), which Linux passes on to
        // the sockets it accepts: a system call per connection less.
        // Where the first one shows it was not, each is set.
        if !*self
            .nodelay_inherited
            .get_or_insert_with(|| stream.nodelay().unwrap_or(false))
        {
            let _ = stream.set_nodelay(true);
        }
        let Ok(permit) = self.connections.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream));
            return;
        };
        let metrics = self.proxy.metrics();
        let accepted = Accepted {
            _open: metrics.connections.opened(Protocol::Http1),
            stream,
            connection: Connection {
                handler: Proxied {
                    proxy: self.proxy.clone(),
                    peer,
                },
                peer,
                head_limits: self.head_limits,
                max_requests: self.max_requests,
                exchanges: Arc::new(Exchanges::default()),
                http2: Arc::clone(&self.http2),
                gauges: metrics.connections.clone(),
            },
            limits: self.limits,
            proxy_protocol: self.proxy_protocol,
            draining: self.drain.handle(),
            permit,
        };
        // One task type per listener kind, each the size its path needs:
        // a plain connection's task does not carry a TLS session, and a
        // TLS one needs no second allocation for it.
        match &self.tls {
            None => tokio::spawn(accepted.serve_plain()),
            Some(tls) => tokio::spawn(accepted.serve_tls(Arc::clone(tls))),
        };
    }

    /// Goes on accepting for `delay` once shutdown began, while load
    /// balancers remove this instance, or until `hurry` resolves.
    async fn keep_serving(
        &mut self,
        listener: &TcpListener,
        delay: Duration,
        hurry: impl Future<Output = ()>,
    ) {
        // No timer at all without a delay: shutdown is as quick as it was.
        if delay.is_zero() {
            return;
        }
        tracing::info!(
            "shutdown: /readyz is 503; serving for {delay:?} while load balancers remove \
             this instance (a second signal stops waiting)"
        );
        let delayed = tokio::time::sleep(delay);
        tokio::pin!(delayed, hurry);
        loop {
            tokio::select! {
                () = &mut delayed => break,
                () = &mut hurry => {
                    tracing::info!("shutdown: a second signal; not waiting out shutdown_delay");
                    break;
                }
                (stream, peer) = accept(listener) => self.serve(stream, peer),
            }
        }
    }
}

/// The least time the settlements still waiting at shutdown get to reach
/// the store, however much of `shutdown_grace` the drain used.
const SETTLE_FLUSH_WAIT: Duration = Duration::from_secs(2);

/// How long the spans still queued at shutdown may take to export.
const TRACE_FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A connection just accepted, and what serving it needs.
struct Accepted {
    stream: tokio::net::TcpStream,
    connection: Connection<Proxied>,
    limits: ConnectionLimits,
    proxy_protocol: bool,
    draining: drain::DrainHandle,
    /// Its place under `max_connections`, held until it ends.
    permit: tokio::sync::OwnedSemaphorePermit,
    /// Counted in `sluice_connections` until it ends.
    _open: Counted,
}

impl Accepted {
    /// A plain connection: the PROXY header if any, then its requests.
    // `async` blocks rather than `async fn`s, here and below: the task
    // keeps each value once, where an `async fn` keeps a second copy of its
    // arguments (measured with `-Zprint-type-sizes`).
    #[allow(clippy::manual_async_fn)]
    fn serve_plain(mut self) -> impl Future<Output = ()> + Send {
        async move {
            if !self.read_proxy_header().await {
                return;
            }
            let io = DeadlineIo::new(
                self.stream,
                self.limits,
                Arc::clone(&self.connection.exchanges),
            );
            self.connection.serve(io, &self.draining).await;
            drop(self.permit);
        }
    }

    /// A TLS connection: the PROXY header if any, the handshake, then its
    /// requests through the same generic path as a plain one.
    #[allow(clippy::manual_async_fn)]
    fn serve_tls(mut self, tls: Arc<TlsListener>) -> impl Future<Output = ()> + Send {
        async move {
            if !self.read_proxy_header().await {
                return;
            }
            let within = self.limits.header_read_timeout;
            let metrics = self.connection.handler.proxy.metrics();
            let Some(stream) = tls.accept(self.stream, within, metrics).await else {
                return;
            };
            let io = DeadlineIo::new(stream, self.limits, Arc::clone(&self.connection.exchanges));
            self.connection.serve(io, &self.draining).await;
            drop(self.permit);
        }
    }

    /// With `proxy_protocol`, reads the PROXY header on the raw socket,
    /// before TLS or a request (docs/edge.md), and takes its client as the
    /// peer; false: close the connection.
    async fn read_proxy_header(&mut self) -> bool {
        if !self.proxy_protocol {
            return true;
        }
        match proxied_client(&self.stream, &self.connection, self.limits).await {
            Some(client) => {
                self.connection.peer = client;
                self.connection.handler.peer = client;
                true
            }
            None => false,
        }
    }
}

/// The client a `proxy_protocol` connection's header names (see
/// `server/proxy_protocol.rs`), read before anything else within
/// `header_read_timeout`; `None`: close the connection. Boxed, so that the
/// connection task of a listener without it does not grow by its size.
async fn proxied_client(
    stream: &tokio::net::TcpStream,
    connection: &Connection<Proxied>,
    limits: ConnectionLimits,
) -> Option<SocketAddr> {
    let policy = connection.handler.proxy.policy();
    Box::pin(proxy_protocol::accept(
        stream,
        connection.peer,
        &policy.client_ip,
        limits.header_read_timeout,
    ))
    .await
}

/// The next connection `listener` accepts. A failed accept (out of file
/// descriptors, say) is logged and tried again after [`ACCEPT_ERROR_PAUSE`],
/// so the loop does not spin while the condition lasts.
async fn accept(listener: &TcpListener) -> (tokio::net::TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
            }
        }
    }
}

/// Shutdown, once `/readyz` says 503 and the listener is closed: idle
/// connections close, and busy ones get `grace` to finish their responses.
async fn shut_down(drain: Drain, grace: std::time::Duration) {
    tracing::info!("shutting down: draining in-flight requests");
    drain.start();
    if tokio::time::timeout(grace, drain.ended()).await.is_err() {
        tracing::warn!(
            ?grace,
            "shutdown grace elapsed with requests still in flight"
        );
    }
}

/// Reloads on every SIGHUP, as nginx and HAProxy do.
async fn reload_on_sighup(reloader: Arc<Reloader>, hangups: Option<tokio::signal::unix::Signal>) {
    let Some(mut hangups) = hangups else { return };
    while hangups.recv().await.is_some() {
        let _ = reloader.reload(Trigger::Signal).await;
    }
}

/// The proxy, answering the requests of a connection from `peer`.
#[derive(Clone)]
struct Proxied {
    proxy: Proxy,
    peer: SocketAddr,
}

impl Handler for Proxied {
    #[inline]
    fn handle<'a>(
        &'a self,
        request: &'a mut ClientRequest,
        response: &'a mut Response<ProxyBody>,
    ) -> impl Future<Output = ()> + Send + 'a {
        // The proxy's own future, not one around it: the connection's
        // inlines it whole (docs/observability.md, "What tracing costs").
        self.proxy.handle(request, self.peer, response)
    }
}

/// Concurrent streams per HTTP/2 connection. Envoy's edge guide suggests
/// 100; sluice allows more because clients multiplex held requests (a
/// delay-mode hold keeps its stream open), and each stream costs little
/// (tests/hold_load.rs holds 200 per connection).
const H2_MAX_CONCURRENT_STREAMS: u32 = 250;
/// See [`http2_server`].
const H2_MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 20;
/// See [`http2_server`].
const H2_MAX_LOCAL_ERROR_RESET_STREAMS: usize = 1024;

/// How long shutdown waits for the access log's last lines to be written.
const ACCESS_LOG_FLUSH_WAIT: Duration = Duration::from_secs(2);

/// How long a refused connection gets to take its 503.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Answers a connection over the cap with 503 and closes it, without
/// reading its request (whatever it is, the answer is the same but for its
/// request id, one of its own).
async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let id = MadeId::next();
    let body = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "too many connections; try again shortly",
    )
    .to_json(Layout::Standard);
    let body = problem::with_request_id(&body, &RequestId::Made(id));
    let mut answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: {}\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\
         x-request-id: {}\r\n\r\n",
        problem::MEDIA_TYPE,
        body.len(),
        id.as_str(),
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, async {
        stream.write_all(&answer).await?;
        stream.shutdown().await
    })
    .await;
}

/// The `[server]` limits a connection's socket enforces.
fn connection_limits(server: &ServerConfig) -> ConnectionLimits {
    ConnectionLimits {
        header_read_timeout: server.header_read_timeout,
        idle_timeout: server.idle_timeout,
        send_timeout: server.send_timeout,
        tunnel_idle_timeout: server.tunnel_idle_timeout,
    }
}

/// The `[server]` limits a request head must be within.
fn head_limits(server: &ServerConfig) -> HeadLimits {
    HeadLimits {
        max_headers: server.max_headers,
        max_header_bytes: server.max_header_bytes,
        max_uri_bytes: server.max_uri_bytes,
    }
}

/// hyper's HTTP/2 server with the settings from `[server]`.
fn http2_server(server: &ServerConfig) -> hyper::server::conn::http2::Builder<StreamExecutor> {
    // Each stream's task with its own send clock (`server/http2/stalled.rs`).
    let streams = StreamExecutor::new(server.send_timeout);
    let mut http2 = hyper::server::conn::http2::Builder::new(streams);
    http2
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
        .max_header_list_size(server.max_header_bytes.min(u32::MAX as usize) as u32)
        // A stream sluice stops reading (a gRPC call a message rule holds:
        // docs/streams.md) keeps at most its own window unread, a sixteenth
        // of the connection's, so the connection's other streams flow on;
        // and its small frames stay within what h2 lets a connection's
        // buffered frames cost (half its window) before it sends GOAWAY.
        // Fixed windows: an adaptive one would grow a held stream's.
        .initial_stream_window_size(H2_STREAM_WINDOW)
        .initial_connection_window_size(H2_CONNECTION_WINDOW);
    http2
}

/// Each HTTP/2 stream's receive window: nginx's (`http2_body_preread_size`,
/// 64 KiB); hyper's default is 1 MiB.
const H2_STREAM_WINDOW: u32 = 64 * 1024;
/// Each HTTP/2 connection's receive window, sixteen streams' worth (hyper's
/// default: what a connection may make sluice keep stays as it was).
const H2_CONNECTION_WINDOW: u32 = 16 * H2_STREAM_WINDOW;

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
    // For the sockets it accepts (see the accept loop).
    let _ = socket.set_nodelay(true);
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
