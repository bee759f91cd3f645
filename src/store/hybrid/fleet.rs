//! What syncing adds to the memory store's decisions (docs/multi-instance.md,
//! "Hybrid mode"), checked exactly: fleets of hybrid stores on one real
//! `redis-server`, deciding and syncing at the instants the tests give
//! them (Redis too). The store suite (`store/suite.rs`) holds a hybrid
//! store alone to the memory store's contract; these are the promises
//! about several instances, ending with a property test that compares a
//! fleet with one memory store, the promised bounds as its oracle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;

use super::HybridStore;
use crate::clock::{Clock, Nanos};
use crate::limiter::{FixedWindow, Gcra, Limiter, Rate, SlidingWindow};
use crate::store::admission::{Admission, Ask, Asks, Decisions, Receipt, Settle};
use crate::store::{BucketTable, MemoryStore, TableName};
use crate::testing::redis_server::shared_urls;
use crate::testing::{SetClock, T0};

const MS: Nanos = 1_000_000;

/// `instances` hybrid stores sharing one limit's buckets in Redis, and the
/// clock they decide and sync at.
struct Fleet {
    stores: Vec<HybridStore>,
    tables: Vec<BucketTable>,
    limiter: Limiter,
    clock: SetClock,
}

impl Fleet {
    /// A fleet of its own (its keys under a prefix no other test uses).
    async fn new(instances: u64, limiter: Limiter) -> Fleet {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let prefix = format!("fleet{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let mut stores = Vec::new();
        for _ in 0..instances {
            stores.push(HybridStore::for_test(shared_urls(), &prefix, instances).await);
        }
        let name = || TableName {
            rule: "rule".into(),
            limit: "limit".into(),
        };
        let tables = stores
            .iter()
            .map(|store| store.local().named_table(name(), &limiter))
            .collect();
        Fleet {
            stores,
            tables,
            limiter,
            clock: SetClock::at(T0),
        }
    }

    fn ask(&self, instance: usize, key: u64, cost: u64) -> Asks<'_> {
        let mut asks = Asks::default();
        let ask = Ask {
            table: &self.tables[instance],
            key,
            limiter: &self.limiter,
            cost,
            hold: None,
        };
        asks.push_rule(key, false, None, [ask]);
        asks
    }

    /// One request of cost 1 for `key` on `instance`: its receipt if
    /// admitted.
    fn request(&self, instance: usize, key: u64) -> Option<Receipt> {
        let mut answer = Admission::default();
        let now = self.clock.now();
        self.stores[instance].admit(&self.ask(instance, key, 1), now, &mut answer);
        answer.admitted().then(|| answer.receipts.remove(0))
    }

    /// Requests for `key` on `instance`: how many of `count` were admitted.
    fn requests(&self, instance: usize, key: u64, count: u64) -> u64 {
        (0..count)
            .map(|_| u64::from(self.request(instance, key).is_some()))
            .sum()
    }

    async fn sync(&self, instance: usize) {
        self.stores[instance].sync(&self.clock).await;
        assert!(!self.stores[instance].is_failing(), "Redis failed the sync");
    }

    /// What `instance` would tell a request for `key` is left.
    fn remaining(&self, instance: usize, key: u64) -> u64 {
        let mut decisions = Decisions::new();
        let now = self.clock.now();
        self.stores[instance]
            .local()
            .peek_all(&self.ask(instance, key, 1), now, &mut decisions);
        decisions[0].state().remaining
    }

    fn advance(&self, by: Nanos) {
        self.clock.set(self.clock.now() + by);
    }
}

fn token_bucket(count: u64) -> Limiter {
    Limiter::TokenBucket(Gcra::new(per_hour(count), count))
}

fn per_hour(count: u64) -> Rate {
    Rate {
        count,
        period: Duration::from_secs(3600),
    }
}

