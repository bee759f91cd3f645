//! Where bucket state lives. [`Store`] is a closed enum (no `Box<dyn>`): the
//! sharded in-memory table ([`memory`]) of one instance, or Redis
//! ([`redis`], strict mode: every decision made by one script call, shared
//! by every instance; docs/multi-instance.md).
//! Every backend answers the same calls, with the same results (the suite in
//! `store/suite.rs` holds each to them):
//!
//! - [`Store::admit`]: everything one request asks (see [`admission`]) —
//!   every rate limit and permit of every enforced rule, the ban check, the
//!   shadow rules — in one call, all or nothing, answered with owned
//!   [`Receipt`]s of what was taken. One call per request is what lets a
//!   networked store answer with one round trip (one script call).
//! - [`Store::settle`]: after the response (or while it streams), a receipt
//!   is kept, given back (a refund, a cancelled reservation, a returned
//!   permit) or charged more units (a deferred charge, which may drive the
//!   balance below zero). Sync, since it is called from a `Drop` too (a
//!   response body dropped mid-stream, a client that left while held): the
//!   memory store settles at once, the Redis store hands the settlement to
//!   its settler, which delivers it in order, retried until Redis takes it,
//!   and once (docs/multi-instance.md, "When Redis is slow or away").
//! - [`Store::spend`] and [`Store::peek`]: the admin API's budget calls —
//!   take units outside any request (even into a debt), or look at what a
//!   request would be told without taking anything.
//! - A failed call returns [`StoreError`] and takes nothing; the proxy maps
//!   it through `on_error` ([`OnError`]), whose local fallback is
//!   [`Store::admit_locally`] ([`fallback`]).
//!
//! The memory store never reads a clock: `now` comes from the caller, so
//! its tests are exact. The Redis store decides on Redis' clock, so that
//! instances whose clocks disagree share every window, and reports the
//! instant it decided at as [`Admission::at`].

pub mod admission;
pub mod bans;
mod fallback;
pub mod hybrid;
mod instance_permits;
pub mod memory;
mod open;
pub mod redis;
#[cfg(test)]
mod settle_property;
#[cfg(test)]
pub(crate) mod suite;

pub use self::hybrid::{HybridStore, SyncStats};
pub use self::redis::{Access, LinkError, Password, RedisSettings, RedisStore, Seed, SettleSeries};
use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounter;

use crate::clock::Nanos;
pub use crate::key::BucketKey;
pub use crate::limiter::Carry;
use crate::limiter::Limiter;
pub use admission::{
    Admission, Ask, Asks, Decisions, Handover, Outcome, QueuedPermit, Receipt, RuleAsk, Sent,
    Settle, StoreError, Taken,
};
pub use memory::{
    BucketTable, DrawnFrom, MemoryStore, PermitGrant, StoreStats, TableName, PERMIT_REFUSED,
    PERMIT_RETRY, UNASKED,
};
pub use open::open;

pub use crate::config::OnError;

/// The bucket store: a closed set of backends.
#[derive(Debug)]
pub enum Store {
    Memory(MemoryStore),
    /// Budgets shared through Redis (strict mode).
    Redis(RedisStore),
    /// Budgets shared through Redis, decided in memory (hybrid mode).
    Hybrid(Arc<HybridStore>),
    /// A memory store whose calls fail on demand, for the `on_error` paths.
    #[cfg(test)]
    Failing(suite::FailingStore),
}

impl Store {
    /// Answers everything one request asks at `now`, all or nothing (see
    /// [`admission`]), into `answer` (filled in place: the request's future
    /// holds one answer and never copies it). `async` because a networked
    /// store awaits a round trip here; the memory store completes without
    /// yielding. On an error `answer` is left as it was.
    pub async fn admit(
        &self,
        asks: &Asks<'_>,
        now: Nanos,
        answer: &mut Admission,
    ) -> Result<(), StoreError> {
        match self {
            Store::Memory(store) => store.admit(asks, now, answer),
            // An adaptive rule's permits are this instance's own.
            Store::Redis(store) if instance_permits::asks_any(asks) => {
                let local = store.local();
                return Box::pin(instance_permits::admit(local, store, asks, now, answer)).await;
            }
            // Boxed: every request's future would carry this state (about
            // 500 bytes; `RedisStore::admit` boxes a cluster's 2.7 KiB round
            // trip itself), memory-store ones too.
            Store::Redis(store) => return Box::pin(store.admit(asks, now, answer)).await,
            Store::Hybrid(store) => store.admit(asks, now, answer),
            #[cfg(test)]
            Store::Failing(store) => {
                store.fail_if_asked()?;
                store.local.admit(asks, now, answer);
            }
        }
        Ok(())
    }

