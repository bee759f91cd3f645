//! `POST /v1/check`: decision as a service. A check takes units exactly as
//! a proxied request of the rule would (its bans, its ban policy, the
//! caller's tier or override), on the same buckets, but never holds (delay
//! mode does not apply: the caller is told how long to wait instead). A
//! check of cost 0 only looks: it takes nothing and strikes nothing.
//!
//! The body is one check, answered with one verdict, or an array of at most
//! [`MAX_BATCH`] checks, answered with an array of verdicts in the same
//! order, each decided on its own (a bad check's slot holds its problem
//! document, the others are answered). A check is decided and counted
//! through the decider, as a proxied request is ([`crate::decider`]): the
//! same `on_error`, store metrics, `sluice_requests_total`, heavy hitters
//! and bans.
//!
//! This is a hot path for backends that ask per unit of work, so the
//! verdicts are written straight into the response bytes, the store's
//! answer is reused across a batch, and nothing is allocated per check
//! unless it fails.

use bytes::Bytes;
use http::StatusCode;
use smallvec::SmallVec;

use super::budget::{millis, Balance, Target};
use super::call::{Body, Call, COST};
use super::{respond, Answer, RefusedCall, JSON};
use crate::clock::Nanos;
use crate::decider::{
    self, fill_asks, Answered, Applicable, Caller, Decided, Decider, Holds, StoreUnavailable,
    Verdict,
};
use crate::key::KeyText;
use crate::log_gate::truncated;
use crate::policy::{Policy, Rule};
use crate::proxy::Proxy;
use crate::store::{Admission, Asks, Decisions, Outcome};

/// The largest `/v1/check` body read: a batch of [`MAX_BATCH`] checks of
/// long keys.
pub(super) const MAX_BODY: usize = 256 * 1024;

/// The most checks one batch may hold (413 above).
pub(super) const MAX_BATCH: usize = 1000;

/// Answers a check or a batch of them; see the module docs.
pub(super) async fn check(proxy: &Proxy, body: &[u8]) -> Result<Answer, RefusedCall> {
    let body = Body::parse(body, COST)?;
    let policy = proxy.policy();
    // One instant for the whole batch: its checks are decided together.
    let mut checker = Checker::new(proxy, &policy);
    let mut out = Vec::new();
    match body {
        Body::One(call) => {
            let verdict = checker.check(&call).await?;
            out.reserve(VERDICT_BYTES);
            verdict.write(&mut out);
        }
        Body::Many(calls) if calls.len() > MAX_BATCH => {
            return Err(RefusedCall::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "a batch holds at most {MAX_BATCH} checks, not {}; split it",
                    calls.len()
                ),
            ));
        }
        Body::Many(calls) => {
            out.reserve(2 + calls.len() * VERDICT_BYTES);
            out.push(b'[');
            for (index, call) in calls.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                match checker.check(call).await {
                    Ok(verdict) => verdict.write(&mut out),
                    Err(refusal) => out.extend_from_slice(&refusal.to_json()),
                }
            }
            out.push(b']');
        }
    }
    Ok(respond(StatusCode::OK, &JSON, Bytes::from(out)))
}

/// Room for one verdict's JSON (the longest, with every number at its
/// largest, is 134 bytes), so that answers are written without growing
/// their buffer.
const VERDICT_BYTES: usize = 136;

/// Decides checks against one policy snapshot at one instant, through the
/// decider, reusing the store's answer from check to check.
struct Checker<'a> {
    decider: Decider<'a>,
    policy: &'a Policy,
    now: Nanos,
    asks: Asks<'a>,
    admission: Admission,
    decisions: Decisions,
}

