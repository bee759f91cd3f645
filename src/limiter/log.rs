//! `sliding_log`: exact. Every admitted unit leaves a timestamp; a request is
//! admitted when the units stamped within the last period, plus its cost,
//! stay within COUNT. Any period-long interval therefore admits at most
//! COUNT units, exactly.
//!
//! Memory is O(COUNT) per key: a log never holds more than COUNT stamps (it
//! admits only while it has room), grows its buffer geometrically up to
//! COUNT and no further, and drops stamps as they expire. `sluice check`
//! warns when COUNT is large.

use std::collections::VecDeque;

use super::{Algorithm, BucketState, Decision};
use crate::clock::Nanos;
use crate::config::Rate;

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

    /// Index of the first stamp still counted at `now` (stamps are sorted).
    #[inline]
    fn first_live(&self, log: &LogState, now: Nanos) -> usize {
        log.stamps
            .partition_point(|&stamp| stamp.saturating_add(self.period) <= now)
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
        let expired = self.first_live(log, now);
        log.stamps.drain(..expired);
        let decision = self.decide(log, 0, now, cost);
        if decision.is_allowed() {
            // Stamps stay sorted: a `now` read slightly earlier by another
            // thread is stamped as the newest time seen (it expires a little
            // later, never sooner).
            let stamp = log.stamps.back().map_or(now, |&newest| newest.max(now));
            let cost = cost as usize;
            let needed = log.stamps.len() + cost;
            if needed > log.stamps.capacity() {
                // Grow geometrically, but never past COUNT stamps.
                let target = (needed * 2).max(4).min(self.count as usize).max(needed);
                log.stamps.reserve_exact(target - log.stamps.len());
            }
            log.stamps.extend(std::iter::repeat_n(stamp, cost));
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

    fn refund(&self, log: &mut LogState, _now: Nanos, cost: u64) {
        let keep = log.stamps.len().saturating_sub(cost as usize);
        log.stamps.truncate(keep);
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

    fn max_heap_bytes(&self) -> usize {
        usize::try_from(self.count)
            .unwrap_or(usize::MAX)
            .saturating_mul(std::mem::size_of::<Nanos>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SEC: Nanos = 1_000_000_000;

    fn log_of(count: u64, secs: u64) -> SlidingLog {
        SlidingLog::new(Rate {
            count,
            period: Duration::from_secs(secs),
        })
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
        limit.refund(&mut log, 2 * SEC, 3);
        assert_eq!(log, before);
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
