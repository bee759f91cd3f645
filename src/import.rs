//! `sluice import`: other rate limiters' configs translated into sluice
//! `[[rule]]` tables, printed for the operator to append to a config.
//!
//! - [`envoy_ratelimit`]: an envoyproxy/ratelimit YAML file (one domain)
//!   into rules for sluice's rate limit service (docs/import-envoy-ratelimit.md).
//! - [`envoy_gateway`]: Envoy Gateway's `BackendTrafficPolicy` rate limits
//!   into rules for proxied requests (docs/import-gateway-policies.md).
//! - [`traefik`]: Traefik's `rateLimit` middlewares into rules for proxied
//!   requests (docs/import-gateway-policies.md).
//!
//! An importer is a pure function from the file's text to TOML text: it
//! reads no file and writes nothing, and it refuses (with every reason at
//! once) rather than print rules that would decide differently.

use std::collections::HashSet;
use std::fmt::{self, Write as _};

pub mod envoy_gateway;
pub mod envoy_ratelimit;
pub mod traefik;
mod yaml;

/// Why a file could not be imported: every problem found, each at the path
/// of the field in the source file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportError {
    /// The file, as the operator named it.
    pub source_name: String,
    pub problems: Vec<Problem>,
}

/// One field that has no sluice equivalent, or is not valid where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where in the source file, e.g. `descriptors[2].rate_limit.replaces`;
    /// empty for the file as a whole.
    pub path: String,
    /// Why, as a sentence that follows `path: `.
    pub message: String,
}

impl Problem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// One line per problem: `FILE: PATH: why`.
impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            match problem.path.as_str() {
                "" => write!(f, "{}: {}", self.source_name, problem.message)?,
                path => write!(f, "{}: {path}: {}", self.source_name, problem.message)?,
            }
        }
        Ok(())
    }
}

impl std::error::Error for ImportError {}

/// `text` as a TOML basic string: quotes, backslashes and control
/// characters escaped, so any key, value or name stays on its line.
fn toml_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            '\r' => quoted.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(quoted, "\\u{:04X}", u32::from(c));
            }
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// An import's opening comment: where it came from, `header`, then each
/// titled list that has lines.
fn opening(tool: &str, source_name: &str, header: &str, lists: &[(&str, &[String])]) -> String {
    let mut out = format!(
        "# Imported by `sluice import {tool}` from {}.\n{header}",
        toml_string(source_name)
    );
    for (title, lines) in lists.iter().filter(|(_, lines)| !lines.is_empty()) {
        let _ = writeln!(out, "# {title}");
        for line in lines.iter() {
            let _ = writeln!(out, "# - {line}");
        }
    }
    out
}

/// `key` as a TOML key: bare when it may be, else quoted.
fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    if bare {
        key.to_owned()
    } else {
        toml_string(key)
    }
}

/// Rule names handed out by one import: valid (letters, digits, `_`, `.`
/// and `-` only, since a name appears in headers; any other character
/// becomes `_`) and unique (`-2`, `-3`… when taken).
#[derive(Default)]
struct RuleNames {
    taken: HashSet<String>,
}

impl RuleNames {
    fn claim(&mut self, wanted: &str) -> String {
        let wanted = wanted.replace(
            |c: char| !c.is_ascii_alphanumeric() && !"_.-".contains(c),
            "_",
        );
        let mut name = wanted.clone();
        let mut suffix = 2;
        while !self.taken.insert(name.clone()) {
            name = format!("{wanted}-{suffix}");
            suffix += 1;
        }
        name
    }
}

/// The units of envoyproxy/ratelimit (and of Envoy Gateway, which hands
/// its global limits to it). Each counts fixed windows of a fixed number of
/// seconds aligned to Unix time (`now / divider`), as sluice's
/// `fixed_window` aligns its periods: a week, a month and a year are 7, 30
/// and 365 days of Unix time, not calendar ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

/// Each unit as Envoy Gateway writes it, and the PERIOD of a sluice rate
/// of the same length.
const UNITS: [(Unit, &str, &str); 7] = [
    (Unit::Second, "Second", "s"),
    (Unit::Minute, "Minute", "m"),
    (Unit::Hour, "Hour", "h"),
    (Unit::Day, "Day", "d"),
    (Unit::Week, "Week", "7d"),
    (Unit::Month, "Month", "30d"),
    (Unit::Year, "Year", "365d"),
];

