//! `sluice suggest`: the rate recorded traffic supports for one rule
//! (docs/replay.md, "Suggesting a rate"). Each key's busiest window of the
//! rule's period (sliding, to the microsecond of the log) gives one peak per
//! key; the peaks' distribution says how much room callers used, and the
//! peak that all but `--spare` percent of keys stayed within becomes a
//! token bucket's rate and burst. A key whose every window of length P
//! held at most C requests is never limited by `rate = "C/P"` with
//! `burst = C`: any span of length L holds at most ⌈L/P⌉·C ≤ C + L·C/P.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::line::{self, Wanted};
use super::time::{parse_time, Epoch};
use super::{replayable, Failed, LogHolds, LogLine, Logs, SimulatedStore, Simulator, Unreadable};
use crate::clock::Nanos;
use crate::config::{format_period, format_rate, Config, RuleConfig};
use crate::metrics::Metrics;
use crate::policy::Policy;

/// What `suggest` is asked.
pub struct Ask {
    pub config: Config,
    /// The config file's text, whose rule's `match` and `key` the
    /// suggested rule repeats as written.
    pub config_text: String,
    pub rule: String,
    /// Percent of keys (the busiest) the suggestion may limit.
    pub spare: f64,
    pub logs: Vec<PathBuf>,
}

/// What the log supports.
#[derive(Debug)]
pub struct Suggestion {
    pub rule: String,
    pub period: Duration,
    /// Access log lines read, and those skipped.
    pub lines: u64,
    pub skipped: u64,
    /// Each key's peak, ascending.
    pub peaks: Vec<u64>,
    pub spare: f64,
    /// The suggested COUNT (and burst).
    pub count: u64,
    /// The suggested `[[rule]]`.
    pub toml: String,
}

