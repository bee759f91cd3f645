//! Delivering settlements to Redis (docs/multi-instance.md, "When Redis is
//! slow or away"): the request path hands each settlement over without
//! waiting (a lock-free channel), and one task per Redis store keeps them
//! in its [`Queue`] and sends them in rounds, until Redis takes each or it
//! is given up.
//!
//! A round sends up to [`ROUND`] settlements from the front of the queue:
//! one script call on one Redis; on a Cluster one call per slot, the slots'
//! calls at once. A call that fails (Redis slow, stopped, restarting,
//! failing over) leaves its settlements, and the later ones of its slot, in
//! front of the queue; the next round, after a pause growing from
//! [`FIRST_PAUSE`] to [`LAST_PAUSE`], sends them again. Each settlement
//! carries its number, which the script compares with the highest it
//! applied for this instance in that slot (a key Redis keeps for
//! `settle_retry_for` and a minute: [`super::slots`]), so a call sent again
//! after Redis ran it and its answer was lost applies nothing twice.
//!
//! Counted as it goes: `sluice_store_settlements_pending` (sent here and not
//! yet taken or given up), `sluice_store_settlements_dropped_total` (given
//! up: waited past `settle_retry_for`, pushed out of a full queue, or
//! refused by Redis, such as a key of the wrong type), every failed call in
//! `sluice_store_errors_total`, every call in `sluice_store_seconds`, and a
//! charge's units in its rule's `sluice_budget_charged_total` once taken.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use prometheus::{IntCounter, IntGauge};
use redis::cluster_routing::Slot;
use redis::Cmd;
use smallvec::SmallVec;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::link::Link;
use super::permit_queue::Waiters;
use super::script::{self, Answer};
use super::settlements::{Queue, Settlement};
use super::slots;
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::log_gate::LogGate;
use crate::store::admission::StoreError;

/// Settlements one round takes (a script holds Redis while it runs, so a
/// long backlog goes in calls of a few hundred microseconds).
pub const ROUND: usize = 256;

/// The pause after a round that failed, doubled after each failure...
pub const FIRST_PAUSE: Duration = Duration::from_millis(25);
/// ... up to this: the link's own probe interval, so a Redis back is
/// served within a probe and a pause.
pub const LAST_PAUSE: Duration = Duration::from_millis(250);

/// The series a settler counts in (docs/operations.md): resolved by the
/// proxy's metrics, handed to the store once.
#[derive(Debug, Clone)]
pub struct SettleSeries {
    /// `sluice_store_settlements_pending`.
    pub pending: IntGauge,
    /// `sluice_store_settlements_dropped_total`.
    pub dropped: IntCounter,
    /// `sluice_store_errors_total{backend,kind="unavailable"}`.
    pub unavailable: IntCounter,
    /// `sluice_store_errors_total{backend,kind="script"}`.
    pub script: IntCounter,
    /// `sluice_store_seconds{backend}`.
    pub seconds: crate::histogram::PerThreadHistogram,
}

/// What one round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// Nothing waited.
    Idle,
    /// Redis answered every call.
    Answered,
    /// A call failed: its settlements wait in front of the queue.
    Failed,
}

/// The settlements of one Redis store on their way.
#[derive(Debug)]
pub struct Settler {
    link: Link,
    prefix: Box<str>,
    /// This instance's name in its markers.
    instance: Box<str>,
    waiters: Arc<Waiters>,
    capacity: usize,
    retry_for: Duration,
    inbox: mpsc::UnboundedSender<Settlement>,
    /// The inbox's other end, until the task (or a test) takes it.
    outlet: Mutex<Option<mpsc::UnboundedReceiver<Settlement>>>,
    /// Settlements sent here and not yet taken or given up.
    waiting: AtomicUsize,
    /// Rings when some are done.
    done: Notify,
    series: OnceLock<SettleSeries>,
    /// Lines about settlements given up, at most ten a second.
    lines: LogGate,
    #[cfg(test)]
    pub faults: Arc<super::faults::Faults>,
}

impl Settler {
    /// A settler for the store on `link`, its keys under `prefix`, this
    /// instance named `instance`: at most `capacity` settlements wait, each
    /// for `retry_for`.
    pub fn new(
        link: Link,
        prefix: &str,
        instance: &str,
        waiters: Arc<Waiters>,
        (capacity, retry_for): (usize, Duration),
    ) -> Arc<Settler> {
        let (inbox, outlet) = mpsc::unbounded_channel();
        Arc::new(Settler {
            link,
            prefix: prefix.into(),
            instance: instance.into(),
            waiters,
            capacity,
            retry_for,
            inbox,
            outlet: Mutex::new(Some(outlet)),
            waiting: AtomicUsize::new(0),
            done: Notify::new(),
            series: OnceLock::new(),
            lines: LogGate::default(),
            #[cfg(test)]
            faults: Arc::default(),
        })
    }

