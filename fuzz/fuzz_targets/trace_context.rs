//! Arbitrary trace headers (`traceparent`, `b3`, the `X-B3-*` set): the
//! parsers never panic, and a parent they accept has valid (non-zero) ids
//! that survive being written as sluice writes them and read back, with the
//! sampled flag kept. What they accept is what the header said: the ids
//! appear in its text as lower-case hex.
#![no_main]

use arbitrary::Arbitrary;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use sluice::config::Propagators;
use sluice::trace::context::{self, Parent};

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    traceparent: &'a [u8],
    b3: &'a [u8],
    trace_id: &'a [u8],
    span_id: &'a [u8],
    sampled: &'a [u8],
    flags: &'a [u8],
    tracecontext: bool,
    b3_single: bool,
    b3_multi: bool,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn check(parent: Parent, text: &[u8]) {
    assert!(
        parent.trace_id.is_valid() && parent.span_id.is_valid(),
        "{parent:?}"
    );
    let text = String::from_utf8_lossy(text);
    let span = hex(&parent.span_id.0);
    assert!(text.contains(&span), "{span} not in {text:?}");
    // A 64-bit B3 trace id is padded on the left.
    let trace = hex(&parent.trace_id.0);
    assert!(
        text.contains(&trace) || text.contains(&trace[16..]),
        "{trace} not in {text:?}"
    );
    if parent.sampled {
        let written = context::traceparent(&parent.trace_id, &parent.span_id);
        assert_eq!(context::parse_traceparent(&written), Some(parent));
        let written = context::b3(&parent.trace_id, &parent.span_id);
        assert_eq!(context::parse_b3(&written), Some(parent));
    }
}

fuzz_target!(|input: Input<'_>| {
    if let Some(parent) = context::parse_traceparent(input.traceparent) {
        check(parent, input.traceparent);
    }
    if let Some(parent) = context::parse_b3(input.b3) {
        check(parent, input.b3);
    }
    let mut headers = HeaderMap::new();
    let fields: [(&[u8], HeaderName); 6] = [
        (input.traceparent, context::TRACEPARENT),
        (input.b3, context::B3),
        (input.trace_id, context::X_B3_TRACE_ID),
        (input.span_id, context::X_B3_SPAN_ID),
        (input.sampled, context::X_B3_SAMPLED),
        (input.flags, context::X_B3_FLAGS),
    ];
    let mut all = Vec::new();
    for (value, name) in fields {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            all.extend_from_slice(value.as_bytes());
            all.push(b'\n');
            headers.insert(name, value);
        }
    }
    let propagators = Propagators {
        tracecontext: input.tracecontext,
        b3: input.b3_single,
        b3multi: input.b3_multi,
    };
    if let Some(parent) = context::extract(&headers, propagators) {
        check(parent, &all);
    }
});
