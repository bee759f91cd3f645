//! Deciding a call: each descriptor's rule ([`crate::policy::Domains`]),
//! its bucket key and limits, then one store call for every descriptor
//! together, all or nothing, as the rules of a proxied request are
//! (docs/rate-limit-service.md). A store that fails is answered through
//! `on_error`, as for requests.

use std::ops::Range;

use smallvec::SmallVec;

use super::call::{Call, INLINE_DESCRIPTORS};
use crate::clock::{Clock, Nanos};
use crate::metrics::seconds;
use crate::policy::{Limit, Policy, Rule};
use crate::proxy::{Admitter, Answered, StoreUnavailable};
use crate::store::{Admission, Ask, Asks, BucketKey, Outcome};

/// A descriptor some rule decides.
#[derive(Debug, Clone)]
pub struct Slot<'p> {
    pub rule: &'p Rule,
    pub key: BucketKey,
    /// The caller's limits (its tier or override, if any).
    pub limits: &'p [Limit],
    /// Its rule's place in the store's asks (and so in the admission's
    /// rule indexes).
    pub ask: usize,
    /// Its decisions in [`Admission::decisions`].
    pub decisions: Range<usize>,
}

/// What was decided for a call.
#[derive(Debug, Default)]
pub struct Decided<'p> {
    /// Per descriptor, in the call's order: `None` when no rule decides it.
    pub slots: SmallVec<[Option<Slot<'p>>; INLINE_DESCRIPTORS]>,
    /// The store's answer (its receipts kept: nothing is settled after a
    /// service call).
    pub admission: Admission,
    /// The store failed and `on_error = "allow"`: nothing was asked.
    pub unlimited: bool,
}

/// Decides `call` under `policy`; see the module docs.
pub async fn decide<'p>(
    admitter: Admitter<'_>,
    policy: &'p Policy,
    call: &Call<'_>,
) -> Result<Decided<'p>, StoreUnavailable> {
    let Admitter { clock, metrics, .. } = admitter;
    let now = clock.now();
    let mut decided = Decided::default();
    decided.admission.at = now;
    let mut asks = Asks::default();
    for descriptor in &call.descriptors {
        let slot = policy
            .domains
            .decide(call.domain, &descriptor.entries)
            .map(|index| {
                let rule = &policy.rules[index];
                let entry = |key: &str| descriptor.entry(key);
                let key = policy.keys.derive_entries(&rule.key, entry);
                Slot {
                    rule,
                    key,
                    limits: rule.limits_for_entries(key, &policy.keys, now, entry),
                    ask: 0,
                    decisions: 0..0,
                }
            });
        decided.slots.push(slot);
    }
    // Enforced rules first, then shadow rules, as the store takes them.
    for shadow in [false, true] {
        for (slot, descriptor) in decided.slots.iter_mut().zip(&call.descriptors) {
            let Some(slot) = slot.as_mut().filter(|slot| slot.rule.shadow == shadow) else {
                continue;
            };
            let rule = slot.rule;
            slot.ask = asks.rules.len();
            let start = asks.limits.len();
            asks.push_rule(
                slot.key,
                shadow,
                (!shadow).then(|| (&*rule.bans, rule.ban.as_ref())),
                slot.limits.iter().map(|limit| Ask {
                    table: &limit.table,
                    key: slot.key,
                    limiter: &limit.limiter,
                    cost: descriptor.cost,
                    // A call is answered at once: never held.
                    hold: None,
                }),
            );
            slot.decisions = start..asks.limits.len();
        }
    }
    if asks.is_empty() {
        return Ok(decided);
    }
    let answer = &mut decided.admission;
    let asked = admitter.store.admit(&asks, now, answer).await;
    if admitter.answered(asked, &asks, now, answer)? == Answered::Unlimited {
        decided.unlimited = true;
        return Ok(decided);
    }
    // Kept: a service call has no response to settle after.
    answer.receipts.clear();
    metrics
        .decision_seconds
        .observe(seconds(clock.now().saturating_sub(now)));
    Ok(decided)
}

impl Decided<'_> {
    /// How long more the caller `slot` names is banned by its rule, when
    /// that ban refused the call (no bucket was then asked).
    pub fn banned_by(&self, slot: &Slot<'_>) -> Option<Nanos> {
        match self.admission.outcome {
            Outcome::Banned { rule, left } if rule == slot.ask && !self.unlimited => Some(left),
            _ => None,
        }
    }

    /// Whether one of `slot`'s own limits refused the call (a shadow rule's
    /// never does).
    pub fn limited_by(&self, slot: &Slot<'_>) -> bool {
        !self.unlimited
            && !slot.rule.shadow
            && self.admission.outcome == Outcome::Limited
            && self
                .admission
                .decisions
                .get(slot.decisions.clone())
                .is_some_and(|decisions| decisions.iter().any(|d| !d.is_allowed()))
    }
}
