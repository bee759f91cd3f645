//! An envoyproxy/ratelimit config (github.com/envoyproxy/ratelimit, its
//! README's "Configuration") as sluice rules for the rate limit service
//! (docs/import-envoy-ratelimit.md).
//!
//! envoyproxy/ratelimit walks a descriptor down its tree of entries, at
//! each level trying `key_value` before `key` alone, and applies the
//! `rate_limit` of the entry where the descriptor ends. A sluice rule with
//! `match.domain` decides the descriptors whose entry keys are exactly its
//! own, the first such rule in file order winning. So each entry with a
//! `rate_limit` becomes one rule over the keys of its path (a path entry
//! with a value in `match.descriptor`, one without in `key`), and the rules
//! come out in the tree's order with an entry that has a value before one
//! that has none at every level: sluice's first match is then the entry
//! envoyproxy/ratelimit picks. What cannot be said that way (`replaces`,
//! quota mode, wildcards, a never-limited entry some rule would shadow) is
//! refused, every problem at once, each at its YAML path.

use std::collections::HashSet;
use std::fmt::Write as _;

use serde_norway::Value;

use super::yaml::{join, Reader};
use super::{toml_key, toml_string, ImportError, Problem, RuleNames, Unit};

/// The `[[rule]]` tables (and comments) equivalent to the envoyproxy/ratelimit
/// config `yaml`, or every field that has no equivalent. `source_name` names
/// the file in the header comment and in errors.
pub fn translate(yaml: &str, source_name: &str) -> Result<String, ImportError> {
    let fail = |problems| ImportError {
        source_name: source_name.to_owned(),
        problems,
    };
    let root: Value = serde_norway::from_str(yaml)
        .map_err(|error| fail(vec![Problem::new("", format!("not valid YAML: {error}"))]))?;
    let mut reader = Reader::default();
    let config = reader.root(&root);
    let Some((domain, descriptors)) = config.filter(|_| reader.problems.is_empty()) else {
        return Err(fail(reader.problems));
    };
    let mut nodes = Vec::new();
    in_precedence_order(&descriptors, &mut Vec::new(), &mut nodes);
    let names = rule_names(&domain, &nodes);
    let problems = shadowing_problems(&nodes, &names);
    if !problems.is_empty() {
        return Err(fail(problems));
    }
    Ok(write_rules(source_name, &domain, &nodes, &names))
}

/// One entry of the config's descriptor tree, as read.
#[derive(Debug)]
struct Descriptor {
    /// Its YAML path, `descriptors[2].descriptors[0]`.
    at: String,
    key: String,
    /// `None` when absent or empty, as envoyproxy/ratelimit reads it: the
    /// entry then matches any value, with a bucket per value.
    value: Option<String>,
    rate_limit: RateLimit,
    /// `#` lines for the fields that only shape envoyproxy/ratelimit's
    /// metrics.
    notes: Vec<String>,
    children: Vec<Descriptor>,
}

/// What an entry does to the descriptors that end at it.
#[derive(Debug)]
enum RateLimit {
    /// No `rate_limit`: envoyproxy/ratelimit answers OK, without a limit.
    Absent,
    /// `unlimited: true`: OK too, without a limit.
    Unlimited,
    Limited(Limit),
}

#[derive(Debug)]
struct Limit {
    requests_per_unit: u32,
    unit: Unit,
    name: Option<String>,
    shadow: bool,
}

impl Reader {
    /// The top level: `domain` and the descriptor list.
    fn root(&mut self, root: &Value) -> Option<(String, Vec<Descriptor>)> {
        let fields = self.fields(
            root,
            "",
            "the file must be a mapping with domain and descriptors",
        )?;
        let mut domain = None;
        let mut descriptors = Vec::new();
        for (name, value) in fields {
            match name.as_str() {
                "domain" => domain = self.text(value, "domain"),
                "descriptors" => descriptors = self.list(value, "", &[]),
                _ => self.problem(
                    name,
                    "unknown field; the top level of an envoyproxy/ratelimit config has domain \
                     and descriptors",
                ),
            }
        }
        Some((self.required(domain, "domain")?, descriptors))
    }

