//! `GET /admin/rules`: the compiled rules read back as JSON, each with the
//! limits in force now (a retiring rule's current step).

use serde_json::{json, Value};

use super::limit::Limit;
use super::{Policy, Rule};
use crate::clock::Nanos;
use crate::config::{describe_match, MissingCharge, RuleConfig};
use crate::limiter::adaptive::Controller;

/// An adaptive rule's limit: the limit in force now (a tier's share of
/// it), its bounds, and the baseline latency it compares answers with.
fn adaptive_json(limit: &Limit, controller: &Controller) -> Value {
    let (bounds, baseline) = controller.view();
    let share = match limit.limiter {
        crate::limiter::Limiter::Concurrency(concurrency) => concurrency.share,
        _ => 1000,
    };
    json!({
        "name": limit.name,
        "limit": controller.limit_for(share),
        "share": f64::from(share) / 1000.0,
        "min_in_flight": bounds.floor,
        "max_in_flight": bounds.ceiling,
        "baseline_ms": baseline as f64 / 1e6,
    })
}

/// The effective rules as JSON, for `GET /admin/rules`: what each rule
/// matches and keys on and the limits in force at `now`.
pub fn describe(policy: &Policy, now: Nanos) -> Value {
    let rules: Vec<Value> = policy
        .rules
        .iter()
        .zip(&policy.config.rules)
        .map(|(rule, config)| rule_json(policy, rule, config, now))
        .collect();
    json!({ "rules": rules })
}

/// Limits as `/admin/rules` shows them.
fn limits_json(limits: &[Limit]) -> Vec<Value> {
    limits
        .iter()
        .map(|limit| match (limit.adaptive(), limit.period) {
            (Some(controller), _) => adaptive_json(limit, controller),
            (None, Some(period)) => {
                let mut described = json!({
                    "name": limit.name,
                    "count": limit.count,
                    "period_secs": period.as_secs_f64(),
                    "capacity": limit.limiter.capacity(),
                });
                // A calendar window's period is its unit's nominal
                // length; the windows are the zone's.
                if let Some(calendar) = limit.calendar() {
                    described["calendar"] = json!(calendar.zone());
                    described["unit"] = json!(calendar.unit().symbol());
                }
                described
            }
            (None, None) => json!({
                "name": limit.name,
                "max_in_flight": limit.limiter.capacity(),
            }),
        })
        .collect()
}

/// One rule (compiled from `config`) as JSON, with its tiers, overrides,
/// sunset and ban when it has them.
fn rule_json(policy: &Policy, rule: &Rule, config: &RuleConfig, now: Nanos) -> Value {
    // A retiring rule shows the limit in force now.
    let limits = match &rule.sunset {
        Some(sunset) => sunset.limits_at(now),
        None => &rule.limits,
    };
    let mut described = json!({
        "name": &*rule.name,
        "match": describe_match(&config.matcher),
        "key": rule.key.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "missing": format!("{:?}", rule.missing).to_lowercase(),
        "algorithm": rule.algorithm.name(),
        "limits": limits_json(limits),
        "cost": if rule.graphql_cost { json!("graphql") } else { json!(rule.cost) },
        "unit": config.unit.name(),
        "on_limit": if rule.hold.is_some() { "delay" } else { "reject" },
        "shadow": rule.shadow,
        "on_change": format!("{:?}", config.on_change).to_lowercase(),
        "charge": config.charge.as_ref().map(ToString::to_string),
        "charge_missing": config.charge.as_ref().map(|charge| match charge.missing {
            MissingCharge::Units(units) => json!(units),
            MissingCharge::KeepReservation => json!("reservation"),
        }),
        "reserve": config.reserve.as_ref().map(|reserve| reserve.amount.to_string()),
        "reserve_missing": config.reserve.as_ref().and_then(|reserve| reserve.missing),
        "refund_on": config.refund_on.names(),
    });
    if let Some(by) = &rule.tier_by {
        let tiers: Vec<Value> = rule
            .variants
            .iter()
            .filter_map(|v| Some((v.label.strip_prefix("tier:")?, v)))
            .map(|(name, v)| json!({ "tier": name, "limits": limits_json(&v.limits) }))
            .collect();
        described["tiers"] = json!({ "by": by.to_string(), "tiers": tiers });
    }
    let overrides: Vec<Value> = rule
        .variants
        .iter()
        .filter_map(|v| Some((v.override_key()?, v)))
        .map(|(key, v)| {
            let key = policy.labels.show_typed(&rule.key, key);
            json!({ "key": key, "limits": limits_json(&v.limits) })
        })
        .collect();
    if !overrides.is_empty() {
        described["overrides"] = json!(overrides);
    }
    if let (Some(sunset), Some(written)) = (&rule.sunset, &config.sunset) {
        let schedule = &sunset.schedule;
        described["sunset"] = json!({
            "start": written.start / 1_000_000_000,
            "end": written.end / 1_000_000_000,
            "step_secs": written.step.as_secs_f64(),
            "to": written.to,
            "count_now": schedule.count_at(now),
            "gone": schedule.is_gone(now),
            "link": written.link,
        });
    }
    if let Some(ban) = &config.ban {
        described["ban"] = json!({
            "after": ban.after,
            "within_secs": ban.within.as_secs_f64(),
            "for_secs": ban.duration.as_secs_f64(),
        });
    }
    described
}
