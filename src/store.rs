//! Where bucket state lives. [`Store`] is a closed enum (no `Box<dyn>`): the
//! in-memory sharded table today, a Redis store (strict and hybrid) later,
//! behind the calls the proxy makes:
//!
//! - [`Store::acquire_all`]: ask every applicable rate limit of one request
//!   at once, all or nothing (delay-mode asks reserve instead of denying). A
//!   request rejected by any limit consumes nothing from the others. Batching
//!   the limits of a request into one call is what will let the Redis store
//!   answer with one round trip (one Lua script call).
//! - [`Store::refund`] / [`Store::cancel`]: give back what an admitted or
//!   held request took when it will not be forwarded after all (a refused
//!   permit, a client that left while held).
//! - [`Store::acquire_permit`] / [`Store::permit`]: concurrency permits, held
//!   by the response body until the exchange ends.
//!
//! Deferred charges (`charge`) and `refund_on` will reuse the refund path
//! after the response.
//!
//! The store never reads a clock: `now` comes from the caller, so memory-store
//! tests are exact. (The Redis store will take time from Redis instead.)

pub mod bans;
pub mod memory;

use crate::clock::Nanos;
pub use crate::key::BucketKey;
pub use crate::limiter::Carry;
use crate::limiter::{Decision, HoldLimits, Limiter};
pub use memory::{BucketTable, MemoryStore, StoreStats};
pub use memory::{Permit, PermitGrant};

/// One limit to check for one request.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The limit's bucket table (owned by the policy snapshot that asks).
    pub table: &'a BucketTable,
    pub key: BucketKey,
    pub limiter: &'a Limiter,
    pub cost: u64,
    /// Delay mode: reserve the units at the first instant they fit, within
    /// these bounds, instead of denying ([`crate::limiter::Algorithm::reserve`]).
    pub hold: Option<HoldLimits>,
}

/// Where a granted acquisition took its units from, so that it can be given
/// back exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// The key's own bucket.
    Bucket,
    /// The table's overflow sketch (the store was full of active buckets).
    Overflow,
    /// Nothing was taken (the limit denied).
    None,
}

/// The bucket store: a closed set of backends.
#[derive(Debug)]
pub enum Store {
    Memory(MemoryStore),
}

impl Store {
    /// Asks every limit in `asks` for its cost at `now`, writing one decision
    /// per ask into `decisions` (same order). Returns whether all admitted;
    /// when any denied, nothing was taken from any bucket.
    ///
    /// `async` because the Redis backend will await a round trip here; the
    /// memory backend completes without yielding.
    pub async fn acquire_all(
        &self,
        asks: &[Ask<'_>],
        now: Nanos,
        decisions: &mut [Decision],
    ) -> bool {
        match self {
            Store::Memory(store) => store.acquire_all(asks, now, decisions),
        }
    }

    /// Gives back the units an admitted ask took at once (the request will
    /// not be forwarded after all). Only the key's own bucket is refunded:
    /// units taken through the overflow sketch stay taken (conservative).
    pub fn refund(&self, ask: &Ask<'_>, now: Nanos) {
        match self {
            Store::Memory(store) => store.refund_bucket(ask, now),
        }
    }

    /// Gives back the reservation of a held ask that will not be used (its
    /// client left before `at`, the instant it was to pass).
    pub fn cancel(&self, ask: &Ask<'_>, now: Nanos, at: Nanos) {
        match self {
            Store::Memory(store) => store.cancel(ask, now, at),
        }
    }

    /// A new, empty bucket table for `limiter`.
    pub fn table(&self, limiter: &Limiter) -> BucketTable {
        match self {
            Store::Memory(store) => store.table(limiter),
        }
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
        match self {
            Store::Memory(store) => store.carry(table, from, to, carry, now),
        }
    }

    /// Takes a concurrency permit for `key` in table `table` (see
    /// [`MemoryStore::acquire_permit`]).
    pub fn acquire_permit(
        &self,
        table: &BucketTable,
        key: BucketKey,
        max_in_flight: u64,
        max_queue: Option<u64>,
    ) -> PermitGrant {
        match self {
            Store::Memory(store) => store.acquire_permit(table, key, max_in_flight, max_queue),
        }
    }

    /// The guard of a permit taken for `key` in table `table`: it returns the
    /// permit when dropped.
    pub fn permit(&self, table: &BucketTable, key: BucketKey) -> Permit {
        match self {
            Store::Memory(store) => store.permit(table, key),
        }
    }

    /// Permits of concurrency table `table` taken for `key` right now.
    pub fn permits_in_flight(&self, table: &BucketTable, key: BucketKey) -> u64 {
        match self {
            Store::Memory(store) => store.permits_in_flight(table, key),
        }
    }

    /// A queued permit request gives up; see [`MemoryStore::leave_permit_queue`].
    pub fn leave_permit_queue(&self, table: &BucketTable, key: BucketKey, id: u64) -> bool {
        match self {
            Store::Memory(store) => store.leave_permit_queue(table, key, id),
        }
    }

    /// Counters for `/metrics`.
    pub fn stats(&self) -> StoreStats {
        match self {
            Store::Memory(store) => store.stats(),
        }
    }

    /// Buckets tracked for one table.
    pub fn tracked_keys(&self, table: &BucketTable) -> usize {
        match self {
            Store::Memory(store) => store.tracked_keys(table),
        }
    }

    /// The backend's name, as used in metric labels.
    pub fn backend_name(&self) -> &'static str {
        match self {
            Store::Memory(_) => "memory",
        }
    }
}
