//! The Redis script against the memory store: random sequences of admits,
//! delay mode's reservations, peeks, spends, deferred charges, refunds and
//! cancellations at increasing instants, run on both, must get the same
//! decisions (allowed or held, remaining, reset_after, retry_after, wait)
//! from the token bucket, the fixed window, the sliding window (no delay
//! mode), the leaky bucket, the sliding log, and the fixed window on a
//! calendar (Europe/Berlin's days, across its 25-hour 2026-10-25).
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
//!   token bucket sequences have no refunds: a give back there is only ever
//!   a reservation's, while its instant is ahead or at it (a cancel, or a
//!   rollback at that instant, which move the TAT exactly in both; the
//!   headroom they leave differs as above, and only a later refund reads
//!   it).
//! - Leaky bucket: a request of cost 0 occupies the outlet for 1 ns in
//!   memory and 1 µs in the script (neither has a shorter unit), so leaky
//!   bucket costs are at least 1.
//! - Fixed window held, then refused by a later limit of the request:
//!   memory reserves and cancels, which forgets the padding below the
//!   newest earlier reservation (a later cancel of that one gives back less
//!   than it could); the script never writes the refused request's state,
//!   so that cancel is exact there. Neither is more generous than the
//!   limit, but they differ, so in the several-limit cases a fixed window
//!   is only ever the last limit.
//! - Sliding log: memory keeps one stamp per unit, the script runs of equal
//!   stamps; COUNT stays at most 1,000 here so that memory's logs stay
//!   small.
//! - Sliding window: the first instant a denied request fits can fall
//!   between two microseconds. Memory answers in nanoseconds, the script
//!   with the next microsecond, so memory's `retry_after` is compared
//!   rounded up to a microsecond. When the period is shorter than COUNT
//!   microseconds that instant can even lie in a window whose microseconds
//!   are all too early for it; sliding periods are therefore at least COUNT
//!   microseconds.
//! - Saturation: the script caps durations at 2^52 µs and memory at
//!   u64::MAX ns; debts here stay far below either.
//! - Calendar windows: the script is told the windows around the instance's
//!   clock (the one before, the current one and the next) and estimates the
//!   ones beyond towards later (the header of `sluice.lua`), where memory
//!   knows every window. So a reset or retry beyond the next window may be
//!   later in the script (never sooner), holds wait at most a day, and a
//!   refund of units taken before the previous window is left out (the
//!   script counts more windows passed, giving back less).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::clock::Nanos;
use crate::limiter::calendar::{Calendar, Unit};
use crate::limiter::{
    BucketState, Decision, FixedWindow, Gcra, HoldLimits, LeakyBucket, Limiter, Rate, SlidingLog,
    SlidingWindow,
};
use crate::store::suite::redis_store;
use crate::store::{
    Admission, Ask, Asks, BucketTable, Decisions, MemoryStore, Receipt, Settle, Store, Taken,
};

const MICRO: Nanos = 1_000;

/// A Unix instant in microseconds, well inside every period used here.
const START_US: u64 = 1_800_000_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    TokenBucket,
    Fixed,
    Sliding,
    Leaky,
    Log,
    /// A fixed window on Europe/Berlin's days.
    Calendar,
}

/// Where calendar cases start: 2026-10-23T00:00:00Z, two days before
/// Berlin's 25-hour day.
const CALENDAR_START_US: u64 = 1_792_713_600_000_000;

/// A day, the calendar window's nominal period.
const DAY_US: u64 = 86_400_000_000;

impl Kind {
    /// Whether it has a delay mode.
    fn holds(self) -> bool {
        self != Kind::Sliding
    }

