//! The answer to a decided call (docs/rate-limit-service.md): one status
//! per descriptor, in order, with the limit that decided it
//! (`current_limit`: the one `X-RateLimit-*` would name), what it has left
//! and when it is full again; `overall_code`; and the rate-limit headers a
//! proxied answer would carry, for Envoy to add to its response.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue as ProtoHeader;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use smallvec::SmallVec;

use super::decide::{Decided, Slot};
use crate::clock::Nanos;
use crate::policy::{Limit, Policy};
use crate::proxy::respond::{self, OwnFields, OwnName, Verdict};
use crate::store::{Outcome, UNASKED};

/// The response to the call `decided` describes, under `policy`.
pub fn answer(policy: &Policy, decided: &Decided<'_>) -> RateLimitResponse {
    let statuses: Vec<DescriptorStatus> = decided
        .slots
        .iter()
        .map(|slot| match slot {
            Some(slot) if !decided.unlimited => status(slot, decided),
            _ => DescriptorStatus {
                code: Code::Ok.into(),
                ..DescriptorStatus::default()
            },
        })
        .collect();
    let over = statuses
        .iter()
        .any(|s| s.code == i32::from(Code::OverLimit));
    RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok }.into(),
        statuses,
        response_headers_to_add: headers(policy, decided),
        ..RateLimitResponse::default()
    }
}

