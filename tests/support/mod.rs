//! Shared test harness: a real upstream on loopback, sluice in-process or as
//! the real binary, and a small HTTP client. Everything binds 127.0.0.1:0.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

pub mod backend;
pub mod balancer;
pub mod certs;
pub mod exposition;
pub mod h3_client;
pub mod otlp;
pub mod paused;
pub mod tls_client;
pub mod websocket;
pub mod websocket_h2;

#[path = "../../src/testing/redis_server.rs"]
mod redis_server;
// Not every test binary that shares this module starts Redis.
#[allow(unused_imports)]
pub use redis_server::{RedisCluster, RedisOptions, RedisServer};

use sluice::clock::ProxyClock;
use sluice::config::Config;
use sluice::server::Server;

/// What the upstream saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    /// Path and query as received.
    pub target: String,
    pub headers: HeaderMap,
    /// When the request arrived (on paused time, the paused clock's instant).
    pub at: tokio::time::Instant,
}

/// A real HTTP/1.1 upstream on loopback that records what it receives.
///
/// Routes: `/slow/<ms>` answers after that delay; `/download/<bytes>` streams
/// that many bytes in 64 KiB chunks; `/drip/<chunks>/<ms>` streams a small
/// chunk every `ms`; `/status/<code>` answers that status; `/cost/<value>`
/// reports `value` in `x-cost` (`none`: no field, `twice`: two); `/upload`
/// reads the request body as a stream and answers with its length; `/echo`
/// answers with the request body as it arrived; `/close`
/// answers and closes the connection; `/hop` answers with hop-by-hop
/// headers of its own; anything else answers 200 `ok`.
///
/// [`Upstream::start_tls`] serves the same over TLS (an https upstream).
pub struct Upstream {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub uploaded: Arc<AtomicU64>,
    /// TCP connections accepted so far.
    pub connections: Arc<AtomicU64>,
    /// Connections that ended so far.
    pub closed: Arc<AtomicU64>,
    /// What a TLS upstream saw of its handshakes (all 0 for a plain one).
    pub tls: Arc<TlsSeen>,
    /// Bumped to close every idle connection (see
    /// [`Upstream::close_idle_connections`]).
    close_idle: tokio::sync::watch::Sender<u64>,
}

/// What a TLS upstream saw of its handshakes.
#[derive(Debug, Default)]
pub struct TlsSeen {
    /// Handshakes completed.
    pub handshakes: AtomicU64,
    /// Of those, the ones that resumed an earlier session.
    pub resumed: AtomicU64,
    /// Handshakes that failed (the client refused the certificate, or
    /// sent something else than TLS).
    pub failed: AtomicU64,
    /// Connections whose first byte was not a TLS handshake record: a
    /// client speaking plaintext to it.
    pub plaintext: AtomicU64,
    /// The server name (SNI) of each completed handshake.
    pub sni: Mutex<Vec<Option<String>>>,
}

impl TlsSeen {
    pub fn handshakes(&self) -> u64 {
        self.handshakes.load(Ordering::SeqCst)
    }

    pub fn resumed(&self) -> u64 {
        self.resumed.load(Ordering::SeqCst)
    }

    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::SeqCst)
    }

    pub fn plaintext(&self) -> u64 {
        self.plaintext.load(Ordering::SeqCst)
    }

    pub fn sni(&self) -> Vec<Option<String>> {
        self.sni.lock().unwrap().clone()
    }
}

pub type TestBody = BoxBody<Bytes, Infallible>;

impl Upstream {
    pub async fn start() -> Upstream {
        Upstream::serve(TcpListener::bind("127.0.0.1:0").await.unwrap(), None)
    }

    /// [`Upstream::start`] on a listener of the caller's (another address).
    pub fn start_on(listener: TcpListener) -> Upstream {
        Upstream::serve(listener, None)
    }

