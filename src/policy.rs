//! The compiled policy: a [`Config`] turned into the immutable snapshot the
//! request path reads. Matchers are precompiled, limiters precomputed, header
//! fragments and metric handles prebuilt, so that deciding a request does no
//! parsing and no label lookups.
//!
//! The proxy holds the current [`Policy`] in an `ArcSwap`: a request loads it
//! once and keeps that `Arc` to the end, so a reload (later issue) swaps in a
//! new snapshot atomically while requests in flight finish under the old one.
//! Each limit of each rule has its own bucket table, indexed by
//! [`Limit::table`]; a reload will map unchanged rules (same name, key and
//! algorithm) to their old table indexes so buckets survive.

use std::sync::Arc;

use http::HeaderValue;
use ipnet::IpNet;
use prometheus::{Histogram, IntCounter, IntGauge};

use crate::clock::Nanos;
use crate::config::{
    AlgorithmKind, Config, HeaderStyle, KeySource, LimitConfig, MatchConfig, MissingPolicy,
    OnLimit, ResponseConfig, RuleConfig,
};
use crate::key::client_ip::ClientIpResolver;
use crate::key::glob::PathGlob;
use crate::key::jwt::JwtVerifier;
use crate::key::{KeyHasher, RequestFacts};
use crate::limiter::{
    Concurrency, FixedWindow, Gcra, HoldLimits, LeakyBucket, Limiter, SlidingLog, SlidingWindow,
};
use crate::metrics::Metrics;
use crate::proxy::respond;

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
    /// Every limit that must hold, in file order; never empty.
    pub limits: Vec<Limit>,
    /// Units each request takes from every limit.
    pub cost: u64,
    pub shadow: bool,
    /// Delay mode's bounds for this rule's asks; `None` when over-budget
    /// requests are rejected (and always for shadow rules, which never
    /// hold anything).
    pub hold: Option<HoldLimits>,
    /// Whether the key (or `tiers.by`) reads a `jwt:<claim>`: only then is
    /// the request's token verified.
    pub uses_jwt: bool,
    pub counters: RuleCounters,
}

impl Rule {
    /// Whether this rule limits requests in flight (its one limit is asked
    /// for a permit, not through the rate tables).
    pub fn is_concurrency(&self) -> bool {
        self.algorithm == AlgorithmKind::Concurrency
    }
}

/// One limit of a rule, with everything its headers and 429 body need.
#[derive(Debug)]
pub struct Limit {
    /// Index of this limit's bucket table in the store.
    pub table: usize,
    pub limiter: Limiter,
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
    /// The 429 body up to the violated-policies list (see `respond`),
    /// whose detail reads `rule 'name' allows N requests per P`.
    pub problem_head: String,
}

/// Per-rule `sluice_requests_total` children, resolved once.
#[derive(Debug, Clone)]
pub struct RuleCounters {
    pub allowed: IntCounter,
    pub limited: IntCounter,
    pub shadow_limited: IntCounter,
    pub denied: IntCounter,
    pub missing_key: IntCounter,
    /// `sluice_delay_seconds{rule}`.
    pub delay_seconds: Histogram,
    /// `sluice_queue_depth{rule}`.
    pub queue_depth: IntGauge,
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
    /// Compiles `config`. Limits get bucket tables in file order: the
    /// first rule's limits first.
    pub fn compile(config: Arc<Config>, metrics: &Metrics) -> Policy {
        let mut next_table = 0;
        let rules = config
            .rules
            .iter()
            .map(|rule| {
                let limits = match rule.max_in_flight {
                    Some(max_in_flight) => {
                        next_table += 1;
                        vec![concurrency_limit(
                            rule,
                            max_in_flight,
                            next_table - 1,
                            config.response.status,
                        )]
                    }
                    None => rule
                        .limits
                        .iter()
                        .map(|limit| {
                            next_table += 1;
                            compile_limit(rule, limit, next_table - 1, config.response.status)
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
                Rule {
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
            keys: KeyHasher::new(config.server.ipv6_prefix),
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

    /// Every limit's limiter, in table order: what the store is built from.
    pub fn limiters(&self) -> Vec<Limiter> {
        self.rules
            .iter()
            .flat_map(|rule| rule.limits.iter().map(|limit| limit.limiter))
            .collect()
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
    table: usize,
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
        name_json: respond::json_string(&rule.name),
        rule_json: respond::json_string(&rule.name),
        name: rule.name.clone(),
        policy_header: HeaderValue::from_str(&policy_item)
            .unwrap_or_else(|_| HeaderValue::from_static("")),
        policy_item,
        limit_header: HeaderValue::from(max_in_flight),
        problem_head: respond::quota_exceeded_head(status, &detail),
    }
}

fn compile_limit(
    rule: &RuleConfig,
    limit: &LimitConfig,
    table: usize,
    status: http::StatusCode,
) -> Limit {
    let limiter = limiter(rule.algorithm, limit);
    let period = format_period(limit.rate.period);
    let name = if rule.limits.len() > 1 {
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
        name_json: respond::json_string(&name),
        rule_json: respond::json_string(&rule.name),
        name,
        policy_header: HeaderValue::from_str(&policy_item)
            .unwrap_or_else(|_| HeaderValue::from_static("")),
        policy_item,
        limit_header: HeaderValue::from(limiter.capacity()),
        problem_head: respond::quota_exceeded_head(status, &detail),
    }
}

impl Limit {
    /// Whether this is a concurrency limit (no period, no reset).
    pub fn is_concurrency(&self) -> bool {
        matches!(self.limiter, Limiter::Concurrency(_))
    }
}

/// A period in its largest whole unit: `60s` → `1m`, `90s` → `90s`,
/// `900s` → `15m`, `500ms` → `500ms`.
pub fn format_period(period: std::time::Duration) -> String {
    let millis = period.as_millis();
    if millis % 1000 != 0 {
        return format!("{millis}ms");
    }
    let secs = period.as_secs();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if secs >= size && secs % size == 0 {
            return format!("{}{unit}", secs / size);
        }
    }
    format!("{secs}s")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn periods_print_in_their_largest_whole_unit() {
        assert_eq!(format_period(Duration::from_secs(60)), "1m");
        assert_eq!(format_period(Duration::from_secs(90)), "90s");
        assert_eq!(format_period(Duration::from_secs(900)), "15m");
        assert_eq!(format_period(Duration::from_secs(3600)), "1h");
        assert_eq!(format_period(Duration::from_secs(86_400)), "1d");
        assert_eq!(format_period(Duration::from_millis(500)), "500ms");
        assert_eq!(format_period(Duration::from_secs(10)), "10s");
    }
}
