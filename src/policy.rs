//! The compiled policy: a [`Config`] turned into the immutable snapshot the
//! request path reads. Matchers are precompiled, limiters precomputed, header
//! fragments and metric handles prebuilt, so that deciding a request does no
//! parsing and no label lookups.
//!
//! The proxy holds the current [`Policy`] in an `ArcSwap`: a request loads it
//! once and keeps that `Arc` to the end, so a reload swaps in a new snapshot
//! atomically while requests in flight finish under the old one.
//!
//! Each limit of each rule owns a handle to its bucket table
//! ([`Limit::table`]). Compiling against the previous policy keeps the
//! tables of rules whose name, key and algorithm did not change (a reload
//! never hands every caller a fresh burst); a changed limit carries its
//! buckets over as the rule's `on_change` says. Tables nobody uses any more
//! are freed when the last request under the old snapshot ends.

use std::sync::Arc;

use http::HeaderValue;
use ipnet::IpNet;

use crate::clock::Nanos;
use crate::config::{
    describe_match, format_period, AlgorithmKind, Config, HeaderStyle, KeySource, LimitConfig,
    MatchConfig, MissingPolicy, OnChange, OnLimit, ResponseConfig, RuleConfig,
};
use crate::key::client_ip::ClientIpResolver;
use crate::key::glob::PathGlob;
use crate::key::jwt::JwtVerifier;
use crate::key::{KeyHasher, RequestFacts};
use crate::limiter::{
    Concurrency, FixedWindow, Gcra, HoldLimits, LeakyBucket, Limiter, SlidingLog, SlidingWindow,
    SunsetSchedule,
};
use crate::metrics::{Metrics, RuleCounters};
use crate::problem;
use crate::store::bans::{BanPolicy, BanTable};
use crate::store::{BucketTable, Carry, Store};

/// Everything the request path needs to decide, compiled once.
#[derive(Debug)]
pub struct Policy {
    pub rules: Vec<Rule>,
    pub allow: Vec<IpNet>,
    pub deny: Vec<IpNet>,
    pub client_ip: ClientIpResolver,
    pub keys: KeyHasher,
    /// `[identity.jwt]`: what `jwt:<claim>` sources read tokens with.
    pub jwt: Option<JwtVerifier>,
    pub response: ResponseConfig,
    pub normalize_path: bool,
    /// Longest request target accepted (414 above).
    pub max_uri_bytes: usize,
    /// Largest declared request body accepted (413 above); 0 = no limit.
    pub max_body_bytes: u64,
    /// The source config, for `check` and admin views.
    pub config: Arc<Config>,
}

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

/// A rule retiring its API version: the schedule, the headers that announce
/// it, and the limit in force at each step, compiled when the step is first
/// reached (same bucket table, so a caller's spent units carry from step to
/// step).
#[derive(Debug)]
pub struct Sunset {
    pub schedule: SunsetSchedule,
    deprecation: HeaderValue,
    sunset: HeaderValue,
    link: Option<HeaderValue>,
    steps: Box<[std::sync::OnceLock<Vec<Limit>>]>,
    /// What each step's limit is compiled from.
    rule: RuleConfig,
    table: BucketTable,
    status: http::StatusCode,
}

impl Sunset {
    fn new(
        rule: &RuleConfig,
        config: &crate::config::SunsetConfig,
        base: &Limit,
        status: http::StatusCode,
    ) -> Sunset {
        let schedule = config.schedule(&rule.limits[0]);
        // Step indexes run from 0 (before start) to n + 1 (from end on).
        let slots = schedule.steps().min(crate::limiter::sunset::MAX_STEPS) as usize + 2;
        let deprecation = format!("@{}", schedule.start() / 1_000_000_000);
        let sunset = httpdate::fmt_http_date(
            std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(schedule.end()),
        );
        Sunset {
            schedule,
            deprecation: HeaderValue::from_str(&deprecation)
                .expect("digits are a valid header value"),
            sunset: HeaderValue::from_str(&sunset).expect("an HTTP-date is a valid header value"),
            // Validation made the link an absolute URI, so a valid header value.
            link: config
                .link
                .as_ref()
                .and_then(|link| HeaderValue::from_str(&format!("<{link}>; rel=\"sunset\"")).ok()),
            steps: (0..slots).map(|_| std::sync::OnceLock::new()).collect(),
            rule: rule.clone(),
            table: base.table.clone(),
            status,
        }
    }

    /// `Deprecation: @<start as Unix seconds>` (RFC 9745).
    pub fn deprecation(&self) -> &HeaderValue {
        &self.deprecation
    }

