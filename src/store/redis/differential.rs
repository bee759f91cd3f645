//! The Redis script against the memory store: random sequences of admits,
//! peeks, spends, deferred charges and refunds at increasing instants, run
//! on both, must get the same decisions (allowed, remaining, reset_after,
//! retry_after) from the token bucket, the fixed window and the sliding
//! window.
//!
//! The script keeps time in microseconds, so every instant, period and
//! emission interval here is a whole number of microseconds. Where the two
//! cannot agree, the cases stay away, on purpose:
//!
//! - Token bucket refunds: memory keeps the refund headroom in grains of
//!   2^k ns (about T / 256) where the script keeps exact microseconds; both
//!   round towards giving back less, so memory may give back up to a grain
//!   less than the script (seen: burst 1, T ≈ 1 s, a refund after a charge
//!   1 µs later: the script gives back T − 1 µs, memory 1.75 ms less).
//!   Neither is ever more generous than the exact bound, but they differ, so
//!   token bucket sequences have no refunds.
//! - Sliding window: the first instant a denied request fits can fall
//!   between two microseconds. Memory answers in nanoseconds, the script
//!   with the next microsecond, so memory's `retry_after` is compared
//!   rounded up to a microsecond. When the period is shorter than COUNT
//!   microseconds that instant can even lie in a window whose microseconds
//!   are all too early for it; sliding periods are therefore at least COUNT
//!   microseconds.
//! - Saturation: the script caps durations at 2^52 µs and memory at
//!   u64::MAX ns; debts here stay far below either.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::clock::Nanos;
use crate::limiter::{Decision, FixedWindow, Gcra, Limiter, Rate, SlidingWindow};
use crate::store::suite::redis_store;
use crate::store::{Admission, Ask, Asks, BucketTable, MemoryStore, Receipt, Settle, Store};

const MICRO: Nanos = 1_000;

/// A Unix instant in microseconds, well inside every period used here.
const START_US: u64 = 1_800_000_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    TokenBucket,
    Fixed,
    Sliding,
}

/// A number of units: a few, or a share (in thousandths) of COUNT.
#[derive(Debug, Clone, Copy)]
enum Amount {
    Units(u64),
    Share(u64),
}

