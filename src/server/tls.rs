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
//! The handshake (`drive`) runs on rustls' own calls rather than
//! tokio-rustls' `accept`, which then carries the connection: the first
//! bytes read tell plain HTTP from TLS (no peek, a system call per
//! connection, before it), no read is tried once the handshake is complete,
//! and what TLS 1.3 sends after its handshake, the session tickets, leaves
//! with the connection's first answer ([`Held`]): one write, one segment,
//! where tokio-rustls writes them on their own (docs/benchmarks-history.md,
//! "A handshake's cost").
//!
//! Rotation: [`TlsListener::follow`] reads every pair again after each
//! config reload and whenever one of the files changes on disk (an atomic
//! rename as certbot and cert-manager do, a symlink swap, a write), once the
//! files have stayed unchanged for [`crate::reload::SETTLE`]. A pair that
//! does not load, or whose key does not match, leaves the running
//! certificates serving, is logged and counts
//! `sluice_config_reloads_total{result="error"}`.

use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConnection;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::config::{CertPair, TlsListenerConfig};
use crate::metrics::Metrics;
use crate::problem::{self, Problem};
use crate::proxy::Proxy;
use crate::reload::{Fingerprint, SETTLE};

/// How often the certificate files' metadata is looked at.
const POLL: Duration = Duration::from_millis(500);

/// ALPN, in the server's order of preference.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The listener's TLS side: the acceptor and the certificates it serves.
pub struct TlsListener {
    acceptor: TlsAcceptor,
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
        Ok(TlsListener {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            resolver,
            loaded: Mutex::new(Loaded::of(&config.certs)),
        })
    }

    /// The TLS handshake of a new connection, within `within`; `None` when
    /// it failed or took too long (the connection is then closed). Plain
    /// HTTP sent to the TLS port is answered 400 first, as nginx does.
    pub async fn accept(
        &self,
        stream: TcpStream,
        within: Duration,
        metrics: &Metrics,
    ) -> Option<TlsStream<Held>> {
        let accepted = tokio::time::timeout(within, self.handshake(stream))
            .await
            .ok()
            .flatten();
        match accepted {
            Some(_) => metrics.tls_handshakes_ok.inc(),
            None => metrics.tls_handshakes_error.inc(),
        }
        accepted
    }

    async fn handshake(&self, mut stream: TcpStream) -> Option<TlsStream<Held>> {
        let mut session = match ServerConnection::new(Arc::clone(self.acceptor.config())) {
            Ok(session) => session,
            Err(error) => {
                tracing::debug!(%error, "TLS handshake failed");
                return None;
            }
        };
        let held = match drive(&mut stream, &mut session).await {
            Ok(Driven::Complete { held, begun }) => Held::new(stream, held, begun),
            Ok(Driven::PlainHttp) => {
                answer_plain_http(stream).await;
                return None;
            }
            Err(error) => {
                tracing::debug!(%error, "TLS handshake failed");
                return None;
            }
        };
        // tokio-rustls carries the connection from here. Its `accept` is
        // handed the session whose handshake is complete, in place of the
        // one it starts, and has nothing left to do: it flushes what the
        // session has to send, which is nothing (`drive` took it), and
        // returns the stream at once.
        self.acceptor
            .accept_with(held, move |fresh| *fresh = session)
            .await
            .ok()
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
        *self
            .loaded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = loaded;
        Ok(())
    }

    fn loaded(&self) -> Loaded {
        self.loaded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// How [`drive`] ended, when the handshake did not fail.
enum Driven {
    /// The handshake is complete: `held` is what is left to send, `begun`
    /// whether the client sent anything after its side of it.
    Complete { held: Vec<u8>, begun: bool },
    /// The client's first byte is a capital letter, as a request line
    /// starts, rather than a TLS record's content type (a handshake is
    /// 0x16): plain HTTP sent to the TLS port.
    PlainHttp,
}

/// Runs `session`'s handshake over `stream`: what rustls has to send is
/// written, then what the client sent is read and processed, until the
/// handshake is complete (tokio-rustls' handshake loop, through the same
/// `poll_read` and `poll_write`, so tokio skips a read it knows would find
/// nothing). Once it is, no read is tried (a request that came with the
/// client's Finished is already in the session; one still on its way is the
/// connection's to read), and with TLS 1.3 what the session has to send
/// then, the session tickets, is taken out to go with the first write
/// ([`Held`]). With TLS 1.2 the server's last flight is the end of the
/// handshake, and is written here.
async fn drive(stream: &mut TcpStream, session: &mut ServerConnection) -> io::Result<Driven> {
    let mut first_read = true;
    std::future::poll_fn(|cx| loop {
        let mut socket = Socket {
            stream: &mut *stream,
            cx: &mut *cx,
            first: None,
        };
        while session.wants_write() {
            match session.write_tls(&mut socket) {
                Ok(_) => {}
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
        if !session.is_handshaking() {
            return Poll::Ready(Ok(Driven::Complete {
                held: Vec::new(),
                begun: true,
            }));
        }
        match session.read_tls(&mut socket) {
            Ok(0) => return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
            Err(error) => return Poll::Ready(Err(error)),
        }
        if std::mem::take(&mut first_read)
            && socket.first.is_some_and(|byte| byte.is_ascii_uppercase())
        {
            return Poll::Ready(Ok(Driven::PlainHttp));
        }
        let state = match session.process_new_packets() {
            Ok(state) => state,
            Err(error) => {
                // Its alert, if it has one, in one last try (as tokio-rustls).
                let _ = session.write_tls(&mut socket);
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, error)));
            }
        };
        if !session.is_handshaking()
            && session.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3)
        {
            let mut held = Vec::new();
            while session.wants_write() {
                if let Err(error) = session.write_tls(&mut held) {
                    return Poll::Ready(Err(error));
                }
            }
            let begun = state.plaintext_bytes_to_read() > 0 || state.peer_has_closed();
            return Poll::Ready(Ok(Driven::Complete { held, begun }));
        }
    })
    .await
}

