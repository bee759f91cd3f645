//! `sliding_log`: exact. Every admitted unit leaves a timestamp; a request is
//! admitted when the units stamped within the last period, plus its cost,
//! stay within COUNT. Any period-long interval therefore admits at most
//! COUNT units, exactly.
//!
//! Memory is O(COUNT) per key: a log never holds more than COUNT stamps (it
//! admits only while it has room), grows its buffer geometrically up to
//! COUNT and no further, and drops stamps as they expire. `sluice check`
//! warns when COUNT is large.
//!
//! Delay mode: stamps may lie in the future (reservations). A reservation of
//! cost `c` passes at the earliest `t ≥ max(now, newest stamp)` at which the
//! stamps in `(t − P, t]` plus `c` stay within COUNT, and stamps `c` units at
//! `t`. That keeps the invariant "every interval `(x − P, x]` holds at most
//! COUNT stamps": intervals ending before `t` do not contain `t`, and one
//! ending at `x ≥ t` holds only stamps in `(x − P, t] ⊆ (t − P, t]`, since no
//! stamp is newer than `t`. Removing stamps never breaks the invariant, and
//! held requests keep their instants, so a cancel removes its stamps exactly
//! wherever they are; placing every reservation at or after the newest stamp
//! keeps holds in arrival order even after a cancel in the middle. With
//! reservations a log holds up to COUNT plus the units waiting.

use std::collections::VecDeque;

use super::{scale_up, Algorithm, BucketState, Carry, Decision, HoldLimits, Rate};
use crate::clock::Nanos;

/// `sliding_log`: at most COUNT units in any period-long interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    period: Nanos,
    count: u64,
}

/// One key's log: the stamps of admitted units, oldest first. A stamp counts
/// while `now < stamp + period`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogState {
    stamps: VecDeque<Nanos>,
}

impl LogState {
    /// Stamps held (units counted, until expired ones are dropped).
    pub fn len(&self) -> usize {
        self.stamps.len()
    }

    /// Whether the log holds no stamp.
    pub fn is_empty(&self) -> bool {
        self.stamps.is_empty()
    }

    /// Heap bytes the log holds on to.
    pub fn heap_bytes(&self) -> usize {
        self.stamps.capacity() * std::mem::size_of::<Nanos>()
    }
}

impl SlidingLog {
    /// At most `rate.count` units in any interval of `rate.period`.
    pub fn new(rate: Rate) -> SlidingLog {
        SlidingLog {
            period: (rate.period.as_nanos().min(u128::from(u64::MAX)) as u64).max(1),
            count: rate.count,
        }
    }

    /// The period in nanoseconds and COUNT: what a networked store's script
    /// steps with.
    pub fn window(&self) -> (Nanos, u64) {
        (self.period, self.count)
    }

    /// One of `instances` equal shares: COUNT divided, rounded up.
    pub fn share(&self, instances: u64) -> SlidingLog {
        SlidingLog {
            count: self.count.div_ceil(instances.max(1)),
            ..*self
        }
    }

    /// Index of the first stamp still counted at `now` (stamps are sorted).
    #[inline]
    fn first_live(&self, log: &LogState, now: Nanos) -> usize {
        log.stamps
            .partition_point(|&stamp| stamp.saturating_add(self.period) <= now)
    }

    /// Appends `cost` stamps at `stamp` (not before the newest), growing the
    /// buffer geometrically: up to COUNT, then by the excess over COUNT.
    fn push(&self, log: &mut LogState, stamp: Nanos, cost: u64) {
        let cost = cost as usize;
        let needed = log.stamps.len() + cost;
        if needed > log.stamps.capacity() {
            let count = usize::try_from(self.count).unwrap_or(usize::MAX);
            let target = if needed <= count {
                (needed * 2).max(4).min(count).max(needed)
            } else {
                needed + (needed - count)
            };
            log.stamps.reserve_exact(target - log.stamps.len());
        }
        log.stamps.extend(std::iter::repeat_n(stamp, cost));
    }

