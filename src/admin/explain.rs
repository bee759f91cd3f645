//! `POST /admin/explain` with `{"method", "path", "headers": {name: value},
//! "ip"}`: what sluice would do with that request now, and why — the path
//! as it is forwarded and as it is matched (folded by `server.paths_alike`),
//! every rule with whether it matched (and which field of
//! its `match` did not), each applicable rule's key (as text, as
//! `/admin/bans` writes it, and hashed), the limits the caller is held to
//! (tier, override, sunset step), a ban in force, every bucket's state, and
//! the decision.
//!
//! Nothing is spent: the buckets are read through
//! [`crate::store::Store::peek`] (the same seam the Redis store answers),
//! no strike is counted, no metric moves. So that explain cannot disagree
//! with the request path, the request is built as an `http::Request` and
//! read by the proxy's own functions: [`proxy::check`] (framing, Host,
//! sizes, path normalisation; a refusal's status and detail are
//! [`proxy::Refusal`]'s), [`proxy::facts_of`] (client IP through the
//! trusted proxies, host) and [`proxy::identify`] (the access lists, then
//! each rule's match, key, missing key, sunset and limits in file order
//! until one refuses, every standing watched), and the buckets are asked
//! what [`decider::fill_asks`] asks of them.
//!
//! `ip` is the address the request comes from (the TCP peer): behind
//! `trusted_proxies`, a forwarding header among `headers` names the client,
//! as it would for a real request. `body`, when given, is the request's
//! body, read by `body:` and `graphql:` keys and `cost = "graphql"` as the
//! request path reads it (at most `server.max_key_body_bytes`); a rule with
//! `cost = "graphql"` reports the `cost` its query would take.

use std::collections::BTreeMap;
use std::net::IpAddr;

use http::{HeaderName, HeaderValue, Method, Request};
use serde::Deserialize;
use serde_json::{json, Value};
use smallvec::SmallVec;

use super::buckets::{
    as_asked, ban_json, bucket_json, held, key_hash, left_after, limits_from, request_cost,
    store_failed, Held,
};
use super::budget::millis;
use super::{bad, RefusedCall};
use crate::decider;
use crate::key::body::{declared_length, BodyFacts, KeyBody};
use crate::key::content_coding::{self, Decoded};
use crate::key::RequestFacts;
use crate::limiter::Decision;
use crate::policy::{Policy, Rule};
use crate::proxy::respond;
use crate::proxy::{
    self, Applicability, Applicable, Carrier, Proxy, Refusal, Standing, Uncosted, Unidentified,
    Witness,
};
use crate::store::{Ask, Asks};

/// The request to explain, as the body spells it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Question {
    method: String,
    /// The request target's path, with its query if any.
    path: String,
    #[serde(default)]
    headers: BTreeMap<String, Lines>,
    ip: String,
    /// The request's body, as text.
    #[serde(default)]
    body: Option<String>,
}

/// A header's value, or its lines when the request carries it more than
/// once (`["a", "b"]`: two field lines).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Lines {
    One(String),
    Many(Vec<String>),
}

impl Lines {
    fn iter(&self) -> impl Iterator<Item = &String> {
        match self {
            Lines::One(value) => std::slice::from_ref(value).iter(),
            Lines::Many(values) => values.iter(),
        }
    }
}

