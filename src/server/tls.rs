//! HTTPS on the listener (docs/edge.md, "TLS and certificate rotation"):
//! TLS 1.2 and 1.3 with ALPN `h2` and `http/1.1`, the certificate chosen by
//! SNI, certificates rotated without a restart.
//!
//! One rustls `ServerConfig` lives as long as the listener, so session
//! tickets and the session cache survive every rotation; what a rotation
//! swaps is the set of certificates its resolver reads ([`SniResolver`]),
//! behind an `ArcSwap`. A handshake in progress keeps the certificate it
//! picked, and an open connection never notices.
//!
//! Picking: the client's SNI name exactly as a certificate names it (its
//! DNS subject alternative names), then a wildcard certificate covering it
//! (`*.example.com` covers `api.example.com`, not `example.com` nor
//! `a.b.example.com`: RFC 6125 §6.4.3), then the first certificate of
//! `certs`. rustls' own `ResolvesServerCertUsingSni` has neither wildcards
//! nor a default.
//!
//! Rotation: [`TlsListener::follow`] reads every pair again after each
//! config reload and whenever one of the files changes on disk (an atomic
//! rename as certbot and cert-manager do, a symlink swap, a write), once the
//! files have stayed unchanged for [`crate::reload::SETTLE`]. A pair that
//! does not load, or whose key does not match, leaves the running
//! certificates serving, is logged and counts
//! `sluice_config_reloads_total{result="error"}`.
//!
//! The connections: rustls' unbuffered API, driven by `tls/stream.rs`, so
//! that a connection between requests holds no TLS buffer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::config::{CertPair, TlsListenerConfig};
use crate::metrics::Metrics;
use crate::problem;
use crate::proxy::Proxy;
use crate::reload::{Fingerprint, SETTLE};

mod stream;

pub use stream::{Refused, TlsStream};

/// How often the certificate files' metadata is looked at.
const POLL: Duration = Duration::from_millis(500);

/// ALPN, in the server's order of preference.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The listener's TLS side: rustls' config and the certificates it serves.
pub struct TlsListener {
    config: Arc<rustls::ServerConfig>,
    resolver: Arc<SniResolver>,
    /// The pairs serving now and their files' fingerprints, for
    /// [`TlsListener::follow`].
    loaded: Mutex<Loaded>,
}

/// What the certificates serving now were read from.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Loaded {
    pairs: Vec<CertPair>,
    files: Vec<Fingerprint>,
}

impl Loaded {
    fn of(pairs: &[CertPair]) -> Loaded {
        Loaded {
            pairs: pairs.to_vec(),
            files: fingerprints(pairs),
        }
    }
}

fn fingerprints(pairs: &[CertPair]) -> Vec<Fingerprint> {
    pairs
        .iter()
        .flat_map(|pair| [Fingerprint::of(&pair.cert), Fingerprint::of(&pair.key)])
        .collect()
}

impl std::fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsListener")
            .field("loaded", &self.loaded())
            .finish_non_exhaustive()
    }
}