    /// The decision for `cost` units given the stamps from `live` on.
    fn decide(&self, log: &LogState, live: usize, now: Nanos, cost: u64) -> Decision {
        if self.count == 0 {
            return Decision::Deny {
                state: BucketState {
                    remaining: 0,
                    reset_after: 0,
                },
                retry_after: None,
            };
        }
        let counted = (log.stamps.len() - live) as u64;
        // Full again when the newest stamp expires.
        let reset_after = log
            .stamps
            .back()
            .filter(|_| counted > 0)
            .map_or(0, |&newest| newest.saturating_add(self.period) - now);
        if counted + cost <= self.count {
            return Decision::Allow(BucketState {
                remaining: self.count - counted - cost,
                reset_after: self.period.max(reset_after),
            });
        }
        // Room for `cost` once the oldest `counted + cost − COUNT` counted
        // stamps have expired.
        let retry_after = (cost <= self.count).then(|| {
            let must_expire = (counted + cost - self.count) as usize;
            log.stamps[live + must_expire - 1].saturating_add(self.period) - now
        });
        Decision::Deny {
            state: BucketState {
                remaining: self.count.saturating_sub(counted),
                reset_after,
            },
            retry_after,
        }
    }
}

impl Algorithm for SlidingLog {
    type State = LogState;

    /// Drops expired stamps (housekeeping that changes no decision), then
    /// decides; an admitted request stamps `cost` units.
    fn acquire(&self, log: &mut LogState, now: Nanos, cost: u64) -> Decision {
        // Usually none or one stamp expired since the last visit: popping
        // them is cheaper than a binary search and a drain.
        while log
            .stamps
            .front()
            .is_some_and(|&oldest| oldest.saturating_add(self.period) <= now)
        {
            log.stamps.pop_front();
        }
        let decision = self.decide(log, 0, now, cost);
        if decision.is_allowed() {
            // Stamps stay sorted: a `now` read slightly earlier by another
            // thread is stamped as the newest time seen (it expires a little
            // later, never sooner).
            let stamp = log.stamps.back().map_or(now, |&newest| newest.max(now));
            self.push(log, stamp, cost);
        }
        decision
    }

    fn peek(&self, log: &LogState, now: Nanos, cost: u64) -> Decision {
        let live = self.first_live(log, now);
        match self.decide(log, live, now, cost) {
            Decision::Allow(_) => {
                let counted = (log.stamps.len() - live) as u64;
                Decision::Allow(BucketState {
                    remaining: self.count - counted,
                    reset_after: log
                        .stamps
                        .back()
                        .filter(|_| counted > 0)
                        .map_or(0, |&newest| newest.saturating_add(self.period) - now),
                })
            }
            deny => deny,
        }
    }

    /// Stamps the units at the newest time seen, as `acquire` does, while
    /// the log holds fewer than COUNT stamps: a debt beyond the capacity is
    /// dropped, so a charge never makes the log grow past COUNT stamps.
    /// (Config refuses `charge` with the sliding log: a charge it could not
    /// stamp in full is not told apart from other units stamped at the same
    /// instant, and refunding it in full could give back theirs.)
    fn charge(&self, log: &mut LogState, now: Nanos, units: u64) {
        let expired = self.first_live(log, now);
        log.stamps.drain(..expired);
        let room = self.count.saturating_sub(log.len() as u64);
        let units = units.min(room);
        if units == 0 {
            return;
        }
        let stamp = log.stamps.back().map_or(now, |&newest| newest.max(now));
        self.push(log, stamp, units);
    }

    /// A rollback (`taken_at ≥ now`) removes the newest `units` stamps, the
    /// ones just added. Later, up to `units` stamps equal to `taken_at` are
    /// removed (those of requests taken at one instant are interchangeable);
    /// units stamped later than when they were taken (behind a newer stamp
    /// from another thread, or reserved) are not found and stay counted.
    fn refund(&self, log: &mut LogState, now: Nanos, units: u64, taken_at: Nanos) {
        let units = usize::try_from(units).unwrap_or(usize::MAX);
        if taken_at >= now {
            let keep = log.stamps.len().saturating_sub(units);
            log.stamps.truncate(keep);
        } else {
            remove_stamps_at(log, taken_at, units);
        }
    }

    #[inline]
    fn is_fresh(&self, log: &LogState, now: Nanos) -> bool {
        log.stamps
            .back()
            .is_none_or(|&newest| newest.saturating_add(self.period) <= now)
    }

    fn capacity(&self) -> u64 {
        self.count
    }

    /// Keeping the spent units keeps the stamps (they expire under the new
    /// period). Keeping the share scales their number with the COUNT: the
    /// oldest go first when it shrinks; when it grows the oldest stamp is
    /// repeated (the copies expire first). Never more than the new COUNT.
    fn carry_from(&self, from: &SlidingLog, log: &mut LogState, now: Nanos, carry: Carry) {
        let expired = from.first_live(log, now);
        log.stamps.drain(..expired);
        let live = log.stamps.len() as u64;
        let target = match carry {
            Carry::KeepSpent => live,
            Carry::KeepShare => scale_up(live, self.count, from.count),
        }
        .min(self.count);
        while log.stamps.len() as u64 > target {
            log.stamps.pop_front();
        }
        if let Some(&oldest) = log.stamps.front() {
            while (log.stamps.len() as u64) < target {
                log.stamps.push_front(oldest);
            }
        }
    }

