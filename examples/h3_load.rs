//! HTTP/3 against HTTP/2 over TLS, keep-alive GETs on loopback;
//! `scripts/http3-bench/run.sh` runs it. One program, five modes:
//!
//! ```sh
//! h3_load h3|h2 ADDR CERT CONNECTIONS STREAMS SECONDS PATH [RATE]
//! h3_load idle|idle-tls ADDR CERT CONNECTIONS SECONDS PATH
//! h3_load server PORT CERT KEY [always|never]
//! ```
//!
//! - `h3`: CONNECTIONS QUIC connections (ALPN `h3`, TLS 1.3) to ADDR, each
//!   carrying STREAMS GETs of PATH at a time, each answer read whole before
//!   that stream's next GET, for SECONDS seconds; every connection is opened
//!   before the clock starts and carries all its requests. Prints one line:
//!   `mode=h3 connections=C streams=S seconds=T requests=N errors=E rps=R
//!   p50_us=P p99_us=Q` (latency from just before the request is sent to
//!   the last byte of its answer; an answer that is not 2xx, or takes more
//!   than 5 s, is an error). With RATE (GETs/s over all the streams, 0 or
//!   none: as fast as answers come), each stream sends a GET every
//!   `CONNECTIONS × STREAMS / RATE` s, the streams' starts spread evenly
//!   over that period: a light, steady client beside a flood.
//! - `h2`: the same over TLS and HTTP/2 (ALPN `h2`), one TCP connection
//!   per connection.
//! - `idle`: opens CONNECTIONS HTTP/3 connections, each carrying one GET so
//!   that it is fully set up, prints `ready ...` once all are, keeps them
//!   open and quiet for SECONDS seconds (QUIC keep-alive PINGs every 10 s
//!   only), then prints `done ... open=N closed=M` (how many the server
//!   closed meanwhile) and closes them. The script reads the server's
//!   VmRSS before and after `ready`.
//! - `idle-tls`: the same with TLS and HTTP/1.1 connections (ALPN
//!   `http/1.1`), each kept alive after its GET.
//! - `server`: a small server for checking the clients and the flooder
//!   without sluice: HTTP/3 on UDP PORT and TLS (h2, http/1.1) on TCP PORT
//!   of 127.0.0.1, answering every request `200 ok`. With `always` (the
//!   default) it sends a QUIC Retry to every Initial whose address is not
//!   yet validated, as sluice's `quic_retry = "always"` does; `never`
//!   accepts at once. Prints `serving ADDR`, then once a second, when they
//!   moved, its counts: `server incoming=.. retries=.. h3_requests=..
//!   tls_requests=..`.
//!
//! CERT is the server's certificate (PEM): the client accepts exactly that
//! certificate, whatever its issuer or basic constraints (a self-signed
//! `openssl req -x509` certificate is a CA certificate, which webpki would
//! refuse as a server's); `-` accepts any. The server name sent is
//! `localhost`. Handshake signatures are checked either way.
//!
//! Everything runs on one thread (a current-thread runtime), so that the
//! client shares the one CPU the script pins it to and leaves sluice's
//! alone.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::error::Elapsed;
use tokio_rustls::{TlsAcceptor, TlsConnector};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The name the clients ask for (the certificate's CN and SAN).
const SERVER_NAME: &str = "localhost";
/// The longest one request may take before it counts as an error.
const BOUND: Duration = Duration::from_secs(5);
/// The longest opening one connection may take.
const OPEN_BOUND: Duration = Duration::from_secs(10);
/// How many connections the idle modes open at a time.
const OPENING_AT_ONCE: usize = 50;
/// The first errors printed (to stderr) for diagnosis; the rest only count.
const ERRORS_SHOWN: usize = 3;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let outcome = match args.first().map(String::as_str) {
        Some("h3" | "h2") => Args::parse(&args).and_then(|a| runtime.block_on(load(a))),
        Some("idle" | "idle-tls") => Args::parse(&args).and_then(|a| runtime.block_on(idle(a))),
        Some("server") => runtime.block_on(server(&args[1..])),
        _ => Err(
            "usage: h3_load h3|h2 ADDR CERT CONNECTIONS STREAMS SECONDS PATH [RATE] \
                  | idle|idle-tls ADDR CERT CONNECTIONS SECONDS PATH \
                  | server PORT CERT KEY [always|never]"
                .into(),
        ),
    };
    if let Err(error) = outcome {
        eprintln!("h3_load: {error}");
        std::process::exit(1);
    }
}

