//! Settling: what an admitted request took, kept until its exchange ends
//! and then settled with the store (kept, given back, charged more).
//!
//! A [`Settlement`] owns the admission's receipts and a handle on the store
//! and the clock, so it lives as long as the response body that carries it:
//! concurrency permits are returned when the body ends, the client goes
//! away, or a WebSocket tunnel closes. Whatever ends it, it settles through
//! the store ([`Store::settle`], which never waits, or
//! [`Store::settle_locally`] for what the local fallback took), from its
//! `Drop` too, as the disposition set for that case says — give back while the request is still held (its client left
//! before it passed), keep once it has passed.
//!
//! A request whose rules charge or refund carries a [`Bill`] in its
//! settlement: the settlement applies it to those rules' receipts as the
//! exchange unfolds (forwarded, response head, ticks while waiting, the
//! end), the same way, since ticks and the end are reached from `poll` and
//! `Drop`.

use std::sync::Arc;
use std::task::Context;

use http::{HeaderMap, HeaderName, StatusCode};
use smallvec::SmallVec;

use super::bill::{self, Bill, Failure};
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::config::Charge;
use crate::limiter::adaptive::Sample;
use crate::policy::Billing;
use crate::store::admission::Receipts;
use crate::store::{Receipt, Settle, Store};

/// The receipts of one admitted request, settled exactly once each.
#[derive(Debug)]
pub struct Settlement {
    ledger: Ledger,
    clock: ProxyClock,
    /// How receipts still unsettled are settled when this is dropped.
    on_drop: Settle,
    /// Deferred charges and refunds.
    bill: Option<Bill>,
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
            ledger: Ledger {
                store,
                local,
                receipts,
            },
            clock,
            on_drop: Settle::GiveBack,
            bill: None,
        }
    }

    /// Adds the request's deferred charges and refunds.
    pub fn bill(&mut self, bill: Option<Bill>) {
        self.bill = bill;
    }

    /// Takes `receipts`, what the admission took, into a settlement made
    /// without any (leaving them empty).
    pub fn take_receipts(&mut self, receipts: &mut Receipts) {
        debug_assert!(self.ledger.receipts.is_empty());
        // Swapped rather than assigned: no empty list to drop.
        std::mem::swap(&mut self.ledger.receipts, receipts);
    }

    /// Adds a receipt taken after admission (a queued permit that arrived).
    pub fn push(&mut self, receipt: Receipt) {
        self.ledger.receipts.push(receipt);
    }

    /// The request passed: from now on, dropping keeps its units (and
    /// returns its permits).
    pub fn passed(&mut self) {
        self.on_drop = Settle::Keep;
    }

    /// Whether nothing is left to settle.
    pub fn is_empty(&self) -> bool {
        self.ledger.receipts.iter().all(|receipt| receipt.settled)
    }

    /// Whether anything is left to do once the request passed: a permit to
    /// return, or a bill.
    pub fn needed_after_passing(&self) -> bool {
        self.bill.is_some() || needed_after_response(&self.ledger.receipts)
    }

    /// Whether anything is left to do once the response head is out: a
    /// permit to return (see [`needed_after_response`]), or upstream time
    /// to charge until the body ends.
    pub fn needed_after_response(&self) -> bool {
        self.charges_elapsed() || needed_after_response(&self.ledger.receipts)
    }

    /// Whether upstream time is charged while the exchange runs.
    pub fn charges_elapsed(&self) -> bool {
        self.bill
            .as_ref()
            .is_some_and(|bill| bill.charges_elapsed())
    }

    /// The request is forwarded now: upstream time counts from here.
    pub fn forwarded(&mut self, at: Nanos) {
        if let Some(bill) = &mut self.bill {
            bill.forwarded(at);
        }
    }

    /// Charges upstream time when a tick (a second) passed; otherwise
    /// asks to be woken at the next one. Call it whenever the exchange is
    /// polled: cheap when nothing is due.
    #[inline]
    pub fn poll_charges(&mut self, cx: &mut Context<'_>) {
        if self.bill.as_mut().is_some_and(|bill| bill.poll_tick(cx)) {
            self.charge_elapsed(self.clock.now());
        }
    }

    /// What the exchange told about the upstream, at `now`, for the
    /// adaptive rules whose permits it holds (docs/adaptive.md).
    #[inline]
    pub fn learn(&self, sample: Sample, now: Nanos) {
        for receipt in &self.ledger.receipts {
            if let Some(controller) = receipt.table.adaptive() {
                controller.record(sample, now);
            }
        }
    }

    /// The upstream's response head: a 5xx is refunded where `refund_on`
    /// says so, and reported costs are charged (their fields stripped from
    /// `headers` before the client sees them).
    pub fn response_began(&mut self, status: StatusCode, headers: &mut HeaderMap) {
        let Some(bill) = &mut self.bill else {
            return;
        };
        bill.response_began = true;
        let now = self.clock.now();
        // Each field is read (and stripped) once; a shadow twin reading
        // the same field gets the same units.
        let mut reported: SmallVec<[(&HeaderName, Option<u64>); 1]> = SmallVec::new();
        for (rule, billing) in &bill.rules {
            if let Some(Charge::Header(name)) = &billing.charge {
                let units = match reported.iter().find(|(read, _)| *read == name) {
                    Some(&(_, units)) => units,
                    None => {
                        let units = bill::take_reported_cost(headers, name);
                        reported.push((name, units));
                        units
                    }
                };
                match units {
                    Some(units) => {
                        let how = Settle::Charge(units);
                        self.ledger.settle_rule(*rule, how, now);
                        billing.charged.inc_by(units);
                    }
                    None => billing.charge_errors.inc(),
                }
            }
            if status.is_server_error() && billing.refund_on.server_error {
                self.ledger.refund(*rule, billing, now);
            }
        }
    }

    /// The exchange ended without a response from the upstream.
    pub fn exchange_failed(&mut self, failure: Failure) {
        let Some(bill) = &mut self.bill else {
            return;
        };
        bill.response_began = true;
        let now = self.clock.now();
        for (rule, billing) in &bill.rules {
            let refunds = match failure {
                Failure::Upstream => billing.refund_on.upstream_error,
                Failure::ClientLeft => billing.refund_on.client_abort,
            };
            if refunds {
                self.ledger.refund(*rule, billing, now);
            }
        }
    }

    /// Charges every `elapsed_ms` rule the upstream time not yet charged.
    fn charge_elapsed(&mut self, now: Nanos) {
        let Some(bill) = &mut self.bill else {
            return;
        };
        let due = bill.elapsed_due(now);
        if due == 0 {
            return;
        }
        for (rule, billing) in &bill.rules {
            if billing.charge == Some(Charge::ElapsedMs) {
                let how = Settle::Charge(due);
                self.ledger.settle_rule(*rule, how, now);
                billing.charged.inc_by(due);
            }
        }
    }
}

