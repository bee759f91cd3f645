//! Who is calling: the client IP behind `trusted_proxies`, and its key text.
//!
//! This module owns docs/configuration.md's "Client IP" and hostile-input rows C4–C7. The client IP is
//! the TCP peer unless the peer is a trusted proxy; then the forwarding header
//! (`X-Forwarded-For` or RFC 7239 `Forwarded`) is walked right to left and the
//! first address that is not itself trusted is the client. Every address it can
//! return was either the peer or written by a trusted hop, so a client can never
//! choose its own IP by sending a header.
//!
//! It must not fail, panic or allocate on any header content, and its cost is
//! bounded: at most [`MAX_HOPS`] addresses are parsed, however long the list.
//! It does not modify headers; appending the peer when forwarding is the
//! proxy's job.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::header::{HeaderMap, FORWARDED};
use ipnet::IpNet;

/// Which header carries the forwarding chain (`server.forwarded_header`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardedHeader {
    XForwardedFor,
    /// RFC 7239 `Forwarded`.
    Forwarded,
}

/// How many list entries (right to left) are examined at most. Real proxy
/// chains are a handful of hops; the bound keeps a 5,000-entry header as cheap
/// as a short one.
pub const MAX_HOPS: usize = 32;

/// Longest node text worth handing to the address parser:
/// `[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535` is 53 bytes, so
/// anything longer is malformed without parsing it.
const MAX_NODE_LEN: usize = 64;

const X_FORWARDED_FOR: &str = "x-forwarded-for";

/// Resolves the client IP of a request from its TCP peer and headers.
#[derive(Debug, Clone)]
pub struct ClientIpResolver {
    trusted: Vec<IpNet>,
    header: ForwardedHeader,
}

impl ClientIpResolver {
    /// `trusted` are the `server.trusted_proxies` CIDRs; `header` is
    /// `server.forwarded_header`.
    pub fn new(trusted: Vec<IpNet>, header: ForwardedHeader) -> Self {
        ClientIpResolver { trusted, header }
    }

    /// Which header carries the forwarding chain.
    pub fn header(&self) -> ForwardedHeader {
        self.header
    }

    /// Whether `ip` (canonicalised first) is inside `trusted_proxies`.
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// The client IP for a request from `peer` (the TCP peer address). Never
    /// fails, never panics; the result is always canonical (IPv4-mapped IPv6
    /// becomes IPv4).
    ///
    /// - peer not trusted (always so with no `trusted_proxies`): the peer, and
    ///   the header is not even looked at;
    /// - header absent: the peer;
    /// - otherwise the rightmost listed address that is not trusted;
    /// - a malformed entry (`unknown`, an obfuscated `Forwarded` node, garbage)
    ///   ends the walk: the result is the last trusted hop reached, the one that
    ///   vouched for the entry (the peer if the rightmost entry is malformed);
    /// - every listed address trusted: the leftmost, and likewise when
    ///   [`MAX_HOPS`] trusted addresses have been examined: the leftmost of
    ///   those, a trusted proxy vouched for by the hops to its right.
    pub fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = canonical(peer);
        if self.trusted.is_empty() || !self.is_trusted(peer) {
            return peer;
        }
        match self.header {
            ForwardedHeader::XForwardedFor => {
                let lines = headers.get_all(X_FORWARDED_FOR).iter().rev();
                self.walk(peer, lines.flat_map(|v| Elements::new(v.as_bytes())), |e| {
                    parse_node(e, false)
                })
            }
            ForwardedHeader::Forwarded => {
                let lines = headers.get_all(FORWARDED).iter().rev();
                self.walk(peer, lines.flat_map(|v| Elements::new(v.as_bytes())), |e| {
                    forwarded_for(e).and_then(|node| parse_node(node, true))
                })
            }
        }
    }

    /// Walks list elements given right to left. Empty elements are skipped, as
    /// RFC 9110 §5.6.1 asks of list recipients, and do not count against
    /// [`MAX_HOPS`]; they cost only a scan of
    /// bytes the server has already bounded (`max_header_bytes`).
    fn walk<'a>(
        &self,
        peer: IpAddr,
        elements: impl Iterator<Item = &'a [u8]>,
        parse: impl Fn(&[u8]) -> Option<IpAddr>,
    ) -> IpAddr {
        let mut vouched = peer;
        let entries = elements.map(trim_ows).filter(|e| !e.is_empty());
        for entry in entries.take(MAX_HOPS) {
            let Some(ip) = parse(entry) else {
                return vouched;
            };
            let ip = canonical(ip);
            if !self.is_trusted(ip) {
                return ip;
            }
            vouched = ip;
        }
        vouched
    }
}