impl<'a> Checker<'a> {
    fn new(proxy: &'a Proxy, policy: &'a Policy) -> Checker<'a> {
        Checker {
            decider: proxy.decider(),
            policy,
            now: proxy.now(),
            asks: Asks::default(),
            admission: Admission::default(),
            decisions: SmallVec::new(),
        }
    }

    /// One check: its verdict, or why it cannot be decided.
    async fn check(&mut self, call: &Call<'_>) -> Result<CheckAnswer, RefusedCall> {
        let call = call.validate(COST)?;
        let target = Target::find(self.policy, call.rule, call.key, call.tier, self.now)?;
        let rule = target.rule;
        if rule.is_concurrency() {
            return Err(RefusedCall::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!(
                    "rule \"{}\" counts requests in flight ({}): a permit needs a request to \
                     hold it, so it cannot be checked",
                    rule.name,
                    rule.algorithm.name()
                ),
            ));
        }
        let applicable = Applicable {
            rule,
            key: target.key,
            limits: target.limits,
            cost: call.units.unwrap_or(rule.cost),
        };
        self.asks.rules.clear();
        self.asks.limits.clear();
        if applicable.cost == 0 {
            return self.look(applicable).await;
        }
        // A shadow rule is checked for what it would decide, as proxied
        // traffic asks it: without bans, and never refusing.
        let (enforced, shadowed) = match rule.shadow {
            false => (std::slice::from_ref(&applicable), &[][..]),
            true => (&[][..], std::slice::from_ref(&applicable)),
        };
        fill_asks(&mut self.asks, enforced, shadowed, Holds::Never);
        let answered = (self
            .decider
            .admit(&self.asks, self.now, &mut self.admission)
            .await)
            .map_err(store_failed)?;
        if answered == Answered::Unlimited {
            return Ok(CheckAnswer::unlimited());
        }
        let admission = &mut self.admission;
        // An admitted check keeps what it took: there is no response to
        // settle after.
        admission.receipts.clear();
        let verdicts: SmallVec<[Verdict<'_>; 2]> = (enforced.iter())
            .flat_map(|applicable| applicable.limits)
            .zip(&admission.decisions)
            .map(|(limit, decision)| Verdict {
                rule,
                limit,
                decision: *decision,
            })
            .collect();
        let shadow_limited = |_| !admission.shadow_limited.is_empty();
        let decided = Decided {
            enforced,
            shadowed,
            verdicts: &verdicts,
            outcome: admission.outcome,
            shadow_limited: &shadow_limited,
            bans_started: &admission.bans_started,
            at: admission.at,
        };
        decider::count(
            self.decider.store,
            self.policy,
            &decided,
            &Checked(call.key),
        );
        Ok(match admission.outcome {
            Outcome::Banned { left, .. } => CheckAnswer::banned(left),
            outcome => CheckAnswer {
                allowed: outcome == Outcome::Admitted && admission.shadow_limited.is_empty(),
                banned: false,
                balance: Some(Balance::of(&admission.decisions)),
            },
        })
    }

    /// A check of cost 0 only looks: bans are read, nothing is taken or
    /// struck, nothing counted.
    async fn look(&mut self, applicable: Applicable<'a>) -> Result<CheckAnswer, RefusedCall> {
        let Applicable { rule, key, .. } = applicable;
        if let Some(left) = (!rule.shadow)
            .then(|| rule.bans.banned(key, self.now))
            .flatten()
        {
            return Ok(CheckAnswer::banned(left));
        }
        fill_asks(&mut self.asks, &[applicable], &[], Holds::Never);
        let looked = self.decider.peek(&self.asks, self.now, &mut self.decisions);
        if looked.await.map_err(store_failed)? == Answered::Unlimited {
            return Ok(CheckAnswer::unlimited());
        }
        let balance = Balance::of(&self.decisions);
        Ok(CheckAnswer {
            allowed: balance.admits(),
            banned: false,
            balance: Some(balance),
        })
    }
}

/// A checked key, as the decider's counting knows its caller.
struct Checked<'a>(&'a str);

impl Caller for Checked<'_> {
    fn key_text(&self, _: usize, applicable: &Applicable<'_>) -> KeyText {
        KeyText::typed(self.0, applicable.rule.key.len())
    }

    /// A refused check's line, within its rule's lines a second.
    fn log_refusal(&self, rule: &Rule, banned: bool, now: Nanos, key: &dyn Fn() -> String) {
        let Some(suppressed) = rule.log_gate.let_through(now) else {
            return;
        };
        tracing::info!(
            rule = %rule.name,
            outcome = if banned { "banned" } else { "limited" },
            key = %truncated(&key()),
            suppressed,
            "check refused"
        );
    }
}

