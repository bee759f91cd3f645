//! What a replay found, per rule, as text for a person or as one JSON
//! document (`--json`; docs/replay.md has both).

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::replayable::NotReplayed;
use super::simulate::{Tally, Totals};
use super::time::Epoch;
use crate::clock::Nanos;

/// Keys listed per rule, most limited first.
const TOP_KEYS: usize = 10;

#[derive(Debug, Serialize)]
pub struct Report {
    pub lines: u64,
    pub skipped: u64,
    /// The whole log's, each request once (docs/replay.md).
    pub newly_limited: u64,
    pub no_longer_limited: u64,
    pub rules: Vec<RuleReport>,
    pub not_replayed: Vec<NotReplayedReport>,
}

#[derive(Debug, Serialize)]
pub struct RuleReport {
    pub rule: String,
    pub matched: u64,
    pub allowed: u64,
    pub limited: u64,
    pub held: u64,
    pub longest_hold_ms: u64,
    pub distinct_keys: u64,
    pub first_limited: Option<String>,
    pub top_keys: Vec<TopKey>,
    pub newly_limited: u64,
    pub no_longer_limited: u64,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct TopKey {
    pub key: String,
    pub limited: u64,
}

#[derive(Debug, Serialize)]
pub struct NotReplayedReport {
    pub rule: String,
    pub reason: String,
}

/// What a replay counted over the whole log.
#[derive(Debug, Default)]
pub struct Counts {
    /// Lines decided.
    pub lines: u64,
    /// Lines that are not access log lines, too long, or of a time out of
    /// range.
    pub skipped: u64,
    pub totals: Totals,
}

impl Report {
    pub fn new(
        counts: Counts,
        names: impl Iterator<Item = String>,
        tallies: Vec<Tally>,
        not_replayed: Vec<NotReplayed>,
        epoch: Epoch,
    ) -> Report {
        let rules = names
            .zip(tallies)
            .map(|(rule, tally)| RuleReport::new(rule, tally, epoch))
            .collect();
        Report {
            lines: counts.lines,
            skipped: counts.skipped,
            newly_limited: counts.totals.newly_limited,
            no_longer_limited: counts.totals.no_longer_limited,
            rules,
            not_replayed: not_replayed
                .into_iter()
                .map(|one| NotReplayedReport {
                    rule: one.rule,
                    reason: one.reason,
                })
                .collect(),
        }
    }

    /// The report for a person.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "replayed {} line(s){}",
            self.lines,
            match self.skipped {
                0 => String::new(),
                n => format!(
                    " ({n} skipped: not access log lines, longer than 1 MiB, or timed \
                     outside 1970–9999)"
                ),
            }
        );
        let _ = writeln!(
            out,
            "against the log: {} newly limited, {} no longer limited",
            self.newly_limited, self.no_longer_limited
        );
        for rule in &self.rules {
            let _ = writeln!(out, "\nrule {}", rule.rule);
            let _ = writeln!(
                out,
                "  matched {}: allowed {}, limited {}, held {} (longest hold {} ms)",
                rule.matched, rule.allowed, rule.limited, rule.held, rule.longest_hold_ms
            );
            let _ = writeln!(
                out,
                "  distinct keys {}; first limited {}",
                rule.distinct_keys,
                rule.first_limited.as_deref().unwrap_or("never")
            );
            let _ = writeln!(
                out,
                "  against the log: {} newly limited, {} no longer limited",
                rule.newly_limited, rule.no_longer_limited
            );
            if !rule.top_keys.is_empty() {
                let keys: Vec<String> = (rule.top_keys.iter())
                    .map(|top| format!("{} ({})", top.key, top.limited))
                    .collect();
                let _ = writeln!(out, "  most limited keys: {}", keys.join(", "));
            }
        }
        if !self.not_replayed.is_empty() {
            let _ = writeln!(out, "\nnot replayed:");
            for one in &self.not_replayed {
                let _ = writeln!(out, "  rule {}: {}", one.rule, one.reason);
            }
        }
        out
    }
}

impl RuleReport {
    fn new(rule: String, tally: Tally, epoch: Epoch) -> RuleReport {
        // Keys the log shows alike (parts joined by `|`) are one.
        let mut by_shown: HashMap<String, u64> = HashMap::new();
        for (shown, limited) in tally.limited_keys.into_values() {
            *by_shown.entry(shown).or_default() += limited;
        }
        let mut top: Vec<TopKey> = (by_shown.into_iter())
            .filter(|(_, limited)| *limited > 0)
            .map(|(key, limited)| TopKey { key, limited })
            .collect();
        // Most limited first; equal counts by key, so a report is the same
        // every time.
        top.sort_by(|a, b| b.limited.cmp(&a.limited).then_with(|| a.key.cmp(&b.key)));
        top.truncate(TOP_KEYS);
        RuleReport {
            rule,
            matched: tally.matched,
            allowed: tally.allowed,
            limited: tally.limited,
            held: tally.held,
            longest_hold_ms: millis(tally.longest_hold),
            distinct_keys: tally.distinct.len() as u64,
            first_limited: tally.first_limited.map(|at| epoch.show(at)),
            top_keys: top,
            newly_limited: tally.newly_limited,
            no_longer_limited: tally.no_longer_limited,
        }
    }
}

/// Rounded as `delay_ms` is.
fn millis(nanos: Nanos) -> u64 {
    nanos.saturating_add(500_000) / 1_000_000
}
