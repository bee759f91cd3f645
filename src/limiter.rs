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
//! Settling a request after its response goes through [`Algorithm::charge`]
//! (take more units unconditionally, even into a debt) and
//! [`Algorithm::refund`] (give units back to where they were taken, at any
//! later instant). The token bucket and both windows keep debts exactly; the
//! sliding log and the leaky bucket only approximate a charge (config refuses
//! `charge` with them).
//!
//! Delay mode (`on_limit = "delay"`) goes through [`Algorithm::reserve`] and
//! [`Algorithm::cancel`]: a reservation takes its units at the first instant
//! they fit behind everything already reserved, so held requests of a bucket
//! pass in arrival order. The token bucket, the fixed window and the sliding
//! log implement it; the sliding window has no delay mode (config refuses
//! it); the leaky bucket ([`LeakyBucket`]) is delay mode by nature.

pub mod adaptive;
pub mod calendar;
pub mod gcra;
pub mod leaky;
pub mod log;
pub mod rate;
pub mod sunset;
pub mod window;

use crate::clock::Nanos;
pub use gcra::{Gcra, TokenState};
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
/// store relies on (and which a networked store's server-side scripts must
/// keep too):
///
/// - [`acquire`](Algorithm::acquire) changes how `state` decides only when
///   it admits (a denial may still tidy it, e.g. drop a log's expired
///   stamps);
/// - [`refund`](Algorithm::refund) right after an admitting `acquire` at the
///   same `now` and cost restores a state that decides like the one before;
/// - a refund never makes a bucket decide more generously than if the
///   refunded units had never been taken, so refunds at any later time
///   never let more through than the limit allows without them (see
///   [`refund`](Algorithm::refund) for the one exception);
/// - [`is_fresh`](Algorithm::is_fresh) is true only when the state decides
///   exactly like `State::default()` at `now` and at every later instant, so
///   dropping it can never hand an over-limit caller new budget (a bucket in
///   debt is not fresh);
/// - `now` values may arrive slightly out of order (two threads read the
///   clock, then lock in the opposite order): a `now` before the state's own
///   notion of time must not panic and must not let more through.
///
/// Debts: [`charge`](Algorithm::charge) may drive a bucket below empty. A
/// bucket in debt denies every request and reports `remaining: 0`; its
/// `retry_after` is the time until the debt is repaid and the request's own
/// cost fits (a caller 1,500 units in debt on a `1000/s` token bucket waits
/// 1.5 s plus the time of its cost), and `reset_after` the time until it is
/// full again, both computed from the real debt.
pub trait Algorithm {
    /// Per-key state.
    type State: Default + Send;

    /// Tries to take `cost` units at `now`; takes them only if admitted.
    fn acquire(&self, state: &mut Self::State, now: Nanos, cost: u64) -> Decision;

    /// What [`acquire`](Algorithm::acquire) would decide, without taking
    /// anything. An `Allow` reports the bucket as it is now (nothing taken).
    fn peek(&self, state: &Self::State, now: Nanos, cost: u64) -> Decision;

    /// Takes `units` at `now` unconditionally: the settling of a request
    /// whose real cost is known only after its response (a deferred charge),
    /// or budget spent outside a request. The balance may go below zero (a
    /// debt) and is then repaid at the limit's own rate before anything is
    /// admitted again:
    ///
    /// - token bucket: the TAT moves to `max(TAT, now) + units × T`, past
    ///   `now + τ` when the bucket goes into debt;
    /// - fixed window: the units are counted in the window `now` falls in;
    ///   what exceeds COUNT is carried into the next windows, COUNT per
    ///   window (1,500 units of debt on a `1000/s` window: the next window
    ///   starts with 1,500 counted and admits nothing, the one after starts
    ///   with 500);
    /// - sliding window: the units are counted in the current window; at a
    ///   boundary at most COUNT of a window's count becomes the previous
    ///   window (and fades out over the new one), the excess is carried as
    ///   the new window's count, and so on;
    /// - sliding log and leaky bucket (config refuses `charge` with them):
    ///   the log stamps the units at `now` as long as it holds fewer than
    ///   COUNT stamps (a debt beyond the capacity is dropped, so the log never
    ///   grows past COUNT); the leaky bucket's outlet is busy for `units × T`
    ///   more, like a request of that cost.
    ///
    /// Saturates instead of overflowing; `units = 0` changes nothing.
    fn charge(&self, state: &mut Self::State, now: Nanos, units: u64);

