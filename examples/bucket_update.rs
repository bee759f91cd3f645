//! How much of a 1k-key decision the shard mutex costs, on one thread and on
//! two: the token bucket's update under a lock (as `MemoryStore` does it)
//! against a compare-and-swap on the bucket's own word (as `governor` does),
//! in two stores that are otherwise the same.
//!
//! ```sh
//! cargo run --release --example bucket_update
//! ```
//!
//! Both stores are 64 shards of open-addressing tables of 24-byte slots
//! (key hash, TAT, refund word), as `store/memory/probe_map.rs` lays them
//! out and sizes them (the smallest power of two of at least 16 slots that
//! is at most 7/8 full), holding the same 1,000 random key hashes. Each thread walks a
//! shuffled sequence of its keys (all of them, or its half) and makes a GCRA
//! decision with `now` taken from its own counter, so the clock read, the key
//! hash and the real store's bookkeeping are left out: what remains is the
//! probe and the update. Every decision admits: one unit per ns, and a burst
//! (2^50) far larger than the two threads' counters can drift apart.
//!
//! Only the `TAT` word is updated lock-free here. A real lock-free bucket
//! also needs the refund word with it (a 16-byte CAS) and inserts, growth
//! and sweeps that readers without a lock can survive; this measures what
//! that work would buy, not the work.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Instant;

const SHARDS: usize = 64;
/// The smallest table `ProbeMap` keeps.
const MIN_SLOTS: usize = 16;
const KEYS: usize = 1_000;
const DECISIONS: usize = 20_000_000;
/// GCRA: one unit per ns, a burst of 2^50.
const EMISSION: u64 = 1;
const TOLERANCE: u64 = 1 << 50;

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

fn shard_of(key: u64) -> usize {
    (key >> 32) as usize % SHARDS
}

/// Each shard's table size for `keys`, as `ProbeMap` grows it: at most 7/8
/// full.
fn table_sizes(keys: &[u64]) -> [usize; SHARDS] {
    let mut held = [0; SHARDS];
    for &key in keys {
        held[shard_of(key)] += 1;
    }
    held.map(|n| {
        let mut slots = MIN_SLOTS;
        while n * 8 > slots * 7 {
            slots *= 2;
        }
        slots
    })
}

/// A GCRA step: the new TAT, or `None` if the request must wait.
fn gcra(tat: u64, now: u64) -> Option<u64> {
    let next = tat.max(now) + EMISSION;
    (next - now <= TOLERANCE).then_some(next)
}

#[derive(Clone, Copy, Default)]
struct Slot {
    key: u64,
    tat: u64,
    _refund: u64,
}

/// One lock per shard, on its own cache line, as `MemoryStore`'s shards.
#[repr(align(64))]
struct LockedShard(Mutex<Vec<Slot>>);

struct Locked(Vec<LockedShard>);

impl Locked {
    fn new(keys: &[u64]) -> Locked {
        let shards: Vec<LockedShard> = table_sizes(keys)
            .iter()
            .map(|&size| LockedShard(Mutex::new(vec![Slot::default(); size])))
            .collect();
        for &key in keys {
            let mut slots = shards[shard_of(key)].0.lock().unwrap();
            let mask = slots.len() - 1;
            let mut at = key as usize & mask;
            while slots[at].key != 0 {
                at = (at + 1) & mask;
            }
            slots[at].key = key;
        }
        Locked(shards)
    }

    #[inline(never)]
    fn decide(&self, key: u64, now: u64) -> bool {
        let mut slots = self.0[shard_of(key)].0.lock().unwrap();
        let mask = slots.len() - 1;
        let mut at = key as usize & mask;
        while slots[at].key != key {
            at = (at + 1) & mask;
        }
        match gcra(slots[at].tat, now) {
            Some(tat) => {
                slots[at].tat = tat;
                true
            }
            None => false,
        }
    }
}

struct AtomicSlot {
    key: AtomicU64,
    tat: AtomicU64,
    _refund: AtomicU64,
}