    /// `Sunset: <end as HTTP-date>` (RFC 8594).
    pub fn sunset(&self) -> &HeaderValue {
        &self.sunset
    }

    /// `Link: <link>; rel="sunset"`, when a link was configured.
    pub fn link(&self) -> Option<&HeaderValue> {
        self.link.as_ref()
    }

    /// The limit in force at `now`.
    #[inline]
    pub fn limits_at(&self, now: Nanos) -> &[Limit] {
        let index = (self.schedule.step_index(now) as usize).min(self.steps.len() - 1);
        self.steps[index].get_or_init(|| {
            let written = self.rule.limits[0];
            let limit = LimitConfig {
                rate: crate::config::Rate {
                    count: self.schedule.count_at(now),
                    period: written.rate.period,
                },
                capacity: self.schedule.capacity_at(now),
            };
            let limiter = limiter(self.rule.algorithm, &limit);
            vec![compile_limit(
                &self.rule,
                &limit,
                1,
                limiter,
                self.table.clone(),
                self.status,
            )]
        })
    }
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
    /// and algorithm (SPEC.md).
    pub fn keeps_buckets_for(&self, new: &RuleConfig) -> bool {
        *self.name == *new.name && self.key == new.key && self.algorithm == new.algorithm
    }

    /// Whether this rule limits requests in flight (its one limit is asked
    /// for a permit, not through the rate tables).
    pub fn is_concurrency(&self) -> bool {
        self.algorithm == AlgorithmKind::Concurrency
    }
}

/// One limit of a rule, with everything its headers and 429 body need.
#[derive(Debug)]
pub struct Limit {
    /// This limit's bucket table.
    pub table: BucketTable,
    pub limiter: Limiter,
    /// The rate's period; `None` for a concurrency limit.
    pub period: Option<std::time::Duration>,
    /// The rate's COUNT (`max_in_flight` for a concurrency limit).
    pub count: u64,
    /// The name the rate-limit headers use: the rule's, plus the period
    /// when the rule has several limits (`search-1m`).
    pub name: String,
    /// The name as a JSON string literal, for `violated-policies`.
    pub name_json: String,
    /// The rule's name as a JSON string literal, for the body's `rule`.
    pub rule_json: String,
    /// `"name";q=COUNT;w=SECONDS` for `RateLimit-Policy`.
    pub policy_item: String,
    /// The same, ready to send when this is the only applicable limit.
    pub policy_header: HeaderValue,
    /// The bucket's capacity, ready for `X-RateLimit-Limit`.
    pub limit_header: HeaderValue,
    /// The 429 body up to the violated-policies list
    /// ([`problem::quota_exceeded_head`]), whose detail reads `rule 'name'
    /// allows N requests per P`.
    pub problem_head: String,
}

/// A rule's `match`: every given field must fit; within a field any entry may.
#[derive(Debug, Default)]
pub struct Matcher {
    path: Vec<String>,
    path_prefix: Vec<String>,
    path_glob: Vec<PathGlob>,
    method: Vec<http::Method>,
    host: Vec<String>,
}

impl Matcher {
    fn new(config: &MatchConfig) -> Matcher {
        Matcher {
            path: config.path.clone(),
            path_prefix: config.path_prefix.clone(),
            path_glob: config.path_glob.iter().map(|g| PathGlob::new(g)).collect(),
            method: config.method.clone(),
            host: config.host.clone(),
        }
    }

    /// Whether the request fits.
    #[inline]
    pub fn matches(&self, facts: &RequestFacts<'_>) -> bool {
        (self.method.is_empty() || self.method.iter().any(|m| m == facts.method))
            && (self.path.is_empty() || self.path.iter().any(|p| p == facts.path))
            && (self.path_prefix.is_empty()
                || self
                    .path_prefix
                    .iter()
                    .any(|p| facts.path.starts_with(p.as_str())))
            && (self.path_glob.is_empty() || self.path_glob.iter().any(|g| g.matches(facts.path)))
            && (self.host.is_empty()
                || facts
                    .host
                    .is_some_and(|h| self.host.iter().any(|c| c.eq_ignore_ascii_case(h))))
    }
}

impl Policy {
    /// Compiles `config` with new, empty bucket tables from `store`.
    pub fn compile(config: Arc<Config>, metrics: &Metrics, store: &Store) -> Policy {
        Policy::recompile(config, metrics, store, None, 0)
    }

