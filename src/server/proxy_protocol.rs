//! The PROXY protocol (docs/edge.md, "Behind a load balancer: PROXY
//! protocol or X-Forwarded-For"): with `server.proxy_protocol`, every
//! connection opens with a header in which the L4 balancer in front names
//! the client it carries, version 1 (one text line) or 2 (binary).
//!
//! [`parse`] reads a header from bytes. [`accept`] reads it off a fresh
//! connection's raw `TcpStream` before anything else does (TLS, sluice's
//! HTTP/1 server or hyper's), as nginx does: it peeks until the header is
//! complete, then consumes exactly its length, so what follows reaches them
//! untouched and none of them sees a wrapper.
//!
//! A header is believed only from a peer in `trusted_proxies`; any other
//! peer, and a header that is missing, malformed, too long or late, closes
//! the connection before a request is read.

use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::key::client_ip::ClientIpResolver;

/// The longest version 1 line, CRLF included: the protocol's own bound
/// (`PROXY UNKNOWN` with two full IPv6 addresses and ports).
pub const V1_MAX_LEN: usize = 107;

/// The longest header accepted, of either version (nginx's bound). A
/// version 2 header may announce up to 64 KiB of TLVs after its addresses;
/// the balancers that send it add a few dozen bytes (AWS's VPC endpoint id,
/// Azure's link id) to a few hundred (HAProxy's TLS and authority TLVs), so
/// 4 KiB holds every real one while a broken sender cannot make sluice hold
/// more than that per connection while it reads.
pub const MAX_LEN: usize = 4096;

/// What opens every version 1 header.
const V1_PREFIX: &[u8] = b"PROXY ";
/// What opens every version 2 header: bytes no HTTP, TLS or v1 stream
/// starts with.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// Signature, version and command, family and transport, length.
const V2_FIXED_LEN: usize = 16;

/// Version 2 address families (the high nibble of byte 14; 0 is
/// UNSPEC).
const AF_INET: u8 = 1;
const AF_INET6: u8 = 2;
const AF_UNIX: u8 = 3;
/// Version 2 transport `STREAM` (the low nibble of byte 14; 0 and 2 are
/// UNSPEC and DGRAM).
const TRANSPORT_STREAM: u8 = 1;

/// What the bytes of a connection's start are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// Every byte so far fits a header that has not ended yet.
    Incomplete,
    /// A whole header, `len` bytes long. `source` is the client it
    /// carries; `None` leaves the peer as it is (a v2 `LOCAL` header, a
    /// v1 `UNKNOWN` one, or a v2 family without an IP address).
    Complete {
        len: usize,
        source: Option<SocketAddr>,
    },
    /// Not a header sluice accepts: why, for the debug log.
    Invalid(&'static str),
}

/// Reads the header at the start of `bytes` (what follows it is not looked
/// at). Never panics, whatever the bytes; looks at no more than
/// [`MAX_LEN`] of them.
pub fn parse(bytes: &[u8]) -> Parsed {
    match bytes.first() {
        None => Parsed::Incomplete,
        Some(b'P') => v1(bytes),
        Some(b'\r') => v2(bytes),
        Some(_) => Parsed::Invalid(NO_HEADER),
    }
}

const NO_HEADER: &str = "the connection does not start with a PROXY protocol header";

/// `PROXY TCP4|TCP6 <source> <destination> <source port> <destination
/// port>\r\n`, or `PROXY UNKNOWN<anything>\r\n`.
fn v1(bytes: &[u8]) -> Parsed {
    let bytes = &bytes[..bytes.len().min(V1_MAX_LEN)];
    let prefix = bytes.len().min(V1_PREFIX.len());
    if bytes[..prefix] != V1_PREFIX[..prefix] {
        return Parsed::Invalid(NO_HEADER);
    }
    // The line ends at its first CR, which must be followed by an LF; the
    // prefix holds neither, so the end is past it.
    let Some(end) = bytes.iter().position(|&b| b == b'\r' || b == b'\n') else {
        return incomplete_v1(bytes);
    };
    if bytes[end] == b'\n' {
        return Parsed::Invalid("v1 header: a line feed without a carriage return");
    }
    match bytes.get(end + 1) {
        None => incomplete_v1(bytes),
        Some(b'\n') => match v1_fields(&bytes[V1_PREFIX.len()..end]) {
            Ok(source) => Parsed::Complete {
                len: end + 2,
                source,
            },
            Err(why) => Parsed::Invalid(why),
        },
        Some(_) => Parsed::Invalid("v1 header: a carriage return without a line feed"),
    }
}