#[tokio::test]
async fn spending_on_one_instance_reaches_another_with_a_sync_each() {
    let fleet = Fleet::new(2, token_bucket(10)).await;
    // A key new to an instance starts with the others' shares spent: 5 of
    // 10 here, until a sync tells the truth.
    assert_eq!(fleet.requests(0, 7, 6), 5);
    fleet.sync(0).await;
    assert_eq!(fleet.remaining(0, 7), 5, "5 spent in all");
    assert!(fleet.request(1, 7).is_some());
    assert_eq!(fleet.remaining(1, 7), 4, "its share less its own");
    fleet.sync(1).await;
    assert_eq!(fleet.remaining(1, 7), 4, "6 spent in all");
    assert_eq!(fleet.requests(1, 7, 2), 2);
    fleet.sync(1).await;
    fleet.sync(0).await;
    assert_eq!(fleet.remaining(0, 7), 2, "8 spent in all");
    assert_eq!(fleet.requests(0, 7, 5), 2);
}

#[tokio::test]
async fn a_new_key_takes_at_most_its_share_on_each_instance_before_it_syncs() {
    let fleet = Fleet::new(3, token_bucket(9)).await;
    let admitted: u64 = (0..3).map(|instance| fleet.requests(instance, 1, 5)).sum();
    assert_eq!(admitted, 9, "3 shares of 3");
    // The first to sync learns only what was sent before it.
    for (instance, expected) in [(0, 6), (1, 3), (2, 0)] {
        fleet.sync(instance).await;
        assert_eq!(fleet.remaining(instance, 1), expected);
    }
    for instance in 0..3 {
        fleet.sync(instance).await;
        assert_eq!(fleet.remaining(instance, 1), 0);
    }
}

#[tokio::test]
async fn charges_and_refunds_reach_the_other_instances() {
    let fleet = Fleet::new(2, token_bucket(100)).await;
    fleet.request(1, 3).expect("admitted");
    fleet.sync(1).await;
    let mut receipt = [fleet.request(0, 3).expect("admitted")];
    let now = fleet.clock.now();
    fleet.stores[0].settle(&mut receipt, Settle::Charge(9), now);
    fleet.sync(0).await;
    fleet.sync(1).await;
    assert_eq!(fleet.remaining(1, 3), 100 - 1 - 1 - 9);
    // A refund after the sync that sent the units as taken: given back in
    // Redis with the next one.
    fleet.advance(MS);
    let now = fleet.clock.now();
    fleet.stores[0].settle(&mut receipt, Settle::GiveBack, now);
    fleet.sync(0).await;
    assert_eq!(fleet.remaining(0, 3), 100 - 1 - 9);
    // Untouched for two of its rounds, the key is no longer watched by the
    // second instance (its view went stale): its next request there is
    // held to its share, and the sync after it brings the truth.
    fleet.sync(1).await;
    assert_eq!(fleet.remaining(1, 3), 100 - 1 - 1 - 9, "stale");
    assert!(fleet.request(1, 3).is_some());
    assert_eq!(fleet.remaining(1, 3), 50 - 1);
    fleet.sync(1).await;
    assert_eq!(fleet.remaining(1, 3), 100 - 1 - 9 - 1);
}

/// A fleet's requests in rounds: in each, `requests` are the instances the
/// requests come to, in order, then every instance syncs, in `syncs`'s
/// order (an interval each).
#[derive(Debug, Clone)]
struct Round {
    requests: Vec<usize>,
    syncs: Vec<usize>,
}

fn rounds(instances: usize) -> impl Strategy<Value = Vec<Round>> {
    let round = (
        prop::collection::vec(0..instances, 0..24),
        Just((0..instances).collect::<Vec<_>>()).prop_shuffle(),
    )
        .prop_map(|(requests, syncs)| Round { requests, syncs });
    prop::collection::vec(round, 1..7)
}

fn limiters() -> impl Strategy<Value = Limiter> {
    (1u64..40, 0..3).prop_map(|(count, kind)| match kind {
        0 => token_bucket(count),
        1 => Limiter::FixedWindow(FixedWindow::new(per_hour(count))),
        _ => Limiter::SlidingWindow(SlidingWindow::new(per_hour(count))),
    })
}

