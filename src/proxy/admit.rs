//! Admission: one store call for everything the request asks, then the
//! hold when a rule in delay mode says the request must wait.
//!
//! 1. Every rate limit and concurrency permit of every enforced rule, their
//!    bans, and the shadow rules go to the store in one call
//!    ([`Store::admit`]), all or nothing. Delay-mode limits *reserve* their
//!    units at the first instant they fit, so held requests of a bucket
//!    pass in arrival order and the wait is known at once (too long → 429
//!    now); a delay-mode permit that is not free joins the key's queue.
//! 2. A store that fails is answered through `on_error` ([`OnError`]):
//!    decide with the local memory store, let the request through
//!    unlimited, or refuse it (503).
//! 3. The hold: wait on the proxy's clock for the latest reservation's
//!    instant and for any queued permit (at most `max_delay`).
//!
//! What a held request took, or anything it must settle after its response
//! (a permit, a deferred charge or refund: its [`Bill`]), is owned by a
//! [`Settlement`] from the moment the store answers: a client that goes
//! away while held drops this future, and the settlement gives every unit
//! and permit back (a cancelled reservation takes nothing from the bucket).
//! A request that passes at once with only rates taken, none of them
//! charging or refunding, keeps them and carries nothing further. The
//! queue-depth gauges are kept by a guard, so they return to zero whatever
//! happens.

use std::sync::Arc;
use std::time::Duration;

use http::Response;
use smallvec::SmallVec;

use super::bill::Bill;
use super::refusal::Refusal;
use super::respond::{self, ProxyBody, Verdict};
use super::ruling::Ruling;
use super::settle::{self, Settlement};
use super::standing::{Applicability, Applicable};
use super::tally;
use super::ticker::Ticker;
use super::{AnswerWritten, Context};
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::key::RequestFacts;
use crate::limiter::Decision;
use crate::metrics::{seconds, Metrics};
use crate::policy::{Limit, Policy, Rule};
use crate::store::admission::Receipts;
use crate::store::{
    Ask, Asks, OnError, Outcome, QueuedPermit, Store, StoreError, PERMIT_REFUSED, UNASKED,
};

/// What admission works with.
#[derive(Debug, Clone, Copy)]
pub struct Admitter<'a> {
    pub store: &'a Arc<Store>,
    /// Decisions are taken, and holds wait, on this clock.
    pub clock: &'a ProxyClock,
    pub on_error: OnError,
    pub metrics: &'a Metrics,
    /// Wakes exchanges that charge upstream time; `None` when no rule of
    /// the policy charges or refunds (no bill is then looked for).
    pub ticker: Option<&'a Arc<Ticker>>,
}

/// The store failed and `on_error = "deny"`: the request is answered 503
/// (a rate limit service call `UNAVAILABLE`).
#[derive(Debug)]
pub struct StoreUnavailable;

/// Who answered an admission, once `on_error` had its say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// The store.
    ByStore,
    /// The store failed and `on_error = "local"`: the local memory store.
    Locally,
    /// The store failed and `on_error = "allow"`: nobody; nothing is
    /// limited.
    Unlimited,
}

impl Admitter<'_> {
    /// What the store answered (`decided`) to `asks` at `now`, into
    /// `answer`. Every backend's call is timed
    /// (`sluice_store_seconds{backend}`), the memory store's too, so its
    /// series says how many calls it answered and how fast: from `now`
    /// (the asks are built in nanoseconds), so one more clock read per
    /// request. A failure is reported and goes through `on_error`. A plain
    /// function the caller calls once the store's future is done, so that
    /// it is inlined into the request's phases.
    #[inline(always)]
    pub fn answered(
        self,
        decided: Result<(), StoreError>,
        asks: &Asks<'_>,
        now: Nanos,
        answer: &mut crate::store::Admission,
    ) -> Result<Answered, StoreUnavailable> {
        let Admitter {
            store,
            clock,
            on_error,
            metrics,
            ..
        } = self;
        metrics.store_call(
            store.backend_name(),
            seconds(clock.now().saturating_sub(now)),
        );
        match decided {
            Ok(()) => {
                if metrics.store_recovered() {
                    tracing::info!("the store answers again; outage over");
                }
                Ok(Answered::ByStore)
            }
            Err(error) => {
                report_store_error(self, &error);
                match on_error {
                    OnError::Local => {
                        store.admit_locally(asks, now, answer);
                        Ok(Answered::Locally)
                    }
                    OnError::Allow => Ok(Answered::Unlimited),
                    OnError::Deny => Err(StoreUnavailable),
                }
            }
        }
    }
}

