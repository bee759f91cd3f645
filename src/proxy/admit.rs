//! Admission: asking every applicable rule, and holding the request when a
//! rule in delay mode says it must wait.
//!
//! Order of work for one request:
//! 1. every rate limit of every enforced rule, in one all-or-nothing store
//!    call (`Store::acquire_all`); delay-mode limits *reserve* their units at
//!    the first instant they fit, so held requests of a bucket pass in
//!    arrival order and the wait is known at once (too long → 429 now);
//! 2. concurrency permits, after the rates so that a request refused by a
//!    rate never occupies a permit; in delay mode a request queues for a
//!    permit (FIFO, `max_queue`, at most `max_delay`);
//! 3. the hold: sleep until the latest reservation's instant;
//! 4. shadow rules, which are counted and never hold anything.
//!
//! A client that goes away while held drops this future: [`Held`]'s `Drop`
//! cancels its reservations (the budget goes back to the bucket) and a
//! queued permit request leaves its queue, so an abandoned request neither
//! consumes budget nor counts as admitted. The queue-depth gauges are kept
//! by the same guards, so they return to zero whatever happens.

use std::time::Duration;

use smallvec::SmallVec;

use super::respond::Verdict;
use super::INLINE_RULES;
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::limiter::{BucketState, Decision, HoldLimits};
use crate::policy::{Limit, Rule};
use crate::store::{Ask, BucketKey, BucketTable, Permit, PermitGrant, Store};

/// A concurrency rule's 429 says to come back in a second (SPEC.md: it has
/// no reset).
const PERMIT_RETRY: Nanos = 1_000_000_000;

/// One rule that applies to the request, with its bucket key.
#[derive(Debug, Clone, Copy)]
pub struct Applicable<'p> {
    pub rule: &'p Rule,
    pub key: BucketKey,
    /// The rule's limits for this caller (its tier or override, if any).
    pub limits: &'p [Limit],
}

