//! Settling: what an admitted request took, kept until its exchange ends
//! and then settled with the store (kept, given back, charged more).
//!
//! A [`Settlement`] owns the admission's receipts and a handle on the store
//! and the clock, so it lives as long as the response body that carries it:
//! concurrency permits are returned when the body ends, the client goes
//! away, or a WebSocket tunnel closes. Whatever ends it, it settles through
//! the store: at once where it can await ([`Settlement::settle`]), or from
//! its `Drop` ([`Store::settle_detached`]) as the disposition set for that
//! case says — give back while the request is still held (its client left
//! before it passed), keep once it has passed.

use std::sync::Arc;

use crate::clock::{Clock, ProxyClock};
use crate::store::admission::Receipts;
use crate::store::{Receipt, Settle, Store, StoreError, Taken};

/// The receipts of one admitted request, settled exactly once each.
#[derive(Debug)]
pub struct Settlement {
    store: Arc<Store>,
    clock: ProxyClock,
    /// Settle with the local store rather than the configured one: the
    /// admission was decided there (`on_error = "local"`).
    local: bool,
    receipts: Receipts,
    /// How receipts still unsettled are settled when this is dropped.
    on_drop: Settle,
}

impl Settlement {
    /// Receipts to give back if dropped before [`Settlement::passed`].
    pub fn new(
        store: Arc<Store>,
        clock: ProxyClock,
        local: bool,
        receipts: Receipts,
    ) -> Settlement {
        Settlement {
            store,
            clock,
            local,
            receipts,
            on_drop: Settle::GiveBack,
        }
    }

    /// Adds a receipt taken after admission (a queued permit that arrived).
    pub fn push(&mut self, receipt: Receipt) {
        self.receipts.push(receipt);
    }

    /// The request passed: from now on, dropping keeps its units (and
    /// returns its permits).
    pub fn passed(&mut self) {
        self.on_drop = Settle::Keep;
    }

    /// Whether nothing is left to settle.
    pub fn is_empty(&self) -> bool {
        self.receipts.iter().all(|receipt| receipt.settled)
    }

    /// Whether settling after the response would do anything (see
    /// [`needed_after_response`]).
    pub fn needed_after_response(&self) -> bool {
        needed_after_response(&self.receipts)
    }

    /// Settles every receipt as `how` says, now.
    pub async fn settle(&mut self, how: Settle) -> Result<(), StoreError> {
        let now = self.clock.now();
        if self.local {
            self.settle_locally(how, now);
            return Ok(());
        }
        for receipt in &mut self.receipts {
            self.store.settle(receipt, how, now).await?;
        }
        Ok(())
    }

    fn settle_locally(&mut self, how: Settle, now: crate::clock::Nanos) {
        let local = self.store.local();
        for receipt in &mut self.receipts {
            local.settle(receipt, how, now);
        }
    }
}

/// Whether settling `receipts` after the response would do anything: a
/// permit to return. Keeping units a bucket already holds is nothing to
/// do, so a request that took only rates carries no settlement past
/// admission.
pub fn needed_after_response(receipts: &[Receipt]) -> bool {
    receipts
        .iter()
        .any(|receipt| !receipt.settled && receipt.taken == Taken::Permit)
}

impl Drop for Settlement {
    fn drop(&mut self) {
        if self.is_empty() {
            return;
        }
        let now = self.clock.now();
        if self.local {
            self.settle_locally(self.on_drop, now);
        } else {
            self.store
                .settle_detached(&mut self.receipts, self.on_drop, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::limiter::{Concurrency, Gcra, Limiter};
    use crate::store::{Ask, Asks, MemoryStore};
    use crate::testing::{rate, SEC};

    const NOW: crate::clock::Nanos = 1_800_000_000 * SEC;

    struct Fixture {
        store: Arc<Store>,
        clock: ProxyClock,
        rates: Limiter,
        permits: Limiter,
        tables: [crate::store::BucketTable; 2],
    }

    fn fixture() -> Fixture {
        let store = Store::Memory(MemoryStore::new(100));
        let rates = Limiter::TokenBucket(Gcra::new(rate(10, 60), 10));
        let permits = Limiter::Concurrency(Concurrency { max_in_flight: 1 });
        let tables = [store.table(&rates), store.table(&permits)];
        Fixture {
            store: Arc::new(store),
            clock: ProxyClock::Manual(ManualClock::new(NOW)),
            rates,
            permits,
            tables,
        }
    }

    impl Fixture {
        /// Admits one request (3 units and a permit) and wraps its receipts.
        async fn settlement(&self) -> Option<Settlement> {
            let mut asks = Asks::default();
            let ask = |table, limiter, cost| Ask {
                table,
                key: 1,
                limiter,
                cost,
                hold: None,
            };
            asks.push_rule(1, false, None, [ask(&self.tables[0], &self.rates, 3)]);
            asks.push_rule(1, false, None, [ask(&self.tables[1], &self.permits, 1)]);
            let mut answer = crate::store::Admission::default();
            self.store.admit(&asks, NOW, &mut answer).await.unwrap();
            answer.admitted().then(|| {
                Settlement::new(
                    Arc::clone(&self.store),
                    self.clock.clone(),
                    false,
                    answer.receipts,
                )
            })
        }
    }

    #[tokio::test]
    async fn dropped_while_held_gives_everything_back_and_once_passed_keeps_units() {
        let fixture = fixture();
        let held = fixture.settlement().await.expect("admitted");
        assert!(held.needed_after_response(), "a permit to return");
        // The permit is taken: a second request is refused.
        assert!(fixture.settlement().await.is_none());
        drop(held);
        // Everything came back: the permit, and all 10 units.
        let mut passed = fixture.settlement().await.expect("admitted again");
        passed.passed();
        drop(passed);
        // Kept: 3 units stay taken, the permit returned.
        let mut again = fixture.settlement().await.expect("the permit is back");
        again.settle(Settle::GiveBack).await.unwrap();
        assert!(again.is_empty());
        drop(again);
        let mut last = fixture.settlement().await.expect("admitted");
        last.passed();
        // 10 − 3 kept − 3 now = 4 left: one more request of 3 fits after
        // this one returns its permit, and then no more.
        drop(last);
        let mut fits = fixture.settlement().await.expect("4 units left");
        fits.passed();
        drop(fits);
        assert!(fixture.settlement().await.is_none(), "1 unit left");
    }
}
