//! A caller's budget on one rule, as the budget calls (`/admin/spend`,
//! `/v1/check`) name it: the rule, the caller's bucket key and the limits
//! that key is held to ([`Target`]), and what it has left after a decision
//! ([`Balance`]). Both calls work on the rule's current tables, the very
//! buckets proxied traffic takes from.

use super::{bad, no_rule, RefusedCall};
use crate::clock::Nanos;
use crate::limiter::Decision;
use crate::policy::{Limit, Policy, Rule};
use crate::store::{Ask, Asks, BucketKey};

/// One caller of one rule, with the limits it is held to now.
#[derive(Debug, Clone, Copy)]
pub(super) struct Target<'p> {
    pub rule: &'p Rule,
    pub key: BucketKey,
    /// The caller's override, the retiring rule's current step, the named
    /// tier, or the rule's own limits ([`Rule::limits_for_key`]).
    pub limits: &'p [Limit],
}

impl<'p> Target<'p> {
    /// The caller `key` (text, as `/admin/bans` takes it) of the rule named
    /// `rule`, of tier `tier`, at `now`: 404 for an unknown rule, 400 for a
    /// key that does not fit the rule's key sources.
    pub(super) fn find(
        policy: &'p Policy,
        rule: &str,
        key: &str,
        tier: Option<&str>,
        now: Nanos,
    ) -> Result<Target<'p>, RefusedCall> {
        let found = policy.rule(rule).ok_or_else(|| no_rule(rule))?;
        let key = policy.keys.key_of_text(&found.key, key).map_err(bad)?;
        Ok(Target {
            rule: found,
            key,
            limits: found.limits_for_key(key, tier, &policy.keys, now),
        })
    }

    /// Asks for `cost` units of every limit, as one enforced rule, never
    /// holding. With `bans`, the rule's bans and ban policy come along, as
    /// a proxied request's do (a shadow rule has none: proxied traffic
    /// never consults them either).
    pub(super) fn asks(&self, cost: u64, bans: bool) -> Asks<'p> {
        let mut asks = Asks::default();
        self.ask_into(&mut asks, cost, bans);
        asks
    }

    /// [`Target::asks`] into `asks`, replacing what it held (a batch of
    /// checks reuses one).
    pub(super) fn ask_into(&self, asks: &mut Asks<'p>, cost: u64, bans: bool) {
        let rule = self.rule;
        let bans = (bans && !rule.shadow).then(|| (&*rule.bans, rule.ban.as_ref()));
        asks.rules.clear();
        asks.limits.clear();
        asks.push_rule(
            self.key,
            false,
            bans,
            self.limits.iter().map(|limit| Ask {
                table: &limit.table,
                key: self.key,
                limiter: &limit.limiter,
                cost,
                hold: None,
            }),
        );
    }
}

/// What a caller has left after a decision on every limit it is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Balance {
    /// Whole units available now: the least of any limit (0 in debt).
    pub remaining: u64,
    /// How long until the units asked for would be admitted: 0 when they
    /// are now, `None` when never (a cost above a capacity, a COUNT of 0).
    pub retry_after: Option<Nanos>,
    /// How long until every limit is full again.
    pub reset_after: Nanos,
}

impl Balance {
    /// The balance the decisions on a caller's limits report: admitted when
    /// every one admits, otherwise after the longest wait any refusal asks
    /// for (never, if one never admits).
    pub(super) fn of(decisions: &[Decision]) -> Balance {
        let mut balance = Balance {
            remaining: u64::MAX,
            retry_after: Some(0),
            reset_after: 0,
        };
        for decision in decisions {
            let state = decision.state();
            balance.remaining = balance.remaining.min(state.remaining);
            balance.reset_after = balance.reset_after.max(state.reset_after);
            if let Decision::Deny { retry_after, .. } = *decision {
                balance.retry_after = match (balance.retry_after, retry_after) {
                    (Some(longest), Some(wait)) => Some(longest.max(wait)),
                    _ => None,
                };
            }
        }
        if decisions.is_empty() {
            balance.remaining = 0;
        }
        balance
    }

    /// Whether the units asked for would be admitted now.
    pub(super) fn admits(&self) -> bool {
        self.retry_after == Some(0)
    }
}

/// Nanoseconds as whole milliseconds, rounded up: a client that waits the
/// milliseconds it is told is never early.
pub(super) fn millis(nanos: Nanos) -> u64 {
    nanos.div_ceil(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::BucketState;

    fn state(remaining: u64, reset_after: Nanos) -> BucketState {
        BucketState {
            remaining,
            reset_after,
        }
    }

    #[test]
    fn a_balance_is_the_least_left_the_longest_wait_and_the_latest_reset() {
        let allow = Decision::Allow(state(7, 300));
        let deny = |retry_after| Decision::Deny {
            state: state(0, 900),
            retry_after,
        };
        assert_eq!(
            Balance::of(&[allow, Decision::Allow(state(3, 100))]),
            Balance {
                remaining: 3,
                retry_after: Some(0),
                reset_after: 300
            }
        );
        let refused = Balance::of(&[allow, deny(Some(50)), deny(Some(20))]);
        assert_eq!(refused.retry_after, Some(50));
        assert_eq!((refused.remaining, refused.reset_after), (0, 900));
        assert!(!refused.admits());
        // One limit that never admits: never.
        assert_eq!(Balance::of(&[deny(Some(50)), deny(None)]).retry_after, None);
        assert_eq!(Balance::of(&[deny(None), deny(Some(50))]).retry_after, None);
    }

    #[test]
    fn milliseconds_round_up() {
        assert_eq!(millis(0), 0);
        assert_eq!(millis(1), 1);
        assert_eq!(millis(1_000_000), 1);
        assert_eq!(millis(1_000_001), 2);
    }
}
