//! One compiled `[[rule]]`, and which of its limits a caller gets: its
//! override, else its tier, else the rule's own (a retiring rule: the limit
//! of the current step).

use std::sync::Arc;

use super::limit::Limit;
use super::matcher::Matcher;
use super::sunset::Sunset;
use crate::clock::Nanos;
use crate::config::{AlgorithmKind, KeySource, MissingPolicy, RuleConfig};
use crate::key::{KeyHasher, RequestFacts};
use crate::limiter::HoldLimits;
use crate::metrics::RuleCounters;
use crate::store::bans::{BanPolicy, BanTable};

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
    /// Units each request takes from every limit.
    pub cost: u64,
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
    /// Whether the key (or `tiers.by`) reads a `jwt:<claim>`: only then is
    /// the request's token verified.
    pub uses_jwt: bool,
    pub counters: RuleCounters,
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

impl Rule {
    /// The limits for a caller with bucket key `key`: its override, else
    /// its tier, else the rule's own.
    #[inline]
    pub fn limits_for(
        &self,
        key: u64,
        facts: &RequestFacts<'_>,
        keys: &KeyHasher,
        now: Nanos,
    ) -> &[Limit] {
        if let Some(sunset) = &self.sunset {
            return sunset.limits_at(now);
        }
        if !self.override_index.is_empty() {
            if let Some(&variant) = self.override_index.get(&key) {
                return &self.variants[variant].limits;
            }
        }
        if let Some(by) = &self.tier_by {
            if let Ok(tier) = keys.derive(std::slice::from_ref(by), facts, false) {
                if let Some(&variant) = self.tier_index.get(&tier) {
                    return &self.variants[variant].limits;
                }
            }
        }
        &self.limits
    }

    /// Every limit of the rule, variants included (for metrics).
    pub fn all_limits(&self) -> impl Iterator<Item = &Limit> {
        self.limits
            .iter()
            .chain(self.variants.iter().flat_map(|v| v.limits.iter()))
    }

    /// Whether a reload keeps this rule's buckets for `new`: same name, key
    /// and algorithm (README, "Hot reload").
    pub fn keeps_buckets_for(&self, new: &RuleConfig) -> bool {
        *self.name == *new.name && self.key == new.key && self.algorithm == new.algorithm
    }

    /// Whether this rule limits requests in flight (its one limit is asked
    /// for a permit, not through the rate tables).
    pub fn is_concurrency(&self) -> bool {
        self.algorithm == AlgorithmKind::Concurrency
    }
}
