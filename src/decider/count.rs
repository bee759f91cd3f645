//! What the store ruled on one decision, counted alike whichever way it
//! came in: each enforced rule's outcome (`sluice_requests_total`), the
//! shadow rules' of an admitted decision, every applicable rule's heavy
//! hitters (`/admin/top`), a refusal's log line (within its rule's lines a
//! second), and the bans it met or started, named on the fleet's board
//! when the store is shared.

use super::{Applicable, Verdict};
use crate::clock::Nanos;
use crate::key::KeyText;
use crate::limiter::Decision;
use crate::policy::{Policy, Rule};
use crate::store::{Outcome, Store};

/// What the store ruled, as [`count`] reads it.
#[derive(Clone, Copy)]
pub struct Decided<'d, 'p> {
    pub enforced: &'d [Applicable<'p>],
    pub shadowed: &'d [Applicable<'p>],
    /// Every limit of every enforced rule, in order, with its decision.
    pub verdicts: &'d [Verdict<'p>],
    pub outcome: Outcome,
    /// Shadow rules (indexes into `shadowed`) that would have limited an
    /// admitted decision.
    pub shadow_limited: &'d dyn Fn(usize) -> bool,
    /// Enforced rules (indexes into `enforced`) whose strike started a ban.
    pub bans_started: &'d [usize],
    /// When the store decided (Unix nanoseconds).
    pub at: Nanos,
}

/// Who was decided on, as each way in knows it: the caller's key as text
/// (only built when a heavy hitter, a ban or a log line needs it), and how
/// its refusal is logged.
pub trait Caller {
    /// The key of `applicable` (the store's rule `asked`: enforced rules
    /// first, then shadow ones).
    fn key_text(&self, asked: usize, applicable: &Applicable<'_>) -> KeyText;

    /// Logs that `rule` refused the caller (banned, or limited), if the
    /// rule's log gate lets a line through at `now`; `key` shows the key.
    fn log_refusal(&self, rule: &Rule, banned: bool, now: Nanos, key: &dyn Fn() -> String);
}

/// Counts what was `decided` on `caller` under `policy`; see the module
/// docs.
pub fn count(store: &Store, policy: &Policy, decided: &Decided<'_, '_>, caller: &impl Caller) {
    let Decided {
        enforced,
        shadowed,
        verdicts,
        outcome,
        at,
        ..
    } = *decided;
    match outcome {
        Outcome::Admitted => {
            count_outcomes(verdicts);
            for (index, applicable) in shadowed.iter().enumerate() {
                let counters = &applicable.rule.counters;
                if (decided.shadow_limited)(index) {
                    counters.shadow_limited.inc();
                    tracing::debug!(rule = %applicable.rule.name, "shadow rule would have limited");
                } else {
                    counters.allowed.inc();
                }
            }
        }
        Outcome::Banned { rule, .. } => {
            let counters = &enforced[rule].rule.counters;
            counters.limited.inc();
            counters.banned.inc();
        }
        Outcome::Limited => count_outcomes(verdicts),
    }
    let banned_by = match outcome {
        Outcome::Banned { rule, .. } => Some(rule),
        _ => None,
    };
    let text = |asked: usize, applicable: &Applicable<'_>| caller.key_text(asked, applicable);
    for (asked, applicable) in enforced.iter().chain(shadowed).enumerate() {
        let rule = applicable.rule;
        let refused = asked < enforced.len()
            && match outcome {
                Outcome::Admitted => false,
                Outcome::Banned { .. } => banned_by == Some(asked),
                Outcome::Limited => verdicts
                    .iter()
                    .any(|v| std::ptr::eq(v.rule, rule) && !v.decision.is_allowed()),
            };
        let key = applicable.key;
        rule.hitters
            .count(key, refused, at, || text(asked, applicable));
        if !refused {
            continue;
        }
        let banned = banned_by.is_some();
        if banned && store.is_shared() && rule.bans.unnamed(key) {
            // Learned from Redis, where another instance's strikes started
            // it: named for the fleet's listing, once here.
            let text = text(asked, applicable);
            store.ban_named(&rule.name, key, &policy.labels.redacted(&rule.key, &text));
            rule.bans.name(key, text);
        }
        caller.log_refusal(rule, banned, at, &|| {
            policy.labels.show(&rule.key, &text(asked, applicable))
        });
    }
    for &index in decided.bans_started {
        let Applicable { rule, key, .. } = enforced[index];
        let text = text(index, &enforced[index]);
        if let (true, Some(ban)) = (store.is_shared(), rule.ban) {
            let shown = policy.labels.redacted(&rule.key, &text);
            store.ban_started(&rule.name, key, ban.duration, &shown);
        }
        rule.ban_started(key, text, &policy.labels);
    }
}

/// Counts each enforced rule's outcome once: `limited` when one of its
/// limits refused, `delayed` when one held the decision (a reservation for
/// later, or a queued permit), else `allowed`. A rule's verdicts are
/// adjacent.
pub fn count_outcomes(verdicts: &[Verdict<'_>]) {
    let mut rest = verdicts;
    while let [first, ..] = rest {
        let run = rest
            .iter()
            .take_while(|v| std::ptr::eq(v.rule, first.rule))
            .count();
        let (of_rule, after) = rest.split_at(run);
        if !of_rule.iter().all(|v| v.decision.is_allowed()) {
            first.rule.counters.limited.inc();
        } else if of_rule
            .iter()
            .any(|v| matches!(v.decision, Decision::Hold { .. }))
        {
            first.rule.counters.delayed.inc();
        } else {
            first.rule.counters.allowed.inc();
        }
        rest = after;
    }
}
