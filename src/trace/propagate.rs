//! The trace as the upstream gets it from a sampled request: each attempt
//! is a `CLIENT` span, and its id is the parent the upstream's request
//! names (`traceparent`, and B3 when asked for). The incoming headers of
//! the propagators sluice writes are removed first, so the upstream sees
//! one parent, sluice's; `tracestate` goes on as it came.

use std::cell::Cell;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use http::header::{HeaderMap, HeaderValue};
use smallvec::SmallVec;

use super::context::{self, X_B3_SAMPLED, X_B3_SPAN_ID, X_B3_TRACE_ID};
use super::ids::{SpanId, TraceId};
use super::span::{Kind, Recording};
use crate::clock::Nanos;
use crate::config::Propagators;
use crate::key::client_ip;

/// A sampled request's trace on its way upstream. Its methods are cold and
/// out of line: only a sampled request calls them, and the code of the
/// request path they are called from stays as small as it was without
/// tracing (docs/observability.md, "What tracing costs").
#[derive(Debug)]
pub struct Outgoing {
    trace_id: TraceId,
    propagators: Propagators,
    /// The current attempt's span id: what the next head written names.
    attempt: AtomicU64,
    /// The attempts made, in order (one, unless retried).
    attempts: Mutex<SmallVec<[Attempt; 1]>>,
}

/// One attempt at a server of the pool.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    span_id: SpanId,
    server: SocketAddr,
    start: Nanos,
    end: Nanos,
    /// The answer's status, or the kind of failure.
    outcome: Option<Result<u16, &'static str>>,
}

impl Outgoing {
    /// The trace `trace_id` carried on under the propagators `propagators`;
    /// removes what the client sent of theirs from `headers`.
    pub fn new(trace_id: TraceId, propagators: Propagators, headers: &mut HeaderMap) -> Outgoing {
        if propagators.tracecontext {
            headers.remove(&context::TRACEPARENT);
        }
        if propagators.reads_b3() {
            for name in &context::B3_FIELDS {
                headers.remove(name);
            }
        }
        Outgoing {
            trace_id,
            propagators,
            attempt: AtomicU64::new(0),
            attempts: Mutex::new(SmallVec::new()),
        }
    }

    /// An attempt at `server` begins at `now`: the head written next
    /// names its span.
    #[cold]
    #[inline(never)]
    pub fn begin_attempt(&self, server: SocketAddr, now: Nanos) {
        let span_id = SpanId::random();
        self.attempt
            .store(u64::from_be_bytes(span_id.0), Ordering::Relaxed);
        self.attempts().push(Attempt {
            span_id,
            server,
            start: now,
            end: now,
            outcome: None,
        });
    }

    /// The attempt begun last ended at `now` with `outcome`: a status, or
    /// the kind of failure (`connect`, `timeout`, …).
    #[cold]
    #[inline(never)]
    pub fn end_attempt(&self, outcome: Result<u16, &'static str>, now: Nanos) {
        if let Some(attempt) = self.attempts().last_mut() {
            attempt.end = now;
            attempt.outcome = Some(outcome);
        }
    }

    fn attempts(&self) -> std::sync::MutexGuard<'_, SmallVec<[Attempt; 1]>> {
        self.attempts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn span_id(&self) -> SpanId {
        SpanId(self.attempt.load(Ordering::Relaxed).to_be_bytes())
    }

    /// The trace fields of the current attempt, as HTTP/1.1 lines.
    #[cold]
    #[inline(never)]
    pub fn write_lines(&self, out: &mut Vec<u8>) {
        let span_id = self.span_id();
        if self.propagators.tracecontext {
            line(
                out,
                b"traceparent",
                &context::traceparent(&self.trace_id, &span_id),
            );
        }
        if self.propagators.b3 {
            line(out, b"b3", &context::b3(&self.trace_id, &span_id));
        }
        if self.propagators.b3multi {
            line(
                out,
                b"x-b3-traceid",
                &context::hex::<16, 32>(&self.trace_id.0),
            );
            line(out, b"x-b3-spanid", &context::hex::<8, 16>(&span_id.0));
            line(out, b"x-b3-sampled", b"1");
        }
    }

    /// The trace fields of the current attempt, into a header map (HTTP/2).
    #[cold]
    #[inline(never)]
    pub fn write_map(&self, headers: &mut HeaderMap) {
        let span_id = self.span_id();
        let value = |bytes: &[u8]| HeaderValue::from_bytes(bytes).expect("hex and dashes");
        if self.propagators.tracecontext {
            let text = context::traceparent(&self.trace_id, &span_id);
            headers.insert(context::TRACEPARENT, value(&text));
        }
        if self.propagators.b3 {
            headers.insert(context::B3, value(&context::b3(&self.trace_id, &span_id)));
        }
        if self.propagators.b3multi {
            let trace = context::hex::<16, 32>(&self.trace_id.0);
            headers.insert(X_B3_TRACE_ID, value(&trace));
            headers.insert(X_B3_SPAN_ID, value(&context::hex::<8, 16>(&span_id.0)));
            headers.insert(X_B3_SAMPLED, HeaderValue::from_static("1"));
        }
    }

    /// The attempts made so far, as `CLIENT` spans under `parent`, for the
    /// pool `pool`.
    #[cold]
    #[inline(never)]
    pub fn add_spans(&self, parent: &mut Recording, method: &http::Method, pool: &str) {
        let attempts = std::mem::take(&mut *self.attempts());
        let mut buffer = ATTEMPT_ATTRIBUTES.take();
        for (number, attempt) in attempts.into_iter().enumerate() {
            let mut span = Recording::new_in(
                buffer,
                Kind::Client,
                self.trace_id,
                attempt.span_id,
                Some(parent.span_id),
                attempt.start,
            );
            span.name = Recording::method_name(method);
            span.end = attempt.end;
            span.set_str("http.request.method", method.as_str());
            match attempt.server.ip() {
                // Digit by digit: `fmt` costs several times as much.
                IpAddr::V4(v4) => {
                    let mut text = [0; client_ip::IPV4_TEXT_MAX];
                    span.set_ascii("server.address", client_ip::ipv4_bytes(v4, &mut text));
                }
                v6 => span.set_str("server.address", &v6.to_string()),
            }
            span.set_int("server.port", i64::from(attempt.server.port()));
            span.set_str("sluice.upstream", pool);
            span.set_int("sluice.attempt", number as i64 + 1);
            match attempt.outcome {
                Some(Ok(status)) => {
                    span.set_int("http.response.status_code", i64::from(status));
                    if status >= 500 {
                        span.error = true;
                        span.set_str("error.type", itoa::Buffer::new().format(status));
                    }
                }
                Some(Err(kind)) => {
                    span.error = true;
                    span.set_str("error.type", kind);
                }
                // Dropped before it ended (the client left).
                None => span.set_str("error.type", "cancelled"),
            }
            parent.add_child(&span);
            buffer = span.into_buffer();
        }
        ATTEMPT_ATTRIBUTES.set(buffer);
    }
}

thread_local! {
    /// The attributes' buffer of the thread's attempt spans: each is
    /// written into its request's span as it is added, and its buffer
    /// serves the next (an attempt's attributes are a few short texts).
    static ATTEMPT_ATTRIBUTES: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}
