//! One HTTP/3 connection, once its handshake is done: its request streams
//! accepted as the client opens them, each served in a task of its own
//! through the proxy, with the `[server]` limits that hold for every
//! protocol (docs/edge-behaviour.md, "Slow clients and deadlines"):
//!
//! - a request head must arrive within `header_read_timeout` of its
//!   stream's opening, or the stream is dropped;
//! - more than `max_headers` fields is a 431 problem document, as over
//!   HTTP/2; a field section over `max_header_bytes` is h3's own 431;
//! - an answer that makes no progress for `send_timeout` is abandoned, its
//!   stream reset (`body.rs`);
//! - a connection carries at most `max_requests_per_connection` requests:
//!   the last one sends GOAWAY.
//!
//! GOAWAY is also sent when shutdown begins; the connection ends once its
//! requests have.

use std::net::SocketAddr;
use std::pin::pin;
use std::time::Duration;

use bytes::Bytes;
use h3::server::RequestResolver;
use tokio::sync::mpsc::Sender;

use super::body;
use crate::config::ServerConfig;
use crate::proxy::{respond, ClientRequest, Proxy};
use crate::server::drain::DrainHandle;
use crate::server::http2;

/// The `[server]` limits an HTTP/3 connection keeps.
#[derive(Debug)]
pub struct Settings {
    pub header_read_timeout: Duration,
    pub body_timeout: Duration,
    pub send_timeout: Duration,
    pub max_headers: usize,
    pub max_header_bytes: usize,
    pub max_requests: u32,
}

impl Settings {
    pub fn of(server: &ServerConfig) -> Settings {
        Settings {
            header_read_timeout: server.header_read_timeout,
            body_timeout: server.body_timeout,
            send_timeout: server.send_timeout,
            max_headers: server.max_headers,
            max_header_bytes: server.max_header_bytes,
            max_requests: server.max_requests_per_connection,
        }
    }
}

type Resolver = RequestResolver<h3_quinn::Connection, Bytes>;

/// Serves `quic` until the client closes it, it fails, or it has been sent
/// GOAWAY (shutdown, or its last request) and its requests are done: then
/// it is closed, idle or not (a client need not close a connection it was
/// told is going away).
pub async fn serve(
    quic: quinn::Connection,
    proxy: &Proxy,
    settings: &Settings,
    draining: &DrainHandle,
) {
    let built = h3::server::builder()
        .max_field_section_size(settings.max_header_bytes as u64)
        .build::<_, Bytes>(h3_quinn::Connection::new(quic.clone()))
        .await;
    let mut h3 = match built {
        Ok(h3) => h3,
        Err(error) => return tracing::debug!(%error, "HTTP/3 connection failed to start"),
    };
    let mut moving = pin!(draining.moving());
    // Each request's task holds a sender: once the connection has gone
    // away and dropped its own, the receiver ends with the last request.
    let (in_flight, mut all_done) = tokio::sync::mpsc::channel::<()>(1);
    let mut accepting = Some(in_flight);
    let mut served = 0u32;
    loop {
        let accepted = tokio::select! {
            biased;
            _ = &mut moving, if accepting.is_some() => {
                go_away(&mut h3, &mut accepting).await;
                continue;
            }
            _ = all_done.recv(), if accepting.is_none() => {
                return quic.close(H3_NO_ERROR, b"");
            }
            accepted = h3.accept() => accepted,
        };
        let resolver = match accepted {
            Ok(Some(resolver)) => resolver,
            Ok(None) => return,
            Err(error) => return tracing::debug!(%error, "HTTP/3 connection ended"),
        };
        served += 1;
        // The client's address now: a path it moved to is proved before
        // quinn uses it.
        let peer = quic.remote_address();
        let request = Request {
            settings: RequestSettings::of(settings),
            _in_flight: accepting.clone(),
        };
        tokio::spawn(request.serve(resolver, proxy.clone(), peer));
        if served >= settings.max_requests && accepting.is_some() {
            go_away(&mut h3, &mut accepting).await;
        }
    }
}

/// HTTP/3's "no error" (RFC 9114 §8.1): a connection closed as it should.
const H3_NO_ERROR: quinn::VarInt = quinn::VarInt::from_u32(0x100);

/// Sends GOAWAY: no request after those already accepted.
async fn go_away(h3: &mut Connection, accepting: &mut Option<Sender<()>>) {
    *accepting = None;
    let _ = h3.shutdown(0).await;
}

type Connection = h3::server::Connection<h3_quinn::Connection, Bytes>;

/// What a request's task keeps of the connection's settings.
#[derive(Debug, Clone, Copy)]
struct RequestSettings {
    header_read_timeout: Duration,
    body_timeout: Duration,
    send_timeout: Duration,
    max_headers: usize,
}

impl RequestSettings {
    fn of(settings: &Settings) -> RequestSettings {
        RequestSettings {
            header_read_timeout: settings.header_read_timeout,
            body_timeout: settings.body_timeout,
            send_timeout: settings.send_timeout,
            max_headers: settings.max_headers,
        }
    }
}

/// One request's task: its settings, and its place among the connection's
/// requests in flight.
struct Request {
    settings: RequestSettings,
    _in_flight: Option<Sender<()>>,
}

impl Request {
    /// The request: its head within `header_read_timeout`, answered
    /// through the proxy (or 431 beyond `max_headers`), the answer sent
    /// back.
    async fn serve(self, resolver: Resolver, proxy: Proxy, peer: SocketAddr) {
        let settings = self.settings;
        let resolved =
            tokio::time::timeout(settings.header_read_timeout, resolver.resolve_request()).await;
        let (request, stream) = match resolved {
            Ok(Ok(resolved)) => resolved,
            Ok(Err(error)) => return tracing::debug!(%error, "HTTP/3 request refused"),
            Err(_) => return tracing::debug!(%peer, "HTTP/3 request head not complete in time"),
        };
        let (mut send, recv) = stream.split();
        let mut response = respond::vacant();
        if http2::field_lines(&request) > settings.max_headers {
            http2::too_many_fields(&mut response, settings.max_headers);
        } else {
            let body = body::of_request(recv, request.headers(), settings.body_timeout).await;
            let mut request = ClientRequest::new(request.map(|()| body));
            proxy.handle(&mut request, peer, &mut response).await;
            let own_fields = response.body_mut().take_own_fields();
            own_fields.into_map(response.headers_mut());
        }
        body::answer(&mut send, response, settings.send_timeout).await;
    }
}
