//! `adaptive`: a concurrency limit that learns what the upstream can take
//! from the answers it admits (docs/adaptive.md).
//!
//! The [`Estimator`] is the arithmetic, a pure function of the windows it
//! is shown; the [`Controller`] feeds it live traffic: each admitted
//! request's time to the upstream's response head (from the end of its
//! body, if the client was still sending it), or its failure (a 5xx,
//! a timeout, a reset), and the in-flight count each admission saw. A
//! request the client abandoned before the answer began is no sample at
//! all: it says nothing about the upstream (and counting it as a fast
//! answer is how a limiter learns that dropping requests is cheap).
//!
//! Each window (at least [`MIN_WINDOW`] and twice the baseline latency
//! long, and at least [`MIN_SAMPLES`] answers, or [`FEW_SAMPLES`] once it
//! has run [`SLOW_WINDOW`] over) moves the limit once:
//!
//! - more than [`FAILURE_TOLERANCE`] of its answers failed: lowered by half
//!   the failed share (all failed: halved);
//! - a mean latency over [`TOLERANCE`] × the baseline, the limit in use:
//!   lowered to `limit × min(BACKOFF × baseline / mean, CUT)`. With a queue
//!   at the upstream latency grows with the requests in flight, so this
//!   lands below the point where the queue began. The next window only
//!   settles (its answers mix both limits); if the one after shows the
//!   latency fell in proportion to the limit ([`PROPORTIONAL`]) and is not
//!   yet at the baseline ([`BASELINE_BAND`]), the queue is still draining
//!   and the limit is halved again;
//! - else, a limit in use (at least half of it taken at some instant of
//!   the window) grows by [`GROWTH`] × its square root;
//! - an unused limit stays: a limit nobody reaches cannot be what makes
//!   the upstream slow, nor does reaching it show it could be higher.
//!
//! The window that sets the baseline is an exception: if the limit was
//! reached in it (a request refused, or held in delay mode), its latency
//! may be the queue of a limit that started above what the upstream takes,
//! so the limit is halved as a probe. If the latency falls with it, the
//! descent above goes on; if it stays at the baseline ([`BASELINE_BAND`]),
//! there was no queue and the limit goes back to where it was.
//!
//! The baseline is the latency of the upstream without a queue, learned
//! from the window after the first (which only warms up: its answers are
//! the quick ones). A lower window pulls it down ([`BASELINE_FALL`] of the
//! way, [`BASELINE_DROP`] while the limit recovers from a backoff, all the
//! way during a descent). A higher one lifts it quickly when the limit was
//! not reached ([`BASELINE_RISE`]: the latency is the upstream's own, a
//! slower upstream becomes the new normal within a second or two), and
//! barely when it was ([`BASELINE_CREEP`]: the latency may be the queue
//! the limit let build, and a baseline that climbed with it would let the
//! limit climb too). The limit at its floor counts as not reached.
//!
//! The constants were chosen against the simulated upstream of the tests
//! (c workers, FIFO queue, 20 ms fixed or exponential service times, 15 to
//! 50 closed-loop clients) and checked with the benchmark
//! (docs/adaptive.md has the measurements).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::clock::Nanos;

const MILLI: Nanos = 1_000_000;

/// Where the limit starts: `min(INITIAL_LIMIT, max_in_flight)`.
pub const INITIAL_LIMIT: u64 = 20;

/// A window lasts at least this long (and twice the baseline).
pub const MIN_WINDOW: Nanos = 100 * MILLI;

/// A window closes with this many answers: the mean of 100 exponential
/// service times is within ±20 % of the truth 95 % of the time, inside
/// [`TOLERANCE`] (with 32 or 50, the simulated overload with exponential
/// service times backed off on noise and lost goodput:
/// docs/benchmarks-history.md, "Adaptive limits (issue 48)").
pub const MIN_SAMPLES: u64 = 100;

/// Latencies below this are the same latency (an upstream on the same
/// host answers in tens of µs): the baseline is never 0, so a ratio to it
/// is always a number.
pub const LATENCY_FLOOR: f64 = 1_000.0;

/// A window that has run [`SLOW_WINDOW`] past its end closes with this
/// many answers: a low limit on a slow upstream answers few, and waiting
/// for [`MIN_SAMPLES`] would leave it low for seconds once capacity is back.
pub const FEW_SAMPLES: u64 = 20;