/// What the admission took, and the store to settle it with.
#[derive(Debug)]
struct Ledger {
    store: Arc<Store>,
    /// Settle with the local store rather than the configured one: the
    /// admission was decided there (`on_error = "local"`).
    local: bool,
    receipts: Receipts,
}

impl Ledger {
    /// Gives back one rule's admission units, and counts them.
    fn refund(&mut self, rule: usize, billing: &Billing, now: Nanos) {
        if self.settle_rule(rule, Settle::GiveBack, now) {
            billing.refunded.inc_by(billing.cost);
        }
    }

    /// Settles the rate receipts of rule `rule` (a store rule index; its
    /// permits are returned only when the request ends) from where nothing
    /// is awaited. Whether the rule had a receipt to settle.
    fn settle_rule(&mut self, rule: usize, how: Settle, now: Nanos) -> bool {
        let mut settled = false;
        for receipt in self
            .receipts
            .iter_mut()
            .filter(|receipt| receipt.rule == rule && !receipt.taken.is_permit())
        {
            if receipt.settled && how == Settle::GiveBack {
                continue;
            }
            settled = true;
            settle_with(
                &self.store,
                self.local,
                std::slice::from_mut(receipt),
                how,
                now,
            );
        }
        settled
    }

    /// Settles every receipt as `how` says.
    fn settle_all(&mut self, how: Settle, now: Nanos) {
        settle_with(&self.store, self.local, &mut self.receipts, how, now);
    }
}

/// Settles `receipts` with the local store when the admission was decided
/// there, else with the store (neither waits).
fn settle_with(store: &Store, local: bool, receipts: &mut [Receipt], how: Settle, now: Nanos) {
    if local {
        store.settle_locally(receipts, how, now);
    } else {
        store.settle(receipts, how, now);
    }
}

pin_project_lite::pin_project! {
    /// Awaits `exchange`, charging upstream time to `settlement` (if it
    /// charges any) every second while it is pending. A future of its own,
    /// the exchange inline: a request that charges nothing pays one look at
    /// an `Option` per poll, and its state is no larger.
    pub struct ChargingWhile<'s, F> {
        #[pin]
        exchange: F,
        settlement: Option<&'s mut Settlement>,
    }
}

impl<'s, F> ChargingWhile<'s, F> {
    /// `settlement`: the request's, when it charges upstream time
    /// ([`Settlement::charges_elapsed`]).
    pub fn new(exchange: F, settlement: Option<&'s mut Settlement>) -> Self {
        ChargingWhile {
            exchange,
            settlement,
        }
    }
}

impl<F: std::future::Future> std::future::Future for ChargingWhile<'_, F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> std::task::Poll<F::Output> {
        let this = self.project();
        let polled = this.exchange.poll(cx);
        if polled.is_pending() {
            if let Some(settlement) = this.settlement {
                settlement.poll_charges(cx);
            }
        }
        polled
    }
}

/// Whether settling `receipts` after the response would do anything: a
/// permit to return. Keeping units a bucket already holds is nothing to
/// do, so a request that took only rates carries no settlement past
/// admission.
pub fn needed_after_response(receipts: &[Receipt]) -> bool {
    receipts
        .iter()
        .any(|receipt| !receipt.settled && receipt.taken.is_permit())
}

impl Drop for Settlement {
    fn drop(&mut self) {
        if let Some(bill) = &self.bill {
            let elapsed = bill.charges_elapsed();
            if bill.was_forwarded() && !bill.response_began {
                // Forwarded, and dropped before any response: the client left.
                self.exchange_failed(Failure::ClientLeft);
            }
            if elapsed {
                // What the exchange used until now, whoever ended it.
                self.charge_elapsed(self.clock.now());
            }
        }
        // Kept rate units are already where they belong: only permits (or,
        // while held, everything) need the store.
        let nothing_to_return =
            self.on_drop == Settle::Keep && !needed_after_response(&self.ledger.receipts);
        if nothing_to_return || self.is_empty() {
            return;
        }
        self.ledger.settle_all(self.on_drop, self.clock.now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::RuntimeClock;
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
        let permits = Limiter::Concurrency(Concurrency::new(1));
        let tables = [store.table(&rates), store.table(&permits)];
        Fixture {
            store: Arc::new(store),
            // On paused time (`start_paused`): settled at `NOW`.
            clock: ProxyClock::Runtime(RuntimeClock::new(NOW)),
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

    #[tokio::test(start_paused = true)]
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
        // Dropped before it passed: given back.
        let again = fixture.settlement().await.expect("the permit is back");
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