    /// Compiles `config`, keeping the bucket tables of `previous` for every
    /// rule whose name, key and algorithm are unchanged; a limit that
    /// changed is carried over at `now` as the rule's `on_change` says.
    pub fn recompile(
        config: Arc<Config>,
        metrics: &Metrics,
        store: &Store,
        previous: Option<&Policy>,
        now: Nanos,
    ) -> Policy {
        // The same seed keeps every bucket key the same across a reload
        // (the rules below hash their tier and override keys with it).
        let keys = match previous {
            Some(previous) => previous.keys.with_ipv6_prefix(config.server.ipv6_prefix),
            None => KeyHasher::new(config.server.ipv6_prefix),
        };
        let rules = config
            .rules
            .iter()
            .map(|rule| {
                let kept =
                    previous.and_then(|p| p.rules.iter().find(|old| old.keeps_buckets_for(rule)));
                let tables = Tables {
                    store,
                    kept: kept.map(|old| old.limits.as_slice()),
                    on_change: rule.on_change,
                    now,
                };
                let status = config.response.status;
                let variants = compile_variants(rule, kept, store, now, status);
                let (tier_by, tier_index, override_index) =
                    variant_indexes(rule, &keys, variants.len());
                let limits = match rule.max_in_flight {
                    Some(max_in_flight) => {
                        let limiter = Limiter::Concurrency(Concurrency { max_in_flight });
                        let table = tables.table(1, None, &limiter);
                        vec![concurrency_limit(
                            rule,
                            max_in_flight,
                            table,
                            config.response.status,
                        )]
                    }
                    None => rule
                        .limits
                        .iter()
                        .map(|limit| {
                            let limiter = limiter(rule.algorithm, limit);
                            let table =
                                tables.table(rule.limits.len(), Some(limit.rate.period), &limiter);
                            compile_limit(rule, limit, rule.limits.len(), limiter, table, status)
                        })
                        .collect(),
                };
                let hold = match rule.on_limit {
                    OnLimit::Delay {
                        max_delay,
                        max_queue,
                    } if !rule.shadow => Some(HoldLimits {
                        max_wait: max_delay.as_nanos().min(u128::from(Nanos::MAX)) as Nanos,
                        max_queued: max_queue.saturating_mul(rule.cost),
                    }),
                    _ => None,
                };
                let bans = previous
                    .and_then(|p| {
                        p.rules
                            .iter()
                            .find(|old| *old.name == *rule.name && old.key == rule.key)
                    })
                    .map_or_else(Arc::default, |old| Arc::clone(&old.bans));
                let sunset = rule
                    .sunset
                    .as_ref()
                    .filter(|_| !limits.is_empty() && !rule.limits.is_empty())
                    .map(|sunset| Sunset::new(rule, sunset, &limits[0], status));
                Rule {
                    sunset,
                    variants,
                    tier_by,
                    tier_index,
                    override_index,
                    ban: rule.ban.map(|ban| BanPolicy {
                        after: ban.after,
                        within: saturating_nanos(ban.within),
                        duration: saturating_nanos(ban.duration),
                    }),
                    bans,
                    name: Arc::from(rule.name.as_str()),
                    matcher: Matcher::new(&rule.matcher),
                    key: rule.key.clone(),
                    missing: rule.missing,
                    algorithm: rule.algorithm,
                    limits,
                    cost: rule.cost,
                    shadow: rule.shadow,
                    hold,
                    uses_jwt: rule
                        .key
                        .iter()
                        .chain(rule.tiers.as_ref().map(|tiers| &tiers.by))
                        .any(|source| matches!(source, KeySource::Jwt(_))),
                    counters: metrics.rule_counters(&rule.name),
                }
            })
            .collect();
        Policy {
            rules,
            allow: config.access.allow.clone(),
            deny: config.access.deny.clone(),
            client_ip: ClientIpResolver::new(
                config.server.trusted_proxies.clone(),
                config.server.forwarded_header,
            ),
            keys,
            // Validation checked the key; should it still not build, every
            // jwt: source is missing, which never picks a wrong bucket.
            jwt: config.identity.jwt.as_ref().and_then(|jwt| {
                JwtVerifier::new(jwt)
                    .inspect_err(|error| tracing::error!(%error, "[identity.jwt] is unusable"))
                    .ok()
            }),
            response: config.response.clone(),
            normalize_path: config.server.normalize_path,
            max_uri_bytes: config.server.max_uri_bytes,
            max_body_bytes: config.server.max_body_bytes,
            config,
        }
    }

    /// Whether any rate-limit header is sent at all.
    pub fn sends_headers(&self) -> bool {
        self.response.headers != HeaderStyle::None
    }
}

