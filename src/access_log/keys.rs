//! Which key sources each line records in its `keys` member: every source
//! a rule's `key` or `tiers.by` names, then `[server] access_log_keys`,
//! each once, in that order, so that `sluice replay` can decide the line
//! with other rules later (docs/replay.md). A request never carries
//! `global` (always empty) nor a rate limit service's `descriptor:` entry,
//! so neither is recorded.

use crate::config::{Config, KeySource};
use crate::key::label::is_credential;
use crate::problem::push_json_str;

/// The sources a policy's lines record, with their member names as JSON.
#[derive(Debug, Default)]
pub struct RecordedKeys {
    sources: Vec<Recorded>,
}

/// One recorded source.
#[derive(Debug)]
pub struct Recorded {
    pub source: KeySource,
    /// `"header:x-api-key":`, written once.
    pub member: Box<[u8]>,
    /// Whether its value is a credential, recorded as its label.
    pub credential: bool,
}

impl RecordedKeys {
    /// The sources `config`'s lines record.
    pub fn of(config: &Config) -> RecordedKeys {
        let mut sources = Vec::new();
        for source in recorded_sources(config) {
            let mut member = Vec::new();
            push_json_str(&mut member, &source.to_string());
            member.push(b':');
            sources.push(Recorded {
                credential: is_credential(&source),
                member: member.into_boxed_slice(),
                source,
            });
        }
        RecordedKeys { sources }
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Recorded> {
        self.sources.iter()
    }
}

/// The sources `config`'s access log records, in the order its lines
/// write them.
pub fn recorded_sources(config: &Config) -> Vec<KeySource> {
    let rules = config.rules.iter().flat_map(|rule| {
        let tier = rule.tiers.as_ref().map(|tiers| &tiers.by);
        rule.key.iter().chain(tier)
    });
    let mut sources: Vec<KeySource> = Vec::new();
    for source in rules.chain(&config.server.access_log_keys) {
        let requests_have_it = !matches!(source, KeySource::Global | KeySource::Descriptor(_));
        if requests_have_it && !sources.contains(source) {
            sources.push(source.clone());
        }
    }
    sources
}