    /// Counts in `series` from now on (once; later calls change nothing).
    pub fn count_with(&self, series: SettleSeries) {
        series.pending.set(self.waiting() as i64);
        let _ = self.series.set(series);
    }

    /// Hands `settlement` over, without waiting (the request path).
    #[inline]
    pub fn send(&self, settlement: Settlement) {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        if let Some(series) = self.series.get() {
            series.pending.inc();
        }
        // The outlet lives as long as the settler: the send cannot fail.
        let _ = self.inbox.send(settlement);
    }

    /// Settlements sent and not yet taken or given up.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Starts the task that delivers the settlements, on `clock` (nothing
    /// outside a runtime, or when started already).
    pub fn start(self: &Arc<Self>, clock: ProxyClock) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if let Some(outlet) = self.take_outlet() {
            runtime.spawn(deliver(Arc::downgrade(self), outlet, clock));
        }
    }

    /// An empty queue of this settler's bounds, for whoever delivers.
    pub fn queue(&self) -> Queue {
        Queue::new(self.capacity, self.retry_for.as_nanos() as Nanos)
    }

    /// The inbox's other end, for whoever delivers (the task; a test that
    /// drives rounds itself).
    pub fn take_outlet(&self) -> Option<mpsc::UnboundedReceiver<Settlement>> {
        self.outlet.lock().ok()?.take()
    }

    /// Waits until no settlement waits, `within` at most: how many still
    /// do then (at shutdown).
    pub async fn flush(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let done = self.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            let left = self.waiting();
            if left == 0 || tokio::time::timeout_at(deadline, done).await.is_err() {
                return self.waiting();
            }
        }
    }

    /// Moves what the inbox holds into `queue`, at `now`.
    pub fn receive_all(
        &self,
        outlet: &mut mpsc::UnboundedReceiver<Settlement>,
        queue: &mut Queue,
        now: Nanos,
    ) {
        while let Ok(settlement) = outlet.try_recv() {
            self.receive(queue, settlement, now);
        }
    }

    fn receive(&self, queue: &mut Queue, settlement: Settlement, now: Nanos) {
        if let Some(oldest) = queue.receive(settlement, now) {
            self.give_up(oldest, "the queue of settlements is full (max_keys)");
        }
    }

    /// One round at `now` (see the module docs).
    pub async fn round(&self, queue: &mut Queue, now: Nanos) -> Round {
        let (round, expired) = queue.take(now, ROUND);
        for settlement in expired {
            self.give_up(settlement, "Redis did not take it within settle_retry_for");
        }
        if round.is_empty() {
            return Round::Idle;
        }
        let slots = by_slot(round);
        let outcomes = join_all(slots.into_iter().map(|slot| self.deliver_slot(slot))).await;
        let mut unsent = Vec::new();
        for outcome in outcomes {
            outcome.taken.into_iter().for_each(|s| self.taken(s));
            for settlement in outcome.refused {
                self.give_up(settlement, "Redis refused it");
            }
            unsent.extend(outcome.unsent);
        }
        if unsent.is_empty() {
            return Round::Answered;
        }
        queue.put_back(unsent);
        Round::Failed
    }

    /// One slot's settlements, in order: a call per run of them settled at
    /// one instant (always one in production, where Redis' clock decides),
    /// until a call fails.
    async fn deliver_slot(&self, settlements: Vec<Settlement>) -> Outcome {
        let mut outcome = Outcome::default();
        let mut rest = settlements.into_iter().peekable();
        while let Some(first) = rest.next() {
            let now_us = first.now_us;
            let mut call = vec![first];
            while let Some(next) = rest.next_if(|next| next.now_us == now_us) {
                call.push(next);
            }
            let marker = slots::marker_key(&self.prefix, call[0].slot, "settled", &self.instance);
            let command = script::settle(
                self.link.script_hash(),
                now_us,
                self.marker_ms(),
                &marker,
                call.iter().map(|s| (s.seq, &s.entries[..])),
            );
            let started = Instant::now();
            let answer = self.run(command).await;
            if let Some(series) = self.series.get() {
                series.seconds.observe(started.elapsed().as_secs_f64());
            }
            match answer {
                Ok(answer) => {
                    let refused: SmallVec<[u64; 2]> = script::refused(&answer).collect();
                    for settlement in call {
                        if refused.contains(&settlement.seq) {
                            if let Some(series) = self.series.get() {
                                series.script.inc();
                            }
                            outcome.refused.push(settlement);
                        } else {
                            outcome.taken.push(settlement);
                        }
                    }
                }
                Err(error) => {
                    self.count_error(&error);
                    if error.is_transient() {
                        tracing::debug!(%error, "settlements not taken by Redis yet; retried");
                        outcome.unsent.extend(call);
                        outcome.unsent.extend(rest);
                        break;
                    }
                    // Redis answered with an error: sending it again
                    // would fail alike.
                    tracing::warn!(%error, "Redis refused a call of settlements");
                    outcome.refused.extend(call);
                }
            }
        }
        outcome
    }

    async fn run(&self, command: Cmd) -> Result<Answer, StoreError> {
        #[cfg(test)]
        return self.faults.run(&self.link, command).await;
        #[cfg(not(test))]
        self.link.run(command).await
    }

    /// How long Redis keeps a marker, in milliseconds.
    fn marker_ms(&self) -> u64 {
        slots::marker_ms(self.retry_for)
    }

    fn count_error(&self, error: &StoreError) {
        if let Some(series) = self.series.get() {
            match error {
                StoreError::Unavailable(_) => series.unavailable.inc(),
                StoreError::Script(_) => series.script.inc(),
            }
        }
    }

    /// Redis took `settlement`.
    fn taken(&self, mut settlement: Settlement) {
        if let Some((counter, units)) = &settlement.charged {
            counter.inc_by(*units);
        }
        for key in &settlement.wakes {
            self.waiters.wake(key);
        }
        self.finish(&mut settlement);
    }

    /// `settlement` will never be taken, for the reason `why`.
    fn give_up(&self, mut settlement: Settlement, why: &str) {
        if let Some(series) = self.series.get() {
            series.dropped.inc();
        }
        let second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as Nanos);
        if let Some(suppressed) = self.lines.let_through(second) {
            tracing::warn!(
                why,
                suppressed,
                "a settlement (a charge or a give-back) was given up: Redis will not have it"
            );
        }
        self.finish(&mut settlement);
    }

    fn finish(&self, settlement: &mut Settlement) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        if let Some(series) = self.series.get() {
            series.pending.dec();
        }
        if let Some(done) = settlement.done.take() {
            let _ = done.send(());
        }
        self.done.notify_waiters();
    }
}

