//! `GET /admin/buckets?rule=R&key=K` (and optionally `&tier=T`): the state
//! of every bucket caller K is held to on rule R, read through
//! [`crate::store::Store::peek`] — nothing is taken, nothing struck, so
//! looking never changes what the caller's next request gets. The key is
//! text, as `/admin/bans` and `/admin/spend` take it, hashed as the request
//! path hashes it.
//!
//! A hybrid store answers with this instance's view, and says how old it
//! is (`view.synced_ms_ago`); the other stores' answers are the store's.
//!
//! Each limit is peeked twice: at cost 0, which is the bucket as it is now
//! (`remaining` before any request), and at the cost one request of the rule
//! takes, which is what the next request would be told (its
//! `X-RateLimit-Remaining` if it passes, its wait if not). [`bucket_json`]
//! writes one limit's state; `POST /admin/explain` writes its buckets with
//! it too.

use http::StatusCode;
use serde_json::{json, Value};
use smallvec::SmallVec;

use super::budget::{millis, Balance, Target};
use super::{bad, json_response, Answer, RefusedCall};
use crate::clock::Nanos;
use crate::decider::StoreUnavailable;
use crate::key::KeyLabels;
use crate::limiter::{Decision, Limiter};
use crate::policy::{Limit, Rule};
use crate::proxy::Proxy;
use crate::store::{BucketKey, Store};

/// Answers one buckets call; see the module docs.
pub(super) async fn buckets(proxy: &Proxy, query: Option<&str>) -> Result<Answer, RefusedCall> {
    let param = |name| crate::key::query_value(query, name).map(crate::key::decode_query);
    let (Some(rule_name), Some(key)) = (param("rule"), param("key")) else {
        return Err(bad(
            "name the bucket: GET /admin/buckets?rule=RULE&key=KEY (optionally &tier=TIER; \
             percent-encode '|' in keys as %7C)",
        ));
    };
    let tier = param("tier");
    let policy = proxy.policy();
    let now = proxy.now();
    let target = Target::find(&policy, &rule_name, &key, tier.as_deref(), now)?;
    let rule = target.rule;
    let store = proxy.store();
    // As it is now, and as the next request of the rule would find it.
    let mut as_now = SmallVec::new();
    let mut next = SmallVec::new();
    // No request to read a query's cost from: the rule's own.
    let cost = request_cost(rule, rule.cost);
    let decider = proxy.decider();
    let peeked = async {
        decider
            .look(&target.asks(0, false), now, &mut as_now)
            .await?;
        decider
            .look(&target.asks(cost, false), now, &mut next)
            .await
    };
    peeked.await.map_err(store_failed)?;
    for (limit, next) in target.limits.iter().zip(next.iter_mut()) {
        *next = as_asked(limit, *next);
    }
    let ban = (!rule.shadow)
        .then(|| rule.bans.banned(target.key, now))
        .flatten();
    let buckets: Vec<Value> = target
        .limits
        .iter()
        .zip(as_now.iter().zip(&next))
        .map(|(limit, (as_now, next))| {
            let tracked = store.tracks(&limit.table, target.key);
            bucket_json(rule, cost, limit, *as_now, *next, tracked, now)
        })
        .collect();
    let balance = Balance::of(&next);
    let passes_after = passes_after(rule, target.limits, &next, &balance);
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "rule": &*rule.name,
            "key": policy.labels.show_typed(&rule.key, &key),
            "key_hash": key_hash(target.key),
            "limits_from": limits_from(rule, target.limits, &policy.labels),
            "banned": ban.map(ban_json),
            "buckets": buckets,
            "view": view_json(store, now),
            "next_request": next_request_json(ban, passes_after, &balance, cost),
        }),
    ))
}

/// A rule in delay mode holds what a peek refuses, when the wait fits:
/// when the next request would be held rather than refused, the longest
/// wait (`None` inside: a wait for a permit, of no known length).
fn passes_after(
    rule: &Rule,
    limits: &[Limit],
    next: &[Decision],
    balance: &Balance,
) -> Option<Option<u64>> {
    let holds: SmallVec<[Option<Held>; 2]> = limits
        .iter()
        .zip(next)
        .map(|(limit, next)| held(rule, limit, *next))
        .collect();
    (!balance.admits()
        && next
            .iter()
            .zip(&holds)
            .all(|(next, held)| next.is_allowed() || held.is_some()))
    .then(|| {
        holds
            .iter()
            .map(|held| match held {
                Some(Held::For(wait)) => Some(millis(*wait)),
                _ => None,
            })
            .max()
            .flatten()
    })
}

