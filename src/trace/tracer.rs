//! What the request path holds of tracing: the [`Tracer`] of the running
//! config (sampler, propagators, exporter), and a request's [`Span`], which
//! is nothing unless the request was sampled. An unsampled request reads
//! its trace headers only if their parent would be followed or its peer is
//! trusted, draws 64 random bits if it has no such parent, and that is all
//! (docs/observability.md, "What tracing costs").

use std::borrow::Cow;
use std::sync::Arc;

use http::Request;

use super::context::{self, Parent};
use super::export::Exporter;
use super::ids::SpanId;
use super::sample::{Sampled, Sampler};
use super::span::{Kind, Recording};
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::config::{Propagators, TracingConfig};
use crate::metrics::TraceSpans;

/// Tracing as the running config has it.
#[derive(Debug)]
pub struct Tracer {
    pub sampler: Sampler,
    pub propagators: Propagators,
    exporter: Arc<Exporter>,
    clock: ProxyClock,
}

impl Tracer {
    /// The tracer for `config`. The exporter of `previous` (the tracer a
    /// reload replaces) is kept when it sends where `config` says, so
    /// that a reload loses no queued span; otherwise a new one starts (on
    /// the current runtime) and the old one exports what it holds and ends
    /// with its last request.
    pub fn new(
        config: &TracingConfig,
        previous: Option<&Tracer>,
        counters: &TraceSpans,
        clock: ProxyClock,
    ) -> Tracer {
        let exporter = match previous {
            Some(previous) if *previous.exporter.settings() == config.export => {
                Arc::clone(&previous.exporter)
            }
            _ => Exporter::start(&config.export, counters.clone()),
        };
        Tracer {
            sampler: Sampler::new(config.sample, config.parent),
            propagators: config.propagators,
            exporter,
            clock,
        }
    }

    /// A request's span: recording when the request is sampled, else
    /// [`Span::none`]. `trusted`: the peer is one of `trusted_proxies`.
    /// Not inlined: the request's own future stays small enough for the
    /// server to inline it, tracing on or off.
    #[inline(never)]
    pub fn begin<B>(self: &Arc<Self>, request: &Request<B>, trusted: bool, started: Nanos) -> Span {
        match self.sample(request.headers(), trusted) {
            Sampled::No => Span::none(),
            sampled => self.record(request, sampled, started),
        }
    }

    #[cold]
    fn record<B>(self: &Arc<Self>, request: &Request<B>, sampled: Sampled, started: Nanos) -> Span {
        let (trace_id, parent) = match sampled {
            Sampled::Child(Parent {
                trace_id, span_id, ..
            }) => (trace_id, Some(span_id)),
            Sampled::Root(trace_id) => (trace_id, None),
            Sampled::No => return Span::none(),
        };
        let mut recording =
            Recording::new(Kind::Server, trace_id, SpanId::random(), parent, started);
        if parent.is_some() && self.propagators.tracecontext {
            recording.trace_state = request
                .headers()
                .get(&context::TRACESTATE)
                .and_then(|state| state.to_str().ok())
                .map(Box::from);
        }
        describe_request(&mut recording, request);
        Span(Some(Box::new(Live {
            recording,
            tracer: Arc::clone(self),
        })))
    }

    /// A call's `SERVER` span when it is sampled (a rate limit service
    /// call: its trace headers are in `headers`), begun now; hand it to
    /// [`Tracer::finish`] when the call is answered.
    pub fn begin_call(
        &self,
        headers: &http::HeaderMap,
        trusted: bool,
        name: &'static str,
    ) -> Option<Box<Recording>> {
        let (trace_id, parent) = match self.sample(headers, trusted) {
            Sampled::No => return None,
            Sampled::Child(parent) => (parent.trace_id, Some(parent.span_id)),
            Sampled::Root(trace_id) => (trace_id, None),
        };
        let mut recording =
            Recording::new(Kind::Server, trace_id, SpanId::random(), parent, self.now());
        recording.name = Cow::Borrowed(name);
        Some(Box::new(recording))
    }

    /// Whether a request or call with trace fields `headers`, from a peer
    /// `trusted` or not, is sampled. A client's parent that would not be
    /// followed is not even read.
    #[inline]
    fn sample(&self, headers: &http::HeaderMap, trusted: bool) -> Sampled {
        let parent = match self.sampler.reads_parent(trusted) {
            true => context::extract(headers, self.propagators),
            false => None,
        };
        self.sampler.decide(parent, trusted)
    }

    /// Now, on the clock spans are timed by.
    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// Ends `recording` now and hands it to the exporter.
    #[inline(never)]
    pub fn finish(&self, mut recording: Recording) {
        recording.end = self.clock.now();
        self.exporter.submit(recording);
    }

    /// Exports what is queued, waiting `within` at most: at shutdown.
    pub async fn flush(&self, within: std::time::Duration) {
        self.exporter.flush(within).await;
    }
}

/// HTTP's semantic conventions for what the request asked.
fn describe_request<B>(recording: &mut Recording, request: &Request<B>) {
    recording.set_str("http.request.method", request.method().as_str());
    recording.set_str("url.path", request.uri().path());
    let version = match request.version() {
        http::Version::HTTP_10 => "1.0",
        http::Version::HTTP_2 => "2",
        http::Version::HTTP_3 => "3",
        _ => "1.1",
    };
    recording.set_str("network.protocol.version", version);
    if let Some(agent) = request
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|agent| agent.to_str().ok())
    {
        recording.set_str("user_agent.original", agent);
    }
}

/// A request's span: `None` when it is not sampled (the common case when
/// a ratio samples), so that carrying it costs a null pointer and dropping
/// it one test. Rides on the response body, and ends when the body is sent
/// or dropped (the drop of [`Live`]).
#[derive(Debug, Default)]
pub struct Span(Option<Box<Live>>);

/// A sampled request's span in the making, and where it goes when it ends
/// (its [`Span`]'s drop).
#[derive(Debug)]
pub struct Live {
    recording: Recording,
    tracer: Arc<Tracer>,
}

impl Span {
    /// Not sampled, or tracing off.
    pub const fn none() -> Span {
        Span(None)
    }

    /// Whether the request is not sampled.
    #[inline]
    pub fn is_none(&self) -> bool {
        self.0.is_none()
    }

    /// The span being recorded, `None` when not sampled.
    #[inline]
    pub fn recording(&mut self) -> Option<&mut Recording> {
        self.0.as_deref_mut().map(|live| &mut live.recording)
    }

    /// The propagators of the tracer that sampled it.
    #[inline]
    pub fn propagators(&self) -> Option<Propagators> {
        self.0.as_ref().map(|live| live.tracer.propagators)
    }
}

impl Drop for Span {
    /// The span ended: to the exporter. Inlined, so that an unsampled
    /// span's drop is one test of its pointer, not a call.
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(live) = self.0.take() {
            live.end();
        }
    }
}

impl Live {
    // Boxed: the caller, every response body's drop, passes a pointer and
    // moves nothing.
    #[allow(clippy::boxed_local)]
    #[cold]
    #[inline(never)]
    fn end(self: Box<Live>) {
        let Live { recording, tracer } = *self;
        tracer.finish(recording);
    }
}
