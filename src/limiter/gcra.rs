//! Token bucket as GCRA (generic cell rate algorithm).
//!
//! State is one number per key: the theoretical arrival time (TAT), the
//! instant at which the bucket will be full again. With emission interval `T`
//! (period / COUNT) and tolerance `τ = T × burst`, a request of cost `c` at
//! `now` is admitted when `max(TAT, now) + c·T − now ≤ τ`. This is exactly a
//! token bucket of capacity `burst` refilled continuously at COUNT/period, in
//! O(1) state. A TAT far in the future is a bucket in debt; deferred charges
//! (later issue) push it there, and admission then
//! waits until the debt is paid off.
//!
//! A state of 0 is a fresh, full bucket; any TAT at or before `now` is
//! indistinguishable from a fresh one, which is what makes eviction safe.
//! A `now` earlier than another thread's (out-of-order clock reads) only sees
//! the bucket emptier than it is.
//!
//! Delay mode is GCRA's virtual scheduling: a request of cost `c` passes at
//! `p = max(TAT, now) + c·T − τ` (at once when `p ≤ now`), and taking it
//! moves the TAT to `p + τ` even when that is far ahead: a reservation is
//! debt that later arrivals queue behind, each exactly `c·T` after the
//! previous one. Since `c·T ≤ τ`, `max(TAT, p) = max(TAT, now)` for a held
//! request, so the TAT evolves exactly as if the request had arrived at `p`:
//! the pass instants are a sequence plain GCRA admits, and the token
//! bucket's bound (at most `burst + L/T` units in any interval of length `L`)
//! holds for them. The units waiting at `now` are the debt beyond `τ`,
//! `⌈(TAT − now − τ) / T⌉`.

