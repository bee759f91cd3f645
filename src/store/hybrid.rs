//! The Redis store in hybrid mode (docs/multi-instance.md, "Hybrid mode"):
//! every decision is made in memory, by the same code and at the same cost
//! as the memory store, and no request ever waits on Redis. What each
//! instance spends is exchanged with Redis off the request path, by one
//! task per instance, every `sync_interval` ([`sync`]).
//!
//! The design is the exchange of deltas. Each admission, settlement or
//! spend notes, per bucket it touched, the units this instance took (or
//! gave back) since the last sync ([`deltas`]). Each interval the task
//! sends them in script calls of up to 256 buckets (one per caller's slot
//! on a Redis Cluster): Redis adds them to the shared bucket, with the same
//! algorithms strict mode runs, and answers each bucket's state; the
//! instance then makes its own bucket that state, plus what it took while
//! the call was out ([`replica`]). So each instance decides with the
//! fleet's spending as of its last sync:
//!
//! - overshoot is what the fleet admits before the syncs tell every
//!   instance: about one interval's traffic while traffic is steady, at
//!   most two intervals' (one instance's spending reaches Redis with its
//!   next sync, and another instance with that one's next sync);
//! - a key this instance has not seen starts with every other instance's
//!   share spent ([`MemoryStore::split_newcomers`]), so a burst on a new
//!   key reaching every instance at once admits about the limit in total,
//!   not the limit times the instances;
//! - budget is never stranded: an idle instance holds nothing back, and a
//!   new key's first interval on an instance is held to its share (the
//!   under-admission there is bounded by the other instances' shares for
//!   one interval).
//!
//! Token and leaky buckets and both windows are synced. A sliding log
//! (exact stamps) and a concurrency limit (requests in flight) are decided
//! by each instance alone at its share of the limit (⌈limit / instances⌉),
//! never synced. While Redis fails every limit is decided at this
//! instance's share, as strict mode's local fallback does, and the deltas
//! wait (bounded) to be sent when it is back.

mod bans;
mod deltas;
#[cfg(test)]
mod fleet;
mod replica;
mod sync;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::admission::{Admission, Asks, Decisions, Receipt, Settle};
use super::fallback::admit_at_share;
use super::memory::MemoryStore;
use super::redis::{LinkError, RedisSettings, RedisStore};
use crate::clock::{Nanos, ProxyClock};
use crate::limiter::Limiter;
use deltas::Deltas;
pub use sync::SyncStats;
use sync::SyncStatus;

/// Budgets shared through Redis, decided in memory.
#[derive(Debug)]
pub struct HybridStore {
    /// The link, the heartbeats that count the instances, the script, and
    /// the memory store every decision is made in.
    shared: RedisStore,
    deltas: Arc<Deltas>,
    /// What failed rounds could not send, for the next.
    outbox: tokio::sync::Mutex<sync::Outbox>,
    /// Bans that strikes counted in Redis started and the board does not
    /// list yet.
    unlisted: bans::Unlisted,
    status: Arc<SyncStatus>,
    /// The proxy's clock, once started (the last sync at shutdown reads it).
    clock: std::sync::OnceLock<ProxyClock>,
    /// How many instances split a key none of them has synced yet (the
    /// memory store's newcomers read it).
    newcomers: Arc<AtomicU64>,
    interval: Duration,
}

impl HybridStore {
    /// A hybrid store on `settings`, syncing every `interval`, with room for
    /// `max_keys` buckets (and as many keys' deltas waiting to be sent).
    pub fn new(
        settings: RedisSettings,
        max_keys: usize,
        interval: Duration,
    ) -> Result<HybridStore, LinkError> {
        let newcomers = Arc::new(AtomicU64::new(settings.instances.max(1)));
        let local = MemoryStore::new(max_keys).split_newcomers(Arc::clone(&newcomers));
        Ok(HybridStore {
            shared: RedisStore::over(settings, local)?,
            deltas: Arc::new(Deltas::new(max_keys)),
            outbox: tokio::sync::Mutex::default(),
            unlisted: bans::Unlisted::default(),
            status: Arc::default(),
            clock: std::sync::OnceLock::new(),
            newcomers,
            interval,
        })
    }

