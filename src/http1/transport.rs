//! The one narrow interface sluice's HTTP/1.1 engine reads and writes
//! through, on both sides (a client's connection behind its clocks,
//! `server/deadline_io.rs`; an upstream's, `proxy/pool/stream.rs`):
//! protocol code calls these four methods and nothing else of a socket.
//! What implements it, how its buffers pass by ownership and where an
//! io_uring backend plugs in: ARCHITECTURE.md, "The I/O seam".

use std::io;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};

use super::sending::Sending;

/// A byte stream the HTTP/1.1 engine speaks on.
pub trait Transport: Unpin + Send {
    /// Reads what has arrived into the spare room of `buf`, after its bytes
    /// (the caller makes some room); `Ok(0)`: the peer closed its side (or
    /// `buf` had no room).
    ///
    /// The buffer passes by ownership for the read: a transport that fills
    /// it later (completion-based) takes it out of `buf` when the read
    /// starts, leaving `buf` empty, and gives it back, with what arrived
    /// appended, when it returns `Ready`. Until then the caller leaves
    /// `buf` as it is and polls again with it.
    fn poll_fill(&mut self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Poll<io::Result<usize>>;

    /// Sends from the front of `out`, as much as the transport takes now,
    /// and advances `out` past it; how many bytes went.
    ///
    /// `out` passes by ownership, as a read's buffer does: a transport
    /// that sends later (completion-based) takes its bytes when the write
    /// starts ([`Sending::lend`]) and gives them back, advanced, when it
    /// returns `Ready` ([`Sending::give_back`]). Until then the caller
    /// leaves `out` as it is and polls again with it.
    fn poll_send(&mut self, cx: &mut Context<'_>, out: &mut Sending) -> Poll<io::Result<usize>>;

    /// Sends on what the transport still holds (a TLS record being sealed,
    /// a write not yet completed).
    fn poll_push(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// Closes the write side, once everything written went out.
    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

/// Makes a tokio stream a [`Transport`] polled on readiness (epoll):
/// `on_readiness!(impl[generics] for Type)`.
macro_rules! on_readiness {
    (impl $([$($generics:tt)*])? for $ty:ty) => {
        impl $(<$($generics)*>)? $crate::http1::transport::Transport for $ty {
            #[inline]
            fn poll_fill(
                &mut self,
                cx: &mut std::task::Context<'_>,
                buf: &mut bytes::BytesMut,
            ) -> std::task::Poll<std::io::Result<usize>> {
                use std::future::Future;
                use tokio::io::AsyncReadExt;
                // `read_buf` through tokio's `poll_read` clears readiness
                // after a short read, so the next read waits for the
                // reactor.
                std::pin::pin!(self.read_buf(buf)).poll(cx)
            }

            #[inline]
            fn poll_send(
                &mut self,
                cx: &mut std::task::Context<'_>,
                out: &mut $crate::http1::sending::Sending,
            ) -> std::task::Poll<std::io::Result<usize>> {
                use std::io::IoSlice;
                use tokio::io::AsyncWrite;
                let [first, long, after] = out.slices();
                let n = std::task::ready!(if long.is_empty() && after.is_empty() {
                    std::pin::Pin::new(&mut *self).poll_write(cx, first)
                } else {
                    let parts = [IoSlice::new(first), IoSlice::new(long), IoSlice::new(after)];
                    std::pin::Pin::new(&mut *self).poll_write_vectored(cx, &parts)
                })?;
                out.advance(n);
                std::task::Poll::Ready(Ok(n))
            }

            #[inline]
            fn poll_push(
                &mut self,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                tokio::io::AsyncWrite::poll_flush(std::pin::Pin::new(self), cx)
            }

            #[inline]
            fn poll_close(
                &mut self,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                tokio::io::AsyncWrite::poll_shutdown(std::pin::Pin::new(self), cx)
            }
        }
    };
}
pub(crate) use on_readiness;

on_readiness!(impl for tokio::net::TcpStream);
// In-memory streams: the differential check against hyper, and tests.
on_readiness!(impl for tokio::io::DuplexStream);
// A WebSocket's HTTP/2 stream, on either side (RFC 8441): hyper's
// upgraded `CONNECT` stream (`server/http2/tunnel.rs`,
// `proxy/pool/extended_connect.rs`).
on_readiness!(impl for hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>);

/// Writes all of `bytes` (then pushes it on), as `write_all` and `flush`.
pub async fn send_all<T: Transport + ?Sized>(io: &mut T, bytes: Bytes) -> io::Result<()> {
    let mut out = Sending::of(bytes);
    while !out.is_empty() {
        if std::future::poll_fn(|cx| io.poll_send(cx, &mut out)).await? == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
    }
    std::future::poll_fn(|cx| io.poll_push(cx)).await
}

/// Reads into `buf` (making room for `want` bytes when it has less).
pub async fn fill<T: Transport + ?Sized>(
    io: &mut T,
    buf: &mut BytesMut,
    want: usize,
) -> io::Result<usize> {
    if buf.capacity() - buf.len() < want {
        buf.reserve(want);
    }
    std::future::poll_fn(|cx| io.poll_fill(cx, buf)).await
}
