//! The span exporter: a finished request's spans go to an OpenTelemetry
//! collector over OTLP/HTTP (protobuf), batched by a task of their own, off
//! the request path (docs/observability.md).
//!
//! Why it is built this way:
//!
//! - A request hands its [`Recording`] over and goes on ([`Exporter::submit`]):
//!   no lock, no await, no encoding, just an atomic add and a channel push.
//!   Turning spans into OTLP's messages and the HTTP exchange happen in the
//!   task, a batch of up to `batch` spans at a time, at most `delay` after
//!   a batch's first span.
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
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode as ProtoStatus;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message as _;
use rand::RngCore;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::span::{Kind, Recording, Value};
use crate::config::TracingExport;
use crate::metrics::TraceSpans;

/// W3C's `sampled` trace flag: every recorded span is sampled.
const SAMPLED: u32 = 0x01;
/// OTLP's span flags: whether the parent is remote is known (bit 8) ...
const HAS_IS_REMOTE: u32 = 0x100;
/// ... and it is (bit 9).
const IS_REMOTE: u32 = 0x200;

/// What the request path and [`Exporter::flush`] send the task.
#[derive(Debug)]
enum Message {
    Spans(Box<Recording>),
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
            resource: resource(&settings.resource, &instance_id()),
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
    pub fn submit(&self, recording: Box<Recording>) {
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
    resource: Vec<KeyValue>,
}

/// The recordings of one export.
#[derive(Default)]
struct Batch {
    recordings: Vec<Recording>,
    spans: usize,
}

impl Task {
    /// Batches and exports until every [`Exporter`] is dropped, then
    /// exports what was queued and ends.
    async fn run(self, mut receiver: mpsc::UnboundedReceiver<Message>) {
        let limit = self.settings.batch.max(1);
        // A recording that would have taken a batch over `batch` spans
        // opens the next one.
        let mut carried: Option<Box<Recording>> = None;
        loop {
            let mut batch = Batch::default();
            match carried.take() {
                Some(recording) => self.take(&mut batch, *recording),
                None => match receiver.recv().await {
                    None => return,
                    Some(Message::Flush(ack)) => {
                        let _ = ack.send(());
                        continue;
                    }
                    Some(Message::Spans(recording)) => self.take(&mut batch, *recording),
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
                        self.take(&mut batch, *recording);
                    }
                }
            }
            self.export(batch).await;
            if let Some(ack) = flushed {
                let _ = ack.send(());
            }
            if closed {
                return;
            }
        }
    }

    /// Takes a recording off the queue into `batch`.
    fn take(&self, batch: &mut Batch, recording: Recording) {
        let spans = recording.spans();
        self.queued.fetch_sub(spans, Ordering::AcqRel);
        batch.spans += spans;
        batch.recordings.push(recording);
    }

    /// One POST to the collector, counted and, when it fails, logged.
    async fn export(&self, batch: Batch) {
        let spans = batch.spans as u64;
        let body = encode(self.resource.clone(), batch.recordings);
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
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `service.instance.id`: 16 random bytes as 32 hex digits, one per
/// exporter (a reload that keeps the exporter keeps it).
fn instance_id() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    hex(&bytes)
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(DIGITS[usize::from(byte >> 4)] as char);
        text.push(DIGITS[usize::from(byte & 0xf)] as char);
    }
    text
}

