//! `sluice replay`: what a config would have done to recorded traffic
//! (docs/replay.md). The access log's lines are decided in the order of
//! their `time`, on a simulated clock set to each, with the config's rules
//! compiled as `run` compiles them over a memory store of their own: a day
//! of traffic in seconds, never touching a live store.
//!
//! A log is written as requests end, so its lines are not in arrival order:
//! a line waits in a heap until the log has reached
//! [`REORDER_AT_LEAST`] (or twice the longest request seen, if longer)
//! past its time, by when every line that arrived before it has been
//! read. A line that still comes later than that is decided at the
//! clock's time.

mod input;
pub mod line;
mod replayable;
mod report;
mod scan;
mod simulate;
pub mod suggest;

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::path::PathBuf;
use std::sync::Arc;

pub use input::{Logs, Unreadable};
use line::{Recorded, Wanted};
pub use replayable::{replayable, LogHolds, NotReplayed};
pub use report::{Report, RuleReport, TopKey};
pub use simulate::{Simulator, Tally};

use crate::clock::Nanos;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::policy::Policy;
use crate::store::{MemoryStore, Store};

/// How far past a line's time the log is read before it is decided.
const REORDER_AT_LEAST: Nanos = 10_000_000_000;

/// Lines read before the replay starts, to learn what the log records.
const LOOK_AHEAD: usize = 10_000;

/// Buckets a replay's store holds at most (it forgets none sooner).
const MOST_KEYS: usize = 64 << 20;

/// Why a replay did not run: a broken config, an unreadable log, or (with
/// `--strict`) a line that is not an access log line; printed as it is.
#[derive(Debug)]
pub struct Failed(pub String);

/// A replay's input.
pub struct Replay {
    pub config: Config,
    pub logs: Vec<PathBuf>,
    /// Stop at the first line that is not an access log line.
    pub strict: bool,
}

/// A line waiting in the reorder heap: earliest time first, then in the
/// order read.
struct Waiting(Nanos, u64, Box<Recorded>);

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        (self.0, self.1) == (other.0, other.1)
    }
}
impl Eq for Waiting {}
impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.0, self.1).cmp(&(other.0, other.1))
    }
}

/// Runs a replay; see the module docs.
pub fn replay(replay: Replay) -> Result<Report, Failed> {
    let mut logs = Logs::new(replay.logs);
    let (early, holds) = look_ahead(&mut logs)?;
    let (config, not_replayed) = replayable(&replay.config, &holds);
    let store = Store::Memory(MemoryStore::new(MOST_KEYS));
    let policy = Policy::compile(Arc::new(config), &Metrics::new(), &store);
    let mut wanted = Wanted::default();
    let mut simulator = Simulator::new(&policy, store.local(), &mut wanted);
    let mut reorder = Reorder::default();
    let (mut lines, mut skipped) = (0u64, 0u64);
    let names = logs.names();
    let mut take = |text: &[u8], at: (u32, u64)| -> Result<(), Failed> {
        match line::read(text, &wanted, at) {
            Ok(recorded) => {
                lines += 1;
                reorder.push(recorded, &mut simulator);
                Ok(())
            }
            Err(line::NotALine(why)) if replay.strict => {
                Err(Failed(format!("{}:{}: {why}", names[at.0 as usize], at.1)))
            }
            Err(_) => {
                skipped += 1;
                Ok(())
            }
        }
    };
    for (index, number, text) in &early {
        take(text, (*index as u32, *number))?;
    }
    while let Some((index, number, text)) =
        logs.next_line().map_err(|Unreadable(why)| Failed(why))?
    {
        take(text, (index as u32, number))?;
    }
    reorder.drain(&mut simulator);
    simulator.finish();
    let names = policy.rules.iter().map(|rule| rule.name.to_string());
    let tallies = std::mem::take(&mut simulator.tallies);
    Ok(Report::new(lines, skipped, names, tallies, not_replayed))
}

/// Lines read ahead (log, line number, text) until one shows what the
/// log's `keys` hold, and what they hold.
#[allow(clippy::type_complexity)]
fn look_ahead(logs: &mut Logs) -> Result<(Vec<(usize, u64, Vec<u8>)>, LogHolds), Failed> {
    let mut early = Vec::new();
    let mut holds = LogHolds {
        keys: Some(Vec::new()),
    };
    while early.len() < LOOK_AHEAD {
        let Some((index, number, text)) =
            logs.next_line().map_err(|Unreadable(why)| Failed(why))?
        else {
            break;
        };
        let keys = serde_json::from_slice::<serde_json::Value>(text)
            .ok()
            .and_then(|line| line.get("keys")?.as_object().cloned());
        early.push((index, number, text.to_vec()));
        if let Some(keys) = keys {
            holds.keys = Some(keys.keys().cloned().collect());
            break;
        }
    }
    Ok((early, holds))
}

