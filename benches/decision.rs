//! One token-bucket decision per iteration, sluice's in-memory store against
//! `governor`'s keyed limiter, on the same loop over the same keys; and the
//! same loop with sluice's other algorithms (last part of this comment).
//!
//! The workload (the `limiter-micro` workload every limiter in
//! BENCHMARKS.md's decision row was measured on):
//!
//! - keys are 23-byte strings `apikey-%016x` (splitmix64 of the key's index);
//! - a visiting sequence of 2^20 keys built from xorshift-shuffled
//!   permutations of all keys (for 1M keys: one permutation, so every decision
//!   goes to a random place in the table), stored inline in visiting order so
//!   the harness itself only streams memory;
//! - every key is inserted before timing, so the timed loop is steady-state
//!   lookups, not inserts;
//! - profile `allow`: burst 1 000 000, one unit per nanosecond, so every
//!   decision admits. Each sample counts its denials: one thread must see none,
//!   two threads at most 1e-5 (a thread preempted between its clock read and
//!   its update decides with a stale `now`, as governor does too).
//!
//! What one decision costs, for each side:
//!
//! - `sluice`: `MonotonicClock::now()`, hashing the key string exactly as
//!   `KeyHasher::derive` hashes a `header:x-api-key` value (a
//!   `foldhash::fast::RandomState` hasher fed the length prefix and the bytes;
//!   the seed is private to `KeyHasher`, the calls are the same), then
//!   `MemoryStore::acquire_all` with one ask.
//! - `sluice-derive`: the full `KeyHasher::derive` path through `RequestFacts`
//!   and a `HeaderMap` lookup. The loop must put each key into the one reused
//!   `HeaderMap` first; `harness/header-swap` measures that step alone.
//! - `sluice-noclock`: `sluice` with `now` from a counter instead of the
//!   clock, to show what the clock read costs (one thread only).
//! - `governor`: `RateLimiter::keyed` (`DefaultKeyedStateStore<String>`:
//!   DashMap, SipHash, quanta clock) and `check_key(&String)`.
//!
//! Two threads run the same loop at once, either on disjoint halves of the
//! keys or both over all keys (starting half a sequence apart); the figure is
//! nanoseconds per decision per thread (the slower thread's time / its
//! decisions).
//!
//! The other algorithms
//! (`decision/{fixed_window,calendar_window,sliding_window,sliding_log}`,
//! ids `decision/<algorithm>/<1k|1M>/1t` and `.../2t/<disjoint|shared>`) run
//! the `sluice` row's loop unchanged (same keys, same visiting sequence, same
//! clock and hashing, one ask) with only the limiter swapped, under
//! parameters where every decision admits:
//!
//! - `fixed_window`, `sliding_window`: COUNT 1 000 000 000 per 1 s, the token
//!   bucket's rate. The loop makes well under 1e8 decisions a second, so no
//!   window fills; windows still roll over every second of a run.
//! - `calendar_window`: a fixed window on Europe/Berlin's days (`calendar`,
//!   docs/charging.md "Calendar quotas"), COUNT 4 000 000 000 per day: the
//!   loop cannot fill it within a run. Its decision reads the calendar's
//!   cached window (a sequence lock over atomics) where `fixed_window`
//!   divides by the period: the pair measures what a calendar costs.
//! - `sliding_log`: COUNT 100 per 250 µs at 1k keys and per 1 s at 1M keys.
//!   The loop revisits a key every 1k decisions (≈ 30–70 µs) at 1k keys and
//!   about every 1M decisions (≈ 0.1–0.25 s) at 1M keys, so each log holds
//!   a handful of live stamps (≈ 4–8; twice that with two threads on shared
//!   keys): a small, realistic log, far from COUNT. One period for both key
//!   counts would give either thousands of stamps per key at 1k keys or under
//!   one at 1M. A denial needs a key visited 100 times within one period,
//!   i.e. about 100 passes over all keys: decisions faster than 2.5 ns (1k)
//!   or 10 ns (1M).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use sluice::clock::{Clock, MonotonicClock};
use sluice::config::{KeySource, Rate};
use sluice::key::{KeyHasher, RequestFacts};
use sluice::limiter::calendar::{Calendar, Unit};
use sluice::limiter::{FixedWindow, Limiter, SlidingLog, SlidingWindow};
use sluice::store::{BucketTable, MemoryStore};

#[path = "common/sluice_row.rs"]
mod sluice_row;
use sluice_row::{allow_limiter, decide, hash_key, key_string, BURST};

