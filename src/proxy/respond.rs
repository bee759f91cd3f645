//! Every response sluice writes itself, and the rate-limit headers it adds to
//! forwarded ones. Errors become problem documents (RFC 9457) here and only
//! here, so each status, title and detail is decided in one place.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use serde::Serialize;

use crate::clock::Nanos;
use crate::config::HeaderStyle;
use crate::limiter::Decision;
use crate::policy::{Policy, Rule};

/// The body of every response the proxy sends: the upstream's, streamed, or
/// one sluice wrote.
pub type ProxyBody = Either<Incoming, Full<Bytes>>;

static PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const X_SLUICE_WOULD_LIMIT: HeaderName = HeaderName::from_static("x-sluice-would-limit");
const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// A generic problem document (`type` defaults to `about:blank`).
#[derive(Serialize)]
struct Problem<'a> {
    title: &'a str,
    status: u16,
    detail: &'a str,
}

/// The 429 body: the quota-exceeded problem type with sluice's extension
/// members, which clients may rely on.
#[derive(Serialize)]
struct QuotaExceeded<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    title: &'a str,
    status: u16,
    detail: &'a str,
    #[serde(rename = "violated-policies")]
    violated_policies: Vec<&'a str>,
    rule: &'a str,
    limit: u64,
    remaining: u64,
    retry_after_secs: Option<u64>,
}

/// A problem document for `status`, its title the status's reason phrase.
pub fn problem(status: StatusCode, detail: &str) -> Response<ProxyBody> {
    let title = status.canonical_reason().unwrap_or("Error");
    let body = serde_json::to_vec(&Problem {
        title,
        status: status.as_u16(),
        detail,
    })
    .unwrap_or_default();
    with_problem_body(status, body)
}

fn with_problem_body(status: StatusCode, body: Vec<u8>) -> Response<ProxyBody> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(body))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, PROBLEM_JSON.clone());
    response
}

/// One applicable, enforced rule and what it decided for this request.
#[derive(Debug, Clone, Copy)]
pub struct Verdict<'p> {
    pub rule: &'p Rule,
    pub decision: Decision,
}