/// What the next request would be told: banned, held, or admitted or
/// refused by the balance.
fn next_request_json(
    ban: Option<Nanos>,
    passes_after: Option<Option<u64>>,
    balance: &Balance,
    cost: u64,
) -> Value {
    match ban {
        Some(left) => json!({"allowed": false, "banned": true, "retry_after_ms": millis(left)}),
        None if passes_after.is_some() => json!({
            "allowed": true,
            "held": true,
            "remaining": 0,
            "wait_ms": passes_after.flatten(),
        }),
        None => json!({
            "allowed": balance.admits(),
            "remaining": if balance.admits() {
                left_after(balance.remaining, cost)
            } else {
                0
            },
            "retry_after_ms": balance.retry_after.map(millis),
        }),
    }
}

/// Hybrid mode: the buckets shown are this instance's view, as of its
/// last sync (`null` for the other stores, whose answers are the store's).
pub(super) fn view_json(store: &Store, now: Nanos) -> Value {
    match store.sync_stats(now) {
        Some(sync) => json!({
            "local": true,
            "synced_ms_ago": sync.age.map(millis),
            "redis_failing": sync.failing,
        }),
        None => Value::Null,
    }
}

/// Units a request of `rule` that costs `cost` (the rule's `cost`, or its
/// query's with `cost = "graphql"`) asks of each limit (a concurrency rule:
/// one permit), as the request path asks them.
pub(super) fn request_cost(rule: &Rule, cost: u64) -> u64 {
    if rule.is_concurrency() {
        1
    } else {
        cost
    }
}

/// One limit's bucket: `tracked` as the store tells it (`None`: it
/// cannot), `as_now` peeked at cost 0, `next` at a request's
/// `cost` (a peek that admits reports the bucket before taking: the request
/// would leave `cost` fewer). `debt` (token buckets only, where the store's answer tells it
/// exactly) is the units owed beyond empty; in delay mode those units are
/// reservations of held requests, so they are reported as `held` instead.
/// A calendar window (`calendar`) adds the window `now` is in and the units
/// spent in it.
pub(super) fn bucket_json(
    rule: &Rule,
    cost: u64,
    limit: &Limit,
    as_now: Decision,
    next: Decision,
    tracked: Option<bool>,
    now: Nanos,
) -> Value {
    let capacity = match (limit.adaptive(), &limit.limiter) {
        // An adaptive rule's permits: the limit it learned (a tier's share).
        (Some(controller), Limiter::Concurrency(permits)) => controller.limit_for(permits.share),
        _ => limit.limiter.capacity(),
    };
    let state = as_now.state();
    let mut bucket = json!({
        "limit": limit.name,
        "capacity": capacity,
        "remaining": state.remaining,
        "reset_after_ms": millis(state.reset_after),
        "tracked": tracked,
    });
    match limit.period {
        Some(period) => {
            bucket["count"] = json!(limit.count);
            bucket["period_secs"] = json!(period.as_secs_f64());
            // A bucket no request touched looks the same whether the store
            // keeps it or not: full.
            bucket["full"] = json!(state.remaining == capacity && state.reset_after == 0);
            // At cost 0 only a bucket below empty refuses.
            bucket["in_debt"] = json!(!as_now.is_allowed() && capacity > 0);
            if let Limiter::TokenBucket(gcra) = &limit.limiter {
                let owed = gcra.queued(state.reset_after, 0);
                match rule.hold {
                    Some(_) => bucket["held"] = json!(owed.div_ceil(rule.cost.max(1))),
                    None => bucket["debt"] = json!(owed),
                }
            }
        }
        None => {
            bucket["permits_in_use"] = json!(capacity.saturating_sub(state.remaining));
        }
    }
    if let (Some(calendar), Limiter::FixedWindow(window)) = (limit.calendar(), &limit.limiter) {
        let (_, start, end) = window.window_at(now);
        bucket["window"] = json!({
            "calendar": calendar.zone(),
            "unit": calendar.unit().symbol(),
            "start": calendar.rfc3339(start),
            "end": calendar.rfc3339(end),
            "start_unix": start / 1_000_000_000,
            "end_unix": end / 1_000_000_000,
        });
        // What the window counts, up to its COUNT (`in_debt` tells more).
        bucket["spent"] = json!(capacity.saturating_sub(state.remaining));
    }
    bucket["next_request"] = decision_json(rule, cost, limit, next);
    bucket
}