/// The resource's attributes: the settings' pairs and the instance id
/// (unless the settings name one already: a key appears once).
fn resource(pairs: &[(String, String)], instance: &str) -> Vec<KeyValue> {
    let mut attributes: Vec<KeyValue> = pairs
        .iter()
        .map(|(key, value)| string(key.clone(), value.clone()))
        .collect();
    if !pairs.iter().any(|(key, _)| key == "service.instance.id") {
        attributes.push(string(
            "service.instance.id".to_owned(),
            instance.to_owned(),
        ));
    }
    attributes
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

/// One `ExportTraceServiceRequest`, encoded: one resource, one scope, every
/// recording's spans.
fn encode(resource: Vec<KeyValue>, recordings: Vec<Recording>) -> Vec<u8> {
    let mut spans = Vec::new();
    for recording in recordings {
        push_spans(recording, "", &mut spans);
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
    .encode_to_vec()
}

/// `recording` and, after it, its children (recursively) as OTLP spans. A
/// child without a `tracestate` of its own has its parent's, as a span
/// started under another does.
fn push_spans(recording: Recording, inherited: &str, out: &mut Vec<Span>) {
    let trace_state = recording
        .trace_state
        .map(String::from)
        .unwrap_or_else(|| inherited.to_owned());
    // A server span's parent came with the request: it is remote. A client
    // span's parent is the server span, here.
    let flags = match (recording.kind, recording.parent) {
        (Kind::Server, Some(_)) => SAMPLED | HAS_IS_REMOTE | IS_REMOTE,
        _ => SAMPLED | HAS_IS_REMOTE,
    };
    let attributes = recording
        .attributes
        .into_iter()
        .map(|item| {
            let value = match item.value {
                Value::Static(text) => any_value::Value::StringValue(text.to_owned()),
                Value::Shared(text) => any_value::Value::StringValue(String::from(&*text)),
                Value::Owned(text) => any_value::Value::StringValue(text),
                Value::Int(number) => any_value::Value::IntValue(number),
            };
            attribute(item.key.to_owned(), value)
        })
        .collect();
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
        name: recording.name,
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
    for child in recording.children {
        push_spans(child, &trace_state, out);
    }
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

    use super::*;
    use crate::trace::ids::{SpanId, TraceId};

    /// What a test collector received: each request's headers and spans.
    #[derive(Default)]
    struct Received {
        requests: Vec<(HeaderMap, ExportTraceServiceRequest)>,
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
                        kept.lock().unwrap().requests.push((headers, decoded));
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
    /// answering; counts the connections that sent something.
    async fn hanging() -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let posts = Arc::new(AtomicUsize::new(0));
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
                            counted.fetch_add(1, Ordering::SeqCst);
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

    /// A server span with `children` client spans.
    fn recording(children: usize) -> Box<Recording> {
        let trace_id = TraceId([7; 16]);
        let mut server = Recording::new(Kind::Server, trace_id, SpanId([1; 8]), None, 1_000);
        server.name = "GET /items".to_owned();
        server.end = 9_000;
        for index in 0..children {
            let mut client = Recording::new(
                Kind::Client,
                trace_id,
                SpanId([2; 8]),
                Some(SpanId([1; 8])),
                2_000,
            );
            client.name = format!("attempt {index}");
            server.children.push(client);
        }
        Box::new(server)
    }

    /// Waits (a few seconds at most) until `done` holds.
    async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

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
        let mut request = recording(1);
        request.parent = Some(SpanId([9; 8]));
        request.trace_state = Some("vendor=1".into());
        request.error = true;
        request.set("http.request.method", Value::Static("GET"));
        request.set("url.path", Value::Shared(Arc::from("/items")));
        request.set_str("sluice.rule", "per-ip");
        request.set_int("http.response.status_code", 503);
        exporter.submit(request);
        eventually("2 spans exported", || counters.exported.get() == 2).await;

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
        let (addr, posts) = hanging().await;
        let counters = counters();
        let settings = TracingExport {
            queue: 4,
            batch: 2,
            delay: Duration::from_millis(1),
            timeout: Duration::from_millis(200),
            ..settings(addr)
        };
        let exporter = Exporter::start(&settings, counters.clone());
        exporter.submit(recording(1));
        eventually("the first export reached the collector", || {
            posts.load(Ordering::SeqCst) == 1
        })
        .await;
        // While that export hangs, the queue takes 4 spans and drops the rest.
        let submitted = 2 + 50;
        for _ in 0..50 {
            exporter.submit(recording(0));
        }
        assert!(counters.dropped.get() > 0, "the queue is bounded");
        assert!(counters.dropped.get() <= 50);
        let total = || counters.exported.get() + counters.dropped.get() + counters.failed.get();
        eventually("every span accounted for", || total() == submitted).await;
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
        exporter.submit(recording(2));
        eventually("3 spans failed", || answered.failed.get() == 3).await;
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
        exporter.submit(recording(0));
        eventually("1 span failed", || refused.failed.get() == 1).await;
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
            exporter.submit(recording(1));
        }
        drop(exporter);
        tokio::task::yield_now().await;
        assert_eq!(counters.exported.get(), 0, "one handle is left");
        drop(other);
        eventually("6 spans exported", || counters.exported.get() == 6).await;
        let received = received.lock().unwrap();
        let spans: usize = received
            .requests
            .iter()
            .map(|(_, r)| r.resource_spans[0].scope_spans[0].spans.len())
            .sum();
        assert_eq!(spans, 6);
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
            exporter.submit(recording(1));
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
        let attributes = resource(
            &[("service.instance.id".to_owned(), "mine".to_owned())],
            &id,
        );
        assert_eq!(attributes.len(), 1, "a key appears once");
    }
}
