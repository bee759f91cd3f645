//! The sync: one task per instance, every `sync_interval`, whatever the
//! request rate and even when idle (so the time since the last sync is a
//! health signal: small while Redis answers, growing while it does not).
//!
//! Each round drains the deltas noted since the last one, adds them to
//! those a failed round left (the outbox), and sends them [`CHUNK`] buckets
//! at a time, one chunk after the other: the units given back first (a
//! settle call), then every bucket's units taken (a `sync` call of the
//! script, or on a Redis Cluster, whose calls keep to one caller's slot,
//! one per bucket, all at once), each answered with the shared bucket's
//! state, which the instance then adopts ([`super::replica`]).
//! Then the bans ([`super::bans`]): the strikes counted since, and the
//! board's version (all an idle round asks). A round that fails keeps its
//! deltas for the next one; while Redis fails the outbox holds at most
//! `max_keys` of them and drops the oldest first
//! (`sluice_store_sync_dropped_total`).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Weak;

use futures_util::future::join_all;
use tokio::time::MissedTickBehavior;

use super::deltas::Delta;
use super::{replica, HybridStore};
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::limiter::{BucketState, Limiter};
use crate::store::admission::{Receipt, Settle, StoreError, Taken};
use crate::store::redis::Synced;

/// Buckets sent in one script call: a script holds Redis for its whole
/// run, so a long batch is cut into calls of a few hundred microseconds
/// (the strikes too).
pub(super) const CHUNK: usize = 256;

/// How the sync is doing, shared with the request path (which reads only
/// [`SyncStatus::is_failing`]) and `/metrics`.
#[derive(Debug, Default)]
pub struct SyncStatus {
    /// When the last round completed (the proxy's clock; 0: none yet).
    last: AtomicU64,
    /// How long it took.
    took: AtomicU64,
    /// Whether the last round failed.
    failing: AtomicBool,
    rounds: AtomicU64,
    calls: AtomicU64,
    errors: AtomicU64,
}

/// The sync as `/metrics` and the admin views report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncStats {
    /// Time since the last completed sync (`None`: none yet).
    pub age: Option<Nanos>,
    /// How long the last completed sync took.
    pub took: Nanos,
    /// Buckets whose deltas wait for the next sync.
    pub pending: usize,
    pub rounds: u64,
    /// Calls to Redis the syncs made.
    pub calls: u64,
    pub errors: u64,
    /// Deltas never sent (a full map, or dropped while Redis failed).
    pub dropped: u64,
    pub failing: bool,
}

impl SyncStatus {
    #[inline]
    pub fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    pub fn stats(&self, now: Nanos, pending: usize, dropped: u64) -> SyncStats {
        let last = self.last.load(Ordering::Relaxed);
        SyncStats {
            age: (last > 0).then(|| now.saturating_sub(last)),
            took: self.took.load(Ordering::Relaxed),
            pending,
            rounds: self.rounds.load(Ordering::Relaxed),
            calls: self.calls.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            dropped,
            failing: self.is_failing(),
        }
    }
}

/// Starts the sync task of `store` (nothing outside a runtime). It ends
/// when the store is dropped.
pub fn start(store: Weak<HybridStore>, clock: ProxyClock) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let Some(interval) = store.upgrade().map(|store| {
        // The age of the syncs counts from start: a Redis down from the
        // start shows as a growing age, not as a sync that just ran.
        store.status.last.store(clock.now(), Ordering::Relaxed);
        store.interval
    }) else {
        return;
    };
    runtime.spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        // A round slower than the interval delays the next; none are
        // made up in a burst.
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(store) = store.upgrade() else {
                return;
            };
            store.sync(&clock).await;
        }
    });
}

