//! What admission decided, counted: each enforced rule's outcome
//! (`sluice_requests_total`), the heavy hitters of every applicable rule
//! (`/admin/top`), and the refusal log lines (within each rule's lines a
//! second).

use super::refusal_log::{self, Refused};
use super::respond::Verdict;
use super::ruling::Ruling;
use super::standing::Applicable;
use crate::key::RequestFacts;
use crate::limiter::Decision;
use crate::policy::Policy;
use crate::store::Outcome;

/// Counts each enforced rule's outcome once: `limited` when one of its
/// limits refused, `delayed` when one held the request (a reservation for
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

/// Counts the request in each applicable rule's heavy hitters: its key's
/// requests, and its refusals by the rules that limited or banned it,
/// which also log it.
pub fn count_hitters(
    policy: &Policy,
    facts: &RequestFacts<'_>,
    enforced: &[Applicable<'_>],
    shadowed: &[Applicable<'_>],
    ruling: &Ruling<'_>,
) {
    let now = ruling.decided_at;
    let text = |applicable: &Applicable<'_>| {
        let keys = &policy.keys;
        keys.key_text_of(&applicable.rule.key, facts, applicable.key)
    };
    let refused_by = |applicable: &Applicable<'_>| match ruling.outcome {
        Outcome::Admitted => false,
        Outcome::Banned { rule, .. } => std::ptr::eq(enforced[rule].rule, applicable.rule),
        Outcome::Limited => ruling
            .verdicts
            .iter()
            .any(|v| std::ptr::eq(v.rule, applicable.rule) && !v.decision.is_allowed()),
    };
    let refusal = match ruling.outcome {
        Outcome::Banned { .. } => Refused::Banned,
        _ => Refused::Limited,
    };
    for (index, applicable) in enforced.iter().chain(shadowed).enumerate() {
        let rule = applicable.rule;
        let refused = index < enforced.len() && refused_by(applicable);
        let key = applicable.key;
        rule.hitters.count(key, refused, now, || text(applicable));
        if refused {
            let name = Some(&*rule.name);
            refusal_log::log(&rule.log_gate, now, name, refusal, facts, || {
                policy.labels.show(&rule.key, &text(applicable))
            });
        }
    }
}
