//! Which rule decides a rate limit service descriptor
//! (docs/rate-limit-service.md): the first rule, in file order, of the
//! call's domain whose entry keys (its `descriptor:<k>` sources and the
//! keys of its `match.descriptor`) are exactly the descriptor's, with equal
//! values where `match.descriptor` gives one. Compiled once per policy, so
//! a call looks its domain up once and compares a few short strings per
//! rule.

use std::collections::HashMap;

use crate::config::{KeySource, RuleConfig};

/// The rules that decide descriptors, by domain.
#[derive(Debug, Default)]
pub struct Domains {
    by_domain: HashMap<Box<str>, Vec<DomainRule>>,
}

/// One rule with `match.domain`, as descriptors are compared with it.
#[derive(Debug)]
struct DomainRule {
    /// Its index in [`super::Policy::rules`].
    rule: usize,
    /// Every entry key it names, sorted, with the value the entry must have.
    entries: Box<[NamedEntry]>,
}

/// An entry key a rule names, with the value it must have (`None`: any
/// value, one bucket each when the rule keys on it).
type NamedEntry = (Box<str>, Option<Box<str>>);

impl Domains {
    /// The domain rules of `rules` (a policy's, in its order).
    pub fn new(rules: &[RuleConfig]) -> Domains {
        let mut by_domain: HashMap<Box<str>, Vec<DomainRule>> = HashMap::new();
        for (index, rule) in rules.iter().enumerate() {
            let Some(domain) = &rule.matcher.domain else {
                continue;
            };
            let mut entries: Vec<NamedEntry> = rule
                .matcher
                .descriptor
                .iter()
                .map(|(key, value)| (key.as_str().into(), Some(value.as_str().into())))
                .collect();
            for source in &rule.key {
                if let KeySource::Descriptor(key) = source {
                    // Keyed and constrained: the constraint stays.
                    if !entries.iter().any(|(k, _)| **k == **key) {
                        entries.push((key.as_str().into(), None));
                    }
                }
            }
            entries.sort();
            by_domain
                .entry(domain.as_str().into())
                .or_default()
                .push(DomainRule {
                    rule: index,
                    entries: entries.into(),
                });
        }
        Domains { by_domain }
    }

    /// Whether no rule decides descriptors.
    pub fn is_empty(&self) -> bool {
        self.by_domain.is_empty()
    }

    /// The index of the rule that decides the descriptor of `domain` with
    /// `entries` (key, value), whose keys are distinct; `None` when no
    /// rule does.
    pub fn decide(&self, domain: &str, entries: &[(&str, &str)]) -> Option<usize> {
        let rules = self.by_domain.get(domain)?;
        rules
            .iter()
            .find(|rule| rule.decides(entries))
            .map(|rule| rule.rule)
    }
}

impl DomainRule {
    /// As many entries as the rule names, each one it names (so, the keys
    /// being distinct, the same set), with the value it wants.
    fn decides(&self, entries: &[(&str, &str)]) -> bool {
        entries.len() == self.entries.len()
            && entries.iter().all(|(key, value)| {
                match self.entries.binary_search_by(|(k, _)| (**k).cmp(key)) {
                    Ok(at) => self.entries[at]
                        .1
                        .as_deref()
                        .is_none_or(|want| want == *value),
                    Err(_) => false,
                }
            })
    }
}

/// Whether two entries of a descriptor share a key (such a descriptor is
/// refused: its entry keys are not a set).
pub fn repeats_a_key(entries: &[(&str, &str)]) -> bool {
    entries
        .iter()
        .enumerate()
        .any(|(i, (key, _))| entries[..i].iter().any(|(earlier, _)| earlier == key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::compile;

    fn domains(rules: &str) -> Domains {
        compile(&format!("[rls]\nlisten = \"127.0.0.1:0\"\n{rules}")).domains
    }

    #[test]
    fn the_first_rule_with_exactly_the_entry_keys_and_the_values_decides() {
        let domains = domains(
            r#"
[[rule]]
name = "proxied"
rate = "1/s"
[[rule]]
name = "slow-for-one"
match = { domain = "edge", descriptor = { generic_key = "slow" } }
key = ["descriptor:remote_address"]
rate = "1/s"
[[rule]]
name = "per-address"
match = { domain = "edge" }
key = ["descriptor:remote_address"]
rate = "10/s"
[[rule]]
name = "both"
match = { domain = "edge" }
key = ["descriptor:generic_key", "descriptor:remote_address"]
rate = "5/s"
[[rule]]
name = "other-domain"
match = { domain = "internal" }
key = ["descriptor:remote_address"]
rate = "7/s"
"#,
        );
        let decide = |domain, entries: &[(&str, &str)]| domains.decide(domain, entries);
        assert_eq!(decide("edge", &[("remote_address", "10.0.0.1")]), Some(2));
        assert_eq!(
            decide(
                "edge",
                &[("remote_address", "10.0.0.1"), ("generic_key", "slow")]
            ),
            Some(1)
        );
        // The same keys with another value: the next rule with those keys.
        assert_eq!(
            decide(
                "edge",
                &[("generic_key", "fast"), ("remote_address", "10.0.0.1")]
            ),
            Some(3)
        );
        assert_eq!(decide("internal", &[("remote_address", "a")]), Some(4));
        // More or fewer entries than any rule names, or another domain.
        assert_eq!(decide("edge", &[("generic_key", "slow")]), None);
        assert_eq!(
            decide(
                "edge",
                &[("remote_address", "a"), ("generic_key", "b"), ("x", "y")]
            ),
            None
        );
        assert_eq!(decide("nobody", &[("remote_address", "a")]), None);
        assert!(!domains.is_empty());
    }

    #[test]
    fn a_key_both_keyed_and_constrained_keeps_its_constraint() {
        let domains = domains(
            r#"
[[rule]]
name = "a"
match = { domain = "d", descriptor = { k = "v" } }
key = ["descriptor:k"]
rate = "1/s"
"#,
        );
        assert_eq!(domains.decide("d", &[("k", "v")]), Some(0));
        assert_eq!(domains.decide("d", &[("k", "w")]), None);
    }

    #[test]
    fn repeated_entry_keys_are_found() {
        assert!(repeats_a_key(&[("a", "1"), ("b", "2"), ("a", "3")]));
        assert!(!repeats_a_key(&[("a", "1"), ("b", "1")]));
        assert!(!repeats_a_key(&[]));
    }
}