    /// For tests: a hybrid store of a fleet of `instances` on `urls`, its
    /// keys under `prefix`, connected, deciding (in Redis too) at the
    /// instants it is given. No task syncs it: the test calls
    /// [`HybridStore::sync`].
    #[cfg(test)]
    pub async fn for_test(urls: Vec<String>, prefix: &str, instances: u64) -> HybridStore {
        let settings = RedisSettings {
            urls,
            access: Default::default(),
            cluster: false,
            timeout: Duration::from_secs(5),
            prefix: prefix.into(),
            instances,
            settle_retry_for: Duration::from_secs(600),
        };
        let mut store =
            HybridStore::new(settings, 10_000, Duration::from_secs(3600)).expect("a Redis URL");
        store.shared = store.shared.with_injected_time();
        store.shared.start(ProxyClock::default());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !store.shared.link().is_up() {
            assert!(
                std::time::Instant::now() < deadline,
                "no connection to Redis"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        store
    }

    /// Connects, starts the heartbeats and the sync task, which reads
    /// `clock` (the proxy's: the instants every decision is made at).
    pub fn start(self: &Arc<Self>, clock: ProxyClock) {
        self.shared.start(clock.clone());
        let _ = self.clock.set(clock.clone());
        sync::start(Arc::downgrade(self), clock);
    }

    /// At shutdown: syncs until nothing waits to be sent, `within` at most.
    /// How many buckets' deltas were left unsent (lost).
    pub async fn flush(&self, within: Duration) -> usize {
        let Some(clock) = self.clock.get() else {
            return 0;
        };
        let flushing = async {
            loop {
                self.sync(clock).await;
                if !self.has_unsent().await {
                    return;
                }
                tokio::time::sleep(self.interval.min(Duration::from_millis(250))).await;
            }
        };
        let _ = tokio::time::timeout(within, flushing).await;
        self.unsent().await
    }

    /// The Redis side: the link, the instances, the script calls.
    pub fn shared(&self) -> &RedisStore {
        &self.shared
    }

    /// The memory store every decision is made in.
    pub(super) fn local(&self) -> &MemoryStore {
        self.shared.local()
    }

    /// See [`crate::store::Store::admit`]: in memory, at once. A limit that
    /// is not synced (a sliding log, a concurrency limit), or every limit
    /// while Redis fails, is decided at this instance's share.
    #[inline]
    pub fn admit(&self, asks: &Asks<'_>, now: Nanos, answer: &mut Admission) {
        let failing = self.status.is_failing();
        if !failing && asks.limits.iter().all(|ask| is_synced(ask.limiter)) {
            self.local().admit(asks, now, answer);
        } else {
            let instances = self.instances();
            admit_at_share(self.local(), instances, asks, now, answer, |limiter| {
                failing || !is_synced(limiter)
            });
            // What a synced limit took at this instance's share is sent as
            // units of the whole limit, the one Redis keeps: the receipt
            // carries that limit. (Settled locally, a token or leaky
            // bucket's units then count at the whole limit's rate: a
            // give-back returns less than the share took, a charge takes
            // less. Only receipts taken while Redis fails, and only here
            // until the next sync brings the shared state.)
            for receipt in answer.receipts.iter_mut().filter(|r| is_synced(&r.limiter)) {
                if let Some(ask) = asks.limits.iter().find(|a| a.table.same(&receipt.table)) {
                    receipt.limiter = *ask.limiter;
                }
            }
        }
        for receipt in &answer.receipts {
            if self.deltas.took(receipt, receipt.units, now) && !failing {
                // Decided on a view no sync refreshed for over an interval
                // (the bucket was no longer followed): from now until the
                // next sync, this instance's share at most (a new bucket
                // started there already).
                let share = receipt.limiter.capacity().div_ceil(self.instances());
                let most = share.saturating_sub(receipt.units);
                let local = self.local();
                local.hold_to(&receipt.table, &receipt.limiter, receipt.key, most, now);
            }
        }
    }

    /// See [`crate::store::Store::settle`]: at once in memory; what it
    /// changed goes to Redis with the next sync.
    pub fn settle(&self, receipts: &mut [Receipt], how: Settle, now: Nanos) {
        let local = self.local();
        for receipt in receipts {
            match how {
                Settle::Charge(units) => {
                    self.deltas.took(receipt, units, now);
                }
                Settle::GiveBack if !receipt.settled => self.deltas.gave_back(receipt),
                Settle::GiveBack | Settle::Keep => {}
            }
            local.settle(receipt, how, now);
        }
    }

    /// See [`crate::store::Store::spend`]: in memory, sent with the next
    /// sync.
    pub fn spend(&self, asks: &Asks<'_>, now: Nanos, after: &mut Decisions) {
        self.local().spend(asks, now, after);
        for ask in &asks.limits {
            if is_synced(ask.limiter) {
                self.deltas
                    .took_from(ask.table, ask.limiter, ask.key, ask.cost, now);
            }
        }
    }

    /// How many instances share each limit.
    pub fn instances(&self) -> u64 {
        self.shared.instances()
    }

    /// The sync's state, for `/metrics` and the admin views.
    pub fn sync_stats(&self, now: Nanos) -> SyncStats {
        self.status
            .stats(now, self.deltas.len(), self.deltas.dropped())
    }

    /// Whether Redis failed the last sync (every limit is then decided at
    /// this instance's share).
    pub fn is_failing(&self) -> bool {
        self.status.is_failing()
    }

    /// Tells new buckets how many instances split them: none while Redis
    /// fails, when every limit is already decided at this instance's share.
    fn count_instances(&self) {
        let split = if self.status.is_failing() {
            1
        } else {
            self.instances()
        };
        self.newcomers.store(split, Ordering::Relaxed);
    }
}

/// Whether hybrid mode syncs a limit of this algorithm (the others are
/// decided at each instance's share).
pub fn is_synced(limiter: &Limiter) -> bool {
    matches!(
        limiter,
        Limiter::TokenBucket(_)
            | Limiter::LeakyBucket(_)
            | Limiter::FixedWindow(_)
            | Limiter::SlidingWindow(_)
    )
}
