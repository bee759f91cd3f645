//! The limiter core: pure state machines, one per algorithm.
//!
//! An algorithm takes its per-key state, `now` and a cost, decides, and
//! updates the state in place. Nothing here does I/O, reads a clock or owns a
//! map: stores ([`crate::store`]) keep the states and call these steps under
//! whatever atomicity they provide (a shard lock, a Redis Lua script).
//!
//! `now` is nanoseconds since the Unix epoch (see [`crate::clock`]), so that
//! window algorithms can align their windows to wall-clock boundaries.
//!
//! Every algorithm implements [`Algorithm`]; [`Limiter`] is the closed set of
//! configured limits the store dispatches on. `concurrency` is a
//! [`Limiter`] too, but not an algorithm of time: the store keeps permits.
//! [`Algorithm::carry_from`] rescales a state when a reload changes a limit;
//! [`sunset`] computes a retiring rule's limit at each step.
//!
//! Delay mode (`on_limit = "delay"`) goes through [`Algorithm::reserve`] and
//! [`Algorithm::cancel`]: a reservation takes its units at the first instant
//! they fit behind everything already reserved, so held requests of a bucket
//! pass in arrival order. The token bucket, the fixed window and the sliding
//! log implement it; the sliding window has no delay mode (config refuses
//! it); the leaky bucket ([`LeakyBucket`]) is delay mode by nature.

pub mod gcra;
pub mod leaky;
pub mod log;
pub mod rate;
pub mod sunset;
pub mod window;

use crate::clock::Nanos;
pub use gcra::Gcra;
pub use leaky::LeakyBucket;
pub use log::{LogState, SlidingLog};
pub use rate::Rate;
pub use sunset::SunsetSchedule;
pub use window::{FixedWindow, SlidingWindow, WindowCounts};

/// What a bucket looks like to a client after a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketState {
    /// Whole units available now (0 when in debt).
    pub remaining: u64,
    /// Time until the bucket would be full again if nothing more arrived.
    pub reset_after: Nanos,
}

/// The outcome of asking one limit for `cost` units. A denial is normal flow,
/// not an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The units were (or, from [`Algorithm::peek`], would be) taken; the
    /// state is the bucket as it is after the decision.
    Allow(BucketState),
    /// Delay mode ([`Algorithm::reserve`]): the units were taken at the
    /// first instant they fit, `wait` from now; the request may pass then.
    Hold { state: BucketState, wait: Nanos },
    /// Nothing was taken.
    Deny {
        state: BucketState,
        /// When a request of the same cost would be admitted, if nothing else
        /// arrived meanwhile; `None` when never (a COUNT of 0, or a cost above
        /// the capacity).
        retry_after: Option<Nanos>,
    },
}

impl Decision {
    /// Whether the request may pass this limit (at once, or after a hold).
    #[inline]
    pub fn is_allowed(&self) -> bool {
        !matches!(self, Decision::Deny { .. })
    }

    /// How long the request must wait before it may pass (0 unless held).
    #[inline]
    pub fn wait(&self) -> Nanos {
        match *self {
            Decision::Hold { wait, .. } => wait,
            Decision::Allow(_) | Decision::Deny { .. } => 0,
        }
    }

    /// The bucket state reported in headers.
    #[inline]
    pub fn state(&self) -> BucketState {
        match *self {
            Decision::Allow(state)
            | Decision::Hold { state, .. }
            | Decision::Deny { state, .. } => state,
        }
    }
}

/// Bounds on holding a request in delay mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldLimits {
    /// The longest a request may be held (`max_delay`).
    pub max_wait: Nanos,
    /// The most units that may be waiting in the bucket, the new request's
    /// included (`max_queue` × cost): a request may be held when the units
    /// already waiting plus its cost stay within it, so `max_queue` requests
    /// of one cost may wait and the next is refused.
    pub max_queued: u64,
}