    /// The upstream over TLS 1.2 and 1.3 (ALPN `http/1.1`) on 127.0.0.1,
    /// with `leaf` as its certificate.
    pub async fn start_tls(leaf: &certs::Leaf) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Upstream::start_tls_on(listener, leaf)
    }

    /// [`Upstream::start_tls`] on a listener of the caller's.
    pub fn start_tls_on(listener: TcpListener, leaf: &certs::Leaf) -> Upstream {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
        let mut config = rustls::ServerConfig::builder_with_provider(sluice::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        Upstream::serve(listener, Some(acceptor))
    }

    /// Closes every connection that is idle now (hyper's graceful shutdown:
    /// over TLS with a `close_notify`), as an upstream's keep-alive timeout
    /// does; a connection mid-exchange closes after its response.
    pub fn close_idle_connections(&self) {
        self.close_idle.send_modify(|generation| *generation += 1);
    }

    /// Like [`Upstream::start`], with a listen backlog of `backlog` instead
    /// of tokio's 128: for load tests in which sluice opens hundreds of
    /// upstream connections at once (an overflowing backlog drops SYNs, and
    /// each retransmit costs a second).
    pub async fn start_with_backlog(backlog: u32) -> Upstream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        Upstream::serve(socket.listen(backlog).unwrap(), None)
    }

    fn serve(listener: TcpListener, tls: Option<tokio_rustls::TlsAcceptor>) -> Upstream {
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let uploaded = Arc::new(AtomicU64::new(0));
        let (seen_task, uploaded_task) = (seen.clone(), uploaded.clone());
        let connections = Arc::new(AtomicU64::new(0));
        let connections_task = connections.clone();
        let closed = Arc::new(AtomicU64::new(0));
        let closed_task = closed.clone();
        let tls_seen = Arc::new(TlsSeen::default());
        let tls_task = tls_seen.clone();
        let (close_idle, _) = tokio::sync::watch::channel(0u64);
        let close_idle_task = close_idle.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                connections_task.fetch_add(1, Ordering::SeqCst);
                let seen = seen_task.clone();
                let uploaded = uploaded_task.clone();
                let closed = closed_task.clone();
                let (tls, tls_seen) = (tls.clone(), tls_task.clone());
                let close_idle = close_idle_task.subscribe();
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let seen = seen.clone();
                        let uploaded = uploaded.clone();
                        async move { Ok::<_, Infallible>(upstream_route(request, seen, uploaded).await) }
                    });
                    match tls {
                        None => serve_connection(stream, service, close_idle).await,
                        Some(acceptor) => {
                            if let Some(stream) = accept_tls(&acceptor, stream, &tls_seen).await {
                                serve_connection(stream, service, close_idle).await;
                            }
                        }
                    }
                    closed.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Upstream {
            addr,
            seen,
            uploaded,
            connections,
            closed,
            tls: tls_seen,
            close_idle,
        }
    }

    /// Requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Waits until the upstream has seen `count` requests in all (a request
    /// is counted as it arrives, before it is answered).
    pub async fn wait_for(&self, count: usize) {
        let what = format!("the upstream never saw {count} requests");
        eventually(Duration::from_secs(10), &what, || async {
            self.count() >= count
        })
        .await;
    }
}

/// The TLS handshake of a connection to a TLS upstream, noted in `seen`.
async fn accept_tls(
    acceptor: &tokio_rustls::TlsAcceptor,
    stream: tokio::net::TcpStream,
    seen: &TlsSeen,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    // A TLS client opens with a handshake record (content type 22).
    let mut first = [0u8; 1];
    if matches!(stream.peek(&mut first).await, Ok(1) if first[0] != 22) {
        seen.plaintext.fetch_add(1, Ordering::SeqCst);
    }
    match acceptor.accept(stream).await {
        Ok(stream) => {
            let connection = stream.get_ref().1;
            seen.handshakes.fetch_add(1, Ordering::SeqCst);
            if connection.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                seen.resumed.fetch_add(1, Ordering::SeqCst);
            }
            let sni = connection.server_name().map(str::to_owned);
            seen.sni.lock().unwrap().push(sni);
            Some(stream)
        }
        Err(_) => {
            seen.failed.fetch_add(1, Ordering::SeqCst);
            None
        }
    }
}

