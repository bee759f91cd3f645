//! The in-memory store: one sharded hash table per rule, bounded in total by
//! `store.max_keys`.
//!
//! There is one table per limit (a rule with `limits = ["100/m", "1000/h"]`
//! has two), typed by its algorithm's state: a [`crate::limiter::TokenState`]
//! (TAT and refund bookkeeping) for the token bucket,
//! [`crate::limiter::WindowCounts`] for the windows, a
//! [`crate::limiter::LogState`] for the sliding log. Each
//! table is split into many shards, each a small open-addressing map
//! (`probe_map`) from the 64-bit bucket key to the bucket's state behind its
//! own mutex, padded to a cache line. A decision locks exactly one shard for a
//! few nanoseconds; there is no global lock on the request path.
//!
//! Bounding memory: a new key may only be inserted while fewer than
//! `max_keys` buckets exist (all tables together). When the store is full it
//! sweeps shards for buckets that are indistinguishable from fresh ones
//! ([`Algorithm::is_fresh`]: refilled, or their window or log has expired)
//! and drops them (`evictions{reason="idle"}`); dropping those changes no
//! decision. If nothing can be dropped, a new key is limited through its
//! table's overflow sketch (`sketch`, a count-min sketch of bucket states
//! that never under-counts; `evictions{reason="overflow"}`) instead of being
//! admitted freely, and an over-limit caller keeps its bucket, so flooding
//! new keys never resets anyone.

mod admit;
mod permits;
mod probe_map;
mod sketch;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use arc_swap::ArcSwap;

use super::{Ask, BucketKey};
use crate::clock::Nanos;
use crate::limiter::adaptive::Controller;
use crate::limiter::{
    Algorithm, Carry, Decision, FixedWindow, Gcra, LeakyBucket, Limiter, SlidingLog, SlidingWindow,
};
pub use admit::{PERMIT_REFUSED, PERMIT_RETRY, UNASKED};
pub use permits::PermitGrant;
use permits::PermitTable;
use probe_map::ProbeMap;
use sketch::Sketch;

/// Shards per table. A power of two; enough that two workers rarely meet on
/// one lock, few enough that an empty table stays small.
const SHARDS: usize = 64;

/// After a sweep that freed nothing, new keys go to the overflow sketch
/// without sweeping again for this long, so a table full of active buckets
/// cannot turn every new key into a full scan.
const SWEEP_BACKOFF: Nanos = 20_000_000;

/// Shards scanned per sweep attempt (the work one request may do).
const SWEEP_SHARDS: usize = 8;

/// Which part of a bucket table one acquisition drew its units from, so
/// that they can be given back exactly. (A receipt's [`super::Taken`] is
/// built from it: what the request holds, reservations and permits too.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrawnFrom {
    /// The key's own bucket.
    Bucket,
    /// The table's overflow sketch (the store was full of active buckets).
    Overflow,
    /// Nothing was taken (the limit denied).
    Nowhere,
}

/// Counters read by `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Buckets dropped because they were indistinguishable from fresh ones.
    pub evicted_idle: u64,
    /// Decisions made through an overflow sketch because the store was full.
    pub overflow: u64,
    /// Buckets currently tracked, all tables.
    pub tracked: usize,
}

/// The in-memory bucket store: the bound and sweeping shared by its tables.
/// The tables themselves ([`BucketTable`]) belong to the policy snapshots
/// that use them, so a reload can keep some, make new ones and let the
/// others go when the last request under the old snapshot ends.
#[derive(Debug)]
pub struct MemoryStore {
    /// Every table made and not yet dropped, for sweeping.
    tables: ArcSwap<Vec<Weak<Named>>>,
    bound: Arc<Bound>,
    /// Earliest `now` at which the next sweep may run.
    next_sweep: AtomicU64,
    /// Round-robin position of the next sweep.
    sweep_cursor: AtomicUsize,
    evicted_idle: AtomicU64,
    overflow: AtomicU64,
    /// Hybrid mode: how many instances split the budget of a key none of
    /// them has synced yet (see [`MemoryStore::split_newcomers`]).
    newcomers: Option<Arc<AtomicU64>>,
}

/// `max_keys` across all tables.
#[derive(Debug)]
struct Bound {
    max_keys: usize,
    /// Buckets stored in all tables; a new key is admitted to a table only
    /// after reserving a place here.
    total: AtomicUsize,
}

