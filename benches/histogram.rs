//! One observation of a request-path histogram (`sluice_decision_seconds`'
//! buckets): `prometheus`' `Histogram`, four locked read-modify-writes,
//! against sluice's `PerThreadHistogram`, plain loads and stores into the
//! calling thread's own cells (`src/histogram.rs`). Alone, and with
//! a second thread observing the same histogram meanwhile, as a second
//! worker does (`server.workers = 2`): prometheus' cells are then shared
//! between the two cores' caches.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use prometheus::{Histogram, HistogramOpts};
use sluice::histogram::PerThreadHistograms;

/// `sluice_decision_seconds`' bounds (src/metrics.rs).
const BOUNDS: &[f64] = &[
    100e-9, 250e-9, 500e-9, 1e-6, 2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3,
    2.5e-3, 5e-3, 10e-3,
];

/// Observations as a decision's times spread: most of a few microseconds.
fn value(i: u64) -> f64 {
    [0.000_003, 0.000_004, 0.000_002, 0.000_03][(i % 4) as usize]
}

/// Runs `observe` `iterations` times while, if `contended`, another thread
/// runs it without pause.
fn timed(observe: Arc<dyn Fn(f64) + Send + Sync>, iterations: u64, contended: bool) -> Duration {
    let stop = Arc::new(AtomicBool::new(false));
    let other = contended.then(|| {
        let (observe, stop) = (Arc::clone(&observe), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                observe(value(i));
                i += 1;
            }
        })
    });
    let started = Instant::now();
    for i in 0..iterations {
        observe(black_box(value(i)));
    }
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    if let Some(other) = other {
        other.join().unwrap();
    }
    took
}

fn observe(c: &mut Criterion) {
    let theirs =
        Histogram::with_opts(HistogramOpts::new("t", "t").buckets(BOUNDS.to_vec())).unwrap();
    let ours = PerThreadHistograms::new("t", "t", BOUNDS, &[])
        .unwrap()
        .with_label_values(&[]);
    let prometheus: Arc<dyn Fn(f64) + Send + Sync> = Arc::new(move |v| theirs.observe(v));
    let per_thread: Arc<dyn Fn(f64) + Send + Sync> = Arc::new(move |v| ours.observe(v));
    let mut group = c.benchmark_group("histogram_observe");
    for (name, contended) in [("alone", false), ("beside_a_second_thread", true)] {
        group.bench_function(format!("prometheus/{name}"), |b| {
            b.iter_custom(|n| timed(Arc::clone(&prometheus), n, contended))
        });
        group.bench_function(format!("per_thread/{name}"), |b| {
            b.iter_custom(|n| timed(Arc::clone(&per_thread), n, contended))
        });
    }
    group.finish();
}

criterion_group!(benches, observe);
criterion_main!(benches);
