//! Concurrency permits: at most `max_in_flight` requests in flight per key.
//!
//! Unlike the rate algorithms this is not a function of time: a permit is
//! taken at admission and given back when the response has ended (the
//! proxy settles the permit's receipt when the response body ends or is
//! dropped, so it returns on completion, client abort or upstream error
//! alike). In delay mode a request that finds
//! every permit taken joins the key's FIFO of waiters; a returning permit is
//! handed straight to the first waiter still there, so waiters pass in
//! arrival order and nobody can overtake them.
//!
//! A key's entry exists only while requests are in flight or waiting: the
//! last release removes it, so there is nothing to sweep.
//!
//! An `adaptive` rule's table holds its [`Controller`]: the limit in force
//! is the controller's (a tier's share of it), each admission and release
//! tells the controller how many were in flight, and a release hands
//! permits to waiters only while the key is under the limit (it may have
//! fallen since, or risen).

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use crate::limiter::adaptive::Controller;
use crate::limiter::Concurrency;
use crate::store::BucketKey;

/// Shards per table, as for the rate tables.
const SHARDS: usize = 64;

/// One key's permits.
#[derive(Debug, Default)]
struct KeyPermits {
    in_flight: u64,
    /// Waiters in arrival order; a sender whose receiver is gone is skipped.
    waiters: VecDeque<(u64, oneshot::Sender<()>)>,
}

/// Keys are already seeded hashes: use them as they are.
#[derive(Debug, Default, Clone, Copy)]
struct IdentityHasher(u64);

impl std::hash::Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8) | u64::from(byte);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Shard = Mutex<HashMap<BucketKey, KeyPermits, BuildHasherDefault<IdentityHasher>>>;

/// The permits of one concurrency limit.
#[derive(Debug)]
pub struct PermitTable {
    shards: Box<[Shard]>,
    /// Keys with requests in flight or waiting.
    len: AtomicUsize,
    next_waiter: AtomicU64,
    /// An `adaptive` rule's limit.
    adaptive: Option<Arc<Controller>>,
}

/// What asking for a permit gave.
#[derive(Debug)]
pub enum PermitGrant {
    /// Taken; `in_flight` counts this request.
    Now { in_flight: u64 },
    /// Every permit is taken and the request may wait: await the receiver
    /// (a permit arrives in it), or call `PermitTable::leave` with the id.
    Queued {
        id: u64,
        ready: oneshot::Receiver<()>,
    },
    /// Every permit is taken (and, in delay mode, the queue is full).
    Refused { in_flight: u64 },
}

impl Default for PermitTable {
    fn default() -> Self {
        PermitTable {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            len: AtomicUsize::new(0),
            next_waiter: AtomicU64::new(0),
            adaptive: None,
        }
    }
}

impl PermitTable {
    /// The permits of an `adaptive` rule, limited by `controller`.
    pub fn adaptive(controller: Arc<Controller>) -> PermitTable {
        PermitTable {
            adaptive: Some(controller),
            ..PermitTable::default()
        }
    }

    /// The controller of an `adaptive` rule's permits.
    pub fn controller(&self) -> Option<&Arc<Controller>> {
        self.adaptive.as_ref()
    }

    /// The permits in force for `limit`: its `max_in_flight`, or what an
    /// adaptive rule learned (its share of it, for a tier).
    #[inline]
    pub fn max_for(&self, limit: &Concurrency) -> u64 {
        match &self.adaptive {
            Some(controller) => controller.limit_for(limit.share),
            None => limit.max_in_flight,
        }
    }

    fn shard(
        &self,
        key: BucketKey,
    ) -> MutexGuard<'_, HashMap<BucketKey, KeyPermits, BuildHasherDefault<IdentityHasher>>> {
        self.shards[(key >> 32) as usize & (SHARDS - 1)]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes a permit for `key` if fewer than `max` are in flight and nobody
    /// is waiting; otherwise queues the request when `max_queue` is given
    /// and fewer than that many wait, else refuses.
    pub fn acquire(&self, key: BucketKey, max: u64, max_queue: Option<u64>) -> PermitGrant {
        let mut shard = self.shard(key);
        let entry = shard.entry(key).or_insert_with(|| {
            self.len.fetch_add(1, Ordering::Relaxed);
            KeyPermits::default()
        });
        if entry.in_flight < max && entry.waiters.is_empty() {
            entry.in_flight += 1;
            if let Some(controller) = &self.adaptive {
                controller.admitted(entry.in_flight);
            }
            return PermitGrant::Now {
                in_flight: entry.in_flight,
            };
        }
        let in_flight = entry.in_flight;
        match max_queue {
            Some(limit) if (entry.waiters.len() as u64) < limit => {
                let id = self.next_waiter.fetch_add(1, Ordering::Relaxed);
                let (sender, ready) = oneshot::channel();
                entry.waiters.push_back((id, sender));
                PermitGrant::Queued { id, ready }
            }
            _ => {
                if in_flight == 0 && entry.waiters.is_empty() {
                    // A `max` of 0: never keep an entry for nothing.
                    shard.remove(&key);
                    self.len.fetch_sub(1, Ordering::Relaxed);
                }
                PermitGrant::Refused { in_flight }
            }
        }
    }

