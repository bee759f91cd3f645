//! What this instance spent since its last sync, per bucket: the deltas
//! the next sync sends to Redis. Noted on the request path (one shard lock,
//! one hash lookup per bucket a request took from), drained by the sync
//! task each interval.
//!
//! A bucket stays *watched* from its first note until it has gone two
//! rounds untouched: each round sends its delta, and the first round it is
//! untouched still asks Redis for its state (a delta of 0), so its local
//! view follows the other instances' spending for an interval more: the
//! spending they sent after this instance's sync in the round it last
//! took from the bucket (a burst on every instance at once, most often).
//! After that its local view is stale: the next note reports it cold, and
//! the store holds the bucket to this instance's share until the next sync
//! ([`super::HybridStore::admit`]). The follow costs a second sync for a
//! bucket touched once (docs/benchmarks-history.md, "Hybrid mode"); without
//! it, a caller that spent its limit in a burst over every instance got up
//! to a share more on each once it came back.
//!
//! Bounded: at most `max_keys` buckets wait in all shards together; a
//! bucket beyond that is not noted, and each note left out is counted as a
//! dropped delta (`sluice_store_sync_dropped_total`). Its own instance still decided with
//! them; only the others never learn of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use super::is_synced;
use crate::clock::Nanos;
use crate::limiter::Limiter;
use crate::store::admission::{Receipt, Taken};
use crate::store::{BucketKey, BucketTable};

/// Shards of the map: enough that workers rarely meet on one lock.
const SHARDS: usize = 16;

/// One bucket's units since the last sync.
#[derive(Debug, Clone)]
pub struct Delta {
    pub table: BucketTable,
    /// The limit as the request that noted it last asked it.
    pub limiter: Limiter,
    pub key: BucketKey,
    /// Units taken (admissions, deferred charges, spends) and not given
    /// back before the sync.
    pub taken: u64,
    /// Units given back that an earlier sync had sent as taken (or, the
    /// deltas of failed rounds merged, that `taken` holds: the sync call
    /// adds `taken` first).
    pub given_back: u64,
    /// When the earliest of those had been taken (a window gives them back
    /// from that window: erring towards refusing when they span several).
    pub given_back_at: Nanos,
    /// The instant of the first units in `taken` (`Nanos::MAX`: none this
    /// round): a receipt taken before it was sent with an earlier sync, so
    /// its give-back must be sent as one.
    since: Nanos,
}

impl Delta {
    /// Adds units given back that an earlier sync sent as taken at `at`.
    pub fn give_back(&mut self, units: u64, at: Nanos) {
        self.given_back_at = match self.given_back {
            0 => at,
            _ => self.given_back_at.min(at),
        };
        self.given_back = self.given_back.saturating_add(units);
    }
}

/// A watched bucket: its delta, and whether it was touched this round.
#[derive(Debug)]
struct Watched {
    delta: Delta,
    touched: bool,
    /// Whether the last round left it untouched (this round follows it).
    idle: bool,
}

type Shard = HashMap<(usize, BucketKey), Watched, foldhash::fast::RandomState>;

/// The deltas of every bucket this instance touched since the last sync.
#[derive(Debug)]
pub struct Deltas {
    shards: Box<[Mutex<Shard>]>,
    /// The most buckets one shard notes.
    per_shard: usize,
    /// Deltas not noted (a full map) or not sent (dropped oldest-first
    /// while Redis failed).
    dropped: AtomicU64,
}

impl Deltas {
    /// Room for `max_keys` buckets' deltas.
    pub fn new(max_keys: usize) -> Deltas {
        Deltas {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: max_keys.div_ceil(SHARDS).max(1),
            dropped: AtomicU64::new(0),
        }
    }

    /// `units` were taken at `at` from `receipt`'s bucket (at admission, or
    /// charged after the response). Whether the bucket was cold (not
    /// watched: its local view may be stale).
    #[inline]
    pub fn took(&self, receipt: &Receipt, units: u64, at: Nanos) -> bool {
        if !from_a_synced_bucket(receipt) {
            return false;
        }
        self.took_from(&receipt.table, &receipt.limiter, receipt.key, units, at)
    }

