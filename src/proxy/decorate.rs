//! Decorate: what sluice says about an admitted request, added to the
//! upstream's answer — which shadow rules would have limited it, how long it
//! was held, a retiring route's sunset, and the rate-limit headers
//! (`response.on_success`), what a GraphQL query cost, and a WebSocket
//! tunnel's message gate.

use std::time::Duration;

use http::Response;

use super::messages;
use super::respond::{self, ProxyBody};
use super::ruling::Ruling;
use super::Context;
use crate::policy::{Policy, Sunset};

/// Decorate, the request path's phase once the upstream answered: sluice's
/// fields added to the answer ([`decorate`]), a WebSocket tunnel's message
/// gate opened (`proxy/messages.rs`), and a request's own cost (a GraphQL
/// query's, a reservation) said.
#[inline(always)]
pub fn phase(cx: &mut Context<'_, '_>) {
    let (policy, shared, snapshot) = (cx.policy, cx.shared, cx.snapshot);
    let applicable = &cx.applicable;
    decorate(cx.response, policy, cx.ruling, applicable.retiring);
    let deciding = || shared.deciding(&snapshot.policy);
    messages::open(cx.response, cx.metered.take(), deciding, &shared.metrics);
    if policy.variable_costs {
        respond::add_cost(cx.response, policy, &applicable.enforced);
    }
}

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
