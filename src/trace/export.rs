//! The span exporter: a finished request's spans go to an OpenTelemetry
//! collector over OTLP/HTTP (protobuf), batched by a task of their own, off
//! the request path (docs/observability.md).
//!
//! Why it is built this way:
//!
//! - A request hands its [`Recording`] over and goes on ([`Exporter::submit`]):
//!   no lock, no await, no allocation, just an atomic add and a channel
//!   push. Its attributes are in OTLP's bytes already (`trace/span.rs`);
//!   the task writes each span around them into the batch's buffer as it
//!   takes the recording, and posts a batch of up to `batch` spans at a
//!   time, at most `delay` after the batch's first span. The buffer is kept
//!   from one batch to the next.
//! - The spans waiting are bounded, counted in spans (`queue`), not in
//!   requests: a recording that would take the queue over its size is
//!   dropped whole and counted (`sluice_trace_spans_total{result="dropped"}`).
//!   So a collector that hangs or is gone costs memory up to the queue and
//!   never slows a request: exports are sequential, each within `timeout`,
//!   and while one waits the queue fills and then drops.
//! - A collector's failure (refused, timed out, not a 2xx) is counted
//!   (`result="failed"`) and logged on one line per export, never retried:
//!   spans are diagnostics, and a retry would hold the queue longer.
//! - The headers sent to the collector may hold an API key: their values
//!   are never logged, nor shown by `Debug` (only the endpoint and the
//!   status or error are).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rand::RngCore;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::otlp::{
    delimited_len, field, key_value_len, put_delimited, put_key_value, put_string, string_len, Any,
};
use super::span::{put_spans, Recording};
use crate::config::TracingExport;
use crate::metrics::TraceSpans;

/// What the request path and [`Exporter::flush`] send the task.
#[derive(Debug)]
enum Message {
    Spans(Recording),
    /// Answered once everything sent before it was exported (or failed).
    Flush(oneshot::Sender<()>),
}

/// The handle on the export task. When the last one is dropped, the task
/// exports what is queued and ends.
#[derive(Debug)]
pub struct Exporter {
    settings: TracingExport,
    counters: TraceSpans,
    /// Spans sent to the task and not yet taken into a batch.
    queued: Arc<AtomicUsize>,
    sender: mpsc::UnboundedSender<Message>,
}

impl Exporter {
    /// Starts the export task on the current tokio runtime (call from
    /// inside one).
    pub fn start(settings: &TracingExport, counters: TraceSpans) -> Arc<Exporter> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let task = Task {
            settings: settings.clone(),
            counters: counters.clone(),
            queued: queued.clone(),
            client: Client::builder(TokioExecutor::new()).build(connector),
            preamble: Preamble::new(&resource(&settings.resource, &instance_id())),
        };
        tokio::spawn(task.run(receiver));
        Arc::new(Exporter {
            settings: settings.clone(),
            counters,
            queued,
            sender,
        })
    }

    /// Hands a finished request's spans (the recording and all its
    /// children) to the export task. Never blocks: when the spans waiting
    /// would exceed `queue`, the recording is dropped and counted.
    pub fn submit(&self, recording: Recording) {
        let spans = recording.spans();
        let limit = self.settings.queue;
        let admitted = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                queued.checked_add(spans).filter(|&total| total <= limit)
            })
            .is_ok();
        if !admitted {
            self.counters.dropped.inc_by(spans as u64);
            return;
        }
        if self.sender.send(Message::Spans(recording)).is_err() {
            // The task is gone (it panicked): nothing will take them.
            self.queued.fetch_sub(spans, Ordering::AcqRel);
            self.counters.dropped.inc_by(spans as u64);
        }
    }

    /// Exports what is queued now, waiting `within` at most (used at
    /// shutdown).
    pub async fn flush(&self, within: Duration) {
        let (ack, done) = oneshot::channel();
        if self.sender.send(Message::Flush(ack)).is_ok() {
            let _ = tokio::time::timeout(within, done).await;
        }
    }

    /// The settings it was started with (a reload keeps an exporter whose
    /// settings are unchanged).
    pub fn settings(&self) -> &TracingExport {
        &self.settings
    }
}

/// The export task's state.
struct Task {
    settings: TracingExport,
    counters: TraceSpans,
    queued: Arc<AtomicUsize>,
    client: Client<HttpConnector, Full<Bytes>>,
    /// The resource and the scope, encoded.
    preamble: Preamble,
}

/// The spans of one export, encoded as they were taken.
#[derive(Default)]
struct Batch {
    /// `ScopeSpans.spans` entries ([`put_spans`]).
    encoded: Vec<u8>,
    spans: usize,
}