/// What asking one limit for a request's cost decided: `allow` with what
/// is left after it, `hold` with the wait (a rule in delay mode reserves
/// the units when the wait fits its `max_delay`; a peek only says when they
/// would fit), `queue` (a delay-mode concurrency limit with no permit
/// free), or `deny` with the time until it would pass (`null`: never).
fn decision_json(rule: &Rule, cost: u64, limit: &Limit, decision: Decision) -> Value {
    match held(rule, limit, decision) {
        Some(Held::For(wait)) => {
            return json!({"decision": "hold", "remaining": 0, "wait_ms": millis(wait)})
        }
        Some(Held::ForPermit) => return json!({"decision": "queue", "remaining": 0}),
        None => {}
    }
    match decision {
        Decision::Allow(state) => {
            json!({"decision": "allow", "remaining": left_after(state.remaining, cost)})
        }
        Decision::Hold { state, wait } => {
            json!({"decision": "hold", "remaining": state.remaining, "wait_ms": millis(wait)})
        }
        Decision::Deny { retry_after, .. } => {
            json!({"decision": "deny", "remaining": 0, "retry_after_ms": retry_after.map(millis)})
        }
    }
}

/// How a request that a limit refuses now would be held instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    /// A rate in delay mode: reserved, passing after this wait.
    For(Nanos),
    /// A concurrency limit in delay mode: queued for a permit (how long
    /// depends on when one is returned).
    ForPermit,
}

/// Whether `decision`, peeked without holding, is a hold for a request of
/// a rule in delay mode: a refusal whose wait fits `max_delay` (the
/// `max_queue` bound is not judged from a peek).
pub(super) fn held(rule: &Rule, limit: &Limit, decision: Decision) -> Option<Held> {
    let hold = rule.hold?;
    match decision {
        Decision::Deny { .. } if limit.is_concurrency() => Some(Held::ForPermit),
        Decision::Deny {
            retry_after: Some(wait),
            ..
        } if wait <= hold.max_wait => Some(Held::For(wait)),
        _ => None,
    }
}

/// A peek's decision as asking would decide it: the store reports a
/// concurrency limit as it is (its free permits, always "allowed"); a
/// request asking it when none is free is refused (or queued in delay
/// mode), and when one frees up is not known (`retry_after` `None`).
pub(super) fn as_asked(limit: &Limit, decision: Decision) -> Decision {
    match decision {
        Decision::Allow(state) if limit.is_concurrency() && state.remaining == 0 => {
            Decision::Deny {
                state,
                retry_after: None,
            }
        }
        decision => decision,
    }
}

/// What a limit that admits a request of `cost` has left after it: its
/// `X-RateLimit-Remaining` (a peek reports the bucket before taking).
pub(super) fn left_after(remaining: u64, cost: u64) -> u64 {
    remaining.saturating_sub(cost)
}

/// Which of the rule's limits a caller is held to: `"rule"`, `"tier:NAME"`,
/// `"override:KEY"` (KEY as `labels` show it) or `"sunset"` (the retiring
/// rule's current step).
pub(super) fn limits_from(rule: &Rule, limits: &[Limit], labels: &KeyLabels) -> String {
    if rule.sunset.is_some() {
        return "sunset".into();
    }
    rule.variants
        .iter()
        .find(|variant| std::ptr::eq(variant.limits.as_ptr(), limits.as_ptr()))
        .map_or_else(
            || "rule".into(),
            |variant| variant.shown_label(&rule.key, labels),
        )
}

/// A bucket key as 16 hex digits: a JSON number would lose its low bits
/// in most JSON readers.
pub(super) fn key_hash(key: BucketKey) -> String {
    format!("{key:016x}")
}

/// A ban in force, `left` more to run.
pub(super) fn ban_json(left: Nanos) -> Value {
    json!({"remaining_secs": left.div_ceil(1_000_000_000), "retry_after_ms": millis(left)})
}

pub(super) fn store_failed(_: StoreUnavailable) -> RefusedCall {
    RefusedCall::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "the store failed; try again",
    )
}