    /// Whether it keeps its time as an emission interval (the case's
    /// interval), not a period.
    fn emits(self) -> bool {
        matches!(self, Kind::TokenBucket | Kind::Leaky)
    }
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

/// Delay mode's bounds: the longest wait in thousandths of the period, and
/// the units that may wait.
#[derive(Debug, Clone, Copy)]
struct Hold {
    max_wait: u64,
    max_queued: Amount,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire(Amount),
    /// Delay mode: an admission that may be held.
    Reserve(Amount, Hold),
    Peek(Amount),
    /// The admin API's spend: an unconditional charge, then a report.
    Spend(Amount),
    /// A deferred charge on the receipt of an earlier admission (counted
    /// back from the newest).
    Charge(usize, Amount),
    /// Gives an earlier admission's units back (a held one's: a cancel),
    /// counted back from the newest.
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
    /// Time moves this many times slower than the steps say (so that held
    /// requests are still waiting when later steps come).
    slowdown: u64,
    steps: Vec<Step>,
}

fn amount() -> impl Strategy<Value = Amount> {
    prop_oneof![
        3 => (0u64..=3).prop_map(Amount::Units),
        3 => (0u64..=1_500).prop_map(Amount::Share),
        1 => (1_000u64..=3_000).prop_map(Amount::Share),
    ]
}

fn hold() -> impl Strategy<Value = Hold> {
    let max_wait = prop_oneof![Just(0u64), 0u64..=1_500, 0u64..=10_000];
    let max_queued = prop_oneof![
        2 => (1u64..=10).prop_map(Amount::Units),
        1 => (1u64..=3_000).prop_map(Amount::Share),
    ];
    (max_wait, max_queued).prop_map(|(max_wait, max_queued)| Hold {
        max_wait,
        max_queued,
    })
}

/// A receipt counted back from the newest: mostly one of the last few
/// (a reservation is cancelled while its instant is ahead).
fn receipt() -> impl Strategy<Value = usize> {
    prop_oneof![3 => 0usize..3, 1 => any::<usize>()]
}

fn op(kind: Kind) -> BoxedStrategy<Op> {
    // Token bucket give backs: only cancels (see the module doc).
    let refunds = if kind == Kind::TokenBucket { 2 } else { 3 };
    let reserves = if kind.holds() { 6 } else { 0 };
    prop_oneof![
        6 => amount().prop_map(Op::Acquire),
        reserves => (amount(), hold()).prop_map(|(a, h)| Op::Reserve(a, h)),
        2 => amount().prop_map(Op::Peek),
        1 => amount().prop_map(Op::Spend),
        2 => (receipt(), amount()).prop_map(|(i, a)| Op::Charge(i, a)),
        refunds => receipt().prop_map(Op::Refund),
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
        prop_oneof![Just(1u64), Just(20), Just(500)],
        prop::collection::vec(step(kind), 1..=40),
    )
        .prop_map(
            move |(count, interval_us, burst, offset, slowdown, steps)| {
                let count = match kind {
                    // See the module doc.
                    Kind::Log => count.min(1_000),
                    _ => count,
                };
                let interval_us = match kind {
                    // The emission interval: the tolerance and every debt here
                    // stay far below 2^52 µs.
                    Kind::TokenBucket | Kind::Leaky => interval_us
                        .min(1_000_000)
                        .min((1 << 44) / count.max(1))
                        .max(1),
                    // See the module doc.
                    Kind::Sliding => interval_us.max(count),
                    Kind::Fixed | Kind::Log => interval_us,
                    Kind::Calendar => DAY_US,
                };
                let burst = burst.min(2 * count.max(1));
                Case {
                    count,
                    interval_us,
                    burst,
                    offset_us: offset % interval_us,
                    slowdown,
                    steps,
                }
            },
        )
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
            Kind::Leaky => Limiter::LeakyBucket(LeakyBucket::new(
                rate(self.interval_us * self.count.max(1)),
                self.burst,
            )),
            Kind::Log => Limiter::SlidingLog(SlidingLog::new(rate(self.interval_us))),
            Kind::Calendar => Limiter::FixedWindow(FixedWindow::on_calendar(
                rate(self.interval_us),
                Calendar::new("Europe/Berlin", Unit::Day).expect("a zone"),
            )),
        }
    }

    /// The window's or log's period, or a bucket's whole period.
    fn period_us(&self, kind: Kind) -> u64 {
        if kind.emits() {
            self.interval_us * self.count.max(1)
        } else {
            self.interval_us
        }
    }

    /// The cost of `amount` (see the module doc for the leaky bucket's).
    fn cost(&self, kind: Kind, amount: Amount) -> u64 {
        let cost = amount.of(self.count);
        if kind == Kind::Leaky {
            cost.max(1)
        } else {
            cost
        }
    }

    /// Delay mode's bounds in nanoseconds and units.
    fn hold(&self, kind: Kind, hold: Hold) -> HoldLimits {
        let period = u128::from(self.period_us(kind));
        let mut max_wait_us = (period * u128::from(hold.max_wait) / 1000) as u64;
        if kind == Kind::Calendar {
            // See the module doc.
            max_wait_us = max_wait_us.min(DAY_US);
        }
        HoldLimits {
            max_wait: max_wait_us * MICRO,
            // At least 1: the script reads 0 as "refuses instead".
            max_queued: hold.max_queued.of(self.count).max(1),
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
        self.holding(limiter, cost, None)
    }

    fn holding<'a>(
        &'a self,
        limiter: &'a Limiter,
        cost: u64,
        hold: Option<HoldLimits>,
    ) -> Asks<'a> {
        let mut asks = Asks::default();
        let ask = Ask {
            table: &self.table,
            key: KEY,
            limiter,
            cost,
            hold,
        };
        asks.push_rule(KEY, false, None, [ask]);
        asks
    }

    async fn acquire(
        &mut self,
        limiter: &Limiter,
        cost: u64,
        hold: Option<HoldLimits>,
        now: Nanos,
    ) -> (bool, Decision) {
        let mut admission = Admission::default();
        self.store
            .admit(&self.holding(limiter, cost, hold), now, &mut admission)
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
        let receipt = &mut self.receipts[index..=index];
        self.store.settle(receipt, how, now).answered().await;
    }
}

