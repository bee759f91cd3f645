//! The in-memory store's guarantees, driven with explicit `now` values (the
//! store never reads a clock): all-or-nothing decisions across rules, the
//! `max_keys` bound, idle eviction that changes no decision, and the
//! overflow bucket that keeps a key flood from resetting anyone.

use std::time::Duration;

use sluice::config::Rate;
use sluice::limiter::{Decision, FixedWindow, Gcra, Limiter, SlidingLog, SlidingWindow};
use sluice::store::{Ask, BucketTable, DrawnFrom, MemoryStore};

const SEC: u64 = 1_000_000_000;

fn bucket(count: u64, secs: u64) -> Limiter {
    Limiter::TokenBucket(Gcra::new(
        Rate {
            count,
            period: Duration::from_secs(secs),
        },
        count,
    ))
}

/// `count` per `secs` with each algorithm.
fn every_algorithm(count: u64, secs: u64) -> [Limiter; 4] {
    let rate = Rate {
        count,
        period: Duration::from_secs(secs),
    };
    [
        Limiter::TokenBucket(Gcra::new(rate, count)),
        Limiter::FixedWindow(FixedWindow::new(rate)),
        Limiter::SlidingWindow(SlidingWindow::new(rate)),
        Limiter::SlidingLog(SlidingLog::new(rate)),
    ]
}

fn ask<'a>(table: &'a BucketTable, key: u64, limiter: &'a Limiter) -> Ask<'a> {
    Ask {
        table,
        key,
        limiter,
        cost: 1,
        hold: None,
    }
}

fn one(store: &MemoryStore, ask: Ask<'_>, now: u64) -> bool {
    let mut decision = [Decision::Allow(sluice::limiter::BucketState {
        remaining: 0,
        reset_after: 0,
    })];
    store.acquire_all(&[ask], now, &mut decision, &mut [DrawnFrom::Nowhere])
}

fn admitted(store: &MemoryStore, ask: Ask<'_>, now: u64, tries: usize) -> usize {
    (0..tries).filter(|_| one(store, ask, now)).count()
}

#[test]
fn a_request_rejected_by_one_rule_takes_nothing_from_the_others() {
    let global = bucket(10, 60);
    let per_ip = bucket(2, 60);
    let (store, tables) = MemoryStore::with_tables(&[global, per_ip], 100);
    let now = SEC;
    let mut decisions = [Decision::Allow(sluice::limiter::BucketState {
        remaining: 0,
        reset_after: 0,
    }); 2];
    let both = [ask(&tables[0], 1, &global), ask(&tables[1], 7, &per_ip)];
    let results: Vec<bool> = (0..5)
        .map(|_| store.acquire_all(&both, now, &mut decisions, &mut [DrawnFrom::Nowhere; 2]))
        .collect();
    assert_eq!(results, [true, true, false, false, false]);
    // The last denial reports the global rule as it is: 8 left, not 5.
    assert_eq!(decisions[0].state().remaining, 8);
    assert!(!decisions[1].is_allowed());
    // Exactly 8 more fit in the global bucket for other callers.
    assert_eq!(admitted(&store, ask(&tables[0], 1, &global), now, 20), 8);
}

#[test]
fn the_store_never_holds_more_than_max_keys() {
    let limiter = bucket(5, 60);
    let (store, tables) = MemoryStore::with_tables(&[limiter], 1000);
    for key in 0..10_000u64 {
        one(
            &store,
            ask(
                &tables[0],
                key.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                &limiter,
            ),
            SEC,
        );
    }
    assert!(store.stats().tracked <= 1000, "{:?}", store.stats());
    assert_eq!(store.tracked_keys(&tables[0]), store.stats().tracked);
}

