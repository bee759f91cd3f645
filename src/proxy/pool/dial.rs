//! Reaching the upstream: its host resolved to every address it has, each
//! tried in turn until one accepts, all within `connect_timeout`
//! (docs/edge.md, "HTTPS upstreams"; http:// upstreams alike).
//!
//! An IP address in the URL is used as it is, with no lookup. A name is
//! resolved for each new connection, never per request (a pooled
//! keep-alive connection needs none), with tokio's `lookup_host`, which
//! asks the system's resolver on the blocking pool so the runtime never
//! waits for it; a changed DNS record is followed by the next connection.
//! The addresses are tried in the order the resolver gives them (RFC 6724
//! on glibc), each with an equal share of what is left of the timeout
//! (the last one with all of it), so that an address that drops
//! connections cannot use up the time the next one needed: `localhost` is
//! `::1` and `127.0.0.1` on many systems, and a service listening on only
//! one of them is reached either way.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use smallvec::SmallVec;
use tokio::net::TcpStream;
use tokio::time::{Duration, Instant};

use super::ForwardError;

/// Where new connections to the upstream go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// An IP address written in the URL.
    Address(SocketAddr),
    /// A name, resolved for each new connection.
    Name { host: String, port: u16 },
}

impl Destination {
    /// The destination of `host` (as a URL writes it: an IPv6 address in
    /// brackets) and `port`.
    pub fn new(host: &str, port: u16) -> Destination {
        let bare = host
            .strip_prefix('[')
            .and_then(|inner| inner.strip_suffix(']'))
            .unwrap_or(host);
        match bare.parse::<IpAddr>() {
            Ok(ip) => Destination::Address(SocketAddr::new(ip, port)),
            Err(_) => Destination::Name {
                host: bare.to_owned(),
                port,
            },
        }
    }

    /// A new TCP connection (`TCP_NODELAY` set) to the first of the
    /// destination's addresses that accepts, within `timeout`:
    /// [`ForwardError::Timeout`] when the time ran out, otherwise
    /// [`ForwardError::Connect`].
    pub async fn connect(&self, timeout: Duration) -> Result<TcpStream, ForwardError> {
        let stream = match self {
            // One address has all the time, as `in_turn` would give it:
            // written out, so that the future every exchange carries room
            // for stays as small as a connect's.
            Destination::Address(address) => {
                match tokio::time::timeout(timeout, TcpStream::connect(address)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(error)) => return Err(failure(&error)),
                    Err(_elapsed) => return Err(ForwardError::Timeout),
                }
            }
            // Boxed for the same reason: a lookup and several attempts
            // hold more, and a name costs a lookup anyway.
            Destination::Name { host, port } => {
                Box::pin(self.resolve_and_connect(host, *port, timeout)).await?
            }
        };
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }

    /// Resolves `host` and connects to its addresses [`in_turn`].
    async fn resolve_and_connect(
        &self,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<TcpStream, ForwardError> {
        let deadline = Instant::now() + timeout;
        let resolving = tokio::net::lookup_host((host, port));
        let addresses: SmallVec<[SocketAddr; 4]> =
            match tokio::time::timeout_at(deadline, resolving).await {
                Err(_elapsed) => return Err(ForwardError::Timeout),
                Ok(Err(error)) => {
                    tracing::warn!(upstream = %self, %error, "cannot resolve the upstream's name");
                    return Err(ForwardError::Connect);
                }
                Ok(Ok(found)) => found.collect(),
            };
        in_turn(&addresses, deadline).await
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
        match self {
            Destination::Address(address) => address.fmt(f),
            Destination::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// Connects to the first of `addresses` that accepts, trying them in
/// order, each within an equal share of the time left until `deadline`.
/// The error is that of the last attempt (none at all: `Connect`).
pub async fn in_turn(
    addresses: &[SocketAddr],
    deadline: Instant,
) -> Result<TcpStream, ForwardError> {
    let mut last = ForwardError::Connect;
    for (tried, address) in addresses.iter().enumerate() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ForwardError::Timeout);
        }
        let share = left / (addresses.len() - tried) as u32;
        last = match tokio::time::timeout(share, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(error)) => failure(&error),
            Err(_elapsed) => ForwardError::Timeout,
        };
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A loopback address nothing listens on (refused at once).
    async fn refused(ip: &str) -> SocketAddr {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        listener.local_addr().unwrap()
    }

    #[test]
    fn an_ip_address_needs_no_lookup_and_a_name_keeps_its_port() {
        assert_eq!(
            Destination::new("127.0.0.1", 8080),
            Destination::Address("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(
            Destination::new("[::1]", 443),
            Destination::Address("[::1]:443".parse().unwrap())
        );
        let name = Destination::new("api.example.com", 443);
        assert_eq!(name.to_string(), "api.example.com:443");
    }

    /// The first address refuses (as `::1` does for a service listening
    /// on 127.0.0.1 only): the next one is tried, and it answers.
    #[tokio::test]
    async fn a_refusing_address_is_passed_over_for_the_next() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap();
        // The same port on the other family, or a closed one on this.
        let first = match TcpListener::bind("[::1]:0").await {
            Ok(_) => SocketAddr::new("::1".parse().unwrap(), open.port()),
            Err(_) => refused("127.0.0.1").await,
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        let stream = in_turn(&[first, open], deadline).await.unwrap();
        assert_eq!(stream.peer_addr().unwrap(), open);
        let (_accepted, _) = listener.accept().await.unwrap();
    }

    #[tokio::test]
    async fn every_address_refusing_is_a_connect_error_and_none_at_all_too() {
        let deadline = Instant::now() + Duration::from_secs(5);
        let addresses = [refused("127.0.0.1").await, refused("127.0.0.1").await];
        assert_eq!(
            in_turn(&addresses, deadline).await.unwrap_err(),
            ForwardError::Connect
        );
        assert_eq!(
            in_turn(&[], deadline).await.unwrap_err(),
            ForwardError::Connect
        );
    }

    #[tokio::test]
    async fn no_time_left_is_a_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let past = Instant::now() - Duration::from_millis(1);
        assert_eq!(
            in_turn(&[address], past).await.unwrap_err(),
            ForwardError::Timeout
        );
    }

    /// `localhost` through the system's resolver: every address it gives
    /// is tried, so a service on 127.0.0.1 alone is reached whether or not
    /// `::1` comes first.
    #[tokio::test]
    async fn localhost_is_reached_on_whichever_family_listens() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let destination = Destination::new("localhost", port);
        assert!(matches!(destination, Destination::Name { .. }));
        let stream = destination.connect(Duration::from_secs(5)).await.unwrap();
        assert_eq!(
            stream.peer_addr().unwrap().ip(),
            "127.0.0.1".parse::<IpAddr>().unwrap()
        );
        assert!(stream.nodelay().unwrap());
    }

    #[tokio::test]
    async fn a_name_that_does_not_resolve_is_a_connect_error() {
        let destination = Destination::new("sluice-test.invalid", 80);
        let error = destination.connect(Duration::from_secs(5)).await;
        assert!(
            matches!(
                error,
                Err(ForwardError::Connect) | Err(ForwardError::Timeout)
            ),
            "{error:?}"
        );
    }
}
