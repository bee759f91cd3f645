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

use bytes::Bytes;
use http::{HeaderMap, HeaderName, StatusCode};
use http_body::Frame;
use prometheus::IntCounter;
use smallvec::SmallVec;

pub use super::bill::RequestBytes;
use super::bill::{self, Awaited, Bill, Failure, Reported};
use crate::body_scan::{BodyKind, BodyScanner, Pointer, Reading, MAX_POINTERS};
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::config::{Charge, ChargeSource, MissingCharge, Weighted};
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

    /// Adds the request's deferred charges and refunds, once it holds its
    /// receipts: the reservations they took count as reserved from here.
    pub fn bill(&mut self, bill: Option<Bill>) {
        if let Some(bill) = &bill {
            for (rule, billing) in &bill.rules {
                self.ledger.hold_reservation(*rule, billing);
            }
        }
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
    /// permit to return (see [`needed_after_response`]), upstream time or
    /// body bytes to charge until the body ends, or a value the answer has
    /// yet to bring.
    pub fn needed_after_response(&self) -> bool {
        self.bill
            .as_ref()
            .is_some_and(|bill| bill.charges_as_it_runs() || !bill.awaiting.is_empty())
            || needed_after_response(&self.ledger.receipts)
    }

    /// Whether upstream time or body bytes are charged while the exchange
    /// runs.
    pub fn charges_as_it_runs(&self) -> bool {
        self.bill
            .as_ref()
            .is_some_and(|bill| bill.charges_as_it_runs())
    }

    /// The request is forwarded now, with `body`: upstream time counts
    /// from here, and the body's bytes as they go. Out of the forwarding
    /// future's line: only requests whose rules bill get here
    /// (`proxy/out_of_line.rs`).
    #[inline(never)]
    pub fn forwarded(&mut self, at: Nanos, bytes: impl FnOnce() -> RequestBytes) {
        if let Some(bill) = &mut self.bill {
            bill.forwarded(at, bytes);
        }
    }

    /// Charges upstream time and body bytes when a tick (a second) passed;
    /// otherwise asks to be woken at the next one. Call it whenever the
    /// exchange is polled: cheap when nothing is due.
    #[inline]
    pub fn poll_charges(&mut self, cx: &mut Context<'_>) {
        if self.bill.as_mut().is_some_and(|bill| bill.poll_tick(cx)) {
            self.charge_running(self.clock.now());
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

    /// The upstream's response head: its status is refunded where
    /// `refund_on` says so, and costs reported in its fields are charged
    /// (the fields stripped from `headers` before the client sees them).
    /// What the head does not bring is awaited: a header may come as a
    /// trailer, `json:` values in the body, read when the head says it is
    /// JSON or an event stream.
    pub fn response_began(&mut self, status: StatusCode, headers: &mut HeaderMap) {
        let Some(bill) = &mut self.bill else {
            return;
        };
        bill.response_began = true;
        let now = self.clock.now();
        // Each field is read (and stripped) once; a shadow twin reading
        // the same field gets the same units.
        let mut reported: SmallVec<[(&HeaderName, Reported); 1]> = SmallVec::new();
        let mut pointers: SmallVec<[&Pointer; 2]> = SmallVec::new();
        for (position, (rule, billing)) in bill.rules.iter().enumerate() {
            if let Some(charge) = &billing.charge {
                let mut owed = Owed::default();
                for (source, weighted) in charge.sources.iter().enumerate() {
                    let mut awaited = Awaited {
                        rule: position,
                        source,
                        slot: None,
                    };
                    match &weighted.source {
                        // Measured as the exchange runs.
                        ChargeSource::ElapsedMs
                        | ChargeSource::RequestBytes
                        | ChargeSource::ResponseBytes => continue,
                        ChargeSource::Header(name) => {
                            match read_once(&mut reported, headers, name) {
                                Reported::Units(units) => owed.units(weighted.whole_units(units)),
                                Reported::Malformed => owed.missing(charge),
                                Reported::Absent => bill.awaiting.push(awaited),
                            }
                        }
                        ChargeSource::Json(pointer) => {
                            // Past the scanner's pointers (rules matched
                            // together naming more), a value is missing.
                            awaited.slot = match pointers.iter().position(|p| *p == pointer) {
                                Some(slot) => Some(slot),
                                None if pointers.len() < MAX_POINTERS => {
                                    pointers.push(pointer);
                                    Some(pointers.len() - 1)
                                }
                                None => None,
                            };
                            bill.awaiting.push(awaited);
                        }
                    }
                }
                owed.settle(&mut self.ledger, *rule, billing, now);
            }
            if billing.refund_on.refunds_status(status) {
                self.ledger.refund(*rule, billing, now);
            }
        }
        if !pointers.is_empty() {
            bill.scanner =
                BodyKind::of(headers).map(|kind| Box::new(BodyScanner::new(kind, &pointers)));
        }
    }

    /// A frame of the response body on its way to the client: its data is
    /// counted for `response_bytes` and read for `json:` values, its
    /// trailers for awaited cost fields (which are stripped).
    #[inline]
    pub fn read_frame(&mut self, frame: &mut Frame<Bytes>) {
        let Some(bill) = &mut self.bill else {
            return;
        };
        if let Some(data) = frame.data_ref() {
            if let Some(traffic) = &mut bill.traffic {
                traffic.response_frame(data.len());
            }
            if let Some(scanner) = &mut bill.scanner {
                scanner.feed(data);
            }
        } else if let Some(trailers) = frame.trailers_mut() {
            self.read_trailers(trailers);
        }
    }

    /// Charges the awaited header sources that `trailers` report.
    fn read_trailers(&mut self, trailers: &mut HeaderMap) {
        let Some(bill) = &mut self.bill else {
            return;
        };
        let now = self.clock.now();
        let mut reported: SmallVec<[(&HeaderName, Reported); 1]> = SmallVec::new();
        for (position, (rule, billing)) in bill.rules.iter().enumerate() {
            let Some(charge) = &billing.charge else {
                continue;
            };
            let mut owed = Owed::default();
            bill.awaiting.retain(|awaited| {
                let weighted = &charge.sources[awaited.source];
                let ChargeSource::Header(name) = &weighted.source else {
                    return true;
                };
                if awaited.rule != position {
                    return true;
                }
                match read_once(&mut reported, trailers, name) {
                    Reported::Units(units) => owed.units(weighted.whole_units(units)),
                    Reported::Malformed => owed.missing(charge),
                    Reported::Absent => return true,
                }
                false
            });
            owed.settle(&mut self.ledger, *rule, billing, now);
        }
    }

    /// The answer is over (its body ended or broke, or the client left):
    /// every awaited source is charged what was read of it, or
    /// `charge_missing`.
    fn charge_awaited(&mut self, now: Nanos) {
        let Some(bill) = &mut self.bill else {
            return;
        };
        if bill.awaiting.is_empty() {
            return;
        }
        for (position, (rule, billing)) in bill.rules.iter().enumerate() {
            let Some(charge) = &billing.charge else {
                continue;
            };
            let mut owed = Owed::default();
            for awaited in bill.awaiting.iter().filter(|a| a.rule == position) {
                let reading = match (&bill.scanner, awaited.slot) {
                    (Some(scanner), Some(slot)) => scanner.reading(slot),
                    _ => Reading::Missing,
                };
                match reading {
                    Reading::Number(value) => {
                        owed.units(charge.sources[awaited.source].units(value))
                    }
                    Reading::Missing | Reading::Malformed => owed.missing(charge),
                }
            }
            owed.settle(&mut self.ledger, *rule, billing, now);
        }
        bill.awaiting.clear();
        bill.scanner = None;
    }

    /// The exchange ended without a response from the upstream: refunds
    /// where `refund_on` says so. A client that left owes `charge_missing`
    /// for every source that would have come with the answer; a failed
    /// upstream gave no answer to charge by.
    pub fn exchange_failed(&mut self, failure: Failure) {
        let Some(bill) = &mut self.bill else {
            return;
        };
        bill.response_began = true;
        let now = self.clock.now();
        for (rule, billing) in &bill.rules {
            let refunds = match failure {
                Failure::Upstream(status) => {
                    billing.refund_on.upstream_error || billing.refund_on.refunds_status(status)
                }
                Failure::ClientLeft => billing.refund_on.client_abort,
            };
            if refunds {
                self.ledger.refund(*rule, billing, now);
            }
            if let (Failure::ClientLeft, Some(charge)) = (failure, &billing.charge) {
                let mut owed = Owed::default();
                // What sluice measures arrived (the bytes that passed are
                // charged when the settlement drops); the answer's values
                // never will.
                charge
                    .sources
                    .iter()
                    .filter(|weighted| !weighted.source.is_measured())
                    .for_each(|_| owed.missing(charge));
                owed.settle(&mut self.ledger, *rule, billing, now);
            }
        }
    }

    /// The request is over (its charges made, or never to come: it was
    /// refused while held): what its reservations hold that no charge drew
    /// goes back, once (docs/ai-budgets.md).
    fn give_back_reservations(&mut self, now: Nanos) {
        let Some(bill) = &self.bill else {
            return;
        };
        for (rule, billing) in bill.rules.iter().filter(|(_, billing)| billing.reserves) {
            self.ledger.give_back(*rule, billing, now);
        }
    }

    /// Charges every `elapsed_ms`, `request_bytes` and `response_bytes`
    /// source what it measured and was not yet charged (weighted: the
    /// rounded-up product of the whole measure so far, less what that came
    /// to before, so the total rounds once, as one product would).
    fn charge_running(&mut self, now: Nanos) {
        let Some(bill) = &mut self.bill else {
            return;
        };
        let elapsed = if bill.charges_elapsed() {
            bill.elapsed_due(now)
        } else {
            (0, 0)
        };
        let ([request_before, response_before], [request, response]) = bill
            .traffic
            .as_mut()
            .map_or(([0; 2], [0; 2]), |traffic| traffic.due());
        let request = (request_before, request);
        let response = (response_before, response);
        if elapsed.0 == elapsed.1 && request.0 == request.1 && response.0 == response.1 {
            return;
        }
        for (rule, billing) in &bill.rules {
            let Some(charge) = &billing.charge else {
                continue;
            };
            let mut owed = Owed::default();
            for weighted in &charge.sources {
                let (before, after) = match weighted.source {
                    ChargeSource::ElapsedMs => elapsed,
                    ChargeSource::RequestBytes => request,
                    ChargeSource::ResponseBytes => response,
                    ChargeSource::Header(_) | ChargeSource::Json(_) => continue,
                };
                owed.units(units_between(weighted, before, after));
            }
            owed.settle(&mut self.ledger, *rule, billing, now);
        }
    }
}

/// The units a measured source owes for growing from `before` to `after`
/// (milliseconds, bytes): what the whole measure comes to, weighted and
/// rounded up, less what `before` came to. Charged in steps, the total is
/// the one product of the whole, rounded once.
fn units_between(weighted: &Weighted, before: u64, after: u64) -> u64 {
    weighted
        .whole_units(after)
        .saturating_sub(weighted.whole_units(before))
}

/// `name`'s units in `headers`, read (and stripped) once per field: a
/// shadow twin reading the same field gets what the first read.
fn read_once<'n>(
    reported: &mut SmallVec<[(&'n HeaderName, Reported); 1]>,
    headers: &mut HeaderMap,
    name: &'n HeaderName,
) -> Reported {
    if let Some(&(_, read)) = reported.iter().find(|(read, _)| *read == name) {
        return read;
    }
    let read = bill::take_reported_cost(headers, name);
    reported.push((name, read));
    read
}

/// What one rule owes from one step of the exchange: settled as one
/// charge, and counted.
#[derive(Debug, Default)]
struct Owed {
    units: u64,
    /// Values that never arrived or did not read as a number.
    errors: u64,
    /// A value never arrived on a rule that then keeps its whole
    /// reservation (`MissingCharge::KeepReservation`).
    keeps_reservation: bool,
}

impl Owed {
    fn units(&mut self, units: u64) {
        self.units = self.units.saturating_add(units);
    }

    /// A value that never arrived: `charge_missing`, or the whole
    /// reservation, and an error.
    fn missing(&mut self, charge: &Charge) {
        match charge.missing {
            MissingCharge::Units(units) => self.units(units),
            MissingCharge::KeepReservation => self.keeps_reservation = true,
        }
        self.errors += 1;
    }

    fn settle(mut self, ledger: &mut Ledger, rule: usize, billing: &Billing, now: Nanos) {
        if self.errors > 0 {
            billing.charge_errors.inc_by(self.errors);
        }
        if self.keeps_reservation && billing.reserves {
            // Nothing of the reservation goes back: the charge is at least
            // what is left of it, and what the values read cost beyond.
            self.units = self.units.max(ledger.unsettled(rule).unwrap_or(0));
        }
        if self.units > 0 {
            ledger.charge(rule, billing, self.units, now);
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
    /// Gives back one rule's admission units, and counts them: what the
    /// admission took (the rule's `cost`, or its query's), or what is left
    /// of its reservation.
    fn refund(&mut self, rule: usize, billing: &Billing, now: Nanos) {
        let taken = self.unsettled(rule).unwrap_or(billing.cost);
        if self.give_back(rule, billing, now) {
            billing.refunded.inc_by(taken);
        }
    }

    /// The units rule `rule`'s rate receipts would give back now: what its
    /// admission took, less what charges drew from a reservation; `None`
    /// when they were settled already (or it took none).
    fn unsettled(&self, rule: usize) -> Option<u64> {
        self.receipts
            .iter()
            .find(|receipt| receipt.rule == rule && !receipt.taken.is_permit() && !receipt.settled)
            .map(|receipt| receipt.units)
    }

    /// What rule `rule` (settled by `billing`) holds reserved, counted in
    /// its gauge while the request runs.
    fn hold_reservation(&self, rule: usize, billing: &Billing) {
        if billing.reserves {
            billing
                .reserved
                .add(gauged(self.unsettled(rule).unwrap_or(0)));
        }
    }

    /// Charges rule `rule` `units`: a reserving rule's from what it
    /// reserved first (kept: those units are already taken), only the rest
    /// taken from its buckets, and counted as an overrun. Counted in
    /// `sluice_budget_charged_total` once the store has them: what the
    /// reservation held at once, the rest when the store took it.
    fn charge(&mut self, rule: usize, billing: &Billing, units: u64, now: Nanos) {
        let mut beyond = units;
        if billing.reserves {
            let drawn = units.min(self.unsettled(rule).unwrap_or(0));
            if drawn > 0 {
                for receipt in self.rates_of(rule) {
                    receipt.units -= drawn;
                }
                billing.reserved.sub(gauged(drawn));
                billing.charged.inc_by(drawn);
            }
            beyond -= drawn;
            if beyond > 0 {
                billing.overrun.inc_by(beyond);
            }
        }
        if beyond > 0 {
            let how = Settle::Charge(beyond);
            self.settle_rule(rule, how, now, Some(&billing.charged));
        }
    }

    /// Gives back rule `rule`'s admission units (of a reservation, what no
    /// charge drew), once. Whether it had a receipt to settle.
    fn give_back(&mut self, rule: usize, billing: &Billing, now: Nanos) -> bool {
        let held = self.unsettled(rule).filter(|_| billing.reserves);
        if held.is_some() {
            self.rates_of(rule).for_each(|receipt| receipt.lent(now));
        }
        let settled = self.settle_rule(rule, Settle::GiveBack, now, None);
        if let Some(held) = held {
            billing.reserved.sub(gauged(held));
        }
        settled
    }

    /// Rule `rule`'s rate receipts not yet settled.
    fn rates_of(&mut self, rule: usize) -> impl Iterator<Item = &mut Receipt> {
        self.receipts.iter_mut().filter(move |receipt| {
            receipt.rule == rule && !receipt.taken.is_permit() && !receipt.settled
        })
    }

    /// Settles the rate receipts of rule `rule` (a store rule index; its
    /// permits are returned only when the request ends) from where nothing
    /// is awaited. A charge counts in `charged` once, with its first
    /// receipt. Whether the rule had a receipt to settle.
    fn settle_rule(
        &mut self,
        rule: usize,
        how: Settle,
        now: Nanos,
        mut charged: Option<&IntCounter>,
    ) -> bool {
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
            let receipt = std::slice::from_mut(receipt);
            settle_with(&self.store, self.local, receipt, how, now, charged.take());
        }
        settled
    }

    /// Settles every receipt as `how` says.
    fn settle_all(&mut self, how: Settle, now: Nanos) {
        settle_with(&self.store, self.local, &mut self.receipts, how, now, None);
    }
}

/// `units` as a gauge counts them (a reservation fits a capacity, which
/// is at most `i64::MAX`).
fn gauged(units: u64) -> i64 {
    i64::try_from(units).unwrap_or(i64::MAX)
}

/// Settles `receipts` with the local store when the admission was decided
/// there, else with the store (neither waits); a charge counts in
/// `charged` once the one settling took it.
fn settle_with(
    store: &Store,
    local: bool,
    receipts: &mut [Receipt],
    how: Settle,
    now: Nanos,
    charged: Option<&IntCounter>,
) {
    if local {
        store.settle_locally(receipts, how, now);
        if let (Settle::Charge(units), Some(charged)) = (how, charged) {
            charged.inc_by(units);
        }
    } else {
        store.settle_counting(receipts, how, now, charged);
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
            let running = bill.charges_as_it_runs();
            if bill.was_forwarded() && !bill.response_began {
                // Forwarded, and dropped before any response: the client left.
                self.exchange_failed(Failure::ClientLeft);
            }
            let now = self.clock.now();
            if running {
                // What the exchange used until now, whoever ended it: the
                // time, and the bytes that passed (all of a body that
                // ended, what went before one cut off).
                self.charge_running(now);
            }
            // The body ended or broke, or the client left: what was read.
            self.charge_awaited(now);
            self.give_back_reservations(now);
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

    #[test]
    fn a_measure_charged_in_steps_rounds_once_as_its_total() {
        let weighted = |weight| Weighted {
            source: ChargeSource::ResponseBytes,
            weight,
        };
        // 10 GB a day in KB: 0.001 a byte.
        for (weight, steps, total) in [
            (0.001, &[500u64, 1_000, 1_500, 1_500, 70_001][..], 71),
            (1.0, &[0, 4_096, 65_536][..], 65_536),
            (0.3, &[1, 2, 3, 10][..], 3),
            (2.5, &[1, 3][..], 8),
            (0.0, &[1_000_000][..], 0),
        ] {
            let weighted = weighted(weight);
            let mut before = 0;
            let mut charged = 0;
            for &after in steps {
                charged += units_between(&weighted, before, after);
                before = after;
            }
            assert_eq!(charged, total, "{weight} × {steps:?}");
            assert_eq!(charged, weighted.whole_units(before));
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

    mod reservations {
        use super::super::*;
        use crate::config::Config;
        use crate::decider::{fill_asks, Applicable, Holds};
        use crate::metrics::Metrics;
        use crate::policy::Policy;
        use crate::proxy::ticker::Ticker;
        use crate::store::{Admission, Asks, MemoryStore};
        use proptest::prelude::*;

        const CAPACITY: u64 = 1_000;
        /// Inside one window of the rule's hour, so nothing refills.
        const AT: Nanos = 1_800_000_000 * crate::testing::SEC;

        /// A reserving rule's policy on `store`: the request reserves its
        /// `max_tokens`, and the answer's `x-cost` is its charge; a 503
        /// gives back what is left.
        fn policy(store: &Store) -> Policy {
            let text = format!(
                "[server]\nupstream = \"http://127.0.0.1:1\"\n\n[[rule]]\nname = \"tokens\"\n\
                 algorithm = \"fixed_window\"\nrate = \"{CAPACITY}/h\"\ncharge = \"header:x-cost\"\n\
                 reserve = {{ \"body:/max_tokens\" = 1 }}\nrefund_on = \"503\"\n"
            );
            let config = Config::from_toml(&text, "test.toml").expect("valid");
            Policy::compile(Arc::new(config), &Metrics::new(), store)
        }

        #[derive(Debug, Clone)]
        enum Step {
            /// A request reserving this many units is admitted, or refused.
            Admit(u64),
            /// The answer to the nth request still open: it charges its
            /// share (in thousandths) of the reservation, with a 200 or a
            /// refunding 503.
            Answer(usize, u64, bool),
            /// The answer to the nth request still open, a 200 or a
            /// refunding 503, says nothing of its cost (nor will a
            /// trailer).
            Unreported(usize, bool),
            /// The nth request still open, forwarded, is left by its
            /// client before any answer.
            Leave(usize),
            /// The nth request still open ends (answered or not).
            End(usize),
        }

        fn step() -> impl Strategy<Value = Step> {
            prop_oneof![
                (1..=400u64).prop_map(Step::Admit),
                (0..8usize, 0..=1_000u64, any::<bool>())
                    .prop_map(|(n, share, ok)| Step::Answer(n, share, ok)),
                (0..8usize, any::<bool>()).prop_map(|(n, ok)| Step::Unreported(n, ok)),
                (0..8usize).prop_map(Step::Leave),
                (0..8usize).prop_map(Step::End),
            ]
        }

        /// One request in flight, and what the model says of it.
        struct Open {
            settlement: Settlement,
            reserved: u64,
            /// What its answer charged, once answered.
            charged: Option<u64>,
            /// Its answer was a refunding 503.
            refunded: bool,
            /// Its answer came without its cost: it keeps its whole
            /// reservation (nothing is free by hanging up).
            unreported: bool,
        }

        impl Open {
            /// Units it holds in the bucket: its reservation until it ends,
            /// only its charge once a refund gave the rest back.
            fn holds(&self) -> u64 {
                match self.charged {
                    Some(charged) if self.refunded => charged,
                    _ => self.reserved,
                }
            }

            /// Units its reservation holds that no charge drew.
            fn unused(&self) -> u64 {
                match self.charged {
                    None => self.reserved,
                    Some(_) if self.refunded => 0,
                    // Drawn only when the request ends.
                    Some(_) if self.unreported => self.reserved,
                    Some(charged) => self.reserved - charged,
                }
            }

            /// What it was charged once it ended.
            fn spent(&self) -> u64 {
                self.charged.unwrap_or(0)
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(200))]
            #[test]
            fn reservations_never_overspend_and_settle_once(steps in proptest::collection::vec(step(), 1..80)) {
                let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
                let store = Arc::new(Store::Memory(MemoryStore::new(100)));
                let policy = policy(&store);
                let rule = &policy.rules[0];
                let billing = rule.billing.as_ref().expect("it bills");
                let ticker = Ticker::new(ProxyClock::default());
                let clock = ProxyClock::Runtime(crate::clock::RuntimeClock::new(AT));
                let ask = |cost| Applicable { rule, key: 7, limits: &rule.limits, cost };
                let balance = || {
                    let mut asks = Asks::default();
                    fill_asks(&mut asks, &[ask(1)], &[], Holds::AsRuled);
                    let mut decisions = Default::default();
                    runtime.block_on(store.peek(&asks, AT, &mut decisions)).unwrap();
                    decisions[0].state().remaining
                };
                let mut open: Vec<Open> = Vec::new();
                // What ended requests were charged, as the model keeps it.
                let mut spent = 0;
                for step in steps {
                    match step {
                        Step::Admit(reserve) => {
                            let mut asks = Asks::default();
                            fill_asks(&mut asks, &[ask(reserve)], &[], Holds::AsRuled);
                            let mut answer = Admission::default();
                            runtime.block_on(store.admit(&asks, AT, &mut answer)).unwrap();
                            let held: u64 = open.iter().map(Open::holds).sum();
                            let fits = spent + held + reserve <= CAPACITY;
                            prop_assert_eq!(answer.admitted(), fits);
                            if fits {
                                let mut settlement =
                                    Settlement::new(Arc::clone(&store), clock.clone(), false, answer.receipts);
                                settlement.bill(Bill::for_rules(std::iter::once(rule), &ticker));
                                settlement.passed();
                                open.push(Open { settlement, reserved: reserve, charged: None, refunded: false, unreported: false });
                            }
                        }
                        Step::Answer(n, share, ok) => {
                            let Some(one) = open.get_mut(n).filter(|o| o.charged.is_none()) else {
                                continue;
                            };
                            let cost = one.reserved * share / 1_000;
                            let mut headers = HeaderMap::new();
                            headers.insert("x-cost", cost.into());
                            let status = if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
                            one.settlement.response_began(status, &mut headers);
                            one.charged = Some(cost);
                            one.refunded = !ok;
                        }
                        Step::Unreported(n, ok) => {
                            let Some(one) = open.get_mut(n).filter(|o| o.charged.is_none()) else {
                                continue;
                            };
                            let status = if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
                            one.settlement.response_began(status, &mut HeaderMap::new());
                            // A refund gave everything back; else the
                            // whole reservation is kept.
                            one.charged = Some(if ok { one.reserved } else { 0 });
                            one.refunded = !ok;
                            one.unreported = true;
                        }
                        Step::Leave(n) => {
                            if open.get(n).is_some_and(|o| o.charged.is_none()) {
                                let mut one = open.remove(n);
                                one.settlement.forwarded(AT, RequestBytes::default);
                                // The usage never came: all of it is kept.
                                spent += one.reserved;
                                drop(one.settlement);
                            }
                        }
                        Step::End(n) => {
                            if n < open.len() {
                                let one = open.remove(n);
                                spent += one.spent();
                                drop(one.settlement);
                            }
                        }
                    }
                    let held: u64 = open.iter().map(Open::holds).sum();
                    let unused: u64 = open.iter().map(Open::unused).sum();
                    prop_assert_eq!(balance(), CAPACITY - spent - held);
                    prop_assert_eq!(billing.reserved.get(), unused as i64);
                }
                spent += open.iter().map(Open::spent).sum::<u64>();
                drop(open);
                prop_assert_eq!(billing.reserved.get(), 0);
                prop_assert_eq!(billing.overrun.get(), 0);
                prop_assert_eq!(billing.charged.get(), spent);
                prop_assert_eq!(balance(), CAPACITY - spent);
            }
        }
    }
}
