//! The in-memory store: one sharded hash table per rule, bounded in total by
//! `store.max_keys`.
//!
//! Each table is split into many shards, each a small open-addressing map
//! ([`probe_map`]) from the 64-bit bucket key to the bucket's state behind its
//! own mutex, padded to a cache line. A decision locks exactly one shard for a
//! few nanoseconds; there is no global lock on the request path.
//!
//! Bounding memory: a new key may only be inserted while fewer than
//! `max_keys` buckets exist. When the store is full it sweeps shards for
//! buckets that are indistinguishable from fresh ones (refilled: TAT ≤ now)
//! and drops them (`evictions{reason="idle"}`); dropping those changes no
//! decision. If nothing can be dropped, a new key is limited through its
//! rule's shared overflow bucket (`evictions{reason="overflow"}`) instead of
//! being admitted freely, and an over-limit caller keeps its bucket, so
//! flooding new keys never resets anyone.

mod probe_map;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use smallvec::SmallVec;

use super::{Ask, BucketKey, Grant};
use crate::clock::Nanos;
use crate::limiter::gcra::Step;
use crate::limiter::{Decision, Gcra, Limiter};
use probe_map::ProbeMap;

/// Shards per rule table. A power of two; enough that two workers rarely
/// meet on one lock, few enough that an empty table stays small.
const SHARDS: usize = 64;

/// After a sweep that freed nothing, new keys go to the overflow bucket
/// without sweeping again for this long, so a table full of active buckets
/// cannot turn every new key into a full scan.
const SWEEP_BACKOFF: Nanos = 20_000_000;

/// Shards scanned per sweep attempt (the work one request may do).
const SWEEP_SHARDS: usize = 8;

/// Counters read by `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Buckets dropped because they were indistinguishable from fresh ones.
    pub evicted_idle: u64,
    /// Decisions made through an overflow bucket because the store was full.
    pub overflow: u64,
    /// Buckets currently tracked, all tables.
    pub tracked: usize,
}

/// The in-memory bucket store.
#[derive(Debug)]
pub struct MemoryStore {
    tables: Box<[Table]>,
    max_keys: usize,
    /// Buckets stored in all tables; a new key is admitted to a table only
    /// after reserving a place here.
    total: AtomicUsize,
    /// Earliest `now` at which the next sweep may run.
    next_sweep: AtomicU64,
    /// Round-robin position of the next sweep.
    sweep_cursor: AtomicUsize,
    evicted_idle: AtomicU64,
    overflow: AtomicU64,
}

#[derive(Debug)]
struct Table {
    shards: Box<[Shard]>,
    len: AtomicUsize,
    /// The TAT of the shared bucket that new keys use while the store is full.
    overflow_tat: Mutex<Nanos>,
}

/// One lock and its map, alone on its cache line so that two workers
/// touching neighbouring shards do not bounce one line between cores.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Shard(Mutex<ProbeMap>);

impl Shard {
    fn lock(&self) -> MutexGuard<'_, ProbeMap> {
        // A panic while a shard was locked cannot leave a TAT half-written
        // (it is one u64), so a poisoned shard is still consistent: keep
        // serving instead of cascading the panic to every key in the shard.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl MemoryStore {
    /// A store with `tables` rule tables and room for `max_keys` buckets.
    pub fn new(tables: usize, max_keys: usize) -> MemoryStore {
        MemoryStore {
            tables: (0..tables)
                .map(|_| Table {
                    shards: (0..SHARDS).map(|_| Shard::default()).collect(),
                    len: AtomicUsize::new(0),
                    overflow_tat: Mutex::new(0),
                })
                .collect(),
            max_keys,
            total: AtomicUsize::new(0),
            next_sweep: AtomicU64::new(0),
            sweep_cursor: AtomicUsize::new(0),
            evicted_idle: AtomicU64::new(0),
            overflow: AtomicU64::new(0),
        }
    }

