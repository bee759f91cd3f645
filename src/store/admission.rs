//! The seam between a request and any store: what one request asks
//! ([`Asks`]), what the store answers ([`Admission`]), the owned
//! [`Receipt`]s of what it took, and how they are settled after the
//! response ([`Settle`]).
//!
//! One request makes one store call: every rate limit and concurrency
//! permit of every enforced rule, the ban check of those rules, and the
//! shadow rules' asks travel together, so a networked store answers them in
//! one round trip (one server-side script call) and keeps them
//! all-or-nothing. The receipts own what they need (the bucket table's
//! handle, the key, the limiter, the units, where they were taken and when),
//! so they outlive the request's borrow of the policy and are settled after
//! the response: kept, given back, or charged more.

use std::borrow::Cow;
use std::ops::Range;

use smallvec::SmallVec;
use tokio::sync::oneshot;

use super::bans::{BanPolicy, BanTable};
use super::{BucketKey, BucketTable};
use crate::clock::Nanos;
use crate::limiter::{Decision, HoldLimits, Limiter};

/// Rules (and limits) one request carries inline before spilling to the heap.
pub const INLINE: usize = 4;

/// One decision per limit asked, in the order of [`Asks::limits`].
pub type Decisions = SmallVec<[Decision; INLINE]>;

/// The receipts of one admission: most requests take from one or two
/// buckets, and the receipts live in the request's future (kept small, so
/// moving the future stays cheap).
pub type Receipts = SmallVec<[Receipt; 2]>;

/// One limit of one rule to ask for one request: a rate limit, or a
/// concurrency permit when `limiter` is [`Limiter::Concurrency`].
#[derive(Debug, Clone, Copy)]
pub struct Ask<'p> {
    /// The limit's bucket table (owned by the policy snapshot that asks).
    pub table: &'p BucketTable,
    pub key: BucketKey,
    pub limiter: &'p Limiter,
    pub cost: u64,
    /// Delay mode: reserve the units at the first instant they fit (a rate),
    /// or queue for a permit (concurrency), within these bounds, instead of
    /// denying.
    pub hold: Option<HoldLimits>,
}

/// One applicable rule of the request.
#[derive(Debug, Clone)]
pub struct RuleAsk<'p> {
    /// Its limits: a range of [`Asks::limits`].
    pub limits: Range<usize>,
    /// Shadow rules are asked only when the request is admitted, never hold,
    /// and never change the outcome.
    pub shadow: bool,
    /// The rule's bans: a banned key is refused before any bucket is asked.
    pub bans: Option<&'p BanTable>,
    /// The rule's `ban`: each rejection counts a strike toward a ban.
    pub ban: Option<&'p BanPolicy>,
    /// The caller's key for the bans.
    pub key: BucketKey,
}

impl RuleAsk<'_> {
    /// Whether the caller's bans by this rule are checked: on every
    /// enforced rule, since a ban may be set by hand on any
    /// (`POST /admin/bans`); a shadow rule never refuses.
    #[inline]
    pub fn checks_bans(&self) -> bool {
        !self.shadow && self.bans.is_some()
    }
}

