//! Which rule decides a rate limit service descriptor
//! (docs/rate-limit-service.md, "Which rule decides a descriptor"): a config
//! of 1–6 `[[rule]]` tables with `match.domain`, `match.descriptor` and
//! `descriptor:<k>`/`"global"` keys drawn from a tiny alphabet (so rules
//! overlap and collide), and a descriptor of 0–5 entries from the same
//! alphabet: any, or (so that rules decide often) the entries one of the
//! rules names, with a value, an entry or the domain changed or not.
//! `Domains::decide` never panics and picks what a naive reading
//! of `config.rules` picks: the first rule in file order of the call's
//! domain whose entry keys (its `descriptor:<k>` sources and the keys of its
//! `match.descriptor`) are exactly the descriptor's, as a set, with equal
//! values where `match.descriptor` gives one; none when no rule does. The
//! order of the entries changes nothing, `repeats_a_key` says whether two
//! entries share a key, and the parsed rules are the ones written (so the
//! reference is never vacuously agreeing with nothing).
#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use sluice::config::{Config, KeySource, RuleConfig};
use sluice::policy::domains::repeats_a_key;
use sluice::policy::Domains;

/// A rule's `match.domain`, or none (a rule for proxied requests).
#[derive(Debug, Clone, Copy, Arbitrary)]
enum RuleDomain {
    Edge,
    Internal,
    /// `"Edge"`: domains are compared exactly, case included.
    EdgeUpper,
    Proxied,
}

impl RuleDomain {
    fn text(self) -> Option<&'static str> {
        match self {
            RuleDomain::Edge => Some("edge"),
            RuleDomain::Internal => Some("internal"),
            RuleDomain::EdgeUpper => Some("Edge"),
            RuleDomain::Proxied => None,
        }
    }
}

/// A call's domain: one rules may have, or one no rule can have.
#[derive(Debug, Clone, Copy, Arbitrary)]
enum CallDomain {
    Rule(RuleDomain),
    Empty,
    Other,
}

impl CallDomain {
    fn text(self) -> &'static str {
        match self {
            CallDomain::Rule(domain) => domain.text().unwrap_or("proxied"),
            CallDomain::Empty => "",
            CallDomain::Other => "other",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Arbitrary)]
enum Key {
    A,
    B,
    C,
    /// `"A"`: entry keys are compared exactly.
    UpperA,
    /// `"a.b"`: one key, quoted in TOML, not a nested table.
    Dotted,
}