/// One limiting algorithm with its configured parameters.
///
/// `State::default()` is a fresh, full bucket: a store creates it for a key
/// it has never seen. Implementations must keep these promises, which the
/// store relies on:
///
/// - [`acquire`](Algorithm::acquire) changes how `state` decides only when
///   it admits (a denial may still tidy it, e.g. drop a log's expired
///   stamps);
/// - [`refund`](Algorithm::refund) right after an admitting `acquire` at the
///   same `now` and cost restores a state that decides like the one before;
/// - [`is_fresh`](Algorithm::is_fresh) is true only when the state decides
///   exactly like `State::default()` at `now` and at every later instant, so
///   dropping it can never hand an over-limit caller new budget;
/// - `now` values may arrive slightly out of order (two threads read the
///   clock, then lock in the opposite order): a `now` before the state's own
///   notion of time must not panic and must not let more through.
pub trait Algorithm {
    /// Per-key state.
    type State: Default + Send;

    /// Tries to take `cost` units at `now`; takes them only if admitted.
    fn acquire(&self, state: &mut Self::State, now: Nanos, cost: u64) -> Decision;

    /// What [`acquire`](Algorithm::acquire) would decide, without taking
    /// anything. An `Allow` reports the bucket as it is now (nothing taken).
    fn peek(&self, state: &Self::State, now: Nanos, cost: u64) -> Decision;

    /// Gives back `cost` units taken by an admitting `acquire` at `now` (a
    /// rollback when another limit rejected the same request).
    fn refund(&self, state: &mut Self::State, now: Nanos, cost: u64);

    /// TEMP until the limiter branch lands.
    fn charge(&self, state: &mut Self::State, now: Nanos, units: u64) {
        let _ = self.acquire(state, now, units);
    }

    /// Whether the state is indistinguishable from a fresh one from `now` on.
    fn is_fresh(&self, state: &Self::State, now: Nanos) -> bool;

    /// The limit reported as `X-RateLimit-Limit` (the bucket's capacity: the
    /// token bucket's `burst`, a window's or log's COUNT).
    fn capacity(&self) -> u64;

    /// The most heap memory one state can hold (a log's stamps), for sizing.
    fn max_heap_bytes(&self) -> usize {
        0
    }

    /// Delay mode: takes `cost` units at the first instant at which they fit
    /// behind everything already reserved (so held requests of a bucket pass
    /// in arrival order). `Allow` when that instant is `now` (deciding then
    /// exactly as [`Algorithm::acquire`] would); `Hold` with the wait when it
    /// is later, at most `limits.max_wait` away, and the units already
    /// waiting plus `cost` stay within `limits.max_queued` (so that with
    /// `max_queued = max_queue × cost`, `max_queue` requests of that cost may
    /// wait and the next is refused); otherwise `Deny`, taking nothing, whose
    /// `retry_after` is the wait the request would have needed (when it would
    /// pass without waiting). A `Hold` reports `remaining: 0`.
    /// Algorithms without a delay mode decide as [`Algorithm::acquire`].
    fn reserve(
        &self,
        state: &mut Self::State,
        now: Nanos,
        cost: u64,
        limits: HoldLimits,
    ) -> Decision {
        let _ = limits;
        self.acquire(state, now, cost)
    }