/// A client mode's arguments, positional.
struct Args {
    mode: String,
    addr: SocketAddr,
    cert: String,
    connections: usize,
    streams: usize,
    seconds: f64,
    uri: Uri,
    rate: f64,
}

impl Args {
    fn parse(args: &[String]) -> Result<Args, Error> {
        let load = matches!(args[0].as_str(), "h3" | "h2");
        let wanted = if load { 7..=8 } else { 6..=6 };
        if !wanted.contains(&args.len()) {
            return Err(format!("{}: wrong number of arguments", args[0]).into());
        }
        let addr: SocketAddr = args[1].parse()?;
        let (streams, rest) = if load {
            (args[4].parse()?, &args[5..])
        } else {
            (1, &args[4..])
        };
        let path = &rest[1];
        let parsed = Args {
            mode: args[0].clone(),
            addr,
            cert: args[2].clone(),
            connections: args[3].parse()?,
            streams,
            seconds: rest[0].parse()?,
            // h3 and hyper's HTTP/2 client take :authority and :scheme from
            // the URI; HTTP/1.1 sends its path and a Host field.
            uri: format!("https://{SERVER_NAME}:{}{path}", addr.port()).parse()?,
            rate: args.get(7).map_or(Ok(0.0), |rate| rate.parse())?,
        };
        if parsed.connections == 0 || parsed.streams == 0 || !path.starts_with('/') {
            return Err("CONNECTIONS and STREAMS must be positive, PATH start with /".into());
        }
        Ok(parsed)
    }
}

// ---------------------------------------------------------------- TLS

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Accepts the one certificate it was given (or any, without one), and
/// checks the handshake's signatures against the certificate presented.
#[derive(Debug)]
struct Pinned {
    cert: Option<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.cert {
            Some(pinned) if pinned.as_ref() != end_entity.as_ref() => Err(rustls::Error::General(
                "not the certificate given as CERT".into(),
            )),
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A TLS 1.3 client offering `alpn` only, trusting `cert` (a PEM path, or
/// `-` for any certificate).
fn client_tls(cert: &str, alpn: &[u8]) -> Result<rustls::ClientConfig, Error> {
    let pinned = match cert {
        "-" => None,
        path => Some(CertificateDer::from_pem_file(path)?),
    };
    let provider = provider();
    let verifier = Arc::new(Pinned {
        cert: pinned,
        provider: provider.clone(),
    });
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
}

// ---------------------------------------------------------------- connections

type H3Send = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;
type H2Send = hyper::client::conn::http2::SendRequest<Empty<Bytes>>;
type H1Send = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// One HTTP/3 connection: its own UDP socket (an endpoint each, as separate
/// clients would have), the QUIC connection, and h3's request sender. h3's
/// connection driver runs in a task of its own.
struct H3Conn {
    endpoint: quinn::Endpoint,
    quic: quinn::Connection,
    send: H3Send,
}

impl H3Conn {
    fn is_open(&self) -> bool {
        self.quic.close_reason().is_none()
    }
}

/// Closes every connection with H3_NO_ERROR (0x100, RFC 9114 §8.1), then
/// waits up to a second, for them all at once, for the server to hear it,
/// so that it does not hold them until its idle timeout.
async fn close_all(conns: Vec<H3Conn>) {
    let mut endpoints = Vec::with_capacity(conns.len());
    for conn in conns {
        conn.quic.close(0x100u32.into(), b"");
        endpoints.push(conn.endpoint);
    }
    let drained = futures_util::future::join_all(endpoints.iter().map(|e| e.wait_idle()));
    let _ = tokio::time::timeout(Duration::from_secs(1), drained).await;
}

async fn connect_h3(addr: SocketAddr, tls: &Arc<rustls::ClientConfig>) -> Result<H3Conn, Error> {
    let quic_tls = quinn::crypto::rustls::QuicClientConfig::try_from(tls.clone())?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic_tls));
    let mut transport = quinn::TransportConfig::default();
    // The idle modes keep connections quiet for longer than a server's idle
    // timeout may be: a PING now and then keeps them open.
    transport.keep_alive_interval(Some(Duration::from_secs(10)));
    transport.max_idle_timeout(Some(Duration::from_secs(120).try_into()?));
    config.transport_config(Arc::new(transport));
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse()?)?;
    let quic = endpoint.connect_with(config, addr, SERVER_NAME)?.await?;
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(quic.clone())).await?;
    // h3 0.0.8 moves the connection (control streams, GOAWAY) only while
    // something polls its driver.
    tokio::spawn(async move { poll_fn(|cx| driver.poll_close(cx)).await });
    Ok(H3Conn {
        endpoint,
        quic,
        send,
    })
}