/// A v1 line not ended yet: incomplete while it may still end in time.
fn incomplete_v1(bytes: &[u8]) -> Parsed {
    if bytes.len() >= V1_MAX_LEN {
        Parsed::Invalid("v1 header: longer than 107 bytes")
    } else {
        Parsed::Incomplete
    }
}

/// The line after `PROXY `, CRLF excluded: the source it carries.
fn v1_fields(line: &[u8]) -> Result<Option<SocketAddr>, &'static str> {
    // The protocol has the receiver ignore whatever follows UNKNOWN.
    if line == b"UNKNOWN" || line.starts_with(b"UNKNOWN ") {
        return Ok(None);
    }
    let line = std::str::from_utf8(line).map_err(|_| "v1 header: not ASCII")?;
    let mut fields = line.split(' ');
    let ip: fn(&str) -> Option<IpAddr> = match fields.next() {
        Some("TCP4") => |text| text.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
        Some("TCP6") => |text| text.parse::<Ipv6Addr>().ok().map(IpAddr::V6),
        _ => return Err("v1 header: the protocol is not TCP4, TCP6 or UNKNOWN"),
    };
    let (Some(source), Some(destination), Some(source_port), Some(destination_port), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Err("v1 header: not two addresses and two ports, one space apart");
    };
    let (Some(source), Some(_)) = (ip(source), ip(destination)) else {
        return Err("v1 header: an address is not one of the protocol's family");
    };
    let (Some(source_port), Some(_)) = (port(source_port), port(destination_port)) else {
        return Err("v1 header: a port is not a number from 0 to 65535");
    };
    Ok(Some(SocketAddr::new(source, source_port)))
}

/// A v1 port: decimal, 0 to 65535, without a leading zero (the protocol
/// forbids them, so that no reader takes them for octal).
fn port(text: &str) -> Option<u16> {
    let digits = text.bytes().all(|b| b.is_ascii_digit());
    let leading_zero = text.len() > 1 && text.starts_with('0');
    if !digits || leading_zero {
        return None;
    }
    text.parse().ok()
}

/// The signature, version 2 and a command, family and transport, the
/// length of what follows (addresses, then TLVs, which are skipped).
fn v2(bytes: &[u8]) -> Parsed {
    let signature = bytes.len().min(V2_SIGNATURE.len());
    if bytes[..signature] != V2_SIGNATURE[..signature] {
        return Parsed::Invalid(NO_HEADER);
    }
    let Some(&version_command) = bytes.get(12) else {
        return Parsed::Incomplete;
    };
    if version_command >> 4 != 2 {
        return Parsed::Invalid("v2 header: the version is not 2");
    }
    // LOCAL (a balancer's own connection, such as a health check) keeps
    // the peer, and its address block is skipped unread, family included.
    let local = match version_command & 0x0f {
        0 => true,
        1 => false,
        _ => return Parsed::Invalid("v2 header: the command is neither LOCAL nor PROXY"),
    };
    let Some(&family_transport) = bytes.get(13) else {
        return Parsed::Incomplete;
    };
    let (family, transport) = (family_transport >> 4, family_transport & 0x0f);
    if !local && (family > AF_UNIX || transport > 2) {
        return Parsed::Invalid("v2 header: an unknown address family or transport");
    }
    let Some(&[high, low]) = bytes.get(14..V2_FIXED_LEN) else {
        return Parsed::Incomplete;
    };
    let block_len = usize::from(u16::from_be_bytes([high, low]));
    let len = V2_FIXED_LEN + block_len;
    if len > MAX_LEN {
        return Parsed::Invalid("v2 header: longer than 4096 bytes");
    }
    let addresses_len = match family {
        AF_INET => 12,
        AF_INET6 => 36,
        AF_UNIX => 216,
        _ => 0,
    };
    if !local && block_len < addresses_len {
        return Parsed::Invalid("v2 header: too short for the addresses of its family");
    }
    let Some(block) = bytes.get(V2_FIXED_LEN..len) else {
        return Parsed::Incomplete;
    };
    let source = match (local, family, transport) {
        (false, AF_INET, TRANSPORT_STREAM) => {
            let ip: [u8; 4] = block[..4].try_into().unwrap_or_default();
            Some(SocketAddr::new(
                IpAddr::from(ip),
                u16::from_be_bytes([block[8], block[9]]),
            ))
        }
        (false, AF_INET6, TRANSPORT_STREAM) => {
            let ip: [u8; 16] = block[..16].try_into().unwrap_or_default();
            Some(SocketAddr::new(
                IpAddr::from(ip),
                u16::from_be_bytes([block[32], block[33]]),
            ))
        }
        // LOCAL; AF_UNSPEC, which asks for the real endpoints; a UNIX
        // socket or a datagram transport, which name no TCP client (HAProxy
        // keeps the peer for these too).
        _ => None,
    };
    Parsed::Complete { len, source }
}

