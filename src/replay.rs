//! `sluice replay`: what a config would have done to recorded traffic
//! (docs/replay.md). The access log's lines are decided in the order of
//! their `time`, on a simulated clock set to each, with the config's rules
//! compiled as `run` compiles them over a memory store of their own: a day
//! of traffic in seconds, never touching a live store.
//!
//! A log is written as requests end, so its lines are not in arrival order:
//! [`reorder`] puts them back in order. Memory stays bounded whatever the
//! log holds: lines are read in a buffer of fixed size ([`input`]), and
//! the lines waiting for their turn are bounded in number.

mod input;
pub mod line;
mod reorder;
mod replayable;
mod report;
mod scan;
mod simulate;
pub mod suggest;
pub mod time;

use std::path::PathBuf;
use std::sync::Arc;

pub use input::{LogLine, Logs, TooLong, Unreadable};
use line::Wanted;
use reorder::Reorder;
pub use replayable::{replayable, LogHolds, NotReplayed};
pub use report::{Report, RuleReport, TopKey};
pub use simulate::{SimulatedStore, Simulator, Tally, Totals};
use time::Epoch;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::policy::Policy;

/// Lines read before the replay starts, to learn what the log records.
const LOOK_AHEAD: usize = 10_000;

/// Bytes of those lines held at most.
const LOOK_AHEAD_BYTES: usize = 8 << 20;

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

/// A line read ahead: its log, its number there, its bytes (or too long).
type Early = (usize, u64, Result<Vec<u8>, TooLong>);

/// What the lines read ahead show: what the log's `keys` hold, and the
/// clock its times are held on.
struct Ahead {
    lines: Vec<Early>,
    holds: LogHolds,
    epoch: Epoch,
}

/// Runs a replay; see the module docs.
pub fn replay(replay: Replay) -> Result<Report, Failed> {
    let mut logs = Logs::new(replay.logs);
    let ahead = look_ahead(&mut logs)?;
    let (config, not_replayed) = replayable(&replay.config, &ahead.holds, ahead.epoch);
    let store = SimulatedStore::new(MOST_KEYS);
    let policy = Policy::compile(Arc::new(config), &Metrics::new(), store.store());
    let mut wanted = Wanted::default();
    let mut simulator = Simulator::new(&policy, &store, &mut wanted);
    let mut reorder = Reorder::default();
    let (mut lines, mut skipped) = (0u64, 0u64);
    let names = logs.names();
    let epoch = ahead.epoch;
    let mut take = |text: Result<&[u8], TooLong>, at: (u32, u64)| -> Result<(), Failed> {
        let mut room = reorder.room();
        let read = text
            .map_err(|too_long| line::NotALine(too_long.sentence()))
            .and_then(|text| line::read_into(&mut room, text, &wanted, epoch, at));
        if read.is_ok() {
            lines += 1;
            reorder.push(room, &mut simulator);
            return Ok(());
        }
        reorder.unused(room);
        match read {
            Err(line::NotALine(why)) if replay.strict => {
                Err(Failed(format!("{}:{}: {why}", names[at.0 as usize], at.1)))
            }
            _ => {
                skipped += 1;
                Ok(())
            }
        }
    };
    for (index, number, text) in &ahead.lines {
        take(
            text.as_deref().map_err(|too_long| *too_long),
            (*index as u32, *number),
        )?;
    }
    while let Some(LogLine { log, number, text }) =
        logs.next_line().map_err(|Unreadable(why)| Failed(why))?
    {
        take(text, (log as u32, number))?;
    }
    reorder.drain(&mut simulator);
    simulator.finish();
    let names = policy.rules.iter().map(|rule| rule.name.to_string());
    let tallies = std::mem::take(&mut simulator.tallies);
    let counts = report::Counts {
        lines,
        skipped,
        totals: simulator.totals,
    };
    Ok(Report::new(counts, names, tallies, not_replayed, epoch))
}

/// Lines read ahead (at most [`LOOK_AHEAD`], and [`LOOK_AHEAD_BYTES`])
/// until one shows what the log's `keys` hold; the first time among them
/// sets the clock's epoch.
fn look_ahead(logs: &mut Logs) -> Result<Ahead, Failed> {
    let mut ahead = Ahead {
        lines: Vec::new(),
        holds: LogHolds {
            keys: Some(Vec::new()),
        },
        epoch: Epoch::default(),
    };
    let (mut bytes, mut first) = (0, None);
    while ahead.lines.len() < LOOK_AHEAD && bytes < LOOK_AHEAD_BYTES {
        let Some(LogLine { log, number, text }) =
            logs.next_line().map_err(|Unreadable(why)| Failed(why))?
        else {
            break;
        };
        let parsed = text
            .ok()
            .and_then(|text| serde_json::from_slice::<serde_json::Value>(text).ok());
        let time = parsed.as_ref().and_then(|line| line.get("time")?.as_str());
        first = first.or_else(|| time.and_then(|time| time::parse_time(time).ok()));
        let keys = parsed
            .as_ref()
            .and_then(|line| line.get("keys")?.as_object());
        if let Some(keys) = keys {
            ahead.holds.keys = Some(keys.keys().cloned().collect());
        }
        bytes += text.map_or(0, <[u8]>::len);
        ahead.lines.push((log, number, text.map(<[u8]>::to_vec)));
        if keys.is_some() {
            break;
        }
    }
    ahead.epoch = first.map(Epoch::around).unwrap_or_default();
    Ok(ahead)
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