    /// Spends `ask.cost` units from every limit of `asks` at `now`,
    /// unconditionally (the balance may go below zero): work a backend did
    /// outside a request (`POST /admin/spend`). Bans are not consulted and
    /// no strike is counted. `after` receives one decision per limit: what
    /// a request of cost 1 would be told now, so the caller can report the
    /// balance left.
    pub async fn spend(
        &self,
        asks: &Asks<'_>,
        now: Nanos,
        after: &mut Decisions,
    ) -> Result<(), StoreError> {
        match self {
            Store::Memory(store) => store.spend(asks, now, after),
            Store::Redis(store) => return store.decide_all(true, asks, now, after).await,
            Store::Hybrid(store) => store.spend(asks, now, after),
            #[cfg(test)]
            Store::Failing(store) => {
                store.fail_if_asked()?;
                store.local.spend(asks, now, after);
            }
        }
        Ok(())
    }

    /// What asking every limit of `asks` for its cost at `now` would decide,
    /// without taking anything: one decision per ask into `decisions` (a
    /// concurrency limit reported as it is). Bans are not consulted and no
    /// strike is counted. For the admin API: a check of cost 0, and how long
    /// after a spend a request of the rule's cost would wait.
    pub async fn peek(
        &self,
        asks: &Asks<'_>,
        now: Nanos,
        decisions: &mut Decisions,
    ) -> Result<(), StoreError> {
        match self {
            Store::Memory(store) => store.peek_all(asks, now, decisions),
            // Admin views peek one rule at a time: an adaptive one's
            // permits are here.
            Store::Redis(store) if instance_permits::asks_any(asks) => {
                store.local().peek_all(asks, now, decisions)
            }
            Store::Redis(store) => return store.decide_all(false, asks, now, decisions).await,
            Store::Hybrid(store) => store.local().peek_all(asks, now, decisions),
            #[cfg(test)]
            Store::Failing(store) => {
                store.fail_if_asked()?;
                store.local.peek_all(asks, now, decisions);
            }
        }
        Ok(())
    }

    /// Settles `receipts` as `how` says, at `now`. `Keep` and `GiveBack`
    /// are final (a receipt is marked settled, and settling it again does
    /// nothing); `Charge` may be repeated. Nothing waits: the memory store
    /// settles at once; a networked store hands the settlements to its
    /// settler, which delivers them in order until the store takes each,
    /// once, for `settle_retry_for` at least (a request is never held; a
    /// lease it cannot return expires on its own). The settlements' fate is
    /// in the [`Sent`] returned, which the request path drops.
    pub fn settle(&self, receipts: &mut [Receipt], how: Settle, now: Nanos) -> Sent {
        self.settle_counting(receipts, how, now, None)
    }

    /// [`Store::settle`], counting a charge's units in `charged` once the
    /// store took them: at once in memory (hybrid mode's too, which the
    /// sync then carries to Redis), when Redis answered for the Redis
    /// store (`sluice_budget_charged_total`).
    pub fn settle_counting(
        &self,
        receipts: &mut [Receipt],
        how: Settle,
        now: Nanos,
        charged: Option<&IntCounter>,
    ) -> Sent {
        match self {
            Store::Redis(store) => {
                // An adaptive rule's permits are this instance's own.
                for receipt in receipts.iter_mut() {
                    if receipt.taken == Taken::Permit {
                        self.local().settle(receipt, how, now);
                    }
                }
                return store.settle(receipts, how, now, charged);
            }
            Store::Hybrid(store) => store.settle(receipts, how, now),
            _ => self.settle_locally(receipts, how, now),
        }
        if let (Settle::Charge(units), Some(charged)) = (how, charged) {
            charged.inc_by(units);
        }
        Sent::default()
    }

    /// Counts the settlements of a shared store in `series` from now on.
    pub fn count_settlements(&self, series: SettleSeries) {
        match self {
            Store::Redis(store) => store.settler().count_with(series),
            Store::Hybrid(store) => store.shared().settler().count_with(series),
            _ => {}
        }
    }

