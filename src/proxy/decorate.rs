//! Decorate: what sluice says about an admitted request, added to the
//! upstream's answer — which shadow rules would have limited it, how long it
//! was held, a retiring route's sunset, and the rate-limit headers
//! (`response.on_success`); and what a GraphQL query cost ([`add_cost`]).

use std::time::Duration;

use http::Response;

use super::identify::Applicable;
use super::respond::{self, ProxyBody};
use super::ruling::Ruling;
use crate::policy::{Policy, Sunset};

/// Adds sluice's fields to the upstream's answer to an admitted request.
pub fn decorate(
    response: &mut Response<ProxyBody>,
    policy: &Policy,
    ruling: &Ruling<'_>,
    retiring: Option<&Sunset>,
) {
    let headers = response.headers_mut();
    if !ruling.would_limit.is_empty() {
        respond::add_would_limit_header(headers, &ruling.would_limit);
    }
    if ruling.held > 0 {
        respond::add_delay_header(headers, ruling.held);
    }
    respond::add_sunset_headers(headers, retiring);
    if policy.response.on_success && !ruling.unlimited {
        respond::add_rate_limit_headers(
            response.body_mut().own_fields_mut(),
            policy.response.headers,
            &ruling.verdicts,
            Duration::from_nanos(ruling.decided_at),
        );
    }
}

/// `X-RateLimit-Cost`: the units a rule with `cost = "graphql"` took for
/// the request (or, on its 429, would have taken), when one applied and
/// rate-limit headers are sent (docs/conversation.md).
#[inline(never)]
pub fn add_cost(response: &mut Response<ProxyBody>, policy: &Policy, enforced: &[Applicable<'_>]) {
    if !policy.sends_headers() {
        return;
    }
    if let Some(applicable) = enforced.iter().find(|one| one.rule.graphql_cost) {
        response.headers_mut().insert(
            X_RATELIMIT_COST.clone(),
            http::HeaderValue::from(applicable.cost),
        );
    }
}

static X_RATELIMIT_COST: http::HeaderName = http::HeaderName::from_static("x-ratelimit-cost");