/// The store failed and `on_error = "deny"`.
fn store_failed(_: StoreUnavailable) -> RefusedCall {
    RefusedCall::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "the store failed and on_error = \"deny\"; nothing was taken, try again",
    )
}

/// The answer to one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CheckAnswer {
    allowed: bool,
    /// The caller is banned by the rule: refused without asking its buckets.
    banned: bool,
    /// `None` when the store failed and `on_error = "allow"`: nothing was
    /// asked, so nothing is known of the balance.
    balance: Option<Balance>,
}

impl CheckAnswer {
    /// A banned caller: nothing left until the ban ends in `left`.
    fn banned(left: Nanos) -> CheckAnswer {
        CheckAnswer {
            allowed: false,
            banned: true,
            balance: Some(Balance {
                remaining: 0,
                retry_after: Some(left),
                reset_after: left,
            }),
        }
    }

    /// The store failed and `on_error = "allow"`: allowed, unknown balance.
    fn unlimited() -> CheckAnswer {
        CheckAnswer {
            allowed: true,
            banned: false,
            balance: None,
        }
    }

    /// `{"allowed":..,"remaining":..,"retry_after_ms":..,"reset_after_ms":..}`,
    /// with `"banned":true` last when banned. `retry_after_ms` is 0 when
    /// allowed, `null` when the cost can never be admitted; `remaining` is
    /// `null` when nothing was asked (`on_error = "allow"`).
    fn write(&self, out: &mut Vec<u8>) {
        let mut numbers = itoa::Buffer::new();
        out.extend_from_slice(if self.allowed {
            b"{\"allowed\":true,\"remaining\":"
        } else {
            b"{\"allowed\":false,\"remaining\":"
        });
        let Some(balance) = self.balance else {
            out.extend_from_slice(b"null,\"retry_after_ms\":0,\"reset_after_ms\":0}");
            return;
        };
        out.extend_from_slice(numbers.format(balance.remaining).as_bytes());
        out.extend_from_slice(b",\"retry_after_ms\":");
        match balance.retry_after {
            Some(wait) => out.extend_from_slice(numbers.format(millis(wait)).as_bytes()),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"reset_after_ms\":");
        out.extend_from_slice(numbers.format(millis(balance.reset_after)).as_bytes());
        out.extend_from_slice(if self.banned {
            b",\"banned\":true}"
        } else {
            b"}"
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(verdict: CheckAnswer) -> serde_json::Value {
        let mut out = Vec::new();
        verdict.write(&mut out);
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn a_verdict_is_written_as_json_in_milliseconds() {
        let allowed = CheckAnswer {
            allowed: true,
            banned: false,
            balance: Some(Balance {
                remaining: 9,
                retry_after: Some(0),
                reset_after: 6_000_000_001,
            }),
        };
        assert_eq!(
            written(allowed),
            serde_json::json!({"allowed": true, "remaining": 9, "retry_after_ms": 0,
                               "reset_after_ms": 6001})
        );
        let never = CheckAnswer {
            allowed: false,
            banned: false,
            balance: Some(Balance {
                remaining: 0,
                retry_after: None,
                reset_after: 0,
            }),
        };
        assert_eq!(written(never)["retry_after_ms"], serde_json::Value::Null);
        assert_eq!(
            written(CheckAnswer::unlimited()),
            serde_json::json!({"allowed": true, "remaining": null, "retry_after_ms": 0,
                               "reset_after_ms": 0})
        );
        let banned = written(CheckAnswer::banned(2_500_000_000));
        assert_eq!(
            banned,
            serde_json::json!({"allowed": false, "remaining": 0, "retry_after_ms": 2500,
                               "reset_after_ms": 2500, "banned": true})
        );
    }
}
