//! What admission ruled on a request, as the later phases read it: the
//! outcome, one verdict per limit (the rate-limit headers), what it must
//! settle after its response, and how long it was held.

use smallvec::SmallVec;

use super::respond::Verdict;
use super::settle::Settlement;
use super::INLINE_RULES;
use crate::clock::Nanos;
use crate::store::Outcome;

/// What admission ruled on a request: its outcome, one verdict per
/// limit, what it must settle, how long it was held.
#[derive(Debug, Default)]
pub struct Ruling<'p> {
    pub outcome: Outcome,
    /// Every limit of every enforced applicable rule, in file order.
    pub verdicts: SmallVec<[Verdict<'p>; INLINE_RULES]>,
    /// What an admitted request took that must be settled when its
    /// exchange ends (boxed: it rides on the response body, which should
    /// stay small; `None` when there is nothing to settle).
    pub settlement: Option<Box<Settlement>>,
    /// Time the request was held on purpose (delay mode).
    pub held: Nanos,
    /// Shadow rules that would have limited the request.
    pub would_limit: SmallVec<[&'p str; INLINE_RULES]>,
    /// Enforced rules (indexes into the `enforced` slice) whose strike
    /// against the caller started a ban.
    pub bans_started: SmallVec<[usize; 1]>,
    /// The store failed and `on_error = "allow"` let the request through
    /// without asking any limit: no rate-limit headers describe it.
    pub unlimited: bool,
    /// The store failed and `on_error = "local"` decided with the local
    /// memory store.
    pub locally: bool,
    /// When admission began, on this instance's clock (what
    /// `sluice_decision_seconds` times from).
    pub asked_at: Nanos,
    /// The instant of the decision (Unix nanoseconds), for the headers: a
    /// shared store's clock when it decided.
    pub decided_at: Nanos,
    /// Once forwarded: how long the upstream took to answer (its response
    /// head) or to fail, as `sluice_upstream_seconds` times it.
    pub upstream_took: Option<Nanos>,
}
