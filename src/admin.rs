//! The admin listener: `/metrics`, `/healthz`, `/readyz`. It runs on its own
//! port so that operators can scrape and probe even while the proxy port is
//! saturated. The rest of SPEC.md's admin API (rules, buckets, bans, reload,
//! explain, `/v1/check`, the status page) is routed here in later releases;
//! mutating calls will check the bearer token from `admin.token_env`.

use std::convert::Infallible;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::proxy::Proxy;

static TEXT_PLAIN: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");
static PROMETHEUS_TEXT: HeaderValue =
    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
static PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

/// Accepts admin connections until the task is aborted.
pub async fn serve(listener: TcpListener, proxy: Proxy) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "admin accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let proxy = proxy.clone();
                async move { Ok::<_, Infallible>(route(&proxy, request)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn route(proxy: &Proxy, request: Request<Incoming>) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return problem(
            StatusCode::METHOD_NOT_ALLOWED,
            "this admin endpoint only answers GET",
        );
    }
    match request.uri().path() {
        "/metrics" => {
            let policy = proxy.policy();
            let text = proxy.metrics().render(&policy, proxy.store());
            respond(StatusCode::OK, &PROMETHEUS_TEXT, text.into())
        }
        "/healthz" => respond(StatusCode::OK, &TEXT_PLAIN, "ok\n".into()),
        "/readyz" if proxy.is_ready() => respond(StatusCode::OK, &TEXT_PLAIN, "ready\n".into()),
        "/readyz" => problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "sluice is shutting down and no longer accepts traffic",
        ),
        _ => problem(
            StatusCode::NOT_FOUND,
            "unknown admin endpoint; try /metrics, /healthz or /readyz",
        ),
    }
}

fn respond(status: StatusCode, content_type: &HeaderValue, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, content_type.clone());
    response
}

fn problem(status: StatusCode, detail: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    respond(status, &PROBLEM_JSON, Bytes::from(body.to_string()))
}
