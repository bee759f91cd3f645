//! HTTP/3 at the edge (docs/edge.md, "HTTP/3"): with `[server.tls]` and
//! `http3 = true`, sluice listens on UDP at the TLS listener's address and
//! port, and speaks HTTP/3 over QUIC (quinn, h3) with the same
//! certificates and SNI choice (`server/tls.rs`). Its requests go through
//! the proxy like any other ([`connection`]).
//!
//! Each connection attempt is judged before any TLS work ([`proof`]): sent
//! a Retry, which proves the client's source address, refused
//! (`CONNECTION_REFUSED`: a proved address that is denied or banned, or no
//! room under `max_connections`, which QUIC connections count too), or let
//! through to its handshake, which must finish within
//! `header_read_timeout` (counted in `sluice_tls_handshakes_total`, as over
//! TCP). `quic_retry` is read from the running config for each attempt, so
//! it follows reloads.
//!
//! Shutdown: once shutdown begins, each connection is sent GOAWAY; once
//! the listeners close, new attempts are refused, and the connections end
//! as their requests do.

mod body;
mod connection;
mod proof;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::QuicServerConfig;
use tokio::sync::Semaphore;

use super::drain::DrainHandle;
use super::tls::TlsListener;
use crate::config::ServerConfig;
use crate::metrics::Protocol;
use crate::proxy::Proxy;
use connection::Settings;
use proof::Step;

/// Concurrent request streams per connection: Envoy's and quinn's 100,
/// not HTTP/2's 250. quinn keeps state for every stream a client may open
/// from the connection's start, about 70 bytes each way, so the bound is
/// most of what an idle connection costs (docs/benchmarks-history.md,
/// "HTTP/3 (issue 86)").
const MAX_CONCURRENT_STREAMS: u32 = 100;
/// Unidirectional streams a client may open: HTTP/3 needs three (control,
/// QPACK encoder and decoder); a few more for the unknown types clients
/// send to grease the protocol.
const MAX_UNI_STREAMS: u32 = 8;
/// Bytes a client may buffer before sluice takes them, each stream and the
/// connection, as over HTTP/2 (`server.rs`).
const STREAM_WINDOW: u32 = super::H2_STREAM_WINDOW;
const CONNECTION_WINDOW: u32 = super::H2_CONNECTION_WINDOW;
/// What one connection attempt may have buffered before it is judged, and
/// all of them together: 0-RTT data is declined, so a well-behaved client
/// sends little before its handshake.
const ATTEMPT_BUFFER: u64 = 64 * 1024;
const ATTEMPTS_BUFFER: u64 = 16 << 20;

/// The bound HTTP/3 listener.
#[derive(Debug)]
pub struct Http3Listener {
    endpoint: quinn::Endpoint,
    settings: Arc<Settings>,
}

impl Http3Listener {
    /// Binds UDP on `address` (the TLS listener's, with its port) with
    /// `tls`'s certificates and `server`'s limits.
    pub fn bind(
        address: SocketAddr,
        tls: &TlsListener,
        server: &ServerConfig,
    ) -> io::Result<Http3Listener> {
        let crypto = tls.for_quic().map_err(io::Error::other)?;
        let crypto = QuicServerConfig::try_from(crypto).map_err(io::Error::other)?;
        let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        config
            .transport_config(Arc::new(transport(server.idle_timeout)?))
            .incoming_buffer_size(ATTEMPT_BUFFER)
            .incoming_buffer_size_total(ATTEMPTS_BUFFER);
        let socket = std::net::UdpSocket::bind(address)?;
        let endpoint = quinn::Endpoint::new(
            quinn::EndpointConfig::default(),
            Some(config),
            socket,
            Arc::new(quinn::TokioRuntime),
        )?;
        Ok(Http3Listener {
            endpoint,
            settings: Arc::new(Settings::of(server)),
        })
    }

