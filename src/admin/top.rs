//! `GET /admin/top?n=20[&rule=R][&by=limited|requests]`: the keys the rules
//! limit (or see) most over the last 30 to 60 seconds, from each rule's
//! bounded heavy-hitter tallies ([`crate::heavy_hitters`]).

use http::StatusCode;
use serde_json::{json, Value};

use super::{bad, json_response, no_rule, Answer, RefusedCall};
use crate::heavy_hitters::{Hitter, Kind, PERIOD};
use crate::policy::{Policy, Rule};
use crate::proxy::Proxy;

/// The most keys one answer lists.
const MAX_N: usize = 1_000;

/// `GET /admin/top`.
pub(super) fn top(proxy: &Proxy, query: Option<&str>) -> Result<Answer, RefusedCall> {
    let param = |name| crate::key::query_value(query, name).map(crate::key::decode_query);
    let n = match param("n").as_deref().map(str::parse::<usize>) {
        None => 20,
        Some(Ok(n)) if (1..=MAX_N).contains(&n) => n,
        Some(_) => return Err(bad(format!("n must be a whole number from 1 to {MAX_N}"))),
    };
    let kind = match param("by").as_deref() {
        None | Some("limited") => Kind::Limited,
        Some("requests") => Kind::Requests,
        Some(other) => {
            return Err(bad(format!(
                "by=\"{other}\": expected \"limited\" or \"requests\""
            )));
        }
    };
    let policy = proxy.policy();
    let rule = param("rule");
    if let Some(name) = rule.as_ref().filter(|name| policy.rule(name).is_none()) {
        return Err(no_rule(name));
    }
    let keys = top_keys(&policy, rule.as_deref(), kind, n, proxy.now());
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "by": match kind { Kind::Limited => "limited", Kind::Requests => "requests" },
            "window_secs": [PERIOD / 1_000_000_000, 2 * PERIOD / 1_000_000_000],
            "keys": keys,
        }),
    ))
}

/// The `n` keys counted most of `kind` by `rule` (every rule: `None`), most
/// first, as `/admin/top` and the status page list them.
pub fn top_keys(
    policy: &Policy,
    rule: Option<&str>,
    kind: Kind,
    n: usize,
    now: crate::clock::Nanos,
) -> Vec<Value> {
    let mut all: Vec<(&Rule, Hitter)> = policy
        .rules
        .iter()
        .filter(|candidate| rule.is_none_or(|name| *candidate.name == *name))
        .flat_map(|rule| {
            let hitters = rule.hitters.top(kind, n, now);
            hitters.into_iter().map(move |hitter| (rule, hitter))
        })
        .collect();
    all.sort_by(|(rule_a, a), (rule_b, b)| {
        b.count
            .cmp(&a.count)
            .then(a.error.cmp(&b.error))
            .then(rule_a.name.cmp(&rule_b.name))
            .then(a.key.cmp(&b.key))
    });
    all.truncate(n);
    all.into_iter()
        .map(|(rule, hitter)| {
            // Labelled here, when shown: only the few keys listed are.
            let key = hitter.text.map(|text| policy.labels.show(&rule.key, &text));
            json!({
                "rule": &*rule.name,
                "key": key,
                "key_hash": format!("{:016x}", hitter.key),
                "count": hitter.count,
                "count_error": hitter.error,
            })
        })
        .collect()
}
