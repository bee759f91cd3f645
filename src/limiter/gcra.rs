//! Token bucket as GCRA (generic cell rate algorithm).
//!
//! The theoretical arrival time (TAT) is the instant at which the bucket will
//! be full again. With emission interval `T` (period / COUNT) and tolerance
//! `τ = T × burst`, a request of cost `c` at `now` is admitted when
//! `max(TAT, now) + c·T − now ≤ τ`. This is exactly a token bucket of
//! capacity `burst` refilled continuously at COUNT/period, in O(1) state. A
//! TAT past `now + τ` is a bucket in debt: a charge moves the TAT to
//! `max(TAT, now) + units·T` whatever it finds, and admission then waits
//! until the debt is paid off (the step below needs nothing special for it).
//!
//! A fresh state is a full bucket; any TAT at or before `now` is
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
//!
//! Refunds. Moving the TAT back by `c·T` gives `c` units back exactly only
//! while nothing was taken after them: a later take that found the bucket
//! nearly full would have found it full without them, and the refill it
//! lost then is not the refund's to hand out. (`burst` 10 at 1/s: 5 units
//! taken at 0 s, 6 at 4 s; giving the first 5 back by moving the TAT back
//! would let 8 more pass at 4 s, 14 at one instant.) Exactly, units taken at
//! `t` may come back up to the least debt (`TAT − instant`) that any take
//! after `t` found. The TAT alone cannot tell, so a state keeps a bound
//! beside it: a mark `M` (an instant) and a headroom `H`, at most the least
//! debt that any take strictly after `M` found, less what refunds gave back
//! since (unbounded while nothing was taken after `M`). Units taken at or
//! after `M` come back up to `H`; units taken before it come back only at
//! the instant they were taken (a rollback, after which nothing can have
//! been taken). A take that finds the bucket full moves `M` to it, with `H`
//! unbounded: nothing before it can matter any more. So does an admission
//! that would leave `H` below its own cost, so that `H` does not stay at the
//! small debts of the first takes of a busy period for the whole period;
//! units taken before such a move come back no more. In memory both fit in
//! one word beside the TAT. After a take that found the bucket full it holds
//! the units taken since (`M = TAT − units·T`, `H` unbounded): one shift of
//! the cost, on the path most decisions take. Otherwise it holds `M`'s
//! distance below the TAT in nanoseconds (48 bits, about 78 hours) and `H`
//! in grains of `2^k` ns (`k = ⌊log₂ T⌋ − 8`, 15 bits: at most 64–128
//! units); both round towards giving back less.

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
    /// log₂ of the headroom's grain in nanoseconds: about `T / 256`.
    grain_bits: u32,
}

/// A token bucket's per-key state: the TAT, and what refunds may give back
/// (see the module doc). The default is a fresh, full bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenState {
    /// The theoretical arrival time.
    tat: Nanos,
    /// The refund mark and headroom. Bit 0 clear: bits 1.. count the units
    /// taken at the mark or before it since it was set, nothing was taken
    /// after it (the headroom is unbounded), and the mark is
    /// `TAT − units·T`. Bit 0 set: bits 1–15 hold the headroom in grains
    /// (all ones: unbounded), bits 16–63 the mark's distance below the TAT
    /// in nanoseconds.
    refunds: u64,
}

const DISTANCE_FORM: u64 = 1;
const HEADROOM_BITS: u32 = 15;
/// The headroom of a mark that nothing was taken after.
const UNBOUNDED: u64 = (1 << HEADROOM_BITS) - 1;
const MAX_HEADROOM: u64 = UNBOUNDED - 1;
const DISTANCE_SHIFT: u32 = HEADROOM_BITS + 1;
const MAX_MARK_DISTANCE: u64 = u64::MAX >> DISTANCE_SHIFT;
const MAX_UNITS: u64 = u64::MAX >> 1;
/// The largest grain, `2^47` ns, keeps `MAX_HEADROOM` grains within a u64.
const MAX_GRAIN_BITS: u32 = 47;

