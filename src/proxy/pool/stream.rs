//! The streams a connection of sluice's own exchange runs over: TCP to an
//! http:// upstream, TLS over TCP to an https:// one. The exchange, its
//! body and the idle list are generic over them, so the TCP path compiles
//! to what it was before TLS existed; only what differs is here.

use std::fmt::Debug;
use std::pin::Pin;
use std::task::{Context, Waker};

use tokio::io::AsyncBufRead;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::http1::transport::{on_readiness, Transport};

on_readiness!(impl for TlsStream<TcpStream>);

/// A stream to the upstream that a pooled connection of sluice's own
/// exchange can run over: a [`Transport`] (hyper's HTTP/2 client takes the
/// tokio stream it dialled instead).
pub trait UpstreamStream: Transport + Debug + 'static {
    /// Whether an idle connection can carry another exchange: the upstream
    /// has neither closed it nor sent anything unasked. Costs no system
    /// call while the runtime has seen nothing arrive on it.
    fn idle_and_open(&mut self) -> bool;

    /// Acknowledges what arrived at once (`TCP_QUICKACK`) rather than after
    /// the kernel's delayed-ACK wait (up to 40 ms on Linux): an upstream
    /// that writes a response's head and body in two writes without
    /// `TCP_NODELAY` holds the body back (Nagle) until the head is
    /// acknowledged (docs/benchmarks-history.md, "Nagle against delayed
    /// ACK").
    fn ack_now(&self);
}

/// [`UpstreamStream::ack_now`] on the TCP socket under any stream.
fn ack_now(tcp: &TcpStream) {
    let _ = socket2::SockRef::from(tcp).set_tcp_quickack(true);
}

impl UpstreamStream for TcpStream {
    fn idle_and_open(&mut self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.try_read(&mut probe),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock)
    }

    fn ack_now(&self) {
        ack_now(self);
    }
}

impl UpstreamStream for TlsStream<TcpStream> {
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

    fn ack_now(&self) {
        ack_now(self.get_ref().0);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio_rustls::TlsAcceptor;

    use super::*;
    use crate::proxy::pool::dial::Destination;
    use crate::proxy::pool::tls::UpstreamTls;
    use crate::testing::certs::TestCa;

    /// A TLS 1.3 connection to a loopback server: the client's end, as
    /// the pool holds it, and the server's.
    async fn connected() -> (
        TlsStream<TcpStream>,
        tokio_rustls::server::TlsStream<TcpStream>,
    ) {
        let ca = TestCa::new("test CA");
        let leaf = ca.leaf(&["localhost"]);
        let certs = CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
        let server = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(server));
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap())
            .unwrap();
        let tls = UpstreamTls::new(
            crate::tls::server_name("localhost").unwrap(),
            Arc::new(roots),
            Duration::from_secs(5),
            crate::proxy::pool::tls::Alpn::Http1,
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepting = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            acceptor.accept(tcp).await.unwrap()
        });
        let tcp = TcpStream::connect(address).await.unwrap();
        let client = tls.handshake(tcp, &Destination(address)).await.unwrap();
        (client, accepting.await.unwrap())
    }

    /// Waits until bytes from the server are there to be read.
    async fn arrived(client: &TlsStream<TcpStream>) {
        tokio::time::timeout(Duration::from_secs(5), client.get_ref().0.readable())
            .await
            .expect("the server's record within 5 s")
            .unwrap();
    }

    /// The records a TLS 1.3 server sends on its own — the session tickets
    /// after the handshake, a key update — leave an idle connection usable
    /// (the raw byte the TCP check reads would have condemned it), and it
    /// carries the next exchange.
    #[tokio::test]
    async fn session_tickets_and_key_updates_keep_an_idle_connection() {
        let (mut client, mut server) = connected().await;
        // The tickets were sent as the handshake ended; nothing read them.
        arrived(&client).await;
        assert!(client.idle_and_open(), "the session tickets condemned it");

        server.get_mut().1.refresh_traffic_keys().unwrap();
        server.flush().await.unwrap();
        arrived(&client).await;
        assert!(client.idle_and_open(), "a key update condemned it");

        client.write_all(b"ping").await.unwrap();
        client.flush().await.unwrap();
        let mut ping = [0u8; 4];
        server.read_exact(&mut ping).await.unwrap();
        server.write_all(b"pong").await.unwrap();
        server.flush().await.unwrap();
        let mut pong = [0u8; 4];
        client.read_exact(&mut pong).await.unwrap();
        assert_eq!((&ping, &pong), (b"ping", b"pong"));
        assert!(client.idle_and_open());
    }

    #[tokio::test]
    async fn a_close_notify_or_unasked_data_condemns_an_idle_connection() {
        // Each time, the session tickets are taken first, so that what is
        // looked at next is what the server did.
        let (mut client, mut server) = connected().await;
        arrived(&client).await;
        assert!(client.idle_and_open());
        server.write_all(b"HTTP/1.1 408 ").await.unwrap();
        server.flush().await.unwrap();
        arrived(&client).await;
        assert!(!client.idle_and_open(), "unasked data");

        let (mut client, mut server) = connected().await;
        arrived(&client).await;
        assert!(client.idle_and_open());
        server.shutdown().await.unwrap();
        arrived(&client).await;
        assert!(!client.idle_and_open(), "close_notify");

        // The socket closed without a close_notify.
        let (mut client, server) = connected().await;
        arrived(&client).await;
        assert!(client.idle_and_open());
        drop(server);
        arrived(&client).await;
        assert!(!client.idle_and_open(), "closed socket");
    }
}
