//! `ShouldRateLimit`: a call read ([`super::call`]), decided
//! ([`super::decide`]), counted as proxied traffic is (each decided
//! descriptor once in its rule's `sluice_requests_total`, heavy hitters,
//! refusal log lines and bans), and answered ([`super::answer`]).

use std::net::SocketAddr;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

use super::answer::answer;
use super::call::Call;
use super::decide::{decide, Decided, Slot};
use crate::log_gate::truncated;
use crate::policy::Policy;
use crate::proxy::Proxy;
use crate::store::Store;
use crate::trace::context;
use crate::trace::span::Recording;

/// The rate limit service, on the proxy's policy, store and metrics.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    pub proxy: Proxy,
}

impl RateLimiter {
    /// Answers one call; see the module docs.
    pub async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let peer = request.remote_addr();
        let policy = self.proxy.policy();
        let mut span = self.proxy.tracer().and_then(|tracer| {
            let trusted = peer.is_some_and(|peer| policy.client_ip.is_trusted(peer.ip()));
            let headers = trace_fields(request.metadata());
            let span = tracer.begin_call(&headers, trusted, SPAN_NAME)?;
            Some((span, tracer))
        });
        let message = request.into_inner();
        let call = Call::read(&message)?;
        let decided = decide(self.proxy.admitter(), &policy, &call).await;
        let Ok(decided) = decided else {
            if let Some((mut recording, tracer)) = span.take() {
                recording.error = true;
                recording.set_str("error.type", "unavailable");
                tracer.finish(*recording);
            }
            return Err(Status::unavailable(
                "the store failed and on_error = \"deny\"; nothing was taken",
            ));
        };
        count(self.proxy.store(), &policy, &call, &decided, peer);
        let answered = answer(&policy, &decided);
        if let Some((mut recording, tracer)) = span {
            describe_call(&mut recording, &call, &answered);
            tracer.finish(*recording);
        }
        Ok(Response::new(answered))
    }
}

/// The name of a call's span, as gRPC's conventions name it.
const SPAN_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The call's trace headers, copied out of its metadata (only when tracing
/// is on).
fn trace_fields(metadata: &tonic::metadata::MetadataMap) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    for name in [&context::TRACEPARENT, &context::TRACESTATE]
        .into_iter()
        .chain(&context::B3_FIELDS)
    {
        let value = metadata.get(name.as_str());
        if let Some(value) = value.and_then(|v| http::HeaderValue::from_bytes(v.as_bytes()).ok()) {
            headers.insert(name.clone(), value);
        }
    }
    headers
}

/// What a call's span says: the RPC, the domain, how many descriptors, and
/// the overall answer as Envoy's own client span has it
/// (`ratelimit_status`).
fn describe_call(recording: &mut Recording, call: &Call<'_>, answered: &RateLimitResponse) {
    recording.set_str("rpc.system", "grpc");
    recording.set_str("rpc.service", "envoy.service.ratelimit.v3.RateLimitService");
    recording.set_str("rpc.method", "ShouldRateLimit");
    recording.set_str("sluice.domain", call.domain);
    recording.set_int("sluice.descriptors", call.descriptors.len() as i64);
    let over = answered.overall_code == i32::from(Code::OverLimit);
    let status = if over { "over_limit" } else { "ok" };
    recording.set_str("ratelimit_status", status);
}

/// Counts what was decided: each decided descriptor in its rule's
/// outcomes and heavy hitters, a refusal in its rule's log lines, and the
/// bans the refusal started. A call the store could not decide
/// (`on_error = "allow"`) counts nothing, as such a request does not.
fn count(
    store: &Store,
    policy: &Policy,
    call: &Call<'_>,
    decided: &Decided<'_>,
    peer: Option<SocketAddr>,
) {
    if decided.unlimited {
        return;
    }
    let admission = &decided.admission;
    let now = admission.at;
    let admitted = admission.outcome == crate::store::Outcome::Admitted;
    for (slot, descriptor) in decided.slots.iter().zip(&call.descriptors) {
        let Some(slot) = slot else { continue };
        let rule = slot.rule;
        let text = || {
            policy
                .keys
                .entries_text(&rule.key, |key| descriptor.entry(key))
        };
        let banned = decided.banned_by(slot).is_some();
        let refused = banned || decided.limited_by(slot);
        if rule.shadow {
            // Asked only when the call was admitted, as for a request.
            if admitted {
                if admission.shadow_limited.contains(&slot.ask) {
                    rule.counters.shadow_limited.inc();
                } else {
                    rule.counters.allowed.inc();
                }
            }
        } else if refused {
            rule.counters.limited.inc();
            if banned {
                rule.counters.banned.inc();
                if store.is_shared() && rule.bans.unnamed(slot.key) {
                    // Learned from Redis, where another instance's strikes
                    // started it: named for the fleet's listing, once here.
                    let text = text();
                    let shown = policy.labels.redacted(&rule.key, &text);
                    store.ban_named(&rule.name, slot.key, &shown);
                    rule.bans.name(slot.key, text);
                }
            }
        } else {
            rule.counters.allowed.inc();
        }
        rule.hitters.count(slot.key, refused, now, text);
        if refused {
            log_refusal(policy, slot, call.domain, banned, peer, now, text);
        }
    }
    for &started in &admission.bans_started {
        let slots = decided.slots.iter().zip(&call.descriptors);
        let Some((Some(slot), descriptor)) = slots
            .into_iter()
            .find(|(slot, _)| slot.as_ref().is_some_and(|s| s.ask == started))
        else {
            continue;
        };
        let rule = slot.rule;
        let text = policy
            .keys
            .entries_text(&rule.key, |key| descriptor.entry(key));
        if let (true, Some(ban)) = (store.is_shared(), rule.ban) {
            let shown = policy.labels.redacted(&rule.key, &text);
            store.ban_started(&rule.name, slot.key, ban.duration, &shown);
        }
        rule.ban_started(slot.key, text, &policy.labels);
    }
}

/// A refused descriptor's line, within its rule's lines a second.
fn log_refusal(
    policy: &Policy,
    slot: &Slot<'_>,
    domain: &str,
    banned: bool,
    peer: Option<SocketAddr>,
    now: crate::clock::Nanos,
    text: impl Fn() -> crate::key::KeyText,
) {
    let rule = slot.rule;
    let Some(suppressed) = rule.log_gate.let_through(now) else {
        return;
    };
    let key = policy.labels.show(&rule.key, &text());
    tracing::info!(
        rule = %rule.name,
        outcome = if banned { "banned" } else { "limited" },
        key = %truncated(&key),
        domain = %truncated(domain),
        peer = %peer.map_or_else(|| "-".to_owned(), |peer| peer.to_string()),
        suppressed,
        "rate limit service call refused"
    );
}