/// The longest IPv4 address as text: `255.255.255.255`.
pub const IPV4_TEXT_MAX: usize = 15;

/// `ip` as dotted decimal (what `to_string` gives), written digit by digit
/// into `buf`: `fmt` costs several times as much, and the request path
/// writes the client's address for every forwarded request.
pub fn ipv4_text(ip: std::net::Ipv4Addr, buf: &mut [u8; IPV4_TEXT_MAX]) -> &str {
    // Only ASCII digits and dots are written.
    std::str::from_utf8(ipv4_bytes(ip, buf)).unwrap_or("0.0.0.0")
}

/// [`ipv4_text`] as bytes, for a writer of bytes: without the UTF-8 check,
/// a call that the access log's line and a span's address would pay for
/// at every request (docs/benchmarks-history.md, "At the edge, measured
/// again").
pub fn ipv4_bytes(ip: std::net::Ipv4Addr, buf: &mut [u8; IPV4_TEXT_MAX]) -> &[u8] {
    let mut len = 0;
    for (index, octet) in ip.octets().into_iter().enumerate() {
        if index > 0 {
            buf[len] = b'.';
            len += 1;
        }
        if octet >= 100 {
            buf[len] = b'0' + octet / 100;
            len += 1;
        }
        if octet >= 10 {
            buf[len] = b'0' + octet / 10 % 10;
            len += 1;
        }
        buf[len] = b'0' + octet % 10;
        len += 1;
    }
    &buf[..len]
}

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) → IPv4, so a dual-stack listener and an
/// IPv4 listener key the same client the same way. Everything else unchanged.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Writes the key text for `ip` into `out` without allocating: IPv4 as dotted
/// text; IPv6 as its network of `ipv6_prefix` bits, e.g. `2001:db8:1:2::/64`,
/// so that rotating addresses inside one /64 stays one bucket (hostile-input row C7 in docs/edge-behaviour.md).
/// A prefix of 128 or more writes the plain address. `ip` is canonicalised
/// first. A failing writer leaves `out` partially written; `String` never fails.
pub fn write_key(ip: IpAddr, ipv6_prefix: u8, out: &mut impl fmt::Write) {
    // The only possible error comes from the caller's writer, which for the
    // `String`/stack buffers used on the request path cannot fail.
    let _ = match canonical(ip) {
        IpAddr::V4(v4) => out.write_str(ipv4_text(v4, &mut [0; IPV4_TEXT_MAX])),
        IpAddr::V6(v6) if ipv6_prefix >= 128 => write!(out, "{v6}"),
        IpAddr::V6(v6) => {
            // `checked_shl` because a shift by 128 (prefix 0) overflows.
            let mask = u128::MAX
                .checked_shl(128 - u32::from(ipv6_prefix))
                .unwrap_or(0);
            let net = Ipv6Addr::from(u128::from(v6) & mask);
            write!(out, "{net}/{ipv6_prefix}")
        }
    };
}

/// OWS around list elements and parameters: spaces and tabs.
fn trim_ows(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !matches!(c, b' ' | b'\t'));
    let end = b.iter().rposition(|c| !matches!(c, b' ' | b'\t'));
    match (start, end) {
        (Some(s), Some(e)) => &b[s..=e],
        _ => &[],
    }
}

/// Comma-separated elements of one header line, yielded right to left.
///
/// A comma inside a quoted string does not separate (RFC 7239 values may be
/// quoted). Scanning from the right means the elements our trusted hops
/// appended are read first and cannot be swallowed by an unbalanced quote a
/// client left further to the left.
struct Elements<'a> {
    rest: Option<&'a [u8]>,
}

impl<'a> Elements<'a> {
    fn new(line: &'a [u8]) -> Self {
        Elements { rest: Some(line) }
    }
}

impl<'a> Iterator for Elements<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let line = self.rest?;
        let mut quoted = false;
        for i in (0..line.len()).rev() {
            match line[i] {
                // An escaped quote (odd run of backslashes before it) does not
                // toggle. Only quoted strings contain escapes, and those runs
                // are scanned at most twice, so the scan stays linear.
                b'"' if !is_escaped(line, i) => quoted = !quoted,
                b',' if !quoted => {
                    self.rest = Some(&line[..i]);
                    return Some(&line[i + 1..]);
                }
                _ => {}
            }
        }
        self.rest = None;
        Some(line)
    }
}

