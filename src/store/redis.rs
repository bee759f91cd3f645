//! The Redis store, strict mode: every call of the seam is one call of one
//! server-side script (`redis/sluice.lua`), so a request's limits are
//! checked and charged atomically on the server, with the server's clock
//! (ARCHITECTURE.md, "How the store runs in Redis").
//!
//! One multiplexed connection carries every request's call, pipelined
//! ([`link`]). A call that fails or outlives `timeout` is a transient
//! [`StoreError`]: nothing was taken here, and the proxy answers through
//! `on_error`; after a few failures in a row the link stops sending and
//! probes Redis in the background until it answers again.
//!
//! What this release keeps in Redis: the token bucket, the fixed window and
//! the sliding window in reject mode, with deferred charges and refunds
//! (config refuses the other algorithms, delay mode and concurrency limits
//! with `backend = "redis"`). Bans are kept by each instance (see README,
//! "Running several instances").

#[cfg(test)]
mod differential;
mod fair_share;
mod leases;
mod link;
mod script;

use std::sync::Arc;
use std::time::Duration;

use redis::Cmd;
use smallvec::SmallVec;

use super::admission::{Admission, Asks, Decisions, Outcome, Receipt, Settle, StoreError, Taken};
use super::memory::MemoryStore;
use super::UNASKED;
use crate::clock::Nanos;
use crate::limiter::Limiter;
use fair_share::FairShare;
use leases::Leases;
pub use link::{Link, Seed};
use script::Call;

/// Where a Redis store connects and how long it waits.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// `redis://host:port[/db]`.
    pub url: String,
    /// The longest a call may take before `on_error` decides.
    pub timeout: Duration,
    /// Prefix of every key sluice writes.
    pub prefix: String,
    /// How many instances share the store (0: count their heartbeats).
    pub instances: u64,
}

/// Budgets shared through Redis (strict mode), and the memory store the
/// proxy falls back to when Redis fails.
#[derive(Debug)]
pub struct RedisStore {
    local: MemoryStore,
    link: Link,
    fair_share: Arc<FairShare>,
    leases: Arc<Leases>,
    prefix: Box<str>,
    /// Take time from Redis (`TIME`); `false` in tests, which pass exact
    /// instants.
    server_time: bool,
}

impl RedisStore {
    /// A store on `settings.url` with room for `max_keys` buckets in its
    /// fallback. Connects in the background: a Redis that is down at start
    /// only means the fallback decides until it is up.
    pub fn new(settings: RedisSettings, max_keys: usize) -> Result<RedisStore, String> {
        Ok(RedisStore {
            local: MemoryStore::new(max_keys),
            link: Link::new(
                &settings.url,
                settings.timeout,
                format!("{}:seed", settings.prefix),
            )?,
            fair_share: FairShare::new(settings.instances),
            leases: Leases::new(random_u64()),
            prefix: settings.prefix.into(),
            server_time: true,
        })
    }

    /// Connects, and starts the heartbeat that counts the instances (call
    /// it from the runtime).
    pub fn start(&self) {
        self.link.start();
        let id = format!("{:x}-{}", random_u64(), std::process::id());
        self.fair_share
            .start(self.link.clone(), format!("{}:instances", self.prefix), id);
        self.leases.start(self.link.clone());
    }

    /// How many concurrency leases this instance holds.
    pub fn leases_held(&self) -> usize {
        self.leases.len()
    }

    /// How many instances share each limit: while Redis is down, each
    /// enforces this fraction of it.
    pub fn instances(&self) -> u64 {
        self.fair_share.instances()
    }

    /// The same store deciding at the instants it is given instead of the
    /// server's time (the store suite's exact instants).
    #[cfg(test)]
    pub fn with_injected_time(mut self) -> RedisStore {
        self.server_time = false;
        self
    }

    /// The memory store of the fallback (and of every bucket table).
    pub fn local(&self) -> &MemoryStore {
        &self.local
    }

    /// The connection to Redis.
    pub fn link(&self) -> &Link {
        &self.link
    }

