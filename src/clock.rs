//! Time as a parameter. The limiter core never reads a clock: callers pass
//! `now` as [`Nanos`] since the Unix epoch. The proxy reads one injected
//! [`ProxyClock`] for what it decides and measures: decisions, holds
//! ([`Clock::sleep_until`]), settlements, charged upstream time and the
//! age of idle upstream connections. Its I/O deadlines (header, body, send,
//! idle and upstream timeouts, hyper's timers) run on tokio's timers.
//!
//! Production uses [`MonotonicClock`]; it and tokio's timers both follow the
//! OS monotonic clock, so a hold and a timeout that end at the same instant
//! end together (give or take the timers' millisecond resolution). Tests use
//! [`RuntimeClock`], which reads tokio's time: under a paused runtime
//! (`#[tokio::test(start_paused = true)]`) that time moves only when the
//! test calls `tokio::time::advance` or the runtime has nothing left to do
//! and jumps to its next timer, so decisions, holds, settlements and every
//! I/O deadline move together, by exactly as much (docs/development.md).
//! The request path's metrics (`sluice_decision_seconds`,
//! `sluice_overhead_seconds`, `sluice_upstream_seconds`) are timed on the
//! same clock; the status page and logs read the system's.
//!
//! Why Unix time: fixed and sliding windows align to wall-clock boundaries
//! (`100/m` resets at :00), and `X-RateLimit-Reset` is printed as Unix
//! seconds. Why monotonic: a wall-clock step (NTP, an operator) must never
//! refill or drain every bucket at once. So [`MonotonicClock`] reads the wall
//! clock once, at start, and advances from there with the monotonic clock.
//! Over a long uptime it can drift from the wall clock by whatever NTP slews
//! (typically milliseconds a day), which moves window boundaries by as much.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the clock's epoch.
pub type Nanos = u64;

/// A source of monotonic time for the limiter.
pub trait Clock: Send + Sync + 'static {
    /// Nanoseconds since the Unix epoch. Never decreases.
    fn now(&self) -> Nanos;

    /// Completes once [`Clock::now`] has reached `at`.
    fn sleep_until(&self, at: Nanos) -> impl Future<Output = ()> + Send;
}

/// The production clock: the Unix time at which it was made, advanced by
/// the CPU's invariant TSC through `quanta`: every decision reads the
/// clock, and a TSC read costs a fraction of `Instant::now()`, which a VM
/// may serve slowly (docs/benchmarks-history.md, "In-memory decision").
/// `quanta` falls back to the OS monotonic clock where the TSC is
/// unreliable.
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    /// The raw TSC reading at `unix_start`.
    epoch: u64,
    unix_start: Nanos,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        let clock = quanta::Clock::new();
        let epoch = clock.raw();
        let unix_start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as Nanos;
        MonotonicClock {
            clock,
            epoch,
            unix_start,
        }
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Nanos {
        // u64 Unix nanoseconds last until the year 2554.
        self.unix_start
            .wrapping_add(self.clock.delta_as_nanos(self.epoch, self.clock.raw()))
    }

    /// A timer of the runtime. Its clock and this one both advance with the
    /// OS monotonic clock, so the wait ends at `at` give or take the timer's
    /// millisecond resolution.
    fn sleep_until(&self, at: Nanos) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(Duration::from_nanos(at.saturating_sub(self.now())))
    }
}

/// The runtime's clock (`tokio::time::Instant`) as Unix time: `start` at
/// the instant it was made. Under a paused runtime it moves only with the
/// runtime's time, as the I/O deadlines do, so a test drives both with
/// `tokio::time::advance` or auto-advance. On a runtime that is not
/// paused it is real monotonic time. Clones share the same origin.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeClock {
    /// Unix nanoseconds at `base`.
    start: Nanos,
    /// The runtime's instant at which this clock read `start`.
    base: tokio::time::Instant,
}

impl RuntimeClock {
    /// A clock reading `start` now. Made inside a paused runtime, it reads
    /// that runtime's time from then on.
    pub fn new(start: Nanos) -> Self {
        RuntimeClock {
            start,
            base: tokio::time::Instant::now(),
        }
    }
}

impl Clock for RuntimeClock {
    fn now(&self) -> Nanos {
        let elapsed = tokio::time::Instant::now().duration_since(self.base);
        self.start.saturating_add(elapsed.as_nanos() as Nanos)
    }

    /// A timer of the runtime at exactly the runtime instant at which
    /// [`Clock::now`] reads `at`; the runtime rounds it up to its next
    /// millisecond, so it never ends before `at`.
    fn sleep_until(&self, at: Nanos) -> impl Future<Output = ()> + Send {
        let after = Duration::from_nanos(at.saturating_sub(self.start));
        match self.base.checked_add(after) {
            Some(deadline) => tokio::time::sleep_until(deadline),
            // Beyond what an instant holds: as far as tokio's `sleep` goes.
            None => tokio::time::sleep(after),
        }
    }
}

/// The clock the proxy runs on: [`MonotonicClock`] in production, a
/// [`RuntimeClock`] in tests that drive time. A closed enum
/// rather than a generic parameter, so the server, the admin listener and
/// reloads keep one concrete proxy type; a read costs one predictable
/// branch.
#[derive(Debug, Clone)]
pub enum ProxyClock {
    Monotonic(MonotonicClock),
    Runtime(RuntimeClock),
}

impl Default for ProxyClock {
    fn default() -> Self {
        ProxyClock::Monotonic(MonotonicClock::default())
    }
}

impl Clock for ProxyClock {
    #[inline]
    fn now(&self) -> Nanos {
        match self {
            ProxyClock::Monotonic(clock) => clock.now(),
            ProxyClock::Runtime(clock) => clock.now(),
        }
    }

    async fn sleep_until(&self, at: Nanos) {
        match self {
            ProxyClock::Monotonic(clock) => clock.sleep_until(at).await,
            ProxyClock::Runtime(clock) => clock.sleep_until(at).await,
        }
    }
}