/// Reads the PROXY protocol header that opens a connection from `peer`
/// on `stream`, within `within` (`header_read_timeout`), and consumes it:
/// the client it names, or the peer for a `LOCAL` or `UNKNOWN` header.
/// `None` means close the connection: the peer is not in `trusted`
/// (checked before a byte is read), or the header is missing, malformed,
/// too long, cut short or late. Why is logged at debug level.
pub async fn accept(
    stream: &TcpStream,
    peer: SocketAddr,
    trusted: &ClientIpResolver,
    within: Duration,
) -> Option<SocketAddr> {
    if !trusted.is_trusted(peer.ip()) {
        tracing::debug!(%peer, "PROXY protocol from a peer outside trusted_proxies: closed");
        return None;
    }
    match tokio::time::timeout(within, read_header(stream)).await {
        Ok(Ok(source)) => Some(source.unwrap_or(peer)),
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "no usable PROXY protocol header: closed");
            None
        }
        Err(_) => {
            tracing::debug!(
                %peer,
                "no complete PROXY protocol header within header_read_timeout: closed"
            );
            None
        }
    }
}

/// Peeks at `stream` until its header is complete or cannot be, then
/// consumes exactly the header.
///
/// A peer may send the header in pieces, and peeking leaves the bytes in
/// the socket, so the socket stays readable: waiting for readiness again
/// would return at once and spin. The peek therefore runs inside
/// `try_io`, and an incomplete header answers `WouldBlock`, which clears
/// the readiness that peek answered (only that one: a segment arriving in
/// between sets it again), so the next wait lasts until more bytes come.
/// The peek goes through a duplicate of the socket's descriptor, because
/// tokio's `TcpStream` has no peek that does not wait.
async fn read_header(stream: &TcpStream) -> io::Result<Option<SocketAddr>> {
    let socket = std::net::TcpStream::from(stream.as_fd().try_clone_to_owned()?);
    let mut buf = vec![0; MAX_LEN];
    loop {
        let ready = stream.ready(Interest::READABLE).await?;
        let peeked = stream.try_io(Interest::READABLE, || {
            let peeked = socket.peek(&mut buf)?;
            match parse(&buf[..peeked]) {
                // More may come: wait for it. (0 bytes peeked is the end
                // of the stream, and a closed read side sends no more.)
                Parsed::Incomplete if peeked > 0 && !ready.is_read_closed() => {
                    Err(io::ErrorKind::WouldBlock.into())
                }
                parsed => Ok(parsed),
            }
        });
        match peeked {
            Ok(Parsed::Complete { len, source }) => {
                // The bytes were peeked, so they are there to read.
                (&socket).read_exact(&mut buf[..len])?;
                return Ok(source);
            }
            Ok(Parsed::Invalid(why)) => {
                return Err(io::Error::new(io::ErrorKind::InvalidData, why))
            }
            Ok(Parsed::Incomplete) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed before the header was complete",
                ))
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn complete(len: usize, source: &str) -> Parsed {
        Parsed::Complete {
            len,
            source: Some(source.parse().unwrap()),
        }
    }

    fn keeps_peer(len: usize) -> Parsed {
        Parsed::Complete { len, source: None }
    }

    fn invalid(bytes: &[u8]) -> &'static str {
        match parse(bytes) {
            Parsed::Invalid(why) => why,
            other => panic!("{:?} parsed as {other:?}", String::from_utf8_lossy(bytes)),
        }
    }

    /// A v2 header: `version_command`, `family`, then `block` (addresses
    /// and TLVs) with its length.
    fn v2_header(version_command: u8, family: u8, block: &[u8]) -> Vec<u8> {
        let mut header = V2_SIGNATURE.to_vec();
        header.extend([version_command, family]);
        header.extend((block.len() as u16).to_be_bytes());
        header.extend(block);
        header
    }

    fn v2_inet(source: [u8; 4], port: u16, tlvs: &[u8]) -> Vec<u8> {
        let mut block = source.to_vec();
        block.extend([192, 0, 2, 1]);
        block.extend(port.to_be_bytes());
        block.extend(443u16.to_be_bytes());
        block.extend(tlvs);
        v2_header(0x21, 0x11, &block)
    }

    fn v2_inet6(source: Ipv6Addr, port: u16) -> Vec<u8> {
        let mut block = source.octets().to_vec();
        block.extend(Ipv6Addr::LOCALHOST.octets());
        block.extend(port.to_be_bytes());
        block.extend(443u16.to_be_bytes());
        v2_header(0x21, 0x21, &block)
    }

    #[test]
    fn v1_tcp4_and_tcp6_carry_the_source() {
        let line = b"PROXY TCP4 203.0.113.7 192.0.2.1 56324 443\r\nGET / HTTP/1.1\r\n";
        assert_eq!(parse(line), complete(44, "203.0.113.7:56324"));
        let line = b"PROXY TCP6 2001:db8::7 2001:db8::1 65535 0\r\n";
        assert_eq!(parse(line), complete(line.len(), "[2001:db8::7]:65535"));
        let mapped = b"PROXY TCP6 ::ffff:203.0.113.7 ::1 1 2\r\n";
        assert_eq!(
            parse(mapped),
            complete(mapped.len(), "[::ffff:203.0.113.7]:1")
        );
    }

    #[test]
    fn v1_unknown_keeps_the_peer_and_ignores_the_rest_of_its_line() {
        assert_eq!(parse(b"PROXY UNKNOWN\r\n"), keeps_peer(15));
        let line = b"PROXY UNKNOWN ffff::1 \xff whatever\r\nGET";
        assert_eq!(parse(line), keeps_peer(line.len() - 3));
        assert!(invalid(b"PROXY UNKNOWNX\r\n").contains("protocol"));
    }

    #[test]
    fn v1_may_be_107_bytes_and_no_more() {
        let longest = format!("PROXY UNKNOWN {}\r\n", "x".repeat(107 - 16));
        assert_eq!(longest.len(), V1_MAX_LEN);
        assert_eq!(parse(longest.as_bytes()), keeps_peer(107));
        let over = format!("PROXY UNKNOWN {}\r\n", "x".repeat(107 - 15));
        assert!(invalid(over.as_bytes()).contains("longer than 107"));
        // Known as soon as 107 bytes have come without the end.
        assert!(invalid(&over.as_bytes()[..107]).contains("longer than 107"));
        assert_eq!(parse(&over.as_bytes()[..106]), Parsed::Incomplete);
    }

    #[test]
    fn malformed_v1_lines_are_invalid() {
        for (line, why) in [
            (&b"PROXY TCP4 203.0.113.7 192.0.2.1 1 2\n"[..], "line feed"),
            (
                b"PROXY TCP4 203.0.113.7 192.0.2.1 1 2\rX",
                "carriage return",
            ),
            (b"PROXY TCP5 203.0.113.7 192.0.2.1 1 2\r\n", "protocol"),
            (b"PROXY  TCP4 203.0.113.7 192.0.2.1 1 2\r\n", "protocol"),
            (b"PROXY TCP4 203.0.113.7 192.0.2.1 1\r\n", "two ports"),
            (b"PROXY TCP4 203.0.113.7 192.0.2.1 1 2 3\r\n", "two ports"),
            (b"PROXY TCP4 203.0.113.7  192.0.2.1 1 2\r\n", "two ports"),
            (b"PROXY TCP4 203.0.113.7 192.0.2.1 1 2 \r\n", "two ports"),
            (b"PROXY TCP4 2001:db8::1 192.0.2.1 1 2\r\n", "family"),
            (b"PROXY TCP6 203.0.113.7 2001:db8::1 1 2\r\n", "family"),
            (b"PROXY TCP4 203.0.113.07 192.0.2.1 1 2\r\n", "family"),
            (b"PROXY TCP4 203.0.113 192.0.2.1 1 2\r\n", "family"),
            (b"PROXY TCP4 203.0.113.7 192.0.2.1 65536 2\r\n", "port"),
            (b"PROXY TCP4 203.0.113.7 192.0.2.1 01 2\r\n", "port"),
            (b"PROXY TCP4 203.0.113.7 192.0.2.1 +1 2\r\n", "port"),
            (b"PROXY TCP4 203.0.113.7 192.0.2.1 1 \r\n", "port"),
            (b"PROXY TCP4 \xff 192.0.2.1 1 2\r\n", "ASCII"),
            (b"PROXY\r\n", "does not start"),
            (
                b"proxy TCP4 203.0.113.7 192.0.2.1 1 2\r\n",
                "does not start",
            ),
        ] {
            let got = invalid(line);
            assert!(
                got.contains(why),
                "{:?}: {got}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn other_protocols_are_known_at_their_first_byte() {
        for start in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"\x16\x03\x01",
            b"PRI * HTTP/2.0",
            b"\r\nGET",
        ] {
            let got = invalid(start);
            assert!(got.contains("does not start"), "{start:?}: {got}");
        }
        assert!(invalid(b"G").contains("does not start"));
        assert!(invalid(b"PRI").contains("does not start"));
    }

    #[test]
    fn v2_over_ipv4_and_ipv6_carries_the_source() {
        let header = v2_inet([203, 0, 113, 7], 56324, &[]);
        assert_eq!(header.len(), 28);
        assert_eq!(parse(&header), complete(28, "203.0.113.7:56324"));
        let header = v2_inet6("2001:db8::7".parse().unwrap(), 1);
        assert_eq!(header.len(), 52);
        assert_eq!(parse(&header), complete(52, "[2001:db8::7]:1"));
    }

    #[test]
    fn v2_tlvs_are_skipped_and_what_follows_is_not_read() {
        // An AWS VPC endpoint id TLV, then the request.
        let tlv = [&[0xea, 0, 9, 1][..], b"vpce-0123"].concat();
        let mut bytes = v2_inet([203, 0, 113, 7], 80, &tlv);
        let len = bytes.len();
        bytes.extend(b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(parse(&bytes), complete(len, "203.0.113.7:80"));
    }

    #[test]
    fn v2_local_and_families_without_an_ip_keep_the_peer() {
        assert_eq!(parse(&v2_header(0x20, 0x00, &[])), keeps_peer(16));
        // LOCAL skips its block, whatever family it names.
        assert_eq!(parse(&v2_header(0x20, 0xff, &[1, 2, 3])), keeps_peer(19));
        assert_eq!(parse(&v2_header(0x21, 0x00, &[])), keeps_peer(16));
        assert_eq!(parse(&v2_header(0x21, 0x31, &[0; 216])), keeps_peer(232));
        let mut udp = v2_inet([203, 0, 113, 7], 53, &[]);
        udp[13] = 0x12;
        assert_eq!(parse(&udp), keeps_peer(28));
    }

    #[test]
    fn malformed_v2_headers_are_invalid() {
        let mut version_1 = v2_inet([203, 0, 113, 7], 80, &[]);
        version_1[12] = 0x11;
        assert!(invalid(&version_1).contains("version"));
        let mut command = v2_inet([203, 0, 113, 7], 80, &[]);
        command[12] = 0x22;
        assert!(invalid(&command).contains("command"));
        for family in [0x41, 0x13] {
            let mut header = v2_inet([203, 0, 113, 7], 80, &[]);
            header[13] = family;
            assert!(invalid(&header).contains("family"), "{family:#x}");
        }
        assert!(invalid(&v2_header(0x21, 0x11, &[0; 11])).contains("too short"));
        assert!(invalid(&v2_header(0x21, 0x21, &[0; 35])).contains("too short"));
        let mut signature = v2_inet([203, 0, 113, 7], 80, &[]);
        signature[11] = b'X';
        assert!(invalid(&signature).contains("does not start"));
    }

    #[test]
    fn v2_longer_than_the_bound_is_known_from_its_length_alone() {
        let mut fixed = v2_header(0x21, 0x11, &[]);
        fixed[14..16].copy_from_slice(&((MAX_LEN - 16) as u16).to_be_bytes());
        assert_eq!(parse(&fixed), Parsed::Incomplete);
        fixed[14..16].copy_from_slice(&((MAX_LEN - 15) as u16).to_be_bytes());
        assert!(invalid(&fixed).contains("longer than 4096"));
        let longest = v2_inet([203, 0, 113, 7], 80, &vec![0; MAX_LEN - 28]);
        assert_eq!(parse(&longest), complete(MAX_LEN, "203.0.113.7:80"));
    }

    /// Any header the protocol allows (a v1 line or a v2 header with up to
    /// 64 bytes of TLVs) and what it carries.
    fn valid_header() -> impl Strategy<Value = (Vec<u8>, Option<SocketAddr>)> {
        let port = any::<u16>();
        prop_oneof![
            (any::<Ipv4Addr>(), port, any::<Ipv4Addr>(), port).prop_map(|(s, sp, d, dp)| {
                let line = format!("PROXY TCP4 {s} {d} {sp} {dp}\r\n");
                (line.into_bytes(), Some(SocketAddr::new(s.into(), sp)))
            }),
            (any::<Ipv6Addr>(), port, any::<Ipv6Addr>(), port).prop_map(|(s, sp, d, dp)| {
                let line = format!("PROXY TCP6 {s} {d} {sp} {dp}\r\n");
                (line.into_bytes(), Some(SocketAddr::new(s.into(), sp)))
            }),
            "[ -~]{0,90}".prop_map(|rest| (format!("PROXY UNKNOWN {rest}\r\n").into_bytes(), None)),
            (
                any::<[u8; 4]>(),
                port,
                prop::collection::vec(any::<u8>(), 0..64)
            )
                .prop_map(|(s, sp, tlvs)| (
                    v2_inet(s, sp, &tlvs),
                    Some(SocketAddr::new(IpAddr::from(s), sp))
                )),
            (any::<Ipv6Addr>(), port)
                .prop_map(|(s, sp)| (v2_inet6(s, sp), Some(SocketAddr::new(s.into(), sp)))),
            prop::collection::vec(any::<u8>(), 0..64)
                .prop_map(|block| (v2_header(0x20, 0x11, &block), None)),
        ]
    }

    proptest! {
        #[test]
        fn never_panics_and_stays_within_its_input(
            start in prop_oneof![
                Just(Vec::new()),
                Just(b"PROXY TCP4 ".to_vec()),
                Just(b"PROXY TCP6 ".to_vec()),
                Just(V2_SIGNATURE.to_vec()),
            ],
            rest in prop::collection::vec(any::<u8>(), 0..300),
        ) {
            let bytes = [start, rest].concat();
            if let Parsed::Complete { len, .. } = parse(&bytes) {
                prop_assert!(len <= bytes.len() && len <= MAX_LEN);
            }
        }

        #[test]
        fn a_valid_header_is_read_whatever_follows_it(
            (header, source) in valid_header(),
            rest in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut bytes = header.clone();
            bytes.extend(&rest);
            prop_assert_eq!(parse(&bytes), Parsed::Complete { len: header.len(), source });
        }

        #[test]
        fn every_prefix_of_a_valid_header_is_incomplete((header, _) in valid_header()) {
            for end in 0..header.len() {
                prop_assert_eq!(parse(&header[..end]), Parsed::Incomplete, "{} bytes", end);
            }
        }
    }
}