impl Task {
    /// Batches and exports until every [`Exporter`] is dropped, then
    /// exports what was queued and ends.
    async fn run(self, mut receiver: mpsc::UnboundedReceiver<Message>) {
        let limit = self.settings.batch.max(1);
        // A recording that would have taken a batch over `batch` spans
        // opens the next one.
        let mut carried: Option<Recording> = None;
        // One buffer for every batch: it grows to a batch's size once.
        let mut batch = Batch::default();
        loop {
            match carried.take() {
                Some(recording) => self.take(&mut batch, recording),
                None => match receiver.recv().await {
                    None => return,
                    Some(Message::Flush(ack)) => {
                        let _ = ack.send(());
                        continue;
                    }
                    Some(Message::Spans(recording)) => self.take(&mut batch, recording),
                },
            }
            let deadline = Instant::now() + self.settings.delay;
            let mut flushed = None;
            let mut closed = false;
            while batch.spans < limit {
                match tokio::time::timeout_at(deadline, receiver.recv()).await {
                    Err(_elapsed) => break,
                    Ok(None) => {
                        closed = true;
                        break;
                    }
                    Ok(Some(Message::Flush(ack))) => {
                        flushed = Some(ack);
                        break;
                    }
                    Ok(Some(Message::Spans(recording))) => {
                        if batch.spans + recording.spans() > limit {
                            carried = Some(recording);
                            break;
                        }
                        self.take(&mut batch, recording);
                    }
                }
            }
            self.export(&mut batch).await;
            if let Some(ack) = flushed {
                let _ = ack.send(());
            }
            if closed {
                return;
            }
        }
    }

    /// Takes a recording off the queue into `batch`, encoded.
    fn take(&self, batch: &mut Batch, recording: Recording) {
        let spans = recording.spans();
        self.queued.fetch_sub(spans, Ordering::AcqRel);
        batch.spans += spans;
        put_spans(&recording, "", &mut batch.encoded);
    }

    /// One POST to the collector of what `batch` holds, counted and, when
    /// it fails, logged; `batch` is left empty.
    async fn export(&self, batch: &mut Batch) {
        let spans = std::mem::take(&mut batch.spans) as u64;
        let body = encode(&self.preamble, &batch.encoded);
        batch.encoded.clear();
        let mut request = Request::post(self.settings.endpoint.clone())
            .body(Full::new(Bytes::from(body)))
            .expect("a valid endpoint URI makes a valid request");
        let headers = request.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            http::HeaderValue::from_static("application/x-protobuf"),
        );
        for (name, value) in &self.settings.headers {
            headers.append(name.clone(), value.clone());
        }
        let exchange = async {
            let response = self.client.request(request).await?;
            let status = response.status();
            // Read to the end, so the connection goes back to the pool.
            let _ = response.into_body().collect().await;
            Ok::<StatusCode, hyper_util::client::legacy::Error>(status)
        };
        let failure = match tokio::time::timeout(self.settings.timeout, exchange).await {
            Ok(Ok(status)) if status.is_success() => {
                self.counters.exported.inc_by(spans);
                return;
            }
            Ok(Ok(status)) => format!("answered {status}"),
            Ok(Err(error)) => error_chain(&error),
            Err(_elapsed) => format!("no answer within {:?}", self.settings.timeout),
        };
        // The endpoint and what went wrong; never the headers' values.
        tracing::warn!(
            endpoint = %self.settings.endpoint,
            spans,
            error = %failure,
            "trace export failed; its spans are lost"
        );
        self.counters.failed.inc_by(spans);
    }
}

/// An error and its sources, on one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let chain = std::iter::successors(Some(error), |error| error.source());
    chain
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

/// `service.instance.id`: 16 random bytes as 32 hex digits, one per
/// exporter (a reload that keeps the exporter keeps it).
fn instance_id() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    hex(&bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The resource's attributes: the settings' pairs and the instance id
/// (unless the settings name one already: a key appears once).
fn resource<'a>(pairs: &'a [(String, String)], instance: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut attributes: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect();
    if !pairs.iter().any(|(key, _)| key == "service.instance.id") {
        attributes.push(("service.instance.id", instance));
    }
    attributes
}

/// The parts of every export's body that never change, encoded once (when
/// the exporter starts).
struct Preamble {
    /// `ResourceSpans.resource`, key and length included.
    resource: Vec<u8>,
    /// `ScopeSpans.scope`, key and length included: name "sluice" and
    /// sluice's version.
    scope: Vec<u8>,
}