/// Serves one connection until it ends, or shuts it down gracefully when
/// `close_idle` changes.
async fn serve_connection<I, S>(
    io: I,
    service: S,
    mut close_idle: tokio::sync::watch::Receiver<u64>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = TestBody>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let connection =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        Ok(()) = close_idle.changed() => connection.as_mut().graceful_shutdown(),
    }
    let _ = connection.await;
}

async fn upstream_route(
    request: Request<Incoming>,
    seen: Arc<Mutex<Vec<Seen>>>,
    uploaded: Arc<AtomicU64>,
) -> Response<TestBody> {
    let target = request
        .uri()
        .path_and_query()
        .map(|pq| pq.as_str().to_owned())
        .unwrap_or_default();
    seen.lock().unwrap().push(Seen {
        method: request.method().clone(),
        target: target.clone(),
        headers: request.headers().clone(),
        at: tokio::time::Instant::now(),
    });
    let path = request.uri().path().to_owned();
    if let Some(ms) = path.strip_prefix("/slow/") {
        let ms: u64 = ms.parse().unwrap_or(1000);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        return text(StatusCode::OK, "slow ok");
    }
    if let Some(bytes) = path.strip_prefix("/download/") {
        let total: u64 = bytes.parse().unwrap_or(0);
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let chunks = total / chunk.len() as u64;
        let rest = (total % chunk.len() as u64) as usize;
        let tail = chunk.slice(..rest);
        let frames = (0..chunks)
            .map(move |_| chunk.clone())
            .chain((rest > 0).then_some(tail))
            .map(|data| Ok::<_, Infallible>(Frame::data(data)));
        return Response::new(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(
            frames,
        ))));
    }
    if let Some(code) = path.strip_prefix("/status/") {
        let status = code
            .parse()
            .ok()
            .and_then(|code| StatusCode::from_u16(code).ok());
        return text(status.unwrap_or(StatusCode::BAD_REQUEST), "as asked");
    }
    if let Some(cost) = path.strip_prefix("/cost/") {
        // Reports `cost` (percent-decoded; `twice` sends two fields) in
        // `x-cost`, as a backend that measures its own work would.
        let mut response = text(StatusCode::OK, "costed");
        let headers = response.headers_mut();
        match cost {
            "none" => {}
            "twice" => {
                headers.append("x-cost", "1".parse().unwrap());
                headers.append("x-cost", "2".parse().unwrap());
            }
            cost => {
                let decoded = cost.replace("%20", " ");
                headers.insert("x-cost", decoded.parse().unwrap());
            }
        }
        return response;
    }
    if let Some(drip) = path.strip_prefix("/drip/") {
        // `/drip/<chunks>/<ms>`: one small chunk every `ms` milliseconds.
        let (chunks, ms) = drip.split_once('/').unwrap_or(("1", "0"));
        let (chunks, ms): (u64, u64) = (chunks.parse().unwrap_or(1), ms.parse().unwrap_or(0));
        let frames = futures_util::stream::unfold(0, move |sent| async move {
            if sent == chunks {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Some((
                Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"drip\n"))),
                sent + 1,
            ))
        });
        return Response::new(BodyExt::boxed(StreamBody::new(frames)));
    }
    if path == "/upload" {
        let mut body = request.into_body();
        let mut total = 0u64;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => {
                    if let Some(data) = frame.data_ref() {
                        total += data.len() as u64;
                    }
                }
                Err(_) => break,
            }
        }
        uploaded.store(total, Ordering::SeqCst);
        return text(StatusCode::OK, &total.to_string());
    }
    if path == "/echo" {
        // The request body as it arrived, with the content type it was sent
        // with (bodies read for keys must arrive byte for byte).
        let content_type = request.headers().get("content-type").cloned();
        let body = match request.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(_) => return text(StatusCode::BAD_REQUEST, "the body broke off"),
        };
        let mut response = Response::new(BodyExt::boxed(Full::new(body).map_err(|e| match e {})));
        if let Some(content_type) = content_type {
            response.headers_mut().insert("content-type", content_type);
        }
        return response;
    }
    if path == "/close" {
        // The upstream closes the connection after this response.
        let mut response = text(StatusCode::OK, "closing");
        response
            .headers_mut()
            .insert("connection", "close".parse().unwrap());
        return response;
    }
    if path == "/hop" {
        let mut response = text(StatusCode::OK, "hop");
        let headers = response.headers_mut();
        headers.insert("connection", "x-upstream-private".parse().unwrap());
        headers.insert("x-upstream-private", "secret".parse().unwrap());
        headers.insert("keep-alive", "timeout=5".parse().unwrap());
        headers.insert("x-upstream-public", "visible".parse().unwrap());
        return response;
    }
    text(StatusCode::OK, "ok")
}