#[test]
fn refilled_buckets_are_evicted_to_make_room_without_changing_decisions() {
    let limiter = bucket(5, 1);
    let (store, tables) = MemoryStore::with_tables(&[limiter], 100);
    let keys = |range: std::ops::Range<u64>| range.map(|k| k.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for key in keys(0..100) {
        assert!(one(&store, ask(&tables[0], key, &limiter), SEC));
    }
    assert_eq!(store.stats().tracked, 100);
    // Two seconds later every bucket has refilled: new keys find room.
    let later = 3 * SEC;
    for key in keys(100..200) {
        assert!(one(&store, ask(&tables[0], key, &limiter), later));
    }
    let stats = store.stats();
    assert!(stats.evicted_idle > 0, "{stats:?}");
    assert_eq!(stats.overflow, 0, "{stats:?}");
    assert!(stats.tracked <= 100);
}

#[test]
fn flooding_new_keys_never_resets_an_over_limit_caller() {
    let max_keys = 1000;
    for limiter in every_algorithm(10, 60) {
        let (store, tables) = MemoryStore::with_tables(&[limiter], max_keys);
        let abuser = 0xabcdef;
        // The start of a minute, so that the second below stays inside one
        // window for the window algorithms.
        let mut now = 29_916_667 * 60 * SEC;
        assert_eq!(
            admitted(&store, ask(&tables[0], abuser, &limiter), now, 50),
            10
        );

        let mut abuser_admitted = 0;
        let mut fresh_admitted = 0;
        for round in 0..100u64 {
            now += SEC / 100;
            // 1000 new keys per round: 100k in all, each spending a little.
            for i in 0..1000u64 {
                let key = (round * 1000 + i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                if one(&store, ask(&tables[0], key, &limiter), now) {
                    fresh_admitted += 1;
                }
            }
            abuser_admitted += admitted(&store, ask(&tables[0], abuser, &limiter), now, 5);
            assert!(store.stats().tracked <= max_keys, "{limiter:?}");
        }
        // One second passed: at 10/min a token bucket earned at most one
        // unit back, and the windows none (the minute has not ended).
        let earned = usize::from(matches!(limiter, Limiter::TokenBucket(_)));
        assert!(
            abuser_admitted <= earned,
            "{limiter:?}: abuser admitted {abuser_admitted} times"
        );
        assert!(fresh_admitted > 0, "{limiter:?}");
        assert!(store.stats().overflow > 0, "{limiter:?}");

        // Legitimate newcomers arriving during the flood are limited
        // conservatively through the overflow sketch, but keep most of their
        // own budget: collisions with the flood (or, rarely, with another
        // newcomer) cost them a little.
        let newcomers = 200u64;
        let mut served = Vec::new();
        for n in 0..newcomers {
            let key = (n + 1).wrapping_mul(0xd6e8_feb8_6659_fd93);
            served.push(admitted(&store, ask(&tables[0], key, &limiter), now, 15));
        }
        assert!(
            served.iter().all(|&got| got <= 10),
            "{limiter:?}: a newcomer got more than its limit: {served:?}"
        );
        let mean = served.iter().sum::<usize>() as f64 / newcomers as f64;
        let well_served = served.iter().filter(|&&got| got >= 5).count();
        assert!(
            mean >= 6.0 && well_served * 100 >= 95 * served.len(),
            "{limiter:?}: newcomers got {mean:.1} of 10 on average: {served:?}"
        );
        println!("{limiter:?}: newcomers admitted {mean:.1} of 10 on average");
    }
}

#[test]
fn expired_windows_and_logs_are_evicted_to_make_room() {
    for limiter in every_algorithm(5, 1) {
        let (store, tables) = MemoryStore::with_tables(&[limiter], 100);
        let keys =
            |range: std::ops::Range<u64>| range.map(|k| k.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let start = 1_000 * SEC;
        for key in keys(0..100) {
            assert!(
                one(&store, ask(&tables[0], key, &limiter), start),
                "{limiter:?}"
            );
        }
        // Two periods later nothing the first keys did counts any more.
        let later = start + 2 * SEC;
        for key in keys(100..200) {
            assert!(
                one(&store, ask(&tables[0], key, &limiter), later),
                "{limiter:?}"
            );
        }
        let stats = store.stats();
        assert!(stats.evicted_idle > 0, "{limiter:?}: {stats:?}");
        assert_eq!(stats.overflow, 0, "{limiter:?}: {stats:?}");
        assert!(stats.tracked <= 100);
    }
}

#[test]
fn a_closed_route_stores_nothing() {
    let closed = Limiter::TokenBucket(Gcra::new(
        Rate {
            count: 0,
            period: Duration::from_secs(60),
        },
        0,
    ));
    let (store, tables) = MemoryStore::with_tables(&[closed], 10);
    assert!(!one(&store, ask(&tables[0], 42, &closed), SEC));
    assert_eq!(store.stats().tracked, 0);
}
