//! Each charge is settled exactly once, whatever the store does meanwhile
//! (docs/multi-instance.md, "When Redis is slow or away"): a property test.
//!
//! Random requests reserve units at admission; their answers charge less
//! than the reservation (the rest is given back) or more (an overrun is
//! charged); between them the store is sent what waits and does, at
//! random, take it, never get it (a stall), or run it and lose its answer
//! (a timeout after the fact), and what failed is sent again. However
//! that goes, once everything has been sent the balance is the budget
//! less the sum of the charges:
//!
//! - in memory, where every settlement is applied at once;
//! - in strict mode, the settlements' rounds driven by the test
//!   ([`crate::store::redis`]'s settler, without its task), on one Redis
//!   and on a Redis Cluster (three callers, whose keys live in different
//!   slots: a round is then one call per slot);
//! - in hybrid mode, its syncs driven by the test, checked in Redis
//!   itself and in the instance's own view.
//!
//! Strict and hybrid run the real script on a real `redis-server`; the
//! faults only decide what becomes of a call (`redis/faults.rs`). Time
//! stands still at [`T0`], inside one window: nothing refills.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use proptest::prelude::*;

use super::redis::faults::Fault;
use super::{Admission, Asks, BucketTable, HybridStore, MemoryStore, Receipt, Settle, Store};
use super::{RedisSettings, RedisStore, TableName};
use crate::limiter::{FixedWindow, Gcra, Limiter, Rate};
use crate::testing::redis_server::shared_urls;
use crate::testing::{SetClock, T0};

/// The budget: far more than a case spends, so every admission fits and
/// the balance never reaches zero (where a debt would hide a difference).
const BUDGET: u64 = 1_000_000;

/// The callers' keys (each its own slot on a Cluster).
const KEYS: [u64; 3] = [7, 8, 9];

#[derive(Debug, Clone)]
enum Step {
    /// A request of caller number `.0` reserving `.1` units is admitted.
    Admit(usize, u64),
    /// The answer to the nth request still open: it charges this share of
    /// its reservation, in thousandths (above 1,000: an overrun).
    Answer(usize, u64),
    /// What waits is sent to the store, which takes it...
    Deliver,
    /// ... or never gets it...
    Stall,
    /// ... or runs it and loses its answer.
    LoseAnswer,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..KEYS.len(), 1..=500u64).prop_map(|(caller, units)| Step::Admit(caller, units)),
        3 => (0..6usize, 0..=2_000u64).prop_map(|(n, share)| Step::Answer(n, share)),
        1 => Just(Step::Deliver),
        1 => Just(Step::Stall),
        1 => Just(Step::LoseAnswer),
    ]
}

fn limiters() -> impl Strategy<Value = Limiter> {
    let hour = Rate {
        count: BUDGET,
        period: std::time::Duration::from_secs(3600),
    };
    prop_oneof![
        Just(Limiter::FixedWindow(FixedWindow::new(hour))),
        Just(Limiter::TokenBucket(Gcra::new(hour, BUDGET))),
    ]
}

/// A store under test, and how what waits is sent to it.
enum Under {
    Memory(Store),
    Strict {
        store: Store,
        /// The settler's inbox and queue, driven by the test.
        outlet: tokio::sync::mpsc::UnboundedReceiver<super::redis::settlements::Settlement>,
        queue: super::redis::settlements::Queue,
    },
    Hybrid {
        store: Store,
        hybrid: Arc<HybridStore>,
        /// A strict store on the same keys, to read Redis with.
        reader: Store,
        clock: SetClock,
    },
}

