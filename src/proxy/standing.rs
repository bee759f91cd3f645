//! Where one rule stands on a request ([`Standing`]): unmatched, skipped,
//! refused for a missing key, a field it reads sent twice, a body it cannot
//! read, a retired route or a GraphQL cost it cannot take, or applying with the caller's bucket
//! key, limits and cost ([`Applicable`]). Identification walks the rules
//! through [`stand`] (`proxy/identify.rs`), and so does a WebSocket
//! handshake's for the message rules (`proxy/messages.rs`).

use std::cell::OnceCell;

use smallvec::SmallVec;

use super::INLINE_RULES;
use crate::clock::Nanos;
use crate::config::{round_up, MissingPolicy, Reservation, Reserve, ReserveSource, Unreadable};
use crate::key::graphql::{Answer, Unread};
use crate::key::jwt::Claims;
use crate::key::read_once::FieldAt;
use crate::key::unreadable_body::UnreadableBody;
use crate::key::RequestFacts;
use crate::policy::{Limit, Policy, Rule, Sunset};
use crate::store::BucketKey;

pub use crate::decider::Applicable;
/// The rules that apply to a request, as [`identify`] found them.
#[derive(Default)]
pub struct Applicability<'p> {
    pub enforced: SmallVec<[Applicable<'p>; INLINE_RULES]>,
    pub shadowed: SmallVec<[Applicable<'p>; INLINE_RULES]>,
    /// The first applicable rule being retired: its responses say so.
    pub retiring: Option<&'p Sunset>,
    /// The client is on the allow list: no rule was looked at.
    pub unlimited: bool,
}

impl<'p> Applicability<'p> {
    /// Adds a rule that applies: enforced or shadowed, and a retiring
    /// route's sunset said on its responses. Inlined into identify's walk,
    /// where every applying rule calls it.
    #[inline(always)]
    pub fn push(&mut self, one: Applicable<'p>) {
        if let Some(sunset) = &one.rule.sunset {
            self.retiring.get_or_insert(sunset);
        }
        if one.rule.shadow {
            self.shadowed.push(one);
        } else {
            self.enforced.push(one);
        }
    }
}

/// Why [`identify`] refused a request.
#[derive(Debug, Clone, Copy)]
pub enum Unidentified<'p> {
    /// The client IP is on the deny list (403).
    Denied,
    /// A key source of this rule is missing and `missing = "reject"` (400).
    MissingKey(&'p Rule),
    /// The request carries a field this rule reads more than once (400).
    Ambiguous(&'p Rule, FieldAt),
    /// This rule reads the request's body, which sluice cannot read but a
    /// lenient server would (400).
    UnreadableBody(&'p Rule, UnreadableBody),
    /// The rule's route is retired (410).
    Gone(&'p Rule, &'p Sunset),
    /// The rule takes the request's GraphQL cost and cannot (400, or
    /// `PersistedQueryNotFound` for an unknown hash).
    Uncosted(&'p Rule, Uncosted),
}

impl<'p> Unidentified<'p> {
    /// Why `rule` refuses the request where it stands so; `None` when it
    /// does not (it applies, does not fit, or is skipped).
    #[inline(always)]
    pub fn by(rule: &'p Rule, standing: Standing<'p>) -> Option<Unidentified<'p>> {
        match standing {
            Standing::Unmatched | Standing::Skipped | Standing::Applies { .. } => None,
            Standing::MissingKey => Some(Unidentified::MissingKey(rule)),
            Standing::Ambiguous(at) => Some(Unidentified::Ambiguous(rule, at)),
            Standing::UnreadableBody(why) => Some(Unidentified::UnreadableBody(rule, why)),
            Standing::Gone(sunset) => Some(Unidentified::Gone(rule, sunset)),
            Standing::Uncosted(why) => Some(Unidentified::Uncosted(rule, why)),
        }
    }
}

/// Why a `cost = "graphql"` rule cannot take a request's cost
/// (docs/conversation.md, "No query is free").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uncosted {
    /// The cost cannot be read and the rule's `unreadable` is `"refuse"`.
    Unreadable(Unread),
    /// A query sent with a hash that is not its SHA-256.
    HashMismatch,
    /// A persisted query's hash alone that sluice does not know.
    PersistedQueryNotFound,
}

/// Where one rule stands on a request ([`stand`]).
#[derive(Debug, Clone, Copy)]
pub enum Standing<'p> {
    /// Its `match` does not fit the request.
    Unmatched,
    /// A key source is missing and `missing = "skip"`: the rule does not
    /// apply.
    Skipped,
    /// A key source is missing and `missing = "reject"`: the request is
    /// answered 400.
    MissingKey,
    /// The request carries a field the rule reads to decide more than once
    /// (`rule.reads`): answered 400, whatever `missing` says.
    Ambiguous(FieldAt),
    /// The rule reads the body, which sluice cannot read but a lenient
    /// server would: answered 400, whatever `missing` says.
    UnreadableBody(UnreadableBody),
    /// Its route is retired: the request is answered 410.
    Gone(&'p Sunset),
    /// It takes the request's GraphQL cost and cannot: answered 400, or as
    /// Apollo Server answers an unknown persisted query.
    Uncosted(Uncosted),
    /// It applies, with the caller's bucket key, the limits it is held to
    /// (its tier, override or sunset step) and what the request costs.
    Applies {
        key: BucketKey,
        limits: &'p [Limit],
        cost: u64,
    },
}

/// Sees each rule's standing as [`identify`] reaches it. The request path
/// watches nothing (`()`, which compiles to nothing); `POST /admin/explain`
/// records every standing to report it.
pub trait Witness<'p> {
    /// `rule`, the `index`th of the policy, stands as `standing`.
    fn stood(&mut self, index: usize, standing: Standing<'p>);
}

impl<'p> Witness<'p> for () {
    #[inline(always)]
    fn stood(&mut self, _: usize, _: Standing<'p>) {}
}

/// Where `rule` stands on the request `facts` describe at `started`: the
/// request path's test, rule by rule, without counting anything. JWT claims
/// are verified lazily, once, into `token_claims`, for the first rule that
/// keys on one, and kept in `facts`.
#[inline(always)]
pub fn stand<'r, 'p>(
    rule: &'p Rule,
    facts: &mut RequestFacts<'r>,
    token_claims: &'r OnceCell<Option<Claims>>,
    policy: &'p Policy,
    started: Nanos,
    handshake: bool,
) -> Standing<'p> {
    // `handshake` is a constant at each call: the request path's test is
    // `matches` alone.
    let fits = if handshake {
        rule.matcher.fits_handshake(facts)
    } else {
        rule.matcher.matches(facts)
    };
    if !fits {
        return Standing::Unmatched;
    }
    // Before any value is read. A shadow rule never refuses: it reads the
    // first value, as a dry run may.
    if !rule.reads.is_empty() && !rule.shadow {
        if let Some(at) = rule.reads.ambiguous(facts.headers, facts.query) {
            return Standing::Ambiguous(at);
        }
    }
    // Nor is a body passed unread that a lenient server would run
    // (docs/conversation.md, "A body sluice cannot read").
    if rule.body_reading.any() && !rule.shadow {
        let reading = rule.body_reading;
        if let Some(why) = facts.body.and_then(|body| body.unreadable(reading)) {
            return Standing::UnreadableBody(why);
        }
    }
    if rule.uses_jwt && facts.claims.is_none() {
        let headers = facts.headers;
        facts.claims = token_claims
            .get_or_init(|| {
                let verifier = policy.jwt.as_ref()?;
                verifier.verify(headers, started / 1_000_000_000).ok()
            })
            .as_ref();
    }
    let allow_missing = rule.missing == MissingPolicy::Shared;
    let key = match policy.keys.derive(&rule.key, facts, allow_missing) {
        Ok(key) => key,
        Err(_) if rule.missing == MissingPolicy::Skip => return Standing::Skipped,
        Err(_) => return Standing::MissingKey,
    };
    if let Some(sunset) = &rule.sunset {
        if !rule.shadow && sunset.schedule.is_gone(started) {
            return Standing::Gone(sunset);
        }
    }
    let limits = rule.limits_for(key, facts, &policy.keys, started);
    let mut cost = rule.cost;
    if rule.variable_cost {
        cost = match variable_cost(rule, limits, facts) {
            Ok(cost) => cost,
            Err(why) if !rule.shadow => return Standing::Uncosted(why),
            // A shadow rule reports what it would have done: a request it
            // would refuse is one no bucket admits.
            Err(_) => u64::MAX,
        };
        // A cost above a limit's capacity is left to the store, which
        // refuses it as a quota exceeded for good (no Retry-After), with
        // the usual fields, taking nothing.
    }
    Standing::Applies { key, limits, cost }
}

/// What a request takes from a rule whose cost is the request's own: its
/// reservation, or its GraphQL query's cost (or why it cannot be taken).
/// Out of line: only such rules get here.
#[inline(never)]
fn variable_cost(rule: &Rule, limits: &[Limit], facts: &RequestFacts<'_>) -> Result<u64, Uncosted> {
    match &rule.reserve {
        Some(reserve) => Ok(reservation(reserve, limits, facts)),
        None => graphql_cost(rule, facts),
    }
}

/// The units a request reserves (docs/ai-budgets.md): a rule's number, or
/// the weighted sum of what its body says, rounded up (at least 1); when a
/// source is missing or malformed, `reserve_missing`, else the smallest
/// capacity of the caller's `limits` (the most it could take).
pub fn reservation(reserve: &Reserve, limits: &[Limit], facts: &RequestFacts<'_>) -> u64 {
    let sources = match &reserve.amount {
        Reservation::Units(units) => return *units,
        Reservation::Sources(sources) => sources,
    };
    let read = || {
        let body = facts.body?;
        let mut sum = 0.0;
        for weighted in sources {
            let value = match &weighted.source {
                ReserveSource::Body(pointer) => body.number_at(pointer)?,
                ReserveSource::RequestBytes => body.length()? as f64,
            };
            sum += value * weighted.weight;
        }
        Some(round_up(sum).max(1))
    };
    read().unwrap_or_else(|| {
        let capacity = limits.iter().map(|limit| limit.limiter.capacity()).min();
        reserve.missing.or(capacity).unwrap_or(1)
    })
}

/// The units a `cost = "graphql"` rule takes from the request `facts`
/// describe: the sum of its operations' costs, plus the rule's
/// `unreadable` for each it cannot read; or why it cannot take them.
/// Out of line: only such rules get here.
#[inline(never)]
fn graphql_cost(rule: &Rule, facts: &RequestFacts<'_>) -> Result<u64, Uncosted> {
    let Some(body) = facts.body else {
        return Err(Uncosted::Unreadable(Unread::NotGraphql));
    };
    let reading = body.graphql();
    match reading.answer {
        Some(Answer::HashMismatch) => return Err(Uncosted::HashMismatch),
        Some(Answer::PersistedQueryNotFound) => return Err(Uncosted::PersistedQueryNotFound),
        None => {}
    }
    if reading.unread == 0 {
        return Ok(reading.cost);
    }
    match rule.unreadable {
        Unreadable::Charge(units) => Ok(reading
            .cost
            .saturating_add(units.saturating_mul(reading.unread))),
        Unreadable::Refuse => Err(Uncosted::Unreadable(
            reading.why.unwrap_or(Unread::NotGraphql),
        )),
    }
}

/// Where `rule`, which counts WebSocket messages (`unit = "message"`),
/// stands on the WebSocket handshake `facts` describe: as [`stand`] for a
/// request, its `match` tested field by field (`proxy/messages.rs`).
pub fn stand_handshake<'r, 'p>(
    rule: &'p Rule,
    facts: &mut RequestFacts<'r>,
    token_claims: &'r OnceCell<Option<Claims>>,
    policy: &'p Policy,
    started: Nanos,
) -> Standing<'p> {
    stand(rule, facts, token_claims, policy, started, true)
}