/// TCP and TLS to `addr`, with `tls`'s ALPN.
async fn connect_tls(
    addr: SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
) -> Result<TokioIo<tokio_rustls::client::TlsStream<TcpStream>>, Error> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from(SERVER_NAME)?;
    let stream = TlsConnector::from(tls.clone()).connect(name, tcp).await?;
    Ok(TokioIo::new(stream))
}

async fn connect_h2(addr: SocketAddr, tls: &Arc<rustls::ClientConfig>) -> Result<H2Send, Error> {
    let io = connect_tls(addr, tls).await?;
    let (send, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(io)
        .await?;
    tokio::spawn(connection);
    Ok(send)
}

async fn connect_h1(addr: SocketAddr, tls: &Arc<rustls::ClientConfig>) -> Result<H1Send, Error> {
    let io = connect_tls(addr, tls).await?;
    let (send, connection) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(connection);
    Ok(send)
}

// ---------------------------------------------------------------- one GET

fn status_ok(status: StatusCode) -> Result<(), Error> {
    match status.is_success() {
        true => Ok(()),
        false => Err(format!("answered {status}").into()),
    }
}

/// One GET on an HTTP/3 connection: request stream opened, finished (no
/// body), answer head and body read whole.
async fn get_h3(send: &mut H3Send, uri: &Uri) -> Result<(), Error> {
    let mut stream = send
        .send_request(Request::get(uri.clone()).body(())?)
        .await?;
    stream.finish().await?;
    let response = stream.recv_response().await?;
    while let Some(mut chunk) = stream.recv_data().await? {
        chunk.advance(chunk.remaining());
    }
    status_ok(response.status())
}

async fn get_h2(send: &mut H2Send, uri: &Uri) -> Result<(), Error> {
    send.ready().await?;
    let response = send.send_request(Request::get(uri.clone()).body(Empty::new())?);
    let response = response.await?;
    let status = response.status();
    response.into_body().collect().await?;
    status_ok(status)
}

async fn get_h1(send: &mut H1Send, uri: &Uri) -> Result<(), Error> {
    send.ready().await?;
    let request = Request::get(uri.path())
        .header(http::header::HOST, SERVER_NAME)
        .body(Empty::new())?;
    let response = send.send_request(request).await?;
    let status = response.status();
    response.into_body().collect().await?;
    status_ok(status)
}

// ---------------------------------------------------------------- load

/// What one stream's loop saw.
#[derive(Default)]
struct Tally {
    errors: u64,
    latencies_us: Vec<u32>,
    shown: Vec<String>,
}

impl Tally {
    fn record(&mut self, started: Instant, outcome: Result<Result<(), Error>, Elapsed>) {
        match outcome {
            Ok(Ok(())) => self
                .latencies_us
                .push(started.elapsed().as_micros().min(u32::MAX as u128) as u32),
            Ok(Err(error)) => self.error(error.to_string()),
            Err(_) => self.error(format!("no answer within {BOUND:?}")),
        }
    }

    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.shown.len() < ERRORS_SHOWN {
            self.shown.push(what);
        }
    }

    fn merge(&mut self, other: Tally) {
        self.errors += other.errors;
        self.latencies_us.extend(other.latencies_us);
        for what in other.shown {
            if self.shown.len() < ERRORS_SHOWN {
                self.shown.push(what);
            }
        }
    }
}

