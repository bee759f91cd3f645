//! Time as a parameter. The limiter core never reads a clock: callers pass
//! `now` as [`Nanos`] since an arbitrary epoch. Production uses
//! [`MonotonicClock`] (immune to wall-clock jumps); tests use [`ManualClock`].
//! Besides this module, only measurements of elapsed time (metrics) read the
//! system clock.
//!
//! Wall-clock time is only needed to print `X-RateLimit-Reset` as Unix seconds;
//! [`Clock::unix_now`] provides it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the clock's epoch.
pub type Nanos = u64;

/// A source of monotonic time for the limiter.
pub trait Clock: Send + Sync + 'static {
    /// Monotonic nanoseconds since this clock's epoch. Never decreases.
    fn now(&self) -> Nanos;
    /// Wall-clock time since the Unix epoch (for `X-RateLimit-Reset`).
    fn unix_now(&self) -> Duration;
}

/// The production clock: nanoseconds since the clock was made, read from the
/// CPU's invariant TSC through `quanta` (≈ 9 ns here, against ≈ 25 ns for
/// `Instant::now()`, which this VM serves slowly). `quanta` falls back to the
/// OS monotonic clock where the TSC is unreliable.
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    epoch: u64,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        let clock = quanta::Clock::new();
        let epoch = clock.raw();
        MonotonicClock { clock, epoch }
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Nanos {
        // u64 nanoseconds overflow after 584 years of uptime.
        self.clock.delta_as_nanos(self.epoch, self.clock.raw())
    }

    fn unix_now(&self) -> Duration {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at `start` nanoseconds.
    pub fn new(start: Nanos) -> Self {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(start)),
        }
    }

    /// Moves time forward.
    pub fn advance(&self, by: Duration) {
        self.nanos.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.nanos.load(Ordering::SeqCst)
    }

    fn unix_now(&self) -> Duration {
        // A fixed, recognisable wall-clock origin keeps header tests exact.
        Duration::from_secs(1_795_000_000) + Duration::from_nanos(self.now())
    }
}
