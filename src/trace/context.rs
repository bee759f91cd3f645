//! The trace a request carries in: W3C `traceparent` (and `tracestate`,
//! passed on as it came), B3's single `b3` header and its `X-B3-*`
//! headers; and the fields sluice writes for the upstream. Read by hand, a
//! header at a time, with nothing allocated: every request reads them when
//! tracing is on, sampled or not. An invalid header is no parent at all
//! (W3C Trace Context §4.3: a new trace may start), never an error.

use http::header::{HeaderMap, HeaderName};

use super::ids::{SpanId, TraceId};
use crate::config::Propagators;

pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
pub const B3: HeaderName = HeaderName::from_static("b3");
pub const X_B3_TRACE_ID: HeaderName = HeaderName::from_static("x-b3-traceid");
pub const X_B3_SPAN_ID: HeaderName = HeaderName::from_static("x-b3-spanid");
pub const X_B3_PARENT_SPAN_ID: HeaderName = HeaderName::from_static("x-b3-parentspanid");
pub const X_B3_SAMPLED: HeaderName = HeaderName::from_static("x-b3-sampled");
pub const X_B3_FLAGS: HeaderName = HeaderName::from_static("x-b3-flags");

/// The B3 headers sluice replaces when it writes B3 itself.
pub const B3_FIELDS: [HeaderName; 6] = [
    B3,
    X_B3_TRACE_ID,
    X_B3_SPAN_ID,
    X_B3_PARENT_SPAN_ID,
    X_B3_SAMPLED,
    X_B3_FLAGS,
];

/// The span a request came from, as its headers named it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// Its sampled flag (B3's debug flag counts as sampled; a B3 parent
    /// that leaves sampling to the receiver counts as not sampled).
    pub sampled: bool,
}

/// The parent the request's headers name, by the first propagator that
/// finds a valid one: W3C, then B3's single header, then B3's multi.
pub fn extract(headers: &HeaderMap, propagators: Propagators) -> Option<Parent> {
    if propagators.tracecontext {
        if let Some(parent) = headers
            .get(&TRACEPARENT)
            .and_then(|value| parse_traceparent(value.as_bytes()))
        {
            return Some(parent);
        }
    }
    if propagators.reads_b3() {
        if let Some(parent) = headers
            .get(&B3)
            .and_then(|value| parse_b3(value.as_bytes()))
        {
            return Some(parent);
        }
        return b3_multi(headers);
    }
    None
}

/// `traceparent`: `version-traceid-parentid-flags`, 55 bytes for version
/// 00; a later version may append fields after a dash, which are ignored
/// (§4.3). Version `ff`, an all-zero id and upper-case hex are invalid.
pub fn parse_traceparent(value: &[u8]) -> Option<Parent> {
    let value = trim(value);
    if value.len() < 55 {
        return None;
    }
    let version = hex_byte(&value[0..2])?;
    if version == 0xff || (version == 0 && value.len() != 55) {
        return None;
    }
    if value.len() > 55 && value[55] != b'-' {
        return None;
    }
    if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let trace_id = TraceId(hex_array(&value[3..35])?);
    let span_id = SpanId(hex_array(&value[36..52])?);
    let flags = hex_byte(&value[53..55])?;
    valid(trace_id, span_id, flags & 1 == 1)
}

/// B3's single header: `traceid-spanid[-sampling[-parentspanid]]`, the
/// trace id 32 or 16 hex digits (a 64-bit one is padded with zeros on the
/// left, as B3 says), sampling `1`, `0` or `d`. A header with only a
/// sampling state names no parent.
pub fn parse_b3(value: &[u8]) -> Option<Parent> {
    let value = trim(value);
    let mut parts = value.split(|&b| b == b'-');
    let trace_id = b3_trace_id(parts.next()?)?;
    let span_id = SpanId(hex_array(parts.next()?)?);
    let sampled = match parts.next() {
        None => false,
        Some(state) => b3_sampled(state)?,
    };
    if let Some(parent) = parts.next() {
        hex_array::<8>(parent)?;
    }
    if parts.next().is_some() {
        return None;
    }
    valid(trace_id, span_id, sampled)
}

/// B3's multi headers: `X-B3-TraceId` and `X-B3-SpanId`, with
/// `X-B3-Sampled` (`1`/`0`, or `true`/`false` as old tracers wrote) or
/// `X-B3-Flags: 1` (debug, so sampled).
fn b3_multi(headers: &HeaderMap) -> Option<Parent> {
    let trace_id = b3_trace_id(trim(headers.get(&X_B3_TRACE_ID)?.as_bytes()))?;
    let span_id = SpanId(hex_array(trim(headers.get(&X_B3_SPAN_ID)?.as_bytes()))?);
    let debug = headers
        .get(&X_B3_FLAGS)
        .is_some_and(|flags| trim(flags.as_bytes()) == b"1");
    let sampled = match headers.get(&X_B3_SAMPLED).map(|v| trim(v.as_bytes())) {
        None => debug,
        Some(b"1" | b"true") => true,
        Some(b"0" | b"false") => debug,
        Some(_) => return None,
    };
    valid(trace_id, span_id, sampled)
}

/// The parent these name, if both ids are valid (not all zeros).
fn valid(trace_id: TraceId, span_id: SpanId, sampled: bool) -> Option<Parent> {
    (trace_id.is_valid() && span_id.is_valid()).then_some(Parent {
        trace_id,
        span_id,
        sampled,
    })
}

fn b3_trace_id(text: &[u8]) -> Option<TraceId> {
    match text.len() {
        32 => Some(TraceId(hex_array(text)?)),
        16 => {
            let low: [u8; 8] = hex_array(text)?;
            let mut bytes = [0; 16];
            bytes[8..].copy_from_slice(&low);
            Some(TraceId(bytes))
        }
        _ => None,
    }
}

