//! `ShouldRateLimit`: a call read ([`super::call`]), decided
//! ([`super::decide`]) and counted through the decider as proxied traffic
//! is ([`crate::decider::count`]: each decided descriptor once in its
//! rule's `sluice_requests_total`, heavy hitters, refusal log lines and
//! bans), and answered ([`super::answer`]).

use std::net::SocketAddr;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

use super::answer::answer;
use smallvec::SmallVec;

use super::call::{Call, INLINE_DESCRIPTORS};
use super::decide::{decide, Decided};
use crate::clock::Nanos;
use crate::decider::{self, Applicable, Caller, Decided as Ruled, Verdict};
use crate::key::KeyText;
use crate::log_gate::truncated;
use crate::policy::{Policy, Rule};
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
        let decided = decide(self.proxy.decider(), &policy, &call).await;
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

/// Counts what was decided through the decider, as a request's decision
/// is counted: each decided descriptor in its rule's outcomes and heavy
/// hitters, a refusal in its rule's log lines, and the bans the refusal
/// met or started. A call the store could not decide (`on_error =
/// "allow"`) counts nothing, as such a request does not.
fn count(
    store: &Store,
    policy: &Policy,
    call: &Call<'_>,
    decided: &Decided<'_>,
    peer: Option<SocketAddr>,
) {
    if decided.unlimited || decided.descriptor_of.is_empty() {
        return;
    }
    let admission = &decided.admission;
    let decisions = admission.decisions.iter();
    let limits = decided.enforced.iter().flat_map(|applicable| {
        let rule = applicable.rule;
        applicable.limits.iter().map(move |limit| (rule, limit))
    });
    let verdicts: SmallVec<[Verdict<'_>; INLINE_DESCRIPTORS]> = limits
        .zip(decisions)
        .map(|((rule, limit), decision)| Verdict {
            rule,
            limit,
            decision: *decision,
        })
        .collect();
    let first_shadow = decided.enforced.len();
    let shadow_limited = |index| admission.shadow_limited.contains(&(first_shadow + index));
    let ruled = Ruled {
        enforced: &decided.enforced,
        shadowed: &decided.shadowed,
        verdicts: &verdicts,
        outcome: admission.outcome,
        shadow_limited: &shadow_limited,
        bans_started: &admission.bans_started,
        at: admission.at,
    };
    let caller = Descriptors {
        policy,
        call,
        decided,
        peer,
    };
    decider::count(store, policy, &ruled, &caller);
}

/// A call's descriptors as the decider's counting knows its callers.
struct Descriptors<'a, 'c, 'p> {
    policy: &'a Policy,
    call: &'a Call<'c>,
    decided: &'a Decided<'p>,
    peer: Option<SocketAddr>,
}

impl Caller for Descriptors<'_, '_, '_> {
    fn key_text(&self, asked: usize, applicable: &Applicable<'_>) -> KeyText {
        let descriptor = &self.call.descriptors[self.decided.descriptor_of[asked]];
        (self.policy.keys).entries_text(&applicable.rule.key, |key| descriptor.entry(key))
    }

    /// A refused descriptor's line, within its rule's lines a second.
    fn log_refusal(&self, rule: &Rule, banned: bool, now: Nanos, key: &dyn Fn() -> String) {
        let Some(suppressed) = rule.log_gate.let_through(now) else {
            return;
        };
        let peer = self.peer.map(|peer| peer.to_string());
        tracing::info!(
            rule = %rule.name,
            outcome = if banned { "banned" } else { "limited" },
            key = %truncated(&key()),
            domain = %truncated(self.call.domain),
            peer = peer.as_deref().unwrap_or("-"),
            suppressed,
            "rate limit service call refused"
        );
    }
}
