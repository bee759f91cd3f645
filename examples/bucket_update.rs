//! What a lock-free token bucket would buy a 1k-key decision, on one thread
//! and on two: the bucket's update under the shard mutex (as `MemoryStore`
//! does it) against a compare-and-swap on the bucket's own word (as
//! `governor` does), in stores that are otherwise the same; then the whole
//! decision of `benches/decision.rs`'s `sluice` row with each.
//!
//! ```sh
//! cargo run --release --example bucket_update
//! ```
//!
//! The stores are 64 shards of open-addressing tables sized as
//! `store/memory/probe_map.rs` sizes them (the smallest power of two of at
//! least 16 slots that is at most 7/8 full), holding the same 1,000 key
//! hashes, in four layouts; each prints its slot bytes per key:
//!
//! - `shard mutex`: 24-byte slots (key hash, TAT, refund word) behind one
//!   mutex per shard, as `MemoryStore` lays them out;
//! - `CAS`: the same slots, no lock, the TAT updated by compare-and-swap;
//! - `CAS, a line a slot`: each slot alone on a cache line, so two threads
//!   never write one line unless they share a key (a probe still reads the
//!   slots it passes);
//! - `CAS, keys apart`: the keys in one array, which probes read and only
//!   inserts write, and each TAT in a 128-byte block of its own (two lines,
//!   for the prefetcher that fetches them in pairs), so that on disjoint
//!   keys neither thread touches a line the other writes.
//!
//! A control runs each half of the keys in a `CAS` store of its own, one
//! per thread: two threads that share no memory at all.
//!
//! Part 1, the update alone: each thread walks a shuffled sequence of its
//! keys (all of them, or its half) and makes a GCRA decision with `now`
//! taken from its own counter, so the clock read, the key hash and the real
//! store's bookkeeping are left out: what remains is the probe and the
//! update. Every decision admits: one unit per ns, and a burst (2^50) far
//! larger than the two threads' counters can drift apart.
//!
//! Part 2, the whole decision on one thread, over the decision bench's keys
//! (`apikey-%016x`): `MonotonicClock::now()`, the key string hashed as
//! `KeyHasher::derive` hashes a header value, then the update, for the real
//! `MemoryStore::acquire_all`, the mutex store above and the CAS store
//! above. The row's steps come from `benches/common/sluice_row.rs`, which
//! the bench uses too. The CAS row is a floor for a lock-free `MemoryStore`: it has none
//! of the store's bookkeeping (its algorithm dispatch, the decision it
//! writes, the refund word).
//!
//! Only the `TAT` word is updated lock-free here. A real lock-free bucket
//! also needs the refund word with it (a 16-byte CAS) and inserts, growth
//! and sweeps that readers without a lock can survive; this measures what
//! that work would buy, not the work.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Instant;

use sluice::clock::{Clock, MonotonicClock};
use sluice::limiter::Limiter;
use sluice::store::{BucketTable, MemoryStore};

#[path = "../benches/common/sluice_row.rs"]
mod sluice_row;
use sluice_row::{allow_limiter, decide, hash_key, key_string};

const SHARDS: usize = 64;
/// The smallest table `ProbeMap` keeps.
const MIN_SLOTS: usize = 16;
const KEYS: usize = 1_000;
const DECISIONS: usize = 20_000_000;
/// GCRA: one unit per ns, a burst of 2^50.
const EMISSION: u64 = 1;
const TOLERANCE: u64 = 1 << 50;
/// Length of each thread's visiting sequence.
const VISITS: usize = 1 << 16;

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

/// Linear probing in a table of `len` slots (a power of two): the first slot
/// from `key`'s home whose key is `wanted`, 0 for the first empty one.
#[inline]
fn probe(len: usize, key: u64, wanted: u64, key_at: impl Fn(usize) -> u64) -> usize {
    let mask = len - 1;
    let mut at = key as usize & mask;
    while key_at(at) != wanted {
        at = (at + 1) & mask;
    }
    at
}

/// A GCRA step: the new TAT, or `None` if the request must wait.
fn gcra(tat: u64, now: u64) -> Option<u64> {
    let next = tat.max(now) + EMISSION;
    (next - now <= TOLERANCE).then_some(next)
}

/// A GCRA step on a TAT word by compare-and-swap; whether it admitted.
#[inline]
fn take_lock_free(word: &AtomicU64, now: u64) -> bool {
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
            let at = probe(slots.len(), key, 0, |i| slots[i].key);
            slots[at].key = key;
        }
        Locked(shards)
    }

    #[inline(never)]
    fn decide(&self, key: u64, now: u64) -> bool {
        let mut slots = self.0[shard_of(key)].0.lock().unwrap();
        let at = probe(slots.len(), key, key, |i| slots[i].key);
        match gcra(slots[at].tat, now) {
            Some(tat) => {
                slots[at].tat = tat;
                true
            }
            None => false,
        }
    }
}

#[derive(Default)]
struct AtomicSlot {
    key: AtomicU64,
    tat: AtomicU64,
    _refund: AtomicU64,
}