/// Admit, the request path's phase: decides the request the context's
/// applicable rules describe into its ruling and holds it if a rule says so
/// ([`decide`]), times and counts the decision, and answers a request that
/// may not pass (429, a ban, 503 when the store failed and
/// `on_error = "deny"`). The ruling is recorded either way.
pub async fn phase(
    cx: &mut Context<'_, '_>,
    facts: &RequestFacts<'_>,
) -> Result<(), AnswerWritten> {
    let policy = cx.policy;
    let admitter = cx.shared.admitter(policy);
    let Applicability {
        enforced, shadowed, ..
    } = &cx.applicable;
    let decided = decide(admitter, enforced, shadowed, cx.ruling).await;
    // A request no rule applies to was not decided: timing it would drag
    // the quantiles towards zero.
    if !(enforced.is_empty() && shadowed.is_empty()) {
        let took = admitter
            .clock
            .now()
            // On this instance's clock: `decided_at` may be a shared
            // store's, which another machine keeps.
            .saturating_sub(cx.ruling.asked_at)
            .saturating_sub(cx.ruling.held);
        admitter.metrics.decision_seconds.observe(seconds(took));
    }
    let admitted = match decided {
        Ok(()) => judge(
            admitter,
            policy,
            facts,
            cx.applicable,
            cx.ruling,
            cx.response,
        ),
        Err(StoreUnavailable) => {
            respond::refusal(cx.response, Refusal::StoreUnavailable, None);
            false
        }
    };
    cx.note_ruled(facts, admitted);
    if admitted {
        return Ok(());
    }
    if policy.variable_costs {
        respond::add_cost(cx.response, policy, &cx.applicable.enforced);
    }
    if policy.reads_calls {
        answer_calls(cx, facts);
    }
    Err(AnswerWritten)
}

/// A limited request read as JSON-RPC, refused by a rule keyed on calls
/// or not, is answered in JSON-RPC (`respond/jsonrpc.rs`).
#[cold]
#[inline(never)]
fn answer_calls(cx: &mut Context<'_, '_>, facts: &RequestFacts<'_>) {
    let enforced = &cx.applicable.enforced;
    let refusing = match cx.ruling.outcome {
        Outcome::Admitted => return,
        Outcome::Banned { rule, .. } => enforced[rule].rule,
        Outcome::Limited => match cx.ruling.verdicts.iter().find(|v| !v.decision.is_allowed()) {
            // An adaptive rule's 503 says the upstream is saturated, which
            // is no call's fault.
            Some(verdict) if verdict.limit.adaptive().is_none() => verdict.rule,
            _ => return,
        },
    };
    let Some(calls) = facts.body.map(crate::key::body::BodyFacts::calls) else {
        return;
    };
    if enforced.iter().any(|one| one.rule.per_call) && calls.any() {
        respond::jsonrpc::answer(cx.response, calls, &refusing.name, &cx.id);
    }
}

/// Counts what the store ruled, and answers a request that may not pass
/// into `response`: whether it may.
fn judge<'p>(
    admitter: Admitter<'_>,
    policy: &'p Policy,
    facts: &RequestFacts<'_>,
    applicable: &Applicability<'p>,
    ruling: &Ruling<'p>,
    response: &mut Response<ProxyBody>,
) -> bool {
    let enforced = &applicable.enforced[..];
    tally::count_hitters(policy, facts, enforced, &applicable.shadowed, ruling);
    match ruling.outcome {
        Outcome::Admitted => {
            tally::count_outcomes(&ruling.verdicts);
            return true;
        }
        Outcome::Banned { rule, left } => {
            banned(admitter, policy, facts, enforced[rule], left, response);
        }
        Outcome::Limited => {
            tally::count_outcomes(&ruling.verdicts);
            bans_started(admitter.store, policy, facts, enforced, ruling);
            limited(policy, enforced, ruling, response);
        }
    }
    if applicable.retiring.is_some() {
        respond::add_sunset_headers(response.headers_mut(), applicable.retiring);
    }
    false
}