/// The same tables with no lock: each slot's words are atomics.
#[repr(align(64))]
struct FreeShard(Vec<AtomicSlot>);

struct Free(Vec<FreeShard>);

impl Free {
    fn new(keys: &[u64]) -> Free {
        let shards: Vec<FreeShard> = table_sizes(keys)
            .iter()
            .map(|&size| {
                FreeShard(
                    (0..size)
                        .map(|_| AtomicSlot {
                            key: AtomicU64::new(0),
                            tat: AtomicU64::new(0),
                            _refund: AtomicU64::new(0),
                        })
                        .collect(),
                )
            })
            .collect();
        for &key in keys {
            let slots = &shards[shard_of(key)].0;
            let mask = slots.len() - 1;
            let mut at = key as usize & mask;
            while slots[at].key.load(Ordering::Relaxed) != 0 {
                at = (at + 1) & mask;
            }
            slots[at].key.store(key, Ordering::Relaxed);
        }
        Free(shards)
    }

    #[inline(never)]
    fn decide(&self, key: u64, now: u64) -> bool {
        let slots = &self.0[shard_of(key)].0;
        let mask = slots.len() - 1;
        let mut at = key as usize & mask;
        while slots[at].key.load(Ordering::Acquire) != key {
            at = (at + 1) & mask;
        }
        let word = &slots[at].tat;
        let mut tat = word.load(Ordering::Relaxed);
        loop {
            let Some(next) = gcra(tat, now) else {
                return false;
            };
            match word.compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(current) => tat = current,
            }
        }
    }
}

/// ns per decision on each of `threads` threads, each walking its keys:
/// all of them when `shared`, else every `threads`-th one.
fn per_thread_ns(
    keys: &[u64],
    threads: usize,
    shared: bool,
    decide: impl Fn(u64, u64) -> bool + Sync,
) -> Vec<f64> {
    let barrier = Barrier::new(threads);
    std::thread::scope(|scope| {
        let running: Vec<_> = (0..threads)
            .map(|thread| {
                let (decide, barrier) = (&decide, &barrier);
                let mine: Vec<u64> = if shared {
                    keys.to_vec()
                } else {
                    keys.iter().copied().skip(thread).step_by(threads).collect()
                };
                let mut x = 0x9E37_79B9_7F4A_7C15 ^ thread as u64;
                let visits: Vec<u64> = (0..1 << 16)
                    .map(|_| {
                        x = xorshift(x);
                        mine[x as usize % mine.len()]
                    })
                    .collect();
                scope.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let mut denied = 0;
                    for i in 0..DECISIONS {
                        let now = i as u64 * 30;
                        if !decide(black_box(visits[i & 0xffff]), now) {
                            denied += 1;
                        }
                    }
                    let ns = start.elapsed().as_nanos() as f64 / DECISIONS as f64;
                    assert_eq!(denied, 0, "the allow profile admits every decision");
                    ns
                })
            })
            .collect();
        running.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

fn main() {
    let mut x = 12_345;
    let keys: Vec<u64> = (0..KEYS)
        .map(|_| {
            x = xorshift(x);
            x | 1
        })
        .collect();
    let cases = [
        ("1 thread", 1, false),
        ("2 threads, disjoint halves", 2, false),
        ("2 threads, shared keys", 2, true),
    ];
    println!("ns per decision per thread, {KEYS} keys, {DECISIONS} decisions per thread");
    for round in 1..=2 {
        for (case, threads, shared) in cases {
            // Fresh stores for each case: its clock starts at 0 again.
            let (locked, free) = (Locked::new(&keys), Free::new(&keys));
            let with_lock = per_thread_ns(&keys, threads, shared, |k, n| locked.decide(k, n));
            let lock_free = per_thread_ns(&keys, threads, shared, |k, n| free.decide(k, n));
            println!(
                "round {round}, {case:27} shard mutex {:>12}  CAS on the TAT {:>12}",
                format!("{with_lock:.1?}"),
                format!("{lock_free:.1?}"),
            );
        }
    }
}
