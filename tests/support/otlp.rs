//! An OpenTelemetry collector on loopback for the end-to-end tests: it
//! takes OTLP/HTTP posts to `/v1/traces` (protobuf), keeps every span with
//! its resource's attributes and each post's headers, and answers 200 with
//! an empty `ExportTraceServiceResponse`. [`Collector::hanging`] reads posts
//! and never answers (a collector that hangs).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode as SpanStatus;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One span as the collector received it.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub span: Span,
    /// Its resource's attributes, rendered as text.
    pub resource: Vec<(String, String)>,
}

impl ReceivedSpan {
    /// An attribute's value: a string, or a number (or bool) as text. An
    /// attribute is set once per span (OpenTelemetry's rule, which sluice
    /// keeps without checking as it records): one set twice fails here.
    pub fn attr(&self, key: &str) -> Option<String> {
        let mut named = self.span.attributes.iter().filter(|kv| kv.key == key);
        let found = named.next();
        assert!(named.next().is_none(), "{key} set twice: {}", summary(self));
        found.and_then(|kv| text(kv.value.as_ref()))
    }

    /// A resource attribute's value.
    pub fn resource_attr(&self, key: &str) -> Option<String> {
        self.resource
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.clone())
    }

    pub fn trace_id_hex(&self) -> String {
        hex(&self.span.trace_id)
    }

    pub fn span_id_hex(&self) -> String {
        hex(&self.span.span_id)
    }

    /// The parent's span id, `""` for a root span.
    pub fn parent_hex(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    pub fn is_server(&self) -> bool {
        self.span.kind == SpanKind::Server as i32
    }

    pub fn is_client(&self) -> bool {
        self.span.kind == SpanKind::Client as i32
    }

    /// Status `ERROR`.
    pub fn is_error(&self) -> bool {
        self.span
            .status
            .as_ref()
            .is_some_and(|status| status.code == SpanStatus::Error as i32)
    }
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    headers: Vec<HeaderMap>,
}

/// A collector on 127.0.0.1; it stops when dropped.
pub struct Collector {
    pub addr: SocketAddr,
    received: Arc<Mutex<Received>>,
    /// Told of every post kept, so a test waits for spans, not for a time.
    arrived: Arc<tokio::sync::Notify>,
    task: JoinHandle<()>,
}

impl Collector {
    /// A collector that answers every post 200.
    pub async fn start() -> Collector {
        Collector::serve(true).await
    }

    /// A collector that accepts connections and reads posts (keeping what
    /// they hold) but never answers.
    pub async fn hanging() -> Collector {
        Collector::serve(false).await
    }

    async fn serve(answers: bool) -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Received::default()));
        let arrived = Arc::new(tokio::sync::Notify::new());
        let (kept, told) = (received.clone(), arrived.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (kept, told) = (kept.clone(), told.clone());
                let service = service_fn(move |request: Request<Incoming>| {
                    let (kept, told) = (kept.clone(), told.clone());
                    async move {
                        let response = receive(request, &kept).await;
                        told.notify_one();
                        if !answers {
                            std::future::pending::<()>().await;
                        }
                        Ok::<_, Infallible>(response)
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        Collector {
            addr,
            received,
            arrived,
            task,
        }
    }

    /// `http://127.0.0.1:PORT`, for `OTEL_EXPORTER_OTLP_ENDPOINT` (sluice
    /// appends `/v1/traces`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far, in order of arrival.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received.lock().unwrap().spans.clone()
    }

    /// Each post's headers, in order of arrival.
    pub fn headers(&self) -> Vec<HeaderMap> {
        self.received.lock().unwrap().headers.clone()
    }

    /// Waits until at least `n` spans arrived; panics with those that did
    /// when `within` passes first.
    pub async fn spans_eventually(&self, n: usize, within: Duration) -> Vec<ReceivedSpan> {
        let what = format!("{n} spans");
        self.arrived_where(&what, within, |spans| {
            (spans.len() >= n).then(|| spans.to_vec())
        })
        .await
    }

    /// The first span received that `matches`, waiting for posts `within`
    /// at most (panics with what arrived when none came).
    pub async fn span_where(
        &self,
        what: &str,
        within: Duration,
        matches: impl Fn(&ReceivedSpan) -> bool,
    ) -> ReceivedSpan {
        self.arrived_where(what, within, |spans| {
            spans.iter().find(|s| matches(s)).cloned()
        })
        .await
    }

    /// What `found` finds in the spans received, checked again at each post.
    async fn arrived_where<T>(
        &self,
        what: &str,
        within: Duration,
        found: impl Fn(&[ReceivedSpan]) -> Option<T>,
    ) -> T {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // A post kept since the last look leaves a permit: no wake-up
            // is lost between the look and the wait.
            if let Some(found) = found(&self.received.lock().unwrap().spans) {
                return found;
            }
            if tokio::time::timeout_at(deadline, self.arrived.notified())
                .await
                .is_err()
            {
                let spans = self.spans();
                let summary: Vec<String> = spans.iter().map(summary).collect();
                panic!(
                    "the collector did not receive {what} within {within:?}: {} spans: {summary:#?}",
                    spans.len()
                );
            }
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Keeps a post's headers and spans; the answer to give it.
async fn receive(request: Request<Incoming>, received: &Mutex<Received>) -> Response<Full<Bytes>> {
    if request.method() != Method::POST || request.uri().path() != "/v1/traces" {
        return answer(StatusCode::NOT_FOUND, Bytes::new());
    }
    let headers = request.headers().clone();
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return answer(StatusCode::BAD_REQUEST, Bytes::new()),
    };
    let mut received = received.lock().unwrap();
    received.headers.push(headers);
    let Ok(export) = ExportTraceServiceRequest::decode(body) else {
        return answer(StatusCode::BAD_REQUEST, Bytes::new());
    };
    for resource_spans in export.resource_spans {
        let resource: Vec<(String, String)> = resource_spans
            .resource
            .map(|resource| resource.attributes)
            .unwrap_or_default()
            .into_iter()
            .map(|KeyValue { key, value, .. }| (key, text(value.as_ref()).unwrap_or_default()))
            .collect();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.spans.push(ReceivedSpan {
                    span,
                    resource: resource.clone(),
                });
            }
        }
    }
    let empty = ExportTraceServiceResponse::default().encode_to_vec();
    answer(StatusCode::OK, Bytes::from(empty))
}

fn answer(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert("content-type", "application/x-protobuf".parse().unwrap());
    response
}

/// A value as text: strings as they are, numbers and bools printed.
fn text(value: Option<&AnyValue>) -> Option<String> {
    match value?.value.as_ref()? {
        any_value::Value::StringValue(text) => Some(text.clone()),
        any_value::Value::IntValue(number) => Some(number.to_string()),
        any_value::Value::DoubleValue(number) => Some(number.to_string()),
        any_value::Value::BoolValue(flag) => Some(flag.to_string()),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// One line of a span, for a failure's message.
fn summary(span: &ReceivedSpan) -> String {
    let kind = if span.is_server() {
        "server"
    } else if span.is_client() {
        "client"
    } else {
        "other"
    };
    format!(
        "{kind} {:?} trace={} span={} parent={} error={}",
        span.span.name,
        span.trace_id_hex(),
        span.span_id_hex(),
        span.parent_hex(),
        span.is_error()
    )
}
