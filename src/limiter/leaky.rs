//! `leaky_bucket`: requests leave one after another at a constant rate; up to
//! `queue` (the rule's `burst`) wait.
//!
//! With emission interval `T` (period / COUNT) a request of cost `c`
//! occupies the outlet for `c·T`. The state is one number per key, like a
//! GCRA TAT: the instant the bucket is empty again (the previous requests
//! have all left). A request arriving at `now` passes at `start = max(empty,
//! now)` — at once when the bucket is idle, else when the ones before it have
//! left — and the bucket is then empty again at `start + c·T`. Consecutive
//! passes are therefore at least `c·T` apart (the earlier one's cost), and
//! they are in arrival order.
//!
//! Requests waiting at `now` are those that pass after `now`. With one cost
//! `c` per bucket (a rule's cost) and `D = empty − now`, the request leaving
//! now or last is not waiting and the others are `c·T` apart, so
//! `⌈D / (c·T)⌉ − 1` are waiting, and a newcomer (which would wait `D`) may
//! join while fewer than `queue` wait, i.e. when `D ≤ queue·c·T`.
//!
//! `capacity()` (`X-RateLimit-Limit`) is `queue`; `remaining` is `queue`
//! minus the requests waiting, and `reset_after` the time until the bucket
//! is empty (idle, indistinguishable from a fresh one). Note that a bucket
//! whose last request is still leaving reports `remaining = queue` with a
//! non-zero `reset_after`.
//!
//! Outside delay mode ([`Algorithm::acquire`]) a leaky bucket is a meter: it
//! admits only when idle. COUNT 0 never admits.

use super::{scale_up, Algorithm, BucketState, Carry, Decision, HoldLimits, Rate};
use crate::clock::Nanos;

/// A leaky bucket's parameters, precomputed for the request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucket {
    /// Nanoseconds per unit (`T`); 0 when the route is closed (COUNT 0).
    emission: Nanos,
    /// How many requests may wait.
    queue: u64,
}

const CLOSED: Decision = Decision::Deny {
    state: BucketState {
        remaining: 0,
        reset_after: 0,
    },
    retry_after: None,
};

impl LeakyBucket {
    /// Requests leave at `rate`; at most `queue` wait.
    pub fn new(rate: Rate, queue: u64) -> LeakyBucket {
        if rate.count == 0 {
            return LeakyBucket { emission: 0, queue };
        }
        let period = rate.period.as_nanos().min(u128::from(u64::MAX)) as u64;
        LeakyBucket {
            emission: (period / rate.count).max(1),
            queue,
        }
    }

    /// One of `instances` equal shares: its rate divided by `instances`,
    /// its queue too, rounded up.
    pub fn share(&self, instances: u64) -> LeakyBucket {
        LeakyBucket {
            emission: self.emission.saturating_mul(instances.max(1)),
            queue: self.queue.div_ceil(instances.max(1)),
        }
    }

    /// The emission interval `T` in nanoseconds (0 when closed) and the
    /// queue: what a networked store's script steps with.
    pub fn interval(&self) -> (Nanos, u64) {
        (self.emission, self.queue)
    }

    /// Whether this bucket can never admit anything (COUNT 0).
    pub fn is_closed(&self) -> bool {
        self.emission == 0
    }

    /// How long a request of `cost` occupies the outlet.
    #[inline]
    fn occupies(&self, cost: u64) -> Nanos {
        self.emission.saturating_mul(cost).max(1)
    }

    /// Requests of `cost` waiting when the bucket empties `drain` from now.
    #[inline]
    fn waiting(&self, drain: Nanos, cost: u64) -> u64 {
        drain.div_ceil(self.occupies(cost)).saturating_sub(1)
    }

    /// The bucket as a client sees it, `drain` before it is empty.
    #[inline]
    fn state(&self, drain: Nanos, cost: u64) -> BucketState {
        BucketState {
            remaining: self.queue.saturating_sub(self.waiting(drain, cost)),
            reset_after: drain,
        }
    }

    /// The decision for a request of `cost` that would wait `drain`, if it
    /// may not (the bucket is not idle, or the hold was refused).
    #[inline]
    fn deny(&self, drain: Nanos, cost: u64) -> Decision {
        Decision::Deny {
            state: self.state(drain, cost),
            retry_after: Some(drain),
        }
    }
}

