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

mod compile;
mod describe;
pub mod domains;
mod limit;
mod matcher;
mod rule;
mod sunset;

#[cfg(test)]
pub(crate) mod testing;

use std::sync::Arc;

use ipnet::IpNet;

use crate::access_log::RecordedKeys;
use crate::clock::Nanos;
use crate::config::{AccessLogTarget, Config, HeaderStyle, KeySource, PathsAlike, ResponseConfig};
use crate::key::client_ip::ClientIpResolver;
use crate::key::jwt::JwtVerifier;
use crate::key::{KeyHasher, KeyLabels, LabelKey};
use crate::log_gate::LogGate;
use crate::metrics::Metrics;
use crate::store::Store;
pub use describe::describe;
pub use domains::Domains;
pub use limit::{FieldLines, Limit};
pub use matcher::{Matcher, Mismatch};
pub use rule::{Billing, Rule, Variant, VariantIndex};
pub use sunset::Sunset;

/// Everything the request path needs to decide, compiled once.
#[derive(Debug)]
pub struct Policy {
    pub rules: Vec<Rule>,
    /// Which of `rules` decide rate limit service descriptors, by domain.
    pub domains: Domains,
    /// The indexes in `rules` of those that count WebSocket messages
    /// (`unit = "message"`), in file order: asked only for a handshake.
    pub message_rules: Vec<usize>,
    pub allow: Vec<IpNet>,
    pub deny: Vec<IpNet>,
    pub client_ip: ClientIpResolver,
    pub keys: KeyHasher,
    /// How keys are shown outside the request path (`[admin] reveal_keys`).
    pub labels: KeyLabels,
    /// `[identity.jwt]`: what `jwt:<claim>` sources read tokens with.
    pub jwt: Option<JwtVerifier>,
    pub response: ResponseConfig,
    pub normalize_path: bool,
    /// `server.paths_alike`: how a normalised path is folded for matching
    /// and keying.
    pub paths_alike: PathsAlike,
    /// Longest request target accepted (414 above).
    pub max_uri_bytes: usize,
    /// Largest declared request body accepted (413 above); 0 = no limit.
    pub max_body_bytes: u64,
    /// Whether some rule charges or refunds after admission (otherwise no
    /// request carries a bill, and none is looked for).
    pub bills: bool,
    /// Whether some rule keys on JSON-RPC calls (`jsonrpc:method`,
    /// `mcp:tool`): only then may a refusal be answered in JSON-RPC.
    pub reads_calls: bool,
    /// Whether some rule takes a request's own cost (`cost = "graphql"`,
    /// `reserve`): only then is a refusal looked at for a cost beyond a
    /// capacity, and `X-RateLimit-Cost` written.
    pub variable_costs: bool,
    /// Whether some rule reads the request's body or GraphQL operation, or
    /// the access log records a body source (otherwise no request is
    /// looked at for it: docs/conversation.md).
    pub reads_body: bool,
    /// Whether the access log records a body source
    /// (`server.access_log_keys`): every request's body is then read as a
    /// rule would read it, for its line (docs/replay.md).
    pub logs_body: bool,
    /// The source config, for `check` and admin views.
    pub config: Arc<Config>,
    /// How many requests from denied addresses may be logged each second.
    pub denied_log: LogGate,
    /// The key sources each access log line records (`keys`).
    pub recorded_keys: RecordedKeys,
}

impl Policy {
    /// Compiles `config` with new, empty bucket tables from `store`.
    /// Keys are labelled with the deployment's admin token, if it has one
    /// (until a shared store's seed replaces it, [`Policy::compile_with_keys`]).
    pub fn compile(config: Arc<Config>, metrics: &Metrics, store: &Store) -> Policy {
        let keys = fresh_keys(&config);
        Policy::compile_with_keys(config, metrics, store, keys)
    }

    /// Compiles `config` with new, empty bucket tables, deriving bucket keys
    /// with `keys` (a seed shared with other instances).
    pub fn compile_with_keys(
        config: Arc<Config>,
        metrics: &Metrics,
        store: &Store,
        keys: KeyHasher,
    ) -> Policy {
        Policy::build(config, metrics, store, None, 0, keys)
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
            None => fresh_keys(&config),
        };
        Policy::build(config, metrics, store, previous, now, keys)
    }

    fn build(
        config: Arc<Config>,
        metrics: &Metrics,
        store: &Store,
        previous: Option<&Policy>,
        now: Nanos,
        keys: KeyHasher,
    ) -> Policy {
        let logs_body = config.server.access_log != AccessLogTarget::Off
            && (config.server.access_log_keys.iter()).any(KeySource::reads_body);
        // Overrides and admin calls name paths as written.
        let keys = keys.with_paths_alike(config.server.paths_alike);
        let rules = config
            .rules
            .iter()
            .map(|rule| compile::compile_rule(rule, &config, &keys, metrics, store, previous, now))
            .collect::<Vec<Rule>>();
        Policy {
            bills: rules.iter().any(|rule| rule.billing.is_some()),
            reads_body: logs_body || rules.iter().any(|rule| rule.reads_body),
            logs_body,
            variable_costs: rules.iter().any(|rule| rule.variable_cost),
            reads_calls: rules.iter().any(|rule| rule.per_call),
            domains: Domains::new(&config.rules),
            message_rules: (config.rules.iter().enumerate())
                .filter(|(_, rule)| rule.unit == crate::config::Unit::Message)
                .map(|(index, _)| index)
                .collect(),
            rules,
            allow: config.access.allow.clone(),
            deny: config.access.deny.clone(),
            client_ip: ClientIpResolver::new(
                config.server.trusted_proxies.clone(),
                config.server.forwarded_header,
            ),
            labels: KeyLabels::new(keys.label_key().clone(), config.admin.reveal_keys),
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
            paths_alike: config.server.paths_alike,
            max_uri_bytes: config.server.max_uri_bytes,
            max_body_bytes: config.server.max_body_bytes,
            recorded_keys: RecordedKeys::of(&config),
            config,
            denied_log: LogGate::default(),
        }
    }

    /// The rule named `name`. A scan: policies hold a handful of rules, and
    /// comparing a few short names costs less than hashing one.
    pub fn rule(&self, name: &str) -> Option<&Rule> {
        self.rules.iter().find(|rule| *rule.name == *name)
    }

    /// Whether any rate-limit header is sent at all.
    pub fn sends_headers(&self) -> bool {
        self.response.headers != HeaderStyle::None
    }
}

/// A new random key hasher for `config`, labelling keys with the
/// deployment's admin token when it has one.
fn fresh_keys(config: &Config) -> KeyHasher {
    let label_key = LabelKey::for_token(config.admin.token().as_deref());
    KeyHasher::new(config.server.ipv6_prefix).with_label_key(label_key)
}
