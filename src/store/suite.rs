//! The store contract, written once and run against every backend
//! ([`every_check!`] instantiates it per backend, with one line each). Each check talks to the store only through [`Store`]'s calls,
//! at exact instants.

use std::sync::Mutex;

use super::bans::{BanPolicy, BanTable};
use super::{
    Admission, Ask, Asks, BucketTable, MemoryStore, Outcome, Settle, Store, StoreError, Taken,
};
use crate::clock::Nanos;
use crate::limiter::{
    Concurrency, Decision, FixedWindow, Gcra, HoldLimits, Limiter, SlidingWindow,
};
use crate::testing::redis_server::shared_urls;
use crate::testing::{rate, SEC};

/// A memory store whose calls fail while told to: the `on_error` paths of
/// the proxy are tested with it.
#[derive(Debug)]
pub struct FailingStore {
    pub local: MemoryStore,
    /// What every call fails with, while set.
    failure: Mutex<Option<StoreError>>,
}

impl FailingStore {
    pub fn new(max_keys: usize) -> FailingStore {
        FailingStore {
            local: MemoryStore::new(max_keys),
            failure: Mutex::new(None),
        }
    }

    /// Makes every call fail as an outage would (`true`) or succeed
    /// (`false`) from now on.
    pub fn set_failing(&self, failing: bool) {
        let outage = StoreError::Unavailable("the store is failing on purpose".into());
        self.fail_with(failing.then_some(outage));
    }

    /// Makes every call fail with `failure` (`None`: succeed) from now on.
    pub fn fail_with(&self, failure: Option<StoreError>) {
        *self.failure.lock().expect("not poisoned") = failure;
    }

    pub fn fail_if_asked(&self) -> Result<(), StoreError> {
        match &*self.failure.lock().expect("not poisoned") {
            Some(failure) => Err(failure.clone()),
            None => Ok(()),
        }
    }
}

pub(crate) use crate::testing::T0;

/// One limiter and its table, as a policy snapshot would hold them.
pub(crate) struct Limit {
    limiter: Limiter,
    table: BucketTable,
}

impl Limit {
    pub(crate) fn new(store: &Store, limiter: Limiter) -> Limit {
        Limit {
            table: store.table(&limiter),
            limiter,
        }
    }

    pub(crate) fn ask(&self, key: u64, cost: u64) -> Ask<'_> {
        Ask {
            table: &self.table,
            key,
            limiter: &self.limiter,
            cost,
            hold: None,
        }
    }
}

pub(crate) fn token_bucket(count: u64, secs: u64) -> Limiter {
    Limiter::TokenBucket(Gcra::new(rate(count, secs), count))
}

pub(crate) fn concurrency(max_in_flight: u64) -> Limiter {
    Limiter::Concurrency(Concurrency::new(max_in_flight))
}

/// One enforced rule per limit, in order.
fn one_rule_each<'p>(limits: impl IntoIterator<Item = Ask<'p>>) -> Asks<'p> {
    let mut asks = Asks::default();
    for ask in limits {
        asks.push_rule(ask.key, false, None, [ask]);
    }
    asks
}

/// The store's answer to `asks` at `now` (which must not fail).
async fn answer(store: &Store, asks: &Asks<'_>, now: Nanos) -> Admission {
    let mut answer = Admission::default();
    store
        .admit(asks, now, &mut answer)
        .await
        .expect("the store answers");
    answer
}

/// A cost above every capacity in this suite: asking it denies and takes
/// nothing, so it reads a bucket as it is.
const PEEK: u64 = 1_000_000;

/// What the limit has left for `key` at `now`.
async fn remaining(store: &Store, limit: &Limit, key: u64, now: Nanos) -> u64 {
    let asks = one_rule_each([limit.ask(key, PEEK)]);
    let admission = answer(store, &asks, now).await;
    assert!(!admission.admitted());
    admission.decisions[0].state().remaining
}

