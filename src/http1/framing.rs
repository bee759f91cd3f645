//! How an HTTP/1.1 message's body is delimited (RFC 9112 §6), and the
//! fields that say so.

use http::header::HeaderValue;

/// How a body is delimited on the wire: as read from a peer, or as sluice
/// writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// Exactly this many bytes (more than zero).
    Length(u64),
    /// The chunked transfer coding.
    Chunked,
    /// Until the sender closes the connection (an answer only).
    UntilClose,
}

impl Framing {
    /// A body of `length` bytes.
    pub fn of_length(length: u64) -> Framing {
        if length == 0 {
            Framing::Empty
        } else {
            Framing::Length(length)
        }
    }
}

/// A `Content-Length` value: digits only, no sign, no overflow.
pub fn parse_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// The options a `Connection` value lists, trimmed.
pub fn connection_options(value: &HeaderValue) -> impl Iterator<Item = &[u8]> {
    value
        .as_bytes()
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
}

/// Whether a `Connection` value lists `option` (`close`, `keep-alive`), as
/// hyper reads it: none in a value that is not visible ASCII.
pub fn lists_option(value: &HeaderValue, option: &[u8]) -> bool {
    // The value nearly every peer sends, whole: splitting costs more.
    value.as_bytes().eq_ignore_ascii_case(option)
        || (value.to_str().is_ok()
            && connection_options(value).any(|listed| listed.eq_ignore_ascii_case(option)))
}

/// Whether a `Connection` value lists nothing but `keep-alive` and `close`
/// (`Keep-Alive`, the one field these could name besides a `Close` field, is
/// hop-by-hop anyway).
pub fn only_persistence_options(value: &HeaderValue) -> bool {
    // The value nearly every client and upstream sends, checked whole
    // first: splitting it costs several times more.
    let whole = value.as_bytes();
    if whole.eq_ignore_ascii_case(b"keep-alive") || whole.eq_ignore_ascii_case(b"close") {
        return true;
    }
    connection_options(value).all(|option| {
        option.is_empty()
            || option.eq_ignore_ascii_case(b"keep-alive")
            || option.eq_ignore_ascii_case(b"close")
    })
}

/// Whether a `Transfer-Encoding` value's last coding is `chunked` (what
/// makes a request's body chunked, as hyper reads it; anything else in the
/// value is refused by the proxy's checks).
pub fn ends_in_chunked(value: &HeaderValue) -> bool {
    // hyper reads no coding in a value that is not visible ASCII.
    value.to_str().is_ok()
        && value
            .as_bytes()
            .rsplit(|&b| b == b',')
            .next()
            .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}

/// Writes the chunk-size line of a chunk of `length` bytes.
pub fn chunk_size_line(out: &mut Vec<u8>, length: usize) {
    let mut digits = [0u8; 16];
    let mut start = digits.len();
    let mut value = length;
    loop {
        start -= 1;
        digits[start] = b"0123456789ABCDEF"[value & 0xf];
        value >>= 4;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[start..]);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_are_hex() {
        for (length, line) in [
            (0, "0\r\n"),
            (10, "A\r\n"),
            (4096, "1000\r\n"),
            (255, "FF\r\n"),
        ] {
            let mut out = Vec::new();
            chunk_size_line(&mut out, length);
            assert_eq!(out, line.as_bytes());
        }
    }

    #[test]
    fn lengths_are_plain_decimal_numbers() {
        assert_eq!(parse_length(b"005"), Some(5));
        assert_eq!(parse_length(b"18446744073709551615"), Some(u64::MAX));
        for bad in [
            &b""[..],
            b"+5",
            b"-1",
            b"0x5",
            b"5 ",
            b"18446744073709551616",
        ] {
            assert_eq!(parse_length(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn options_are_read_from_lists_in_any_case() {
        let value = HeaderValue::from_static("Keep-Alive, CLOSE");
        assert!(lists_option(&value, b"close"));
        assert!(lists_option(&value, b"keep-alive"));
        assert!(!lists_option(&value, b"upgrade"));
        assert!(only_persistence_options(&value));
        assert!(!only_persistence_options(&HeaderValue::from_static(
            "close, x"
        )));
        assert!(ends_in_chunked(&HeaderValue::from_static("gzip, Chunked ")));
        assert!(!ends_in_chunked(&HeaderValue::from_static("chunked, gzip")));
    }
}
