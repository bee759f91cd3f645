//! The one narrow interface sluice's HTTP/1.1 engine reads and writes
//! through, on both sides: a client's connection (behind its clocks,
//! `server/deadline_io.rs`, over TCP or TLS) and an upstream's (TCP or TLS,
//! `proxy/pool/stream.rs`).
//!
//! Protocol code — heads, bodies, framing, the request and answer loops —
//! calls these four methods and nothing else of the socket. There is no
//! blanket implementation: each transport is one by choice. The tokio
//! streams sluice serves and dials are polled on readiness (epoll), through
//! [`on_readiness!`]; `DeadlineIo` wraps any transport with the client
//! connection's clocks. A completion-based backend (io_uring) is another
//! implementation beside these: a read hands it the buffer, which it keeps
//! until the read completes (see [`Transport::poll_fill`]), and a write's
//! bytes are its until they are sent. The tests run the engine over one,
//! in memory (`testing/completion.rs`). ARCHITECTURE.md ("The I/O seam")
//! says where a new one plugs in; no protocol code changes for it.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::{pin, Pin};
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

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

    /// Writes from the front of `parts`, as much as the transport takes
    /// now; how many bytes went. Bytes reported as gone are the
    /// transport's: the caller may reuse their memory at once.
    fn poll_send(&mut self, cx: &mut Context<'_>, parts: &[IoSlice<'_>])
        -> Poll<io::Result<usize>>;

    /// Sends on what the transport still holds (a TLS record being sealed,
    /// a write not yet completed).
    fn poll_push(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// Closes the write side, once everything written went out.
    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

/// The readiness-based backend: what [`Transport`]'s methods are for a
/// tokio stream, which [`on_readiness!`] makes its implementation.
pub mod readiness {
    use super::*;

    #[inline]
    pub fn poll_fill<T: AsyncRead + Unpin>(
        io: &mut T,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
    ) -> Poll<io::Result<usize>> {
        // `read_buf` through tokio's `poll_read` clears readiness after a
        // short read, so the next read waits for the reactor.
        pin!(io.read_buf(buf)).poll(cx)
    }

    #[inline]
    pub fn poll_send<T: AsyncWrite + Unpin>(
        io: &mut T,
        cx: &mut Context<'_>,
        parts: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match parts {
            [one] => Pin::new(io).poll_write(cx, one),
            _ => Pin::new(io).poll_write_vectored(cx, parts),
        }
    }

    #[inline]
    pub fn poll_push<T: AsyncWrite + Unpin>(
        io: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(io).poll_flush(cx)
    }

    #[inline]
    pub fn poll_close<T: AsyncWrite + Unpin>(
        io: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(io).poll_shutdown(cx)
    }
}

/// Makes a tokio stream a [`Transport`] polled on readiness
/// ([`readiness`]): `on_readiness!(impl[generics] for Type)`.
macro_rules! on_readiness {
    (impl $([$($generics:tt)*])? for $ty:ty) => {
        impl $(<$($generics)*>)? $crate::http1::transport::Transport for $ty {
            #[inline]
            fn poll_fill(
                &mut self,
                cx: &mut std::task::Context<'_>,
                buf: &mut bytes::BytesMut,
            ) -> std::task::Poll<std::io::Result<usize>> {
                $crate::http1::transport::readiness::poll_fill(self, cx, buf)
            }

            #[inline]
            fn poll_send(
                &mut self,
                cx: &mut std::task::Context<'_>,
                parts: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                $crate::http1::transport::readiness::poll_send(self, cx, parts)
            }

            #[inline]
            fn poll_push(
                &mut self,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                $crate::http1::transport::readiness::poll_push(self, cx)
            }

            #[inline]
            fn poll_close(
                &mut self,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                $crate::http1::transport::readiness::poll_close(self, cx)
            }
        }
    };
}
pub(crate) use on_readiness;

on_readiness!(impl for tokio::net::TcpStream);
// In-memory streams: the differential check against hyper, and tests.
on_readiness!(impl for tokio::io::DuplexStream);

/// Writes all of `bytes` (then pushes it on), as `write_all` and `flush`.
pub async fn send_all<T: Transport + ?Sized>(io: &mut T, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        let n = std::future::poll_fn(|cx| io.poll_send(cx, &[IoSlice::new(bytes)])).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        bytes = &bytes[n..];
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
