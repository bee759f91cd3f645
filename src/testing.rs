//! Helpers shared by unit tests.

// The integration tests' certificate maker; not all of it is used here.
#[allow(dead_code)]
#[path = "../tests/support/certs.rs"]
pub mod certs;
pub mod completion;
pub mod redis_server;

use crate::clock::Nanos;
use crate::limiter::Rate;

/// One second in nanoseconds.
pub const SEC: Nanos = 1_000_000_000;

/// A moment well inside a second, a minute and an hour (windows align to
/// Unix-time multiples of their period).
pub const T0: Nanos = 1_800_000_000 * SEC + SEC / 4;

/// A clock that reads what the test set.
#[derive(Debug, Default)]
pub struct SetClock(std::sync::atomic::AtomicU64);

impl SetClock {
    pub fn at(now: Nanos) -> SetClock {
        SetClock(std::sync::atomic::AtomicU64::new(now))
    }

    pub fn set(&self, now: Nanos) {
        self.0.store(now, std::sync::atomic::Ordering::Relaxed);
    }
}

impl crate::clock::Clock for SetClock {
    fn now(&self) -> Nanos {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn sleep_until(&self, _at: Nanos) {}
}

/// `count` per `secs` seconds.
pub fn rate(count: u64, secs: u64) -> Rate {
    Rate {
        count,
        period: std::time::Duration::from_secs(secs),
    }
}

/// A tiny deterministic pseudo-random generator (xorshift64), so generated
/// inputs need no extra crate and every run sees the same sequence.
pub struct XorShift(pub u64);

impl XorShift {
    /// The next value; never 0 for a nonzero seed.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// How many of `n` requests of cost 1 `limit` admits at `now`.
pub fn admitted<A: crate::limiter::Algorithm>(
    limit: &A,
    state: &mut A::State,
    now: Nanos,
    n: u64,
) -> u64 {
    (0..n)
        .filter(|_| limit.acquire(state, now, 1).is_allowed())
        .count() as u64
}