    fn call(&self, op: &'static str, now: Nanos) -> Call<'_> {
        let now = if self.server_time { 0 } else { now / 1_000 };
        Call::new(self.link.script_hash(), op, now, &self.prefix)
    }

    /// See [`crate::store::Store::admit`]. Bans are checked and struck in
    /// this instance's memory; the buckets in Redis.
    pub async fn admit(
        &self,
        asks: &Asks<'_>,
        now: Nanos,
        admission: &mut Admission,
    ) -> Result<(), StoreError> {
        for (index, rule) in asks.rules.iter().enumerate().filter(|(_, r)| !r.shadow) {
            if let Some(left) = rule.bans.and_then(|bans| bans.banned(rule.key, now)) {
                reset(admission, asks.limits.len(), now);
                admission.outcome = Outcome::Banned { rule: index, left };
                return Ok(());
            }
        }
        let leases: SmallVec<[u64; 2]> = asks
            .limits
            .iter()
            .filter(|ask| matches!(ask.limiter, Limiter::Concurrency(_)))
            .map(|_| self.leases.next_id())
            .collect();
        let mut call = self.call("admit", now);
        call.asks(asks, &leases);
        let answer: Vec<i64> = self.link.run(call.finish()).await?;
        let at = script::instant(&answer)?;
        reset(admission, asks.limits.len(), at);
        let admitted = script::admitted(&answer)?;
        for (slot, decision) in admission.decisions.iter_mut().enumerate() {
            *decision = script::decision(&answer, slot)?;
        }
        if !admitted {
            admission.outcome = Outcome::Limited;
            self.local.strike(asks, admission, now);
            return Ok(());
        }
        for (index, rule) in asks.rules.iter().enumerate() {
            let decisions = &admission.decisions[rule.limits.clone()];
            if rule.shadow && decisions.iter().any(|d| !d.is_allowed()) {
                admission.shadow_limited.push(index);
                continue;
            }
            for slot in rule.limits.clone() {
                let ask = &asks.limits[slot];
                let taken = match ask.limiter {
                    Limiter::Concurrency(_) => {
                        let before = asks.limits[..slot]
                            .iter()
                            .filter(|ask| matches!(ask.limiter, Limiter::Concurrency(_)))
                            .count();
                        let id = leases[before];
                        let key = script::key_name(&self.prefix, ask.table, ask.key);
                        self.leases.taken(id, key);
                        Taken::Lease { id }
                    }
                    _ => Taken::Bucket,
                };
                admission.receipts.push(Receipt {
                    rule: index,
                    table: ask.table.clone(),
                    key: ask.key,
                    limiter: *ask.limiter,
                    units: ask.cost,
                    taken,
                    at,
                    charged: 0,
                    settled: false,
                });
            }
        }
        Ok(())
    }

    /// See [`crate::store::Store::settle`].
    pub async fn settle(
        &self,
        receipt: &mut Receipt,
        how: Settle,
        now: Nanos,
    ) -> Result<(), StoreError> {
        let Some(command) = self.settling(std::slice::from_mut(receipt), how, now) else {
            return Ok(());
        };
        self.link.run::<redis::Value>(command).await.map(|_| ())
    }

    /// See [`crate::store::Store::settle_detached`]: the receipts are marked
    /// settled now and the call is sent by a task. A call that fails is
    /// logged and lost: a charge or a refund missed, never a request held.
    pub fn settle_detached(&self, receipts: &mut [Receipt], how: Settle, now: Nanos) {
        if let Some(command) = self.settling(receipts, how, now) {
            self.link.send_detached(command);
        }
    }

    /// The settle call for `receipts`, marking them as [`MemoryStore::settle`]
    /// does; `None` when there is nothing to send (kept units stay where
    /// they are in Redis).
    fn settling(&self, receipts: &mut [Receipt], how: Settle, now: Nanos) -> Option<Cmd> {
        let mut call = self.call("settle", now);
        let mut any = false;
        for receipt in receipts {
            let charge = matches!(how, Settle::Charge(_));
            if receipt.settled && !charge {
                continue;
            }
            receipt.settled |= !charge;
            let (code, units) = match (receipt.taken, how) {
                (Taken::Lease { id }, Settle::Keep | Settle::GiveBack) => {
                    self.leases.returned(id);
                    (3, id)
                }
                (Taken::Lease { .. }, Settle::Charge(_)) => continue,
                (_, Settle::Keep) => continue,
                (Taken::Bucket, Settle::GiveBack) => (1, receipt.units),
                (_, Settle::GiveBack) => continue,
                (_, Settle::Charge(units)) => {
                    receipt.charged = receipt.charged.saturating_add(units);
                    (2, units)
                }
            };
            call.receipt(receipt, code, units);
            any = true;
        }
        any.then(|| call.finish())
    }

    /// See [`crate::store::Store::spend`].
    pub async fn spend(
        &self,
        asks: &Asks<'_>,
        now: Nanos,
        after: &mut Decisions,
    ) -> Result<(), StoreError> {
        self.decide_all("spend", asks, now, after).await
    }

    /// See [`crate::store::Store::peek`].
    pub async fn peek(
        &self,
        asks: &Asks<'_>,
        now: Nanos,
        decisions: &mut Decisions,
    ) -> Result<(), StoreError> {
        self.decide_all("peek", asks, now, decisions).await
    }

    async fn decide_all(
        &self,
        op: &'static str,
        asks: &Asks<'_>,
        now: Nanos,
        decisions: &mut Decisions,
    ) -> Result<(), StoreError> {
        let mut call = self.call(op, now);
        call.all_enforced(asks);
        let answer: Vec<i64> = self.link.run(call.finish()).await?;
        decisions.clear();
        for slot in 0..asks.limits.len() {
            decisions.push(script::decision(&answer, slot)?);
        }
        Ok(())
    }
}

/// `admission` emptied for a new answer at `at`.
fn reset(admission: &mut Admission, limits: usize, at: Nanos) {
    admission.outcome = Outcome::Admitted;
    admission.decisions.clear();
    admission.decisions.resize(limits, UNASKED);
    admission.receipts.clear();
    admission.queued = None;
    admission.at = at;
    admission.shadow_limited.clear();
    admission.bans_started.clear();
}

/// A random number (std's hasher keys come from the operating system's
/// randomness): an instance's heartbeat name, a new shared key seed.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}