impl TokenState {
    /// The theoretical arrival time: the instant the bucket is full again.
    pub fn tat(&self) -> Nanos {
        self.tat
    }

    /// Stores the TAT, the mark `distance` below it (saturating: the mark
    /// moves later, never earlier) and the headroom.
    #[inline]
    fn keep(&mut self, tat: Nanos, distance: Nanos, headroom: u64) {
        self.tat = tat;
        self.refunds =
            (distance.min(MAX_MARK_DISTANCE) << DISTANCE_SHIFT) | (headroom << 1) | DISTANCE_FORM;
    }

    /// Stores the TAT, with the mark `units·T` below it and nothing taken
    /// after the mark. `units` at most [`MAX_UNITS`].
    #[inline]
    fn keep_units(&mut self, tat: Nanos, units: u64) {
        self.tat = tat;
        self.refunds = units << 1;
    }
}

/// The result of one GCRA step: the decision and, when the request was
/// admitted, the TAT to store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub decision: Decision,
    pub new_tat: Option<Nanos>,
}

impl Gcra {
    /// A bucket of `capacity` units refilled at `rate` (a capacity is at
    /// most 2^63 − 1 units, far above anything config allows).
    pub fn new(rate: Rate, capacity: u64) -> Gcra {
        let capacity = capacity.min(MAX_UNITS);
        if rate.count == 0 || capacity == 0 {
            return Gcra {
                emission: 0,
                tolerance: 0,
                capacity: 0,
                grain_bits: 0,
            };
        }
        let period = rate.period.as_nanos().min(u64::MAX as u128) as u64;
        let emission = (period / rate.count).max(1);
        Gcra {
            emission,
            tolerance: emission.saturating_mul(capacity),
            capacity,
            grain_bits: emission.ilog2().saturating_sub(8).min(MAX_GRAIN_BITS),
        }
    }

    /// The bucket's capacity (`burst`).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// One of `instances` equal shares of this bucket: its rate divided by
    /// `instances`, its capacity too, rounded up (the refund grain stays,
    /// so states keep their meaning).
    pub fn share(&self, instances: u64) -> Gcra {
        if self.is_closed() || instances <= 1 {
            return *self;
        }
        let emission = self.emission.saturating_mul(instances);
        let capacity = self.capacity.div_ceil(instances);
        Gcra {
            emission,
            tolerance: emission.saturating_mul(capacity),
            capacity,
            grain_bits: self.grain_bits,
        }
    }