    fn max_heap_bytes(&self) -> usize {
        usize::try_from(self.count)
            .unwrap_or(usize::MAX)
            .saturating_mul(std::mem::size_of::<Nanos>())
    }

    /// See the module doc. `Allow` exactly when the units fit at `now` and
    /// no stamp is in the future (then as [`Algorithm::acquire`]); otherwise
    /// a `Hold` until `t` when `t − now ≤ max_wait` and the units already
    /// waiting (stamps after `now`) plus `cost` stay within `max_queued`.
    /// A `Deny`'s `retry_after` is `t − now`, when the request would pass
    /// without waiting. That is [`Algorithm::peek`]'s unless a reservation in
    /// the middle was cancelled: peek only counts stamps, and may name an
    /// earlier instant that would let the request overtake held ones.
    fn reserve(&self, log: &mut LogState, now: Nanos, cost: u64, limits: HoldLimits) -> Decision {
        let expired = self.first_live(log, now);
        log.stamps.drain(..expired);
        if self.count == 0 || cost > self.count {
            return self.decide(log, 0, now, cost);
        }
        let from = log.stamps.back().map_or(now, |&newest| newest.max(now));
        let live = self.first_live(log, from);
        let counted = (log.stamps.len() - live) as u64;
        let at = if counted + cost <= self.count {
            from
        } else {
            let must_expire = (counted + cost - self.count) as usize;
            log.stamps[live + must_expire - 1].saturating_add(self.period)
        };
        let wait = at - now;
        let waiting = (log.len() - log.stamps.partition_point(|&stamp| stamp <= now)) as u64;
        if wait == 0 {
            // Nothing in the future: exactly `acquire`.
            let decision = self.decide(log, 0, now, cost);
            self.push(log, now, cost);
            return decision;
        }
        // Full again when the newest stamp expires.
        let reset_after = log
            .stamps
            .back()
            .map_or(0, |&newest| newest.saturating_add(self.period) - now);
        if wait > limits.max_wait || waiting.saturating_add(cost) > limits.max_queued {
            return Decision::Deny {
                state: BucketState {
                    remaining: if waiting > 0 {
                        0
                    } else {
                        self.count.saturating_sub(log.len() as u64)
                    },
                    reset_after,
                },
                retry_after: Some(wait),
            };
        }
        self.push(log, at, cost);
        Decision::Hold {
            state: BucketState {
                remaining: 0,
                reset_after: at.saturating_add(self.period) - now,
            },
            wait,
        }
    }

    /// Removes `cost` stamps equal to `at` (fewer if fewer are left), exact
    /// wherever they are (see the module doc); stamps of several requests at
    /// one instant are interchangeable. Nothing once `now` is past `at`.
    fn cancel(&self, log: &mut LogState, now: Nanos, cost: u64, at: Nanos) {
        if now > at {
            return;
        }
        remove_stamps_at(log, at, usize::try_from(cost).unwrap_or(usize::MAX));
    }
}

