//! A span as sluice records it on the request path: plain fields, and its
//! attributes already in OTLP's bytes, written as they are set into one
//! buffer (`trace/otlp.rs`). The exporter writes the rest of the span
//! around them, off the request path (`trace/export.rs`): setting an
//! attribute copies its text once and allocates nothing, where a list of
//! values cost an allocation per value and their encoding again later.

use std::borrow::Cow;

use super::ids::{SpanId, TraceId};
use super::otlp::{self, field, Any};
use crate::clock::Nanos;

/// OpenTelemetry's span kinds sluice records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kind {
    /// The request sluice answered (or a rate limit service call).
    #[default]
    Server,
    /// One attempt at the upstream.
    Client,
}

/// A recorded span and the spans recorded under it (a request's upstream
/// attempts). Every recorded span is sampled. The default is an empty
/// placeholder (all-zero ids), never exported.
#[derive(Debug, Clone, Default)]
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
    pub children: Vec<Recording>,
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
            attributes: Vec::with_capacity(match kind {
                Kind::Server => SERVER_ATTRIBUTES,
                Kind::Client => CLIENT_ATTRIBUTES,
            }),
            children: Vec::new(),
        }
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

    /// This span and those under it.
    pub fn spans(&self) -> usize {
        1 + self.children.iter().map(Recording::spans).sum::<usize>()
    }
}
