//! `POST /v1/check`: decision as a service. A check takes units exactly as
//! a proxied request of the rule would (its bans, its ban policy, the
//! caller's tier or override), on the same buckets, but never holds (delay
//! mode does not apply: the caller is told how long to wait instead). A
//! check of cost 0 only looks: it takes nothing and strikes nothing.
//!
//! The body is one check, answered with one verdict, or an array of at most
//! [`MAX_BATCH`] checks, answered with an array of verdicts in the same
//! order, each decided on its own (a bad check's slot holds its problem
//! document, the others are answered). Checks are not proxied traffic: they
//! are not counted in `sluice_requests_total`.
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
use crate::policy::Policy;
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

/// Decides checks against one policy snapshot at one instant, reusing the
/// store's answer from check to check.
struct Checker<'a> {
    proxy: &'a Proxy,
    policy: &'a Policy,
    now: Nanos,
    asks: Asks<'a>,
    admission: Admission,
    decisions: Decisions,
}

impl<'a> Checker<'a> {
    fn new(proxy: &'a Proxy, policy: &'a Policy) -> Checker<'a> {
        Checker {
            proxy,
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
        let now = self.now;
        let target = Target::find(self.policy, call.rule, call.key, call.tier, now)?;
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
        let store = self.proxy.store();
        let cost = call.units.unwrap_or(rule.cost);
        if cost == 0 {
            // Only a look: bans are read, nothing is taken or struck.
            if let Some(left) = (!rule.shadow)
                .then(|| rule.bans.banned(target.key, now))
                .flatten()
            {
                return Ok(CheckAnswer::banned(left));
            }
            target.ask_into(&mut self.asks, 0, false);
            store
                .peek(&self.asks, now, &mut self.decisions)
                .await
                .map_err(store_failed)?;
            let balance = Balance::of(&self.decisions);
            return Ok(CheckAnswer {
                allowed: balance.admits(),
                banned: false,
                balance,
            });
        }
        target.ask_into(&mut self.asks, cost, true);
        let admission = &mut self.admission;
        store
            .admit(&self.asks, now, admission)
            .await
            .map_err(store_failed)?;
        // An admitted check keeps what it took: there is no response to
        // settle after.
        admission.receipts.clear();
        match admission.outcome {
            Outcome::Banned { left, .. } => Ok(CheckAnswer::banned(left)),
            outcome => {
                if !admission.bans_started.is_empty() {
                    let text = crate::key::KeyText::typed(call.key, rule.key.len());
                    rule.ban_started(target.key, text, &self.policy.labels);
                }
                Ok(CheckAnswer {
                    allowed: outcome == Outcome::Admitted,
                    banned: false,
                    balance: Balance::of(&admission.decisions),
                })
            }
        }
    }
}

fn store_failed(error: crate::store::StoreError) -> RefusedCall {
    tracing::warn!(%error, "the store failed a check");
    RefusedCall::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "the store failed; nothing was taken, try again",
    )
}

/// The answer to one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CheckAnswer {
    allowed: bool,
    /// The caller is banned by the rule: refused without asking its buckets.
    banned: bool,
    balance: Balance,
}

impl CheckAnswer {
    /// A banned caller: nothing left until the ban ends in `left`.
    fn banned(left: Nanos) -> CheckAnswer {
        CheckAnswer {
            allowed: false,
            banned: true,
            balance: Balance {
                remaining: 0,
                retry_after: Some(left),
                reset_after: left,
            },
        }
    }

    /// `{"allowed":..,"remaining":..,"retry_after_ms":..,"reset_after_ms":..}`,
    /// with `"banned":true` last when banned. `retry_after_ms` is 0 when
    /// allowed, `null` when the cost can never be admitted.
    fn write(&self, out: &mut Vec<u8>) {
        let mut numbers = itoa::Buffer::new();
        out.extend_from_slice(if self.allowed {
            b"{\"allowed\":true,\"remaining\":"
        } else {
            b"{\"allowed\":false,\"remaining\":"
        });
        out.extend_from_slice(numbers.format(self.balance.remaining).as_bytes());
        out.extend_from_slice(b",\"retry_after_ms\":");
        match self.balance.retry_after {
            Some(wait) => out.extend_from_slice(numbers.format(millis(wait)).as_bytes()),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"reset_after_ms\":");
        out.extend_from_slice(numbers.format(millis(self.balance.reset_after)).as_bytes());
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
            balance: Balance {
                remaining: 9,
                retry_after: Some(0),
                reset_after: 6_000_000_001,
            },
        };
        assert_eq!(
            written(allowed),
            serde_json::json!({"allowed": true, "remaining": 9, "retry_after_ms": 0,
                               "reset_after_ms": 6001})
        );
        let never = CheckAnswer {
            allowed: false,
            banned: false,
            balance: Balance {
                remaining: 0,
                retry_after: None,
                reset_after: 0,
            },
        };
        assert_eq!(written(never)["retry_after_ms"], serde_json::Value::Null);
        let banned = written(CheckAnswer::banned(2_500_000_000));
        assert_eq!(
            banned,
            serde_json::json!({"allowed": false, "remaining": 0, "retry_after_ms": 2500,
                               "reset_after_ms": 2500, "banned": true})
        );
    }
}