/// One limit's bucket table: a handle, cheap to clone, that asks name.
/// Dropping the last handle frees the table and its place in `max_keys`.
#[derive(Debug, Clone)]
pub struct BucketTable(Arc<Named>);

/// A table's buckets and the name a networked store keeps them under.
#[derive(Debug)]
struct Named {
    buckets: Buckets,
    name: TableName,
}

/// What names one limit's buckets across instances: the same config gives
/// every instance the same names, so a networked store shares the buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    /// The rule: the part every key of one caller's rule shares, its
    /// tiers', overrides' and ban's included (Redis Cluster's hash tag).
    pub rule: Box<str>,
    /// The limit within the rule: its tier or override, if any, then its
    /// algorithm and parameters, so a changed limit gets buckets of its own.
    pub limit: Box<str>,
}

impl TableName {
    /// A name no other table of this process has (tables made outside a
    /// policy: tests and benchmarks).
    pub fn unique() -> TableName {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        TableName {
            rule: "tables".into(),
            limit: format!("table-{}", NEXT.fetch_add(1, Ordering::Relaxed)).into(),
        }
    }
}

impl BucketTable {
    /// Whether two handles are the same table (a reload kept it).
    pub fn same(&self, other: &BucketTable) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The name its buckets are kept under in a networked store.
    pub fn name(&self) -> &TableName {
        &self.0.name
    }

    /// A number no other live table has (for maps keyed by table).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// The controller of an `adaptive` rule's permits.
    #[inline]
    pub fn adaptive(&self) -> Option<&Arc<Controller>> {
        match &self.0.buckets {
            Buckets::Permits(permits) => permits.controller(),
            _ => None,
        }
    }
}

/// One limit's table, typed by its algorithm.
#[derive(Debug)]
enum Buckets {
    TokenBucket(Table<Gcra>),
    LeakyBucket(Table<LeakyBucket>),
    FixedWindow(Table<FixedWindow>),
    SlidingWindow(Table<SlidingWindow>),
    SlidingLog(Table<SlidingLog>),
    /// A concurrency limit's permits.
    Permits(Arc<PermitTable>),
}

#[derive(Debug)]
struct Table<A: Algorithm> {
    /// The limit as last configured; used to recognise fresh-equivalent
    /// buckets when sweeping and to size the sketch. Decisions use the
    /// limiter of the request's policy snapshot. Locked only by sweeps and
    /// reloads.
    algorithm: Mutex<A>,
    shards: Box<[Shard<A::State>]>,
    len: AtomicUsize,
    /// Where new keys are limited while the store is full; made on first
    /// use.
    overflow: OnceLock<Sketch<A::State>>,
    /// Hybrid mode: a new bucket starts with every other instance's share
    /// of it spent (how many instances: this number; see
    /// [`MemoryStore::split_newcomers`]).
    newcomers: Option<Arc<AtomicU64>>,
    /// The store's bound, given back this table's places when it is dropped.
    bound: Arc<Bound>,
}

impl<A: Algorithm> Drop for Table<A> {
    fn drop(&mut self) {
        self.bound
            .total
            .fetch_sub(*self.len.get_mut(), Ordering::Relaxed);
    }
}

/// One lock and its map, alone on its cache line so that two workers
/// touching neighbouring shards do not bounce one line between cores.
#[derive(Debug)]
#[repr(align(64))]
struct Shard<S>(Mutex<ProbeMap<S>>);

/// Locks a mutex whatever a panicking holder left: every state update is a
/// single assignment or a step that keeps the state valid at each point, so
/// a poisoned lock still guards a consistent state. Serving on beats
/// cascading one panic to every key of the shard.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Calls `$body` with the typed table and algorithm of `$ask`.
macro_rules! with_table {
    ($store:expr, $ask:expr, |$table:ident, $algorithm:ident| $body:expr) => {
        match (&$ask.table.0.buckets, $ask.limiter) {
            (Buckets::TokenBucket($table), Limiter::TokenBucket($algorithm)) => $body,
            (Buckets::LeakyBucket($table), Limiter::LeakyBucket($algorithm)) => $body,
            (Buckets::FixedWindow($table), Limiter::FixedWindow($algorithm)) => $body,
            (Buckets::SlidingWindow($table), Limiter::SlidingWindow($algorithm)) => $body,
            (Buckets::SlidingLog($table), Limiter::SlidingLog($algorithm)) => $body,
            // Tables are made from the same policy as the asks, and
            // concurrency limits are asked through `acquire_permit`.
            (table, limiter) => {
                unreachable!("a table of {} buckets asked with {limiter:?}", table.kind())
            }
        }
    };
}

