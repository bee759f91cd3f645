//! Token bucket as GCRA (generic cell rate algorithm).
//!
//! State is one number per key: the theoretical arrival time (TAT), the
//! instant at which the bucket will be full again. With emission interval `T`
//! (period / COUNT) and tolerance `τ = T × burst`, a request of cost `c` at
//! `now` is admitted when `max(TAT, now) + c·T − now ≤ τ`. This is exactly a
//! token bucket of capacity `burst` refilled continuously at COUNT/period, in
//! O(1) state. A TAT far in the future is a bucket in debt; deferred charges
//! (later issue) push it there with [`Gcra::charge`], and admission then
//! waits until the debt is paid off.
//!
//! A state of 0 is a fresh, full bucket; any TAT at or before `now` is
//! indistinguishable from a fresh one, which is what makes eviction safe.
//! A `now` earlier than another thread's (out-of-order clock reads) only sees
//! the bucket emptier than it is.

use super::{Algorithm, BucketState, Decision};
use crate::clock::Nanos;
use crate::config::Rate;

/// A token bucket's parameters, precomputed for the request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    /// Nanoseconds per unit (`T`); 0 when the route is closed (COUNT 0).
    emission: Nanos,
    /// `τ = T × capacity`.
    tolerance: Nanos,
    capacity: u64,
}

/// The result of one GCRA step: the decision and, when the request was
/// admitted, the TAT to store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub decision: Decision,
    pub new_tat: Option<Nanos>,
}

impl Gcra {
    /// A bucket of `capacity` units refilled at `rate`.
    pub fn new(rate: Rate, capacity: u64) -> Gcra {
        if rate.count == 0 || capacity == 0 {
            return Gcra {
                emission: 0,
                tolerance: 0,
                capacity: 0,
            };
        }
        let period = rate.period.as_nanos().min(u64::MAX as u128) as u64;
        let emission = (period / rate.count).max(1);
        Gcra {
            emission,
            tolerance: emission.saturating_mul(capacity),
            capacity,
        }
    }

    /// The bucket's capacity (`burst`).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Whether this bucket can never admit anything (COUNT 0).
    pub fn is_closed(&self) -> bool {
        self.emission == 0
    }

    /// Tries to take `cost` units at `now` from a bucket whose TAT is `tat`;
    /// returns the decision and the TAT to store if admitted.
    #[inline]
    pub fn step(&self, tat: Nanos, now: Nanos, cost: u64) -> Step {
        if self.is_closed() {
            return Step {
                decision: Decision::Deny {
                    state: BucketState {
                        remaining: 0,
                        reset_after: 0,
                    },
                    retry_after: None,
                },
                new_tat: None,
            };
        }
        let base = tat.max(now);
        let new_tat = base.saturating_add(self.emission.saturating_mul(cost));
        let needed = new_tat - now;
        if needed <= self.tolerance {
            Step {
                decision: Decision::Allow(BucketState {
                    remaining: (self.tolerance - needed) / self.emission,
                    reset_after: needed,
                }),
                new_tat: Some(new_tat),
            }
        } else {
            let debt = base - now;
            Step {
                decision: Decision::Deny {
                    state: BucketState {
                        remaining: self.tolerance.saturating_sub(debt) / self.emission,
                        reset_after: debt,
                    },
                    // A cost above the capacity never fits; config validation
                    // forbids it, this keeps the answer honest regardless.
                    retry_after: (self.emission.saturating_mul(cost) <= self.tolerance)
                        .then_some(needed - self.tolerance),
                },
                new_tat: None,
            }
        }
    }

    /// Gives back `cost` units taken by [`Gcra::acquire`] (a rollback when a
    /// later rule rejected the request). Never makes the bucket fuller than
    /// full: a TAT before `now` means full whatever its value.
    #[inline]
    pub fn refund(&self, tat: Nanos, cost: u64) -> Nanos {
        tat.saturating_sub(self.emission.saturating_mul(cost))
    }

    /// Whether a bucket with this TAT is indistinguishable from a fresh one.
    #[inline]
    pub fn is_full(tat: Nanos, now: Nanos) -> bool {
        tat <= now
    }

    /// The bucket state without taking anything (for headers and admin views).
    pub fn peek(&self, tat: Nanos, now: Nanos) -> BucketState {
        if self.is_closed() {
            return BucketState {
                remaining: 0,
                reset_after: 0,
            };
        }
        let debt = tat.saturating_sub(now);
        BucketState {
            remaining: self.tolerance.saturating_sub(debt) / self.emission,
            reset_after: debt,
        }
    }
}

impl Algorithm for Gcra {
    /// The TAT.
    type State = Nanos;

    #[inline]
    fn acquire(&self, tat: &mut Nanos, now: Nanos, cost: u64) -> Decision {
        let step = Gcra::step(self, *tat, now, cost);
        if let Some(new_tat) = step.new_tat {
            *tat = new_tat;
        }
        step.decision
    }

    fn peek(&self, tat: &Nanos, now: Nanos, cost: u64) -> Decision {
        match Gcra::step(self, *tat, now, cost).decision {
            Decision::Allow(_) => Decision::Allow(Gcra::peek(self, *tat, now)),
            deny => deny,
        }
    }

    #[inline]
    fn refund(&self, tat: &mut Nanos, _now: Nanos, cost: u64) {
        *tat = Gcra::refund(self, *tat, cost);
    }