/// See [`FEW_SAMPLES`].
pub const SLOW_WINDOW: Nanos = 1_000 * MILLI;

/// A mean latency up to this many times the baseline is no queue (with a
/// queue, ~1.5 × the workers in flight at most).
pub const TOLERANCE: f64 = 1.5;

/// A backoff for a high latency lands this far below the knee the latency
/// points at, so that the next windows see the upstream without a queue
/// (and the baseline stays true) without probing.
pub const BACKOFF: f64 = 0.9;

/// Failed answers in a window beyond this share lower the limit; fewer are
/// the upstream's own errors, which shedding would not cure.
pub const FAILURE_TOLERANCE: f64 = 0.05;

/// The share of the distance to a lower window mean the baseline moves
/// while the limit recovers from a backoff.
pub const BASELINE_DROP: f64 = 0.75;

/// The share of the distance to a lower window mean the baseline moves.
pub const BASELINE_FALL: f64 = 0.25;

/// The share of the distance to a higher window mean the baseline moves
/// when the limit was not reached (the latency is the upstream's own).
pub const BASELINE_RISE: f64 = 1.0 / 8.0;

/// The share it moves when the limit was reached (some of the latency may
/// be the queue the limit let build).
pub const BASELINE_CREEP: f64 = 1.0 / 64.0;

/// After a backoff, a mean latency that fell at least in proportion to the
/// limit (within this factor) shows the queue draining: the limit is
/// halved again, until the latency stops following it.
pub const PROPORTIONAL: f64 = 1.15;

/// A mean latency within this share of the baseline is the baseline: a
/// descent stops there.
pub const BASELINE_BAND: f64 = 0.2;

/// A backoff cuts at least this deep: it must reach below the knee even
/// when the baseline was learned under a queue (the limit started above
/// what the upstream takes).
pub const CUT: f64 = 0.5;

/// A limit in use grows by this much of its square root each window (at
/// least 1): 10 → 20 in under ten windows, and a sawtooth that stays below
/// [`TOLERANCE`] × the knee.
pub const GROWTH: f64 = 0.5;

/// An `adaptive` rule's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// `min_in_flight`.
    pub floor: u64,
    /// `max_in_flight`.
    pub ceiling: u64,
}

impl Bounds {
    fn clamp(self, limit: f64) -> f64 {
        limit.clamp(self.floor as f64, self.ceiling as f64)
    }

    /// The limit an estimator starts at.
    pub fn initial(self) -> u64 {
        INITIAL_LIMIT.clamp(self.floor, self.ceiling)
    }
}

/// What one window of answers looked like.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Window {
    /// Answers that arrived (successes and failures).
    pub samples: u64,
    /// Of them, failures.
    pub failures: u64,
    /// The sum of the successes' latencies.
    pub latency_sum: Nanos,
    /// The most requests in flight that an admission of the window saw.
    pub peak_in_flight: u64,
}

/// The arithmetic of the limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimator {
    pub bounds: Bounds,
    /// The limit, unrounded.
    estimate: f64,
    /// Whether the first window with answers (which only warms up) closed.
    warmed: bool,
    /// The latency without a queue; 0 until the window after the first.
    baseline: f64,
    /// The limit before the last backoff for latency: until the limit is
    /// back there, a lower latency pulls the baseline down faster.
    cut_from: f64,
    /// After a backoff for latency: the limit and the mean latency of the
    /// window that caused it.
    descent: Option<(f64, f64)>,
    /// Whether the next window follows a backoff (and only settles).
    settling: bool,
    /// Whether the backoff was the probe of a baseline learned while the
    /// limit held requests back (see [`Estimator::close`]).
    probing: bool,
}

impl Estimator {
    pub fn new(bounds: Bounds) -> Estimator {
        Estimator {
            bounds,
            estimate: bounds.initial() as f64,
            warmed: false,
            baseline: 0.0,
            cut_from: 0.0,
            descent: None,
            settling: false,
            probing: false,
        }
    }

    /// The limit in force: the estimate, rounded down, within the bounds.
    pub fn limit(&self) -> u64 {
        (self.estimate.floor() as u64).clamp(self.bounds.floor, self.bounds.ceiling)
    }

    /// The baseline latency (0 before the first window).
    pub fn baseline(&self) -> Nanos {
        self.baseline as Nanos
    }