    /// `units` were taken at `at` from `table`'s bucket `key` (by a request,
    /// or outside one: `/admin/spend`). Whether the bucket was cold.
    #[inline]
    pub fn took_from(
        &self,
        table: &BucketTable,
        limiter: &Limiter,
        key: BucketKey,
        units: u64,
        at: Nanos,
    ) -> bool {
        if units == 0 {
            return false;
        }
        self.note(table, limiter, key, |delta| {
            delta.since = delta.since.min(at);
            delta.taken = delta.taken.saturating_add(units);
        })
    }

    /// `receipt`'s admission units were given back: taken off what waits to
    /// be sent when they are still there (taken this round), else sent as a
    /// give-back.
    pub fn gave_back(&self, receipt: &Receipt) {
        if !from_a_synced_bucket(receipt) {
            return;
        }
        let units = receipt.units;
        self.note(&receipt.table, &receipt.limiter, receipt.key, |delta| {
            if delta.since <= receipt.at && delta.taken >= units {
                delta.taken -= units;
            } else {
                delta.give_back(units, receipt.at);
            }
        });
    }

    #[inline]
    fn note(
        &self,
        table: &BucketTable,
        limiter: &Limiter,
        key: BucketKey,
        change: impl FnOnce(&mut Delta),
    ) -> bool {
        let id = (table.id(), key);
        let mut shard = lock(&self.shards[shard_of(key)]);
        if let Some(watched) = shard.get_mut(&id) {
            watched.delta.limiter = *limiter;
            watched.touched = true;
            change(&mut watched.delta);
            return false;
        }
        if shard.len() >= self.per_shard {
            drop(shard);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let mut delta = Delta {
            table: table.clone(),
            limiter: *limiter,
            key,
            taken: 0,
            given_back: 0,
            given_back_at: 0,
            since: Nanos::MAX,
        };
        change(&mut delta);
        shard.insert(
            id,
            Watched {
                delta,
                touched: true,
                idle: false,
            },
        );
        true
    }

    /// Takes the deltas noted since the last drain, for a sync to send: one
    /// per bucket touched since, and one of 0 per bucket untouched since
    /// (its first round so, to follow the others' spending); buckets
    /// untouched for two rounds are no longer watched.
    pub fn drain(&self) -> Vec<Delta> {
        let mut all = Vec::new();
        for shard in self.shards.iter() {
            lock(shard).retain(|_, watched| {
                if watched.touched {
                    watched.touched = false;
                    watched.idle = false;
                } else if !watched.idle {
                    watched.idle = true;
                } else {
                    return false;
                }
                let delta = &mut watched.delta;
                all.push(delta.clone());
                (delta.taken, delta.given_back, delta.given_back_at) = (0, 0, 0);
                delta.since = Nanos::MAX;
                true
            });
        }
        all
    }

    /// Units taken from `table`'s bucket `key` since the last drain: what a
    /// sync's answer, sent before them, does not count yet.
    pub fn unsent(&self, table: &BucketTable, key: BucketKey) -> u64 {
        lock(&self.shards[shard_of(key)])
            .get(&(table.id(), key))
            .map_or(0, |watched| watched.delta.taken)
    }

    /// Whether `table`'s bucket `key` is watched (the next sync asks
    /// Redis for its state).
    #[cfg(test)]
    pub fn watches(&self, table: &BucketTable, key: BucketKey) -> bool {
        lock(&self.shards[shard_of(key)]).contains_key(&(table.id(), key))
    }

    /// Buckets watched (whose deltas the next sync sends).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| lock(shard).len()).sum()
    }

    /// The most buckets whose deltas may wait (`max_keys`).
    pub fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }

    /// Counts deltas that will never be sent.
    pub fn drop_unsent(&self, count: usize) {
        self.dropped.fetch_add(count as u64, Ordering::Relaxed);
    }

    /// Deltas dropped since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Whether a receipt's units came from a bucket of a synced limit (not a
/// permit, a sliding log or the overflow sketch).
#[inline]
fn from_a_synced_bucket(receipt: &Receipt) -> bool {
    matches!(receipt.taken, Taken::Bucket | Taken::Reserved { .. }) && is_synced(&receipt.limiter)
}

#[inline]
fn shard_of(key: BucketKey) -> usize {
    (key >> 40) as usize & (SHARDS - 1)
}

fn lock(shard: &Mutex<Shard>) -> std::sync::MutexGuard<'_, Shard> {
    // A note is one assignment: a poisoned shard is still consistent.
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}
