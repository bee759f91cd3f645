//! The admin listener: `/metrics`, `/healthz`, `/readyz`, `/admin/rules`,
//! `POST /admin/reload`, the bans ([`bans`]), the read-only views of a
//! caller's buckets (`GET /admin/buckets`, [`buckets`]) and of what sluice
//! would do with a request (`POST /admin/explain`, [`explain`]), and the
//! status page for a person (`GET /`, [`status_page`]) and its JSON
//! (`GET /admin/status`, [`status`]), the
//! budget calls that backends make on the buckets of proxied traffic:
//! `POST /admin/spend` ([`spend`]) and `POST /v1/check` ([`check`]), whose bodies [`call`] reads
//! and whose target and balance [`budget`] works out. It runs on its own
//! port so that operators can scrape and probe even while the proxy port is
//! saturated. This file accepts connections, routes, and holds what every
//! endpoint answers with.
//!
//! When the variable named by `admin.token_env` is set, every endpoint but
//! `/metrics`, `/healthz` and `/readyz` needs its token ([`auth`]). Callers'
//! keys are shown as the policy's [`crate::key::KeyLabels`] show them.
//! Every error is a problem document.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::net::TcpListener;

mod auth;
mod bans;
mod buckets;
mod budget;
mod call;
mod check;
mod explain;
mod spend;
mod status;
mod status_page;
mod top;
mod upstreams;

use crate::problem::{self, Layout, Problem};
use crate::proxy::Proxy;
use crate::reload::{Reloader, Trigger};

static TEXT_PLAIN: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");
static PROMETHEUS_TEXT: HeaderValue =
    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
static JSON: HeaderValue = HeaderValue::from_static("application/json");

/// An admin answer.
type Answer = Response<Full<Bytes>>;

/// What the admin endpoints work on.
#[derive(Debug, Clone)]
pub struct Admin {
    pub proxy: Proxy,
    /// Present when sluice runs from a config file that can be reloaded.
    pub reloader: Option<Arc<Reloader>>,
    /// The token every endpoint but the probes and metrics needs, if one
    /// is configured.
    pub token: Option<Arc<str>>,
    /// Start time and the counters' recent readings, for the status page.
    status: Arc<status::Status>,
}

impl Admin {
    /// The admin state for `proxy`; the token is read from the variable
    /// named by `admin.token_env` (unset or empty: no token needed).
    pub fn new(proxy: Proxy, reloader: Option<Arc<Reloader>>) -> Admin {
        let token = proxy.policy().config.admin.token().map(Arc::from);
        Admin {
            proxy,
            reloader,
            token,
            status: Arc::new(status::Status::new()),
        }
    }
}

/// Accepts admin connections, and samples the counters for the status
/// page, until the task is aborted (both run in this one task, so both end
/// with it).
pub async fn serve(listener: TcpListener, admin: Admin) {
    tokio::join!(status::sample(admin.clone()), accept(listener, admin));
}