/// A slot alone on its cache line: 64 bytes instead of 24.
#[derive(Default)]
#[repr(align(64))]
struct OwnLine(AtomicSlot);

/// How a lock-free store lays out its slots.
trait Layout: Default + Sync {
    fn slot(&self) -> &AtomicSlot;
}

impl Layout for AtomicSlot {
    fn slot(&self) -> &AtomicSlot {
        self
    }
}

impl Layout for OwnLine {
    fn slot(&self) -> &AtomicSlot {
        &self.0
    }
}

/// The same tables with no lock: each slot's words are atomics.
#[repr(align(64))]
struct FreeShard<S>(Vec<S>);

struct Free<S>(Vec<FreeShard<S>>);

impl<S: Layout> Free<S> {
    fn new(keys: &[u64]) -> Free<S> {
        let shards: Vec<FreeShard<S>> = table_sizes(keys)
            .iter()
            .map(|&size| FreeShard((0..size).map(|_| S::default()).collect()))
            .collect();
        for &key in keys {
            let slots = &shards[shard_of(key)].0;
            let at = probe(slots.len(), key, 0, |i| {
                slots[i].slot().key.load(Ordering::Relaxed)
            });
            slots[at].slot().key.store(key, Ordering::Relaxed);
        }
        Free(shards)
    }

    /// Slot bytes per key held.
    fn bytes_per_key(&self, keys: usize) -> f64 {
        let slots: usize = self.0.iter().map(|shard| shard.0.len()).sum();
        (slots * std::mem::size_of::<S>()) as f64 / keys as f64
    }

    #[inline(never)]
    fn decide(&self, key: u64, now: u64) -> bool {
        let slots = &self.0[shard_of(key)].0;
        let at = probe(slots.len(), key, key, |i| {
            slots[i].slot().key.load(Ordering::Acquire)
        });
        take_lock_free(&slots[at].slot().tat, now)
    }
}

/// A TAT alone in a 128-byte block (two cache lines, for the prefetcher
/// that fetches them in pairs), out of the probe's way.
#[derive(Default)]
#[repr(align(128))]
struct LoneTat(AtomicU64);

/// Keys in one array (read by every probe, written only by inserts) and
/// the TATs in another, a 128-byte block each: the only layout here in which two
/// threads on disjoint keys never touch a line the other writes.
#[repr(align(64))]
struct SplitShard {
    keys: Vec<u64>,
    tats: Vec<LoneTat>,
}

struct Split(Vec<SplitShard>);

impl Split {
    fn new(keys: &[u64]) -> Split {
        let mut shards: Vec<SplitShard> = table_sizes(keys)
            .iter()
            .map(|&size| SplitShard {
                keys: vec![0; size],
                tats: (0..size).map(|_| LoneTat::default()).collect(),
            })
            .collect();
        for &key in keys {
            let slots = &mut shards[shard_of(key)].keys;
            let at = probe(slots.len(), key, 0, |i| slots[i]);
            slots[at] = key;
        }
        Split(shards)
    }

    fn bytes_per_key(&self, keys: usize) -> f64 {
        let slots: usize = self.0.iter().map(|shard| shard.keys.len()).sum();
        (slots * (8 + std::mem::size_of::<LoneTat>())) as f64 / keys as f64
    }

    #[inline(never)]
    fn decide(&self, key: u64, now: u64) -> bool {
        let shard = &self.0[shard_of(key)];
        let at = probe(shard.keys.len(), key, key, |i| shard.keys[i]);
        take_lock_free(&shard.tats[at].0, now)
    }
}

/// A shuffled walk over `keys`, `VISITS` long.
fn visits<T: Copy>(keys: &[T], seed: u64) -> Vec<T> {
    let mut x = 0x9E37_79B9_7F4A_7C15 ^ seed;
    (0..VISITS)
        .map(|_| {
            x = xorshift(x);
            keys[x as usize % keys.len()]
        })
        .collect()
}