impl Buckets {
    fn kind(&self) -> &'static str {
        match self {
            Buckets::TokenBucket(_) => "token bucket",
            Buckets::LeakyBucket(_) => "leaky bucket",
            Buckets::FixedWindow(_) => "fixed window",
            Buckets::SlidingWindow(_) => "sliding window",
            Buckets::SlidingLog(_) => "sliding log",
            Buckets::Permits(_) => "permit",
        }
    }
}

impl MemoryStore {
    /// An empty store with room for `max_keys` buckets in all its tables.
    pub fn new(max_keys: usize) -> MemoryStore {
        MemoryStore {
            tables: ArcSwap::from_pointee(Vec::new()),
            bound: Arc::new(Bound {
                max_keys,
                total: AtomicUsize::new(0),
            }),
            next_sweep: AtomicU64::new(0),
            sweep_cursor: AtomicUsize::new(0),
            evicted_idle: AtomicU64::new(0),
            overflow: AtomicU64::new(0),
            newcomers: None,
        }
    }

    /// The most buckets it keeps, all tables together (`max_keys`).
    pub fn max_keys(&self) -> usize {
        self.bound.max_keys
    }

    /// Hybrid mode (docs/multi-instance.md): a key this instance has not
    /// seen may have been spent on every other instance meanwhile, so a new
    /// bucket of a synced algorithm (token and leaky buckets, windows)
    /// starts with all but this instance's share spent: the capacity less
    /// ⌈capacity / n⌉, n read from `instances` when the bucket is made.
    /// However fast a burst on a new key reaches n instances, together they
    /// admit at most about the limit before their first sync tells them the
    /// truth. Applies to the tables made from now on.
    pub fn split_newcomers(mut self, instances: Arc<AtomicU64>) -> MemoryStore {
        self.newcomers = Some(instances);
        self
    }

    /// A store and one new table per limiter, in order (for tests and
    /// benchmarks).
    pub fn with_tables(limiters: &[Limiter], max_keys: usize) -> (MemoryStore, Vec<BucketTable>) {
        let store = MemoryStore::new(max_keys);
        let tables = limiters.iter().map(|l| store.table(l)).collect();
        (store, tables)
    }

    /// A new, empty table for `limiter`'s buckets, with a name no other
    /// table has.
    pub fn table(&self, limiter: &Limiter) -> BucketTable {
        self.named_table(TableName::unique(), limiter)
    }

    /// A new, empty table for `limiter`'s buckets, named `name`.
    pub fn named_table(&self, name: TableName, limiter: &Limiter) -> BucketTable {
        let bound = &self.bound;
        let split = &self.newcomers;
        let buckets = match *limiter {
            Limiter::TokenBucket(a) => Buckets::TokenBucket(Table::new(a, bound, split)),
            Limiter::LeakyBucket(a) => Buckets::LeakyBucket(Table::new(a, bound, split)),
            Limiter::FixedWindow(a) => Buckets::FixedWindow(Table::new(a, bound, split)),
            Limiter::SlidingWindow(a) => Buckets::SlidingWindow(Table::new(a, bound, split)),
            // Decided at this instance's share in hybrid mode, never synced.
            Limiter::SlidingLog(a) => Buckets::SlidingLog(Table::new(a, bound, &None)),
            Limiter::Concurrency(_) => Buckets::Permits(Arc::default()),
        };
        self.register(name, buckets)
    }

    /// A new, empty table for an `adaptive` rule's permits, limited by
    /// `controller` (kept by this instance alone, whatever the backend:
    /// docs/adaptive.md).
    pub fn adaptive_table(&self, name: TableName, controller: Arc<Controller>) -> BucketTable {
        let permits = PermitTable::adaptive(controller);
        self.register(name, Buckets::Permits(Arc::new(permits)))
    }