/// The answer to a request some rule rejected.
pub fn limited(
    policy: &Policy,
    verdicts: &[Verdict<'_>],
    unix_now: Duration,
) -> Response<ProxyBody> {
    let rejecting = || verdicts.iter().filter(|v| !v.decision.is_allowed());
    let first = rejecting()
        .next()
        .expect("limited() is only called when a rule rejected");
    // Retry when every rejecting rule would admit; never, if any never will.
    let retry_after: Option<Nanos> = rejecting().try_fold(0, |latest: Nanos, v| match v.decision {
        Decision::Deny { retry_after, .. } => retry_after.map(|r| latest.max(r)),
        Decision::Allow(_) => Some(latest),
    });
    let retry_after_secs = retry_after.map(|nanos| ceil_secs(nanos).max(1));

    let status = policy.response.status;
    let body = serde_json::to_vec(&QuotaExceeded {
        kind: QUOTA_EXCEEDED,
        title: status.canonical_reason().unwrap_or("Too Many Requests"),
        status: status.as_u16(),
        detail: &first.rule.detail,
        violated_policies: rejecting().map(|v| &*v.rule.name).collect(),
        rule: &first.rule.name,
        limit: first.rule.limiter.capacity(),
        remaining: first.decision.state().remaining,
        retry_after_secs,
    })
    .unwrap_or_default();
    let mut response = with_problem_body(status, body);
    let headers = response.headers_mut();
    if let Some(secs) = retry_after_secs {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    add_rate_limit_headers(headers, policy.response.headers, verdicts, unix_now);
    response
}

/// Adds `X-RateLimit-*` (the most constraining limit) and `RateLimit-Policy`
/// / `RateLimit` (one member per limit) as `style` asks.
pub fn add_rate_limit_headers(
    headers: &mut HeaderMap,
    style: HeaderStyle,
    verdicts: &[Verdict<'_>],
    unix_now: Duration,
) {
    if verdicts.is_empty() || style == HeaderStyle::None {
        return;
    }
    if matches!(style, HeaderStyle::Legacy | HeaderStyle::Both) {
        // Smallest remaining; ties go to the earliest rule in the file.
        let tightest = verdicts
            .iter()
            .min_by_key(|v| v.decision.state().remaining)
            .expect("verdicts is not empty");
        let state = tightest.decision.state();
        let reset_at = unix_now.as_secs() + ceil_secs(state.reset_after + subsec_nanos(unix_now));
        headers.insert(
            X_RATELIMIT_LIMIT,
            HeaderValue::from(tightest.rule.limiter.capacity()),
        );
        headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(state.remaining));
        headers.insert(X_RATELIMIT_RESET, HeaderValue::from(reset_at));
    }
    if matches!(style, HeaderStyle::Ietf | HeaderStyle::Both) {
        if let [only] = verdicts {
            headers.insert(RATELIMIT_POLICY, only.rule.policy_header.clone());
        } else {
            let joined = join(verdicts.iter().map(|v| v.rule.policy_item.as_str()));
            if let Ok(value) = HeaderValue::from_str(&joined) {
                headers.insert(RATELIMIT_POLICY, value);
            }
        }
        let items = join(verdicts.iter().map(|v| {
            let state = v.decision.state();
            format!(
                "\"{}\";r={};t={}",
                v.rule.name,
                state.remaining,
                ceil_secs(state.reset_after)
            )
        }));
        if let Ok(value) = HeaderValue::from_str(&items) {
            headers.insert(RATELIMIT, value);
        }
    }
}

/// Marks a forwarded response that shadow rules would have limited:
/// `X-Sluice-Would-Limit: <rule>` (several rules joined by `, `).
pub fn add_would_limit_header(headers: &mut HeaderMap, rules: &[&str]) {
    // Rule names are validated tokens, so the value is always valid.
    if let Ok(value) = HeaderValue::from_str(&join(rules.iter())) {
        headers.insert(X_SLUICE_WOULD_LIMIT, value);
    }
}

fn join<S: AsRef<str>>(items: impl Iterator<Item = S>) -> String {
    let mut out = String::with_capacity(64);
    for (index, item) in items.enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        out.push_str(item.as_ref());
    }
    out
}

/// Whole seconds, rounded up.
#[inline]
pub fn ceil_secs(nanos: Nanos) -> u64 {
    nanos.div_ceil(1_000_000_000)
}

fn subsec_nanos(time: Duration) -> Nanos {
    u64::from(time.subsec_nanos())
}

/// Which synthetic answers exist, by blame: the client's fault is 4xx, the
/// upstream's 502/504.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The path could not be normalised.
    BadPath(crate::key::path::PathError),
    /// A rule with `missing = "reject"` lacked a key source.
    MissingKey,
    /// The client IP is on the deny list.
    Denied,
    /// The upstream could not be reached.
    UpstreamUnreachable,
    /// The upstream did not answer within `upstream_timeout`.
    UpstreamTimeout,
    /// The upstream failed mid-exchange.
    UpstreamFailed,
}

/// The problem document for a refusal.
pub fn refusal(refusal: Refusal, rule: Option<&Rule>) -> Response<ProxyBody> {
    match refusal {
        Refusal::BadPath(error) => problem(StatusCode::BAD_REQUEST, &error.to_string()),
        Refusal::MissingKey => {
            let detail = match rule {
                Some(rule) => format!(
                    "rule '{}' needs a value for every key source ({}) and this request lacks one",
                    rule.name,
                    describe_key(rule)
                ),
                None => "this request lacks a value a rule is keyed on".to_owned(),
            };
            problem(StatusCode::BAD_REQUEST, &detail)
        }
        Refusal::Denied => problem(
            StatusCode::FORBIDDEN,
            "requests from this address are not accepted",
        ),
        Refusal::UpstreamUnreachable => problem(
            StatusCode::BAD_GATEWAY,
            "the service behind this proxy could not be reached; try again later",
        ),
        Refusal::UpstreamTimeout => problem(
            StatusCode::GATEWAY_TIMEOUT,
            "the service behind this proxy did not answer in time",
        ),
        Refusal::UpstreamFailed => problem(
            StatusCode::BAD_GATEWAY,
            "the service behind this proxy failed to answer",
        ),
    }
}

fn describe_key(rule: &Rule) -> String {
    join(rule.key.iter().map(|source| source.to_string()))
}
