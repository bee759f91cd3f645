//! Identify: who is calling and which rules apply. The client IP is
//! resolved through the trusted proxies; the deny list refuses (403) and the
//! allow list lets the caller through unlimited; then, rule by rule in file
//! order, where the rule stands ([`stand`]): unmatched, skipped, refused for
//! a missing key (400), retired (410), or applying with the caller's bucket
//! key and limits. The first refusal ends the walk.
//!
//! [`identify`] only decides; it counts and logs nothing, so that
//! `POST /admin/explain` walks the rules in the very same order through it,
//! watching each standing ([`Witness`]). The request path counts and logs a
//! refusal with [`count_refusal`].

use std::cell::OnceCell;
use std::net::IpAddr;

use http::{Request, Response};
use smallvec::SmallVec;

use super::checks::Checked;
use super::refusal::Refusal;
use super::refusal_log::{self, Refused};
use super::respond::{self, ProxyBody};
use super::INLINE_RULES;
use crate::clock::Nanos;
use crate::config::MissingPolicy;
use crate::key::jwt::Claims;
use crate::key::RequestFacts;
use crate::policy::{Limit, Policy, Rule, Sunset};
use crate::store::BucketKey;

/// One rule that applies to the request, with its bucket key.
#[derive(Debug, Clone, Copy)]
pub struct Applicable<'p> {
    pub rule: &'p Rule,
    pub key: BucketKey,
    /// The rule's limits for this caller (its tier or override, if any).
    pub limits: &'p [Limit],
    /// Units the request takes from each of them: the rule's `cost`, or
    /// its query's with `cost = "graphql"`.
    pub cost: u64,
}

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

/// Why [`identify`] refused a request.
#[derive(Debug, Clone, Copy)]
pub enum Unidentified<'p> {
    /// The client IP is on the deny list (403).
    Denied,
    /// A key source of this rule is missing and `missing = "reject"` (400).
    MissingKey(&'p Rule),
    /// The rule's route is retired (410).
    Gone(&'p Rule, &'p Sunset),
    /// The request's GraphQL query costs more than one of the rule's
    /// buckets holds (429, without touching it).
    TooCostly {
        rule: &'p Rule,
        cost: u64,
        capacity: u64,
    },
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
    /// Its route is retired: the request is answered 410.
    Gone(&'p Sunset),
    /// Its query costs more than one of the caller's buckets holds
    /// (`cost = "graphql"`): the request is answered 429.
    TooCostly { cost: u64, capacity: u64 },
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

/// The facts rules match and key on, read from `request` (what
/// [`super::checks::check`] found in it: `checked`) sent by `peer`: the
/// client IP is resolved through the trusted proxies.
pub fn facts_of<'r, B>(
    request: &'r Request<B>,
    checked: &'r Checked<'r>,
    peer: IpAddr,
    policy: &Policy,
) -> RequestFacts<'r> {
    RequestFacts {
        method: request.method(),
        path: &checked.path,
        query: request.uri().query(),
        host: checked.host,
        headers: request.headers(),
        client_ip: policy.client_ip.resolve(peer, request.headers()),
        claims: None,
        body: None,
    }
}

/// Which rules apply to the request `facts` describe at `started`, into
/// `applicable`: the access lists first, then each rule's standing in file
/// order, until one refuses. JWT claims are verified lazily, once, into
/// `token_claims`, for the first rule that keys on one, and kept in
/// `facts`. Counts nothing (see the module docs). Not inlined: each rule's
/// [`stand`] is, into this loop, as the request path had it before the
/// phases had files (instructions per request in docs/benchmarks-history.md).
#[inline(never)]
pub fn identify<'r, 'p>(
    facts: &mut RequestFacts<'r>,
    token_claims: &'r OnceCell<Option<Claims>>,
    policy: &'p Policy,
    started: Nanos,
    applicable: &mut Applicability<'p>,
    witness: &mut impl Witness<'p>,
) -> Result<(), Unidentified<'p>> {
    let client_ip = facts.client_ip;
    if policy.deny.iter().any(|net| net.contains(&client_ip)) {
        return Err(Unidentified::Denied);
    }
    if policy.allow.iter().any(|net| net.contains(&client_ip)) {
        applicable.unlimited = true;
        return Ok(());
    }
    for (index, rule) in policy.rules.iter().enumerate() {
        let standing = stand(rule, facts, token_claims, policy, started, false);
        witness.stood(index, standing);
        match standing {
            Standing::Unmatched | Standing::Skipped => {}
            Standing::MissingKey => return Err(Unidentified::MissingKey(rule)),
            Standing::Gone(sunset) => return Err(Unidentified::Gone(rule, sunset)),
            Standing::TooCostly { cost, capacity } => {
                return Err(Unidentified::TooCostly {
                    rule,
                    cost,
                    capacity,
                })
            }
            Standing::Applies { key, limits, cost } => {
                if let Some(sunset) = &rule.sunset {
                    applicable.retiring.get_or_insert(sunset);
                }
                let one = Applicable {
                    rule,
                    key,
                    limits,
                    cost,
                };
                if rule.shadow {
                    applicable.shadowed.push(one);
                } else {
                    applicable.enforced.push(one);
                }
            }
        }
    }
    Ok(())
}