/// A calendar window's answer where memory's reset, retry or wait lies
/// beyond the windows the script was told: the script's, when never sooner
/// than memory's (see the module doc); otherwise memory's own.
fn within_horizon(limiter: &Limiter, now: Nanos, memory: Decision, script: Decision) -> Decision {
    let Limiter::FixedWindow(window) = limiter else {
        return memory;
    };
    let Some(calendar) = window.calendar() else {
        return memory;
    };
    let horizon = calendar.frame(now).next_end.saturating_sub(now);
    let later = |m: Nanos, r: Nanos| if m > horizon && r >= m { r } else { m };
    let state = |m: BucketState, r: BucketState| BucketState {
        reset_after: later(m.reset_after, r.reset_after),
        ..m
    };
    match (memory, script) {
        (Decision::Allow(m), Decision::Allow(r)) => Decision::Allow(state(m, r)),
        (Decision::Hold { state: m, wait }, Decision::Hold { state: r, .. }) => Decision::Hold {
            state: state(m, r),
            wait,
        },
        (
            Decision::Deny {
                state: m,
                retry_after: m_retry,
            },
            Decision::Deny {
                state: r,
                retry_after: r_retry,
            },
        ) => Decision::Deny {
            state: state(m, r),
            retry_after: match (m_retry, r_retry) {
                (Some(m), Some(r)) => Some(later(m, r)),
                (m, _) => m,
            },
        },
        _ => memory,
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
    let mut now_us = match kind {
        Kind::Calendar => CALENDAR_START_US + case.offset_us,
        _ => START_US - START_US % period_us + case.offset_us,
    };
    for (index, step) in case.steps.iter().enumerate() {
        let advance =
            u128::from(period_us) * u128::from(step.advance) / (1000 * u128::from(case.slowdown));
        now_us += advance as u64 + step.jitter_us;
        let now = now_us * MICRO;
        let at = format!("step {index} ({step:?}) at {now_us} µs");
        let ruling = Ruling {
            kind,
            case,
            limiter: &limiter,
            now,
            at: &at,
        };
        let [m, r] = &mut sides;
        ruling.step(m, r, step.op).await?;
        // Whatever the step was, both buckets read the same afterwards.
        for cost in [1, case.count.max(1)] {
            let m_decision = m.peek(&limiter, cost, now).await;
            let r_decision = r.peek(&limiter, cost, now).await;
            let expected = ruling.expected(m_decision, r_decision);
            prop_assert_eq!(r_decision, expected, "{}: then a peek of {}", at, cost);
        }
    }
    Ok(())
}

/// One step of a case, taken on both stores at `now` (`at` says which).
struct Ruling<'a> {
    kind: Kind,
    case: &'a Case,
    limiter: &'a Limiter,
    now: Nanos,
    at: &'a str,
}