/// Length of the visiting sequence.
const SEQ_LEN: usize = 1 << 20;
const KEY_COUNTS: [(usize, &str); 2] = [(1_000, "1k"), (1_000_000, "1M")];
const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// One limiter behind the common loop. Monomorphised, so each side runs the
/// same loop code.
trait Check: Sync {
    /// One decision for `key`; whether it admitted. `&String` because
    /// governor's keyed limiter with `String` keys takes `&K`.
    #[allow(clippy::ptr_arg)]
    fn check(&self, key: &String) -> bool;
    /// Keys tracked.
    fn tracked(&self) -> usize;
}

/// A decision exactly as the proxy makes it for a `header:x-api-key` rule,
/// starting from the key string.
struct Sluice {
    store: MemoryStore,
    table: BucketTable,
    limiter: Limiter,
    clock: MonotonicClock,
    /// The same hasher type and calls as `KeyHasher::derive`.
    seed: foldhash::fast::RandomState,
}

impl Sluice {
    fn new() -> Sluice {
        Sluice::with(allow_limiter())
    }

    /// The same decision path with another limiter in the store's one table.
    fn with(limiter: Limiter) -> Sluice {
        let (store, mut tables) = MemoryStore::with_tables(&[limiter], 4 << 20);
        Sluice {
            store,
            table: tables.remove(0),
            limiter,
            clock: MonotonicClock::default(),
            seed: foldhash::fast::RandomState::default(),
        }
    }
}

/// COUNT of the `sliding_log` limiter (see the header for its period).
const LOG_COUNT: u64 = 100;

/// The algorithms besides the token bucket, named as in the config, with
/// parameters under which every decision of the loop admits (see the
/// header).
fn other_limiters(keys_count: usize) -> [(&'static str, Limiter); 4] {
    let window_rate = Rate {
        count: 1_000_000_000,
        period: Duration::from_secs(1),
    };
    let log_period = if keys_count <= 1_000 {
        Duration::from_micros(250)
    } else {
        Duration::from_secs(1)
    };
    [
        (
            "fixed_window",
            Limiter::FixedWindow(FixedWindow::new(window_rate)),
        ),
        (
            "calendar_window",
            Limiter::FixedWindow(FixedWindow::on_calendar(
                Rate {
                    count: 4_000_000_000,
                    period: Unit::Day.nominal(),
                },
                Calendar::new("Europe/Berlin", Unit::Day).expect("a zone"),
            )),
        ),
        (
            "sliding_window",
            Limiter::SlidingWindow(SlidingWindow::new(window_rate)),
        ),
        (
            "sliding_log",
            Limiter::SlidingLog(SlidingLog::new(Rate {
                count: LOG_COUNT,
                period: log_period,
            })),
        ),
    ]
}

impl Check for Sluice {
    #[inline]
    fn check(&self, key: &String) -> bool {
        let now = self.clock.now();
        let key = hash_key(&self.seed, key);
        decide(&self.store, &self.table, &self.limiter, key, now)
    }

    fn tracked(&self) -> usize {
        self.store.tracked_keys(&self.table)
    }
}

/// `Sluice` without the clock read: `now` advances by one nanosecond per
/// decision from a start taken once. Only for attributing the cost (the
/// clock read is the largest part at 1k keys); one thread only.
struct SluiceNoClock {
    inner: Sluice,
    now: AtomicU64,
}

impl Check for SluiceNoClock {
    #[inline]
    fn check(&self, key: &String) -> bool {
        // A plain load and store, not a read-modify-write: single-threaded.
        let now = self.now.load(Ordering::Relaxed) + 1;
        self.now.store(now, Ordering::Relaxed);
        let key = hash_key(&self.inner.seed, key);
        let inner = &self.inner;
        decide(&inner.store, &inner.table, &inner.limiter, key, now)
    }

    fn tracked(&self) -> usize {
        self.inner.tracked()
    }
}

struct Governor(DefaultKeyedRateLimiter<String>);

impl Governor {
    fn new() -> Governor {
        let quota = Quota::with_period(Duration::from_nanos(1))
            .expect("non-zero period")
            .allow_burst(NonZeroU32::new(BURST).expect("non-zero burst"));
        Governor(RateLimiter::keyed(quota))
    }
}

impl Check for Governor {
    #[inline]
    fn check(&self, key: &String) -> bool {
        self.0.check_key(key).is_ok()
    }

    fn tracked(&self) -> usize {
        self.0.len()
    }
}

/// Keys in visiting order, plus the same keys as `HeaderValue`s for the
/// `derive` path.
struct Workload {
    /// Which key each position visits (0..keys).
    ids: Vec<u32>,
    /// `ids` as strings, one allocation each, allocated in visiting order.
    keys: Vec<String>,
    keys_count: usize,
}

impl Workload {
    fn new(keys_count: usize) -> Workload {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut xorshift = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut ids = Vec::with_capacity(SEQ_LEN + keys_count);
        while ids.len() < SEQ_LEN {
            let mut perm: Vec<u32> = (0..keys_count as u32).collect();
            for i in (1..perm.len()).rev() {
                let j = (xorshift() % (i as u64 + 1)) as usize;
                perm.swap(i, j);
            }
            ids.extend_from_slice(&perm);
        }
        ids.truncate(SEQ_LEN);
        let keys = ids.iter().map(|&id| key_string(id)).collect();
        Workload {
            ids,
            keys,
            keys_count,
        }
    }

    /// The visiting sequence restricted to one half of the keys (same order).
    fn half(&self, upper: bool) -> Vec<String> {
        let split = (self.keys_count / 2) as u32;
        self.ids
            .iter()
            .zip(&self.keys)
            .filter(|(&id, _)| (id >= split) == upper)
            .map(|(_, key)| key.clone())
            .collect()
    }
}

/// Inserts every key once and checks that each was admitted and is tracked.
fn populate(limiter: &impl Check, workload: &Workload) {
    let mut seen = vec![false; workload.keys_count];
    for (&id, key) in workload.ids.iter().zip(&workload.keys) {
        if !seen[id as usize] {
            seen[id as usize] = true;
            assert!(limiter.check(key), "first decision for {key} denied");
        }
    }
    assert_eq!(limiter.tracked(), workload.keys_count, "keys tracked");
}

/// The timed loop: `iters` decisions over `keys` from `*cursor` on. Returns
/// the elapsed time and the number of denials.
#[inline(never)]
fn run(limiter: &impl Check, keys: &[String], cursor: &AtomicUsize, iters: u64) -> (Duration, u64) {
    let mut index = cursor.load(Ordering::Relaxed);
    let mut denied = 0u64;
    let start = Instant::now();
    for _ in 0..iters {
        denied += u64::from(!limiter.check(&keys[index]));
        index += 1;
        if index == keys.len() {
            index = 0;
        }
    }
    let elapsed = start.elapsed();
    cursor.store(index, Ordering::Relaxed);
    (elapsed, denied)
}

/// Denials and decisions of the two-thread runs, per benchmark, for the
/// report.
static DENIALS_2T: Mutex<BTreeMap<String, (u64, u64)>> = Mutex::new(BTreeMap::new());

fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(6))
        .sample_size(30)
        .noise_threshold(0.05)
}

