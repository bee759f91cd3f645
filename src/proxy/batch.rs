//! A JSON-RPC batch (docs/ai-budgets.md, "JSON-RPC and MCP"): for a rule
//! keyed on calls (`jsonrpc:method`, `mcp:tool`, in its key or its
//! `tiers.by`), each call of the batch stands on its own, as the request
//! would if it carried that call alone; the calls that share a bucket are
//! one applicable with their costs summed, so that the store takes every
//! call of the batch, all or nothing, in one admission. Out of the request
//! path's line: only a batch's rules keyed on calls get here.

use std::cell::OnceCell;

use smallvec::SmallVec;

use super::standing::{stand, Applicability, Applicable, Standing};
use crate::clock::Nanos;
use crate::key::jsonrpc::{Batch, Call, Calls};
use crate::key::jwt::Claims;
use crate::key::RequestFacts;
use crate::policy::{Limit, Policy, Rule};
use crate::store::BucketKey;

/// The request's body when it is a batch.
#[inline]
pub fn of<'r>(facts: &RequestFacts<'r>) -> Option<&'r Batch<'r>> {
    match facts.body?.calls() {
        Calls::Batch(batch) => Some(batch),
        Calls::None | Calls::One(_) => None,
    }
}

/// What every element of a batch that is not a call reads as: no method,
/// no tool.
static NOT_A_CALL: Call<'static> = Call {
    method: None,
    tool: None,
    id: None,
};

/// Where `rule` stands on `batch`, each call in turn in
/// `facts.call`: the applicable buckets go into `applicable`. The rule's
/// standing as [`super::identify`] reports it: the first call that refuses
/// refuses the request (a missing key under `missing = "reject"`, a field
/// sent twice, a retired route); else it applies, as one of its buckets
/// (cost: that bucket's calls), or is skipped when no call applies.
#[inline(never)]
pub fn stand_batch<'r, 'p>(
    rule: &'p Rule,
    batch: &'r Batch<'r>,
    facts: &mut RequestFacts<'r>,
    token_claims: &'r OnceCell<Option<Claims>>,
    policy: &'p Policy,
    started: Nanos,
    applicable: &mut Applicability<'p>,
) -> Standing<'p> {
    let mut taken: SmallVec<[(BucketKey, &'p [Limit], u64); 8]> = SmallVec::new();
    // The elements that are no calls stand as one, each taking the cost.
    let others = (batch.others > 0).then_some((&NOT_A_CALL, batch.others as u64));
    let calls = batch.calls.iter().map(|call| (call, 1)).chain(others);
    for (call, count) in calls {
        facts.call = Some(call);
        match stand(rule, facts, token_claims, policy, started, false) {
            Standing::Applies { key, limits, cost } => {
                taken.push((key, limits, cost.saturating_mul(count)));
            }
            Standing::Skipped => {}
            // Its `match` reads no call: no call fits if the first does not.
            not_applying => {
                facts.call = None;
                return not_applying;
            }
        }
    }
    facts.call = None;
    // The calls of a bucket side by side, each bucket asked once for all
    // of them; the rule's standing is the lowest key's bucket.
    taken.sort_by_key(|(key, ..)| *key);
    let mut buckets = taken.into_iter();
    let Some(mut bucket) = buckets.next() else {
        return Standing::Skipped;
    };
    let mut first = None;
    loop {
        let next = buckets.next();
        match next {
            Some((key, _, cost)) if key == bucket.0 => bucket.2 = bucket.2.saturating_add(cost),
            _ => {
                let (key, limits, cost) = bucket;
                first.get_or_insert(Standing::Applies { key, limits, cost });
                applicable.push(Applicable {
                    rule,
                    key,
                    limits,
                    cost,
                });
                match next {
                    Some(following) => bucket = following,
                    None => break,
                }
            }
        }
    }
    first.unwrap_or(Standing::Skipped)
}