/// When a paced stream sends its next GET (RATE); unpaced, at once.
struct Pace {
    next: tokio::time::Instant,
    period: Option<Duration>,
}

impl Pace {
    /// Stream `index` of `streams`, sharing `rate` GETs/s from `start`.
    fn new(rate: f64, streams: usize, index: usize, start: Instant) -> Pace {
        let period = (rate > 0.0).then(|| Duration::from_secs_f64(streams as f64 / rate));
        let offset = period.map_or(Duration::ZERO, |p| p * index as u32 / streams as u32);
        Pace {
            next: tokio::time::Instant::from_std(start + offset),
            period,
        }
    }

    /// Waits for the next GET's time, or for `deadline` if that is sooner.
    async fn wait(&mut self, deadline: Instant) {
        if let Some(period) = self.period {
            let deadline = tokio::time::Instant::from_std(deadline);
            tokio::time::sleep_until(self.next.min(deadline)).await;
            self.next += period;
        }
    }
}

/// One stream's loop on HTTP/3: GETs one after the other until `deadline`,
/// or until the connection is gone (a GOAWAY or a close: every later
/// request would fail at once, which would say nothing).
async fn stream_h3(
    mut send: H3Send,
    quic: quinn::Connection,
    uri: Uri,
    deadline: Instant,
    mut pace: Pace,
) -> Tally {
    let mut tally = Tally::default();
    while Instant::now() < deadline && quic.close_reason().is_none() {
        pace.wait(deadline).await;
        if Instant::now() >= deadline {
            break;
        }
        let started = Instant::now();
        let outcome = tokio::time::timeout(BOUND, get_h3(&mut send, &uri)).await;
        tally.record(started, outcome);
    }
    tally
}

async fn stream_h2(mut send: H2Send, uri: Uri, deadline: Instant, mut pace: Pace) -> Tally {
    let mut tally = Tally::default();
    while Instant::now() < deadline && !send.is_closed() {
        pace.wait(deadline).await;
        if Instant::now() >= deadline {
            break;
        }
        let started = Instant::now();
        let outcome = tokio::time::timeout(BOUND, get_h2(&mut send, &uri)).await;
        tally.record(started, outcome);
    }
    tally
}

/// The `h3` and `h2` modes.
async fn load(args: Args) -> Result<(), Error> {
    let h3 = args.mode == "h3";
    let tls = Arc::new(client_tls(&args.cert, if h3 { b"h3" } else { b"h2" })?);
    let (mut h3_conns, mut h2_conns) = (Vec::new(), Vec::new());
    for _ in 0..args.connections {
        if h3 {
            h3_conns.push(tokio::time::timeout(OPEN_BOUND, connect_h3(args.addr, &tls)).await??);
        } else {
            h2_conns.push(tokio::time::timeout(OPEN_BOUND, connect_h2(args.addr, &tls)).await??);
        }
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.seconds);
    let mut streams = JoinSet::new();
    let total = args.streams * args.connections;
    let pace = |index| Pace::new(args.rate, total, index, started);
    for _ in 0..args.streams {
        for conn in &h3_conns {
            let (send, quic) = (conn.send.clone(), conn.quic.clone());
            let index = streams.len();
            streams.spawn(stream_h3(
                send,
                quic,
                args.uri.clone(),
                deadline,
                pace(index),
            ));
        }
        for send in &h2_conns {
            let index = streams.len();
            streams.spawn(stream_h2(
                send.clone(),
                args.uri.clone(),
                deadline,
                pace(index),
            ));
        }
    }
    let mut tally = Tally::default();
    while let Some(done) = streams.join_next().await {
        tally.merge(done?);
    }
    let elapsed = started.elapsed().as_secs_f64();
    close_all(h3_conns).await;
    report(&args, &mut tally, elapsed);
    Ok(())
}

