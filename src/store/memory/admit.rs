//! The memory store's side of the seam: one request's [`Asks`] answered in
//! one call, and receipts settled after the response.
//!
//! Order of work, which a networked store's script follows too:
//! 1. the ban check of every enforced rule (a banned caller is refused
//!    before any bucket is asked);
//! 2. every rate limit of every enforced rule, all or nothing (delay-mode
//!    limits reserve their units at the first instant they fit);
//! 3. the enforced rules' concurrency permits, after the rates so that a
//!    request refused by a rate never occupies a permit; a refused permit
//!    gives back everything taken in 1–3;
//! 4. a refused request strikes the bans of the rules that refused it;
//! 5. an admitted request asks its shadow rules, each all or nothing, never
//!    holding; what they take is settled like the enforced rules' units.

use smallvec::SmallVec;

use super::MemoryStore;
use crate::clock::Nanos;
use crate::limiter::{BucketState, Decision, Limiter};
use crate::store::admission::{
    Admission, Ask, Asks, Decisions, Handover, Outcome, QueuedPermit, Receipt, RuleAsk, Settle,
    Taken, INLINE,
};
use crate::store::{DrawnFrom, PermitGrant};

/// A concurrency rule's 429 says to come back in a second: permits have no
/// reset instant.
pub const PERMIT_RETRY: Nanos = 1_000_000_000;

/// A concurrency limit with every permit taken (and, in delay mode, no
/// room or time to wait for one).
pub const PERMIT_REFUSED: Decision = Decision::Deny {
    state: BucketState {
        remaining: 0,
        reset_after: 0,
    },
    retry_after: Some(PERMIT_RETRY),
};

/// A request queued for a permit: held behind the permits in flight, for
/// as long as they take (no known wait), nothing left now.
const PERMIT_QUEUED: Decision = Decision::Hold {
    state: BucketState {
        remaining: 0,
        reset_after: 0,
    },
    wait: 0,
};

/// A placeholder decision for limits not asked: reported as full.
pub const UNASKED: Decision = Decision::Allow(BucketState {
    remaining: 0,
    reset_after: 0,
});

impl MemoryStore {
    /// See [`crate::store::Store::admit`]; the steps are the module docs'.
    pub fn admit(&self, asks: &Asks<'_>, now: Nanos, admission: &mut Admission) {
        admission.outcome = Outcome::Admitted;
        admission.decisions.clear();
        match asks.limits.len() {
            // `resize` is not inlined: a push is cheaper for the one
            // limit most requests ask.
            1 => admission.decisions.push(UNASKED),
            limits => admission.decisions.resize(limits, UNASKED),
        }
        admission.receipts.clear();
        admission.queued = None;
        admission.at = now;
        admission.shadow_limited.clear();
        admission.bans_started.clear();

        // 1. Bans.
        for (index, rule) in enforced(asks) {
            if let Some(bans) = rule.bans {
                if let Some(left) = bans.banned(rule.key, now) {
                    admission.outcome = Outcome::Banned { rule: index, left };
                    return;
                }
            }
        }

        // 2. Rates, all or nothing.
        if let ([rule], [ask]) = (&asks.rules[..], &asks.limits[..]) {
            if !rule.shadow && !matches!(ask.limiter, Limiter::Concurrency(_)) {
                // One enforced rule with one rate, the common case: nothing
                // to roll back, no permits, no shadow rules.
                let (decision, from) = self.acquire(ask, now);
                admission.decisions[0] = decision;
                match rate_receipt(0, ask, &decision, from, now) {
                    Some(receipt) => admission.receipts.push(receipt),
                    None => {
                        admission.outcome = Outcome::Limited;
                        if rule.ban.is_some() {
                            self.strike(asks, admission, now);
                        }
                    }
                }
                return;
            }
        }
        let (rates_taken, rate_slots) = self.take_rates(asks, now, admission);

        // 3. Permits.
        if !self.take_permits(asks, now, admission, rates_taken) {
            admission.outcome = Outcome::Limited;
            if rates_taken {
                self.give_back_all(asks, now, admission, &rate_slots);
            }
            // 4. Strikes.
            self.strike(asks, admission, now);
            return;
        }

        // 5. Shadow rules.
        for (index, rule) in asks.rules.iter().enumerate().filter(|(_, r)| r.shadow) {
            if !self.admit_shadow(index, rule, asks, now, admission) {
                admission.shadow_limited.push(index);
            }
        }
    }

