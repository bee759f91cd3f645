//! The PROXY protocol (docs/edge.md, "Behind a load balancer: PROXY
//! protocol or X-Forwarded-For"): with `server.proxy_protocol`, every
//! connection opens with a header in which the L4 balancer in front names
//! the client it carries, version 1 (one text line) or 2 (binary).
//!
//! [`parse`] reads a header from bytes: the `ppp` crate reads its fields,
//! inside checks of sluice's own where ppp is more lenient or stricter
//! than the protocol (each says where). [`accept`] reads it off a fresh
//! connection's raw `TcpStream` before anything else does (TLS, sluice's
//! HTTP/1 server or hyper's), as nginx does: it peeks until the header is
//! complete, then consumes exactly its length, so what follows reaches them
//! untouched and none of them sees a wrapper.
//!
//! A header is believed only from a peer in `trusted_proxies`; any other
//! peer, and a header that is missing, malformed, too long or late, closes
//! the connection before a request is read.

use std::io::{self, Read};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::Duration;

use ppp::{v1, v2};
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
/// Signature, version and command, family and transport, length.
const V2_FIXED_LEN: usize = 16;
/// A version 2 header's version (2) and command `LOCAL`: a balancer's own
/// connection, such as a health check.
const V2_LOCAL: u8 = 0x20;

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
const V1_FIELDS: &str = "v1 header: not two addresses and two ports, one space apart";
const V1_PORT: &str = "v1 header: a port is not a number from 0 to 65535";
const V2_TOO_LONG: &str = "v2 header: longer than 4096 bytes";

/// `PROXY TCP4|TCP6 <source> <destination> <source port> <destination
/// port>\r\n`, or `PROXY UNKNOWN<anything>\r\n`. The line is framed here
/// and only a whole one is handed to ppp: given a line still arriving,
/// ppp refuses some that a few more bytes would make valid (`PROXY TCP4
/// 203.0.113.7 192.0.2.1 1 `, cut before the destination port), and a
/// header sent in pieces must be waited for.
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
        Some(b'\n') => match v1_source(&bytes[..end + 2]) {
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

/// A whole v1 line, `PROXY ` to CRLF: the source it carries.
fn v1_source(line: &[u8]) -> Result<Option<SocketAddr>, &'static str> {
    let fields = &line[V1_PREFIX.len()..line.len() - 2];
    // The protocol has the receiver ignore whatever follows UNKNOWN. ppp
    // reads it as UTF-8, and takes one with more than four spaces after
    // UNKNOWN for a line not ended yet (whatever comes next), so UNKNOWN
    // is recognised here.
    if fields == b"UNKNOWN" || fields.starts_with(b"UNKNOWN ") {
        return Ok(None);
    }
    let source = match v1::Header::try_from(line) {
        Ok(header) => match header.addresses {
            v1::Addresses::Tcp4(ip) => SocketAddr::new(ip.source_address.into(), ip.source_port),
            v1::Addresses::Tcp6(ip) => SocketAddr::new(ip.source_address.into(), ip.source_port),
            v1::Addresses::Unknown => return Ok(None),
        },
        Err(error) => return Err(v1_error(error, fields)),
    };
    // ppp reads a port as `u16::from_str` does, which takes a leading `+`;
    // the protocol's ports are digits alone.
    let mut ports = fields.rsplit(|&b| b == b' ').take(2);
    if !ports.all(|port| port.iter().all(u8::is_ascii_digit)) {
        return Err(V1_PORT);
    }
    Ok(Some(source))
}

/// Why ppp refused the whole v1 line `PROXY <fields>\r\n`.
fn v1_error(error: v1::BinaryParseError, fields: &[u8]) -> &'static str {
    use v1::ParseError as E;
    let error = match error {
        v1::BinaryParseError::InvalidUtf8(_) => return "v1 header: not ASCII",
        v1::BinaryParseError::Parse(error) => error,
    };
    match error {
        E::InvalidPrefix
        | E::MissingPrefix
        | E::Partial
        | E::MissingProtocol
        | E::InvalidProtocol => "v1 header: the protocol is not TCP4, TCP6 or UNKNOWN",
        // ppp names a missing or extra field after the address or port it
        // then reads in its place.
        _ if fields.split(|&b| b == b' ').count() != 5 => V1_FIELDS,
        E::InvalidSourceAddress(_) | E::InvalidDestinationAddress(_) => {
            "v1 header: an address is not one of the protocol's family"
        }
        E::InvalidSourcePort(_) | E::InvalidDestinationPort(_) => V1_PORT,
        E::HeaderTooLong => "v1 header: longer than 107 bytes",
        E::MissingSourceAddress
        | E::MissingDestinationAddress
        | E::MissingSourcePort
        | E::MissingDestinationPort
        | E::MissingNewLine
        | E::InvalidSuffix => V1_FIELDS,
    }
}