/// Answers one explain call; see the module docs.
pub(super) async fn explain(proxy: &Proxy, body: &[u8]) -> Result<Value, RefusedCall> {
    let (question, peer) = question_of(body)?;
    let request = synthetic_request(&question)?;
    let policy = proxy.policy();
    let now = proxy.now();
    let mut answer = json!({
        "request": {
            "method": request.method().as_str(),
            "path": request.uri().path(),
            "query": request.uri().query().map(|query| shown_query(&policy, query)),
            "host": proxy::host_of(&request),
        },
    });
    let checked = match proxy::check(&request, &policy) {
        Ok(checked) => checked,
        Err(refusal) => {
            answer["decision"] = json!({
                "outcome": "refused", "status": refusal.status().as_u16(),
                "detail": refusal.detail(None),
            });
            answer["rules"] = json!([]);
            return Ok(answer);
        }
    };
    answer["request"]["normalized_path"] = json!(&*checked.path);
    // What rules matched and `path` keys were built on.
    answer["request"]["folded_path"] = json!(checked.folded_path());
    let token_claims = std::cell::OnceCell::new();
    let mut facts = proxy::facts_of(&request, &checked, peer, &policy);
    answer["request"]["client_ip"] = json!(facts.client_ip.to_string());
    let mut decoded = None;
    let body_facts;
    if policy.reads_body {
        let body = question.body.as_deref().map_or(&[][..], str::as_bytes);
        body_facts = body_facts_of(proxy, &policy, &request, body, &mut decoded);
        facts.body = Some(&body_facts);
    }

    // The request path's own walk: the access lists, then each rule in
    // file order until one refuses, each standing recorded.
    let mut applicability = Applicability::default();
    let mut standings = Standings(vec![None; policy.rules.len()]);
    let identified = proxy::identify(
        &mut facts,
        &token_claims,
        &policy,
        now,
        &mut applicability,
        &mut standings,
    );
    let (mut rules, enforced, shadowed) = rules_json(
        &policy,
        &facts,
        &standings,
        &identified,
        &applicability,
        now,
    );
    if identified.is_ok() {
        mark_message_rules(&mut rules, &policy, &request, &facts);
    }

    let decision = match identified {
        Ok(()) if applicability.unlimited => json!({
            "outcome": "allowed", "unlimited": true, "reason": "the client is on access.allow",
        }),
        Ok(()) => {
            let looked = Looked::peek(proxy, &enforced, &shadowed, now).await?;
            add_buckets(proxy, &mut rules, &enforced, &shadowed, &looked, now);
            decide(&policy, &enforced, &shadowed, &looked, now)
        }
        Err(unidentified) => unidentified_json(unidentified),
    };
    answer["rules"] = json!(rules);
    answer["decision"] = decision;
    answer["view"] = super::buckets::view_json(proxy.store(), now);
    Ok(answer)
}

/// The body read as the question and its `ip` as the request's peer.
fn question_of(body: &[u8]) -> Result<(Question, IpAddr), RefusedCall> {
    let question: Question = serde_json::from_slice(body).map_err(|error| {
        bad(format!(
            "the body is not {{\"method\": M, \"path\": P, \"headers\": {{NAME: VALUE or \
             [VALUE, …]}}, \"ip\": IP, \"body\": TEXT}} (body optional): {error}"
        ))
    })?;
    let peer: IpAddr = question.ip.trim().parse().map_err(|_| {
        bad(format!(
            "\"ip\": \"{}\" is not an IP address (for example 203.0.113.7 or 2001:db8::1)",
            question.ip
        ))
    })?;
    Ok((question, peer))
}

/// The question's body as the request path reads it for keys and costs:
/// bounded by `server.max_key_body_bytes`, decoded from its coding (into
/// `decoded`).
fn body_facts_of<'a>(
    proxy: &'a Proxy,
    policy: &'a Policy,
    request: &'a Request<()>,
    body: &'a [u8],
    decoded: &'a mut Option<Vec<u8>>,
) -> BodyFacts<'a> {
    let bound = policy.config.server.max_key_body_bytes;
    let read = if body.is_empty() {
        KeyBody::Empty
    } else if body.len() > bound {
        KeyBody::TooLarge
    } else {
        match content_coding::decode(request.headers(), body, bound) {
            Decoded::Plain => KeyBody::Whole(body),
            Decoded::Bytes(bytes) => KeyBody::Whole(decoded.insert(bytes)),
            Decoded::TooLarge => KeyBody::TooLarge,
            Decoded::Undecodable => KeyBody::Undecodable,
        }
    };
    BodyFacts::new(
        request.method(),
        request.headers(),
        request.uri().query(),
        read,
        proxy.persisted(policy, false),
    )
    .with_length(declared_length(request.headers()).or(Some(body.len() as u64)))
}