impl HybridStore {
    /// One round (see the module docs), at the instants `clock` reads: the
    /// task runs one every interval; tests call it at their own instants.
    pub async fn sync(&self, clock: &impl Clock) {
        // Only the task (or a test) syncs: the lock is never contended.
        let mut outbox = self.outbox.lock().await;
        let outbox = &mut *outbox;
        let started = clock.now();
        self.count_instances();
        let dropped = outbox.push(self.deltas.drain(), self.deltas.capacity());
        self.deltas.drop_unsent(dropped);
        let batch = outbox.take_merged();
        let idle = batch.is_empty();
        let exchanged = if idle {
            Ok(0)
        } else {
            self.exchange(batch, clock).await
        };
        // Then the bans. An idle round asks only the board's version, which
        // tells whether Redis answers; after deltas that reached Redis, a
        // failure here leaves the limits shared (what it missed waits for
        // the next round).
        let answered = match exchanged {
            Ok(calls) => match self.follow_bans(clock).await {
                Ok(more) => Ok(calls + more),
                Err(error) if idle => Err((error, Vec::new())),
                Err(error) => {
                    self.status.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%error, "the bans were not followed this round");
                    Ok(calls)
                }
            },
            Err(failed) => Err(failed),
        };
        let status = &self.status;
        status.rounds.fetch_add(1, Ordering::Relaxed);
        match answered {
            Ok(calls) => {
                let now = clock.now();
                status.calls.fetch_add(calls, Ordering::Relaxed);
                status
                    .took
                    .store(now.saturating_sub(started), Ordering::Relaxed);
                status.last.store(now, Ordering::Relaxed);
                if status.failing.swap(false, Ordering::Relaxed) {
                    self.count_instances();
                    tracing::warn!("Redis answers the sync again: limits are shared again");
                }
            }
            Err((error, unsent)) => {
                status.errors.fetch_add(1, Ordering::Relaxed);
                let dropped = outbox.put_back(unsent, self.deltas.capacity());
                self.deltas.drop_unsent(dropped);
                if !status.failing.swap(true, Ordering::Relaxed) {
                    self.count_instances();
                    tracing::warn!(
                        %error,
                        instances = self.instances(),
                        "Redis did not answer the sync: each limit is enforced at this \
                         instance's share until it does"
                    );
                }
            }
        }
    }

    /// Sends `batch` and adopts the shared state of every bucket in it: the
    /// calls made, or the error and the deltas not sent. (A call that timed
    /// out may still have been run by Redis: its deltas are sent again,
    /// and counted twice, which errs towards refusing.)
    async fn exchange(
        &self,
        mut batch: Vec<Delta>,
        clock: &impl Clock,
    ) -> Result<u64, (StoreError, Vec<Delta>)> {
        let mut calls = 0;
        // One limit's buckets in a row: a call writes its parameters once.
        batch.sort_unstable_by_key(|delta| delta.table.id());
        let mut rest = batch.as_slice();
        while !rest.is_empty() {
            let (part, after) = rest.split_at(rest.len().min(CHUNK));
            calls += self.give_back(part, clock.now()).await;
            let answered = if self.shared.link().is_cluster() {
                self.sync_one_by_one(part, clock).await
            } else {
                self.sync_together(part, clock).await
            };
            match answered {
                Ok(made) => calls += made,
                Err((error, mut failed)) => {
                    // Their give-backs went out above: put back without
                    // them, so that a later round does not give them twice
                    // (one that did not reach Redis is lost, which errs
                    // towards refusing).
                    for delta in &mut failed {
                        delta.given_back = 0;
                    }
                    let mut unsent = failed;
                    unsent.extend_from_slice(after);
                    return Err((error, unsent));
                }
            }
            rest = after;
        }
        Ok(calls)
    }

    /// One sync call for every bucket of `part` (one Redis). One call, or
    /// the error and all of `part`.
    async fn sync_together(
        &self,
        part: &[Delta],
        clock: &impl Clock,
    ) -> Result<u64, (StoreError, Vec<Delta>)> {
        let buckets: Vec<Synced<'_>> = part.iter().map(synced).collect();
        let synced = self.shared.sync(&buckets, clock.now()).await;
        let views = synced.map_err(|error| (error, part.to_vec()))?;
        let now = clock.now();
        for (delta, view) in part.iter().zip(views) {
            self.adopt(delta, view, now);
        }
        Ok(1)
    }

    /// One sync call per bucket of `part`, all at once (a Redis Cluster,
    /// where a call keeps to one caller's slot). The calls made, or the
    /// first error and the buckets whose call failed.
    async fn sync_one_by_one(
        &self,
        part: &[Delta],
        clock: &impl Clock,
    ) -> Result<u64, (StoreError, Vec<Delta>)> {
        let at = clock.now();
        let answers = join_all(
            part.iter()
                .map(|delta| async move { self.shared.sync(&[synced(delta)], at).await }),
        )
        .await;
        let now = clock.now();
        let mut failed = Vec::new();
        let mut first_error = None;
        for (delta, answer) in part.iter().zip(answers) {
            match answer.map(|views| views.first().copied()) {
                Ok(Some(view)) => self.adopt(delta, view, now),
                Ok(None) => {}
                Err(error) => {
                    first_error.get_or_insert(error);
                    failed.push(delta.clone());
                }
            }
        }
        match first_error {
            None => Ok(part.len() as u64),
            Some(error) => Err((error, failed)),
        }
    }

    /// Makes the shared `view` of `delta`'s bucket this instance's own, with
    /// what it took since the sync was sent. (A request decided between the
    /// two reads below and noted after them is missing from this view until
    /// the next sync, which sends its units all the same: the view errs by
    /// the requests in flight at that instant, for one interval.)
    fn adopt(&self, delta: &Delta, view: BucketState, now: Nanos) {
        let spent = replica::spent(&delta.limiter, view, now);
        let unsent = self.deltas.unsent(&delta.table, delta.key);
        self.local()
            .adopt(&delta.table, &delta.limiter, delta.key, spent + unsent, now);
    }

    /// Gives back in Redis the units of `part` that an earlier sync sent as
    /// taken. A token bucket takes them back as units of the current
    /// instant (Redis saw them taken when they were sent, not when the
    /// request took them); a window, from the window the earliest was taken
    /// in; a leaky bucket keeps them (it gives back only its last units,
    /// taken while its outlet was idle). A give-back that fails is lost
    /// (logged): the instances then count those units as spent, never the
    /// reverse. The calls made.
    async fn give_back(&self, part: &[Delta], now: Nanos) -> u64 {
        let mut receipts: Vec<Receipt> = part
            .iter()
            .enumerate()
            .filter(|(_, delta)| delta.given_back > 0)
            .map(|(rule, delta)| Receipt {
                rule,
                table: delta.table.clone(),
                key: delta.key,
                limiter: delta.limiter,
                units: delta.given_back,
                taken: Taken::Bucket,
                at: match delta.limiter {
                    Limiter::TokenBucket(_) | Limiter::LeakyBucket(_) => {
                        now.saturating_add(GIVE_BACK_AHEAD)
                    }
                    _ => delta.given_back_at,
                },
                charged: 0,
                settled: false,
            })
            .collect();
        if receipts.is_empty() {
            return 0;
        }
        let sent = self.shared.settle(&mut receipts, Settle::GiveBack, now);
        let calls = sent.len() as u64;
        sent.answered().await;
        calls
    }
}