/// The p-th percentile of `sorted` by nearest rank: the ⌈p·n/100⌉-th
/// smallest (the smallest for p = 0).
pub fn nearest_rank(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    // Less a hair: 99.9 % of 1000 is 999, not the 999.0000000000001
    // floating point makes of it.
    let rank = (p * sorted.len() as f64 / 100.0 - 1e-9).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The most timestamps of `sorted` within any span of `period`.
pub fn busiest(sorted: &[Nanos], period: Nanos) -> u64 {
    let mut most = 0;
    let mut start = 0;
    for (end, &at) in sorted.iter().enumerate() {
        while at - sorted[start] >= period {
            start += 1;
        }
        most = most.max(end - start + 1);
    }
    most as u64
}

pub fn suggest(ask: Ask) -> Result<Suggestion, Failed> {
    let (rule, period) = rule_and_period(&ask)?;
    let mut alone = ask.config.clone();
    alone.rules = vec![rule.clone()];
    let mut logs = Logs::new(ask.logs);
    // Keys and match are all a suggestion reads, whatever the rule counts;
    // a source the log does not record is missing from every line.
    let (kept, left_out) = replayable(
        &strip_counting(alone),
        &LogHolds { keys: None },
        Epoch::default(),
    );
    if let Some(left_out) = left_out.first() {
        return Err(Failed(format!("rule {:?}: {}", ask.rule, left_out.reason)));
    }
    let store = SimulatedStore::new(1);
    let policy = Policy::compile(Arc::new(kept), &Metrics::new(), store.store());
    let mut wanted = Wanted::default();
    let mut simulator = Simulator::new(&policy, &store, &mut wanted);
    let (times, lines, skipped) = key_times(&mut logs, &mut simulator, &wanted)?;
    let period_nanos = period.as_nanos() as Nanos;
    let mut peaks: Vec<u64> = (times.into_values())
        .map(|mut times| {
            times.sort_unstable();
            busiest(&times, period_nanos)
        })
        .collect();
    peaks.sort_unstable();
    let count = nearest_rank(&peaks, 100.0 - ask.spare).max(1);
    let toml = suggested_rule(&ask.config_text, &ask.rule, count, period);
    Ok(Suggestion {
        rule: ask.rule,
        period,
        lines,
        skipped,
        peaks,
        spare: ask.spare,
        count,
        toml,
    })
}

/// The rule asked about and its shortest period, once the ask is known to
/// make sense.
fn rule_and_period(ask: &Ask) -> Result<(&RuleConfig, Duration), Failed> {
    let Some(rule) = ask.config.rules.iter().find(|rule| rule.name == ask.rule) else {
        let names: Vec<&str> = ask.config.rules.iter().map(|r| r.name.as_str()).collect();
        return Err(Failed(format!(
            "the config has no rule named {:?}; its rules: {}",
            ask.rule,
            names.join(", ")
        )));
    };
    let Some(period) = rule.limits.iter().map(|limit| limit.rate.period).min() else {
        return Err(Failed(format!(
            "rule {:?} has no rate (a concurrency rule counts requests in flight): nothing \
             to suggest",
            ask.rule
        )));
    };
    if !(0.0..100.0).contains(&ask.spare) {
        return Err(Failed(
            "--spare is a percent of keys, at least 0 and less than 100".into(),
        ));
    }
    Ok((rule, period))
}

/// The times of the lines of each key.
type KeyTimes = HashMap<String, Vec<Nanos>>;

/// The times of the logs' lines by the key the rule gives them, with how
/// many lines were read and how many skipped.
fn key_times(
    logs: &mut Logs,
    simulator: &mut Simulator<'_>,
    wanted: &Wanted,
) -> Result<(KeyTimes, u64, u64), Failed> {
    let mut times = KeyTimes::new();
    let (mut lines, mut skipped) = (0, 0);
    // Times are compared, never shown: the clock's epoch is the first's.
    let mut epoch = None;
    while let Some(LogLine { number, text, .. }) =
        logs.next_line().map_err(|Unreadable(why)| Failed(why))?
    {
        let Ok(text) = text else {
            skipped += 1;
            continue;
        };
        epoch = epoch.or_else(|| first_epoch(text));
        let epoch = epoch.unwrap_or_default();
        let Ok(line) = line::read(text, wanted, epoch, (0, number)) else {
            skipped += 1;
            continue;
        };
        lines += 1;
        if let Some(key) = simulator.key_of(&line, 0) {
            times.entry(key).or_default().push(line.time);
        }
    }
    Ok((times, lines, skipped))
}

/// The clock's epoch for a log whose first timed line is `text`; `None`
/// when it has no time a replay takes.
fn first_epoch(text: &[u8]) -> Option<Epoch> {
    let line = serde_json::from_slice::<serde_json::Value>(text).ok()?;
    let time = parse_time(line.get("time")?.as_str()?).ok()?;
    Some(Epoch::around(time))
}

/// The rule with what it counts taken away: a suggestion reads only its
/// `match` and `key`, so a GraphQL cost or a charge does not keep it out.
fn strip_counting(mut config: Config) -> Config {
    for rule in &mut config.rules {
        rule.graphql_cost = false;
        rule.charge = None;
        rule.reserve = None;
        rule.refund_on = Default::default();
        rule.tiers = None;
        rule.overrides.clear();
        if rule.algorithm == crate::config::AlgorithmKind::Adaptive {
            rule.algorithm = crate::config::AlgorithmKind::TokenBucket;
        }
    }
    config
}

impl Suggestion {
    pub fn text(&self) -> String {
        let mut out = String::new();
        let period = format_period(self.period);
        let _ = writeln!(
            out,
            "rule {}: {} key(s) in {} line(s){}; each key's busiest {period}:",
            self.rule,
            self.peaks.len(),
            self.lines,
            match self.skipped {
                0 => String::new(),
                n => format!(" ({n} skipped: not access log lines)"),
            }
        );
        let at = |p| nearest_rank(&self.peaks, p);
        let _ = writeln!(
            out,
            "  median {}, p90 {}, p99 {}, p99.9 {}, max {}",
            at(50.0),
            at(90.0),
            at(99.0),
            at(99.9),
            self.peaks.last().copied().unwrap_or(0)
        );
        let _ = writeln!(
            out,
            "all but {}% of the keys stayed within {} request(s) in any {period}:\n",
            self.spare, self.count
        );
        out.push_str(&self.toml);
        out
    }
}

/// The `[[rule]]` to paste: the rule's `name`, `match`, `key` and
/// `missing` as the file writes them, with the suggested rate and burst.
fn suggested_rule(config_text: &str, name: &str, count: u64, period: Duration) -> String {
    let written = toml::from_str::<toml::Table>(config_text)
        .ok()
        .and_then(|table| {
            let rules = table.get("rule")?.as_array()?.clone();
            rules.into_iter().find_map(|rule| match rule {
                toml::Value::Table(rule) if rule.get("name")?.as_str()? == name => Some(rule),
                _ => None,
            })
        })
        .unwrap_or_default();
    let mut out = String::from("[[rule]]\n");
    let _ = writeln!(out, "name = {}", toml::Value::String(name.to_owned()));
    for field in ["match", "key", "missing"] {
        if let Some(value) = written.get(field) {
            let _ = writeln!(out, "{field} = {value}");
        }
    }
    let rate = format_rate(crate::limiter::Rate { count, period });
    let _ = writeln!(out, "rate = \"{rate}\"");
    let _ = writeln!(out, "burst = {count}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<u64> = (1..=1000).collect();
        assert_eq!(nearest_rank(&values, 50.0), 500);
        assert_eq!(nearest_rank(&values, 99.9), 999);
        assert_eq!(nearest_rank(&values, 100.0), 1000);
        assert_eq!(nearest_rank(&[7], 50.0), 7);
        assert_eq!(nearest_rank(&[1, 2, 3], 0.0), 1);
        assert_eq!(nearest_rank(&[], 50.0), 0);
    }

    #[test]
    fn the_busiest_window_slides() {
        let s = 1_000_000_000;
        // Three in the first second, then four within a second across :01.
        let times = [
            0,
            s / 10,
            s / 5,
            15 * s / 10,
            17 * s / 10,
            19 * s / 10,
            24 * s / 10,
        ];
        assert_eq!(busiest(&times, s), 4);
        assert_eq!(busiest(&times, 10 * s), 7);
        assert_eq!(busiest(&[], s), 0);
        // A window is half open: two requests a period apart are two windows.
        assert_eq!(busiest(&[0, s], s), 1);
    }
}
