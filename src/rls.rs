//! Envoy's rate limit service (docs/rate-limit-service.md): with
//! `[rls] listen`, sluice answers
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` and
//! `grpc.health.v1.Health` over h2c, on the proxy's runtime, policy,
//! stores, bans and metrics. Rules with `match.domain` decide the calls'
//! descriptors, all or nothing, in one store call per call.
//!
//! - [`call`]: a call read and checked (`INVALID_ARGUMENT` otherwise);
//! - [`decide`]: each descriptor's rule, key and limits, and the store;
//! - [`answer`]: the statuses and the headers for Envoy;
//! - [`service`]: the gRPC method, which counts what was decided;
//! - [`grpc`]: its route, whose decoder calls garbage `INVALID_ARGUMENT`;
//! - this module: the listener and its bounds.
//!
//! Bounds: at most [`MAX_CONNECTIONS`] connections (one more is closed at
//! once), [`MAX_STREAMS`] calls in flight on each and [`MAX_CALLS`] on all
//! (one more is answered `RESOURCE_EXHAUSTED` before its message is read),
//! messages of at most [`MAX_MESSAGE_BYTES`], and every call within its
//! `grpc-timeout` (at most [`CALL_TIMEOUT`]). A call in flight holds about
//! 4 KiB and HTTP/2's flow control keeps what a connection buffers to its
//! window, so memory stays bounded however many streams clients open.

mod answer;
mod call;
mod decide;
mod grpc;
mod service;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic_health::ServingStatus;

use crate::proxy::Proxy;
pub use service::RateLimiter;

/// Connections served at once (Envoy keeps a few per worker).
pub const MAX_CONNECTIONS: usize = 1024;

/// Calls in flight on one connection (HTTP/2 `MAX_CONCURRENT_STREAMS`).
pub const MAX_STREAMS: u32 = 1024;

/// Calls in flight on all connections together; one more is answered
/// `RESOURCE_EXHAUSTED` at once.
pub const MAX_CALLS: usize = 10_000;

/// The largest call accepted (`OUT_OF_RANGE` above, tonic's answer):
/// descriptors are a few short strings.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// The longest a call may take when its `grpc-timeout` allows more (or
/// names none): the store's own timeout answers first.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The gRPC service name health checks ask about.
pub const SERVICE_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// Serves the rate limit service on `listener`. Once `unready` resolves
/// (shutdown has begun), health checks answer `NOT_SERVING` while calls are
/// still answered, as `/readyz` turns 503 during `shutdown_delay`; once
/// `shutdown` resolves too, the listener closes, and each connection
/// finishes its calls (the caller bounds how long).
pub async fn serve(
    listener: TcpListener,
    proxy: Proxy,
    unready: impl Future<Output = ()>,
    shutdown: impl Future<Output = ()>,
) {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status(SERVICE_NAME, ServingStatus::Serving)
        .await;
    let service = grpc::RateLimitServer::new(RateLimiter { proxy });
    let incoming = accepted(listener);
    let shutdown = async move {
        unready.await;
        reporter
            .set_service_status(SERVICE_NAME, ServingStatus::NotServing)
            .await;
        reporter
            .set_service_status("", ServingStatus::NotServing)
            .await;
        shutdown.await;
    };
    let served = tonic::transport::Server::builder()
        .max_concurrent_streams(MAX_STREAMS)
        .timeout(CALL_TIMEOUT)
        // A client that resets streams as fast as it opens them gets a
        // GOAWAY (hyper's bound; the proxy listener's too).
        .http2_max_pending_accept_reset_streams(Some(100))
        .tcp_nodelay(true)
        .add_service(health)
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await;
    if let Err(error) = served {
        tracing::error!(%error, "the rate limit service stopped");
    }
}

/// The connections `listener` accepts, each holding its place under
/// [`MAX_CONNECTIONS`]; one more is closed at once.
fn accepted(
    listener: TcpListener,
) -> impl futures_util::Stream<Item = Result<Permitted, io::Error>> {
    let places = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    futures_util::stream::unfold((listener, places), |(listener, places)| async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "rate limit service accept failed");
                    // Out of descriptors, say: not a spin while it lasts.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(place) = Arc::clone(&places).try_acquire_owned() else {
                tracing::debug!("rate limit service connection refused: {MAX_CONNECTIONS} open");
                continue;
            };
            let _ = stream.set_nodelay(true);
            let permitted = Permitted {
                stream,
                _place: place,
            };
            return Some((Ok(permitted), (listener, places)));
        }
    })
}

/// An accepted connection with its place under [`MAX_CONNECTIONS`],
/// given back when the connection ends.
#[derive(Debug)]
struct Permitted {
    stream: TcpStream,
    _place: OwnedSemaphorePermit,
}

impl Connected for Permitted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Permitted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Permitted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