    /// How long the window after this one lasts at least.
    pub fn window_length(&self) -> Nanos {
        MIN_WINDOW.max(2 * self.baseline())
    }

    /// New bounds (a reload): the estimate is kept within them.
    pub fn rebound(&mut self, bounds: Bounds) {
        self.bounds = bounds;
        self.estimate = bounds.clamp(self.estimate);
    }

    /// Learns from one closed window; returns the new limit.
    pub fn close(&mut self, window: Window) -> u64 {
        let limit = self.limit();
        let used = window.peak_in_flight.saturating_mul(2) >= limit;
        // The limit refused (or held) someone: latency above the baseline
        // may be the queue it let build.
        let binding = window.peak_in_flight >= limit && limit > self.bounds.floor;
        let successes = window.samples.saturating_sub(window.failures);
        let failed = window.failures as f64 / window.samples.max(1) as f64;
        if failed > FAILURE_TOLERANCE {
            self.estimate *= (1.0 - failed / 2.0).max(0.5);
        } else if successes > 0 {
            let mean = (window.latency_sum as f64 / successes as f64).max(LATENCY_FLOOR);
            if self.learn(mean, limit, used, binding) {
                return self.limit();
            }
        }
        self.estimate = self.bounds.clamp(self.estimate);
        self.limit()
    }

    /// Learns from a window's mean latency; `true` when the estimate stays
    /// as it is now (the window warms up, probes or tells nothing).
    fn learn(&mut self, mean: f64, limit: u64, used: bool, binding: bool) -> bool {
        if !std::mem::replace(&mut self.warmed, true) {
            // The first window only warms up: its answers are the
            // quick ones of the requests it began with.
            return true;
        }
        if self.baseline == 0.0 {
            self.baseline = mean;
            if binding {
                // The limit held requests back (refused or delayed
                // them) in the very window that set the baseline: the
                // latency may already be the queue of a limit that
                // started above what the upstream takes, and growing
                // from it would grow the queue. Probe downwards once,
                // as after a backoff: if the latency falls with the
                // limit, the descent goes on; if not, the baseline was
                // true and the limit goes back to where it was.
                self.cut_from = self.estimate;
                self.descent = Some((limit as f64, mean));
                self.settling = true;
                self.probing = true;
                self.estimate = self.bounds.clamp(self.estimate * CUT);
                return true;
            }
        }
        if std::mem::take(&mut self.settling) {
            // Its answers mix requests let in before the backoff and
            // after: it tells nothing about either limit.
            return true;
        }
        let ratio = mean / self.baseline;
        let descent = self.descent.take();
        let probed = std::mem::take(&mut self.probing);
        // Near the baseline, the queue is gone (or was never there).
        let at_baseline = (mean / self.baseline - 1.0).abs() <= BASELINE_BAND;
        if probed && at_baseline {
            // Half the limit, the same latency: there was no queue,
            // and the baseline is the upstream's own. Back to where
            // the probe began.
            self.estimate = self.bounds.clamp(self.cut_from);
            return true;
        }
        if let (Some((before, was)), true, false) = (descent, used, at_baseline) {
            if mean <= was * (limit as f64 / before) * PROPORTIONAL {
                // The latency fell with the limit: it was the queue,
                // and the queue is not drained yet. Down again.
                self.baseline = self.baseline.min(mean);
                self.descent = Some((limit as f64, mean));
                self.settling = true;
                self.estimate = self.bounds.clamp(self.estimate * CUT);
                return true;
            }
        }
        self.adjust(mean, ratio, limit, used, binding);
        false
    }

    /// Backs off when the latency rose past the tolerance, grows when not
    /// (either only when the limit was used), and moves the baseline
    /// towards `mean`.
    fn adjust(&mut self, mean: f64, ratio: f64, limit: u64, used: bool, binding: bool) {
        let pull = if mean < self.baseline && self.estimate < self.cut_from {
            // The queue shrank with the limit: what is left of the
            // latency is the upstream's own, or still some queue.
            BASELINE_DROP
        } else if mean < self.baseline {
            BASELINE_FALL
        } else if binding {
            BASELINE_CREEP
        } else {
            BASELINE_RISE
        };
        if ratio > TOLERANCE {
            if used {
                self.cut_from = self.estimate;
                self.descent = Some((limit as f64, mean));
                self.settling = true;
                self.estimate *= (BACKOFF / ratio).min(CUT);
            }
        } else if used {
            self.estimate += (self.estimate.sqrt() * GROWTH).max(1.0);
        }
        self.baseline += (mean - self.baseline) * pull;
    }
}

