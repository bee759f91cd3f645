//! A span as sluice records it on the request path: plain fields, and its
//! attributes already in OTLP's bytes, written as they are set into one
//! buffer (`trace/otlp.rs`): setting an attribute copies its text once and
//! allocates nothing, where a list of values cost an allocation per value
//! and their encoding again later. The rest of a span is written around
//! its attributes by [`put_spans`]: by the exporter, off the request path
//! (`trace/export.rs`), and for a request's attempts as each is added to
//! the request's span, which carries them as bytes.

use std::borrow::Cow;

use super::ids::{SpanId, TraceId};

use super::otlp::{
    self, bytes_len, delimited_len, field, fixed32_len, fixed64_len, int32_len, put_bytes,
    put_delimited, put_fixed32, put_fixed64, put_int32, put_string, string_len, Any, SpanKind,
    StatusCode,
};
use crate::clock::Nanos;

/// OpenTelemetry's span kinds sluice records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The request sluice answered (or a rate limit service call).
    Server,
    /// One attempt at the upstream.
    Client,
}

/// A recorded span and the spans recorded under it (a request's upstream
/// attempts). Every recorded span is sampled.
#[derive(Debug, Clone)]
pub struct Recording {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// The span this one is a child of, when it has one.
    pub parent: Option<SpanId>,
    /// The incoming `tracestate`, passed on as it came.
    pub trace_state: Option<Box<str>>,
    pub kind: Kind,
    /// Borrowed when it is a constant (a client span's standard method).
    pub name: Cow<'static, str>,
    /// Unix nanoseconds.
    pub start: Nanos,
    pub end: Nanos,
    /// Status `ERROR` (a 5xx answer, a failed attempt); else unset.
    pub error: bool,
    /// The attributes, each an encoded `Span.attributes` field (a
    /// `KeyValue`), in the order they were set.
    attributes: Vec<u8>,
    /// The spans under this one (a request's attempts), written as they
    /// were added ([`Recording::add_child`]): `ScopeSpans.spans` entries.
    children: Vec<u8>,
    /// How many spans `children` holds.
    child_spans: usize,
}

/// The attributes' bytes a span has room for before its buffer grows: a
/// request's server span takes about 450 (its user agent and path
/// included), an attempt's client span about 170.
const SERVER_ATTRIBUTES: usize = 640;
const CLIENT_ATTRIBUTES: usize = 256;

impl Recording {
    /// A span with no name, attributes or end yet.
    pub fn new(
        kind: Kind,
        trace_id: TraceId,
        span_id: SpanId,
        parent: Option<SpanId>,
        start: Nanos,
    ) -> Recording {
        Recording::new_in(Vec::new(), kind, trace_id, span_id, parent, start)
    }

    /// A span as [`Recording::new`] makes it, its attributes written into
    /// `buffer` (cleared first): one [`Recording::into_buffer`] gave back,
    /// so that spans written one after the other reuse one.
    pub fn new_in(
        mut buffer: Vec<u8>,
        kind: Kind,
        trace_id: TraceId,
        span_id: SpanId,
        parent: Option<SpanId>,
        start: Nanos,
    ) -> Recording {
        buffer.clear();
        buffer.reserve(match kind {
            Kind::Server => SERVER_ATTRIBUTES,
            Kind::Client => CLIENT_ATTRIBUTES,
        });
        Recording {
            trace_id,
            span_id,
            parent,
            trace_state: None,
            kind,
            name: Cow::Borrowed(""),
            start,
            end: start,
            error: false,
            attributes: buffer,
            children: Vec::new(),
            child_spans: 0,
        }
    }

    /// The attributes' buffer, for [`Recording::new_in`].
    pub fn into_buffer(self) -> Vec<u8> {
        self.attributes
    }

    /// Adds a text attribute. Each is set once per span (the request
    /// path knows which it has written): nothing searches for a name.
    pub fn set_str(&mut self, key: &str, value: &str) {
        otlp::put_key_value(
            field::span::ATTRIBUTES,
            key,
            Any::Text(value.as_bytes()),
            &mut self.attributes,
        );
    }

    /// Adds a text attribute whose bytes are ASCII by construction (an
    /// address written digit by digit, a request id): without the UTF-8
    /// check, which costs as much as the writing.
    pub fn set_ascii(&mut self, key: &str, value: &[u8]) {
        debug_assert!(value.is_ascii(), "{key}: {value:?} is not ASCII");
        otlp::put_key_value(
            field::span::ATTRIBUTES,
            key,
            Any::Text(value),
            &mut self.attributes,
        );
    }

    /// Adds an integer attribute (as [`Recording::set_str`]).
    pub fn set_int(&mut self, key: &str, value: i64) {
        otlp::put_key_value(
            field::span::ATTRIBUTES,
            key,
            Any::Int(value),
            &mut self.attributes,
        );
    }

