//! The Prometheus text exposition format, parsed: samples with their labels
//! (quoted values unescaped) and each family's `# TYPE`. Enough of the
//! format for what sluice (the `prometheus` crate's encoder) writes: no
//! timestamps are expected, but one is tolerated and ignored.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One line `name{label="value",...} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A whole `/metrics` answer.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    pub samples: Vec<Sample>,
    /// Family name → `counter`, `gauge`, `histogram`, ...
    pub types: HashMap<String, String>,
}

impl Exposition {
    /// Parses `text`; panics with the offending line when it is not the
    /// text format.
    pub fn parse(text: &str) -> Exposition {
        let mut exposition = Exposition::default();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if let Some(comment) = line.strip_prefix('#') {
                let mut words = comment.split_whitespace();
                if words.next() == Some("TYPE") {
                    let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                        panic!("a TYPE line without a name and a type: {line}");
                    };
                    exposition.types.insert(name.to_owned(), kind.to_owned());
                }
                continue;
            }
            exposition
                .samples
                .push(parse_sample(line).unwrap_or_else(|| panic!("not a sample line: {line:?}")));
        }
        exposition
    }

    /// The value of the sample named `name` with exactly `labels`.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let wanted: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == wanted)
            .map(|s| s.value)
    }

    /// Like [`Exposition::get`]; panics when there is no such sample.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no sample {name} {labels:?} among {:#?}", self.names()))
    }

    /// The names of the samples present (histograms as their `_bucket`,
    /// `_sum` and `_count` series).
    pub fn names(&self) -> BTreeSet<String> {
        self.samples.iter().map(|s| s.name.clone()).collect()
    }

    /// Every label set of samples named `name`.
    pub fn label_sets(&self, name: &str) -> Vec<&BTreeMap<String, String>> {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .map(|s| &s.labels)
            .collect()
    }
}

/// `name{a="x",b="y\"z"} 12.5` (labels optional).
fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        rest = after;
        loop {
            rest = rest.trim_start_matches([',', ' ']);
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let (label, after) = rest.split_once("=\"")?;
            let (value, after) = unescape_until_quote(after)?;
            labels.insert(label.trim().to_owned(), value);
            rest = after;
        }
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other.parse().ok()?,
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// A label value up to its closing quote (`\\`, `\"` and `\n` unescaped),
/// and what follows the quote.
fn unescape_until_quote(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((value, &text[at + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => value.push('\n'),
                other => value.push(other),
            },
            other => value.push(other),
        }
    }
    None
}

#[test]
fn parses_labels_escapes_and_infinities() {
    let text = "# HELP x_total A help.\n# TYPE x_total counter\n\
                x_total{rule=\"a \\\"b\\\"\",outcome=\"allowed\"} 3\n\
                h_bucket{le=\"+Inf\"} 7\nplain 1.5e-3\n";
    let parsed = Exposition::parse(text);
    assert_eq!(parsed.types["x_total"], "counter");
    assert_eq!(
        parsed.get("x_total", &[("outcome", "allowed"), ("rule", "a \"b\"")]),
        Some(3.0)
    );
    assert_eq!(parsed.get("h_bucket", &[("le", "+Inf")]), Some(7.0));
    assert_eq!(parsed.get("plain", &[]), Some(0.0015));
    assert_eq!(parsed.get("x_total", &[("outcome", "allowed")]), None);
}