    /// Names `buckets` and lists them among the store's live tables.
    fn register(&self, name: TableName, buckets: Buckets) -> BucketTable {
        let buckets = Arc::new(Named { buckets, name });
        let weak = Arc::downgrade(&buckets);
        self.tables.rcu(|tables| {
            let mut live: Vec<Weak<Named>> = tables
                .iter()
                .filter(|t| t.strong_count() > 0)
                .cloned()
                .collect();
            live.push(weak.clone());
            live
        });
        BucketTable(buckets)
    }

    /// Keeps `table`'s buckets for a reload that changes its limit from
    /// `from` to `to` (same algorithm): every state is rescaled as `carry`
    /// says, at `now`. Returns `false`, changing nothing, when the two
    /// limiters are not of the table's algorithm.
    pub fn carry(
        &self,
        table: &BucketTable,
        from: &Limiter,
        to: &Limiter,
        carry: Carry,
        now: Nanos,
    ) -> bool {
        match (&table.0.buckets, from, to) {
            (Buckets::TokenBucket(t), Limiter::TokenBucket(f), Limiter::TokenBucket(n)) => {
                t.carry(f, n, carry, now)
            }
            (Buckets::LeakyBucket(t), Limiter::LeakyBucket(f), Limiter::LeakyBucket(n)) => {
                t.carry(f, n, carry, now)
            }
            (Buckets::FixedWindow(t), Limiter::FixedWindow(f), Limiter::FixedWindow(n)) => {
                t.carry(f, n, carry, now)
            }
            (Buckets::SlidingWindow(t), Limiter::SlidingWindow(f), Limiter::SlidingWindow(n)) => {
                t.carry(f, n, carry, now)
            }
            (Buckets::SlidingLog(t), Limiter::SlidingLog(f), Limiter::SlidingLog(n)) => {
                t.carry(f, n, carry, now)
            }
            // Permits are requests in flight: they carry over as they are.
            (Buckets::Permits(_), Limiter::Concurrency(_), Limiter::Concurrency(_)) => {}
            _ => return false,
        }
        true
    }