    /// The emission interval `T` and the tolerance `τ`, in nanoseconds
    /// (both 0 when closed): what a networked store's script steps with.
    pub fn intervals(&self) -> (Nanos, Nanos) {
        (self.emission, self.tolerance)
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

    /// Whether a bucket with this TAT is indistinguishable from a fresh one.
    #[inline]
    pub fn is_full(tat: Nanos, now: Nanos) -> bool {
        tat <= now
    }

    /// Units reserved and not passed yet at `now`: the debt beyond `τ`,
    /// rounded up to whole units. With a chain of holds of cost `c` (each
    /// `c·T` after the previous) the number of held requests is
    /// `⌈(TAT − now − τ) / (c·T)⌉`; `queued + c ≤ Q·c` is then exactly
    /// "fewer than `Q` requests wait". A debt from a charge counts as
    /// waiting units too.
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

    /// Whole grains in `nanos`, rounded down, at most [`MAX_HEADROOM`].
    #[inline]
    fn grains(&self, nanos: Nanos) -> u64 {
        (nanos >> self.grain_bits).min(MAX_HEADROOM)
    }

    /// Grains covering `nanos`, rounded up.
    #[inline]
    fn grains_up(&self, nanos: Nanos) -> u64 {
        let whole = nanos >> self.grain_bits;
        whole + u64::from(whole << self.grain_bits != nanos)
    }

    /// The nanoseconds a headroom of `grains` stands for.
    #[inline]
    fn headroom_nanos(&self, grains: u64) -> Nanos {
        if grains == UNBOUNDED {
            return Nanos::MAX;
        }
        grains << self.grain_bits
    }

    /// The refund mark's distance below the TAT, and the headroom in grains
    /// (or [`UNBOUNDED`]).
    #[inline]
    fn refund_mark(&self, state: &TokenState) -> (Nanos, u64) {
        if state.refunds & DISTANCE_FORM == 0 {
            (
                (state.refunds >> 1).saturating_mul(self.emission),
                UNBOUNDED,
            )
        } else {
            (
                state.refunds >> DISTANCE_SHIFT,
                (state.refunds >> 1) & UNBOUNDED,
            )
        }
    }

    /// The refund mark: an instant.
    #[inline]
    fn mark(&self, state: &TokenState) -> Nanos {
        state.tat.saturating_sub(self.refund_mark(state).0)
    }

    /// Moves the TAT to `new_tat` for `units` taken at `now` (at most
    /// [`MAX_UNITS`]), and the refund bookkeeping with it (see the module
    /// doc). `admission`: a request let through (which may move the mark),
    /// not a charge.
    #[inline]
    fn take(
        &self,
        state: &mut TokenState,
        now: Nanos,
        new_tat: Nanos,
        units: u64,
        admission: bool,
    ) {
        if state.tat <= now {
            // Full: nothing taken before `now` can matter any more.
            state.keep_units(new_tat, units);
        } else {
            self.take_in_debt(state, now, new_tat, units, admission);
        }
    }

    /// [`Gcra::take`] from a bucket that is not full: kept apart so that
    /// the common case, a full bucket, stays small where it is inlined.
    #[inline(never)]
    fn take_in_debt(
        &self,
        state: &mut TokenState,
        now: Nanos,
        new_tat: Nanos,
        units: u64,
        admission: bool,
    ) {
        let debt = state.tat - now;
        let spent = new_tat - state.tat;
        let (distance, mut headroom) = self.refund_mark(state);
        // `now` is after the mark (`TAT − distance`) when the debt is less.
        if debt >= distance {
            if state.refunds & DISTANCE_FORM == 0 {
                // At the mark's instant (a burst) or before it: still nothing
                // after the mark.
                let units = (state.refunds >> 1).saturating_add(units).min(MAX_UNITS);
                state.keep_units(new_tat, units);
                return;
            }
        } else {
            headroom = headroom.min(self.grains(debt));
            if admission && self.headroom_nanos(headroom) < spent {
                state.keep(new_tat, new_tat - now, UNBOUNDED);
                return;
            }
        }
        state.keep(new_tat, distance.saturating_add(spent), headroom);
    }

    /// Moves the TAT back by `back`; the mark stays where it is, and the
    /// headroom shrinks by as much unless `keep_headroom`.
    fn give_back(&self, state: &mut TokenState, back: Nanos, keep_headroom: bool) {
        if back == 0 {
            return;
        }
        let tat = state.tat.saturating_sub(back);
        let (distance, headroom) = self.refund_mark(state);
        if back > distance {
            // The TAT falls before the mark, a take's instant: the bucket is
            // full (or, with out-of-order clocks, nearly), and nothing taken
            // before may come back but by a rollback.
            state.keep(tat, 0, 0);
            return;
        }
        let headroom = if keep_headroom || headroom == UNBOUNDED {
            headroom
        } else {
            headroom.saturating_sub(self.grains_up(back))
        };
        state.keep(tat, distance - back, headroom);
    }
}

impl Algorithm for Gcra {
    type State = TokenState;

