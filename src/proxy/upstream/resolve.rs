//! Host names in a pool's server URLs (docs/upstreams.md, "Pools and servers"): a
//! name stands for every address it resolves to, looked up again every
//! `resolve_every` off the request path, never per request. An answer
//! with no address, or a failed lookup, keeps the last good addresses, so a
//! DNS outage never empties a pool that had servers.
//!
//! Lookups go through [`Resolve`], so tests give the answers.

use std::fmt::Debug;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::time::Duration;

/// A lookup's answer.
pub type Answer = std::io::Result<Vec<SocketAddr>>;

/// Looks up host names.
pub trait Resolve: Debug + Send + Sync + 'static {
    /// Every address of `host` (a name, never an IP address), with `port`.
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = Answer> + Send + 'a>>;

    /// The same lookup from a thread that may block, within `timeout`
    /// (`None` when it took longer): for the first addresses of a pool when
    /// it is built, before any request needs them.
    fn lookup_blocking(&self, host: &str, port: u16, timeout: Duration) -> Option<Answer>;
}

/// The system's resolver (glibc's `getaddrinfo`, run on tokio's blocking
/// pool, so the runtime never waits for it).
#[derive(Debug, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = Answer> + Send + 'a>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }

    fn lookup_blocking(&self, host: &str, port: u16, timeout: Duration) -> Option<Answer> {
        let (sender, receiver) = std::sync::mpsc::channel();
        let host = host.to_owned();
        // A thread of its own, so a resolver that hangs delays the start
        // by `timeout` at most; it ends with the lookup.
        std::thread::Builder::new()
            .name("sluice-resolve".to_owned())
            .spawn(move || {
                use std::net::ToSocketAddrs;
                let answer = (host.as_str(), port)
                    .to_socket_addrs()
                    .map(|found| found.collect());
                let _ = sender.send(answer);
            })
            .ok()?;
        receiver.recv_timeout(timeout).ok()
    }
}

/// The addresses a server URL's `host` (as a URL writes it: an IPv6
/// address in brackets) stands for when it is an IP address; `None` for a
/// name, which must be looked up.
pub fn literal(host: &str, port: u16) -> Option<SocketAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse::<IpAddr>()
        .ok()
        .map(|ip| SocketAddr::new(ip, port))
}

/// The addresses to use after a lookup that answered `answer`, when the
/// last good ones were `last_good`: the answer's, sorted and without
/// repeats, unless it failed or had none.
pub fn after_lookup(last_good: &[SocketAddr], answer: Answer) -> Vec<SocketAddr> {
    match answer {
        Ok(mut found) if !found.is_empty() => {
            found.sort();
            found.dedup();
            found
        }
        _ => last_good.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addresses(list: &[&str]) -> Vec<SocketAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn a_failed_or_empty_answer_keeps_the_last_good_addresses() {
        let good = addresses(&["10.0.0.1:80", "10.0.0.2:80"]);
        let failed = std::io::Error::other("SERVFAIL");
        assert_eq!(after_lookup(&good, Err(failed)), good);
        assert_eq!(after_lookup(&good, Ok(Vec::new())), good);
        let answer = addresses(&["10.0.0.3:80", "10.0.0.1:80", "10.0.0.3:80"]);
        assert_eq!(
            after_lookup(&good, Ok(answer)),
            addresses(&["10.0.0.1:80", "10.0.0.3:80"])
        );
        // Never resolved yet: nothing to keep.
        assert!(after_lookup(&[], Err(std::io::Error::other("NXDOMAIN"))).is_empty());
    }

    #[test]
    fn ip_addresses_need_no_lookup() {
        assert_eq!(
            literal("127.0.0.1", 80),
            Some("127.0.0.1:80".parse().unwrap())
        );
        assert_eq!(literal("[::1]", 443), Some("[::1]:443".parse().unwrap()));
        assert_eq!(literal("api.internal", 80), None);
    }

    #[test]
    fn the_system_resolver_finds_localhost_and_not_an_invalid_name() {
        let resolver = SystemResolver;
        let found = resolver
            .lookup_blocking("localhost", 8080, Duration::from_secs(5))
            .expect("in time")
            .expect("localhost resolves");
        assert!(found
            .iter()
            .all(|a| a.ip().is_loopback() && a.port() == 8080));
        let missing = resolver.lookup_blocking("sluice-test.invalid", 80, Duration::from_secs(10));
        assert!(!matches!(missing, Some(Ok(found)) if !found.is_empty()));
    }
}
