//! Identify: who is calling and which rules apply. The client IP is
//! resolved through the trusted proxies; the deny list refuses (403) and the
//! allow list lets the caller through unlimited; then, rule by rule in file
//! order, where the rule stands ([`stand`]): unmatched, skipped, refused for
//! a missing key or a field it reads sent twice (400), retired (410), or
//! applying with the caller's bucket key and limits. The first refusal ends
//! the walk.
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
use crate::config::{MissingPolicy, Unreadable};
use crate::key::graphql::{Answer, Unread};
use crate::key::jwt::Claims;
use crate::key::read_once::FieldAt;
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
    /// The request carries a field this rule reads more than once (400).
    Ambiguous(&'p Rule, FieldAt),
    /// The rule's route is retired (410).
    Gone(&'p Rule, &'p Sunset),
    /// The rule takes the request's GraphQL cost and cannot (400, or
    /// `PersistedQueryNotFound` for an unknown hash).
    Uncosted(&'p Rule, Uncosted),
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
            Standing::Ambiguous(at) => return Err(Unidentified::Ambiguous(rule, at)),
            Standing::Gone(sunset) => return Err(Unidentified::Gone(rule, sunset)),
            Standing::Uncosted(why) => return Err(Unidentified::Uncosted(rule, why)),
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
    // Before any value is read. A shadow rule never refuses: it reads the
    // first value, as a dry run may.
    if !rule.reads.is_empty() && !rule.shadow {
        if let Some(at) = rule.reads.ambiguous(facts.headers, facts.query) {
            return Standing::Ambiguous(at);
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
    if rule.graphql_cost {
        cost = match graphql_cost(rule, facts) {
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
/// rule that refused. A field sent twice counts as a missing key (there is
/// no one value to key on) and is logged naming the field, never a value.
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
        Unidentified::Ambiguous(rule, at) => {
            rule.counters.missing_key.inc();
            let name = Some(&*rule.name);
            let gate = &rule.log_gate;
            refusal_log::log(gate, started, name, Refused::AmbiguousField, facts, || {
                rule.reads.field(at).to_source()
            });
        }
        Unidentified::Gone(rule, _) => rule.counters.limited.inc(),
        // A request whose cost cannot be taken (an unknown persisted query
        // included) lacks what the rule needs, as a missing key does.
        Unidentified::Uncosted(rule, _) => rule.counters.missing_key.inc(),
    }
}

/// The answer to a request [`identify`] refused: 403, 400 naming the rule
/// whose key source is missing, the field sent twice or whose query cannot
/// be costed, 410 with the retired route's sunset, or Apollo's
/// `PersistedQueryNotFound`.
pub fn answer(refused: Unidentified<'_>) -> Response<ProxyBody> {
    match refused {
        Unidentified::Denied => respond::refusal(Refusal::Denied, None),
        Unidentified::MissingKey(rule) => respond::refusal(Refusal::MissingKey, Some(rule)),
        Unidentified::Ambiguous(rule, at) => {
            respond::refusal(Refusal::AmbiguousField(at), Some(rule))
        }
        Unidentified::Gone(rule, sunset) => respond::gone(rule, sunset),
        Unidentified::Uncosted(rule, Uncosted::Unreadable(why)) => {
            respond::refusal(Refusal::UnreadableQuery(why), Some(rule))
        }
        Unidentified::Uncosted(rule, Uncosted::HashMismatch) => {
            respond::refusal(Refusal::PersistedQueryMismatch, Some(rule))
        }
        Unidentified::Uncosted(_, Uncosted::PersistedQueryNotFound) => {
            respond::persisted_query_not_found()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::compile;
    use http::HeaderMap;

    /// Where each rule of `policy` stands on a GET of `path_and_query`
    /// carrying `lines`, and what `identify` makes of it.
    fn walk(
        policy: &Policy,
        path_and_query: &str,
        lines: &[(&'static str, &'static str)],
    ) -> (Vec<&'static str>, Result<(), String>) {
        let mut request = Request::get(path_and_query).body(()).unwrap();
        let headers: &mut HeaderMap = request.headers_mut();
        for (name, value) in lines {
            headers.append(*name, http::HeaderValue::from_static(value));
        }
        let path = request.uri().path().to_owned();
        let checked = Checked {
            path: path.into(),
            host: None,
        };
        let mut facts = facts_of(&request, &checked, "10.0.0.1".parse().unwrap(), policy);
        let claims = OnceCell::new();
        let mut standings = Names(Vec::new());
        let mut applicable = Applicability::default();
        let result = identify(
            &mut facts,
            &claims,
            policy,
            0,
            &mut applicable,
            &mut standings,
        )
        .map_err(|refused| match refused {
            Unidentified::Ambiguous(rule, at) => {
                format!("{}: {}", rule.name, rule.reads.field(at))
            }
            other => format!("{other:?}"),
        });
        (standings.0, result)
    }

    struct Names(Vec<&'static str>);

    impl<'p> Witness<'p> for Names {
        fn stood(&mut self, _: usize, standing: Standing<'p>) {
            self.0.push(match standing {
                Standing::Unmatched => "unmatched",
                Standing::Skipped => "skipped",
                Standing::MissingKey => "missing",
                Standing::Ambiguous(_) => "ambiguous",
                Standing::Gone(_) => "gone",
                Standing::Uncosted(_) => "uncosted",
                Standing::Applies { .. } => "applies",
            });
        }
    }

    #[test]
    fn a_field_sent_twice_refuses_only_for_an_enforced_rule_that_fits_and_reads_it() {
        let policy = compile(
            r#"
[[rule]]
name = "dry-run"
key = ["header:x-api-key"]
rate = "1/m"
shadow = true

[[rule]]
name = "elsewhere"
match = { path = "/other" }
key = ["header:x-api-key"]
rate = "1/m"

[[rule]]
name = "per-key"
match = { path = "/api" }
key = ["header:x-api-key", "query:key"]
rate = "1/m"
missing = "skip"

[[rule]]
name = "tiered"
match = { path = "/tiers" }
key = ["ip"]
rate = "1/m"
tiers = { by = "header:x-plan", pro = { rate = "2/m" } }
"#,
        );
        let twice = [("x-api-key", "fresh"), ("x-api-key", "spent")];
        let (stood, result) = walk(&policy, "/api", &twice);
        assert_eq!(stood, ["applies", "unmatched", "ambiguous"]);
        assert_eq!(result.unwrap_err(), "per-key: header x-api-key");
        // Before any `missing` policy: a skipped rule would let it through.
        let (_, result) = walk(&policy, "/api?key=a&key=b", &[]);
        assert_eq!(result.unwrap_err(), "per-key: query parameter key");
        let plans = [("x-plan", "free"), ("x-plan", "pro")];
        let (_, result) = walk(&policy, "/tiers", &plans);
        assert_eq!(result.unwrap_err(), "tiered: header x-plan");
        // A rule that does not fit reads nothing; one line is one value.
        let (stood, result) = walk(&policy, "/elsewhere", &twice);
        assert_eq!(stood, ["applies", "unmatched", "unmatched", "unmatched"]);
        assert!(result.is_ok());
        let (_, result) = walk(&policy, "/api?key=a,b", &[("x-api-key", "fresh, spent")]);
        assert!(result.is_ok());
    }
}