/// Every rule's entry, in file order, and the rules that apply, enforced
/// and shadowed, with their indices.
fn rules_json<'p>(
    policy: &'p Policy,
    facts: &RequestFacts<'_>,
    standings: &Standings<'p>,
    identified: &Result<(), Unidentified<'p>>,
    applicability: &Applicability<'p>,
    now: crate::clock::Nanos,
) -> (Vec<Value>, Applied<'p>, Applied<'p>) {
    let unreached = match identified {
        Err(Unidentified::Denied) => "the client is on access.deny: refused before any rule",
        Ok(()) if applicability.unlimited => "the client is on access.allow: no rule limits it",
        _ => "not reached: an earlier rule already answered the request",
    };
    let mut rules = Vec::with_capacity(policy.rules.len());
    let (mut enforced, mut shadowed) = (Applied::new(), Applied::new());
    for (index, rule) in policy.rules.iter().enumerate() {
        let (entry, applies) = rule_json(policy, rule, facts, standings.0[index], unreached, now);
        match applies {
            Some(one) if rule.shadow => shadowed.push((index, one)),
            Some(one) => enforced.push((index, one)),
            None => {}
        }
        rules.push(entry);
    }
    (rules, enforced, shadowed)
}

/// The entries of the message rules whose messages `request` would
/// carry, if it carries any: matched, with the key its messages are
/// counted against (the request itself counts nothing for them). A gRPC
/// call is explained as one over HTTP/2, which the question does not say.
fn mark_message_rules(
    rules: &mut [Value],
    policy: &Policy,
    request: &Request<()>,
    facts: &RequestFacts<'_>,
) {
    let grpc_call = request.method() == Method::POST && respond::grpc::is_grpc(request.headers());
    let Some(carrier) = proxy::carrier_of(request, grpc_call) else {
        return;
    };
    let what = match carrier {
        Carrier::WebSocket => "the messages of the WebSocket this handshake opens",
        Carrier::Grpc => "the messages the client sends on this gRPC call",
    };
    for &index in &policy.message_rules {
        let rule = &policy.rules[index];
        if !rule.matcher.fits_handshake(facts) {
            continue;
        }
        let text = policy.keys.key_text(&rule.key, facts);
        let entry = &mut rules[index];
        entry["matched"] = json!(true);
        entry["counts_messages"] = json!(true);
        entry["key"] = json!(policy.labels.show(&rule.key, &text));
        entry["reason"] = json!(format!(
            "the rule counts {what} (unit = \"message\"), each against this key; \
             the request itself is not counted"
        ));
        if let Some(entry) = entry.as_object_mut() {
            entry.remove("failed");
        }
    }
}

/// Rules that apply, with their indices in the policy.
type Applied<'p> = SmallVec<[(usize, Applicable<'p>); 4]>;

/// One rule's entry: whether it matched (and which field did not), its key
/// and whether it applies (`unreached`: why not, when the walk stopped
/// before it); with the rule as it applies, when it does.
fn rule_json<'p>(
    policy: &Policy,
    rule: &'p Rule,
    facts: &RequestFacts<'_>,
    standing: Option<Standing<'p>>,
    unreached: &str,
    now: crate::clock::Nanos,
) -> (Value, Option<Applicable<'p>>) {
    let mut entry = json!({ "rule": &*rule.name });
    if let Some(mismatch) = rule.matcher.mismatch(facts) {
        entry["matched"] = json!(false);
        entry["failed"] = json!(mismatch.field());
        entry["reason"] = json!(mismatch.explain(&rule.matcher, facts));
        return (entry, None);
    }
    entry["matched"] = json!(true);
    entry["shadow"] = json!(rule.shadow);
    let Some(standing) = standing else {
        // Not looked at by the request path.
        entry["applies"] = json!(false);
        entry["reason"] = json!(unreached);
        return (entry, None);
    };
    let text = policy.keys.key_text(&rule.key, facts);
    entry["key"] = json!(policy.labels.show(&rule.key, &text));
    if let Err(missing) = policy.keys.derive(&rule.key, facts, false) {
        entry["missing_source"] = json!(rule.key[missing.0].to_string());
        entry["missing"] = json!(format!("{:?}", rule.missing).to_lowercase());
    }
    let applies = standing_json(&mut entry, policy, rule, standing, now);
    (entry, applies)
}