fn report(args: &Args, tally: &mut Tally, elapsed: f64) {
    for what in &tally.shown {
        eprintln!("h3_load: error: {what}");
    }
    let latencies = &mut tally.latencies_us;
    latencies.sort_unstable();
    let at = |q: usize| match latencies.len() {
        0 => 0,
        n => latencies[(n * q / 100).min(n - 1)],
    };
    let requests = latencies.len();
    println!(
        "mode={} connections={} streams={} seconds={elapsed:.2} requests={requests} errors={} \
         rps={:.0} p50_us={} p99_us={}",
        args.mode,
        args.connections,
        args.streams,
        tally.errors,
        requests as f64 / elapsed,
        at(50),
        at(99),
    );
}

// ---------------------------------------------------------------- idle

/// A connection the idle modes hold open.
enum Held {
    H3(H3Conn),
    H1(H1Send),
}

impl Held {
    fn is_open(&self) -> bool {
        match self {
            Held::H3(conn) => conn.is_open(),
            Held::H1(send) => !send.is_closed(),
        }
    }
}

async fn open_idle(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    uri: Uri,
) -> Result<Held, Error> {
    if tls.alpn_protocols[0] == b"h3" {
        let mut conn = connect_h3(addr, &tls).await?;
        get_h3(&mut conn.send, &uri).await?;
        Ok(Held::H3(conn))
    } else {
        let mut send = connect_h1(addr, &tls).await?;
        get_h1(&mut send, &uri).await?;
        Ok(Held::H1(send))
    }
}

/// The `idle` and `idle-tls` modes.
async fn idle(args: Args) -> Result<(), Error> {
    let alpn: &[u8] = if args.mode == "idle" {
        b"h3"
    } else {
        b"http/1.1"
    };
    let tls = Arc::new(client_tls(&args.cert, alpn)?);
    let mut held = Vec::with_capacity(args.connections);
    let mut tally = Tally::default();
    while held.len() + (tally.errors as usize) < args.connections {
        let batch = OPENING_AT_ONCE.min(args.connections - held.len() - tally.errors as usize);
        let mut opening = JoinSet::new();
        for _ in 0..batch {
            let open = open_idle(args.addr, tls.clone(), args.uri.clone());
            opening.spawn(tokio::time::timeout(OPEN_BOUND, open));
        }
        while let Some(opened) = opening.join_next().await {
            match opened? {
                Ok(Ok(conn)) => held.push(conn),
                Ok(Err(error)) => tally.error(error.to_string()),
                Err(_) => tally.error(format!("not open within {OPEN_BOUND:?}")),
            }
        }
    }
    for what in &tally.shown {
        eprintln!("h3_load: error: {what}");
    }
    let (mode, failed) = (&args.mode, tally.errors);
    println!(
        "ready mode={mode} connections={} failed={failed}",
        held.len()
    );
    tokio::time::sleep(Duration::from_secs_f64(args.seconds)).await;
    let open = held.iter().filter(|conn| conn.is_open()).count();
    println!("done mode={mode} open={open} closed={}", held.len() - open);
    let h3 = held.into_iter().filter_map(|conn| match conn {
        Held::H3(conn) => Some(conn),
        Held::H1(_) => None,
    });
    close_all(h3.collect()).await;
    Ok(())
}

