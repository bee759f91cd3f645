//! One decision of `benches/decision.rs`'s `sluice` row, step by step:
//! its keys, its limiter, the key hash and the store call. Shared with
//! `examples/bucket_update.rs` (by `#[path]`), which times the same row
//! against stores of other layouts and must not drift from the bench.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use sluice::config::Rate;
use sluice::limiter::{BucketState, Decision, Gcra, Limiter};
use sluice::store::{Ask, BucketTable, DrawnFrom, MemoryStore};

/// The `allow` profile: a bucket this deep, refilled one unit per nanosecond.
pub const BURST: u32 = 1_000_000;

/// The token bucket of the `allow` profile: every decision of the loops
/// admits.
pub fn allow_limiter() -> Limiter {
    Limiter::TokenBucket(Gcra::new(
        Rate {
            count: 1_000_000_000,
            period: Duration::from_secs(1),
        },
        u64::from(BURST),
    ))
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Key `id` of the workload: a 23-byte `apikey-%016x` string.
pub fn key_string(id: u32) -> String {
    format!("apikey-{:016x}", splitmix64(u64::from(id)))
}

/// The key hashed as `KeyHasher::derive` hashes a header value (its
/// `hash_bytes`): the same hasher type and calls, with the caller's seed,
/// since `KeyHasher`'s is private.
#[inline]
pub fn hash_key(seed: &foldhash::fast::RandomState, key: &str) -> u64 {
    let mut hasher = seed.build_hasher();
    hasher.write_u64(key.len() as u64);
    hasher.write(key.as_bytes());
    hasher.finish()
}

/// `MemoryStore::acquire_all` with one ask of one unit, as the proxy asks
/// for a request under one limit.
#[inline]
pub fn decide(
    store: &MemoryStore,
    table: &BucketTable,
    limiter: &Limiter,
    key: u64,
    now: u64,
) -> bool {
    let asks = [Ask {
        table,
        key,
        limiter,
        cost: 1,
        hold: None,
    }];
    let mut decisions = [Decision::Allow(BucketState {
        remaining: 0,
        reset_after: 0,
    })];
    store.acquire_all(&asks, now, &mut decisions, &mut [DrawnFrom::Nowhere])
}
