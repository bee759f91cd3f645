//! The TLS side of an https upstream (docs/edge.md, "HTTPS upstreams"):
//! the client config, the handshake, and new authorities from a reload.
//!
//! One `Arc<ClientConfig>` serves every connection, sluice's own exchange
//! and hyper's alike, so they share one session cache: a connection made
//! after another resumes its session (an abbreviated handshake, no
//! certificate chain sent or verified again). It is built again only when
//! a reload brings other authorities. The certificate is verified against
//! `upstream_ca` or the system's roots, for the URL's host (sent as SNI
//! when it is a name; an IP address is matched against the certificate's
//! IP addresses). Nothing turns verification off, and a handshake that
//! fails is never followed by an attempt in clear.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::dial::Destination;
use super::ForwardError;

/// HTTP/1.1 by ALPN: sluice's own exchange and hyper's `client::conn::http1`.
const ALPN_HTTP1: &[u8] = b"http/1.1";
/// HTTP/2 by ALPN: hyper's `client::conn::http2`.
const ALPN_H2: &[u8] = b"h2";

/// The protocols a pool offers by ALPN (its `protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpn {
    /// `http1`: HTTP/1.1 only.
    Http1,
    /// `h2`: HTTP/2 only.
    H2,
    /// `auto`: HTTP/2 first, HTTP/1.1 when the server prefers it.
    Both,
}

impl Alpn {
    fn protocols(self) -> Vec<Vec<u8>> {
        match self {
            Alpn::Http1 => vec![ALPN_HTTP1.to_vec()],
            Alpn::H2 => vec![ALPN_H2.to_vec()],
            Alpn::Both => vec![ALPN_H2.to_vec(), ALPN_HTTP1.to_vec()],
        }
    }
}

/// Whether a TLS connection's handshake settled on HTTP/2.
pub fn negotiated_h2(stream: &TlsStream<TcpStream>) -> bool {
    stream.get_ref().1.alpn_protocol() == Some(ALPN_H2)
}

/// How an https upstream's connections are secured.
#[derive(Debug)]
pub struct UpstreamTls {
    /// The authorities and the config built from them; read once per new
    /// connection, replaced by a reload that brings other authorities.
    trust: ArcSwap<Trust>,
    /// What the certificate must be valid for.
    name: ServerName<'static>,
    /// What ALPN offers.
    alpn: Alpn,
    /// The handshake's own limit, after the TCP connection's (as nginx
    /// times `proxy_ssl` handshakes with `proxy_connect_timeout`).
    handshake_timeout: Duration,
}

/// A set of authorities and the connector whose config trusts them.
struct Trust {
    roots: Arc<RootCertStore>,
    connector: TlsConnector,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The connector is the config built from the roots.
        f.debug_struct("Trust").field("roots", &self.roots).finish()
    }
}

impl UpstreamTls {
    /// TLS to `name`, verified against `roots`; each handshake within
    /// `handshake_timeout`.
    pub fn new(
        name: ServerName<'static>,
        roots: Arc<RootCertStore>,
        handshake_timeout: Duration,
        alpn: Alpn,
    ) -> UpstreamTls {
        UpstreamTls {
            trust: ArcSwap::from_pointee(Trust::new(roots, alpn)),
            name,
            alpn,
            handshake_timeout,
        }
    }

    /// Verifies new connections against `roots` from now on; `false` when
    /// they are the authorities already in use (nothing changes, and the
    /// session cache is kept).
    pub fn trust(&self, roots: Arc<RootCertStore>) -> bool {
        if self.trust.load().roots.roots == roots.roots {
            return false;
        }
        self.trust.store(Arc::new(Trust::new(roots, self.alpn)));
        true
    }

    /// How long a handshake may take.
    pub fn handshake_timeout(&self) -> Duration {
        self.handshake_timeout
    }

    /// The TLS handshake on `tcp`, a new connection to `destination`. A
    /// failure (a certificate that does not verify, a server that does not
    /// speak TLS, an alert) is logged with rustls' reason and is
    /// [`ForwardError::Tls`]; running out of time is
    /// [`ForwardError::Timeout`].
    pub async fn handshake(
        &self,
        tcp: TcpStream,
        destination: &Destination,
    ) -> Result<TlsStream<TcpStream>, ForwardError> {
        let connector = self.trust.load().connector.clone();
        let handshake = connector.connect(self.name.clone(), tcp);
        match tokio::time::timeout(self.handshake_timeout, handshake).await {
            Err(_elapsed) => Err(ForwardError::Timeout),
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(error)) => {
                tracing::warn!(
                    upstream = %destination,
                    verified_for = %self.name.to_str(),
                    %error,
                    "TLS handshake with the upstream failed"
                );
                Err(ForwardError::Tls)
            }
        }
    }
}

impl Trust {
    fn new(roots: Arc<RootCertStore>, alpn: Alpn) -> Trust {
        Trust {
            connector: TlsConnector::from(client_config(Arc::clone(&roots), alpn)),
            roots,
        }
    }
}

/// The client config for `roots`: TLS 1.3 and 1.2 with sluice's provider,
/// ALPN as `alpn` says, and rustls' default session cache (256 sessions,
/// TLS 1.3 tickets and TLS 1.2 tickets or ids).
pub fn client_config(roots: Arc<RootCertStore>, alpn: Alpn) -> Arc<ClientConfig> {
    let mut config = ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .expect("aws-lc-rs has cipher suites for TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.protocols();
    Arc::new(config)
}