pub async fn rates_permits_and_shadow_asks_are_one_call(store: Store) {
    let rates = Limit::new(&store, token_bucket(10, 1));
    let permits = Limit::new(&store, concurrency(2));
    let shadow = Limit::new(&store, token_bucket(1, 60));
    let mut asks = Asks::default();
    asks.push_rule(7, false, None, [rates.ask(7, 3)]);
    asks.push_rule(7, false, None, [permits.ask(7, 1)]);
    asks.push_rule(7, true, None, [shadow.ask(7, 1)]);

    let first = answer(&store, &asks, T0).await;
    assert_eq!(first.outcome, Outcome::Admitted);
    assert_eq!(first.decisions[0].state().remaining, 7);
    assert_eq!(first.decisions[1].state().remaining, 1);
    assert!(first.shadow_limited.is_empty());
    // A permit is a lease in a shared store.
    let taken: Vec<_> = first
        .receipts
        .iter()
        .map(|r| (r.rule, r.taken.is_permit(), r.units))
        .collect();
    assert_eq!(taken, [(0, false, 3), (1, true, 1), (2, false, 1)]);
    assert!(first
        .receipts
        .iter()
        .all(|r| r.taken.is_permit() || r.taken == Taken::Bucket));
    // The shadow rule's one unit is spent: it would limit the next request,
    // which is admitted all the same.
    let second = answer(&store, &asks, T0).await;
    assert_eq!(second.outcome, Outcome::Admitted);
    assert_eq!(second.shadow_limited.as_slice(), [2]);
    // Two permits in flight: the third request is refused and takes nothing.
    let third = answer(&store, &asks, T0).await;
    assert_eq!(third.outcome, Outcome::Limited);
    assert!(third.receipts.is_empty());
    assert_eq!(remaining(&store, &rates, 7, T0).await, 4);
}

pub async fn a_rate_that_refuses_leaves_the_other_rates_untouched(store: Store) {
    let wide = Limit::new(&store, token_bucket(100, 1));
    let narrow = Limit::new(&store, token_bucket(1, 60));
    // A later rate refuses: the earlier rate gives its units back.
    let asks = one_rule_each([wide.ask(1, 5), narrow.ask(1, 2)]);
    let admission = answer(&store, &asks, T0).await;
    assert_eq!(admission.outcome, Outcome::Limited);
    assert!(matches!(admission.decisions[1], Decision::Deny { .. }));
    assert_eq!(admission.decisions[0].state().remaining, 100);
    assert_eq!(remaining(&store, &wide, 1, T0).await, 100);
}

pub async fn a_refusal_takes_nothing_from_any_limit(store: Store) {
    let wide = Limit::new(&store, token_bucket(100, 1));
    let narrow = Limit::new(&store, token_bucket(1, 60));
    let permits = Limit::new(&store, concurrency(1));
    // The permit is taken by another request: rates come back, the permit
    // is not taken.
    let holder = answer(&store, &one_rule_each([permits.ask(1, 1)]), T0).await;
    assert!(holder.admitted());
    let asks = one_rule_each([wide.ask(1, 5), permits.ask(1, 1)]);
    let admission = answer(&store, &asks, T0).await;
    assert_eq!(admission.outcome, Outcome::Limited);
    assert!(admission.receipts.is_empty());
    assert_eq!(remaining(&store, &wide, 1, T0).await, 100);
    // A refused rate never occupies a permit.
    let mut holder = holder;
    store
        .settle(&mut holder.receipts[..1], Settle::Keep, T0)
        .answered()
        .await;
    let asks = one_rule_each([narrow.ask(2, 2), permits.ask(2, 1)]);
    assert_eq!(answer(&store, &asks, T0).await.outcome, Outcome::Limited);
    let asks = one_rule_each([permits.ask(2, 1)]);
    assert!(answer(&store, &asks, T0).await.admitted());
}

