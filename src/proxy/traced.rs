//! What a sampled request's span says of it (docs/observability.md,
//! "Spans"): read from the same [`Record`] as its access log line, so that
//! the span and the line name the same rule, outcome and key (a credential
//! as its label, never in clear). Only a recording span is written to:
//! an unsampled request pays one test.

use std::net::IpAddr;

use super::access::{deciding, shown_key, Deciding, Record};
use super::checks::host_of;
use super::respond::ProxyBody;
use super::routes::Routes;
use super::ruling::Ruling;
use super::shared::Snapshot;
use super::standing::Unidentified;
use crate::key::{client_ip, KeySource, RequestFacts};
use crate::limiter::Decision;
use crate::policy::{Policy, Rule};
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
    snapshot: &Snapshot,
    store: &Store,
) {
    if let Some(span) = span {
        write(span, record, &snapshot.policy, &snapshot.routes, store);
    }
}

#[cold]
#[inline(never)]
fn write(
    span: &mut Recording,
    record: &Record<'_, '_, '_>,
    policy: &Policy,
    routes: &Routes,
    store: &Store,
) {
    name(span, record, routes);
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
        // Digit by digit: cheaper than `fmt`.
        IpAddr::V4(v4) => client_ip::ipv4_bytes(v4, &mut v4_text),
        v6 => {
            let mut text = String::with_capacity(48);
            client_ip::write_key(v6, policy.config.server.ipv6_prefix, &mut text);
            v6_text = text;
            v6_text.as_bytes()
        }
    };
    // Digits, dots, colons, a slash: ASCII.
    span.set_ascii("client.address", client);
    let scheme = if policy.config.server.tls.is_some() {
        "https"
    } else {
        "http"
    };
    span.set_str("url.scheme", scheme);
    let keyed = Keyed { client, policy };
    match record {
        Record::Unchecked { .. } => {}
        Record::Refused { facts, refused } => refused_by(span, *refused, facts, keyed),
        Record::Ruled {
            facts,
            admitted,
            ruling,
            enforced,
        } => {
            ruled(span, store, ruling);
            decided_by(span, deciding(*admitted, ruling, enforced), facts, keyed);
            if let Outcome::Banned { left, .. } = ruling.outcome {
                span.set_int("sluice.retry_after_ms", left.div_ceil(1_000_000) as i64);
            }
        }
    }
}

/// Names the span by the request's method and the pool its route picks,
/// and gives the host it asked for.
fn name(span: &mut Recording, record: &Record<'_, '_, '_>, routes: &Routes) {
    let (method, pool, host) = match record {
        Record::Unchecked { request, .. } => {
            (request.method(), routes.default_pool(), host_of(request))
        }
        Record::Refused { facts, .. } | Record::Ruled { facts, .. } => {
            (facts.method, routes.route(facts), facts.host)
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
}

/// How the span shows a rule's key: the client's text when the IP alone is
/// the key, as the access log does; else the key as it may be shown.
#[derive(Clone, Copy)]
struct Keyed<'k> {
    client: &'k [u8],
    policy: &'k Policy,
}

impl Keyed<'_> {
    fn write(self, span: &mut Recording, rule: &Rule, facts: &RequestFacts<'_>) {
        match rule.key[..] {
            [KeySource::Ip] => span.set_ascii("sluice.key", self.client),
            _ => span.set_str("sluice.key", &shown_key(rule, facts, self.policy)),
        }
    }
}

/// What identification refused, and by which rule.
fn refused_by(
    span: &mut Recording,
    refused: Unidentified<'_>,
    facts: &RequestFacts<'_>,
    keyed: Keyed<'_>,
) {
    match refused {
        Unidentified::Denied => span.set_str("sluice.outcome", "denied"),
        Unidentified::MissingKey(rule) | Unidentified::Uncosted(rule, _) => {
            span.set_str("sluice.outcome", "missing_key");
            span.set_str("sluice.rule", &rule.name);
        }
        // Counted as a missing key (no one value to key on); the field is
        // named, never its values.
        Unidentified::Ambiguous(rule, at) => {
            span.set_str("sluice.outcome", "missing_key");
            span.set_str("sluice.rule", &rule.name);
            span.set_str("sluice.ambiguous_field", &rule.reads.field(at).to_source());
        }
        Unidentified::UnreadableBody(rule, why) => {
            span.set_str("sluice.outcome", "missing_key");
            span.set_str("sluice.rule", &rule.name);
            span.set_str("sluice.unreadable_body", why.reason());
        }
        Unidentified::Gone(rule, _) => {
            span.set_str("sluice.outcome", "limited");
            span.set_str("sluice.rule", &rule.name);
            keyed.write(span, rule, facts);
        }
    }
}

/// Who decided an admission (the store, its fallback, nobody) and how long
/// it held the request.
fn ruled(span: &mut Recording, store: &Store, ruling: &Ruling<'_>) {
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
}

/// The admission's outcome, and the rule and limit that decided it.
fn decided_by(
    span: &mut Recording,
    deciding: Deciding<'_, '_>,
    facts: &RequestFacts<'_>,
    keyed: Keyed<'_>,
) {
    let Deciding::Rule {
        rule,
        outcome,
        verdict,
    } = deciding
    else {
        let outcome = match deciding {
            Deciding::Denied => "denied",
            _ => "allowed",
        };
        span.set_str("sluice.outcome", outcome);
        return;
    };
    span.set_str("sluice.outcome", outcome);
    span.set_str("sluice.rule", &rule.name);
    keyed.write(span, rule, facts);
    let Some(verdict) = verdict else {
        return;
    };
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
