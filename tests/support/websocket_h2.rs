//! WebSockets over HTTP/2 (RFC 8441) on loopback: a client that opens them
//! on one h2c connection to sluice (prior knowledge) with extended
//! `CONNECT`, and serves plain requests on the same connection; and an h2c
//! upstream that takes WebSockets the same way (advertising extended
//! `CONNECT` or not) and echoes every byte back, answering other requests
//! `200 plain`.

use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::upgrade::Upgraded;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::websocket::WsClient;

/// A WebSocket on an HTTP/2 stream, as the client sees it.
pub type H2Ws = WsClient<TokioIo<Upgraded>>;

/// One HTTP/2 connection to sluice.
pub struct H2Client {
    send: hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    /// What sluice's SETTINGS said of extended CONNECT, as last read.
    advertised: watch::Receiver<bool>,
    /// Whether the connection is still up.
    up: watch::Receiver<bool>,
}

/// The answer to a request: its status, fields and body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl H2Client {
    /// An h2c connection (prior knowledge) to `addr`.
    pub async fn connect(addr: SocketAddr) -> H2Client {
        H2Client::over(TcpStream::connect(addr).await.unwrap()).await
    }

    /// HTTP/2 over `stream` (a TLS one that chose `h2`, say).
    pub async fn over<S>(stream: S) -> H2Client
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (send, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(stream))
            .await
            .unwrap();
        let (said, advertised) = watch::channel(false);
        let (running, up) = watch::channel(true);
        tokio::spawn(async move {
            let mut connection = Box::pin(connection);
            // hyper's connection future is woken for requests, not for the
            // server's SETTINGS (another task reads those): polled every
            // 10 ms as well, to read the setting anew.
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            let _ = poll_fn(|cx| {
                while tick.poll_tick(cx).is_ready() {}
                let polled = connection.as_mut().poll(cx);
                said.send_replace(connection.is_extended_connect_protocol_enabled());
                polled
            })
            .await;
            running.send_replace(false);
        });
        H2Client {
            send,
            advertised,
            up,
        }
    }

    /// Whether sluice advertised extended CONNECT within 5 s.
    pub async fn advertised(&self) -> bool {
        let mut said = self.advertised.clone();
        let waited = tokio::time::timeout(Duration::from_secs(5), said.wait_for(|&on| on));
        let advertised = matches!(waited.await, Ok(Ok(_)));
        advertised
    }

    /// Whether the connection is still up.
    pub fn is_up(&self) -> bool {
        *self.up.borrow()
    }

    /// Opens a WebSocket on `path` with `headers` (extended CONNECT,
    /// `:protocol = websocket`): the answer, and the WebSocket when it is
    /// a `200`.
    pub async fn open(&self, path: &str, headers: &[(&str, &str)]) -> (Answer, Option<H2Ws>) {
        self.connect_for(path, Some("websocket"), headers).await
    }

    /// A `CONNECT` for `path` with `protocol` as `:protocol` (none: a plain
    /// one): as [`H2Client::open`].
    pub async fn connect_for(
        &self,
        path: &str,
        protocol: Option<&'static str>,
        headers: &[(&str, &str)],
    ) -> (Answer, Option<H2Ws>) {
        let mut request = Request::builder()
            .method(Method::CONNECT)
            .uri(format!("http://test{path}"))
            .header("sec-websocket-version", "13");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut request = request.body(Empty::new()).unwrap();
        if let Some(protocol) = protocol {
            request
                .extensions_mut()
                .insert(hyper::ext::Protocol::from_static(protocol));
        }
        let mut response = self.send.clone().send_request(request).await.unwrap();
        if response.status() == StatusCode::OK {
            let head = Answer {
                status: response.status(),
                headers: response.headers().clone(),
                body: String::new(),
            };
            let stream = hyper::upgrade::on(&mut response).await.unwrap();
            return (head, Some(WsClient::over(TokioIo::new(stream))));
        }
        (answer(response).await, None)
    }

    /// A `GET` for `path` on the same connection.
    pub async fn get(&self, path: &str) -> Answer {
        let request = Request::get(format!("http://test{path}"))
            .body(Empty::new())
            .unwrap();
        answer(self.send.clone().send_request(request).await.unwrap()).await
    }
}

async fn answer(response: Response<Incoming>) -> Answer {
    let (head, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    Answer {
        status: head.status,
        headers: head.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// A request the h2c upstream received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: Method,
    pub protocol: Option<String>,
    pub path: String,
    pub headers: HeaderMap,
}

/// The h2c upstream.
pub struct H2WsUpstream {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<Received>>>,
}

impl H2WsUpstream {
    /// Serving on loopback; `advertise`: its SETTINGS advertise extended
    /// CONNECT.
    pub async fn start(advertise: bool) -> H2WsUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let kept = Arc::clone(&received);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = Arc::clone(&kept);
                let service = service_fn(move |request| serve(request, Arc::clone(&kept)));
                let mut server = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                if advertise {
                    server.enable_connect_protocol();
                }
                tokio::spawn(async move {
                    let _ = server.serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        H2WsUpstream { addr, received }
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

async fn serve(
    mut request: Request<Incoming>,
    received: Arc<Mutex<Vec<Received>>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let protocol = request
        .extensions()
        .get::<hyper::ext::Protocol>()
        .map(|p| p.as_str().to_owned());
    received.lock().unwrap().push(Received {
        method: request.method().clone(),
        protocol: protocol.clone(),
        path: request.uri().path().to_owned(),
        headers: request.headers().clone(),
    });
    if request.method() != Method::CONNECT || protocol.is_none() {
        return Ok(Response::new(Full::new(Bytes::from_static(b"plain"))));
    }
    let mut answer = Response::new(Full::new(Bytes::new()));
    if let Some(asked) = request.headers().get("sec-websocket-protocol") {
        let first = asked.to_str().unwrap().split(',').next().unwrap().trim();
        answer
            .headers_mut()
            .insert("sec-websocket-protocol", first.parse().unwrap());
    }
    let opened = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(stream) = opened.await else { return };
        let (mut read, mut write) = tokio::io::split(TokioIo::new(stream));
        let _ = tokio::io::copy(&mut read, &mut write).await;
        let _ = tokio::io::AsyncWriteExt::shutdown(&mut write).await;
    });
    Ok(answer)
}