/// The answer to a caller banned by `applicable`'s rule for `left` more:
/// counted, and named for the fleet's listing when another instance
/// started the ban.
fn banned(
    admitter: Admitter<'_>,
    policy: &Policy,
    facts: &RequestFacts<'_>,
    applicable: Applicable<'_>,
    left: Nanos,
    response: &mut Response<ProxyBody>,
) {
    let Applicable {
        rule, limits, key, ..
    } = applicable;
    let store = admitter.store;
    if store.is_shared() && rule.bans.unnamed(key) {
        // Learned from Redis, where another instance's strikes started
        // it: named for the fleet's listing, once here.
        let text = policy.keys.key_text_of(&rule.key, facts, key);
        store.ban_named(&rule.name, key, &policy.labels.redacted(&rule.key, &text));
        rule.bans.name(key, text);
    }
    rule.counters.limited.inc();
    rule.counters.banned.inc();
    respond::banned(response, rule, limits, left, policy.response.status)
}

/// Starts the bans the limited request's strikes earned.
fn bans_started(
    store: &Store,
    policy: &Policy,
    facts: &RequestFacts<'_>,
    enforced: &[Applicable<'_>],
    ruling: &Ruling<'_>,
) {
    for &index in &ruling.bans_started {
        let Applicable { rule, key, .. } = enforced[index];
        let text = policy.keys.key_text_of(&rule.key, facts, key);
        if let (true, Some(ban)) = (store.is_shared(), rule.ban) {
            let shown = policy.labels.redacted(&rule.key, &text);
            store.ban_started(&rule.name, key, ban.duration, &shown);
        }
        rule.ban_started(key, text, &policy.labels);
    }
}

/// The 429 of a limited request: one beyond a limit's capacity, when its
/// own cost (GraphQL, reserved) is, or the usual.
fn limited(
    policy: &Policy,
    enforced: &[Applicable<'_>],
    ruling: &Ruling<'_>,
    response: &mut Response<ProxyBody>,
) {
    let decided_at = Duration::from_nanos(ruling.decided_at);
    // Only a policy with costs of a request's own (GraphQL, reserved)
    // looks: any other refusal pays one test for them.
    let beyond = if policy.variable_costs {
        beyond_capacity(enforced, &ruling.verdicts)
    } else {
        None
    };
    match beyond {
        Some(cost) => {
            respond::beyond_capacity(response, policy, &ruling.verdicts, decided_at, cost)
        }
        None => respond::limited(response, policy, &ruling.verdicts, decided_at),
    }
}

/// Decides into `ruling` (a fresh [`Ruling::default`]), and holds the
/// request if needed; see the module docs.
async fn decide<'p>(
    admitter: Admitter<'_>,
    enforced: &[Applicable<'p>],
    shadowed: &[Applicable<'p>],
    ruling: &mut Ruling<'p>,
) -> Result<(), StoreUnavailable> {
    let Admitter { store, clock, .. } = admitter;
    let now = clock.now();
    ruling.asked_at = now;
    ruling.decided_at = now;
    if enforced.is_empty() && shadowed.is_empty() {
        // No rule applies: nothing to ask, and a store that is down has no
        // say (`on_error` is about limits, not about unlimited routes).
        return Ok(());
    }
    for applicable in enforced {
        ruling
            .verdicts
            .extend(applicable.limits.iter().map(|limit| Verdict {
                rule: applicable.rule,
                limit,
                decision: UNASKED,
            }));
    }
    // The asks and the store's answer live only in this block: the hold
    // that may follow carries as little as possible.
    let mut hold = {
        let mut asks = Asks::default();
        fill_asks(&mut asks, enforced, shadowed);
        let mut answer = crate::store::Admission::default();
        let decided = admitter.store.admit(&asks, now, &mut answer).await;
        let local = match admitter.answered(decided, &asks, now, &mut answer)? {
            Answered::ByStore => false,
            Answered::Locally => true,
            Answered::Unlimited => {
                ruling.unlimited = true;
                return Ok(());
            }
        };
        ruling.locally = local;
        take_answer(&mut answer, ruling, admitter, local, enforced, shadowed)
    };
    match &mut hold {
        Some(hold) if hold.wait > 0 || hold.queued.is_some() => {
            hold_until_passing(hold, ruling, store, clock).await;
        }
        // Passes at once, with something to settle after the response.
        Some(hold) => pass(hold, ruling),
        None => {}
    }
    Ok(())
}

/// Counts a failed store call and logs it: an outage when it starts, not
/// once per request (it passes on its own); an error the store answered
/// with (its script's, an answer it should not give) each time, at most
/// ten lines a second, since it will not pass: someone must look, and it
/// may be one key's among good answers.
fn report_store_error(admitter: Admitter<'_>, error: &StoreError) {
    let Admitter {
        store,
        clock,
        on_error,
        metrics,
        ..
    } = admitter;
    let outage = error.is_transient();
    if metrics.store_failed(store.backend_name(), error.kind(), outage) {
        tracing::warn!(%error, ?on_error, "the store failed a decision; on_error decides until it answers");
    } else if !outage {
        if let Some(suppressed) = metrics.store_error_line(clock.now()) {
            tracing::error!(%error, ?on_error, suppressed, "the store answered a decision with an error that retrying will not fix (a bug or a misconfiguration); on_error decided");
        }
    }
}

/// What an admitted request waits for before it passes.
struct Hold {
    /// Taken by [`hold_until_passing`] once the request passed; dropped
    /// with the hold, giving everything back, if it was refused.
    settlement: Option<Box<Settlement>>,
    /// How long its rates hold it.
    wait: Nanos,
    /// A permit it queues for.
    queued: Option<Box<QueuedPermit>>,
}

/// Copies the store's answer into `ruling` (decisions, counters, shadow
/// rules) and returns what the admitted request must wait for and settle;
/// `None` when it was refused, or passes at once with nothing to settle
/// after the response (its receipts are kept: nothing to do).
fn take_answer<'p>(
    answer: &mut crate::store::Admission,
    ruling: &mut Ruling<'p>,
    admitter: Admitter<'_>,
    local: bool,
    enforced: &[Applicable<'p>],
    shadowed: &[Applicable<'p>],
) -> Option<Hold> {
    let Admitter {
        store,
        clock,
        ticker,
        ..
    } = admitter;
    ruling.outcome = answer.outcome;
    ruling.decided_at = answer.at;
    ruling.bans_started = std::mem::take(&mut answer.bans_started);
    let mut wait = 0;
    for (verdict, decision) in ruling.verdicts.iter_mut().zip(&answer.decisions) {
        verdict.decision = *decision;
        wait = wait.max(decision.wait());
    }
    if answer.outcome != Outcome::Admitted {
        return None;
    }
    // Shadow rules follow the enforced ones in the store's rule indexes.
    for (index, applicable) in (enforced.len()..).zip(shadowed) {
        let rule = applicable.rule;
        if answer.shadow_limited.contains(&index) {
            rule.counters.shadow_limited.inc();
            ruling.would_limit.push(&rule.name);
            tracing::debug!(rule = %rule.name, "shadow rule would have limited a request");
        } else {
            rule.counters.allowed.inc();
        }
    }
    let queued = answer.queued.take();
    // Only a policy with charging or refunding rules looks for a bill.
    let bill = ticker.and_then(|ticker| {
        let rules = enforced.iter().chain(shadowed).map(|a| a.rule);
        Bill::for_rules(rules, ticker)
    });
    if wait == 0
        && queued.is_none()
        && bill.is_none()
        && !settle::needed_after_response(&answer.receipts)
    {
        return None;
    }
    // Boxed once, here, and filled in place: it moves with the request and
    // rides on its body.
    let mut settlement = Box::new(Settlement::new(
        Arc::clone(store),
        clock.clone(),
        local,
        Receipts::new(),
    ));
    settlement.take_receipts(&mut answer.receipts);
    settlement.bill(bill);
    Some(Hold {
        settlement: Some(settlement),
        wait,
        queued,
    })
}

/// Holds an admitted request until the latest reservation's instant and
/// until a queued permit arrives, then passes it. A permit that does not
/// come within `max_delay` refuses the request, giving back everything it
/// took.
async fn hold_until_passing(
    hold: &mut Hold,
    ruling: &mut Ruling<'_>,
    store: &Store,
    clock: &ProxyClock,
) {
    let at = ruling.decided_at;
    let holding = HoldGauges::new(&ruling.verdicts, clock, at);
    if let Some(queued) = hold.queued.take() {
        let slot = queued_slot(&ruling.verdicts, &queued);
        match wait_for_permit(store, clock, queued, at).await {
            Some(receipt) => {
                if let Some(settlement) = &mut hold.settlement {
                    settlement.push(receipt);
                }
            }
            None => {
                // No permit within `max_delay`: refused, and everything
                // taken is given back when `settlement` drops.
                if let Some(slot) = slot {
                    ruling.verdicts[slot].decision = PERMIT_REFUSED;
                }
                ruling.outcome = Outcome::Limited;
                return;
            }
        }
    }
    clock.sleep_until(at + hold.wait).await;
    drop(holding);
    ruling.held = clock.now().saturating_sub(at);
    pass(hold, ruling);
}

/// The request passes: its settlement (if anything is left to settle after
/// the response) goes with it.
fn pass(hold: &mut Hold, ruling: &mut Ruling<'_>) {
    if let Some(mut settlement) = hold.settlement.take() {
        settlement.passed();
        if settlement.needed_after_passing() {
            ruling.settlement = Some(settlement);
        }
    }
}

/// Everything the request asks of the store: the enforced rules (with
/// their bans) in file order, then the shadow rules.
pub fn fill_asks<'p>(
    asks: &mut Asks<'p>,
    enforced: &[Applicable<'p>],
    shadowed: &[Applicable<'p>],
) {
    for applicable in enforced {
        let rule = applicable.rule;
        asks.push_rule(
            applicable.key,
            false,
            Some((&*rule.bans, rule.ban.as_ref())),
            applicable.limits.iter().map(|limit| ask(applicable, limit)),
        );
    }
    for applicable in shadowed {
        asks.push_rule(
            applicable.key,
            true,
            None,
            applicable.limits.iter().map(|limit| ask(applicable, limit)),
        );
    }
}

fn ask<'p>(applicable: &Applicable<'p>, limit: &'p Limit) -> Ask<'p> {
    let rule = applicable.rule;
    Ask {
        table: &limit.table,
        key: applicable.key,
        limiter: &limit.limiter,
        cost: if rule.is_concurrency() {
            1
        } else if rule.variable_cost {
            variable_ask(applicable.cost, &limit.limiter)
        } else {
            applicable.cost
        },
        // Shadow rules never hold: the store asks them now or never.
        hold: rule.hold,
    }
}

/// The cost of the request, when the first rule that refused it takes a
/// cost of the request's own (a GraphQL query's, a reservation) larger
/// than the refusing limit can ever hold: the refusal says so (waiting
/// would not help).
#[inline(never)]
fn beyond_capacity(enforced: &[Applicable<'_>], verdicts: &[Verdict<'_>]) -> Option<u64> {
    let refused = verdicts.iter().find(|v| !v.decision.is_allowed())?;
    if !refused.rule.variable_cost {
        return None;
    }
    let applicable = enforced
        .iter()
        .find(|one| std::ptr::eq(one.rule, refused.rule))?;
    let fits = verdicts
        .iter()
        .filter(|v| std::ptr::eq(v.rule, refused.rule))
        .all(|v| applicable.cost <= v.limit.limiter.capacity() || v.limit.limiter.is_leaky());
    (!fits).then_some(applicable.cost)
}

/// What a request's own cost asks of `limiter`: the cost, or one unit past the
/// capacity when it is larger (it never fits either way, and a limiter's
/// arithmetic is then never asked about a cost near `u64::MAX`). A leaky
/// bucket passes any cost in time, and its arithmetic saturates.
fn variable_ask(cost: u64, limiter: &crate::limiter::Limiter) -> u64 {
    if limiter.is_leaky() {
        cost
    } else {
        cost.min(limiter.capacity().saturating_add(1))
    }
}

/// The verdict of the concurrency limit a permit is queued for.
fn queued_slot(verdicts: &[Verdict<'_>], queued: &QueuedPermit) -> Option<usize> {
    verdicts.iter().position(|verdict| {
        verdict.limit.table.same(&queued.receipt.table) && verdict.rule.is_concurrency()
    })
}

/// Waits for a queued permit on the proxy's clock, at most its `max_wait`
/// from `since`. The permit's receipt, or `None` when none came in time.
async fn wait_for_permit(
    store: &Store,
    clock: &ProxyClock,
    queued: Box<QueuedPermit>,
    since: Nanos,
) -> Option<crate::store::Receipt> {
    let mut waiting = QueuedGuard {
        store,
        queued: Some(queued),
    };
    let deadline = since.saturating_add(waiting.queued.as_ref()?.max_wait);
    let arrived = {
        let queued = waiting.queued.as_mut()?;
        tokio::select! {
            handed = store.permit_arrives(queued) => handed,
            () = clock.sleep_until(deadline) => false,
        }
    };
    let queued = waiting.queued.take()?;
    // Timed out: leave the queue, unless a permit arrived meanwhile (then
    // it is ours).
    (arrived || !store.leave_queue(&queued)).then_some(queued.receipt)
}

/// A request waiting in a permit queue. If the wait is abandoned (the client
/// left and the future was dropped) it leaves the queue, and a permit that
/// was handed to it meanwhile is passed on.
struct QueuedGuard<'a> {
    store: &'a Store,
    queued: Option<Box<QueuedPermit>>,
}

impl Drop for QueuedGuard<'_> {
    fn drop(&mut self) {
        if let Some(mut queued) = self.queued.take() {
            self.store.abandon_queue(&mut queued);
        }
    }
}

/// The queue-depth gauge of every rule holding the request, for as long as
/// it is held; records the hold in `sluice_delay_seconds` when it ends.
pub(super) struct HoldGauges<'a, 'p> {
    rules: SmallVec<[&'p Rule; 2]>,
    clock: &'a ProxyClock,
    since: Nanos,
}

impl<'a, 'p> HoldGauges<'a, 'p> {
    pub(super) fn new(
        verdicts: &[Verdict<'p>],
        clock: &'a ProxyClock,
        since: Nanos,
    ) -> HoldGauges<'a, 'p> {
        let mut rules: SmallVec<[&'p Rule; 2]> = SmallVec::new();
        for verdict in verdicts {
            // A reservation for later, or a queued permit.
            let holds = matches!(verdict.decision, Decision::Hold { .. });
            if holds && !rules.iter().any(|rule| std::ptr::eq(*rule, verdict.rule)) {
                verdict.rule.counters.queue_depth.inc();
                rules.push(verdict.rule);
            }
        }
        HoldGauges {
            rules,
            clock,
            since,
        }
    }
}

impl Drop for HoldGauges<'_, '_> {
    fn drop(&mut self) {
        let held = seconds(self.clock.now().saturating_sub(self.since));
        for rule in &self.rules {
            rule.counters.queue_depth.dec();
            rule.counters.delay_seconds.observe(held);
        }
    }
}

#[cfg(test)]
mod tests {
    //! `on_error` with a store that fails on demand.

    use super::*;
    use crate::config::Config;
    use crate::policy::Policy;
    use crate::store::suite::FailingStore;
    use crate::store::StoreError;

    const NOW: Nanos = 1_800_000_000_000_000_000;

    fn setup() -> (Arc<Store>, Policy, Metrics) {
        let text = "[server]\nupstream = \"http://127.0.0.1:1\"\n\
                    [[rule]]\nname = \"per-ip\"\nrate = \"1/m\"\n";
        let config = Config::from_toml(text, "test.toml").unwrap_or_else(|e| panic!("{e}"));
        let store = Store::Failing(FailingStore::new(100));
        let metrics = Metrics::new();
        let policy = Policy::compile(Arc::new(config), &metrics, &store);
        (Arc::new(store), policy, metrics)
    }

    fn failing(store: &Store, fail: bool) {
        let Store::Failing(store) = store else {
            unreachable!("a failing store")
        };
        store.set_failing(fail);
    }

    async fn ask<'p>(
        store: &Arc<Store>,
        policy: &'p Policy,
        metrics: &Metrics,
        on_error: OnError,
    ) -> Result<Ruling<'p>, StoreUnavailable> {
        let rule = &policy.rules[0];
        let enforced = [Applicable {
            rule,
            key: 42,
            limits: &rule.limits,
            cost: rule.cost,
        }];
        // Paused time (the tests' `start_paused`): every decision at `NOW`.
        let clock = ProxyClock::Runtime(crate::clock::RuntimeClock::new(NOW));
        let mut ruling = Ruling::default();
        let admitter = Admitter {
            store,
            clock: &clock,
            on_error,
            metrics,
            ticker: None,
        };
        decide(admitter, &enforced, &[], &mut ruling)
            .await
            .map(|()| ruling)
    }

    fn fallback_gauge(metrics: &Metrics, store: &Store) -> bool {
        metrics.set_store_state(store.backend_name(), &StoreError::KINDS, 0, 0);
        let text = metrics.render();
        assert!(
            text.contains("sluice_store_errors_total{backend=\"failing\",kind=\"unavailable\"}")
        );
        text.lines()
            .any(|line| line == "sluice_store_fallback_active 1")
    }

    #[tokio::test(start_paused = true)]
    async fn local_decides_with_the_memory_store_while_the_store_fails() {
        let (store, policy, metrics) = setup();
        failing(&store, true);
        let first = ask(&store, &policy, &metrics, OnError::Local).await;
        assert_eq!(first.as_ref().unwrap().outcome, Outcome::Admitted);
        assert!(!first.unwrap().unlimited);
        // Still limited: 1/m, decided locally.
        let second = ask(&store, &policy, &metrics, OnError::Local).await;
        assert_eq!(second.unwrap().outcome, Outcome::Limited);
        assert!(fallback_gauge(&metrics, &store));
        // Back: the fallback ends with the first successful call.
        failing(&store, false);
        let _ = ask(&store, &policy, &metrics, OnError::Local).await;
        assert!(!fallback_gauge(&metrics, &store));
    }

    #[tokio::test(start_paused = true)]
    async fn allow_forwards_unlimited_and_deny_refuses() {
        let (store, policy, metrics) = setup();
        failing(&store, true);
        for _ in 0..3 {
            let allowed = ask(&store, &policy, &metrics, OnError::Allow)
                .await
                .unwrap();
            assert_eq!(allowed.outcome, Outcome::Admitted);
            assert!(allowed.unlimited && allowed.settlement.is_none());
        }
        assert!(ask(&store, &policy, &metrics, OnError::Deny).await.is_err());
        assert!(fallback_gauge(&metrics, &store));
        // Nothing was taken meanwhile: the bucket is full once back.
        failing(&store, false);
        let ruling = ask(&store, &policy, &metrics, OnError::Deny).await.unwrap();
        assert_eq!(ruling.outcome, Outcome::Admitted);
        assert!(!ruling.unlimited);
    }

    #[tokio::test]
    async fn a_script_error_is_counted_apart_and_still_answered_per_on_error() {
        let (store, policy, metrics) = setup();
        let Store::Failing(failing) = &*store else {
            unreachable!("a failing store")
        };
        let script = StoreError::Script("ERR user_script:1: a bug".into());
        failing.fail_with(Some(script));
        let local = ask(&store, &policy, &metrics, OnError::Local).await;
        assert_eq!(local.unwrap().outcome, Outcome::Admitted);
        let allowed = ask(&store, &policy, &metrics, OnError::Allow).await;
        assert!(allowed.unwrap().unlimited);
        assert!(ask(&store, &policy, &metrics, OnError::Deny).await.is_err());
        assert!(fallback_gauge(&metrics, &store));
        let text = metrics.render();
        let errors =
            |kind| format!("sluice_store_errors_total{{backend=\"failing\",kind=\"{kind}\"}}");
        assert!(text.contains(&format!("{} 3", errors("script"))), "{text}");
        assert!(
            text.contains(&format!("{} 0", errors("unavailable"))),
            "{text}"
        );
        // An answered error starts no outage; an outage is reported when
        // it starts, and again only after the store answered.
        assert!(!metrics.store_failed("failing", "script", false));
        assert!(metrics.store_failed("failing", "unavailable", true));
        assert!(!metrics.store_failed("failing", "unavailable", true));
        failing.fail_with(None);
        let _ = ask(&store, &policy, &metrics, OnError::Local).await;
        assert!(!fallback_gauge(&metrics, &store));
        assert!(metrics.store_failed("failing", "unavailable", true));
    }
}