impl Preamble {
    fn new(attributes: &[(&str, &str)]) -> Preamble {
        let body = attributes
            .iter()
            .map(|&(key, value)| {
                delimited_len(
                    field::resource::ATTRIBUTES,
                    key_value_len(key, Any::Text(value.as_bytes())),
                )
            })
            .sum();
        let mut resource = Vec::with_capacity(delimited_len(field::resource_spans::RESOURCE, body));
        put_delimited(field::resource_spans::RESOURCE, body, &mut resource);
        for &(key, value) in attributes {
            put_key_value(
                field::resource::ATTRIBUTES,
                key,
                Any::Text(value.as_bytes()),
                &mut resource,
            );
        }
        debug_assert_eq!(resource.capacity(), resource.len());

        let (name, version) = ("sluice", env!("CARGO_PKG_VERSION"));
        let body =
            string_len(field::scope::NAME, name) + string_len(field::scope::VERSION, version);
        let mut scope = Vec::with_capacity(delimited_len(field::scope_spans::SCOPE, body));
        put_delimited(field::scope_spans::SCOPE, body, &mut scope);
        put_string(field::scope::NAME, name, &mut scope);
        put_string(field::scope::VERSION, version, &mut scope);
        debug_assert_eq!(scope.capacity(), scope.len());
        Preamble { resource, scope }
    }
}