impl Ruling<'_> {
    /// What the script should answer where memory answered `memory`.
    fn expected(&self, memory: Decision, script: Decision) -> Decision {
        match self.kind {
            Kind::Calendar => within_horizon(self.limiter, self.now, memory, script),
            kind => expected(kind, memory),
        }
    }

    /// Takes `op` on memory (`m`) and Redis (`r`); they must agree.
    async fn step(&self, m: &mut Side<'_>, r: &mut Side<'_>, op: Op) -> Result<(), TestCaseError> {
        let Ruling {
            kind,
            case,
            limiter,
            now,
            at,
        } = *self;
        match op {
            Op::Acquire(amount) => self.acquire(m, r, amount, None).await?,
            Op::Reserve(amount, hold) => {
                let hold = Some(case.hold(kind, hold));
                self.acquire(m, r, amount, hold).await?
            }
            Op::Peek(amount) => {
                let cost = case.cost(kind, amount);
                let m_decision = m.peek(limiter, cost, now).await;
                let r_decision = r.peek(limiter, cost, now).await;
                prop_assert_eq!(r_decision, self.expected(m_decision, r_decision), "{}", at);
            }
            Op::Spend(amount) => {
                let units = amount.of(case.count);
                let m_decision = m.spend(limiter, units, now).await;
                let r_decision = r.spend(limiter, units, now).await;
                prop_assert_eq!(r_decision, self.expected(m_decision, r_decision), "{}", at);
            }
            Op::Charge(which, amount) => {
                if let Some(which) = latest(&m.receipts, which) {
                    let units = amount.of(case.count);
                    m.settle(which, Settle::Charge(units), now).await;
                    r.settle(which, Settle::Charge(units), now).await;
                }
            }
            Op::Refund(which) => {
                let Some(which) = latest(&m.receipts, which) else {
                    return Ok(());
                };
                if self.refundable(&m.receipts[which]) {
                    m.settle(which, Settle::GiveBack, now).await;
                    r.settle(which, Settle::GiveBack, now).await;
                }
            }
        }
        Ok(())
    }

    /// Takes `amount` on both sides, holding as `hold` says.
    async fn acquire(
        &self,
        m: &mut Side<'_>,
        r: &mut Side<'_>,
        amount: Amount,
        hold: Option<HoldLimits>,
    ) -> Result<(), TestCaseError> {
        let (limiter, now, at) = (self.limiter, self.now, self.at);
        let cost = self.case.cost(self.kind, amount);
        let (m_ok, m_decision) = m.acquire(limiter, cost, hold, now).await;
        let (r_ok, r_decision) = r.acquire(limiter, cost, hold, now).await;
        prop_assert_eq!(r_ok, m_ok, "{}", at);
        prop_assert_eq!(r_decision, self.expected(m_decision, r_decision), "{}", at);
        prop_assert_eq!(r.receipts.len(), m.receipts.len(), "{}", at);
        if let (Some(m_receipt), Some(r_receipt)) = (m.receipts.last(), r.receipts.last()) {
            prop_assert_eq!(r_receipt.taken, m_receipt.taken, "{}", at);
        }
        Ok(())
    }

    /// Whether giving `receipt` back is compared (see the module doc for
    /// the two that are not).
    fn refundable(&self, receipt: &Receipt) -> bool {
        match self.kind {
            Kind::TokenBucket => matches!(receipt.taken, Taken::Reserved { at } if self.now <= at),
            Kind::Calendar => !before_previous_window(self.limiter, receipt, self.now),
            _ => true,
        }
    }
}

/// The receipt `which` counts back from the latest of `receipts`, if any.
fn latest(receipts: &[Receipt], which: usize) -> Option<usize> {
    (!receipts.is_empty()).then(|| receipts.len() - 1 - which % receipts.len())
}