/// A matched, reached rule's standing written into its entry; the rule as it
/// applies, when it does.
fn standing_json<'p>(
    entry: &mut Value,
    policy: &Policy,
    rule: &'p Rule,
    standing: Standing<'p>,
    now: crate::clock::Nanos,
) -> Option<Applicable<'p>> {
    let Standing::Applies { key, limits, cost } = standing else {
        entry["applies"] = json!(false);
        entry["reason"] = json!(why_not(standing));
        if let Standing::Ambiguous(at) = standing {
            // Which of the values would count is the question: no key.
            entry["key"] = Value::Null;
            entry["ambiguous_field"] = field_json(rule.reads.field(at));
        } else if matches!(standing, Standing::Skipped | Standing::MissingKey) {
            entry["key"] = Value::Null;
        }
        return None;
    };
    entry["applies"] = json!(true);
    if rule.graphql_cost {
        entry["cost"] = json!(cost);
    }
    if rule.reserve.is_some() {
        entry["reserve"] = json!(cost);
    }
    entry["key_hash"] = json!(key_hash(key));
    entry["limits_from"] = json!(limits_from(rule, limits, &policy.labels));
    let ban = (!rule.shadow).then(|| rule.bans.banned(key, now)).flatten();
    entry["banned"] = ban.map_or(Value::Null, ban_json);
    Some(Applicable {
        rule,
        key,
        limits,
        cost,
    })
}