impl Unit {
    /// As Envoy Gateway writes it.
    fn name(self) -> &'static str {
        UNITS
            .iter()
            .find(|(unit, ..)| *unit == self)
            .map_or("", |row| row.1)
    }

    /// The unit named `text`, in any case (envoyproxy/ratelimit's reading)
    /// or exactly (Envoy Gateway's).
    fn parse(text: &str, any_case: bool) -> Option<Unit> {
        let fits = |name: &str| name == text || (any_case && name.eq_ignore_ascii_case(text));
        UNITS
            .iter()
            .find(|(_, name, _)| fits(name))
            .map(|row| row.0)
    }

    /// The PERIOD of a sluice rate of the same length.
    fn period(self) -> &'static str {
        UNITS
            .iter()
            .find(|(unit, ..)| *unit == self)
            .map_or("", |row| row.2)
    }

    /// Why a window's period is written in days, for the units an operator
    /// might read as calendar ones: `written` (the unit as the file spells
    /// it) and what it is.
    fn window_note(self, written: &str) -> Option<String> {
        let what = match self {
            Unit::Week => "7 days of Unix time (from Thursday 00:00 UTC)",
            Unit::Month => "30 days of Unix time, not a calendar month",
            Unit::Year => "365 days of Unix time, not a calendar year",
            _ => return None,
        };
        Some(format!(
            "{written} is {what}, as \"{}\" counts them",
            self.period()
        ))
    }
}

/// A `[[rule]]` table an import writes, with where in the source file its
/// fields came from, so that what sluice's own check refuses is named there.
struct Written {
    /// The table, from its `[[rule]]` line.
    toml: String,
    /// The source path of the rule as a whole.
    at: String,
    /// A sluice field (`match.path`, `cost`) and the source path it came from.
    sources: Vec<(String, String)>,
}

/// What sluice's config check refuses in `rules`, each at the source path
/// of the field it refuses (else of the rule): the import prints nothing
/// `sluice check` would not take.
fn refused_by_check(rules: &[Written]) -> Vec<Problem> {
    let mut text = String::from("[server]\nupstream = \"http://127.0.0.1:9\"\n");
    for rule in rules {
        text.push('\n');
        text.push_str(&rule.toml);
    }
    let Err(errors) = crate::config::Config::from_toml(&text, "import") else {
        return Vec::new();
    };
    errors
        .errors
        .iter()
        .filter_map(|error| {
            let Some((index, field)) = error
                .path
                .strip_prefix("rule[")
                .and_then(|rest| rest.split_once("]."))
                .and_then(|(index, field)| Some((index.parse::<usize>().ok()?, field)))
            else {
                // Not about a rule: the rest of this made-up config, never
                // the operator's. A TOML error here is the importer's own.
                return error
                    .path
                    .is_empty()
                    .then(|| Problem::new("", format!("sluice cannot read the import: {error}")));
            };
            let rule = rules.get(index)?;
            let within = |source: &str| {
                field == source
                    || field
                        .strip_prefix(source)
                        .is_some_and(|rest| rest.starts_with(['.', '[']))
            };
            let at = rule
                .sources
                .iter()
                .filter(|(source, _)| within(source))
                .max_by_key(|(source, _)| source.len())
                .map_or(&rule.at, |(_, at)| at);
            Some(Problem::new(
                at.clone(),
                format!("sluice would refuse the rule's {field}: {}", error.message),
            ))
        })
        .collect()
}

/// An import of a file of Kubernetes objects (or other YAML documents):
/// each object read into rules, every problem at once, then the rules
/// written and held to sluice's own check.
trait Objects: Default {
    fn reader(&mut self) -> &mut yaml::Reader;
    /// Reads one object: its rules, or what it skips, or its problems.
    fn object(&mut self, object: &yaml::Object);
    /// The rules read, each named through `names`.
    fn write(&self, names: &mut RuleNames) -> Vec<Written>;
    /// The header comment, what was skipped, then `written`.
    fn output(&self, source_name: &str, written: &[Written]) -> String;
}

/// The rules `I` makes of `yaml`, or every reason there are none.
fn import_objects<I: Objects>(yaml: &str, source_name: &str) -> Result<String, ImportError> {
    let fail = |problems| ImportError {
        source_name: source_name.to_owned(),
        problems,
    };
    let documents = yaml::documents(yaml).map_err(|problem| fail(vec![problem]))?;
    let mut import = I::default();
    for object in yaml::objects(&documents, import.reader()) {
        import.object(&object);
    }
    let problems = std::mem::take(&mut import.reader().problems);
    if !problems.is_empty() {
        return Err(fail(problems));
    }
    let written = import.write(&mut RuleNames::default());
    let problems = refused_by_check(&written);
    if !problems.is_empty() {
        return Err(fail(problems));
    }
    Ok(import.output(source_name, &written))
}

#[cfg(test)]
mod testing;