pub async fn all_or_nothing_in_every_combination(store: Store) {
    // Two rates, a permit and a shadow rate; each either has room or not.
    for case in 0..16u32 {
        let room = |bit: u32| case & (1 << bit) != 0;
        let first = Limit::new(&store, token_bucket(3, 60));
        let second = Limit::new(&store, token_bucket(3, 60));
        let permits = Limit::new(&store, concurrency(1));
        let shadow = Limit::new(&store, token_bucket(1, 60));
        let key = 11;
        // Spend what must be spent, through the store itself.
        if !room(0) {
            assert!(answer(&store, &one_rule_each([first.ask(key, 3)]), T0)
                .await
                .admitted());
        }
        if !room(1) {
            assert!(answer(&store, &one_rule_each([second.ask(key, 3)]), T0)
                .await
                .admitted());
        }
        let _holder = if room(2) {
            None
        } else {
            Some(answer(&store, &one_rule_each([permits.ask(key, 1)]), T0).await)
        };
        if !room(3) {
            assert!(answer(&store, &one_rule_each([shadow.ask(key, 1)]), T0)
                .await
                .admitted());
        }
        let mut asks = Asks::default();
        asks.push_rule(key, false, None, [first.ask(key, 1), second.ask(key, 1)]);
        asks.push_rule(key, false, None, [permits.ask(key, 1)]);
        asks.push_rule(key, true, None, [shadow.ask(key, 1)]);
        let before = (
            remaining(&store, &first, key, T0).await,
            remaining(&store, &second, key, T0).await,
        );
        let admission = answer(&store, &asks, T0).await;
        let all = room(0) && room(1) && room(2);
        assert_eq!(admission.admitted(), all, "case {case:04b}");
        let after = (
            remaining(&store, &first, key, T0).await,
            remaining(&store, &second, key, T0).await,
        );
        if all {
            assert_eq!(after, (before.0 - 1, before.1 - 1), "case {case:04b}");
            assert_eq!(
                admission.receipts.len(),
                3 + usize::from(room(3)),
                "case {case:04b}"
            );
            assert_eq!(
                admission.shadow_limited.is_empty(),
                room(3),
                "case {case:04b}"
            );
        } else {
            assert_eq!(after, before, "case {case:04b}: a refusal took something");
            assert!(admission.receipts.is_empty(), "case {case:04b}");
            assert!(admission.shadow_limited.is_empty(), "case {case:04b}");
            // The permit was not taken: with room, it is still free.
            if room(2) {
                let permit = answer(&store, &one_rule_each([permits.ask(key, 1)]), T0).await;
                assert!(permit.admitted(), "case {case:04b}: the permit leaked");
            }
        }
    }
}

pub async fn a_banned_key_is_refused_before_its_buckets_and_strikes_ban(store: Store) {
    let limit = Limit::new(&store, token_bucket(1, 60));
    let bans = BanTable::default();
    let policy = BanPolicy {
        after: 2,
        within: 60 * SEC,
        duration: 10 * SEC,
    };
    let mut asks = Asks::default();
    asks.push_rule(9, false, Some((&bans, Some(&policy))), [limit.ask(9, 1)]);
    assert!(answer(&store, &asks, T0).await.admitted());
    // Two refusals: the second starts a ban.
    let strike = answer(&store, &asks, T0).await;
    assert!(strike.bans_started.is_empty());
    let ban = answer(&store, &asks, T0).await;
    assert_eq!(ban.bans_started.as_slice(), [0]);
    // While banned the bucket is not asked, so it refills untouched.
    let later = T0 + 60 * SEC + 1;
    let banned = answer(&store, &asks, T0 + 5 * SEC).await;
    assert_eq!(
        banned.outcome,
        Outcome::Banned {
            rule: 0,
            left: 5 * SEC
        }
    );
    assert!(answer(&store, &asks, later).await.admitted());
}

pub async fn receipts_are_kept_given_back_or_charged(store: Store) {
    let limit = Limit::new(&store, token_bucket(10, 1));
    let asks = one_rule_each([limit.ask(3, 2)]);
    let mut admission = answer(&store, &asks, T0).await;
    assert_eq!(remaining(&store, &limit, 3, T0).await, 8);
    let receipt = &mut admission.receipts[..1];
    store
        .settle(receipt, Settle::Charge(3), T0)
        .answered()
        .await;
    assert_eq!(remaining(&store, &limit, 3, T0).await, 5);
    // A give-back returns the admission's units; the charge stays.
    store.settle(receipt, Settle::GiveBack, T0).answered().await;
    assert_eq!(remaining(&store, &limit, 3, T0).await, 7);
    // Settled: a second give-back does nothing.
    store.settle(receipt, Settle::GiveBack, T0).answered().await;
    assert_eq!(remaining(&store, &limit, 3, T0).await, 7);
    // A refunded request still pays for what it used after the refund.
    store
        .settle(receipt, Settle::Charge(2), T0)
        .answered()
        .await;
    assert_eq!(remaining(&store, &limit, 3, T0).await, 5);
    store.settle(receipt, Settle::GiveBack, T0).answered().await;
    assert_eq!(remaining(&store, &limit, 3, T0).await, 5);
}