    // Always inlined into the store's tables, as the one-word step was: a
    // call on the path of every decision costs more than the step itself.
    #[inline(always)]
    fn acquire(&self, state: &mut TokenState, now: Nanos, cost: u64) -> Decision {
        let step = Gcra::step(self, state.tat, now, cost);
        let Some(new_tat) = step.new_tat else {
            return step.decision;
        };
        // Admitted: `cost × T ≤ τ`, so `cost ≤ capacity ≤ MAX_UNITS`.
        self.take(state, now, new_tat, cost, true);
        // The decision again, from what survives the bookkeeping (cheaper
        // than keeping it across the call of a bucket in debt).
        let needed = new_tat - now;
        Decision::Allow(BucketState {
            remaining: (self.tolerance - needed) / self.emission,
            reset_after: needed,
        })
    }

    fn peek(&self, state: &TokenState, now: Nanos, cost: u64) -> Decision {
        match Gcra::step(self, state.tat, now, cost).decision {
            Decision::Allow(_) => Decision::Allow(Gcra::peek(self, state.tat, now)),
            deny => deny,
        }
    }

    fn charge(&self, state: &mut TokenState, now: Nanos, units: u64) {
        if self.is_closed() || units == 0 {
            return;
        }
        let new_tat = state
            .tat
            .max(now)
            .saturating_add(self.emission.saturating_mul(units));
        self.take(state, now, new_tat, units.min(MAX_UNITS), false);
    }

    /// See the module doc. A rollback (`taken_at ≥ now`) moves the TAT back
    /// by `units·T` whatever the mark: nothing was taken at a later instant.
    fn refund(&self, state: &mut TokenState, now: Nanos, units: u64, taken_at: Nanos) {
        if self.is_closed() || units == 0 {
            return;
        }
        let spent = self.emission.saturating_mul(units);
        if taken_at >= now {
            // Nothing was taken after them: units taken after the mark were
            // among the takes the headroom was measured on, and had raised
            // their debts by as much, so the headroom stays valid.
            let after_mark = taken_at > self.mark(state);
            self.give_back(state, spent, after_mark);
            return;
        }
        if Gcra::is_full(state.tat, now) || taken_at < self.mark(state) {
            return;
        }
        let back = spent.min(self.headroom_nanos(self.refund_mark(state).1));
        self.give_back(state, back, false);
    }