impl Drop for Settler {
    fn drop(&mut self) {
        let left = self.waiting();
        if left > 0 {
            tracing::warn!(left, "settlements Redis had not taken are lost");
        }
    }
}

/// What became of one slot's settlements in a round.
#[derive(Default)]
struct Outcome {
    taken: Vec<Settlement>,
    /// Redis answered that it could not apply them.
    refused: Vec<Settlement>,
    /// Not sent, or sent without an answer: they wait for the next round.
    unsent: Vec<Settlement>,
}

/// `round`'s settlements by slot (one group on one Redis), each group in
/// order.
fn by_slot(round: Vec<Settlement>) -> Vec<Vec<Settlement>> {
    let mut groups: Vec<(Option<Slot>, Vec<Settlement>)> = Vec::new();
    for settlement in round {
        match groups.iter_mut().find(|(slot, _)| *slot == settlement.slot) {
            Some((_, group)) => group.push(settlement),
            None => groups.push((settlement.slot, vec![settlement])),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

/// The task: between rounds it waits for a settlement (when none waits) or
/// for the pause after a failed round to end, taking settlements in
/// meanwhile. It ends with the settler.
async fn deliver(
    settler: Weak<Settler>,
    mut outlet: mpsc::UnboundedReceiver<Settlement>,
    clock: ProxyClock,
) {
    let Some(mut queue) = settler.upgrade().map(|settler| settler.queue()) else {
        return;
    };
    let mut pause = FIRST_PAUSE;
    let mut retry_at: Option<Instant> = None;
    loop {
        let received = match retry_at {
            None if queue.is_empty() => Some(outlet.recv().await),
            None => None,
            Some(at) => tokio::select! {
                settlement = outlet.recv() => Some(settlement),
                () = tokio::time::sleep_until(at) => {
                    retry_at = None;
                    None
                }
            },
        };
        let Some(settler) = settler.upgrade() else {
            return;
        };
        match received {
            // Every sender is gone: so is the store.
            Some(None) => return,
            Some(Some(settlement)) => settler.receive(&mut queue, settlement, clock.now()),
            None => {}
        }
        settler.receive_all(&mut outlet, &mut queue, clock.now());
        if retry_at.is_some() {
            continue;
        }
        if settler.round(&mut queue, clock.now()).await == Round::Failed {
            retry_at = Some(Instant::now() + pause);
            pause = (pause * 2).min(LAST_PAUSE);
        } else {
            pause = FIRST_PAUSE;
        }
    }
}