fn one_thread(c: &mut Criterion) {
    for (keys_count, label) in KEY_COUNTS {
        let workload = Workload::new(keys_count);
        let mut group = c.benchmark_group(format!("decision_1t/{label}"));
        bench_1t(&mut group, "sluice", Sluice::new(), &workload);
        bench_1t(&mut group, "governor", Governor::new(), &workload);
        bench_derive(&mut group, &workload);
        let inner = Sluice::new();
        let now = AtomicU64::new(inner.clock.now());
        bench_1t(
            &mut group,
            "sluice-noclock",
            SluiceNoClock { inner, now },
            &workload,
        );
        group.finish();
        for (algorithm, limiter) in other_limiters(keys_count) {
            let mut group = c.benchmark_group(format!("decision/{algorithm}/{label}"));
            bench_1t(&mut group, "1t", Sluice::with(limiter), &workload);
            group.finish();
        }
    }
}

fn bench_1t(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    limiter: impl Check,
    workload: &Workload,
) {
    populate(&limiter, workload);
    let cursor = AtomicUsize::new(0);
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let (elapsed, denied) = run(&limiter, &workload.keys, &cursor, iters);
            assert_eq!(denied, 0, "{name}: a one-thread allow run denied");
            elapsed
        })
    });
}

/// The proxy's own path from a header to a decision: `KeyHasher::derive`
/// over `RequestFacts`, then `acquire_all`. The loop first has to put the key
/// into the (one, reused, cache-hot) `HeaderMap`; `harness/header-swap`
/// measures that insert alone so it can be subtracted.
fn bench_derive(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    workload: &Workload,
) {
    // Static header values clone without touching a reference count, like
    // the borrowed request bytes the proxy hashes.
    let joined: &'static str = Box::leak(workload.keys.concat().into_boxed_str());
    let key_len = workload.keys[0].len();
    let values: Vec<HeaderValue> = (0..workload.keys.len())
        .map(|i| HeaderValue::from_static(&joined[i * key_len..(i + 1) * key_len]))
        .collect();
    let limiter = allow_limiter();
    let (store, tables) = MemoryStore::with_tables(&[limiter], 4 << 20);
    let table = &tables[0];
    let clock = MonotonicClock::default();
    let hasher = KeyHasher::new(64);
    let sources = [KeySource::Header(API_KEY)];
    let mut headers = HeaderMap::new();
    headers.insert(API_KEY, values[0].clone());
    let decide_one = |headers: &HeaderMap| {
        let facts = RequestFacts {
            method: &Method::GET,
            path: "/v1/search",
            normalized_path: "/v1/search",
            query: None,
            host: Some("api.example.com"),
            headers,
            client_ip: IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7)),
            claims: None,
            body: None,
            call: None,
        };
        let now = clock.now();
        let key = hasher
            .derive(&sources, &facts, false)
            .expect("x-api-key present");
        decide(&store, table, &limiter, key, now)
    };
    for value in &values[..workload.keys_count.min(values.len())] {
        headers.insert(API_KEY, value.clone());
        assert!(decide_one(&headers));
    }
    // The visiting sequence's first `keys_count` entries are one permutation
    // of all keys, so every key is now tracked.
    assert_eq!(store.tracked_keys(table), workload.keys_count);

    let mut index = 0;
    group.bench_function("sluice-derive", |b| {
        b.iter_custom(|iters| {
            let mut denied = 0u64;
            let start = Instant::now();
            for _ in 0..iters {
                headers.insert(API_KEY, values[index].clone());
                denied += u64::from(!decide_one(&headers));
                index += 1;
                if index == values.len() {
                    index = 0;
                }
            }
            let elapsed = start.elapsed();
            assert_eq!(denied, 0, "sluice-derive: a one-thread allow run denied");
            elapsed
        })
    });
    let mut index = 0;
    group.bench_function("harness/header-swap", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                headers.insert(API_KEY, values[index].clone());
                std::hint::black_box(&headers);
                index += 1;
                if index == values.len() {
                    index = 0;
                }
            }
            start.elapsed()
        })
    });
}