/// Removes up to `units` stamps equal to `at`.
fn remove_stamps_at(log: &mut LogState, at: Nanos, units: usize) {
    let end = log.stamps.partition_point(|&stamp| stamp <= at);
    let start = log.stamps.partition_point(|&stamp| stamp < at);
    let take = (end - start).min(units);
    log.stamps.drain(end - take..end);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{rate, SEC};

    fn log_of(count: u64, secs: u64) -> SlidingLog {
        SlidingLog::new(rate(count, secs))
    }

    #[test]
    fn admits_exactly_count_in_any_period() {
        let limit = log_of(3, 10);
        let mut log = LogState::default();
        for at in [100, 101, 102] {
            assert!(limit.acquire(&mut log, at * SEC, 1).is_allowed());
        }
        // Until the stamp of 100 s expires at 110 s, nothing more.
        assert!(!limit.acquire(&mut log, 110 * SEC - 1, 1).is_allowed());
        assert!(limit.acquire(&mut log, 110 * SEC, 1).is_allowed());
        assert!(!limit.acquire(&mut log, 110 * SEC, 1).is_allowed());
    }

    #[test]
    fn retry_after_names_the_stamp_that_must_expire() {
        let limit = log_of(5, 10);
        let mut log = LogState::default();
        for at in [100, 101, 102, 103, 104] {
            limit.acquire(&mut log, at * SEC, 1);
        }
        match limit.acquire(&mut log, 105 * SEC, 2) {
            Decision::Deny { state, retry_after } => {
                assert_eq!(state.remaining, 0);
                // Two units need the stamps of 100 s and 101 s gone: 111 s.
                assert_eq!(retry_after, Some(6 * SEC));
                // Full once the 104 s stamp expires.
                assert_eq!(state.reset_after, 9 * SEC);
            }
            other => panic!("expected a denial, got {other:?}"),
        }
        assert!(limit.acquire(&mut log, 111 * SEC, 2).is_allowed());
    }

    #[test]
    fn memory_never_exceeds_count_stamps() {
        let limit = log_of(100, 1);
        let mut log = LogState::default();
        for step in 0..10_000u64 {
            limit.acquire(&mut log, step * SEC / 1_000, 1);
            assert!(log.len() <= 100);
        }
        assert!(log.heap_bytes() <= 100 * 8, "{}", log.heap_bytes());
    }

    #[test]
    fn a_refund_removes_the_stamps_just_added() {
        let limit = log_of(4, 10);
        let mut log = LogState::default();
        limit.acquire(&mut log, SEC, 1);
        let before = log.clone();
        assert!(limit.acquire(&mut log, 2 * SEC, 3).is_allowed());
        limit.refund(&mut log, 2 * SEC, 3, 2 * SEC);
        assert_eq!(log, before);
    }

    const MS: Nanos = 1_000_000;

    fn limits(max_wait: Nanos, max_queued: u64) -> HoldLimits {
        HoldLimits {
            max_wait,
            max_queued,
        }
    }

    #[test]
    fn holds_pass_when_stamps_expire_in_arrival_order() {
        let limit = log_of(2, 10);
        let hold = limits(60 * SEC, 100);
        let mut log = LogState::default();
        let mut plain = LogState::default();
        for at in [100, 101] {
            // Passing at once: exactly `acquire`.
            assert_eq!(
                limit.reserve(&mut log, at * SEC, 1, hold),
                limit.acquire(&mut plain, at * SEC, 1)
            );
        }
        let waits: Vec<_> = (0..4)
            .map(|_| limit.reserve(&mut log, 102 * SEC, 1, hold).wait())
            .collect();
        // 110 s (100 s expires), 111 s (101 s expires), 120 s, 121 s.
        assert_eq!(waits, [8 * SEC, 9 * SEC, 18 * SEC, 19 * SEC]);
        assert_eq!(
            limit.reserve(&mut log, 102 * SEC, 1, hold),
            Decision::Hold {
                state: BucketState {
                    remaining: 0,
                    reset_after: 38 * SEC
                },
                wait: 28 * SEC
            }
        );
        // A cost of 2 waits for two expiries, behind everyone.
        assert_eq!(limit.reserve(&mut log, 102 * SEC, 2, hold).wait(), 38 * SEC);
    }

    #[test]
    fn max_queue_and_max_wait_refuse_at_once_taking_nothing() {
        let limit = log_of(2, 10);
        let mut log = LogState::default();
        // max_queue 2 of cost 1, at most 15 s.
        let hold = limits(15 * SEC, 2);
        limit.reserve(&mut log, 100 * SEC, 2, hold);
        assert_eq!(limit.reserve(&mut log, 100 * SEC, 1, hold).wait(), 10 * SEC);
        assert_eq!(limit.reserve(&mut log, 100 * SEC, 1, hold).wait(), 10 * SEC);
        let full = log.clone();
        // Two waiting: the third is refused, and told when it would pass.
        match limit.reserve(&mut log, 100 * SEC, 1, hold) {
            Decision::Deny { state, retry_after } => {
                assert_eq!(state.remaining, 0);
                assert_eq!(retry_after, Some(20 * SEC));
                assert_eq!(state.reset_after, 20 * SEC);
            }
            other => panic!("expected a denial, got {other:?}"),
        }
        assert_eq!(log, full);
        // At 110 s the two held ones pass; two more fit at 120 s.
        assert_eq!(limit.reserve(&mut log, 110 * SEC, 1, hold).wait(), 10 * SEC);
        assert_eq!(limit.reserve(&mut log, 110 * SEC, 1, hold).wait(), 10 * SEC);
        // The next would wait 20 s > 15 s, however long the queue may be.
        let with_two = log.clone();
        let long_queue = limits(15 * SEC, 100);
        assert!(!limit
            .reserve(&mut log, 110 * SEC, 1, long_queue)
            .is_allowed());
        assert_eq!(log, with_two);
    }

    #[test]
    fn cancel_removes_exactly_its_stamps_wherever_they_are() {
        let limit = log_of(1, 10);
        let hold = limits(60 * SEC, 100);
        let mut log = LogState::default();
        limit.reserve(&mut log, 100 * SEC, 1, hold);
        let mut held = Vec::new();
        for _ in 0..3 {
            let before = log.clone();
            let wait = limit.reserve(&mut log, 100 * SEC, 1, hold).wait();
            held.push((before, 100 * SEC + wait));
        }
        assert_eq!(
            held.iter().map(|h| h.1).collect::<Vec<_>>(),
            [110 * SEC, 120 * SEC, 130 * SEC]
        );
        // The last one: exactly as before it.
        let full = log.clone();
        limit.cancel(&mut log, 101 * SEC, 1, held[2].1);
        assert_eq!(log, held[2].0);
        // Reserving again puts it back where it was.
        assert_eq!(limit.reserve(&mut log, 101 * SEC, 1, hold).wait(), 29 * SEC);
        assert_eq!(log, full);
        // A middle one: its stamp goes, the others keep their instants, and
        // a newcomer still comes after the newest (no overtaking), here as
        // soon as the 130 s stamp allows.
        limit.cancel(&mut log, 101 * SEC, 1, held[1].1);
        assert_eq!(log.stamps, [100 * SEC, 110 * SEC, 130 * SEC]);
        assert_eq!(limit.reserve(&mut log, 101 * SEC, 1, hold).wait(), 39 * SEC);
        // Nothing once the instant has passed.
        let before = log.clone();
        limit.cancel(&mut log, 110 * SEC + 1, 1, 110 * SEC);
        assert_eq!(log, before);
    }

    #[test]
    fn cancelling_a_request_admitted_at_once_removes_its_stamps() {
        let limit = log_of(3, 10);
        let hold = limits(60 * SEC, 100);
        let mut log = LogState::default();
        limit.reserve(&mut log, 100 * SEC, 1, hold);
        let before = log.clone();
        assert!(matches!(
            limit.reserve(&mut log, 100 * SEC + MS, 2, hold),
            Decision::Allow(_)
        ));
        limit.cancel(&mut log, 100 * SEC + MS, 2, 100 * SEC + MS);
        assert_eq!(log, before);
    }

    #[test]
    fn a_charge_fills_the_log_up_to_count_and_no_further() {
        let limit = log_of(5, 10);
        let mut log = LogState::default();
        limit.acquire(&mut log, 100 * SEC, 1);
        limit.charge(&mut log, 101 * SEC, 1_000_000);
        assert_eq!(log.len(), 5);
        assert!(log.heap_bytes() <= 5 * 8, "{}", log.heap_bytes());
        assert!(!limit.peek(&log, 110 * SEC - 1, 1).is_allowed());
        // The 100 s stamp expires at 110 s, the charged ones at 111 s.
        assert_eq!(limit.peek(&log, 110 * SEC, 1).state().remaining, 1);
        assert!(limit.is_fresh(&log, 111 * SEC));
        // Nothing to charge on a closed route.
        let closed = log_of(0, 10);
        let mut log = LogState::default();
        closed.charge(&mut log, SEC, 3);
        assert!(log.is_empty());
    }

    #[test]
    fn a_late_refund_removes_the_stamps_taken_at_that_instant() {
        let limit = log_of(4, 10);
        let mut log = LogState::default();
        limit.acquire(&mut log, 100 * SEC, 2);
        limit.acquire(&mut log, 101 * SEC, 1);
        limit.refund(&mut log, 105 * SEC, 3, 100 * SEC);
        assert_eq!(log.stamps, [101 * SEC]);
        // Nothing was taken at 102 s: nothing to give back.
        limit.refund(&mut log, 105 * SEC, 1, 102 * SEC);
        assert_eq!(log.stamps, [101 * SEC]);
    }

    #[test]
    fn fresh_once_every_stamp_expired() {
        let limit = log_of(4, 10);
        let mut log = LogState::default();
        assert!(limit.is_fresh(&log, SEC));
        limit.acquire(&mut log, SEC, 1);
        assert!(!limit.is_fresh(&log, 11 * SEC - 1));
        assert!(limit.is_fresh(&log, 11 * SEC));
    }
}