/// What the sync call carries for `delta`: its units taken.
fn synced(delta: &Delta) -> Synced<'_> {
    Synced {
        table: &delta.table,
        limiter: &delta.limiter,
        key: delta.key,
        units: delta.taken,
    }
}

/// How far ahead of now a bucket's give-back is dated, so that Redis
/// counts it as taken at its own now whatever the clocks' skew.
const GIVE_BACK_AHEAD: Nanos = 60_000_000_000;

/// Deltas that failed rounds could not send, oldest first.
#[derive(Debug, Default)]
pub struct Outbox {
    batches: VecDeque<Vec<Delta>>,
    len: usize,
}

impl Outbox {
    /// Adds a round's deltas; drops the oldest beyond `max`. How many were
    /// dropped.
    fn push(&mut self, batch: Vec<Delta>, max: usize) -> usize {
        if !batch.is_empty() {
            self.len += batch.len();
            self.batches.push_back(batch);
        }
        self.trim(max)
    }

    /// A failed round's deltas go back, before anything newer.
    fn put_back(&mut self, batch: Vec<Delta>, max: usize) -> usize {
        if !batch.is_empty() {
            self.len += batch.len();
            self.batches.push_front(batch);
        }
        self.trim(max)
    }

    fn trim(&mut self, max: usize) -> usize {
        let mut dropped = 0;
        while self.len > max {
            let Some(mut oldest) = self.batches.pop_front() else {
                break;
            };
            let excess = (self.len - max).min(oldest.len());
            oldest.drain(..excess);
            self.len -= excess;
            dropped += excess;
            if !oldest.is_empty() {
                self.batches.push_front(oldest);
            }
        }
        dropped
    }