async fn accept(listener: TcpListener, admin: Admin) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "admin accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let admin = admin.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let admin = admin.clone();
                async move { route(&admin, request).await.or_else(Ok::<_, Infallible>) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// What an admin request is answered; `Err` when it is refused before its
/// endpoint answers (the token, a body that cannot be read).
async fn route(admin: &Admin, request: Request<Incoming>) -> Result<Answer, Answer> {
    if !auth::is_open(request.uri().path()) {
        if let Some(refusal) = auth::unauthorized(admin.token.as_deref(), &request) {
            return Err(refusal);
        }
    }
    let proxy = &admin.proxy;
    let method = request.method().clone();
    let get = matches!(method, Method::GET | Method::HEAD);
    let query = request.uri().query();
    Ok(match (get, &method, request.uri().path()) {
        (true, _, "/") => status_page::page(admin),
        (true, _, "/admin/status") => json_response(StatusCode::OK, &status::snapshot(admin)),
        (true, _, "/metrics") => {
            respond(StatusCode::OK, &PROMETHEUS_TEXT, metrics_text(proxy).into())
        }
        (true, _, "/healthz") => respond(StatusCode::OK, &TEXT_PLAIN, "ok\n".into()),
        (true, _, "/readyz") if proxy.is_ready() => {
            respond(StatusCode::OK, &TEXT_PLAIN, "ready\n".into())
        }
        (true, _, "/readyz") => problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "sluice is shutting down and no longer accepts traffic",
        ),
        (true, _, "/admin/rules") => json_response(
            StatusCode::OK,
            &crate::policy::describe(&proxy.policy(), proxy.now()),
        ),
        (true, _, "/admin/upstreams") => json_response(
            StatusCode::OK,
            &upstreams::upstreams(
                &proxy.upstreams().load(),
                &proxy.policy().config.upstreams,
                proxy.now(),
            ),
        ),
        (_, &Method::POST, "/admin/reload") => reload(admin).await,
        (true, _, "/admin/bans") => bans::list(proxy).await,
        (true, _, "/admin/top") => top::top(proxy, query)?,
        (_, &Method::POST, "/admin/bans") => bans::add(proxy, &read_json(request).await?).await?,
        (_, &Method::DELETE, "/admin/bans") => bans::lift(proxy, query).await?,
        (true, _, "/admin/buckets") => buckets::buckets(proxy, query).await?,
        (_, &Method::POST, "/admin/explain") => {
            let body = read_body(request, MAX_BODY).await?;
            json_response(StatusCode::OK, &explain::explain(proxy, &body).await?)
        }
        (_, &Method::POST, "/admin/spend") => {
            spend::spend(proxy, &read_body(request, MAX_BODY).await?).await?
        }
        (_, &Method::POST, "/v1/check") => {
            check::check(proxy, &read_body(request, check::MAX_BODY).await?).await?
        }
        (_, _, path) if GET_ONLY.contains(&path) => problem(
            StatusCode::METHOD_NOT_ALLOWED,
            "this admin endpoint only answers GET",
        ),
        (_, _, path) => match WRONG_METHOD.iter().find(|(p, _)| *p == path) {
            Some((_, how)) => problem(StatusCode::METHOD_NOT_ALLOWED, how),
            None => problem(
                StatusCode::NOT_FOUND,
                "unknown admin endpoint; try / (the status page), /admin/status, /metrics, \
                 /healthz, /readyz, /admin/rules, /admin/bans, /admin/buckets, \
                 /admin/upstreams, POST /admin/explain, POST /admin/reload, POST /admin/spend or \
                 POST /v1/check",
            ),
        },
    })
}

/// The endpoints that answer GET (and HEAD) only.
const GET_ONLY: [&str; 9] = [
    "/",
    "/admin/status",
    "/metrics",
    "/healthz",
    "/readyz",
    "/admin/rules",
    "/admin/top",
    "/admin/buckets",
    "/admin/upstreams",
];

/// The other endpoints, with how to call them when called otherwise.
const WRONG_METHOD: [(&str, &str); 5] = [
    (
        "/admin/bans",
        "list bans with GET, add one with POST, lift one with DELETE /admin/bans?rule=R&key=K",
    ),
    (
        "/admin/explain",
        "explain with POST /admin/explain and {\"method\": M, \"path\": P, \"headers\": {}, \"ip\": IP}",
    ),
    ("/admin/reload", "reload with POST /admin/reload"),
    ("/admin/spend", "spend with POST /admin/spend and {\"rule\": R, \"key\": K, \"amount\": N}"),
    ("/v1/check", "check with POST /v1/check and {\"rule\": R, \"key\": K}, or an array of them"),
];

/// `GET /metrics`: the series that mirror the policy's bans and tables and
/// the store's counters are brought up to date first.
fn metrics_text(proxy: &Proxy) -> String {
    let metrics = proxy.metrics();
    let store = proxy.store();
    let now = proxy.now();
    for rule in &proxy.policy().rules {
        // Each table once: an adaptive rule's tiers share the rule's.
        let mut counted = Vec::new();
        let tracked_keys = rule
            .all_limits()
            .filter(|limit| {
                let first = !counted.contains(&limit.table.id());
                counted.push(limit.table.id());
                first
            })
            .map(|limit| store.tracked_keys(&limit.table))
            .sum();
        metrics.set_rule_state(&rule.name, rule.bans.active(now).len(), tracked_keys);
        if let Some(controller) = rule.limits.first().and_then(crate::policy::Limit::adaptive) {
            metrics.set_adaptive_limit(&rule.name, controller.limit());
        }
    }
    proxy.upstreams().set_gauges();
    let stats = store.stats();
    metrics.set_store_state(
        store.backend_name(),
        &crate::store::StoreError::KINDS,
        stats.evicted_idle,
        stats.overflow,
    );
    if let Some(sync) = store.sync_stats(now) {
        metrics.set_sync_state(&sync);
    }
    metrics.render()
}

