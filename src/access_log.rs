//! The access log (`server.access_log`): one JSON line per request, written
//! when the request ends (docs/edge.md, "The access log and request ids").
//!
//! A request never waits for the disk, nor for whoever reads stdout. Each
//! thread that ends requests appends their lines to a buffer of its own (a
//! [`Shard`], at most [`SHARD_BYTES`]), under a lock that only the writer
//! thread also takes, a few times a second: no lock or atomic shared by the
//! runtime's threads, no allocation per line once a thread's buffers exist.
//! A line that does not fit is dropped and counted
//! (`sluice_access_log_dropped_total`). The writer, a thread of its own
//! (blocking writes never run on the runtime), swaps each buffer for an
//! empty one and writes it out every [`FLUSH_INTERVAL`], or sooner when a
//! buffer is half full. A stdout that nobody reads blocks the writer alone:
//! the buffers fill, lines are dropped, requests go on, and memory stays at
//! the buffers' size.
//!
//! The target is applied again, and a file opened again (append mode), on
//! every reload ([`AccessLog::configure`]): it returns once the writer has
//! written what was buffered to the old target and opened the new one, so
//! the lines of requests that end afterwards go to the new file (logrotate
//! renames the file, then sends SIGHUP).

mod keys;
mod line;
mod writer;

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant};

use prometheus::IntCounter;

use crate::clock::{Nanos, ProxyClock};
use crate::config::AccessLogTarget;
use crate::request_id::RequestId;
pub use keys::{recorded_sources, Recorded, RecordedKeys};
pub use line::{rfc3339, Line, Parts};

/// The most one thread's buffer holds before lines are dropped: about a
/// thousand lines, several times what a busy thread ends between two of the
/// writer's rounds.
const SHARD_BYTES: usize = 256 * 1024;

/// How often the writer looks at the buffers (so a line is out within this
/// much of its request's end).
const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// How long a reload waits for the writer to take a new target (a writer
/// blocked on a stdout nobody reads takes it once it is unblocked).
const APPLY_WAIT: Duration = Duration::from_secs(1);

/// The access log of one proxy: cheap to clone.
#[derive(Debug, Clone)]
pub struct AccessLog {
    sink: Arc<Sink>,
}

/// Where lines go, and the buffers on their way there.
struct Sink {
    /// Tells this log's buffers apart from another's (tests run several
    /// proxies in one process).
    id: u64,
    /// Every thread's buffer, for the writer.
    shards: Mutex<Vec<Arc<Shard>>>,
    control: Mutex<Control>,
    /// Signalled when the writer has done what [`Control::asked`] asked.
    applied: Condvar,
    /// The writer, once a target other than `off` was set.
    writer: OnceLock<Thread>,
    clock: ProxyClock,
    dropped: IntCounter,
}

impl fmt::Debug for Sink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sink").field("id", &self.id).finish()
    }
}

/// What the writer is asked to do.
#[derive(Debug)]
struct Control {
    target: AccessLogTarget,
    /// The target is to be opened (again) once what is buffered is written.
    reopen: bool,
    /// Requests made so far (a new target, a flush), and those done.
    asked: u64,
    done: u64,
}

/// One thread's lines on their way to the writer.
struct Shard {
    lines: Mutex<Vec<u8>>,
    /// The writer was woken for this buffer and has not emptied it yet.
    nudged: AtomicBool,
    sink: Weak<Sink>,
    clock: ProxyClock,
    dropped: IntCounter,
}