/// The socket as rustls reads and writes it in [`drive`] (`Pending` is
/// `WouldBlock`), noting the first byte read.
struct Socket<'a, 'b> {
    stream: &'a mut TcpStream,
    cx: &'a mut Context<'b>,
    first: Option<u8>,
}

impl io::Read for Socket<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut read = ReadBuf::new(buf);
        match Pin::new(&mut *self.stream).poll_read(self.cx, &mut read) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(error)) => return Err(error),
            Poll::Pending => return Err(io::ErrorKind::WouldBlock.into()),
        }
        let read = read.filled();
        if let (Some(&byte), None) = (read.first(), self.first) {
            self.first = Some(byte);
        }
        Ok(read.len())
    }
}

impl io::Write for Socket<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match Pin::new(&mut *self.stream).poll_write_vectored(self.cx, bufs) {
            Poll::Ready(written) => written,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A TLS connection's socket with what its handshake left to send: TLS
/// 1.3's session tickets, which no client waits for (RFC 8446 §4.6.1: the
/// server may send them at any time after the handshake). They go out in
/// front of the connection's first write (its first answer, or hyper's
/// HTTP/2 settings), in the same system call and segment, or at shutdown.
/// While the client has sent nothing after the handshake (no request yet),
/// a read that must wait sends them first: an idle connection does not keep
/// them in memory, and its client has them while it waits.
#[derive(Debug)]
pub struct Held {
    stream: TcpStream,
    /// Not sent yet, from `sent` on.
    held: Vec<u8>,
    sent: usize,
    /// The client sent something after the handshake.
    begun: bool,
}

impl Held {
    fn new(stream: TcpStream, held: Vec<u8>, begun: bool) -> Held {
        Held {
            stream,
            held,
            sent: 0,
            begun,
        }
    }

    /// Writes what is held, with `bufs` after it (the caller's, `None`
    /// when it has none); how much of `bufs` went out.
    fn poll_write_held(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        while self.sent < self.held.len() {
            let rest = &self.held[self.sent..];
            let written = match bufs {
                [] => ready!(Pin::new(&mut self.stream).poll_write(cx, rest))?,
                [one] => ready!(Pin::new(&mut self.stream)
                    .poll_write_vectored(cx, &[IoSlice::new(rest), IoSlice::new(one)]))?,
                [one, two, ..] => ready!(Pin::new(&mut self.stream).poll_write_vectored(
                    cx,
                    &[IoSlice::new(rest), IoSlice::new(one), IoSlice::new(two)]
                ))?,
            };
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if written < rest.len() {
                self.sent += written;
                continue;
            }
            let past = written - rest.len();
            self.held = Vec::new();
            self.sent = 0;
            if past > 0 {
                return Poll::Ready(Ok(past));
            }
        }
        if bufs.is_empty() {
            return Poll::Ready(Ok(0));
        }
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }
}

impl AsyncRead for Held {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let filled = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        if !this.held.is_empty() {
            match read {
                Poll::Ready(Ok(())) if buf.filled().len() > filled => this.begun = true,
                // A failed write shows at the next write or read.
                Poll::Pending if !this.begun => {
                    let _ = this.poll_write_held(cx, &[]);
                }
                _ => {}
            }
        }
        read
    }
}

impl AsyncWrite for Held {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.held.is_empty() {
            return Pin::new(&mut this.stream).poll_write(cx, buf);
        }
        this.poll_write_held(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.held.is_empty() {
            return Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        }
        this.poll_write_held(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Flushes what was written; what is held waits for the next write.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.held.is_empty() {
            ready!(this.poll_write_held(cx, &[]))?;
        }
        Pin::new(&mut this.stream).poll_shutdown(cx)
    }
}

/// How long a plain-HTTP client gets to take its 400.
const PLAIN_HTTP_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// Answers an HTTP request sent in clear to the TLS port with a 400 problem
/// document that says so, then closes.
async fn answer_plain_http(mut stream: TcpStream) {
    let body = Problem::new(
        http::StatusCode::BAD_REQUEST,
        "this port speaks HTTPS: the request was sent as plain HTTP",
    )
    .to_json(problem::Layout::Standard);
    let mut answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: {}\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n",
        problem::MEDIA_TYPE,
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
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

    #[test]
    fn a_failed_rotation_keeps_the_running_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let good = pair(dir.path(), "good", &["good.test"]);
        let listener = TlsListener::new(&TlsListenerConfig {
            certs: vec![good.clone()],
        })
        .unwrap();
        let before = Arc::clone(listener.resolver.current.load().pick(None));
        std::fs::write(&good.key, "not a key").unwrap();
        assert!(listener.rotate(std::slice::from_ref(&good)).is_err());
        let after = Arc::clone(listener.resolver.current.load().pick(None));
        assert!(Arc::ptr_eq(&before, &after));
    }
}
