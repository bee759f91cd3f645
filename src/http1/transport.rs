//! The one narrow interface sluice's HTTP/1.1 engine reads and writes
//! through, on both sides: a client's connection (behind its clocks,
//! `server/deadline_io.rs`, over TCP or TLS) and an upstream's (TCP or TLS,
//! `proxy/pool/stream.rs`).
//!
//! Protocol code — heads, bodies, framing, the request and answer loops —
//! calls these four methods and nothing else of the socket. Today every
//! transport is a tokio stream, polled on readiness (epoll), through the
//! blanket implementation below. A completion-based backend (io_uring) is
//! another implementation of [`Transport`] beside it: it would submit a read
//! into a buffer it owns and hand the filled bytes over in `poll_fill`, and
//! keep a write's slices alive until its completion in `poll_send`;
//! ARCHITECTURE.md ("The I/O seam") says where it plugs in. No protocol code
//! changes for it.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::{pin, Pin};
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

/// A byte stream the HTTP/1.1 engine speaks on.
pub trait Transport: Unpin + Send {
    /// Reads what has arrived into the spare room of `buf` (the caller
    /// makes some); `Ok(0)`: the peer closed its side (or `buf` had no room).
    fn poll_fill(&mut self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Poll<io::Result<usize>>;

    /// Writes from the front of `parts`, as much as the transport takes
    /// now; how many bytes went.
    fn poll_send(&mut self, cx: &mut Context<'_>, parts: &[IoSlice<'_>])
        -> Poll<io::Result<usize>>;

    /// Sends on what the transport still holds (a TLS record being sealed).
    fn poll_push(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// Closes the write side, once everything written went out.
    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

/// The readiness-based backend: every tokio stream.
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Transport for T {
    #[inline]
    fn poll_fill(&mut self, cx: &mut Context<'_>, buf: &mut BytesMut) -> Poll<io::Result<usize>> {
        // `read_buf` through tokio's `poll_read` clears readiness after a
        // short read, so the next read waits for the reactor.
        pin!(self.read_buf(buf)).poll(cx)
    }

    #[inline]
    fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        parts: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match parts {
            [one] => Pin::new(self).poll_write(cx, one),
            _ => Pin::new(self).poll_write_vectored(cx, parts),
        }
    }

    #[inline]
    fn poll_push(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self).poll_flush(cx)
    }

    #[inline]
    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self).poll_shutdown(cx)
    }
}

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
