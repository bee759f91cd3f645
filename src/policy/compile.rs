//! Compiling a config's rules against the running policy: each limit,
//! tier and override gets its bucket table from the previous policy when the
//! rule keeps its buckets (carried over as `on_change` says), else a new one
//! from the store; bans and heavy hitters are kept while the rule keeps its
//! name and key.

use std::sync::Arc;

use super::limit::{compile_limit, concurrency_limit, limiter, Limit};
use super::matcher::Matcher;
use super::rule::{Billing, Rule, Variant, VariantIndex};
use super::sunset::Sunset;
use super::Policy;
use crate::clock::Nanos;
use crate::config::{Config, KeySource, LimitConfig, OnChange, OnLimit, Reserve, RuleConfig, Unit};
use crate::heavy_hitters::HeavyHitters;
use crate::key::body::BodyReading;
use crate::key::read_once::FieldsRead;
use crate::key::KeyHasher;
use crate::limiter::adaptive::{Bounds, Controller};
use crate::limiter::{Concurrency, HoldLimits, Limiter};
use crate::log_gate::LogGate;
use crate::metrics::{Metrics, RuleCounters};
use crate::store::bans::{BanPolicy, BanTable};
use crate::store::{BucketTable, Carry, Store, TableName};

/// One `[[rule]]` of `config` compiled against `previous`: the tables,
/// bans and variants of the rule it keeps the buckets of, carried over at
/// `now`.
pub(super) fn compile_rule(
    rule: &RuleConfig,
    config: &Config,
    keys: &KeyHasher,
    metrics: &Metrics,
    store: &Store,
    previous: Option<&Policy>,
    now: Nanos,
) -> Rule {
    let status = config.response.status;
    let (limits, variants) = limits_and_variants(rule, store, previous, now, status);
    let (tier_by, tier_index, override_index) = variant_indexes(rule, keys, variants.len());
    let hold = hold_limits(rule);
    let (ban, bans, hitters) = kept_bans(rule, previous, store);
    let sunset = rule
        .sunset
        .as_ref()
        .filter(|_| !limits.is_empty() && !rule.limits.is_empty())
        .map(|sunset| Sunset::new(rule, sunset, &limits[0], status));
    let counters = metrics.rule_counters(&rule.name);
    // The key's sources and the tiers' `by`.
    let sources = || rule.key.iter().chain(rule.tiers.as_ref().map(|t| &t.by));
    Rule {
        sunset,
        variants,
        tier_by,
        tier_index,
        override_index,
        ban,
        bans,
        hitters,
        log_gate: LogGate::default(),
        name: Arc::from(rule.name.as_str()),
        matcher: Matcher::new(&rule.matcher, config.server.paths_alike)
            .counting_messages(rule.unit == Unit::Message),
        key: rule.key.clone(),
        missing: rule.missing,
        algorithm: rule.algorithm,
        limits,
        cost: rule.cost,
        graphql_cost: rule.graphql_cost,
        reserve: rule.reserve.clone(),
        variable_cost: rule.graphql_cost || rule.reserve.is_some(),
        unreadable: rule.unreadable,
        reads_body: rule.graphql_cost
            || rule.reserve.as_ref().is_some_and(Reserve::reads_body)
            || sources().any(KeySource::reads_body),
        body_reading: BodyReading {
            pointers: rule.reserve.as_ref().is_some_and(Reserve::reads_values)
                || sources().any(|source| matches!(source, KeySource::Body(_))),
            graphql: sources().any(|source| {
                matches!(source, KeySource::GraphqlOperation | KeySource::GraphqlType)
            }),
            calls: sources().any(KeySource::reads_call),
        },
        per_call: sources().any(KeySource::reads_call),
        billing: billing(rule, &counters),
        shadow: rule.shadow,
        hold,
        uses_jwt: sources().any(|source| matches!(source, KeySource::Jwt(_))),
        reads: FieldsRead::of(
            rule.matcher.header.iter().map(|(name, _)| name),
            sources(),
            // The header `[identity.jwt]` reads tokens from.
            config.identity.jwt.as_ref().map(|jwt| &jwt.header),
        ),
        counters,
    }
}

/// How long and how many of the rule's requests may be held, when it delays
/// (a shadow rule holds none).
fn hold_limits(rule: &RuleConfig) -> Option<HoldLimits> {
    match rule.on_limit {
        OnLimit::Delay {
            max_delay,
            max_queue,
        } if !rule.shadow => Some(HoldLimits {
            max_wait: saturating_nanos(max_delay),
            max_queued: max_queue.saturating_mul(most_taken(rule)),
        }),
        _ => None,
    }
}