/// The status of one decided descriptor.
fn status(slot: &Slot<'_>, decided: &Decided<'_>) -> DescriptorStatus {
    let admission = &decided.admission;
    if let Some(left) = decided.banned_by(slot) {
        return DescriptorStatus {
            code: Code::OverLimit.into(),
            current_limit: slot.limits.first().map(current_limit),
            limit_remaining: 0,
            duration_until_reset: Some(duration(left)),
            ..DescriptorStatus::default()
        };
    }
    // Unasked (another rule banned the caller): what the rule is, no more.
    let decisions = admission.decisions.get(slot.decisions.clone());
    let Some(decisions) = decisions.filter(|decisions| !decisions.is_empty()) else {
        return DescriptorStatus {
            code: Code::Ok.into(),
            current_limit: slot.limits.first().map(current_limit),
            ..DescriptorStatus::default()
        };
    };
    let refused = decided.limited_by(slot);
    // The limit `X-RateLimit-*` names: the least left, the first on ties.
    let (tightest, decision) = decisions
        .iter()
        .enumerate()
        .min_by_key(|(_, d)| d.state().remaining)
        .expect("decisions is not empty");
    let state = decision.state();
    DescriptorStatus {
        code: if refused { Code::OverLimit } else { Code::Ok }.into(),
        current_limit: slot.limits.get(tightest).map(current_limit),
        limit_remaining: u32::try_from(state.remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(duration(state.reset_after)),
        ..DescriptorStatus::default()
    }
}

/// The units of Envoy's `RateLimit`, with their length in seconds
/// (envoyproxy/ratelimit's: a month is 30 days, a year 365).
const UNITS: [(Unit, u64); 7] = [
    (Unit::Second, 1),
    (Unit::Minute, 60),
    (Unit::Hour, 3_600),
    (Unit::Day, 86_400),
    (Unit::Week, 604_800),
    (Unit::Month, 2_592_000),
    (Unit::Year, 31_536_000),
];

/// A limit as Envoy's `RateLimit`: its COUNT per its period when the period
/// is a unit, else the same rate in the first unit at least as long in
/// which it is a whole number (`"5/10s"` is 30 a minute); a rate whole in
/// no unit is its COUNT with the unit `UNKNOWN`. Named as the rate-limit
/// headers name it.
fn current_limit(limit: &Limit) -> RateLimit {
    let (requests_per_unit, unit) = match limit.period {
        Some(period) => per_unit(limit.count, period),
        None => (limit.count, Unit::Unknown),
    };
    RateLimit {
        name: limit.name.clone(),
        requests_per_unit: u32::try_from(requests_per_unit).unwrap_or(u32::MAX),
        unit: unit.into(),
    }
}

fn per_unit(count: u64, period: Duration) -> (u64, Unit) {
    let period = period.as_nanos();
    for (unit, seconds) in UNITS {
        let length = u128::from(seconds) * 1_000_000_000;
        if length < period {
            continue;
        }
        let scaled = u128::from(count) * length;
        if scaled % period == 0 {
            return (u64::try_from(scaled / period).unwrap_or(u64::MAX), unit);
        }
    }
    (count, Unit::Unknown)
}

fn duration(nanos: Nanos) -> ProtoDuration {
    ProtoDuration {
        seconds: i64::try_from(nanos / 1_000_000_000).unwrap_or(i64::MAX),
        nanos: (nanos % 1_000_000_000) as i32,
    }
}

/// The fields a proxied answer would carry (`[response] headers`): on a
/// refusal `Retry-After` and the rate-limit fields (a ban: `Retry-After`
/// only, as the proxy's ban answer), on an admission the rate-limit fields
/// when `on_success`; none when nothing was asked.
fn headers(policy: &Policy, decided: &Decided<'_>) -> Vec<ProtoHeader> {
    if decided.unlimited {
        return Vec::new();
    }
    let admission = &decided.admission;
    let mut fields = OwnFields::default();
    match admission.outcome {
        Outcome::Banned { left, .. } => {
            fields.push_number(OwnName::RetryAfter, respond::ceil_secs(left).max(1));
        }
        outcome => {
            let verdicts = verdicts(decided);
            let refused = outcome == Outcome::Limited;
            if refused {
                let refusing: SmallVec<[Verdict<'_>; 4]> = verdicts
                    .iter()
                    .filter(|v| !v.decision.is_allowed())
                    .copied()
                    .collect();
                if let Some(wait) = respond::retry_after(&refusing) {
                    fields.push_number(OwnName::RetryAfter, respond::ceil_secs(wait).max(1));
                }
            }
            if refused || policy.response.on_success {
                let decided_at = Duration::from_nanos(admission.at);
                respond::add_rate_limit_headers(
                    &mut fields,
                    policy.response.headers,
                    &verdicts,
                    decided_at,
                );
            }
        }
    }
    // Each field is one typed pair, its name lower-case and each name once.
    fields
        .pairs()
        .map(|(name, value)| ProtoHeader {
            key: name.as_str().to_owned(),
            value: String::from_utf8_lossy(value).into_owned(),
            ..ProtoHeader::default()
        })
        .collect()
}

/// One verdict per limit of each enforced descriptor, in the call's order.
fn verdicts<'p>(decided: &Decided<'p>) -> SmallVec<[Verdict<'p>; 4]> {
    let decisions = &decided.admission.decisions;
    decided
        .slots
        .iter()
        .flatten()
        .filter(|slot| !slot.rule.shadow)
        .flat_map(|slot| {
            slot.limits
                .iter()
                .enumerate()
                .map(move |(index, limit)| Verdict {
                    rule: slot.rule,
                    limit,
                    decision: decisions
                        .get(slot.decisions.start + index)
                        .copied()
                        .unwrap_or(UNASKED),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_told_per_envoy_unit() {
        let secs = Duration::from_secs;
        assert_eq!(per_unit(100, secs(60)), (100, Unit::Minute));
        assert_eq!(per_unit(5, secs(1)), (5, Unit::Second));
        assert_eq!(per_unit(5, secs(10)), (30, Unit::Minute));
        assert_eq!(per_unit(1, secs(7)), (86_400, Unit::Week));
        assert_eq!(per_unit(3, secs(86_400)), (3, Unit::Day));
        assert_eq!(per_unit(3, secs(2 * 86_400)), (45, Unit::Month));
        assert_eq!(
            per_unit(7, Duration::from_millis(1500)),
            (7 * 40, Unit::Minute)
        );
        assert_eq!(per_unit(1, secs(11 * 31_536_000)), (1, Unit::Unknown));
    }

    #[test]
    fn durations_are_seconds_and_nanos() {
        assert_eq!(
            duration(2_500_000_000),
            ProtoDuration {
                seconds: 2,
                nanos: 500_000_000
            }
        );
    }
}