/// What admission decided.
#[derive(Debug)]
pub struct Admission<'p> {
    pub admitted: bool,
    /// Every limit of every enforced applicable rule, in file order.
    pub verdicts: SmallVec<[Verdict<'p>; INLINE_RULES]>,
    /// Permits to hold until the response has been sent.
    pub permits: SmallVec<[Permit; 1]>,
    /// Time the request was held on purpose (delay mode).
    pub held: Nanos,
    /// Shadow rules that would have limited the request.
    pub would_limit: SmallVec<[&'p str; INLINE_RULES]>,
    /// The instant of the decision (Unix nanoseconds), for the headers.
    pub decided_at: Nanos,
}

/// Decides, and holds the request if needed; see the module docs.
pub async fn admit<'p>(
    store: &Store,
    clock: &MonotonicClock,
    enforced: &[Applicable<'p>],
    shadowed: &[Applicable<'p>],
) -> Admission<'p> {
    let now = clock.now();
    let mut verdicts: SmallVec<[Verdict<'p>; INLINE_RULES]> = SmallVec::new();
    let mut asks: SmallVec<[Ask<'p>; INLINE_RULES]> = SmallVec::new();
    // For each ask, its verdict's index.
    let mut slots: SmallVec<[usize; INLINE_RULES]> = SmallVec::new();
    let mut ask_rules: SmallVec<[&'p Rule; INLINE_RULES]> = SmallVec::new();
    // Concurrency limits: their verdict's index and the key.
    let mut permit_asks: SmallVec<[(usize, BucketKey); 1]> = SmallVec::new();
    for applicable in enforced {
        let rule = applicable.rule;
        for limit in applicable.limits {
            if rule.is_concurrency() {
                permit_asks.push((verdicts.len(), applicable.key));
            } else {
                slots.push(verdicts.len());
                asks.push(ask(applicable, limit, rule.hold));
                ask_rules.push(rule);
            }
            verdicts.push(Verdict {
                rule,
                limit,
                decision: UNASKED,
            });
        }
    }
    let mut admission = Admission {
        admitted: true,
        verdicts,
        permits: SmallVec::new(),
        held: 0,
        would_limit: SmallVec::new(),
        decided_at: now,
    };

    // 1. Rates.
    let mut decisions: SmallVec<[Decision; INLINE_RULES]> =
        SmallVec::from_elem(UNASKED, asks.len());
    if !asks.is_empty() && !store.acquire_all(&asks, now, &mut decisions).await {
        admission.admitted = false;
    }
    for (slot, decision) in slots.iter().zip(&decisions) {
        admission.verdicts[*slot].decision = *decision;
    }
    if !admission.admitted {
        // Concurrency limits are not asked, but reported as they are.
        for &(index, key) in &permit_asks {
            let verdict = &mut admission.verdicts[index];
            verdict.decision = permits_as_they_are(store, verdict.limit, key);
        }
    }
    // From here on, leaving (a refused permit, the client going away) gives
    // the rates back.
    let mut held = Held::new(
        store,
        clock,
        &asks,
        &ask_rules,
        &decisions,
        now,
        admission.admitted,
    );

    // 2. Permits.
    let mut queued = false;
    if admission.admitted {
        let mut refused = false;
        for &(index, key) in &permit_asks {
            let Verdict { rule, limit, .. } = admission.verdicts[index];
            let max = limit.limiter.capacity();
            let decision = if refused {
                // Report the permits as they are, but take none.
                permits_as_they_are(store, limit, key)
            } else {
                match permit(store, clock, rule, limit, key, max, &mut queued).await {
                    Some((permit, in_flight)) => {
                        admission.permits.push(permit);
                        Decision::Allow(BucketState {
                            remaining: max.saturating_sub(in_flight),
                            reset_after: 0,
                        })
                    }
                    None => {
                        refused = true;
                        Decision::Deny {
                            state: BucketState {
                                remaining: 0,
                                reset_after: 0,
                            },
                            retry_after: Some(PERMIT_RETRY),
                        }
                    }
                }
            };
            admission.verdicts[index].decision = decision;
        }
        if refused {
            admission.admitted = false;
            admission.permits.clear();
            held.give_back();
        }
    }

    // 3. The hold.
    if admission.admitted {
        let wait = decisions.iter().map(Decision::wait).max().unwrap_or(0);
        let already = clock.now().saturating_sub(now);
        if wait > already {
            tokio::time::sleep(Duration::from_nanos(wait - already)).await;
        }
        held.passed();
        if wait > 0 || queued {
            admission.held = clock.now().saturating_sub(now);
        }
    }

    // 4. Shadow rules.
    if admission.admitted {
        for applicable in shadowed {
            let rule = applicable.rule;
            if shadow_admits(store, applicable, now, &mut admission.permits).await {
                rule.counters.allowed.inc();
            } else {
                rule.counters.shadow_limited.inc();
                admission.would_limit.push(&rule.name);
                tracing::debug!(rule = %rule.name, "shadow rule would have limited a request");
            }
        }
    }
    admission
}

/// A concurrency limit reported without taking a permit.
fn permits_as_they_are(store: &Store, limit: &Limit, key: BucketKey) -> Decision {
    let in_flight = store.permits_in_flight(&limit.table, key);
    Decision::Allow(BucketState {
        remaining: limit.limiter.capacity().saturating_sub(in_flight),
        reset_after: 0,
    })
}

fn ask<'p>(applicable: &Applicable<'p>, limit: &'p Limit, hold: Option<HoldLimits>) -> Ask<'p> {
    Ask {
        table: &limit.table,
        key: applicable.key,
        limiter: &limit.limiter,
        cost: applicable.rule.cost,
        hold,
    }
}

/// Takes a permit of a concurrency rule, queueing for one in delay mode.
/// `None` when refused (every permit taken and no queueing, the queue full,
/// or no permit came within `max_delay`).
async fn permit(
    store: &Store,
    clock: &MonotonicClock,
    rule: &Rule,
    limit: &Limit,
    key: BucketKey,
    max: u64,
    queued: &mut bool,
) -> Option<(Permit, u64)> {
    let max_queue = rule.hold.map(|hold| hold.max_queued);
    match store.acquire_permit(&limit.table, key, max, max_queue) {
        PermitGrant::Now { in_flight } => Some((store.permit(&limit.table, key), in_flight)),
        PermitGrant::Refused { .. } => None,
        PermitGrant::Queued { id, mut ready } => {
            *queued = true;
            let max_wait = rule.hold.map_or(0, |hold| hold.max_wait);
            let started = clock.now();
            let mut waiting = QueuedPermit {
                store,
                table: &limit.table,
                key,
                id,
                rule,
                settled: false,
            };
            rule.counters.queue_depth.inc();
            // The receiver stays alive until the outcome is settled, so a
            // permit handed over at the last moment is never lost.
            let outcome = tokio::time::timeout(Duration::from_nanos(max_wait), &mut ready).await;
            let handed = match outcome {
                Ok(Ok(())) => true,
                // The queue went away without a permit (cannot happen while
                // the store lives; refuse rather than guess).
                Ok(Err(_)) => false,
                // Timed out: leave the queue, unless a permit arrived in
                // the meantime (then it is in `ready`, and ours).
                Err(_) => {
                    !store.leave_permit_queue(&limit.table, key, id) && ready.try_recv().is_ok()
                }
            };
            waiting.settled = true;
            drop(waiting);
            rule.counters
                .delay_seconds
                .observe(clock.now().saturating_sub(started) as f64 / 1e9);
            handed.then(|| (store.permit(&limit.table, key), max))
        }
    }
}

/// A request waiting in a permit queue. If the wait is abandoned (the client
/// left and the future was dropped) it leaves the queue, and a permit that
/// was handed to it meanwhile is given back.
struct QueuedPermit<'a> {
    store: &'a Store,
    table: &'a BucketTable,
    key: BucketKey,
    id: u64,
    rule: &'a Rule,
    settled: bool,
}

impl Drop for QueuedPermit<'_> {
    fn drop(&mut self) {
        self.rule.counters.queue_depth.dec();
        if !self.settled && !self.store.leave_permit_queue(self.table, self.key, self.id) {
            // Handed over just as the client left: pass it on.
            drop(self.store.permit(self.table, self.key));
        }
    }
}

/// Asks a shadow rule like an enforced one, but never holds: its rates are
/// taken now or not at all, and its permit (if it gets one) is held like
/// an enforced one so that in-flight counts stay faithful.
async fn shadow_admits(
    store: &Store,
    applicable: &Applicable<'_>,
    now: Nanos,
    permits: &mut SmallVec<[Permit; 1]>,
) -> bool {
    let rule = applicable.rule;
    if rule.is_concurrency() {
        let limit = &applicable.limits[0];
        return match store.acquire_permit(
            &limit.table,
            applicable.key,
            limit.limiter.capacity(),
            None,
        ) {
            PermitGrant::Now { .. } => {
                permits.push(store.permit(&limit.table, applicable.key));
                true
            }
            PermitGrant::Refused { .. } | PermitGrant::Queued { .. } => false,
        };
    }
    let asks: SmallVec<[Ask<'_>; INLINE_RULES]> = applicable
        .limits
        .iter()
        .map(|limit| ask(applicable, limit, None))
        .collect();
    let mut decisions: SmallVec<[Decision; INLINE_RULES]> =
        SmallVec::from_elem(UNASKED, asks.len());
    store.acquire_all(&asks, now, &mut decisions).await
}

/// The rates a request took, until it passes: dropping this before
/// [`Held::passed`] gives them back (reservations cancelled, immediate units
/// refunded). It also keeps the queue-depth gauge of every rule that holds
/// the request, and records the hold in `sluice_delay_seconds` when it ends.
struct Held<'a, 'p> {
    store: &'a Store,
    clock: &'a MonotonicClock,
    asks: &'a [Ask<'p>],
    /// The rule of each ask.
    rules: &'a [&'p Rule],
    decisions: &'a [Decision],
    decided_at: Nanos,
    /// Whether there is anything to give back.
    armed: bool,
}

impl<'a, 'p> Held<'a, 'p> {
    fn new(
        store: &'a Store,
        clock: &'a MonotonicClock,
        asks: &'a [Ask<'p>],
        rules: &'a [&'p Rule],
        decisions: &'a [Decision],
        decided_at: Nanos,
        admitted: bool,
    ) -> Held<'a, 'p> {
        let held = Held {
            store,
            clock,
            asks,
            rules,
            decisions,
            decided_at,
            armed: admitted,
        };
        if admitted {
            held.for_each_holding_rule(|rule| rule.counters.queue_depth.inc());
        }
        held
    }

    /// The request passes: its units stay taken.
    fn passed(&mut self) {
        if std::mem::take(&mut self.armed) {
            self.end_hold();
        }
    }

    /// The request will not pass: give its units back.
    fn give_back(&mut self) {
        if !std::mem::take(&mut self.armed) {
            return;
        }
        self.end_hold();
        let now = self.clock.now();
        for (ask, decision) in self.asks.iter().zip(self.decisions) {
            match *decision {
                Decision::Hold { wait, .. } => {
                    self.store.cancel(ask, now, self.decided_at + wait);
                }
                Decision::Allow(_) => self.store.refund(ask, now),
                Decision::Deny { .. } => {}
            }
        }
    }

    fn end_hold(&self) {
        let held = self.clock.now().saturating_sub(self.decided_at) as f64 / 1e9;
        self.for_each_holding_rule(|rule| {
            rule.counters.queue_depth.dec();
            rule.counters.delay_seconds.observe(held);
        });
    }

    /// Calls `f` once for each rule with a held ask.
    fn for_each_holding_rule(&self, mut f: impl FnMut(&Rule)) {
        let mut previous: Option<&Rule> = None;
        for (rule, decision) in self.rules.iter().zip(self.decisions) {
            // A rule's asks are adjacent: count it once.
            if matches!(decision, Decision::Hold { .. })
                && !previous.is_some_and(|p| std::ptr::eq(p, *rule))
            {
                f(rule);
                previous = Some(rule);
            }
        }
    }
}

impl Drop for Held<'_, '_> {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// A placeholder decision for verdicts not decided yet, and for limits
/// reported but not asked.
pub const UNASKED: Decision = Decision::Allow(BucketState {
    remaining: 0,
    reset_after: 0,
});