    /// Gives back `units` taken (by [`acquire`](Algorithm::acquire),
    /// [`reserve`](Algorithm::reserve) or [`charge`](Algorithm::charge)) at
    /// `taken_at`, the `now` of the call that took them, at any later `now`:
    /// a rollback when another limit refused the request (`taken_at == now`),
    /// or the settling of a request after its response. The units go back to
    /// where they were taken, and only as far as they still count:
    ///
    /// - it never hands out more than `units`, and never makes the bucket
    ///   decide more generously than if those units had never been taken
    ///   (whatever was taken, charged or refunded since), so refunds at any
    ///   time never let more through than the limit allows without them
    ///   (one exception, the fixed window while requests are held for later
    ///   windows, below);
    /// - `taken_at == now`, right after taking them: exact, the state decides
    ///   like one that never took them;
    /// - fixed window: units taken in the window `now` falls in come off its
    ///   count; units taken in an earlier window no longer count, except the
    ///   part of them carried into the current window as a debt: counted as
    ///   if they had been the first units of their window (the least that
    ///   can still be carried), that part comes off the carried count. A
    ///   request admitted by `acquire` in an earlier window therefore gets
    ///   nothing back. Units come off the top of the count, where delay
    ///   mode's reservations for later windows sit: a held request is given
    ///   back with [`cancel`](Algorithm::cancel), and a refund while others
    ///   are held would let a later window take more than COUNT;
    /// - sliding window: as the fixed window, except that units taken in the
    ///   previous window come off its count, which still weighs (the part of
    ///   them carried beyond COUNT comes off the current count): exact for
    ///   anything admitted by `acquire` in the current or previous window;
    /// - token bucket: the TAT moves back by up to `units × T`, never below
    ///   what later takes need (a take that found the bucket `d` in debt
    ///   would have found it `d + units × T` without them, and `d` is all
    ///   they may get back). The state keeps a refund mark (an instant) and
    ///   a headroom: units taken before the mark come back only at the
    ///   instant they were taken; units taken at or after it come back up to
    ///   the headroom, which each refund uses up. A take strictly after the
    ///   mark lowers the headroom to the debt it found, if less. The mark
    ///   moves, with the headroom unbounded again, to a take that finds the
    ///   bucket full, and to an admission (not a charge) that would leave
    ///   the headroom below its own cost. So a refund of admitted units is
    ///   exact when nothing was taken or refunded since, and gives nothing
    ///   back for units that a full bucket has made irrelevant since;
    /// - sliding log: stamps taken at `taken_at` are removed (the newest
    ///   ones when `taken_at == now`); stamps that expired give nothing. A
    ///   charge it could not stamp in full cannot be refunded in full
    ///   without giving back other units of the same instant;
    /// - leaky bucket: exact while the units are the last in the outlet and
    ///   were taken when it was idle (as by `acquire`); otherwise nothing
    ///   (requests scheduled behind them keep their instants; a held request
    ///   is given back with [`cancel`](Algorithm::cancel)).
    ///
    /// A `taken_at` after `now` counts as `now`.
    fn refund(&self, state: &mut Self::State, now: Nanos, units: u64, taken_at: Nanos);

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
        // Without a delay mode a reservation is taken when it passes, at `at`.
        self.refund(state, now, cost, at);
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

/// A `concurrency` limit, or an `adaptive` one (whose permit table holds
/// its [`adaptive::Controller`]: the limit in force is the controller's,
/// and `max_in_flight` its ceiling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    pub max_in_flight: u64,
    /// An adaptive rule's tier: its share of the learned limit, per mille
    /// (1000 for every other permit).
    pub share: u16,
}

impl Concurrency {
    /// At most `max_in_flight` in flight, all of it.
    pub const fn new(max_in_flight: u64) -> Concurrency {
        Concurrency {
            max_in_flight,
            share: 1000,
        }
    }
}

impl Limiter {
    /// One of `instances` equal shares of this limit, each rounded up: what
    /// one instance enforces alone while the store it shares with the
    /// others is down (so an outage does not multiply the limit).
    pub fn share(&self, instances: u64) -> Limiter {
        match self {
            Limiter::TokenBucket(a) => Limiter::TokenBucket(a.share(instances)),
            Limiter::FixedWindow(a) => Limiter::FixedWindow(a.share(instances)),
            Limiter::SlidingWindow(a) => Limiter::SlidingWindow(a.share(instances)),
            Limiter::SlidingLog(a) => Limiter::SlidingLog(a.share(instances)),
            Limiter::LeakyBucket(a) => Limiter::LeakyBucket(a.share(instances)),
            Limiter::Concurrency(limit) => Limiter::Concurrency(Concurrency {
                max_in_flight: limit.max_in_flight.div_ceil(instances.max(1)),
                ..*limit
            }),
        }
    }

