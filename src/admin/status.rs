//! `GET /admin/status`: what the status page (`GET /`, [`super::status_page`])
//! shows, as JSON: each rule's live rates and held requests, the most
//! limited keys, the store's state, client connections by protocol, the
//! config generation and last reload, uptime and version.
//!
//! Rates need history, and the request path must not pay for it: a task
//! that runs with the admin listener ([`sample`]) reads every rule's
//! `sluice_requests_total` counters once a second into a ring of the last
//! [`SAMPLES`] readings (a few numbers per rule: bounded memory). An answer
//! compares the counters as they are now with the oldest reading, so its
//! rates cover the last ~10 s. Readings name rules, so a rule is followed
//! across reloads by its name (as its counters are: they are the registry's
//! series for that name).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::Admin;
use crate::config::RuleConfig;
use crate::heavy_hitters::Kind;
use crate::limiter::adaptive::Controller;
use crate::metrics::RuleCounters;
use crate::policy::{Policy, Rule};
use crate::reload::History;

/// How often the counters are read.
const INTERVAL: Duration = Duration::from_secs(1);
/// Readings kept: 10 intervals' worth of differences.
const SAMPLES: usize = 11;
/// Rates are never divided by less than this, so the first answers after
/// start (one reading, taken a moment ago) do not turn a handful of
/// requests into a spike.
const MIN_SPAN: Duration = Duration::from_secs(1);
/// Keys the status lists under `top_limited`.
pub(super) const TOP_KEYS: usize = 10;

/// What the status page remembers between answers: when sluice started and
/// the last readings of the counters.
#[derive(Debug)]
pub(super) struct Status {
    started: Instant,
    started_at: SystemTime,
    samples: Mutex<VecDeque<Sample>>,
}

/// One reading of every rule's counters.
#[derive(Debug)]
struct Sample {
    at: Instant,
    rules: Vec<(Arc<str>, Counts)>,
}

/// A rule's request counters, as totals since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    /// `outcome="allowed"`: passed at once.
    admitted: u64,
    limited: u64,
    /// Held in delay mode, then passed.
    delayed: u64,
    shadow_limited: u64,
    /// Units charged after answers (`charge`: docs/charging.md).
    charged: u64,
}

impl Counts {
    fn of(counters: &RuleCounters) -> Counts {
        Counts {
            admitted: counters.allowed.get(),
            limited: counters.limited.get(),
            delayed: counters.delayed.get(),
            shadow_limited: counters.shadow_limited.get(),
            charged: counters.charged.get(),
        }
    }

    /// Per second from `earlier` to `self`, `seconds` apart. Counters only
    /// grow; `saturating_sub` keeps a reading from before a restart of the
    /// registry (none today) from going negative.
    fn rates_since(&self, earlier: &Counts, seconds: f64) -> [f64; 5] {
        let rate = |now: u64, then: u64| round1(now.saturating_sub(then) as f64 / seconds);
        [
            rate(self.admitted, earlier.admitted),
            rate(self.limited, earlier.limited),
            rate(self.delayed, earlier.delayed),
            rate(self.shadow_limited, earlier.shadow_limited),
            rate(self.charged, earlier.charged),
        ]
    }
}

/// One decimal: what the page shows, and all a rate over 10 s can say.
fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

impl Status {
    pub(super) fn new() -> Status {
        Status {
            started: Instant::now(),
            started_at: SystemTime::now(),
            samples: Mutex::new(VecDeque::with_capacity(SAMPLES)),
        }
    }