    /// `method` as a name: the standard ones without an allocation.
    pub fn method_name(method: &http::Method) -> Cow<'static, str> {
        const STANDARD: [&str; 9] = [
            "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "CONNECT", "TRACE",
        ];
        match STANDARD.iter().find(|name| **name == method.as_str()) {
            Some(name) => Cow::Borrowed(name),
            None => Cow::Owned(method.as_str().to_owned()),
        }
    }

    /// The attributes, encoded: `Span.attributes` fields, one after the
    /// other.
    pub fn attributes(&self) -> &[u8] {
        &self.attributes
    }

    /// Writes `child`, which has ended, and the spans under it as spans
    /// under this one. A child without a `tracestate` of its own is
    /// exported with this span's (a request's attempts carry the
    /// request's); `child`'s attributes can be cleared and used again.
    pub fn add_child(&mut self, child: &Recording) {
        let inherited = self.trace_state.as_deref().unwrap_or("");
        put_spans(child, inherited, &mut self.children);
        self.child_spans += child.spans();
    }

    /// This span and those under it.
    pub fn spans(&self) -> usize {
        1 + self.child_spans
    }
}

/// W3C's `sampled` trace flag: every recorded span is sampled.
pub const SAMPLED: u32 = 0x01;
/// OTLP's span flags: whether the parent is remote is known (bit 8) ...
pub const HAS_IS_REMOTE: u32 = 0x100;
/// ... and it is (bit 9).
pub const IS_REMOTE: u32 = 0x200;

/// The `tracestate` a span is exported with: its own or, without one, its
/// parent's (as a span started under another has).
fn trace_state<'a>(recording: &'a Recording, inherited: &'a str) -> &'a str {
    recording.trace_state.as_deref().unwrap_or(inherited)
}

/// OTLP's span flags: sampled, and whether the parent is remote. A server
/// span's parent came with the request: it is remote. A client span's
/// parent is the server span, here.
fn flags(recording: &Recording) -> u32 {
    match (recording.kind, recording.parent) {
        (Kind::Server, Some(_)) => SAMPLED | HAS_IS_REMOTE | IS_REMOTE,
        _ => SAMPLED | HAS_IS_REMOTE,
    }
}

fn kind(recording: &Recording) -> i32 {
    match recording.kind {
        Kind::Server => SpanKind::Server as i32,
        Kind::Client => SpanKind::Client as i32,
    }
}

/// The status: code `ERROR` when the span failed, else unset; no message.
fn status_code(recording: &Recording) -> i32 {
    if recording.error {
        StatusCode::Error as i32
    } else {
        StatusCode::Unset as i32
    }
}

/// A `Span` message's length: its attributes are written already.
fn span_len(recording: &Recording, trace_state: &str) -> usize {
    use field::span;
    bytes_len(span::TRACE_ID, &recording.trace_id.0)
        + bytes_len(span::SPAN_ID, &recording.span_id.0)
        + string_len(span::TRACE_STATE, trace_state)
        + recording
            .parent
            .map_or(0, |parent| bytes_len(span::PARENT_SPAN_ID, &parent.0))
        + string_len(span::NAME, &recording.name)
        + int32_len(span::KIND, kind(recording))
        + fixed64_len(span::START_TIME_UNIX_NANO, recording.start)
        + fixed64_len(span::END_TIME_UNIX_NANO, recording.end)
        + recording.attributes().len()
        + delimited_len(span::STATUS, status_len(recording))
        + fixed32_len(span::FLAGS, flags(recording))
}

/// A `Status` message's length.
fn status_len(recording: &Recording) -> usize {
    int32_len(field::status::CODE, status_code(recording))
}

/// Appends `recording` and, after it, the spans under it to `out` as
/// `ScopeSpans.spans` entries. `inherited`: the `tracestate` of the span
/// it is a child of ("" for a request's own).
pub fn put_spans(recording: &Recording, inherited: &str, out: &mut Vec<u8>) {
    use field::span;
    let trace_state = trace_state(recording, inherited);
    let len = span_len(recording, trace_state);
    out.reserve(delimited_len(field::scope_spans::SPANS, len));
    put_delimited(field::scope_spans::SPANS, len, out);
    put_bytes(span::TRACE_ID, &recording.trace_id.0, out);
    put_bytes(span::SPAN_ID, &recording.span_id.0, out);
    put_string(span::TRACE_STATE, trace_state, out);
    if let Some(parent) = recording.parent {
        put_bytes(span::PARENT_SPAN_ID, &parent.0, out);
    }
    put_string(span::NAME, &recording.name, out);
    put_int32(span::KIND, kind(recording), out);
    put_fixed64(span::START_TIME_UNIX_NANO, recording.start, out);
    put_fixed64(span::END_TIME_UNIX_NANO, recording.end, out);
    out.extend_from_slice(recording.attributes());
    put_delimited(span::STATUS, status_len(recording), out);
    put_int32(field::status::CODE, status_code(recording), out);
    put_fixed32(span::FLAGS, flags(recording), out);
    out.extend_from_slice(&recording.children);
}