/// The rule's ban, and the bans and heavy hitters it keeps from the
/// previous policy's rule of its name and key (else new ones), watched by
/// the store.
fn kept_bans(
    rule: &RuleConfig,
    previous: Option<&Policy>,
    store: &Store,
) -> (Option<BanPolicy>, Arc<BanTable>, Arc<HeavyHitters>) {
    let kept = previous.and_then(|p| {
        p.rules
            .iter()
            .find(|old| *old.name == *rule.name && old.key == rule.key)
    });
    let bans = kept.map_or_else(Arc::default, |old| Arc::clone(&old.bans));
    let ban = rule.ban.map(|ban| BanPolicy {
        after: ban.after,
        within: saturating_nanos(ban.within),
        duration: saturating_nanos(ban.duration),
    });
    store.watch_bans(&rule.name, &bans, ban);
    let hitters = kept.map_or_else(Arc::default, |old| Arc::clone(&old.hitters));
    (ban, bans, hitters)
}

/// The rule's limits and its tiers' and overrides', their tables kept
/// from the previous policy's rule whose buckets it keeps (else new).
fn limits_and_variants(
    rule: &RuleConfig,
    store: &Store,
    previous: Option<&Policy>,
    now: Nanos,
    status: http::StatusCode,
) -> (Vec<Limit>, Vec<Variant>) {
    let kept = previous.and_then(|p| p.rules.iter().find(|old| old.keeps_buckets_for(rule)));
    let tables = Tables {
        store,
        kept: kept.map(|old| old.limits.as_slice()),
        on_change: rule.on_change,
        now,
        rule: &rule.name,
        variant: None,
        adaptive: adaptive_bounds(rule),
    };
    let limits = match rule.max_in_flight {
        Some(max_in_flight) => {
            let limiter = Limiter::Concurrency(Concurrency::new(max_in_flight));
            let table = tables.table(1, None, &limiter);
            if let (Some(bounds), Some(controller)) = (tables.adaptive, table.adaptive()) {
                // A reload may have moved the bounds of the limit it learned.
                controller.rebound(bounds);
            }
            vec![concurrency_limit(rule, max_in_flight, table, status)]
        }
        None => tables.limits(rule, &rule.limits, status),
    };
    let variants = match limits.first() {
        // An adaptive rule's tiers share its permits, each up to its share
        // of the limit learned.
        Some(limit) if tables.adaptive.is_some() => adaptive_tiers(rule, limit, status),
        _ => compile_variants(rule, kept, store, now, status),
    };
    (limits, variants)
}

/// The rule's `charge` and `refund_on`, when it has either.
fn billing(rule: &RuleConfig, counters: &RuleCounters) -> Option<Arc<Billing>> {
    (rule.charge.is_some() || !rule.refund_on.is_empty()).then(|| {
        Arc::new(Billing {
            charge: rule.charge.clone(),
            refund_on: rule.refund_on,
            cost: rule.cost,
            reserves: rule.reserve.is_some(),
            reserved: counters.reserved.clone(),
            overrun: counters.overrun.clone(),
            charged: counters.charged.clone(),
            refunded: counters.refunded.clone(),
            charge_errors: counters.charge_errors.clone(),
        })
    })
}

/// The most one request of `rule` takes from a limit: its `cost`, or the
/// most it can reserve (`max_queue` counts held requests of that size).
fn most_taken(rule: &RuleConfig) -> u64 {
    let capacity = rule.limits.iter().map(|limit| limit.capacity).min();
    match &rule.reserve {
        Some(reserve) => reserve.most(capacity.unwrap_or(u64::MAX)),
        None => rule.cost,
    }
}

/// An `adaptive` rule's floor and ceiling (only such a rule has a floor).
fn adaptive_bounds(rule: &RuleConfig) -> Option<Bounds> {
    let (floor, ceiling) = rule.min_in_flight.zip(rule.max_in_flight)?;
    Some(Bounds { floor, ceiling })
}