    /// The limit reported as `X-RateLimit-Limit` (the bucket's capacity).
    /// A leaky bucket: it passes any cost in time (a cost above its
    /// capacity only waits longer).
    pub fn is_leaky(&self) -> bool {
        matches!(self, Limiter::LeakyBucket(_))
    }

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
    //! A reload that changes a limit carries each bucket over (`on_change`,
    //! docs/identity-and-policy.md): the examples there, exactly, for every
    //! algorithm.

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

    /// Charges 6 units to a 4/h limit (2 beyond its capacity), carries it
    /// to 8/h, returns what remains and whether the next unit is denied.
    fn charged<A: Algorithm>(from: A, to: A, carry: Carry) -> (u64, bool) {
        let mut state = A::State::default();
        from.charge(&mut state, NOW, 6);
        assert!(!from.peek(&state, NOW, 1).is_allowed());
        to.carry_from(&from, &mut state, NOW, carry);
        let decision = to.peek(&state, NOW, 1);
        (decision.state().remaining, !decision.is_allowed())
    }

    #[test]
    fn debts_carry_over_a_reload() {
        let token = (Gcra::new(rate(4), 4), Gcra::new(rate(8), 8));
        let fixed = (FixedWindow::new(rate(4)), FixedWindow::new(rate(8)));
        let sliding = (SlidingWindow::new(rate(4)), SlidingWindow::new(rate(8)));
        // 6 spent stay spent: 2 of 8 remain. The share of the capacity
        // spent, 6/4, is 12 of 8: still 4 in debt.
        assert_eq!(charged(token.0, token.1, Carry::KeepSpent), (2, false));
        assert_eq!(charged(token.0, token.1, Carry::KeepShare), (0, true));
        assert_eq!(charged(fixed.0, fixed.1, Carry::KeepSpent), (2, false));
        assert_eq!(charged(fixed.0, fixed.1, Carry::KeepShare), (0, true));
        assert_eq!(charged(sliding.0, sliding.1, Carry::KeepSpent), (2, false));
        assert_eq!(charged(sliding.0, sliding.1, Carry::KeepShare), (0, true));
    }

    #[test]
    fn a_full_bucket_stays_full_and_a_leaky_queue_scales() {
        let (small, big) = (Gcra::new(rate(4), 4), Gcra::new(rate(8), 8));
        let mut full = gcra::TokenState::default();
        big.carry_from(&small, &mut full, NOW, Carry::KeepShare);
        assert_eq!(Algorithm::peek(&big, &full, NOW, 1).state().remaining, 8);

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{admitted, rate, SEC};

    #[test]
    fn a_share_is_the_limit_divided_rounded_up() {
        // 10/s, burst 10, over 3 instances: 4 at once, then one every 300 ms.
        let Limiter::TokenBucket(share) = Limiter::TokenBucket(Gcra::new(rate(10, 1), 10)).share(3)
        else {
            unreachable!()
        };
        let mut state = TokenState::default();
        assert_eq!(admitted(&share, &mut state, SEC, 10), 4);
        assert_eq!(admitted(&share, &mut state, SEC + 299_000_000, 1), 0);
        assert_eq!(admitted(&share, &mut state, SEC + 300_000_000, 1), 1);
        // Windows: COUNT divided, rounded up; one instance keeps it all.
        for (limiter, count) in [
            (
                Limiter::FixedWindow(FixedWindow::new(rate(31, 60))).share(3),
                11,
            ),
            (
                Limiter::SlidingWindow(SlidingWindow::new(rate(31, 60))).share(3),
                11,
            ),
            (
                Limiter::SlidingLog(SlidingLog::new(rate(31, 60))).share(3),
                11,
            ),
            (
                Limiter::FixedWindow(FixedWindow::new(rate(31, 60))).share(1),
                31,
            ),
            (Limiter::Concurrency(Concurrency::new(5)).share(2), 3),
        ] {
            assert_eq!(limiter.capacity(), count, "{limiter:?}");
        }
    }
}