    /// A descriptor list at `parent.descriptors`; `ancestors` are the
    /// entries above it.
    fn list(&mut self, value: &Value, parent: &str, ancestors: &[&str]) -> Vec<Descriptor> {
        let at = join(parent, "descriptors");
        let items = self.items(value, &at, "must be a list of descriptor entries");
        let mut list: Vec<Descriptor> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let Some(descriptor) = self.descriptor(item, format!("{at}[{i}]"), ancestors) else {
                continue;
            };
            // envoyproxy/ratelimit keys its entries by `key_value` (or `key`)
            // and refuses a file where two siblings share one.
            let composite = |d: &Descriptor| match &d.value {
                Some(value) => format!("{}_{value}", d.key),
                None => d.key.clone(),
            };
            if let Some(twin) = list.iter().find(|d| composite(d) == composite(&descriptor)) {
                self.problem(
                    &descriptor.at,
                    format!(
                        "repeats {} ({:?} to envoyproxy/ratelimit, which refuses the file)",
                        twin.at,
                        composite(twin)
                    ),
                );
                continue;
            }
            list.push(descriptor);
        }
        list
    }

    fn descriptor(&mut self, item: &Value, at: String, ancestors: &[&str]) -> Option<Descriptor> {
        let fields = self.fields(
            item,
            &at,
            "must be a mapping with key and optionally value, rate_limit and descriptors",
        )?;
        let mut key = None;
        let mut value = None;
        let mut rate_limit = RateLimit::Absent;
        let mut children = &Value::Null;
        let mut shadow = false;
        let mut notes = Vec::new();
        for (name, field) in fields {
            let path = join(&at, &name);
            match name.as_str() {
                "key" => key = self.text(field, &path),
                "value" => value = self.text(field, &path).filter(|value| !value.is_empty()),
                "rate_limit" => rate_limit = self.rate_limit(field, &path),
                "descriptors" => children = field,
                "shadow_mode" => shadow = self.flag(field, &path),
                "detailed_metric" | "value_to_metric" if self.flag(field, &path) => {
                    notes.push(format!(
                        "{path}: ignored: it only names envoyproxy/ratelimit's metrics"
                    ));
                }
                "metadata" if !field.is_null() => self.problem(path, no_equivalent(&name)),
                "quota_mode" | "share_threshold" if self.flag(field, &path) => {
                    self.problem(path, no_equivalent(&name));
                }
                "detailed_metric" | "value_to_metric" | "quota_mode" | "share_threshold"
                | "metadata" => {}
                _ => self.problem(
                    path,
                    "unknown field; a descriptor entry has key, value, rate_limit, descriptors, \
                     shadow_mode, detailed_metric and value_to_metric",
                ),
            }
        }
        let key_at = join(&at, "key");
        let key = self.required(key, &key_at)?;
        for (field, text) in [("key", Some(&key)), ("value", value.as_ref())] {
            if text.is_some_and(|text| text.contains('*')) {
                self.problem(
                    join(&at, field),
                    format!(
                        "{text:?} is a wildcard to envoyproxy/ratelimit, and sluice matches \
                         descriptor keys and values exactly (an entry without a value matches \
                         any value, with a bucket per value)",
                        text = text.map_or("", String::as_str)
                    ),
                );
            }
        }
        if let Some(depth) = ancestors.iter().position(|ancestor| *ancestor == key) {
            let above = at.split('.').take(depth + 1).collect::<Vec<_>>().join(".");
            self.problem(
                key_at,
                format!(
                    "{key:?} is already the key of {above}: sluice matches a descriptor's entry \
                     keys as a set, so it cannot tell the two entries apart"
                ),
            );
        }
        if let RateLimit::Limited(limit) = &mut rate_limit {
            limit.shadow = shadow;
        }
        let mut path: Vec<&str> = ancestors.to_vec();
        path.push(&key);
        let children = self.list(children, &at, &path);
        Some(Descriptor {
            at,
            key,
            value,
            rate_limit,
            notes,
            children,
        })
    }

    /// A `rate_limit` block at `at` (not yet in shadow mode).
    fn rate_limit(&mut self, block: &Value, at: &str) -> RateLimit {
        // envoyproxy/ratelimit reads an empty `rate_limit:` as none.
        if block.is_null() {
            return RateLimit::Absent;
        }
        let Some(fields) = self.fields(
            block,
            at,
            "must be a mapping with unit and requests_per_unit, or unlimited: true",
        ) else {
            return RateLimit::Absent;
        };
        let (mut unit, mut requests_per_unit, mut unlimited, mut name) = (None, None, false, None);
        for (field_name, field) in fields {
            let path = join(at, &field_name);
            match field_name.as_str() {
                "unit" => unit = self.text(field, &path),
                "requests_per_unit" => requests_per_unit = Some(field),
                "unlimited" => unlimited = self.flag(field, &path),
                "name" => name = self.text(field, &path).filter(|name| !name.is_empty()),
                "replaces" => {
                    if !matches!(field, Value::Null)
                        && field.as_sequence().is_none_or(|list| !list.is_empty())
                    {
                        self.problem(
                            path,
                            "no equivalent: in sluice one rule decides each descriptor, and \
                             a call is refused when any descriptor is over its limit, so no \
                             rule can drop another's",
                        );
                    }
                }
                _ => self.problem(
                    path,
                    "unknown field; a rate_limit has unit, requests_per_unit, unlimited, name \
                     and replaces",
                ),
            }
        }
        let unit_at = join(at, "unit");
        if unlimited {
            if unit.is_some() {
                self.problem(
                    unit_at,
                    "envoyproxy/ratelimit refuses a unit with unlimited: true",
                );
            }
            return RateLimit::Unlimited;
        }
        let unit = match unit {
            Some(text) => Unit::parse(&text, true)
                .or_else(|| self.invalid(unit_at, format!("unknown unit {text:?}; {UNITS}"))),
            None => self.invalid(unit_at, format!("is required; {UNITS}")),
        };
        let count_at = join(at, "requests_per_unit");
        let requests_per_unit =
            match requests_per_unit.map(|field| field.as_u64().map(u32::try_from)) {
                Some(Some(Ok(count))) => Some(count),
                Some(_) => self.invalid(count_at, "must be a whole number from 0 to 4294967295"),
                None => {
                    // A missing count is 0 to envoyproxy/ratelimit, which refuses
                    // every request: too quiet a way to close a route to copy.
                    self.invalid(
                        count_at,
                        "is required (envoyproxy/ratelimit reads a missing one as 0, refusing \
                     every request; write 0 if that is meant)",
                    )
                }
            };
        match (unit, requests_per_unit) {
            (Some(unit), Some(requests_per_unit)) => RateLimit::Limited(Limit {
                requests_per_unit,
                unit,
                name,
                shadow: false,
            }),
            // Already reported; the file is refused.
            _ => RateLimit::Absent,
        }
    }
}