    /// Every delta waiting, one per bucket (later rounds' units added to
    /// earlier ones').
    fn take_merged(&mut self) -> Vec<Delta> {
        self.len = 0;
        if self.batches.len() == 1 {
            return self.batches.pop_front().unwrap_or_default();
        }
        let mut merged: HashMap<(usize, u64), Delta> = HashMap::new();
        for batch in self.batches.drain(..) {
            for delta in batch {
                match merged.entry((delta.table.id(), delta.key)) {
                    Entry::Occupied(mut entry) => {
                        let into = entry.get_mut();
                        into.taken = into.taken.saturating_add(delta.taken);
                        if delta.given_back > 0 {
                            into.give_back(delta.given_back, delta.given_back_at);
                        }
                        into.limiter = delta.limiter;
                    }
                    Entry::Vacant(entry) => {
                        entry.insert(delta);
                    }
                }
            }
        }
        merged.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::hybrid::deltas::Deltas;
    use crate::store::memory::MemoryStore;
    use crate::store::suite::token_bucket;
    use crate::store::BucketTable;

    fn table() -> BucketTable {
        MemoryStore::new(10).table(&token_bucket(10, 1))
    }

    /// One round's deltas: `taken` units from each of `keys` in `table`.
    fn deltas(table: &BucketTable, keys: std::ops::Range<u64>, taken: u64) -> Vec<Delta> {
        let noted = Deltas::new(100);
        for key in keys {
            noted.took_from(table, &token_bucket(10, 1), key, taken, 0);
        }
        noted.drain()
    }

    /// While Redis fails, the deltas wait up to the bound, the oldest
    /// dropped first and counted; a failed round's go back before newer
    /// ones, so they are the first to go.
    #[test]
    fn the_outbox_keeps_the_newest_deltas_up_to_its_bound() {
        let table = table();
        let deltas = |keys, taken| deltas(&table, keys, taken);
        let mut outbox = Outbox::default();
        assert_eq!(outbox.push(deltas(0..4, 1), 6), 0);
        assert_eq!(
            outbox.push(deltas(10..14, 1), 6),
            2,
            "two of the oldest dropped"
        );
        let kept: Vec<u64> = outbox.take_merged().iter().map(|d| d.key).collect();
        let older = |kept: &[u64], keys: std::ops::Range<u64>| {
            kept.iter().filter(|key| keys.contains(key)).count()
        };
        assert_eq!((older(&kept, 0..4), older(&kept, 10..14)), (2, 4));
        assert_eq!(outbox.put_back(deltas(0..3, 1), 4), 0);
        assert_eq!(
            outbox.push(deltas(20..23, 1), 4),
            2,
            "the failed round's went first"
        );
        let kept: Vec<u64> = outbox.take_merged().iter().map(|d| d.key).collect();
        assert_eq!((older(&kept, 0..3), older(&kept, 20..23)), (1, 3));
    }

    /// Rounds that failed add up per bucket when Redis is back.
    #[test]
    fn failed_rounds_are_sent_as_one_delta_per_bucket() {
        let table = table();
        let deltas = |keys, taken| deltas(&table, keys, taken);
        let mut outbox = Outbox::default();
        outbox.push(deltas(0..2, 3), 100);
        outbox.push(deltas(1..3, 4), 100);
        let mut merged: Vec<(u64, u64)> = outbox
            .take_merged()
            .iter()
            .map(|d| (d.key, d.taken))
            .collect();
        merged.sort_unstable();
        assert_eq!(merged, [(0, 3), (1, 7), (2, 4)]);
    }
}
