//! One compiled `[[rule]]`, and which of its limits a caller gets: its
//! override, else its tier, else the rule's own (a retiring rule: the limit
//! of the current step).

use std::sync::Arc;

use super::limit::Limit;
use super::matcher::Matcher;
use super::sunset::Sunset;
use crate::clock::Nanos;
use crate::config::{
    AlgorithmKind, Charge, KeySource, MissingPolicy, RefundOn, Reserve, RuleConfig,
};
use crate::heavy_hitters::HeavyHitters;
use crate::key::body::BodyReading;
use crate::key::read_once::FieldsRead;
use crate::key::{KeyHasher, KeyLabels, KeyText, RequestFacts};
use crate::limiter::HoldLimits;
use crate::log_gate::LogGate;
use crate::metrics::RuleCounters;
use crate::store::bans::{BanPolicy, BanTable};
use prometheus::{IntCounter, IntGauge};

/// One compiled `[[rule]]`.
#[derive(Debug)]
pub struct Rule {
    pub name: Arc<str>,
    pub matcher: Matcher,
    pub key: Vec<KeySource>,
    pub missing: MissingPolicy,
    pub algorithm: AlgorithmKind,
    /// Every limit that must hold, in file order; never empty. Callers of
    /// a tier or an override get that variant's limits instead.
    pub limits: Vec<Limit>,
    /// Tiers, then overrides, each with its own limits and bucket tables.
    pub variants: Vec<Variant>,
    /// `tiers.by`: the source whose value picks a tier.
    pub tier_by: Option<KeySource>,
    /// The bucket key of each tier value (as `tier_by` alone hashes it) →
    /// its variant.
    pub tier_index: VariantIndex,
    /// The bucket key of each override → its variant.
    pub override_index: VariantIndex,
    /// `sunset`: the rule's one limit falls step by step.
    pub sunset: Option<Sunset>,
    /// Units each request takes from every limit (unused with
    /// `graphql_cost`, where the query's cost or `unreadable` decides).
    pub cost: u64,
    /// `cost = "graphql"`: a request takes its query's cost instead.
    pub graphql_cost: bool,
    /// `reserve`: a request takes its reservation instead.
    pub reserve: Option<Reserve>,
    /// Whether a request's cost is its own (`graphql_cost` or `reserve`):
    /// found when the rule applies, refused for good beyond a capacity,
    /// and said in `X-RateLimit-Cost`.
    pub variable_cost: bool,
    /// With `graphql_cost`: what a request whose cost cannot be read gets.
    pub unreadable: crate::config::Unreadable,
    /// Whether its key, `tiers.by` or cost reads the request's body or its
    /// GraphQL operation: a request it matches has its body read before it
    /// is decided (docs/conversation.md).
    pub reads_body: bool,
    /// What its key, `tiers.by` and `reserve` read of the body: a body it
    /// cannot read but a lenient server would is refused, whatever
    /// `missing` says (`proxy/standing.rs`).
    pub body_reading: BodyReading,
    /// Whether its key or `tiers.by` reads a JSON-RPC call
    /// (`jsonrpc:method`, `mcp:tool`): each call of a batch stands on its
    /// own (`proxy/batch.rs`).
    pub per_call: bool,
    /// `charge` and `refund_on`: what the rule settles after admission;
    /// `None` for most rules. Shared (an `Arc`) with the requests that
    /// carry it past their admission.
    pub billing: Option<Arc<Billing>>,
    pub shadow: bool,
    /// Delay mode's bounds for this rule's asks; `None` when over-budget
    /// requests are rejected (and always for shadow rules, which never
    /// hold anything).
    pub hold: Option<HoldLimits>,
    /// `ban`: when a key earns a ban. `None`: bans only by hand.
    pub ban: Option<BanPolicy>,
    /// This rule's bans (earned or by hand), kept across reloads while the
    /// rule keeps its name and key.
    pub bans: Arc<BanTable>,
    /// The keys this rule limits and sees most (`/admin/top`), kept across
    /// reloads like its bans.
    pub hitters: Arc<HeavyHitters>,
    /// How many of its refusals this rule may log each second.
    pub log_gate: LogGate,
    /// Whether the key (or `tiers.by`) reads a `jwt:<claim>`: only then is
    /// the request's token verified.
    pub uses_jwt: bool,
    /// The header fields and query parameters it reads to decide: a
    /// request it fits that carries one of them twice is refused as
    /// ambiguous (docs/configuration.md, "Keys").
    pub reads: FieldsRead,
    pub counters: RuleCounters,
}