/// Why a field envoyproxy/ratelimit allows has no sluice equivalent.
fn no_equivalent(field: &str) -> &'static str {
    match field {
        "quota_mode" => {
            "no equivalent: envoyproxy/ratelimit refuses a call only when every quota-mode \
             descriptor is over its limit, and sluice refuses it when any descriptor is"
        }
        "share_threshold" => {
            "no equivalent: it shares one counter among the values a wildcard matches, and \
             sluice matches values exactly"
        }
        _ => {
            "no equivalent: envoyproxy/ratelimit returns it to Envoy as dynamic metadata, and \
             sluice's answers carry none"
        }
    }
}

const UNITS: &str =
    "envoyproxy/ratelimit's units are second, minute, hour, day, week, month and year";

/// An entry of the tree with the entries above it: the descriptors it
/// decides are those with exactly the keys of `path`, with its values.
struct Node<'d> {
    /// From the top-level entry down to this one.
    path: Vec<&'d Descriptor>,
}

impl<'d> Node<'d> {
    fn entry(&self) -> &'d Descriptor {
        self.path[self.path.len() - 1]
    }

    /// Both decide descriptors with the same keys, in any order.
    fn same_keys(&self, other: &Node) -> bool {
        self.path.len() == other.path.len()
            && self
                .path
                .iter()
                .all(|mine| other.path.iter().any(|theirs| theirs.key == mine.key))
    }

    /// Some descriptor with those keys fits the values of both.
    fn overlaps(&self, other: &Node) -> bool {
        self.path.iter().all(|mine| {
            other
                .path
                .iter()
                .find(|theirs| theirs.key == mine.key)
                .is_none_or(|theirs| match (&mine.value, &theirs.value) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                })
        })
    }

    fn same_order(&self, other: &Node) -> bool {
        self.path
            .iter()
            .zip(&other.path)
            .all(|(mine, theirs)| mine.key == theirs.key)
    }

    /// `(a, b)`: the keys in the order a descriptor must give them.
    fn keys(&self) -> String {
        let keys: Vec<&str> = self.path.iter().map(|d| d.key.as_str()).collect();
        format!("({})", keys.join(", "))
    }
}

/// The tree depth first, at each level the entries with a value before
/// those without (otherwise in file order): envoyproxy/ratelimit tries
/// `key_value` before `key` at every level, so this is its order of
/// preference among entries with the same keys, and sluice's first match
/// follows it.
fn in_precedence_order<'d>(
    list: &'d [Descriptor],
    above: &mut Vec<&'d Descriptor>,
    nodes: &mut Vec<Node<'d>>,
) {
    let with_value = list.iter().filter(|d| d.value.is_some());
    let without = list.iter().filter(|d| d.value.is_none());
    for descriptor in with_value.chain(without) {
        above.push(descriptor);
        nodes.push(Node {
            path: above.clone(),
        });
        in_precedence_order(&descriptor.children, above, nodes);
        above.pop();
    }
}

/// Each limited entry's rule name (`None` for the others): its
/// `rate_limit.name`, else the domain and the path's keys and values as
/// envoyproxy/ratelimit names its metrics (`edge.generic_key_foo.remote_address`);
/// made valid and unique.
fn rule_names(domain: &str, nodes: &[Node]) -> Vec<Option<String>> {
    let mut names = RuleNames::default();
    nodes
        .iter()
        .map(|node| {
            let RateLimit::Limited(limit) = &node.entry().rate_limit else {
                return None;
            };
            let wanted = limit.name.clone().unwrap_or_else(|| {
                let mut name = domain.to_owned();
                for entry in &node.path {
                    let _ = write!(name, ".{}", entry.key);
                    if let Some(value) = &entry.value {
                        let _ = write!(name, "_{value}");
                    }
                }
                name
            });
            Some(names.claim(&wanted))
        })
        .collect()
}

