//! Bytes per tracked key: the RSS growth of inserting 1M distinct keys into
//! sluice's `MemoryStore`, and into governor's keyed limiter for comparison
//! (`RateLimiter::keyed`, `DefaultKeyedStateStore<String>`).
//!
//! ```sh
//! cargo run --release --example key_memory            # both, each in a fresh child process
//! cargo run --release --example key_memory -- sluice 1000000
//! ```
//!
//! Each measurement runs in its own process so that neither reuses pages the
//! other freed. Keys are the 23-byte `apikey-%016x` strings of the decision
//! bench; sluice stores only their 64-bit hash, governor stores the string.

use std::hash::{BuildHasher, Hasher};
use std::num::NonZeroU32;
use std::process::Command;
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use sluice::limiter::{BucketState, Decision, Gcra, Limiter};
use sluice::store::{Ask, MemoryStore};

const DEFAULT_KEYS: usize = 1_000_000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let keys = args
        .get(1)
        .map_or(DEFAULT_KEYS, |n| n.parse().expect("key count"));
    match args.first().map(String::as_str) {
        Some("sluice") => report("sluice MemoryStore", keys, insert_sluice),
        Some("governor") => report("governor keyed<String>", keys, insert_governor),
        Some(other) => panic!("unknown target {other}: sluice or governor"),
        None => {
            let exe = std::env::current_exe().expect("own path");
            for target in ["sluice", "governor"] {
                let status = Command::new(&exe)
                    .args([target, &keys.to_string()])
                    .status()
                    .expect("child process");
                assert!(status.success(), "{target} measurement failed");
            }
        }
    }
}

/// Resident set size in bytes, from /proc/self/statm.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .expect("statm resident field");
    pages * 4096
}

fn key_string(id: u64) -> String {
    let mut x = id.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    format!("apikey-{:016x}", x ^ (x >> 31))
}

/// Runs `insert` (which keeps its limiter alive until it returns the count of
/// tracked keys, measured from inside) and prints the RSS delta per key.
fn report(name: &str, keys: usize, insert: fn(usize, &dyn Fn() -> u64) -> (usize, u64)) {
    // Warm up the allocator and the formatting path so they are not counted.
    drop(std::hint::black_box(key_string(0)));
    let before = rss_bytes();
    let (tracked, after) = insert(keys, &rss_bytes);
    assert_eq!(tracked, keys, "{name}: keys tracked");
    let delta = after.saturating_sub(before);
    println!(
        "{name}: {keys} keys, RSS +{:.1} MiB, {:.1} bytes/key",
        delta as f64 / (1024.0 * 1024.0),
        delta as f64 / keys as f64
    );
}

fn insert_sluice(keys: usize, rss: &dyn Fn() -> u64) -> (usize, u64) {
    let limiter = Limiter::TokenBucket(Gcra::new(
        sluice::config::Rate {
            count: 1_000_000_000,
            period: Duration::from_secs(1),
        },
        1_000_000,
    ));
    let store = MemoryStore::new(&[limiter], 4 << 20);
    // The same hasher and calls as `KeyHasher::derive` for a header value.
    let seed = foldhash::fast::RandomState::default();
    let mut decisions = [Decision::Allow(BucketState {
        remaining: 0,
        reset_after: 0,
    })];
    for id in 0..keys as u64 {
        let key = key_string(id);
        let mut hasher = seed.build_hasher();
        hasher.write_u64(key.len() as u64);
        hasher.write(key.as_bytes());
        let ask = Ask {
            table: 0,
            key: hasher.finish(),
            limiter: &limiter,
            cost: 1,
        };
        assert!(store.acquire_all(&[ask], 1, &mut decisions));
    }
    let after = rss();
    (store.tracked_keys(0), after)
}

fn insert_governor(keys: usize, rss: &dyn Fn() -> u64) -> (usize, u64) {
    let quota = Quota::with_period(Duration::from_nanos(1))
        .expect("non-zero period")
        .allow_burst(NonZeroU32::new(1_000_000).expect("non-zero burst"));
    let limiter: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(quota);
    for id in 0..keys as u64 {
        assert!(limiter.check_key(&key_string(id)).is_ok());
    }
    let after = rss();
    (limiter.len(), after)
}