pub async fn a_reservation_gives_back_what_its_charge_did_not_use(store: Store) {
    // A reservation's settlement (`proxy/settle.rs`) lowers its receipts'
    // units by what charges drew from it, then gives back the rest as lent
    // (`Receipt::lent`): every algorithm that may reserve takes back
    // exactly that part, once, whatever was taken since (a token bucket's
    // refund of spent units would come back only as far as later takes
    // allow).
    const MS: Nanos = SEC / 1000;
    for limiter in [
        token_bucket(10, 60),
        Limiter::FixedWindow(FixedWindow::new(rate(10, 60))),
        Limiter::SlidingWindow(SlidingWindow::new(rate(10, 60))),
    ] {
        let limit = Limit::new(&store, limiter);
        let asks = one_rule_each([limit.ask(8, 5)]);
        // Two calls reserve 5 each, a moment apart; each uses 2.
        let mut first = answer(&store, &asks, T0).await;
        let mut second = answer(&store, &asks, T0 + MS).await;
        assert!(first.admitted() && second.admitted(), "{limiter:?}");
        assert_eq!(
            remaining(&store, &limit, 8, T0 + MS).await,
            0,
            "{limiter:?}"
        );
        for (admission, at) in [(&mut first, T0 + SEC), (&mut second, T0 + 2 * SEC)] {
            let receipt = &mut admission.receipts[..1];
            receipt[0].units = 3;
            receipt[0].lent(at);
            store.settle(receipt, Settle::GiveBack, at).answered().await;
        }
        // A token bucket refilled a third of a unit meanwhile.
        assert_eq!(
            remaining(&store, &limit, 8, T0 + 2 * SEC).await,
            6,
            "{limiter:?}"
        );
        store
            .settle(&mut second.receipts[..1], Settle::GiveBack, T0 + 2 * SEC)
            .answered()
            .await;
        assert_eq!(
            remaining(&store, &limit, 8, T0 + 2 * SEC).await,
            6,
            "{limiter:?}"
        );
    }
}

pub async fn a_kept_receipt_keeps_its_units_and_returns_its_permit(store: Store) {
    let limit = Limit::new(&store, token_bucket(10, 1));
    let permits = Limit::new(&store, concurrency(1));
    let asks = one_rule_each([limit.ask(4, 1), permits.ask(4, 1)]);
    let mut admission = answer(&store, &asks, T0).await;
    assert_eq!(answer(&store, &asks, T0).await.outcome, Outcome::Limited);
    let receipts = &mut admission.receipts[..];
    store.settle(receipts, Settle::Keep, T0).answered().await;
    assert_eq!(remaining(&store, &limit, 4, T0).await, 9);
    assert!(answer(&store, &asks, T0).await.admitted());
}

pub async fn spending_takes_every_limit_unconditionally(store: Store) {
    // 10/s and 20/m: spending 25 puts both in debt and reports nothing left.
    let second = Limit::new(&store, token_bucket(10, 1));
    let minute = Limit::new(&store, Limiter::FixedWindow(FixedWindow::new(rate(20, 60))));
    let mut asks = Asks::default();
    asks.push_rule(6, false, None, [second.ask(6, 25), minute.ask(6, 25)]);
    let mut after = smallvec::SmallVec::new();
    store.spend(&asks, T0, &mut after).await.unwrap();
    assert_eq!(after.len(), 2);
    for decision in &after {
        assert!(!decision.is_allowed(), "in debt: {decision:?}");
        assert_eq!(decision.state().remaining, 0);
    }
    // The debt refuses requests: 15 units owed at 10/s, so one unit is back
    // after 1.6 s on the token bucket, while the minute window stays over.
    let one = one_rule_each([second.ask(6, 1)]);
    assert_eq!(
        answer(&store, &one, T0 + SEC).await.outcome,
        Outcome::Limited
    );
    assert!(answer(&store, &one, T0 + 1_600_000_000).await.admitted());
    let window = one_rule_each([minute.ask(6, 1)]);
    assert_eq!(
        answer(&store, &window, T0 + 2 * SEC).await.outcome,
        Outcome::Limited
    );
    // Spending nothing changes nothing.
    let nothing = one_rule_each([second.ask(7, 0)]);
    store.spend(&nothing, T0, &mut after).await.unwrap();
    assert_eq!(after[0].state().remaining, 10);
}