    /// Asks every limit in `asks` for its cost at `now`, writing one
    /// decision per ask into `decisions` and where each took its units into
    /// `drawn` (same order). Returns whether all admitted; when any denied,
    /// nothing was taken from any bucket (then all of `drawn` is `Nowhere`).
    pub fn acquire_all(
        &self,
        asks: &[Ask<'_>],
        now: Nanos,
        decisions: &mut [Decision],
        drawn: &mut [DrawnFrom],
    ) -> bool {
        debug_assert_eq!(asks.len(), decisions.len());
        debug_assert_eq!(asks.len(), drawn.len());
        if let ([ask], [decision], [from]) = (asks, &mut *decisions, &mut *drawn) {
            // One applicable limit, the common case: nothing to roll back.
            (*decision, *from) = self.acquire(ask, now);
            return decision.is_allowed();
        }
        for (index, ask) in asks.iter().enumerate() {
            let (decision, from) = self.acquire(ask, now);
            decisions[index] = decision;
            drawn[index] = from;
            if decision.is_allowed() {
                continue;
            }
            // Keep asking the remaining limits so that the 429 reports every
            // limit the request violates, but take nothing more.
            for (later, rest) in asks.iter().enumerate().skip(index + 1) {
                decisions[later] = self.peek(rest, now);
            }
            // Give back what the earlier limits took (a reservation is
            // cancelled as its client would), and report them as they are
            // now.
            for (earlier, ask) in asks.iter().enumerate().take(index) {
                match decisions[earlier] {
                    Decision::Hold { wait, .. } if drawn[earlier] == DrawnFrom::Bucket => {
                        self.cancel(ask, now, now + wait);
                    }
                    _ => self.refund(ask, now, now, drawn[earlier]),
                }
                drawn[earlier] = DrawnFrom::Nowhere;
                decisions[earlier] = Decision::Allow(self.peek(ask, now).state());
            }
            return false;
        }
        self.pass_together(asks, now, decisions);
        true
    }

    /// A request passes at the latest instant any of its limits holds it
    /// to. The limits that would let it pass earlier count its units at that
    /// instant instead, where they can (token and leaky buckets, while its
    /// reservation is still their last): otherwise requests that one limit
    /// holds together would pass another in a bunch.
    fn pass_together(&self, asks: &[Ask<'_>], now: Nanos, decisions: &mut [Decision]) {
        let latest = decisions.iter().map(Decision::wait).max().unwrap_or(0);
        if latest == 0 {
            return;
        }
        for (ask, decision) in asks.iter().zip(decisions.iter_mut()) {
            let wait = decision.wait();
            if wait < latest
                && with_table!(self, ask, |table, algorithm| table.reschedule(
                    algorithm,
                    ask,
                    now,
                    now + wait,
                    now + latest
                ))
            {
                *decision = Decision::Hold {
                    state: decision.state(),
                    wait: latest,
                };
            }
        }
    }

    fn acquire(&self, ask: &Ask<'_>, now: Nanos) -> (Decision, DrawnFrom) {
        with_table!(self, ask, |table, algorithm| table
            .acquire(algorithm, ask, now, self))
    }

    /// What asking would decide, without taking anything.
    fn peek(&self, ask: &Ask<'_>, now: Nanos) -> Decision {
        with_table!(self, ask, |table, algorithm| table
            .peek(algorithm, ask, now))
    }

    /// Gives back what `ask` took at `taken_at` (`from` says where from).
    fn refund(&self, ask: &Ask<'_>, now: Nanos, taken_at: Nanos, from: DrawnFrom) {
        with_table!(self, ask, |table, algorithm| table
            .refund(algorithm, ask, now, taken_at, from))
    }

    /// Gives back a reservation that was to pass at `at`.
    fn cancel(&self, ask: &Ask<'_>, now: Nanos, at: Nanos) {
        with_table!(self, ask, |table, algorithm| table
            .cancel(algorithm, ask, now, at))
    }

    /// Takes `units` more from the ask's bucket, unconditionally (a deferred
    /// charge; the balance may go below zero). A bucket the store no longer
    /// holds (swept, or never stored) is made again if there is room, so a
    /// debt is not forgotten.
    fn charge(&self, ask: &Ask<'_>, units: u64, now: Nanos) {
        with_table!(self, ask, |table, algorithm| table.charge(
            algorithm,
            ask.key,
            units,
            now,
            &self.bound
        ))
    }

    /// Hybrid mode: makes `key`'s bucket in `table` a fresh one with
    /// `spent` units taken at `now` (the shared view a sync brought, plus
    /// what this instance took since the sync was sent), replacing what it
    /// held. A key the store does not hold is stored only when something
    /// was spent and the bound has room (a fresh bucket needs no place).
    /// `false`, changing nothing, when `limiter` is not of the table's
    /// algorithm or keeps no buckets (permits).
    pub fn adopt(
        &self,
        table: &BucketTable,
        limiter: &Limiter,
        key: BucketKey,
        spent: u64,
        now: Nanos,
    ) -> bool {
        let bound = &self.bound;
        match (&table.0.buckets, limiter) {
            (Buckets::TokenBucket(t), Limiter::TokenBucket(a)) => {
                t.adopt(a, key, spent, now, bound)
            }
            (Buckets::LeakyBucket(t), Limiter::LeakyBucket(a)) => {
                t.adopt(a, key, spent, now, bound)
            }
            (Buckets::FixedWindow(t), Limiter::FixedWindow(a)) => {
                t.adopt(a, key, spent, now, bound)
            }
            (Buckets::SlidingWindow(t), Limiter::SlidingWindow(a)) => {
                t.adopt(a, key, spent, now, bound)
            }
            (Buckets::SlidingLog(t), Limiter::SlidingLog(a)) => t.adopt(a, key, spent, now, bound),
            _ => return false,
        }
        true
    }

    /// Hybrid mode: charges `key`'s bucket in `table` so that at most
    /// `most` units are left at `now` (a bucket whose view may be stale is
    /// held to this instance's share until the next sync). Nothing when it
    /// holds no more, or the store holds no bucket for the key.
    pub fn hold_to(
        &self,
        table: &BucketTable,
        limiter: &Limiter,
        key: BucketKey,
        most: u64,
        now: Nanos,
    ) {
        match (&table.0.buckets, limiter) {
            (Buckets::TokenBucket(t), Limiter::TokenBucket(a)) => t.hold_to(a, key, most, now),
            (Buckets::LeakyBucket(t), Limiter::LeakyBucket(a)) => t.hold_to(a, key, most, now),
            (Buckets::FixedWindow(t), Limiter::FixedWindow(a)) => t.hold_to(a, key, most, now),
            (Buckets::SlidingWindow(t), Limiter::SlidingWindow(a)) => t.hold_to(a, key, most, now),
            (Buckets::SlidingLog(t), Limiter::SlidingLog(a)) => t.hold_to(a, key, most, now),
            _ => {}
        }
    }

    fn permits(table: &BucketTable) -> &Arc<PermitTable> {
        match &table.0.buckets {
            Buckets::Permits(permits) => permits,
            other => unreachable!("a table of {} buckets asked for permits", other.kind()),
        }
    }

    /// Drops fresh-equivalent buckets from the next few shards. Returns
    /// whether anything was freed. At most one sweep per backoff period runs
    /// after a fruitless one.
    fn sweep(&self, now: Nanos) -> bool {
        if now < self.next_sweep.load(Ordering::Relaxed) {
            return false;
        }
        let tables = self.tables.load();
        let all_shards = tables.len() * SHARDS;
        let start = self.sweep_cursor.fetch_add(SWEEP_SHARDS, Ordering::Relaxed);
        let mut freed = 0;
        for offset in 0..SWEEP_SHARDS.min(all_shards) {
            let index = (start + offset) % all_shards;
            let shard = index % SHARDS;
            let Some(table) = tables[index / SHARDS].upgrade() else {
                continue;
            };
            freed += match &table.buckets {
                Buckets::TokenBucket(table) => table.sweep(shard, now),
                Buckets::LeakyBucket(table) => table.sweep(shard, now),
                Buckets::FixedWindow(table) => table.sweep(shard, now),
                Buckets::SlidingWindow(table) => table.sweep(shard, now),
                Buckets::SlidingLog(table) => table.sweep(shard, now),
                // Permit entries go away with their last release.
                Buckets::Permits(_) => 0,
            };
        }
        if freed == 0 {
            self.next_sweep
                .store(now.saturating_add(SWEEP_BACKOFF), Ordering::Relaxed);
            return false;
        }
        self.bound.total.fetch_sub(freed, Ordering::Relaxed);
        self.evicted_idle.fetch_add(freed as u64, Ordering::Relaxed);
        true
    }

    /// Counters for `/metrics`.
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            evicted_idle: self.evicted_idle.load(Ordering::Relaxed),
            overflow: self.overflow.load(Ordering::Relaxed),
            tracked: self.bound.total.load(Ordering::Relaxed),
        }
    }