thread_local! {
    /// This thread's buffer in each live log (one, outside tests).
    static SHARDS: RefCell<Vec<(u64, Arc<Shard>)>> = const { RefCell::new(Vec::new()) };
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl AccessLog {
    /// A log writing to `target`; `dropped` counts the lines that did not
    /// fit; `clock` times requests.
    pub fn new(target: &AccessLogTarget, clock: ProxyClock, dropped: IntCounter) -> AccessLog {
        let log = AccessLog {
            sink: Arc::new(Sink {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                shards: Mutex::new(Vec::new()),
                control: Mutex::new(Control {
                    target: AccessLogTarget::Off,
                    reopen: false,
                    asked: 0,
                    done: 0,
                }),
                applied: Condvar::new(),
                writer: OnceLock::new(),
                clock,
                dropped,
            }),
        };
        if *target != AccessLogTarget::Off {
            // Opened by the writer as soon as it runs; nobody waits for it.
            log.ask(|control| {
                control.target = target.clone();
                control.reopen = true;
            });
        }
        log
    }

    /// Writes to `target` from now on, opening it (again): on every reload,
    /// whether the target changed or not. Waits (at most [`APPLY_WAIT`])
    /// until what was buffered went to the old target and the new one is
    /// open; call it off the runtime's threads.
    pub fn configure(&self, target: &AccessLogTarget) {
        if *target == AccessLogTarget::Off && self.sink.writer.get().is_none() {
            return;
        }
        let asked = self.ask(|control| {
            control.target = target.clone();
            control.reopen = true;
        });
        self.wait_for(asked, APPLY_WAIT);
    }

    /// Writes out what is buffered, waiting at most `within`: at shutdown.
    pub fn flush(&self, within: Duration) {
        if self.sink.writer.get().is_none() {
            return;
        }
        let asked = self.ask(|_| {});
        self.wait_for(asked, within);
    }

    /// A line for a request that began at `started` (the proxy's clock),
    /// whose id is `request_id`; written to this thread's buffer when the
    /// line is dropped.
    pub fn begin(&self, started: Nanos, request_id: &RequestId) -> Line {
        Line::begin(self.shard(), started, request_id)
    }

    /// Asks the writer for something (`change` to the control), starting
    /// it if needed; the number to wait for.
    fn ask(&self, change: impl FnOnce(&mut Control)) -> u64 {
        let asked = {
            let mut control = self.sink.control();
            change(&mut control);
            control.asked += 1;
            control.asked
        };
        self.sink
            .writer
            .get_or_init(|| writer::spawn(Arc::downgrade(&self.sink)))
            .unpark();
        asked
    }

    /// Waits until the writer has done request `asked`, `within` at most.
    fn wait_for(&self, asked: u64, within: Duration) {
        let deadline = Instant::now() + within;
        let mut control = self.sink.control();
        while control.done < asked {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!("the access log writer is behind (blocked on its output?)");
                return;
            }
            control = match self.sink.applied.wait_timeout(control, left) {
                Ok((control, _)) => control,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// This thread's buffer in this log, made on the thread's first line.
    fn shard(&self) -> Arc<Shard> {
        let id = self.sink.id;
        SHARDS.with_borrow_mut(|shards| {
            if let Some((_, shard)) = shards.iter().find(|(of, _)| *of == id) {
                return Arc::clone(shard);
            }
            // Buffers of logs that are gone go with them.
            shards.retain(|(_, shard)| shard.sink.strong_count() > 0);
            let shard = Arc::new(Shard {
                lines: Mutex::new(Vec::new()),
                nudged: AtomicBool::new(false),
                sink: Arc::downgrade(&self.sink),
                clock: self.sink.clock.clone(),
                dropped: self.sink.dropped.clone(),
            });
            lock(&self.sink.shards).push(Arc::clone(&shard));
            shards.push((id, Arc::clone(&shard)));
            shard
        })
    }
}

impl Sink {
    fn control(&self) -> MutexGuard<'_, Control> {
        lock(&self.control)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        // The writer notices that its log is gone and ends.
        if let Some(writer) = self.writer.get() {
            writer.unpark();
        }
    }
}

impl Shard {
    /// Appends what `write` writes (at most `most` bytes), or drops and
    /// counts the line when the buffer has no room for it.
    fn append(&self, most: usize, write: impl FnOnce(&mut Vec<u8>)) {
        let mut lines = lock(&self.lines);
        if lines.len() + most > SHARD_BYTES {
            drop(lines);
            self.dropped.inc();
            return;
        }
        if lines.capacity() == 0 {
            // Once per thread: the writer hands back emptied buffers.
            lines.reserve(SHARD_BYTES);
        }
        write(&mut lines);
        let half_full = lines.len() > SHARD_BYTES / 2;
        drop(lines);
        if half_full && !self.nudged.swap(true, Ordering::Relaxed) {
            if let Some(writer) = self
                .sink
                .upgrade()
                .and_then(|sink| sink.writer.get().cloned())
            {
                writer.unpark();
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::clock::{Clock, MonotonicClock};

    fn id(text: &str) -> RequestId {
        RequestId::Kept(http::HeaderValue::from_str(text).unwrap())
    }

    fn counter() -> IntCounter {
        IntCounter::new("dropped", "test").unwrap()
    }

    fn clock() -> ProxyClock {
        ProxyClock::Monotonic(MonotonicClock::default())
    }

    fn lines(path: &std::path::Path) -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect()
    }

    #[test]
    fn a_line_has_every_member_in_order_escaped_as_json() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let log = AccessLog::new(&AccessLogTarget::File(path.clone()), clock(), counter());
        let started = log.sink.clock.now();
        {
            let mut begun = log.begin(started, &id("id-\"1\""));
            let line = begun.parts().unwrap();
            line.describe(
                |out: &mut Vec<u8>| out.extend_from_slice(b"203.0.113.7"),
                "GET",
                Some("api.\"example\".com"),
                "/a\\b/\u{e9}\u{1}",
            );
            line.decide_keyed_by_client("delayed", "per-ip");
            line.record(Some(3), |out, client| {
                out.extend_from_slice(br#"{"ip":""#);
                out.extend_from_slice(client);
                out.extend_from_slice(br#"","header:x-api-key":null}"#);
            });
            line.status = 200;
            line.bytes_out = 1234;
            line.upstream = Some(12_345_678);
            line.held = 250_400_000;
            line.protocol = "HTTP/3";
        }
        {
            // Never described nor decided (dropped at once), not forwarded.
            let _line = log.begin(started, &id("id-2"));
        }
        log.flush(Duration::from_secs(5));
        let text = std::fs::read_to_string(&path).unwrap();
        let first = text.lines().next().unwrap();
        let names: Vec<&str> = [
            "time",
            "request_id",
            "client",
            "method",
            "host",
            "path",
            "protocol",
            "status",
            "bytes_out",
            "duration_ms",
            "upstream_ms",
            "delay_ms",
            "outcome",
            "rule",
            "key",
            "cost",
            "keys",
        ]
        .to_vec();
        let mut at = 0;
        for name in &names {
            let found = first[at..]
                .find(&format!("\"{name}\":"))
                .unwrap_or_else(|| panic!("{name} in order in {first}"));
            at += found + 1;
        }
        let lines = lines(&path);
        assert_eq!(lines.len(), 2, "{text}");
        let line = &lines[0];
        assert_eq!(line.as_object().unwrap().len(), names.len());
        let time = line["time"].as_str().unwrap();
        assert_eq!(time.len(), "2026-11-25T11:31:05.123456Z".len(), "{time}");
        assert!(time.ends_with('Z') && time.as_bytes()[10] == b'T', "{time}");
        assert_eq!(line["request_id"], "id-\"1\"");
        assert_eq!(line["client"], "203.0.113.7");
        assert_eq!(line["method"], "GET");
        assert_eq!(line["host"], "api.\"example\".com");
        assert_eq!(line["path"], "/a\\b/\u{e9}\u{1}");
        assert_eq!(line["protocol"], "HTTP/3");
        assert_eq!(lines[1]["protocol"], "HTTP/1.1");
        assert_eq!(line["status"], 200);
        assert_eq!(line["bytes_out"], 1234);
        assert!(line["duration_ms"].as_f64().unwrap() >= 0.0);
        assert_eq!(line["upstream_ms"].as_f64(), Some(12.345));
        assert_eq!(line["delay_ms"], 250);
        assert_eq!(line["outcome"], "delayed");
        assert_eq!(line["rule"], "per-ip");
        assert_eq!(line["key"], "203.0.113.7");
        assert_eq!(line["cost"], 3);
        assert_eq!(line["keys"]["ip"], "203.0.113.7");
        assert!(line["keys"]["header:x-api-key"].is_null());

        let bare = &lines[1];
        assert_eq!(bare.as_object().unwrap().len(), names.len());
        for name in [
            "client",
            "method",
            "host",
            "path",
            "upstream_ms",
            "rule",
            "key",
            "cost",
            "keys",
        ] {
            assert!(bare[name].is_null(), "{name}: {bare}");
        }
        assert_eq!(bare["status"], 499);
        assert_eq!(bare["outcome"], "allowed");
        assert_eq!(bare["delay_ms"], 0);
    }

    #[test]
    fn a_full_buffer_drops_lines_and_counts_them() {
        // No writer (the log is off): nothing empties the buffer.
        let dropped = counter();
        let log = AccessLog::new(&AccessLogTarget::Off, clock(), dropped.clone());
        let path = "/".repeat(1000);
        let mut written = 0;
        let long_line = || {
            let mut begun = log.begin(0, &id("id"));
            begun.parts().unwrap().describe(
                |out: &mut Vec<u8>| out.extend_from_slice(b"192.0.2.1"),
                "GET",
                None,
                &path,
            );
        };
        while dropped.get() == 0 {
            long_line();
            written += 1;
            assert!(written < SHARD_BYTES, "never full");
        }
        for _ in 0..10 {
            long_line();
        }
        assert!(dropped.get() >= 11);
        let buffered = lock(&log.shard().lines).len();
        assert!(buffered <= SHARD_BYTES, "{buffered}");
        assert!(written > 100, "{written}");
    }

    #[test]
    fn a_new_target_takes_the_lines_of_requests_that_end_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (dir.path().join("a.log"), dir.path().join("b.log"));
        let log = AccessLog::new(&AccessLogTarget::File(first.clone()), clock(), counter());
        drop(log.begin(0, &id("one")));
        // Renamed as logrotate does; then the reload opens the path again.
        let rotated = dir.path().join("a.log.1");
        log.flush(Duration::from_secs(5));
        std::fs::rename(&first, &rotated).unwrap();
        drop(log.begin(0, &id("two")));
        log.configure(&AccessLogTarget::File(first.clone()));
        drop(log.begin(0, &id("three")));
        log.configure(&AccessLogTarget::File(second.clone()));
        drop(log.begin(0, &id("four")));
        log.configure(&AccessLogTarget::Off);
        drop(log.begin(0, &id("five")));
        log.flush(Duration::from_secs(5));
        let ids = |path: &std::path::Path| -> Vec<String> {
            lines(path)
                .iter()
                .map(|line| line["request_id"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(ids(&rotated), ["one", "two"]);
        assert_eq!(ids(&first), ["three"]);
        assert_eq!(ids(&second), ["four"]);
    }
}
