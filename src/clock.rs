//! Time as a parameter. The limiter core never reads a clock: callers pass
//! `now` as [`Nanos`] since the Unix epoch. Production uses
//! [`MonotonicClock`]; tests use [`ManualClock`], which only moves when told
//! to. A [`Clock`] also waits ([`Clock::sleep_until`]): the proxy's holds
//! wait on the clock its decisions read, so a test that advances a manual
//! clock releases held requests at exact instants. Decisions, holds and
//! settlements read only this clock. Other code reads the system's: I/O
//! deadlines (header, body, send and upstream timeouts) run on tokio's
//! timer, the upstream pools date idle connections with `quanta`, and
//! metrics, the status page and logs time what they report.
//!
//! Why Unix time: fixed and sliding windows align to wall-clock boundaries
//! (`100/m` resets at :00), and `X-RateLimit-Reset` is printed as Unix
//! seconds. Why monotonic: a wall-clock step (NTP, an operator) must never
//! refill or drain every bucket at once. So [`MonotonicClock`] reads the wall
//! clock once, at start, and advances from there with the monotonic clock.
//! Over a long uptime it can drift from the wall clock by whatever NTP slews
//! (typically milliseconds a day), which moves window boundaries by as much.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

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
/// the CPU's invariant TSC through `quanta` (≈ 9 ns a read here, against
/// ≈ 25 ns for `Instant::now()`, which this VM serves slowly). `quanta` falls
/// back to the OS monotonic clock where the TSC is unreliable.
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

/// A clock that only moves when told to; clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
    /// Wakes the sleepers each time the clock moves.
    moved: Arc<Notify>,
}

impl ManualClock {
    /// A clock at `start` nanoseconds.
    pub fn new(start: Nanos) -> Self {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(start)),
            moved: Arc::new(Notify::new()),
        }
    }

    /// Moves time forward.
    pub fn advance(&self, by: Duration) {
        self.nanos.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
        self.moved.notify_waiters();
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.nanos.load(Ordering::SeqCst)
    }

    fn sleep_until(&self, at: Nanos) -> impl Future<Output = ()> + Send {
        let clock = self.clone();
        async move {
            loop {
                // Registered before the check, so a move in between is seen.
                let moved = clock.moved.notified();
                tokio::pin!(moved);
                moved.as_mut().enable();
                if clock.now() >= at {
                    return;
                }
                moved.await;
            }
        }
    }
}

/// The clock the proxy runs on: [`MonotonicClock`] in production, a
/// [`ManualClock`] in tests of holds, charges and refunds. A closed enum
/// rather than a generic parameter, so the server, the admin listener and
/// reloads keep one concrete proxy type; a read costs one predictable
/// branch.
#[derive(Debug, Clone)]
pub enum ProxyClock {
    Monotonic(MonotonicClock),
    Manual(ManualClock),
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
            ProxyClock::Manual(clock) => clock.now(),
        }
    }

    async fn sleep_until(&self, at: Nanos) {
        match self {
            ProxyClock::Monotonic(clock) => clock.sleep_until(at).await,
            ProxyClock::Manual(clock) => clock.sleep_until(at).await,
        }
    }
}