use super::{scale_up, Algorithm, BucketState, Carry, Decision, HoldLimits, Rate};
use crate::clock::Nanos;

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

    /// Units reserved and not passed yet at `now`: the debt beyond `τ`,
    /// rounded up to whole units. With a chain of holds of cost `c` (each
    /// `c·T` after the previous) the number of held requests is
    /// `⌈(TAT − now − τ) / (c·T)⌉`; `queued + c ≤ Q·c` is then exactly
    /// "fewer than `Q` requests wait".
    #[inline]
    pub fn queued(&self, tat: Nanos, now: Nanos) -> u64 {
        if self.is_closed() {
            return 0;
        }
        tat.saturating_sub(now)
            .saturating_sub(self.tolerance)
            .div_ceil(self.emission)
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

    /// The debt `TAT − now` is the spent units times `T`: keeping the spent
    /// units scales it by `T'/T`, keeping the share by `τ'/τ`.
    fn carry_from(&self, from: &Gcra, tat: &mut Nanos, now: Nanos, carry: Carry) {
        if *tat <= now || from.is_closed() || self.is_closed() {
            return;
        }
        let debt = *tat - now;
        let debt = match carry {
            Carry::KeepSpent => scale_up(debt, self.emission, from.emission),
            Carry::KeepShare => scale_up(debt, self.tolerance, from.tolerance),
        };
        *tat = now.saturating_add(debt);
    }

    /// Virtual scheduling (see the module doc). `Allow` exactly when
    /// [`Algorithm::acquire`] admits. A `Hold` needs `wait ≤ max_wait` and
    /// `queued + cost ≤ max_queued`, where `queued` is [`Gcra::queued`]
    /// (the units already waiting); a `Deny`'s `retry_after` is the wait
    /// (for GCRA the instant a request would pass without waiting is its
    /// pass instant).
    fn reserve(&self, tat: &mut Nanos, now: Nanos, cost: u64, limits: HoldLimits) -> Decision {
        let step = Gcra::step(self, *tat, now, cost);
        if let Some(new_tat) = step.new_tat {
            *tat = new_tat;
            return step.decision;
        }
        match step.decision {
            Decision::Deny {
                retry_after: Some(wait),
                ..
            } if wait <= limits.max_wait
                && self.queued(*tat, now).saturating_add(cost) <= limits.max_queued =>
            {
                // Denied with a retry means the base is the TAT (a fresh base
                // of `now` would have admitted, since `c·T ≤ τ`).
                let new_tat = (*tat)
                    .max(now)
                    .saturating_add(self.emission.saturating_mul(cost));
                *tat = new_tat;
                Decision::Hold {
                    state: BucketState {
                        remaining: 0,
                        reset_after: new_tat - now,
                    },
                    wait,
                }
            }
            deny => deny,
        }
    }

    /// Right after a reservation that passes at `at` the TAT is `at + τ`
    /// (`p = TAT − τ`, whatever the cost); any later reservation moves it
    /// further. So while `now ≤ at`:
    ///
    /// - `TAT > at + τ`: something was reserved after it; later holds keep
    ///   their instants and nothing is given back (returning the units would
    ///   let a newcomer pass at an instant already promised to a hold, above
    ///   the burst).
    /// - `TAT = at + τ`: it is the last one (any later ones were cancelled
    ///   exactly); `TAT − c·T` is the TAT before it.
    /// - `TAT < at + τ`: it was admitted at once (`at` = the `now` it was
    ///   made at) and only admissions at once followed it; while `now ≤ at`
    ///   those came at the same instant, where GCRA steps commute, so taking
    ///   `c·T` off is exact (this is the rollback of a multi-limit request).
    ///
    /// Once `now > at` nothing is given back: the TAT no longer tells an
    /// admission at `at` followed by others from a later one.
    fn cancel(&self, tat: &mut Nanos, now: Nanos, cost: u64, at: Nanos) {
        if self.is_closed() || now > at || *tat > at.saturating_add(self.tolerance) {
            return;
        }
        *tat = Gcra::refund(self, *tat, cost);
    }

    /// When the reservation is the last (`TAT ≤ at + τ`, as for [`cancel`]),
    /// `TAT − c·T` is the TAT before it, and an arrival at `to` on that TAT
    /// always conforms (it passed at `at ≤ to` already), leaving
    /// `max(TAT − c·T, to) + c·T`: exactly the bucket of a request that
    /// passed at `to`. Later arrivals queue behind it.
    ///
    /// [`cancel`]: Algorithm::cancel
    fn reschedule(&self, tat: &mut Nanos, now: Nanos, cost: u64, at: Nanos, to: Nanos) -> bool {
        if self.is_closed() || now > at || to < at || *tat > at.saturating_add(self.tolerance) {
            return false;
        }
        let before = Gcra::refund(self, *tat, cost);
        *tat = before
            .max(to)
            .saturating_add(self.emission.saturating_mul(cost));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{rate, SEC};

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

    const MS: Nanos = 1_000_000;

    fn limits(max_wait: Nanos, max_queued: u64) -> HoldLimits {
        HoldLimits {
            max_wait,
            max_queued,
        }
    }

    #[test]
    fn held_requests_pass_one_interval_apart_in_arrival_order() {
        // 10/s, burst 2: two pass at once, then one every 100 ms.
        let gcra = Gcra::new(rate(10, 1), 2);
        let now = 5 * SEC;
        let mut tat = 0;
        let decisions: Vec<_> = (0..5)
            .map(|_| gcra.reserve(&mut tat, now, 1, limits(SEC, 10)))
            .collect();
        assert!(matches!(decisions[0], Decision::Allow(_)));
        assert!(matches!(decisions[1], Decision::Allow(_)));
        assert_eq!(
            decisions.iter().map(Decision::wait).collect::<Vec<_>>(),
            [0, 0, 100 * MS, 200 * MS, 300 * MS]
        );
        assert_eq!(
            decisions[4],
            Decision::Hold {
                state: BucketState {
                    remaining: 0,
                    // Full once the three held units and the burst are paid.
                    reset_after: 500 * MS
                },
                wait: 300 * MS
            }
        );
        assert_eq!(gcra.queued(tat, now), 3);
        assert_eq!(gcra.queued(tat, now + 150 * MS), 2);
        assert!(!gcra.is_fresh(&tat, now + 500 * MS - 1));
        assert!(gcra.is_fresh(&tat, now + 500 * MS));
    }

    #[test]
    fn max_queue_requests_may_wait_and_the_next_is_refused() {
        for cost in [1, 2, 3] {
            // 10/s, burst 6, max_queue 3.
            let gcra = Gcra::new(rate(10, 1), 6);
            let now = SEC;
            let mut tat = 0;
            let hold = limits(10 * SEC, 3 * cost);
            let passed = (0..6 / cost)
                .filter(|_| matches!(gcra.reserve(&mut tat, now, cost, hold), Decision::Allow(_)))
                .count() as u64;
            assert_eq!(passed, 6 / cost);
            for k in 1..=3 {
                assert_eq!(
                    gcra.reserve(&mut tat, now, cost, hold).wait(),
                    k * cost * 100 * MS,
                    "cost {cost}"
                );
            }
            let before = tat;
            match gcra.reserve(&mut tat, now, cost, hold) {
                Decision::Deny { state, retry_after } => {
                    assert_eq!(state.remaining, 0);
                    // The wait it would have needed.
                    assert_eq!(retry_after, Some(4 * cost * 100 * MS));
                }
                other => panic!("cost {cost}: expected a denial, got {other:?}"),
            }
            assert_eq!(tat, before);
            // When the first held request passes, one more may join, behind
            // the other two.
            let later = now + cost * 100 * MS;
            assert_eq!(
                gcra.reserve(&mut tat, later, cost, hold).wait(),
                3 * cost * 100 * MS,
                "cost {cost}"
            );
        }
    }

    #[test]
    fn a_request_that_would_wait_longer_than_max_wait_is_refused_at_once() {
        let gcra = Gcra::new(rate(10, 1), 1);
        let now = SEC;
        let mut tat = 0;
        let hold = limits(250 * MS, 100);
        assert!(gcra.reserve(&mut tat, now, 1, hold).is_allowed());
        assert_eq!(gcra.reserve(&mut tat, now, 1, hold).wait(), 100 * MS);
        assert_eq!(gcra.reserve(&mut tat, now, 1, hold).wait(), 200 * MS);
        let before = tat;
        let denied = gcra.reserve(&mut tat, now, 1, hold);
        assert_eq!(denied, Algorithm::peek(&gcra, &tat, now, 1));
        assert_eq!(
            denied,
            Decision::Deny {
                state: BucketState {
                    remaining: 0,
                    reset_after: 300 * MS
                },
                retry_after: Some(300 * MS)
            }
        );
        assert_eq!(tat, before);
        // A cost above the burst never waits.
        assert_eq!(
            gcra.reserve(&mut 0, now, 2, limits(u64::MAX, u64::MAX)),
            gcra.step(0, now, 2).decision
        );
    }

    #[test]
    fn cancelling_the_last_hold_restores_exactly_a_middle_one_gives_nothing() {
        let gcra = Gcra::new(rate(10, 1), 1);
        let now = SEC;
        let hold = limits(SEC, 10);
        let mut tat = 0;
        gcra.reserve(&mut tat, now, 1, hold);
        let mut held = Vec::new();
        for _ in 0..3 {
            let before = tat;
            let wait = gcra.reserve(&mut tat, now, 1, hold).wait();
            held.push((before, now + wait));
        }
        let full = tat;
        // The middle one: later holds keep their instants; giving its unit
        // back would let a newcomer pass at the last one's instant.
        gcra.cancel(&mut tat, now + 10 * MS, 1, held[1].1);
        assert_eq!(tat, full);
        // The last one: the TAT from before it.
        gcra.cancel(&mut tat, now + 10 * MS, 1, held[2].1);
        assert_eq!(tat, held[2].0);
        // The next newcomer passes where the cancelled one would have.
        let again = gcra.reserve(&mut tat, now + 10 * MS, 1, hold);
        assert_eq!(now + 10 * MS + again.wait(), held[2].1);
        // Nothing once the instant has passed.
        let before = tat;
        gcra.cancel(&mut tat, held[2].1 + 1, 1, held[2].1);
        assert_eq!(tat, before);
    }

    #[test]
    fn cancelling_a_request_admitted_at_once_at_the_same_instant_is_a_refund() {
        let gcra = Gcra::new(rate(10, 1), 5);
        let now = SEC;
        let hold = limits(SEC, 10);
        let mut tat = 0;
        gcra.reserve(&mut tat, now, 1, hold);
        let before = tat;
        assert!(matches!(
            gcra.reserve(&mut tat, now, 2, hold),
            Decision::Allow(_)
        ));
        // Another admission at the same instant in between: steps commute.
        gcra.reserve(&mut tat, now, 1, hold);
        gcra.cancel(&mut tat, now, 2, now);
        assert_eq!(tat, gcra.step(before, now, 1).new_tat.unwrap());
        // Later on, an admission at once is used: nothing comes back.
        let used = tat;
        gcra.cancel(&mut tat, now + 1, 1, now);
        assert_eq!(tat, used);
    }

    #[test]
    fn a_rescheduled_reservation_counts_where_it_passes() {
        let gcra = Gcra::new(rate(10, 1), 1);
        let now = SEC;
        let hold = limits(SEC, 10);
        let mut tat = 0;
        // Admitted at once, but another limit holds the request 500 ms.
        assert_eq!(gcra.reserve(&mut tat, now, 1, hold).wait(), 0);
        assert!(gcra.reschedule(&mut tat, now, 1, now, now + 500 * MS));
        // The next request passes 100 ms after it, not 100 ms after `now`.
        assert_eq!(gcra.reserve(&mut tat, now, 1, hold).wait(), 600 * MS);
        // That one is now the last; the first is not and stays put.
        let before = tat;
        assert!(!gcra.reschedule(&mut tat, now, 1, now + 500 * MS, now + 900 * MS));
        assert_eq!(tat, before);
        assert!(gcra.reschedule(&mut tat, now, 1, now + 600 * MS, now + 900 * MS));
        assert_eq!(gcra.reserve(&mut tat, now, 1, hold).wait(), 1000 * MS);
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
