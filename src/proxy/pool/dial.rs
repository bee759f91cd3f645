//! Reaching a server: a new TCP connection to its address, within
//! `connect_timeout`, with `TCP_NODELAY` set.
//!
//! A server is one address: a pool's names are resolved off the request
//! path, each address becoming a server of its own
//! (`proxy/upstream/resolve.rs`; docs/upstreams.md, "Pools"), so nothing
//! here looks a name up.

use std::fmt;
use std::net::SocketAddr;

use tokio::net::TcpStream;
use tokio::time::Duration;

use super::ForwardError;

/// Where a server's new connections go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Destination(pub SocketAddr);

impl Destination {
    /// A new TCP connection (`TCP_NODELAY` set) to the address, within
    /// `timeout`: [`ForwardError::Timeout`] when the time ran out,
    /// otherwise [`ForwardError::Connect`].
    pub async fn connect(&self, timeout: Duration) -> Result<TcpStream, ForwardError> {
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(self.0)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => return Err(failure(&error)),
            Err(_elapsed) => return Err(ForwardError::Timeout),
        };
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

/// What a failed connection attempt means for the request.
fn failure(error: &std::io::Error) -> ForwardError {
    if error.kind() == std::io::ErrorKind::TimedOut {
        ForwardError::Timeout
    } else {
        ForwardError::Connect
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn a_listening_address_is_reached_with_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let stream = Destination(address)
            .connect(Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(stream.peer_addr().unwrap(), address);
        assert!(stream.nodelay().unwrap());
    }

    #[tokio::test]
    async fn a_refusing_address_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let error = Destination(address).connect(Duration::from_secs(5)).await;
        assert_eq!(error.unwrap_err(), ForwardError::Connect);
    }
}