impl Amount {
    fn of(self, count: u64) -> u64 {
        match self {
            Amount::Units(units) => units,
            Amount::Share(permille) => (u128::from(count) * u128::from(permille) / 1000) as u64,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire(Amount),
    Peek(Amount),
    /// The admin API's spend: an unconditional charge, then a report.
    Spend(Amount),
    /// A deferred charge on the receipt of an earlier admission.
    Charge(usize, Amount),
    /// Gives an earlier admission's units back.
    Refund(usize),
}

#[derive(Debug, Clone, Copy)]
struct Step {
    /// How far time moves first: thousandths of the period, plus
    /// microseconds.
    advance: u64,
    jitter_us: u64,
    op: Op,
}

#[derive(Debug, Clone)]
struct Case {
    count: u64,
    /// The window's period, or the token bucket's emission interval.
    interval_us: u64,
    /// The token bucket's capacity.
    burst: u64,
    /// Where in its period the first step falls, in microseconds.
    offset_us: u64,
    steps: Vec<Step>,
}

fn amount() -> impl Strategy<Value = Amount> {
    prop_oneof![
        3 => (0u64..=3).prop_map(Amount::Units),
        3 => (0u64..=1_500).prop_map(Amount::Share),
        1 => (1_000u64..=3_000).prop_map(Amount::Share),
    ]
}

fn op(kind: Kind) -> BoxedStrategy<Op> {
    let refunds = if kind == Kind::TokenBucket { 0 } else { 3 };
    prop_oneof![
        6 => amount().prop_map(Op::Acquire),
        2 => amount().prop_map(Op::Peek),
        1 => amount().prop_map(Op::Spend),
        2 => (any::<usize>(), amount()).prop_map(|(i, a)| Op::Charge(i, a)),
        refunds => any::<usize>().prop_map(Op::Refund),
    ]
    .boxed()
}

fn step(kind: Kind) -> impl Strategy<Value = Step> {
    let advance = prop_oneof![
        3 => Just(0u64),
        4 => 0u64..=300,
        3 => 0u64..=2_500,
    ];
    (advance, prop_oneof![Just(0u64), 0u64..=5], op(kind)).prop_map(|(advance, jitter_us, op)| {
        Step {
            advance,
            jitter_us,
            op,
        }
    })
}

fn case(kind: Kind) -> impl Strategy<Value = Case> {
    let count = prop_oneof![
        1 => Just(0u64),
        8 => 1u64..=10,
        4 => 1u64..=1_000,
        3 => 1u64..=u64::from(u32::MAX),
    ];
    let interval = prop_oneof![
        2 => 1u64..=1_000,
        3 => 1u64..=10_000_000,
        2 => 1u64..=30 * 86_400_000_000,
        1 => prop::sample::select(vec![1_000_000u64, 60_000_000, 3_600_000_000, 86_400_000_000]),
    ];
    let burst = prop_oneof![1u64..=4, 1u64..=u64::from(u32::MAX)];
    (
        count,
        interval,
        burst,
        any::<u64>(),
        prop::collection::vec(step(kind), 1..=40),
    )
        .prop_map(move |(count, interval_us, burst, offset, steps)| {
            let interval_us = match kind {
                // The emission interval: the tolerance and every debt here
                // stay far below 2^52 µs.
                Kind::TokenBucket => interval_us
                    .min(1_000_000)
                    .min((1 << 44) / count.max(1))
                    .max(1),
                // See the module doc.
                Kind::Sliding => interval_us.max(count),
                Kind::Fixed => interval_us,
            };
            let burst = burst.min(2 * count.max(1));
            Case {
                count,
                interval_us,
                burst,
                offset_us: offset % interval_us,
                steps,
            }
        })
}

impl Case {
    fn limiter(&self, kind: Kind) -> Limiter {
        let rate = |period_us: u64| Rate {
            count: self.count,
            period: std::time::Duration::from_micros(period_us),
        };
        match kind {
            Kind::TokenBucket => Limiter::TokenBucket(Gcra::new(
                rate(self.interval_us * self.count.max(1)),
                self.burst,
            )),
            Kind::Fixed => Limiter::FixedWindow(FixedWindow::new(rate(self.interval_us))),
            Kind::Sliding => Limiter::SlidingWindow(SlidingWindow::new(rate(self.interval_us))),
        }
    }

    /// The window's period, or the token bucket's whole period.
    fn period_us(&self, kind: Kind) -> u64 {
        match kind {
            Kind::TokenBucket => self.interval_us * self.count.max(1),
            _ => self.interval_us,
        }
    }
}

/// One store with its table for the case's limiter.
struct Side<'s> {
    store: &'s Store,
    table: BucketTable,
    receipts: Vec<Receipt>,
}

const KEY: u64 = 42;

impl Side<'_> {
    fn asks<'a>(&'a self, limiter: &'a Limiter, cost: u64) -> Asks<'a> {
        let mut asks = Asks::default();
        let ask = Ask {
            table: &self.table,
            key: KEY,
            limiter,
            cost,
            hold: None,
        };
        asks.push_rule(KEY, false, None, [ask]);
        asks
    }

    async fn acquire(&mut self, limiter: &Limiter, cost: u64, now: Nanos) -> (bool, Decision) {
        let mut admission = Admission::default();
        self.store
            .admit(&self.asks(limiter, cost), now, &mut admission)
            .await
            .expect("the store answers");
        let admitted = admission.admitted();
        self.receipts.extend(admission.receipts.drain(..));
        (admitted, admission.decisions[0])
    }

    async fn peek(&self, limiter: &Limiter, cost: u64, now: Nanos) -> Decision {
        let mut decisions = smallvec::SmallVec::new();
        self.store
            .peek(&self.asks(limiter, cost), now, &mut decisions)
            .await
            .expect("the store answers");
        decisions[0]
    }

    async fn spend(&self, limiter: &Limiter, units: u64, now: Nanos) -> Decision {
        let mut after = smallvec::SmallVec::new();
        self.store
            .spend(&self.asks(limiter, units), now, &mut after)
            .await
            .expect("the store answers");
        after[0]
    }