impl Algorithm for LeakyBucket {
    /// The instant the bucket is empty again.
    type State = Nanos;

    /// Admits only an idle bucket.
    fn acquire(&self, empty: &mut Nanos, now: Nanos, cost: u64) -> Decision {
        if self.is_closed() {
            return CLOSED;
        }
        if *empty > now {
            return self.deny(*empty - now, cost);
        }
        let drain = self.occupies(cost);
        *empty = now.saturating_add(drain);
        Decision::Allow(self.state(drain, cost))
    }

    fn peek(&self, empty: &Nanos, now: Nanos, cost: u64) -> Decision {
        if self.is_closed() {
            return CLOSED;
        }
        if *empty > now {
            return self.deny(*empty - now, cost);
        }
        Decision::Allow(self.state(0, cost))
    }

    /// The drain time is the waiting requests times `T`: keeping them scales
    /// it by `T'/T`, keeping the share of the queue also by `queue'/queue`.
    fn carry_from(&self, from: &LeakyBucket, empty: &mut Nanos, now: Nanos, carry: Carry) {
        if *empty <= now || from.is_closed() || self.is_closed() {
            return;
        }
        let mut drain = scale_up(*empty - now, self.emission, from.emission);
        if carry == Carry::KeepShare {
            drain = scale_up(drain, self.queue, from.queue);
        }
        *empty = now.saturating_add(drain);
    }

    /// The outlet is busy `units × T` longer, as for a request of that cost
    /// arriving now: requests wait behind the debt.
    fn charge(&self, empty: &mut Nanos, now: Nanos, units: u64) {
        if self.is_closed() || units == 0 {
            return;
        }
        *empty = (*empty).max(now).saturating_add(self.occupies(units));
    }

    /// Units taken at `taken_at` from an idle bucket (by `acquire`) left it
    /// empty at `taken_at + units·T`: while it still is, they are the last
    /// in the outlet and the bucket is empty from `taken_at` again (right
    /// after the `acquire`: idle again). Otherwise something was scheduled
    /// after them, which keeps its instant, and nothing is given back.
    fn refund(&self, empty: &mut Nanos, now: Nanos, units: u64, taken_at: Nanos) {
        if self.is_closed() || units == 0 {
            return;
        }
        let taken_at = taken_at.min(now);
        if *empty == taken_at.saturating_add(self.occupies(units)) {
            *empty = taken_at;
        }
    }

    fn is_fresh(&self, empty: &Nanos, now: Nanos) -> bool {
        *empty <= now
    }

    /// `queue`: how many requests may wait.
    fn capacity(&self) -> u64 {
        self.queue
    }

    /// `Allow` when idle (as [`Algorithm::acquire`]); otherwise a `Hold` until
    /// the bucket is empty, `D = empty − now`, when `D ≤ max_wait` and fewer
    /// than `queue` requests of this cost wait (`D ≤ queue·cost·T`); else
    /// `Deny` with `retry_after = D`. The configured queue is the bound:
    /// `limits.max_queued` is ignored.
    fn reserve(&self, empty: &mut Nanos, now: Nanos, cost: u64, limits: HoldLimits) -> Decision {
        if self.is_closed() {
            return CLOSED;
        }
        let wait = empty.saturating_sub(now);
        if wait == 0 {
            return self.acquire(empty, now, cost);
        }
        let occupies = self.occupies(cost);
        if wait > limits.max_wait || wait > self.queue.saturating_mul(occupies) {
            return self.deny(wait, cost);
        }
        *empty = empty.saturating_add(occupies);
        Decision::Hold {
            state: self.state(wait.saturating_add(occupies), cost),
            wait,
        }
    }

    /// Right after a reservation that passes at `at` the bucket is empty at
    /// `at + cost·T`, and any later reservation moves that further: when it
    /// still is, the reservation is the last and the bucket is empty at `at`
    /// again (its previous value, or for one admitted at once an instant
    /// at which it was already idle). Otherwise nothing is given back; once
    /// `now` is past `at` nothing is either.
    fn cancel(&self, empty: &mut Nanos, now: Nanos, cost: u64, at: Nanos) {
        if self.is_closed() || now > at {
            return;
        }
        if *empty == at.saturating_add(self.occupies(cost)) {
            *empty = at;
        }
    }