    /// Waits until the store took every settlement, `within` at most (at
    /// shutdown): how many it had not then (lost).
    pub async fn flush_settlements(&self, within: Duration) -> usize {
        match self {
            Store::Redis(store) => store.settler().flush(within).await,
            Store::Hybrid(store) => store.flush(within).await,
            _ => 0,
        }
    }

    /// Completes when the permit `queued` waits for is the waiter's:
    /// `true`, or `false` if it never will be (the queue forgot the
    /// waiter). Dropping the future abandons the wait: then call
    /// [`Store::leave_queue`].
    pub async fn permit_arrives(&self, queued: &mut QueuedPermit) -> bool {
        match (&mut queued.handover, self) {
            (Handover::Local { ready, .. }, _) => ready.await.is_ok(),
            // Boxed, as `admit`'s round trip: held requests are many.
            (Handover::Shared, Store::Redis(store)) => Box::pin(store.claim(&queued.receipt)).await,
            (Handover::Shared, _) => false,
        }
    }

    /// A queued permit request gives up: `true` if it left without a permit,
    /// `false` if one had been handed to it (the caller then owns it, and
    /// returns it by settling its receipt). A shared queue is left
    /// together with any permit claimed meanwhile: always `true`.
    pub fn leave_queue(&self, queued: &QueuedPermit) -> bool {
        match (&queued.handover, self) {
            (Handover::Local { .. }, _) => self.local().leave_queue(queued),
            (Handover::Shared, Store::Redis(store)) => {
                store.leave_queue(&queued.receipt);
                true
            }
            (Handover::Shared, _) => true,
        }
    }

    /// A queued permit request is abandoned (its client left): it leaves
    /// the queue, and a permit handed to it meanwhile is given back at
    /// once. Only a local queue hands permits over that way (see
    /// [`Store::leave_queue`]), so it goes back to the local store, also
    /// when that is a shared store's fallback.
    pub fn abandon_queue(&self, queued: &mut QueuedPermit) {
        if !self.leave_queue(queued) {
            // A permit's return does not depend on the instant.
            let at = queued.receipt.at;
            let receipt = std::slice::from_mut(&mut queued.receipt);
            self.settle_locally(receipt, Settle::GiveBack, at);
        }
    }

    /// The in-memory store this backend decides with locally: itself, or
    /// (for a networked store) the one it falls back to on errors, and
    /// where every bucket table lives.
    pub fn local(&self) -> &MemoryStore {
        match self {
            Store::Memory(store) => store,
            Store::Redis(store) => store.local(),
            Store::Hybrid(store) => store.local(),
            #[cfg(test)]
            Store::Failing(store) => &store.local,
        }
    }

    /// Whether the store is shared with other instances over the network.
    #[inline]
    pub fn is_shared(&self) -> bool {
        matches!(self, Store::Redis(_) | Store::Hybrid(_))
    }

    /// How many instances share this store's budgets: while it fails, each
    /// enforces this fraction of every limit (1 for the memory store).
    pub fn instances(&self) -> u64 {
        match self {
            Store::Redis(store) => store.instances(),
            Store::Hybrid(store) => store.instances(),
            _ => 1,
        }
    }

    /// A new, empty bucket table for `limiter`, with a name no other table
    /// has.
    pub fn table(&self, limiter: &Limiter) -> BucketTable {
        self.local().table(limiter)
    }

    /// A new, empty bucket table for `limiter`, named `name` (a networked
    /// store keeps its buckets under that name).
    pub fn named_table(&self, name: TableName, limiter: &Limiter) -> BucketTable {
        self.local().named_table(name, limiter)
    }

    /// A new, empty table for an `adaptive` rule's permits, named `name`,
    /// limited by `controller`. Whatever the backend, it is this
    /// instance's own: each instance learns what the upstream takes from
    /// the requests it sends.
    pub fn adaptive_table(
        &self,
        name: TableName,
        controller: Arc<crate::limiter::adaptive::Controller>,
    ) -> BucketTable {
        self.local().adaptive_table(name, controller)
    }