/// One rule's estimator fed by live traffic, from any thread: answers are
/// added up in atomics, and whoever records the first answer past the
/// window's end closes it (under a lock nobody else waits for).
#[derive(Debug)]
pub struct Controller {
    /// The limit in force, read by every admission.
    limit: AtomicU64,
    samples: AtomicU64,
    failures: AtomicU64,
    latency_sum: AtomicU64,
    peak_in_flight: AtomicU64,
    /// When the open window may close (0: at its first answer, which also
    /// starts it).
    closes_at: AtomicU64,
    estimator: Mutex<Estimator>,
}

/// What an admitted request's exchange told about the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    /// The response head arrived after this long, with a status below 500.
    Answered(Nanos),
    /// A 5xx, a timeout, a reset, no server to send to.
    Failed,
}

impl Controller {
    pub fn new(bounds: Bounds) -> Controller {
        Controller {
            limit: AtomicU64::new(bounds.initial()),
            samples: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            latency_sum: AtomicU64::new(0),
            peak_in_flight: AtomicU64::new(0),
            closes_at: AtomicU64::new(0),
            estimator: Mutex::new(Estimator::new(bounds)),
        }
    }

    /// The limit in force.
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// The limit of a caller entitled to `share` per mille of it (a tier):
    /// at least one request.
    #[inline]
    pub fn limit_for(&self, share: u16) -> u64 {
        let limit = self.limit();
        if share >= 1000 {
            return limit;
        }
        (limit * u64::from(share)).div_ceil(1000).max(1)
    }

    /// The bounds and baseline latency, for the admin views.
    pub fn view(&self) -> (Bounds, Nanos) {
        let estimator = self.lock();
        (estimator.bounds, estimator.baseline())
    }

    /// A reload changed the rule's bounds.
    pub fn rebound(&self, bounds: Bounds) {
        let mut estimator = self.lock();
        estimator.rebound(bounds);
        self.limit.store(estimator.limit(), Ordering::Relaxed);
    }

    /// An admission saw `in_flight` requests in flight, itself included.
    #[inline]
    pub fn admitted(&self, in_flight: u64) {
        if in_flight > self.peak_in_flight.load(Ordering::Relaxed) {
            self.peak_in_flight.fetch_max(in_flight, Ordering::Relaxed);
        }
    }

    /// Records what an exchange told at `now`.
    pub fn record(&self, sample: Sample, now: Nanos) {
        match sample {
            Sample::Answered(latency) => {
                self.latency_sum.fetch_add(latency, Ordering::Relaxed);
            }
            Sample::Failed => {
                self.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        let samples = self.samples.fetch_add(1, Ordering::Relaxed) + 1;
        let closes_at = self.closes_at.load(Ordering::Relaxed);
        if closes_at == 0 {
            // The first answer opens the first window.
            let length = self.lock().window_length();
            let _ = self.closes_at.compare_exchange(
                0,
                now.saturating_add(length).max(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            return;
        }
        let enough = samples >= MIN_SAMPLES
            || (samples >= FEW_SAMPLES && now >= closes_at.saturating_add(SLOW_WINDOW));
        if now < closes_at || !enough {
            return;
        }
        // Whoever fails to take the lock leaves the window to its holder.
        let Ok(mut estimator) = self.estimator.try_lock() else {
            return;
        };
        if self.closes_at.load(Ordering::Relaxed) != closes_at {
            return; // Closed meanwhile.
        }
        let window = Window {
            samples: self.samples.swap(0, Ordering::Relaxed),
            failures: self.failures.swap(0, Ordering::Relaxed),
            latency_sum: self.latency_sum.swap(0, Ordering::Relaxed),
            peak_in_flight: self.peak_in_flight.swap(0, Ordering::Relaxed),
        };
        let limit = estimator.close(window);
        self.limit.store(limit, Ordering::Relaxed);
        self.closes_at.store(
            now.saturating_add(estimator.window_length()),
            Ordering::Relaxed,
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Estimator> {
        self.estimator
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests;