/// `POST /admin/reload`: 200 with what changed, or 422 with the errors.
async fn reload(admin: &Admin) -> Answer {
    let Some(reloader) = &admin.reloader else {
        return problem(
            StatusCode::CONFLICT,
            "this sluice was not started from a config file, so there is nothing to reload",
        );
    };
    match reloader.reload(Trigger::Admin).await {
        Ok(applied) => json_response(
            StatusCode::OK,
            &json!({
                "reloaded": true,
                "changes": applied.changes.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "needs_restart": applied.needs_restart,
            }),
        ),
        Err(errors) => {
            // One `FILE:LINE:COLUMN: sentence` per error, as `sluice check` prints them.
            let list: Vec<String> = errors.to_string().lines().map(str::to_owned).collect();
            let detail = format!(
                "{} is not valid ({} error{}); the running config stays",
                reloader.path().display(),
                list.len(),
                if list.len() == 1 { "" } else { "s" }
            );
            let body = Problem::new(StatusCode::UNPROCESSABLE_ENTITY, &detail)
                // RFC 9110's name for 422 (the http crate still says "Entity").
                .titled("Unprocessable Content")
                .with("errors", list)
                .to_json(Layout::ByName);
            respond(
                StatusCode::UNPROCESSABLE_ENTITY,
                &problem::CONTENT_TYPE,
                Bytes::from(body),
            )
        }
    }
}

/// Reads a JSON body of at most [`MAX_BODY`] bytes.
async fn read_json(request: Request<Incoming>) -> Result<Value, Answer> {
    let body = read_body(request, MAX_BODY).await?;
    let json = serde_json::from_slice(&body);
    json.map_err(|error| bad(format!("the request body is not valid JSON: {error}")).respond())
}

/// Reads a request body of at most `max` bytes: 413 beyond (at once when
/// its declared length says so), 400 when it cannot be read. A body that
/// arrives in one frame, as small ones do, is kept as it came, not copied.
async fn read_body(request: Request<Incoming>, max: usize) -> Result<Bytes, Answer> {
    use http_body::Body as _;
    use http_body_util::BodyExt;
    let too_large = || {
        problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the request body is larger than {} KiB, the most this call reads",
                max / 1024
            ),
        )
    };
    let body = request.into_body();
    if body.size_hint().lower() > max as u64 {
        return Err(too_large());
    }
    // Trailers carry nothing a call reads: `to_bytes` leaves them out.
    match http_body_util::Limited::new(body, max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(_) => Err(bad("the request body could not be read").respond()),
    }
}

/// Largest admin request body read (ban and spend calls are tiny).
const MAX_BODY: usize = 64 * 1024;

/// An admin call refused: the status and detail of its problem document.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RefusedCall {
    status: StatusCode,
    detail: Cow<'static, str>,
}

impl RefusedCall {
    fn new(status: StatusCode, detail: impl Into<Cow<'static, str>>) -> RefusedCall {
        RefusedCall {
            status,
            detail: detail.into(),
        }
    }

    /// The problem document's JSON.
    fn to_json(&self) -> Vec<u8> {
        let problem = Problem::new(self.status, &self.detail);
        match self.status {
            // RFC 9110's name for 422 (the http crate still says "Entity").
            StatusCode::UNPROCESSABLE_ENTITY => problem.titled("Unprocessable Content"),
            _ => problem,
        }
        .to_json(Layout::ByName)
    }

    /// The refusal as a response.
    fn respond(&self) -> Answer {
        respond(
            self.status,
            &problem::CONTENT_TYPE,
            Bytes::from(self.to_json()),
        )
    }
}

/// A refused call answers with its problem document.
impl From<RefusedCall> for Answer {
    fn from(refusal: RefusedCall) -> Answer {
        refusal.respond()
    }
}

/// A call naming a rule the policy does not have (404).
fn no_rule(name: &str) -> RefusedCall {
    RefusedCall::new(
        StatusCode::NOT_FOUND,
        format!("no rule is named \"{name}\""),
    )
}

/// A call refused for what it asked (400).
fn bad(detail: impl Into<Cow<'static, str>>) -> RefusedCall {
    RefusedCall::new(StatusCode::BAD_REQUEST, detail)
}

fn json_response(status: StatusCode, value: &Value) -> Answer {
    respond(status, &JSON, Bytes::from(value.to_string()))
}

fn respond(status: StatusCode, content_type: &HeaderValue, body: Bytes) -> Answer {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, content_type.clone());
    response
}

fn problem(status: StatusCode, detail: &str) -> Answer {
    let body = Problem::new(status, detail).to_json(Layout::ByName);
    respond(status, &problem::CONTENT_TYPE, Bytes::from(body))
}