/// One `ExportTraceServiceRequest`, encoded: one resource, one scope, and
/// `spans`, the batch's `ScopeSpans.spans` entries as [`put_spans`] wrote
/// them.
fn encode(preamble: &Preamble, spans: &[u8]) -> Vec<u8> {
    let scope_spans = preamble.scope.len() + spans.len();
    let resource_spans =
        preamble.resource.len() + delimited_len(field::resource_spans::SCOPE_SPANS, scope_spans);
    let total = delimited_len(field::request::RESOURCE_SPANS, resource_spans);
    let mut out = Vec::with_capacity(total);
    put_delimited(field::request::RESOURCE_SPANS, resource_spans, &mut out);
    out.extend_from_slice(&preamble.resource);
    put_delimited(field::resource_spans::SCOPE_SPANS, scope_spans, &mut out);
    out.extend_from_slice(&preamble.scope);
    out.extend_from_slice(spans);
    debug_assert_eq!(out.len(), total);
    out
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::sync::Mutex;

    use http::{HeaderMap, HeaderName, HeaderValue, Response};
    use hyper::body::Incoming;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use prometheus::IntCounter;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{
        any_value, AnyValue, InstrumentationScope, KeyValue,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
    use opentelemetry_proto::tonic::trace::v1::status::StatusCode as ProtoStatus;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
    use proptest::prelude::*;
    use prost::Message as _;

    use super::*;
    use crate::trace::ids::{SpanId, TraceId};
    use crate::trace::span::{Kind, HAS_IS_REMOTE, IS_REMOTE, SAMPLED};

    /// An attribute's value as the tests write it.
    #[derive(Debug, Clone)]
    enum Value {
        Str(String),
        /// Set through `set_ascii`.
        Ascii(String),
        Int(i64),
    }

    fn set(recording: &mut Recording, key: &str, value: &Value) {
        match value {
            Value::Str(text) => recording.set_str(key, text),
            Value::Ascii(text) => recording.set_ascii(key, text.as_bytes()),
            Value::Int(number) => recording.set_int(key, *number),
        }
    }

    fn proto_value(value: &Value) -> any_value::Value {
        match value {
            Value::Str(text) | Value::Ascii(text) => any_value::Value::StringValue(text.clone()),
            Value::Int(number) => any_value::Value::IntValue(*number),
        }
    }

    /// What a test collector received: each request's headers and spans.
    #[derive(Default)]
    struct Received {
        requests: Vec<(HeaderMap, ExportTraceServiceRequest)>,
        /// Told of each post.
        arrived: Arc<tokio::sync::Notify>,
    }

    /// A collector on 127.0.0.1 that decodes every post and answers
    /// `status`.
    async fn collector(status: StatusCode) -> (SocketAddr, Arc<Mutex<Received>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Received::default()));
        let kept = received.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = kept.clone();
                let service = service_fn(move |request: Request<Incoming>| {
                    let kept = kept.clone();
                    async move {
                        let headers = request.headers().clone();
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        let decoded = ExportTraceServiceRequest::decode(body).unwrap();
                        let mut kept = kept.lock().unwrap();
                        kept.requests.push((headers, decoded));
                        kept.arrived.notify_one();
                        drop(kept);
                        let mut response = Response::new(Full::new(Bytes::new()));
                        *response.status_mut() = status;
                        Ok::<_, Infallible>(response)
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        (addr, received)
    }

    /// A collector that accepts connections and reads them, never
    /// answering; tells of each connection's first bytes.
    async fn hanging() -> (SocketAddr, Arc<tokio::sync::Notify>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let posts = Arc::new(tokio::sync::Notify::new());
        let counted = posts.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    let mut first = true;
                    while let Ok(read) = stream.read(&mut buffer).await {
                        if read == 0 {
                            break;
                        }
                        if std::mem::take(&mut first) {
                            counted.notify_one();
                        }
                    }
                });
            }
        });
        (addr, posts)
    }

    /// A log line writer into a shared buffer.
    struct Log(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Log {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn settings(addr: SocketAddr) -> TracingExport {
        TracingExport {
            endpoint: format!("http://{addr}/v1/traces").parse().unwrap(),
            headers: vec![(
                HeaderName::from_static("x-api-key"),
                HeaderValue::from_static("k3y"),
            )],
            resource: vec![("service.name".to_owned(), "edge".to_owned())],
            queue: 2048,
            batch: 512,
            delay: Duration::from_millis(20),
            timeout: Duration::from_secs(5),
        }
    }

    fn counters() -> TraceSpans {
        let counter = |name| IntCounter::new(name, "test").unwrap();
        TraceSpans {
            exported: counter("exported"),
            dropped: counter("dropped"),
            failed: counter("failed"),
        }
    }

    /// A span and the spans under it, as a test describes them: made into
    /// a [`Recording`] by [`Tree::build`] (each child added once built, as
    /// the request path adds its attempts), and into the generated types'
    /// spans by [`oracle_spans`].
    #[derive(Debug, Clone)]
    struct Tree {
        span: Recording,
        children: Vec<Tree>,
    }

    impl Tree {
        fn leaf(span: Recording) -> Tree {
            Tree {
                span,
                children: Vec::new(),
            }
        }

        fn build(&self) -> Recording {
            let mut recording = self.span.clone();
            for child in &self.children {
                recording.add_child(&child.build());
            }
            recording
        }
    }

    /// A server span with `children` client spans.
    fn recording(children: usize) -> Tree {
        let trace_id = TraceId([7; 16]);
        let mut server = Recording::new(Kind::Server, trace_id, SpanId([1; 8]), None, 1_000);
        server.name = "GET /items".into();
        server.end = 9_000;
        let children = (0..children)
            .map(|index| {
                let mut client = Recording::new(
                    Kind::Client,
                    trace_id,
                    SpanId([2; 8]),
                    Some(SpanId([1; 8])),
                    2_000,
                );
                client.name = format!("attempt {index}").into();
                Tree::leaf(client)
            })
            .collect();
        Tree {
            span: server,
            children,
        }
    }

    /// The tests' request: a parent, a trace state its child inherits, an
    /// error, text and integer attributes.
    fn the_request() -> Tree {
        let mut request = recording(1);
        let span = &mut request.span;
        span.parent = Some(SpanId([9; 8]));
        span.trace_state = Some("vendor=1".into());
        span.error = true;
        span.set_str("http.request.method", "GET");
        span.set_str("url.path", "/items");
        span.set_str("sluice.rule", "per-ip");
        span.set_int("http.response.status_code", 503);
        request
    }

    /// [`recording`], built.
    fn recorded(children: usize) -> Recording {
        recording(children).build()
    }

    /// How long a test waits for the export task at most.
    const WITHIN: Duration = Duration::from_secs(10);

    fn text(value: &Option<AnyValue>) -> Option<String> {
        match value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(text) => Some(text.clone()),
            any_value::Value::IntValue(number) => Some(number.to_string()),
            _ => None,
        }
    }

    fn lookup(attributes: &[KeyValue], key: &str) -> Option<String> {
        attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| text(&kv.value))
    }

    #[tokio::test]
    async fn a_recording_and_its_child_arrive_as_two_spans() {
        let (addr, received) = collector(StatusCode::OK).await;
        let counters = counters();
        let exporter = Exporter::start(&settings(addr), counters.clone());
        exporter.submit(the_request().build());
        exporter.flush(WITHIN).await;
        assert_eq!(counters.exported.get(), 2);

        let received = received.lock().unwrap();
        assert_eq!(received.requests.len(), 1);
        let (headers, export) = &received.requests[0];
        assert_eq!(headers["content-type"], "application/x-protobuf");
        assert_eq!(headers["x-api-key"], "k3y");
        let [resource_spans] = &export.resource_spans[..] else {
            panic!("one resource")
        };
        let resource = &resource_spans.resource.as_ref().unwrap().attributes;
        assert_eq!(lookup(resource, "service.name").as_deref(), Some("edge"));
        let instance = lookup(resource, "service.instance.id").unwrap();
        assert_eq!(instance.len(), 32);
        assert!(instance.bytes().all(|b| b.is_ascii_hexdigit()));
        let [scope] = &resource_spans.scope_spans[..] else {
            panic!("one scope")
        };
        assert_eq!(scope.scope.as_ref().unwrap().name, "sluice");
        let [server, client] = &scope.spans[..] else {
            panic!("two spans: {:?}", scope.spans)
        };

        assert_eq!(server.trace_id, vec![7; 16]);
        assert_eq!(server.span_id, vec![1; 8]);
        assert_eq!(server.parent_span_id, vec![9; 8]);
        assert_eq!(server.trace_state, "vendor=1");
        assert_eq!(server.flags & 0xff, 1, "sampled");
        assert_eq!(server.kind, SpanKind::Server as i32);
        assert_eq!(server.name, "GET /items");
        assert_eq!(
            (server.start_time_unix_nano, server.end_time_unix_nano),
            (1_000, 9_000)
        );
        assert_eq!(
            server.status.as_ref().unwrap().code,
            ProtoStatus::Error as i32
        );
        assert_eq!(
            lookup(&server.attributes, "http.request.method").as_deref(),
            Some("GET")
        );
        assert_eq!(
            lookup(&server.attributes, "url.path").as_deref(),
            Some("/items")
        );
        assert_eq!(
            lookup(&server.attributes, "sluice.rule").as_deref(),
            Some("per-ip")
        );
        let status_code = server
            .attributes
            .iter()
            .find(|kv| kv.key == "http.response.status_code");
        assert_eq!(
            status_code.unwrap().value.as_ref().unwrap().value,
            Some(any_value::Value::IntValue(503))
        );

        assert_eq!(client.trace_id, vec![7; 16]);
        assert_eq!(client.span_id, vec![2; 8]);
        assert_eq!(client.parent_span_id, vec![1; 8]);
        assert_eq!(client.trace_state, "vendor=1", "the parent's");
        assert_eq!(client.kind, SpanKind::Client as i32);
        assert_eq!(client.name, "attempt 0");
        assert_eq!(
            client.status.as_ref().unwrap().code,
            ProtoStatus::Unset as i32
        );
        assert_eq!((counters.dropped.get(), counters.failed.get()), (0, 0));
    }

    #[tokio::test]
    async fn a_hanging_collector_fills_the_queue_then_drops() {
        let (addr, posted) = hanging().await;
        let counters = counters();
        let settings = TracingExport {
            queue: 4,
            batch: 2,
            delay: Duration::from_millis(1),
            timeout: Duration::from_millis(200),
            ..settings(addr)
        };
        let exporter = Exporter::start(&settings, counters.clone());
        exporter.submit(recorded(1));
        tokio::time::timeout(WITHIN, posted.notified())
            .await
            .expect("the first export reached the collector");
        // While that export hangs, the queue takes 4 spans and drops the rest.
        let submitted = 2 + 50;
        for _ in 0..50 {
            exporter.submit(recorded(0));
        }
        assert!(counters.dropped.get() > 0, "the queue is bounded");
        assert!(counters.dropped.get() <= 50);
        let total = || counters.exported.get() + counters.dropped.get() + counters.failed.get();
        // Each hung export fails on its timeout, then the next is made.
        exporter.flush(WITHIN).await;
        assert_eq!(total(), submitted, "every span accounted for");
        assert_eq!(counters.exported.get(), 0);
        assert!(
            counters.failed.get() >= 2,
            "the hung export failed on its timeout"
        );
    }

    #[tokio::test]
    async fn an_error_answer_or_a_refused_connection_counts_failed() {
        // This test's runtime runs on this thread alone: the task logs here.
        let logged = Arc::new(Mutex::new(Vec::new()));
        let writer = logged.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || Log(writer.clone()))
            .with_ansi(false)
            .finish();
        let _logging = tracing::subscriber::set_default(subscriber);

        let (addr, received) = collector(StatusCode::SERVICE_UNAVAILABLE).await;
        let answered = counters();
        let exporter = Exporter::start(&settings(addr), answered.clone());
        exporter.submit(recorded(2));
        exporter.flush(WITHIN).await;
        assert_eq!(answered.failed.get(), 3);
        assert_eq!(answered.exported.get(), 0);
        let log = String::from_utf8(logged.lock().unwrap().clone()).unwrap();
        assert_eq!(log.lines().count(), 1, "one line per failed export: {log}");
        assert!(log.contains(&format!("http://{addr}/v1/traces")), "{log}");
        assert!(log.contains("503"), "{log}");
        assert!(
            !log.contains("k3y"),
            "a header's value is never logged: {log}"
        );
        assert_eq!(received.lock().unwrap().requests.len(), 1, "no retry");

        // Bound, never listening: connections are refused.
        let refusing = tokio::net::TcpSocket::new_v4().unwrap();
        refusing.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let refused = counters();
        let exporter = Exporter::start(&settings(refusing.local_addr().unwrap()), refused.clone());
        exporter.submit(recorded(0));
        exporter.flush(WITHIN).await;
        assert_eq!(refused.failed.get(), 1);
        assert_eq!(refused.exported.get(), 0);
    }

    #[tokio::test]
    async fn dropping_the_last_handle_exports_what_was_queued() {
        let (addr, received) = collector(StatusCode::OK).await;
        let counters = counters();
        // A delay no test waits out: only the drop sends them.
        let settings = TracingExport {
            delay: Duration::from_secs(3600),
            ..settings(addr)
        };
        let exporter = Exporter::start(&settings, counters.clone());
        let other = exporter.clone();
        for _ in 0..3 {
            exporter.submit(recorded(1));
        }
        drop(exporter);
        tokio::task::yield_now().await;
        assert_eq!(counters.exported.get(), 0, "one handle is left");
        drop(other);
        // The task's last export, told by the collector.
        let spans = |received: &Received| -> usize {
            received
                .requests
                .iter()
                .map(|(_, r)| r.resource_spans[0].scope_spans[0].spans.len())
                .sum()
        };
        let arrived = received.lock().unwrap().arrived.clone();
        while spans(&received.lock().unwrap()) < 6 {
            tokio::time::timeout(WITHIN, arrived.notified())
                .await
                .expect("6 spans exported");
        }
        assert_eq!(spans(&received.lock().unwrap()), 6);
    }

    #[tokio::test]
    async fn flush_exports_what_is_queued_now_in_batches_of_batch_spans() {
        let (addr, received) = collector(StatusCode::OK).await;
        let counters = counters();
        let settings = TracingExport {
            batch: 3,
            delay: Duration::from_secs(3600),
            ..settings(addr)
        };
        let exporter = Exporter::start(&settings, counters.clone());
        for _ in 0..3 {
            exporter.submit(recorded(1));
        }
        exporter.flush(Duration::from_secs(10)).await;
        assert_eq!(counters.exported.get(), 6);
        let sizes: Vec<usize> = received
            .lock()
            .unwrap()
            .requests
            .iter()
            .map(|(_, r)| r.resource_spans[0].scope_spans[0].spans.len())
            .collect();
        assert_eq!(
            sizes,
            [2, 2, 2],
            "a recording never splits, a batch never exceeds 3"
        );
        assert_eq!(exporter.settings(), &settings);
    }

    #[test]
    fn the_instance_id_is_32_hex_digits_and_a_resource_key_appears_once() {
        let id = instance_id();
        assert_eq!(id.len(), 32);
        assert_ne!(id, instance_id());
        assert_eq!(hex(&[0x01, 0xab]), "01ab");
        let pairs = [("service.instance.id".to_owned(), "mine".to_owned())];
        let attributes = resource(&pairs, &id);
        assert_eq!(
            attributes,
            [("service.instance.id", "mine")],
            "a key appears once"
        );
    }

    // The encoding as it was written with opentelemetry-proto's generated
    // messages: the oracle the direct writer is held to, byte for byte.

    /// The resource's attributes as `KeyValue`s (`resource`, then each pair
    /// a string attribute).
    fn oracle_resource(pairs: &[(String, String)], instance: &str) -> Vec<KeyValue> {
        resource(pairs, instance)
            .into_iter()
            .map(|(key, value)| string(key.to_owned(), value.to_owned()))
            .collect()
    }

    fn string(key: String, value: String) -> KeyValue {
        attribute(key, any_value::Value::StringValue(value))
    }

    fn attribute(key: String, value: any_value::Value) -> KeyValue {
        KeyValue {
            key,
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    /// One `ExportTraceServiceRequest`: one resource, one scope, every
    /// recording's spans.
    fn oracle(resource: Vec<KeyValue>, recordings: Vec<Tree>) -> ExportTraceServiceRequest {
        let mut spans = Vec::new();
        for recording in recordings {
            oracle_spans(recording, "", &mut spans);
        }
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: resource,
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "sluice".to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                        ..Default::default()
                    }),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    /// `tree`'s span and, after it, its children (recursively) as OTLP
    /// spans. A child without a `tracestate` of its own has its parent's
    /// own (none: empty), as it was when it was added.
    fn oracle_spans(tree: Tree, inherited: &str, out: &mut Vec<Span>) {
        let Tree {
            span: recording,
            children,
        } = tree;
        let parents = recording.trace_state.as_deref().unwrap_or("").to_owned();
        let trace_state = recording
            .trace_state
            .as_deref()
            .map(String::from)
            .unwrap_or_else(|| inherited.to_owned());
        let flags = match (recording.kind, recording.parent) {
            (Kind::Server, Some(_)) => SAMPLED | HAS_IS_REMOTE | IS_REMOTE,
            _ => SAMPLED | HAS_IS_REMOTE,
        };
        // What was set, as the span's attributes decode (their bytes are
        // held to the generated types' by
        // `attributes_are_written_as_the_generated_types_write_them`): what this oracle checks is the span around them.
        let attributes = Span::decode(recording.attributes())
            .expect("attributes decode")
            .attributes;
        let code = if recording.error {
            ProtoStatus::Error
        } else {
            ProtoStatus::Unset
        };
        out.push(Span {
            trace_id: recording.trace_id.0.to_vec(),
            span_id: recording.span_id.0.to_vec(),
            parent_span_id: recording.parent.map(|id| id.0.to_vec()).unwrap_or_default(),
            trace_state: trace_state.clone(),
            flags,
            name: recording.name.to_string(),
            kind: match recording.kind {
                Kind::Server => SpanKind::Server,
                Kind::Client => SpanKind::Client,
            } as i32,
            start_time_unix_nano: recording.start,
            end_time_unix_nano: recording.end,
            attributes,
            status: Some(Status {
                message: String::new(),
                code: code as i32,
            }),
            ..Default::default()
        });
        for child in children {
            oracle_spans(child, &parents, out);
        }
    }

    /// The body of one export of `recordings`, as the task writes it.
    fn encoded(preamble: &Preamble, recordings: &[Tree]) -> Vec<u8> {
        let mut spans = Vec::new();
        for recording in recordings {
            put_spans(&recording.build(), "", &mut spans);
        }
        encode(preamble, &spans)
    }

    /// The direct writer's body is the oracle's encoding, byte for byte,
    /// and decodes back to it.
    fn assert_exact(pairs: &[(String, String)], recordings: &[Tree]) {
        let instance = "0123456789abcdef0123456789abcdef";
        let direct = encoded(&Preamble::new(&resource(pairs, instance)), recordings);
        let expected = oracle(oracle_resource(pairs, instance), recordings.to_vec());
        assert_eq!(direct, expected.encode_to_vec(), "{recordings:#?}");
        assert_eq!(
            ExportTraceServiceRequest::decode(&direct[..]).unwrap(),
            expected
        );
    }

    /// An attribute key longer than 127 bytes: its length takes two bytes.
    const LONG_KEY: &str = "sluice.a.rather.long.attribute.name.that.goes.on.and.on.past.\
        one.hundred.and.twenty.seven.bytes.so.that.its.length.is.a.two.byte.varint";

    /// A span of `kind` with every field at its default where it can be.
    fn bare(kind: Kind) -> Recording {
        Recording::new(kind, TraceId([0; 16]), SpanId([0; 8]), None, 0)
    }

    fn bare_leaf(kind: Kind) -> Tree {
        Tree::leaf(bare(kind))
    }

    #[test]
    fn the_direct_encoding_is_the_generated_types_byte_for_byte() {
        let edge = vec![("service.name".to_owned(), "edge".to_owned())];
        assert!(LONG_KEY.len() > 127);

        // Nothing to export, and the bare minimum: no parent, no name, no
        // times, no attributes, all-zero ids.
        assert_exact(&edge, &[]);
        assert_exact(&[], &[bare_leaf(Kind::Server)]);
        assert_exact(&edge, &[bare_leaf(Kind::Client)]);

        let request = the_request();
        assert_exact(&edge, std::slice::from_ref(&request));

        // Children with and without a trace state of their own (an empty
        // one too), grandchildren inheriting theirs; values at their
        // edges; unicode; times at both ends.
        let mut parent = recording(0);
        let span = &mut parent.span;
        span.trace_state = Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE".into());
        span.start = u64::MAX;
        span.end = 1;
        span.name = "GET /café/ψ/😀".into();
        span.set_str("empty", "");
        span.set_int("zero", 0);
        span.set_int("minus.one", -1);
        span.set_int("min", i64::MIN);
        span.set_int("max", i64::MAX);
        span.set_str("ключ.😀", "значение ✓");
        span.set_str(LONG_KEY, &"x".repeat(300));
        span.set_str("", "a key left empty");
        let mut inheriting = bare_leaf(Kind::Client);
        inheriting.span.parent = Some(span.span_id);
        inheriting.span.error = true;
        inheriting.children.push(bare_leaf(Kind::Client));
        let mut own = bare_leaf(Kind::Client);
        own.span.trace_state = Some("own=1".into());
        own.children.push(bare_leaf(Kind::Client));
        let mut cleared = bare_leaf(Kind::Client);
        cleared.span.trace_state = Some("".into());
        cleared.children.push(bare_leaf(Kind::Server));
        parent.children = vec![inheriting, own, cleared];
        assert_exact(&edge, &[parent.clone()]);

        // Many attributes and long values: spans and a body whose lengths
        // take two and three bytes.
        let mut many = recording(2);
        for (index, value) in (0..200).zip(
            [
                Value::Str("text".to_owned()),
                Value::Str(String::new()),
                Value::Str("y".repeat(100)),
                Value::Int(-123_456_789),
            ]
            .into_iter()
            .cycle(),
        ) {
            set(
                &mut many.span,
                ["a", "b", LONG_KEY, "ключ"][index % 4],
                &value,
            );
        }
        many.children[1].span.set_str("body", &"z".repeat(20_000));
        assert_exact(&edge, &[many]);

        // Several recordings in one export; resources of other shapes.
        let pairs = vec![
            ("service.name".to_owned(), "edge".to_owned()),
            ("deployment.environment".to_owned(), String::new()),
            ("service.instance.id".to_owned(), "mine".to_owned()),
            ("région".to_owned(), "eu-west-3 ✓".to_owned()),
        ];
        assert_exact(
            &pairs,
            &[request, parent, recording(3), bare_leaf(Kind::Server)],
        );
    }

    /// Attribute keys for random spans: sluice's keys are static.
    const KEYS: [&str; 7] = [
        "",
        "k",
        "http.request.method",
        "url.path",
        "http.response.status_code",
        "ключ.😀",
        LONG_KEY,
    ];

    fn random_text() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            "[a-z=,./]{1,20}",
            any::<String>(),
            (1usize..400).prop_map(|len| "é".repeat(len)),
        ]
    }

    fn random_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            random_text().prop_map(Value::Str),
            prop_oneof![
                Just(0),
                Just(-1),
                Just(i64::MIN),
                Just(i64::MAX),
                any::<i64>()
            ]
            .prop_map(Value::Int),
        ]
    }

    fn random_time() -> impl Strategy<Value = u64> {
        prop_oneof![Just(0), Just(u64::MAX), any::<u64>()]
    }

    /// A span without children.
    fn random_span() -> impl Strategy<Value = Recording> {
        (
            (
                any::<[u8; 16]>(),
                any::<[u8; 8]>(),
                prop::option::of(any::<[u8; 8]>()),
                prop::option::of(random_text()),
                any::<bool>(),
            ),
            (random_text(), random_time(), random_time(), any::<bool>()),
            prop::collection::vec(
                (prop::sample::select(KEYS.to_vec()), random_value()),
                0..=30,
            ),
        )
            .prop_map(
                |(
                    (trace_id, span_id, parent, trace_state, server),
                    (name, start, end, error),
                    attributes,
                )| {
                    let kind = if server { Kind::Server } else { Kind::Client };
                    let mut span = Recording::new(
                        kind,
                        TraceId(trace_id),
                        SpanId(span_id),
                        parent.map(SpanId),
                        start,
                    );
                    span.trace_state = trace_state.map(String::into_boxed_str);
                    span.name = name.into();
                    span.end = end;
                    span.error = error;
                    for (key, value) in &attributes {
                        set(&mut span, key, value);
                    }
                    span
                },
            )
    }

    /// A span with 0–3 children, each with 0–1 of its own.
    fn random_recording() -> impl Strategy<Value = Tree> {
        (
            random_span(),
            prop::collection::vec(
                (random_span(), prop::collection::vec(random_span(), 0..=1)),
                0..=3,
            ),
        )
            .prop_map(|(span, children)| Tree {
                span,
                children: children
                    .into_iter()
                    .map(|(span, grandchildren)| Tree {
                        span,
                        children: grandchildren.into_iter().map(Tree::leaf).collect(),
                    })
                    .collect(),
            })
    }

    proptest! {
        #[test]
        fn random_recordings_encode_as_the_generated_types_do(
            recordings in prop::collection::vec(random_recording(), 0..=3),
            pairs in prop::collection::vec(
                (prop::sample::select(vec!["service.name", "service.instance.id", "ключ", ""]), random_text()),
                0..=3,
            ),
        ) {
            let pairs: Vec<(String, String)> = pairs
                .into_iter()
                .map(|(key, value)| (key.to_owned(), value))
                .collect();
            let instance = "0123456789abcdef0123456789abcdef";
            let direct = encoded(&Preamble::new(&resource(&pairs, instance)), &recordings);
            let expected = oracle(oracle_resource(&pairs, instance), recordings);
            prop_assert_eq!(&direct, &expected.encode_to_vec());
            prop_assert_eq!(ExportTraceServiceRequest::decode(&direct[..]).unwrap(), expected);
        }

        /// A span's attributes, written as they are set, are the generated
        /// types' `Span.attributes`, byte for byte.
        #[test]
        fn attributes_are_written_as_the_generated_types_write_them(
            attributes in prop::collection::vec(
                (
                    prop_oneof![
                        prop::sample::select(KEYS.to_vec()).prop_map(str::to_owned),
                        random_text(),
                        // Around the lengths where one length byte no
                        // longer does (otlp.rs's short forms).
                        "[a-z.]{95,130}",
                    ],
                    prop_oneof![
                        random_value(),
                        "[a-z]{0,130}".prop_map(Value::Str),
                        "[ -~]{0,130}".prop_map(Value::Ascii),
                    ],
                ),
                0..=30,
            ),
        ) {
            let mut recording = bare(Kind::Server);
            for (key, value) in &attributes {
                set(&mut recording, key, value);
            }
            let expected = Span {
                attributes: attributes
                    .iter()
                    .map(|(key, value)| attribute(key.clone(), proto_value(value)))
                    .collect(),
                ..Default::default()
            };
            prop_assert_eq!(recording.attributes(), &expected.encode_to_vec()[..]);
        }
    }
}