fn b3_sampled(state: &[u8]) -> Option<bool> {
    match state {
        b"1" | b"d" => Some(true),
        b"0" => Some(false),
        _ => None,
    }
}

/// `traceparent` for a sampled span: `00-<trace>-<span>-01`.
pub fn traceparent(trace_id: &TraceId, span_id: &SpanId) -> [u8; 55] {
    let mut out = [b'-'; 55];
    out[0] = b'0';
    out[1] = b'0';
    write_hex(&mut out[3..35], &trace_id.0);
    write_hex(&mut out[36..52], &span_id.0);
    out[53] = b'0';
    out[54] = b'1';
    out
}

/// B3's single header for a sampled span: `<trace>-<span>-1`.
pub fn b3(trace_id: &TraceId, span_id: &SpanId) -> [u8; 51] {
    let mut out = [b'-'; 51];
    write_hex(&mut out[..32], &trace_id.0);
    write_hex(&mut out[33..49], &span_id.0);
    out[50] = b'1';
    out
}

/// An id as lower-case hex.
pub fn hex<const N: usize, const M: usize>(bytes: &[u8; N]) -> [u8; M] {
    let mut out = [0; M];
    write_hex(&mut out, bytes);
    out
}

fn write_hex(out: &mut [u8], bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
}

fn trim(value: &[u8]) -> &[u8] {
    value.trim_ascii()
}

/// Lower-case hex only, as W3C requires (B3 writes lower case too).
fn hex_digit(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

fn hex_byte(text: &[u8]) -> Option<u8> {
    let [high, low] = text else {
        return None;
    };
    Some(hex_digit(*high)? << 4 | hex_digit(*low)?)
}

fn hex_array<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    if text.len() != N * 2 {
        return None;
    }
    let mut out = [0; N];
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *byte = hex_byte(pair)?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const W3C: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn all() -> Propagators {
        Propagators {
            tracecontext: true,
            b3: true,
            b3multi: false,
        }
    }

    #[test]
    fn reads_the_w3c_example_and_writes_it_back() {
        let parent = parse_traceparent(W3C.as_bytes()).unwrap();
        assert!(parent.sampled);
        let written = traceparent(&parent.trace_id, &parent.span_id);
        assert_eq!(std::str::from_utf8(&written).unwrap(), W3C);
        let unsampled = W3C.replace("-01", "-00");
        assert!(!parse_traceparent(unsampled.as_bytes()).unwrap().sampled);
    }

    #[test]
    fn refuses_what_w3c_calls_invalid() {
        let invalid = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ];
        for value in invalid {
            assert_eq!(parse_traceparent(value.as_bytes()), None, "{value:?}");
        }
        // A later version may carry more fields.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what";
        assert!(parse_traceparent(later.as_bytes()).is_some());
    }

    #[test]
    fn reads_b3_single_in_each_form() {
        let full = "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90";
        let parent = parse_b3(full.as_bytes()).unwrap();
        assert!(parent.sampled);
        assert_eq!(
            parent.span_id.0,
            [0xe4, 0x57, 0xb5, 0xa2, 0xe4, 0xd8, 0x6b, 0xd1]
        );
        let short = parse_b3(b"64fe8b2a57d3eff7-e457b5a2e4d86bd1-d").unwrap();
        assert_eq!(&short.trace_id.0[..8], &[0; 8]);
        assert!(short.sampled);
        assert!(
            !parse_b3(b"64fe8b2a57d3eff7-e457b5a2e4d86bd1")
                .unwrap()
                .sampled
        );
        assert!(
            !parse_b3(b"64fe8b2a57d3eff7-e457b5a2e4d86bd1-0")
                .unwrap()
                .sampled
        );
        for invalid in [
            "0",
            "1",
            "d",
            "64fe8b2a57d3eff7-e457b5a2e4d86bd1-x",
            "64fe8b2a57d3eff7",
        ] {
            assert_eq!(parse_b3(invalid.as_bytes()), None, "{invalid:?}");
        }
        let parent = parse_b3(&b3(&parent.trace_id, &parent.span_id)).unwrap();
        assert!(parent.sampled);
    }

    #[test]
    fn reads_b3_multi_and_prefers_w3c() {
        let mut headers = HeaderMap::new();
        headers.insert(
            X_B3_TRACE_ID,
            HeaderValue::from_static("80f198ee56343ba864fe8b2a57d3eff7"),
        );
        headers.insert(X_B3_SPAN_ID, HeaderValue::from_static("e457b5a2e4d86bd1"));
        headers.insert(X_B3_SAMPLED, HeaderValue::from_static("1"));
        let from_b3 = extract(&headers, all()).unwrap();
        assert!(from_b3.sampled);
        let w3c_only = Propagators {
            tracecontext: true,
            ..Propagators::default()
        };
        assert_eq!(extract(&headers, w3c_only), None);
        headers.insert(TRACEPARENT, HeaderValue::from_static(W3C));
        let from_w3c = extract(&headers, all()).unwrap();
        assert_eq!(from_w3c, parse_traceparent(W3C.as_bytes()).unwrap());
        // An invalid traceparent leaves the B3 parent.
        headers.insert(TRACEPARENT, HeaderValue::from_static("00-junk"));
        assert_eq!(extract(&headers, all()), Some(from_b3));
        headers.insert(X_B3_SAMPLED, HeaderValue::from_static("0"));
        headers.insert(X_B3_FLAGS, HeaderValue::from_static("1"));
        assert!(extract(&headers, all()).unwrap().sampled);
    }
}