fn two_threads(c: &mut Criterion) {
    for (keys_count, label) in KEY_COUNTS {
        let workload = Workload::new(keys_count);
        let halves = [workload.half(false), workload.half(true)];
        let mut group = c.benchmark_group(format!("decision_2t/{label}"));
        for mode in ["disjoint", "shared"] {
            bench_2t(
                &mut group,
                BenchmarkId::new("sluice", mode),
                format!("sluice/{mode}"),
                mode,
                Sluice::new(),
                &workload,
                &halves,
            );
            bench_2t(
                &mut group,
                BenchmarkId::new("governor", mode),
                format!("governor/{mode}"),
                mode,
                Governor::new(),
                &workload,
                &halves,
            );
        }
        group.finish();
        for (algorithm, limiter) in other_limiters(keys_count) {
            let mut group = c.benchmark_group(format!("decision/{algorithm}/{label}"));
            for mode in ["disjoint", "shared"] {
                bench_2t(
                    &mut group,
                    BenchmarkId::new("2t", mode),
                    format!("{algorithm}/{mode}"),
                    mode,
                    Sluice::with(limiter),
                    &workload,
                    &halves,
                );
            }
            group.finish();
        }
    }
    let tally = DENIALS_2T.lock().unwrap_or_else(|p| p.into_inner());
    for (name, (denied, decided)) in tally.iter() {
        let fraction = *denied as f64 / (*decided).max(1) as f64;
        eprintln!("two threads, {name}: {denied} stale-clock denials in {decided} decisions ({fraction:.1e})");
    }
}

/// `tally` names the benchmark in the stale-clock denial report (summed over
/// key counts).
fn bench_2t(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: BenchmarkId,
    tally: String,
    mode: &str,
    limiter: impl Check,
    workload: &Workload,
    halves: &[Vec<String>; 2],
) {
    populate(&limiter, workload);
    let sequences: [&[String]; 2] = match mode {
        "disjoint" => [&halves[0], &halves[1]],
        _ => [&workload.keys, &workload.keys],
    };
    let cursors = [
        AtomicUsize::new(0),
        AtomicUsize::new(if mode == "shared" { SEQ_LEN / 2 } else { 0 }),
    ];
    let limiter = &limiter;
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let barrier = Barrier::new(2);
            let results: Vec<(Duration, u64)> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..2)
                    .map(|t| {
                        let (keys, cursor, barrier) = (sequences[t], &cursors[t], &barrier);
                        scope.spawn(move || {
                            barrier.wait();
                            run(limiter, keys, cursor, iters)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("bench thread"))
                    .collect()
            });
            let denied: u64 = results.iter().map(|r| r.1).sum();
            // governor and sluice both read the clock before updating; a
            // thread preempted in between for over a millisecond (the burst
            // window) decides with a stale `now`. Counted and reported. (The
            // window and log limiters treat a stale `now` as the newest time
            // seen, and have room to spare here: they should count none.)
            let mut tallies = DENIALS_2T.lock().unwrap_or_else(|p| p.into_inner());
            let entry = tallies.entry(tally.clone()).or_default();
            entry.0 += denied;
            entry.1 += 2 * iters;
            drop(tallies);
            results.iter().map(|r| r.0).max().unwrap_or_default()
        })
    });
}

criterion_group! {
    name = benches;
    config = criterion();
    targets = one_thread, two_threads
}
criterion_main!(benches);
