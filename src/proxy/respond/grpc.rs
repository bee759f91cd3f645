//! A gRPC call that sluice answers itself gets a gRPC answer, not an HTTP
//! error (docs/upstreams.md, "gRPC"): status 200, `content-type:
//! application/grpc`, and a trailers-only response whose one header block
//! carries `grpc-status`, `grpc-message` (the problem document's
//! `detail`), the rate-limit fields and `X-Request-Id`. A 429 becomes
//! `RESOURCE_EXHAUSTED` with `grpc-retry-pushback-ms`, so a gRPC client's
//! retry policy waits as long as `Retry-After` says rather than retrying
//! at once, as it does after the `UNAVAILABLE` an HTTP 429 maps to.

use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};

use super::{OwnFields, ProxyBody, Said};

const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
const GRPC_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");
static APPLICATION_GRPC: HeaderValue = HeaderValue::from_static("application/grpc");

/// Whether a request with `headers` is a gRPC call (`content-type:
/// application/grpc`, `application/grpc+proto`, ...). Asked of `POST`s only.
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

/// The gRPC status code for an answer sluice wrote with `status`.
pub fn code_for(status: StatusCode) -> u16 {
    match status.as_u16() {
        429 => 8,        // RESOURCE_EXHAUSTED
        503 | 502 => 14, // UNAVAILABLE
        403 => 7,        // PERMISSION_DENIED
        401 => 16,       // UNAUTHENTICATED
        504 | 408 => 4,  // DEADLINE_EXCEEDED
        400..=499 => 3,  // INVALID_ARGUMENT
        _ => 13,         // INTERNAL
    }
}

/// Writes the refusal `said`, with `fields`, into the vacant `response` as
/// the trailers-only gRPC answer it stands for (`respond::refuse_into`).
#[cold]
#[inline(never)]
pub(super) fn answer(response: &mut Response<ProxyBody>, said: &Said<'_>, fields: OwnFields) {
    let headers = response.headers_mut();
    fields.into_map(headers);
    headers.insert(CONTENT_TYPE, APPLICATION_GRPC.clone());
    headers.insert(GRPC_STATUS, HeaderValue::from(code_for(said.status)));
    if let Ok(message) = HeaderValue::from_str(&percent_encode(said.detail)) {
        headers.insert(GRPC_MESSAGE, message);
    }
    if let Some(secs) = said.retry_after_secs {
        headers.insert(GRPC_PUSHBACK, HeaderValue::from(secs.saturating_mul(1000)));
    }
    *response.status_mut() = StatusCode::OK;
    response.body_mut().grpc_answer(said.status);
}

/// `grpc-message` as the gRPC protocol sends it: percent-encoded outside
/// printable ASCII, and `%` itself.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_as_the_docs_say() {
        let cases = [
            (429, 8),
            (503, 14),
            (502, 14),
            (403, 7),
            (401, 16),
            (400, 3),
            (413, 3),
            (504, 4),
        ];
        for (status, code) in cases {
            assert_eq!(
                code_for(StatusCode::from_u16(status).unwrap()),
                code,
                "{status}"
            );
        }
    }

    #[test]
    fn a_message_is_percent_encoded_outside_printable_ascii() {
        assert_eq!(
            percent_encode("rule 'a' allows 5 per 1m"),
            "rule 'a' allows 5 per 1m"
        );
        assert_eq!(percent_encode("100% ≤ x"), "100%25 %E2%89%A4 x");
    }

    #[test]
    fn grpc_content_types_are_recognised() {
        for (value, grpc) in [
            ("application/grpc", true),
            ("application/grpc+proto", true),
            ("application/json", false),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(value));
            assert_eq!(is_grpc(&headers), grpc, "{value}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }
}