    /// Whether `table` keeps a bucket of its own for `key` (a concurrency
    /// table: permits in flight for it). One it does not is fresh, was
    /// dropped as full, or is counted in the overflow sketch.
    pub fn tracks(&self, table: &BucketTable, key: BucketKey) -> bool {
        let slot = slot_key(key);
        match &table.0.buckets {
            Buckets::TokenBucket(table) => table.contains(slot),
            Buckets::LeakyBucket(table) => table.contains(slot),
            Buckets::FixedWindow(table) => table.contains(slot),
            Buckets::SlidingWindow(table) => table.contains(slot),
            Buckets::SlidingLog(table) => table.contains(slot),
            Buckets::Permits(permits) => permits.in_flight(key) > 0,
        }
    }

    /// Buckets tracked in one table.
    pub fn tracked_keys(&self, table: &BucketTable) -> usize {
        let len = match &table.0.buckets {
            Buckets::TokenBucket(table) => &table.len,
            Buckets::LeakyBucket(table) => &table.len,
            Buckets::FixedWindow(table) => &table.len,
            Buckets::SlidingWindow(table) => &table.len,
            Buckets::SlidingLog(table) => &table.len,
            Buckets::Permits(permits) => return permits.len(),
        };
        len.load(Ordering::Relaxed)
    }
}

impl Bound {
    /// Takes one place in the global bound, if there is one.
    fn reserve(&self) -> bool {
        if self.total.fetch_add(1, Ordering::Relaxed) < self.max_keys {
            true
        } else {
            self.total.fetch_sub(1, Ordering::Relaxed);
            false
        }
    }
}

