//! `adaptive` rules beside Redis (strict mode): their permits are this
//! instance's own, since each instance learns what the upstream takes from
//! the requests it sends itself (docs/adaptive.md). A request that asks
//! for one is decided in two parts, still all or nothing: first the
//! adaptive rules' permits here (no round trip), then, if they admit, the
//! rest in Redis; a refusal there gives the permits back.

use smallvec::SmallVec;

use super::admission::{Admission, Asks, Outcome, Settle, INLINE};
use super::memory::{MemoryStore, UNASKED};
use super::redis::RedisStore;
use super::StoreError;
use crate::clock::Nanos;

/// Whether `asks` holds an adaptive rule's permit.
#[inline]
pub fn asks_any(asks: &Asks<'_>) -> bool {
    asks.limits.iter().any(|ask| ask.table.adaptive().is_some())
}

/// One part of the asks, and where its rules and limits are in the whole.
struct Part<'p> {
    asks: Asks<'p>,
    rules: SmallVec<[usize; INLINE]>,
    slots: SmallVec<[usize; INLINE]>,
}

/// The rules of `asks` that are (`adaptive`) or are not adaptive. A rule
/// is one or the other: an adaptive rule has one limit.
fn part<'p>(asks: &Asks<'p>, adaptive: bool) -> Part<'p> {
    let mut part = Part {
        asks: Asks::default(),
        rules: SmallVec::new(),
        slots: SmallVec::new(),
    };
    for (index, rule) in asks.rules.iter().enumerate() {
        let limits = &asks.limits[rule.limits.clone()];
        if limits.iter().any(|ask| ask.table.adaptive().is_some()) != adaptive {
            continue;
        }
        part.asks.push_rule(
            rule.key,
            rule.shadow,
            rule.bans.map(|bans| (bans, rule.ban)),
            limits.iter().copied(),
        );
        part.rules.push(index);
        part.slots.extend(rule.limits.clone());
    }
    part
}

/// Copies `answer` to `whole` for the part `part`: its decisions to their
/// slots, its receipts, shadow rules and bans to their rules' indexes.
fn merge(part: &Part<'_>, answer: Admission, whole: &mut Admission) {
    for (slot, decision) in part.slots.iter().zip(answer.decisions) {
        whole.decisions[*slot] = decision;
    }
    whole
        .receipts
        .extend(answer.receipts.into_iter().map(|mut receipt| {
            receipt.rule = part.rules[receipt.rule];
            receipt
        }));
    if let Some(mut queued) = answer.queued {
        queued.receipt.rule = part.rules[queued.receipt.rule];
        whole.queued = Some(queued);
    }
    whole
        .shadow_limited
        .extend(answer.shadow_limited.iter().map(|&rule| part.rules[rule]));
    whole
        .bans_started
        .extend(answer.bans_started.iter().map(|&rule| part.rules[rule]));
    whole.outcome = match answer.outcome {
        Outcome::Banned { rule, left } => Outcome::Banned {
            rule: part.rules[rule],
            left,
        },
        other => other,
    };
}

/// [`RedisStore::admit`] for asks with adaptive permits: those here in
/// `local`, the rest in Redis, all or nothing.
pub async fn admit(
    local: &MemoryStore,
    shared: &RedisStore,
    asks: &Asks<'_>,
    now: Nanos,
    whole: &mut Admission,
) -> Result<(), StoreError> {
    let (here, there) = (part(asks, true), part(asks, false));
    let mut mine = Admission::default();
    local.admit(&here.asks, now, &mut mine);
    let mut theirs = Admission::default();
    if mine.admitted() && !there.asks.is_empty() {
        if let Err(error) = shared.admit(&there.asks, now, &mut theirs).await {
            give_back(local, &mut mine, now);
            return Err(error);
        }
    }
    // Both parts waiting for a permit would hold one while awaiting the
    // other: refused instead, as one store refuses a second queue.
    if let (Some(_), Some(queued)) = (&mine.queued, theirs.queued.take()) {
        shared.leave_queue(&queued.receipt);
        let _ = shared.settle(&mut theirs.receipts, Settle::GiveBack, now, None);
        theirs.receipts.clear();
        theirs.outcome = Outcome::Limited;
    }
    if !theirs.admitted() {
        give_back(local, &mut mine, now);
    }
    whole.outcome = Outcome::Admitted;
    whole.decisions.clear();
    whole.decisions.resize(asks.limits.len(), UNASKED);
    whole.receipts.clear();
    whole.queued = None;
    whole.at = if there.asks.is_empty() {
        now
    } else {
        theirs.at
    };
    whole.shadow_limited.clear();
    whole.bans_started.clear();
    let refused_here = !mine.admitted();
    merge(&here, mine, whole);
    if !refused_here {
        merge(&there, theirs, whole);
    }
    Ok(())
}

/// Returns what `admission` took here (its permits, its place in a queue).
fn give_back(local: &MemoryStore, admission: &mut Admission, now: Nanos) {
    for receipt in &mut admission.receipts {
        local.settle(receipt, Settle::GiveBack, now);
    }
    admission.receipts.clear();
    if let Some(queued) = admission.queued.take() {
        if !local.leave_queue(&queued) {
            let mut receipt = queued.receipt;
            local.settle(&mut receipt, Settle::GiveBack, now);
        }
    }
}
