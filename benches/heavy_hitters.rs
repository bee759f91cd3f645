//! What counting a request in a rule's heavy hitters costs the request path
//! (`HeavyHitters::count`, once per applicable rule), and what a reader's
//! merge costs (`/admin/top`):
//!
//! - `count/hot`: one key over and over (a hit at the front of the tally);
//! - `count/32-keys`: 32 keys in turn (a full tally, every key present:
//!   the scan's worst hit);
//! - `count/one-off`: a new key every time (each replaces the least
//!   counted: two scans of a full tally, no text written);
//! - `top/full`: the 20 most counted of 8 full shards, two periods each.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use sluice::heavy_hitters::{HeavyHitters, Kind, CAPACITY};
use sluice::key::KeyText;

const NOW: u64 = 1_000_000_000;

fn count(c: &mut Criterion) {
    let mut group = c.benchmark_group("heavy_hitters/count");
    let hitters = HeavyHitters::default();
    group.bench_function("hot", |b| {
        b.iter(|| hitters.count(black_box(7), false, NOW, KeyText::new))
    });
    let hitters = HeavyHitters::default();
    let mut key = 0u64;
    group.bench_function("32-keys", |b| {
        b.iter(|| {
            key = (key + 1) % CAPACITY as u64;
            hitters.count(black_box(key), false, NOW, KeyText::new)
        })
    });
    let hitters = HeavyHitters::default();
    let mut key = 0u64;
    group.bench_function("one-off", |b| {
        b.iter(|| {
            key += 1;
            hitters.count(black_box(key), false, NOW, KeyText::new)
        })
    });
    group.finish();
}

fn top(c: &mut Criterion) {
    let hitters = std::sync::Arc::new(HeavyHitters::default());
    // Fill every shard (one per thread) in two periods.
    let threads: Vec<_> = (0..8)
        .map(|thread| {
            let hitters = std::sync::Arc::clone(&hitters);
            std::thread::spawn(move || {
                for now in [NOW, NOW + sluice::heavy_hitters::PERIOD] {
                    for key in 0..(CAPACITY as u64 * 4) {
                        hitters.count(key * 8 + thread, true, now, || KeyText::typed("k", 1));
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let now = NOW + sluice::heavy_hitters::PERIOD;
    c.bench_function("heavy_hitters/top/full", |b| {
        b.iter(|| black_box(hitters.top(Kind::Limited, 20, now)))
    });
}

criterion_group!(benches, count, top);
criterion_main!(benches);