    /// See [`super::Store::acquire_all`].
    pub fn acquire_all(&self, asks: &[Ask<'_>], now: Nanos, decisions: &mut [Decision]) -> bool {
        debug_assert_eq!(asks.len(), decisions.len());
        if let ([ask], [decision]) = (asks, &mut *decisions) {
            // One applicable rule, the common case: nothing to roll back.
            *decision = self.acquire(ask, now).0;
            return decision.is_allowed();
        }
        // What each admitting limit took, so it can be given back exactly.
        let mut grants: SmallVec<[Grant; 8]> = SmallVec::with_capacity(asks.len());
        for (index, ask) in asks.iter().enumerate() {
            let (decision, grant) = self.acquire(ask, now);
            decisions[index] = decision;
            if decision.is_allowed() {
                grants.push(grant);
                continue;
            }
            // Keep asking the remaining limits so that the 429 reports every
            // limit the request violates, but take nothing more.
            for (later, rest) in asks.iter().enumerate().skip(index + 1) {
                decisions[later] = self.peek(rest, now);
            }
            // Give back what the earlier limits took, and report them as
            // they are now.
            for (earlier, (ask, grant)) in asks.iter().zip(&grants).enumerate() {
                self.refund(ask, *grant);
                let Limiter::TokenBucket(gcra) = ask.limiter;
                decisions[earlier] = Decision::Allow(gcra.peek(self.current_tat(ask), now));
            }
            return false;
        }
        true
    }

    fn acquire(&self, ask: &Ask<'_>, now: Nanos) -> (Decision, Grant) {
        let Limiter::TokenBucket(gcra) = ask.limiter;
        let table = &self.tables[ask.table];
        let shard = table.shard(ask.key);
        {
            let mut map = shard.lock();
            if let Some(tat) = map.get_mut(slot_key(ask.key)) {
                let step = gcra.acquire(*tat, now, ask.cost);
                return (apply(step, tat), grant_of(&step, Grant::Bucket));
            }
            let step = gcra.acquire(0, now, ask.cost);
            let Some(new_tat) = step.new_tat else {
                // A fresh bucket that denies (closed route) need not be stored.
                return (step.decision, Grant::None);
            };
            if self.reserve() {
                map.insert(slot_key(ask.key), new_tat);
                table.len.fetch_add(1, Ordering::Relaxed);
                return (step.decision, Grant::Bucket);
            }
        }
        // Full. Sweep without holding our shard's lock (the sweep takes shard
        // locks one at a time), then try once more.
        if self.sweep(now) && self.reserve() {
            let mut map = shard.lock();
            let existing = map.get(slot_key(ask.key));
            if existing.is_some() {
                // Another request inserted the key meanwhile.
                self.total.fetch_sub(1, Ordering::Relaxed);
            }
            let step = gcra.acquire(existing.unwrap_or(0), now, ask.cost);
            match (existing, step.new_tat) {
                (_, Some(new_tat)) => {
                    if map.insert(slot_key(ask.key), new_tat).is_none() {
                        table.len.fetch_add(1, Ordering::Relaxed);
                    }
                }
                (None, None) => {
                    self.total.fetch_sub(1, Ordering::Relaxed);
                }
                (Some(_), None) => {}
            }
            return (step.decision, grant_of(&step, Grant::Bucket));
        }
        self.overflow.fetch_add(1, Ordering::Relaxed);
        let mut tat = table.overflow_tat.lock().unwrap_or_else(|p| p.into_inner());
        let step = gcra.acquire(*tat, now, ask.cost);
        (apply(step, &mut tat), grant_of(&step, Grant::Overflow))
    }

    /// What asking would decide, without taking anything.
    fn peek(&self, ask: &Ask<'_>, now: Nanos) -> Decision {
        let Limiter::TokenBucket(gcra) = ask.limiter;
        gcra.acquire(self.current_tat(ask), now, ask.cost).decision
    }

    /// The key's TAT; 0 (fresh) when untracked.
    fn current_tat(&self, ask: &Ask<'_>) -> Nanos {
        self.tables[ask.table]
            .shard(ask.key)
            .lock()
            .get(slot_key(ask.key))
            .unwrap_or(0)
    }

    fn refund(&self, ask: &Ask<'_>, grant: Grant) {
        let Limiter::TokenBucket(gcra) = ask.limiter;
        let table = &self.tables[ask.table];
        match grant {
            Grant::Bucket => {
                if let Some(tat) = table.shard(ask.key).lock().get_mut(slot_key(ask.key)) {
                    *tat = gcra.refund(*tat, ask.cost);
                }
            }
            Grant::Overflow => {
                let mut tat = table.overflow_tat.lock().unwrap_or_else(|p| p.into_inner());
                *tat = gcra.refund(*tat, ask.cost);
            }
            Grant::None => {}
        }
    }

    /// Takes one place in the global bound, if there is one.
    fn reserve(&self) -> bool {
        if self.total.fetch_add(1, Ordering::Relaxed) < self.max_keys {
            true
        } else {
            self.total.fetch_sub(1, Ordering::Relaxed);
            false
        }
    }

    /// Drops fresh-equivalent buckets from the next few shards. Returns
    /// whether anything was freed. At most one sweep per backoff period runs
    /// after a fruitless one.
    fn sweep(&self, now: Nanos) -> bool {
        if now < self.next_sweep.load(Ordering::Relaxed) {
            return false;
        }
        let all_shards = self.tables.len() * SHARDS;
        let start = self.sweep_cursor.fetch_add(SWEEP_SHARDS, Ordering::Relaxed);
        let mut freed = 0;
        for offset in 0..SWEEP_SHARDS.min(all_shards) {
            let index = (start + offset) % all_shards;
            let table = &self.tables[index / SHARDS];
            let mut map = table.shards[index % SHARDS].lock();
            let dropped = map.retain(|_, tat| !Gcra::is_full(tat, now));
            drop(map);
            if dropped > 0 {
                table.len.fetch_sub(dropped, Ordering::Relaxed);
                self.total.fetch_sub(dropped, Ordering::Relaxed);
                freed += dropped;
            }
        }
        if freed == 0 {
            self.next_sweep
                .store(now.saturating_add(SWEEP_BACKOFF), Ordering::Relaxed);
            return false;
        }
        self.evicted_idle.fetch_add(freed as u64, Ordering::Relaxed);
        true
    }

    /// Counters for `/metrics`.
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            evicted_idle: self.evicted_idle.load(Ordering::Relaxed),
            overflow: self.overflow.load(Ordering::Relaxed),
            tracked: self.total.load(Ordering::Relaxed),
        }
    }

    /// Buckets tracked in one table.
    pub fn tracked_keys(&self, table: usize) -> usize {
        self.tables
            .get(table)
            .map_or(0, |t| t.len.load(Ordering::Relaxed))
    }
}

impl Table {
    #[inline]
    fn shard(&self, key: BucketKey) -> &Shard {
        // The map uses the low bits of the key for its buckets and the top 7
        // bits for its tags; pick the shard from bits in between.
        &self.shards[(key >> 32) as usize & (SHARDS - 1)]
    }
}

/// Stores the step's new TAT (if admitted) and returns its decision.
#[inline]
fn apply(step: Step, tat: &mut Nanos) -> Decision {
    if let Some(new_tat) = step.new_tat {
        *tat = new_tat;
    }
    step.decision
}

#[inline]
fn grant_of(step: &Step, grant: Grant) -> Grant {
    if step.new_tat.is_some() {
        grant
    } else {
        Grant::None
    }
}

/// Key 0 marks an empty slot in [`ProbeMap`]; a zero hash (1 in 2^64) shares
/// key 1's bucket instead.
#[inline]
fn slot_key(key: BucketKey) -> u64 {
    key.max(1)
}