/// Everything one request asks of the store. Enforced rules come before
/// shadow rules, each group in file order; a rule's limits are adjacent.
#[derive(Debug, Default)]
pub struct Asks<'p> {
    pub rules: SmallVec<[RuleAsk<'p>; INLINE]>,
    pub limits: SmallVec<[Ask<'p>; INLINE]>,
}

impl<'p> Asks<'p> {
    /// Adds a rule with its limits.
    pub fn push_rule(
        &mut self,
        key: BucketKey,
        shadow: bool,
        bans: Option<(&'p BanTable, Option<&'p BanPolicy>)>,
        limits: impl IntoIterator<Item = Ask<'p>>,
    ) {
        let start = self.limits.len();
        self.limits.extend(limits);
        let (bans, ban) = match bans {
            Some((bans, ban)) => (Some(bans), ban),
            None => (None, None),
        };
        self.rules.push(RuleAsk {
            limits: start..self.limits.len(),
            shadow,
            bans,
            ban,
            key,
        });
    }

    /// Whether nothing is asked.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// How the store answered a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Outcome {
    /// Every enforced limit admits it (now, or after [`Admission::wait`]).
    #[default]
    Admitted,
    /// At least one enforced limit refused it; nothing was taken.
    Limited,
    /// Rule number `rule` (in [`Asks::rules`]) bans the caller for `left`
    /// more; no bucket was asked.
    Banned { rule: usize, left: Nanos },
}

/// The store's answer to one request's [`Asks`].
#[derive(Debug, Default)]
pub struct Admission {
    pub outcome: Outcome,
    /// One decision per ask of [`Asks::limits`], same order. A limit that
    /// was not asked (a later permit after a refusal, shadow rules of a
    /// refused request) is reported as it is, without taking anything.
    pub decisions: Decisions,
    /// What the admission took, to settle after the response (empty unless
    /// admitted).
    pub receipts: Receipts,
    /// Delay mode: a concurrency permit to wait for before the request may
    /// pass (every permit was taken and the request joined the key's queue).
    /// Boxed: rare, and large beside the rest.
    pub queued: Option<Box<QueuedPermit>>,
    /// The instant of the decision (Unix nanoseconds, the store's time).
    pub at: Nanos,
    /// Shadow rules (indexes into [`Asks::rules`]) that would have limited.
    pub shadow_limited: SmallVec<[usize; 2]>,
    /// Rules whose strike against the caller started a ban just now.
    pub bans_started: SmallVec<[usize; 1]>,
}

impl Admission {
    /// Whether the request may pass (at once, or after a hold).
    pub fn admitted(&self) -> bool {
        self.outcome == Outcome::Admitted
    }

    /// How long the rates hold the request (0 unless a delay-mode limit
    /// reserved a later slot).
    pub fn wait(&self) -> Nanos {
        self.decisions.iter().map(Decision::wait).max().unwrap_or(0)
    }
}

/// Where a receipt's units were taken from, so they are given back exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// The key's own bucket, at once.
    Bucket,
    /// The key's own bucket, reserved for `at` (delay mode): given back as a
    /// cancelled reservation while `at` is ahead.
    Reserved { at: Nanos },
    /// The table's overflow sketch (the store was full of active buckets):
    /// kept whatever happens, which is conservative.
    Overflow,
    /// A concurrency permit, returned when the receipt is kept or given
    /// back.
    Permit,
    /// A concurrency permit held in a shared store as lease number `id`
    /// (renewed while the request runs, lapsing on its own should this
    /// instance die), returned when the receipt is kept or given back.
    Lease { id: u64 },
}

impl Taken {
    /// Whether it is a concurrency permit (returned when the request ends,
    /// never refunded or charged).
    #[inline]
    pub fn is_permit(&self) -> bool {
        matches!(self, Taken::Permit | Taken::Lease { .. })
    }
}

/// What one admission took from one bucket: owned, so it outlives the
/// request's borrow of the policy snapshot.
#[derive(Debug, Clone)]
pub struct Receipt {
    /// The rule the units were taken for (index into [`Asks::rules`]).
    pub rule: usize,
    pub table: BucketTable,
    pub key: BucketKey,
    pub limiter: Limiter,
    /// Units taken at admission (what a give-back returns).
    pub units: u64,
    pub taken: Taken,
    /// When they were taken (the decision's instant).
    pub at: Nanos,
    /// Units charged since, by [`Settle::Charge`] (kept whatever happens).
    pub charged: u64,
    /// Whether the receipt was kept or given back already.
    pub settled: bool,
}

/// The instant of a receipt whose units were lent for a request's
/// lifetime ([`Receipt::lent`]): later than any store's now, so each reads
/// its give-back as a rollback, as of when it is settled.
pub const LENT: Nanos = Nanos::MAX;