pub async fn peeking_takes_nothing_and_reports_every_limit(store: Store) {
    // 10/s with 4 taken, a permit of 2 with 1 in flight.
    let rates = Limit::new(&store, token_bucket(10, 1));
    let permits = Limit::new(&store, concurrency(2));
    let taken = one_rule_each([rates.ask(8, 4), permits.ask(8, 1)]);
    assert!(answer(&store, &taken, T0).await.admitted());
    let mut asks = Asks::default();
    asks.push_rule(8, false, None, [rates.ask(8, 6), permits.ask(8, 1)]);
    let mut decisions = smallvec::SmallVec::new();
    for _ in 0..3 {
        store.peek(&asks, T0, &mut decisions).await.unwrap();
        assert_eq!(decisions.len(), 2);
        assert!(decisions[0].is_allowed(), "{decisions:?}");
        assert_eq!(decisions[0].state().remaining, 6);
        assert_eq!(decisions[1].state().remaining, 1);
    }
    // A cost that does not fit: denied, with the wait until it would.
    let mut more = Asks::default();
    more.push_rule(8, false, None, [rates.ask(8, 8)]);
    store.peek(&more, T0, &mut decisions).await.unwrap();
    assert_eq!(
        decisions[0],
        Decision::Deny {
            state: decisions[0].state(),
            retry_after: Some(SEC / 5),
        }
    );
    assert_eq!(remaining(&store, &rates, 8, T0).await, 6);
}

pub async fn a_huge_charge_saturates_and_never_wraps_around(store: Store) {
    // An upstream may report any number: the debt saturates, the key stays
    // refused (never admitted by a counter that wrapped), and time still
    // passes for everyone else.
    for limiter in [
        token_bucket(1000, 1),
        Limiter::FixedWindow(FixedWindow::new(rate(1000, 1))),
        Limiter::SlidingWindow(SlidingWindow::new(rate(1000, 1))),
    ] {
        let limit = Limit::new(&store, limiter);
        let asks = one_rule_each([limit.ask(9, u64::MAX)]);
        let mut after = smallvec::SmallVec::new();
        store.spend(&asks, T0, &mut after).await.unwrap();
        store.spend(&asks, T0, &mut after).await.unwrap();
        let one = one_rule_each([limit.ask(9, 1)]);
        for later in [T0, T0 + 3600 * SEC] {
            let refused = answer(&store, &one, later).await;
            assert_eq!(refused.outcome, Outcome::Limited, "{limiter:?} at {later}");
            assert_eq!(refused.decisions[0].state().remaining, 0);
        }
        let other = one_rule_each([limit.ask(10, 1)]);
        assert!(answer(&store, &other, T0).await.admitted(), "{limiter:?}");
    }
}