/// Where `rule` stands on the request `facts` describe at `started`: the
/// request path's test, rule by rule, without counting anything. JWT claims
/// are verified lazily, once, into `token_claims`, for the first rule that
/// keys on one, and kept in `facts`.
#[inline(always)]
fn stand<'r, 'p>(
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
    if rule.graphql_cost {
        cost = facts.body.map_or(1, |body| body.graphql_cost());
        // A leaky bucket passes any cost in time (it only waits longer).
        let capacity = limits
            .iter()
            .filter(|limit| !matches!(limit.limiter, crate::limiter::Limiter::LeakyBucket(_)))
            .map(|limit| limit.limiter.capacity())
            .min();
        if let Some(capacity) = capacity.filter(|&capacity| cost > capacity) {
            if !rule.shadow {
                return Standing::TooCostly { cost, capacity };
            }
        }
    }
    Standing::Applies { key, limits, cost }
}

/// Where `rule`, which counts WebSocket messages (`unit = "message"`),
/// stands on the WebSocket handshake `facts` describe: as [`stand`] for a
/// request, its `match` tested field by field (`proxy/messages.rs`).
pub(super) fn stand_handshake<'r, 'p>(
    rule: &'p Rule,
    facts: &mut RequestFacts<'r>,
    token_claims: &'r OnceCell<Option<Claims>>,
    policy: &'p Policy,
    started: Nanos,
) -> Standing<'p> {
    stand(rule, facts, token_claims, policy, started, true)
}

/// Counts and logs a request [`identify`] refused: a denied address in
/// every rule its request matches, a missing key or a retired route in the
/// rule that refused.
pub fn count_refusal(
    refused: Unidentified<'_>,
    facts: &RequestFacts<'_>,
    policy: &Policy,
    started: Nanos,
) {
    match refused {
        Unidentified::Denied => {
            for rule in policy.rules.iter().filter(|r| r.matcher.matches(facts)) {
                rule.counters.denied.inc();
            }
            let gate = &policy.denied_log;
            refusal_log::log(gate, started, None, Refused::Denied, facts, String::new);
        }
        Unidentified::MissingKey(rule) => {
            rule.counters.missing_key.inc();
            let name = Some(&*rule.name);
            let gate = &rule.log_gate;
            refusal_log::log(gate, started, name, Refused::MissingKey, facts, || {
                let text = policy.keys.key_text(&rule.key, facts);
                policy.labels.show(&rule.key, &text)
            });
        }
        Unidentified::Gone(rule, _) | Unidentified::TooCostly { rule, .. } => {
            rule.counters.limited.inc()
        }
    }
}

/// The answer to a request [`identify`] refused: 403, 400 naming the rule
/// whose key source is missing, or 410 with the retired route's sunset.
pub fn answer(refused: Unidentified<'_>) -> Response<ProxyBody> {
    match refused {
        Unidentified::Denied => respond::refusal(Refusal::Denied, None),
        Unidentified::MissingKey(rule) => respond::refusal(Refusal::MissingKey, Some(rule)),
        Unidentified::Gone(rule, sunset) => respond::gone(rule, sunset),
        Unidentified::TooCostly {
            rule,
            cost,
            capacity,
        } => respond::refusal(Refusal::TooCostly { cost, capacity }, Some(rule)),
    }
}