fn is_escaped(line: &[u8], i: usize) -> bool {
    let backslashes = line[..i].iter().rev().take_while(|&&c| c == b'\\').count();
    backslashes % 2 == 1
}

/// The value of the `for` parameter of one `Forwarded` element, unquoted.
/// `None` when absent, repeated (RFC 7239 §4 allows each parameter once), or
/// not something an address can be (a quoted string with escapes).
fn forwarded_for(element: &[u8]) -> Option<&[u8]> {
    let mut found = None;
    let mut rest = element;
    while !rest.is_empty() {
        // Split off one `name=value` pair, honouring quotes so `;` inside a
        // quoted value does not end it.
        let mut quoted = false;
        let mut end = rest.len();
        for (i, &c) in rest.iter().enumerate() {
            match c {
                b'"' if !is_escaped(rest, i) => quoted = !quoted,
                b';' if !quoted => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        let pair = trim_ows(&rest[..end]);
        rest = rest.get(end + 1..).unwrap_or_default();
        let Some(eq) = pair.iter().position(|&c| c == b'=') else {
            // A pair without `=` is malformed; if it is the element's only
            // content the element has no `for` anyway.
            return None;
        };
        if !trim_ows(&pair[..eq]).eq_ignore_ascii_case(b"for") {
            continue;
        }
        if found.is_some() {
            return None;
        }
        let value = trim_ows(&pair[eq + 1..]);
        found = Some(match value {
            [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') && !inner.contains(&b'"') => inner,
            [b'"', ..] => return None,
            bare => bare,
        });
    }
    found
}

/// Parses a node: `1.2.3.4`, `1.2.3.4:80`, `[2001:db8::1]`, `[2001:db8::1]:80`,
/// or a bare IPv6 address (common in `X-Forwarded-For`). `unknown`, obfuscated
/// identifiers (`_hidden`) and anything else give `None`. With
/// `obfuscated_port`, an RFC 7239 obfuscated port (`:_abc`) is accepted.
fn parse_node(node: &[u8], obfuscated_port: bool) -> Option<IpAddr> {
    if node.len() > MAX_NODE_LEN {
        return None;
    }
    let text = std::str::from_utf8(node).ok()?;
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(bracketed) = text.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']')?;
        let port = if after.is_empty() {
            None
        } else {
            Some(after.strip_prefix(':')?)
        };
        if !valid_port(port, obfuscated_port) {
            return None;
        }
        return host.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    let (host, port) = text.split_once(':')?;
    if !valid_port(Some(port), obfuscated_port) {
        return None;
    }
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

fn valid_port(port: Option<&str>, obfuscated_ok: bool) -> bool {
    match port {
        None => true,
        Some(p) if obfuscated_ok && p.starts_with('_') => {
            p.len() > 1
                && p.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        }
        Some(p) => !p.is_empty() && p.len() <= 5 && p.parse::<u16>().is_ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::XorShift;
    use http::HeaderValue;

    const LB: &str = "127.0.0.1";

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn resolver(trusted: &[&str], header: ForwardedHeader) -> ClientIpResolver {
        ClientIpResolver::new(trusted.iter().map(|n| n.parse().unwrap()).collect(), header)
    }

    fn headers(name: &str, lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(l).unwrap(),
            );
        }
        h
    }

    fn xff(trusted: &[&str], peer: &str, lines: &[&str]) -> IpAddr {
        resolver(trusted, ForwardedHeader::XForwardedFor)
            .resolve(ip(peer), &headers("x-forwarded-for", lines))
    }

    fn fwd(trusted: &[&str], peer: &str, lines: &[&str]) -> IpAddr {
        resolver(trusted, ForwardedHeader::Forwarded)
            .resolve(ip(peer), &headers("forwarded", lines))
    }

    const TRUSTED: &[&str] = &["127.0.0.0/8", "10.0.0.0/8", "::1/128"];

    // C4
    #[test]
    fn spoofed_xff_from_an_untrusted_peer_is_ignored() {
        assert_eq!(
            xff(&[], "203.0.113.9", &["198.51.100.7"]),
            ip("203.0.113.9")
        );
        assert_eq!(
            xff(TRUSTED, "203.0.113.9", &["198.51.100.7"]),
            ip("203.0.113.9")
        );
        assert_eq!(
            fwd(TRUSTED, "203.0.113.9", &["for=198.51.100.7"]),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn header_absent_gives_the_peer() {
        assert_eq!(xff(TRUSTED, LB, &[]), ip(LB));
        assert_eq!(fwd(TRUSTED, LB, &[]), ip(LB));
    }

    // C5
    #[test]
    fn forged_leftmost_entry_is_not_the_client() {
        assert_eq!(
            xff(TRUSTED, LB, &["6.6.6.6, 198.51.100.7"]),
            ip("198.51.100.7")
        );
        assert_eq!(
            xff(TRUSTED, LB, &["forged, 198.51.100.7"]),
            ip("198.51.100.7")
        );
        assert_eq!(
            xff(TRUSTED, LB, &["6.6.6.6, 198.51.100.7, 10.0.0.2"]),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn lines_split_across_three_headers_form_one_list() {
        let lines = ["6.6.6.6", "198.51.100.7", "10.0.0.2, 10.0.0.3"];
        assert_eq!(xff(TRUSTED, LB, &lines), ip("198.51.100.7"));
        let lines = ["198.51.100.7, 10.0.0.1", "10.0.0.2", "10.0.0.3"];
        assert_eq!(xff(TRUSTED, LB, &lines), ip("198.51.100.7"));
    }

    #[test]
    fn unknown_ends_the_walk_at_the_hop_that_vouched_for_it() {
        assert_eq!(xff(TRUSTED, LB, &["unknown"]), ip(LB));
        assert_eq!(
            xff(TRUSTED, LB, &["198.51.100.7, unknown, 10.0.0.2"]),
            ip("10.0.0.2")
        );
        assert_eq!(xff(TRUSTED, LB, &["1.2.3.4, garbage"]), ip(LB));
        assert_eq!(xff(TRUSTED, LB, &["1.2.3.4:99999"]), ip(LB));
        assert_eq!(xff(TRUSTED, LB, &["fe80::1%eth0"]), ip(LB));
    }

    #[test]
    fn entries_may_carry_ports() {
        assert_eq!(xff(TRUSTED, LB, &["1.2.3.4:80"]), ip("1.2.3.4"));
        assert_eq!(xff(TRUSTED, LB, &["[2001:db8::1]:80"]), ip("2001:db8::1"));
        assert_eq!(xff(TRUSTED, LB, &["[2001:db8::1]"]), ip("2001:db8::1"));
        assert_eq!(xff(TRUSTED, LB, &["2001:db8::1"]), ip("2001:db8::1"));
        // `[::1]:80` is a trusted hop, so the walk goes on past it.
        assert_eq!(xff(TRUSTED, LB, &["1.2.3.4, [::1]:80"]), ip("1.2.3.4"));
        assert_eq!(xff(TRUSTED, LB, &["[::1]:80"]), ip("::1"));
    }

    #[test]
    fn whitespace_and_empty_elements_are_tolerated() {
        assert_eq!(
            xff(TRUSTED, LB, &[" 198.51.100.7 ,\t10.0.0.2 , "]),
            ip("198.51.100.7")
        );
        assert_eq!(xff(TRUSTED, LB, &["", " , "]), ip(LB));
    }

    #[test]
    fn every_listed_address_trusted_gives_the_leftmost() {
        assert_eq!(xff(TRUSTED, LB, &["10.0.0.1, 10.0.0.2"]), ip("10.0.0.1"));
    }

    // C6: a list shorter than the trusted depth never yields an empty key.
    #[test]
    fn short_chain_behind_trusted_hops_still_gives_an_address() {
        assert_eq!(xff(TRUSTED, LB, &["10.0.0.9"]), ip("10.0.0.9"));
    }

    #[test]
    fn five_thousand_entries_cost_at_most_the_hop_bound() {
        let forged: Vec<String> = (0..5_000)
            .map(|i| format!("10.0.{}.{}", i / 256 % 256, i % 256))
            .collect();
        let long = forged.join(", ");
        // A genuine client appended last is found at once.
        let line = format!("{long}, 198.51.100.7");
        assert_eq!(xff(TRUSTED, LB, &[&line]), ip("198.51.100.7"));
        // All trusted: after MAX_HOPS the leftmost examined trusted hop, never
        // the attacker-chosen leftmost of the whole list.
        let line = format!("6.6.6.6, {long}");
        let got = xff(TRUSTED, LB, &[&line]);
        assert_ne!(got, ip("6.6.6.6"));
        assert_eq!(got, ip(&forged[5_000 - MAX_HOPS]));
        // Also when split over many lines.
        let lines: Vec<&str> = forged.iter().map(String::as_str).collect();
        assert_eq!(xff(TRUSTED, LB, &lines), ip(&forged[5_000 - MAX_HOPS]));
    }

    #[test]
    fn ipv4_mapped_addresses_are_canonicalised_everywhere() {
        assert_eq!(canonical(ip("::ffff:1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical(ip("::1")), ip("::1"));
        // Mapped peer matches an IPv4 CIDR; mapped entries come back as IPv4.
        assert_eq!(
            xff(TRUSTED, "::ffff:127.0.0.1", &["::ffff:198.51.100.7"]),
            ip("198.51.100.7")
        );
        assert_eq!(
            xff(&[], "::ffff:203.0.113.9", &["1.1.1.1"]),
            ip("203.0.113.9")
        );
        assert_eq!(
            xff(TRUSTED, LB, &["1.2.3.4, ::ffff:10.0.0.1"]),
            ip("1.2.3.4")
        );
    }

    #[test]
    fn forwarded_takes_the_for_parameter() {
        assert_eq!(
            fwd(TRUSTED, LB, &["for=198.51.100.7;proto=https;by=10.0.0.1"]),
            ip("198.51.100.7")
        );
        assert_eq!(
            fwd(TRUSTED, LB, &["For=\"[2001:db8::1]:4711\""]),
            ip("2001:db8::1")
        );
        assert_eq!(
            fwd(TRUSTED, LB, &["for=192.0.2.43, for=198.51.100.17"]),
            ip("198.51.100.17")
        );
        assert_eq!(
            fwd(
                TRUSTED,
                LB,
                &["for=6.6.6.6", "for=198.51.100.17", "for=10.0.0.1"]
            ),
            ip("198.51.100.17")
        );
        assert_eq!(
            fwd(TRUSTED, LB, &["proto=http; for=\"192.0.2.60:8080\" ; by=x"]),
            ip("192.0.2.60")
        );
        assert_eq!(fwd(TRUSTED, LB, &["for=\"[::1]:_obf\""]), ip("::1"));
    }

    #[test]
    fn forwarded_obfuscated_unknown_and_missing_for_are_malformed() {
        for line in [
            "for=_hidden",
            "for=unknown",
            "for=\"_hidden\"",
            "proto=https",
            "for=1.2.3.4;for=5.6.7.8",
            "for=\"1.2.3.4",
            "for=\"1.2\\.3.4\"",
            "garbage",
        ] {
            assert_eq!(fwd(TRUSTED, LB, &[line]), ip(LB), "{line}");
        }
        assert_eq!(
            fwd(TRUSTED, LB, &["for=1.2.3.4, for=_hidden, for=10.0.0.5"]),
            ip("10.0.0.5")
        );
    }

    #[test]
    fn forwarded_quoted_commas_do_not_split_and_unbalanced_quotes_do_not_swallow() {
        // A quoted comma stays inside its element (which is then malformed).
        assert_eq!(
            fwd(
                TRUSTED,
                LB,
                &["for=198.51.100.7, for=\"1.1.1.1, for=10.0.0.1\""]
            ),
            ip(LB)
        );
        // A client's unbalanced quote cannot hide the element our hop appended.
        assert_eq!(
            fwd(TRUSTED, LB, &["for=\"6.6.6.6, for=198.51.100.7"]),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn forwarded_is_not_read_when_configured_for_xff_and_vice_versa() {
        let r = resolver(TRUSTED, ForwardedHeader::XForwardedFor);
        assert_eq!(
            r.resolve(ip(LB), &headers("forwarded", &["for=1.2.3.4"])),
            ip(LB)
        );
        let r = resolver(TRUSTED, ForwardedHeader::Forwarded);
        assert_eq!(
            r.resolve(ip(LB), &headers("x-forwarded-for", &["1.2.3.4"])),
            ip(LB)
        );
    }

    #[test]
    fn non_utf8_header_bytes_are_malformed_not_fatal() {
        let mut h = HeaderMap::new();
        h.append(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"1.2.3.4, \xff\xfe").unwrap(),
        );
        let r = resolver(TRUSTED, ForwardedHeader::XForwardedFor);
        assert_eq!(r.resolve(ip(LB), &h), ip(LB));
    }

    fn key(ip_text: &str, prefix: u8) -> String {
        let mut s = String::new();
        write_key(ip(ip_text), prefix, &mut s);
        s
    }

    // C7
    #[test]
    fn key_text_groups_ipv6_by_prefix() {
        assert_eq!(key("192.0.2.1", 64), "192.0.2.1");
        assert_eq!(key("::ffff:192.0.2.1", 64), "192.0.2.1");
        assert_eq!(
            key("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64),
            "2001:db8:1:2::/64"
        );
        assert_eq!(key("2001:db8:1:2::ffff", 64), "2001:db8:1:2::/64");
        assert_eq!(key("2001:db8:1:2::1", 128), "2001:db8:1:2::1");
        assert_eq!(key("2001:db8:1:2::1", 200), "2001:db8:1:2::1");
        assert_eq!(key("2001:db8:1:2::1", 48), "2001:db8:1::/48");
        assert_eq!(key("2001:db8:1:2::1", 0), "::/0");
        assert_eq!(key("2001:db8:1:2::1", 1), "::/1");
        assert_eq!(key("ffff::1", 1), "8000::/1");
    }

    #[test]
    fn parse_node_forms() {
        assert_eq!(parse_node(b"1.2.3.4", false), Some(ip("1.2.3.4")));
        assert_eq!(parse_node(b"1.2.3.4:0", false), Some(ip("1.2.3.4")));
        assert_eq!(parse_node(b"1.2.3.4:", false), None);
        assert_eq!(parse_node(b"1.2.3.4:_x", false), None);
        assert_eq!(parse_node(b"1.2.3.4:_x", true), Some(ip("1.2.3.4")));
        assert_eq!(parse_node(b"[1.2.3.4]", false), None);
        assert_eq!(parse_node(b"[::1]x", false), None);
        assert_eq!(parse_node(b"[::1", false), None);
        assert_eq!(parse_node(b"unknown", false), None);
        assert_eq!(parse_node(b"", false), None);
        assert_eq!(parse_node(&[b'1'; 100], false), None);
    }

    #[test]
    fn header_parsers_never_panic_and_never_invent_addresses() {
        const ALPHABET: [&[u8]; 24] = [
            b"1",
            b"0",
            b".",
            b":",
            b",",
            b" ",
            b"\t",
            b"[",
            b"]",
            b"\"",
            b"\\",
            b";",
            b"=",
            b"for",
            b"_",
            b"unknown",
            b"10.0.0.1",
            b"127.0.0.1",
            b"::1",
            b"198.51.100.7",
            b"::ffff:",
            b"\xff",
            b"f",
            b"a",
        ];
        let xff_r = resolver(TRUSTED, ForwardedHeader::XForwardedFor);
        let fwd_r = resolver(TRUSTED, ForwardedHeader::Forwarded);
        let mut rng = XorShift(0xDEAD_BEEF_CAFE_F00D);
        let mut buf = Vec::new();
        for _ in 0..30_000 {
            let mut h = HeaderMap::new();
            let mut seen_text = Vec::new();
            for _ in 0..(rng.next() % 3) {
                buf.clear();
                for _ in 0..(rng.next() % 12) {
                    buf.extend_from_slice(ALPHABET[(rng.next() % ALPHABET.len() as u64) as usize]);
                }
                let Ok(v) = HeaderValue::from_bytes(&buf) else {
                    continue;
                };
                seen_text.extend_from_slice(&buf);
                h.append("x-forwarded-for", v.clone());
                h.append("forwarded", v);
            }
            // Also the element/pair scanners directly, on raw bytes.
            let _ = Elements::new(&buf).count();
            let _ = forwarded_for(&buf);
            for peer in [ip(LB), ip("203.0.113.9"), ip("::1")] {
                for got in [xff_r.resolve(peer, &h), fwd_r.resolve(peer, &h)] {
                    if !xff_r.is_trusted(peer) {
                        assert_eq!(got, peer);
                    }
                    // Anything other than the peer came out of a header
                    // that a trusted peer sent.
                    if got != peer {
                        assert!(xff_r.is_trusted(peer) && !seen_text.is_empty());
                    }
                }
            }
        }
    }
}