    /// Keeps `table` across a reload that changes its limit from `from` to
    /// `to`, rescaling its buckets as `carry` says; `false` (nothing
    /// changed) when the limiters are not of the table's algorithm.
    pub fn carry(
        &self,
        table: &BucketTable,
        from: &Limiter,
        to: &Limiter,
        carry: Carry,
        now: Nanos,
    ) -> bool {
        self.local().carry(table, from, to, carry, now)
    }

    /// Whether the store keeps a bucket of its own for `key` in `table`
    /// (admin views): `None` when it cannot tell without a round trip of
    /// its own (a strict shared store; its local tables are only the
    /// fallback's). A hybrid store answers for its local view.
    pub fn tracks(&self, table: &BucketTable, key: BucketKey) -> Option<bool> {
        match self {
            Store::Redis(_) => None,
            _ => Some(self.local().tracks(table, key)),
        }
    }

    /// A hybrid store's sync at `now` (`None` for the other backends).
    pub fn sync_stats(&self, now: Nanos) -> Option<SyncStats> {
        match self {
            Store::Hybrid(store) => Some(store.sync_stats(now)),
            _ => None,
        }
    }

    /// The fleet's bans, for a store shared with other instances.
    pub fn board(&self) -> Option<&redis::BanBoard> {
        match self {
            Store::Redis(store) => Some(store.board()),
            Store::Hybrid(store) => Some(store.shared().board()),
            _ => None,
        }
    }

    /// Registers `bans`, the ban table of the rule named `rule` (with its
    /// `ban`), as the policy compiles it: a shared store keeps it equal to
    /// the fleet's bans, and in hybrid mode adds up its strikes in Redis.
    pub fn watch_bans(&self, rule: &str, bans: &Arc<bans::BanTable>, ban: Option<bans::BanPolicy>) {
        let mirror = match self {
            Store::Redis(store) => store.mirror(),
            Store::Hybrid(store) => {
                if ban.is_some() {
                    bans.share_strikes();
                }
                store.shared().mirror()
            }
            _ => return,
        };
        mirror.watch(rule, bans, ban);
    }

    /// A refusal's strike started a ban on `key` by the rule named `rule`,
    /// lasting `lasts`; `shown` is the key as labels show it without
    /// `reveal_keys`. A shared store posts it for every instance (from a
    /// task: the refusal does not wait).
    pub fn ban_started(&self, rule: &str, key: BucketKey, lasts: Nanos, shown: &str) {
        let (board, posted) = match self {
            // The script that counted the strike set the caller's ban key.
            Store::Redis(store) => (store.board(), redis::Posted::Listed(lasts)),
            // This instance's own count started it: Redis learns it here.
            Store::Hybrid(store) => (store.shared().board(), redis::Posted::Earned(lasts)),
            _ => return,
        };
        board.post_detached(rule, key, posted, Some(shown));
    }

    /// A ban on `key` by the rule named `rule`, which this instance learned
    /// from Redis without the key's text, was met by a request: `shown`
    /// names it on the fleet's board (from a task).
    pub fn ban_named(&self, rule: &str, key: BucketKey, shown: &str) {
        if let Some(board) = self.board() {
            board.post_detached(rule, key, redis::Posted::Named, Some(shown));
        }
    }

    /// The connection to Redis of a shared store.
    pub fn link(&self) -> Option<&redis::Link> {
        match self {
            Store::Redis(store) => Some(store.link()),
            Store::Hybrid(store) => Some(store.shared().link()),
            _ => None,
        }
    }

    /// Counters for `/metrics`.
    pub fn stats(&self) -> StoreStats {
        self.local().stats()
    }

    /// Buckets tracked for one table.
    pub fn tracked_keys(&self, table: &BucketTable) -> usize {
        self.local().tracked_keys(table)
    }

    /// What decides: `memory`, `redis` (strict) or `hybrid`, as a
    /// request's span names it.
    pub fn mode_name(&self) -> &'static str {
        match self {
            Store::Memory(_) => "memory",
            Store::Redis(_) => "redis",
            Store::Hybrid(_) => "hybrid",
            #[cfg(test)]
            Store::Failing(_) => "failing",
        }
    }

    /// The backend's name, as used in metric labels.
    pub fn backend_name(&self) -> &'static str {
        match self {
            Store::Memory(_) => "memory",
            Store::Redis(_) | Store::Hybrid(_) => "redis",
            #[cfg(test)]
            Store::Failing(_) => "failing",
        }
    }
}