// ---------------------------------------------------------------- server

static INCOMING: AtomicU64 = AtomicU64::new(0);
static RETRIES: AtomicU64 = AtomicU64::new(0);
static H3_REQUESTS: AtomicU64 = AtomicU64::new(0);
static TLS_REQUESTS: AtomicU64 = AtomicU64::new(0);

/// The `server` mode.
async fn server(args: &[String]) -> Result<(), Error> {
    let [port, cert, key, rest @ ..] = args else {
        return Err("server PORT CERT KEY [always|never]".into());
    };
    let retry = match rest.first().map(String::as_str) {
        None | Some("always") => true,
        Some("never") => false,
        Some(other) => return Err(format!("retry is always or never, not {other}").into()),
    };
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let certs = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_file(key)?;
    let tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    let endpoint = quinn::Endpoint::server(quic_server(tls.clone())?, addr)?;
    let listener = TcpListener::bind(addr).await?;
    let mut tcp_tls = tls;
    tcp_tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    tokio::spawn(serve_tls(listener, TlsAcceptor::from(Arc::new(tcp_tls))));
    tokio::spawn(counts());
    println!("serving {addr}");
    while let Some(incoming) = endpoint.accept().await {
        INCOMING.fetch_add(1, Relaxed);
        if retry && !incoming.remote_address_validated() {
            // The client must come back with the token the Retry carries:
            // a spoofed source never does.
            RETRIES.fetch_add(1, Relaxed);
            let _ = incoming.retry();
        } else {
            tokio::spawn(serve_h3(incoming));
        }
    }
    Ok(())
}

/// quinn's server config from a rustls one: ALPN `h3` only, and no 0-RTT
/// (rustls's `max_early_data_size` stays 0, which rustls declines early data
/// with; quinn's own `ServerConfig::with_single_cert` would set it to
/// `u32::MAX` and accept 0-RTT).
fn quic_server(mut tls: rustls::ServerConfig) -> Result<quinn::ServerConfig, Error> {
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls.max_early_data_size = 0;
    let quic_tls = quinn::crypto::rustls::QuicServerConfig::try_from(tls)?;
    Ok(quinn::ServerConfig::with_crypto(Arc::new(quic_tls)))
}

/// Once a second, the server's counts, when they moved.
async fn counts() {
    let mut last = [0; 4];
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let now = [&INCOMING, &RETRIES, &H3_REQUESTS, &TLS_REQUESTS].map(|c| c.load(Relaxed));
        if now != last {
            let [incoming, retries, h3, tls] = now;
            println!(
                "server incoming={incoming} retries={retries} h3_requests={h3} tls_requests={tls}"
            );
            last = now;
        }
    }
}

async fn serve_h3(incoming: quinn::Incoming) -> Result<(), Error> {
    let quic = incoming.await?;
    let mut conn = h3::server::Connection::new(h3_quinn::Connection::new(quic)).await?;
    while let Some(resolver) = conn.accept().await? {
        tokio::spawn(async move {
            let (_request, mut stream) = resolver.resolve_request().await?;
            stream.send_response(Response::new(())).await?;
            stream.send_data(Bytes::from_static(b"ok")).await?;
            stream.finish().await?;
            H3_REQUESTS.fetch_add(1, Relaxed);
            Ok::<_, Error>(())
        });
    }
    Ok(())
}

async fn serve_tls(listener: TcpListener, acceptor: TlsAcceptor) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let _ = tcp.set_nodelay(true);
            let stream = acceptor.accept(tcp).await?;
            let service = hyper::service::service_fn(|_request| async {
                TLS_REQUESTS.fetch_add(1, Relaxed);
                Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(
                    b"ok",
                ))))
            });
            hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await
                .map_err(|error| -> Error { error.to_string().into() })
        });
    }
}