impl TlsListener {
    /// Reads every pair of `config`; fails, saying which and why, when one
    /// does not load.
    pub fn new(config: &TlsListenerConfig) -> Result<TlsListener, String> {
        crate::tls::install_provider();
        let resolver = Arc::new(SniResolver {
            current: ArcSwap::from_pointee(Certificates::load(&config.certs)?),
        });
        let mut server = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|error| format!("TLS: {error}"))?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        server.alpn_protocols = ALPN.iter().map(|protocol| protocol.to_vec()).collect();
        // Stateless resumption: tickets sealed with a key rustls rotates
        // itself, valid across rotations of the certificates.
        server.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()
            .map_err(|error| format!("TLS session tickets: {error}"))?;
        // Two TLS 1.3 tickets per full handshake, as OpenSSL and BoringSSL
        // servers (nginx included) send: a client should use a ticket once
        // (RFC 8446, appendix C.4), and Chrome keeps two per server so that
        // two new connections can both resume. A ticket costs little beside
        // a full handshake, and a resumption it allows saves the signature
        // and the certificate (docs/benchmarks-history.md, "A handshake's
        // cost").
        server.send_tls13_tickets = 2;
        Ok(TlsListener {
            config: Arc::new(server),
            resolver,
            loaded: Mutex::new(Loaded::of(&config.certs)),
        })
    }

    /// The rustls config of the HTTP/3 listener (`server/http3.rs`): TLS
    /// 1.3, QUIC's only version, with ALPN `h3`, and the same certificates
    /// and SNI choice through the same resolver, so that a rotation reaches
    /// both listeners. Early data is declined: `max_early_data_size` is 0,
    /// and rustls never offers it with stateless tickets anyway. A request
    /// sent in 0-RTT is sent again once the handshake is done, so replayed
    /// early data cannot spend or dodge a budget twice (docs/edge.md,
    /// "HTTP/3").
    pub fn for_quic(&self) -> Result<rustls::ServerConfig, String> {
        let mut server = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|error| format!("TLS for QUIC: {error}"))?
            .with_no_client_auth()
            .with_cert_resolver(self.resolver.clone());
        server.alpn_protocols = vec![b"h3".to_vec()];
        server.max_early_data_size = 0;
        server.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()
            .map_err(|error| format!("TLS session tickets: {error}"))?;
        server.send_tls13_tickets = 2;
        Ok(server)
    }

    /// The TLS handshake of a new connection, within `within`; `None` when
    /// it failed or took too long (the connection is then closed). Plain
    /// HTTP sent to the TLS port is answered 400 first, as nginx does.
    pub async fn accept(
        &self,
        stream: TcpStream,
        within: Duration,
        metrics: &Metrics,
    ) -> Option<TlsStream<TcpStream>> {
        let handshake = async {
            // The socket is taken out of the result before the 400 is
            // awaited: a `match` that awaited in its arm would keep the
            // whole result (a TLS session, 1.2 KB) in every connection's
            // task for as long as the connection lives
            // (docs/benchmarks-history.md, "At the edge, measured again").
            let plain = match TlsStream::accept(Arc::clone(&self.config), stream).await {
                Ok(stream) => return Some(stream),
                Err(Refused::PlainHttp(stream)) => stream,
                Err(Refused::Failed(error)) => {
                    tracing::debug!(%error, "TLS handshake failed");
                    return None;
                }
            };
            answer_plain_http(plain).await;
            None
        };
        let accepted = tokio::time::timeout(within, handshake).await.ok().flatten();
        match accepted {
            Some(_) => metrics.tls_handshakes_ok.inc(),
            None => metrics.tls_handshakes_error.inc(),
        }
        accepted
    }

    /// Keeps the certificates true to the running config and to the files
    /// on disk (see the module docs). Runs until the task is dropped.
    pub async fn follow(self: Arc<Self>, proxy: Proxy) {
        let mut policy = proxy.policy();
        let mut seen = self.loaded().files;
        let mut changed_at: Option<tokio::time::Instant> = None;
        let mut interval = tokio::time::interval(POLL);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let running = proxy.policy();
            let reloaded = !Arc::ptr_eq(&running, &policy);
            policy = running;
            let Some(config) = policy.config.server.tls.clone() else {
                continue;
            };
            let now = fingerprints(&config.certs);
            if now != seen {
                seen = now;
                changed_at = Some(tokio::time::Instant::now());
            }
            let settled = changed_at.is_some_and(|since| since.elapsed() >= SETTLE);
            if !reloaded && !settled {
                continue;
            }
            changed_at = None;
            let this = Arc::clone(&self);
            let pairs = config.certs.clone();
            let read = tokio::task::spawn_blocking(move || this.rotate(&pairs)).await;
            match read {
                Ok(Ok(())) => tracing::info!("TLS certificates read again"),
                Ok(Err(error)) => {
                    proxy.reload_failed();
                    tracing::error!(
                        "TLS certificates not rotated; the running ones keep serving: {error}"
                    );
                }
                Err(panicked) => tracing::error!(error = %panicked, "TLS rotation failed"),
            }
            seen = self.loaded().files;
        }
    }

    /// Reads `pairs` and serves them from the next handshake on, or leaves
    /// the running certificates as they are.
    fn rotate(&self, pairs: &[CertPair]) -> Result<(), String> {
        // The fingerprints first: a file replaced while it is read is
        // read again at the next poll.
        let loaded = Loaded::of(pairs);
        let certificates = Certificates::load(pairs)?;
        self.resolver.current.store(Arc::new(certificates));
        *self.loaded.lock().unwrap_or_else(PoisonError::into_inner) = loaded;
        Ok(())
    }

    fn loaded(&self) -> Loaded {
        self.loaded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// How long a plain-HTTP client gets to take its 400.
const PLAIN_HTTP_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Answers an HTTP request sent in clear to the TLS port with a 400 problem
/// document that says so, then closes.
async fn answer_plain_http(mut stream: TcpStream) {
    let answer = problem::closing_answer(
        http::StatusCode::BAD_REQUEST,
        "this port speaks HTTPS: the request was sent as plain HTTP",
        problem::Layout::Standard,
    );
    let _ = tokio::time::timeout(PLAIN_HTTP_WRITE_TIMEOUT, async {
        stream.write_all(&answer).await?;
        stream.shutdown().await
    })
    .await;
}

/// The certificates of `server.tls.certs` and the names each one serves.
#[derive(Debug)]
struct Certificates {
    /// In `certs` order; the first is the default.
    keys: Vec<Arc<CertifiedKey>>,
    /// Lower-case DNS name → index in `keys`.
    exact: HashMap<String, usize>,
    /// `*.example.com` as `example.com` → index in `keys`.
    wildcard: HashMap<String, usize>,
}

impl Certificates {
    /// Reads every pair; the names come from each leaf certificate.
    fn load(pairs: &[CertPair]) -> Result<Certificates, String> {
        let mut certificates = Certificates {
            keys: Vec::with_capacity(pairs.len()),
            exact: HashMap::new(),
            wildcard: HashMap::new(),
        };
        for pair in pairs {
            let key = crate::tls::certified_key(&pair.cert, &pair.key)?;
            let index = certificates.keys.len();
            for name in crate::tls::dns_names(&key) {
                // The first certificate naming a host serves it.
                match name.strip_prefix("*.") {
                    Some(parent) => certificates.wildcard.entry(parent.to_owned()),
                    None => certificates.exact.entry(name),
                }
                .or_insert(index);
            }
            certificates.keys.push(key);
        }
        if certificates.keys.is_empty() {
            return Err("server.tls.certs names no certificate".to_string());
        }
        Ok(certificates)
    }

    /// The certificate for a client that asked for `name` (see the module
    /// docs).
    fn pick(&self, name: Option<&str>) -> &Arc<CertifiedKey> {
        let found = name.and_then(|name| {
            let name = name.to_ascii_lowercase();
            let name = name.trim_end_matches('.');
            self.exact.get(name).or_else(|| {
                let (_, parent) = name.split_once('.')?;
                self.wildcard.get(parent)
            })
        });
        &self.keys[found.copied().unwrap_or(0)]
    }
}

/// rustls' view of [`Certificates`], swapped whole on rotation.
#[derive(Debug)]
struct SniResolver {
    current: ArcSwap<Certificates>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(self.current.load().pick(hello.server_name())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed pair for `names`, written into `dir`.
    fn pair(dir: &std::path::Path, stem: &str, names: &[&str]) -> CertPair {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
        let cert = rcgen::CertificateParams::new(names)
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let pair = CertPair {
            cert: dir.join(format!("{stem}.pem")),
            key: dir.join(format!("{stem}.key")),
        };
        std::fs::write(&pair.cert, cert.pem()).unwrap();
        std::fs::write(&pair.key, key.serialize_pem()).unwrap();
        pair
    }

    fn index_of(certificates: &Certificates, name: Option<&str>) -> usize {
        let picked = certificates.pick(name);
        certificates
            .keys
            .iter()
            .position(|key| Arc::ptr_eq(key, picked))
            .unwrap()
    }

    #[test]
    fn sni_picks_exact_then_wildcard_then_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let certificates = Certificates::load(&[
            pair(dir.path(), "default", &["default.test"]),
            pair(dir.path(), "wild", &["*.example.com"]),
            pair(dir.path(), "api", &["api.example.com", "API2.example.com"]),
        ])
        .unwrap();
        for (name, expected) in [
            (Some("api.example.com"), 2),
            (Some("API.Example.com"), 2),
            (Some("api.example.com."), 2),
            (Some("api2.example.com"), 2),
            (Some("www.example.com"), 1),
            // A wildcard covers one label, not the parent nor two labels.
            (Some("example.com"), 0),
            (Some("a.b.example.com"), 0),
            (Some("default.test"), 0),
            (Some("unknown.test"), 0),
            (None, 0),
        ] {
            assert_eq!(index_of(&certificates, name), expected, "{name:?}");
        }
    }

    #[test]
    fn the_first_certificate_naming_a_host_serves_it() {
        let dir = tempfile::tempdir().unwrap();
        let certificates = Certificates::load(&[
            pair(dir.path(), "one", &["one.test", "shared.test"]),
            pair(dir.path(), "two", &["shared.test"]),
        ])
        .unwrap();
        assert_eq!(index_of(&certificates, Some("shared.test")), 0);
    }

    #[test]
    fn a_key_of_another_certificate_is_refused_with_both_paths() {
        let dir = tempfile::tempdir().unwrap();
        let one = pair(dir.path(), "one", &["one.test"]);
        let two = pair(dir.path(), "two", &["two.test"]);
        let mixed = CertPair {
            cert: one.cert.clone(),
            key: two.key.clone(),
        };
        let error = Certificates::load(&[mixed]).unwrap_err();
        assert!(error.contains("does not belong"), "{error}");
        assert!(
            error.contains("one.pem") && error.contains("two.key"),
            "{error}"
        );
    }

    /// A connection's task holds its handshake's future until the
    /// handshake ends, and is as large as it for the connection's whole
    /// life: the future must hold one TLS session, not a second one kept
    /// across the plain-HTTP answer, which every idle connection would
    /// carry (docs/benchmarks-history.md, "At the edge, measured again").
    #[tokio::test]
    async fn a_handshake_in_progress_holds_one_tls_session() {
        let dir = tempfile::tempdir().unwrap();
        let listener = TlsListener::new(&TlsListenerConfig {
            certs: vec![pair(dir.path(), "one", &["one.test"])],
            http3: false,
            quic_retry: Default::default(),
        })
        .unwrap();
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = TcpStream::connect(tcp.local_addr().unwrap()).await.unwrap();
        let (accepted, _) = tcp.accept().await.unwrap();
        let metrics = Metrics::new();
        let handshake = listener.accept(accepted, Duration::from_secs(1), &metrics);
        let session = std::mem::size_of::<TlsStream<TcpStream>>();
        let size = std::mem::size_of_val(&handshake);
        assert!(
            size < session + session / 2,
            "the handshake's future is {size} bytes; one TLS session is {session}"
        );
    }

    #[test]
    fn a_failed_rotation_keeps_the_running_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let good = pair(dir.path(), "good", &["good.test"]);
        let listener = TlsListener::new(&TlsListenerConfig {
            certs: vec![good.clone()],
            http3: false,
            quic_retry: Default::default(),
        })
        .unwrap();
        let before = Arc::clone(listener.resolver.current.load().pick(None));
        std::fs::write(&good.key, "not a key").unwrap();
        assert!(listener.rotate(std::slice::from_ref(&good)).is_err());
        let after = Arc::clone(listener.resolver.current.load().pick(None));
        assert!(Arc::ptr_eq(&before, &after));
    }
}