fn text(status: StatusCode, body: &str) -> Response<TestBody> {
    let mut response = Response::new(BodyExt::boxed(Full::new(Bytes::from(body.to_owned()))));
    *response.status_mut() = status;
    response
}

/// sluice running in-process on ephemeral ports.
pub struct Sluice {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Sluice {
    /// Starts sluice with `toml`; `{upstream}` in it is replaced by the
    /// upstream's address. Listen addresses are forced to 127.0.0.1:0.
    pub async fn start(toml: &str, upstream: SocketAddr) -> Sluice {
        Sluice::start_with_clock(toml, upstream, ProxyClock::default()).await
    }

    /// [`Sluice::start`] with decisions and holds on `clock`.
    pub async fn start_with_clock(toml: &str, upstream: SocketAddr, clock: ProxyClock) -> Sluice {
        let text = toml.replace("{upstream}", &upstream.to_string());
        let mut config = Config::from_toml(&text, "test.toml").unwrap_or_else(|e| panic!("{e}"));
        config.server.listen = "127.0.0.1:0".parse().unwrap();
        config.admin.listen = "127.0.0.1:0".parse().unwrap();
        let server = Server::bind_with_clock(config, clock).await.unwrap();
        let addr = server.local_addr().unwrap();
        let admin = server.admin_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));
        Sluice {
            addr,
            admin,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops accepting and waits for the drain to finish.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The admin `/metrics` text.
    pub async fn metrics(&self) -> String {
        let response = send(Method::GET, &format!("http://{}/metrics", self.admin), &[]).await;
        response.body
    }

    /// `/metrics`, parsed.
    pub async fn exposition(&self) -> exposition::Exposition {
        exposition::Exposition::parse(&self.metrics().await)
    }

    /// One sample of `/metrics`; panics when the series does not exist.
    pub async fn metric(&self, series: &str) -> f64 {
        let text = self.metrics().await;
        metric(&text, series).unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A recording upstream and sluice in front of it. `rest` follows the
/// `[server]` table's `upstream` line: more `[server]` keys, then
/// `[[rule]]`s, `[response]` and so on.
pub async fn start(rest: &str) -> (Upstream, Sluice) {
    let upstream = Upstream::start().await;
    let config = format!("[server]\nupstream = \"http://{{upstream}}\"\n{rest}");
    let sluice = Sluice::start(&config, upstream.addr).await;
    (upstream, sluice)
}

/// A response with its body collected.
#[derive(Debug)]
pub struct Got {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// Asserts `got` is a problem document (RFC 9457) with `status`, a title and
/// a detail; returns its body.
pub fn assert_problem(got: &Got, status: StatusCode) -> serde_json::Value {
    assert_eq!(got.status, status, "{got:?}");
    assert_eq!(got.header("content-type"), Some("application/problem+json"));
    let body = got.json();
    assert_eq!(body["status"], status.as_u16());
    assert!(
        body["title"].as_str().is_some_and(|t| !t.is_empty()),
        "{body}"
    );
    assert!(
        body["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{body}"
    );
    body
}

/// Sends one request on a fresh connection and collects the answer.
pub async fn send(method: Method, url: &str, headers: &[(&str, &str)]) -> Got {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = Request::builder().method(method).uri(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap_or_else(|e| panic!("request to {url} failed: {e}"));
    collect(response).await
}

/// `POST url` with a JSON `body` and headers, on a fresh connection.
pub async fn post_json(url: &str, body: &str, headers: &[(&str, &str)]) -> Got {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = Request::post(url).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    let response = client
        .request(request)
        .await
        .unwrap_or_else(|e| panic!("request to {url} failed: {e}"));
    collect(response).await
}

/// `POST url` with `body` as it is and `headers`: the status, the fields
/// and the body's bytes (a coded body is not text).
pub async fn post_raw(
    url: &str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Bytes) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = Request::post(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(Bytes::from(body.to_vec()))).unwrap();
    let response = client
        .request(request)
        .await
        .unwrap_or_else(|e| panic!("request to {url} failed: {e}"));
    let (status, fields) = (response.status(), response.headers().clone());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, fields, body)
}

/// `bytes` gzipped, as a client sends a coded body.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// `GET url` with headers.
pub async fn get(url: &str, headers: &[(&str, &str)]) -> Got {
    send(Method::GET, url, headers).await
}

/// The value of one sample in Prometheus text, e.g.
/// `metric(text, "sluice_requests_total{rule=\"per-ip\",outcome=\"limited\"}")`.
/// Labels may be given in any order; the sample must carry exactly those.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    let wanted = parse_series(series);
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (parse_series(name) == wanted).then(|| value.parse().ok())?
        })
}

/// `name{a="1",b="2"}` → (name, sorted labels).
fn parse_series(series: &str) -> (String, Vec<String>) {
    let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
    let mut labels: Vec<String> = labels
        .trim_end_matches('}')
        .split(',')
        .filter(|label| !label.is_empty())
        .map(str::to_owned)
        .collect();
    labels.sort();
    (name.trim().to_owned(), labels)
}

/// Asks `check` every 10 ms until it holds; fails, saying `what`, when it
/// still does not after `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + within;
    while !check().await {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `sluice_store_syncs_total` of the instance whose admin listener is
/// `admin`: its hybrid sync rounds so far.
async fn sync_rounds(admin: SocketAddr) -> f64 {
    let text = get(&format!("http://{admin}/metrics"), &[]).await.body;
    metric(&text, "sluice_store_syncs_total").unwrap_or(0.0)
}

/// Waits until every hybrid instance (by its admin address) has counted
/// `rounds` more sync rounds than when called. Two make one begun after the
/// call, and finished.
pub async fn sync_rounds_later(admins: impl IntoIterator<Item = SocketAddr>, rounds: f64) {
    let admins: Vec<SocketAddr> = admins.into_iter().collect();
    let mut before = Vec::new();
    for admin in &admins {
        before.push(sync_rounds(*admin).await);
    }
    for (admin, before) in admins.into_iter().zip(before) {
        eventually(Duration::from_secs(15), "no sync round", || async {
            sync_rounds(admin).await >= before + rounds
        })
        .await;
    }
}

/// A finished round begun after the call on every instance, twice: what
/// any of them had taken has reached Redis, and every one has synced after
/// that.
pub async fn after_syncs(admins: impl IntoIterator<Item = SocketAddr>) {
    let admins: Vec<SocketAddr> = admins.into_iter().collect();
    sync_rounds_later(admins.iter().copied(), 2.0).await;
    sync_rounds_later(admins, 2.0).await;
}

/// Seconds since the Unix epoch, as clients compare `X-RateLimit-Reset`.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A free port: bound, then released (for a process the test starts to
/// listen on).
pub fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// An address that refuses every connection for as long as this lives: a
/// socket bound there that never listens, so that no other test can take
/// the port meanwhile (as one could a port bound, then released).
pub struct Refusing {
    _bound: tokio::net::TcpSocket,
    pub addr: SocketAddr,
}

impl Refusing {
    pub fn new() -> Refusing {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = socket.local_addr().unwrap();
        Refusing {
            _bound: socket,
            addr,
        }
    }
}

/// An HTTP/2-only (h2c, prior knowledge) upstream on loopback whose every
/// answer is 200 with the body `answer` writes for the request.
pub async fn h2c_upstream(answer: fn(&Request<Incoming>) -> String) -> SocketAddr {
    h2c_upstream_counting(answer).await.0
}

/// [`h2c_upstream`], with the number of TCP connections it accepted.
pub async fn h2c_upstream_counting(
    answer: fn(&Request<Incoming>) -> String,
) -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| async move {
                    let body = Full::new(Bytes::from(answer(&request)));
                    Ok::<_, Infallible>(Response::new(body))
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, accepted)
}

/// A body of `total` bytes produced chunk by chunk, never held in memory at once.
pub fn generated_body(total: u64) -> TestBody {
    const CHUNK: u64 = 64 * 1024;
    let chunk = Bytes::from(vec![b'u'; CHUNK as usize]);
    let frames = (0..total.div_ceil(CHUNK)).map(move |index| {
        let len = CHUNK.min(total - index * CHUNK) as usize;
        Ok::<_, Infallible>(Frame::data(chunk.slice(..len)))
    });
    BodyExt::boxed(StreamBody::new(futures_util::stream::iter(frames)))
}

/// `POST url` with a streamed body; collects the (small) answer.
pub async fn post_streaming(url: &str, body: TestBody) -> Got {
    let client = Client::builder(TokioExecutor::new()).build_http::<TestBody>();
    let request = Request::post(url).body(body).unwrap();
    collect(
        client
            .request(request)
            .await
            .unwrap_or_else(|e| panic!("POST {url} failed: {e}")),
    )
    .await
}

/// `GET url`, counting the body's bytes as they stream past without keeping them.
pub async fn download_len(url: &str) -> (StatusCode, u64) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let response = client
        .get(url.parse().unwrap())
        .await
        .unwrap_or_else(|e| panic!("GET {url} failed: {e}"));
    let status = response.status();
    let mut body = response.into_body();
    let mut total = 0u64;
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame.expect("download interrupted").data_ref() {
            total += data.len() as u64;
        }
    }
    (status, total)
}