/// Makes `DECISIONS` decisions along `visits`, giving `decide` each key and
/// a `now` from a counter (30 ns a decision); the mean ns per decision.
/// Panics if any was denied: every profile here admits everything.
fn time_walk<T: Copy>(visits: &[T], mut decide: impl FnMut(T, u64) -> bool) -> f64 {
    let start = Instant::now();
    let mut denied = 0;
    for i in 0..DECISIONS {
        if !decide(black_box(visits[i % VISITS]), i as u64 * 30) {
            denied += 1;
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / DECISIONS as f64;
    assert_eq!(denied, 0, "the allow profile admits every decision");
    ns
}

/// ns per decision on each of `threads` threads, each walking its keys:
/// all of them when `shared`, else every `threads`-th one. `decide` is
/// told which thread asks.
fn per_thread_ns(
    keys: &[u64],
    threads: usize,
    shared: bool,
    decide: impl Fn(usize, u64, u64) -> bool + Sync,
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
                let walk = visits(&mine, thread as u64);
                scope.spawn(move || {
                    barrier.wait();
                    time_walk(&walk, |key, now| decide(thread, key, now))
                })
            })
            .collect();
        running.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

/// Part 2's three stores over the same keys.
struct WholeDecision {
    seed: foldhash::fast::RandomState,
    clock: MonotonicClock,
    store: MemoryStore,
    table: BucketTable,
    limiter: Limiter,
    locked: Locked,
    free: Free<AtomicSlot>,
}

impl WholeDecision {
    fn new(keys: &[String]) -> WholeDecision {
        let limiter = allow_limiter();
        let (store, mut tables) = MemoryStore::with_tables(&[limiter], 1 << 20);
        let seed = foldhash::fast::RandomState::default();
        // Key 0 marks an empty slot in the skeletons' tables.
        let hashes: Vec<u64> = keys.iter().map(|key| hash_key(&seed, key).max(1)).collect();
        let whole = WholeDecision {
            seed,
            clock: MonotonicClock::default(),
            store,
            table: tables.remove(0),
            limiter,
            locked: Locked::new(&hashes),
            free: Free::new(&hashes),
        };
        for key in keys {
            assert!(whole.memory_store(key));
        }
        whole
    }

    /// The bench's `sluice` row: clock, hash, `MemoryStore::acquire_all`.
    fn memory_store(&self, key: &str) -> bool {
        let now = self.clock.now();
        let key = hash_key(&self.seed, key);
        decide(&self.store, &self.table, &self.limiter, key, now)
    }

    /// The same row with a skeleton's update instead of the store's.
    fn skeleton(&self, key: &str, update: impl Fn(u64, u64) -> bool) -> bool {
        let now = self.clock.now();
        update(hash_key(&self.seed, key).max(1), now)
    }
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
    // The control: each thread's half in a store of its own, so the two
    // threads share no line at all.
    let halves: Vec<Vec<u64>> = (0..2)
        .map(|t| keys.iter().copied().skip(t).step_by(2).collect())
        .collect();
    println!("Part 1: the update alone, ns per decision per thread, {KEYS} keys, {DECISIONS} decisions per thread");
    println!(
        "slot bytes per key: shard mutex and CAS {:.1}, a line a slot {:.1}, keys apart {:.1}",
        Free::<AtomicSlot>::new(&keys).bytes_per_key(KEYS),
        Free::<OwnLine>::new(&keys).bytes_per_key(KEYS),
        Split::new(&keys).bytes_per_key(KEYS),
    );
    for round in 1..=2 {
        for (case, threads, shared) in cases {
            // Fresh stores for each case: its clock starts at 0 again.
            let locked = Locked::new(&keys);
            let free = Free::<AtomicSlot>::new(&keys);
            let own_line = Free::<OwnLine>::new(&keys);
            let split = Split::new(&keys);
            let ns = [
                per_thread_ns(&keys, threads, shared, |_, k, n| locked.decide(k, n)),
                per_thread_ns(&keys, threads, shared, |_, k, n| free.decide(k, n)),
                per_thread_ns(&keys, threads, shared, |_, k, n| own_line.decide(k, n)),
                per_thread_ns(&keys, threads, shared, |_, k, n| split.decide(k, n)),
            ]
            .map(|ns| format!("{ns:.1?}"));
            println!(
                "round {round}, {case:27} shard mutex {:>12}  CAS {:>12}  CAS, a line a slot {:>12}  CAS, keys apart {:>12}",
                ns[0], ns[1], ns[2], ns[3]
            );
        }
        let alone = Free::<AtomicSlot>::new(&halves[0]);
        let alone = per_thread_ns(&halves[0], 1, false, |_, k, n| alone.decide(k, n));
        let private = [
            Free::<AtomicSlot>::new(&halves[0]),
            Free::<AtomicSlot>::new(&halves[1]),
        ];
        let apart = per_thread_ns(&keys, 2, false, |t, k, n| private[t].decide(k, n));
        println!(
            "round {round}, control, CAS, each half of the keys in a store of its own: 1 thread {:>8}, 2 threads {:>12}",
            format!("{alone:.1?}"),
            format!("{apart:.1?}"),
        );
    }

    let strings: Vec<String> = (0..KEYS as u32).map(key_string).collect();
    let whole = WholeDecision::new(&strings);
    let walk = visits(&strings.iter().map(String::as_str).collect::<Vec<_>>(), 0);
    println!("Part 2: the whole decision (clock, hash, update), one thread, ns per decision");
    for round in 1..=3 {
        let real = time_walk(&walk, |key, _| whole.memory_store(key));
        let locked = time_walk(&walk, |key, _| {
            whole.skeleton(key, |key, now| whole.locked.decide(key, now))
        });
        let free = time_walk(&walk, |key, _| {
            whole.skeleton(key, |key, now| whole.free.decide(key, now))
        });
        println!(
            "round {round}: MemoryStore {real:.1}  shard mutex {locked:.1}  CAS on the TAT {free:.1}"
        );
    }
}
