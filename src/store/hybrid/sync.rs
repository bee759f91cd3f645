//! The sync: one task per instance, every `sync_interval`, whatever the
//! request rate and even when idle (so the time since the last sync is a
//! health signal: small while Redis answers, growing while it does not).
//!
//! Each round drains the deltas noted since the last one, adds them to
//! those a failed round left (the outbox), and sends them in `sync` calls
//! of the script of [`CHUNK`] buckets at most: on one Redis one call after
//! the other; on a Redis Cluster, whose calls keep to one slot, the slots'
//! calls at once, each slot's one after the other. A call carries each
//! bucket's units taken and the units given back of what earlier syncs
//! sent, and is answered with the shared bucket's state, which the
//! instance then adopts ([`super::replica`]). Then the bans
//! ([`super::bans`]): the strikes counted since, and the board's version
//! (all an idle round asks).
//!
//! Nothing is lost, nothing counted twice (docs/multi-instance.md, "When
//! Redis is slow or away"): each call is numbered, and Redis remembers
//! the highest number it ran for this instance (per slot), so a call that
//! got no answer is kept as it is and sent again, before anything newer,
//! until Redis answers: if Redis ran it already, it only reads. Such a call
//! is given up after `settle_retry_for`. A round that fails keeps the
//! deltas it did not send for the next one; while Redis fails the outbox
//! holds at most `max_keys` of them and drops the oldest first
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
use crate::store::admission::StoreError;
use crate::store::redis::slots::{self, Slot};
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
        // Only the task (or a test, or the last flush) syncs: the lock is
        // rarely contended.
        let mut outbox = self.outbox.lock().await;
        let outbox = &mut *outbox;
        let started = clock.now();
        self.count_instances();
        let dropped = outbox.push(self.deltas.drain(), self.deltas.capacity());
        self.deltas.drop_unsent(dropped);
        let exchanged = match self.resend(outbox, clock).await {
            Ok(resent) => {
                let batch = outbox.take_merged();
                let idle = batch.is_empty() && resent == 0;
                match self.exchange(batch, outbox, clock).await {
                    Ok(calls) => Ok((calls + resent, idle)),
                    Err(failed) => Err(failed),
                }
            }
            Err(error) => Err((error, Vec::new())),
        };
        // Then the bans. An idle round asks only the board's version, which
        // tells whether Redis answers; after deltas that reached Redis, a
        // failure here leaves the limits shared (what it missed waits for
        // the next round).
        let answered = match exchanged {
            Ok((calls, idle)) => match self.follow_bans(clock).await {
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
        self.close_round(answered, outbox, started, clock);
    }

    /// Records how the round that started at `started` went: the deltas it
    /// did not send go back to `outbox`.
    fn close_round(
        &self,
        answered: Result<u64, (StoreError, Vec<Delta>)>,
        outbox: &mut Outbox,
        started: Nanos,
        clock: &impl Clock,
    ) {
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

    /// Sends again, as they were and under their numbers, the calls whose
    /// answers never came (Redis may have run them: it then only reads),
    /// before anything newer; a call older than `settle_retry_for` is given
    /// up. The calls made, or the first error (the calls that failed stay).
    async fn resend(&self, outbox: &mut Outbox, clock: &impl Clock) -> Result<u64, StoreError> {
        if outbox.unanswered.is_empty() {
            return Ok(0);
        }
        let now = clock.now();
        let retry_for = self.shared.settle_retry_for().as_nanos() as Nanos;
        outbox.unanswered.retain(|call| {
            let keep = now.saturating_sub(call.first_sent) < retry_for;
            if !keep {
                self.deltas.drop_unsent(call.deltas.len());
            }
            keep
        });
        let calls = std::mem::take(&mut outbox.unanswered);
        let made = calls.len() as u64;
        let answers = join_all(calls.iter().map(|call| self.send(call, clock))).await;
        let mut first_error = None;
        for (call, answer) in calls.into_iter().zip(answers) {
            if let Err(error) = answer {
                first_error.get_or_insert(error);
                outbox.unanswered.push(call);
            }
        }
        first_error.map_or(Ok(made), Err)
    }

    /// Sends `batch` and adopts the shared state of every bucket in it, in
    /// calls of [`CHUNK`] buckets of one slot, each numbered: the slots at
    /// once, each slot's calls one after the other. A call without an
    /// answer waits in `outbox` to be sent again as it is; the calls after
    /// it in its slot were not sent. The calls made, or the first error
    /// and the deltas not sent.
    async fn exchange(
        &self,
        batch: Vec<Delta>,
        outbox: &mut Outbox,
        clock: &impl Clock,
    ) -> Result<u64, (StoreError, Vec<Delta>)> {
        let now = clock.now();
        let slots: Vec<Vec<Call>> = self
            .by_slot(batch)
            .into_iter()
            .map(|(slot, deltas)| outbox.calls(slot, deltas, now))
            .collect();
        let made = join_all(
            slots
                .into_iter()
                .map(|calls| self.send_in_order(calls, clock)),
        )
        .await;
        let (mut calls, mut unsent, mut first_error) = (0, Vec::new(), None);
        for (sent, failed) in made {
            calls += sent;
            if let Some((error, call, rest)) = failed {
                first_error.get_or_insert(error);
                outbox.unanswered.push(call);
                unsent.extend(rest.into_iter().flat_map(|call| call.deltas));
            }
        }
        match first_error {
            None => Ok(calls),
            Some(error) => Err((error, unsent)),
        }
    }

    /// `calls` (of one slot) one after the other: how many were answered,
    /// and the first that was not, its error and the calls after it.
    async fn send_in_order(
        &self,
        calls: Vec<Call>,
        clock: &impl Clock,
    ) -> (u64, Option<(StoreError, Call, Vec<Call>)>) {
        let mut answered = 0;
        let mut calls = calls.into_iter();
        while let Some(call) = calls.next() {
            match self.send(&call, clock).await {
                Ok(()) => answered += 1,
                Err(error) => return (answered, Some((error, call, calls.collect()))),
            }
        }
        (answered, None)
    }

    /// One sync call: adds `call`'s deltas unless Redis applied it already,
    /// and adopts the shared state of each of its buckets.
    async fn send(&self, call: &Call, clock: &impl Clock) -> Result<(), StoreError> {
        let at = clock.now();
        let buckets: Vec<Synced<'_>> = call.deltas.iter().map(|d| synced(d, at)).collect();
        let views = self
            .shared
            .sync(&buckets, (call.seq, call.slot), at)
            .await?;
        let now = clock.now();
        for (delta, view) in call.deltas.iter().zip(views) {
            self.adopt(delta, view, now);
        }
        Ok(())
    }

    /// `batch` by the slot of each bucket (one group on one Redis), each
    /// group's buckets of one limit in a row (a call writes a limit's
    /// parameters once for them).
    fn by_slot(&self, mut batch: Vec<Delta>) -> Vec<(Option<Slot>, Vec<Delta>)> {
        batch.sort_unstable_by_key(|delta| delta.table.id());
        if !self.shared.link().is_cluster() {
            return vec![(None, batch)];
        }
        let mut groups: HashMap<Slot, Vec<Delta>> = HashMap::new();
        for delta in batch {
            let key = self.shared.key_name(&delta.table, delta.key);
            groups.entry(slots::slot_of(&key)).or_default().push(delta);
        }
        groups
            .into_iter()
            .map(|(slot, deltas)| (Some(slot), deltas))
            .collect()
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

    /// Whether deltas wait to be sent, or calls to be answered.
    pub(crate) async fn has_unsent(&self) -> bool {
        self.unsent().await > 0
    }

    /// How many buckets' deltas wait to be sent, or answered.
    pub(super) async fn unsent(&self) -> usize {
        let outbox = self.outbox.lock().await;
        outbox.len
            + outbox
                .unanswered
                .iter()
                .map(|call| call.deltas.len())
                .sum::<usize>()
    }
}

/// What the sync call carries for `delta`, sent at `now`: its units taken,
/// and those given back of what earlier syncs sent. A token or leaky
/// bucket takes the latter back as units of the current instant (Redis saw
/// them taken when they were sent, not when the request took them), dated
/// ahead so that Redis counts them so whatever the clocks' skew; a window,
/// in the window the earliest was taken in (a leaky bucket gives back only
/// its last units, taken while its outlet was idle).
fn synced(delta: &Delta, now: Nanos) -> Synced<'_> {
    Synced {
        table: &delta.table,
        limiter: &delta.limiter,
        key: delta.key,
        units: delta.taken,
        given_back: delta.given_back,
        given_back_at: match delta.limiter {
            Limiter::TokenBucket(_) | Limiter::LeakyBucket(_) => {
                now.saturating_add(GIVE_BACK_AHEAD)
            }
            _ => delta.given_back_at,
        },
    }
}

/// How far ahead of now a bucket's give-back is dated, so that Redis
/// counts it as taken at its own now whatever the clocks' skew.
const GIVE_BACK_AHEAD: Nanos = 60_000_000_000;

/// One sync call: some buckets of one slot, numbered. Kept as it is until
/// answered: sent again, it must be the same call, so that Redis, which
/// remembers the highest number it ran for this instance in that slot,
/// runs it once.
#[derive(Debug)]
pub struct Call {
    seq: u64,
    slot: Option<Slot>,
    deltas: Vec<Delta>,
    /// When it was first sent (it is given up `settle_retry_for` later).
    first_sent: Nanos,
}

/// Deltas that failed rounds could not send, oldest first, and the calls
/// sent whose answers never came.
#[derive(Debug, Default)]
pub struct Outbox {
    batches: VecDeque<Vec<Delta>>,
    len: usize,
    /// Sent again, as they are, before anything newer.
    unanswered: Vec<Call>,
    /// The number of the last call made.
    last_seq: u64,
}

impl Outbox {
    /// `deltas` (of one slot) as numbered calls of [`CHUNK`] buckets at
    /// most, made at `now`.
    fn calls(&mut self, slot: Option<Slot>, deltas: Vec<Delta>, now: Nanos) -> Vec<Call> {
        let mut calls = Vec::with_capacity(deltas.len().div_ceil(CHUNK));
        let mut deltas = deltas.into_iter().peekable();
        while deltas.peek().is_some() {
            self.last_seq += 1;
            calls.push(Call {
                seq: self.last_seq,
                slot,
                deltas: deltas.by_ref().take(CHUNK).collect(),
                first_sent: now,
            });
        }
        calls
    }

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