/// Where dropping the never-limited entries, or matching entry keys in any
/// order, would make sluice decide a descriptor otherwise than
/// envoyproxy/ratelimit: for two entries with the same keys that some
/// descriptor fits, in precedence order, envoyproxy/ratelimit picks the
/// first, as sluice's first match does, unless
/// - the first has no limit: sluice has no never-limited rule, so the
///   second's rule would decide in its place;
/// - their keys come in different orders: envoyproxy/ratelimit tells
///   `(a, b)` from `(b, a)`, and sluice's first rule decides both.
fn shadowing_problems(nodes: &[Node], names: &[Option<String>]) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut reported = HashSet::new();
    for (later_index, later) in nodes.iter().enumerate() {
        for (earlier_index, earlier) in nodes[..later_index].iter().enumerate() {
            if !earlier.same_keys(later) || !earlier.overlaps(later) {
                continue;
            }
            let entry = earlier.entry();
            match (&names[earlier_index], &names[later_index]) {
                (None, Some(rule)) if reported.insert(earlier_index) => {
                    let (at, what) = match entry.rate_limit {
                        RateLimit::Unlimited => (
                            join(&entry.at, "rate_limit.unlimited"),
                            "this entry leaves its descriptors unlimited",
                        ),
                        _ => (
                            entry.at.clone(),
                            "without a rate_limit this entry leaves the descriptors that end at \
                             it unlimited",
                        ),
                    };
                    problems.push(Problem::new(
                        at,
                        format!(
                            "no equivalent: {what}, and sluice has no never-limited rule: rule \
                             {rule:?} (from {}) would decide them in its place",
                            later.entry().at
                        ),
                    ));
                }
                (Some(rule), _) if !earlier.same_order(later) && reported.insert(later_index) => {
                    problems.push(Problem::new(
                        later.entry().at.clone(),
                        format!(
                            "no equivalent: sluice matches a descriptor's entry keys in any \
                             order, so rule {rule:?} (from {}, for {}) would decide the {} \
                             descriptors of this entry",
                            entry.at,
                            earlier.keys(),
                            later.keys()
                        ),
                    ));
                }
                _ => {}
            }
        }
    }
    problems
}

/// The header comment, then each entry's notes and rule in precedence order.
fn write_rules(
    source_name: &str,
    domain: &str,
    nodes: &[Node],
    names: &[Option<String>],
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Imported by `sluice import envoy-ratelimit` from {}, domain {}.",
        toml_string(source_name),
        toml_string(domain)
    );
    out.push_str(HEADER);
    let mut rules = 0;
    for (node, name) in nodes.iter().zip(names) {
        let entry = node.entry();
        let mut block = String::new();
        if let RateLimit::Limited(_) = entry.rate_limit {
            let _ = writeln!(block, "# from {}", entry.at);
        }
        for note in &entry.notes {
            let _ = writeln!(block, "# {note}");
        }
        match (&entry.rate_limit, name) {
            (RateLimit::Limited(limit), Some(name)) => {
                write_rule(&mut block, domain, node, limit, name);
                rules += 1;
            }
            (RateLimit::Unlimited, _) => {
                let _ = writeln!(
                    block,
                    "# {}: unlimited: no rule decides these descriptors, so they are never limited",
                    entry.at
                );
            }
            _ => {}
        }
        if !block.is_empty() {
            out.push('\n');
            out.push_str(&block);
        }
    }
    if rules == 0 {
        out.push_str("\n# No entry has a limit: this domain needs no rule.\n");
    }
    out
}

/// What every import says first, after the source.
const HEADER: &str = "\
# Append these rules to a sluice config whose [rls] section lets Envoy reach sluice:
#   [rls]
#   listen = \"127.0.0.1:8081\"
# One rule per descriptor entry with a rate_limit, over the keys of its path (an
# entry with a value in match.descriptor, one without in key: a bucket per value),
# counting fixed windows aligned to Unix time as envoyproxy/ratelimit does. The
# rules are in envoyproxy/ratelimit's order of preference (at each level, an entry
# with a value before one without), so sluice's first match is its match, except:
# - envoyproxy/ratelimit does not backtrack: a descriptor (a=1, b=2) that went down
#   an entry a=1 without a child for b=2 is not limited, where sluice goes on to a
#   rule for a of any value and b=2;
# - sluice matches a descriptor's entry keys in any order, envoyproxy/ratelimit only
#   in the config's order (Envoy's actions send them in their own fixed order).
";

