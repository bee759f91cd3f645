//! A refused request that sluice read as JSON-RPC (a rule keyed on calls
//! applied, and the body holds a call) gets its refusal as a JSON-RPC
//! error response, so that a client library maps it to the call that
//! failed (docs/ai-budgets.md, "JSON-RPC and MCP"): the same status and
//! fields, `Content-Type: application/json`, and
//! `{"jsonrpc":"2.0","id":<the call's id, or null>,"error":{"code":-32029,
//! "message":"rate limited: <rule>","data":<the problem document>}}`.
//! Written over the refusal already written, so that no other answer pays
//! for it (and a refusal sent again, `last_refusal.rs`, stays a problem
//! document for every other caller).

use http::header::HeaderValue;
use http::Response;
use serde_json::value::RawValue;

use super::{Inner, ProxyBody};
use crate::key::jsonrpc::Calls;
use crate::problem;
use crate::request_id::RequestId;

/// The JSON-RPC error code of a call refused for a rate limit: in the
/// range JSON-RPC leaves to servers (-32000 to -32099), as 429 is to HTTP.
pub const RATE_LIMITED: i32 = -32029;

static APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");

/// Rewrites the problem document refusing `calls` (by `rule`) in
/// `response` as the JSON-RPC error response that stands for it, with the
/// request's `id` in its data as the document would have carried it.
#[cold]
#[inline(never)]
pub fn answer(response: &mut Response<ProxyBody>, calls: &Calls<'_>, rule: &str, id: &RequestId) {
    let body = response.body_mut();
    let Inner::Problem { document, .. } = &body.body else {
        return;
    };
    let data = problem::with_request_id(document, id);
    let call_id = match calls {
        Calls::One(call) => call.id.and_then(echoed),
        Calls::None | Calls::Batch(_) => None,
    };
    let message = serde_json::to_string(&format!("rate limited: {rule}")).expect("a string");
    let mut out = Vec::with_capacity(data.len() + message.len() + 96);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(call_id.unwrap_or(b"null"));
    out.extend_from_slice(br#","error":{"code":"#);
    out.extend_from_slice(RATE_LIMITED.to_string().as_bytes());
    out.extend_from_slice(br#","message":"#);
    out.extend_from_slice(message.as_bytes());
    out.extend_from_slice(br#","data":"#);
    out.extend_from_slice(&data);
    out.extend_from_slice(b"}}");
    body.body = Inner::Written(out.into());
    body.fields = body.fields.with_content_type(&APPLICATION_JSON);
}

/// A call's `id` as it may be sent back: a string, a number or `null`,
/// as JSON-RPC allows, that is valid JSON (the reader that found it does
/// not check what it skips).
fn echoed(id: &[u8]) -> Option<&[u8]> {
    let valid = serde_json::from_slice::<&RawValue>(id).ok()?;
    let text = valid.get().as_bytes();
    matches!(text.first(), Some(b'"' | b'-' | b'0'..=b'9' | b'n')).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_valid_string_number_or_null_id_is_sent_back() {
        for (id, sent) in [
            (&b"7"[..], Some(&b"7"[..])),
            (b"\"a-1\"", Some(b"\"a-1\"")),
            (b"null", Some(b"null")),
            (b"-1.5e3", Some(b"-1.5e3")),
            (b"{\"x\":1}", None),
            (b"[1]", None),
            (b"true", None),
            (b"7x", None),
            (b"\"open", None),
            (b"nul", None),
        ] {
            assert_eq!(echoed(id), sent, "{}", String::from_utf8_lossy(id));
        }
    }
}
