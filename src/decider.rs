//! One decider for every way in (docs/operations.md, "Every decision goes
//! one way"). A proxied request's admit phase, a WebSocket message, a rate
//! limit service descriptor, `POST /v1/check`, `POST /admin/spend` and the
//! admin views that read a balance all ask the store through a [`Decider`]
//! and count what it answered with [`count`]:
//!
//! 1. the asks: each applicable rule's limits at its cost, the enforced
//!    rules (with their bans) first, then the shadow rules ([`fill_asks`]);
//! 2. the store call, timed in `sluice_store_seconds`, a failure counted in
//!    `sluice_store_errors_total` and answered through `on_error`: the local
//!    memory store at this instance's share, nothing limited, or a refusal
//!    ([`Decider::answered`]);
//! 3. what it ruled, counted ([`count`]): each enforced rule's outcome in
//!    `sluice_requests_total`, the shadow rules', every rule's heavy hitters
//!    (`/admin/top`), the refusal's log line, and the bans a refusal started
//!    or met, named on the fleet's board.
//!
//! What differs stays with each front end: what a decision holds (a
//! request or a message waits in delay mode; a check or a service call is
//! answered at once), and how a refusal is written (an HTTP answer, a
//! WebSocket close, `OVER_LIMIT`, JSON).

mod count;

use std::future::Future;
use std::sync::Arc;

use crate::clock::{Clock, Nanos, ProxyClock};
use crate::limiter::{Decision, Limiter};
use crate::metrics::{seconds, Metrics};
use crate::policy::{Limit, Rule};
use crate::store::{Admission, Ask, Asks, BucketKey, Decisions, OnError, Store, StoreError};

pub use count::{count, count_outcomes, Caller, Decided};

/// One rule that stands on a caller, as every way in finds it: its bucket
/// key, the limits that key is held to, and what the decision costs.
#[derive(Debug, Clone, Copy)]
pub struct Applicable<'p> {
    pub rule: &'p Rule,
    pub key: BucketKey,
    /// The rule's limits for this caller (its tier or override, if any).
    pub limits: &'p [Limit],
    /// Units the decision takes from each of them: the rule's `cost`, a
    /// GraphQL query's, a descriptor's `hits_addend`, a check's `units`.
    pub cost: u64,
}

/// One limit of an applicable, enforced rule and what it decided.
#[derive(Debug, Clone, Copy)]
pub struct Verdict<'p> {
    pub rule: &'p Rule,
    pub limit: &'p Limit,
    pub decision: Decision,
}

/// What deciding works with: the store, the clock decisions are timed on,
/// what a failed store call means, and the metrics it moves.
#[derive(Debug, Clone, Copy)]
pub struct Decider<'a> {
    pub store: &'a Arc<Store>,
    pub clock: &'a ProxyClock,
    pub on_error: OnError,
    pub metrics: &'a Metrics,
}

/// The store failed and `on_error = "deny"`: the decision is refused (503,
/// `UNAVAILABLE`, a WebSocket close).
#[derive(Debug)]
pub struct StoreUnavailable;

/// Who answered a decision, once `on_error` had its say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// The store.
    ByStore,
    /// The store failed and `on_error = "local"`: the local memory store,
    /// at this instance's share.
    Locally,
    /// The store failed and `on_error = "allow"`: nobody; nothing is
    /// limited.
    Unlimited,
}

