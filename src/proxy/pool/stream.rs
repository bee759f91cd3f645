//! The streams a connection of sluice's own exchange runs over: TCP to an
//! http:// upstream, TLS over TCP to an https:// one. The exchange, its
//! body and the idle list are generic over them, so the TCP path compiles
//! to what it was before TLS existed; only what differs is here.

use std::fmt::Debug;
use std::pin::Pin;
use std::task::{Context, Waker};

use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// A stream to the upstream that a pooled connection can run over.
pub trait UpstreamStream: AsyncRead + AsyncWrite + Unpin + Send + Debug + 'static {
    /// Whether written bytes may wait inside the stream until it is flushed
    /// (a TLS record being sealed): a request head is then flushed once
    /// written. A constant, so the TCP path carries no branch for it.
    const BUFFERS_WRITES: bool;

    /// Whether an idle connection can carry another exchange: the upstream
    /// has neither closed it nor sent anything unasked. Costs no system
    /// call while the runtime has seen nothing arrive on it.
    fn idle_and_open(&mut self) -> bool;
}

impl UpstreamStream for TcpStream {
    const BUFFERS_WRITES: bool = false;

    fn idle_and_open(&mut self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.try_read(&mut probe),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock)
    }
}

impl UpstreamStream for TlsStream<TcpStream> {
    const BUFFERS_WRITES: bool = true;

    /// Reads through TLS rather than peeking at the socket: a byte that
    /// arrived on an idle TLS connection may be a record TLS keeps to
    /// itself (a TLS 1.3 server sends session tickets after the handshake,
    /// and may update its keys at any time), which rustls consumes here,
    /// leaving the connection usable. Only plaintext nobody asked for, the
    /// upstream's `close_notify`, the socket's end or a broken record make
    /// the connection unusable. Polled with a waker that does nothing: no
    /// task waits on an idle connection, and the exchange that takes it
    /// next registers its own.
    fn idle_and_open(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(self).poll_fill_buf(&mut cx).is_pending()
    }
}
