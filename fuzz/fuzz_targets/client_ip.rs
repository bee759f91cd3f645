//! Arbitrary `X-Forwarded-For` / `Forwarded` lines from a peer, with a
//! trusted set: `ClientIpResolver::resolve` never panics, and it never makes
//! an address up. The result is the peer, or an address written literally
//! in the header text (compared after canonicalising, so `::ffff:1.2.3.4`
//! in the header may come back as `1.2.3.4`); an untrusted peer always gets
//! itself; the result is canonical. `write_key` never panics on it.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use arbitrary::Arbitrary;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use ipnet::IpNet;
use libfuzzer_sys::fuzz_target;
use sluice::config::ForwardedHeader;
use sluice::key::client_ip::{write_key, ClientIpResolver};

/// Addresses that make trusted chains likely; the fuzzer also gets any
/// address at all through [`Addr::Any`].
const PALETTE: [IpAddr; 8] = [
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9)),
    IpAddr::V6(Ipv6Addr::LOCALHOST),
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
    // IPv4-mapped 10.0.0.2: trusted through its canonical form.
    IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x0002)),
    IpAddr::V6(Ipv6Addr::UNSPECIFIED),
];

#[derive(Debug, Arbitrary)]
enum Addr {
    Palette(u8),
    Any(IpAddr),
}

impl Addr {
    fn ip(&self) -> IpAddr {
        match self {
            Addr::Palette(i) => PALETTE[usize::from(*i) % PALETTE.len()],
            Addr::Any(ip) => *ip,
        }
    }
}

#[derive(Arbitrary)]
struct Input<'a> {
    forwarded: bool,
    peer: Addr,
    /// Trust the peer's own /32 or /128 too, so the header is walked.
    trust_peer: bool,
    trusted: Vec<(Addr, u8)>,
    ipv6_prefix: u8,
    /// Header lines separated by `\n`; lines a `HeaderValue` cannot hold are
    /// dropped (hyper would have refused the request).
    text: &'a [u8],
}

/// Shows `text` as text, not as a column of byte values.
impl std::fmt::Debug for Input<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Input")
            .field("forwarded", &self.forwarded)
            .field("peer", &self.peer)
            .field("trust_peer", &self.trust_peer)
            .field("trusted", &self.trusted)
            .field("ipv6_prefix", &self.ipv6_prefix)
            .field("text", &String::from_utf8_lossy(self.text))
            .finish()
    }
}

fuzz_target!(|input: Input<'_>| {
    let peer = input.peer.ip();
    let mut trusted: Vec<IpNet> = input
        .trusted
        .iter()
        .take(8)
        .map(|(addr, prefix)| {
            let ip = addr.ip();
            let max = if ip.is_ipv4() { 32 } else { 128 };
            IpNet::new(ip, prefix % (max + 1)).unwrap()
        })
        .collect();
    if input.trust_peer {
        trusted.push(IpNet::from(peer));
    }
    let (header, name) = if input.forwarded {
        (
            ForwardedHeader::Forwarded,
            HeaderName::from_static("forwarded"),
        )
    } else {
        (
            ForwardedHeader::XForwardedFor,
            HeaderName::from_static("x-forwarded-for"),
        )
    };
    let mut headers = HeaderMap::new();
    for line in input.text.split(|&b| b == b'\n') {
        if let Ok(value) = HeaderValue::from_bytes(line) {
            headers.append(name.clone(), value);
        }
    }
    let resolver = ClientIpResolver::new(trusted, header);
    let client = resolver.resolve(peer, &headers);

    assert_eq!(client, canonical(client), "not canonical: {client}");
    if !resolver.is_trusted(peer) {
        assert_eq!(
            client,
            canonical(peer),
            "untrusted peer {peer} became {client}"
        );
    }
    if client != canonical(peer) {
        let text: Vec<u8> = headers
            .get_all(&name)
            .iter()
            .flat_map(|v| v.as_bytes().iter().copied().chain([b'\n']))
            .collect();
        assert!(
            appears_literally(&text, client),
            "{client} is neither the peer {peer} nor written in {:?}",
            String::from_utf8_lossy(&text)
        );
    }
    let mut key = String::new();
    write_key(client, input.ipv6_prefix, &mut key);
});

/// IPv4-mapped IPv6 as IPv4, written out here rather than borrowed from
/// the module under test so that a bug there cannot hide itself.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.octets() {
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d] => IpAddr::from([a, b, c, d]),
            _ => ip,
        },
        v4 => v4,
    }
}

/// Longest text of an address: `ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255`.
const MAX_ADDR_TEXT: usize = 45;

/// Whether some run of address characters in `text` parses to `ip` (after
/// canonicalising both).
fn appears_literally(text: &[u8], ip: IpAddr) -> bool {
    let is_addr_char = |c: u8| c.is_ascii_hexdigit() || c == b'.' || c == b':';
    (0..text.len()).any(|start| {
        text[start..]
            .iter()
            .take(MAX_ADDR_TEXT)
            .take_while(|&&c| is_addr_char(c))
            .enumerate()
            .any(|(i, _)| {
                let candidate = std::str::from_utf8(&text[start..=start + i]).unwrap();
                candidate
                    .parse::<IpAddr>()
                    .is_ok_and(|found| canonical(found) == ip)
            })
    })
}