    /// Reads every rule's counters at `at` into the ring.
    fn record(&self, policy: &Policy, at: Instant) {
        let rules = policy
            .rules
            .iter()
            .map(|rule| (Arc::clone(&rule.name), Counts::of(&rule.counters)))
            .collect();
        let mut samples = self.lock();
        if samples.len() == SAMPLES {
            samples.pop_front();
        }
        samples.push_back(Sample { at, rules });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Sample>> {
        self.samples
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Reads the counters every [`INTERVAL`] until the task is dropped (it runs
/// inside the admin listener's task, and ends with it).
pub(super) async fn sample(admin: Admin) {
    let mut interval = tokio::time::interval(INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        admin.status.record(&admin.proxy.policy(), Instant::now());
    }
}

/// The `/admin/status` answer (docs/operations.md, "Admin endpoints").
pub(super) fn snapshot(admin: &Admin) -> Value {
    let proxy = &admin.proxy;
    let status = &admin.status;
    let policy = proxy.policy();
    let now = Instant::now();
    let samples = status.lock();
    let oldest = samples.front();
    let window = oldest.map_or(Duration::ZERO, |oldest| now.duration_since(oldest.at));
    let seconds = window.max(MIN_SPAN).as_secs_f64();
    let rules: Vec<Value> = policy
        .rules
        .iter()
        .zip(&policy.config.rules)
        .map(|(rule, config)| rule_status(rule, config, &samples, now))
        .collect();
    drop(samples);
    let top = super::top::top_keys(&policy, None, Kind::Limited, TOP_KEYS, proxy.now());
    let store = proxy.store();
    let fallback = proxy.metrics().store_fallback_active();
    let uptime = now.duration_since(status.started).as_secs();
    let upstreams = super::upstreams::upstreams(
        &proxy.upstreams().load(),
        &policy.config.upstreams,
        proxy.now(),
    )["upstreams"]
        .take();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "started": unix_secs(status.started_at),
        "uptime_secs": uptime,
        "ready": proxy.is_ready(),
        "window_secs": round1(seconds),
        "store": {
            "backend": store.backend_name(),
            "fallback_active": fallback,
        },
        "connections": connections(proxy.metrics()),
        "config": config_state(admin),
        "rules": rules,
        "upstreams": upstreams,
        "top_limited": top,
    })
}

/// Client connections open now, by protocol (`sluice_connections`).
fn connections(metrics: &crate::metrics::Metrics) -> Value {
    use crate::metrics::Protocol;
    let open = |protocol| metrics.connections.open(protocol);
    json!({
        "http1": open(Protocol::Http1),
        "h2": open(Protocol::H2),
        "h3": open(Protocol::H3),
    })
}

/// One rule's entry: its limits, rates since the oldest reading that knows
/// it, totals, requests held and history.
fn rule_status(
    rule: &Rule,
    config: &RuleConfig,
    samples: &VecDeque<Sample>,
    now: Instant,
) -> Value {
    let counts = Counts::of(&rule.counters);
    // The oldest reading that knows the rule: a rule added by a
    // reload has its rates from when it was first read.
    let since = samples.iter().find_map(|sample| {
        let (_, then) = sample.rules.iter().find(|(name, _)| *name == rule.name)?;
        Some((*then, now.duration_since(sample.at)))
    });
    let [admitted, limited, delayed, shadow_limited, charged] = match since {
        Some((then, span)) => counts.rates_since(&then, span.max(MIN_SPAN).as_secs_f64()),
        None => [0.0; 5],
    };
    let charges = config.charge.is_some();
    let adaptive = rule.limits.first().and_then(crate::policy::Limit::adaptive);
    let limits = limits_text(rule, config, adaptive);
    json!({
        "name": &*rule.name,
        "limits": limits,
        "adaptive_limit": adaptive.map(|controller| controller.limit()),
        "shadow": rule.shadow,
        "delay": rule.hold.is_some(),
        "rates_per_sec": {
            "admitted": admitted,
            "limited": limited,
            "delayed": delayed,
            "shadow_limited": shadow_limited,
            "charged": charges.then_some(charged),
        },
        "totals": {
            "admitted": counts.admitted,
            "limited": counts.limited,
            "delayed": counts.delayed,
            "shadow_limited": counts.shadow_limited,
            "charged": charges.then_some(counts.charged),
        },
        "queue_depth": rule.counters.queue_depth.get(),
        // Units requests in flight hold (`reserve`), else null.
        "reserved": config.reserve.as_ref().map(|_| rule.counters.reserved.get()),
        "history": history(samples, &rule.name),
    })
}

/// A rule's limits as the page says them: learned, costed or counting
/// messages when they are.
fn limits_text(rule: &Rule, config: &RuleConfig, adaptive: Option<&Arc<Controller>>) -> String {
    let mut limits = crate::config::describe_limits(config);
    if let Some(controller) = adaptive {
        limits = format!("{} in flight now, learned ({limits})", controller.limit());
    }
    // What a request takes, when it is not one unit.
    if rule.graphql_cost {
        limits.push_str(", a request taking its GraphQL query's cost");
    }
    // What it counts, when it is not requests.
    if config.unit == crate::config::Unit::Message {
        limits.push_str(" WebSocket and gRPC messages");
    }
    limits
}

/// Per-second admitted (at once or after a hold) and limited requests
/// between consecutive readings, oldest first: the page's sparklines.
fn history(samples: &VecDeque<Sample>, rule: &Arc<str>) -> Value {
    let counts = |sample: &Sample| {
        sample
            .rules
            .iter()
            .find(|(name, _)| name == rule)
            .map(|(_, counts)| *counts)
    };
    let mut admitted = Vec::with_capacity(SAMPLES);
    let mut limited = Vec::with_capacity(SAMPLES);
    for (before, after) in samples.iter().zip(samples.iter().skip(1)) {
        let seconds = after.at.duration_since(before.at).max(MIN_SPAN / 10);
        let [a, l, d, _, _] = match (counts(before), counts(after)) {
            (Some(then), Some(now)) => now.rates_since(&then, seconds.as_secs_f64()),
            _ => [0.0; 5],
        };
        admitted.push(round1(a + d));
        limited.push(l);
    }
    json!({ "admitted": admitted, "limited": limited })
}

/// The config generation, the reloads counted and the last one.
fn config_state(admin: &Admin) -> Value {
    let metrics = admin.proxy.metrics();
    let history = admin
        .reloader
        .as_ref()
        .map(|reloader| reloader.history())
        .unwrap_or_default();
    let History { generation, last } = history;
    let last = last.map(|last| {
        let ago = last.at.elapsed().unwrap_or_default().as_secs();
        let (result, error) = match last.result {
            Ok(()) => ("ok", None),
            Err(error) => ("error", Some(error)),
        };
        json!({
            "at": unix_secs(last.at),
            "ago_secs": ago,
            "trigger": last.trigger.name(),
            "result": result,
            "error": error,
        })
    });
    json!({
        "generation": generation,
        "reloadable": admin.reloader.is_some(),
        "reloads": {
            "ok": metrics.config_reloads_ok.get(),
            "error": metrics.config_reloads_error.get(),
        },
        "last_reload": last,
    })
}

fn unix_secs(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_per_second_to_one_decimal() {
        let then = Counts {
            admitted: 10,
            limited: 0,
            delayed: 5,
            shadow_limited: 0,
            charged: 1_000,
        };
        let now = Counts {
            admitted: 110,
            limited: 33,
            delayed: 5,
            shadow_limited: 1,
            charged: 13_345,
        };
        let rates = now.rates_since(&then, 10.0);
        assert_eq!(rates, [10.0, 3.3, 0.0, 0.1, 1234.5]);
    }
}