impl<A: Algorithm + Copy + PartialEq> Table<A> {
    fn new(algorithm: A, bound: &Arc<Bound>, newcomers: &Option<Arc<AtomicU64>>) -> Table<A> {
        Table {
            newcomers: newcomers.clone(),
            algorithm: Mutex::new(algorithm),
            shards: (0..SHARDS)
                .map(|_| Shard(Mutex::new(ProbeMap::default())))
                .collect(),
            len: AtomicUsize::new(0),
            overflow: OnceLock::new(),
            bound: Arc::clone(bound),
        }
    }

    /// Rescales every bucket from limit `from` to limit `to` (see
    /// [`MemoryStore::carry`]); the overflow sketch's cells too. Shards are
    /// locked one at a time, so requests keep flowing meanwhile.
    fn carry(&self, from: &A, to: &A, carry: Carry, now: Nanos) {
        *lock(&self.algorithm) = *to;
        if from == to {
            return;
        }
        for shard in self.shards.iter() {
            lock(&shard.0).for_each_mut(|state| to.carry_from(from, state, now, carry));
        }
        if let Some(sketch) = self.overflow.get() {
            sketch.for_each_mut(|state| to.carry_from(from, state, now, carry));
        }
    }

    /// Whether the bucket of slot `key` is kept.
    fn contains(&self, key: u64) -> bool {
        self.shard(key).get(key).is_some()
    }