impl Receipt {
    /// Its units were lent for the request's lifetime, a reservation
    /// (docs/ai-budgets.md), and come back in full when it ends at `now`
    /// or later: a token bucket takes back what was not used as of the
    /// give-back (a rollback: its refill while they were held was not
    /// lost, for they were held), where a refund of units spent would come
    /// back only as far as later takes allow. A window takes them back into
    /// the window they were counted in, as any give-back. A delay-mode
    /// reservation still ahead of `now` stays one, to be cancelled.
    pub fn lent(&mut self, now: Nanos) {
        if !matches!(self.limiter, Limiter::TokenBucket(_)) {
            return;
        }
        if let Taken::Reserved { at } = self.taken {
            if now < at {
                return;
            }
        }
        if matches!(self.taken, Taken::Bucket | Taken::Reserved { .. }) {
            self.taken = Taken::Bucket;
            self.at = LENT;
        }
    }
}

/// How to settle a receipt after the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// The request is over and its units stay taken (permits are returned).
    Keep,
    /// The request is over and its admission units are given back (a
    /// refund, a cancelled reservation, a returned permit); units charged
    /// since stay charged.
    GiveBack,
    /// Takes `n` more units now, unconditionally (the balance may go below
    /// zero): a deferred charge. Not final: the receipt can be settled again,
    /// and a receipt given back can still be charged (a refunded request
    /// still pays for the time its response streamed).
    Charge(u64),
}

/// The settlements one [`super::Store::settle`] handed to a networked
/// store, on their way (none for the memory store, which settles at
/// once). Dropping it leaves them on their way, as the request path does;
/// awaiting [`Sent::answered`] waits until the store took each (or gave it
/// up), for a caller that reads what the settlement did (the store suite).
#[derive(Debug, Default)]
pub struct Sent(pub(super) SmallVec<[oneshot::Receiver<()>; 1]>);

impl Sent {
    /// How many settlements were handed over.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether nothing was handed over.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Completes once the store took every settlement, or gave it up.
    pub async fn answered(self) {
        for settlement in self.0 {
            // A settlement dropped with its store is done too.
            let _ = settlement.await;
        }
    }
}

/// A request waiting in a concurrency permit queue (delay mode).
#[derive(Debug)]
pub struct QueuedPermit {
    /// The permit's receipt once it arrives.
    pub receipt: Receipt,
    /// How the permit reaches the waiter.
    pub handover: Handover,
    /// The most the request may wait (`max_delay`).
    pub max_wait: Nanos,
}

/// How a queued request learns that a permit is its own.
#[derive(Debug)]
pub enum Handover {
    /// This instance's queue: waiter number `id`, whose permit is handed
    /// over through `ready` by the request returning it.
    Local {
        id: u64,
        ready: oneshot::Receiver<()>,
    },
    /// A queue the instances share: the receipt's lease names the waiter's
    /// ticket, and the waiter claims its permit from the store when its
    /// turn comes (nobody can hand it over across instances).
    Shared,
}

/// A store call that failed. Nothing was taken. Either kind is answered
/// through `on_error`; they differ in what an operator must do
/// (docs/operations.md, `sluice_store_errors_total{kind}`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store did not answer: a timeout, a lost connection, a link down
    /// while it is probed. Trying again soon may succeed: an outage.
    #[error("the store is unavailable: {0}")]
    Unavailable(Cow<'static, str>),
    /// The store answered, with an error that trying again will not fix:
    /// the script failed (a Lua error, a key of the wrong type, `NOSCRIPT`
    /// after a reload), Redis refused the command, or the answer is not
    /// one the protocol knows. A bug or a misconfiguration, not an outage.
    #[error("the store answered with an error: {0}")]
    Script(Cow<'static, str>),
}

impl StoreError {
    /// Every [`StoreError::kind`].
    pub const KINDS: [&'static str; 2] = ["unavailable", "script"];

    /// Whether trying again soon may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    /// The error's `kind` label in `sluice_store_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) => Self::KINDS[0],
            StoreError::Script(_) => Self::KINDS[1],
        }
    }
}