/// What a rule settles after admission: a deferred charge, refunds of
/// failed exchanges, and the series that count them.
#[derive(Debug)]
pub struct Billing {
    pub charge: Option<Charge>,
    pub refund_on: RefundOn,
    /// Units taken at admission (what a refund gives back).
    pub cost: u64,
    /// Whether admission took a reservation (`reserve`): charges draw from
    /// it first, and what they did not use is given back when the request
    /// ends.
    pub reserves: bool,
    /// `sluice_budget_reserved_units{rule}`.
    pub reserved: IntGauge,
    /// `sluice_budget_overrun_total{rule}`.
    pub overrun: IntCounter,
    /// `sluice_budget_charged_total{rule}`.
    pub charged: IntCounter,
    /// `sluice_budget_refunded_total{rule}`.
    pub refunded: IntCounter,
    /// `sluice_charge_errors_total{rule}`.
    pub charge_errors: IntCounter,
}

/// Bucket key → variant number, with the keys already uniformly hashed.
pub type VariantIndex = std::collections::HashMap<u64, usize, foldhash::fast::FixedState>;

/// A tier or an override of a rule: its label (`tier:premium`,
/// `override:seller-42`, kept across reloads by label) and its limits.
#[derive(Debug)]
pub struct Variant {
    pub label: String,
    pub limits: Vec<Limit>,
}

impl Variant {
    /// An override's key as written in the config (`override:KEY`); `None`
    /// for a tier.
    pub fn override_key(&self) -> Option<&str> {
        self.label.strip_prefix("override:")
    }

    /// The label as it may be shown for a rule keyed on `sources`: an
    /// override's key is a caller's key, shown as `labels` show it.
    pub fn shown_label(&self, sources: &[KeySource], labels: &KeyLabels) -> String {
        match self.override_key() {
            Some(key) => format!("override:{}", labels.show_typed(sources, key)),
            None => self.label.clone(),
        }
    }
}

impl Rule {
    /// The limits for a caller with bucket key `key`: the current step of
    /// a retiring rule, else its override, else its tier, else the rule's
    /// own.
    #[inline]
    pub fn limits_for(
        &self,
        key: u64,
        facts: &RequestFacts<'_>,
        keys: &KeyHasher,
        now: Nanos,
    ) -> &[Limit] {
        self.limits_with_tier(key, now, |by| {
            keys.derive(std::slice::from_ref(by), facts, false).ok()
        })
    }

    /// The limits for a caller named by bucket key `key` outside a request
    /// (the admin API): as [`Rule::limits_for`], with the tier picked by
    /// `tier`, the text of the `tiers.by` value (`"premium"`), hashed as a
    /// request's value is. A tier value the rule does not know, or one that
    /// `tiers.by` could not produce, gets the rule's own limits, as a
    /// request carrying it would.
    pub fn limits_for_key(
        &self,
        key: u64,
        tier: Option<&str>,
        keys: &KeyHasher,
        now: Nanos,
    ) -> &[Limit] {
        self.limits_with_tier(key, now, |by| {
            keys.key_of_text(std::slice::from_ref(by), tier?).ok()
        })
    }