    #[inline]
    fn is_fresh(&self, tat: &Nanos, now: Nanos) -> bool {
        Gcra::is_full(*tat, now)
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SEC: Nanos = 1_000_000_000;

    fn rate(count: u64, secs: u64) -> Rate {
        Rate {
            count,
            period: Duration::from_secs(secs),
        }
    }

    /// Runs `n` requests at `now`, storing TATs like a store would.
    fn burst(gcra: &Gcra, tat: &mut Nanos, now: Nanos, n: u64) -> u64 {
        let mut admitted = 0;
        for _ in 0..n {
            let step = gcra.step(*tat, now, 1);
            if let Some(t) = step.new_tat {
                *tat = t;
                admitted += 1;
            }
        }
        admitted
    }

    #[test]
    fn a_fresh_bucket_admits_exactly_its_burst() {
        let gcra = Gcra::new(rate(100, 60), 100);
        let mut tat = 0;
        assert_eq!(burst(&gcra, &mut tat, 10 * SEC, 150), 100);
    }

    #[test]
    fn remaining_counts_down_and_reset_is_time_to_full() {
        let gcra = Gcra::new(rate(10, 10), 10);
        let now = 5 * SEC;
        let first = gcra.step(0, now, 1);
        assert_eq!(
            first.decision,
            Decision::Allow(BucketState {
                remaining: 9,
                reset_after: SEC
            })
        );
        let second = gcra.step(first.new_tat.unwrap(), now, 1);
        assert_eq!(second.decision.state().remaining, 8);
        assert_eq!(second.decision.state().reset_after, 2 * SEC);
    }

    #[test]
    fn the_request_after_the_burst_is_told_when_to_retry() {
        let gcra = Gcra::new(rate(100, 60), 100);
        let mut tat = 0;
        let now = SEC;
        burst(&gcra, &mut tat, now, 100);
        let step = gcra.step(tat, now, 1);
        assert_eq!(step.new_tat, None);
        match step.decision {
            Decision::Deny { state, retry_after } => {
                assert_eq!(state.remaining, 0);
                assert_eq!(state.reset_after, 60 * SEC);
                // One unit refills every 600 ms.
                assert_eq!(retry_after, Some(600_000_000));
            }
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[test]
    fn the_bucket_refills_continuously() {
        let gcra = Gcra::new(rate(10, 1), 10);
        let mut tat = 0;
        assert_eq!(burst(&gcra, &mut tat, SEC, 10), 10);
        assert_eq!(burst(&gcra, &mut tat, SEC, 1), 0);
        // 350 ms later three units (100 ms each) are back, not four.
        assert_eq!(burst(&gcra, &mut tat, SEC + 350_000_000, 10), 3);
        // After a long idle period the bucket is full, never fuller.
        assert_eq!(burst(&gcra, &mut tat, 100 * SEC, 20), 10);
    }

    #[test]
    fn burst_sets_capacity_independently_of_rate() {
        let gcra = Gcra::new(rate(1, 1), 5);
        let mut tat = 0;
        assert_eq!(burst(&gcra, &mut tat, SEC, 10), 5);
        assert_eq!(gcra.capacity(), 5);
    }

    #[test]
    fn a_closed_route_never_admits_and_never_promises_a_retry() {
        let gcra = Gcra::new(rate(0, 60), 0);
        let step = gcra.step(0, SEC, 1);
        assert_eq!(
            step.decision,
            Decision::Deny {
                state: BucketState {
                    remaining: 0,
                    reset_after: 0
                },
                retry_after: None
            }
        );
    }

    #[test]
    fn a_cost_above_capacity_is_never_promised_a_retry() {
        let gcra = Gcra::new(rate(5, 1), 5);
        match gcra.step(0, SEC, 6).decision {
            Decision::Deny { retry_after, .. } => assert_eq!(retry_after, None),
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    #[test]
    fn a_refund_restores_exactly_what_was_taken() {
        let gcra = Gcra::new(rate(4, 4), 4);
        let now = 10 * SEC;
        let mut tat = 0;
        burst(&gcra, &mut tat, now, 3);
        let taken = gcra.step(tat, now, 1).new_tat.unwrap();
        assert_eq!(gcra.peek(taken, now).remaining, 0);
        let refunded = gcra.refund(taken, 1);
        assert_eq!(refunded, tat);
        assert_eq!(gcra.peek(refunded, now).remaining, 1);
    }

    #[test]
    fn full_buckets_are_indistinguishable_from_fresh_ones() {
        let gcra = Gcra::new(rate(10, 1), 10);
        let now = 50 * SEC;
        let taken = gcra.step(0, now, 1).new_tat.unwrap();
        assert!(!Gcra::is_full(taken, now));
        // Once refilled, the stored TAT decides exactly as a fresh bucket does.
        let later = taken + SEC;
        assert!(Gcra::is_full(taken, later));
        assert_eq!(gcra.step(taken, later, 1), gcra.step(0, later, 1));
    }

    #[test]
    fn a_bucket_in_debt_waits_until_the_debt_is_paid() {
        let gcra = Gcra::new(rate(10, 1), 10);
        let now = SEC;
        // A deferred charge of 30 units: the balance is 20 below zero.
        let tat = now + 30 * 100_000_000 + 10 * 100_000_000;
        let step = gcra.step(tat, now, 1);
        match step.decision {
            Decision::Deny { state, retry_after } => {
                assert_eq!(state.remaining, 0);
                assert_eq!(retry_after, Some(3_100_000_000));
            }
            other => panic!("expected a denial, got {other:?}"),
        }
    }
}