/// An `adaptive` rule's tiers: the rule's one limit, on its table, each
/// with the tier's share.
fn adaptive_tiers(rule: &RuleConfig, limit: &Limit, status: http::StatusCode) -> Vec<Variant> {
    let ceiling = limit.limiter.capacity();
    rule.tiers
        .iter()
        .flat_map(|t| t.tiers.iter())
        .map(|tier| {
            let mut shared = concurrency_limit(rule, ceiling, limit.table.clone(), status);
            shared.limiter = Limiter::Concurrency(Concurrency {
                max_in_flight: ceiling,
                share: tier.share.unwrap_or(1000),
            });
            Variant {
                label: format!("tier:{}", tier.name),
                limits: vec![shared],
            }
        })
        .collect()
}

/// The limits of a rule's tiers, then its overrides, each keeping the
/// tables of the variant of the same label in `kept`.
fn compile_variants(
    rule: &RuleConfig,
    kept: Option<&Rule>,
    store: &Store,
    now: Nanos,
    status: http::StatusCode,
) -> Vec<Variant> {
    let tiers = rule
        .tiers
        .iter()
        .flat_map(|t| t.tiers.iter())
        .map(|v| ("tier", v));
    let overrides = rule.overrides.iter().map(|v| ("override", v));
    tiers
        .chain(overrides)
        .map(|(kind, variant)| {
            let label = format!("{kind}:{}", variant.name);
            let tables = Tables {
                store,
                kept: kept
                    .and_then(|old| old.variants.iter().find(|v| v.label == label))
                    .map(|old| old.limits.as_slice()),
                on_change: rule.on_change,
                now,
                rule: &rule.name,
                variant: Some(&label),
                adaptive: None,
            };
            let limits = tables.limits(rule, &variant.limits, status);
            Variant { label, limits }
        })
        .collect()
}

/// `tiers.by`, and the bucket key of each tier value and of each override
/// → its variant (tiers first, then overrides, as [`compile_variants`]
/// numbers them). Keys that cannot be hashed (validation reports them) are
/// left out.
fn variant_indexes(
    rule: &RuleConfig,
    keys: &KeyHasher,
    variants: usize,
) -> (Option<KeySource>, VariantIndex, VariantIndex) {
    let mut tier_index = VariantIndex::default();
    let mut override_index = VariantIndex::default();
    let mut number = 0;
    let tier_by = rule.tiers.as_ref().map(|tiers| {
        for tier in &tiers.tiers {
            if let Ok(key) = keys.key_of_text(std::slice::from_ref(&tiers.by), &tier.name) {
                tier_index.insert(key, number);
            }
            number += 1;
        }
        tiers.by.clone()
    });
    for entry in &rule.overrides {
        if let Ok(key) = keys.key_of_text(&rule.key, &entry.name) {
            override_index.insert(key, number);
        }
        number += 1;
    }
    debug_assert_eq!(number, variants);
    (tier_by, tier_index, override_index)
}

/// Where a rule's limits get their bucket tables when (re)compiling.
struct Tables<'a> {
    store: &'a Store,
    /// The previous policy's limits whose buckets these keep, if any.
    kept: Option<&'a [Limit]>,
    on_change: OnChange,
    now: Nanos,
    /// The rule the tables are named after (every key of one caller's
    /// rule then shares a Redis Cluster slot, its ban included)...
    rule: &'a str,
    /// ... and the tier or override they belong to, if any.
    variant: Option<&'a str>,
    /// An `adaptive` rule's bounds: its table holds a controller.
    adaptive: Option<Bounds>,
}

