//! A gRPC call that sluice answers itself gets a gRPC answer, not an HTTP
//! error (docs/upstreams.md, "gRPC"): status 200, `content-type:
//! application/grpc`, and a trailers-only response whose one header block
//! carries `grpc-status`, `grpc-message` (the problem document's
//! `detail`), the rate-limit fields and `X-Request-Id`. A 429 becomes
//! `RESOURCE_EXHAUSTED` with `grpc-retry-pushback-ms`, so a gRPC client's
//! retry policy waits as long as `Retry-After` says rather than retrying
//! at once, as it does after the `UNAVAILABLE` an HTTP 429 maps to.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use hyper::body::{Body, Frame};

use super::{OwnFields, ProxyBody, Said};
use crate::metrics::Counted;
use crate::proxy::pool::{BoxError, PooledBody};

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

/// Why sluice ended a call a message rule applies to before its server
/// did (docs/streams.md, "gRPC messages").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallEnding {
    /// The named rule refused a message; the client may try again after
    /// `retry_after_ms` (`grpc-retry-pushback-ms`).
    Limited { rule: Arc<str>, retry_after_ms: u64 },
    /// A message's prefix said it is longer than `max_message_bytes`.
    TooLarge,
    /// A message could not be decided: the store failed under
    /// `on_error = "deny"`.
    Unavailable,
}

impl CallEnding {
    /// The HTTP status the ending stands for (the access log's and
    /// `sluice_responses_total`'s, when sluice answers the call whole).
    fn stands_for(&self) -> StatusCode {
        match self {
            CallEnding::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
            CallEnding::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            CallEnding::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Writes the call's status into `headers` (the trailers, or the one
    /// block of a trailers-only answer).
    fn write_status(&self, headers: &mut HeaderMap) {
        let (code, message) = match self {
            CallEnding::Limited { rule, .. } => (8, format!("rate limited: {rule}")),
            CallEnding::TooLarge => (8, "message larger than max_message_bytes".to_owned()),
            CallEnding::Unavailable => (14, "try again later: limits unavailable".to_owned()),
        };
        headers.insert(GRPC_STATUS, HeaderValue::from(code));
        if let Ok(message) = HeaderValue::from_str(&percent_encode(&message)) {
            headers.insert(GRPC_MESSAGE, message);
        }
        if let CallEnding::Limited { retry_after_ms, .. } = self {
            headers.insert(GRPC_PUSHBACK, HeaderValue::from(*retry_after_ms));
        }
    }
}

/// Where a metered call's two halves meet: the client's messages, read
/// on their way to the server (`proxy/messages/grpc.rs`), may end the
/// call, and the client's answer ([`CallAnswer`]), woken, ends with the
/// status that says why. Counted in `sluice_grpc_streams` while either
/// half lives.
#[derive(Debug)]
pub struct CallEnd {
    ending: OnceLock<CallEnding>,
    answer: AtomicWaker,
    _open: Counted,
}

impl CallEnd {
    pub fn new(open: Counted) -> CallEnd {
        CallEnd {
            ending: OnceLock::new(),
            answer: AtomicWaker::new(),
            _open: open,
        }
    }

    /// Ends the call (the first ending stands) and wakes its answer.
    pub fn end(&self, ending: CallEnding) {
        let _ = self.ending.set(ending);
        self.answer.wake();
    }

    /// Why sluice ended the call, if it did.
    pub fn ending(&self) -> Option<&CallEnding> {
        self.ending.get()
    }
}

/// Writes the trailers-only answer to a call sluice ended before its
/// server answered into `response` (whatever was written there).
#[cold]
#[inline(never)]
pub fn answer_ended(response: &mut Response<ProxyBody>, ending: &CallEnding) {
    super::vacate(response);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, APPLICATION_GRPC.clone());
    ending.write_status(headers);
    response.body_mut().grpc_answer(ending.stands_for());
}

/// The server's answer to a metered call, streamed to the client and
/// ended with sluice's trailers ([`CallEnding`]) once the call's messages
/// ended it: after whatever the server had answered, instead of the
/// server's reset.
#[derive(Debug)]
pub struct CallAnswer {
    /// `None` once the answer ended.
    body: Option<PooledBody>,
    end: Arc<CallEnd>,
}

impl CallAnswer {
    pub fn new(body: PooledBody, end: Arc<CallEnd>) -> CallAnswer {
        CallAnswer {
            body: Some(body),
            end,
        }
    }

    pub fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(|body| body.is_end_stream())
    }

    pub fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let Some(body) = &mut self.body else {
            return Poll::Ready(None);
        };
        if self.end.ending().is_none() {
            self.end.answer.register(cx.waker());
            match Pin::new(&mut *body).poll_frame(cx) {
                // The server's error may be the reset sluice sent it.
                Poll::Ready(Some(Err(error))) if self.end.ending().is_none() => {
                    return Poll::Ready(Some(Err(error)))
                }
                Poll::Ready(Some(Err(_))) => {}
                Poll::Ready(Some(Ok(frame))) => {
                    if frame.is_trailers() {
                        self.body = None;
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Poll::Ready(None) => {
                    self.body = None;
                    return Poll::Ready(None);
                }
                Poll::Pending if self.end.ending().is_none() => return Poll::Pending,
                Poll::Pending => {}
            }
        }
        // Ended by sluice: the server's stream was reset, the client gets
        // the call's status.
        self.body = None;
        let mut trailers = HeaderMap::new();
        if let Some(ending) = self.end.ending() {
            ending.write_status(&mut trailers);
        }
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }
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