/// Keys no other case uses.
fn fresh_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("settle-property{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

async fn strict(prefix: &str, urls: Vec<String>) -> RedisStore {
    let cluster = urls.len() > 1;
    let settings = RedisSettings {
        urls,
        access: Default::default(),
        cluster,
        timeout: std::time::Duration::from_secs(5),
        prefix: prefix.into(),
        instances: 1,
        settle_retry_for: std::time::Duration::from_secs(600),
    };
    let store = RedisStore::new(settings, 10_000)
        .expect("a Redis URL")
        .with_injected_time();
    store.start_without_settler();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !store.link().is_up() {
        assert!(
            std::time::Instant::now() < deadline,
            "no connection to Redis"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    store
}

impl Under {
    async fn memory() -> Under {
        Under::Memory(Store::Memory(MemoryStore::new(10_000)))
    }

    async fn strict(urls: Vec<String>) -> Under {
        let store = strict(&fresh_prefix(), urls).await;
        let settler = store.settler();
        let outlet = settler.take_outlet().expect("no task took it");
        let queue = settler.queue();
        Under::Strict {
            store: Store::Redis(store),
            outlet,
            queue,
        }
    }

    async fn hybrid() -> Under {
        let prefix = fresh_prefix();
        let hybrid = Arc::new(HybridStore::for_test(shared_urls(), &prefix, 1).await);
        Under::Hybrid {
            store: Store::Hybrid(Arc::clone(&hybrid)),
            hybrid,
            reader: Store::Redis(strict(&prefix, shared_urls()).await),
            clock: SetClock::at(T0),
        }
    }

    fn store(&self) -> &Store {
        match self {
            Under::Memory(store) | Under::Strict { store, .. } | Under::Hybrid { store, .. } => {
                store
            }
        }
    }

    /// Sends what waits, its first call meeting `fault`.
    async fn send(&mut self, fault: Option<Fault>) {
        match self {
            Under::Memory(_) => {}
            Under::Strict {
                store: Store::Redis(store),
                outlet,
                queue,
            } => {
                let settler = store.settler();
                settler.receive_all(outlet, queue, T0);
                if let (Some(fault), false) = (fault, queue.is_empty()) {
                    settler.faults.push(fault);
                }
                settler.round(queue, T0).await;
            }
            Under::Hybrid { hybrid, clock, .. } => {
                if let Some(fault) = fault {
                    hybrid.shared().settler().faults.push(fault);
                }
                hybrid.sync(clock).await;
                hybrid.shared().settler().faults.clear();
            }
            Under::Strict { .. } => unreachable!("a strict store is Redis"),
        }
    }

    /// Sends until nothing waits (no fault any more): how many rounds it
    /// took.
    async fn send_all(&mut self) -> usize {
        for round in 1..=8 {
            self.send(None).await;
            let waits = match self {
                Under::Memory(_) => false,
                Under::Strict { queue, outlet, .. } => !queue.is_empty() || !outlet.is_empty(),
                Under::Hybrid { hybrid, .. } => hybrid.has_unsent().await,
            };
            if !waits {
                return round;
            }
        }
        panic!("settlements still wait after eight rounds without a fault");
    }

    /// What is left of `key`'s budget where the store keeps it (Redis for
    /// a shared store), and, for hybrid mode, in the instance's own view.
    async fn balances(&self, table: &BucketTable, limiter: &Limiter, key: u64) -> Vec<u64> {
        match self {
            Under::Memory(store) | Under::Strict { store, .. } => {
                vec![remaining(store, table, limiter, key).await]
            }
            Under::Hybrid { store, reader, .. } => {
                let name = TableName {
                    rule: "rule".into(),
                    limit: "limit".into(),
                };
                let shared = reader.named_table(name, limiter);
                vec![
                    remaining(reader, &shared, limiter, key).await,
                    remaining(store, table, limiter, key).await,
                ]
            }
        }
    }
}

/// What `store` tells a request of cost 1 of `key` is left in `table`.
async fn remaining(store: &Store, table: &BucketTable, limiter: &Limiter, key: u64) -> u64 {
    let mut asks = Asks::default();
    asks.push_rule(key, false, None, [ask(table, limiter, key, 1)]);
    let mut decisions = Default::default();
    store.peek(&asks, T0, &mut decisions).await.expect("peeked");
    decisions[0].state().remaining
}

fn ask<'a>(table: &'a BucketTable, limiter: &'a Limiter, key: u64, cost: u64) -> super::Ask<'a> {
    super::Ask {
        table,
        key,
        limiter,
        cost,
        hold: None,
    }
}

/// Settles `receipt`'s reservation for an answer that cost `used`, as a
/// request's settlement does: drawn from the reservation first, the rest
/// charged, and what was not drawn given back.
fn answer(store: &Store, receipt: &mut Receipt, used: u64) {
    let drawn = used.min(receipt.units);
    receipt.units -= drawn;
    if used > drawn {
        let _ = store.settle(
            std::slice::from_mut(receipt),
            Settle::Charge(used - drawn),
            T0,
        );
    }
    receipt.lent(T0);
    let _ = store.settle(std::slice::from_mut(receipt), Settle::GiveBack, T0);
}

/// Runs `steps` on `under`, then answers what is still open and sends
/// until nothing waits: the balance must be the budget less the charges.
async fn run(mut under: Under, limiter: Limiter, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let name = TableName {
        rule: "rule".into(),
        limit: "limit".into(),
    };
    let table = under.store().named_table(name, &limiter);
    // Each request's receipt, reservation and caller.
    let mut open: Vec<(Receipt, u64, usize)> = Vec::new();
    let mut charged = [0; KEYS.len()];
    for step in steps {
        match step {
            Step::Admit(caller, reserve) => {
                let key = KEYS[caller];
                let mut asks = Asks::default();
                asks.push_rule(key, false, None, [ask(&table, &limiter, key, reserve)]);
                let mut admission = Admission::default();
                under
                    .store()
                    .admit(&asks, T0, &mut admission)
                    .await
                    .expect("decided");
                prop_assert!(admission.admitted(), "{reserve} more did not fit");
                open.push((admission.receipts.remove(0), reserve, caller));
            }
            Step::Answer(n, share) if n < open.len() => {
                let (mut receipt, reserved, caller) = open.remove(n);
                let used = reserved * share / 1_000;
                answer(under.store(), &mut receipt, used);
                charged[caller] += used;
            }
            Step::Answer(..) => {}
            Step::Deliver => under.send(None).await,
            Step::Stall => under.send(Some(Fault::Stall)).await,
            Step::LoseAnswer => under.send(Some(Fault::LoseAnswer)).await,
        }
    }
    for (mut receipt, reserved, caller) in open.drain(..) {
        answer(under.store(), &mut receipt, reserved / 2);
        charged[caller] += reserved / 2;
    }
    under.send_all().await;
    for (caller, key) in KEYS.into_iter().enumerate() {
        for balance in under.balances(&table, &limiter, key).await {
            prop_assert_eq!(balance, BUDGET - charged[caller], "caller {}", key);
        }
    }
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn in_memory_each_charge_is_settled_once(
        limiter in limiters(),
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        runtime().block_on(async { run(Under::memory().await, limiter, steps).await })?;
    }

    #[test]
    fn in_strict_mode_each_charge_is_settled_once_whatever_redis_does(
        limiter in limiters(),
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        runtime().block_on(async { run(Under::strict(shared_urls()).await, limiter, steps).await })?;
    }

    #[test]
    fn on_a_redis_cluster_each_charge_is_settled_once_whatever_redis_does(
        limiter in limiters(),
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        let under = || Under::strict(super::suite::cluster_urls());
        runtime().block_on(async { run(under().await, limiter, steps).await })?;
    }

    #[test]
    fn in_hybrid_mode_each_charge_is_settled_once_whatever_redis_does(
        limiter in limiters(),
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        runtime().block_on(async { run(Under::hybrid().await, limiter, steps).await })?;
    }
}