    async fn settle(&mut self, index: usize, how: Settle, now: Nanos) {
        let receipt = &mut self.receipts[index];
        self.store
            .settle(receipt, how, now)
            .await
            .expect("the store answers");
    }
}

/// What the script should answer where memory answered `decision`: the same,
/// with a sliding window's `retry_after` rounded up to a microsecond.
fn expected(kind: Kind, decision: Decision) -> Decision {
    match decision {
        Decision::Deny {
            state,
            retry_after: Some(retry),
        } if kind == Kind::Sliding => Decision::Deny {
            state,
            retry_after: Some(retry.div_ceil(MICRO) * MICRO),
        },
        other => other,
    }
}

async fn check(
    memory: &Store,
    redis: &Store,
    kind: Kind,
    case: &Case,
) -> Result<(), TestCaseError> {
    let limiter = case.limiter(kind);
    let period_us = case.period_us(kind);
    let mut sides = [memory, redis].map(|store| Side {
        store,
        table: store.table(&limiter),
        receipts: Vec::new(),
    });
    let mut now_us = START_US - START_US % period_us + case.offset_us;
    for (index, step) in case.steps.iter().enumerate() {
        let advance = u128::from(period_us) * u128::from(step.advance) / 1000;
        now_us += advance as u64 + step.jitter_us;
        let now = now_us * MICRO;
        let [m, r] = &mut sides;
        let at = format!("step {index} ({step:?}) at {now_us} µs");
        match step.op {
            Op::Acquire(amount) => {
                let cost = amount.of(case.count);
                let (m_ok, m_decision) = m.acquire(&limiter, cost, now).await;
                let (r_ok, r_decision) = r.acquire(&limiter, cost, now).await;
                prop_assert_eq!(r_ok, m_ok, "{}", at);
                prop_assert_eq!(r_decision, expected(kind, m_decision), "{}", at);
                prop_assert_eq!(r.receipts.len(), m.receipts.len(), "{}", at);
            }
            Op::Peek(amount) => {
                let cost = amount.of(case.count);
                let m_decision = m.peek(&limiter, cost, now).await;
                let r_decision = r.peek(&limiter, cost, now).await;
                prop_assert_eq!(r_decision, expected(kind, m_decision), "{}", at);
            }
            Op::Spend(amount) => {
                let units = amount.of(case.count);
                let m_decision = m.spend(&limiter, units, now).await;
                let r_decision = r.spend(&limiter, units, now).await;
                prop_assert_eq!(r_decision, expected(kind, m_decision), "{}", at);
            }
            Op::Charge(which, amount) => {
                if m.receipts.is_empty() {
                    continue;
                }
                let which = which % m.receipts.len();
                let units = amount.of(case.count);
                m.settle(which, Settle::Charge(units), now).await;
                r.settle(which, Settle::Charge(units), now).await;
            }
            Op::Refund(which) => {
                if m.receipts.is_empty() {
                    continue;
                }
                let which = which % m.receipts.len();
                m.settle(which, Settle::GiveBack, now).await;
                r.settle(which, Settle::GiveBack, now).await;
            }
        }
        // Whatever the step was, both buckets read the same afterwards.
        for cost in [1, case.count.max(1)] {
            let m_decision = m.peek(&limiter, cost, now).await;
            let r_decision = r.peek(&limiter, cost, now).await;
            prop_assert_eq!(
                r_decision,
                expected(kind, m_decision),
                "{}: then a peek of {}",
                at,
                cost
            );
        }
    }
    Ok(())
}

fn run(kind: Kind) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let redis = runtime.block_on(redis_store());
    let memory = Store::Memory(MemoryStore::new(100_000));
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let outcome = runner.run(&case(kind), |case| {
        runtime.block_on(check(&memory, &redis, kind, &case))
    });
    if let Err(error) = outcome {
        panic!("{kind:?}: the script and memory disagree: {error}");
    }
}

#[test]
fn token_buckets_decide_as_in_memory() {
    run(Kind::TokenBucket);
}

#[test]
fn fixed_windows_decide_as_in_memory() {
    run(Kind::Fixed);
}

#[test]
fn sliding_windows_decide_as_in_memory() {
    run(Kind::Sliding);
}