impl Tables<'_> {
    /// `limits` (a rule's or a variant's) compiled, each on its table.
    fn limits(
        &self,
        rule: &RuleConfig,
        limits: &[LimitConfig],
        status: http::StatusCode,
    ) -> Vec<Limit> {
        let count = limits.len();
        limits
            .iter()
            .map(|limit| {
                let limiter = limiter(rule.algorithm, limit);
                let table = self.table(count, Some(limit.rate.period), &limiter);
                compile_limit(rule, limit, count, limiter, table, status)
            })
            .collect()
    }

    /// The table for the rule's limit with `period` (of `count` limits):
    /// the kept rule's limit of the same period (when both rules have one
    /// limit, that one whatever its period), carried over to `limiter`; a
    /// new table when there is none, or when the limit changed and
    /// `on_change = "reset"`.
    fn table(
        &self,
        count: usize,
        period: Option<std::time::Duration>,
        limiter: &Limiter,
    ) -> BucketTable {
        let old = self.kept.and_then(|kept| match kept {
            [only] if count == 1 => Some(only),
            limits => limits.iter().find(|old| old.period == period),
        });
        let Some(old) = old else {
            return self.new_table(limiter);
        };
        if old.limiter == *limiter {
            return old.table.clone();
        }
        let carry = match self.on_change {
            OnChange::Reset => return self.new_table(limiter),
            OnChange::Keep => Carry::KeepSpent,
            OnChange::Proportional => Carry::KeepShare,
        };
        if self
            .store
            .carry(&old.table, &old.limiter, limiter, carry, self.now)
        {
            old.table.clone()
        } else {
            self.new_table(limiter)
        }
    }

    /// A new table, named after the rule and the limit's parameters: the
    /// same on every instance with the same config, so a networked store
    /// shares its buckets, and new for a changed limit.
    fn new_table(&self, limiter: &Limiter) -> BucketTable {
        let limit = match limiter {
            Limiter::TokenBucket(gcra) => {
                let (emission, tolerance) = gcra.intervals();
                format!("token.{emission}.{tolerance}")
            }
            Limiter::FixedWindow(window) => {
                let (period, count) = window.window();
                match window.calendar() {
                    // The zone and unit, so a calendar's buckets are its own.
                    Some(calendar) => format!(
                        "fixed.{}.{}.{count}",
                        calendar.zone(),
                        calendar.unit().symbol()
                    ),
                    None => format!("fixed.{period}.{count}"),
                }
            }
            Limiter::SlidingWindow(window) => {
                let (period, count) = window.window();
                format!("sliding.{period}.{count}")
            }
            Limiter::LeakyBucket(leaky) => {
                let (emission, queue) = leaky.interval();
                format!("leaky.{emission}.{queue}")
            }
            Limiter::SlidingLog(log) => {
                let (period, count) = log.window();
                format!("log.{period}.{count}")
            }
            Limiter::Concurrency(limit) => format!("concurrency.{}", limit.max_in_flight),
        };
        let limit = match self.variant {
            Some(variant) => format!("{variant}/{limit}"),
            None => limit,
        };
        let name = TableName {
            rule: self.rule.into(),
            limit: limit.into(),
        };
        match self.adaptive {
            Some(bounds) => self
                .store
                .adaptive_table(name, Arc::new(Controller::new(bounds))),
            None => self.store.named_table(name, limiter),
        }
    }
}

fn saturating_nanos(duration: std::time::Duration) -> Nanos {
    duration.as_nanos().min(u128::from(Nanos::MAX)) as Nanos
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::RequestFacts;
    use crate::policy::testing::compile;

    #[test]
    fn tiers_and_overrides_resolve_by_hash_and_keep_tables_across_recompiles() {
        let rules = r#"
[[rule]]
name = "sellers"
key = ["header:x-seller"]
rate = "2/m"
tiers = { by = "header:x-plan", premium = { rate = "5/m" } }
overrides = { "s42" = { rate = "9/m" } }
"#;
        let policy = compile(rules);
        let rule = &policy.rules[0];
        let mut headers = http::HeaderMap::new();
        headers.insert("x-seller", "s1".parse().unwrap());
        let facts = |headers: &http::HeaderMap| {
            let headers: &'static http::HeaderMap = Box::leak(Box::new(headers.clone()));
            RequestFacts {
                method: &http::Method::GET,
                path: "/",
                normalized_path: "/",
                query: None,
                host: None,
                headers,
                client_ip: std::net::IpAddr::from([127, 0, 0, 1]),
                claims: None,
                body: None,
                call: None,
            }
        };
        let count = |headers: &http::HeaderMap| {
            let f = facts(headers);
            let key = policy.keys.derive(&rule.key, &f, true).unwrap();
            rule.limits_for(key, &f, &policy.keys, 0)[0].count
        };
        assert_eq!(count(&headers), 2);
        headers.insert("x-plan", "premium".parse().unwrap());
        assert_eq!(count(&headers), 5);
        headers.insert("x-seller", "s42".parse().unwrap());
        assert_eq!(count(&headers), 9);

        // Recompiled from the same config: every table is kept.
        let store = Store::Memory(crate::store::MemoryStore::new(1000));
        let again = Policy::recompile(
            Arc::clone(&policy.config),
            &Metrics::new(),
            &store,
            Some(&policy),
            0,
        );
        let tables = |p: &Policy| -> Vec<BucketTable> {
            p.rules[0].all_limits().map(|l| l.table.clone()).collect()
        };
        for (old, new) in tables(&policy).iter().zip(tables(&again)) {
            assert!(old.same(&new));
        }
    }
}