    /// Gives back a reservation of `cost` units that was to pass at `at`
    /// (`now + wait` when it was made) and will not be used (its client
    /// left, or another limit refused the request and this one is rolled
    /// back at the same `now`). Exact when nothing was reserved after it;
    /// otherwise later holds keep their times and the units are not given
    /// back, so the limit is never exceeded. Once `now` is past `at` the
    /// reservation counts as used and nothing is given back.
    fn cancel(&self, state: &mut Self::State, now: Nanos, cost: u64, at: Nanos) {
        let _ = at;
        self.refund(state, now, cost);
    }
    /// A request whose `cost` units this limit let pass at `at` (`now`, or
    /// a hold's instant) will pass at `to > at` instead, because another
    /// limit holds it longer: counts its units at `to`, so that requests
    /// held together by other limits cannot pass this one in a bunch.
    /// Returns whether it could (exactly: the reservation was the last one);
    /// otherwise the state is unchanged. Algorithms that cannot move a
    /// reservation keep it where it is (the default).
    fn reschedule(
        &self,
        state: &mut Self::State,
        now: Nanos,
        cost: u64,
        at: Nanos,
        to: Nanos,
    ) -> bool {
        let _ = (state, now, cost, at, to);
        false
    }

    /// A reload changed this limit from `from` (same algorithm) and keeps
    /// its buckets: rescales `state` at `now` as `carry` says. A bucket that
    /// is full stays full; nothing here hands anyone more than the new
    /// limit allows.
    fn carry_from(&self, from: &Self, state: &mut Self::State, now: Nanos, carry: Carry);
}

/// How a reload that changes a limit carries its buckets over
/// (`on_change`; `reset` simply starts a new table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carry {
    /// Units already spent stay spent: 4/h → 8/h with 2 spent leaves 6.
    KeepSpent,
    /// The remaining share of the capacity is kept: 2 of 4 left → 4 of 8.
    KeepShare,
}

/// `value × numerator / denominator`, rounded up (a rescaled debt or count
/// never lets more through than the exact share), saturating; `value` when
/// the denominator is 0.
pub(crate) fn scale_up(value: u64, numerator: u64, denominator: u64) -> u64 {
    if denominator == 0 {
        return value;
    }
    let scaled = (u128::from(value) * u128::from(numerator)).div_ceil(u128::from(denominator));
    scaled.min(u128::from(u64::MAX)) as u64
}

/// A configured limit, whatever its algorithm: what a store needs to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limiter {
    /// `token_bucket`.
    TokenBucket(Gcra),
    /// `fixed_window`.
    FixedWindow(FixedWindow),
    /// `sliding_window`.
    SlidingWindow(SlidingWindow),
    /// `sliding_log`.
    SlidingLog(SlidingLog),
    /// `leaky_bucket`.
    LeakyBucket(LeakyBucket),
    /// `concurrency`: at most this many requests in flight per key. Not a
    /// function of time, so not an [`Algorithm`]: the store keeps permits
    /// (`store::memory::permits`).
    Concurrency(Concurrency),
}

/// A `concurrency` limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    pub max_in_flight: u64,
}

impl Limiter {
    /// The limit reported as `X-RateLimit-Limit` (the bucket's capacity).
    pub fn capacity(&self) -> u64 {
        match self {
            Limiter::TokenBucket(limit) => limit.capacity(),
            Limiter::FixedWindow(limit) => limit.capacity(),
            Limiter::SlidingWindow(limit) => limit.capacity(),
            Limiter::SlidingLog(limit) => limit.capacity(),
            Limiter::LeakyBucket(limit) => limit.capacity(),
            Limiter::Concurrency(limit) => limit.max_in_flight,
        }
    }
}

#[cfg(test)]
mod carry_tests {
    //! A reload that changes a limit carries each bucket over (SPEC.md
    //! `on_change`): the examples of the spec, exactly, for every algorithm.

    use super::*;
    use std::time::Duration;

    const HOUR: Nanos = 3_600_000_000_000;
    /// The start of an hour, so window algorithms stay in one window.
    const NOW: Nanos = 500_000 * HOUR;

    fn rate(count: u64) -> Rate {
        Rate {
            count,
            period: Duration::from_secs(3600),
        }
    }