    /// The UDP address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    /// Judges every connection attempt and serves the connections let in,
    /// until the drain starts (the listeners close); `draining` gives each
    /// connection its handle.
    pub async fn serve(self, proxy: Proxy, connections: Arc<Semaphore>, draining: DrainHandle) {
        let attempts = Attempts {
            proxy,
            settings: Arc::clone(&self.settings),
            connections,
            in_progress: Arc::new(AtomicUsize::new(0)),
        };
        let closed = draining.wait();
        tokio::pin!(closed);
        loop {
            let incoming = tokio::select! {
                biased;
                _ = &mut closed => break,
                incoming = self.endpoint.accept() => incoming,
            };
            let Some(incoming) = incoming else { break };
            attempts.judge(incoming, &draining);
        }
        // New attempts are refused from here; the connections open go on.
        self.endpoint.set_server_config(None);
    }
}

/// The QUIC transport's settings: `idle_timeout` is QUIC's own (a
/// connection that carries no packet for that long ends).
fn transport(idle_timeout: Duration) -> io::Result<quinn::TransportConfig> {
    let mut transport = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(idle_timeout).map_err(io::Error::other)?;
    transport
        .max_idle_timeout(Some(idle))
        .max_concurrent_bidi_streams(MAX_CONCURRENT_STREAMS.into())
        .max_concurrent_uni_streams(MAX_UNI_STREAMS.into())
        .stream_receive_window(STREAM_WINDOW.into())
        .receive_window(CONNECTION_WINDOW.into());
    Ok(transport)
}

/// What judging connection attempts needs.
struct Attempts {
    proxy: Proxy,
    settings: Arc<Settings>,
    /// `max_connections`, shared with the TCP listener.
    connections: Arc<Semaphore>,
    /// Handshakes begun and not yet done, for `quic_retry = N`.
    in_progress: Arc<AtomicUsize>,
}

impl Attempts {
    /// Retries, refuses or begins the handshake of one attempt (see
    /// [`proof::step`]); a connection let in is served in a task of its own.
    fn judge(&self, incoming: quinn::Incoming, draining: &DrainHandle) {
        let quic_retry = (self.proxy.policy().config.server.tls.as_ref())
            .map(|tls| tls.quic_retry)
            .unwrap_or_default();
        let ip = incoming.remote_address().ip();
        let step = proof::step(
            incoming.remote_address_validated(),
            quic_retry,
            self.in_progress.load(Ordering::Relaxed),
            self.connections.available_permits() > 0,
            || self.proxy.refuses_at_handshake(ip),
        );
        let permit = match step {
            Step::Retry if incoming.may_retry() => {
                if incoming.retry().is_ok() {
                    self.proxy.metrics().quic_retries.inc();
                }
                return;
            }
            Step::Retry | Step::Refuse => return incoming.refuse(),
            Step::Handshake => match self.connections.clone().try_acquire_owned() {
                Ok(permit) => permit,
                Err(_) => return incoming.refuse(),
            },
        };
        let connecting = match incoming.accept() {
            Ok(connecting) => connecting,
            Err(error) => return tracing::debug!(%error, "QUIC connection attempt failed"),
        };
        let handshaking = Handshaking::begin(&self.in_progress);
        let proxy = self.proxy.clone();
        let settings = Arc::clone(&self.settings);
        let draining = draining.another();
        tokio::spawn(async move {
            let Some(quic) = handshaking.finish(connecting, &settings, &proxy).await else {
                return;
            };
            let _open = proxy.metrics().connections.opened(Protocol::H3);
            connection::serve(quic, &proxy, &settings, &draining).await;
            drop(permit);
        });
    }
}

/// A handshake in progress, counted until it is done.
struct Handshaking(Arc<AtomicUsize>);

impl Handshaking {
    fn begin(in_progress: &Arc<AtomicUsize>) -> Handshaking {
        in_progress.fetch_add(1, Ordering::Relaxed);
        Handshaking(Arc::clone(in_progress))
    }

    /// The connection, once its handshake is done within
    /// `header_read_timeout`; `None`: it failed or took too long (dropped,
    /// it is closed).
    async fn finish(
        self,
        connecting: quinn::Connecting,
        settings: &Settings,
        proxy: &Proxy,
    ) -> Option<quinn::Connection> {
        let done = tokio::time::timeout(settings.header_read_timeout, connecting).await;
        let metrics = proxy.metrics();
        match done {
            Ok(Ok(connection)) => {
                metrics.tls_handshakes_ok.inc();
                Some(connection)
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, "QUIC handshake failed");
                metrics.tls_handshakes_error.inc();
                None
            }
            Err(_) => {
                metrics.tls_handshakes_error.inc();
                None
            }
        }
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
