//! What a sampled request's span says of it (docs/observability.md,
//! "Spans"): read from the same [`Record`] as its access log line, so that
//! the span and the line name the same rule, outcome and key (a credential
//! as its label, never in clear). Only a recording span is written to:
//! an unsampled request pays one test.

use std::net::IpAddr;

use super::access::{deciding, shown_key, Deciding, Record};
use super::checks::host_of;
use super::identify::Unidentified;
use super::respond::ProxyBody;
use super::Serving;
use crate::key::{client_ip, KeySource, RequestFacts};
use crate::limiter::Decision;
use crate::policy::Rule;
use crate::request_id::RequestId;
use crate::store::{Outcome, Store};
use crate::trace::span::Recording;
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
        // Visible ASCII only (request_id.rs).
        recording.set_ascii("sluice.request_id", id.as_bytes());
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
    let (method, pool, host) = match record {
        Record::Unchecked { request, .. } => (
            request.method(),
            serving.routes.default_pool(),
            host_of(request),
        ),
        Record::Refused { facts, .. } | Record::Ruled { facts, .. } => {
            (facts.method, serving.routes.route(facts), facts.host)
        }
    };
    if let Some(host) = host {
        span.set_str("server.address", host);
    }
    let (method, pool) = (method.as_str(), pool.name());
    let mut name = String::with_capacity(method.len() + 1 + pool.len());
    name.push_str(method);
    name.push(' ');
    name.push_str(pool);
    span.name = name.into();
    let prefix = policy.config.server.ipv6_prefix;
    let client = match record {
        Record::Unchecked { request, peer } => {
            policy.client_ip.resolve(peer.ip(), request.headers())
        }
        Record::Refused { facts, .. } | Record::Ruled { facts, .. } => facts.client_ip,
    };
    // The client as keyed: the text of a rule keyed by the IP alone too.
    let mut v4_text = [0; client_ip::IPV4_TEXT_MAX];
    let v6_text;
    let client: &[u8] = match client_ip::canonical(client) {
        // Digit by digit: `fmt` costs several times as much.
        IpAddr::V4(v4) => client_ip::ipv4_bytes(v4, &mut v4_text),
        v6 => {
            let mut text = String::with_capacity(48);
            client_ip::write_key(v6, prefix, &mut text);
            v6_text = text;
            v6_text.as_bytes()
        }
    };
    // Digits, dots, colons, a slash: ASCII.
    span.set_ascii("client.address", client);
    // A rule's key as it may be shown; the client's text when the IP alone
    // is the key (as the access log does).
    let key = |span: &mut Recording, rule: &Rule, facts: &RequestFacts<'_>| match rule.key[..] {
        [KeySource::Ip] => span.set_ascii("sluice.key", client),
        _ => span.set_str("sluice.key", &shown_key(rule, facts, policy)),
    };
    let scheme = if policy.config.server.tls.is_some() {
        "https"
    } else {
        "http"
    };
    span.set_str("url.scheme", scheme);
    match record {
        Record::Unchecked { .. } => {}
        Record::Refused { facts, refused } => match refused {
            Unidentified::Denied => span.set_str("sluice.outcome", "denied"),
            Unidentified::MissingKey(rule) | Unidentified::Uncosted(rule, _) => {
                span.set_str("sluice.outcome", "missing_key");
                span.set_str("sluice.rule", &rule.name);
            }
            // Counted as a missing key (no one value to key on); the field
            // is named, never its values.
            Unidentified::Ambiguous(rule, at) => {
                span.set_str("sluice.outcome", "missing_key");
                span.set_str("sluice.rule", &rule.name);
                span.set_str("sluice.ambiguous_field", &rule.reads.field(*at).to_source());
            }
            Unidentified::Gone(rule, _) => {
                span.set_str("sluice.outcome", "limited");
                span.set_str("sluice.rule", &rule.name);
                key(span, rule, facts);
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
                span.set_str("sluice.store", name);
            }
            if ruling.held > 0 {
                span.set_int("sluice.delay_ms", (ruling.held / 1_000_000) as i64);
            }
            match deciding(*admitted, ruling, enforced) {
                Deciding::Denied => span.set_str("sluice.outcome", "denied"),
                Deciding::Nothing => span.set_str("sluice.outcome", "allowed"),
                Deciding::Rule {
                    rule,
                    outcome,
                    verdict,
                } => {
                    span.set_str("sluice.outcome", outcome);
                    span.set_str("sluice.rule", &rule.name);
                    key(span, rule, facts);
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