/// Each applicable rule's buckets, as peeked, into its entry.
fn add_buckets(
    proxy: &Proxy,
    rules: &mut [Value],
    enforced: &[(usize, Applicable<'_>)],
    shadowed: &[(usize, Applicable<'_>)],
    looked: &Looked,
    now: crate::clock::Nanos,
) {
    for ((index, applicable), decisions) in enforced.iter().chain(shadowed).zip(&looked.rules) {
        let buckets: Vec<Value> = applicable
            .limits
            .iter()
            .zip(decisions)
            .map(|(limit, (as_now, next))| {
                let tracked = proxy.store().tracks(&limit.table, applicable.key);
                let cost = request_cost(applicable.rule, applicable.cost);
                bucket_json(applicable.rule, cost, limit, *as_now, *next, tracked, now)
            })
            .collect();
        rules[*index]["buckets"] = json!(buckets);
    }
}

/// The decision when the request path's walk refused the request before
/// its buckets.
fn unidentified_json(unidentified: Unidentified<'_>) -> Value {
    match unidentified {
        Unidentified::Denied => json!({"outcome": "denied", "status": 403}),
        Unidentified::MissingKey(rule) => json!({
            "outcome": "missing_key", "status": 400, "rule": &*rule.name,
        }),
        Unidentified::Uncosted(rule, why) => {
            let (status, detail) = match why {
                Uncosted::PersistedQueryNotFound => (
                    200,
                    "the persisted query's hash is unknown: answered PersistedQueryNotFound, so \
                     the client sends the query"
                        .into(),
                ),
                Uncosted::Unreadable(why) => {
                    let refusal = Refusal::UnreadableQuery(why);
                    (400, refusal.detail(Some(rule)))
                }
                Uncosted::HashMismatch => (400, Refusal::PersistedQueryMismatch.detail(None)),
            };
            json!({
                "outcome": "missing_key", "status": status, "rule": &*rule.name,
                "reason": detail,
            })
        }
        Unidentified::Ambiguous(rule, at) => {
            let refusal = proxy::Refusal::AmbiguousField(at);
            let field = rule.reads.field(at);
            json!({
                "outcome": "ambiguous_field", "status": 400, "rule": &*rule.name,
                "field": field.name(), "in": field.location(),
                "detail": refusal.detail(Some(rule)),
            })
        }
        Unidentified::UnreadableBody(rule, why) => json!({
            "outcome": "unreadable_body", "status": 400, "rule": &*rule.name,
            "detail": Refusal::UnreadableBody(why).detail(Some(rule)),
        }),
        Unidentified::Gone(rule, sunset) => json!({
            "outcome": "gone", "status": 410, "rule": &*rule.name,
            "sunset": sunset.sunset().to_str().ok(),
        }),
    }
}

/// Every rule's standing, by index, as the request path's walk reached it
/// (`None`: not reached).
struct Standings<'p>(Vec<Option<Standing<'p>>>);

impl<'p> Witness<'p> for Standings<'p> {
    fn stood(&mut self, index: usize, standing: Standing<'p>) {
        self.0[index] = Some(standing);
    }
}

/// Why a matched rule that does not apply leaves the request alone.
fn why_not(standing: Standing<'_>) -> &'static str {
    match standing {
        Standing::Skipped => "a key source is missing and missing = \"skip\"",
        Standing::MissingKey => "a key source is missing and missing = \"reject\": answered 400",
        Standing::Ambiguous(_) => {
            "the request carries a field the rule reads more than once: answered 400, \
             nothing taken"
        }
        Standing::UnreadableBody(_) => {
            "the rule reads the body, which sluice cannot read but a lenient server would: \
             answered 400, nothing taken"
        }
        Standing::Gone(_) => "the rule's sunset has ended: the route is gone (410)",
        Standing::Uncosted(Uncosted::PersistedQueryNotFound) => {
            "the persisted query's hash is unknown: answered PersistedQueryNotFound"
        }
        Standing::Uncosted(_) => {
            "the query's cost cannot be read and unreadable = \"refuse\": answered 400"
        }
        Standing::Unmatched | Standing::Applies { .. } => {
            unreachable!("only matched rules that do not apply")
        }
    }
}

/// A field sent twice, by name and place (never a value).
fn field_json(field: crate::key::read_once::Field<'_>) -> Value {
    json!({"field": field.name(), "in": field.location()})
}

/// The request the body describes, as the proxy would receive it.
fn synthetic_request(question: &Question) -> Result<Request<()>, RefusedCall> {
    let method = Method::from_bytes(question.method.as_bytes()).map_err(|_| {
        bad(format!(
            "\"method\": \"{}\" is not an HTTP method",
            question.method
        ))
    })?;
    // Named without its query, which may carry a caller's key.
    let path = question.path.split('?').next().unwrap_or_default();
    if !question.path.starts_with('/') {
        return Err(bad(format!(
            "\"path\": \"{path}\" must start with '/' (a path, with its query if any)"
        )));
    }
    let uri: http::Uri = question.path.parse().map_err(|error| {
        bad(format!(
            "\"path\": \"{path}\" (query not shown) is not a request target: {error}"
        ))
    })?;
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    if !question
        .headers
        .keys()
        .any(|name| name.eq_ignore_ascii_case("host"))
    {
        // A question without a Host asks about rules, not framing: read as
        // HTTP/1.0, which may omit it (HTTP/1.1 would be refused for that).
        *request.version_mut() = http::Version::HTTP_10;
    }
    for (name, lines) in &question.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| bad(format!("\"{name}\" is not a header name")))?;
        for value in lines.iter() {
            let value = HeaderValue::from_str(value).map_err(|_| {
                bad(format!(
                    "the value of header \"{name}\" is not a header value"
                ))
            })?;
            request.headers_mut().append(name.clone(), value);
        }
    }
    Ok(request)
}

/// The query as it may be shown: the value of a parameter that some rule
/// keys on (`query:<name>`) is a credential, shown as its label.
fn shown_query(policy: &Policy, query: &str) -> String {
    let keyed = |name: &str| {
        policy.rules.iter().flat_map(|rule| &rule.key).any(
            |source| matches!(source, crate::config::KeySource::Query(keyed) if crate::key::query_name_is(name, keyed)),
        )
    };
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if keyed(name) => {
                let shown = policy.labels.show_value(&crate::key::decode_query(value));
                format!("{name}={shown}")
            }
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Every applicable rule's buckets, peeked: per rule, per limit, the bucket
/// as it is now (cost 0) and what the request would be told.
struct Looked {
    rules: Vec<Vec<(Decision, Decision)>>,
}

impl Looked {
    async fn peek(
        proxy: &Proxy,
        enforced: &[(usize, Applicable<'_>)],
        shadowed: &[(usize, Applicable<'_>)],
        now: crate::clock::Nanos,
    ) -> Result<Looked, RefusedCall> {
        let enforced: SmallVec<[Applicable<'_>; 4]> = enforced.iter().map(|(_, a)| *a).collect();
        let shadowed: SmallVec<[Applicable<'_>; 4]> = shadowed.iter().map(|(_, a)| *a).collect();
        let mut asks = Asks::default();
        decider::fill_asks(&mut asks, &enforced, &shadowed, decider::Holds::AsRuled);
        if asks.is_empty() {
            return Ok(Looked { rules: Vec::new() });
        }
        let as_now = Asks {
            rules: asks.rules.clone(),
            limits: asks
                .limits
                .iter()
                .map(|ask| Ask {
                    cost: 0,
                    hold: None,
                    ..*ask
                })
                .collect(),
        };
        let decider = proxy.decider();
        let (mut now_decisions, mut next_decisions) = (SmallVec::new(), SmallVec::new());
        let looked = decider.look(&as_now, now, &mut now_decisions).await;
        looked.map_err(store_failed)?;
        let looked = decider.look(&asks, now, &mut next_decisions).await;
        looked.map_err(store_failed)?;
        let limits = enforced.iter().chain(&shadowed).flat_map(|a| a.limits);
        for (limit, next) in limits.zip(next_decisions.iter_mut()) {
            *next = as_asked(limit, *next);
        }
        let rules = asks
            .rules
            .iter()
            .map(|rule| {
                rule.limits
                    .clone()
                    .map(|i| (now_decisions[i], next_decisions[i]))
                    .collect()
            })
            .collect();
        Ok(Looked { rules })
    }
}

/// The decision the request path would make with these buckets: the first
/// enforced rule that bans the caller, else a refusal by any limit (a rule
/// in delay mode holds instead when the wait fits its `max_delay`), else a
/// hold, else admitted with what the headers would say is left.
fn decide(
    policy: &Policy,
    enforced: &[(usize, Applicable<'_>)],
    shadowed: &[(usize, Applicable<'_>)],
    looked: &Looked,
    now: crate::clock::Nanos,
) -> Value {
    if enforced.is_empty() && shadowed.is_empty() {
        return json!({"outcome": "allowed", "unlimited": true,
                      "reason": "no rule applies to this request"});
    }
    let status = policy.response.status.as_u16();
    for (_, applicable) in enforced {
        if let Some(left) = applicable.rule.bans.banned(applicable.key, now) {
            return json!({"outcome": "banned", "status": status,
                          "rule": &*applicable.rule.name, "retry_after_ms": millis(left)});
        }
    }
    let mut limited_by = Vec::new();
    let mut retry_after = Some(0);
    let mut wait = 0;
    let mut queued = false;
    let mut remaining = u64::MAX;
    for ((_, applicable), decisions) in enforced.iter().zip(&looked.rules) {
        let rule = applicable.rule;
        for (limit, (_, next)) in applicable.limits.iter().zip(decisions) {
            match (*next, held(rule, limit, *next)) {
                (_, Some(Held::ForPermit)) => queued = true,
                (_, Some(Held::For(w))) | (Decision::Hold { wait: w, .. }, None) => {
                    remaining = 0;
                    wait = wait.max(w);
                }
                (Decision::Allow(state), None) => {
                    let cost = request_cost(rule, applicable.cost);
                    remaining = remaining.min(left_after(state.remaining, cost));
                }
                (Decision::Deny { retry_after: w, .. }, None) => {
                    if !limited_by.contains(&&*rule.name) {
                        limited_by.push(&*rule.name);
                    }
                    retry_after = match (retry_after, w) {
                        (Some(longest), Some(w)) => Some(longest.max(w)),
                        _ => None,
                    };
                }
            }
        }
    }
    if !limited_by.is_empty() {
        return json!({"outcome": "limited", "status": status, "rules": limited_by,
                      "retry_after_ms": retry_after.map(millis)});
    }
    let would_limit: Vec<&str> = shadowed
        .iter()
        .zip(&looked.rules[enforced.len()..])
        .filter(|(_, decisions)| decisions.iter().any(|(_, next)| !next.is_allowed()))
        .map(|((_, applicable), _)| &*applicable.rule.name)
        .collect();
    let remaining = (remaining != u64::MAX).then_some(remaining);
    if wait > 0 || queued {
        return json!({"outcome": "delayed", "wait_ms": (!queued).then(|| millis(wait)),
                      "queued_for_permit": queued, "remaining": remaining,
                      "would_limit": would_limit});
    }
    json!({"outcome": "allowed", "remaining": remaining, "would_limit": would_limit})
}
