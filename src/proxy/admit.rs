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

use std::cell::OnceCell;
use std::sync::Arc;
use std::time::Duration;

use http::Response;
use smallvec::SmallVec;

use super::bill::Bill;
use super::refusal::Refusal;
use super::refusal_log::{self, Refused};
use super::respond::{self, ProxyBody};
use super::ruling::Ruling;
use super::settle::{self, Settlement};
use super::standing::{stand, Applicability, Standing};
use super::ticker::Ticker;
use super::{AnswerWritten, Context};
use crate::clock::{Clock, Nanos, ProxyClock};
use crate::decider::{
    self, fill_asks, Answered, Applicable, Caller, Decided, Decider, Holds, StoreUnavailable,
    Verdict,
};
use crate::key::jwt::Claims;
use crate::key::{KeyText, RequestFacts};
use crate::limiter::Decision;
use crate::metrics::seconds;
use crate::policy::{Policy, Rule};
use crate::store::admission::Receipts;
use crate::store::{Asks, Outcome, QueuedPermit, Store, PERMIT_REFUSED, UNASKED};

/// What admission works with: the decider, and what wakes exchanges
/// that charge upstream time (`None` when no rule of the policy charges or
/// refunds: no bill is then looked for).
#[derive(Debug, Clone, Copy)]
pub struct Admitter<'a> {
    pub decider: Decider<'a>,
    pub ticker: Option<&'a Arc<Ticker>>,
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
            .decider
            .clock
            .now()
            // On this instance's clock: `decided_at` may be a shared
            // store's, which another machine keeps.
            .saturating_sub(cx.ruling.asked_at)
            .saturating_sub(cx.ruling.held);
        (admitter.decider.metrics.decision_seconds).observe(seconds(took));
    }
    conclude(cx, facts, decided)
}

/// What admission ruled (`decided`), counted, recorded and answered:
/// `Ok` when the request passes.
#[inline(always)]
fn conclude(
    cx: &mut Context<'_, '_>,
    facts: &RequestFacts<'_>,
    decided: Result<(), StoreUnavailable>,
) -> Result<(), AnswerWritten> {
    let policy = cx.policy;
    let admitter = cx.shared.admitter(policy);
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

/// A ban the head alone shows, answered before the body is read
/// (docs/operations.md, "Cheap refusals come first"): the first enforced rule that does not
/// read the body, applies to the request `facts` describe, and whose key
/// is banned here. Answered, counted and recorded as a ban found by the
/// store is: whether it was. A ban only Redis knows of yet is found by
/// the store once the body is read.
#[inline(never)]
pub(super) fn banned_before_body<'r>(
    cx: &mut Context<'_, '_>,
    facts: &mut RequestFacts<'r>,
    token_claims: &'r OnceCell<Option<Claims>>,
) -> bool {
    let (policy, now) = (cx.policy, cx.started);
    for rule in &policy.rules {
        if rule.shadow || rule.reads_body || !rule.bans.any(now) {
            continue;
        }
        let Standing::Applies { key, limits, cost } =
            stand(rule, facts, token_claims, policy, now, false)
        else {
            continue;
        };
        let Some(left) = rule.bans.banned(key, now) else {
            continue;
        };
        let enforced = &mut cx.applicable.enforced;
        enforced.push(Applicable {
            rule,
            key,
            limits,
            cost,
        });
        cx.ruling.outcome = Outcome::Banned {
            rule: enforced.len() - 1,
            left,
        };
        (cx.ruling.asked_at, cx.ruling.decided_at) = (now, now);
        return conclude(cx, facts, Ok(())).is_err();
    }
    false
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

/// Counts what the store ruled ([`decider::count`]), and answers a
/// request that may not pass into `response`: whether it may.
fn judge<'p>(
    admitter: Admitter<'_>,
    policy: &'p Policy,
    facts: &RequestFacts<'_>,
    applicable: &Applicability<'p>,
    ruling: &Ruling<'p>,
    response: &mut Response<ProxyBody>,
) -> bool {
    let enforced = &applicable.enforced[..];
    let shadowed = &applicable.shadowed[..];
    let would_limit = |index: usize| {
        let name: &str = &shadowed[index].rule.name;
        ruling.would_limit.iter().any(|n| std::ptr::eq(*n, name))
    };
    let decided = Decided {
        enforced,
        shadowed,
        verdicts: &ruling.verdicts,
        outcome: ruling.outcome,
        shadow_limited: &would_limit,
        bans_started: &ruling.bans_started,
        at: ruling.decided_at,
    };
    decider::count(
        admitter.decider.store,
        policy,
        &decided,
        &Request { policy, facts },
    );
    match ruling.outcome {
        Outcome::Admitted => return true,
        Outcome::Banned { rule, left } => {
            let Applicable { rule, limits, .. } = enforced[rule];
            respond::banned(response, rule, limits, left, policy.response.status)
        }
        Outcome::Limited => limited(policy, enforced, ruling, response),
    }
    if applicable.retiring.is_some() {
        respond::add_sunset_headers(response.headers_mut(), applicable.retiring);
    }
    false
}

/// A proxied request as the decider's counting knows its caller.
struct Request<'a, 'r> {
    policy: &'a Policy,
    facts: &'a RequestFacts<'r>,
}

impl Caller for Request<'_, '_> {
    fn key_text(&self, _: usize, applicable: &Applicable<'_>) -> KeyText {
        let rule = applicable.rule;
        (self.policy.keys).key_text_of(&rule.key, self.facts, applicable.key)
    }

    fn log_refusal(&self, rule: &Rule, banned: bool, now: Nanos, key: &dyn Fn() -> String) {
        let refused = if banned {
            Refused::Banned
        } else {
            Refused::Limited
        };
        let name = Some(&*rule.name);
        refusal_log::log(&rule.log_gate, now, name, refused, self.facts, key);
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
    let Decider { store, clock, .. } = admitter.decider;
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
        fill_asks(&mut asks, enforced, shadowed, Holds::AsRuled);
        let mut answer = crate::store::Admission::default();
        let decider = admitter.decider;
        let decided = decider.ask(&asks, now, &mut answer).await;
        let local = match decider.answered(decided, &asks, now, &mut answer)? {
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
    let Admitter { decider, ticker } = admitter;
    let Decider { store, clock, .. } = decider;
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
        if answer.shadow_limited.contains(&index) {
            ruling.would_limit.push(&applicable.rule.name);
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
    use crate::metrics::Metrics;
    use crate::policy::Policy;
    use crate::store::suite::FailingStore;
    use crate::store::{OnError, StoreError};

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
            decider: Decider {
                store,
                clock: &clock,
                on_error,
                metrics,
            },
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