    #[inline]
    fn shard(&self, key: BucketKey) -> MutexGuard<'_, ProbeMap<A::State>> {
        // The map uses the low bits of the key for its buckets and the top 7
        // bits for its tags; pick the shard from bits in between.
        lock(&self.shards[(key >> 32) as usize & (SHARDS - 1)].0)
    }

    /// Takes the ask's cost from its bucket, creating the bucket if there is
    /// room (sweeping once when there is not), else through the overflow
    /// sketch.
    #[inline]
    fn acquire(
        &self,
        algorithm: &A,
        ask: &Ask<'_>,
        now: Nanos,
        store: &MemoryStore,
    ) -> (Decision, DrawnFrom) {
        let key = slot_key(ask.key);
        {
            let mut map = self.shard(key);
            if let Some(state) = map.get_mut(key) {
                let decision = take(algorithm, state, ask, now);
                return (decision, drawn_if(decision, DrawnFrom::Bucket));
            }
            if let Some(decided) = self.insert_fresh(&mut map, algorithm, ask, now, &store.bound) {
                return decided;
            }
        }
        // Full. Sweep without holding our shard's lock (the sweep takes shard
        // locks one at a time), then try once more.
        if store.sweep(now) {
            let mut map = self.shard(key);
            if let Some(state) = map.get_mut(key) {
                // Another request inserted the key meanwhile.
                let decision = take(algorithm, state, ask, now);
                return (decision, drawn_if(decision, DrawnFrom::Bucket));
            }
            if let Some(decided) = self.insert_fresh(&mut map, algorithm, ask, now, &store.bound) {
                return decided;
            }
        }
        // The sketch never holds a request: over its budget it is refused
        // (conservative; the table is full of active buckets).
        store.overflow.fetch_add(1, Ordering::Relaxed);
        let decision = self.sketch().acquire(algorithm, key, now, ask.cost);
        (decision, drawn_if(decision, DrawnFrom::Overflow))
    }

    fn sketch(&self) -> &Sketch<A::State> {
        self.overflow.get_or_init(|| {
            let heap = lock(&self.algorithm).max_heap_bytes();
            Sketch::new(std::mem::size_of::<A::State>().saturating_add(heap))
        })
    }

    /// Decides for a key the shard does not hold, storing its new bucket if
    /// the bound has room. `None` when the store is full and the request
    /// would have needed a bucket.
    #[inline]
    fn insert_fresh(
        &self,
        map: &mut ProbeMap<A::State>,
        algorithm: &A,
        ask: &Ask<'_>,
        now: Nanos,
        bound: &Bound,
    ) -> Option<(Decision, DrawnFrom)> {
        let mut state = A::State::default();
        if let Some(instances) = &self.newcomers {
            let capacity = algorithm.capacity();
            let others = capacity - capacity.div_ceil(instances.load(Ordering::Relaxed).max(1));
            algorithm.charge(&mut state, now, others);
        }
        let decision = take(algorithm, &mut state, ask, now);
        if !decision.is_allowed() {
            // A fresh bucket that denies (closed route, cost above capacity)
            // need not be stored.
            return Some((decision, DrawnFrom::Nowhere));
        }
        if !bound.reserve() {
            return None;
        }
        map.insert(slot_key(ask.key), state);
        self.len.fetch_add(1, Ordering::Relaxed);
        Some((decision, DrawnFrom::Bucket))
    }

    fn peek(&self, algorithm: &A, ask: &Ask<'_>, now: Nanos) -> Decision {
        let key = slot_key(ask.key);
        let map = self.shard(key);
        match map.get(key) {
            Some(state) => algorithm.peek(state, now, ask.cost),
            None => algorithm.peek(&A::State::default(), now, ask.cost),
        }
    }

    fn refund(&self, algorithm: &A, ask: &Ask<'_>, now: Nanos, taken_at: Nanos, from: DrawnFrom) {
        match from {
            DrawnFrom::Bucket => {
                let key = slot_key(ask.key);
                if let Some(state) = self.shard(key).get_mut(key) {
                    algorithm.refund(state, now, ask.cost, taken_at);
                }
            }
            DrawnFrom::Overflow => {
                self.sketch()
                    .refund(algorithm, slot_key(ask.key), now, ask.cost)
            }
            DrawnFrom::Nowhere => {}
        }
    }

    fn charge(&self, algorithm: &A, key: BucketKey, units: u64, now: Nanos, bound: &Bound) {
        let key = slot_key(key);
        let mut map = self.shard(key);
        if let Some(state) = map.get_mut(key) {
            algorithm.charge(state, now, units);
            return;
        }
        if bound.reserve() {
            let mut state = A::State::default();
            algorithm.charge(&mut state, now, units);
            map.insert(key, state);
            self.len.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn adopt(&self, algorithm: &A, key: BucketKey, spent: u64, now: Nanos, bound: &Bound) {
        let key = slot_key(key);
        let mut map = self.shard(key);
        let mut state = A::State::default();
        algorithm.charge(&mut state, now, spent);
        if let Some(held) = map.get_mut(key) {
            *held = state;
        } else if spent > 0 && bound.reserve() {
            map.insert(key, state);
            self.len.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn hold_to(&self, algorithm: &A, key: BucketKey, most: u64, now: Nanos) {
        let key = slot_key(key);
        if let Some(state) = self.shard(key).get_mut(key) {
            let left = algorithm.peek(state, now, 1).state().remaining;
            if left > most {
                algorithm.charge(state, now, left - most);
            }
        }
    }

    fn reschedule(&self, algorithm: &A, ask: &Ask<'_>, now: Nanos, at: Nanos, to: Nanos) -> bool {
        let key = slot_key(ask.key);
        self.shard(key)
            .get_mut(key)
            .is_some_and(|state| algorithm.reschedule(state, now, ask.cost, at, to))
    }

    fn cancel(&self, algorithm: &A, ask: &Ask<'_>, now: Nanos, at: Nanos) {
        let key = slot_key(ask.key);
        if let Some(state) = self.shard(key).get_mut(key) {
            algorithm.cancel(state, now, ask.cost, at);
        }
    }

    /// Drops the fresh-equivalent buckets of one shard; returns how many.
    fn sweep(&self, shard: usize, now: Nanos) -> usize {
        let algorithm = *lock(&self.algorithm);
        let dropped =
            lock(&self.shards[shard].0).retain(|_, state| !algorithm.is_fresh(state, now));
        self.len.fetch_sub(dropped, Ordering::Relaxed);
        dropped
    }
}

/// Takes the ask's units: reserved in delay mode, else now or never.
#[inline]
fn take<A: Algorithm>(algorithm: &A, state: &mut A::State, ask: &Ask<'_>, now: Nanos) -> Decision {
    match ask.hold {
        Some(limits) => algorithm.reserve(state, now, ask.cost, limits),
        None => algorithm.acquire(state, now, ask.cost),
    }
}

#[inline]
fn drawn_if(decision: Decision, from: DrawnFrom) -> DrawnFrom {
    if decision.is_allowed() {
        from
    } else {
        DrawnFrom::Nowhere
    }
}

/// Key 0 marks an empty slot in [`ProbeMap`]; a zero hash (1 in 2^64) shares
/// key 1's bucket instead.
#[inline]
fn slot_key(key: BucketKey) -> u64 {
    key.max(1)
}