/// The heap that puts lines back in time order.
#[derive(Default)]
struct Reorder {
    heap: BinaryHeap<Reverse<Waiting>>,
    read: u64,
    latest: Nanos,
    longest: Nanos,
}

impl Reorder {
    /// Adds a line, and decides those the log is now far enough past.
    fn push(&mut self, line: Recorded, simulator: &mut Simulator<'_>) {
        self.latest = self.latest.max(line.time);
        self.longest = self.longest.max(line.duration);
        self.read += 1;
        self.heap
            .push(Reverse(Waiting(line.time, self.read, Box::new(line))));
        let horizon = REORDER_AT_LEAST.max(self.longest.saturating_mul(2));
        let ready = self.latest.saturating_sub(horizon);
        while let Some(Reverse(Waiting(time, ..))) = self.heap.peek() {
            if *time > ready {
                break;
            }
            if let Some(Reverse(Waiting(_, _, line))) = self.heap.pop() {
                simulator.decide(&line);
            }
        }
    }

    fn drain(&mut self, simulator: &mut Simulator<'_>) {
        while let Some(Reverse(Waiting(_, _, line))) = self.heap.pop() {
            simulator.decide(&line);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A config of one rule of each common kind, each with `rate`.
    fn config(rate: &str) -> Config {
        let text = format!(
            r#"[server]
upstream = "http://127.0.0.1:9"
[[rule]]
name = "tokens"
key = ["ip"]
rate = "{rate}"
[[rule]]
name = "window"
match = {{ path_prefix = "/w" }}
key = ["header:x-api-key"]
algorithm = "sliding_window"
rate = "{rate}"
[[rule]]
name = "held"
match = {{ method = "POST" }}
key = ["ip", "path"]
rate = "{rate}"
on_limit = "delay"
max_delay = "1s"
[[rule]]
name = "flight"
match = {{ path_prefix = "/slow" }}
key = ["ip"]
algorithm = "concurrency"
max_in_flight = 2
on_limit = "delay"
max_delay = "500ms"
"#
        );
        Config::from_toml(&text, "test.toml").unwrap_or_else(|e| panic!("{e}"))
    }

    /// One line of a random log: (ms after the start, client, path, POST,
    /// duration ms, key or none, logged outcome).
    type Line = (u32, u8, u8, bool, u16, Option<u8>, u8);

    fn lines() -> impl Strategy<Value = Vec<Line>> {
        proptest::collection::vec(
            (
                0u32..120_000,
                0u8..4,
                0u8..4,
                any::<bool>(),
                0u16..3000,
                proptest::option::of(0u8..3),
                0u8..3,
            ),
            0..200,
        )
    }

    fn write(lines: &[Line]) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        for &(at, client, path, post, duration, key, outcome) in lines {
            let time =
                crate::access_log::rfc3339(1_795_000_000_000_000_000 + u64::from(at) * 1_000_000);
            let path = ["/a", "/w/1", "/slow", "/w/2"][usize::from(path)];
            let outcome = ["allowed", "limited", "delayed"][usize::from(outcome)];
            let key = key.map_or("null".to_owned(), |key| {
                format!("\"k{key}…#00000000000{key}\"")
            });
            let line = format!(
                r#"{{"time":"{time}","client":"10.0.0.{client}","method":"{}","host":"h","path":"{path}","duration_ms":{duration},"delay_ms":0,"outcome":"{outcome}","rule":"tokens","keys":{{"ip":"10.0.0.{client}","header:x-api-key":{key}}}}}"#,
                if post { "POST" } else { "GET" },
            );
            std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()).unwrap();
        }
        file
    }

    fn report(rate: &str, log: &tempfile::NamedTempFile) -> String {
        let replay = Replay {
            config: config(rate),
            logs: vec![log.path().to_owned()],
            strict: true,
        };
        serde_json::to_string(&super::replay(replay).unwrap()).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Rules that limit nothing newly limit nothing (but requests in
        /// flight, which no rate frees), and a replay is deterministic.
        #[test]
        fn a_config_that_limits_nothing_newly_limits_nothing(lines in lines()) {
            let log = write(&lines);
            let first = report("1000000/s", &log);
            prop_assert_eq!(&first, &report("1000000/s", &log));
            let parsed: serde_json::Value = serde_json::from_str(&first).unwrap();
            prop_assert_eq!(parsed["lines"].as_u64(), Some(lines.len() as u64));
            for row in parsed["rules"].as_array().unwrap() {
                if row["rule"] == "flight" {
                    continue;
                }
                prop_assert_eq!(row["limited"].as_u64(), Some(0), "{}", row);
                prop_assert_eq!(row["newly_limited"].as_u64(), Some(0), "{}", row);
                prop_assert_eq!(row["held"].as_u64(), Some(0), "{}", row);
            }
            let tight = report("1/m", &log);
            prop_assert_eq!(&tight, &report("1/m", &log));
        }
    }
}
