//! A span as sluice records it on the request path: plain fields and a
//! list of attributes with static names, turned into OTLP's messages only
//! by the exporter, off the request path (`trace/export.rs`).

use std::sync::Arc;

use super::ids::{SpanId, TraceId};
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

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Static(&'static str),
    Shared(Arc<str>),
    Owned(String),
    Int(i64),
}

/// One attribute: its name is one of the conventions' or sluice's
/// (docs/observability.md lists them).
#[derive(Debug, Clone, PartialEq)]
pub struct Attribute {
    pub key: &'static str,
    pub value: Value,
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
    pub name: String,
    /// Unix nanoseconds.
    pub start: Nanos,
    pub end: Nanos,
    /// Status `ERROR` (a 5xx answer, a failed attempt); else unset.
    pub error: bool,
    pub attributes: Vec<Attribute>,
    pub children: Vec<Recording>,
}

/// Attributes a request's span has room for before its list grows.
const ATTRIBUTES: usize = 20;

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
            name: String::new(),
            start,
            end: start,
            error: false,
            attributes: Vec::with_capacity(ATTRIBUTES),
            children: Vec::new(),
        }
    }

    /// Adds an attribute. Each is set once per span (the request path
    /// knows which it has written), so this only pushes: a search by name
    /// was the largest cost of recording a span.
    pub fn set(&mut self, key: &'static str, value: Value) {
        debug_assert!(self.get(key).is_none(), "{key} set twice");
        self.attributes.push(Attribute { key, value });
    }

    /// The method as a value: the standard ones without an allocation.
    pub fn method(method: &http::Method) -> Value {
        const STANDARD: [&str; 9] = [
            "GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "CONNECT", "TRACE",
        ];
        match STANDARD.iter().find(|name| **name == method.as_str()) {
            Some(name) => Value::Static(name),
            None => Value::Owned(method.as_str().to_owned()),
        }
    }

    pub fn set_str(&mut self, key: &'static str, value: &str) {
        self.set(key, Value::Owned(value.to_owned()));
    }

    pub fn set_int(&mut self, key: &'static str, value: i64) {
        self.set(key, Value::Int(value));
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.attributes
            .iter()
            .find(|a| a.key == key)
            .map(|a| &a.value)
    }

    /// This span and those under it.
    pub fn spans(&self) -> usize {
        1 + self.children.iter().map(Recording::spans).sum::<usize>()
    }
}