/// The limiter for one rate limit of a rule.
fn limiter(algorithm: AlgorithmKind, limit: &LimitConfig) -> Limiter {
    match algorithm {
        AlgorithmKind::TokenBucket => Limiter::TokenBucket(Gcra::new(limit.rate, limit.capacity)),
        AlgorithmKind::FixedWindow => Limiter::FixedWindow(FixedWindow::new(limit.rate)),
        AlgorithmKind::SlidingWindow => Limiter::SlidingWindow(SlidingWindow::new(limit.rate)),
        AlgorithmKind::SlidingLog => Limiter::SlidingLog(SlidingLog::new(limit.rate)),
        AlgorithmKind::LeakyBucket => {
            Limiter::LeakyBucket(LeakyBucket::new(limit.rate, limit.capacity))
        }
        // A concurrency rule's config lists no rate limit (validation), so
        // this arm only keeps the match whole; see `concurrency_limit`.
        AlgorithmKind::Concurrency => Limiter::Concurrency(Concurrency {
            max_in_flight: limit.capacity,
        }),
    }
}

/// The one limit of a `concurrency` rule.
fn concurrency_limit(
    rule: &RuleConfig,
    max_in_flight: u64,
    table: BucketTable,
    status: http::StatusCode,
) -> Limit {
    let detail = format!(
        "rule '{}' allows {max_in_flight} requests in flight at once",
        rule.name
    );
    let policy_item = format!(
        "\"{}\";q={max_in_flight};qu=\"concurrent-requests\"",
        rule.name
    );
    Limit {
        table,
        limiter: Limiter::Concurrency(Concurrency { max_in_flight }),
        period: None,
        count: max_in_flight,
        name_json: problem::json_string(&rule.name),
        rule_json: problem::json_string(&rule.name),
        name: rule.name.clone(),
        policy_header: HeaderValue::from_str(&policy_item)
            .unwrap_or_else(|_| HeaderValue::from_static("")),
        policy_item,
        limit_header: HeaderValue::from(max_in_flight),
        problem_head: problem::quota_exceeded_head(status, &detail),
    }
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
            };
            let count = variant.limits.len();
            let limits = variant
                .limits
                .iter()
                .map(|limit| {
                    let limiter = limiter(rule.algorithm, limit);
                    let table = tables.table(count, Some(limit.rate.period), &limiter);
                    compile_limit(rule, limit, count, limiter, table, status)
                })
                .collect();
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

fn compile_limit(
    rule: &RuleConfig,
    limit: &LimitConfig,
    limit_count: usize,
    limiter: Limiter,
    table: BucketTable,
    status: http::StatusCode,
) -> Limit {
    let period = format_period(limit.rate.period);
    let name = if limit_count > 1 {
        format!("{}-{period}", rule.name)
    } else {
        rule.name.clone()
    };
    let unit = if rule.cost == 1 { "requests" } else { "units" };
    let mut detail = format!(
        "rule '{}' allows {} {unit} per {period}",
        rule.name, limit.rate.count
    );
    if rule.cost != 1 {
        detail.push_str(&format!("; each request costs {}", rule.cost));
    }
    let policy_item = format!(
        "\"{name}\";q={};w={}",
        limit.rate.count,
        limit.rate.period.as_secs().max(1)
    );
    Limit {
        table,
        limiter,
        period: Some(limit.rate.period),
        count: limit.rate.count,
        name_json: problem::json_string(&name),
        rule_json: problem::json_string(&rule.name),
        name,
        policy_header: HeaderValue::from_str(&policy_item)
            .unwrap_or_else(|_| HeaderValue::from_static("")),
        policy_item,
        limit_header: HeaderValue::from(limiter.capacity()),
        problem_head: problem::quota_exceeded_head(status, &detail),
    }
}

/// Where a rule's limits get their bucket tables when (re)compiling.
struct Tables<'a> {
    store: &'a Store,
    /// The previous policy's limits whose buckets these keep, if any.
    kept: Option<&'a [Limit]>,
    on_change: OnChange,
    now: Nanos,
}

impl Tables<'_> {
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
            return self.store.table(limiter);
        };
        if old.limiter == *limiter {
            return old.table.clone();
        }
        let carry = match self.on_change {
            OnChange::Reset => return self.store.table(limiter),
            OnChange::Keep => Carry::KeepSpent,
            OnChange::Proportional => Carry::KeepShare,
        };
        if self
            .store
            .carry(&old.table, &old.limiter, limiter, carry, self.now)
        {
            old.table.clone()
        } else {
            self.store.table(limiter)
        }
    }
}

impl Limit {
    /// Whether this is a concurrency limit (no period, no reset).
    pub fn is_concurrency(&self) -> bool {
        matches!(self.limiter, Limiter::Concurrency(_))
    }
}

