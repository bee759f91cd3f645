//! Decorate: what sluice says about an admitted request, added to the
//! upstream's answer — which shadow rules would have limited it, how long it
//! was held, a retiring route's sunset, and the rate-limit headers
//! (`response.on_success`).

use std::time::Duration;

use http::Response;

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