    /// A queued request gives up (timeout, client gone). Returns `true` if it
    /// left the queue without a permit; `false` if a permit had already been
    /// handed to it, which the caller now owns and must release.
    pub fn leave(&self, key: BucketKey, id: u64) -> bool {
        let mut shard = self.shard(key);
        let Some(entry) = shard.get_mut(&key) else {
            return false;
        };
        let before = entry.waiters.len();
        entry.waiters.retain(|(waiter, _)| *waiter != id);
        let left = entry.waiters.len() < before;
        if entry.in_flight == 0 && entry.waiters.is_empty() {
            shard.remove(&key);
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        left
    }

    /// Gives a permit back: to the first waiter still waiting, or to the
    /// key. An adaptive rule's permit goes to waiters only while the key is
    /// under the limit in force: none when the limit fell below the
    /// requests in flight, several when it rose.
    pub fn release(&self, key: BucketKey) {
        let mut shard = self.shard(key);
        let Some(entry) = shard.get_mut(&key) else {
            return;
        };
        let room = match &self.adaptive {
            Some(controller) => {
                controller.admitted(entry.in_flight);
                controller.limit()
            }
            // The permit changes hands, or returns.
            None => entry.in_flight,
        };
        entry.in_flight = entry.in_flight.saturating_sub(1);
        while entry.in_flight < room {
            let Some((_, waiter)) = entry.waiters.pop_front() else {
                break;
            };
            if waiter.send(()).is_ok() {
                entry.in_flight += 1;
            }
        }
        if entry.in_flight == 0 && entry.waiters.is_empty() {
            shard.remove(&key);
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Requests in flight for `key`.
    pub fn in_flight(&self, key: BucketKey) -> u64 {
        self.shard(key).get(&key).map_or(0, |entry| entry.in_flight)
    }

    /// Keys with requests in flight or waiting.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_max_in_flight_and_the_last_release_forgets_the_key() {
        let table = PermitTable::default();
        assert!(matches!(
            table.acquire(7, 2, None),
            PermitGrant::Now { in_flight: 1 }
        ));
        assert!(matches!(
            table.acquire(7, 2, None),
            PermitGrant::Now { in_flight: 2 }
        ));
        assert!(matches!(
            table.acquire(7, 2, None),
            PermitGrant::Refused { in_flight: 2 }
        ));
        table.release(7);
        assert_eq!(table.in_flight(7), 1);
        table.release(7);
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn a_released_permit_goes_to_the_first_waiter_still_waiting() {
        let table = PermitTable::default();
        assert!(matches!(
            table.acquire(1, 1, Some(5)),
            PermitGrant::Now { .. }
        ));
        let PermitGrant::Queued {
            id: gone,
            ready: gone_rx,
        } = table.acquire(1, 1, Some(5))
        else {
            panic!("expected to queue");
        };
        let PermitGrant::Queued {
            ready: mut second, ..
        } = table.acquire(1, 1, Some(5))
        else {
            panic!("expected to queue");
        };
        // The first waiter's client leaves (its receiver dropped, without
        // calling leave): the permit skips it.
        drop(gone_rx);
        table.release(1);
        assert!(second.try_recv().is_ok());
        assert_eq!(table.in_flight(1), 1);
        assert!(!table.leave(1, gone) || table.in_flight(1) == 1);
        table.release(1);
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn the_queue_is_bounded_and_a_leaver_takes_nothing() {
        let table = PermitTable::default();
        assert!(matches!(
            table.acquire(3, 1, Some(1)),
            PermitGrant::Now { .. }
        ));
        let PermitGrant::Queued { id, .. } = table.acquire(3, 1, Some(1)) else {
            panic!("expected to queue");
        };
        assert!(matches!(
            table.acquire(3, 1, Some(1)),
            PermitGrant::Refused { .. }
        ));
        assert!(table.leave(3, id));
        table.release(3);
        assert_eq!(table.len(), 0);
    }
}
