//! Identify: who is calling and which rules apply. The client IP is
//! resolved through the trusted proxies; the deny list refuses (403) and the
//! allow list lets the caller through unlimited; then, rule by rule in file
//! order, where the rule stands (`proxy/standing.rs`): unmatched, skipped,
//! refused for a missing key or a field it reads sent twice (400), retired
//! (410), or applying with the caller's bucket key and limits. The first
//! refusal ends the walk.
//!
//! [`identify`] only decides; it counts and logs nothing, so that
//! `POST /admin/explain` walks the rules in the very same order through it,
//! watching each standing ([`Witness`]). The request path counts and logs a
//! refusal with [`count_refusal`], in its phase ([`phase`]), which also
//! reads the body's facts when the body-keys phase read it and asks the
//! message rules of a WebSocket handshake (`proxy/messages.rs`).

use std::cell::OnceCell;

use http::{Request, Response};

use super::access::Record;
use super::batch;
use super::client_request::ClientBody;
use super::key_body::Readings;
use super::messages;
use super::refusal::Refusal;
use super::refusal_log::{self, Refused};
use super::respond::{self, ProxyBody};
use super::standing::stand;
use super::standing::{Applicability, Applicable, Standing, Uncosted, Unidentified, Witness};
use super::{AnswerWritten, Context};
use crate::clock::Nanos;
use crate::key::jwt::Claims;
use crate::key::RequestFacts;
use crate::policy::Policy;

/// Identify, the request path's phase: the rules that apply to the
/// request `facts` describe (as its checks found it, with what the
/// body-keys phase read, added here), and the message rules a WebSocket
/// handshake's tunnel is held to, go into the context. A refusal is
/// counted, recorded and answered here.
#[inline(always)]
pub fn phase<'r, 'a: 'r>(
    cx: &mut Context<'a, '_>,
    request: &'r Request<ClientBody>,
    facts: &mut RequestFacts<'r>,
    claims: &'r OnceCell<Option<Claims>>,
    readings: &'r Readings<'r>,
) -> Result<(), AnswerWritten> {
    let policy = cx.policy;
    if readings.body_read() {
        let persisted = cx.shared.persisted(policy, true);
        facts.body = Some(readings.body(request, policy, persisted));
    }
    let started = cx.started;
    let mut identified = identify(facts, claims, policy, started, cx.applicable, &mut ());
    // A policy without message rules makes no call for them (the request
    // path's cost: docs/conversation.md, "What it costs").
    if identified.is_ok() && !policy.message_rules.is_empty() {
        // gRPC needs HTTP/2 or HTTP/3 (docs/streams.md).
        let grpc_call = cx.grpc && request.version() >= http::Version::HTTP_2;
        let carrier = messages::carrier_of(request, grpc_call);
        let metered = &mut *cx.metered;
        identified = messages::identify(carrier, facts, claims, policy, started, metered);
    }
    identified.map_err(|refused| refuse(cx, refused, facts))
}

/// A request identification refused: counted, recorded, answered.
#[cold]
#[inline(never)]
pub(super) fn refuse<'a>(
    cx: &mut Context<'a, '_>,
    refused: Unidentified<'a>,
    facts: &RequestFacts<'_>,
) -> AnswerWritten {
    count_refusal(refused, facts, cx.policy, cx.started);
    cx.note(Record::Refused { facts, refused });
    answer(cx.response, refused);
    AnswerWritten
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
        if rule.per_call {
            if let Some(calls) = batch::of(facts) {
                let standing = batch::stand_batch(
                    rule,
                    calls,
                    facts,
                    token_claims,
                    policy,
                    started,
                    applicable,
                );
                witness.stood(index, standing);
                if let Some(refused) = Unidentified::by(rule, standing) {
                    return Err(refused);
                }
                continue;
            }
        }
        let standing = stand(rule, facts, token_claims, policy, started, false);
        witness.stood(index, standing);
        if let Standing::Applies { key, limits, cost } = standing {
            applicable.push(Applicable {
                rule,
                key,
                limits,
                cost,
            });
        } else if let Some(refused) = Unidentified::by(rule, standing) {
            return Err(refused);
        }
    }
    Ok(())
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
        Unidentified::UnreadableBody(rule, why) => {
            rule.counters.missing_key.inc();
            let name = Some(&*rule.name);
            let gate = &rule.log_gate;
            refusal_log::log(gate, started, name, Refused::UnreadableBody, facts, || {
                why.reason().to_owned()
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
pub fn answer(response: &mut Response<ProxyBody>, refused: Unidentified<'_>) {
    let (refusal, rule) = match refused {
        Unidentified::Denied => (Refusal::Denied, None),
        Unidentified::MissingKey(rule) => (Refusal::MissingKey, Some(rule)),
        Unidentified::Ambiguous(rule, at) => (Refusal::AmbiguousField(at), Some(rule)),
        Unidentified::UnreadableBody(rule, why) => (Refusal::UnreadableBody(why), Some(rule)),
        Unidentified::Gone(rule, sunset) => return respond::gone(response, rule, sunset),
        Unidentified::Uncosted(rule, Uncosted::Unreadable(why)) => {
            (Refusal::UnreadableQuery(why), Some(rule))
        }
        Unidentified::Uncosted(rule, Uncosted::HashMismatch) => {
            (Refusal::PersistedQueryMismatch, Some(rule))
        }
        Unidentified::Uncosted(_, Uncosted::PersistedQueryNotFound) => {
            return respond::persisted_query_not_found(response)
        }
    };
    respond::refusal(response, refusal, rule);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testing::compile;
    use crate::proxy::checks::{facts_of, Checked};
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
            folded: None,
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
                Standing::UnreadableBody(_) => "unreadable",
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
