//! `POST /admin/spend` with `{"rule", "key", "amount"}` (and optionally
//! `"tier"`): a backend spends a caller's budget for work done outside a
//! request, on the buckets proxied traffic takes from. The units are taken
//! from every limit the caller is held to, unconditionally (into a debt if
//! need be, repaid at the limit's own rate before the caller's requests pass
//! again); bans are not consulted. The store is called through the decider
//! (timed in `sluice_store_seconds`, a failure counted in
//! `sluice_store_errors_total`), and a store that fails spends nothing
//! whatever `on_error` says: 503, try again.

use http::StatusCode;
use serde_json::json;
use smallvec::SmallVec;

use super::budget::{millis, Balance, Target};
use super::call::{Body, AMOUNT};
use super::{bad, json_response, Answer, RefusedCall};
use crate::config::AlgorithmKind;
use crate::policy::Rule;
use crate::proxy::Proxy;

/// Answers one spend call; see the module docs.
pub(super) async fn spend(proxy: &Proxy, body: &[u8]) -> Result<Answer, RefusedCall> {
    let Body::One(call) = Body::parse(body, AMOUNT)? else {
        return Err(bad(
            "spend one caller's budget per call: the body is one object, not an array",
        ));
    };
    let call = call.validate(AMOUNT)?;
    let Some(amount) = call.units else {
        return Err(bad(
            "\"amount\" is missing: the units to spend, a whole number, as in \
             {\"rule\": \"per-seller\", \"key\": \"seller-42\", \"amount\": 5}",
        ));
    };
    let policy = proxy.policy();
    let now = proxy.now();
    let target = Target::find(&policy, call.rule, call.key, call.tier, now)?;
    let rule = target.rule;
    spendable(rule)?;
    let decider = proxy.decider();
    let failed = |_| {
        RefusedCall::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the store failed; nothing was spent, try again",
        )
    };
    let mut after = SmallVec::new();
    if amount == 0 {
        // Spending nothing only reports the balance.
        decider.look(&target.asks(1, false), now, &mut after).await
    } else {
        decider
            .spend(&target.asks(amount, false), now, &mut after)
            .await
    }
    .map_err(failed)?;
    let mut balance = Balance::of(&after);
    if rule.cost != 1 {
        // `after` says when a request of cost 1 would pass; the rule's
        // requests cost more.
        let mut decisions = SmallVec::new();
        let asks = target.asks(rule.cost, false);
        decider
            .look(&asks, now, &mut decisions)
            .await
            .map_err(failed)?;
        balance.retry_after = Balance::of(&decisions).retry_after;
    }
    rule.counters.charged.inc_by(amount);
    let shown = policy.labels.show_typed(&rule.key, call.key);
    tracing::info!(rule = %rule.name, key = %shown, amount, "budget spent by a backend");
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "rule": call.rule,
            "key": shown,
            "spent": amount,
            "remaining": balance.remaining,
            "retry_after_ms": balance.retry_after.map(millis),
            "reset_after_ms": millis(balance.reset_after),
        }),
    ))
}

/// Whether `rule` has a budget that can carry a debt: 422 saying why not.
fn spendable(rule: &Rule) -> Result<(), RefusedCall> {
    match rule.algorithm {
        AlgorithmKind::TokenBucket | AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindow => {
            Ok(())
        }
        AlgorithmKind::Concurrency | AlgorithmKind::Adaptive => Err(unprocessable(format!(
            "rule \"{}\" is a{} {} rule: it counts requests in flight, and has no budget to \
                 spend",
            rule.name,
            if rule.algorithm == AlgorithmKind::Adaptive {
                "n"
            } else {
                ""
            },
            rule.algorithm.name()
        ))),
        AlgorithmKind::LeakyBucket | AlgorithmKind::SlidingLog => Err(unprocessable(format!(
            "rule \"{}\" uses {}, which cannot carry a debt; spending needs token_bucket, \
                 fixed_window or sliding_window",
            rule.name,
            rule.algorithm.name()
        ))),
    }
}

fn unprocessable(detail: String) -> RefusedCall {
    RefusedCall::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
}