/// Whether `receipt`'s units were taken before the window before the one
/// `now` is in.
fn before_previous_window(limiter: &Limiter, receipt: &Receipt, now: Nanos) -> bool {
    let Limiter::FixedWindow(window) = limiter else {
        return false;
    };
    window
        .calendar()
        .is_some_and(|calendar| receipt.at < calendar.frame(now).previous_start)
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

/// Two limits of one rule, both in delay mode when the step holds: a
/// request passes at the latest of their instants, the limits that would
/// let it pass earlier count it there where they can (token and leaky
/// buckets), and a refusal by one gives back what the other took.
async fn check_pair(
    memory: &Store,
    redis: &Store,
    kinds: [Kind; 2],
    cases: &[Case; 2],
) -> Result<(), TestCaseError> {
    let limiters = [cases[0].limiter(kinds[0]), cases[1].limiter(kinds[1])];
    let mut sides = [memory, redis].map(|store| {
        let tables = [store.table(&limiters[0]), store.table(&limiters[1])];
        (store, tables, Vec::<Receipt>::new())
    });
    let period_us = cases[0].period_us(kinds[0]);
    let mut now_us = START_US - START_US % period_us + cases[0].offset_us;
    for (index, step) in cases[0].steps.iter().enumerate() {
        let advance = u128::from(period_us) * u128::from(step.advance)
            / (1000 * u128::from(cases[0].slowdown));
        now_us += advance as u64 + step.jitter_us;
        let now = now_us * MICRO;
        let at = format!("step {index} ({step:?}) at {now_us} µs");
        let (amount, hold, write) = match step.op {
            Op::Acquire(amount) => (amount, None, true),
            Op::Reserve(amount, hold) => (amount, Some(hold), true),
            Op::Peek(amount) => (amount, None, false),
            Op::Refund(which) => {
                refund_pair(&mut sides, kinds, which, now).await;
                continue;
            }
            Op::Spend(_) | Op::Charge(..) => continue,
        };
        let mut answers = Vec::new();
        for (store, tables, receipts) in &mut sides {
            let limits = [0, 1].map(|limit| Ask {
                table: &tables[limit],
                key: KEY,
                limiter: &limiters[limit],
                cost: cases[limit].cost(kinds[limit], amount),
                hold: hold.map(|hold| cases[limit].hold(kinds[limit], hold)),
            });
            answers.push(ask_pair(store, limits, write, now, receipts).await);
        }
        let expect = |decisions: &[Decision]| -> Vec<Decision> {
            decisions
                .iter()
                .zip(kinds)
                .map(|(decision, kind)| expected(kind, *decision))
                .collect()
        };
        prop_assert_eq!(answers[1].0, answers[0].0, "{}", at);
        prop_assert_eq!(answers[1].1.to_vec(), expect(&answers[0].1), "{}", at);
        prop_assert_eq!(&answers[1].2, &answers[0].2, "{}", at);
    }
    Ok(())
}

/// One store's answer to both limits (`write`: an admission, its
/// receipts kept in `receipts`; else a peek): admitted, the decisions,
/// what each receipt took.
async fn ask_pair(
    store: &Store,
    limits: [Ask<'_>; 2],
    write: bool,
    now: Nanos,
    receipts: &mut Vec<Receipt>,
) -> (bool, Decisions, Vec<Taken>) {
    let mut asks = Asks::default();
    asks.push_rule(KEY, false, None, limits);
    let mut admission = Admission::default();
    let answered = match write {
        true => store.admit(&asks, now, &mut admission).await,
        false => store.peek(&asks, now, &mut admission.decisions).await,
    };
    answered.expect("the store answers");
    let taken: Vec<Taken> = admission.receipts.iter().map(|r| r.taken).collect();
    receipts.extend(admission.receipts.drain(..));
    (admission.admitted(), admission.decisions, taken)
}

/// Gives back, on both stores, the receipt `which` counts back from the
/// latest (a token bucket's only while its reservation is ahead: see the
/// module doc).
async fn refund_pair(
    sides: &mut [(&Store, [BucketTable; 2], Vec<Receipt>); 2],
    kinds: [Kind; 2],
    which: usize,
    now: Nanos,
) {
    let Some(which) = latest(&sides[0].2, which) else {
        return;
    };
    let reserved_ahead = matches!(sides[0].2[which].taken, Taken::Reserved { at } if now <= at);
    if kinds[which % 2] == Kind::TokenBucket && !reserved_ahead {
        return;
    }
    for (store, _, receipts) in sides {
        let receipt = &mut receipts[which..=which];
        store
            .settle(receipt, Settle::GiveBack, now)
            .answered()
            .await;
    }
}

#[test]
fn requests_held_by_several_limits_pass_as_in_memory() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let redis = runtime.block_on(redis_store());
    let memory = Store::Memory(MemoryStore::new(100_000));
    // A fixed window only last: see the module doc.
    let firsts = [Kind::TokenBucket, Kind::Leaky, Kind::Log];
    let seconds = [Kind::TokenBucket, Kind::Fixed, Kind::Leaky, Kind::Log];
    for first in firsts {
        for second in seconds {
            let mut runner = TestRunner::new(Config {
                cases: 16,
                failure_persistence: None,
                ..Config::default()
            });
            let outcome = runner.run(&(case(first), case(second)), |(a, b)| {
                runtime.block_on(check_pair(&memory, &redis, [first, second], &[a, b]))
            });
            if let Err(error) = outcome {
                panic!("{first:?} and {second:?}: the script and memory disagree: {error}");
            }
        }
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

#[test]
fn leaky_buckets_decide_as_in_memory() {
    run(Kind::Leaky);
}

#[test]
fn sliding_logs_decide_as_in_memory() {
    run(Kind::Log);
}

#[test]
fn calendar_windows_decide_as_in_memory() {
    run(Kind::Calendar);
}