    /// Spends 2 of a 4/h limit, carries it to 8/h, returns what remains.
    fn carried<A: Algorithm>(from: A, to: A, carry: Carry) -> u64 {
        let mut state = A::State::default();
        for _ in 0..2 {
            assert!(from.acquire(&mut state, NOW, 1).is_allowed());
        }
        assert_eq!(from.peek(&state, NOW, 1).state().remaining, 2);
        to.carry_from(&from, &mut state, NOW, carry);
        to.peek(&state, NOW, 1).state().remaining
    }

    #[test]
    fn keep_leaves_spent_units_spent_and_proportional_keeps_the_share() {
        let token = (Gcra::new(rate(4), 4), Gcra::new(rate(8), 8));
        let fixed = (FixedWindow::new(rate(4)), FixedWindow::new(rate(8)));
        let sliding = (SlidingWindow::new(rate(4)), SlidingWindow::new(rate(8)));
        let log = (SlidingLog::new(rate(4)), SlidingLog::new(rate(8)));
        // 4/h → 8/h with 2 spent: keep leaves 6, proportional 4 of 8.
        assert_eq!(carried(token.0, token.1, Carry::KeepSpent), 6);
        assert_eq!(carried(token.0, token.1, Carry::KeepShare), 4);
        assert_eq!(carried(fixed.0, fixed.1, Carry::KeepSpent), 6);
        assert_eq!(carried(fixed.0, fixed.1, Carry::KeepShare), 4);
        assert_eq!(carried(sliding.0, sliding.1, Carry::KeepSpent), 6);
        assert_eq!(carried(sliding.0, sliding.1, Carry::KeepShare), 4);
        assert_eq!(carried(log.0, log.1, Carry::KeepSpent), 6);
        assert_eq!(carried(log.0, log.1, Carry::KeepShare), 4);
        // Lowering never hands out more than the new limit: 8/h with 2
        // spent → 4/h keeps 2 (keep) or 3 (share 6/8 of 4, rounded down).
        assert_eq!(carried_down(token.1, token.0, Carry::KeepSpent), 2);
        assert_eq!(carried_down(token.1, token.0, Carry::KeepShare), 3);
        assert_eq!(carried_down(log.1, log.0, Carry::KeepShare), 3);
        assert_eq!(carried_down(fixed.1, fixed.0, Carry::KeepShare), 3);
    }

    fn carried_down<A: Algorithm>(from: A, to: A, carry: Carry) -> u64 {
        let mut state = A::State::default();
        for _ in 0..2 {
            assert!(from.acquire(&mut state, NOW, 1).is_allowed());
        }
        to.carry_from(&from, &mut state, NOW, carry);
        to.peek(&state, NOW, 1).state().remaining
    }

    #[test]
    fn a_full_bucket_stays_full_and_a_leaky_queue_scales() {
        let (small, big) = (Gcra::new(rate(4), 4), Gcra::new(rate(8), 8));
        let mut tat = 0;
        big.carry_from(&small, &mut tat, NOW, Carry::KeepShare);
        assert_eq!(Algorithm::peek(&big, &tat, NOW, 1).state().remaining, 8);

        // A leaky bucket 4/h with a queue of 4: one passing, one waiting.
        let (from, to) = (LeakyBucket::new(rate(4), 4), LeakyBucket::new(rate(8), 8));
        let mut empty = 0;
        assert!(from.acquire(&mut empty, NOW, 1).is_allowed());
        let limits = HoldLimits {
            max_wait: 2 * HOUR,
            max_queued: 4,
        };
        assert!(matches!(
            from.reserve(&mut empty, NOW, 1, limits),
            Decision::Hold { .. }
        ));
        let drain = empty - NOW;
        let mut kept = empty;
        to.carry_from(&from, &mut kept, NOW, Carry::KeepSpent);
        // The same two requests drain twice as fast.
        assert_eq!(kept - NOW, drain / 2);
        let mut shared = empty;
        to.carry_from(&from, &mut shared, NOW, Carry::KeepShare);
        // Twice the queue: the same share of it takes twice the requests.
        assert_eq!(shared - NOW, drain);
    }
}