/// `GET url` over HTTP/2 with prior knowledge (h2c), on a fresh connection.
pub async fn get_h2(url: &str, headers: &[(&str, &str)]) -> Got {
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let mut request = Request::get(url).version(http::Version::HTTP_2);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap_or_else(|e| panic!("h2c request to {url} failed: {e}"));
    assert_eq!(
        response.version(),
        http::Version::HTTP_2,
        "answered over HTTP/2"
    );
    collect(response).await
}

pub async fn collect(response: Response<Incoming>) -> Got {
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Got {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// Writes `toml` as `sluice.toml` in `dir` and returns its path.
pub fn write_config(dir: &Path, toml: &str) -> PathBuf {
    let path = dir.join("sluice.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

/// An operating-system tool a few tests need and a fresh machine lacks
/// (`faketime`, `chromium`, `promtool`), found on `PATH` under any of
/// `names`. When none is there, prints one line, `SKIPPED <test>: needs
/// <tool> (apt-get install <package>)`, and returns `None` so the test
/// passes: the README's test command stays green on a machine with only the
/// toolchain and `redis-server`, and `.ci/run`, which installs every tool,
/// fails on that line (docs/development.md, "Optional tools").
pub fn optional_tool(test: &str, names: &[&str], package: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| is_executable(candidate));
    if found.is_none() {
        // Straight to the file descriptor, in one write: the test harness
        // captures `eprintln!` of a passing test, and this line must be
        // seen whole among the harness's own.
        use std::io::Write;
        let line = format!(
            "\nSKIPPED {test}: needs {} (apt-get install {package})\n",
            names[0]
        );
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
    found
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The sluice binary built by cargo for integration tests.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sluice"))
}

/// What `sluice check` says of the config at `path`, which it accepts.
pub fn checked(path: &std::path::Path) -> String {
    let check = std::process::Command::new(binary())
        .args(["check", "--config"])
        .arg(path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout).into_owned();
    assert!(check.status.success(), "{said}");
    said
}

/// The sluice binary running `sluice run` on a config file.
pub struct SluiceProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    /// The rate limit service's address, with `[rls]`.
    pub rls: Option<SocketAddr>,
    /// Its stderr lines but the "serving" one: those before it (config
    /// warnings, the store's first words) and after it (the first 10,000).
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl SluiceProcess {
    /// Spawns `sluice run --config path` (listen addresses in the file should
    /// be `127.0.0.1:0`) and waits for its "serving" log line.
    pub fn spawn(config: &Path) -> SluiceProcess {
        SluiceProcess::spawn_with_env(config, &[])
    }

    /// [`SluiceProcess::spawn`] with extra environment variables.
    pub fn spawn_with_env(config: &Path, env: &[(&str, &str)]) -> SluiceProcess {
        let mut command = Command::new(binary());
        command
            .args(["run", "--config"])
            .arg(config)
            .envs(env.iter().copied());
        SluiceProcess::spawn_command(command)
    }

    /// Runs `command` (which starts `sluice run`, possibly through a shell)
    /// with info logs on a piped stderr, and waits for its "serving" line.
    pub fn spawn_command(command: Command) -> SluiceProcess {
        SluiceProcess::spawn_command_with_stdout(command, Stdio::null())
    }

    /// [`SluiceProcess::spawn_command`] with its stdout as `stdout` says
    /// (`Stdio::piped()`: kept in `child.stdout`, for the test to read or
    /// to leave unread).
    pub fn spawn_command_with_stdout(mut command: Command, stdout: Stdio) -> SluiceProcess {
        use std::io::{BufRead, BufReader};
        let mut child = command
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .stdout(stdout)
            .spawn()
            .expect("spawn sluice");
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let mut addrs = None;
        let mut early = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            if !line.contains("sluice is serving") {
                early.push(line);
            } else {
                let field = |name: &str| -> SocketAddr {
                    let start = line.find(&format!("{name}=")).unwrap() + name.len() + 1;
                    line[start..]
                        .split_whitespace()
                        .next()
                        .unwrap()
                        .parse()
                        .unwrap()
                };
                let rls = line
                    .find("rls=")
                    .and_then(|start| line[start + 4..].split_whitespace().next())
                    .and_then(|addr| addr.parse().ok());
                addrs = Some((field("listen"), field("admin"), rls));
                break;
            }
        }
        let (addr, admin, rls) =
            addrs.unwrap_or_else(|| panic!("sluice did not start: {early:#?}"));
        // Keep draining stderr so the child never blocks on a full pipe,
        // keeping the lines for tests that read the log.
        let log = std::sync::Arc::new(std::sync::Mutex::new(early));
        let kept = std::sync::Arc::clone(&log);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut kept = kept.lock().unwrap();
                if kept.len() < 10_000 {
                    kept.push(line);
                }
            }
        });
        SluiceProcess {
            child,
            addr,
            admin,
            rls,
            log,
        }
    }

    /// Sends a signal by name (`HUP`, `TERM`, ...).
    pub fn signal(&self, name: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status();
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    /// Waits up to `limit` for the process to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A memory field of /proc/<pid>/status in KiB (`VmRSS`, `VmHWM`).
    pub fn memory_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc status"))
    }

    /// The lines it logged so far that contain `needle`.
    pub fn logged(&self, needle: &str) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|line| line.contains(needle))
            .cloned()
            .collect()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{}", self.admin, path)
    }
}

impl Drop for SluiceProcess {
    fn drop(&mut self) {
        // sluice may run under a wrapper that forks it (faketime): its
        // children go first, or they would outlive the test.
        let _ = Command::new("pkill")
            .args(["-KILL", "-P", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `GET /a` on a kept-alive HTTP/1 connection and reads the head of
/// the answer and its body; returns the head, lower-cased.
pub async fn exchange(conn: &mut tokio::net::TcpStream) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    conn.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(conn.read(&mut byte).await.unwrap(), 1, "{head:?}");
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_lowercase();
    let length: usize = text
        .split("content-length: ")
        .nth(1)
        .and_then(|rest| rest.split("\r\n").next())
        .and_then(|n| n.parse().ok())
        .expect("a length");
    let mut body = vec![0u8; length];
    conn.read_exact(&mut body).await.unwrap();
    text
}