impl Key {
    fn text(self) -> &'static str {
        match self {
            Key::A => "a",
            Key::B => "b",
            Key::C => "c",
            Key::UpperA => "A",
            Key::Dotted => "a.b",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
enum Value {
    One,
    Two,
    Empty,
    /// `"1 "`: values are compared exactly, spaces included.
    OneSpace,
}

impl Value {
    fn text(self) -> &'static str {
        match self {
            Value::One => "1",
            Value::Two => "2",
            Value::Empty => "",
            Value::OneSpace => "1 ",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
enum Source {
    Descriptor(Key),
    Global,
}

impl Source {
    fn text(self) -> String {
        match self {
            Source::Descriptor(key) => format!("descriptor:{}", key.text()),
            Source::Global => "global".to_owned(),
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Rule {
    domain: RuleDomain,
    /// `match.descriptor` (written only when not empty; a key given twice
    /// keeps its first value).
    descriptor: Vec<(Key, Value)>,
    /// `key`; none: the line is left out (`["global"]` for a domain rule).
    /// A source given twice is written once.
    key: Option<Vec<Source>>,
}

#[derive(Debug, Arbitrary)]
struct Input {
    rules: Vec<Rule>,
    call: Call,
}

/// The call's descriptor. Where the input runs out, arbitrary picks the
/// first variant and `None`: the first rule's entries, unchanged.
#[derive(Debug, Arbitrary)]
enum Call {
    /// The entries a written rule names (so that rules decide often), in
    /// the domain of that rule or another, then changed a little.
    Like {
        /// Which rule (modulo their number).
        rule: u8,
        /// Another domain than the rule's.
        domain: Option<CallDomain>,
        /// The i-th entry's value instead of the one the rule fixes (or,
        /// for an entry it only keys on, `"1"`).
        values: Vec<Option<Value>>,
        edit: Option<Edit>,
        /// Entries moved from the front to the back.
        rotate: u8,
    },
    /// Any domain and entries.
    Any {
        domain: CallDomain,
        entries: Vec<(Key, Value)>,
    },
}

#[derive(Debug, Arbitrary)]
enum Edit {
    /// Without the entry at this index (modulo their number).
    Drop(u8),
    /// With one more entry, at the end (its key may repeat one).
    Add(Key, Value),
}

/// A rule as written, after the generator's clean-ups.
struct Written {
    domain: Option<&'static str>,
    descriptor: BTreeMap<&'static str, &'static str>,
    key: Option<Vec<Source>>,
}

const HEADER: &str =
    "[server]\nupstream = \"http://127.0.0.1:9\"\n[rls]\nlisten = \"127.0.0.1:0\"\n";

fuzz_target!(|input: Input| {
    if input.rules.is_empty() {
        return;
    }
    let written: Vec<Written> = input.rules.iter().take(6).map(written).collect();
    let text = config_text(&written);
    let Ok(config) = Config::from_toml(&text, "fuzz.toml") else {
        return;
    };
    assert_eq!(config.rules.len(), written.len(), "{text}");
    for (index, (rule, written)) in config.rules.iter().zip(&written).enumerate() {
        assert_parsed_as_written(index, rule, written, &text);
    }

    let (domain, entries) = descriptor(&input.call, &written);
    let distinct: BTreeSet<&str> = entries.iter().map(|(key, _)| *key).collect();
    let repeats = repeats_a_key(&entries);
    assert_eq!(repeats, distinct.len() != entries.len(), "{entries:?}");

    let domains = Domains::new(&config.rules);
    assert_eq!(
        domains.is_empty(),
        config
            .rules
            .iter()
            .all(|rule| rule.matcher.domain.is_none()),
        "{text}"
    );
    if repeats {
        // Refused before matching: decide's precondition does not hold.
        return;
    }
    let got = domains.decide(domain, &entries);
    let expected = reference(&config.rules, domain, &entries);
    assert_eq!(
        got, expected,
        "domain {domain:?}, entries {entries:?}, config:\n{text}"
    );
    // Entry keys are a set: their order changes nothing.
    let mut reversed = entries.clone();
    reversed.reverse();
    assert_eq!(
        domains.decide(domain, &reversed),
        got,
        "{reversed:?}\n{text}"
    );
    if !entries.is_empty() {
        let mut rotated = entries.clone();
        rotated.rotate_left(1);
        assert_eq!(domains.decide(domain, &rotated), got, "{rotated:?}\n{text}");
    }
});

fn written(rule: &Rule) -> Written {
    let mut descriptor = BTreeMap::new();
    for (key, value) in rule.descriptor.iter().take(3) {
        descriptor.entry(key.text()).or_insert(value.text());
    }
    let key = rule.key.as_ref().map(|sources| {
        let mut once: Vec<Source> = Vec::new();
        for source in sources.iter().take(4) {
            if !once.contains(source) {
                once.push(*source);
            }
        }
        once
    });
    match rule.domain.text() {
        Some(domain) => Written {
            domain: Some(domain),
            descriptor,
            key,
        },
        // A rule for proxied requests: no descriptor, keyed on the client.
        None => Written {
            domain: None,
            descriptor: BTreeMap::new(),
            key: None,
        },
    }
}

/// The call's domain and entries, drawn by `call`, at most 5 of them.
fn descriptor(call: &Call, rules: &[Written]) -> (&'static str, Vec<(&'static str, &'static str)>) {
    match call {
        Call::Any { domain, entries } => (
            domain.text(),
            entries
                .iter()
                .take(5)
                .map(|(key, value)| (key.text(), value.text()))
                .collect(),
        ),
        Call::Like {
            rule,
            domain,
            values,
            edit,
            rotate,
        } => {
            let like = &rules[usize::from(*rule) % rules.len()];
            let domain = match (domain, like.domain) {
                (None, Some(domain)) => domain,
                (Some(other), _) => other.text(),
                (None, None) => CallDomain::Other.text(),
            };
            // Its keyed entries in key order, then the fixed ones.
            let mut keys: Vec<&'static str> = Vec::new();
            for source in like.key.iter().flatten() {
                if let Source::Descriptor(key) = source {
                    keys.push(key.text());
                }
            }
            for key in like.descriptor.keys() {
                if !keys.contains(key) {
                    keys.push(key);
                }
            }
            let mut entries: Vec<(&str, &str)> = keys
                .iter()
                .enumerate()
                .map(|(i, key)| {
                    let value = match values.get(i) {
                        Some(Some(value)) => value.text(),
                        _ => like.descriptor.get(key).copied().unwrap_or("1"),
                    };
                    (*key, value)
                })
                .collect();
            match edit {
                Some(Edit::Drop(at)) if !entries.is_empty() => {
                    entries.remove(usize::from(*at) % entries.len());
                }
                Some(Edit::Add(key, value)) => entries.push((key.text(), value.text())),
                _ => {}
            }
            if !entries.is_empty() {
                let by = usize::from(*rotate) % entries.len();
                entries.rotate_left(by);
            }
            entries.truncate(5);
            (domain, entries)
        }
    }
}

fn config_text(rules: &[Written]) -> String {
    let mut text = HEADER.to_owned();
    for (index, rule) in rules.iter().enumerate() {
        text.push_str(&format!("[[rule]]\nname = \"r{index}\"\nrate = \"1/s\"\n"));
        if let Some(domain) = rule.domain {
            let mut matcher = format!("domain = {}", quoted(domain));
            if !rule.descriptor.is_empty() {
                let pairs: Vec<String> = rule
                    .descriptor
                    .iter()
                    .map(|(key, value)| format!("{} = {}", quoted(key), quoted(value)))
                    .collect();
                matcher.push_str(&format!(", descriptor = {{ {} }}", pairs.join(", ")));
            }
            text.push_str(&format!("match = {{ {matcher} }}\n"));
        }
        if let Some(key) = &rule.key {
            let sources: Vec<String> = key.iter().map(|s| quoted(&s.text())).collect();
            text.push_str(&format!("key = [{}]\n", sources.join(", ")));
        }
    }
    text
}

/// A TOML basic string (the alphabet has no character that needs escaping;
/// escaped anyway, should it grow one).
fn quoted(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The parsed rule is the one written: its domain, its `match.descriptor`
/// and its key (the default when none is written).
fn assert_parsed_as_written(index: usize, rule: &RuleConfig, written: &Written, text: &str) {
    assert_eq!(rule.name, format!("r{index}"), "{text}");
    assert_eq!(
        rule.matcher.domain.as_deref(),
        written.domain,
        "rule {index}\n{text}"
    );
    let descriptor: Vec<(&str, &str)> = rule
        .matcher
        .descriptor
        .iter()
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect();
    let expected: Vec<(&str, &str)> = written.descriptor.iter().map(|(k, v)| (*k, *v)).collect();
    assert_eq!(descriptor, expected, "rule {index}\n{text}");
    let key: Vec<KeySource> = match (&written.key, written.domain) {
        (Some(sources), _) => sources
            .iter()
            .map(|source| match source {
                Source::Descriptor(key) => KeySource::Descriptor(key.text().to_owned()),
                Source::Global => KeySource::Global,
            })
            .collect(),
        (None, Some(_)) => vec![KeySource::Global],
        (None, None) => vec![KeySource::Ip],
    };
    assert_eq!(rule.key, key, "rule {index}\n{text}");
}

/// docs/rate-limit-service.md, read straight off `rules`.
fn reference(rules: &[RuleConfig], domain: &str, entries: &[(&str, &str)]) -> Option<usize> {
    let descriptor: BTreeMap<&str, &str> = entries.iter().copied().collect();
    let keys: BTreeSet<&str> = descriptor.keys().copied().collect();
    rules.iter().position(|rule| {
        if rule.matcher.domain.as_deref() != Some(domain) {
            return false;
        }
        let fixed: BTreeMap<&str, &str> = rule
            .matcher
            .descriptor
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect();
        let named: BTreeSet<&str> = rule
            .key
            .iter()
            .filter_map(|source| match source {
                KeySource::Descriptor(key) => Some(key.as_str()),
                _ => None,
            })
            .chain(fixed.keys().copied())
            .collect();
        named == keys
            && fixed
                .iter()
                .all(|(key, value)| descriptor.get(key) == Some(value))
    })
}