    #[inline]
    fn is_fresh(&self, state: &TokenState, now: Nanos) -> bool {
        Gcra::is_full(state.tat, now)
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The debt `TAT − now` is the spent units times `T`: keeping the spent
    /// units scales it by `T'/T`, keeping the share by `τ'/τ`. Units taken
    /// under the old limit no longer come back but by a rollback.
    fn carry_from(&self, from: &Gcra, state: &mut TokenState, now: Nanos, carry: Carry) {
        let mut tat = state.tat;
        if tat > now && !from.is_closed() && !self.is_closed() {
            let debt = tat - now;
            let debt = match carry {
                Carry::KeepSpent => scale_up(debt, self.emission, from.emission),
                Carry::KeepShare => scale_up(debt, self.tolerance, from.tolerance),
            };
            tat = now.saturating_add(debt);
        }
        state.keep(tat, tat.saturating_sub(now), 0);
    }

    /// Virtual scheduling (see the module doc). `Allow` exactly when
    /// [`Algorithm::acquire`] admits. A `Hold` needs `wait ≤ max_wait` and
    /// `queued + cost ≤ max_queued`, where `queued` is [`Gcra::queued`]
    /// (the units already waiting); a `Deny`'s `retry_after` is the wait
    /// (for GCRA the instant a request would pass without waiting is its
    /// pass instant).
    fn reserve(
        &self,
        state: &mut TokenState,
        now: Nanos,
        cost: u64,
        limits: HoldLimits,
    ) -> Decision {
        let step = Gcra::step(self, state.tat, now, cost);
        if let Some(new_tat) = step.new_tat {
            self.take(state, now, new_tat, cost, true);
            return step.decision;
        }
        match step.decision {
            Decision::Deny {
                retry_after: Some(wait),
                ..
            } if wait <= limits.max_wait
                && self.queued(state.tat, now).saturating_add(cost) <= limits.max_queued =>
            {
                // Denied with a retry means the base is the TAT (a fresh base
                // of `now` would have admitted, since `c·T ≤ τ`).
                let new_tat = state
                    .tat
                    .max(now)
                    .saturating_add(self.emission.saturating_mul(cost));
                self.take(state, now, new_tat, cost, true);
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
    /// admission at `at` followed by others from a later one. The refund
    /// headroom shrinks by what is given back.
    fn cancel(&self, state: &mut TokenState, now: Nanos, cost: u64, at: Nanos) {
        if self.is_closed() || now > at || state.tat > at.saturating_add(self.tolerance) {
            return;
        }
        self.give_back(state, self.emission.saturating_mul(cost), false);
    }

    /// When the reservation is the last (`TAT ≤ at + τ`, as for [`cancel`]),
    /// `TAT − c·T` is the TAT before it, and an arrival at `to` on that TAT
    /// always conforms (it passed at `at ≤ to` already), leaving
    /// `max(TAT − c·T, to) + c·T`: exactly the bucket of a request that
    /// passed at `to`. Later arrivals queue behind it. Its units now weigh
    /// on the TAT as a take at `to` would: a reservation made after the
    /// refund mark leaves no headroom.
    ///
    /// [`cancel`]: Algorithm::cancel
    fn reschedule(
        &self,
        state: &mut TokenState,
        now: Nanos,
        cost: u64,
        at: Nanos,
        to: Nanos,
    ) -> bool {
        if self.is_closed() || now > at || to < at || state.tat > at.saturating_add(self.tolerance)
        {
            return false;
        }
        let spent = self.emission.saturating_mul(cost);
        let new_tat = state
            .tat
            .saturating_sub(spent)
            .max(to)
            .saturating_add(spent);
        let moved = new_tat.saturating_sub(state.tat);
        let (distance, headroom) = self.refund_mark(state);
        let headroom = if now > state.tat.saturating_sub(distance) {
            0
        } else {
            headroom
        };
        state.keep(new_tat, distance.saturating_add(moved), headroom);
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
    fn a_rollback_restores_exactly_what_was_taken() {
        let gcra = Gcra::new(rate(4, 4), 4);
        let now = 10 * SEC;
        let mut state = TokenState::default();
        for _ in 0..3 {
            assert!(gcra.acquire(&mut state, now, 1).is_allowed());
        }
        let before = state.tat();
        assert!(gcra.acquire(&mut state, now, 1).is_allowed());
        assert_eq!(Gcra::peek(&gcra, state.tat(), now).remaining, 0);
        gcra.refund(&mut state, now, 1, now);
        assert_eq!(state.tat(), before);
        assert_eq!(Gcra::peek(&gcra, state.tat(), now).remaining, 1);
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
        let mut tat = TokenState::default();
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
        assert_eq!(gcra.queued(tat.tat, now), 3);
        assert_eq!(gcra.queued(tat.tat, now + 150 * MS), 2);
        assert!(!gcra.is_fresh(&tat, now + 500 * MS - 1));
        assert!(gcra.is_fresh(&tat, now + 500 * MS));
    }

    #[test]
    fn max_queue_requests_may_wait_and_the_next_is_refused() {
        for cost in [1, 2, 3] {
            // 10/s, burst 6, max_queue 3.
            let gcra = Gcra::new(rate(10, 1), 6);
            let now = SEC;
            let mut tat = TokenState::default();
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
        let mut tat = TokenState::default();
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
            gcra.reserve(
                &mut TokenState::default(),
                now,
                2,
                limits(u64::MAX, u64::MAX)
            ),
            gcra.step(0, now, 2).decision
        );
    }

    #[test]
    fn cancelling_the_last_hold_restores_exactly_a_middle_one_gives_nothing() {
        let gcra = Gcra::new(rate(10, 1), 1);
        let now = SEC;
        let hold = limits(SEC, 10);
        let mut tat = TokenState::default();
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
        assert_eq!(tat.tat, held[2].0.tat);
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
        let mut tat = TokenState::default();
        gcra.reserve(&mut tat, now, 1, hold);
        let before = tat;
        assert!(matches!(
            gcra.reserve(&mut tat, now, 2, hold),
            Decision::Allow(_)
        ));
        // Another admission at the same instant in between: steps commute.
        gcra.reserve(&mut tat, now, 1, hold);
        gcra.cancel(&mut tat, now, 2, now);
        assert_eq!(tat.tat, gcra.step(before.tat, now, 1).new_tat.unwrap());
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
        let mut tat = TokenState::default();
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
    fn a_charge_puts_the_bucket_in_debt_and_retry_after_follows_the_debt() {
        // 1000/s, burst 1000: one unit every millisecond.
        let gcra = Gcra::new(rate(1000, 1), 1000);
        let now = 100 * SEC;
        let mut state = TokenState::default();
        // 2,500 units from a full bucket: 1,500 below zero.
        gcra.charge(&mut state, now, 2_500);
        assert_eq!(state.tat(), now + 2_500 * MS);
        let denied = Decision::Deny {
            state: BucketState {
                remaining: 0,
                reset_after: 2_500 * MS,
            },
            // The debt, 1.5 s, plus the request's own unit.
            retry_after: Some(1_501 * MS),
        };
        assert_eq!(Algorithm::peek(&gcra, &state, now, 1), denied);
        assert_eq!(gcra.acquire(&mut state, now, 1), denied);
        assert!(!Algorithm::peek(&gcra, &state, now + 1_501 * MS - 1, 1).is_allowed());
        assert!(!gcra.is_fresh(&state, now + 2_500 * MS - 1));
        assert!(gcra.is_fresh(&state, now + 2_500 * MS));
        assert!(gcra.acquire(&mut state, now + 1_501 * MS, 1).is_allowed());
        // Charges add up, and a charge of nothing takes nothing.
        gcra.charge(&mut state, now + 1_501 * MS, 0);
        assert_eq!(state.tat(), now + 2_501 * MS);
        gcra.charge(&mut state, now + 1_501 * MS, 499);
        assert_eq!(state.tat(), now + 3_000 * MS);
    }

    #[test]
    fn a_charge_saturates_instead_of_overflowing() {
        let gcra = Gcra::new(rate(1, 1), 10);
        let mut state = TokenState::default();
        gcra.charge(&mut state, SEC, u64::MAX);
        gcra.charge(&mut state, SEC, u64::MAX);
        assert_eq!(state.tat(), u64::MAX);
        assert!(!gcra.acquire(&mut state, 2 * SEC, 1).is_allowed());
        // A closed route charges nothing.
        let closed = Gcra::new(rate(0, 1), 0);
        let mut state = TokenState::default();
        closed.charge(&mut state, SEC, 5);
        assert_eq!(state, TokenState::default());
    }

    #[test]
    fn a_late_refund_gives_back_only_what_later_takes_did_not_need() {
        // 1/s, burst 10 (the module doc's example).
        let gcra = Gcra::new(rate(1, 1), 10);
        let grain = 1 << gcra.grain_bits;
        let mut state = TokenState::default();
        assert!(gcra.acquire(&mut state, 100 * SEC, 2).is_allowed());
        let later = 100 * SEC + 500 * MS;
        assert!(gcra.acquire(&mut state, later, 1).is_allowed());
        assert_eq!(state.tat(), 103 * SEC);
        // The take at 100.5 s found the bucket 1.5 s in debt: without the 2
        // units, it would have found it full, and the 0.5 s of refill in
        // between is lost. So 1.5 s comes back (to a grain), not 2 s.
        gcra.refund(&mut state, later, 2, 100 * SEC);
        let exact = 101 * SEC + 500 * MS;
        assert!(
            state.tat() >= exact && state.tat() - exact < grain,
            "{state:?}"
        );
        // At 101 s, 9 pass; moving the TAT back by 2 s would have let 10
        // pass there, 11 in half a second with the one at 100.5 s.
        let mut copy = state;
        let passed = (0..20)
            .take_while(|_| gcra.acquire(&mut copy, 101 * SEC, 1).is_allowed())
            .count();
        assert_eq!(passed, 9);
        // The headroom is used up: the unit taken at 100.5 s, refunded a
        // moment later, comes back no more (conservative: each refund may
        // only use what is left of the headroom).
        let before = state;
        gcra.refund(&mut state, later + MS, 1, later);
        assert_eq!(state.tat(), before.tat());
    }

    #[test]
    fn units_taken_before_the_bucket_was_full_again_come_back_no_more() {
        let gcra = Gcra::new(rate(1, 1), 10);
        let mut state = TokenState::default();
        assert!(gcra.acquire(&mut state, 100 * SEC, 5).is_allowed());
        // Full again at 105 s; the whole burst at 120 s.
        assert!(gcra.acquire(&mut state, 120 * SEC, 10).is_allowed());
        gcra.refund(&mut state, 120 * SEC, 5, 100 * SEC);
        assert_eq!(state.tat(), 130 * SEC);
        assert!(!Algorithm::peek(&gcra, &state, 120 * SEC, 1).is_allowed());
        // The burst itself comes back exactly.
        gcra.refund(&mut state, 121 * SEC, 10, 120 * SEC);
        assert_eq!(state.tat(), 120 * SEC);
        assert!(gcra.is_fresh(&state, 121 * SEC));
    }

    #[test]
    fn a_refund_with_nothing_taken_since_is_exact_even_in_debt() {
        // 10/s, burst 10: 100 ms a unit.
        let gcra = Gcra::new(rate(10, 1), 10);
        let mut state = TokenState::default();
        gcra.charge(&mut state, 100 * SEC, 15);
        assert!(!Algorithm::peek(&gcra, &state, 100 * SEC + 400 * MS, 1).is_allowed());
        let before = state;
        let at = 101 * SEC;
        assert!(gcra.acquire(&mut state, at, 1).is_allowed());
        gcra.refund(&mut state, at + 50 * MS, 1, at);
        assert_eq!(state.tat(), before.tat());
        for t in [at, at + 50 * MS, at + 300 * MS] {
            assert_eq!(
                Algorithm::peek(&gcra, &state, t, 1),
                Algorithm::peek(&gcra, &before, t, 1)
            );
        }
        // The same when the request found the bucket full.
        let mut state = TokenState::default();
        assert!(gcra.acquire(&mut state, at, 3).is_allowed());
        gcra.refund(&mut state, at + 250 * MS, 3, at);
        assert!(gcra.is_fresh(&state, at));
    }

    #[test]
    fn a_rollback_is_exact_whatever_was_taken_before() {
        // 10/s, burst 10: 100 ms a unit.
        let gcra = Gcra::new(rate(10, 1), 10);
        let mut state = TokenState::default();
        let now = 100 * SEC;
        assert!(gcra.acquire(&mut state, now, 1).is_allowed());
        // Found 50 ms of debt, less than its own 200 ms: the refund mark
        // moves to it.
        assert!(gcra.acquire(&mut state, now + 50 * MS, 2).is_allowed());
        let before = state;
        assert!(gcra.acquire(&mut state, now + 60 * MS, 1).is_allowed());
        gcra.refund(&mut state, now + 60 * MS, 1, now + 60 * MS);
        assert_eq!(state.tat(), before.tat());
        assert_eq!(state.tat(), now + 300 * MS);
        // Units taken before the mark come back only at their own instant
        // (exactly, 50 ms of the first unit could have come back).
        gcra.refund(&mut state, now + 70 * MS, 1, now);
        assert_eq!(state.tat(), now + 300 * MS);
        // Those taken at the mark, with nothing taken after, come back.
        gcra.refund(&mut state, now + 70 * MS, 2, now + 50 * MS);
        assert_eq!(state.tat(), now + 100 * MS);
    }
}