    /// The limits for the caller `key` of a rate limit service descriptor,
    /// whose entries `entry` looks up: as [`Rule::limits_for`], the tier
    /// picked by a `descriptor:<k>` entry's value.
    pub fn limits_for_entries<'e>(
        &self,
        key: u64,
        keys: &KeyHasher,
        now: Nanos,
        entry: impl Fn(&str) -> Option<&'e str>,
    ) -> &[Limit] {
        self.limits_with_tier(key, now, |by| {
            Some(keys.derive_entries(std::slice::from_ref(by), entry))
        })
    }

    /// The choice all three share; `tier_of` hashes the caller's `tiers.by`
    /// value (asked only when the rule has tiers and the caller no
    /// override).
    #[inline]
    fn limits_with_tier(
        &self,
        key: u64,
        now: Nanos,
        tier_of: impl FnOnce(&KeySource) -> Option<u64>,
    ) -> &[Limit] {
        if let Some(sunset) = &self.sunset {
            return sunset.limits_at(now);
        }
        if !self.override_index.is_empty() {
            if let Some(&variant) = self.override_index.get(&key) {
                return &self.variants[variant].limits;
            }
        }
        if let Some(tier) = self.tier_by.as_ref().and_then(tier_of) {
            if let Some(&variant) = self.tier_index.get(&tier) {
                return &self.variants[variant].limits;
            }
        }
        &self.limits
    }

    /// A strike against `key` (written `text`) started a ban: counted in
    /// `sluice_bans_total`, logged as `labels` show it, and the key named
    /// for the bans list.
    pub fn ban_started(&self, key: u64, text: KeyText, labels: &KeyLabels) {
        self.counters.bans_started.inc();
        let shown = labels.show(&self.key, &text);
        tracing::info!(rule = %self.name, key = %shown, "key banned");
        self.bans.name(key, text);
    }

    /// Every limit of the rule, variants included (for metrics).
    pub fn all_limits(&self) -> impl Iterator<Item = &Limit> {
        self.limits
            .iter()
            .chain(self.variants.iter().flat_map(|v| v.limits.iter()))
    }

    /// Whether a reload keeps this rule's buckets for `new`: same name, key
    /// and algorithm (docs/identity-and-policy.md, "Hot reload").
    pub fn keeps_buckets_for(&self, new: &RuleConfig) -> bool {
        *self.name == *new.name && self.key == new.key && self.algorithm == new.algorithm
    }

    /// Whether this rule limits requests in flight (its one limit is asked
    /// for a permit, not through the rate tables).
    pub fn is_concurrency(&self) -> bool {
        self.algorithm.counts_in_flight()
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::testing::compile;

    #[test]
    fn a_key_written_as_text_gets_its_override_else_the_named_tier_else_the_rules_limits() {
        let policy = compile(
            r#"
[[rule]]
name = "sellers"
key = ["header:x-seller"]
rate = "2/m"
tiers = { by = "header:x-plan", premium = { rate = "5/m" } }
overrides = { "s42" = { rate = "9/m" } }
"#,
        );
        let rule = &policy.rules[0];
        let count = |key: &str, tier: Option<&str>| {
            let key = policy.keys.key_of_text(&rule.key, key).unwrap();
            rule.limits_for_key(key, tier, &policy.keys, 0)[0].count
        };
        assert_eq!(count("s1", None), 2);
        assert_eq!(count("s1", Some("premium")), 5);
        // A tier value the rule does not know: the rule's own limits.
        assert_eq!(count("s1", Some("gold")), 2);
        // The override wins over the tier.
        assert_eq!(count("s42", Some("premium")), 9);
        assert_eq!(count("s42", None), 9);
        // The same table a request of that tier uses.
        let key = policy.keys.key_of_text(&rule.key, "s1").unwrap();
        let premium = rule.limits_for_key(key, Some("premium"), &policy.keys, 0);
        assert!(premium[0].table.same(&rule.variants[0].limits[0].table));
    }
}
