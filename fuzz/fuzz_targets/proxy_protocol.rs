//! The PROXY protocol header parser (`sluice::server::proxy_protocol::parse`),
//! which reads the first bytes of every connection when `proxy_protocol` is
//! on. On any bytes it never panics, and what it says is consistent: a
//! complete header lies within the input and within `MAX_LEN`, is the same
//! header when read alone, and every shorter prefix of it is incomplete (so
//! a header arriving in pieces is waited for, never refused halfway); an
//! incomplete input is shorter than `MAX_LEN`. A header built here from
//! arbitrary addresses, the way a balancer writes one, is read back with
//! the source it carries, whatever follows it.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use sluice::server::proxy_protocol::{parse, Parsed, MAX_LEN, V1_MAX_LEN};

/// Written out here rather than borrowed from the module under test.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

#[derive(Debug, Arbitrary)]
enum Input<'a> {
    /// Any bytes, after a start that reaches past the first byte's check.
    Raw { start: Start, bytes: &'a [u8] },
    /// A header the protocol allows, then any bytes.
    Built { header: Header<'a>, rest: &'a [u8] },
}

#[derive(Debug, Arbitrary)]
enum Start {
    Nothing,
    V1,
    V2,
}

#[derive(Debug, Arbitrary)]
enum Header<'a> {
    V1Tcp4(Ipv4Addr, Ipv4Addr, u16, u16),
    V1Tcp6(Ipv6Addr, Ipv6Addr, u16, u16),
    /// Printable bytes after `UNKNOWN `, cut to fit in 107 bytes.
    V1Unknown(&'a [u8]),
    V2Inet([u8; 4], [u8; 4], u16, u16, &'a [u8]),
    V2Inet6([u8; 16], [u8; 16], u16, u16, &'a [u8]),
    /// A LOCAL header with any family byte and block.
    V2Local(u8, &'a [u8]),
}

impl Header<'_> {
    /// The header's bytes and the source it carries.
    fn build(&self) -> (Vec<u8>, Option<SocketAddr>) {
        match *self {
            Header::V1Tcp4(source, destination, sport, dport) => (
                format!("PROXY TCP4 {source} {destination} {sport} {dport}\r\n").into_bytes(),
                Some(SocketAddr::new(IpAddr::V4(source), sport)),
            ),
            Header::V1Tcp6(source, destination, sport, dport) => (
                format!("PROXY TCP6 {source} {destination} {sport} {dport}\r\n").into_bytes(),
                Some(SocketAddr::new(IpAddr::V6(source), sport)),
            ),
            Header::V1Unknown(rest) => {
                let mut line = b"PROXY UNKNOWN ".to_vec();
                line.extend(
                    rest.iter()
                        .copied()
                        .filter(|b| (0x20..0x7f).contains(b))
                        .take(V1_MAX_LEN - line.len() - 2),
                );
                line.extend(b"\r\n");
                (line, None)
            }
            Header::V2Inet(source, destination, sport, dport, tlvs) => {
                let mut block = [&source[..], &destination[..]].concat();
                block.extend(sport.to_be_bytes());
                block.extend(dport.to_be_bytes());
                block.extend(tlvs.iter().take(MAX_LEN - 16 - 12));
                (
                    v2(0x21, 0x11, &block),
                    Some(SocketAddr::new(IpAddr::from(source), sport)),
                )
            }
            Header::V2Inet6(source, destination, sport, dport, tlvs) => {
                let mut block = [&source[..], &destination[..]].concat();
                block.extend(sport.to_be_bytes());
                block.extend(dport.to_be_bytes());
                block.extend(tlvs.iter().take(MAX_LEN - 16 - 36));
                (
                    v2(0x21, 0x21, &block),
                    Some(SocketAddr::new(IpAddr::from(source), sport)),
                )
            }
            Header::V2Local(family, block) => (
                v2(0x20, family, &block[..block.len().min(MAX_LEN - 16)]),
                None,
            ),
        }
    }
}

fn v2(version_command: u8, family: u8, block: &[u8]) -> Vec<u8> {
    let mut header = V2_SIGNATURE.to_vec();
    header.extend([version_command, family]);
    header.extend(u16::try_from(block.len()).unwrap().to_be_bytes());
    header.extend(block);
    header
}

/// What `parse` says of `bytes` must hold together (see the module docs).
fn check(bytes: &[u8]) -> Parsed {
    let parsed = parse(bytes);
    match parsed {
        Parsed::Complete { len, .. } => {
            assert!(
                len <= bytes.len() && len <= MAX_LEN,
                "{len} of {}",
                bytes.len()
            );
            assert_eq!(
                parse(&bytes[..len]),
                parsed,
                "the header alone reads otherwise"
            );
            for end in 0..len {
                assert_eq!(
                    parse(&bytes[..end]),
                    Parsed::Incomplete,
                    "{end} bytes of a {len}-byte header"
                );
            }
        }
        Parsed::Incomplete => assert!(bytes.len() < MAX_LEN, "{} bytes incomplete", bytes.len()),
        Parsed::Invalid(why) => assert!(!why.is_empty()),
    }
    parsed
}

fuzz_target!(|input: Input<'_>| {
    match input {
        Input::Raw { start, bytes } => {
            let start: &[u8] = match start {
                Start::Nothing => b"",
                Start::V1 => b"PROXY ",
                Start::V2 => V2_SIGNATURE,
            };
            check(&[start, bytes].concat());
        }
        Input::Built { header, rest } => {
            let (header, source) = header.build();
            let bytes = [&header[..], rest].concat();
            assert_eq!(
                check(&bytes),
                Parsed::Complete {
                    len: header.len(),
                    source
                },
                "{:?}",
                String::from_utf8_lossy(&header)
            );
        }
    }
});