/// The signature, version 2 and a command, family and transport, the
/// length of what follows (addresses, then TLVs, which ppp leaves unread
/// until asked for them, and sluice never asks).
fn v2(bytes: &[u8]) -> Parsed {
    // Nothing past the bound is handed to ppp: a longer header is known by
    // the length it announces.
    let bytes = &bytes[..bytes.len().min(MAX_LEN)];
    let error = match v2::Header::try_from(bytes) {
        Ok(header) => {
            return Parsed::Complete {
                len: header.len(),
                source: v2_source(&header),
            }
        }
        Err(error) => error,
    };
    use v2::ParseError as E;
    Parsed::Invalid(match error {
        E::Incomplete(_) => return Parsed::Incomplete,
        E::Partial(_, block_len) if V2_FIXED_LEN + block_len > MAX_LEN => V2_TOO_LONG,
        E::Partial(..) => return Parsed::Incomplete,
        // LOCAL keeps the peer, and the protocol has its address block
        // skipped unread, family included; ppp reads the family and wants
        // room for its addresses even there, so such a LOCAL header is
        // read here, by its length alone.
        E::AddressFamily(_) | E::Protocol(_) | E::InvalidAddresses(..)
            if bytes.get(12) == Some(&V2_LOCAL) =>
        {
            return v2_local(bytes)
        }
        E::Prefix => NO_HEADER,
        E::Version(_) => "v2 header: the version is not 2",
        E::Command(_) => "v2 header: the command is neither LOCAL nor PROXY",
        E::AddressFamily(_) | E::Protocol(_) => "v2 header: an unknown address family or transport",
        E::InvalidAddresses(..) => "v2 header: too short for the addresses of its family",
        // Errors of a TLV, which ppp reads only when asked.
        E::InvalidTLV(..) | E::Leftovers(_) => "v2 header: malformed TLVs",
    })
}

/// The client a whole v2 header carries: `None` for LOCAL; for AF_UNSPEC,
/// which asks for the real endpoints; for a UNIX socket or a datagram
/// transport, which name no TCP client (HAProxy keeps the peer for these
/// too).
fn v2_source(header: &v2::Header) -> Option<SocketAddr> {
    if header.command != v2::Command::Proxy || header.protocol != v2::Protocol::Stream {
        return None;
    }
    match header.addresses {
        v2::Addresses::IPv4(ip) => Some(SocketAddr::new(ip.source_address.into(), ip.source_port)),
        v2::Addresses::IPv6(ip) => Some(SocketAddr::new(ip.source_address.into(), ip.source_port)),
        v2::Addresses::Unspecified | v2::Addresses::Unix(_) => None,
    }
}

/// A v2 LOCAL header whose family ppp refused: its length alone.
fn v2_local(bytes: &[u8]) -> Parsed {
    let Some(&[high, low]) = bytes.get(14..V2_FIXED_LEN) else {
        return Parsed::Incomplete;
    };
    let len = V2_FIXED_LEN + usize::from(u16::from_be_bytes([high, low]));
    if len > MAX_LEN {
        Parsed::Invalid(V2_TOO_LONG)
    } else if bytes.len() < len {
        Parsed::Incomplete
    } else {
        Parsed::Complete { len, source: None }
    }
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
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use super::*;
    use proptest::prelude::*;

    /// Written out here rather than borrowed from the parser.
    const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

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

    /// What ppp 2.3 does on its own with the inputs each check of ours
    /// is for. Should a later ppp read one of these as the protocol does,
    /// the check that names it may go.
    #[test]
    fn what_ppp_alone_reads_otherwise() {
        use ppp::PartialResult;
        let v1 = |line: &[u8]| v1::Header::try_from(line).map(|_| ());
        // v1's framing: a valid line cut before its last field is final.
        assert!(v1(b"PROXY TCP4 203.0.113.7 192.0.2.1 1 ").is_complete());
        assert!(v1(b"PROXY TCP4 203.0.113.7 192.0.2.1 1 ").is_err());
        // UNKNOWN: more than four spaces after it is never ended, a byte
        // that is not UTF-8 refused.
        assert!(v1(b"PROXY UNKNOWN a b c d e\r\n").is_incomplete());
        assert!(v1(b"PROXY UNKNOWN \xff\r\n").is_err());
        // A port with a sign.
        assert!(v1(b"PROXY TCP4 203.0.113.7 192.0.2.1 +1 2\r\n").is_ok());
        // A field missing, named as the port read in its place.
        assert!(matches!(
            v1(b"PROXY TCP4 203.0.113.7 192.0.2.1 1\r\n"),
            Err(v1::BinaryParseError::Parse(
                v1::ParseError::InvalidDestinationPort(_)
            ))
        ));
        // LOCAL: its family read, and room wanted for its addresses.
        let v2 = |header: &[u8]| v2::Header::try_from(header).map(|_| ());
        assert_eq!(
            v2(&v2_header(0x20, 0xff, &[1, 2, 3])),
            Err(v2::ParseError::AddressFamily(0xf0))
        );
        assert_eq!(
            v2(&v2_header(0x20, 0x11, &[1, 2, 3])),
            Err(v2::ParseError::InvalidAddresses(3, 12))
        );
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
