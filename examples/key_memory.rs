//! Bytes per tracked key: the RSS growth of inserting 1M distinct keys into
//! sluice's `MemoryStore`, for each algorithm, and into governor's keyed
//! limiter for comparison (`RateLimiter::keyed`,
//! `DefaultKeyedStateStore<String>`).
//!
//! ```sh
//! cargo run --release --example key_memory            # all, each in a fresh child process
//! cargo run --release --example key_memory -- sluice 1000000
//! cargo run --release --example key_memory -- sliding_log:10 1000000
//! ```
//!
//! Targets: `sluice` (the token bucket), `fixed_window`, `sliding_window`,
//! `sliding_log:N` (each key's log holding N stamps, N ≤ 100) and `governor`.
//!
//! Each measurement runs in its own process so that none reuses pages another
//! freed. Keys are the 23-byte `apikey-%016x` strings of the decision bench;
//! sluice stores only their 64-bit hash, governor stores the string.
//!
//! A sliding log's stamps live in a heap buffer per key (a `VecDeque<u64>`
//! that grows to 4, then about twice what it needs, never past COUNT), so its
//! figure depends on the stamps held. Each key gets its N decisions one after
//! the other (at `now` = 1..=N ns, all inside the 1 h period of a 100/h log),
//! so a buffer outgrown by one key is freed before the next key allocates, as
//! it would be reused by new keys in a long-running proxy; RSS counts the
//! buffers the logs hold, not a heap of freed smaller ones.

use std::hash::{BuildHasher, Hasher};
use std::num::NonZeroU32;
use std::process::Command;
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use sluice::config::Rate;
use sluice::limiter::{
    BucketState, Decision, FixedWindow, Gcra, Limiter, SlidingLog, SlidingWindow,
};
use sluice::store::{Ask, DrawnFrom, MemoryStore};

const DEFAULT_KEYS: usize = 1_000_000;

/// The window limiters' rate: never full here.
const WINDOW: Rate = Rate {
    count: 1_000_000_000,
    period: Duration::from_secs(1),
};

/// The sliding log's rate: room for up to 100 stamps per key, none of which
/// expires during the measurement.
const LOG: Rate = Rate {
    count: 100,
    period: Duration::from_secs(3600),
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let keys = args
        .get(1)
        .map_or(DEFAULT_KEYS, |n| n.parse().expect("key count"));
    match args.first().map(String::as_str) {
        Some("sluice") => report("sluice token_bucket", keys, &|keys, rss| {
            insert_sluice(token_bucket(), 1, keys, rss)
        }),
        Some("fixed_window") => report("sluice fixed_window", keys, &|keys, rss| {
            insert_sluice(Limiter::FixedWindow(FixedWindow::new(WINDOW)), 1, keys, rss)
        }),
        Some("sliding_window") => report("sluice sliding_window", keys, &|keys, rss| {
            insert_sluice(
                Limiter::SlidingWindow(SlidingWindow::new(WINDOW)),
                1,
                keys,
                rss,
            )
        }),
        Some("governor") => report("governor keyed<String>", keys, &insert_governor),
        Some(other) => {
            let Some(stamps) = other
                .strip_prefix("sliding_log:")
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|&n| (1..=LOG.count).contains(&n))
            else {
                panic!(
                    "unknown target {other}: sluice, fixed_window, sliding_window, \
                     sliding_log:N (1 ≤ N ≤ {}) or governor",
                    LOG.count
                )
            };
            let plural = if stamps == 1 { "" } else { "s" };
            let name = format!("sluice sliding_log, {stamps} stamp{plural}/key");
            report(&name, keys, &|keys, rss| {
                insert_sluice(Limiter::SlidingLog(SlidingLog::new(LOG)), stamps, keys, rss)
            })
        }
        None => {
            let exe = std::env::current_exe().expect("own path");
            for target in [
                "sluice",
                "fixed_window",
                "sliding_window",
                "sliding_log:1",
                "sliding_log:10",
                "governor",
            ] {
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

/// Inserts the given number of keys, reads RSS through the given function
/// while the store is still alive, and returns (keys tracked, RSS then).
type Insert<'a> = &'a dyn Fn(usize, &dyn Fn() -> u64) -> (usize, u64);

/// Runs `insert` (which keeps its limiter alive until it returns the count of
/// tracked keys, measured from inside) and prints the RSS delta per key.
fn report(name: &str, keys: usize, insert: Insert<'_>) {
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

fn token_bucket() -> Limiter {
    Limiter::TokenBucket(Gcra::new(
        Rate {
            count: 1_000_000_000,
            period: Duration::from_secs(1),
        },
        1_000_000,
    ))
}

/// Inserts `keys` keys into a one-table store of `limiter`, making `decisions`
/// admitted decisions per key in a row (at `now` = 1, 2, … ns).
fn insert_sluice(
    limiter: Limiter,
    decisions: u64,
    keys: usize,
    rss: &dyn Fn() -> u64,
) -> (usize, u64) {
    let (store, tables) = MemoryStore::with_tables(&[limiter], 4 << 20);
    // The same hasher and calls as `KeyHasher::derive` for a header value.
    let seed = foldhash::fast::RandomState::default();
    let mut outcome = [Decision::Allow(BucketState {
        remaining: 0,
        reset_after: 0,
    })];
    for id in 0..keys as u64 {
        let key = key_string(id);
        let mut hasher = seed.build_hasher();
        hasher.write_u64(key.len() as u64);
        hasher.write(key.as_bytes());
        let ask = Ask {
            table: &tables[0],
            key: hasher.finish(),
            limiter: &limiter,
            cost: 1,
            hold: None,
        };
        for now in 1..=decisions {
            assert!(store.acquire_all(&[ask], now, &mut outcome, &mut [DrawnFrom::Nowhere]));
        }
    }
    let after = rss();
    (store.tracked_keys(&tables[0]), after)
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