/// The fleet's answers to `rounds` against one memory store's (the same
/// requests at the same instants: what a single instance would admit).
/// The promised bounds are the oracle:
///
/// - over-admission is at most what the fleet was sent in two intervals
///   in a row (the longest an instance's spending takes to reach another);
/// - nothing is lost or counted twice: once every instance has synced
///   twice after the last request, each tells what is left of the limit
///   after everything the fleet admitted, as the memory store would after
///   as many admissions.
async fn fleet_against_memory(instances: usize, limiter: Limiter, rounds: Vec<Round>) {
    let fleet = Fleet::new(instances as u64, limiter).await;
    let (memory, tables) = MemoryStore::with_tables(&[limiter], 100);
    let key = 42;
    let (mut fleet_admitted, mut memory_admitted) = (0u64, 0u64);
    let mut sent = Vec::new();
    for round in &rounds {
        for &instance in &round.requests {
            fleet_admitted += u64::from(fleet.request(instance, key).is_some());
            let mut asks = Asks::default();
            asks.push_rule(key, false, None, [memory_ask(&tables[0], &limiter, key)]);
            let mut answer = Admission::default();
            memory.admit(&asks, fleet.clock.now(), &mut answer);
            memory_admitted += u64::from(answer.admitted());
        }
        sent.push(round.requests.len() as u64);
        for &instance in &round.syncs {
            fleet.sync(instance).await;
        }
        fleet.advance(10 * MS);
    }
    let two_intervals = sent
        .iter()
        .zip(sent.iter().skip(1).chain([&0]))
        .map(|(one, next)| one + next)
        .max()
        .unwrap_or(0);
    assert!(
        fleet_admitted <= memory_admitted + two_intervals,
        "{fleet_admitted} admitted against {memory_admitted}, more than two intervals' \
         {two_intervals} over"
    );
    // One more round: every instance that still watches the key (it took
    // from it in the last two rounds) adopts what Redis holds.
    for instance in 0..instances {
        fleet.sync(instance).await;
    }
    // What a memory store tells after as many admissions as the fleet made.
    let (alone, tables) = MemoryStore::with_tables(&[limiter], 100);
    let now = fleet.clock.now();
    let mut asks = Asks::default();
    asks.push_rule(key, false, None, [memory_ask(&tables[0], &limiter, key)]);
    if fleet_admitted > 0 {
        let mut spend = Asks::default();
        let mut ask = memory_ask(&tables[0], &limiter, key);
        ask.cost = fleet_admitted;
        spend.push_rule(key, false, None, [ask]);
        alone.spend(&spend, now, &mut Decisions::new());
    }
    let mut left = Decisions::new();
    alone.peek_all(&asks, now, &mut left);
    let left = left[0].state().remaining;
    // Redis counts every unit the fleet took, once.
    let mut shared = Decisions::new();
    let redis = fleet.stores[0].shared();
    redis
        .decide_all(false, &fleet.ask(0, key, 1), now, &mut shared)
        .await
        .expect("Redis answers");
    assert_eq!(
        shared[0].state().remaining,
        left,
        "Redis after {fleet_admitted} admitted"
    );
    for (instance, store) in fleet.stores.iter().enumerate() {
        if store.deltas.watches(&fleet.tables[instance], key) {
            let view = fleet.remaining(instance, key);
            assert_eq!(
                view, left,
                "instance {instance} after {fleet_admitted} admitted"
            );
        }
    }
}

fn memory_ask<'a>(table: &'a BucketTable, limiter: &'a Limiter, key: u64) -> Ask<'a> {
    Ask {
        table,
        key,
        limiter,
        cost: 1,
        hold: None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_fleet_admits_what_one_instance_would_within_the_promised_bounds(
        (instances, limiter, rounds) in (2usize..4, limiters())
            .prop_flat_map(|(instances, limiter)| (Just(instances), Just(limiter), rounds(instances)))
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(fleet_against_memory(instances, limiter, rounds));
    }
}