    /// Step 2 in general: every rate limit of every enforced rule, all or
    /// nothing, with their receipts when all were taken. Whether they
    /// were, and each rate's (rule, slot).
    fn take_rates(
        &self,
        asks: &Asks<'_>,
        now: Nanos,
        admission: &mut Admission,
    ) -> (bool, SmallVec<[(usize, usize); INLINE]>) {
        let mut rates: SmallVec<[Ask<'_>; INLINE]> = SmallVec::new();
        let mut slots: SmallVec<[(usize, usize); INLINE]> = SmallVec::new();
        for (index, rule) in enforced(asks) {
            for slot in rule.limits.clone() {
                let ask = asks.limits[slot];
                if !matches!(ask.limiter, Limiter::Concurrency(_)) {
                    rates.push(ask);
                    slots.push((index, slot));
                }
            }
        }
        let mut decisions: SmallVec<[Decision; INLINE]> = SmallVec::from_elem(UNASKED, rates.len());
        let mut drawn: SmallVec<[DrawnFrom; INLINE]> =
            SmallVec::from_elem(DrawnFrom::Nowhere, rates.len());
        let admitted =
            rates.is_empty() || self.acquire_all(&rates, now, &mut decisions, &mut drawn);
        for ((rule, slot), (decision, from)) in slots.iter().zip(decisions.iter().zip(&drawn)) {
            admission.decisions[*slot] = *decision;
            if admitted {
                if let Some(receipt) =
                    rate_receipt(*rule, &asks.limits[*slot], decision, *from, now)
                {
                    admission.receipts.push(receipt);
                }
            }
        }
        (admitted, slots)
    }

    /// Step 3: the enforced rules' permits, after the rates; when the rates
    /// were refused (`rates_taken` false), only reported as they are.
    /// Whether the request may pass.
    fn take_permits(
        &self,
        asks: &Asks<'_>,
        now: Nanos,
        admission: &mut Admission,
        rates_taken: bool,
    ) -> bool {
        let mut refused = !rates_taken;
        for (index, rule) in enforced(asks) {
            for slot in rule.limits.clone() {
                let ask = &asks.limits[slot];
                let Limiter::Concurrency(limit) = ask.limiter else {
                    continue;
                };
                let max = Self::permits(ask.table).max_for(limit);
                if refused {
                    admission.decisions[slot] = self.permits_as_they_are(ask);
                    continue;
                }
                let max_queue = ask.hold.map(|hold| hold.max_queued);
                admission.decisions[slot] =
                    match Self::permits(ask.table).acquire(ask.key, max, max_queue) {
                        PermitGrant::Now { in_flight } => {
                            admission.receipts.push(permit_receipt(index, ask, now));
                            permit_decision(max.saturating_sub(in_flight))
                        }
                        PermitGrant::Queued { id, .. } if admission.queued.is_some() => {
                            // A request waits in one permit queue at most:
                            // queueing for a second would hold one permit
                            // while waiting for the other. Refused instead.
                            if !Self::permits(ask.table).leave(ask.key, id) {
                                Self::permits(ask.table).release(ask.key);
                            }
                            refused = true;
                            PERMIT_REFUSED
                        }
                        PermitGrant::Queued { id, ready } => {
                            admission.queued = Some(Box::new(QueuedPermit {
                                receipt: permit_receipt(index, ask, now),
                                handover: Handover::Local { id, ready },
                                max_wait: ask.hold.map_or(0, |hold| hold.max_wait),
                            }));
                            PERMIT_QUEUED
                        }
                        PermitGrant::Refused { .. } => {
                            refused = true;
                            PERMIT_REFUSED
                        }
                    };
            }
        }
        !refused
    }

    /// A permit refused a request whose rates were taken: the rates (then
    /// reported as they are now) and the permits taken before it are given
    /// back.
    fn give_back_all(
        &self,
        asks: &Asks<'_>,
        now: Nanos,
        admission: &mut Admission,
        rate_slots: &[(usize, usize)],
    ) {
        for mut receipt in std::mem::take(&mut admission.receipts) {
            self.settle(&mut receipt, Settle::GiveBack, now);
        }
        if let Some(queued) = admission.queued.take() {
            if !self.leave_queue(&queued) {
                Self::permits(&queued.receipt.table).release(queued.receipt.key);
            }
        }
        for (_, slot) in rate_slots {
            admission.decisions[*slot] =
                Decision::Allow(self.peek(&asks.limits[*slot], now).state());
        }
    }

    /// Asks one shadow rule now or never; its units are kept (and settled)
    /// like an enforced rule's so that a dry run stays faithful.
    fn admit_shadow(
        &self,
        index: usize,
        rule: &RuleAsk<'_>,
        asks: &Asks<'_>,
        now: Nanos,
        admission: &mut Admission,
    ) -> bool {
        let limits = &asks.limits[rule.limits.clone()];
        if let [ask @ Ask {
            limiter: Limiter::Concurrency(limit),
            ..
        }] = limits
        {
            let slot = rule.limits.start;
            let max = Self::permits(ask.table).max_for(limit);
            return match Self::permits(ask.table).acquire(ask.key, max, None) {
                PermitGrant::Now { in_flight } => {
                    admission.decisions[slot] = permit_decision(max.saturating_sub(in_flight));
                    admission.receipts.push(permit_receipt(index, ask, now));
                    true
                }
                PermitGrant::Queued { .. } | PermitGrant::Refused { .. } => {
                    admission.decisions[slot] = self.permits_as_they_are(ask);
                    false
                }
            };
        }
        let now_or_never: SmallVec<[Ask<'_>; INLINE]> = limits
            .iter()
            .map(|ask| Ask { hold: None, ..*ask })
            .collect();
        let mut decisions: SmallVec<[Decision; INLINE]> =
            SmallVec::from_elem(UNASKED, limits.len());
        let mut drawn: SmallVec<[DrawnFrom; INLINE]> =
            SmallVec::from_elem(DrawnFrom::Nowhere, limits.len());
        let admitted = self.acquire_all(&now_or_never, now, &mut decisions, &mut drawn);
        for (offset, (decision, from)) in decisions.iter().zip(&drawn).enumerate() {
            admission.decisions[rule.limits.start + offset] = *decision;
            if admitted {
                if let Some(receipt) =
                    rate_receipt(index, &now_or_never[offset], decision, *from, now)
                {
                    admission.receipts.push(receipt);
                }
            }
        }
        admitted
    }

    /// Counts a strike against the caller of each enforced rule with a
    /// `ban` whose limits refused the request.
    fn strike(&self, asks: &Asks<'_>, admission: &mut Admission, now: Nanos) {
        for (index, rule) in asks.rules.iter().enumerate() {
            let (Some(bans), Some(policy)) = (rule.bans, rule.ban) else {
                continue;
            };
            let refused = admission.decisions[rule.limits.clone()]
                .iter()
                .any(|decision| !decision.is_allowed());
            if !rule.shadow && refused && bans.strike(rule.key, now, *policy) {
                admission.bans_started.push(index);
            }
        }
    }

    /// A concurrency limit reported without taking a permit.
    fn permits_as_they_are(&self, ask: &Ask<'_>) -> Decision {
        let permits = Self::permits(ask.table);
        let max = match ask.limiter {
            Limiter::Concurrency(limit) => permits.max_for(limit),
            other => other.capacity(),
        };
        permit_decision(max.saturating_sub(permits.in_flight(ask.key)))
    }

    /// See [`crate::store::Store::settle`].
    pub fn settle(&self, receipt: &mut Receipt, how: Settle, now: Nanos) {
        let charge = matches!(how, Settle::Charge(_));
        if receipt.settled && !charge {
            return;
        }
        receipt.settled |= !charge;
        let ask = Ask {
            table: &receipt.table,
            key: receipt.key,
            limiter: &receipt.limiter,
            cost: receipt.units,
            hold: None,
        };
        match (receipt.taken, how) {
            (Taken::Permit, Settle::Keep | Settle::GiveBack) => {
                Self::permits(&receipt.table).release(receipt.key);
            }
            (Taken::Permit | Taken::Overflow, Settle::Charge(_)) => {}
            // Leases live in a shared store; the memory store makes none.
            (Taken::Lease { .. }, _) => {}
            (Taken::Bucket | Taken::Overflow | Taken::Reserved { .. }, Settle::Keep) => {}
            // Conservative: the sketch is shared by many keys.
            (Taken::Overflow, Settle::GiveBack) => {}
            (Taken::Reserved { at }, Settle::GiveBack) if now < at => {
                self.cancel(&ask, now, at);
            }
            // Given back to where they were counted: the instant they were
            // taken, or the one a reservation passed at.
            (Taken::Bucket, Settle::GiveBack) => {
                self.refund(&ask, now, receipt.at, DrawnFrom::Bucket);
            }
            (Taken::Reserved { at }, Settle::GiveBack) => {
                self.refund(&ask, now, at, DrawnFrom::Bucket);
            }
            (Taken::Bucket | Taken::Reserved { .. }, Settle::Charge(units)) => {
                self.charge(&ask, units, now);
                receipt.charged = receipt.charged.saturating_add(units);
            }
        }
    }

    /// See [`crate::store::Store::spend`].
    pub fn spend(&self, asks: &Asks<'_>, now: Nanos, after: &mut Decisions) {
        after.clear();
        for ask in &asks.limits {
            if matches!(ask.limiter, Limiter::Concurrency(_)) {
                // Permits are requests in flight, not units to spend.
                after.push(self.permits_as_they_are(ask));
                continue;
            }
            self.charge(ask, ask.cost, now);
            after.push(self.peek(&Ask { cost: 1, ..*ask }, now));
        }
    }

    /// See [`crate::store::Store::peek`].
    pub fn peek_all(&self, asks: &Asks<'_>, now: Nanos, decisions: &mut Decisions) {
        decisions.clear();
        decisions.extend(asks.limits.iter().map(|ask| match ask.limiter {
            Limiter::Concurrency(_) => self.permits_as_they_are(ask),
            _ => self.peek(ask, now),
        }));
    }

    /// A queued permit request gives up: `true` if it left without a permit,
    /// `false` if one had been handed to it (the caller then owns it, and
    /// returns it by settling its receipt).
    pub fn leave_queue(&self, queued: &QueuedPermit) -> bool {
        match queued.handover {
            Handover::Local { id, .. } => {
                Self::permits(&queued.receipt.table).leave(queued.receipt.key, id)
            }
            // Not one of this store's queues.
            Handover::Shared => true,
        }
    }
}

/// The receipt of a rate ask that took something.
fn rate_receipt(
    rule: usize,
    ask: &Ask<'_>,
    decision: &Decision,
    from: DrawnFrom,
    now: Nanos,
) -> Option<Receipt> {
    let taken = match (from, decision) {
        (DrawnFrom::Nowhere, _) => return None,
        (DrawnFrom::Overflow, _) => Taken::Overflow,
        (DrawnFrom::Bucket, Decision::Hold { wait, .. }) => Taken::Reserved { at: now + wait },
        (DrawnFrom::Bucket, _) => Taken::Bucket,
    };
    Some(Receipt {
        rule,
        table: ask.table.clone(),
        key: ask.key,
        limiter: *ask.limiter,
        units: ask.cost,
        taken,
        at: now,
        charged: 0,
        settled: false,
    })
}

/// The enforced rules of `asks`, with their indexes.
fn enforced<'a, 'p>(asks: &'a Asks<'p>) -> impl Iterator<Item = (usize, &'a RuleAsk<'p>)> {
    asks.rules
        .iter()
        .enumerate()
        .filter(|(_, rule)| !rule.shadow)
}

fn permit_receipt(rule: usize, ask: &Ask<'_>, now: Nanos) -> Receipt {
    Receipt {
        rule,
        table: ask.table.clone(),
        key: ask.key,
        limiter: *ask.limiter,
        units: 1,
        taken: Taken::Permit,
        at: now,
        charged: 0,
        settled: false,
    }
}

fn permit_decision(remaining: u64) -> Decision {
    Decision::Allow(BucketState {
        remaining,
        reset_after: 0,
    })
}