impl<'a> Decider<'a> {
    /// The store's decision on `asks` at `now`, into `answer`: the store's
    /// own future, to be read with [`Decider::answered`] once it is done.
    /// Two steps, not one `async fn`, so that the request's phase awaits
    /// the store's future itself and `answered` is inlined into it.
    #[inline(always)]
    pub fn ask<'f, 'p>(
        self,
        asks: &'f Asks<'p>,
        now: Nanos,
        answer: &'f mut Admission,
    ) -> impl Future<Output = Result<(), StoreError>> + use<'a, 'f, 'p> {
        self.store.admit(asks, now, answer)
    }

    /// [`Decider::ask`] and [`Decider::answered`] in one, for the ways in
    /// off the request path.
    pub async fn admit(
        self,
        asks: &Asks<'_>,
        now: Nanos,
        answer: &mut Admission,
    ) -> Result<Answered, StoreUnavailable> {
        let decided = self.ask(asks, now, answer).await;
        self.answered(decided, asks, now, answer)
    }

    /// What the store answered (`decided`) to `asks` at `now`, into
    /// `answer`. Every backend's call is timed
    /// (`sluice_store_seconds{backend}`), the memory store's too, so its
    /// series says how many calls it answered and how fast: from `now`
    /// (the asks are built in nanoseconds), so one more clock read per
    /// decision. A failure is reported and goes through `on_error`.
    #[inline(always)]
    pub fn answered(
        self,
        decided: Result<(), StoreError>,
        asks: &Asks<'_>,
        now: Nanos,
        answer: &mut Admission,
    ) -> Result<Answered, StoreUnavailable> {
        match self.timed(decided, now) {
            Ok(()) => Ok(Answered::ByStore),
            Err(()) => self.fall_back(|| self.store.admit_locally(asks, now, answer)),
        }
    }

    /// What `on_error` makes of a failed store call: `locally` decides
    /// with the local memory store, at this instance's share.
    #[cold]
    fn fall_back(self, locally: impl FnOnce()) -> Result<Answered, StoreUnavailable> {
        match self.on_error {
            OnError::Local => {
                locally();
                Ok(Answered::Locally)
            }
            OnError::Allow => Ok(Answered::Unlimited),
            OnError::Deny => Err(StoreUnavailable),
        }
    }

    /// What every limit of `asks` would decide at `now`, taking nothing,
    /// into `decisions`; through `on_error` as [`Decider::answered`] is:
    /// the local store's view at this instance's share, or `Unlimited`
    /// (`decisions` left empty).
    pub async fn peek(
        self,
        asks: &Asks<'_>,
        now: Nanos,
        decisions: &mut Decisions,
    ) -> Result<Answered, StoreUnavailable> {
        let peeked = self.store.peek(asks, now, decisions).await;
        match self.timed(peeked, now) {
            Ok(()) => Ok(Answered::ByStore),
            Err(()) => self.fall_back(|| self.store.peek_locally(asks, now, decisions)),
        }
    }

    /// What every limit of `asks` would decide at `now`, for a view that
    /// shows the store's own figures (`/admin/buckets`, `/admin/explain`,
    /// a spend's report): a store that fails is a failure here, whatever
    /// `on_error` says.
    pub async fn look(
        self,
        asks: &Asks<'_>,
        now: Nanos,
        decisions: &mut Decisions,
    ) -> Result<(), StoreUnavailable> {
        let peeked = self.store.peek(asks, now, decisions).await;
        self.timed(peeked, now).map_err(|()| StoreUnavailable)
    }

    /// Spends every limit of `asks` unconditionally at `now`
    /// ([`Store::spend`]), `after` receiving what a cost of 1 would be told
    /// now. Work a backend already did is owed to the shared budget, not
    /// to this instance's share of it: a store that fails spends nothing,
    /// whatever `on_error` says, and the backend is told to try again.
    pub async fn spend(
        self,
        asks: &Asks<'_>,
        now: Nanos,
        after: &mut Decisions,
    ) -> Result<(), StoreUnavailable> {
        let spent = self.store.spend(asks, now, after).await;
        self.timed(spent, now).map_err(|()| StoreUnavailable)
    }

    /// Times a store call that began at `now`, and reports its failure.
    #[inline(always)]
    fn timed(self, called: Result<(), StoreError>, now: Nanos) -> Result<(), ()> {
        let Decider { store, clock, .. } = self;
        let metrics = self.metrics;
        metrics.store_call(
            store.backend_name(),
            seconds(clock.now().saturating_sub(now)),
        );
        match called {
            Ok(()) => {
                if metrics.store_recovered() {
                    tracing::info!("the store answers again; outage over");
                }
                Ok(())
            }
            Err(error) => {
                self.report(&error);
                Err(())
            }
        }
    }

    /// Counts a failed store call and logs it: an outage when it starts,
    /// not once per decision (it passes on its own); an error the store
    /// answered with (its script's, an answer it should not give) each
    /// time, at most ten lines a second, since it will not pass: someone
    /// must look, and it may be one key's among good answers.
    #[cold]
    #[inline(never)]
    fn report(self, error: &StoreError) {
        let Decider {
            store,
            clock,
            on_error,
            metrics,
        } = self;
        let outage = error.is_transient();
        if metrics.store_failed(store.backend_name(), error.kind(), outage) {
            tracing::warn!(%error, ?on_error, "the store failed a decision; on_error decides until it answers");
        } else if !outage {
            if let Some(suppressed) = metrics.store_error_line(clock.now()) {
                tracing::error!(%error, ?on_error, suppressed, "the store answered a decision with an error that retrying will not fix (a bug or a misconfiguration); on_error decided");
            }
        }
    }
}

/// Whether a decision may be held: a request or a message waits for a
/// delay-mode limit; a check or a service call is answered at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holds {
    AsRuled,
    Never,
}

/// Everything a decision asks of the store: the enforced rules (with their
/// bans) in file order, then the shadow rules.
pub fn fill_asks<'p>(
    asks: &mut Asks<'p>,
    enforced: &[Applicable<'p>],
    shadowed: &[Applicable<'p>],
    holds: Holds,
) {
    for applicable in enforced {
        let rule = applicable.rule;
        asks.push_rule(
            applicable.key,
            false,
            Some((&*rule.bans, rule.ban.as_ref())),
            applicable
                .limits
                .iter()
                .map(|limit| ask(applicable, limit, holds)),
        );
    }
    for applicable in shadowed {
        asks.push_rule(
            applicable.key,
            true,
            None,
            applicable
                .limits
                .iter()
                .map(|limit| ask(applicable, limit, holds)),
        );
    }
}

fn ask<'p>(applicable: &Applicable<'p>, limit: &'p Limit, holds: Holds) -> Ask<'p> {
    let rule = applicable.rule;
    Ask {
        table: &limit.table,
        key: applicable.key,
        limiter: &limit.limiter,
        cost: if rule.is_concurrency() {
            1
        } else if rule.variable_cost {
            variable_ask(applicable.cost, &limit.limiter)
        } else {
            applicable.cost
        },
        // Shadow rules never hold: the store asks them now or never.
        hold: match holds {
            Holds::AsRuled => rule.hold,
            Holds::Never => None,
        },
    }
}

/// What a cost of the decision's own asks of `limiter`: the cost, or one
/// unit past the capacity when it is larger (it never fits either way, and
/// a limiter's arithmetic is then never asked about a cost near
/// `u64::MAX`). A leaky bucket passes any cost in time, and its arithmetic
/// saturates.
fn variable_ask(cost: u64, limiter: &Limiter) -> u64 {
    if limiter.is_leaky() {
        cost
    } else {
        cost.min(limiter.capacity().saturating_add(1))
    }
}
