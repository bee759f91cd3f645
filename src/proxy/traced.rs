//! What a sampled request's span says of it (docs/observability.md,
//! "Spans"): read from the same [`Record`] as its access log line, so that
//! the span and the line name the same rule, outcome and key (a credential
//! as its label, never in clear). Only a recording span is written to:
//! an unsampled request pays one test.

use super::access::{deciding, shown_key, Deciding, Record};
use super::identify::Unidentified;
use super::respond::ProxyBody;
use super::Serving;
use crate::key::client_ip;
use crate::limiter::Decision;
use crate::request_id::RequestId;
use crate::store::{Outcome, Store};
use crate::trace::span::{Recording, Value};
use crate::trace::tracer::Span;

/// What the answer was: its status (`ERROR` only for a 5xx: a 429 is the
/// product working) and the request's id; then the span rides on the
/// `response`'s body, and ends with it.
#[cold]
#[inline(never)]
pub fn answered(
    mut span: Span,
    status: http::StatusCode,
    id: &RequestId,
    response: &mut http::Response<ProxyBody>,
) {
    if let Some(recording) = span.recording() {
        recording.set_int("http.response.status_code", i64::from(status.as_u16()));
        recording.error = status.is_server_error();
        recording.set_str("sluice.request_id", id.as_str());
    }
    response.body_mut().carry_span(span);
}

/// Writes what `record` says into the request's span, and names the span
/// by the request's method and the pool its route picks (`GET api`).
#[inline]
pub fn note(
    span: Option<&mut Recording>,
    record: &Record<'_, '_, '_>,
    serving: Serving<'_>,
    store: &Store,
) {
    if let Some(span) = span {
        write(span, record, serving, store);
    }
}

#[cold]
#[inline(never)]
fn write(span: &mut Recording, record: &Record<'_, '_, '_>, serving: Serving<'_>, store: &Store) {
    let policy = serving.policy;
    let (method, pool) = match record {
        Record::Unchecked { request, .. } => (request.method(), serving.routes.default_pool()),
        Record::Refused { facts, .. } | Record::Ruled { facts, .. } => {
            (facts.method, serving.routes.route(facts))
        }
    };
    span.name = format!("{} {}", method.as_str(), pool.name());
    let prefix = policy.config.server.ipv6_prefix;
    let client = match record {
        Record::Unchecked { request, peer } => {
            policy.client_ip.resolve(peer.ip(), request.headers())
        }
        Record::Refused { facts, .. } | Record::Ruled { facts, .. } => facts.client_ip,
    };
    let mut text = String::with_capacity(40);
    client_ip::write_key(client, prefix, &mut text);
    span.set("client.address", Value::Owned(text));
    let scheme = if policy.config.server.tls.is_some() {
        "https"
    } else {
        "http"
    };
    span.set("url.scheme", Value::Static(scheme));
    match record {
        Record::Unchecked { .. } => {}
        Record::Refused { facts, refused } => match refused {
            Unidentified::Denied => span.set("sluice.outcome", Value::Static("denied")),
            Unidentified::MissingKey(rule) => {
                span.set("sluice.outcome", Value::Static("missing_key"));
                span.set_str("sluice.rule", &rule.name);
            }
            Unidentified::Gone(rule, _) => {
                span.set("sluice.outcome", Value::Static("limited"));
                span.set_str("sluice.rule", &rule.name);
                span.set("sluice.key", Value::Owned(shown_key(rule, facts, policy)));
            }
        },
        Record::Ruled {
            facts,
            admitted,
            ruling,
            enforced,
        } => {
            let store_name = if ruling.unlimited {
                None
            } else if ruling.locally {
                Some("fallback")
            } else {
                Some(store.mode_name())
            };
            if let Some(name) = store_name {
                span.set("sluice.store", Value::Static(name));
            }
            if ruling.held > 0 {
                span.set_int("sluice.delay_ms", (ruling.held / 1_000_000) as i64);
            }
            match deciding(*admitted, ruling, enforced) {
                Deciding::Denied => span.set("sluice.outcome", Value::Static("denied")),
                Deciding::Nothing => span.set("sluice.outcome", Value::Static("allowed")),
                Deciding::Rule {
                    rule,
                    outcome,
                    verdict,
                } => {
                    span.set("sluice.outcome", Value::Static(outcome));
                    span.set_str("sluice.rule", &rule.name);
                    span.set("sluice.key", Value::Owned(shown_key(rule, facts, policy)));
                    if let Some(verdict) = verdict {
                        let state = verdict.decision.state();
                        span.set_int("sluice.remaining", state.remaining as i64);
                        if let Decision::Deny {
                            retry_after: Some(after),
                            ..
                        } = verdict.decision
                        {
                            let millis = after.div_ceil(1_000_000) as i64;
                            span.set_int("sluice.retry_after_ms", millis);
                        }
                    }
                    if let Outcome::Banned { left, .. } = ruling.outcome {
                        span.set_int("sluice.retry_after_ms", left.div_ceil(1_000_000) as i64);
                    }
                }
            }
        }
    }
}
