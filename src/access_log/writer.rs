//! The access log's writer: a thread of its own that empties the threads'
//! buffers into the target (a file opened in append mode, or stdout), so
//! that a slow disk or a stdout nobody reads blocks it alone.
//!
//! Each round it takes what [`Control`] asks (a target to open again), writes
//! every buffer out (to the target open until then), then opens the new
//! target and says it is done: a reload's `configure` returns once the lines
//! of requests that ended before it went to the old file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::Thread;

use super::{lock, Shard, Sink, FLUSH_INTERVAL};
use crate::config::AccessLogTarget;

/// Starts the writer of `sink`; it ends once the sink is gone.
pub(super) fn spawn(sink: Weak<Sink>) -> Thread {
    std::thread::Builder::new()
        .name("sluice-access-log".into())
        .spawn(move || run(&sink))
        .expect("the access log writer thread starts")
        .thread()
        .clone()
}

/// Where lines go.
#[derive(Default)]
struct Output {
    /// `None`: `off`, or a file that could not be opened.
    file: Option<File>,
    /// Lines are lost rather than written (a target that failed): counted
    /// as dropped.
    lost: bool,
    /// Whether the last write failed (the failure is logged once a streak).
    failing: bool,
}

fn run(sink: &Weak<Sink>) {
    let mut output = Output::default();
    // The emptied buffer handed to the next thread's in exchange for its
    // full one.
    let mut batch: Vec<u8> = Vec::new();
    loop {
        let Some(live) = sink.upgrade() else { return };
        let (asked, reopen) = {
            let mut control = live.control();
            let reopen = std::mem::take(&mut control.reopen).then(|| control.target.clone());
            (control.asked, reopen)
        };
        let shards: Vec<Arc<Shard>> = lock(&live.shards).clone();
        let dropped = live.dropped.clone();
        // Not held while writing, which may block for good: the log can go.
        drop(live);
        // What was buffered goes to the target open until now; with none
        // open (at start), to the new one.
        let mut reopen = reopen;
        if output.file.is_none() {
            if let Some(target) = reopen.take() {
                output.open(&target);
            }
        }
        for shard in &shards {
            std::mem::swap(&mut *lock(&shard.lines), &mut batch);
            shard.nudged.store(false, Ordering::Relaxed);
            if !batch.is_empty() {
                output.write(&batch, &dropped);
                batch.clear();
            }
        }
        drop(shards);
        if let Some(target) = reopen {
            output.open(&target);
        }
        if let Some(live) = sink.upgrade() {
            let mut control = live.control();
            if control.done < asked {
                control.done = asked;
                live.applied.notify_all();
            }
        }
        std::thread::park_timeout(FLUSH_INTERVAL);
    }
}

impl Output {
    /// Opens `target`, closing what was open.
    fn open(&mut self, target: &AccessLogTarget) {
        *self = Output::default();
        let opened = match target {
            AccessLogTarget::Off => return,
            // A descriptor of its own on stdout: `std::io::stdout()`'s lock
            // and line buffering are for the rest of the process.
            AccessLogTarget::Stdout => std::io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .map(File::from),
            AccessLogTarget::File(path) => OpenOptions::new().create(true).append(true).open(path),
        };
        self.lost = opened.is_err();
        self.file = opened
            .inspect_err(|error| {
                tracing::error!(
                    target = ?target,
                    %error,
                    "the access log cannot be opened; its lines are dropped until a reload opens it"
                );
            })
            .ok();
    }

    /// Writes `lines` out; lines that cannot be are counted in `dropped`.
    fn write(&mut self, lines: &[u8], dropped: &prometheus::IntCounter) {
        let Some(file) = &mut self.file else {
            if self.lost {
                dropped.inc_by(count_lines(lines));
            }
            return;
        };
        match file.write_all(lines) {
            Ok(()) => self.failing = false,
            Err(error) => {
                if !self.failing {
                    tracing::error!(%error, "the access log cannot be written; its lines are dropped");
                }
                self.failing = true;
                dropped.inc_by(count_lines(lines));
            }
        }
    }
}

fn count_lines(lines: &[u8]) -> u64 {
    lines.iter().filter(|&&b| b == b'\n').count() as u64
}