    /// When the reservation is the last (as for `cancel`), it leaves at `to`
    /// instead: the bucket is empty again `cost·T` after `to`.
    fn reschedule(&self, empty: &mut Nanos, now: Nanos, cost: u64, at: Nanos, to: Nanos) -> bool {
        if self.is_closed()
            || now > at
            || to < at
            || *empty != at.saturating_add(self.occupies(cost))
        {
            return false;
        }
        *empty = to.saturating_add(self.occupies(cost));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SEC: Nanos = 1_000_000_000;
    const MS: Nanos = 1_000_000;
    const NO_LIMIT: HoldLimits = HoldLimits {
        max_wait: u64::MAX,
        max_queued: 0,
    };

    fn leaky(count: u64, secs: u64, queue: u64) -> LeakyBucket {
        LeakyBucket::new(
            Rate {
                count,
                period: Duration::from_secs(secs),
            },
            queue,
        )
    }

    #[test]
    fn an_idle_bucket_passes_at_once_and_the_next_ones_wait_their_turn() {
        // 10/s: one request every 100 ms; 3 may wait.
        let limit = leaky(10, 1, 3);
        let mut empty = 0;
        let now = 10 * SEC;
        assert_eq!(
            limit.reserve(&mut empty, now, 1, NO_LIMIT),
            Decision::Allow(BucketState {
                remaining: 3,
                reset_after: 100 * MS
            })
        );
        let waits: Vec<_> = (0..3)
            .map(|_| limit.reserve(&mut empty, now, 1, NO_LIMIT))
            .collect();
        assert_eq!(
            waits.iter().map(Decision::wait).collect::<Vec<_>>(),
            [100 * MS, 200 * MS, 300 * MS]
        );
        assert_eq!(
            waits
                .iter()
                .map(|d| d.state().remaining)
                .collect::<Vec<_>>(),
            [2, 1, 0]
        );
        // The queue is full: refused at once, told when the bucket is empty.
        assert_eq!(
            limit.reserve(&mut empty, now, 1, NO_LIMIT),
            Decision::Deny {
                state: BucketState {
                    remaining: 0,
                    reset_after: 400 * MS
                },
                retry_after: Some(400 * MS)
            }
        );
        // Once the first held one has left, one more may join, behind the
        // others.
        let later = now + 100 * MS;
        assert_eq!(
            limit.reserve(&mut empty, later, 1, NO_LIMIT).wait(),
            300 * MS
        );
        assert!(!limit.reserve(&mut empty, later, 1, NO_LIMIT).is_allowed());
    }

    #[test]
    fn a_request_is_refused_when_it_would_wait_longer_than_max_wait() {
        let limit = leaky(10, 1, 100);
        let mut empty = 0;
        let now = SEC;
        let limits = HoldLimits {
            max_wait: 250 * MS,
            max_queued: 0,
        };
        assert!(limit.reserve(&mut empty, now, 1, limits).is_allowed());
        assert_eq!(limit.reserve(&mut empty, now, 1, limits).wait(), 100 * MS);
        assert_eq!(limit.reserve(&mut empty, now, 1, limits).wait(), 200 * MS);
        let before = empty;
        assert!(!limit.reserve(&mut empty, now, 1, limits).is_allowed());
        assert_eq!(empty, before);
    }

    #[test]
    fn a_cost_occupies_the_outlet_for_cost_times_the_interval() {
        let limit = leaky(10, 1, 2);
        let mut empty = 0;
        let now = SEC;
        assert!(limit.reserve(&mut empty, now, 3, NO_LIMIT).is_allowed());
        assert_eq!(limit.reserve(&mut empty, now, 3, NO_LIMIT).wait(), 300 * MS);
        assert_eq!(limit.reserve(&mut empty, now, 3, NO_LIMIT).wait(), 600 * MS);
        assert!(!limit.reserve(&mut empty, now, 3, NO_LIMIT).is_allowed());
    }

    #[test]
    fn plain_acquire_admits_only_an_idle_bucket() {
        let limit = leaky(10, 1, 5);
        let mut empty = 0;
        assert!(limit.acquire(&mut empty, SEC, 1).is_allowed());
        assert_eq!(
            limit.acquire(&mut empty, SEC + 50 * MS, 1),
            Decision::Deny {
                state: BucketState {
                    remaining: 5,
                    reset_after: 50 * MS
                },
                retry_after: Some(50 * MS)
            }
        );
        assert!(limit.acquire(&mut empty, SEC + 100 * MS, 1).is_allowed());
        limit.refund(&mut empty, SEC + 100 * MS, 1, SEC + 100 * MS);
        assert!(limit.is_fresh(&empty, SEC + 100 * MS));
    }

    #[test]
    fn cancelling_the_last_restores_exactly_and_a_middle_one_gives_nothing() {
        let limit = leaky(10, 1, 5);
        let now = SEC;
        let mut empty = 0;
        limit.reserve(&mut empty, now, 1, NO_LIMIT);
        let held: Vec<_> = (0..3)
            .map(|_| {
                let before = empty;
                (before, limit.reserve(&mut empty, now, 1, NO_LIMIT).wait())
            })
            .collect();
        // The middle one: later holds keep their turn, nothing comes back.
        let full = empty;
        limit.cancel(&mut empty, now + 10 * MS, 1, now + held[1].1);
        assert_eq!(empty, full);
        // The last one: exactly as before it.
        limit.cancel(&mut empty, now + 10 * MS, 1, now + held[2].1);
        assert_eq!(empty, held[2].0);
        // ... so the next newcomer takes its turn, not earlier.
        assert_eq!(
            limit.reserve(&mut empty, now + 10 * MS, 1, NO_LIMIT).wait(),
            held[2].1 - 10 * MS
        );
        // A cancel after the instant gives nothing back.
        let before = empty;
        limit.cancel(&mut empty, now + held[2].1 + 1, 1, now + held[2].1);
        assert_eq!(empty, before);
    }

    #[test]
    fn a_charge_keeps_the_outlet_busy() {
        // 10/s: 100 ms a unit.
        let limit = leaky(10, 1, 3);
        let mut empty = 0;
        limit.charge(&mut empty, SEC, 5);
        assert_eq!(empty, SEC + 500 * MS);
        assert_eq!(
            limit.acquire(&mut empty, SEC + 100 * MS, 1),
            Decision::Deny {
                state: BucketState {
                    remaining: 0,
                    reset_after: 400 * MS
                },
                retry_after: Some(400 * MS)
            }
        );
        // A hold waits behind it.
        assert_eq!(
            limit
                .reserve(&mut empty, SEC + 300 * MS, 1, NO_LIMIT)
                .wait(),
            200 * MS
        );
        limit.charge(&mut empty, SEC, 0);
        assert_eq!(empty, SEC + 600 * MS);
    }

    #[test]
    fn a_late_refund_is_exact_only_while_the_units_are_last() {
        let limit = leaky(10, 1, 3);
        let mut empty = 0;
        assert!(limit.acquire(&mut empty, SEC, 2).is_allowed());
        limit.refund(&mut empty, SEC + 50 * MS, 2, SEC);
        assert!(limit.is_fresh(&empty, SEC + 50 * MS));
        // Behind a hold: the hold keeps its turn, nothing comes back.
        assert!(limit.acquire(&mut empty, 2 * SEC, 1).is_allowed());
        assert_eq!(
            limit.reserve(&mut empty, 2 * SEC, 1, NO_LIMIT).wait(),
            100 * MS
        );
        let before = empty;
        limit.refund(&mut empty, 2 * SEC + 10 * MS, 1, 2 * SEC);
        assert_eq!(empty, before);
    }

    #[test]
    fn a_closed_bucket_never_admits_nor_holds() {
        let limit = leaky(0, 1, 5);
        let mut empty = 0;
        assert_eq!(limit.reserve(&mut empty, SEC, 1, NO_LIMIT), CLOSED);
        assert_eq!(limit.acquire(&mut empty, SEC, 1), CLOSED);
        assert_eq!(limit.capacity(), 5);
    }
}