fn saturating_nanos(duration: std::time::Duration) -> Nanos {
    duration.as_nanos().min(u128::from(Nanos::MAX)) as Nanos
}

/// The effective rules as JSON, for `GET /admin/rules`: what each rule
/// matches and keys on and the limits in force at `now`.
pub fn describe(policy: &Policy, now: Nanos) -> serde_json::Value {
    use serde_json::json;
    let limits_json = |limits: &[Limit]| -> Vec<serde_json::Value> {
        limits
            .iter()
            .map(|limit| match limit.period {
                Some(period) => json!({
                    "name": limit.name,
                    "count": limit.count,
                    "period_secs": period.as_secs_f64(),
                    "capacity": limit.limiter.capacity(),
                }),
                None => json!({
                    "name": limit.name,
                    "max_in_flight": limit.limiter.capacity(),
                }),
            })
            .collect()
    };
    let rules: Vec<serde_json::Value> = policy
        .rules
        .iter()
        .zip(&policy.config.rules)
        .map(|(rule, config)| {
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
                "cost": rule.cost,
                "on_limit": if rule.hold.is_some() { "delay" } else { "reject" },
                "shadow": rule.shadow,
                "on_change": format!("{:?}", config.on_change).to_lowercase(),
            });
            if let Some(by) = &rule.tier_by {
                let tiers: Vec<serde_json::Value> = rule
                    .variants
                    .iter()
                    .filter_map(|v| Some((v.label.strip_prefix("tier:")?, v)))
                    .map(|(name, v)| json!({ "tier": name, "limits": limits_json(&v.limits) }))
                    .collect();
                described["tiers"] = json!({ "by": by.to_string(), "tiers": tiers });
            }
            let overrides: Vec<serde_json::Value> = rule
                .variants
                .iter()
                .filter_map(|v| Some((v.label.strip_prefix("override:")?, v)))
                .map(|(key, v)| json!({ "key": key, "limits": limits_json(&v.limits) }))
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
        })
        .collect();
    json!({ "rules": rules })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(rules: &str) -> Policy {
        let text = format!("[server]\nupstream = \"http://127.0.0.1:1\"\n{rules}");
        let config = Config::from_toml(&text, "test.toml").unwrap_or_else(|e| panic!("{e}"));
        let store = Store::Memory(crate::store::MemoryStore::new(1000));
        Policy::compile(Arc::new(config), &Metrics::new(), &store)
    }

    #[test]
    fn a_sunset_rule_takes_the_limit_of_each_step_and_shares_one_table() {
        // 2026-12-01 to 2026-12-05, daily steps, 100/d → 20/d, burst 50:
        // n = 4, COUNT 100, 80, 60, 40, 20; capacity 50, 40, 30, 20, 10.
        let policy = compile(
            r#"
[[rule]]
name = "v0"
rate = "100/d"
burst = 50
sunset = { start = 2026-12-01T00:00:00Z, end = 2026-12-05T00:00:00Z, to = "20/d" }
"#,
        );
        let rule = &policy.rules[0];
        let sunset = rule.sunset.as_ref().expect("a sunset");
        const DAY: Nanos = 86_400_000_000_000;
        let start = crate::config::parse_timestamp("2026-12-01T00:00:00Z").unwrap();
        let at = |t: Nanos| {
            let limits = sunset.limits_at(t);
            assert_eq!(limits.len(), 1);
            assert!(limits[0].table.same(&rule.limits[0].table));
            (
                limits[0].count,
                limits[0].limiter.capacity(),
                limits[0].policy_item.clone(),
            )
        };
        assert_eq!(at(start - 1), (100, 50, "\"v0\";q=100;w=86400".to_owned()));
        assert_eq!(at(start).0, 80);
        assert_eq!(at(start + DAY - 1).0, 80);
        assert_eq!(at(start + DAY).0, 60);
        assert_eq!(
            at(start + 2 * DAY + DAY / 2),
            (40, 20, "\"v0\";q=40;w=86400".to_owned())
        );
        assert_eq!(
            at(start + 3 * DAY),
            (20, 10, "\"v0\";q=20;w=86400".to_owned())
        );
        assert_eq!(at(start + 4 * DAY).0, 20);
        assert!(!sunset.schedule.is_gone(start + 10 * DAY));
        // The limit of a step is compiled once and reused.
        assert!(std::ptr::eq(
            sunset.limits_at(start),
            sunset.limits_at(start + 1)
        ));
    }

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
                query: None,
                host: None,
                headers,
                client_ip: std::net::IpAddr::from([127, 0, 0, 1]),
                claims: None,
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