pub async fn a_debt_refuses_until_repaid_and_retry_after_counts_it(store: Store) {
    // 1000/s: a caller 1,500 units in debt waits at least 1.5 s (the token
    // bucket exactly 1.5 s plus its cost; a window until the debt has left
    // the windows that count), and is admitted exactly then.
    for limiter in [
        token_bucket(1000, 1),
        Limiter::FixedWindow(FixedWindow::new(rate(1000, 1))),
        Limiter::SlidingWindow(SlidingWindow::new(rate(1000, 1))),
    ] {
        let limit = Limit::new(&store, limiter);
        let at = T0 - SEC / 4; // the start of a second
        let asks = one_rule_each([limit.ask(5, 1)]);
        let mut admission = answer(&store, &asks, at).await;
        assert!(admission.admitted(), "{limiter:?}");
        store
            .settle(&mut admission.receipts[..1], Settle::Charge(2499), at)
            .answered()
            .await;
        let refused = answer(&store, &asks, at).await;
        let Decision::Deny {
            state, retry_after, ..
        } = refused.decisions[0]
        else {
            panic!("{limiter:?} admitted a caller in debt");
        };
        assert_eq!(state.remaining, 0, "{limiter:?}");
        let retry = retry_after.expect("a debt is repaid in time");
        let most = match limiter {
            Limiter::TokenBucket(_) => 1_501_000_000,
            _ => 3_000_000_000,
        };
        assert!(
            (1_500_000_000..=most).contains(&retry),
            "{limiter:?}: retry after {retry} ns"
        );
        assert_eq!(
            answer(&store, &asks, at + retry - 1).await.outcome,
            Outcome::Limited,
            "{limiter:?}"
        );
        assert!(
            answer(&store, &asks, at + retry).await.admitted(),
            "{limiter:?}"
        );
    }
}

pub async fn a_late_refund_goes_back_to_the_window_it_was_taken_in(store: Store) {
    let start = T0 - SEC / 4 + 59 * SEC; // one second before a minute ends
    let minute = start + SEC; // the next minute
                              // Fixed window: a unit taken in the last window and refunded in the
                              // new one gives the new window nothing.
    let fixed = Limit::new(&store, Limiter::FixedWindow(FixedWindow::new(rate(2, 60))));
    let asks = one_rule_each([fixed.ask(6, 2)]);
    let mut admission = answer(&store, &asks, start).await;
    assert_eq!(remaining(&store, &fixed, 6, minute).await, 2);
    let one = one_rule_each([fixed.ask(6, 1)]);
    assert!(answer(&store, &one, minute).await.admitted());
    store
        .settle(&mut admission.receipts[..1], Settle::GiveBack, minute)
        .answered()
        .await;
    assert_eq!(remaining(&store, &fixed, 6, minute).await, 1);
    // Sliding window: the previous window still weighs, and the refund
    // comes out of it.
    let sliding = Limit::new(
        &store,
        Limiter::SlidingWindow(SlidingWindow::new(rate(10, 60))),
    );
    let asks = one_rule_each([sliding.ask(6, 10)]);
    let mut admission = answer(&store, &asks, start).await;
    assert_eq!(remaining(&store, &sliding, 6, minute).await, 0);
    store
        .settle(&mut admission.receipts[..1], Settle::GiveBack, minute)
        .answered()
        .await;
    assert_eq!(remaining(&store, &sliding, 6, minute).await, 10);
}

pub async fn a_held_request_reserves_and_a_give_back_cancels(store: Store) {
    let limit = Limit::new(&store, token_bucket(1, 1));
    let hold = Some(HoldLimits {
        max_wait: 5 * SEC,
        max_queued: 10,
    });
    let held = Ask {
        hold,
        ..limit.ask(8, 1)
    };
    let asks = one_rule_each([held]);
    assert_eq!(answer(&store, &asks, T0).await.wait(), 0);
    let mut second = answer(&store, &asks, T0).await;
    assert_eq!(second.wait(), SEC);
    assert_eq!(second.receipts[0].taken, Taken::Reserved { at: T0 + SEC });
    // Its client leaves: the slot goes back, and the next request gets it.
    store
        .settle(&mut second.receipts[..1], Settle::GiveBack, T0 + SEC / 2)
        .answered()
        .await;
    assert_eq!(answer(&store, &asks, T0 + SEC / 2).await.wait(), SEC / 2);
}

/// `limit`'s ask for key 3 in delay mode.
fn queued(hold: Option<HoldLimits>, limit: &Limit) -> Ask<'_> {
    Ask {
        hold,
        ..limit.ask(3, 1)
    }
}

