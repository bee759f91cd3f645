//! Which rules of a config a log can replay, and the config a replay
//! compiles: the rules it cannot replay left out (each named with why,
//! never guessed), and every credential value the config writes (an
//! `overrides` key, a tier of `tiers.by` a credential, a `match.header`
//! value) turned into its label, since that is how the log holds it
//! (docs/replay.md, "What a log cannot replay").

use super::time::Epoch;
use crate::config::{AlgorithmKind, Config, KeySource, RuleConfig, Unit};
use crate::key::label::is_credential;
use crate::key::{KeyLabels, KeyText, LabelKey};

/// A rule the replay leaves out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReplayed {
    pub rule: String,
    pub reason: String,
}

/// What the log's lines record: the members of their `keys`; `None`
/// when not judged ahead (a source not recorded is then missing from
/// every line).
#[derive(Debug, Clone)]
pub struct LogHolds {
    pub keys: Option<Vec<String>>,
}

impl LogHolds {
    fn has(&self, source: &KeySource) -> bool {
        match source {
            // Every line has them as its own members.
            KeySource::Ip | KeySource::Path | KeySource::Method | KeySource::Host => true,
            KeySource::Global => true,
            source => (self.keys.as_ref()).is_none_or(|keys| keys.contains(&source.to_string())),
        }
    }
}

/// `config` as the replay compiles it, on the clock of `epoch`, and the
/// rules it leaves out.
pub fn replayable(config: &Config, holds: &LogHolds, epoch: Epoch) -> (Config, Vec<NotReplayed>) {
    let labels = labels_of(config);
    let mut kept = config.clone();
    kept.rules.clear();
    let mut left_out = Vec::new();
    for rule in &config.rules {
        match why_not(rule, holds, labels.as_ref()) {
            Some(reason) => left_out.push(NotReplayed {
                rule: rule.name.clone(),
                reason,
            }),
            None => kept
                .rules
                .push(on_clock(labelled(rule, labels.as_ref()), epoch)),
        }
    }
    (kept, left_out)
}

/// How the log shows credentials, as far as the config tells: in clear
/// with `reveal_keys`, labelled with the admin token's key, or unknown
/// (`None`: a key of the recording process alone).
fn labels_of(config: &Config) -> Option<KeyLabels> {
    if config.admin.reveal_keys {
        return Some(KeyLabels::new(LabelKey::random(), true));
    }
    let token = config.admin.token()?;
    Some(KeyLabels::new(LabelKey::from_token(&token), false))
}

/// Why `rule` cannot be replayed from a log that holds `holds`.
fn why_not(rule: &RuleConfig, holds: &LogHolds, labels: Option<&KeyLabels>) -> Option<String> {
    if rule.matcher.is_service() {
        return Some("it decides rate limit service descriptors, never a proxied request".into());
    }
    if rule.unit == Unit::Message {
        return Some("it counts WebSocket messages, which the log does not record".into());
    }
    if rule.algorithm == AlgorithmKind::Adaptive {
        return Some(
            "it learns its limit from the upstream's latency as it goes, which a replay \
             cannot reproduce"
                .into(),
        );
    }
    if rule.graphql_cost {
        return Some(
            "it takes each request's GraphQL cost (cost = \"graphql\"), which the log does \
             not record"
                .into(),
        );
    }
    if rule.charge.is_some() || rule.reserve.is_some() {
        return Some(
            "it charges what the response or the body says (charge, reserve), which the \
             log does not record"
                .into(),
        );
    }
    if !rule.refund_on.is_empty() {
        return Some(
            "it gives units back by how the exchange ended (refund_on), which a replay does \
             not decide"
                .into(),
        );
    }
    let tier = rule.tiers.as_ref().map(|tiers| &tiers.by);
    for source in rule.key.iter().chain(tier) {
        if !holds.has(source) {
            return Some(format!(
                "its key source {source} is not recorded in the log's keys (add it to \
                 [server] access_log_keys of the instance that writes the log)"
            ));
        }
    }
    for (name, _) in &rule.matcher.header {
        if !holds.has(&KeySource::Header(name.clone())) {
            return Some(format!(
                "its match.header reads {name}, which the log does not record (add \
                 header:{name} to [server] access_log_keys)"
            ));
        }
    }
    let names_credentials = rule
        .overrides
        .iter()
        .any(|_| rule.key.iter().any(is_credential))
        || tier.is_some_and(is_credential)
        || !rule.matcher.header.is_empty();
    if names_credentials && labels.is_none() {
        return Some(
            "it names callers by a credential (overrides, tiers or match.header on a \
             header: or query: source), which the log holds as labels made with the admin \
             token: replay with [admin] token_env set as the recording instance had it"
                .into(),
        );
    }
    None
}

/// `rule` with the times it writes (a sunset's) on the replay's clock.
fn on_clock(mut rule: RuleConfig, epoch: Epoch) -> RuleConfig {
    if let Some(sunset) = &mut rule.sunset {
        sunset.start = epoch.shift(sunset.start);
        sunset.end = epoch.shift(sunset.end).max(sunset.start + 1);
    }
    rule
}

/// `rule` with every credential value it writes as the log shows it.
fn labelled(rule: &RuleConfig, labels: Option<&KeyLabels>) -> RuleConfig {
    let mut rule = rule.clone();
    let Some(labels) = labels else {
        return rule;
    };
    for variant in &mut rule.overrides {
        let key = KeyText::typed(&variant.name, rule.key.len());
        variant.name = labels.show(&rule.key, &key);
    }
    if let Some(tiers) = &mut rule.tiers {
        if is_credential(&tiers.by) {
            for tier in &mut tiers.tiers {
                tier.name = labels.show_value(&tier.name);
            }
        }
    }
    for (_, values) in &mut rule.matcher.header {
        for value in values.iter_mut() {
            let shown = labels.show_value(&String::from_utf8_lossy(value.as_bytes()));
            if let Ok(shown) = http::HeaderValue::from_bytes(shown.as_bytes()) {
                *value = shown;
            }
        }
    }
    rule
}