fn write_rule(out: &mut String, domain: &str, node: &Node, limit: &Limit, name: &str) {
    if let Some(note) = limit
        .unit
        .window_note(&format!("unit: {}", limit.unit.name().to_lowercase()))
    {
        let _ = writeln!(out, "# {note}");
    }
    let _ = writeln!(out, "[[rule]]\nname = {}", toml_string(name));
    let fixed: Vec<String> = node
        .path
        .iter()
        .filter_map(|entry| {
            let value = entry.value.as_ref()?;
            Some(format!("{} = {}", toml_key(&entry.key), toml_string(value)))
        })
        .collect();
    let _ = write!(out, "match = {{ domain = {}", toml_string(domain));
    if !fixed.is_empty() {
        let _ = write!(out, ", descriptor = {{ {} }}", fixed.join(", "));
    }
    out.push_str(" }\n");
    let mut sources: Vec<String> = node
        .path
        .iter()
        .filter(|entry| entry.value.is_none())
        .map(|entry| toml_string(&format!("descriptor:{}", entry.key)))
        .collect();
    if sources.is_empty() {
        // Every entry has its value: one bucket for them all.
        sources.push(toml_string("global"));
    }
    let _ = writeln!(out, "key = [{}]", sources.join(", "));
    let _ = writeln!(
        out,
        "algorithm = \"fixed_window\"\nrate = \"{}/{}\"",
        limit.requests_per_unit,
        limit.unit.period()
    );
    if limit.shadow {
        out.push_str("shadow = true\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::testing::{only, problems_of, rules_of};

    /// The rules `yaml` imports to, each a TOML table.
    fn rules(yaml: &str) -> Vec<toml::Table> {
        rules_of(translate(yaml, "test.yaml"))
    }

    /// Each rule as `name match key rate [shadow]`, a line to compare at a glance.
    fn summary(yaml: &str) -> Vec<String> {
        rules(yaml)
            .iter()
            .map(|rule| {
                assert_eq!(rule["algorithm"].as_str(), Some("fixed_window"));
                let mut line = format!(
                    "{} {} {} {}",
                    rule["name"].as_str().unwrap(),
                    rule["match"],
                    rule["key"],
                    rule["rate"].as_str().unwrap()
                );
                if rule.get("shadow").and_then(toml::Value::as_bool) == Some(true) {
                    line.push_str(" shadow");
                }
                line
            })
            .collect()
    }

    /// Every problem as `path: message`.
    fn problems(yaml: &str) -> Vec<String> {
        problems_of(translate(yaml, "test.yaml"))
    }

    fn only_problem(yaml: &str) -> String {
        only(problems(yaml))
    }

    #[test]
    fn an_entry_with_a_value_is_matched_and_one_without_is_a_bucket_per_value() {
        let yaml = "domain: edge
descriptors:
  - key: generic_key
    value: foo
    descriptors:
      - key: remote_address
        rate_limit: { unit: second, requests_per_unit: 10 }
";
        let text = translate(yaml, "edge.yaml").unwrap();
        assert!(
            text.ends_with(
                "\n# from descriptors[0].descriptors[0]
[[rule]]
name = \"edge.generic_key_foo.remote_address\"
match = { domain = \"edge\", descriptor = { generic_key = \"foo\" } }
key = [\"descriptor:remote_address\"]
algorithm = \"fixed_window\"
rate = \"10/s\"
"
            ),
            "{text}"
        );
        assert!(text.starts_with(
            "# Imported by `sluice import envoy-ratelimit` from \"edge.yaml\", domain \"edge\".\n"
        ));
        assert!(
            text.contains("#   [rls]\n#   listen = \"127.0.0.1:8081\"\n"),
            "{text}"
        );
        assert!(text.contains("does not backtrack"), "{text}");
    }

    #[test]
    fn a_path_of_values_only_is_one_global_bucket_and_of_no_values_a_bucket_per_value() {
        let yaml = "domain: d
descriptors:
  - key: a
    value: \"1\"
    rate_limit: { unit: minute, requests_per_unit: 5 }
    descriptors:
      - key: b
        value: \"2\"
        rate_limit: { unit: minute, requests_per_unit: 6 }
  - key: c
    descriptors:
      - key: e
        rate_limit: { unit: hour, requests_per_unit: 7 }
";
        assert_eq!(
            summary(yaml),
            [
                r#"d.a_1 { descriptor = { a = "1" }, domain = "d" } ["global"] 5/m"#,
                r#"d.a_1.b_2 { descriptor = { a = "1", b = "2" }, domain = "d" } ["global"] 6/m"#,
                r#"d.c.e { domain = "d" } ["descriptor:c", "descriptor:e"] 7/h"#,
            ]
        );
    }

    #[test]
    fn at_each_level_entries_with_a_value_come_first_otherwise_in_file_order() {
        // README example 3: the blocked address is listed after the wildcard,
        // yet envoyproxy/ratelimit tries it first.
        let yaml = "domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 10 }
  - key: remote_address
    value: 50.0.0.5
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: z
    value: \"2\"
    descriptors:
      - key: y
        rate_limit: { unit: second, requests_per_unit: 1 }
      - key: y
        value: \"9\"
        rate_limit: { unit: second, requests_per_unit: 2 }
";
        let names: Vec<String> = summary(yaml)
            .iter()
            .map(|line| line.split(' ').next().unwrap().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                "edge_proxy_per_ip.remote_address_50.0.0.5",
                "edge_proxy_per_ip.z_2.y_9",
                "edge_proxy_per_ip.z_2.y",
                "edge_proxy_per_ip.remote_address",
            ]
        );
        assert!(summary(yaml)[0].ends_with(" 0/s"), "{:?}", summary(yaml));
    }

    #[test]
    fn every_unit_counts_the_same_unix_time_windows() {
        for (unit, rate) in [
            ("second", "3/s"),
            ("MINUTE", "3/m"),
            ("Hour", "3/h"),
            ("day", "3/d"),
            ("week", "3/7d"),
            ("month", "3/30d"),
            ("year", "3/365d"),
        ] {
            let yaml = format!(
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{ unit: {unit}, requests_per_unit: 3 }}\n"
            );
            let rule = &rules(&yaml)[0];
            assert_eq!(rule["rate"].as_str(), Some(rate), "{unit}");
            assert_eq!(rule.get("calendar"), None);
            let text = translate(&yaml, "t").unwrap();
            let lower = unit.to_lowercase();
            let noted = text.contains(&format!("# unit: {lower} is "));
            assert_eq!(
                noted,
                ["week", "month", "year"].contains(&lower.as_str()),
                "{text}"
            );
        }
        let text = translate(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: week, requests_per_unit: 3 }\n",
            "t",
        )
        .unwrap();
        assert!(text.contains("Thursday"), "{text}");
    }

    #[test]
    fn shadow_mode_is_a_shadow_rule() {
        // README example 6.
        let yaml = "domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit: { requests_per_unit: 10, unit: second }
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit: { requests_per_unit: 20, unit: second }
";
        assert_eq!(
            summary(yaml),
            [
                r#"example6.service.user_user-a { descriptor = { user = "user-a" }, domain = "example6" } ["descriptor:service"] 10/s shadow"#,
                r#"example6.service.user_user-b { descriptor = { user = "user-b" }, domain = "example6" } ["descriptor:service"] 20/s"#,
            ]
        );
    }

    #[test]
    fn a_rate_limit_name_names_the_rule_made_valid_and_unique() {
        let yaml = "domain: d
descriptors:
  - key: a
    rate_limit: { name: \"my limit/1\", unit: second, requests_per_unit: 1 }
  - key: b
    rate_limit: { name: \"my_limit_1\", unit: second, requests_per_unit: 1 }
  - key: c
    rate_limit: { name: \"d.e\", unit: second, requests_per_unit: 1 }
  - key: e
    rate_limit: { unit: second, requests_per_unit: 1 }
  - key: f
    rate_limit: { name: \"my_limit_1\", unit: second, requests_per_unit: 1 }
";
        let names: Vec<String> = rules(yaml)
            .iter()
            .map(|rule| rule["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            names,
            ["my_limit_1", "my_limit_1-2", "d.e", "d.e-2", "my_limit_1-3"]
        );
    }

    #[test]
    fn an_unlimited_entry_no_rule_would_decide_is_a_comment() {
        // README example 5, and an unlimited wildcard after a limited value.
        let yaml = "domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: user
    rate_limit: { unlimited: true }
  - key: user
    value: bot
    rate_limit: { unit: minute, requests_per_unit: 1 }
";
        let text = translate(yaml, "t").unwrap();
        assert!(
            text.contains(
                "\n# descriptors[0]: unlimited: no rule decides these descriptors, so they are \
                 never limited\n"
            ),
            "{text}"
        );
        assert!(text.contains("\n# descriptors[2]: unlimited:"), "{text}");
        assert_eq!(rules(yaml).len(), 2);
    }

    #[test]
    fn an_unlimited_entry_a_later_rule_would_decide_has_no_equivalent() {
        let yaml = "domain: d
descriptors:
  - key: user
    value: admin
    rate_limit: { unlimited: true }
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 10 }
";
        assert_eq!(
            only_problem(yaml),
            "descriptors[0].rate_limit.unlimited: no equivalent: this entry leaves its \
             descriptors unlimited, and sluice has no never-limited rule: rule \"d.user\" (from \
             descriptors[1]) would decide them in its place"
        );
    }

    #[test]
    fn an_entry_without_rate_limit_leaves_its_own_descriptors_unlimited() {
        // Nothing decides (a=1) or (a=1, b) but these entries: ignored.
        let quiet = "domain: d
descriptors:
  - key: a
    value: \"1\"
    descriptors:
      - key: b
  - key: c
";
        assert_eq!(summary(quiet), Vec::<String>::new());
        assert!(translate(quiet, "t")
            .unwrap()
            .contains("this domain needs no rule"));
        // README's "effectively whitelisted": with a rule for any `a`, the
        // descriptor (a=1) would be limited by it in sluice.
        let shadowing = "domain: d
descriptors:
  - key: a
    rate_limit: { unit: second, requests_per_unit: 10 }
  - key: a
    value: \"1\"
    descriptors:
      - key: b
        rate_limit: { unit: second, requests_per_unit: 1 }
";
        assert_eq!(
            only_problem(shadowing),
            "descriptors[1]: no equivalent: without a rate_limit this entry leaves the \
             descriptors that end at it unlimited, and sluice has no never-limited rule: rule \
             \"d.a\" (from descriptors[0]) would decide them in its place"
        );
    }

    #[test]
    fn replaces_has_no_equivalent() {
        // README example 7.
        let yaml = "domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
";
        let problem = only_problem(yaml);
        assert!(
            problem
                .starts_with("descriptors[1].descriptors[0].rate_limit.replaces: no equivalent: "),
            "{problem}"
        );
        // An empty list replaces nothing.
        let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1, replaces: [] }\n";
        assert_eq!(rules(yaml).len(), 1);
    }

    #[test]
    fn metric_only_fields_are_ignored_with_a_comment() {
        let yaml = "domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: key1
        detailed_metric: true
        shadow_mode: false
        quota_mode: false
        share_threshold: false
        rate_limit: { unit: minute, requests_per_unit: 10 }
";
        let text = translate(yaml, "t").unwrap();
        assert!(
            text.contains("\n# descriptors[0].value_to_metric: ignored: it only names"),
            "{text}"
        );
        assert!(
            text.contains(
                "# from descriptors[0].descriptors[0]\n# descriptors[0].descriptors[0].detailed_metric: ignored"
            ),
            "{text}"
        );
        assert_eq!(rules(yaml).len(), 1);
    }

    #[test]
    fn fields_without_an_equivalent_and_unknown_fields_are_named() {
        let yaml = "domain: d
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
    metadata:
      service_with_quota: { name: service_1 }
  - key: files
    share_threshold: true
    rate_limit: { unit: hour, requests_per_unit: 10, burst: 3 }
    colour: blue
extra: 1
";
        let found = problems(yaml);
        let paths: Vec<&str> = found
            .iter()
            .map(|p| p.split(": ").next().unwrap())
            .collect();
        assert_eq!(
            paths,
            [
                "descriptors[0].quota_mode",
                "descriptors[0].metadata",
                "descriptors[1].share_threshold",
                "descriptors[1].rate_limit.burst",
                "descriptors[1].colour",
                "extra",
            ],
            "{found:#?}"
        );
        assert!(found[0].contains("no equivalent"), "{found:#?}");
        assert!(found[3].contains("unknown field"), "{found:#?}");
    }

    #[test]
    fn a_key_repeated_on_a_path_is_refused() {
        let yaml = "domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        descriptors:
          - key: a
            rate_limit: { unit: second, requests_per_unit: 1 }
";
        assert_eq!(
            only_problem(yaml),
            "descriptors[0].descriptors[0].descriptors[0].key: \"a\" is already the key of \
             descriptors[0]: sluice matches a descriptor's entry keys as a set, so it cannot \
             tell the two entries apart"
        );
    }

    #[test]
    fn the_same_keys_in_another_order_are_refused_when_a_rule_would_take_them() {
        let yaml = "domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: { unit: second, requests_per_unit: 1 }
  - key: b
    descriptors:
      - key: a
        rate_limit: { unit: second, requests_per_unit: 2 }
";
        assert_eq!(
            only_problem(yaml),
            "descriptors[1].descriptors[0]: no equivalent: sluice matches a descriptor's entry \
             keys in any order, so rule \"d.a.b\" (from descriptors[0].descriptors[0], for (a, \
             b)) would decide the (b, a) descriptors of this entry"
        );
        // Values that no descriptor fits both of do not meet.
        let apart = "domain: d
descriptors:
  - key: a
    value: \"1\"
    descriptors:
      - key: b
        rate_limit: { unit: second, requests_per_unit: 1 }
  - key: b
    descriptors:
      - key: a
        value: \"2\"
        rate_limit: { unit: second, requests_per_unit: 2 }
";
        assert_eq!(rules(apart).len(), 2);
    }

    #[test]
    fn wildcards_and_duplicates_are_refused() {
        // README example 9.
        let yaml = "domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit: { unit: minute, requests_per_unit: 20 }
";
        let problem = only_problem(yaml);
        assert!(
            problem.starts_with("descriptors[0].value: \"value*\" is a wildcard"),
            "{problem}"
        );
        let yaml = "domain: d
descriptors:
  - key: a
    value: b
  - key: a_b
";
        assert_eq!(
            only_problem(yaml),
            "descriptors[1]: repeats descriptors[0] (\"a_b\" to envoyproxy/ratelimit, which \
             refuses the file)"
        );
    }

    #[test]
    fn invalid_values_are_named_all_at_once() {
        let yaml = "domain: \"\"
descriptors:
  - value: x
  - key: \"\"
  - key: a
    rate_limit: { unit: fortnight, requests_per_unit: 1 }
  - key: b
    rate_limit: { requests_per_unit: -1 }
  - key: c
    rate_limit: { unit: second, requests_per_unit: 4294967296 }
  - key: d
    rate_limit: { unit: second, requests_per_unit: 1.5 }
  - key: e
    rate_limit: { unit: second }
  - key: f
    rate_limit: { unit: second, unlimited: true }
  - key: g
    shadow_mode: yes
    rate_limit: 10
  - key: [h]
    value: 1.5
";
        let found = problems(yaml);
        assert_eq!(
            found,
            [
                "descriptors[0].key: is required",
                "descriptors[1].key: must not be empty",
                "descriptors[2].rate_limit.unit: unknown unit \"fortnight\"; envoyproxy/ratelimit's \
                 units are second, minute, hour, day, week, month and year",
                "descriptors[3].rate_limit.unit: is required; envoyproxy/ratelimit's units are \
                 second, minute, hour, day, week, month and year",
                "descriptors[3].rate_limit.requests_per_unit: must be a whole number from 0 to \
                 4294967295",
                "descriptors[4].rate_limit.requests_per_unit: must be a whole number from 0 to \
                 4294967295",
                "descriptors[5].rate_limit.requests_per_unit: must be a whole number from 0 to \
                 4294967295",
                "descriptors[6].rate_limit.requests_per_unit: is required (envoyproxy/ratelimit \
                 reads a missing one as 0, refusing every request; write 0 if that is meant)",
                "descriptors[7].rate_limit.unit: envoyproxy/ratelimit refuses a unit with \
                 unlimited: true",
                "descriptors[8].shadow_mode: must be true or false",
                "descriptors[8].rate_limit: must be a mapping with unit and requests_per_unit, \
                 or unlimited: true",
                "descriptors[9].key: must be a string",
                "descriptors[9].value: write this number in quotes, as the text it should be",
                "domain: must not be empty",
            ]
        );
    }

    #[test]
    fn a_file_that_is_not_a_config_is_refused_with_one_line_per_problem() {
        let error = translate("domain: [", "bad.yaml").unwrap_err();
        assert!(
            error.to_string().starts_with("bad.yaml: not valid YAML: "),
            "{error}"
        );
        assert_eq!(
            translate("- 1\n", "list.yaml").unwrap_err().to_string(),
            "list.yaml: the file must be a mapping with domain and descriptors"
        );
        assert_eq!(
            translate("descriptors: 3\n", "d.yaml").unwrap_err().to_string(),
            "d.yaml: descriptors: must be a list of descriptor entries\nd.yaml: domain: is required"
        );
    }

    #[test]
    fn whole_numbers_and_booleans_are_read_as_their_text() {
        let yaml = "domain: 7
descriptors:
  - key: 1
    value: 200
    descriptors:
      - key: flag
        value: true
        rate_limit: { unit: second, requests_per_unit: 1 }
";
        assert_eq!(
            summary(yaml),
            [
                r#"7.1_200.flag_true { descriptor = { 1 = "200", flag = "true" }, domain = "7" } ["global"] 1/s"#
            ]
        );
    }

    #[test]
    fn any_key_value_domain_or_name_stays_one_toml_string() {
        let odd = "a \"quoted\" \\ back\tslash\nline \u{1} é.b";
        // JSON is YAML, and serde_json escapes what YAML needs escaped.
        let yaml = serde_json::json!({
            "domain": odd,
            "descriptors": [{
                "key": odd,
                "value": odd,
                "descriptors": [{
                    "key": format!("{odd}x"),
                    "rate_limit": { "unit": "second", "requests_per_unit": 1 },
                }],
            }],
        })
        .to_string();
        let rule = &rules(&yaml)[0];
        assert_eq!(rule["match"]["domain"].as_str(), Some(odd));
        assert_eq!(rule["match"]["descriptor"][odd].as_str(), Some(odd));
        assert_eq!(
            rule["key"].as_array().unwrap()[0].as_str(),
            Some(format!("descriptor:{odd}x").as_str())
        );
        let name = rule["name"].as_str().unwrap();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')),
            "{name}"
        );
        // The header names the file on one comment line however it is spelled.
        let text = translate(&yaml, "odd\nname.yaml").unwrap();
        assert!(text
            .starts_with("# Imported by `sluice import envoy-ratelimit` from \"odd\\nname.yaml\""));
        assert_eq!(toml_key("remote_address"), "remote_address");
        assert_eq!(toml_key("x.y"), "\"x.y\"");
        assert_eq!(toml_key(""), "\"\"");
    }
}