pub async fn a_request_queues_for_one_permit_at_most(store: Store) {
    let hold = Some(HoldLimits {
        max_wait: 5 * SEC,
        max_queued: 10,
    });
    let first = Limit::new(&store, concurrency(1));
    let second = Limit::new(&store, concurrency(1));

    // Both permits are taken by other requests.
    let holders = one_rule_each([first.ask(3, 1), second.ask(3, 1)]);
    let mut holders = answer(&store, &holders, T0).await;
    assert!(holders.admitted());
    // One full permit: the request queues for it.
    let one = one_rule_each([queued(hold, &first)]);
    let waiting = answer(&store, &one, T0).await;
    assert!(waiting.admitted() && waiting.queued.is_some());
    // Two full permits: refused, and in neither queue.
    let both = one_rule_each([queued(hold, &first), queued(hold, &second)]);
    let refused = answer(&store, &both, T0).await;
    assert_eq!(refused.outcome, Outcome::Limited);
    assert!(refused.queued.is_none());
    let receipts = &mut holders.receipts[..];
    store.settle(receipts, Settle::Keep, T0).answered().await;
    // The second permit went to nobody: it is free.
    assert!(answer(&store, &one_rule_each([second.ask(3, 1)]), T0)
        .await
        .admitted());
    // The first went to the request that queued for it.
    let mut queued = waiting.queued.expect("queued");
    let arrives = store.permit_arrives(&mut queued);
    let arrived = tokio::time::timeout(std::time::Duration::from_secs(5), arrives).await;
    assert_eq!(arrived, Ok(true));
    // And it counts: the permit is taken until its receipt is settled.
    assert!(!answer(&store, &one_rule_each([first.ask(3, 1)]), T0)
        .await
        .admitted());
    store
        .settle(std::slice::from_mut(&mut queued.receipt), Settle::Keep, T0)
        .answered()
        .await;
    assert!(answer(&store, &one_rule_each([first.ask(3, 1)]), T0)
        .await
        .admitted());
}

pub async fn queued_permits_pass_in_arrival_order_and_a_leaver_takes_none(store: Store) {
    let hold = Some(HoldLimits {
        max_wait: 5 * SEC,
        max_queued: 2,
    });
    let limit = Limit::new(&store, concurrency(1));
    let one = one_rule_each([queued(hold, &limit)]);
    let mut holder = answer(&store, &one, T0).await;
    assert!(holder.admitted() && holder.queued.is_none());
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let mut waiting = answer(&store, &one, T0).await;
        assert!(waiting.admitted());
        assert!(matches!(
            waiting.decisions[0],
            Decision::Hold { wait: 0, .. }
        ));
        waiters.push(waiting.queued.take().expect("queued"));
    }
    // The queue is full: refused now.
    let full = answer(&store, &one, T0).await;
    assert_eq!(full.outcome, Outcome::Limited);
    // The first waiter leaves; the holder's permit goes to the second.
    let leaver = waiters.remove(0);
    assert!(store.leave_queue(&leaver));
    let mut second = waiters.remove(0);
    let quick = std::time::Duration::from_millis(300);
    let early = tokio::time::timeout(quick, store.permit_arrives(&mut second)).await;
    assert!(early.is_err(), "a permit arrived while every one was taken");
    store
        .settle(&mut holder.receipts[..1], Settle::Keep, T0)
        .answered()
        .await;
    let arrives = store.permit_arrives(&mut second);
    let arrived = tokio::time::timeout(std::time::Duration::from_secs(5), arrives).await;
    assert_eq!(arrived, Ok(true));
    // Newcomers queue behind it, not past it.
    let late = answer(&store, &one, T0).await;
    assert!(late.queued.is_some());
    assert!(store.leave_queue(late.queued.as_ref().unwrap()));
    store
        .settle(std::slice::from_mut(&mut second.receipt), Settle::Keep, T0)
        .answered()
        .await;
    assert!(answer(&store, &one_rule_each([limit.ask(3, 1)]), T0)
        .await
        .admitted());
}

/// A failing call surfaces a [`StoreError`] (here: the fault-injecting
/// store; a networked store on a timeout) and takes nothing.
#[tokio::test]
async fn a_failing_store_surfaces_a_transient_error_and_takes_nothing() {
    let store = Store::Failing(FailingStore::new(100));
    let limit = Limit::new(&store, token_bucket(1, 60));
    let asks = one_rule_each([limit.ask(1, 1)]);
    let Store::Failing(failing) = &store else {
        unreachable!()
    };
    failing.set_failing(true);
    let error = store
        .admit(&asks, T0, &mut Admission::default())
        .await
        .unwrap_err();
    assert!(error.is_transient());
    failing.set_failing(false);
    assert!(answer(&store, &asks, T0).await.admitted());
}

