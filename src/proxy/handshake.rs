//! What the proxy says of a client connection before its first request
//! (docs/edge.md, "HTTP/3"): whether the address a QUIC handshake comes
//! from is refused there, and what the answers over TCP announce.
//!
//! Refused at the handshake: an address `[access] deny` lists, or one
//! banned on a rule keyed on `ip` alone that every request from it fits
//! (its `match` names no field but `client`). Such an address would be
//! refused on every request; refusing the connection spares the handshake.
//! Nothing is charged or counted here: a ban is read, never struck. A peer
//! among `trusted_proxies` is not judged: its requests name their clients.

use std::net::{IpAddr, SocketAddr};

use http::HeaderValue;

use super::Proxy;
use crate::key::client_ip::canonical;
use crate::key::KeySource;

impl Proxy {
    /// Whether a connection from `ip` is refused before its handshake.
    pub fn refuses_at_handshake(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        let snapshot = self.shared.current.load();
        let policy = &*snapshot.policy;
        if policy.client_ip.is_trusted(ip) {
            return false;
        }
        if policy.deny.iter().any(|net| net.contains(&ip)) {
            return true;
        }
        if policy.allow.iter().any(|net| net.contains(&ip)) {
            return false;
        }
        let now = self.now();
        policy.rules.iter().any(|rule| {
            !rule.shadow
                && rule.bans.any(now)
                && matches!(rule.key[..], [KeySource::Ip])
                && rule.matcher.fits_every_request_from(ip)
                && rule.bans.banned(policy.keys.derive_ip(ip), now).is_some()
        })
    }

    /// Announces HTTP/3 on `listener`'s port in the answers over TCP from
    /// now on (`Alt-Svc: h3=":PORT"; ma=86400`).
    pub fn announce_http3(&self, listener: SocketAddr) {
        let value = format!("h3=\":{}\"; ma=86400", listener.port());
        // Static, once per server: each answer's copy of it is then a copy
        // of a pointer, not a reference count moved up and down.
        let value: &'static str = Box::leak(value.into_boxed_str());
        let _ = self.shared.alt_svc.set(HeaderValue::from_static(value));
    }
}
