//! Deciding a call: each descriptor's rule ([`crate::policy::Domains`]),
//! its bucket key and limits, then one decision through the decider for
//! every descriptor together, all or nothing, as the rules of a proxied
//! request are (docs/rate-limit-service.md). A store that fails is
//! answered through `on_error`, as for requests.

use std::ops::Range;

use smallvec::SmallVec;

use super::call::{Call, INLINE_DESCRIPTORS};
use crate::clock::{Clock, Nanos};
use crate::decider::{fill_asks, Answered, Applicable, Decider, Holds, StoreUnavailable};
use crate::metrics::seconds;
use crate::policy::{Limit, Policy, Rule};
use crate::store::{Admission, Asks, BucketKey, Outcome};

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
    /// The decided descriptors as the decider asked them: enforced rules,
    /// then shadow ones.
    pub enforced: SmallVec<[Applicable<'p>; INLINE_DESCRIPTORS]>,
    pub shadowed: SmallVec<[Applicable<'p>; INLINE_DESCRIPTORS]>,
    /// The descriptor (its index in the call) of each rule asked.
    pub descriptor_of: SmallVec<[usize; INLINE_DESCRIPTORS]>,
    /// The store's answer (its receipts kept: nothing is settled after a
    /// service call).
    pub admission: Admission,
    /// The store failed and `on_error = "allow"`: nothing was asked.
    pub unlimited: bool,
}

/// Decides `call` under `policy`; see the module docs.
pub async fn decide<'p>(
    decider: Decider<'_>,
    policy: &'p Policy,
    call: &Call<'_>,
) -> Result<Decided<'p>, StoreUnavailable> {
    let Decider { clock, metrics, .. } = decider;
    let now = clock.now();
    let mut decided = Decided::default();
    decided.admission.at = now;
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
    decided.place(call);
    if decided.descriptor_of.is_empty() {
        return Ok(decided);
    }
    let mut asks = Asks::default();
    fill_asks(
        &mut asks,
        &decided.enforced,
        &decided.shadowed,
        Holds::Never,
    );
    let answer = &mut decided.admission;
    if decider.admit(&asks, now, answer).await? == Answered::Unlimited {
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

impl<'p> Decided<'p> {
    /// Places each decided descriptor in the decider's order (enforced
    /// rules first, then shadow ones, as the store takes them): its rule's
    /// index among the asks and its decisions' range.
    fn place(&mut self, call: &Call<'_>) {
        let mut asked = 0;
        for shadow in [false, true] {
            for (at, slot) in self.slots.iter_mut().enumerate() {
                let Some(slot) = slot.as_mut().filter(|slot| slot.rule.shadow == shadow) else {
                    continue;
                };
                let applicable = Applicable {
                    rule: slot.rule,
                    key: slot.key,
                    limits: slot.limits,
                    cost: call.descriptors[at].cost,
                };
                slot.ask = self.descriptor_of.len();
                slot.decisions = asked..asked + slot.limits.len();
                asked = slot.decisions.end;
                self.descriptor_of.push(at);
                match shadow {
                    false => self.enforced.push(applicable),
                    true => self.shadowed.push(applicable),
                }
            }
        }
    }

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