/// Instantiates the checks listed for one backend, each a test that gets a
/// store from `$make`.
macro_rules! store_suite {
    ($backend:ident, $make:expr, [$($check:ident),* $(,)?]) => {
        mod $backend {
            use super::*;

            $(
                #[tokio::test]
                async fn $check() {
                    super::$check($make).await;
                }
            )*
        }
    };
}

/// Every check of the contract, listed once: `every_check!(backend, make)`
/// runs them all on the stores `make` builds.
macro_rules! every_check {
    ($backend:ident, $make:expr) => {
        store_suite!(
            $backend,
            $make,
            [
                rates_permits_and_shadow_asks_are_one_call,
                a_rate_that_refuses_leaves_the_other_rates_untouched,
                a_refusal_takes_nothing_from_any_limit,
                all_or_nothing_in_every_combination,
                a_banned_key_is_refused_before_its_buckets_and_strikes_ban,
                receipts_are_kept_given_back_or_charged,
                a_reservation_gives_back_what_its_charge_did_not_use,
                a_kept_receipt_keeps_its_units_and_returns_its_permit,
                spending_takes_every_limit_unconditionally,
                peeking_takes_nothing_and_reports_every_limit,
                a_huge_charge_saturates_and_never_wraps_around,
                a_debt_refuses_until_repaid_and_retry_after_counts_it,
                a_late_refund_goes_back_to_the_window_it_was_taken_in,
                a_request_queues_for_one_permit_at_most,
                queued_permits_pass_in_arrival_order_and_a_leaver_takes_none,
                a_held_request_reserves_and_a_give_back_cancels,
            ]
        );
    };
}

every_check!(memory, Store::Memory(MemoryStore::new(10_000)));

/// A strict store on the test process's Redis (every check's tables have
/// names of their own, so they never share a key), deciding at the
/// suite's exact instants.
pub(crate) async fn redis_store() -> Store {
    redis_store_on(shared_urls(), false).await
}

/// The same on a Redis Cluster of three primaries: a request's rules may
/// live in different slots, and every call keeps to one.
pub(crate) async fn redis_cluster_store() -> Store {
    redis_store_on(cluster_urls(), true).await
}

/// The nodes of the test process's Redis Cluster (three primaries, started
/// on first use).
pub(crate) fn cluster_urls() -> Vec<String> {
    use crate::testing::redis_server::RedisCluster;
    static CLUSTER: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    CLUSTER
        .get_or_init(|| std::mem::ManuallyDrop::new(RedisCluster::start()).urls())
        .clone()
}

pub(crate) async fn redis_store_on(urls: Vec<String>, cluster: bool) -> Store {
    use crate::store::{RedisSettings, RedisStore};
    let settings = RedisSettings {
        urls,
        access: Default::default(),
        cluster,
        timeout: std::time::Duration::from_secs(5),
        prefix: "suite".into(),
        instances: 1,
        settle_retry_for: std::time::Duration::from_secs(600),
    };
    let store = RedisStore::new(settings, 10_000)
        .expect("a Redis URL")
        .with_injected_time();
    store.start(crate::clock::ProxyClock::default());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !store.link().is_up() {
        assert!(
            std::time::Instant::now() < deadline,
            "no connection to Redis"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    Store::Redis(store)
}

every_check!(redis, redis_store().await);
every_check!(redis_cluster, redis_cluster_store().await);

/// A hybrid store alone on the test process's Redis, whose sync runs only
/// when a test calls it: every decision is the memory store's, as hybrid
/// mode promises (what syncing adds is `store/hybrid/fleet.rs`'s).
pub(crate) async fn hybrid_store() -> Store {
    let store = crate::store::HybridStore::for_test(shared_urls(), "suite", 1).await;
    Store::Hybrid(std::sync::Arc::new(store))
}

every_check!(hybrid, hybrid_store().await);
